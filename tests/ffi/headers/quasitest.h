/* The interface of the test library tests/ffi/quasitest.c, for include-library.repl. */
#ifndef QUASITEST_H
#define QUASITEST_H

#define QT_ORIGIN_X 0

struct point {
    int x;
    int y;
};

int qt_add(int a, int b);
int qt_version(void);
struct point *qt_point_new(int x, int y);
int qt_point_sum(const struct point *p);
void qt_point_scale(struct point *p, int k);
void qt_point_free(struct point *p);
int qt_count(void);
int qt_apply(int (*f)(int), int x);
int qt_fold(const int *xs, int n, int (*f)(int, int), int init);

#endif
