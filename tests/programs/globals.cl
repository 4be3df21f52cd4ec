; Globals: every initializer form (none, a literal, nested literals for arrays and structs,
; the address of an earlier global), updates from several functions, and a global array used
; as a lookup table.
(define ((printf int) (fmt (ptr int8)) ...))

(define-struct config (width int) (height int) (scale double))

(define-global (calls int))
(define-global (limit int64) (const 5000000000))
(define-global (table (arr 5 int16)) (const (1 -2 300 -4000 32767)))
(define-global (settings (struct config)) (const (640 480 1.25)))
(define-global (grid (arr 2 (arr 3 int8))) (const ((1 2 3) (4 5 6))))
(define-global (watched int64) (const 7))
(define-global (watcher (ptr int64)) (ptr-to watched))
(define-global (ratio float) (const 3))

(define ((count void)) (set calls (add calls 1)))

(define ((area int64))
  (call count)
  (ret (sext (mul (load (sptradd (ptr-to settings) width)) (load (sptradd (ptr-to settings) height))) int64)))

(define ((main int))
  (declare i int)
  (declare s int)
  (call printf "area %ld of %ld\n" (call area) limit)
  (for ((set i 0) (lt i 5) (set i (add i 1)))
    (set s (add s (sext (load (aptradd table i)) int))))
  (call printf "table sum %d\n" s)
  (call printf "grid %d\n" (sext (load (aptradd (aptradd grid 1) 2)) int))
  (store watcher (mul (load watcher) (int64 6)))
  (call printf "watched %ld\n" watched)
  (call printf "scale %.3f ratio %.1f\n" (load (sptradd (ptr-to settings) scale)) (fpext ratio double))
  (call count)
  (call count)
  (set limit (sub limit (int64 1)))
  (call printf "calls %d limit %ld\n" calls limit)
  (ret calls))
