/* quicksort.c's partition loop in the forms the `wrap` bench compares (quasi-bench wrap): what
   C-Lisp's wrapping `int` (docs/language.md §4) costs its data-dependent scans
   `while (a[i] < pivot) i++`, and whether any §4-exact form wins it back. FORM selects:
     1  int64 indices: NOT §4-exact (i never wraps), the bound of what widening could give;
     2  exact: i, j held in int64, each step wraps by hand (INT_MAX + 1 is INT_MIN);
     3  exact, versioned: blocks of four unchecked steps while i + 4 <= INT_MAX (j - 4 >= INT_MIN),
        one check per block, exact single steps at the edge.
   (FORM 0, the plain twin, is quicksort.c itself.) Setup, data and checksum are quicksort.c's. */
#include <limits.h>
#include "common.h"

#ifndef FORM
#error "build with -DFORM=1, 2 or 3"
#endif

static int quicksort_n;
static int *quicksort_data;

void quicksort_setup(int n) {
    quicksort_n = n;
    free(quicksort_data);
    quicksort_data = bench_alloc((int64_t)n * 4);
    bench_srand(4);
    for (int i = 0; i < n; i++) quicksort_data[i] = (int)bench_rand();
}

#if FORM == 1
typedef int64_t index_t;
#define STEP_UP(i) ((i) + 1)
#define STEP_DOWN(j) ((j) - 1)
#else
typedef int64_t index_t;
#define STEP_UP(i) ((i) == INT_MAX ? (index_t)INT_MIN : (i) + 1)
#define STEP_DOWN(j) ((j) == INT_MIN ? (index_t)INT_MAX : (j) - 1)
#endif

static void quicksort(int *a, int lo, int hi) {
    while (lo < hi) {
        int pivot = a[lo + (hi - lo) / 2];
        /* lo - 1 and hi + 1 as int would: wrapping */
        index_t i = STEP_DOWN((index_t)lo), j = STEP_UP((index_t)hi);
        for (;;) {
            i = STEP_UP(i);
#if FORM == 3
            while (i <= INT_MAX - 4) {
                if (!(a[i] < pivot)) goto i_done;
                if (!(a[i + 1] < pivot)) { i += 1; goto i_done; }
                if (!(a[i + 2] < pivot)) { i += 2; goto i_done; }
                if (!(a[i + 3] < pivot)) { i += 3; goto i_done; }
                i += 4;
            }
#endif
            while (a[i] < pivot) i = STEP_UP(i);
#if FORM == 3
        i_done:
#endif
            j = STEP_DOWN(j);
#if FORM == 3
            while (j >= INT_MIN + 4) {
                if (!(a[j] > pivot)) goto j_done;
                if (!(a[j - 1] > pivot)) { j -= 1; goto j_done; }
                if (!(a[j - 2] > pivot)) { j -= 2; goto j_done; }
                if (!(a[j - 3] > pivot)) { j -= 3; goto j_done; }
                j -= 4;
            }
#endif
            while (a[j] > pivot) j = STEP_DOWN(j);
#if FORM == 3
        j_done:
#endif
            if (i >= j) break;
            int t = a[i];
            a[i] = a[j];
            a[j] = t;
        }
        quicksort(a, lo, (int)j);
        lo = (int)STEP_UP(j);
    }
}

int64_t quicksort_run(void) {
    int *a = quicksort_data;
    int n = quicksort_n;
    uint64_t sum = 0;
    quicksort(a, 0, n - 1);
    for (int i = 1; i < n; i++)
        if (a[i - 1] > a[i]) return -1;
    for (int i = 0; i < n; i++) sum += (uint64_t)(int64_t)a[i] * (uint64_t)(int64_t)(i + 1);
    return (int64_t)sum;
}
