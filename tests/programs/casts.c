#include <stdio.h>
#include <stdint.h>
#include <string.h>

int main(void) {
    int8_t b = (int8_t)200;
    printf("%d %d %d\n", (int)b, (int)(uint8_t)b, (int)(int16_t)70000);
    int16_t w = (int16_t)-2;
    printf("%d %d\n", (int)(uint16_t)w, (int)w);
    printf("%ld %ld\n", (int64_t)-1, (int64_t)(uint32_t)-1);
    printf("%d\n", (int)(int64_t)81985529216486895LL);
    printf("%.1f %.1f\n", (double)-5, (double)(uint32_t)-5);
    printf("%d %u\n", (int)-7.9, (unsigned)4000000000.0);
    int x = 42;
    int *p = &x;
    int *q = (int *)(intptr_t)(int64_t)(intptr_t)p;
    printf("%d %d\n", *q, p == q);
    float one = 1.0f; int bits; memcpy(&bits, &one, 4);
    printf("%d\n", bits);
    double minus_two = -2.0; int64_t dbits; memcpy(&dbits, &minus_two, 8);
    printf("%ld\n", dbits);
    int pi_bits = 1078530011; float pi; memcpy(&pi, &pi_bits, 4);
    printf("%.4f\n", (double)pi);
    printf("%d\n", (int)(6 & 1));
    return 0;
}
