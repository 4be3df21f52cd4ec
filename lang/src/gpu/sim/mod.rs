//! The GPU simulator (`:gpu sim`) as a `Device`: its memory is host memory with red zones
//! (`executor::Allocation`), copies are `memcpy`s timed by the clock, and a launch runs the
//! kernel's build for the host (`build`) on the executor (`executor`), which checks every
//! access against the memory this device made when checking is on.
//!
//! The device's lock guards its tables (allocations, kernels) and is never held while a copy
//! touches the program's memory or a kernel runs: a fault there leaves by the guard's long jump.

pub(crate) mod build;
mod executor;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

pub(crate) use executor::{runtime_check, runtime_sync, Allocation, SimKernel, THREAD_STACK};

use super::device::{Copy, Device, DeviceError, Launch, Memory, Rows};
use executor::{Region, Simulator};

struct State {
    /// The memory this device made, by address, with what it is (for the checks' reports).
    allocations: BTreeMap<u64, (Allocation, String)>,
    /// The build of every launched function, or why it has none.
    kernels: HashMap<String, Result<Arc<SimKernel>, String>>,
}

/// The simulator of one session.
pub(crate) struct SimDevice {
    executor: Box<Simulator>,
    state: Mutex<State>,
    /// Whether launches check accesses and barriers (`:gpu sim` against `:gpu sim unchecked`):
    /// what its builds do, and what `:gpu` says.
    checked: AtomicBool,
    rows: Rows,
}

impl SimDevice {
    pub(crate) fn new(rows: Rows) -> SimDevice {
        let state = State { allocations: BTreeMap::new(), kernels: HashMap::new() };
        SimDevice { executor: Simulator::new(), state: Mutex::new(state), checked: AtomicBool::new(true), rows }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Turns checking on or off (`:gpu sim [unchecked]`).
    pub(crate) fn set_checked(&self, checked: bool) {
        self.checked.store(checked, Ordering::Relaxed);
    }

    /// Registers the build of a launched function (or why it has none).
    pub(crate) fn install(&self, name: &str, kernel: Result<Arc<SimKernel>, String>) {
        self.lock().kernels.insert(name.to_string(), kernel);
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
        unsafe { std::ptr::copy(copy.source as *const u8, copy.target as *mut u8, copy.bytes as usize) };
        self.rows.record_copy(&copy, start.elapsed());
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

    fn launch(&self, launch: &Launch<'_>) -> Result<(), DeviceError> {
        let kernel = self.kernel(launch.name)?;
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
        let ran = self
            .executor
            .launch(launch.name, &kernel, launch.dimensions, launch.values, regions)
            .map_err(|error| DeviceError { message: error.message, site: error.site, unavailable: false })?;
        let [gx, gy, gz, bx, by, bz] = launch.dimensions;
        let detail = format!("simulated: grid ({gx}, {gy}, {gz}) block ({bx}, {by}, {bz})");
        self.rows.record(format!("kernel {}", launch.name), ran.duration, launch.bytes, detail);
        Ok(())
    }
}
