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
 * no lock of libc's or ours. Anywhere else (libc, a blocking system call, the Rust runtime) it
 * makes the call return into a landing instead of into compiled code (see plant_landing), and
 * blocking calls return EINTR; the interrupting thread sends the signal again every few
 * milliseconds until the call ends. Compiled code pays nothing for it. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <ucontext.h>
#include <unistd.h>

static __thread sigjmp_buf *current_jump;
/* The guarded call's own frame: an interrupt looks for compiled code's return addresses only
 * below it. */
static __thread uintptr_t guarded_frame;
/* Whether an interrupt replaced a return address (plant_landing), and the one it replaced. */
static __thread int landing_planted;
/* The top of the GPU simulator's fiber the executor runs on (0: none): an interrupt there
 * looks for a return address only up to it, never past the fiber's own stack. */
static __thread uintptr_t fiber_top;
static __thread uintptr_t landing_pc;
static __thread int64_t fault_code;
static __thread int64_t fault_site;
static __thread int64_t fault_signal;
static __thread uintptr_t fault_address;
/* The instruction a signal or interrupt stopped; for a segmentation fault, whether it wrote. */
static __thread uintptr_t fault_pc;
static __thread int64_t fault_detail;

/* Fault codes of the guard itself (compiled code's checks use small codes, codegen's FAULT_*). */
enum { CODE_SIGNAL = 100, CODE_INTERRUPT = 101, CODE_EXIT = 102, CODE_ABORT = 103 };

/* An interrupt was asked for and the thread it is for has not stopped yet. */
static volatile sig_atomic_t interrupt_requested;
/* The thread an interrupt is for: the session's executor, or a GPU simulator worker that a
 * reset stops. Other threads' guarded calls leave the request alone. */
static volatile pthread_t interrupt_target;

int64_t quasi_guarded_call(void (*entry)(void *), void *out) {
    sigjmp_buf buffer;
    sigjmp_buf *previous = current_jump;
    uintptr_t previous_frame = guarded_frame;
    if (sigsetjmp(buffer, 1) == 0) {
        if (pthread_equal(interrupt_target, pthread_self())) interrupt_requested = 0;
        landing_planted = 0;
        guarded_frame = (uintptr_t)&buffer;
        current_jump = &buffer;
        entry(out);
        current_jump = previous;
        guarded_frame = previous_frame;
        return 0;
    }
    current_jump = previous;
    guarded_frame = previous_frame;
    fiber_top = 0;
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

/* Records how the guarded call ended and jumps back to it (the caller checked there is one). */
__attribute__((noreturn)) static void end_call(int64_t code, int64_t site, int64_t signal_number, uintptr_t address, uintptr_t pc,
                     int64_t detail) {
    fault_code = code;
    fault_site = site;
    fault_signal = signal_number;
    fault_address = address;
    fault_pc = pc;
    fault_detail = detail;
    siglongjmp(*current_jump, 1);
}

/* Called by compiled code (division checks, unresolved or invalidated functions). */
void quasi_fault(int64_t code, int64_t site) {
    if (!current_jump) {
        fprintf(stderr, "quasi: runtime fault %" PRId64 " outside a guarded call\n", code);
        abort();
    }
    end_call(code, site, 0, 0, 0, 0);
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
        /* x86-64 page faults say in the error code whether the access was a write (bit 1). */
        int64_t wrote = signal_number == SIGSEGV && (((ucontext_t *)context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
        /* Site -2: raised by the program (raise, kill), not by an instruction. */
        end_call(CODE_SIGNAL, raised_here ? -2 : -1, signal_number, (uintptr_t)info->si_addr, context_pc(context),
                 wrote);
    }
    /* Not ours: the previous handler's business. A fault re-runs its instruction under it; any
     * other signal is raised again. */
    sigaction(signal_number, &previous_actions[signal_number], NULL);
    if (!synchronous) raise(signal_number);
}

/* Where compiled code lies: each session's code memory, [start, end) of pages that are always
 * readable (ends only grow; a session's entry is cleared before its memory is unmapped). */
#define MAX_CODE_RANGES 256
static _Atomic uintptr_t code_start[MAX_CODE_RANGES], code_end[MAX_CODE_RANGES];

void quasi_code_range(uintptr_t start, uintptr_t end) {
    for (int i = 0; i < MAX_CODE_RANGES; i++) {
        if (atomic_load(&code_start[i]) == start) {
            if (end == 0) {
                code_end[i] = 0;
                atomic_store(&code_start[i], 0);
            } else {
                code_end[i] = end;
            }
            return;
        }
    }
    if (end == 0) return;
    /* Sessions start and end on several threads at once (tests, notebooks): a slot is claimed
     * with a compare-and-swap, so two sessions never take the same one (one would lose its
     * range, and interrupts would never find its code). Its end is 0 until written. */
    for (int i = 0; i < MAX_CODE_RANGES; i++) {
        uintptr_t empty = 0;
        if (atomic_compare_exchange_strong(&code_start[i], &empty, start)) {
            code_end[i] = end;
            return;
        }
    }
}

static int in_code(uintptr_t address) {
    for (int i = 0; i < MAX_CODE_RANGES; i++) {
        uintptr_t start = code_start[i];
        if (start != 0 && address >= start && address < code_end[i]) return 1;
    }
    return 0;
}

/* Whether a word on the stack is a return address into compiled code: it points just past a
 * call instruction there (call rel32, or call through a register or memory operand). */
static int is_return_address(uintptr_t value) {
    if (!in_code(value) || !in_code(value - 6)) return 0;
    const unsigned char *p = (const unsigned char *)value;
    if (p[-5] == 0xE8) return 1;
    if (p[-6] == 0xFF && p[-5] == 0x15) return 1;
    if (p[-2] == 0xFF && (p[-1] & 0x38) == 0x10 && ((p[-1] & 0xC0) == 0xC0 || ((p[-1] & 0xC0) == 0 && (p[-1] & 7) != 4 && (p[-1] & 7) != 5)))
        return 1;
    if (p[-3] == 0xFF && (p[-2] & 0xF8) == 0x50 && (p[-2] & 7) != 4) return 1;
    return 0;
}

/* An interrupt that found the executor outside compiled code (in libc, blocked in a system
 * call, in the runtime) replaces the return address into compiled code nearest the stack
 * pointer by this landing: the call finishes normally, holding no lock, and its return lands
 * here instead, which ends the guarded call as interrupted. */
__asm__(".text\n"
        ".globl quasi_interrupt_landing\n"
        ".type quasi_interrupt_landing,@function\n"
        "quasi_interrupt_landing:\n"
        "    andq $-16, %rsp\n"
        "    call quasi_interrupted_on_return\n"
        "    ud2\n");
void quasi_interrupt_landing(void);

void quasi_interrupted_on_return(void) {
    if (!current_jump) abort();
    interrupt_requested = 0;
    end_call(CODE_INTERRUPT, -1, 0, 0, landing_pc, 0);
}

/* How far above the stack pointer an interrupt looks for the return into compiled code. */
#define LANDING_SCAN_WORDS 16384

void quasi_set_fiber_stack(uintptr_t top) { fiber_top = top; }

static void plant_landing(uintptr_t stack_pointer) {
    uintptr_t *word = (uintptr_t *)stack_pointer;
    uintptr_t limit = fiber_top ? fiber_top : guarded_frame;
    for (int i = 0; i < LANDING_SCAN_WORDS && (uintptr_t)&word[i] < limit; i++) {
        if (is_return_address(word[i])) {
            landing_pc = word[i];
            landing_planted = 1;
            word[i] = (uintptr_t)quasi_interrupt_landing;
            return;
        }
    }
}

/* The interrupt signal: a real-time one, queued per send, unused by libc and Rust. */
int quasi_interrupt_signal(void) { return SIGRTMIN + 2; }

static void on_interrupt(int signal_number, siginfo_t *info, void *context) {
    (void)signal_number;
    (void)info;
    if (!current_jump || !interrupt_requested || !pthread_equal(interrupt_target, pthread_self())) return;
    uintptr_t pc = context_pc(context);
    if (in_code(pc)) {
        interrupt_requested = 0;
        end_call(CODE_INTERRUPT, -1, 0, 0, pc, 0);
    }
    if (!landing_planted) plant_landing((uintptr_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RSP]);
}

/* Asks the executor thread to stop the compiled code it runs; called again until it stops. */
int quasi_request_interrupt(pthread_t executor) {
    interrupt_target = executor;
    interrupt_requested = 1;
    return pthread_kill(executor, quasi_interrupt_signal());
}

/* The guard's flags: the fault handler may run again within itself; the interrupt's has no
 * SA_RESTART, so a blocking call the compiled code made returns EINTR to it. */
#define FAULT_FLAGS (SA_SIGINFO | SA_ONSTACK | SA_NODEFER)
#define INTERRUPT_FLAGS (SA_SIGINFO | SA_ONSTACK)

/* Sets `handler` for `signal_number`, keeping the handler it replaces in `previous` (if given);
 * with `only_replaced`, leaves a signal whose handler is `handler` already alone. Returns 1 if
 * it set the handler. */
static int set_handler(int signal_number, void (*handler)(int, siginfo_t *, void *), int flags,
                       struct sigaction *previous, int only_replaced) {
    struct sigaction action, current;
    if (only_replaced && sigaction(signal_number, NULL, &current) == 0 && current.sa_sigaction == handler) return 0;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    sigaction(signal_number, &action, previous);
    return 1;
}

/* Sets the guard's handlers; see `set_handler` for `only_replaced`. Returns how many it set. */
static int set_guard_handlers(int only_replaced) {
    int set = 0;
    /* The first handlers are kept, to chain to; later ones are a library's, not kept. */
    for (size_t i = 0; i < sizeof synchronous_signals / sizeof synchronous_signals[0]; i++) {
        int signal_number = synchronous_signals[i];
        set += set_handler(signal_number, on_signal, FAULT_FLAGS, only_replaced ? NULL : &previous_actions[signal_number],
                           only_replaced);
    }
    for (size_t i = 0; i < sizeof raisable_signals / sizeof raisable_signals[0]; i++) {
        int signal_number = raisable_signals[i];
        set += set_handler(signal_number, on_signal, FAULT_FLAGS, only_replaced ? NULL : &previous_actions[signal_number],
                           only_replaced);
    }
    set += set_handler(quasi_interrupt_signal(), on_interrupt, INTERRUPT_FLAGS, NULL, only_replaced);
    return set;
}

void quasi_install_fault_handlers(void) {
    set_guard_handlers(0);
    /* glibc's fatal messages (double free…) go to standard error, where the cell shows them,
     * instead of the terminal. */
    setenv("LIBC_FATAL_STDERR_", "1", 0);
}

/* Puts back the guard's handlers that something (a library's initialisers) replaced, keeping
 * the first handlers it chains to; returns how many were replaced. */
int quasi_restore_fault_handlers(void) {
    return set_guard_handlers(1);
}

/* exit and its kin, abort: called by user code, they end the running cell, not the process.
 * The session links those names here; the status and which function are in the fault record. */
static void program_ended(int64_t code, int64_t which, int64_t status) {
    if (!current_jump) {
        if (code == CODE_ABORT) abort();
        _exit((int)status);
    }
    end_call(code, which, 0, 0, 0, status);
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
