//! Run: every call into compiled code goes through `Runner::call`, on one executor thread with
//! a 64 MiB stack, inside the fault guard; C stdio is flushed after each call and after each
//! top-level item of batched code (`item_done`), and, when the session captures output, file
//! descriptors 1 and 2 are redirected into memory files for the call, which the caller's thread
//! reads while it waits, so output streams as it is written.

use std::ffi::c_void;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::abi::{runtime_symbol, FaultCode, GuardCode, EXITS, RT_CLOCK, RT_FAULT, RT_ITEM_DONE, RT_SESSION_ALLOC};
use crate::guard;

/// How often the waiting thread collects what a running call has written: the latency of
/// streamed output, and the rate of an idle wake-up while compiled code runs.
const STREAM_INTERVAL: Duration = Duration::from_millis(30);

/// How long the thread that waits for a call asks for its end without sleeping.
const SPIN: Duration = Duration::from_micros(50);

/// How often the interrupter looks for an interrupt request while a call runs, and sends the
/// interrupt signal again until the call stops (it is ignored outside compiled code).
const INTERRUPT_POLL: Duration = Duration::from_millis(5);

/// Compiled code runs on a stack of at least this size (the language promises 64 MiB).
const STACK_SIZE: usize = 64 << 20;

extern "C" {
    fn quasi_fault(code: i64, site: i64);
    fn quasi_rt_exit(status: i32);
    fn quasi_rt__exit(status: i32);
    fn quasi_rt__Exit(status: i32);
    fn quasi_rt_quick_exit(status: i32);
    fn quasi_rt_abort();
    fn quasi_rt_print(n: i32) -> i32;
    fn quasi_rt_fprint(n: f32) -> f32;
    fn quasi_rt_dprint(n: f64) -> f64;
    fn quasi_rt_ptr_print(p: *mut c_void) -> *mut c_void;
    fn quasi_rt_int64_print(n: i64) -> i64;
    /// C's `stdout` stream (glibc exports it as a variable).
    static stdout: *mut libc::FILE;
    // POSIX stream locks (the libc crate has no Linux binding for them).
    fn ftrylockfile(file: *mut libc::FILE) -> i32;
    fn funlockfile(file: *mut libc::FILE);
}

/// How a guarded call ended abnormally.
#[derive(Clone, Debug)]
pub(crate) enum Fault {
    /// A check in compiled code: the code (`None`: one the ABI does not know) and the fault
    /// site id.
    Check { code: Option<FaultCode>, site: u32 },
    /// A signal (SIGSEGV…) at an address, raised by the instruction at `pc`; `write` tells
    /// whether a segmentation fault was a store; `raised`, that the program sent the signal
    /// itself (`raise`, `kill`), so there is no faulting instruction.
    Signal { signal: i32, address: usize, pc: usize, write: bool, raised: bool },
    /// The user interrupted the call while compiled code at `pc` ran.
    Interrupted { pc: usize },
    /// The program called `exit` (or `_exit`, `_Exit`, `quick_exit`: the name) with a status.
    Exit { function: &'static str, status: i32 },
    /// The program called `abort`.
    Abort,
    /// The executor thread is gone.
    Lost,
}

/// What a running call did since the last look: the top-level items of batched code it
/// finished, then what it wrote to stdout and stderr (when captured), following on from the
/// bytes of the last look.
#[derive(Default)]
pub(crate) struct Progress {
    pub items: Vec<ItemDone>,
    pub output: Vec<u8>,
    pub errors: Vec<u8>,
}

impl Progress {
    fn is_empty(&self) -> bool {
        self.items.is_empty() && self.output.is_empty() && self.errors.is_empty()
    }
}

/// A top-level item of batched code finished (`abi::RT_ITEM_DONE`).
pub(crate) struct ItemDone {
    /// The bytes of its value (none without one).
    pub value: Vec<u8>,
    /// How many bytes of stdout and stderr the call had written when it finished (0 when
    /// output is not captured): what is before is the output of this item and the ones before.
    pub written: [usize; 2],
}

/// What one call produced.
pub(crate) struct CallReport {
    /// The `out` buffer after the call (what a one-item entry stored).
    pub result: Vec<u8>,
    /// What the call did that no `progress` was handed.
    pub rest: Progress,
    pub fault: Option<Fault>,
    /// Session memory `alloc` took during the call (top-level code).
    pub allocations: Vec<usize>,
}

/// What the executor tells the thread waiting for a call.
enum Message {
    /// A top-level item finished, and waits until the waiting thread has looked.
    ItemDone,
    Finished(CallReport),
}

/// The call in progress on the executor thread, for `item_done`.
struct Running {
    /// The items finished and not yet taken by the waiting thread.
    done: Arc<Mutex<Vec<ItemDone>>>,
    capture: bool,
    /// In lockstep, where to say an item is done, and where the waiting thread answers.
    lockstep: Option<(mpsc::Sender<Message>, mpsc::Receiver<()>)>,
}

thread_local! {
    static RUNNING: std::cell::RefCell<Option<Running>> = const { std::cell::RefCell::new(None) };
}

/// `abi::RT_ITEM_DONE`: on the executor thread, after each top-level item of batched code.
/// Flushes C's streams, as the end of a call does, so the item's output is all written, and
/// notes the item's value and where its output ends.
extern "C" fn item_done(value: *const u8, size: i64) {
    // SAFETY: flushes C's streams; compiled code holds no stream lock between items.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    RUNNING.with(|running| {
        let running = running.borrow();
        let Some(running) = running.as_ref() else { return };
        let size = usize::try_from(size).unwrap_or(0);
        let value = match value.is_null() || size == 0 {
            true => Vec::new(),
            // SAFETY: codegen passes the call's `out` buffer, which holds the item's value of
            // `size` bytes (the session sized it for every item's value).
            false => unsafe { std::slice::from_raw_parts(value, size) }.to_vec(),
        };
        let written = if running.capture { capture_files().written() } else { [0, 0] };
        running.done.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(ItemDone { value, written });
        if let Some((messages, answers)) = &running.lockstep {
            if messages.send(Message::ItemDone).is_ok() {
                let _ = answers.recv();
            }
        }
    });
}

type Job = Box<dyn FnOnce() + Send>;

/// The executor thread for compiled code.
pub(crate) struct Runner {
    interrupt: Arc<AtomicBool>,
    /// Started by the first call: a session that has run no code has no threads of its own,
    /// so a process may fork it (`quasi server`).
    threads: std::cell::OnceCell<Threads>,
}

/// The executor thread and its interrupter.
struct Threads {
    jobs: Option<mpsc::Sender<Job>>,
    worker: Option<thread::JoinHandle<()>>,
    /// Watches the session's interrupt flag while a call runs.
    interrupter: Interrupter,
}

/// A thread that, while a call runs and an interrupt is asked for, signals the executor every
/// `INTERRUPT_POLL` until the call ends. Its own thread, so an interrupt lands however long the
/// waiting thread spends showing output (a program flooding the terminal is what users stop).
struct Interrupter {
    /// Whether a call runs, and whether the interrupter should end.
    state: Arc<(Mutex<InterrupterState>, std::sync::Condvar)>,
    thread: Option<thread::JoinHandle<()>>,
}

#[derive(Default)]
struct InterrupterState {
    calling: bool,
    stop: bool,
}

impl Interrupter {
    fn new(executor: libc::pthread_t, interrupt: Arc<AtomicBool>) -> std::io::Result<Interrupter> {
        let state = Arc::new((Mutex::new(InterrupterState::default()), std::sync::Condvar::new()));
        let shared = Arc::clone(&state);
        let thread = thread::Builder::new().name("quasi-interrupt".into()).spawn(move || {
            let (lock, changed) = &*shared;
            let mut state = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            while !state.stop {
                state = if state.calling {
                    if interrupt.load(Ordering::SeqCst) {
                        // SAFETY: `calling` is set only while `Runner::call` waits for the
                        // executor thread, so that thread is alive; the handler only jumps out
                        // of compiled code, inside a guarded call.
                        unsafe { crate::guard::request_interrupt(executor) };
                    }
                    changed.wait_timeout(state, INTERRUPT_POLL).unwrap_or_else(|poisoned| poisoned.into_inner()).0
                } else {
                    changed.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner())
                };
            }
        })?;
        Ok(Interrupter { state, thread: Some(thread) })
    }

    fn set(&self, change: impl FnOnce(&mut InterrupterState)) {
        let (lock, changed) = &*self.state;
        change(&mut lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        changed.notify_one();
    }
}

impl Drop for Interrupter {
    fn drop(&mut self) {
        self.set(|state| state.stop = true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
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

/// Addresses of the runtime functions compiled code may call, by link name.
pub(crate) fn runtime_symbols() -> Vec<(String, usize)> {
    vec![
        (RT_FAULT.to_string(), fault_trampoline as *const () as usize),
        (RT_SESSION_ALLOC.to_string(), session_alloc as *const () as usize),
        (RT_ITEM_DONE.to_string(), item_done as *const () as usize),
        (RT_CLOCK.to_string(), monotonic_nanoseconds as *const () as usize),
        (runtime_symbol("print"), quasi_rt_print as *const () as usize),
        (runtime_symbol("fprint"), quasi_rt_fprint as *const () as usize),
        (runtime_symbol("dprint"), quasi_rt_dprint as *const () as usize),
        (runtime_symbol("ptr_print"), quasi_rt_ptr_print as *const () as usize),
        (runtime_symbol("int64_print"), quasi_rt_int64_print as *const () as usize),
        (runtime_symbol("exit"), quasi_rt_exit as *const () as usize),
        (runtime_symbol("_exit"), quasi_rt__exit as *const () as usize),
        (runtime_symbol("_Exit"), quasi_rt__Exit as *const () as usize),
        (runtime_symbol("quick_exit"), quasi_rt_quick_exit as *const () as usize),
        (runtime_symbol("abort"), quasi_rt_abort as *const () as usize),
    ]
}

impl Runner {
    /// The executor, which stops the running call when `interrupt` is set. Its threads start
    /// with the first call.
    pub fn new(interrupt: Arc<AtomicBool>) -> Runner {
        guard::install_handlers();
        Runner { interrupt, threads: std::cell::OnceCell::new() }
    }

    /// Whether the executor's threads have started (tests).
    #[cfg(test)]
    pub fn started(&self) -> bool {
        self.threads.get().is_some()
    }

    /// Starts the threads now, if they have not started.
    pub fn start(&self) -> std::io::Result<()> {
        self.threads().map(drop)
    }

    fn threads(&self) -> std::io::Result<&Threads> {
        if let Some(threads) = self.threads.get() {
            return Ok(threads);
        }
        let (sender, receiver) = mpsc::channel::<Job>();
        let worker = thread::Builder::new().name("quasi-run".into()).stack_size(STACK_SIZE).spawn(move || {
            crate::guard::prepare_thread();
            let marker = 0u8;
            STACK_TOP.store(std::ptr::addr_of!(marker) as usize, std::sync::atomic::Ordering::Relaxed);
            for job in receiver {
                job();
            }
        })?;
        let interrupter = Interrupter::new(worker.as_pthread_t(), self.interrupt.clone())?;
        Ok(self.threads.get_or_init(|| Threads { jobs: Some(sender), worker: Some(worker), interrupter }))
    }

    /// Calls entries `void (ptr out)` in order, until one faults, with one output buffer of
    /// `result_size` bytes: one item's entry, or the chunks of a cell's batched top-level code.
    /// This is the one place compiled code is entered. While the call runs, `progress` is handed
    /// what it did (every `STREAM_INTERVAL`, items finished and output when captured); the
    /// report holds the rest. In `lockstep`, each item of batched code also waits until
    /// `progress` has seen it: output that is not captured reaches the terminal directly, and
    /// must not overtake the values before it.
    pub fn call(
        &self,
        entries: &[usize],
        result_size: usize,
        capture: bool,
        lockstep: bool,
        progress: &mut dyn FnMut(Progress),
    ) -> CallReport {
        let lost = || CallReport {
            result: Vec::new(),
            rest: Progress::default(),
            fault: Some(Fault::Lost),
            allocations: Vec::new(),
        };
        let number = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
        let done = Arc::new(Mutex::new(Vec::new()));
        let (messages, received) = mpsc::channel();
        let (answer, answers) = mpsc::channel();
        let running =
            Running { done: Arc::clone(&done), capture, lockstep: lockstep.then(|| (messages.clone(), answers)) };
        let entries = entries.to_vec();
        let job: Job = Box::new(move || {
            RUNNING.with(|slot| *slot.borrow_mut() = Some(running));
            let mut report = guarded_call(&entries, result_size, capture.then_some(number));
            let running = RUNNING.with(|slot| slot.borrow_mut().take());
            if let Some(running) = running {
                report.rest.items =
                    std::mem::take(&mut *running.done.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
            }
            let _ = messages.send(Message::Finished(report));
        });
        let Ok(threads) = self.threads() else { return lost() };
        if !matches!(threads.jobs.as_ref().map(|jobs| jobs.send(job)), Some(Ok(()))) {
            return lost();
        }
        // Items first, then output: an item's output was written before it was noted.
        let look = || {
            let items = std::mem::take(&mut *done.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
            let (output, errors) = if capture { Capture::take_written(number) } else { Default::default() };
            Progress { items, output, errors }
        };
        // The interrupter watches only calls that run for a while: most calls are over in
        // microseconds, and waking it for each would double their cost.
        let started = std::time::Instant::now();
        let mut watched = false;
        // Most calls end within microseconds: ask again for a moment before sleeping, since a
        // wake-up costs the waiting thread tens of microseconds on a busy machine.
        let mut message = Err(mpsc::RecvTimeoutError::Timeout);
        while started.elapsed() < SPIN && matches!(message, Err(mpsc::RecvTimeoutError::Timeout)) {
            message = received.try_recv().map_err(|error| match error {
                mpsc::TryRecvError::Empty => mpsc::RecvTimeoutError::Timeout,
                mpsc::TryRecvError::Disconnected => mpsc::RecvTimeoutError::Disconnected,
            });
            std::hint::spin_loop();
        }
        let report = loop {
            let message = match std::mem::replace(&mut message, Err(mpsc::RecvTimeoutError::Timeout)) {
                Err(mpsc::RecvTimeoutError::Timeout) => received.recv_timeout(STREAM_INTERVAL),
                spun => spun,
            };
            if !watched && started.elapsed() >= STREAM_INTERVAL {
                threads.interrupter.set(|state| state.calling = true);
                watched = true;
            }
            match message {
                Ok(Message::Finished(report)) => break report,
                Ok(Message::ItemDone) => {
                    progress(look());
                    let _ = answer.send(());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let now = look();
                    if !now.is_empty() {
                        progress(now);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break lost(),
            }
        };
        if watched {
            threads.interrupter.set(|state| state.calling = false);
        }
        report
    }
}

impl Drop for Threads {
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
}

/// The memory files output is captured in, one per descriptor (made once: creating them per
/// call was most of a small cell's capture cost), and how much of each the waiting thread has
/// already taken. Shared by the executor thread, which redirects into them, and the thread that
/// waits for the call and reads them while it runs.
struct CaptureFiles {
    files: [i32; 3],
    taken: [usize; 3],
    /// The call (`Runner::call`'s number) whose output the files hold now; 0 between calls. A
    /// waiting thread takes output only from its own call.
    owner: u64,
}

static CAPTURE_FILES: Mutex<CaptureFiles> = Mutex::new(CaptureFiles { files: [-1; 3], taken: [0; 3], owner: 0 });

/// Numbers `Runner::call`s, for `CaptureFiles::owner`.
static NEXT_CALL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Held by a call that captures its output, from redirecting the descriptors until restoring
/// them. The descriptors and memory files are the process's: two sessions capturing at once (a
/// program embedding several, or tests running side by side) would each save the other's
/// redirection as "the original" and one would leave stdout pointing into a memory file for
/// good, the other reading its neighbour's output. So captured calls of different sessions take
/// turns; calls that do not capture never wait.
static CAPTURED_CALL: Mutex<()> = Mutex::new(());

fn capture_files() -> std::sync::MutexGuard<'static, CaptureFiles> {
    CAPTURE_FILES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CaptureFiles {
    /// How many bytes were written to stdout's and stderr's files since the call began.
    fn written(&self) -> [usize; 2] {
        [1, 2].map(|slot| {
            let file = self.files[slot];
            // SAFETY: fstat on a memory file this process owns only reads its size.
            unsafe {
                let mut status: libc::stat = std::mem::zeroed();
                match file >= 0 && libc::fstat(file, &mut status) == 0 {
                    true => usize::try_from(status.st_size).unwrap_or(0),
                    false => 0,
                }
            }
        })
    }

    /// The bytes of descriptor `slot`'s file past what was taken, now taken.
    fn take(&mut self, slot: usize) -> Vec<u8> {
        let file = self.files[slot];
        let mut bytes = Vec::new();
        if file < 0 {
            return bytes;
        }
        // SAFETY: fstat and pread on a memory file this process owns; neither moves the file
        // offset that the redirected descriptor writes at.
        unsafe {
            let mut status: libc::stat = std::mem::zeroed();
            if libc::fstat(file, &mut status) != 0 {
                return bytes;
            }
            let length = usize::try_from(status.st_size).unwrap_or(0);
            if length > self.taken[slot] {
                bytes.resize(length - self.taken[slot], 0);
                let read = libc::pread(file, bytes.as_mut_ptr().cast(), bytes.len(), self.taken[slot] as libc::off_t);
                bytes.truncate(read.max(0) as usize);
                self.taken[slot] += bytes.len();
            }
        }
        bytes
    }
}

impl Capture {
    fn start(target: i32, call: u64) -> Option<Capture> {
        let slot = usize::try_from(target).ok().filter(|slot| *slot < 3)?;
        let mut captured = capture_files();
        captured.owner = call;
        // SAFETY: plain fd syscalls; the memory file lives for the process, `saved` is closed in
        // `finish`.
        unsafe {
            if captured.files[slot] < 0 {
                captured.files[slot] = libc::memfd_create(c"quasi-output".as_ptr(), libc::MFD_CLOEXEC);
                if captured.files[slot] < 0 {
                    return None;
                }
            }
            captured.taken[slot] = 0;
            libc::fflush(std::ptr::null_mut());
            let saved = libc::dup(target);
            if saved < 0 || libc::dup2(captured.files[slot], target) < 0 {
                return None;
            }
            Some(Capture { target, saved })
        }
    }

    /// Restores the descriptor; returns what was written and not yet taken, and empties the file
    /// for the next call.
    fn finish(self) -> Vec<u8> {
        // SAFETY: flushes C's buffers into the file and restores the descriptor.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::dup2(self.saved, self.target);
            libc::close(self.saved);
        }
        let slot = self.target as usize;
        let mut captured = capture_files();
        let rest = captured.take(slot);
        // SAFETY: empties the memory file and rewinds the shared offset for the next call.
        unsafe {
            libc::ftruncate(captured.files[slot], 0);
            libc::lseek(captured.files[slot], 0, libc::SEEK_SET);
        }
        captured.taken[slot] = 0;
        captured.owner = 0;
        rest
    }

    /// On the waiting thread, while a call runs: what it wrote to stdout and stderr since the
    /// last time. C's stdout buffer (a memory file makes it fully buffered) is flushed first,
    /// but only if its lock is free: compiled code may hold it, or have faulted inside printf
    /// while holding it.
    fn take_written(call: u64) -> (Vec<u8>, Vec<u8>) {
        // SAFETY: `stdout` is C's stream; ftrylockfile never blocks, and the stream is unlocked
        // again right after the flush it allowed.
        unsafe {
            if ftrylockfile(stdout) == 0 {
                libc::fflush(stdout);
                funlockfile(stdout);
            }
        }
        let mut captured = capture_files();
        if captured.owner != call {
            // Not begun (another session's captured call still runs) or already over.
            return Default::default();
        }
        (captured.take(1), captured.take(2))
    }
}

/// Text from bytes that may end inside a UTF-8 sequence: complete text out, the incomplete tail
/// kept in `pending` for the next chunk. Invalid bytes become U+FFFD.
pub(crate) fn complete_text(pending: &mut Vec<u8>, bytes: &[u8]) -> String {
    pending.extend_from_slice(bytes);
    let cut = match std::str::from_utf8(pending) {
        Ok(_) => pending.len(),
        Err(error) if error.error_len().is_none() => error.valid_up_to(),
        Err(_) => pending.len(),
    };
    let text = String::from_utf8_lossy(&pending[..cut]).into_owned();
    pending.drain(..cut);
    text
}

/// `capture`: the call's number when its output is captured.
fn guarded_call(entries: &[usize], result_size: usize, capture: Option<u64>) -> CallReport {
    // Eight-byte aligned, as every value type the entry may store needs at most that.
    let mut buffer = vec![0u64; result_size.div_ceil(8).max(1)];
    let exclusive = capture.map(|_| CAPTURED_CALL.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    let (capture_out, capture_err) = match capture {
        Some(call) => (Capture::start(1, call), Capture::start(2, call)),
        None => (None, None),
    };
    let mut ended = Ok(());
    for &address in entries {
        // SAFETY: `address` is an entry the session linked from a checked cell; its type is
        // `void (ptr)` by construction in codegen, and the buffer is large enough for every
        // value it stores. The guard stays armed until the call returns or faults.
        ended = unsafe {
            let entry: extern "C" fn(*mut c_void) = std::mem::transmute::<usize, extern "C" fn(*mut c_void)>(address);
            guard::guarded_call(entry, buffer.as_mut_ptr().cast())
        };
        if ended.is_err() {
            break;
        }
    }
    // SAFETY: flushes C's streams, so all the call wrote reaches the capture.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    let output = capture_out.map(Capture::finish).unwrap_or_default();
    let errors = capture_err.map(Capture::finish).unwrap_or_default();
    drop(exclusive);
    let fault = ended.err().map(|record| match GuardCode::from_code(record.code) {
        Some(GuardCode::Signal) => Fault::Signal {
            signal: record.signal as i32,
            address: record.address,
            pc: record.pc,
            write: record.detail != 0,
            raised: record.site == -2,
        },
        Some(GuardCode::Interrupt) => Fault::Interrupted { pc: record.pc },
        Some(GuardCode::Exit) => {
            Fault::Exit { function: EXITS[record.site.clamp(0, 3) as usize], status: record.detail as i32 }
        }
        Some(GuardCode::Abort) => Fault::Abort,
        None => Fault::Check { code: FaultCode::from_code(record.code as u64), site: record.site as u32 },
    });
    let allocations = ALLOCATIONS.with(|allocations| std::mem::take(&mut *allocations.borrow_mut()));
    let result = buffer.iter().flat_map(|word| word.to_ne_bytes()).take(result_size).collect();
    CallReport { result, rest: Progress { items: Vec::new(), output, errors }, fault, allocations }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
