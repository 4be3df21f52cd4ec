#include <stdio.h>
#include <stdint.h>

double newton_sqrt(double x) {
    double guess = x;
    for (int i = 0; i < 20; i++) guess = 0.5 * (guess + x / guess);
    return guess;
}
float harmonic_float(int n) { float s = 0; for (int i = 1; i <= n; i++) s = s + 1.0f / (float)i; return s; }
double harmonic_double(int n) { double s = 0; for (int i = 1; i <= n; i++) s = s + 1.0 / (double)i; return s; }

int main(void) {
    volatile double zero = 0.0;
    printf("%.17g\n", newton_sqrt(2.0));
    printf("%.9g %.17g\n", (double)harmonic_float(1000), harmonic_double(1000));
    printf("%f %e %g\n", 1234.5678, 0.000123, 1e20);
    printf("%.10f\n", (double)0.1f);
    volatile double a = 0.1, b = 3.0, c = -0.3;
    printf("%.20f\n", a * b + c);
    printf("%f %f\n", 1.0 / zero, -1.0 / zero);
    printf("%d %d %ld\n", (int)-2.75, (int)(unsigned)3.99f, (int64_t)1e15);
    printf("%.3f\n", (double)-(2.5f * 4.0f));
    printf("%d %d\n", 0.1 < 0.2, 1.0f >= 2.0f);
    return 0;
}
