/* A header for Quasi's `include` transcripts: one of each C construct, and what it becomes. */
#ifndef GEOMETRY_H
#define GEOMETRY_H

#include <stdint.h>

#define GEOMETRY_VERSION 3
#define GEOMETRY_SCALE 0.5
#define GEOMETRY_RATIO 0.25f
#define GEOMETRY_FLAGS (1u << 4 | 1u)
#define GEOMETRY_LIMIT (-GEOMETRY_VERSION * 100LL)
#define GEOMETRY_NAME "geometry"
#define GEOMETRY_SQUARE(x) ((x) * (x))

enum shape_kind { SHAPE_POINT, SHAPE_CIRCLE = 10, SHAPE_BOX };
typedef enum shape_kind shape_kind_t;

typedef struct {
    double x, y;
} vec2;

struct shape {
    shape_kind_t kind;
    vec2 origin;
    struct shape *next;
    unsigned char tag[3];
    _Bool visible;
};

struct bits {
    unsigned ready : 1;
    unsigned count : 7;
    int32_t value;
};

union number {
    int64_t i;
    double d;
};

struct tagged {
    int kind;
    union number value;
};

struct wide {
    char tag;
    long double value;
};

struct handle;
typedef struct handle *handle_t;
typedef int (*visitor)(struct shape *shape, void *context);

double shape_area(const struct shape *shape);
int visit_all(struct shape *first, visitor visit, void *context);
handle_t open_handle(const char *name, uint64_t flags);
vec2 shape_center(struct shape *shape);
long double precise_area(const struct shape *shape);
int log_message(int level, const char *format, ...);
void reset(int[4]);

#endif
