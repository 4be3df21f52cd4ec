//! Session: the facade `Session::eval(cell) -> Outcome`, and the cell's trip through it —
//! compile (the pass list, `pipeline`) → commit (`commit`) → run (`execute`) → benches
//! (`benches`), which `eval_source` spells out.
//!
//! The files by concern: `api` (the public types besides `Session`), `pipeline` (the pass list
//! and the transaction that rolls a failed cell back), `commit`, `execute` (the run step),
//! `benches` (bench and autotune as further cells), `faults` and `report` (how outcomes are
//! worded), `script` (`quasi run`'s policy), `completion`, `command` (`:commands`), `tiering`
//! and `tier_state` (background promotion), `call_cell` (trampolines), `view` (the Rhai view of
//! the session), `history`, `top_level` (showing items as they finish), `journal` (the cells a Slurm worker
//! replays, and the worker). Only these files hold
//! `impl Session`; the ones this file imports from (`api`, `call_cell`, `history`, `tier_state`)
//! import nothing of it, so the folder has no import cycle.
//!
//! Invariant: `env`, global values and slots change only in `commit`, after linking succeeded;
//! the Rhai scope changes while a cell expands, and a cell that fails before its commit leaves
//! the session exactly as it was (the pass list's transaction puts the staging state back).
//! Faults and interrupts come after `commit`, so they never cost a definition.

mod api;
mod argv;
mod benches;
mod call_cell;
mod command;
mod commit;
mod completion;
mod eval;
mod execute;
mod faults;
mod history;
pub(crate) mod journal;
mod pipeline;
mod report;
mod script;
#[cfg(test)]
mod tests;
mod tier_state;
mod tiering;
mod top_level;
mod view;

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::backend::{Backend, ObjectCache};
use crate::check::{self, Env};
use crate::diagnostics::Diagnostic;
use crate::expand::{self, ScriptText, Stage};
use crate::gpu::{DeviceSource, Mode as GpuMode, SessionGpu};
use crate::jit::library::Libraries;
use crate::jit::Jit;
use crate::link::Program;
use crate::reader::{Sexp, Span};
use crate::run::{self, Runner};
use crate::timing::PhaseTimes;
use crate::tree::{CellId, TypedCell};
use crate::tune_cache::TuneCache;
use crate::Outcome;

pub use self::api::{
    Completion, CompletionKind, InterruptHandle, SessionConfig, SessionError, BATCH_OPT_LEVEL, DEFAULT_OPT_LEVEL,
};
use self::argv::ScriptArgv;
use self::call_cell::Trampolines;
use self::history::{DefinitionKey, History};
use self::tier_state::Tiering;

/// Staging: Rhai's engine and scope, and whether its view of the session lags behind.
struct Staging {
    stage: Stage,
    /// Whether `stage.view` lags behind the environment (a commit happened since it was built).
    view_stale: bool,
}

/// An interactive session: definitions, globals and compiled code that persist across cells.
pub struct Session {
    config: SessionConfig,
    opt_level: u8,
    /// Whether `:opt` chose the level (else `:load` compiles at `BATCH_OPT_LEVEL`).
    opt_pinned: bool,
    /// Whether a script whose whole run is provably short compiles at level 0
    /// (`quasi run` without `--opt`).
    quick_short_runs: bool,
    /// The level each defined function's code was compiled at, for `:tier`.
    compiled_levels: HashMap<String, u8>,
    /// Background promotion of quickly compiled code to opt 3 (tiered compilation).
    tiering: Tiering,
    // Field order matters for drop: the runner stops before the program's code is freed, and
    // the GPU runtime goes last (compiled code may use it until the runner has stopped).
    /// The executor thread compiled code runs on, behind the fault guard.
    runner: Runner,
    /// What linked: the JIT, every cell's code, slots, global storage and symbol names.
    program: Program,
    /// The call trampolines that run call cells (`(call f 7)`) without compiling them.
    trampolines: Trampolines,
    /// The `load-library` libraries, closed after the code that may call them is gone.
    libraries: Libraries,
    /// The LLVM context, target machines, passes and emission.
    backend: Backend,
    /// What the checker knows: functions, globals, structs.
    env: Env,
    staging: Staging,
    /// Sources, the cell counter, the last cell and its expansion and timing, definition order.
    history: History,
    interrupt: Arc<AtomicBool>,
    /// The status a script's code passed to `exit` (or its kin), which ends `quasi run`.
    script_exit: Option<i32>,
    /// `quasi run`'s argv, alive as long as the session.
    script_argv: Option<ScriptArgv>,
    /// Where `autotune` keeps what it measured across sessions (none: it times every variant).
    tune_cache: Option<TuneCache>,
    /// Where autotunes without an `(on …)` clause time their variants (`:tune on …`).
    tune_executor: Option<crate::bench::SlurmOptions>,
    /// The GPU runtime, the target and the PTX built.
    gpu: SessionGpu,
}

impl Drop for Session {
    /// Submissions still running stop before the code they run goes (the fields' drops).
    fn drop(&mut self) {
        self.gpu.runtime.stop_submissions();
    }
}

impl Session {
    /// Starts a session: an ORC JIT, an executor thread, an empty environment.
    pub fn new(config: SessionConfig) -> Result<Session, SessionError> {
        let backend = Backend::new().map_err(SessionError::Llvm)?;
        let mut jit = Jit::new().map_err(|error| SessionError::Llvm(error.to_string()))?;
        jit.define_absolute(&run::runtime_symbols()).map_err(|error| SessionError::Llvm(error.to_string()))?;
        // The CUDA driver starts in the background now (unless deferred), so the first GPU cell
        // rarely waits.
        let interrupt = expand::new_interrupt_flag();
        let gpu = SessionGpu::new(config.defer_device, interrupt.clone());
        let mode = match config.gpu {
            Some(mode) => Some(mode),
            None => GpuMode::from_environment().map_err(SessionError::Setting)?,
        };
        if let Some(mode) = mode {
            gpu.runtime.set_mode(mode);
        }
        jit.define_absolute(&gpu.runtime.runtime_symbols()).map_err(|error| SessionError::Llvm(error.to_string()))?;
        let mut session = Session {
            opt_level: config.opt_level.min(3),
            opt_pinned: false,
            quick_short_runs: false,
            compiled_levels: HashMap::new(),
            tiering: Tiering::default(),
            runner: Runner::new(interrupt.clone()),
            program: Program::new(jit),
            trampolines: Trampolines::default(),
            libraries: Libraries::default(),
            backend,
            env: Env::default(),
            staging: Staging { stage: Stage::new(interrupt.clone()), view_stale: false },
            history: History::default(),
            interrupt,
            script_exit: None,
            script_argv: None,
            tune_cache: None,
            tune_executor: None,
            gpu,
            config,
        };
        if session.config.load_prelude {
            session.load_prelude()?;
        }
        Ok(session)
    }

    fn load_prelude(&mut self) -> Result<(), SessionError> {
        for (name, text) in quasi_prelude::FILES {
            let source = self.history.add_source(format!("prelude/{name}"), text.to_string());
            let span = Span::new(source, 0, 0);
            let script = ScriptText { source, base: 0, text };
            if let Err(diagnostic) = self.staging.stage.run_script(text, script, span) {
                return Err(SessionError::Prelude(name.to_string(), diagnostic.message));
            }
        }
        self.staging.stage.take_printed();
        Ok(())
    }

    /// Makes now what the first cell would otherwise make: the target machine of the session's
    /// level (a throwaway function is compiled with it, which also readies its pass pipelines),
    /// the call trampolines `run_file` calls `main` through, and the GPU driver's start-up,
    /// waited for. For a front end that prepares sessions before their work arrives (`quasi
    /// server`): afterwards none of the session's threads runs until a cell does.
    pub fn prepare(&mut self) -> Result<(), SessionError> {
        self.prepare_level(self.opt_level)?;
        // The trampolines `run_file` calls `main` through, in its three shapes.
        let int = crate::types::Ty::Int(32);
        let argv = crate::types::Ty::Ptr(Rc::new(crate::types::Ty::Ptr(Rc::new(crate::types::Ty::Int(8)), 0)), 0);
        for params in [vec![], vec![int.clone()], vec![int.clone(), argv]] {
            let signature = crate::types::Signature { params, ret: int.clone(), variadic: false };
            let level = self.opt_level;
            let made = self.trampolines.ensure(
                &signature,
                &self.backend,
                &mut self.program,
                level,
                &mut PhaseTimes::default(),
            );
            made.map_err(|diagnostics| {
                let messages: Vec<String> = diagnostics.into_iter().map(|diagnostic| diagnostic.message).collect();
                SessionError::Llvm(messages.join("; "))
            })?;
        }
        self.gpu.runtime.wait_for_start();
        Ok(())
    }

    /// Makes now the target machine and pipelines of another level than the session's, for a
    /// prepared session that may be set to it (`quasi run --opt 1` of a `quasi server`).
    pub fn prepare_level(&mut self, level: u8) -> Result<(), SessionError> {
        self.backend.warm_up(level).map_err(|error| SessionError::Llvm(error.to_string()))
    }

    /// Starts the executor's threads now instead of with the first call: for a prepared session
    /// that will run soon, in a process that will not fork it again (a `quasi server` spare).
    pub fn start_executor(&self) -> Result<(), SessionError> {
        self.runner.start().map_err(SessionError::Thread)
    }

    /// Bytes of code memory in use, for tests that code is given back.
    #[cfg(test)]
    pub(crate) fn code_in_use(&self) -> usize {
        self.program.code_in_use()
    }

    /// A handle that interrupts this session's running cell from another thread.
    pub fn interrupt_handle(&self) -> InterruptHandle {
        InterruptHandle(self.interrupt.clone())
    }

    /// The current optimisation level.
    pub fn opt_level(&self) -> u8 {
        self.opt_level
    }

    /// Makes `run_file` (and `compile_file`) compile a program whose whole run its text bounds
    /// to a few thousand steps at level 0 instead of the session's: optimising it at `:opt 3`
    /// would take longer than running it (`quasi run` without `--opt`; §5.5).
    pub fn set_quick_short_runs(&mut self, on: bool) {
        self.quick_short_runs = on;
    }

    /// Makes the session compile at `level` from now on, as if it had been made with it
    /// (`SessionConfig::opt_level`): what `quasi run --opt N` does to a prepared session.
    pub fn set_opt_level(&mut self, level: u8) {
        self.opt_level = level.min(3);
        self.config.opt_level = self.opt_level;
    }

    /// Makes `autotune` keep each variant's result in `cache`, and take it from there when the
    /// same variant is tuned again on this machine (`TuneCache::from_environment` in the
    /// terminal and the notebook). `None` (a new session's): every variant is timed.
    pub fn set_tune_cache(&mut self, cache: Option<TuneCache>) {
        self.tune_cache = cache;
    }

    /// The tuning cache, if the session has one.
    pub fn tune_cache(&self) -> Option<&TuneCache> {
        self.tune_cache.as_ref()
    }

    /// Makes the session keep the objects it compiles in `cache`, and take them from it when the
    /// same IR is compiled again with the same back end (`quasi run`: a program run again skips
    /// the optimiser and code generation). `None`: compile everything.
    pub fn set_object_cache(&mut self, cache: Option<ObjectCache>) {
        self.backend.set_object_cache(cache);
    }

    /// The number of cells evaluated so far (failed ones included).
    pub fn cell_count(&self) -> u32 {
        self.history.cell_count
    }

    /// Evaluates one cell: forms, or one `:command` line.
    pub fn eval(&mut self, text: &str) -> Outcome {
        self.eval_streaming(text, &mut |_| {})
    }

    /// `eval`, showing the cell while it runs: `progress` is called with the outcome so far
    /// whenever the running code wrote output or top-level items gave their values (every few
    /// tens of milliseconds at most; after each item when output is not captured). Invariant:
    /// the rendering of every outcome `progress` sees is a prefix of the final one's (items are
    /// only appended, and only a runtime fault, which renders last, is added as a diagnostic
    /// meanwhile), so a front end may print each new part as it comes. Cells with `(bench …)`
    /// or `(autotune …)` show nothing before they end.
    pub fn eval_streaming(&mut self, text: &str, progress: &mut dyn FnMut(&Outcome)) -> Outcome {
        self.history.cell_count += 1;
        self.eval_cell(text, progress)
    }

    /// Every kernel of the session (`define-kernel`s and the functions host code launched) with
    /// its current PTX for the `:gpu-arch` target, or the error that stops it from running on
    /// the GPU; rebuilt only for kernels whose device code changed since the last call. For
    /// checking kernels with outside tools (the ptxas test).
    pub fn kernels_ptx(&mut self) -> Vec<(String, Result<String, Diagnostic>)> {
        let source = device_source(&self.env, &self.backend, &self.program);
        self.gpu.kernels_ptx(&source)
    }

    /// The GPU target PTX is built for (`:gpu-arch`).
    pub fn gpu_arch(&self) -> &str {
        &self.gpu.arch
    }

    /// Names for completion: defined functions, globals and structs.
    pub fn defined_names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.env.functions.keys().chain(self.env.globals.keys()).chain(self.env.structs.keys()).cloned().collect();
        names.sort();
        names.dedup();
        names
    }

    /// What the session knows of a name, as `:defs` prints it (`sq : (int) -> int`), else what
    /// a built-in form or command is (docs/language.md's row, the command's usage), without
    /// evaluating anything: for inspection (Shift-Tab) and hovers.
    pub fn describe(&self, name: &str) -> Option<String> {
        [
            DefinitionKey::Function(name.to_string()),
            DefinitionKey::Global(name.to_string()),
            DefinitionKey::Struct(name.to_string()),
        ]
        .iter()
        .find_map(|key| self.definition_line(key))
        .or_else(|| crate::command::builtin_help(name))
    }

    fn fail(&self, mut outcome: Outcome, diagnostics: Vec<Diagnostic>) -> Outcome {
        outcome.diagnostics.extend(diagnostics);
        self.history.attach_sources(&mut outcome);
        outcome
    }

    /// Check: forms against an environment, into the typed cell.
    fn check(&self, env: &Env, forms: &[Sexp], cell: CellId) -> Result<TypedCell, Vec<Diagnostic>> {
        check::check(env, forms, &self.libraries, cell)
    }
}

/// What device code is lowered from, lent by the session's parts (not by `&self`: the GPU part
/// that takes it is borrowed mutably beside them).
fn device_source<'s>(env: &'s Env, backend: &'s Backend, program: &'s Program) -> DeviceSource<'s> {
    DeviceSource { env, backend, struct_names: program.struct_names() }
}
