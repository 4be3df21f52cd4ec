/* The fault guard and the C side of the runtime for JIT-compiled code.
 *
 * setjmp/longjmp live in C because Rust cannot express "returns twice". A guarded call
 * records a jump buffer in a thread-local; runtime faults (division checks) and the signal
 * handler jump back to it. Signals that arrive while no guarded call runs on this thread are
 * handed to the handler that was installed before ours, so a bug in Quasi still crashes loudly.
 *
 * What ends a guarded call early, besides faults: user code that calls exit, _exit, quick_exit,
 * _Exit or abort (the session links those names to the quasi_rt_ functions below), signals the
 * process raises at itself (raise, kill), and interrupts. An interrupt is a signal sent to the
 * executor thread; its handler jumps out only when the thread is in compiled code, which holds
 * no lock of libc's or ours. Anywhere else (libc, the Rust runtime) it returns, and the
 * interrupting thread sends the signal again a few milliseconds later: blocking calls return
 * EINTR to the compiled caller, which the next signal stops. Compiled code pays nothing for it. */
#define _GNU_SOURCE
#include <link.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <ucontext.h>
#include <unistd.h>

static __thread sigjmp_buf *current_jump;
static __thread int64_t fault_code;
static __thread int64_t fault_site;
static __thread int64_t fault_signal;
static __thread uintptr_t fault_address;
/* The instruction a signal or interrupt stopped; for a segmentation fault, whether it wrote. */
static __thread uintptr_t fault_pc;
static __thread int64_t fault_detail;

/* Fault codes of the guard itself (compiled code's checks use small codes, codegen's FAULT_*). */
enum { CODE_SIGNAL = 100, CODE_INTERRUPT = 101, CODE_EXIT = 102, CODE_ABORT = 103 };

/* An interrupt was asked for and the executor has not stopped yet. */
static volatile sig_atomic_t interrupt_requested;
int64_t quasi_guarded_call(void (*entry)(void *), void *out) {
    sigjmp_buf buffer;
    sigjmp_buf *previous = current_jump;
    if (sigsetjmp(buffer, 1) == 0) {
        interrupt_requested = 0;
        current_jump = &buffer;
        entry(out);
        current_jump = previous;
        return 0;
    }
    current_jump = previous;
    return 1;
}

void quasi_fault_info(int64_t *code, int64_t *site, int64_t *signal_number, uintptr_t *address, uintptr_t *pc,
                      int64_t *detail) {
    *code = fault_code;
    *site = fault_site;
    *signal_number = fault_signal;
    *address = fault_address;
    *pc = fault_pc;
    *detail = fault_detail;
}

/* Called by compiled code (division checks, unresolved or invalidated functions). */
void quasi_fault(int64_t code, int64_t site) {
    fault_code = code;
    fault_site = site;
    fault_signal = 0;
    fault_address = 0;
    fault_pc = 0;
    fault_detail = 0;
    if (!current_jump) {
        fprintf(stderr, "quasi: runtime fault %" PRId64 " outside a guarded call\n", code);
        abort();
    }
    siglongjmp(*current_jump, 1);
}

static struct sigaction previous_actions[NSIG];
/* Faults of the instruction stream: always the running code's own. */
static const int synchronous_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
/* Signals that end a process by default: the running code's when it raised them itself
 * (raise, kill of its own process); from anyone else they keep their usual effect. */
static const int raisable_signals[] = {SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM,
                                       SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGSTKFLT, SIGPWR};

static uintptr_t context_pc(void *context) {
    return (uintptr_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
}

static void on_signal(int signal_number, siginfo_t *info, void *context) {
    int synchronous = 0;
    for (size_t i = 0; i < sizeof synchronous_signals / sizeof synchronous_signals[0]; i++) {
        if (synchronous_signals[i] == signal_number) synchronous = 1;
    }
    int raised_here = info->si_code <= 0 && info->si_pid == getpid();
    if (current_jump && (synchronous || raised_here)) {
        sigjmp_buf *target = current_jump;
        fault_code = CODE_SIGNAL;
        fault_site = -1;
        fault_signal = signal_number;
        fault_address = (uintptr_t)info->si_addr;
        fault_pc = context_pc(context);
        /* x86-64 page faults say in the error code whether the access was a write (bit 1). */
        fault_detail = signal_number == SIGSEGV ? (((ucontext_t *)context)->uc_mcontext.gregs[REG_ERR] & 2) != 0 : 0;
        siglongjmp(*target, 1);
    }
    /* Not ours: the previous handler's business. A fault re-runs its instruction under it; any
     * other signal is raised again. */
    sigaction(signal_number, &previous_actions[signal_number], NULL);
    if (!synchronous) raise(signal_number);
}

/* Executable segments of every loaded object (libc, the quasi binary, libraries): code an
 * interrupt must not jump out of. Written by the interrupting thread before it signals. */
#define MAX_FOREIGN 1024
static uintptr_t foreign_start[MAX_FOREIGN], foreign_end[MAX_FOREIGN];
static volatile sig_atomic_t foreign_count;

static int note_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    int *count = data;
    for (int i = 0; i < info->dlpi_phnum && *count < MAX_FOREIGN; i++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[i];
        if (header->p_type == PT_LOAD && (header->p_flags & PF_X)) {
            foreign_start[*count] = info->dlpi_addr + header->p_vaddr;
            foreign_end[*count] = info->dlpi_addr + header->p_vaddr + header->p_memsz;
            (*count)++;
        }
    }
    return 0;
}

static int in_foreign_code(uintptr_t pc) {
    for (int i = 0; i < foreign_count; i++) {
        if (pc >= foreign_start[i] && pc < foreign_end[i]) return 1;
    }
    return 0;
}

/* The interrupt signal: a real-time one, queued per send, unused by libc and Rust. */
int quasi_interrupt_signal(void) { return SIGRTMIN + 2; }

static void on_interrupt(int signal_number, siginfo_t *info, void *context) {
    (void)signal_number;
    (void)info;
    uintptr_t pc = context_pc(context);
    if (current_jump && interrupt_requested && !in_foreign_code(pc)) {
        sigjmp_buf *target = current_jump;
        interrupt_requested = 0;
        fault_code = CODE_INTERRUPT;
        fault_site = -1;
        fault_signal = 0;
        fault_address = 0;
        fault_pc = pc;
        fault_detail = 0;
        siglongjmp(*target, 1);
    }
}

/* Asks the executor thread to stop the compiled code it runs; called again until it stops. */
int quasi_request_interrupt(pthread_t executor) {
    int count = 0;
    dl_iterate_phdr(note_object, &count);
    foreign_count = count;
    interrupt_requested = 1;
    return pthread_kill(executor, quasi_interrupt_signal());
}

void quasi_install_fault_handlers(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof synchronous_signals / sizeof synchronous_signals[0]; i++) {
        sigaction(synchronous_signals[i], &action, &previous_actions[synchronous_signals[i]]);
    }
    for (size_t i = 0; i < sizeof raisable_signals / sizeof raisable_signals[0]; i++) {
        sigaction(raisable_signals[i], &action, &previous_actions[raisable_signals[i]]);
    }
    /* No SA_RESTART: a blocking call the compiled code made returns EINTR to it. */
    action.sa_sigaction = on_interrupt;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(quasi_interrupt_signal(), &action, NULL);
    /* glibc's fatal messages (double free…) go to standard error, where the cell shows them,
     * instead of the terminal. */
    setenv("LIBC_FATAL_STDERR_", "1", 0);
}

/* exit and its kin, abort: called by user code, they end the running cell, not the process.
 * The session links those names here; the status and which function are in the fault record. */
static void program_ended(int64_t code, int64_t which, int64_t status) {
    fault_code = code;
    fault_site = which;
    fault_signal = 0;
    fault_address = 0;
    fault_pc = 0;
    fault_detail = status;
    if (!current_jump) {
        if (code == CODE_ABORT) abort();
        _exit((int)status);
    }
    siglongjmp(*current_jump, 1);
}

void quasi_rt_exit(int status) { program_ended(CODE_EXIT, 0, status); }
void quasi_rt__exit(int status) { program_ended(CODE_EXIT, 1, status); }
void quasi_rt__Exit(int status) { program_ended(CODE_EXIT, 2, status); }
void quasi_rt_quick_exit(int status) { program_ended(CODE_EXIT, 3, status); }
void quasi_rt_abort(void) { program_ended(CODE_ABORT, 0, 0); }

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
