; Loaded by tiers.repl: `:load` compiles a file at full speed (opt 3) unless `:opt` pinned a level.
(define ((square int) (x int)) (ret (mul x x)))
(define ((sum-of-squares int64) (n int))
  (declare total int64)
  (declare i int)
  (for ((set i 1) (le i n) (set i (add i 1))) (set total (add total (sext (call square i) int64))))
  (ret total))
