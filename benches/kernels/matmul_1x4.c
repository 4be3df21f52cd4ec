/* Matrix multiply C = A B with 1x4 register blocking and int indices: the C twin of matmul_1x4.cl. */
#include "common.h"

static int matmul_1x4_n;
static double *matmul_1x4_a, *matmul_1x4_b, *matmul_1x4_c;

void matmul_1x4_setup(int n) {
    int64_t count = (int64_t)n * n;
    matmul_1x4_n = n;
    free(matmul_1x4_a);
    free(matmul_1x4_b);
    free(matmul_1x4_c);
    matmul_1x4_a = bench_alloc(count * 8);
    matmul_1x4_b = bench_alloc(count * 8);
    matmul_1x4_c = bench_alloc(count * 8);
    bench_srand(1);
    for (int64_t i = 0; i < count; i++) {
        matmul_1x4_a[i] = bench_rand_double();
        matmul_1x4_b[i] = bench_rand_double();
        matmul_1x4_c[i] = 0.0;
    }
}

static void matmul_1x4(int n, double *a, double *b, double *c) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j += 4) {
            double c0 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0, aik;
            for (int k = 0; k < n; k++) {
                aik = a[i * n + k];
                c0 = c0 + aik * b[k * n + j];
                c1 = c1 + aik * b[k * n + j + 1];
                c2 = c2 + aik * b[k * n + j + 2];
                c3 = c3 + aik * b[k * n + j + 3];
            }
            c[i * n + j] = c0;
            c[i * n + j + 1] = c1;
            c[i * n + j + 2] = c2;
            c[i * n + j + 3] = c3;
        }
}

/* Two products per run, so that one run is long enough to time at n = 512. */
int64_t matmul_1x4_run(void) {
    matmul_1x4(matmul_1x4_n, matmul_1x4_a, matmul_1x4_b, matmul_1x4_c);
    matmul_1x4(matmul_1x4_n, matmul_1x4_a, matmul_1x4_b, matmul_1x4_c);
    return bench_hash_doubles(matmul_1x4_c, matmul_1x4_n * matmul_1x4_n);
}
