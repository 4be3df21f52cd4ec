//! Back end: the LLVM context cells are lowered into, the host's target machines per `:opt`
//! level, the pass pipeline of each level, and object and assembly emission.
//!
//! It knows nothing of cells, names or the JIT: it takes an inkwell module and gives back
//! optimised IR or bytes. Device code has its own NVPTX machine in `gpu::ptx`.

use std::cell::OnceCell;

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetData, TargetMachine, TargetTriple,
};
use inkwell::OptimizationLevel;

mod cache;

pub(crate) use cache::ObjectKey;
pub use cache::{ObjectCache, BUDGET as CACHE_BUDGET, CACHE_VARIABLE};

use crate::diagnostics::Diagnostic;
use crate::jit::LlvmDiagnostics;

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
    INIT.get_or_init(|| Target::initialize_native(&InitializationConfig::default())).clone()
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
        })
    }

    /// The host target triple.
    pub(crate) fn triple(&self) -> TargetTriple {
        TargetTriple::create(&self.triple.as_str().to_string_lossy())
    }

    /// The target machine of an optimisation level, made on first use.
    pub(crate) fn machine(&self, level: u8) -> Result<&TargetMachine, Diagnostic> {
        let index = level.min(3) as usize;
        if let Some(machine) = self.machines[index].get() {
            return Ok(machine);
        }
        let target = Target::from_triple(&self.triple)
            .map_err(|error| Diagnostic::internal(format!("no LLVM target: {error}")))?;
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
            .ok_or_else(|| Diagnostic::internal("LLVM could not create a target machine for this CPU"))?;
        Ok(self.machines[index].get_or_init(|| machine))
    }

    /// The host CPU's name and features.
    fn host(&self) -> &(String, String) {
        self.host.get_or_init(|| {
            let cpu = TargetMachine::get_host_cpu_name().to_string_lossy().into_owned();
            (cpu, TargetMachine::get_host_cpu_features().to_string_lossy().into_owned())
        })
    }

    /// The object cache's key for `module` compiled at `level`: its IR, and what of the back
    /// end the engine binary does not fix (the CPU and features, the level).
    pub(crate) fn object_key(&self, module: &Module<'_>, level: u8) -> ObjectKey {
        let (cpu, features) = self.host();
        let ir = module.print_to_string();
        ObjectKey::new(&format!("cpu {cpu}\nfeatures {features}\nlevel {level}"), ir.to_bytes())
    }

    /// The data layout code is lowered for at `level`.
    pub(crate) fn target_data(&self, level: u8) -> Result<TargetData, Diagnostic> {
        Ok(self.machine(level)?.get_target_data())
    }

    /// Runs the pass pipeline of `level` over `module` (level 0 runs none).
    pub(crate) fn optimise(&self, module: &Module<'_>, level: u8) -> Result<(), Diagnostic> {
        if level == 0 {
            return Ok(());
        }
        module
            .run_passes(pass_pipeline(level), self.machine(level)?, PassBuilderOptions::create())
            .map_err(|error| Diagnostic::internal(format!("LLVM passes failed: {error}")))?;
        if level >= 2 {
            align_functions(module);
        }
        Ok(())
    }

    /// The object file of `module`, compiled at `level`.
    pub(crate) fn emit_object(&self, module: &Module<'_>, level: u8) -> Result<Vec<u8>, Diagnostic> {
        let index = level.min(3) as usize;
        let emitter = match self.emitters[index].get() {
            Some(emitter) => emitter,
            None => {
                let emitter = Emitter::new(self.machine(level)?)
                    .ok_or_else(|| Diagnostic::internal("LLVM cannot emit object files for this CPU"))?;
                self.emitters[index].get_or_init(|| emitter)
            }
        };
        Ok(emitter.emit(module))
    }

    /// The assembly listing of `module`, compiled at `level`.
    pub(crate) fn emit_assembly(&self, module: &Module<'_>, level: u8) -> Result<String, Diagnostic> {
        let buffer = self
            .machine(level)?
            .write_to_memory_buffer(module, FileType::Assembly)
            .map_err(|error| Diagnostic::internal(format!("LLVM could not emit assembly: {error}")))?;
        Ok(String::from_utf8_lossy(buffer.as_slice()).into_owned())
    }

    /// Compiles a small loop with an external call at `level`, for nothing but its side effects:
    /// the machine's subtarget, the pass pipelines and the code paths a first cell would pay
    /// for are made and touched now (`Session::prepare`).
    pub(crate) fn warm_up(&self, level: u8) -> Result<(), Diagnostic> {
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
            .map_err(|error| Diagnostic::internal(format!("the warm-up module does not parse: {error}")))?;
        module.set_triple(&self.triple);
        module.set_data_layout(&self.target_data(level)?.get_data_layout());
        self.optimise(&module, level)?;
        self.emit_object(&module, level).map(drop)
    }

    /// Errors LLVM reported about the context's code since the last call (inline assembly the
    /// assembler rejected).
    pub(crate) fn take_llvm_errors(&self) -> Vec<String> {
        self.llvm_diagnostics.take_errors()
    }
}

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
        module.set_data_layout(&backend.target_data(3).expect("a data layout").get_data_layout());
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
            backend.optimise(&module, level).expect("optimised");
            let object = backend.emit_object(&module, level).expect("emitted");
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
}
