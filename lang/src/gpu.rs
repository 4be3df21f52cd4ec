//! GPU: PTX for kernels (`ptx`) and the CUDA runtime host code reaches through `quasi#gpu_*`
//! functions: the device probe and its start-up in the background, buffers, transfers,
//! launches timed with CUDA events, and recovery after a kernel fault.
//!
//! The driver is cudarc's thin `result` layer over libcuda, loaded at run time: nothing CUDA
//! is needed to build Quasi or to run it without a GPU. cudarc's loader panics when libcuda is
//! missing, so `start_device` asks `is_culib_present` before anything else. This module never
//! knows C-Lisp; it moves bytes, and the session spells them.

pub(crate) mod ptx;
pub(crate) mod sim;
mod sim_build;
pub(crate) use sim_build::mode_from_environment;
pub mod ptxas;

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys};

use crate::abi::{
    ArgKind, CopyDirection, Direction, LaunchArg, LAUNCH_DIMENSIONS, RT_GPU, RT_GPU_ALLOC, RT_GPU_COPY, RT_GPU_FREE,
    RT_GPU_LAUNCH, RT_GPU_LEN, SIM_CHECK, SIM_FRAME, SIM_SYNC,
};
use crate::timing::DeviceTiming;
use crate::types::Ty;

/// The PTX of one launched function, ready to load.
#[derive(Debug)]
pub(crate) struct CompiledPtx {
    /// The PTX text, NUL-terminated as `cuModuleLoadData` wants it.
    pub text: std::ffi::CString,
    /// The kernel entry's name in the PTX.
    pub entry: String,
    /// Changes whenever the device code or the target changes: the module cache's key.
    pub fingerprint: String,
    /// libdevice functions the PTX still declares (libdevice was not found to link).
    pub missing_libdevice: Vec<String>,
}

/// The session's GPU runtime. Its address is the JIT symbol `quasi#gpu`, so compiled host code
/// hands it to the runtime functions; the mutex serialises the executor thread (launches) and
/// the session thread (printing buffers, registering PTX), which never run at once anyway.
pub(crate) struct Gpu {
    state: Mutex<State>,
    /// Runs launches on the CPU in `:gpu sim` mode (outside the mutex: compiled code runs
    /// while a launch is under way, and a fault may leave the launch by a long jump).
    simulator: Box<sim::Simulator>,
}

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
}

/// The CUDA handles of the one device Quasi uses (ordinal 0, its primary context).
struct Device {
    device: sys::CUdevice,
    context: sys::CUcontext,
    start: sys::CUevent,
    end: sys::CUevent,
}

// SAFETY: CUDA driver handles are identifiers valid in every thread of the process once the
// context is made current there (`State::device` does that before each use); the runtime's
// mutex lets one thread use them at a time.
unsafe impl Send for Device {}

enum DeviceState {
    /// Not started: it starts, on the thread that first needs it, when a GPU form first runs.
    Deferred,
    /// Driver initialisation and context creation, running in the background (~80 ms).
    Starting(JoinHandle<Result<Device, String>>),
    Ready(Device),
    /// Why there is no device: the message of every host GPU form.
    Absent(String),
}

struct Buffer {
    /// A device pointer, or in the simulator the address of `memory`.
    pointer: sys::CUdeviceptr,
    memory: Option<sim::Allocation>,
    length: u64,
    element_size: u64,
    /// The context generation it was made in: buffers of older ones died with their context.
    generation: u64,
}

struct Loaded {
    fingerprint: String,
    generation: u64,
    module: sys::CUmodule,
    function: sys::CUfunction,
}

// SAFETY: as for `Device`: module and function handles are process-wide identifiers.
unsafe impl Send for Loaded {}

struct State {
    device: Option<DeviceState>,
    buffers: HashMap<u64, Buffer>,
    next_handle: u64,
    generation: u64,
    /// The PTX of every launched function, or why it could not be built.
    kernels: HashMap<String, Result<Arc<CompiledPtx>, String>>,
    loaded: HashMap<String, Loaded>,
    rows: Vec<DeviceTiming>,
    error: Option<String>,
    /// The source of the access or barrier the last error names (the simulator's reports).
    error_site: Option<crate::source::Span>,
    mode: Mode,
    /// The simulator's build of every launched function, or why it has none.
    sim_kernels: HashMap<String, Result<Arc<sim::SimKernel>, String>>,
    /// Arrays staged for the running launch in the simulator (freed at its end, or at the next
    /// launch when a fault ended it).
    sim_staged: Vec<SimStaged>,
}

/// A host array a simulated launch reads or writes, moved through memory of the simulator's
/// (so that its bounds are checked like a buffer's).
struct SimStaged {
    memory: sim::Allocation,
    host: u64,
    copy_back: bool,
}

/// A driver error as a sentence: its name and CUDA's description.
fn cuda_error(error: result::DriverError) -> String {
    let name =
        error.error_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", error.0));
    match error.error_string() {
        Ok(text) => format!("{name} ({})", text.to_string_lossy()),
        Err(_) => name,
    }
}

/// Whether this process can use a CUDA device, and which: `Err` says why not, starting with
/// "no CUDA device". Initialises the driver, like the session's background start-up.
pub fn probe() -> Result<String, String> {
    let device = start_device()?;
    let name = result::device::get_name(device.device).unwrap_or_else(|_| "a CUDA device".into());
    drop_device(device);
    Ok(name)
}

fn start_device() -> Result<Device, String> {
    // SAFETY: only tries to open the driver library; cudarc's other entry points panic when
    // it is missing, so this comes first.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA device: the CUDA driver (libcuda.so) is not installed".into());
    }
    let fail = |what: &str, error: result::DriverError| format!("no CUDA device: {what} failed: {}", cuda_error(error));
    result::init().map_err(|error| fail("cuInit", error))?;
    let count = result::device::get_count().map_err(|error| fail("cuDeviceGetCount", error))?;
    if count < 1 {
        return Err("no CUDA device: the driver found none".into());
    }
    let device = result::device::get(0).map_err(|error| fail("cuDeviceGet", error))?;
    open_context(device).map_err(|error| fail("creating the context", error))
}

/// Retains the primary context of `device`, makes it current and makes the timing events.
fn open_context(device: sys::CUdevice) -> Result<Device, result::DriverError> {
    // SAFETY: `device` came from `device::get`; the context is released in `drop_device`.
    let context = unsafe { result::primary_ctx::retain(device)? };
    // SAFETY: `context` is the live primary context just retained.
    unsafe { result::ctx::set_current(context)? };
    let start = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
    let end = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
    Ok(Device { device, context, start, end })
}

fn drop_device(device: Device) {
    // SAFETY: the events and the retained context belong to this `Device`, which is consumed;
    // errors on the way out have nobody to report to.
    unsafe {
        let _ = result::ctx::set_current(device.context);
        let _ = result::event::destroy(device.start);
        let _ = result::event::destroy(device.end);
        let _ = result::primary_ctx::release(device.device);
    }
}

impl Gpu {
    /// A runtime whose device starts in the background now, so that the first GPU cell waits
    /// only if it comes before the driver is ready.
    /// `defer`: the driver starts when a GPU form first needs it instead, on that thread (for a
    /// session that a process forks before it runs anything: CUDA does not survive a fork).
    pub fn new(defer: bool) -> Box<Gpu> {
        let device = if defer {
            DeviceState::Deferred
        } else {
            match std::thread::Builder::new().name("quasi-gpu-start".into()).spawn(start_device) {
                Ok(handle) => DeviceState::Starting(handle),
                Err(error) => {
                    DeviceState::Absent(format!("no CUDA device: could not start the driver's thread: {error}"))
                }
            }
        };
        let state = State {
            device: Some(device),
            buffers: HashMap::new(),
            next_handle: 1,
            generation: 0,
            kernels: HashMap::new(),
            loaded: HashMap::new(),
            rows: Vec::new(),
            error: None,
            error_site: None,
            mode: Mode::Device,
            sim_kernels: HashMap::new(),
            sim_staged: Vec::new(),
        };
        Box::new(Gpu { state: Mutex::new(state), simulator: sim::Simulator::new() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The runtime functions compiled host code calls, and this runtime's own address.
    pub fn runtime_symbols(&self) -> Vec<(String, usize)> {
        vec![
            (RT_GPU.to_string(), self as *const Gpu as usize),
            (RT_GPU_ALLOC.to_string(), runtime_alloc as *const () as usize),
            (RT_GPU_FREE.to_string(), runtime_free as *const () as usize),
            (RT_GPU_LEN.to_string(), runtime_len as *const () as usize),
            (RT_GPU_COPY.to_string(), runtime_copy as *const () as usize),
            (RT_GPU_LAUNCH.to_string(), runtime_launch as *const () as usize),
            (SIM_FRAME.to_string(), self.simulator.frame_address()),
            (SIM_SYNC.to_string(), sim::runtime_sync as *const () as usize),
            (SIM_CHECK.to_string(), sim::runtime_check as *const () as usize),
        ]
    }

    /// Waits until the driver's start-up, begun by `new`, has ended (whether a device came
    /// up or not); a deferred start stays deferred.
    pub fn wait_for_start(&self) {
        let mut state = self.lock();
        if let Some(DeviceState::Starting(_)) = &state.device {
            let _ = state.device();
        }
    }

    pub fn mode(&self) -> Mode {
        self.lock().mode
    }

    /// Switches between the device and the simulator. Buffers of the other mode stay, but
    /// using one is an error.
    pub fn set_mode(&self, mode: Mode) {
        self.lock().mode = mode;
    }

    /// The device's name, or why there is none (waits for the driver's start-up).
    pub fn device_name(&self) -> Result<String, String> {
        let mut state = self.lock();
        let device = state.device()?.device;
        Ok(result::device::get_name(device).unwrap_or_else(|_| "a CUDA device".into()))
    }

    /// Registers the simulator's build of a launched function (or why it has none).
    pub fn set_sim_kernel(&self, name: &str, kernel: Result<Arc<sim::SimKernel>, String>) {
        self.lock().sim_kernels.insert(name.to_string(), kernel);
    }

    /// Whether a segmentation fault at `address` was a simulated thread's stack overflow.
    pub fn simulated_stack_overflow(&self, address: usize) -> bool {
        self.simulator.is_stack_overflow(address)
    }

    /// The source of the access or barrier the last error names, if any.
    pub fn take_error_site(&self) -> Option<crate::source::Span> {
        self.lock().error_site.take()
    }

    /// The message of the last failed host GPU form (`abi::FaultCode::Gpu`).
    pub fn take_error(&self) -> Option<String> {
        self.lock().error.take()
    }

    /// Timing rows of transfers and launches since the last call.
    pub fn take_rows(&self) -> Vec<DeviceTiming> {
        std::mem::take(&mut self.lock().rows)
    }

    /// Registers the PTX of a launched function (or why it has none).
    pub fn set_kernel(&self, name: &str, ptx: Result<Arc<CompiledPtx>, String>) {
        self.lock().kernels.insert(name.to_string(), ptx);
    }

    /// A buffer as a value prints: `<gpu 4 × float> [0.0, 1.0, 2.0, 3.0]`.
    pub fn describe(&self, handle: u64, element: &Ty) -> String {
        let mut state = self.lock();
        match state.read_shown(handle) {
            Ok((length, bytes)) => crate::value::buffer_text(length, element, &bytes),
            Err(message) => format!("<gpu buffer: {message}>"),
        }
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        let device = match state.device.take() {
            Some(DeviceState::Starting(handle)) => handle.join().ok().and_then(Result::ok),
            Some(DeviceState::Ready(device)) => Some(device),
            _ => None,
        };
        let Some(device) = device else { return };
        // SAFETY: the context is current for the frees; buffers and modules of the current
        // generation are live, older ones died with their context and are not touched.
        unsafe {
            let _ = result::ctx::set_current(device.context);
            for buffer in state.buffers.values().filter(|buffer| buffer.generation == state.generation) {
                let _ = result::free_sync(buffer.pointer);
            }
            for loaded in state.loaded.values().filter(|loaded| loaded.generation == state.generation) {
                let _ = result::module::unload(loaded.module);
            }
        }
        drop_device(device);
    }
}

/// Runs one runtime call for compiled code: a failure is kept as the message of the fault
/// compiled code raises next, and a panic never unwinds into compiled code.
fn with_runtime<T>(gpu: *const Gpu, failed: T, work: impl FnOnce(&mut State) -> Result<T, String>) -> T {
    // SAFETY: compiled code passes the address of the session's `Gpu` (the `quasi#gpu`
    // symbol), which lives as long as the session's code.
    let Some(gpu) = (unsafe { gpu.as_ref() }) else { return failed };
    let outcome = catch_unwind(AssertUnwindSafe(|| work(&mut gpu.lock())));
    let message = match outcome {
        Ok(Ok(value)) => return value,
        Ok(Err(message)) => message,
        Err(_) => "the GPU runtime failed unexpectedly (a bug in Quasi)".to_string(),
    };
    gpu.lock().error = Some(message);
    failed
}

extern "C" fn runtime_alloc(gpu: *const Gpu, element_size: i64, count: i64) -> i64 {
    with_runtime(gpu, 0, |state| state.alloc(element_size, count))
}

extern "C" fn runtime_free(gpu: *const Gpu, handle: i64) -> i32 {
    with_runtime(gpu, 1, |state| state.free(handle as u64).map(|()| 0))
}

extern "C" fn runtime_len(gpu: *const Gpu, handle: i64) -> i64 {
    with_runtime(gpu, -1, |state| state.buffer(handle as u64, "gpu-len").map(|buffer| buffer.length as i64))
}

extern "C" fn runtime_copy(
    gpu: *const Gpu,
    direction: i64,
    destination: i64,
    source: i64,
    count: i64,
    element_size: i64,
) -> i32 {
    with_runtime(gpu, 1, |state| state.copy(direction, destination, source, count, element_size).map(|()| 0))
}

extern "C" fn runtime_launch(
    gpu: *const Gpu,
    name: *const u8,
    name_length: i64,
    dimensions: *const i64,
    args: *const LaunchArg,
    arg_count: i64,
) -> i32 {
    // SAFETY: codegen passes the kernel's name (a constant of `name_length` bytes),
    // `LAUNCH_DIMENSIONS` dimensions and `arg_count` descriptors laid out as `LaunchArg`s (word
    // by word, 8-aligned), all in memory that lives across this call.
    let (name, dimensions, words) = unsafe {
        let name = std::str::from_utf8(std::slice::from_raw_parts(name, name_length.max(0) as usize))
            .unwrap_or("?")
            .to_string();
        let dimensions: [i64; LAUNCH_DIMENSIONS] =
            std::slice::from_raw_parts(dimensions, LAUNCH_DIMENSIONS).try_into().unwrap_or([1; LAUNCH_DIMENSIONS]);
        let words = std::slice::from_raw_parts(args, arg_count.max(0) as usize).to_vec();
        (name, dimensions, words)
    };
    // SAFETY: as in `with_runtime`.
    let Some(runtime) = (unsafe { gpu.as_ref() }) else { return 1 };
    if let Mode::Sim { .. } = runtime.mode() {
        return simulate_launch(runtime, &name, dimensions, &words);
    }
    with_runtime(gpu, 1, |state| state.launch(&name, dimensions, &words).map(|()| 0))
}

/// A launch in the simulator: arguments are prepared under the runtime's lock, the kernel
/// runs without it (a fault may end the launch by a long jump), then results are copied back.
fn simulate_launch(gpu: &Gpu, name: &str, dimensions: [i64; 6], words: &[LaunchArg]) -> i32 {
    let prepared = catch_unwind(AssertUnwindSafe(|| gpu.lock().prepare_simulation(name, dimensions, words)));
    let (kernel, values, regions, bytes) = match prepared {
        Ok(Ok(prepared)) => prepared,
        Ok(Err(message)) => {
            gpu.lock().error = Some(message);
            return 1;
        }
        Err(_) => {
            gpu.lock().error = Some("the GPU simulator failed unexpectedly (a bug in Quasi)".into());
            return 1;
        }
    };
    let ran = gpu.simulator.launch(name, &kernel, dimensions, &values, regions);
    let mut state = gpu.lock();
    let finished = match ran {
        Ok(ran) => state.finish_simulation(name, dimensions, ran.duration, bytes),
        Err(error) => {
            state.error_site = error.site;
            Err(error.message)
        }
    };
    state.sim_staged.clear();
    match finished {
        Ok(()) => 0,
        Err(message) => {
            state.error = Some(message);
            1
        }
    }
}

/// A launch's grid and block as CUDA allows them.
fn check_dimensions(name: &str, dimensions: [i64; 6]) -> Result<(), String> {
    for (index, dimension) in dimensions.iter().enumerate() {
        // CUDA's limits: grid y and z and block z are smaller, but every device has the same.
        let limit = [i64::from(i32::MAX), 65535, 65535, 1024, 1024, 64][index];
        if !(1..=limit).contains(dimension) {
            let which = if index < 3 { "grid" } else { "block" };
            let axis = ["x", "y", "z"][index % 3];
            return Err(if *dimension < 1 {
                format!("launching `{name}`: a {which} dimension is {dimension}; dimensions are at least 1")
            } else {
                format!("launching `{name}`: {which} dimension {axis} is {dimension}; CUDA allows at most {limit}")
            });
        }
    }
    let threads = dimensions[3] * dimensions[4] * dimensions[5];
    if threads > 1024 {
        return Err(format!("launching `{name}`: a block of {threads} threads; CUDA allows at most 1024"));
    }
    Ok(())
}

/// A host array moved through a temporary device buffer for one launch.
struct Staged {
    device: sys::CUdeviceptr,
    host: u64,
    bytes: u64,
    copy_back: bool,
}

fn gb_per_second(bytes: u64, duration: Duration) -> String {
    format!("{:.1} GB/s", bytes as f64 / duration.as_secs_f64().max(1e-12) / 1e9)
}

impl State {
    /// The device, made current on this thread; waits for the start-up if it is still running.
    fn device(&mut self) -> Result<&Device, String> {
        if let Some(DeviceState::Deferred) = &self.device {
            self.device = Some(match start_device() {
                Ok(device) => DeviceState::Ready(device),
                Err(message) => DeviceState::Absent(message),
            });
        }
        if let Some(DeviceState::Starting(_)) = &self.device {
            let Some(DeviceState::Starting(handle)) = self.device.take() else { unreachable!("just matched") };
            let started = handle.join().unwrap_or_else(|_| Err("no CUDA device: the driver's start-up failed".into()));
            self.device = Some(match started {
                Ok(device) => DeviceState::Ready(device),
                Err(message) => DeviceState::Absent(message),
            });
        }
        match &self.device {
            Some(DeviceState::Ready(device)) => {
                // SAFETY: the context is live (retained by this runtime).
                unsafe { result::ctx::set_current(device.context) }
                    .map_err(|error| format!("the CUDA context cannot be used: {}", cuda_error(error)))?;
                Ok(device)
            }
            Some(DeviceState::Absent(message)) => Err(message.clone()),
            _ => Err("no CUDA device".into()),
        }
    }

    fn row(&mut self, label: String, duration: Duration, bytes: Option<u64>, detail: String) {
        self.rows.push(DeviceTiming { label, duration, bytes, detail, during_run: true });
    }

    fn alloc(&mut self, element_size: i64, count: i64) -> Result<i64, String> {
        if count < 0 {
            return Err(format!("`gpu-alloc` of {count} elements"));
        }
        let bytes = (count as u64)
            .checked_mul(element_size.max(1) as u64)
            .ok_or("`gpu-alloc` of more bytes than a machine has")?;
        if let Mode::Sim { .. } = self.mode {
            let memory = sim::Allocation::zeroed(bytes as usize)?;
            return Ok(self.add_buffer(memory.start() as u64, Some(memory), count as u64, element_size));
        }
        self.device()?;
        // SAFETY: the context is current; the memory is owned by the new buffer entry and
        // freed by `free`, or with the session.
        let pointer = unsafe {
            let pointer = result::malloc_sync(bytes.max(1) as usize)
                .map_err(|error| format!("`gpu-alloc` of {bytes} bytes failed: {}", cuda_error(error)))?;
            result::memset_d8_sync(pointer, 0, bytes as usize)
                .map_err(|error| format!("zeroing a new buffer failed: {}", cuda_error(error)))?;
            pointer
        };
        Ok(self.add_buffer(pointer, None, count as u64, element_size))
    }

    fn add_buffer(&mut self, pointer: u64, memory: Option<sim::Allocation>, length: u64, element_size: i64) -> i64 {
        let handle = self.next_handle;
        self.next_handle += 1;
        let buffer =
            Buffer { pointer, memory, length, element_size: element_size.max(1) as u64, generation: self.generation };
        self.buffers.insert(handle, buffer);
        handle as i64
    }

    /// A live buffer; `form` names the form using it for the message.
    fn buffer(&self, handle: u64, form: &str) -> Result<&Buffer, String> {
        match self.buffers.get(&handle) {
            _ if handle == 0 => Err(format!("`{form}` of a null buffer: it was never allocated")),
            None => Err(format!("`{form}` of a freed buffer")),
            Some(buffer) if buffer.memory.is_some() != matches!(self.mode, Mode::Sim { .. }) => {
                let made = if buffer.memory.is_some() { "in the simulator" } else { "on the device" };
                Err(format!("`{form}` of a buffer made {made}; `:gpu` has switched since"))
            }
            Some(buffer) if buffer.memory.is_none() && buffer.generation != self.generation => {
                Err(format!("`{form}` of a stale buffer: it was made before a kernel fault reset the GPU"))
            }
            Some(buffer) => Ok(buffer),
        }
    }

    fn free(&mut self, handle: u64) -> Result<(), String> {
        let pointer = self.buffer(handle, "gpu-free")?.pointer;
        if let Mode::Sim { .. } = self.mode {
            self.buffers.remove(&handle);
            return Ok(());
        }
        self.device()?;
        // SAFETY: the pointer belongs to a live buffer of the current context, removed below.
        unsafe { result::free_sync(pointer) }.map_err(|error| format!("`gpu-free` failed: {}", cuda_error(error)))?;
        self.buffers.remove(&handle);
        Ok(())
    }

    fn copy(
        &mut self,
        direction: i64,
        destination: i64,
        source: i64,
        count: i64,
        element_size: i64,
    ) -> Result<(), String> {
        if count < 0 {
            return Err(format!("`gpu-copy` of {count} elements"));
        }
        let bytes = count as u64 * element_size.max(1) as u64;
        let check = |buffer: &Buffer, which: &str| {
            if count as u64 > buffer.length {
                Err(format!("`gpu-copy` of {count} elements, but the {which} buffer holds {}", buffer.length))
            } else {
                Ok(buffer.pointer)
            }
        };
        match CopyDirection::from_code(direction) {
            Some(CopyDirection::HostToDevice) => {
                let target = check(self.buffer(destination as u64, "gpu-copy")?, "destination")?;
                self.copy_to_device(target, source as u64, bytes)
            }
            Some(CopyDirection::DeviceToHost) => {
                let origin = check(self.buffer(source as u64, "gpu-copy")?, "source")?;
                self.copy_to_host(destination as u64, origin, bytes)
            }
            Some(CopyDirection::DeviceToDevice) | None => {
                let target = check(self.buffer(destination as u64, "gpu-copy")?, "destination")?;
                let origin = check(self.buffer(source as u64, "gpu-copy")?, "source")?;
                if let Mode::Sim { .. } = self.mode {
                    return self.copy_simulated("d2d", target, origin, bytes);
                }
                self.device()?;
                let start = Instant::now();
                // SAFETY: both ranges lie inside live buffers of the current context (checked).
                unsafe { result::memcpy_dtod_sync(target, origin, bytes as usize) }
                    .map_err(|error| format!("`gpu-copy` failed: {}", cuda_error(error)))?;
                let elapsed = start.elapsed();
                self.row("d2d".into(), elapsed, Some(bytes), gb_per_second(2 * bytes, elapsed));
                Ok(())
            }
        }
    }

    /// A copy in the simulator's memory (or between it and the host's), timed like the
    /// device's.
    fn copy_simulated(&mut self, label: &str, target: u64, origin: u64, bytes: u64) -> Result<(), String> {
        let start = Instant::now();
        // SAFETY: simulated buffers' ranges were bounds-checked; like C's memcpy (and the
        // device's copies) the program's host pointer is trusted for `bytes`.
        unsafe { std::ptr::copy(origin as *const u8, target as *mut u8, bytes as usize) };
        let elapsed = start.elapsed();
        let moved = if label == "d2d" { 2 * bytes } else { bytes };
        self.row(label.into(), elapsed, Some(bytes), gb_per_second(moved, elapsed));
        Ok(())
    }

    fn copy_to_device(&mut self, target: sys::CUdeviceptr, host: u64, bytes: u64) -> Result<(), String> {
        if let Mode::Sim { .. } = self.mode {
            return self.copy_simulated("h2d", target, host, bytes);
        }
        self.device()?;
        let start = Instant::now();
        // SAFETY: C-Lisp promises nothing about host pointers: like C's memcpy, the copy reads
        // `bytes` from the program's pointer. The device range was bounds-checked.
        unsafe {
            let source = std::slice::from_raw_parts(host as *const u8, bytes as usize);
            result::memcpy_htod_sync(target, source)
        }
        .map_err(|error| format!("copying to the GPU failed: {}", cuda_error(error)))?;
        let elapsed = start.elapsed();
        self.row("h2d".into(), elapsed, Some(bytes), gb_per_second(bytes, elapsed));
        Ok(())
    }

    fn copy_to_host(&mut self, host: u64, origin: sys::CUdeviceptr, bytes: u64) -> Result<(), String> {
        if let Mode::Sim { .. } = self.mode {
            return self.copy_simulated("d2h", host, origin, bytes);
        }
        self.device()?;
        let start = Instant::now();
        // SAFETY: as in `to_device`, the program's pointer is trusted for `bytes`.
        unsafe {
            let target = std::slice::from_raw_parts_mut(host as *mut u8, bytes as usize);
            result::memcpy_dtoh_sync(target, origin)
        }
        .map_err(|error| format!("copying from the GPU failed: {}", cuda_error(error)))?;
        let elapsed = start.elapsed();
        self.row("d2h".into(), elapsed, Some(bytes), gb_per_second(bytes, elapsed));
        Ok(())
    }

    /// The length of a buffer and the bytes of the elements a printed value shows.
    fn read_shown(&mut self, handle: u64) -> Result<(u64, Vec<u8>), String> {
        if handle == 0 {
            return Err("null".into());
        }
        let (pointer, length, size) = {
            let buffer = self.buffer(handle, "print")?;
            if let Some(memory) = &buffer.memory {
                let size = buffer.element_size as usize;
                let bytes = crate::value::buffer_shown_indices(buffer.length)
                    .into_iter()
                    .flat_map(|index| memory.bytes()[index as usize * size..][..size].iter().copied())
                    .collect();
                return Ok((buffer.length, bytes));
            }
            (buffer.pointer, buffer.length, buffer.element_size)
        };
        self.device()?;
        let mut bytes = Vec::new();
        for index in crate::value::buffer_shown_indices(length) {
            let mut element = vec![0u8; size as usize];
            // SAFETY: `index` is below the buffer's length, in a live buffer.
            unsafe { result::memcpy_dtoh_sync(&mut element, pointer + index * size) }.map_err(cuda_error)?;
            bytes.extend(element);
        }
        Ok((length, bytes))
    }

    /// The loaded function of a launched function's PTX, loading (and timing) it if needed.
    fn function(&mut self, name: &str) -> Result<sys::CUfunction, String> {
        let ptx = match self.kernels.get(name) {
            Some(Ok(ptx)) => ptx.clone(),
            Some(Err(message)) => return Err(format!("`{name}` cannot run on the GPU: {message}")),
            None => return Err(format!("there is no PTX for `{name}` (a bug in Quasi)")),
        };
        if let Some(missing) = ptx.missing_libdevice.first() {
            return Err(format!("`{name}` calls libdevice's `{missing}`, but libdevice was not found (set QUASI_LIBDEVICE to libdevice.10.bc)"));
        }
        if let Some(loaded) = self
            .loaded
            .get(name)
            .filter(|loaded| loaded.fingerprint == ptx.fingerprint && loaded.generation == self.generation)
        {
            return Ok(loaded.function);
        }
        let generation = self.generation;
        self.device()?;
        if let Some(old) = self.loaded.remove(name).filter(|old| old.generation == generation) {
            // SAFETY: a module of the current context that nothing uses any more.
            let _ = unsafe { result::module::unload(old.module) };
        }
        let start = Instant::now();
        // SAFETY: the text is NUL-terminated PTX; the entry name has no NUL (PTX identifiers).
        let (module, function) = unsafe {
            let module = result::module::load_data(ptx.text.as_ptr() as *const c_void)
                .map_err(|error| format!("the driver rejected the PTX of `{name}`: {}", cuda_error(error)))?;
            let entry = std::ffi::CString::new(ptx.entry.clone()).map_err(|_| "a kernel name with NUL".to_string())?;
            let function = result::module::get_function(module, entry)
                .map_err(|error| format!("the PTX of `{name}` has no entry: {}", cuda_error(error)))?;
            (module, function)
        };
        self.row("load".into(), start.elapsed(), None, format!("module of `{name}`"));
        self.loaded
            .insert(name.to_string(), Loaded { fingerprint: ptx.fingerprint.clone(), generation, module, function });
        Ok(function)
    }

    fn launch(&mut self, name: &str, dimensions: [i64; 6], descriptors: &[LaunchArg]) -> Result<(), String> {
        check_dimensions(name, dimensions)?;
        let function = self.function(name)?;
        let generation = self.generation;
        let mut values: Vec<u64> = Vec::with_capacity(descriptors.len());
        let mut staged: Vec<Staged> = Vec::new();
        let prepared = self.prepare_arguments(name, descriptors, &mut values, &mut staged);
        let launched = prepared.and_then(|bytes| self.run_kernel(name, function, dimensions, &mut values, bytes));
        let copied = match &launched {
            Ok(()) => staged
                .iter()
                .filter(|staged| staged.copy_back)
                .try_for_each(|staged| self.copy_to_host(staged.host, staged.device, staged.bytes)),
            Err(_) => Ok(()),
        };
        // After a kernel fault the temporaries died with their context.
        if self.generation == generation {
            for staged in &staged {
                // SAFETY: temporaries of this launch, in the current context.
                let _ = unsafe { result::free_sync(staged.device) };
            }
        }
        launched.and(copied)
    }

    /// The kernel's parameter values, staging host arrays; returns the bytes the annotations
    /// say the kernel reads and writes (for GB/s), if any.
    fn prepare_arguments(
        &mut self,
        name: &str,
        descriptors: &[LaunchArg],
        values: &mut Vec<u64>,
        staged: &mut Vec<Staged>,
    ) -> Result<Option<u64>, String> {
        let mut moved: Option<u64> = None;
        for (index, arg) in descriptors.iter().enumerate() {
            let bytes = arg.annotated_count().map(|count| count * arg.element_bytes());
            let direction = Direction::from_code(arg.direction);
            let times = u64::from(direction.reads()) + u64::from(direction.writes());
            if let (Some(bytes), true) = (bytes, times > 0) {
                moved = Some(moved.unwrap_or(0) + bytes * times);
            }
            match ArgKind::from_code(arg.kind) {
                Some(ArgKind::Scalar | ArgKind::DevicePointer) => values.push(arg.value as u64),
                Some(ArgKind::Buffer) => {
                    let buffer = self.buffer(arg.value as u64, "launch")?;
                    if let Some(count) = arg.annotated_count().filter(|count| *count > buffer.length) {
                        return Err(format!(
                            "argument {} of `{name}` is a buffer of {} elements, but its annotation needs {count}",
                            index + 1,
                            buffer.length
                        ));
                    }
                    values.push(buffer.pointer);
                }
                Some(ArgKind::Host) => {
                    let bytes = bytes
                        .ok_or_else(|| format!("argument {} of `{name}` is host memory without a size", index + 1))?;
                    if let Mode::Sim { .. } = self.mode {
                        let memory = sim::Allocation::zeroed(bytes as usize)?;
                        if direction.reads() {
                            self.copy_simulated("h2d", memory.start() as u64, arg.value as u64, bytes)?;
                        }
                        values.push(memory.start() as u64);
                        let copy_back = direction.writes();
                        self.sim_staged.push(SimStaged { memory, host: arg.value as u64, copy_back });
                        continue;
                    }
                    self.device()?;
                    // SAFETY: a temporary owned by this launch (freed by `launch`).
                    let device = unsafe { result::malloc_sync(bytes.max(1) as usize) }.map_err(|error| {
                        format!("staging argument {} of `{name}` failed: {}", index + 1, cuda_error(error))
                    })?;
                    staged.push(Staged { device, host: arg.value as u64, bytes, copy_back: direction.writes() });
                    if direction.reads() {
                        self.copy_to_device(device, arg.value as u64, bytes)?;
                    } else {
                        // SAFETY: the temporary just allocated, `bytes` long.
                        unsafe { result::memset_d8_sync(device, 0, bytes as usize) }.map_err(cuda_error)?;
                    }
                    values.push(device);
                }
                None => return Err(format!("argument {} of `{name}` has an unknown kind (a bug in Quasi)", index + 1)),
            }
        }
        Ok(moved)
    }

    /// A simulated launch's kernel, parameter values, the memory its threads may use and the
    /// bytes its annotations move; host arrays are staged into the simulator's memory.
    #[allow(clippy::type_complexity)]
    fn prepare_simulation(
        &mut self,
        name: &str,
        dimensions: [i64; 6],
        words: &[LaunchArg],
    ) -> Result<(Arc<sim::SimKernel>, Vec<u64>, Vec<sim::Region>, Option<u64>), String> {
        check_dimensions(name, dimensions)?;
        let kernel = match self.sim_kernels.get(name) {
            Some(Ok(kernel)) => kernel.clone(),
            Some(Err(message)) => return Err(format!("`{name}` cannot run in the simulator: {message}")),
            None => return Err(format!("there is no simulator build of `{name}` (a bug in Quasi)")),
        };
        self.sim_staged.clear();
        let mut values = Vec::new();
        let bytes = self.prepare_arguments(name, words, &mut values, &mut Vec::new())?;
        let mut regions: Vec<sim::Region> = self
            .buffers
            .iter()
            .filter(|(_, buffer)| buffer.memory.is_some())
            .map(|(_, buffer)| sim::Region {
                start: buffer.pointer as usize,
                end: (buffer.pointer + buffer.length * buffer.element_size) as usize,
                what: format!("a buffer of {} elements", buffer.length),
            })
            .collect();
        regions.extend(self.sim_staged.iter().map(|staged| sim::Region {
            start: staged.memory.start(),
            end: staged.memory.start() + staged.memory.len(),
            what: "the host array staged for the launch".into(),
        }));
        Ok((kernel, values, regions, bytes))
    }

    /// After a simulated launch: staged results copied back, the launch's timing row.
    fn finish_simulation(
        &mut self,
        name: &str,
        dimensions: [i64; 6],
        duration: Duration,
        bytes: Option<u64>,
    ) -> Result<(), String> {
        let staged = std::mem::take(&mut self.sim_staged);
        for staged in staged.iter().filter(|staged| staged.copy_back) {
            self.copy_simulated("d2h", staged.host, staged.memory.start() as u64, staged.memory.len() as u64)?;
        }
        let [gx, gy, gz, bx, by, bz] = dimensions;
        let detail = format!("simulated: grid ({gx}, {gy}, {gz}) block ({bx}, {by}, {bz})");
        self.row(format!("kernel {name}"), duration, bytes, detail);
        Ok(())
    }

    /// Launches and waits, timed by events around the launch.
    fn run_kernel(
        &mut self,
        name: &str,
        function: sys::CUfunction,
        dimensions: [i64; 6],
        values: &mut [u64],
        bytes: Option<u64>,
    ) -> Result<(), String> {
        let (start, end) = {
            let device = self.device()?;
            (device.start, device.end)
        };
        // Each parameter points at its value; CUDA reads as many bytes as the parameter has.
        let mut parameters: Vec<*mut c_void> =
            values.iter_mut().map(|value| value as *mut u64 as *mut c_void).collect();
        let grid = (dimensions[0] as u32, dimensions[1] as u32, dimensions[2] as u32);
        let block = (dimensions[3] as u32, dimensions[4] as u32, dimensions[5] as u32);
        // SAFETY: `function` is a loaded kernel of the current context whose parameters are
        // the scalars and pointers `check` matched to these values, which outlive the launch
        // (it is waited for below).
        let outcome = unsafe {
            result::event::record(start, std::ptr::null_mut())
                .and_then(|()| result::launch_kernel(function, grid, block, 0, std::ptr::null_mut(), &mut parameters))
                .and_then(|()| result::event::record(end, std::ptr::null_mut()))
                .and_then(|()| result::event::synchronize(end))
                .and_then(|()| result::event::elapsed(start, end))
        };
        match outcome {
            Ok(milliseconds) => {
                let duration = Duration::from_secs_f64(f64::from(milliseconds) / 1e3);
                let mut detail =
                    format!("grid ({}, {}, {}) block ({}, {}, {})", grid.0, grid.1, grid.2, block.0, block.1, block.2);
                if let Some(bytes) = bytes {
                    detail.push_str(&format!(", {}", gb_per_second(bytes, duration)));
                }
                self.row(format!("kernel {name}"), duration, bytes, detail);
                Ok(())
            }
            Err(error) => {
                let message = cuda_error(error);
                let recovered = self.recover();
                Err(format!("kernel `{name}` failed: {message}; {recovered}"))
            }
        }
    }

    /// After a kernel fault the context is unusable: it is reset and made again, and every
    /// buffer made before becomes stale.
    fn recover(&mut self) -> String {
        let Some(DeviceState::Ready(device)) = self.device.take() else { return "the GPU context was lost".into() };
        let ordinal = device.device;
        drop_device(device);
        // SAFETY: resets the primary context of a device `device::get` returned; nothing of
        // the old context is used after this (buffers are stale by generation).
        let reset = unsafe { sys::cuDevicePrimaryCtxReset_v2(ordinal).result() };
        self.generation += 1;
        self.loaded.clear();
        match reset.and_then(|()| open_context(ordinal)) {
            Ok(device) => {
                self.device = Some(DeviceState::Ready(device));
                "the GPU context was recreated, and buffers made before are stale".into()
            }
            Err(error) => {
                let message =
                    format!("no CUDA device: the GPU could not be reset after a kernel fault: {}", cuda_error(error));
                self.device = Some(DeviceState::Absent(message.clone()));
                message
            }
        }
    }
}
