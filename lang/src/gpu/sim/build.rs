//! Device code built for the simulator: the launched function and its callees lowered for the
//! host (`codegen::sim`), compiled by the back end for `Target::Sim` (O3), and linked into the
//! session's JIT next to its cells with storage of the simulator's for its device globals.
//! `gpu::build` decides when (a member or a global it reads changed) and frees the old build.

use super::executor::{Allocation, SimKernel, THREAD_STACK};
use super::facts::{self, Facts};
use crate::backend::{BackendError, Emit, Target};
use crate::check::MAX_SHARED_BYTES;
use crate::codegen::{CodegenError, SimLowering, SimTarget};
use crate::gpu::source::{launchable, llvm_crashed, DeviceSource, LowerError};
use crate::link::Program;

/// A kernel compiled for the simulator, not yet linked.
pub(crate) struct SimBuild {
    object: Vec<u8>,
    entry: String,
    sim: SimLowering,
    shared_bytes: u64,
    facts: Facts,
}

/// Compiles `root`'s device code for the simulator (`Target::Sim`).
pub(crate) fn compile(
    source: &DeviceSource<'_>,
    root: &std::rc::Rc<crate::tree::FunctionDef>,
    target: SimTarget,
) -> Result<SimBuild, String> {
    let check = target.check;
    let members = launchable(source, root).map_err(|diagnostic| diagnostic.message)?;
    let backend = source.backend;
    let sim = Target::Sim;
    let module_name = format!("sim#{}", target.prefix);
    let lowered = source.lower(&members, &sim, Some(target), &module_name).map_err(|error| match error {
        LowerError::Backend(error) => error.to_string(),
        LowerError::Codegen(CodegenError::Unsupported(message)) => message,
        LowerError::Codegen(other) => format!("code generation for the simulator failed (a bug in Quasi): {other}"),
    })?;
    if lowered.shared_bytes > MAX_SHARED_BYTES {
        return Err(format!(
            "it uses {} bytes of shared memory, more than the {MAX_SHARED_BYTES} a kernel may have",
            lowered.shared_bytes
        ));
    }
    // With checking on, the proofs read the optimised code's checked accesses.
    let mut facts = Facts::default();
    let mut frame = 0;
    let entry = lowered.entry.clone();
    let mut inspect = |module: &inkwell::module::Module<'_>| {
        frame = largest_frame(module);
        if check {
            facts = facts::analyse(module, &entry);
        }
    };
    let object = match backend.compile_inspected(lowered.module, &sim, Emit::Code, &mut inspect) {
        Ok(compiled) => compiled.code,
        Err(BackendError::Crashed(signal)) => return Err(llvm_crashed(&root.name, signal, "the simulator").message),
        Err(error) => return Err(error.to_string()),
    };
    if frame > FRAME_LIMIT as u64 {
        return Err(format!(
            "its local variables take {frame} bytes in one function, more than a simulated GPU thread's stack \
             ({} KiB) holds (a GPU thread has at most 512 KiB of local memory); use a buffer or shared memory",
            THREAD_STACK >> 10
        ));
    }
    let sim = lowered.sim.unwrap_or_default();
    Ok(SimBuild { object, entry: lowered.entry, sim, shared_bytes: lowered.shared_bytes, facts })
}

/// The most bytes of local variables a function of the build may keep: the rest of a simulated
/// thread's stack is for calls, spills and the simulator's own frames.
const FRAME_LIMIT: usize = THREAD_STACK - (64 << 10);

/// The most bytes of fixed-size local variables (allocas) one function of the optimised build
/// keeps on its stack.
fn largest_frame(module: &inkwell::module::Module<'_>) -> u64 {
    use inkwell::values::Operand;
    let layout = module.get_data_layout();
    let data = inkwell::targets::TargetData::create(&layout.as_str().to_string_lossy());
    let frame = |function: inkwell::values::FunctionValue<'_>| -> u64 {
        let instructions = function.get_basic_blocks().into_iter().flat_map(|block| block.get_instructions());
        instructions
            .filter_map(|instruction| {
                let ty = instruction.get_allocated_type().ok()?;
                let count = match instruction.get_operand(0) {
                    Some(Operand::Value(count)) if count.is_int_value() => {
                        count.into_int_value().get_zero_extended_constant().unwrap_or(1)
                    }
                    _ => 1,
                };
                Some(data.get_abi_size(&ty).saturating_mul(count))
            })
            .fold(0, u64::saturating_add)
    };
    module.get_functions().map(frame).max().unwrap_or(0)
}

/// Makes the build's globals, links its code; returns the kernel and the code's id.
pub(crate) fn link(program: &mut Program, name: &str, build: SimBuild) -> Result<(SimKernel, u64), String> {
    let SimBuild { object, entry, sim, shared_bytes, facts } = build;
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
    let global_symbols = symbols.into_iter().collect();
    let kernel = SimKernel {
        entry,
        shared_bytes,
        barrier: sim.barrier,
        sites: sim.sites,
        globals,
        global_symbols,
        shared_arrays: sim.shared,
        facts,
        warps: sim.warp,
    };
    Ok((kernel, id))
}
