//! Device code built for the simulator: the launched function and its callees lowered for the
//! host (`codegen::sim`), optimised at O3, linked into the session's JIT next to its cells,
//! and registered with the runtime. Rebuilt, like PTX, when a member or a global it reads
//! changes; the old build's code is freed then.

use std::sync::Arc;
use std::time::Instant;

use super::ptx::{launchable, Built, DeviceSource, SessionGpu};
use super::sim::{Allocation, SimKernel};
use crate::backend::{BackendError, Emit, Target};
use crate::check::{self, MAX_SHARED_BYTES};
use crate::codegen::{self, CodegenError, DeviceUnit, SimLowering, SimTarget};
use crate::link::Program;
use crate::timing::{DeviceTiming, PhaseTimes};

/// A build waiting to be linked (the program is borrowed by the build's source until then).
pub(crate) struct PendingSim {
    name: String,
    built: Built,
    result: Result<Compiled, String>,
}

struct Compiled {
    object: Vec<u8>,
    entry: String,
    sim: SimLowering,
    shared_bytes: u64,
}

impl SessionGpu {
    /// The simulator's build of `name`, unless the current one is up to date.
    pub(super) fn ensure_simulated(
        &mut self,
        source: &DeviceSource<'_>,
        name: &str,
        check: bool,
        timing: &mut PhaseTimes,
    ) -> Option<PendingSim> {
        let root = check::defined(source.env, name)?;
        let now = Built::of(source, &root, &format!("sim check={check}"));
        if self.sim_built.get(name).is_some_and(|(built, _)| built.is_current(&now)) {
            return None;
        }
        let start = Instant::now();
        self.builds += 1;
        let prefix = format!("{}#{name}", self.builds);
        let result = compile(source, &root, SimTarget { check, prefix });
        timing.device.push(DeviceTiming {
            label: "sim".into(),
            duration: start.elapsed(),
            bytes: None,
            detail: format!("`{name}` for the simulator"),
            during_run: false,
        });
        Some(PendingSim { name: name.to_string(), built: now, result })
    }

    /// Links pending builds and registers them with the runtime, freeing the builds they
    /// replace.
    pub(crate) fn install_simulated(&mut self, program: &mut Program, pending: Vec<PendingSim>) {
        for PendingSim { name, built, result } in pending {
            let linked = result.and_then(|compiled| link(program, &name, compiled));
            let (kernel, id) = match linked {
                Ok((kernel, id)) => (Ok(Arc::new(kernel)), Some(id)),
                Err(message) => (Err(message), None),
            };
            self.runtime.set_sim_kernel(&name, kernel);
            if let Some((_, Some(old))) = self.sim_built.insert(name, (built, id)) {
                program.remove_device(old);
            }
        }
    }
}

impl SessionGpu {
    /// What `:gpu` says: where launches run.
    pub(crate) fn describe_mode(&self) -> String {
        match self.runtime.mode() {
            super::Mode::Sim { check: true } => {
                "GPU: the simulator (launches run on the CPU; accesses and barriers are checked)".into()
            }
            super::Mode::Sim { check: false } => "GPU: the simulator (launches run on the CPU, unchecked)".into(),
            super::Mode::Device => match self.runtime.device_name() {
                Ok(name) => format!("GPU: the device, {name}"),
                Err(message) => format!("GPU: the device, but {message}; `:gpu sim` runs launches on the CPU"),
            },
        }
    }
}

/// The mode `QUASI_GPU` asks for: `sim`, `sim-unchecked` or `device`.
pub(crate) fn mode_from_environment() -> Result<Option<super::Mode>, String> {
    match std::env::var("QUASI_GPU") {
        Err(_) => Ok(None),
        Ok(value) if value.is_empty() => Ok(None),
        Ok(value) => match super::Mode::from_name(&value) {
            Some(mode) => Ok(Some(mode)),
            None => Err(format!("QUASI_GPU is `{value}`; it may be {}", super::Mode::NAMES)),
        },
    }
}

fn compile(
    source: &DeviceSource<'_>,
    root: &std::rc::Rc<crate::tree::FunctionDef>,
    target: SimTarget,
) -> Result<Compiled, String> {
    let members = launchable(source, root).map_err(|diagnostic| diagnostic.message)?;
    let backend = source.backend;
    let sim = Target::Sim;
    let target_data = backend.target_data(&sim).map_err(|error| error.to_string())?;
    let unit = DeviceUnit {
        members: &members,
        globals: &source.env.globals,
        structs: &source.env.structs,
        sim: Some(target.clone()),
    };
    let lowered = codegen::lower_device(
        &backend.context,
        &target_data,
        &backend.triple(&sim),
        &unit,
        source.struct_names,
        &format!("sim#{}", target.prefix),
    )
    .map_err(|error| match error {
        CodegenError::Unsupported(message) => message,
        other => format!("code generation for the simulator failed (a bug in Quasi): {other}"),
    })?;
    if lowered.shared_bytes > MAX_SHARED_BYTES {
        return Err(format!(
            "it uses {} bytes of shared memory, more than the {MAX_SHARED_BYTES} a kernel may have",
            lowered.shared_bytes
        ));
    }
    let object = match backend.compile(lowered.module, &sim, Emit::Code) {
        Ok(compiled) => compiled.code,
        Err(BackendError::Crashed(signal)) => {
            return Err(super::ptx::llvm_crashed(&root.name, signal, "the simulator").message)
        }
        Err(error) => return Err(error.to_string()),
    };
    let sim = lowered.sim.unwrap_or_default();
    Ok(Compiled { object, entry: lowered.entry, sim, shared_bytes: lowered.shared_bytes })
}

/// Makes the build's globals, links its code; returns the kernel and the code's id.
fn link(program: &mut Program, name: &str, compiled: Compiled) -> Result<(SimKernel, u64), String> {
    let Compiled { object, entry, sim, shared_bytes } = compiled;
    let mut globals = Vec::new();
    let mut symbols = Vec::new();
    for global in sim.globals {
        let mut memory = Allocation::zeroed(global.image.len())?;
        memory.bytes_mut().copy_from_slice(&global.image);
        symbols.push((global.symbol, memory.start()));
        globals.push((global.name, memory));
    }
    let (id, entry) = program.link_device(&object, name, &symbols, &entry).map_err(|diagnostic| {
        format!("linking the simulator's build failed (a bug in Quasi): {}", diagnostic.message)
    })?;
    Ok((SimKernel { entry, shared_bytes, barrier: sim.barrier, sites: sim.sites, globals }, id))
}
