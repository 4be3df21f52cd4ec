/* Matrix multiply C = A B with 4x4 register blocking and int indices: the C twin of matmul_4x4.cl. */
#include "common.h"

static int matmul_4x4_n;
static double *matmul_4x4_a, *matmul_4x4_b, *matmul_4x4_c;

void matmul_4x4_setup(int n) {
    int64_t count = (int64_t)n * n;
    matmul_4x4_n = n;
    free(matmul_4x4_a);
    free(matmul_4x4_b);
    free(matmul_4x4_c);
    matmul_4x4_a = bench_alloc(count * 8);
    matmul_4x4_b = bench_alloc(count * 8);
    matmul_4x4_c = bench_alloc(count * 8);
    bench_srand(1);
    for (int64_t i = 0; i < count; i++) {
        matmul_4x4_a[i] = bench_rand_double();
        matmul_4x4_b[i] = bench_rand_double();
        matmul_4x4_c[i] = 0.0;
    }
}

static void matmul_4x4(int n, double *a, double *b, double *c) {
    for (int i = 0; i < n; i += 4)
        for (int j = 0; j < n; j += 4) {
            double c00 = 0.0, c01 = 0.0, c02 = 0.0, c03 = 0.0;
            double c10 = 0.0, c11 = 0.0, c12 = 0.0, c13 = 0.0;
            double c20 = 0.0, c21 = 0.0, c22 = 0.0, c23 = 0.0;
            double c30 = 0.0, c31 = 0.0, c32 = 0.0, c33 = 0.0;
            double a0, a1, a2, a3, b0, b1, b2, b3;
            for (int k = 0; k < n; k++) {
                a0 = a[i * n + k];
                a1 = a[(i + 1) * n + k];
                a2 = a[(i + 2) * n + k];
                a3 = a[(i + 3) * n + k];
                b0 = b[k * n + j];
                b1 = b[k * n + j + 1];
                b2 = b[k * n + j + 2];
                b3 = b[k * n + j + 3];
                c00 = c00 + a0 * b0;
                c01 = c01 + a0 * b1;
                c02 = c02 + a0 * b2;
                c03 = c03 + a0 * b3;
                c10 = c10 + a1 * b0;
                c11 = c11 + a1 * b1;
                c12 = c12 + a1 * b2;
                c13 = c13 + a1 * b3;
                c20 = c20 + a2 * b0;
                c21 = c21 + a2 * b1;
                c22 = c22 + a2 * b2;
                c23 = c23 + a2 * b3;
                c30 = c30 + a3 * b0;
                c31 = c31 + a3 * b1;
                c32 = c32 + a3 * b2;
                c33 = c33 + a3 * b3;
            }
            c[i * n + j] = c00;
            c[i * n + j + 1] = c01;
            c[i * n + j + 2] = c02;
            c[i * n + j + 3] = c03;
            c[(i + 1) * n + j] = c10;
            c[(i + 1) * n + j + 1] = c11;
            c[(i + 1) * n + j + 2] = c12;
            c[(i + 1) * n + j + 3] = c13;
            c[(i + 2) * n + j] = c20;
            c[(i + 2) * n + j + 1] = c21;
            c[(i + 2) * n + j + 2] = c22;
            c[(i + 2) * n + j + 3] = c23;
            c[(i + 3) * n + j] = c30;
            c[(i + 3) * n + j + 1] = c31;
            c[(i + 3) * n + j + 2] = c32;
            c[(i + 3) * n + j + 3] = c33;
        }
}

/* Four products per run, so that one run is long enough to time at n = 512. */
int64_t matmul_4x4_run(void) {
    for (int round = 0; round < 4; round++) matmul_4x4(matmul_4x4_n, matmul_4x4_a, matmul_4x4_b, matmul_4x4_c);
    return bench_hash_doubles(matmul_4x4_c, matmul_4x4_n * matmul_4x4_n);
}
