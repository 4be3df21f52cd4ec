; Floats: printf of doubles (promoted explicitly from float with fpext), Newton's square root,
; a series summed in float and in double (round to nearest, no contraction), division by
; zero giving infinities, and float-to-int conversions inside their range.
(define ((printf int) (fmt (ptr int8)) ...))

(define ((newton-sqrt double) (x double))
  (declare guess double)
  (declare i int)
  (set guess x)
  (for ((set i 0) (lt i 20) (set i (add i 1)))
    (set guess (fmul (double 0.5) (fadd guess (fdiv x guess)))))
  (ret guess))

(define ((harmonic-float float) (n int))
  (declare s float)
  (declare i int)
  (for ((set i 1) (le i n) (set i (add i 1)))
    (set s (fadd s (fdiv 1.0 (sitofp i float)))))
  (ret s))

(define ((harmonic-double double) (n int))
  (declare s double)
  (declare i int)
  (for ((set i 1) (le i n) (set i (add i 1)))
    (set s (fadd s (fdiv (double 1.0) (sitofp i double)))))
  (ret s))

(define ((main int))
  (declare zero double)
  (call printf "%.17g\n" (call newton-sqrt (double 2.0)))
  (call printf "%.9g %.17g\n" (fpext (call harmonic-float 1000) double) (call harmonic-double 1000))
  (call printf "%f %e %g\n" (double 1234.5678) (double 0.000123) (double 1e20))
  (call printf "%.10f\n" (fpext 0.1 double))
  (call printf "%.20f\n" (fadd (fmul (double 0.1) (double 3.0)) (double -0.3)))
  (call printf "%f %f\n" (fdiv (double 1.0) zero) (fdiv (double -1.0) zero))
  (call printf "%d %d %ld\n" (fptosi (double -2.75) int) (fptoui 3.99 int) (fptosi (double 1e15) int64))
  (call printf "%.3f\n" (fpext (fneg (fmul 2.5 4.0)) double))
  (call printf "%d %d\n" (zext (flt (double 0.1) (double 0.2)) int) (zext (fge 1.0 2.0) int))
  (ret 0))
