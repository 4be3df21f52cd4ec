/* Sieve of Eratosthenes over 0..n, one byte per number: the C twin of sieve.cl. */
#include "common.h"

static int sieve_n;
static unsigned char *sieve_flags;

void sieve_setup(int n) {
    sieve_n = n;
    free(sieve_flags);
    sieve_flags = bench_alloc((int64_t)n + 1);
    for (int i = 0; i <= n; i++) sieve_flags[i] = 0;
}

static int sieve(int n, unsigned char *flags) {
    int count = 0;
    for (int i = 0; i <= n; i++) flags[i] = 1;
    for (int i = 2; i * i <= n; i++)
        if (flags[i] != 0)
            for (int j = i * i; j <= n; j += i) flags[j] = 0;
    for (int i = 2; i <= n; i++) count += flags[i];
    return count;
}

int64_t sieve_run(void) { return sieve(sieve_n, sieve_flags); }
