#include <stdint.h>
#include <stdio.h>

/* The test runtime Quasi builds in (docs/language.md, "Test runtime"). */
int print(int n) { printf("%d\n", n); return n; }
double dprint(double n) { printf("%lf\n", n); return n; }

struct point { int x, y; };
struct particle { struct point position; double mass; int8_t tags[3]; };
struct particle cloud[4];

static inline struct point make_point(int x, int y) {
    struct point p = {0, 0};
    p.x = x;
    p.y = y;
    return p;
}

int manhattan(struct point p) { return p.x + p.y; }

int main(void) {
    struct point p = make_point(3, 4);
    print(manhattan(p));

    cloud[2].position.y = 9;
    cloud[2].mass = 2.5;
    cloud[2].tags[1] = -3;

    struct particle whole = cloud[2];
    print(whole.position.y);
    dprint(whole.mass);
    print(whole.tags[1]);

    return (int)sizeof(struct particle);
}
