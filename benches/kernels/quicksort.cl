; Quicksort of n random ints: Hoare partition around the middle element, inside the one
; recursive function (calls between session functions go through slots; a function calling
; itself is a direct call). Checksum: -1 if unsorted, else the sum of a[i] * (i + 1), wrapping.
(define-global (quicksort-n int))
(define-global (quicksort-data (ptr int)))

(define ((quicksort-setup void) (n int))
  (set quicksort-n n)
  (call free (bitcast quicksort-data (ptr int8)))
  (set quicksort-data (bitcast (call bench-alloc (mul (sext n int64) (int64 4))) (ptr int)))
  (call bench-srand (int64 4))
  (declare i int)
  (for ((set i 0) (lt i n) (set i (add i 1)))
    (store (ptradd quicksort-data i) (trunc (call bench-rand) int))))

(define ((quicksort void) (a (ptr int)) (lo int) (hi int))
  (declare pivot int)
  (declare i int)
  (declare j int)
  (declare t int)
  (while (lt lo hi)
    (set pivot (load (ptradd a (add lo (div (sub hi lo) 2)))))
    (set i (sub lo 1))
    (set j (add hi 1))
    (while #t
      (set i (add i 1))
      (while (lt (load (ptradd a i)) pivot) (set i (add i 1)))
      (set j (sub j 1))
      (while (gt (load (ptradd a j)) pivot) (set j (sub j 1)))
      (if (ge i j) (break))
      (set t (load (ptradd a i)))
      (store (ptradd a i) (load (ptradd a j)))
      (store (ptradd a j) t))
    ; Recurse into the left part, loop on the right one.
    (call quicksort a lo j)
    (set lo (add j 1))))

; -1 if a[0..n) is unsorted, else the sum of a[i] * (i + 1), wrapping.
(define ((quicksort-checksum int64) (a (ptr int)) (n int))
  (declare i int)
  (declare sum int64)
  (for ((set i 1) (lt i n) (set i (add i 1)))
    (if (gt (load (ptradd a (sub i 1))) (load (ptradd a i))) (ret (int64 -1))))
  (for ((set i 0) (lt i n) (set i (add i 1)))
    (set sum (add sum (mul (sext (load (ptradd a i)) int64) (sext (add i 1) int64)))))
  (ret sum))

(define ((quicksort-run int64))
  (call quicksort quicksort-data 0 (sub quicksort-n 1))
  (ret (call quicksort-checksum quicksort-data quicksort-n)))
