/* A library whose constructor resets the handlers of SIGSEGV and SIGFPE (tests/ffi/hostile.repl). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void start(void) { signal(SIGSEGV, SIG_DFL); signal(SIGFPE, SIG_IGN); }

int ctorsignals_answer(void) { return 42; }
