//! The CUDA device: `Device` over cudarc's thin `result` layer on libcuda, loaded at run time
//! (nothing CUDA is needed to build Quasi or to run it without a GPU). The driver starts in
//! the background when a session starts (or, deferred, on the thread that first needs it);
//! launches are timed with CUDA events; after a kernel fault the context is reset and made
//! again, and memory of the old one is lost (a new epoch).
//!
//! cudarc's loader panics when libcuda is missing, so `start_device` asks `is_culib_present`
//! before anything else. The device's lock guards its bookkeeping only: driver calls that read
//! or write the program's memory run without it.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys};

use super::device::{
    copy_detail, gb_per_second, Command, Copy, CopyKind, Device, DeviceError, Fence, Launch, Memory, Rows, Submission,
};
use crate::timing::Lane;

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

/// The CUDA handles of the one device Quasi uses (ordinal 0, its primary context).
#[derive(Clone, Copy)]
struct Handles {
    device: sys::CUdevice,
    context: sys::CUcontext,
    start: sys::CUevent,
    end: sys::CUevent,
}

// SAFETY: CUDA driver handles are identifiers valid in every thread of the process once the
// context is made current there (`CudaDevice::handles` does that before each use).
unsafe impl Send for Handles {}

enum Start {
    /// Not started: it starts, on the thread that first needs it, when a GPU form first runs.
    Deferred,
    /// Driver initialisation and context creation, running in the background (~80 ms).
    Starting(JoinHandle<Result<Handles, String>>),
    Ready(Handles),
    /// Why there is no device: the message of every host GPU form.
    Absent(String),
}

struct Loaded {
    fingerprint: String,
    epoch: u64,
    module: sys::CUmodule,
    function: sys::CUfunction,
}

// SAFETY: as for `Handles`: module and function handles are process-wide identifiers.
unsafe impl Send for Loaded {}

struct State {
    start: Start,
    /// Incremented by every context reset: memory and modules of an older epoch are gone.
    epoch: u64,
    /// Memory of the current epoch not yet freed (freed with the device).
    allocations: HashSet<u64>,
    /// The PTX of every launched function, or why it could not be built.
    kernels: HashMap<String, Result<Arc<CompiledPtx>, String>>,
    loaded: HashMap<String, Loaded>,
    /// Streams and events of the current epoch that no submission uses.
    free_streams: Vec<Handle<sys::CUstream>>,
    free_events: Vec<Handle<sys::CUevent>>,
    /// Submissions on their streams, until a poll sees them end.
    running: Vec<Running>,
    /// Modules of the current epoch replaced while submissions ran: unloaded when none runs.
    retired: Vec<Handle<sys::CUmodule>>,
    /// `host-alloc` memory (mapped by Quasi, page-locked with the driver): its bytes, by
    /// address; registered with the current epoch's context.
    hosts: HashMap<u64, usize>,
}

/// A driver handle (stream, event, module) kept in the device's state.
#[derive(Clone, Copy)]
struct Handle<T>(T);

// SAFETY: as for `Handles`: driver handles are process-wide identifiers.
unsafe impl<T> Send for Handle<T> {}

/// A submission on its stream: the event recorded first (with the host's time then, to place
/// the others on the host's clock) and each command's label, bytes, detail and events.
struct Running {
    id: u64,
    fence: Arc<Fence>,
    epoch: u64,
    stream: Handle<sys::CUstream>,
    anchor: (Handle<sys::CUevent>, Instant),
    commands: Vec<Timed>,
}

/// A submission's stream, its anchor event, and its commands with their events.
type Resources = (Handle<sys::CUstream>, Handle<sys::CUevent>, Vec<Timed>);

struct Timed {
    label: String,
    bytes: Option<u64>,
    /// For copies, the copy (its row's rate); for kernels, the grid and block.
    copy: Option<Copy>,
    detail: String,
    events: (Handle<sys::CUevent>, Handle<sys::CUevent>),
}

/// The CUDA device.
pub(crate) struct CudaDevice {
    state: Mutex<State>,
    rows: Rows,
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
    let handles = start_device()?;
    let name = result::device::get_name(handles.device).unwrap_or_else(|_| "a CUDA device".into());
    close(handles);
    Ok(name)
}

fn start_device() -> Result<Handles, String> {
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
fn open_context(device: sys::CUdevice) -> Result<Handles, result::DriverError> {
    // SAFETY: `device` came from `device::get`; the context is released in `close`.
    let context = unsafe { result::primary_ctx::retain(device)? };
    // SAFETY: `context` is the live primary context just retained.
    unsafe { result::ctx::set_current(context)? };
    let start = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
    let end = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
    Ok(Handles { device, context, start, end })
}

fn close(handles: Handles) {
    // SAFETY: the events and the retained context belong to these handles, which are not used
    // again; errors on the way out have nobody to report to.
    unsafe {
        let _ = result::ctx::set_current(handles.context);
        let _ = result::event::destroy(handles.start);
        let _ = result::event::destroy(handles.end);
        let _ = result::primary_ctx::release(handles.device);
    }
}

impl CudaDevice {
    /// A device whose driver starts in the background now, so that the first GPU cell waits
    /// only if it comes before the driver is ready; `defer`: the driver starts when a GPU form
    /// first needs it, on that thread (for a session that a process forks before it runs
    /// anything: CUDA does not survive a fork).
    pub(crate) fn new(defer: bool, rows: Rows) -> CudaDevice {
        let start = if defer {
            Start::Deferred
        } else {
            match std::thread::Builder::new().name("quasi-gpu-start".into()).spawn(start_device) {
                Ok(handle) => Start::Starting(handle),
                Err(error) => Start::Absent(format!("no CUDA device: could not start the driver's thread: {error}")),
            }
        };
        let state = State {
            start,
            epoch: 0,
            allocations: HashSet::new(),
            kernels: HashMap::new(),
            loaded: HashMap::new(),
            free_streams: Vec::new(),
            free_events: Vec::new(),
            running: Vec::new(),
            retired: Vec::new(),
            hosts: HashMap::new(),
        };
        CudaDevice { state: Mutex::new(state), rows }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits until the driver's start-up, begun by `new`, has ended (whether a device came
    /// up or not); a deferred start stays deferred.
    pub(crate) fn wait_for_start(&self) {
        let mut state = self.lock();
        if let Start::Starting(_) = &state.start {
            let _ = state.handles();
        }
    }

    /// Registers the PTX of a launched function (or why it has none).
    pub(crate) fn install(&self, name: &str, ptx: Result<Arc<CompiledPtx>, String>) {
        self.lock().kernels.insert(name.to_string(), ptx);
    }

    /// The handles, made current on this thread, and the epoch; waits for the start-up.
    fn handles(&self) -> Result<(Handles, u64), DeviceError> {
        let mut state = self.lock();
        let handles = state.handles()?;
        Ok((handles, state.epoch))
    }

    /// The loaded function of a launched function's PTX, loading (and timing) it if needed.
    fn function(&self, name: &str) -> Result<sys::CUfunction, DeviceError> {
        let mut state = self.lock();
        let ptx = match state.kernels.get(name) {
            Some(Ok(ptx)) => ptx.clone(),
            Some(Err(message)) => return Err(format!("`{name}` cannot run on the GPU: {message}").into()),
            None => return Err(format!("there is no PTX for `{name}` (a bug in Quasi)").into()),
        };
        if let Some(missing) = ptx.missing_libdevice.first() {
            return Err(format!("`{name}` calls libdevice's `{missing}`, but libdevice was not found (set QUASI_LIBDEVICE to libdevice.10.bc)").into());
        }
        let epoch = state.epoch;
        if let Some(loaded) =
            state.loaded.get(name).filter(|loaded| loaded.fingerprint == ptx.fingerprint && loaded.epoch == epoch)
        {
            return Ok(loaded.function);
        }
        state.handles()?;
        if let Some(old) = state.loaded.remove(name).filter(|old| old.epoch == epoch) {
            if state.running.is_empty() {
                // SAFETY: a module of the current context that nothing uses any more.
                let _ = unsafe { result::module::unload(old.module) };
            } else {
                // A running submission may still call into it.
                state.retired.push(Handle(old.module));
            }
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
        self.rows.record("load".into(), start.elapsed(), None, format!("module of `{name}`"));
        state.loaded.insert(name.to_string(), Loaded { fingerprint: ptx.fingerprint.clone(), epoch, module, function });
        Ok(function)
    }

    /// Gives the device up for the rest of the process without a CUDA call: a kernel still runs
    /// in the context, and resetting or releasing it would wait for that kernel (on an H200,
    /// driver 580, past a minute for one that never ends). Every buffer made before is stale;
    /// every GPU form then answers `message`.
    fn abandon(&self, message: String) {
        let mut state = self.lock();
        state.start = Start::Absent(message);
        state.forget_context();
    }

    /// After a kernel fault the context is unusable: it is reset and made again, and every
    /// buffer made before becomes stale. Where the driver keeps the fault for the rest of the
    /// process (an H200 with driver 580 refuses every new context with the fault's error), the
    /// device is given up, and the message says so.
    fn recover(&self) -> String {
        let mut state = self.lock();
        let Start::Ready(handles) =
            std::mem::replace(&mut state.start, Start::Absent("the GPU context was lost".into()))
        else {
            return "the GPU context was lost".into();
        };
        let ordinal = handles.device;
        close(handles);
        // Host memory stays, and is page-locked again with the new context below.
        state.forget_context();
        match reopen(ordinal) {
            Ok(handles) => {
                state.start = Start::Ready(handles);
                for (&address, &bytes) in &state.hosts {
                    // SAFETY: Quasi's own mapping of `bytes`, alive until `host_free`.
                    let _ = unsafe { sys::cuMemHostRegister_v2(address as *mut c_void, bytes, 0) };
                }
                "the GPU context was recreated, and buffers made before are stale".into()
            }
            Err(why) => {
                let message = format!(
                    "no CUDA device: the driver keeps the kernel fault for the rest of the process ({why}): {RESTART}"
                );
                state.start = Start::Absent(message.clone());
                message
            }
        }
    }
}

/// What a user does once the driver cannot go on in this process.
const RESTART: &str =
    "the GPU is unusable until Quasi restarts (in Jupyter, restart the kernel); definitions and host data are intact";

/// Waits until `event` has completed: answers true then, and false when `give_up` said to stop
/// first. Polled rather than `cuEventSynchronize`d, which no interrupt can end (a kernel that
/// never ends, such as lanes waiting at different warp operations, would hang the session):
/// spinning for the first 100 µs keeps a short launch's round trip as short as a blocking
/// wait's, then a query every 100 µs costs nothing a long kernel would notice.
fn wait_for(event: sys::CUevent, give_up: &dyn Fn() -> bool) -> Result<bool, result::DriverError> {
    let start = Instant::now();
    loop {
        // SAFETY: `event` is a live event of the current context.
        match unsafe { result::event::query(event) } {
            Ok(()) => return Ok(true),
            Err(error) if error.0 == sys::cudaError_enum::CUDA_ERROR_NOT_READY => {}
            Err(error) => return Err(error),
        }
        if give_up() {
            return Ok(false);
        }
        if start.elapsed() > Duration::from_micros(100) {
            std::thread::sleep(Duration::from_micros(100));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Resets the primary context of `ordinal` after a fault and opens it again, twice at most.
/// Whether the driver lets the process go on shows only when the context is opened again: an
/// H200 with driver 580 resets without complaint, then refuses every new context, primary or
/// not, with the fault's CUDA_ERROR_ILLEGAL_ADDRESS (`scripts/raw-launch.c recover`). The
/// reset's own status is kept for the message, not trusted.
fn reopen(ordinal: sys::CUdevice) -> Result<Handles, String> {
    let mut failures = Vec::new();
    for _ in 0..2 {
        // SAFETY: resets the primary context of a device `device::get` returned; nothing of
        // the old context is used after this (its memory and modules are of an older epoch).
        if let Err(error) = unsafe { sys::cuDevicePrimaryCtxReset_v2(ordinal).result() } {
            failures.push(format!("the reset said {}", cuda_error(error)));
        }
        match open_context(ordinal) {
            Ok(handles) => return Ok(handles),
            Err(error) => failures.push(format!("opening the context again said {}", cuda_error(error))),
        }
    }
    Err(failures.join("; "))
}

impl CudaDevice {
    /// A stream and events for a submission: an anchor, and a start and an end per command.
    fn take_resources(&self, submission: &Submission) -> Result<Resources, DeviceError> {
        let mut state = self.lock();
        let failed = |what: &str, error| format!("{what} for a submission failed: {}", cuda_error(error));
        let stream = match state.free_streams.pop() {
            Some(stream) => stream,
            None => Handle(
                result::stream::create(result::stream::StreamKind::NonBlocking)
                    .map_err(|error| failed("creating a stream", error))?,
            ),
        };
        let mut event = || -> Result<Handle<sys::CUevent>, DeviceError> {
            match state.free_events.pop() {
                Some(event) => Ok(event),
                None => Ok(Handle(
                    result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                        .map_err(|error| failed("creating an event", error))?,
                )),
            }
        };
        let anchor = event()?;
        let mut commands = Vec::with_capacity(submission.commands.len());
        for command in &submission.commands {
            let (bytes, copy, detail) = match command {
                Command::Copy(copy) => (Some(copy.bytes), Some(*copy), String::new()),
                Command::Call { dimensions: [gx, gy, gz, bx, by, bz], bytes, .. } => {
                    (*bytes, None, format!("grid ({gx}, {gy}, {gz}) block ({bx}, {by}, {bz})"))
                }
            };
            let events = (event()?, event()?);
            commands.push(Timed { label: command.label(), bytes, copy, detail, events });
        }
        Ok((stream, anchor, commands))
    }

    /// Queues a submission's commands on its stream, each between its events, after the anchor
    /// event (`anchored`: the host's clock just after it was recorded).
    fn queue(
        &self,
        submission: &Submission,
        stream: Handle<sys::CUstream>,
        anchor: sys::CUevent,
        anchored: &mut Instant,
        timed: &mut [Timed],
        functions: &[sys::CUfunction],
    ) -> Result<(), String> {
        let stream = stream.0;
        let mut functions = functions.iter();
        // SAFETY: the stream and events belong to the current context; device ranges lie in
        // live buffers (the runtime checked them) that no `gpu-free` can free while the
        // submission runs; host ranges are the program's (trusted, as C's memcpy trusts them),
        // and kernel parameters are copied by `cuLaunchKernel` when it is called.
        unsafe {
            result::event::record(anchor, stream).map_err(cuda_error)?;
            *anchored = Instant::now();
            for (command, timed) in submission.commands.iter().zip(timed) {
                result::event::record(timed.events.0 .0, stream).map_err(cuda_error)?;
                match command {
                    Command::Copy(copy) => {
                        let bytes = copy.bytes as usize;
                        match copy.kind {
                            CopyKind::HostToDevice => result::memcpy_htod_async(
                                copy.target,
                                std::slice::from_raw_parts(copy.source as *const u8, bytes),
                                stream,
                            ),
                            CopyKind::DeviceToHost => result::memcpy_dtoh_async(
                                std::slice::from_raw_parts_mut(copy.target as *mut u8, bytes),
                                copy.source,
                                stream,
                            ),
                            CopyKind::DeviceToDevice => {
                                result::memcpy_dtod_async(copy.target, copy.source, bytes, stream)
                            }
                        }
                        .map_err(|error| format!("queueing {} failed: {}", command.label(), cuda_error(error)))?;
                    }
                    Command::Call { name, dimensions, values, .. } => {
                        let function = *functions.next().ok_or("a kernel without its function (a bug in Quasi)")?;
                        let mut values = values.clone();
                        let mut parameters: Vec<*mut c_void> =
                            values.iter_mut().map(|value| value as *mut u64 as *mut c_void).collect();
                        let grid = (dimensions[0] as u32, dimensions[1] as u32, dimensions[2] as u32);
                        let block = (dimensions[3] as u32, dimensions[4] as u32, dimensions[5] as u32);
                        result::launch_kernel(function, grid, block, 0, stream, &mut parameters)
                            .map_err(|error| format!("launching `{name}` failed: {}", cuda_error(error)))?;
                    }
                }
                result::event::record(timed.events.1 .0, stream).map_err(cuda_error)?;
            }
        }
        Ok(())
    }

    /// The rows of a submission that ended: each command between its events, placed on the
    /// host's clock from the anchor.
    fn record_rows(&self, running: &Running) {
        let lane = Lane::Submission(running.id);
        let (anchor, anchored) = running.anchor;
        for timed in &running.commands {
            // SAFETY: events of the current context that have completed.
            let (offset, length) = unsafe {
                (
                    result::event::elapsed(anchor.0, timed.events.0 .0),
                    result::event::elapsed(timed.events.0 .0, timed.events.1 .0),
                )
            };
            let (Ok(offset), Ok(length)) = (offset, length) else { continue };
            let start = anchored + Duration::from_secs_f64(f64::from(offset.max(0.0)) / 1e3);
            let duration = Duration::from_secs_f64(f64::from(length.max(0.0)) / 1e3);
            let detail = match (&timed.copy, timed.bytes) {
                (Some(copy), _) => copy_detail(copy, duration),
                (None, Some(bytes)) => format!("{}, {}", timed.detail, gb_per_second(bytes, duration)),
                (None, None) => timed.detail.clone(),
            };
            self.rows.record_on(lane, Some(start), timed.label.clone(), duration, timed.bytes, detail);
            running.fence.command_finished();
        }
    }

    /// Gives a submission's stream and events back to the pools, if of the current epoch.
    fn recycle(&self, running: Running) {
        let mut state = self.lock();
        if running.epoch != state.epoch {
            return;
        }
        state.free_streams.push(running.stream);
        state.free_events.push(running.anchor.0);
        for timed in running.commands {
            state.free_events.push(timed.events.0);
            state.free_events.push(timed.events.1);
        }
    }
}

impl State {
    /// A new epoch: memory, modules, streams and events of the context just lost are forgotten,
    /// never used or freed again (they died with it, or die with the process).
    fn forget_context(&mut self) {
        self.epoch += 1;
        self.loaded.clear();
        self.allocations.clear();
        self.free_streams.clear();
        self.free_events.clear();
        self.retired.clear();
    }

    /// The handles, made current on this thread; waits for the start-up if it is still
    /// running, and starts a deferred driver. Without a device, the error says so.
    fn handles(&mut self) -> Result<Handles, DeviceError> {
        if let Start::Deferred = &self.start {
            self.start = match start_device() {
                Ok(handles) => Start::Ready(handles),
                Err(message) => Start::Absent(message),
            };
        }
        if let Start::Starting(_) = &self.start {
            let Start::Starting(handle) = std::mem::replace(&mut self.start, Start::Deferred) else {
                unreachable!("just matched")
            };
            let started = handle.join().unwrap_or_else(|_| Err("no CUDA device: the driver's start-up failed".into()));
            self.start = match started {
                Ok(handles) => Start::Ready(handles),
                Err(message) => Start::Absent(message),
            };
        }
        match &self.start {
            Start::Ready(handles) => {
                // SAFETY: the context is live (retained by this device).
                unsafe { result::ctx::set_current(handles.context) }
                    .map_err(|error| format!("the CUDA context cannot be used: {}", cuda_error(error)))?;
                Ok(*handles)
            }
            Start::Absent(message) => Err(DeviceError::unavailable(message.clone())),
            _ => Err(DeviceError::unavailable("no CUDA device".into())),
        }
    }
}

impl Device for CudaDevice {
    fn place(&self) -> &'static str {
        "on the device"
    }

    fn describe(&self) -> String {
        let named = self
            .handles()
            .map(|(handles, _)| result::device::get_name(handles.device).unwrap_or_else(|_| "a CUDA device".into()));
        match named {
            Ok(name) => format!("GPU: the device, {name}"),
            Err(message) => format!("GPU: the device, but {message}; `:gpu sim` runs launches on the CPU"),
        }
    }

    fn alloc(&self, bytes: u64, _what: String) -> Result<Memory, DeviceError> {
        let (_, epoch) = self.handles()?;
        // SAFETY: the context is current; the memory is owned by the new allocation, freed by
        // `free` or with the device.
        let pointer = unsafe {
            let pointer = result::malloc_sync(bytes.max(1) as usize)
                .map_err(|error| format!("`gpu-alloc` of {bytes} bytes failed: {}", cuda_error(error)))?;
            result::memset_d8_sync(pointer, 0, bytes as usize)
                .map_err(|error| format!("zeroing a new buffer failed: {}", cuda_error(error)))?;
            pointer
        };
        self.lock().allocations.insert(pointer);
        Ok(Memory { address: pointer, epoch })
    }

    fn free(&self, memory: Memory) -> Result<(), DeviceError> {
        self.handles()?;
        // SAFETY: the memory belongs to this device's current epoch (the runtime checked it is
        // not lost) and is not used after this.
        unsafe { result::free_sync(memory.address) }
            .map_err(|error| format!("`gpu-free` failed: {}", cuda_error(error)))?;
        self.lock().allocations.remove(&memory.address);
        Ok(())
    }

    fn is_lost(&self, memory: Memory) -> bool {
        memory.epoch != self.lock().epoch
    }

    fn copy(&self, copy: Copy) -> Result<(), DeviceError> {
        self.handles()?;
        let start = Instant::now();
        let bytes = copy.bytes as usize;
        // SAFETY: device ranges lie inside live buffers of the current context (checked by the
        // runtime). C-Lisp promises nothing about host pointers: like C's memcpy, the copy
        // reads or writes `bytes` at the program's pointer.
        let copied = unsafe {
            match copy.kind {
                CopyKind::HostToDevice => {
                    result::memcpy_htod_sync(copy.target, std::slice::from_raw_parts(copy.source as *const u8, bytes))
                        .map_err(|error| format!("copying to the GPU failed: {}", cuda_error(error)))
                }
                CopyKind::DeviceToHost => {
                    result::memcpy_dtoh_sync(std::slice::from_raw_parts_mut(copy.target as *mut u8, bytes), copy.source)
                        .map_err(|error| format!("copying from the GPU failed: {}", cuda_error(error)))
                }
                CopyKind::DeviceToDevice => result::memcpy_dtod_sync(copy.target, copy.source, bytes)
                    .map_err(|error| format!("`gpu-copy` failed: {}", cuda_error(error))),
            }
        };
        copied?;
        self.rows.record_copy(&copy, start.elapsed());
        Ok(())
    }

    fn read(&self, address: u64, bytes: u64) -> Result<Vec<u8>, DeviceError> {
        self.handles()?;
        let mut read = vec![0u8; bytes as usize];
        // SAFETY: the range lies inside a live buffer (the runtime read its length).
        unsafe { result::memcpy_dtoh_sync(&mut read, address) }.map_err(cuda_error)?;
        Ok(read)
    }

    fn prepare(&self, name: &str) -> Result<(), DeviceError> {
        self.function(name).map(drop)
    }

    fn launch(&self, launch: &Launch<'_>) -> Result<(), DeviceError> {
        let function = self.function(launch.name)?;
        let (handles, _) = self.handles()?;
        let name = launch.name;
        // Each parameter points at its value; CUDA reads as many bytes as the parameter has.
        let mut values = launch.values.to_vec();
        let mut parameters: Vec<*mut c_void> =
            values.iter_mut().map(|value| value as *mut u64 as *mut c_void).collect();
        let dimensions = launch.dimensions;
        let grid = (dimensions[0] as u32, dimensions[1] as u32, dimensions[2] as u32);
        let block = (dimensions[3] as u32, dimensions[4] as u32, dimensions[5] as u32);
        // SAFETY: `function` is a loaded kernel of the current context whose parameters are
        // the scalars and pointers `check` matched to these values, which outlive the launch
        // (it is waited for below).
        let outcome = unsafe {
            result::event::record(handles.start, std::ptr::null_mut())
                .and_then(|()| result::launch_kernel(function, grid, block, 0, std::ptr::null_mut(), &mut parameters))
                .and_then(|()| result::event::record(handles.end, std::ptr::null_mut()))
                .and_then(|()| wait_for(handles.end, launch.give_up))
                .and_then(|ended| match ended {
                    true => result::event::elapsed(handles.start, handles.end).map(Some),
                    false => Ok(None),
                })
        };
        match outcome {
            Ok(None) => {
                let message = format!(
                    "no CUDA device: kernel `{name}` was interrupted while it ran, and the driver cannot stop a \
                     running kernel short of ending the process: {RESTART}"
                );
                self.abandon(message.clone());
                Err(DeviceError::unavailable(message))
            }
            Ok(Some(milliseconds)) => {
                let duration = Duration::from_secs_f64(f64::from(milliseconds) / 1e3);
                let mut detail =
                    format!("grid ({}, {}, {}) block ({}, {}, {})", grid.0, grid.1, grid.2, block.0, block.1, block.2);
                if let Some(bytes) = launch.bytes {
                    detail.push_str(&format!(", {}", gb_per_second(bytes, duration)));
                }
                self.rows.record(format!("kernel {name}"), duration, launch.bytes, detail);
                Ok(())
            }
            Err(error) => {
                let message = cuda_error(error);
                let recovered = self.recover();
                Err(format!("kernel `{name}` failed: {message}; {recovered}").into())
            }
        }
    }

    fn available(&self) -> Result<(), DeviceError> {
        self.handles().map(drop)
    }

    fn submit(&self, submission: Submission, _give_up: &dyn Fn() -> bool) -> Result<(), DeviceError> {
        // Functions first: loading a module records a row, and fails before anything is queued.
        let mut functions = Vec::new();
        for command in &submission.commands {
            if let Command::Call { name, .. } = command {
                functions.push(self.function(name)?);
            }
        }
        let (_, epoch) = self.handles()?;
        let (stream, anchor, mut commands) = self.take_resources(&submission)?;
        // The host's clock when the anchor event was recorded: an idle stream passes it at once.
        let mut anchored = Instant::now();
        let queued = self.queue(&submission, stream, anchor.0, &mut anchored, &mut commands, &functions);
        let anchor = (anchor, anchored);
        let running = Running { id: submission.id, fence: submission.fence, epoch, stream, anchor, commands };
        if let Err(message) = queued {
            // What was queued runs out before the resources are used again.
            // SAFETY: a stream of the current context.
            let _ = unsafe { result::stream::synchronize(stream.0) };
            self.recycle(running);
            return Err(message.into());
        }
        self.lock().running.push(running);
        Ok(())
    }

    fn poll(&self) -> Duration {
        let mut state = self.lock();
        if state.running.is_empty() {
            return Duration::from_millis(10);
        }
        if state.handles().is_err() {
            for running in std::mem::take(&mut state.running) {
                running.fence.end(Err("the CUDA device is gone".to_string().into()));
            }
            return Duration::from_millis(10);
        }
        let mut ended = Vec::new();
        let mut failed = None;
        let mut index = 0;
        while index < state.running.len() {
            let running = &state.running[index];
            if running.epoch != state.epoch {
                let running = state.running.swap_remove(index);
                let message =
                    format!("submission {} was lost: a kernel fault reset the GPU before it finished", running.id);
                running.fence.end(Err(message.into()));
                continue;
            }
            let last = running.commands.last().map_or(running.anchor.0, |timed| timed.events.1);
            // SAFETY: an event of the current context.
            match unsafe { result::event::query(last.0) } {
                Ok(()) => ended.push(state.running.swap_remove(index)),
                Err(error) if error.0 == sys::cudaError_enum::CUDA_ERROR_NOT_READY => index += 1,
                Err(error) => {
                    let running = state.running.swap_remove(index);
                    failed = Some((running, cuda_error(error)));
                    break;
                }
            }
        }
        if state.running.is_empty() {
            for module in std::mem::take(&mut state.retired) {
                // SAFETY: a module of the current context that no submission uses any more.
                let _ = unsafe { result::module::unload(module.0) };
            }
        }
        drop(state);
        for running in ended {
            self.record_rows(&running);
            let fence = Arc::clone(&running.fence);
            self.recycle(running);
            fence.end(Ok(()));
        }
        if let Some((running, message)) = failed {
            let kernels: Vec<String> = running
                .commands
                .iter()
                .filter_map(|timed| timed.label.strip_prefix("kernel ").map(|name| format!("`{name}`")))
                .collect();
            let recovered = self.recover();
            let what = if kernels.is_empty() { "a copy".to_string() } else { format!("kernel {}", kernels.join(", ")) };
            let message = format!("{what} of submission {} failed: {message}; {recovered}", running.id);
            running.fence.end(Err(message.into()));
        }
        Duration::from_micros(20)
    }

    fn host_alloc(&self, bytes: u64) -> Result<u64, DeviceError> {
        self.handles()?;
        let size = usize::try_from(bytes.max(1)).map_err(|_| format!("`host-alloc` of {bytes} bytes"))?;
        // SAFETY: a new anonymous mapping (zeroed), unmapped by `host_free` or with the device.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(format!("`host-alloc` of {bytes} bytes failed: {}", std::io::Error::last_os_error()).into());
        }
        // SAFETY: the mapping just made, of `size` bytes, page-locked with the current context.
        if let Err(error) = unsafe { sys::cuMemHostRegister_v2(address, size, 0).result() } {
            // SAFETY: as above; nothing else has it.
            unsafe { libc::munmap(address, size) };
            return Err(format!("page-locking {bytes} bytes for `host-alloc` failed: {}", cuda_error(error)).into());
        }
        self.lock().hosts.insert(address as u64, size);
        Ok(address as u64)
    }

    fn host_free(&self, address: u64) {
        let Some(size) = self.lock().hosts.remove(&address) else { return };
        // SAFETY: memory `host_alloc` mapped and registered, which no submission uses (the
        // runtime saw); unregistering from a context reset since fails harmlessly.
        unsafe {
            if self.handles().is_ok() {
                let _ = sys::cuMemHostUnregister(address as *mut c_void);
            }
            libc::munmap(address as *mut c_void, size);
        }
    }

    fn stop_submissions(&self) {
        self.poll();
        let running = std::mem::take(&mut self.lock().running);
        if running.is_empty() {
            return;
        }
        // A kernel cannot be stopped on its own: resetting the context stops everything.
        let recovered = self.recover();
        for running in running {
            running.fence.end(Err(format!("{}; {recovered}", super::device::cancelled(running.id).message).into()));
        }
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if !self.lock().running.is_empty() {
            self.stop_submissions();
        }
        let state = self.state.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        let hosts = std::mem::take(&mut state.hosts);
        let handles = match std::mem::replace(&mut state.start, Start::Deferred) {
            Start::Starting(handle) => handle.join().ok().and_then(Result::ok),
            Start::Ready(handles) => Some(handles),
            _ => None,
        };
        // SAFETY: `host-alloc` memory is Quasi's own mapping; the program is done with it.
        let unmap = || unsafe {
            for (&address, &size) in &hosts {
                libc::munmap(address as *mut c_void, size);
            }
        };
        let Some(handles) = handles else {
            unmap();
            return;
        };
        // SAFETY: the context is current for the frees; memory, modules, streams and events of
        // the current epoch are live, older ones died with their context and are not touched.
        unsafe {
            let _ = result::ctx::set_current(handles.context);
            for &address in hosts.keys() {
                let _ = sys::cuMemHostUnregister(address as *mut c_void);
            }
            for stream in &state.free_streams {
                let _ = result::stream::destroy(stream.0);
            }
            for event in &state.free_events {
                let _ = result::event::destroy(event.0);
            }
            for module in &state.retired {
                let _ = result::module::unload(module.0);
            }
            for pointer in &state.allocations {
                let _ = result::free_sync(*pointer);
            }
            for loaded in state.loaded.values().filter(|loaded| loaded.epoch == state.epoch) {
                let _ = result::module::unload(loaded.module);
            }
        }
        unmap();
        close(handles);
    }
}
