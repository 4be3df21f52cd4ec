// The structure prelude/blas.rhai's gemm generates, written in C for clang -O3 -march=native:
// the same packing, loops and mr×nr microkernel of fma, at the configuration the bench's
// autotune chose. Built with -DT=float|double -DMR -DNR -DMC -DKC -DNC -DNAME=…; C = A·B,
// row-major, C overwritten, any m, n, k.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define FMA(x, y, z) (sizeof(T) == 4 ? fmaf((x), (y), (z)) : fma((x), (y), (z)))
#define MIN(x, y) ((x) < (y) ? (x) : (y))

static void pack_a(int mb, int kb, const T *a, int lda, T *ap) {
    for (int ir = 0; ir < mb; ir += MR) {
        int rows = MIN(MR, mb - ir);
        T *dst = ap + ir * kb;
        for (int p = 0; p < kb; p++, dst += MR)
            for (int i = 0; i < MR; i++) dst[i] = i < rows ? a[(ir + i) * lda + p] : 0;
    }
}

static void pack_b(int kb, int nb, const T *b, int ldb, T *bp) {
    for (int jr = 0; jr < nb; jr += NR) {
        int cols = MIN(NR, nb - jr);
        T *dst = bp + jr * kb;
        for (int p = 0; p < kb; p++, dst += NR)
            for (int j = 0; j < NR; j++) dst[j] = j < cols ? b[p * ldb + jr + j] : 0;
    }
}

static inline __attribute__((always_inline)) void micro(int kb, const T *ap, const T *bp, T *c, int ldc, int first) {
    T acc[MR][NR] = {{0}};
    for (int p = 0; p < kb; p++, ap += MR, bp += NR)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] = FMA(ap[i], bp[j], acc[i][j]);
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) c[i * ldc + j] = (first ? 0 : c[i * ldc + j]) + acc[i][j];
}

void NAME(int m, int n, int k, const T *a, const T *b, T *c) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        for (long i = 0; i < (long)m * n; i++) c[i] = 0;
        return;
    }
    int kcap = MIN(k, KC), ncap = (MIN(n, NC) + NR - 1) / NR * NR, mcap = (MIN(m, MC) + MR - 1) / MR * MR;
    char *raw = malloc(((size_t)kcap * (ncap + mcap) + MR * NR) * sizeof(T) + 192);
    T *bp = (T *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    T *ap = (T *)(((uintptr_t)(bp + (size_t)kcap * ncap) + 63) & ~(uintptr_t)63);
    T *edge = (T *)(((uintptr_t)(ap + (size_t)kcap * mcap) + 63) & ~(uintptr_t)63);
    for (int jc = 0; jc < n; jc += NC) {
        int nb = MIN(NC, n - jc);
        for (int pc = 0; pc < k; pc += KC) {
            int kb = MIN(KC, k - pc);
            pack_b(kb, nb, b + pc * n + jc, n, bp);
            for (int ic = 0; ic < m; ic += MC) {
                int mb = MIN(MC, m - ic);
                pack_a(mb, kb, a + ic * k + pc, k, ap);
                for (int jr = 0; jr < nb; jr += NR)
                    for (int ir = 0; ir < mb; ir += MR) {
                        T *tile = c + (ic + ir) * n + jc + jr;
                        if (mb - ir >= MR && nb - jr >= NR) {
                            micro(kb, ap + ir * kb, bp + jr * kb, tile, n, pc == 0);
                        } else {
                            micro(kb, ap + ir * kb, bp + jr * kb, edge, NR, 1);
                            int rows = MIN(MR, mb - ir), cols = MIN(NR, nb - jr);
                            for (int i = 0; i < rows; i++)
                                for (int j = 0; j < cols; j++)
                                    tile[i * n + j] = (pc == 0 ? 0 : tile[i * n + j]) + edge[i * NR + j];
                        }
                    }
            }
        }
    }
    free(raw);
}
