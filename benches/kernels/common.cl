; Shared by every kernel: the C library functions the kernels use, the clock, and the random
; numbers both languages draw alike (a 64-bit LCG, wrapping like C's uint64_t).
(define ((aligned_alloc (ptr int8)) (alignment int64) (bytes int64)))
(define ((free void) (pointer (ptr int8))))
(define-struct timespec (sec int64) (nsec int64))
(define ((clock_gettime int) (clock int) (time (ptr (struct timespec)))))

; Nanoseconds on a clock: CLOCK_MONOTONIC is 1 on Linux, CLOCK_THREAD_CPUTIME_ID 3.
(define ((clock-ns int64) (clock int))
  (declare time (struct timespec))
  (call clock_gettime clock (ptr-to time))
  (ret (add (mul (load (sptradd (ptr-to time) sec)) (int64 1000000000))
            (load (sptradd (ptr-to time) nsec)))))

; Page-aligned memory, as C's bench_alloc, so that the layout never differs between the two: with
; only cache-line alignment, where the allocator put matmul's C relative to B (mod 4096) moved the
; same clang code between 23.0 and 27.7 ms (stores to C 4K-aliasing the next loads of B), and runs
; drew different layouts.
(define ((bench-alloc (ptr int8)) (bytes int64))
  (ret (call aligned_alloc (int64 4096) (mul (div (add bytes (int64 4095)) (int64 4096)) (int64 4096)))))

(define-global (bench-seed int64))
(define ((bench-srand void) (seed int64)) (set bench-seed seed))
(define ((bench-rand int64))
  (set bench-seed (add (mul bench-seed 6364136223846793005) 1442695040888963407))
  (ret (lshr bench-seed (int64 11))))
; A checksum of doubles that sees every bit (a sum of doubles would round differences away):
; the sum of bits(a[i]) * (i + 1), wrapping.
(define ((bench-hash-doubles int64) (a (ptr double)) (n int))
  (declare hash int64)
  (declare i int)
  (for ((set i 0) (lt i n) (set i (add i 1)))
    (set hash (add hash (mul (bitcast (load (ptradd a i)) int64) (sext (add i 1) int64)))))
  (ret hash))

; A double in [0, 1): 53 random bits times 2^-53.
(define ((bench-rand-double double))
  (ret (fmul (sitofp (call bench-rand) double) (double 1.1102230246251565e-16))))
