/* Doubly recursive Fibonacci: the C twin of fib.cl. */
#include "common.h"

static int fib_n;

void fib_setup(int n) { fib_n = n; }

static int fib(int n) {
    if (n < 2) return n;
    return fib(n - 1) + fib(n - 2);
}

int64_t fib_run(void) { return fib(fib_n); }
