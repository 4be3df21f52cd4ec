// The test library of tests/ffi: the transcript harness builds it with clang-19 into a
// directory it puts in QUASI_LIBRARY_PATH, as libquasitest.so.
#include <stdlib.h>

int qt_add(int a, int b) { return a + b; }

// Shadows libquasitest2.so's when loaded after it, and is shadowed when loaded before.
int qt_version(void) { return 1; }

// Shadows the C library's `labs` for declarations made after loading this library.
long labs(long x) { return -1; }

struct point {
    int x;
    int y;
};

struct point *qt_point_new(int x, int y) {
    struct point *p = malloc(sizeof *p);
    p->x = x;
    p->y = y;
    return p;
}

int qt_point_sum(const struct point *p) { return p->x + p->y; }

void qt_point_scale(struct point *p, int k) {
    p->x *= k;
    p->y *= k;
}

void qt_point_free(struct point *p) { free(p); }

// A counter kept by the library between calls.
static int counter;

int qt_count(void) { return ++counter; }

// Callbacks: C calls back into compiled C-Lisp code.
int qt_apply(int (*f)(int), int x) { return f(x); }

int qt_fold(const int *xs, int n, int (*f)(int, int), int init) {
    int acc = init;
    for (int i = 0; i < n; i++) acc = f(acc, xs[i]);
    return acc;
}
