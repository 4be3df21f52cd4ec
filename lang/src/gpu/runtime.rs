//! The GPU runtime host code reaches through the `abi::RT_GPU_*` functions: buffers by handle,
//! transfers, launches (with Lapis-annotated host arrays staged through device memory), the
//! message and source of the last failure, and the timing rows. It runs every operation on the
//! `Device` `:gpu` chose — the CUDA device or the simulator — and never asks which one that is.
//!
//! Its address is the JIT symbol `abi::RT_GPU`. Its lock guards the buffer table and the last
//! error only, and is never held while a device touches the program's memory or runs a kernel:
//! those may fault, and a fault leaves by the guard's long jump, past any lock guard.

mod encode;
mod work;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use super::cuda::{CompiledPtx, CudaDevice};
use super::device::{Copy, CopyKind, Device, DeviceError, Launch, Memory, Mode, Rows};
use super::sim::{runtime_check, runtime_fault, runtime_sync, runtime_warp, SimDevice, SimKernel};
use crate::abi::{
    ArgKind, CopyDirection, Direction, LaunchArg, LAUNCH_DIMENSIONS, RT_GPU, RT_GPU_ALLOC, RT_GPU_COPY, RT_GPU_FREE,
    RT_GPU_LAUNCH, RT_GPU_LEN, SIM_CHECK, SIM_FAULT, SIM_SYNC, SIM_WARP,
};
use crate::timing::DeviceTiming;
use crate::types::Ty;
use work::Work;

/// A buffer host code holds by handle.
#[derive(Clone, Copy)]
struct Buffer {
    memory: Memory,
    length: u64,
    element_size: u64,
    /// Where the device that made it keeps its memory (`Device::place`): a buffer of another
    /// device is not used.
    place: &'static str,
}

struct State {
    mode: Mode,
    buffers: HashMap<u64, Buffer>,
    next_handle: u64,
    /// The last failed operation's error (`abi::FaultCode::Gpu` reports it).
    error: Option<DeviceError>,
    /// Host arrays staged for a launch that a fault or an interrupt ended before it freed
    /// them: freed at the next launch.
    abandoned: Vec<(&'static str, Memory)>,
    /// Encoders, submissions and `host-alloc` memory (docs/language.md §7.8).
    work: Work,
    /// The host side of the copy running now: a fault in it names the copy.
    host_copy: Option<HostCopy>,
}

/// The host memory a copy reads or writes, and how a fault in it is named.
struct HostCopy {
    what: String,
    address: u64,
    bytes: u64,
    write: bool,
}

/// The session's GPU runtime.
pub(crate) struct Runtime {
    state: Mutex<State>,
    cuda: CudaDevice,
    simulator: SimDevice,
    rows: Rows,
    /// The session's interrupt flag: `await` stops waiting when it is set.
    interrupt: Arc<AtomicBool>,
}

/// A host array moved through device memory for one launch.
struct Staged {
    memory: Memory,
    host: u64,
    bytes: u64,
    /// How the copy back to the host is named, for one the kernel writes.
    copy_back: Option<String>,
}

impl Runtime {
    /// A runtime whose CUDA device starts in the background now (`defer`: when a GPU form
    /// first needs it, for a session that a process forks before it runs anything).
    pub(crate) fn new(defer: bool, interrupt: Arc<AtomicBool>) -> Box<Runtime> {
        let rows = Rows::default();
        let state = State {
            mode: Mode::Device,
            buffers: HashMap::new(),
            next_handle: 1,
            error: None,
            abandoned: Vec::new(),
            work: Work::default(),
            host_copy: None,
        };
        Box::new(Runtime {
            state: Mutex::new(state),
            cuda: CudaDevice::new(defer, rows.clone()),
            simulator: SimDevice::new(rows.clone()),
            rows,
            interrupt,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The device `:gpu` chose.
    fn device(&self) -> &dyn Device {
        match self.lock().mode {
            Mode::Device => &self.cuda,
            Mode::Sim { .. } => &self.simulator,
        }
    }

    /// The runtime functions compiled host code calls, and this runtime's own address.
    pub(crate) fn runtime_symbols(&self) -> Vec<(String, usize)> {
        let mut symbols = vec![
            (RT_GPU.to_string(), self as *const Runtime as usize),
            (RT_GPU_ALLOC.to_string(), runtime_alloc as *const () as usize),
            (RT_GPU_FREE.to_string(), runtime_free as *const () as usize),
            (RT_GPU_LEN.to_string(), runtime_len as *const () as usize),
            (RT_GPU_COPY.to_string(), runtime_copy as *const () as usize),
            (RT_GPU_LAUNCH.to_string(), runtime_launch as *const () as usize),
            (SIM_SYNC.to_string(), runtime_sync as *const () as usize),
            (SIM_CHECK.to_string(), runtime_check as *const () as usize),
            (SIM_WARP.to_string(), runtime_warp as *const () as usize),
            (SIM_FAULT.to_string(), runtime_fault as *const () as usize),
        ];
        symbols.extend(self.work_symbols());
        symbols
    }

    /// Waits until the CUDA driver's start-up, begun by `new`, has ended.
    pub(crate) fn wait_for_start(&self) {
        self.cuda.wait_for_start();
    }

    pub(crate) fn mode(&self) -> Mode {
        self.lock().mode
    }

    /// Switches between the device and the simulator. Buffers of the other device stay, but
    /// using one is an error.
    pub(crate) fn set_mode(&self, mode: Mode) {
        if let Mode::Sim { check } = mode {
            self.simulator.set_checked(check);
        }
        self.lock().mode = mode;
    }

    /// What `:gpu` says: where launches run.
    pub(crate) fn describe_mode(&self) -> String {
        self.device().describe()
    }

    /// Registers the PTX of a launched function with the CUDA device (or why it has none).
    pub(crate) fn install_ptx(&self, name: &str, ptx: Result<Arc<CompiledPtx>, String>) {
        self.cuda.install(name, ptx);
    }

    /// Registers the simulator's build of a launched function (or why it has none); returns
    /// the build it replaces.
    pub(crate) fn install_simulated(
        &self,
        name: &str,
        kernel: Result<Arc<SimKernel>, String>,
    ) -> Option<Arc<SimKernel>> {
        self.simulator.install(name, kernel)
    }

    /// Whether a segmentation fault at `address` was a simulated thread's stack overflow.
    pub(crate) fn simulated_stack_overflow(&self, address: usize) -> bool {
        self.simulator.is_stack_overflow(address)
    }

    /// The error of the last failed host GPU form (`abi::FaultCode::Gpu`).
    pub(crate) fn take_error(&self) -> Option<DeviceError> {
        self.lock().error.take()
    }

    /// Timing rows of transfers and launches since the last call.
    pub(crate) fn take_rows(&self) -> Vec<DeviceTiming> {
        self.rows.take()
    }

    /// A buffer as a value prints: `<gpu 4 × float> [0.0, 1.0, 2.0, 3.0]`.
    pub(crate) fn describe(&self, handle: u64, element: &Ty) -> String {
        match self.read_shown(handle) {
            Ok((length, bytes)) => crate::value::buffer_text(length, element, &bytes),
            Err(error) => format!("<gpu buffer: {}>", error.message),
        }
    }

    /// The length of a buffer and the bytes of the elements a printed value shows.
    fn read_shown(&self, handle: u64) -> Result<(u64, Vec<u8>), DeviceError> {
        if handle == 0 {
            return Err("null".to_string().into());
        }
        let buffer = self.buffer(handle, "print")?;
        let device = self.device();
        let mut bytes = Vec::new();
        for index in crate::value::buffer_shown_indices(buffer.length) {
            let address = buffer.memory.address + index * buffer.element_size;
            bytes.extend(device.read(address, buffer.element_size)?);
        }
        Ok((buffer.length, bytes))
    }

    /// A live buffer of the current device; `form` names the form using it for the message.
    fn buffer(&self, handle: u64, form: &str) -> Result<Buffer, DeviceError> {
        let buffer = self.lock().buffers.get(&handle).copied();
        let device = self.device();
        let message = match buffer {
            _ if handle == 0 => format!("`{form}` of a null buffer: it was never allocated"),
            None => format!("`{form}` of a freed buffer"),
            Some(buffer) if buffer.place != device.place() => {
                format!("`{form}` of a buffer made {}; `:gpu` has switched since", buffer.place)
            }
            Some(buffer) if device.is_lost(buffer.memory) => {
                format!("`{form}` of a stale buffer: it was made before a kernel fault reset the GPU")
            }
            Some(buffer) => return Ok(buffer),
        };
        Err(message.into())
    }

    fn alloc(&self, element_size: i64, count: i64) -> Result<i64, DeviceError> {
        if count < 0 {
            return Err(format!("`gpu-alloc` of {count} elements").into());
        }
        let bytes = (count as u64)
            .checked_mul(element_size.max(1) as u64)
            .ok_or_else(|| "`gpu-alloc` of more bytes than a machine has".to_string())?;
        let device = self.device();
        let memory = device.alloc(bytes, format!("a buffer of {count} elements"))?;
        let buffer =
            Buffer { memory, length: count as u64, element_size: element_size.max(1) as u64, place: device.place() };
        let mut state = self.lock();
        let handle = state.next_handle;
        state.next_handle += 1;
        state.buffers.insert(handle, buffer);
        Ok(handle as i64)
    }

    fn free(&self, handle: u64) -> Result<(), DeviceError> {
        let buffer = self.buffer(handle, "gpu-free")?;
        self.device().poll();
        if let Some(submission) = self.lock().work.user_of(handle) {
            return Err(format!(
                "`gpu-free` of a buffer that submission {submission} uses, and it is still running: await its fence first"
            )
            .into());
        }
        self.device().free(buffer.memory)?;
        self.lock().buffers.remove(&handle);
        Ok(())
    }

    fn copy(
        &self,
        direction: i64,
        destination: i64,
        source: i64,
        count: i64,
        element_size: i64,
    ) -> Result<(), DeviceError> {
        let (copy, _) = self.resolve_copy("gpu-copy", direction, destination, source, count, element_size)?;
        self.copy_with_host(self.device(), copy, || "`gpu-copy`".into())
    }

    /// Makes `copy` on `device`, noting its host side first: the program's host pointer is
    /// trusted (as memcpy trusts it), and a fault in the copy is then reported as the copy
    /// `what` names, not as a fault of the compiled code that asked for it.
    fn copy_with_host(
        &self,
        device: &dyn Device,
        copy: Copy,
        what: impl FnOnce() -> String,
    ) -> Result<(), DeviceError> {
        let host = copy.host_side();
        if let Some((address, write)) = host {
            self.lock().host_copy = Some(HostCopy { what: what(), address, bytes: copy.bytes, write });
        }
        // A fault leaves by a long jump here: the note stays for `faulted_copy`.
        let copied = device.copy(copy);
        if host.is_some() {
            self.lock().host_copy = None;
        }
        copied
    }

    /// Why a segmentation fault (at `fault`, its address) happened, if it was in the host side
    /// of a copy: the message names the copy. Forgets the copy whatever the fault (it ended the
    /// copy).
    pub(crate) fn faulted_copy(&self, fault: Option<usize>) -> Option<String> {
        let copy = self.lock().host_copy.take()?;
        // Only the copy runs between its note and its end: the fault is the copy's, wherever
        // it was (a non-canonical address faults as address 0).
        let address = fault?;
        let (access, side, done) = if copy.write { ("writes", "into", "written") } else { ("reads", "from", "read") };
        let end = copy.address.saturating_add(copy.bytes);
        let which = match address as u64 {
            inside if inside > copy.address && inside < end => format!("and address {inside:#x} cannot be {done}"),
            _ => format!("which cannot be {done}"),
        };
        Some(format!(
            "segmentation fault in {}: it {access} {} bytes {side} host memory at {:#x}, {which}",
            copy.what, copy.bytes, copy.address
        ))
    }

    /// A copy as the device makes it, its buffers checked (`form` names the form for the
    /// messages), and the handles of the buffers it uses.
    fn resolve_copy(
        &self,
        form: &str,
        direction: i64,
        destination: i64,
        source: i64,
        count: i64,
        element_size: i64,
    ) -> Result<(Copy, Vec<u64>), DeviceError> {
        if count < 0 {
            return Err(format!("`{form}` of {count} elements").into());
        }
        let bytes = count as u64 * element_size.max(1) as u64;
        let mut handles = Vec::new();
        let mut checked = |handle: i64, which: &str| -> Result<u64, DeviceError> {
            let buffer = self.buffer(handle as u64, form)?;
            handles.push(handle as u64);
            if count as u64 > buffer.length {
                Err(format!("`{form}` of {count} elements, but the {which} buffer holds {}", buffer.length).into())
            } else {
                Ok(buffer.memory.address)
            }
        };
        let copy = match CopyDirection::from_code(direction) {
            Some(CopyDirection::HostToDevice) => Copy {
                kind: CopyKind::HostToDevice,
                target: checked(destination, "destination")?,
                source: source as u64,
                bytes,
            },
            Some(CopyDirection::DeviceToHost) => Copy {
                kind: CopyKind::DeviceToHost,
                target: destination as u64,
                source: checked(source, "source")?,
                bytes,
            },
            Some(CopyDirection::DeviceToDevice) | None => {
                let target = checked(destination, "destination")?;
                Copy { kind: CopyKind::DeviceToDevice, target, source: checked(source, "source")?, bytes }
            }
        };
        Ok((copy, handles))
    }

    fn launch(&self, name: &str, dimensions: [i64; LAUNCH_DIMENSIONS], args: &[LaunchArg]) -> Result<(), DeviceError> {
        check_dimensions(name, dimensions)?;
        let device = self.device();
        // Host arrays a fault or an interrupt left staged.
        let abandoned = std::mem::take(&mut self.lock().abandoned);
        for (place, memory) in abandoned {
            if place == device.place() && !device.is_lost(memory) {
                device.free(memory)?;
            }
        }
        device.prepare(name)?;
        let mut values: Vec<u64> = Vec::with_capacity(args.len());
        let mut staged: Vec<Staged> = Vec::new();
        let prepared = self.prepare_arguments(device, "launch", name, args, &mut values, Some(&mut staged));
        let launched = prepared.and_then(|bytes| {
            let launch = Launch { name, dimensions, values: &values, bytes, give_up: &|| self.interrupted() };
            device.launch(&launch)?;
            staged.iter().try_for_each(|staged| {
                let Some(what) = &staged.copy_back else { return Ok(()) };
                let copy = Copy {
                    kind: CopyKind::DeviceToHost,
                    target: staged.host,
                    source: staged.memory.address,
                    bytes: staged.bytes,
                };
                self.copy_with_host(device, copy, || what.clone())
            })
        });
        self.lock().abandoned.clear();
        // After a kernel fault on the GPU, the temporaries died with their context.
        for staged in &staged {
            if !device.is_lost(staged.memory) {
                let _ = device.free(staged.memory);
            }
        }
        launched
    }

    /// The kernel's parameter values, staging host arrays through device memory (`staged`:
    /// none for `form` `encode-call`); returns the bytes the annotations say the kernel reads
    /// and writes (for GB/s), if any.
    fn prepare_arguments(
        &self,
        device: &dyn Device,
        form: &str,
        name: &str,
        args: &[LaunchArg],
        values: &mut Vec<u64>,
        mut staged: Option<&mut Vec<Staged>>,
    ) -> Result<Option<u64>, DeviceError> {
        let mut moved: Option<u64> = None;
        for (index, arg) in args.iter().enumerate() {
            let bytes = arg.annotated_count().map(|count| count * arg.element_bytes());
            let direction = Direction::from_code(arg.direction);
            let times = u64::from(direction.reads()) + u64::from(direction.writes());
            if let (Some(bytes), true) = (bytes, times > 0) {
                moved = Some(moved.unwrap_or(0) + bytes * times);
            }
            match ArgKind::from_code(arg.kind) {
                Some(ArgKind::Scalar | ArgKind::DevicePointer) => values.push(arg.value as u64),
                Some(ArgKind::Buffer) => {
                    let buffer = self.buffer(arg.value as u64, form)?;
                    if let Some(count) = arg.annotated_count().filter(|count| *count > buffer.length) {
                        return Err(format!(
                            "argument {} of `{name}` is a buffer of {} elements, but its annotation needs {count}",
                            index + 1,
                            buffer.length
                        )
                        .into());
                    }
                    values.push(buffer.memory.address);
                }
                Some(ArgKind::Host) => {
                    let Some(staged) = staged.as_deref_mut() else {
                        return Err(format!(
                            "argument {} of `{name}` is host memory, which an encoded launch cannot copy (a bug in Quasi)",
                            index + 1
                        )
                        .into());
                    };
                    let bytes = bytes
                        .ok_or_else(|| format!("argument {} of `{name}` is host memory without a size", index + 1))?;
                    let memory = device
                        .alloc(bytes, "the host array staged for the launch".into())
                        .map_err(|error| format!("staging argument {} of `{name}` failed: {error}", index + 1))?;
                    // Until the launch frees it, it is the next launch's to free (a fault or an
                    // interrupt may end this one anywhere).
                    self.lock().abandoned.push((device.place(), memory));
                    let what = |to: &str| format!("the copy of argument {} of `{name}` {to}", index + 1);
                    let copy_back = direction.writes().then(|| what("back from the device"));
                    staged.push(Staged { memory, host: arg.value as u64, bytes, copy_back });
                    if direction.reads() {
                        let copy = Copy {
                            kind: CopyKind::HostToDevice,
                            target: memory.address,
                            source: arg.value as u64,
                            bytes,
                        };
                        self.copy_with_host(device, copy, || what("to the device"))?;
                    }
                    values.push(memory.address);
                }
                None => {
                    return Err(
                        format!("argument {} of `{name}` has an unknown kind (a bug in Quasi)", index + 1).into()
                    )
                }
            }
        }
        Ok(moved)
    }

    /// Keeps a failure for the fault compiled code raises next.
    fn fail(&self, error: DeviceError) {
        self.lock().error = Some(error);
    }
}

/// A launch's grid and block as CUDA allows them.
fn check_dimensions(name: &str, dimensions: [i64; LAUNCH_DIMENSIONS]) -> Result<(), String> {
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

/// Runs one runtime call for compiled code: a failure is kept as the message of the fault
/// compiled code raises next, and a panic never unwinds into compiled code.
fn with_runtime<T>(runtime: *const Runtime, failed: T, work: impl FnOnce(&Runtime) -> Result<T, DeviceError>) -> T {
    // SAFETY: compiled code passes the address of the session's `Runtime` (the `abi::RT_GPU`
    // symbol), which lives as long as the session's code.
    let Some(runtime) = (unsafe { runtime.as_ref() }) else { return failed };
    let outcome = catch_unwind(AssertUnwindSafe(|| work(runtime)));
    let error = match outcome {
        Ok(Ok(value)) => return value,
        Ok(Err(error)) => error,
        Err(_) => "the GPU runtime failed unexpectedly (a bug in Quasi)".to_string().into(),
    };
    runtime.fail(error);
    failed
}

extern "C" fn runtime_alloc(runtime: *const Runtime, element_size: i64, count: i64) -> i64 {
    with_runtime(runtime, 0, |runtime| runtime.alloc(element_size, count))
}

extern "C" fn runtime_free(runtime: *const Runtime, handle: i64) -> i32 {
    with_runtime(runtime, 1, |runtime| runtime.free(handle as u64).map(|()| 0))
}

extern "C" fn runtime_len(runtime: *const Runtime, handle: i64) -> i64 {
    with_runtime(runtime, -1, |runtime| runtime.buffer(handle as u64, "gpu-len").map(|buffer| buffer.length as i64))
}

extern "C" fn runtime_copy(
    runtime: *const Runtime,
    direction: i64,
    destination: i64,
    source: i64,
    count: i64,
    element_size: i64,
) -> i32 {
    with_runtime(runtime, 1, |runtime| runtime.copy(direction, destination, source, count, element_size).map(|()| 0))
}

extern "C" fn runtime_launch(
    runtime: *const Runtime,
    name: *const u8,
    name_length: i64,
    dimensions: *const i64,
    args: *const LaunchArg,
    arg_count: i64,
) -> i32 {
    // SAFETY: codegen passes the description `launch_description` reads.
    let (name, dimensions, args) = unsafe { launch_description(name, name_length, dimensions, args, arg_count) };
    with_runtime(runtime, 1, |runtime| runtime.launch(&name, dimensions, &args).map(|()| 0))
}

/// A launch as compiled code describes it: the kernel's name, its grid and block, and its
/// arguments.
///
/// # Safety
/// Codegen passes the kernel's name (a constant of `name_length` bytes), `LAUNCH_DIMENSIONS`
/// dimensions and `arg_count` descriptors laid out as `LaunchArg`s (word by word, 8-aligned),
/// all in memory that lives across the call.
unsafe fn launch_description(
    name: *const u8,
    name_length: i64,
    dimensions: *const i64,
    args: *const LaunchArg,
    arg_count: i64,
) -> (String, [i64; LAUNCH_DIMENSIONS], Vec<LaunchArg>) {
    // SAFETY: the caller's promise.
    unsafe {
        let name = std::str::from_utf8(std::slice::from_raw_parts(name, name_length.max(0) as usize))
            .unwrap_or("?")
            .to_string();
        let dimensions: [i64; LAUNCH_DIMENSIONS] =
            std::slice::from_raw_parts(dimensions, LAUNCH_DIMENSIONS).try_into().unwrap_or([1; LAUNCH_DIMENSIONS]);
        let args = std::slice::from_raw_parts(args, arg_count.max(0) as usize).to_vec();
        (name, dimensions, args)
    }
}

impl Drop for Runtime {
    /// Submissions end before the memory they use goes: `host-alloc` memory here, buffers
    /// with the devices.
    fn drop(&mut self) {
        self.stop_submissions();
        self.free_hosts();
    }
}
