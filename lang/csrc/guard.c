/* The fault guard and the C side of the runtime for JIT-compiled code.
 *
 * setjmp/longjmp live in C because Rust cannot express "returns twice". A guarded call
 * records a jump buffer in a thread-local; runtime faults (division checks) and the signal
 * handler jump back to it. Signals that arrive while no guarded call runs on this thread are
 * handed to the handler that was installed before ours, so a bug in Quasi still crashes loudly. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __thread sigjmp_buf *current_jump;
static __thread int64_t fault_code;
static __thread int64_t fault_site;
static __thread int64_t fault_signal;
static __thread uintptr_t fault_address;

int64_t quasi_guarded_call(void (*entry)(void *), void *out) {
    sigjmp_buf buffer;
    sigjmp_buf *previous = current_jump;
    if (sigsetjmp(buffer, 1) == 0) {
        current_jump = &buffer;
        entry(out);
        current_jump = previous;
        return 0;
    }
    current_jump = previous;
    return 1;
}

void quasi_fault_info(int64_t *code, int64_t *site, int64_t *signal_number, uintptr_t *address) {
    *code = fault_code;
    *site = fault_site;
    *signal_number = fault_signal;
    *address = fault_address;
}

/* Called by compiled code (division checks, unresolved or invalidated functions). */
void quasi_fault(int64_t code, int64_t site) {
    fault_code = code;
    fault_site = site;
    fault_signal = 0;
    fault_address = 0;
    if (!current_jump) {
        fprintf(stderr, "quasi: runtime fault %" PRId64 " outside a guarded call\n", code);
        abort();
    }
    siglongjmp(*current_jump, 1);
}

static struct sigaction previous_actions[NSIG];
static const int guarded_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};

static void on_signal(int signal_number, siginfo_t *info, void *context) {
    (void)context;
    if (current_jump) {
        sigjmp_buf *target = current_jump;
        fault_code = 100;
        fault_site = -1;
        fault_signal = signal_number;
        fault_address = (uintptr_t)info->si_addr;
        siglongjmp(*target, 1);
    }
    /* Not ours: restore the previous handler; returning re-runs the faulting instruction. */
    sigaction(signal_number, &previous_actions[signal_number], NULL);
}

void quasi_install_fault_handlers(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof guarded_signals / sizeof guarded_signals[0]; i++) {
        sigaction(guarded_signals[i], &action, &previous_actions[guarded_signals[i]]);
    }
}

/* Each thread that runs compiled code needs an alternate stack, so a stack overflow can be
 * handled at all. */
int quasi_prepare_thread(void) {
    size_t size = 1 << 16;
    stack_t stack;
    stack.ss_sp = malloc(size);
    if (!stack.ss_sp) return -1;
    stack.ss_size = size;
    stack.ss_flags = 0;
    return sigaltstack(&stack, NULL);
}

/* llama.lisp's test runtime (be/tests/brilisp/runtime.c), printing through C stdio. */
int32_t quasi_rt_print(int32_t n) {
    printf("%d\n", n);
    return n;
}

float quasi_rt_fprint(float n) {
    if (isnan(n)) printf("nan\n");
    else printf("%f\n", (double)n);
    return n;
}

double quasi_rt_dprint(double n) {
    if (isnan(n)) printf("nan\n");
    else printf("%lf\n", n);
    return n;
}

void *quasi_rt_ptr_print(void *p) {
    printf("%p\n", p);
    return p;
}

int64_t quasi_rt_int64_print(int64_t n) {
    printf("%" PRId64 "\n", n);
    return n;
}
