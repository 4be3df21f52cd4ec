#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>

int fib(int n) { if (n < 2) return n; return fib(n - 1) + fib(n - 2); }
int ackermann(int m, int n) {
    if (m == 0) return n + 1;
    if (n == 0) return ackermann(m - 1, 1);
    return ackermann(m - 1, ackermann(m, n - 1));
}
int64_t gcd(int64_t a, int64_t b) { if (b == 0) return a; return gcd(b, a % b); }
int hanoi(int n, int from, int to, int via) {
    if (n == 0) return 0;
    return hanoi(n - 1, from, via, to) + 1 + hanoi(n - 1, via, to, from);
}
bool is_odd(int n);
bool is_even(int n) { if (n == 0) return true; return is_odd(n - 1); }
bool is_odd(int n) { if (n == 0) return false; return is_even(n - 1); }

int main(void) {
    printf("fib %d %d %d\n", fib(10), fib(20), fib(25));
    printf("ackermann %d %d\n", ackermann(2, 3), ackermann(3, 3));
    printf("gcd %ld\n", gcd(1071, 462));
    printf("gcd %ld\n", gcd(9223372036854775806LL, 6442450941LL));
    printf("hanoi %d\n", hanoi(12, 1, 3, 2));
    printf("odd %d even %d\n", (int)is_odd(77), (int)is_even(77));
    return 3;
}
