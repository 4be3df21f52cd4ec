//! Where launches run, as a trait: `Device`, which the CUDA device (`cuda`) and the simulator
//! (`sim`) implement, and the plain data its operations take — memory, copies, launches,
//! submissions and their fences, the timing rows they record. The runtime (`runtime`) holds one of each and asks the one `:gpu`
//! chose; no operation asks which one it has.
//!
//! Every operation but `submit` is synchronous: the work is done (and timed, by CUDA events
//! on the device, by the clock in the simulator) when it returns. A device keeps its own state
//! behind its own lock, taken only to read or record bookkeeping: never while it touches the
//! program's memory or runs a kernel, which may fault and leave by the guard's long jump.
//! Asynchronous submissions (docs/language.md §7.8, `submit`) run on the device's queues (a
//! CUDA stream; a simulator worker) and record the same rows, on their own lanes: a device runs
//! a submission's commands (checked and resolved to addresses by the runtime) in order,
//! concurrently with the host and with its other submissions, and ends its `Fence`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::source::Span;
use crate::timing::{DeviceTiming, Lane};

/// Where GPU forms run: on the CUDA device, or in the simulator (`:gpu sim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The CUDA device (the default).
    Device,
    /// The CPU simulator.
    Sim {
        /// Loads, stores and barriers are checked.
        check: bool,
    },
}

impl Mode {
    /// The names `QUASI_GPU` and `quasi --gpu` take, for messages.
    pub const NAMES: &'static str = "sim, sim-unchecked or device";

    /// The mode a name of `NAMES` stands for.
    pub fn from_name(name: &str) -> Option<Mode> {
        match name {
            "sim" => Some(Mode::Sim { check: true }),
            "sim-unchecked" => Some(Mode::Sim { check: false }),
            "device" => Some(Mode::Device),
            _ => None,
        }
    }

    /// The mode `QUASI_GPU` asks for: `sim`, `sim-unchecked` or `device`.
    pub(crate) fn from_environment() -> Result<Option<Mode>, String> {
        match std::env::var("QUASI_GPU") {
            Err(_) => Ok(None),
            Ok(value) if value.is_empty() => Ok(None),
            Ok(value) => match Mode::from_name(&value) {
                Some(mode) => Ok(Some(mode)),
                None => Err(format!("QUASI_GPU is `{value}`; it may be {}", Mode::NAMES)),
            },
        }
    }
}

/// Device memory a device made: its address, and the device's epoch when it was made (a CUDA
/// context reset after a kernel fault starts a new epoch, and older memory is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Memory {
    pub address: u64,
    pub epoch: u64,
}

/// Which way a copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyKind {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

impl CopyKind {
    /// The label of its timing row.
    pub(crate) fn label(self) -> &'static str {
        match self {
            CopyKind::HostToDevice => "h2d",
            CopyKind::DeviceToHost => "d2h",
            CopyKind::DeviceToDevice => "d2d",
        }
    }
}

/// A copy of `bytes` from `source` to `target`; the device's side was checked against its
/// buffer, the host's side is the program's pointer, trusted as C's `memcpy` trusts it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Copy {
    pub kind: CopyKind,
    pub target: u64,
    pub source: u64,
    pub bytes: u64,
}

impl Copy {
    /// The host memory the copy uses and whether the device writes it.
    pub(crate) fn host_side(&self) -> Option<(u64, bool)> {
        match self.kind {
            CopyKind::HostToDevice => Some((self.source, false)),
            CopyKind::DeviceToHost => Some((self.target, true)),
            CopyKind::DeviceToDevice => None,
        }
    }
}

/// A launch of a kernel the device has code for: its grid and block (checked against CUDA's
/// limits), a value per parameter, and the bytes its annotations move (for GB/s).
pub(crate) struct Launch<'a> {
    pub name: &'a str,
    pub dimensions: [i64; 6],
    pub values: &'a [u64],
    pub bytes: Option<u64>,
    /// Whether to stop waiting for the kernel (the session's interrupt): the CUDA device then
    /// gives the GPU up for the process (a running kernel cannot be stopped short of ending it).
    /// The simulator is interrupted by a signal instead.
    pub give_up: &'a dyn Fn() -> bool,
}

/// Why a device operation failed: the message, for the simulator the source of the access or
/// barrier it names (and of a race's other access, with its label), and whether the device is
/// missing altogether (the session then says how to work without one).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct DeviceError {
    pub message: String,
    pub site: Option<Span>,
    pub also: Option<(Span, &'static str)>,
    pub unavailable: bool,
}

impl DeviceError {
    /// The device is missing: no CUDA driver, no device, or a reset that failed.
    pub(crate) fn unavailable(message: String) -> DeviceError {
        DeviceError { message, site: None, also: None, unavailable: true }
    }
}

impl From<String> for DeviceError {
    fn from(message: String) -> DeviceError {
        DeviceError { message, site: None, also: None, unavailable: false }
    }
}

/// Where launches run. Implemented by `cuda::CudaDevice` and `sim::SimDevice`.
pub(crate) trait Device: Send + Sync {
    /// Where its memory lives, for messages: "on the device", "in the simulator".
    fn place(&self) -> &'static str;
    /// What `:gpu` says of it (the CUDA device waits for the driver's start-up).
    fn describe(&self) -> String;
    /// `bytes` of zeroed memory; `what` names it in the simulator's reports.
    fn alloc(&self, bytes: u64, what: String) -> Result<Memory, DeviceError>;
    /// Gives back memory `alloc` made.
    fn free(&self, memory: Memory) -> Result<(), DeviceError>;
    /// Whether memory it made is gone: a kernel fault reset the GPU since.
    fn is_lost(&self, memory: Memory) -> bool;
    /// Copies, and records the copy's timing row.
    fn copy(&self, copy: Copy) -> Result<(), DeviceError>;
    /// Reads device memory for the session (printing a buffer): untimed, recorded nowhere.
    fn read(&self, address: u64, bytes: u64) -> Result<Vec<u8>, DeviceError>;
    /// Readies `name`'s code for a launch, before its arguments are staged: the CUDA device
    /// loads its module (a timing row); `Err` says why it cannot run here.
    fn prepare(&self, name: &str) -> Result<(), DeviceError>;
    /// Runs a kernel over its grid and waits for it; records its timing rows (a module load
    /// first, when the CUDA device loads one).
    fn launch(&self, launch: &Launch<'_>) -> Result<(), DeviceError>;
    /// Whether it can take work (the CUDA device waits for the driver's start-up); `Err`
    /// says why not.
    fn available(&self) -> Result<(), DeviceError>;
    /// Starts a submission (docs/language.md §7.8): its commands run in order, concurrently
    /// with the host and with other submissions, each recording a row on the submission's
    /// lane; its fence ends when they have. Kernels it calls were readied by `prepare`.
    /// As on CUDA, a copy from other host memory than `host-alloc`'s (pageable memory) reads
    /// it at `submit`, and one to it makes `submit` return only when it ran; `give_up` (an
    /// interrupt) ends that wait early.
    fn submit(&self, submission: Submission, give_up: &dyn Fn() -> bool) -> Result<(), DeviceError>;
    /// Looks at running submissions, ending the fences of those that ended (the simulator's
    /// workers end theirs themselves); returns how soon a waiter should look again.
    fn poll(&self) -> Duration;
    /// `bytes` of page-locked host memory (`host-alloc`), zeroed; lives until `host_free`.
    fn host_alloc(&self, bytes: u64) -> Result<u64, DeviceError>;
    /// Gives back memory `host_alloc` made; no running submission uses it (the runtime saw).
    fn host_free(&self, address: u64);
    /// Stops every submission (a reset, the session's end): commands not started never run,
    /// running ones end; returns when none runs.
    fn stop_submissions(&self);
}

/// The timing rows of device work, in the order it ran: a device records, the session takes
/// them after a cell's code ran (`:time`, bench reports).
#[derive(Clone, Default)]
pub(crate) struct Rows(Arc<Mutex<Vec<DeviceTiming>>>);

impl Rows {
    /// Records a row of work the host waited for while code ran, which ended now.
    pub(crate) fn record(&self, label: String, duration: Duration, bytes: Option<u64>, detail: String) {
        let start = Instant::now().checked_sub(duration);
        self.record_on(Lane::Host, start, label, duration, bytes, detail);
    }

    /// Records a row of work on `lane` that began at `start`.
    pub(crate) fn record_on(
        &self,
        lane: Lane,
        start: Option<Instant>,
        label: String,
        duration: Duration,
        bytes: Option<u64>,
        detail: String,
    ) {
        let row = DeviceTiming { label, duration, bytes, detail, during_run: true, lane, start };
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(row);
    }

    /// Records a copy that took `elapsed`: its bytes and the rate they moved through memory at.
    pub(crate) fn record_copy(&self, copy: &Copy, elapsed: Duration) {
        self.record(copy.kind.label().into(), elapsed, Some(copy.bytes), copy_detail(copy, elapsed));
    }

    /// The rows recorded since the last call.
    pub(crate) fn take(&self) -> Vec<DeviceTiming> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// A rate as a timing row spells it.
pub(crate) fn gb_per_second(bytes: u64, duration: Duration) -> String {
    format!("{:.1} GB/s", bytes as f64 / duration.as_secs_f64().max(1e-12) / 1e9)
}

/// What a copy's row says besides its bytes: the rate they moved through memory at.
pub(crate) fn copy_detail(copy: &Copy, elapsed: Duration) -> String {
    gb_per_second(moved_bytes(copy), elapsed)
}

/// The bytes a copy moves through memory (a copy within the device reads and writes each).
fn moved_bytes(copy: &Copy) -> u64 {
    match copy.kind {
        CopyKind::DeviceToDevice => 2 * copy.bytes,
        CopyKind::HostToDevice | CopyKind::DeviceToHost => copy.bytes,
    }
}

/// One command of a submission.
pub(crate) enum Command {
    /// A copy, as `Device::copy` makes it.
    Copy(Copy),
    /// A launch of a kernel the device has code for (`Device::prepare` readied it), with a
    /// value per parameter (buffers resolved to their addresses) and the bytes its annotations
    /// say it moves (for GB/s).
    Call { name: String, dimensions: [i64; 6], values: Vec<u64>, bytes: Option<u64> },
}

impl Command {
    /// Its timing row's label: `h2d`, `kernel NAME`…
    pub(crate) fn label(&self) -> String {
        match self {
            Command::Copy(copy) => copy.kind.label().to_string(),
            Command::Call { name, .. } => format!("kernel {name}"),
        }
    }
}

/// A submission: its number (the lane of its timing rows), its commands, and its fence.
pub(crate) struct Submission {
    pub id: u64,
    pub commands: Vec<Command>,
    pub fence: Arc<Fence>,
}

/// How a submission ended, until an `await` takes it, and whether a stop was asked for.
#[derive(Default)]
struct Outcome {
    failure: Option<DeviceError>,
    /// Asked to stop (a reset): commands not started never run.
    cancel: bool,
}

/// A submission's fence, shared by the device that runs it and the runtime that awaits it:
/// how many commands finished and whether it ended (read without a lock, so a waiter can spin
/// on them), and its outcome.
#[derive(Default)]
pub(crate) struct Fence {
    finished_commands: AtomicUsize,
    ended: AtomicBool,
    outcome: Mutex<Outcome>,
    changed: Condvar,
}

/// The longest a wait sleeps before it looks whether it should give up.
const WAIT_SLICE: Duration = Duration::from_millis(10);
/// How long a wait spins before it sleeps: waking a sleeping thread costs tens of µs, more than
/// a short submission takes.
const WAIT_SPIN: Duration = Duration::from_micros(50);

impl Fence {
    pub(crate) fn new() -> Arc<Fence> {
        Arc::new(Fence::default())
    }

    fn lock(&self) -> MutexGuard<'_, Outcome> {
        self.outcome.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One more command finished.
    pub(crate) fn command_finished(&self) {
        self.finished_commands.fetch_add(1, Ordering::SeqCst);
        let _ordered = self.lock();
        self.changed.notify_all();
    }

    /// The submission ended: every command ran, or the first failure (or a cancel) stopped it.
    pub(crate) fn end(&self, outcome: Result<(), DeviceError>) {
        let mut locked = self.lock();
        locked.failure = outcome.err();
        self.ended.store(true, Ordering::SeqCst);
        drop(locked);
        self.changed.notify_all();
    }

    /// Whether the submission ended.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Asks the device to stop the submission: commands not started never run.
    pub(crate) fn cancel(&self) {
        self.lock().cancel = true;
    }

    /// Whether a cancel was asked for.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.lock().cancel
    }

    /// Waits until the submission ended or, with `commands`, finished that many commands.
    /// `poll` lets the device look at its queues (the CUDA device ends fences when it polls)
    /// and says how long to sleep before the next look. It spins first, then sleeps; between
    /// looks, `give_up` says whether to stop waiting (an interrupt), and then `wait` returns
    /// `false`.
    pub(crate) fn wait(
        &self,
        commands: Option<usize>,
        poll: &dyn Fn() -> Duration,
        give_up: &dyn Fn() -> bool,
    ) -> bool {
        let reached = || {
            self.ended.load(Ordering::SeqCst)
                || commands.is_some_and(|count| self.finished_commands.load(Ordering::SeqCst) >= count)
        };
        let spin_until = Instant::now() + WAIT_SPIN;
        loop {
            let slice = poll().min(WAIT_SLICE);
            if reached() {
                return true;
            }
            if Instant::now() < spin_until {
                std::hint::spin_loop();
                continue;
            }
            if give_up() {
                return false;
            }
            let locked = self.lock();
            if reached() {
                return true;
            }
            drop(self.changed.wait_timeout(locked, slice).unwrap_or_else(std::sync::PoisonError::into_inner));
        }
    }

    /// The failure that ended the submission, once (an `await` reports it; a second `await`
    /// of the fence finds nothing).
    pub(crate) fn take_failure(&self) -> Option<DeviceError> {
        self.lock().failure.take()
    }
}

/// Runs a submission's commands in order on the calling thread with `run`, finishing each on
/// the fence and stopping at the first failure or a cancel; then ends the fence. Both devices'
/// queues use it.
pub(crate) fn run_commands(
    submission: &Submission,
    mut run: impl FnMut(usize, &Command) -> Result<(), DeviceError>,
) -> Result<(), DeviceError> {
    for (index, command) in submission.commands.iter().enumerate() {
        if submission.fence.is_cancelled() {
            return Err(cancelled(submission.id));
        }
        run(index, command).map_err(|error| DeviceError {
            message: format!(
                "submission {}, command {} ({}): {}",
                submission.id,
                index + 1,
                command.label(),
                error.message
            ),
            ..error
        })?;
        submission.fence.command_finished();
    }
    Ok(())
}

/// The failure of a cancelled submission.
pub(crate) fn cancelled(id: u64) -> DeviceError {
    format!("submission {id} was cancelled (the session was reset) before it finished").into()
}
