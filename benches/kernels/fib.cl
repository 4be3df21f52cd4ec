; Doubly recursive Fibonacci of n (a function calling itself is a direct call).
; Checksum: fib(n).
(define-global (fib-n int))

(define ((fib-setup void) (n int)) (set fib-n n))

(define ((fib int) (n int))
  (if (lt n 2) (ret n))
  (ret (add (call fib (sub n 1)) (call fib (sub n 2)))))

(define ((fib-run int64)) (ret (sext (call fib fib-n) int64)))
