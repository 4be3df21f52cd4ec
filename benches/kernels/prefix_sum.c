/* Inclusive prefix sum of n 64-bit values in place, repeated: the C twin of prefix_sum.cl. */
#include "common.h"

static int prefix_sum_n;
static int64_t *prefix_sum_data;

void prefix_sum_setup(int n) {
    prefix_sum_n = n;
    free(prefix_sum_data);
    prefix_sum_data = bench_alloc((int64_t)n * 8);
    bench_srand(5);
    for (int i = 0; i < n; i++) prefix_sum_data[i] = bench_rand() % 1000;
}

static void prefix_sum(int64_t *a, int n, int reps) {
    for (int rep = 0; rep < reps; rep++) {
        uint64_t sum = 0;
        for (int i = 0; i < n; i++) {
            sum += (uint64_t)a[i];
            a[i] = (int64_t)sum;
        }
    }
}

int64_t prefix_sum_run(void) {
    prefix_sum(prefix_sum_data, prefix_sum_n, 128);
    return (int64_t)((uint64_t)prefix_sum_data[prefix_sum_n - 1] + (uint64_t)prefix_sum_data[prefix_sum_n / 2]);
}
