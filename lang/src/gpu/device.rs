//! Where launches run, as a trait: `Device`, which the CUDA device (`cuda`) and the simulator
//! (`sim`) implement, and the plain data its operations take — memory, copies, launches, the
//! timing rows they record. The runtime (`runtime`) holds one of each and asks the one `:gpu`
//! chose; no operation asks which one it has.
//!
//! Every operation is `&self` and synchronous: the work is done (and timed, by CUDA events on
//! the device, by the clock in the simulator) when it returns. A device keeps its own state
//! behind its own lock, taken only to read or record bookkeeping: never while it touches the
//! program's memory or runs a kernel, which may fault and leave by the guard's long jump.
//! Asynchronous submissions (docs/language.md §7.8) extend this trait with queues (a CUDA
//! stream; a simulator worker) whose commands record the same rows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::source::Span;
use crate::timing::DeviceTiming;

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

/// A launch of a kernel the device has code for: its grid and block (checked against CUDA's
/// limits), a value per parameter, and the bytes its annotations move (for GB/s).
pub(crate) struct Launch<'a> {
    pub name: &'a str,
    pub dimensions: [i64; 6],
    pub values: &'a [u64],
    pub bytes: Option<u64>,
}

/// Why a device operation failed: the message, for the simulator the source of the access or
/// barrier it names, and whether the device is missing altogether (the session then says how to
/// work without one).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct DeviceError {
    pub message: String,
    pub site: Option<Span>,
    pub unavailable: bool,
}

impl DeviceError {
    /// The device is missing: no CUDA driver, no device, or a reset that failed.
    pub(crate) fn unavailable(message: String) -> DeviceError {
        DeviceError { message, site: None, unavailable: true }
    }
}

impl From<String> for DeviceError {
    fn from(message: String) -> DeviceError {
        DeviceError { message, site: None, unavailable: false }
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
}

/// The timing rows of device work, in the order it ran: a device records, the session takes
/// them after a cell's code ran (`:time`, bench reports).
#[derive(Clone, Default)]
pub(crate) struct Rows(Arc<Mutex<Vec<DeviceTiming>>>);

impl Rows {
    /// Records a row of work done while code ran.
    pub(crate) fn record(&self, label: String, duration: Duration, bytes: Option<u64>, detail: String) {
        let row = DeviceTiming { label, duration, bytes, detail, during_run: true };
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(row);
    }

    /// Records a copy that took `elapsed`: its bytes and the rate they moved through memory at.
    pub(crate) fn record_copy(&self, copy: &Copy, elapsed: Duration) {
        self.record(copy.kind.label().into(), elapsed, Some(copy.bytes), gb_per_second(moved_bytes(copy), elapsed));
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

/// The bytes a copy moves through memory (a copy within the device reads and writes each).
fn moved_bytes(copy: &Copy) -> u64 {
    match copy.kind {
        CopyKind::DeviceToDevice => 2 * copy.bytes,
        CopyKind::HostToDevice | CopyKind::DeviceToHost => copy.bytes,
    }
}
