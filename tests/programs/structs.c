#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

struct node { int value; struct node *next; };
struct vec2 { double x, y; };
struct particle { struct vec2 position; int mass; int8_t tag; };

struct node *push(struct node *head, int value) {
    struct node *n = malloc(16);
    n->value = value;
    n->next = head;
    return n;
}

struct vec2 add_vec(struct vec2 a, struct vec2 b) {
    struct vec2 r = {0, 0};
    r.x = a.x + b.x;
    r.y = a.y + b.y;
    return r;
}

int main(void) {
    struct node *head = NULL, *next;
    int i, total = 0;
    struct vec2 v = {0, 0}, w;
    struct particle ps[3] = {0};
    for (i = 1; i <= 6; i++) head = push(head, i * 10);
    while (head != NULL) {
        printf("%d ", head->value);
        total += head->value;
        next = head->next;
        free(head);
        head = next;
    }
    printf("total %d\n", total);
    v.x = 1.5; v.y = -2.0;
    w = add_vec(v, add_vec(v, v));
    printf("%.2f %.2f\n", w.x, w.y);
    for (i = 0; i < 3; i++) {
        ps[i].position.x = (double)i;
        ps[i].mass = i * 3;
        ps[i].tag = (int8_t)(i + 65);
    }
    for (i = 0; i < 3; i++) printf("%c %.1f %d\n", (int)ps[i].tag, ps[i].position.x, ps[i].mass);
    return 0;
}
