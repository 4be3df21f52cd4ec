//! Back end: every module Quasi compiles goes through `Backend::compile(module, Target, Emit)` —
//! a cell for the host at its `:opt` level, device code as PTX for a GPU architecture or for
//! the simulator, a promoted body in the background compiler, a scratch module for a listing.
//! It owns what that takes: the LLVM context modules are lowered into (with the handler that
//! collects LLVM's errors about their code), the target machines (the host's per level, made on
//! first use, and NVPTX's for the last architecture asked for), each level's pass pipeline, the
//! code-generation pipeline reused across modules (`csrc/emit.cpp`), the object cache of
//! `quasi run`, and the crash guard around LLVM (a crash ends one compile, not the session).
//!
//! It knows nothing of cells, names or the JIT: it takes an inkwell module and gives back bytes
//! and, when asked, listings.

use std::cell::{OnceCell, RefCell};
use std::rc::Rc;
use std::sync::Once;
use std::time::{Duration, Instant};

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target as LlvmTarget, TargetData, TargetMachine, TargetTriple,
};
use inkwell::OptimizationLevel;

mod cache;

pub(crate) use cache::{quasi_cache_folder, Format, ObjectKey};
pub use cache::{ObjectCache, BUDGET as CACHE_BUDGET, CACHE_VARIABLE};

use crate::guard;
use crate::jit::LlvmDiagnostics;

/// The NVPTX target triple.
const NVPTX_TRIPLE: &str = "nvptx64-nvidia-cuda";

/// What a module is compiled for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The host CPU at an `:opt` level (0 to 3): an object file to link.
    Host(u8),
    /// PTX for an NVIDIA GPU architecture (`sm_90`), optimised at O3: PTX text.
    Nvptx(String),
    /// Device code lowered for the host, for the GPU simulator, optimised at O3: an object file.
    Sim,
}

/// What `compile` is asked to give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Emit {
    /// The code to load: an object file, or PTX.
    Code,
    /// The code and the listings of its stages (`Listing`), for `:ir`, `:asm`, `:ptx`.
    Listing,
}

/// A compiled module.
pub(crate) struct Compiled {
    /// The object file (host and simulator targets) or the PTX text (NVPTX); for a host
    /// listing, the assembly.
    pub code: Vec<u8>,
    /// With `Emit::Listing`: the IR before and after the passes and the assembly (the PTX).
    pub listing: Option<Listing>,
    /// Time in the pass pipeline; `None` when none ran (level 0, or the object came from the
    /// cache).
    pub optimise: Option<Duration>,
    /// Time in code generation, or in reading the object cache.
    pub emit: Duration,
}

/// The stages of a compiled module, as text.
pub(crate) struct Listing {
    pub ir: String,
    pub optimised: String,
    pub assembly: String,
}

/// Why a module did not compile. Never the user's program's fault, except `Rejected`
/// (inline assembly the assembler refused).
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackendError {
    /// LLVM has no target machine for the target.
    #[error("{0}")]
    Machine(String),
    /// LLVM's pass pipeline failed.
    #[error("LLVM passes failed: {0}")]
    Passes(String),
    /// LLVM could not emit the code.
    #[error("LLVM could not emit code: {0}")]
    Emit(String),
    /// LLVM crashed (with this signal) in the passes or code generation; the module was leaked.
    #[error("LLVM crashed ({})", crate::guard::signal_name(*.0))]
    Crashed(i32),
    /// LLVM reported errors about the code through the context: inline assembly the assembler
    /// rejected, a construct the target cannot select.
    #[error("{}", .0.join("; "))]
    Rejected(Vec<String>),
}

/// The back end's level per `:opt` level. Level 1 keeps LLVM's fast instruction selection and
/// register allocation (`None`): its IR passes already give the code most of its speed, and
/// the back end at `Less` tripled a small cell's latency (1.2 ms against 0.3 ms, measured).
const MACHINE_LEVELS: [OptimizationLevel; 4] =
    [OptimizationLevel::None, OptimizationLevel::None, OptimizationLevel::Default, OptimizationLevel::Aggressive];

/// The LLVM pass pipeline of an optimisation level above 0.
fn pass_pipeline(level: u8) -> &'static str {
    match level {
        1 => "function(mem2reg,instcombine<no-verify-fixpoint>,simplifycfg)",
        2 => "default<O2>",
        _ => "default<O3>",
    }
}

/// Sets up LLVM's native target once per process.
pub(crate) fn initialise_llvm() -> Result<(), String> {
    static INIT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    INIT.get_or_init(|| LlvmTarget::initialize_native(&InitializationConfig::default())).clone()
}

extern "C" {
    fn quasi_emitter_create(machine: llvm_sys::target_machine::LLVMTargetMachineRef) -> *mut std::ffi::c_void;
    fn quasi_emitter_emit(
        emitter: *mut std::ffi::c_void,
        module: llvm_sys::prelude::LLVMModuleRef,
        data: *mut *const u8,
        size: *mut usize,
    );
    fn quasi_emitter_dispose(emitter: *mut std::ffi::c_void);
}

/// A code-generation pass pipeline built once for a target machine and run on every module
/// (`csrc/emit.cpp`): LLVM's C API builds it anew per module, which cost a small cell 0.3–0.7 ms.
struct Emitter(std::ptr::NonNull<std::ffi::c_void>);

impl Emitter {
    /// The pipeline of `machine`, which must outlive it.
    fn new(machine: &TargetMachine) -> Option<Emitter> {
        // SAFETY: a live target machine; the emitter keeps a pointer to it, and `Backend`
        // drops its emitters before its machines.
        std::ptr::NonNull::new(unsafe { quasi_emitter_create(machine.as_mut_ptr()) }).map(Emitter)
    }

    /// The object file of `module`.
    fn emit(&self, module: &Module<'_>) -> Vec<u8> {
        let (mut data, mut size) = (std::ptr::null(), 0);
        // SAFETY: the emitter and module are live, and the back end uses an emitter on one
        // thread at a time (`Backend` is not `Sync`). The bytes are copied before the next call.
        unsafe {
            quasi_emitter_emit(self.0.as_ptr(), module.as_mut_ptr(), &mut data, &mut size);
            std::slice::from_raw_parts(data, size).to_vec()
        }
    }
}

impl Drop for Emitter {
    fn drop(&mut self) {
        // SAFETY: made by quasi_emitter_create, disposed of once.
        unsafe { quasi_emitter_dispose(self.0.as_ptr()) }
    }
}

/// The host back end of one session.
pub(crate) struct Backend {
    /// The context every module of the session is created in (cells, scratch listings, PTX).
    pub(crate) context: Context,
    /// LLVM's errors about the context's code (after `context`, so it is dropped after it).
    pub(crate) llvm_diagnostics: Box<LlvmDiagnostics>,
    triple: TargetTriple,
    /// The host CPU's name and features, which the machines compile for.
    host: OnceCell<(String, String)>,
    /// Each level's object emitter, made with its machine (before `machines`: dropped first).
    emitters: [OnceCell<Emitter>; 4],
    /// One machine per level, made when a level is first used (a machine costs ~1 ms).
    machines: [OnceCell<TargetMachine>; 4],
    /// The NVPTX machine of the last GPU architecture compiled for. Shared out (`Rc`) rather
    /// than borrowed: a crash in LLVM leaves the code that used it by a long jump, which must
    /// not leave the cell borrowed.
    nvptx: RefCell<Option<(String, Rc<TargetMachine>)>>,
    /// Where host objects are kept between processes (`quasi run`), if anywhere.
    cache: Option<ObjectCache>,
}

impl Backend {
    /// A back end for the host CPU.
    pub(crate) fn new() -> Result<Backend, String> {
        initialise_llvm()?;
        let context = Context::create();
        let llvm_diagnostics = LlvmDiagnostics::install(&context);
        Ok(Backend {
            context,
            llvm_diagnostics,
            triple: TargetMachine::get_default_triple(),
            host: OnceCell::new(),
            emitters: Default::default(),
            machines: Default::default(),
            nvptx: RefCell::new(None),
            cache: None,
        })
    }

    /// The triple code for `target` is lowered for.
    pub(crate) fn triple(&self, target: &Target) -> TargetTriple {
        match target {
            Target::Nvptx(_) => TargetTriple::create(NVPTX_TRIPLE),
            Target::Host(_) | Target::Sim => TargetTriple::create(&self.triple.as_str().to_string_lossy()),
        }
    }

    /// The data layout code for `target` is lowered for.
    pub(crate) fn target_data(&self, target: &Target) -> Result<TargetData, BackendError> {
        match target {
            Target::Host(level) => Ok(self.machine(*level)?.get_target_data()),
            Target::Sim => Ok(self.machine(SIM_LEVEL)?.get_target_data()),
            Target::Nvptx(arch) => self.with_nvptx_machine(arch, |machine| machine.get_target_data()),
        }
    }

    /// Makes `cache` the object cache of host code: `compile` takes a host module's object from
    /// it when the same IR was compiled before by a back end like this one, and stores what it
    /// emits (`quasi run`). `None`: compile everything.
    pub(crate) fn set_object_cache(&mut self, cache: Option<ObjectCache>) {
        self.cache = cache;
    }

    /// The object cache, if there is one.
    pub(crate) fn object_cache(&self) -> Option<&ObjectCache> {
        self.cache.as_ref()
    }

    /// Compiles `module` for `target`: runs the target's pass pipeline, then its code generation,
    /// behind the crash guard. LLVM's errors about the code are the module's
    /// (`BackendError::Rejected`); a crash leaks the module, which LLVM left mid-way.
    pub(crate) fn compile(&self, module: Module<'_>, target: &Target, emit: Emit) -> Result<Compiled, BackendError> {
        self.compile_inspected(module, target, emit, &mut |_| {})
    }

    /// `compile`, with `inspect` shown the optimised module before its code generation (the
    /// simulator's proofs read its checked accesses there).
    pub(crate) fn compile_inspected(
        &self,
        module: Module<'_>,
        target: &Target,
        emit: Emit,
        inspect: &mut dyn FnMut(&Module<'_>),
    ) -> Result<Compiled, BackendError> {
        // Errors left over from earlier work (an inspection command) belong to no module.
        self.take_llvm_errors();
        let ir = (emit == Emit::Listing).then(|| module.print_to_string().to_string());
        let worked = guard::guarded_here(|| self.optimise_and_emit(&module, target, emit, inspect));
        let (optimise, optimised, code, assembly, emit_time) = match worked {
            Ok(result) => result?,
            Err(signal) => {
                // LLVM stopped mid-way through the module: it is never touched again.
                std::mem::forget(module);
                return Err(BackendError::Crashed(signal));
            }
        };
        let errors = self.take_llvm_errors();
        if !errors.is_empty() {
            return Err(BackendError::Rejected(errors));
        }
        let listing = match (ir, optimised) {
            (Some(ir), Some(optimised)) => Some(Listing { ir, optimised, assembly: assembly.unwrap_or_default() }),
            _ => None,
        };
        Ok(Compiled { code, listing, optimise, emit: emit_time })
    }

    /// `compile` of a host module at `level` through the object cache, if there is one: the
    /// object of the same IR compiled before by a back end like this one is taken from it, and
    /// what is compiled is stored (`quasi run`: a program run again skips LLVM).
    pub(crate) fn compile_cached(&self, module: Module<'_>, level: u8) -> Result<Compiled, BackendError> {
        let target = Target::Host(level);
        let Some(cache) = &self.cache else { return self.compile(module, &target, Emit::Code) };
        let lookup_start = Instant::now();
        let key = self.object_key(&module, level);
        if let Some(object) = cache.lookup(&key) {
            return Ok(Compiled { code: object, listing: None, optimise: None, emit: lookup_start.elapsed() });
        }
        let lookup = lookup_start.elapsed();
        let mut compiled = self.compile(module, &target, Emit::Code)?;
        cache.store(&key, &compiled.code);
        compiled.emit += lookup;
        Ok(compiled)
    }

    /// The passes and code generation of `compile`: the time in each, the optimised IR and the
    /// assembly when listings are asked for, and the code.
    #[allow(clippy::type_complexity)]
    fn optimise_and_emit(
        &self,
        module: &Module<'_>,
        target: &Target,
        emit: Emit,
        inspect: &mut dyn FnMut(&Module<'_>),
    ) -> Result<(Option<Duration>, Option<String>, Vec<u8>, Option<String>, Duration), BackendError> {
        let listing = emit == Emit::Listing;
        let passes_start = Instant::now();
        match target {
            Target::Host(level) => self.optimise(module, *level)?,
            Target::Sim => self.optimise(module, SIM_LEVEL)?,
            Target::Nvptx(arch) => self.with_nvptx_machine(arch, |machine| {
                module
                    .run_passes("default<O3>", machine, PassBuilderOptions::create())
                    .map_err(|error| BackendError::Passes(error.to_string()))
            })??,
        }
        let optimise = (*target != Target::Host(0)).then(|| passes_start.elapsed());
        let optimised = listing.then(|| module.print_to_string().to_string());
        inspect(module);
        let emit_start = Instant::now();
        let (code, assembly) = match target {
            // A listing's code is its assembly: nothing will link it.
            Target::Host(level) if listing => {
                let assembly = self.emit_assembly(module, *level)?;
                (assembly.clone().into_bytes(), Some(assembly))
            }
            Target::Host(level) => (self.emit_object(module, *level)?, None),
            Target::Sim => (self.emit_object(module, SIM_LEVEL)?, None),
            Target::Nvptx(arch) => {
                let ptx = self.with_nvptx_machine(arch, |machine| {
                    machine
                        .write_to_memory_buffer(module, FileType::Assembly)
                        .map_err(|error| BackendError::Emit(error.to_string()))
                })??;
                let text = String::from_utf8_lossy(ptx.as_slice()).trim_end_matches('\0').to_string();
                let assembly = listing.then(|| text.clone());
                (text.into_bytes(), assembly)
            }
        };
        Ok((optimise, optimised, code, assembly, emit_start.elapsed()))
    }

    /// The target machine of an optimisation level, made on first use.
    fn machine(&self, level: u8) -> Result<&TargetMachine, BackendError> {
        let index = level.min(3) as usize;
        if let Some(machine) = self.machines[index].get() {
            return Ok(machine);
        }
        let target = LlvmTarget::from_triple(&self.triple)
            .map_err(|error| BackendError::Machine(format!("no LLVM target: {error}")))?;
        let (cpu, features) = self.host();
        let machine = target
            .create_target_machine(
                &self.triple,
                cpu,
                features,
                MACHINE_LEVELS[index],
                RelocMode::PIC,
                CodeModel::Default,
            )
            .ok_or_else(|| BackendError::Machine("LLVM could not create a target machine for this CPU".into()))?;
        Ok(self.machines[index].get_or_init(|| machine))
    }

    /// Runs `work` with the NVPTX machine for `arch`, made when another architecture (or none)
    /// was used last.
    fn with_nvptx_machine<T>(&self, arch: &str, work: impl FnOnce(&TargetMachine) -> T) -> Result<T, BackendError> {
        static INIT: Once = Once::new();
        INIT.call_once(|| LlvmTarget::initialize_nvptx(&InitializationConfig::default()));
        let machine = self.nvptx_machine(arch)?;
        Ok(work(&machine))
    }

    /// The NVPTX machine for `arch`.
    fn nvptx_machine(&self, arch: &str) -> Result<Rc<TargetMachine>, BackendError> {
        let mut nvptx = self.nvptx.borrow_mut();
        if nvptx.as_ref().is_none_or(|(made_for, _)| made_for != arch) {
            let triple = TargetTriple::create(NVPTX_TRIPLE);
            let target = LlvmTarget::from_triple(&triple)
                .map_err(|error| BackendError::Machine(format!("LLVM has no NVPTX target: {error}")))?;
            let machine = target
                .create_target_machine(
                    &triple,
                    arch,
                    "",
                    OptimizationLevel::Aggressive,
                    RelocMode::Default,
                    CodeModel::Default,
                )
                .ok_or_else(|| {
                    BackendError::Machine(format!("LLVM could not make an NVPTX target machine for {arch}"))
                })?;
            *nvptx = Some((arch.to_string(), Rc::new(machine)));
        }
        match nvptx.as_ref() {
            Some((_, machine)) => Ok(machine.clone()),
            None => Err(BackendError::Machine("no NVPTX target machine".into())),
        }
    }

    /// The host CPU's name and features.
    pub(crate) fn host(&self) -> &(String, String) {
        self.host.get_or_init(|| {
            let cpu = TargetMachine::get_host_cpu_name().to_string_lossy().into_owned();
            (cpu, TargetMachine::get_host_cpu_features().to_string_lossy().into_owned())
        })
    }

    /// The object cache's key for `module` compiled at `level`: its IR, and what of the back
    /// end the engine binary does not fix (the CPU and features, the level).
    fn object_key(&self, module: &Module<'_>, level: u8) -> ObjectKey {
        let (cpu, features) = self.host();
        let ir = module.print_to_string();
        ObjectKey::new(&format!("cpu {cpu}\nfeatures {features}\nlevel {level}"), ir.to_bytes())
    }

    /// Runs the pass pipeline of `level` over `module` (level 0 runs none).
    fn optimise(&self, module: &Module<'_>, level: u8) -> Result<(), BackendError> {
        if level == 0 {
            return Ok(());
        }
        module
            .run_passes(pass_pipeline(level), self.machine(level)?, PassBuilderOptions::create())
            .map_err(|error| BackendError::Passes(error.to_string()))?;
        if level >= 2 {
            align_functions(module);
        }
        Ok(())
    }

    /// The object file of `module`, compiled at `level`.
    fn emit_object(&self, module: &Module<'_>, level: u8) -> Result<Vec<u8>, BackendError> {
        let index = level.min(3) as usize;
        let emitter = match self.emitters[index].get() {
            Some(emitter) => emitter,
            None => {
                let emitter = Emitter::new(self.machine(level)?)
                    .ok_or_else(|| BackendError::Machine("LLVM cannot emit object files for this CPU".into()))?;
                self.emitters[index].get_or_init(|| emitter)
            }
        };
        Ok(emitter.emit(module))
    }

    /// The assembly listing of `module`, compiled at `level`.
    fn emit_assembly(&self, module: &Module<'_>, level: u8) -> Result<String, BackendError> {
        let buffer = self
            .machine(level)?
            .write_to_memory_buffer(module, FileType::Assembly)
            .map_err(|error| BackendError::Emit(error.to_string()))?;
        Ok(String::from_utf8_lossy(buffer.as_slice()).into_owned())
    }

    /// Compiles a small loop with an external call at `level`, for nothing but its side effects:
    /// the machine's subtarget, the pass pipelines and the code paths a first cell would pay
    /// for are made and touched now (`Session::prepare`).
    pub(crate) fn warm_up(&self, level: u8) -> Result<(), BackendError> {
        const IR: &str = "declare i32 @printf(ptr, ...)
define i32 @quasi_warm_up(i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %next, %loop ]
  %s = phi i32 [ 0, %entry ], [ %sum, %loop ]
  %sum = add i32 %s, %i
  %next = add i32 %i, 1
  %done = icmp sge i32 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  %printed = call i32 (ptr, ...) @printf(ptr null, i32 %sum)
  ret i32 %sum
}
";
        let buffer = MemoryBuffer::create_from_memory_range_copy(IR.as_bytes(), "warm-up");
        let module = self
            .context
            .create_module_from_ir(buffer)
            .map_err(|error| BackendError::Machine(format!("the warm-up module does not parse: {error}")))?;
        let target = Target::Host(level);
        module.set_triple(&self.triple);
        module.set_data_layout(&self.target_data(&target)?.get_data_layout());
        // Not through the object cache: the point is to exercise the machine.
        let worked = guard::guarded_here(|| self.optimise_and_emit(&module, &target, Emit::Code, &mut |_| {}));
        worked.map_err(BackendError::Crashed)?.map(drop)
    }

    /// Errors LLVM reported about the context's code since the last call (inline assembly the
    /// assembler rejected).
    pub(crate) fn take_llvm_errors(&self) -> Vec<String> {
        self.llvm_diagnostics.take_errors()
    }
}

/// The level device code for the simulator is optimised at.
const SIM_LEVEL: u8 = 3;

/// Where optimised code runs fast should not depend on where the session's earlier cells
/// happened to end: every function defined at levels 2 and 3 starts on a cache line (the code
/// memory honours a section's alignment), so its branches and loops sit where they sit in its
/// object, whatever came before. Measured on Zen 4: the same doubly recursive `fib`, moved in
/// steps of 4 bytes within a line, took 32.7–43.5 ms.
fn align_functions(module: &Module<'_>) {
    for function in module.get_functions().filter(|function| function.count_basic_blocks() > 0) {
        function.as_global_value().set_alignment(CODE_ALIGNMENT);
    }
}

/// The cache line of the x86-64 CPUs code is compiled for.
const CODE_ALIGNMENT: u32 = 64;

#[cfg(test)]
mod tests {
    use super::*;

    /// Modules of IR text, made in `backend`'s context for its host.
    fn module<'ctx>(backend: &'ctx Backend, name: &str, ir: &str) -> Module<'ctx> {
        let buffer = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), name);
        let module = backend.context.create_module_from_ir(buffer).expect("the IR parses");
        module.set_triple(&backend.triple);
        module.set_data_layout(&backend.target_data(&Target::Host(3)).expect("a data layout").get_data_layout());
        module
    }

    /// Code optimised at levels 2 and 3 starts on a cache line wherever the code before it
    /// ended; code at level 1 is packed.
    #[test]
    fn optimised_functions_start_on_a_cache_line() {
        let backend = Backend::new().expect("a back end");
        let mut jit = crate::jit::Jit::new().expect("a JIT");
        let source = |name: &str| {
            format!(
                "define i32 @{name}_a(i32 %x) {{\n  %y = mul i32 %x, %x\n  ret i32 %y\n}}\n\
                 define i32 @{name}_b(i32 %x) {{\n  %y = add i32 %x, 3\n  ret i32 %y\n}}\n"
            )
        };
        let mut kept = Vec::new();
        let mut packed = false;
        for (index, level) in [1u8, 3, 1, 2, 1, 3].into_iter().enumerate() {
            let name = format!("f{index}");
            let module = module(&backend, &name, &source(&name));
            let object = backend.compile(module, &Target::Host(level), Emit::Code).expect("compiled").code;
            let symbols = [format!("{name}_a"), format!("{name}_b")];
            let (code, addresses) = jit.link(&object, &name, &symbols).expect("linked");
            kept.push(code);
            if level >= 2 {
                assert!(addresses.iter().all(|address| address % 64 == 0), "level {level}: {addresses:x?}");
            } else {
                packed |= addresses.iter().any(|address| address % 64 != 0);
            }
        }
        assert!(packed, "level 1 code is not padded to lines");
    }

    /// The emitter's pipeline, run module after module, gives each the object LLVM's C API
    /// gives it alone (as `llc -run-twice` checks for LLVM's own tools), at every level.
    #[test]
    fn a_reused_pipeline_emits_what_a_fresh_one_does() {
        let backend = Backend::new().expect("a back end");
        let sources = [
            "define i32 @one(i32 %x) {\n  %y = mul i32 %x, %x\n  ret i32 %y\n}\n",
            "@table = global [4 x i64] [i64 1, i64 2, i64 3, i64 4]\n\
             define i64 @two(i64 %i) {\n  %p = getelementptr [4 x i64], ptr @table, i64 0, i64 %i\n  \
             %v = load i64, ptr %p\n  ret i64 %v\n}\n",
            "declare i32 @printf(ptr, ...)\n@text = private constant [3 x i8] c\"%d\\00\"\n\
             define void @three(i32 %n) {\nentry:\n  br label %loop\nloop:\n  \
             %i = phi i32 [ 0, %entry ], [ %next, %loop ]\n  %r = call i32 (ptr, ...) @printf(ptr @text, i32 %i)\n  \
             %next = add i32 %i, 1\n  %done = icmp sge i32 %next, %n\n  br i1 %done, label %exit, label %loop\n\
             exit:\n  ret void\n}\n",
        ];
        let rejected = "define void @bad() {\n  call void asm sideeffect \"frobnicate\", \"\"()\n  ret void\n}\n";
        for level in 0..=3 {
            // Twice round, so every module also follows every other, and once after a module
            // whose inline assembly the assembler rejected (reported through the context).
            for round in 0..2 {
                if round == 1 {
                    backend.emit_object(&module(&backend, "bad", rejected), level).expect("emitted, with errors");
                    let errors = backend.take_llvm_errors();
                    assert!(errors.iter().any(|error| error.contains("frobnicate")), "{errors:?}");
                }
                for (index, source) in sources.iter().enumerate() {
                    let name = format!("m{index}");
                    let reused = backend.emit_object(&module(&backend, &name, source), level).expect("emitted");
                    let fresh = backend
                        .machine(level)
                        .expect("a machine")
                        .write_to_memory_buffer(&module(&backend, &name, source), FileType::Object)
                        .expect("emitted by the C API");
                    assert!(
                        reused == fresh.as_slice(),
                        "level {level}, round {round}, module {index}: the objects differ"
                    );
                }
            }
        }
    }

    /// One entry point for every target: PTX text for NVPTX (listings with it), objects for the
    /// host and the simulator, and LLVM's errors about the code as `Rejected`.
    #[test]
    fn compile_serves_every_target() {
        let backend = Backend::new().expect("a back end");
        let source = "define void @k(ptr %p) {\n  store i32 7, ptr %p\n  ret void\n}\n";
        let nvptx = Target::Nvptx("sm_90".into());
        let buffer = MemoryBuffer::create_from_memory_range_copy(source.as_bytes(), "k");
        let device = backend.context.create_module_from_ir(buffer).expect("the IR parses");
        device.set_triple(&backend.triple(&nvptx));
        device.set_data_layout(&backend.target_data(&nvptx).expect("NVPTX's layout").get_data_layout());
        let ptx = backend.compile(device, &nvptx, Emit::Listing).expect("PTX");
        let text = String::from_utf8(ptx.code).expect("PTX is text");
        assert!(text.contains(".target sm_90"), "{text}");
        let listing = ptx.listing.expect("a listing");
        assert!(listing.ir.contains("store i32 7") && listing.assembly == text);
        for target in [Target::Host(0), Target::Host(2), Target::Sim] {
            let compiled = backend.compile(module(&backend, "k", source), &target, Emit::Code).expect("an object");
            assert!(compiled.code.starts_with(b"\x7fELF"), "{target:?}");
        }
        let rejected = "define void @bad() {\n  call void asm sideeffect \"frobnicate\", \"\"()\n  ret void\n}\n";
        match backend.compile(module(&backend, "bad", rejected), &Target::Host(1), Emit::Code) {
            Err(BackendError::Rejected(errors)) => assert!(errors.iter().any(|error| error.contains("frobnicate"))),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("compiled"),
        }
    }
}
