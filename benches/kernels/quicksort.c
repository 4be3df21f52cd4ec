/* Quicksort of n random ints, Hoare partition around the middle element: the C twin of
   quicksort.cl. */
#include "common.h"

static int quicksort_n;
static int *quicksort_data;

void quicksort_setup(int n) {
    quicksort_n = n;
    free(quicksort_data);
    quicksort_data = bench_alloc((int64_t)n * 4);
    bench_srand(4);
    for (int i = 0; i < n; i++) quicksort_data[i] = (int)bench_rand();
}

#ifdef QUICKSORT_FORM
/* quicksort_forms.c, which includes this file for the data and the checksum, defines it. */
static void quicksort(int *a, int lo, int hi);
#else
static void quicksort(int *a, int lo, int hi) {
    while (lo < hi) {
        int pivot = a[lo + (hi - lo) / 2];
        int i = lo - 1, j = hi + 1;
        for (;;) {
            i++;
            while (a[i] < pivot) i++;
            j--;
            while (a[j] > pivot) j--;
            if (i >= j) break;
            int t = a[i];
            a[i] = a[j];
            a[j] = t;
        }
        quicksort(a, lo, j);
        lo = j + 1;
    }
}
#endif

/* -1 if a[0..n) is unsorted, else the sum of a[i] * (i + 1), wrapping. */
static int64_t quicksort_checksum(const int *a, int n) {
    uint64_t sum = 0;
    for (int i = 1; i < n; i++)
        if (a[i - 1] > a[i]) return -1;
    for (int i = 0; i < n; i++) sum += (uint64_t)(int64_t)a[i] * (uint64_t)(int64_t)(i + 1);
    return (int64_t)sum;
}

int64_t quicksort_run(void) {
    quicksort(quicksort_data, 0, quicksort_n - 1);
    return quicksort_checksum(quicksort_data, quicksort_n);
}
