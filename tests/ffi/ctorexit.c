/* A library whose constructor writes to standard error and calls exit(7) (tests/ffi/hostile.repl). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void start(void) { fprintf(stderr, "ctorexit: giving up\n"); exit(7); }

int ctorexit_answer(void) { return 42; }
