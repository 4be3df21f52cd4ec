; Recursion: Fibonacci, Ackermann, Euclid's gcd, Towers of Hanoi moves, and mutual recursion
; through a forward declaration (llama.lisp's style, §3.3).
(define ((printf int) (fmt (ptr int8)) ...))

(define ((fib int) (n int))
  (if (lt n 2) (ret n))
  (ret (add (call fib (sub n 1)) (call fib (sub n 2)))))

(define ((ackermann int) (m int) (n int))
  (if (eq m 0) (ret (add n 1)))
  (if (eq n 0) (ret (call ackermann (sub m 1) 1)))
  (ret (call ackermann (sub m 1) (call ackermann m (sub n 1)))))

(define ((gcd int64) (a int64) (b int64))
  (if (eq b (int64 0)) (ret a))
  (ret (call gcd b (rem a b))))

(define ((hanoi int) (n int) (from int) (to int) (via int))
  (if (eq n 0) (ret 0))
  (ret (add (add (call hanoi (sub n 1) from via to) 1) (call hanoi (sub n 1) via to from))))

(define ((is-odd bool) (n int)))
(define ((is-even bool) (n int)) (if (eq n 0) (ret #t)) (ret (call is-odd (sub n 1))))
(define ((is-odd bool) (n int)) (if (eq n 0) (ret #f)) (ret (call is-even (sub n 1))))

(define ((main int))
  (call printf "fib %d %d %d\n" (call fib 10) (call fib 20) (call fib 25))
  (call printf "ackermann %d %d\n" (call ackermann 2 3) (call ackermann 3 3))
  (call printf "gcd %ld\n" (call gcd (int64 1071) (int64 462)))
  (call printf "gcd %ld\n" (call gcd (int64 9223372036854775806) (int64 6442450941)))
  (call printf "hanoi %d\n" (call hanoi 12 1 3 2))
  (call printf "odd %d even %d\n" (zext (call is-odd 77) int) (zext (call is-even 77) int))
  (ret 3))
