#include <stdio.h>
#include <stdint.h>

int hash(const char *s) {
    uint32_t h = (uint32_t)-2128831035;
    while (*s != 0) { h = (h ^ (uint32_t)(uint8_t)*s) * 16777619u; s += 1; }
    return (int)h;
}

int popcount(int x) {
    int n = 0;
    uint32_t u = (uint32_t)x;
    while (u != 0) { n += u & 1; u >>= 1; }
    return n;
}

int main(void) {
    printf("%d\n", hash("quasi"));
    printf("%d %d\n", popcount(-1), popcount(1023));
    printf("%d %d %d\n", (int)(3u << 29), -64 >> 3, (int)((uint32_t)-64 >> 28));
    printf("%d %d %d\n", 12 & 10, 12 | 10, ~12);
    printf("%u %u\n", (uint32_t)-10 / 3u, (uint32_t)-10 % 3u);
    printf("%d %d\n", -10 / 3, -10 % 3);
    printf("%d %d\n", 1u < (uint32_t)-1, 1 < -1);
    printf("%d\n", (int)(2147483647u + 2u * 1073741824u));
    printf("%ld\n", (int64_t)(3037000500ull * 3037000500ull));
    return 0;
}
