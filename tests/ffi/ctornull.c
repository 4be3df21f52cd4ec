/* A library whose constructor writes through a null pointer (tests/ffi/hostile.repl). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void start(void) { *(volatile int *)0 = 1; }

int ctornull_answer(void) { return 42; }
