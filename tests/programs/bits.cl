; Integer bit operations: wrapping arithmetic (C computes it in unsigned), shifts within the
; width, logical versus arithmetic right shifts, xor, and/or/not, unsigned division and
; comparison.
(define ((printf int) (fmt (ptr int8)) ...))

(define ((hash int) (s (ptr int8)))
  (declare h int)
  (set h -2128831035)
  (while (ne (load s) (int8 0))
    (set h (mul (xor h (zext (load s) int)) 16777619))
    (set s (ptradd s 1)))
  (ret h))

(define ((popcount int) (x int))
  (declare n int)
  (while (ne x 0)
    (set n (add n (and x 1)))
    (set x (lshr x 1)))
  (ret n))

(define ((main int))
  (call printf "%d\n" (call hash "quasi"))
  (call printf "%d %d\n" (call popcount -1) (call popcount 1023))
  (call printf "%d %d %d\n" (shl 3 29) (ashr -64 3) (lshr -64 28))
  (call printf "%d %d %d\n" (and 12 10) (or 12 10) (not 12))
  (call printf "%u %u\n" (udiv -10 3) (urem -10 3))
  (call printf "%d %d\n" (div -10 3) (rem -10 3))
  (call printf "%d %d\n" (zext (ult 1 -1) int) (zext (lt 1 -1) int))
  (call printf "%d\n" (add 2147483647 (mul 2 1073741824)))
  (call printf "%ld\n" (mul (int64 3037000500) (int64 3037000500)))
  (ret 0))
