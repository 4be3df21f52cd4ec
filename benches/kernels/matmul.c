/* Matrix multiply C = A B, doubles, n x n, row-major, i-k-j order: the C twin of matmul.cl. */
#include "common.h"

static int matmul_n;
static double *matmul_a, *matmul_b, *matmul_c;

void matmul_setup(int n) {
    int64_t count = (int64_t)n * n;
    matmul_n = n;
    free(matmul_a);
    free(matmul_b);
    free(matmul_c);
    matmul_a = bench_alloc(count * 8);
    matmul_b = bench_alloc(count * 8);
    matmul_c = bench_alloc(count * 8);
    bench_srand(1);
    for (int64_t i = 0; i < count; i++) {
        matmul_a[i] = bench_rand_double();
        matmul_b[i] = bench_rand_double();
        matmul_c[i] = 0.0;
    }
}

static void matmul(int n, double *a, double *b, double *c) {
    for (int i = 0; i < n * n; i++) c[i] = 0.0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++) {
            double aik = a[i * n + k];
            for (int j = 0; j < n; j++) c[i * n + j] = c[i * n + j] + aik * b[k * n + j];
        }
}

/* Two products per run, so that one run is long enough to time at n = 512. */
int64_t matmul_run(void) {
    matmul(matmul_n, matmul_a, matmul_b, matmul_c);
    matmul(matmul_n, matmul_a, matmul_b, matmul_c);
    return bench_hash_doubles(matmul_c, matmul_n * matmul_n);
}
