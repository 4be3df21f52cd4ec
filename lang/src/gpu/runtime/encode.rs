//! Asynchronous device work for compiled code (docs/language.md §7.8): encoders that record
//! commands, checked as they are recorded and again when submitted; submissions that run them
//! on the device `:gpu` chose; the fences host code awaits, interruptibly; `host-alloc` memory.
//! Encoders and fences are handles, numbered per session (a fence's number is its submission's,
//! the lane of its timeline); each belongs to the device that was chosen when it was made.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::work::{Encoded, Encoder, Submitted};
use super::{check_dimensions, launch_description, with_runtime, Runtime};
use crate::abi::{
    ArgKind, LaunchArg, LAUNCH_DIMENSIONS, RT_GPU_AWAIT, RT_GPU_ENCODE_BEGIN, RT_GPU_ENCODE_CALL, RT_GPU_ENCODE_COPY,
    RT_GPU_FENCE_DONE, RT_GPU_HOST_ALLOC, RT_GPU_SUBMIT,
};
use crate::gpu::device::{Command, Device, DeviceError, Fence, Submission};

impl Runtime {
    /// The runtime functions of this file compiled code calls.
    pub(super) fn work_symbols(&self) -> Vec<(String, usize)> {
        vec![
            (RT_GPU_ENCODE_BEGIN.to_string(), runtime_encode_begin as *const () as usize),
            (RT_GPU_ENCODE_COPY.to_string(), runtime_encode_copy as *const () as usize),
            (RT_GPU_ENCODE_CALL.to_string(), runtime_encode_call as *const () as usize),
            (RT_GPU_SUBMIT.to_string(), runtime_submit as *const () as usize),
            (RT_GPU_AWAIT.to_string(), runtime_await as *const () as usize),
            (RT_GPU_FENCE_DONE.to_string(), runtime_fence_done as *const () as usize),
            (RT_GPU_HOST_ALLOC.to_string(), runtime_host_alloc as *const () as usize),
        ]
    }

    /// `(encode-begin gpu)`: a new encoder of the current device.
    fn encode_begin(&self) -> Result<i64, DeviceError> {
        let device = self.device();
        device.available()?;
        let mut state = self.lock();
        state.work.next_encoder += 1;
        let handle = state.work.next_encoder;
        state.work.encoders.insert(handle, Encoder { place: device.place(), commands: Vec::new() });
        Ok(handle as i64)
    }

    /// Checks that `handle` is an encoder of the current device that can still be encoded into.
    fn open_encoder(&self, handle: u64, form: &str) -> Result<(), DeviceError> {
        let place = self.device().place();
        let state = self.lock();
        let message = match state.work.encoders.get(&handle) {
            None if handle == 0 || handle > state.work.next_encoder => {
                format!("`{form}` of an encoder that was never made: it comes from `(encode-begin gpu)`")
            }
            None => {
                let what = if form == "submit" { "`submit` of".to_string() } else { format!("`{form}` into") };
                format!("{what} an encoder that was submitted already: encode into a new `(encode-begin gpu)`")
            }
            Some(encoder) if encoder.place != place => {
                format!("`{form}` of an encoder made {}; `:gpu` has switched since", encoder.place)
            }
            Some(_) => return Ok(()),
        };
        Err(message.into())
    }

    /// `(encode-copy E DST SRC n)`: checked now, recorded.
    fn encode_copy(&self, encoder: u64, copy: [i64; 5]) -> Result<(), DeviceError> {
        self.open_encoder(encoder, "encode-copy")?;
        let [direction, destination, source, count, element_size] = copy;
        self.resolve_copy("encode-copy", direction, destination, source, count, element_size)?;
        let command = Encoded::Copy { direction, destination, source, count, element_size };
        self.push_command(encoder, command);
        Ok(())
    }

    /// `(encode-call E K (grid …) (block …) ARG…)`: checked now (scalars are taken now),
    /// recorded.
    fn encode_call(
        &self,
        encoder: u64,
        name: &str,
        dimensions: [i64; LAUNCH_DIMENSIONS],
        args: Vec<LaunchArg>,
    ) -> Result<(), DeviceError> {
        self.open_encoder(encoder, "encode-call")?;
        self.resolve_call(name, dimensions, &args)?;
        self.push_command(encoder, Encoded::Call { name: name.to_string(), dimensions, args });
        Ok(())
    }

    fn push_command(&self, encoder: u64, command: Encoded) {
        if let Some(encoder) = self.lock().work.encoders.get_mut(&encoder) {
            encoder.commands.push(command);
        }
    }

    /// A launch's parameter values, its buffers checked, and the bytes it moves; readies the
    /// kernel's code on the device.
    fn resolve_call(
        &self,
        name: &str,
        dimensions: [i64; LAUNCH_DIMENSIONS],
        args: &[LaunchArg],
    ) -> Result<(Command, Vec<u64>), DeviceError> {
        check_dimensions(name, dimensions)?;
        let device = self.device();
        device.prepare(name)?;
        let mut values = Vec::with_capacity(args.len());
        let bytes = self.prepare_arguments(device, "encode-call", name, args, &mut values, None)?;
        let buffers = args
            .iter()
            .filter(|arg| ArgKind::from_code(arg.kind) == Some(ArgKind::Buffer))
            .map(|arg| arg.value as u64)
            .collect();
        Ok((Command::Call { name: name.to_string(), dimensions, values, bytes }, buffers))
    }

    /// `(submit E)`: E's commands, checked again (a buffer may have been freed since they were
    /// recorded), start on the device; E is consumed; the fence's number.
    fn submit(&self, encoder: u64) -> Result<i64, DeviceError> {
        let started = Instant::now();
        self.open_encoder(encoder, "submit")?;
        let device = self.device();
        let Some(Encoder { place, commands: encoded }) = self.lock().work.encoders.remove(&encoder) else {
            return Err("`submit` of an encoder that is gone (a bug in Quasi)".to_string().into());
        };
        // Until it runs, the encoder is as it was: a failure puts it back.
        let restore = |encoded: Vec<Encoded>| {
            self.lock().work.encoders.insert(encoder, Encoder { place, commands: encoded });
        };
        let mut commands = Vec::with_capacity(encoded.len());
        let mut buffers = Vec::new();
        for (index, command) in encoded.iter().enumerate() {
            let resolved = match command {
                Encoded::Copy { direction, destination, source, count, element_size } => self
                    .resolve_copy("encode-copy", *direction, *destination, *source, *count, *element_size)
                    .map(|(copy, used)| (Command::Copy(copy), used)),
                Encoded::Call { name, dimensions, args } => self.resolve_call(name, *dimensions, args),
            };
            match resolved {
                Ok((command, used)) => {
                    commands.push(command);
                    buffers.extend(used);
                }
                Err(error) => {
                    // The encoder stays as it was, to be submitted once the cause is fixed.
                    restore(encoded);
                    return Err(format!("`submit`: command {}: {}", index + 1, error.message).into());
                }
            }
        }
        let count = commands.len();
        let fence = Fence::new();
        let id = {
            let mut state = self.lock();
            state.work.next_submission += 1;
            let id = state.work.next_submission;
            let submitted = Submitted { place: device.place(), fence: Arc::clone(&fence), buffers };
            state.work.submissions.insert(id, submitted);
            id
        };
        let submission = Submission { id, commands, fence };
        let give_up = || self.interrupted();
        if let Err(error) = device.submit(submission, &give_up) {
            // Nothing ran: the encoder is as it was.
            self.lock().work.submissions.remove(&id);
            restore(encoded);
            return Err(error);
        }
        let plural = if count == 1 { "" } else { "s" };
        self.rows.record("submit".into(), started.elapsed(), None, format!("submission {id}: {count} command{plural}"));
        Ok(id as i64)
    }

    /// The submission of fence `handle`, of the current device; `None` if it ended and was
    /// awaited (and forgotten).
    fn submitted(&self, handle: u64, form: &str) -> Result<Option<Arc<Fence>>, DeviceError> {
        let place = self.device().place();
        let state = self.lock();
        let message = match state.work.submissions.get(&handle) {
            None if handle == 0 || handle > state.work.next_submission => {
                format!("`{form}` of a fence that no `submit` made")
            }
            None => return Ok(None),
            Some(submitted) if submitted.place != place => {
                format!("`{form}` of a fence of a submission {}; `:gpu` has switched since", submitted.place)
            }
            Some(submitted) => return Ok(Some(Arc::clone(&submitted.fence))),
        };
        Err(message.into())
    }

    /// `(await F)`: waits, interruptibly, until F's submission ended; its first failure is
    /// this form's. Awaiting a fence again does nothing.
    fn await_fence(&self, handle: u64) -> Result<(), DeviceError> {
        let Some(fence) = self.submitted(handle, "await")? else { return Ok(()) };
        let started = Instant::now();
        let device = self.device();
        if !fence.wait(None, &|| device.poll(), &|| self.interrupted()) {
            return Err(format!("interrupted while awaiting submission {handle}, which keeps running").into());
        }
        self.rows.record("await".into(), started.elapsed(), None, format!("submission {handle}"));
        self.lock().work.submissions.remove(&handle);
        match fence.take_failure() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// `(fence-done F)`: whether F's submission ended.
    fn fence_done(&self, handle: u64) -> Result<bool, DeviceError> {
        let Some(fence) = self.submitted(handle, "fence-done")? else { return Ok(true) };
        self.device().poll();
        Ok(fence.is_ended())
    }

    /// `(host-alloc T n)`: page-locked host memory, freed at `:reset`/exit.
    fn host_alloc(&self, element_size: i64, count: i64) -> Result<i64, DeviceError> {
        let bytes = u64::try_from(count)
            .ok()
            .and_then(|count| count.checked_mul(element_size.max(1) as u64))
            .ok_or_else(|| format!("`host-alloc` of {count} elements"))?;
        let device = self.device();
        let address = device.host_alloc(bytes)?;
        self.lock().work.hosts.insert(address, device.place());
        Ok(address as i64)
    }

    /// Whether the session asked to interrupt the running cell.
    pub(super) fn interrupted(&self) -> bool {
        self.interrupt.load(Ordering::SeqCst)
    }

    /// Stops every submission of both devices (a reset, the session's end): see
    /// `Device::stop_submissions`.
    pub(crate) fn stop_submissions(&self) {
        self.cuda.stop_submissions();
        self.simulator.stop_submissions();
    }

    /// Frees `host-alloc` memory (after `stop_submissions`).
    pub(super) fn free_hosts(&self) {
        let hosts = std::mem::take(&mut self.lock().work.hosts);
        for (address, place) in hosts {
            if place == Device::place(&self.simulator) {
                self.simulator.host_free(address);
            } else {
                self.cuda.host_free(address);
            }
        }
    }

    /// Why a host access at `address` faulted, if it raced with a running submission.
    pub(crate) fn host_conflict(&self, address: usize, write: bool) -> Option<String> {
        self.simulator.host_conflict(address, write)
    }
}

// The functions compiled code calls (`abi::RT_GPU_ENCODE_*`, `RT_GPU_SUBMIT`…).

extern "C" fn runtime_encode_begin(runtime: *const Runtime) -> i64 {
    with_runtime(runtime, 0, Runtime::encode_begin)
}

extern "C" fn runtime_encode_copy(
    runtime: *const Runtime,
    encoder: i64,
    direction: i64,
    destination: i64,
    source: i64,
    count: i64,
    element_size: i64,
) -> i32 {
    with_runtime(runtime, 1, |runtime| {
        runtime.encode_copy(encoder as u64, [direction, destination, source, count, element_size]).map(|()| 0)
    })
}

extern "C" fn runtime_encode_call(
    runtime: *const Runtime,
    encoder: i64,
    name: *const u8,
    name_length: i64,
    dimensions: *const i64,
    args: *const LaunchArg,
    arg_count: i64,
) -> i32 {
    // SAFETY: as for `runtime_launch`, whose description this is.
    let (name, dimensions, args) = unsafe { launch_description(name, name_length, dimensions, args, arg_count) };
    with_runtime(runtime, 1, |runtime| runtime.encode_call(encoder as u64, &name, dimensions, args).map(|()| 0))
}

extern "C" fn runtime_submit(runtime: *const Runtime, encoder: i64) -> i64 {
    with_runtime(runtime, 0, |runtime| runtime.submit(encoder as u64))
}

extern "C" fn runtime_await(runtime: *const Runtime, fence: i64) -> i32 {
    with_runtime(runtime, 1, |runtime| runtime.await_fence(fence as u64).map(|()| 0))
}

extern "C" fn runtime_fence_done(runtime: *const Runtime, fence: i64) -> i32 {
    with_runtime(runtime, -1, |runtime| runtime.fence_done(fence as u64).map(i32::from))
}

extern "C" fn runtime_host_alloc(runtime: *const Runtime, element_size: i64, count: i64) -> i64 {
    with_runtime(runtime, 0, |runtime| runtime.host_alloc(element_size, count))
}
