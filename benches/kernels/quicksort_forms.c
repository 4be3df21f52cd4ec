/* quicksort.c's partition loop in the forms the `wrap` bench compares (quasi-bench wrap): what
   C-Lisp's wrapping `int` (docs/language.md §4) costs its data-dependent scans
   `while (a[i] < pivot) i++`, and whether any §4-exact form wins it back. QUICKSORT_FORM selects:
     1  int64 indices: NOT §4-exact (i never wraps), the bound of what widening could give;
     2  exact: i, j held in int64, each step wraps by hand (INT_MAX + 1 is INT_MIN);
     3  exact, versioned: blocks of four unchecked steps while i + 4 <= INT_MAX (j - 4 >= INT_MIN),
        one check per block, exact single steps at the edge.
   (QUICKSORT_FORM 0, the plain twin, is quicksort.c itself, which this file includes for the
   data, setup and checksum.) */
#ifndef QUICKSORT_FORM
#error "build with -DQUICKSORT_FORM=1, 2 or 3"
#endif

#include <limits.h>
#include "quicksort.c" /* the data, quicksort_setup and quicksort_run: all but the sort */

typedef int64_t index_t;
#if QUICKSORT_FORM == 1
#define STEP_UP(i) ((i) + 1)
#define STEP_DOWN(j) ((j) - 1)
#else
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
#if QUICKSORT_FORM == 3
            while (i <= INT_MAX - 4) {
                if (!(a[i] < pivot)) goto i_done;
                if (!(a[i + 1] < pivot)) { i += 1; goto i_done; }
                if (!(a[i + 2] < pivot)) { i += 2; goto i_done; }
                if (!(a[i + 3] < pivot)) { i += 3; goto i_done; }
                i += 4;
            }
#endif
            while (a[i] < pivot) i = STEP_UP(i);
#if QUICKSORT_FORM == 3
        i_done:
#endif
            j = STEP_DOWN(j);
#if QUICKSORT_FORM == 3
            while (j >= INT_MIN + 4) {
                if (!(a[j] > pivot)) goto j_done;
                if (!(a[j - 1] > pivot)) { j -= 1; goto j_done; }
                if (!(a[j - 2] > pivot)) { j -= 2; goto j_done; }
                if (!(a[j - 3] > pivot)) { j -= 3; goto j_done; }
                j -= 4;
            }
#endif
            while (a[j] > pivot) j = STEP_DOWN(j);
#if QUICKSORT_FORM == 3
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
