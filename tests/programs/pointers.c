#include <stdio.h>
#include <stdint.h>

int sum(int *v, int n) {
    int total = 0;
    int *end = v + n;
    while (v < end) { total += *v; v += 1; }
    return total;
}

void reverse(int *v, int n) {
    int *left = v, *right = v + (n - 1);
    while (left < right) { int t = *left; *left = *right; *right = t; left += 1; right -= 1; }
}

int64_t length(char *s) {
    char *p = s;
    while (*p != 0) p += 1;
    return (int64_t)(intptr_t)p - (int64_t)(intptr_t)s;
}

int main(void) {
    int v[10];
    for (int i = 0; i < 10; i++) v[i] = i * i - 7;
    printf("sum %d\n", sum(v, 10));
    reverse(v, 10);
    for (int i = 0; i < 10; i++) printf("%d ", v[i]);
    printf("\n");
    printf("middle %d\n", *((v + 7) - 2));
    printf("length %ld\n", length("pointer arithmetic"));
    printf("bytes between %ld\n", (long)((intptr_t)(v + 9) - (intptr_t)v));
    return 0;
}
