/* Shared by every C kernel: the same 64-bit LCG as kernels/common.cl. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Page-aligned memory, as bench-alloc in common.cl (which says why). */
static void *bench_alloc(int64_t bytes) { return aligned_alloc(4096, (size_t)((bytes + 4095) / 4096 * 4096)); }

static uint64_t bench_seed;
static void bench_srand(uint64_t seed) { bench_seed = seed; }
static int64_t bench_rand(void) {
    bench_seed = bench_seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int64_t)(bench_seed >> 11);
}
/* The checksum of doubles of common.cl: the sum of bits(a[i]) * (i + 1), wrapping. */
static int64_t bench_hash_doubles(const double *a, int n) {
    uint64_t hash = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &a[i], 8);
        hash += bits * (uint64_t)(int64_t)(i + 1);
    }
    return (int64_t)hash;
}

static double bench_rand_double(void) { return (double)bench_rand() * 1.1102230246251565e-16; }
