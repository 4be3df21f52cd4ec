#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

/* The test runtime Quasi builds in (docs/language.md, "Test runtime"). */
int print(int n) { printf("%d\n", n); return n; }
int64_t int64_print(int64_t n) { printf("%" PRId64 "\n", n); return n; }
double dprint(double n) { printf("%lf\n", n); return n; }

int counter = 40;
int squares[8];
int *cursor;
double scale = 1.5;
int8_t limits[2] = {(int8_t)300, (int8_t)-129};
char banner[] = "globals are pointers";

void bump(int by) { counter += by; }

void fill_squares(void) {
    for (int i = 0; i < 8; i++) squares[i] = i * i;
}

int main(void) {
    puts(banner);
    bump(2);
    print(counter);
    counter = 7;
    print(counter);

    fill_squares();
    cursor = &squares[0];
    print(cursor[5]);

    dprint(scale + scale);

    print(limits[0]);
    print(limits[1]);

    print((int8_t)200);
    int64_print(INT64_MIN);

    int local = 5;
    int *local_p = &local;
    *local_p = 6;
    return local + 1;
}
