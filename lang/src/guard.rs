//! The fault guard (`csrc/guard.c`) as Rust sees it: a call behind `sigsetjmp`, from which a
//! fault, a runtime check or an interrupt returns early with a record of what happened. The
//! executor (`run`) calls compiled code through it; the back end compiles through it
//! (`guarded_here`), so that a crash in LLVM ends one compile, not the session.
//!
//! The handlers are process-wide and installed once (`install_handlers`); they act only while
//! a guarded call runs on the faulting thread, and chain to the previous handlers otherwise, so
//! a bug in Quasi still crashes loudly.

use std::ffi::c_void;
use std::sync::Once;

extern "C" {
    fn quasi_guarded_call(entry: extern "C" fn(*mut c_void), out: *mut c_void) -> i64;
    fn quasi_fault_info(
        code: *mut i64,
        site: *mut i64,
        signal: *mut i64,
        address: *mut usize,
        pc: *mut usize,
        detail: *mut i64,
    );
    fn quasi_install_fault_handlers();
    fn quasi_restore_fault_handlers() -> i32;
    fn quasi_prepare_thread() -> i32;
    fn quasi_request_interrupt(thread: libc::pthread_t) -> i32;
}

static INSTALL_HANDLERS: Once = Once::new();

/// Puts back the guard's signal handlers that were replaced since they were installed (by a
/// library's initialisers); returns how many. Only once they were installed.
pub(crate) fn restore_handlers() -> i32 {
    if !INSTALL_HANDLERS.is_completed() {
        return 0;
    }
    // SAFETY: reinstalls the handlers `install_handlers` installed.
    unsafe { quasi_restore_fault_handlers() }
}

/// Installs the guard's signal handlers, once per process.
pub(crate) fn install_handlers() {
    // SAFETY: installs process-wide handlers once; they chain to the previous handlers for
    // faults outside guarded calls.
    INSTALL_HANDLERS.call_once(|| unsafe { quasi_install_fault_handlers() });
}

/// How the last guarded call of this thread ended early, as the guard recorded it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FaultRecord {
    /// A `abi::GuardCode`, or a `abi::FaultCode` of a runtime check.
    pub code: i64,
    pub site: i64,
    pub signal: i64,
    pub address: usize,
    pub pc: usize,
    pub detail: i64,
}

/// Calls `entry(out)` behind the guard; `Err` holds how it ended early.
///
/// # Safety
/// `entry` must be safe to call with `out`; if it ends early, whatever it was doing is
/// abandoned mid-way (its frames are jumped over, nothing on them is dropped).
pub(crate) unsafe fn guarded_call(entry: extern "C" fn(*mut c_void), out: *mut c_void) -> Result<(), FaultRecord> {
    // SAFETY: the caller's promise; the guard's frame stays valid for the call's length.
    if unsafe { quasi_guarded_call(entry, out) } == 0 {
        return Ok(());
    }
    let mut record = FaultRecord::default();
    // SAFETY: reads the thread-local fault record the guard just wrote.
    unsafe {
        quasi_fault_info(
            &mut record.code,
            &mut record.site,
            &mut record.signal,
            &mut record.address,
            &mut record.pc,
            &mut record.detail,
        )
    };
    Err(record)
}

/// Gives this thread an alternate signal stack, so that a stack overflow in compiled code it
/// runs reaches the handler: every thread that runs compiled code calls it once, first.
pub(crate) fn prepare_thread() {
    // SAFETY: installs an alternate signal stack for the calling thread (leaked with it).
    unsafe { quasi_prepare_thread() };
}

/// Asks `thread` to stop the compiled code it runs in a guarded call (the guard's interrupt);
/// outside compiled code it does nothing, so callers send it again until the call ends.
///
/// # Safety
/// `thread` must be alive.
pub(crate) unsafe fn request_interrupt(thread: libc::pthread_t) {
    // SAFETY: the caller's promise.
    unsafe { quasi_request_interrupt(thread) };
}

/// Runs `work` on this thread behind the fault guard: `Err` holds how it ended early (a
/// fault, an interrupt). What `work` was changing must then be leaked, never used or freed.
pub(crate) fn guarded<T, F: FnOnce() -> T>(work: F) -> Result<T, FaultRecord> {
    struct Job<F, T> {
        work: Option<F>,
        result: Option<std::thread::Result<T>>,
    }
    extern "C" fn trampoline<F: FnOnce() -> T, T>(job: *mut c_void) {
        // SAFETY: `guarded` passes its own `Job`, alive across the call.
        let job = unsafe { &mut *(job as *mut Job<F, T>) };
        if let Some(work) = job.work.take() {
            // A panic must not unwind into the guard's C frame.
            job.result = Some(std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)));
        }
    }
    install_handlers();
    let mut job = Job { work: Some(work), result: None };
    // SAFETY: the trampoline matches the guard's entry type and takes the job it is given; a
    // job ended early is forgotten below, never dropped.
    let ended = unsafe { guarded_call(trampoline::<F, T>, (&mut job as *mut Job<F, T>).cast()) };
    if let Err(record) = ended {
        // The work's state was left mid-way: forgotten, not dropped.
        std::mem::forget(job);
        return Err(record);
    }
    match job.result {
        Some(Ok(value)) => Ok(value),
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        None => Err(FaultRecord::default()),
    }
}

/// Runs `work` on this thread behind the fault guard, for LLVM's code generation (on the
/// session's thread, or the background compiler's): LLVM's back ends crash on some inputs
/// (NVPTX's SeparateConstOffsetFromGEP on one kernel), and a crash then ends `work`, not the
/// session. `Err` holds the signal. What `work` was changing must then be leaked, never used
/// or freed.
pub(crate) fn guarded_here<T, F: FnOnce() -> T>(work: F) -> Result<T, i32> {
    guarded(work).map_err(|record| record.signal as i32)
}

/// A signal's conventional name (SIGTERM), or its number.
pub(crate) fn signal_name(signal: i32) -> String {
    let names = [
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGSTKFLT, "SIGSTKFLT"),
        (libc::SIGPWR, "SIGPWR"),
        (libc::SIGSYS, "SIGSYS"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGINT, "SIGINT"),
    ];
    names.iter().find(|(number, _)| *number == signal).map_or_else(|| format!("{signal}"), |(_, name)| name.to_string())
}
