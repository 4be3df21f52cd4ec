//! Run: every call into compiled code goes through `Runner::call`, on one executor thread with
//! a 64 MiB stack, inside the fault guard; C stdio is flushed after each call and, when the
//! session captures output, file descriptor 1 is redirected for the call.

use std::ffi::c_void;
use std::sync::mpsc;
use std::sync::Once;
use std::thread;

/// Compiled code runs on a stack of at least this size (the language promises 64 MiB).
const STACK_SIZE: usize = 64 << 20;

extern "C" {
    fn quasi_guarded_call(entry: extern "C" fn(*mut c_void), out: *mut c_void) -> i64;
    fn quasi_fault_info(code: *mut i64, site: *mut i64, signal: *mut i64, address: *mut usize);
    fn quasi_fault(code: i64, site: i64);
    fn quasi_install_fault_handlers();
    fn quasi_prepare_thread() -> i32;
    fn quasi_rt_print(n: i32) -> i32;
    fn quasi_rt_fprint(n: f32) -> f32;
    fn quasi_rt_dprint(n: f64) -> f64;
    fn quasi_rt_ptr_print(p: *mut c_void) -> *mut c_void;
    fn quasi_rt_int64_print(n: i64) -> i64;
}

/// How a guarded call ended abnormally.
#[derive(Clone, Debug)]
pub(crate) enum Fault {
    /// A check in compiled code: the code and the fault site id.
    Check { code: u64, site: u32 },
    /// A signal (SIGSEGV…) at an address.
    Signal { signal: i32, address: usize },
}

/// What one call produced.
pub(crate) struct CallReport {
    pub result: Vec<u8>,
    pub output: Vec<u8>,
    pub errors: Vec<u8>,
    pub fault: Option<Fault>,
    /// Session memory `alloc` took during the call (top-level code).
    pub allocations: Vec<usize>,
}

type Job = Box<dyn FnOnce() + Send>;

/// The executor thread for compiled code.
pub(crate) struct Runner {
    jobs: Option<mpsc::Sender<Job>>,
    worker: Option<thread::JoinHandle<()>>,
}

/// The executor thread's stack top, to tell a stack overflow from other segmentation faults.
static STACK_TOP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a faulting address lies just beyond the executor's stack (its guard page).
pub(crate) fn is_stack_overflow(address: usize) -> bool {
    let top = STACK_TOP.load(std::sync::atomic::Ordering::Relaxed);
    let limit = top.saturating_sub(STACK_SIZE);
    top != 0 && address >= limit.saturating_sub(1 << 20) && address < limit + (1 << 16)
}

thread_local! {
    static ALLOCATIONS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

extern "C" fn session_alloc(bytes: i64) -> *mut c_void {
    // SAFETY: calloc with a positive size; a null result is handed to the program like C's.
    let pointer = unsafe { libc::calloc(1, bytes.max(1) as usize) };
    ALLOCATIONS.with(|allocations| allocations.borrow_mut().push(pointer as *const () as usize));
    pointer
}

extern "C" fn fault_trampoline(code: i64, site: i64) {
    // SAFETY: only reachable from compiled code, which runs inside a guarded call.
    unsafe { quasi_fault(code, site) }
}

extern "C" fn monotonic_nanoseconds() -> i64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec * 1_000_000_000 + now.tv_nsec
}

/// The runtime clock compiled code calls: monotonic nanoseconds (the bench loop reads it).
pub(crate) const CLOCK: &str = "quasi#now";

/// Addresses of the runtime functions compiled code may call, by link name.
pub(crate) fn runtime_symbols() -> Vec<(String, usize)> {
    vec![
        (crate::codegen::RT_FAULT.to_string(), fault_trampoline as *const () as usize),
        (crate::codegen::RT_SESSION_ALLOC.to_string(), session_alloc as *const () as usize),
        (CLOCK.to_string(), monotonic_nanoseconds as *const () as usize),
        ("quasi#print".to_string(), quasi_rt_print as *const () as usize),
        ("quasi#fprint".to_string(), quasi_rt_fprint as *const () as usize),
        ("quasi#dprint".to_string(), quasi_rt_dprint as *const () as usize),
        ("quasi#ptr_print".to_string(), quasi_rt_ptr_print as *const () as usize),
        ("quasi#int64_print".to_string(), quasi_rt_int64_print as *const () as usize),
    ]
}

/// The built-in test runtime's link name for a declaration, if it is one.
pub(crate) fn runtime_function(name: &str) -> Option<String> {
    matches!(name, "print" | "fprint" | "dprint" | "ptr_print" | "int64_print").then(|| format!("quasi#{name}"))
}

/// Finds a symbol in the running process (libc, libm, loaded libraries).
pub(crate) fn process_symbol(name: &str) -> Option<usize> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!address.is_null()).then_some(address as *const () as usize)
}

static INSTALL_HANDLERS: Once = Once::new();

impl Runner {
    pub fn new() -> std::io::Result<Runner> {
        // SAFETY: installs process-wide handlers once; they chain to the previous handlers
        // for faults outside guarded calls.
        INSTALL_HANDLERS.call_once(|| unsafe { quasi_install_fault_handlers() });
        let (sender, receiver) = mpsc::channel::<Job>();
        let worker = thread::Builder::new().name("quasi-run".into()).stack_size(STACK_SIZE).spawn(move || {
            // SAFETY: gives this thread an alternate signal stack, so stack overflows in
            // compiled code reach the handler.
            unsafe { quasi_prepare_thread() };
            let marker = 0u8;
            STACK_TOP.store(std::ptr::addr_of!(marker) as usize, std::sync::atomic::Ordering::Relaxed);
            for job in receiver {
                job();
            }
        })?;
        Ok(Runner { jobs: Some(sender), worker: Some(worker) })
    }

    /// Calls an entry `void (ptr out)` at `address` with an output buffer of `result_size`
    /// bytes. This is the one place compiled code is entered.
    pub fn call(&self, address: usize, result_size: usize, capture: bool) -> CallReport {
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let report = guarded_call(address, result_size, capture);
            let _ = done.send(report);
        });
        let sent = self.jobs.as_ref().map(|jobs| jobs.send(job));
        match (sent, result.recv()) {
            (Some(Ok(())), Ok(report)) => report,
            _ => CallReport {
                result: Vec::new(),
                output: Vec::new(),
                errors: Vec::new(),
                fault: Some(Fault::Signal { signal: 0, address: 0 }),
                allocations: Vec::new(),
            },
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// Redirects a file descriptor into a memory file for the duration of a call.
struct Capture {
    target: i32,
    saved: i32,
    file: i32,
}

thread_local! {
    /// One memory file per captured descriptor, made once per executor thread and emptied
    /// after each call: creating them per call was most of a small cell's capture cost.
    static CAPTURE_FILES: std::cell::Cell<[i32; 3]> = const { std::cell::Cell::new([-1; 3]) };
}

impl Capture {
    fn start(target: i32) -> Option<Capture> {
        let mut files = CAPTURE_FILES.with(std::cell::Cell::get);
        let slot = usize::try_from(target).ok().filter(|slot| *slot < files.len())?;
        // SAFETY: plain fd syscalls; the memory file lives for the thread, `saved` is closed in
        // `finish`.
        unsafe {
            if files[slot] < 0 {
                files[slot] = libc::memfd_create(c"quasi-output".as_ptr(), libc::MFD_CLOEXEC);
                if files[slot] < 0 {
                    return None;
                }
                CAPTURE_FILES.with(|cell| cell.set(files));
            }
            let file = files[slot];
            libc::fflush(std::ptr::null_mut());
            let saved = libc::dup(target);
            if saved < 0 || libc::dup2(file, target) < 0 {
                return None;
            }
            Some(Capture { target, saved, file })
        }
    }

    fn finish(self) -> Vec<u8> {
        let mut output = Vec::new();
        // SAFETY: restores the descriptor, reads the memory file back and empties it for the
        // next call.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::dup2(self.saved, self.target);
            libc::close(self.saved);
            let length = libc::lseek(self.file, 0, libc::SEEK_END);
            if length > 0 {
                output.resize(length as usize, 0);
                let read = libc::pread(self.file, output.as_mut_ptr().cast(), output.len(), 0);
                output.truncate(read.max(0) as usize);
                libc::ftruncate(self.file, 0);
            }
            libc::lseek(self.file, 0, libc::SEEK_SET);
        }
        output
    }
}

fn guarded_call(address: usize, result_size: usize, capture: bool) -> CallReport {
    // Eight-byte aligned, as every value type the entry may store needs at most that.
    let mut buffer = vec![0u64; result_size.div_ceil(8).max(1)];
    let (capture_out, capture_err) = if capture { (Capture::start(1), Capture::start(2)) } else { (None, None) };
    // SAFETY: `address` is an entry the session linked from a checked cell; its type is
    // `void (ptr)` by construction in codegen, and the buffer is large enough for the value
    // it stores. The guard stays armed until the call returns or faults.
    let faulted = unsafe {
        let entry: extern "C" fn(*mut c_void) = std::mem::transmute::<usize, extern "C" fn(*mut c_void)>(address);
        let faulted = quasi_guarded_call(entry, buffer.as_mut_ptr().cast()) != 0;
        libc::fflush(std::ptr::null_mut());
        faulted
    };
    let output = capture_out.map(Capture::finish).unwrap_or_default();
    let errors = capture_err.map(Capture::finish).unwrap_or_default();
    let fault = faulted.then(|| {
        let (mut code, mut site, mut signal, mut fault_address) = (0, 0, 0, 0);
        // SAFETY: reads the thread-local fault record the guard just wrote.
        unsafe { quasi_fault_info(&mut code, &mut site, &mut signal, &mut fault_address) };
        if signal != 0 {
            Fault::Signal { signal: signal as i32, address: fault_address }
        } else {
            Fault::Check { code: code as u64, site: site as u32 }
        }
    });
    let allocations = ALLOCATIONS.with(|allocations| std::mem::take(&mut *allocations.borrow_mut()));
    let result = buffer.iter().flat_map(|word| word.to_ne_bytes()).take(result_size).collect();
    CallReport { result, output, errors, fault, allocations }
}
