#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>

int collatz(int64_t n) {
    int steps = 0;
    while (n != 1) {
        if (n % 2 == 0) n = n / 2; else n = n * 3 + 1;
        steps += 1;
    }
    return steps;
}

int main(void) {
    bool composite[100] = {0};
    int i, j, count = 0;
    for (i = 2; i < 100; i++) {
        if (composite[i]) continue;
        count += 1;
        printf("%d ", i);
        for (j = i * i; j < 100; j += i) composite[j] = true;
    }
    printf("\n%d primes\n", count);
    for (i = 1; i < 30; i++) {
        if (collatz(i) > 100) break;
        printf("%d:%d ", i, collatz(i));
    }
    printf("\nstopped at %d\n", i);
    j = 0;
    while (1) { j += 7; if (j > 50) break; }
    printf("j %d\n", j);
    return count + 256;
}
