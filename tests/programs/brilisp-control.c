#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

/* The test runtime Quasi builds in (docs/language.md, "Test runtime"). */
int print(int n) { printf("%d\n", n); return n; }
float fprint(float n) { printf("%f\n", n); return n; }
int64_t int64_print(int64_t n) { printf("%" PRId64 "\n", n); return n; }

int collatz(int n) {
    int steps = 0;
    while (n != 1) {
        n = (n & 1) ? n * 3 + 1 : n >> 1;
        steps += 1;
    }
    return steps;
}

int64_t factorial(int64_t n) { return n <= 1 ? 1 : n * factorial(n - 1); }

int main(void) {
    int steps = collatz(27);
    print(steps);
    int64_print(factorial(20));

    float x = 2.75f;
    int x_int = (int)x;
    print(x_int);
    fprint((float)(double)x);
    float ratio = (float)(int64_t)x_int / 3.0f;
    fprint(ratio);

    int cell = 258;
    print(*(uint8_t *)&cell);

    int flags = ((6 ^ 3) << 2);
    print(flags);
    return steps;
}
