/* A library whose constructor calls abort() (tests/ffi/hostile.repl). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void start(void) { abort(); }

int ctorabort_answer(void) { return 42; }
