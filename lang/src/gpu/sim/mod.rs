//! The GPU simulator (`:gpu sim`) as a `Device`: its memory is host memory with red zones
//! (`executor::Allocation`), copies are `memcpy`s timed by the clock, and a launch runs the
//! kernel's build for the host (`build`) on the executor (`executor`), which checks every
//! access against the memory this device made when checking is on. Submissions (§7.8) run on
//! device workers (`queue`), each with an executor of its own, every command behind the fault
//! guard; `host-alloc` memory and the protection of its pages are `host`'s.
//!
//! The device's locks guard its tables (allocations, kernels, host memory) and are never held
//! while a copy touches the program's memory or a kernel runs: a fault there leaves by the
//! guard's long jump.

pub(crate) mod build;
mod executor;
mod facts;
mod host;
mod proofs;
mod queue;
mod races;
#[cfg(test)]
mod tests;
mod warp;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) use executor::{
    runtime_check, runtime_fault, runtime_sync, runtime_warp, Allocation, SimKernel, THREAD_STACK,
};

use super::device::{
    copy_detail, run_commands, Command, Copy, CopyKind, Device, DeviceError, Launch, Memory, Rows, Submission,
};
use crate::guard::FaultRecord;
use crate::timing::Lane;
use executor::{Region, Simulator};
use host::HostMemories;
use queue::Workers;

/// How soon a waiter looks again: the workers end fences themselves, so only to see an
/// interrupt.
const POLL: Duration = Duration::from_millis(10);

struct State {
    /// The memory this device made, by address, with what it is (for the checks' reports).
    allocations: BTreeMap<u64, (Allocation, String)>,
    /// The build of every launched function, or why it has none.
    kernels: HashMap<String, Result<Arc<SimKernel>, String>>,
}

/// What the device shares with its workers.
struct Shared {
    state: Mutex<State>,
    /// `host-alloc` memory, and its pages running submissions protect.
    hosts: Mutex<HostMemories>,
    rows: Rows,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn hosts(&self) -> MutexGuard<'_, HostMemories> {
        self.hosts.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a kernel on `executor` (the session's, or a worker's) and records its row on
    /// `lane`.
    fn run_kernel(
        &self,
        executor: &Simulator,
        lane: Lane,
        launch: &Launch<'_>,
        kernel: &Arc<SimKernel>,
    ) -> Result<(), DeviceError> {
        let regions: Vec<Region> = self
            .lock()
            .allocations
            .values()
            .map(|(memory, what)| Region {
                start: memory.start(),
                end: memory.start() + memory.len(),
                what: what.clone(),
            })
            .collect();
        // No lock is held while the kernel runs: a fault or an interrupt leaves by a long jump.
        let start = Instant::now();
        let ran = executor.launch(launch.name, kernel, launch.dimensions, launch.values, regions).map_err(|error| {
            DeviceError { message: error.message, site: error.site, also: error.also, unavailable: false }
        })?;
        let [gx, gy, gz, bx, by, bz] = launch.dimensions;
        let detail = format!("simulated: grid ({gx}, {gy}, {gz}) block ({bx}, {by}, {bz})");
        let label = format!("kernel {}", launch.name);
        self.rows.record_on(lane, Some(start), label, ran.duration, launch.bytes, detail);
        Ok(())
    }
}

/// The simulator of one session.
pub(crate) struct SimDevice {
    /// First, so that it is dropped (its workers stopped and joined) before anything they use.
    workers: Workers,
    executor: Box<Simulator>,
    shared: Arc<Shared>,
    /// Whether launches check accesses and barriers (`:gpu sim` against `:gpu sim unchecked`):
    /// what its builds do, and what `:gpu` says; submissions then check the host's accesses.
    checked: AtomicBool,
}

/// A command as a worker runs it: a copy through the device's view of `host-alloc` memory,
/// or from bytes of other host memory read when it was submitted; a kernel resolved then.
enum Step {
    /// `translated`: the host side is the device's view of `host-alloc` memory.
    Copy {
        copy: Copy,
        staged: Option<Vec<u8>>,
        translated: bool,
    },
    Call {
        kernel: Arc<SimKernel>,
    },
}

impl SimDevice {
    pub(crate) fn new(rows: Rows) -> SimDevice {
        let state = State { allocations: BTreeMap::new(), kernels: HashMap::new() };
        let shared = Shared { state: Mutex::new(state), hosts: Mutex::new(HostMemories::default()), rows };
        SimDevice {
            workers: Workers::default(),
            executor: Simulator::new(),
            shared: Arc::new(shared),
            checked: AtomicBool::new(true),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Turns checking on or off (`:gpu sim [unchecked]`).
    pub(crate) fn set_checked(&self, checked: bool) {
        self.checked.store(checked, Ordering::Relaxed);
    }

    /// Registers the build of a launched function (or why it has none); returns the build it
    /// replaces.
    pub(crate) fn install(&self, name: &str, kernel: Result<Arc<SimKernel>, String>) -> Option<Arc<SimKernel>> {
        self.lock().kernels.insert(name.to_string(), kernel).and_then(Result::ok)
    }

    /// Whether a segmentation fault at `address` was a simulated thread's stack overflow.
    pub(crate) fn is_stack_overflow(&self, address: usize) -> bool {
        self.executor.is_stack_overflow(address)
    }

    fn kernel(&self, name: &str) -> Result<Arc<SimKernel>, DeviceError> {
        match self.lock().kernels.get(name) {
            Some(Ok(kernel)) => Ok(kernel.clone()),
            Some(Err(message)) => Err(format!("`{name}` cannot run in the simulator: {message}").into()),
            None => Err(format!("there is no simulator build of `{name}` (a bug in Quasi)").into()),
        }
    }
}

impl Device for SimDevice {
    fn place(&self) -> &'static str {
        "in the simulator"
    }

    fn describe(&self) -> String {
        if self.checked.load(Ordering::Relaxed) {
            "GPU: the simulator (launches run on the CPU; accesses and barriers are checked)".into()
        } else {
            "GPU: the simulator (launches run on the CPU, unchecked)".into()
        }
    }

    fn alloc(&self, bytes: u64, what: String) -> Result<Memory, DeviceError> {
        let memory = Allocation::zeroed(bytes as usize)?;
        let address = memory.start() as u64;
        self.lock().allocations.insert(address, (memory, what));
        Ok(Memory { address, epoch: 0 })
    }

    fn free(&self, memory: Memory) -> Result<(), DeviceError> {
        let freed = self.lock().allocations.remove(&memory.address);
        // Dropped outside the lock.
        drop(freed);
        Ok(())
    }

    fn is_lost(&self, _memory: Memory) -> bool {
        false
    }

    fn copy(&self, copy: Copy) -> Result<(), DeviceError> {
        let start = Instant::now();
        // SAFETY: the simulator's side of the copy was bounds-checked against its buffer; like
        // C's memcpy (and the device's copies) the program's host pointer is trusted for
        // `bytes`. No lock is held: a fault here ends the call by a long jump.
        unsafe { raw_copy(copy.target, copy.source, copy.bytes) };
        self.shared.rows.record_copy(&copy, start.elapsed());
        Ok(())
    }

    fn read(&self, address: u64, bytes: u64) -> Result<Vec<u8>, DeviceError> {
        let state = self.lock();
        let inside = state.allocations.range(..=address).next_back().and_then(|(_, (memory, _))| {
            let offset = (address as usize).checked_sub(memory.start())?;
            memory.bytes().get(offset..offset.checked_add(bytes as usize)?)
        });
        inside.map(<[u8]>::to_vec).ok_or_else(|| "not in the simulator's memory".to_string().into())
    }

    fn prepare(&self, name: &str) -> Result<(), DeviceError> {
        self.kernel(name).map(drop)
    }

    fn available(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn launch(&self, launch: &Launch<'_>) -> Result<(), DeviceError> {
        let kernel = self.kernel(launch.name)?;
        self.shared.run_kernel(&self.executor, Lane::Host, launch, &kernel)
    }

    fn submit(&self, submission: Submission, give_up: &dyn Fn() -> bool) -> Result<(), DeviceError> {
        self.workers.start()?;
        let steps = self.steps(&submission)?;
        // The last copy to pageable memory: `submit` returns when it ran.
        let pageable = steps.iter().rposition(
            |step| matches!(step, Step::Copy { copy, translated: false, .. } if copy.kind == CopyKind::DeviceToHost),
        );
        let protection = if self.checked.load(Ordering::Relaxed) {
            let copies: Vec<(u64, u64, bool, String)> = submission
                .commands
                .iter()
                .enumerate()
                .filter_map(|(index, command)| match command {
                    Command::Copy(copy) => copy.host_side().map(|(address, device_writes)| {
                        (address, copy.bytes, device_writes, format!("command {}, {}", index + 1, command.label()))
                    }),
                    Command::Call { .. } => None,
                })
                .collect();
            self.shared.hosts().protect(submission.id, &copies)
        } else {
            host::Protection::default()
        };
        let shared = Arc::clone(&self.shared);
        let fence = Arc::clone(&submission.fence);
        let job = Box::new(move |executor: &Simulator| {
            let lane = Lane::Submission(submission.id);
            let outcome = run_commands(&submission, |index, command| {
                let start = Instant::now();
                match (&steps[index], command) {
                    (Step::Copy { copy, staged, .. }, _) => {
                        let source = staged.as_ref().map_or(copy.source, |bytes| bytes.as_ptr() as u64);
                        // SAFETY: as in `Device::copy`: the device side was checked, host
                        // memory is the device's view of `host-alloc` memory, bytes staged at
                        // submission, or (copies to other host memory) the program's pointer,
                        // which the host does not touch until the copy ends (`submit` waits).
                        let copied = crate::guard::guarded(|| unsafe { raw_copy(copy.target, source, copy.bytes) });
                        copied.map_err(|record| fault(executor, &record, "the copy"))?;
                        let elapsed = start.elapsed();
                        let detail = copy_detail(copy, elapsed);
                        shared.rows.record_on(lane, Some(start), command.label(), elapsed, Some(copy.bytes), detail);
                        Ok(())
                    }
                    (Step::Call { kernel }, Command::Call { name, dimensions, values, bytes }) => {
                        let launch =
                            Launch { name, dimensions: *dimensions, values, bytes: *bytes, give_up: &|| false };
                        let what = format!("kernel `{name}`");
                        crate::guard::guarded(|| shared.run_kernel(executor, lane, &launch, kernel))
                            .map_err(|record| fault(executor, &record, &what))?
                    }
                    (Step::Call { .. }, Command::Copy(_)) => {
                        Err("a command out of step (a bug in Quasi)".to_string().into())
                    }
                }
            });
            shared.hosts().unprotect(protection);
            submission.fence.end(outcome);
        });
        self.workers.push(Arc::clone(&fence), job);
        if let Some(index) = pageable {
            // An interrupt ends the wait; the cell stops when `submit` returns, and the
            // submission keeps running.
            fence.wait(Some(index + 1), &|| POLL, give_up);
        }
        Ok(())
    }

    fn poll(&self) -> Duration {
        POLL
    }

    fn host_alloc(&self, bytes: u64) -> Result<u64, DeviceError> {
        self.shared.hosts().alloc(bytes).map_err(DeviceError::from)
    }

    fn host_free(&self, address: u64) {
        self.shared.hosts().free(address);
    }

    fn stop_submissions(&self) {
        self.workers.stop();
    }
}

impl SimDevice {
    /// A submission's commands as its worker runs them: kernels resolved now (a redefinition
    /// later does not change what it runs), copies of `host-alloc` memory through the device's
    /// view, and the bytes a copy from other host memory reads, read now (as CUDA stages
    /// pageable memory when the copy is queued).
    fn steps(&self, submission: &Submission) -> Result<Vec<Step>, DeviceError> {
        let mut steps = Vec::with_capacity(submission.commands.len());
        for command in &submission.commands {
            let step = match command {
                Command::Call { name, .. } => Step::Call { kernel: self.kernel(name)? },
                Command::Copy(copy) => {
                    let mut copy = *copy;
                    let mut staged = None;
                    let mut translated = false;
                    let hosts = self.shared.hosts();
                    match copy.kind {
                        CopyKind::HostToDevice => match hosts.device_address(copy.source, copy.bytes) {
                            Some(address) => {
                                copy.source = address;
                                translated = true;
                            }
                            None => {
                                drop(hosts);
                                let mut bytes = vec![0u8; copy.bytes as usize];
                                // SAFETY: the program's pointer, trusted for `bytes` as C's
                                // memcpy trusts it; no lock is held (a fault leaves by a long
                                // jump).
                                unsafe { raw_copy(bytes.as_mut_ptr() as u64, copy.source, copy.bytes) };
                                staged = Some(bytes);
                            }
                        },
                        CopyKind::DeviceToHost => {
                            if let Some(address) = hosts.device_address(copy.target, copy.bytes) {
                                copy.target = address;
                                translated = true;
                            }
                        }
                        CopyKind::DeviceToDevice => {}
                    }
                    Step::Copy { copy, staged, translated }
                }
            };
            steps.push(step);
        }
        Ok(steps)
    }

    /// Why a host access at `address` faulted, if a running submission's protection stopped it.
    pub(crate) fn host_conflict(&self, address: usize, write: bool) -> Option<String> {
        self.shared.hosts().conflict(address, write)
    }
}

/// Copies `bytes` from `source` to `target` with C's memmove: a program's host pointer may be
/// wild, null included, and touching it must be a fault the guard reports (std's copy checks
/// its pointers in debug builds, and a null one aborts the process).
///
/// # Safety
/// As memmove: both ranges are valid for `bytes`, or the fault that follows is the guard's.
unsafe fn raw_copy(target: u64, source: u64, bytes: u64) {
    // SAFETY: the caller's promise.
    unsafe { libc::memmove(target as *mut libc::c_void, source as *const libc::c_void, bytes as usize) };
}

/// A command a fault or an interrupt ended on a worker, as an error.
fn fault(executor: &Simulator, record: &FaultRecord, what: &str) -> DeviceError {
    use crate::abi::{FaultCode, GuardCode};
    let message = match GuardCode::from_code(record.code) {
        Some(GuardCode::Interrupt) => format!("{what} was stopped (the session was reset)"),
        Some(GuardCode::Signal)
            if record.signal == i64::from(libc::SIGSEGV) && executor.is_stack_overflow(record.address) =>
        {
            format!("stack overflow in {what}, in a simulated GPU thread (its stack is {} KiB; is the recursion unbounded?)", THREAD_STACK >> 10)
        }
        Some(GuardCode::Signal) if record.signal == i64::from(libc::SIGSEGV) => {
            let access = if record.detail != 0 { "write to" } else { "read of" };
            format!("segmentation fault in {what}: {access} address {:#x}", record.address)
        }
        Some(GuardCode::Signal) => format!("{what} raised {}", crate::guard::signal_name(record.signal as i32)),
        Some(GuardCode::Exit | GuardCode::Abort) => format!("{what} ended the program"),
        None => match FaultCode::from_code(record.code as u64) {
            Some(FaultCode::DivideByZero) => format!("integer division by zero in {what}"),
            Some(FaultCode::DivideOverflow) => format!("integer overflow in division in {what}"),
            _ => format!("{what} failed a runtime check ({})", record.code),
        },
    };
    message.into()
}
