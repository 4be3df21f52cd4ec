; Inclusive prefix sum of n int64 values in place, repeated `reps` times (sums wrap like C's
; uint64_t). Checksum: the last element plus the middle one.
(define-global (prefix-sum-n int))
(define-global (prefix-sum-data (ptr int64)))

(define ((prefix-sum-setup void) (n int))
  (set prefix-sum-n n)
  (call free (bitcast prefix-sum-data (ptr int8)))
  (set prefix-sum-data (bitcast (call bench-alloc (mul (sext n int64) (int64 8))) (ptr int64)))
  (call bench-srand (int64 5))
  (declare i int)
  (for ((set i 0) (lt i n) (set i (add i 1)))
    (store (ptradd prefix-sum-data i) (rem (call bench-rand) (int64 1000)))))

(define ((prefix-sum void) (a (ptr int64)) (n int) (reps int))
  (declare rep int)
  (declare i int)
  (declare sum int64)
  (for ((set rep 0) (lt rep reps) (set rep (add rep 1)))
    (set sum (int64 0))
    (for ((set i 0) (lt i n) (set i (add i 1)))
      (set sum (add sum (load (ptradd a i))))
      (store (ptradd a i) sum))))

(define ((prefix-sum-run int64))
  (call prefix-sum prefix-sum-data prefix-sum-n 128)
  (ret (add (load (ptradd prefix-sum-data (sub prefix-sum-n 1)))
            (load (ptradd prefix-sum-data (div prefix-sum-n 2))))))
