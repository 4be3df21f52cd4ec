#include <stdio.h>
#include <stdint.h>

struct config { int width, height; double scale; };

int calls;
int64_t limit = 5000000000LL;
int16_t table[5] = {1, -2, 300, -4000, 32767};
struct config settings = {640, 480, 1.25};
int8_t grid[2][3] = {{1, 2, 3}, {4, 5, 6}};
int64_t watched = 7;
int64_t *watcher = &watched;
float ratio = 3;

void count(void) { calls += 1; }

int64_t area(void) {
    count();
    return (int64_t)(settings.width * settings.height);
}

int main(void) {
    int s = 0;
    printf("area %ld of %ld\n", area(), limit);
    for (int i = 0; i < 5; i++) s += table[i];
    printf("table sum %d\n", s);
    printf("grid %d\n", (int)grid[1][2]);
    *watcher = *watcher * 6;
    printf("watched %ld\n", watched);
    printf("scale %.3f ratio %.1f\n", settings.scale, (double)ratio);
    count();
    count();
    limit = limit - 1;
    printf("calls %d limit %ld\n", calls, limit);
    return calls;
}
