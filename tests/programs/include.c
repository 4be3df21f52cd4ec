/* The layouts `include` gives C-Lisp, printed by C: tests/programs/include.cl prints the same
 * offsets and sizes from the structs that `(include …)` declared. */
#include <stddef.h>
#include <stdio.h>
#include <time.h>
#include "../ffi/headers/geometry.h"

int main(void) {
    printf("shape %zu: %zu %zu %zu %zu %zu\n", sizeof(struct shape), offsetof(struct shape, kind),
           offsetof(struct shape, origin), offsetof(struct shape, next), offsetof(struct shape, tag),
           offsetof(struct shape, visible));
    printf("vec2 %zu: %zu\n", sizeof(vec2), offsetof(vec2, y));
    printf("bits %zu: %zu\n", sizeof(struct bits), offsetof(struct bits, value));
    printf("tagged %zu: %zu\n", sizeof(struct tagged), offsetof(struct tagged, value));
    printf("tm %zu: %zu %zu %zu\n", sizeof(struct tm), offsetof(struct tm, tm_year), offsetof(struct tm, tm_gmtoff),
           offsetof(struct tm, tm_zone));
    printf("%d %d %lld %u\n", SHAPE_BOX, GEOMETRY_VERSION, GEOMETRY_LIMIT, GEOMETRY_FLAGS);
    struct tm day = {0};
    day.tm_year = 124;
    day.tm_mon = 1;
    day.tm_mday = 29;
    char text[64];
    strftime(text, sizeof text, "%Y-%m-%d", &day);
    printf("%s\n", text);
    return 0;
}
