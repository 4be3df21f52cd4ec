; quicksort.cl's sort with `int64` indices, for the `wrap` bench: what a program gets when it asks
; for 64-bit indices itself (its scans then need no sign extension: docs/language.md §4 wraps
; `int64` at 2^63, where no index goes). Same data (quicksort-setup) and checksum.
(define ((quicksort-wide void) (a (ptr int)) (lo int64) (hi int64))
  (declare pivot int)
  (declare i int64)
  (declare j int64)
  (declare t int)
  (while (lt lo hi)
    (set pivot (load (ptradd a (add lo (div (sub hi lo) (int64 2))))))
    (set i (sub lo (int64 1)))
    (set j (add hi (int64 1)))
    (while #t
      (set i (add i (int64 1)))
      (while (lt (load (ptradd a i)) pivot) (set i (add i (int64 1))))
      (set j (sub j (int64 1)))
      (while (gt (load (ptradd a j)) pivot) (set j (sub j (int64 1))))
      (if (ge i j) (break))
      (set t (load (ptradd a i)))
      (store (ptradd a i) (load (ptradd a j)))
      (store (ptradd a j) t))
    (call quicksort-wide a lo j)
    (set lo (add j (int64 1)))))

(define ((quicksort-wide-setup void) (n int)) (call quicksort-setup n))

(define ((quicksort-wide-run int64))
  (call quicksort-wide quicksort-data (int64 0) (sext (sub quicksort-n 1) int64))
  (ret (call quicksort-checksum quicksort-data quicksort-n)))
