//! Session: the facade `Session::eval(cell) -> Outcome`, and the pipeline a cell flows through:
//! read → expand → check → codegen → optimise → emit → link → commit → run. Each step is a
//! call into its own module; this one orders them and keeps what a successful cell leaves.
//!
//! Invariant: `env`, the Rhai scope, global values and slots change only in `commit`, after
//! linking succeeded; a cell that fails before that leaves the session exactly as it was.
//! Faults and interrupts come after `commit`, so they never cost a definition.

mod call_cell;
mod command;
mod history;
mod report;
#[cfg(test)]
mod tests;
mod tiering;
mod top_level;
mod view;

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::backend::{Backend, ObjectCache, Target};
use crate::bench::{self, Pipeline, QuietCell};
use crate::check::{self, Env, FunctionEntry, FunctionKind, Resolution};
use crate::codegen::{self, CellModule, TopLevel};
use crate::diagnostics::{Diagnostic, Kind};
use crate::expand::{self, ExpandedCell, Stage};
use crate::gpu::Mode as GpuMode;
use crate::gpu::{DeviceSource, SessionGpu};
use crate::intrinsics;
use crate::jit::library::{Libraries, LIBRARY_PATH_VARIABLE};
use crate::jit::Jit;
use crate::link::{Emitted, Linked, Program};
use crate::reader::{self, Sexp, SexpKind, Span};
use crate::run::{self, Fault, Runner};
use crate::timing::{Phase, PhaseTimes};
use crate::tree::{FunctionDef, GlobalEntry, TypedCell};
use crate::types::{StructEntry, Ty};
use crate::value;
use crate::{Item, Outcome, Stream};

use self::call_cell::Trampolines;
use self::history::{DefinitionKey, History};
use self::report::{backend_error, explain_expansions, function_note, lowering_error, struct_line};
use self::tiering::Tiering;
use self::top_level::TopLevelRun;

/// The optimisation level a session starts with: the lowest cell latency (see the README's
/// measurements); `:opt 3` for fast code.
pub const DEFAULT_OPT_LEVEL: u8 = 1;
/// The optimisation level of batch compilation (`quasi run`, `:load`), where nobody waits for a
/// prompt, unless a level was chosen.
pub const BATCH_OPT_LEVEL: u8 = 3;

/// A cell's module before optimisation, for the background compiler (tiered compilation).
type Bitcode = Arc<[u8]>;

/// How a session is set up.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Capture what compiled code writes to stdout into `Item::Output` (transcripts, kernel);
    /// otherwise it goes straight to the process's stdout (terminal, `quasi run`).
    pub capture_output: bool,
    /// The initial optimisation level, 0 to 3.
    pub opt_level: u8,
    /// Load the Rhai macro library of `prelude/` at start-up (and after `:reset`).
    pub load_prelude: bool,
    /// Where launches run; `None`: as `QUASI_GPU` says (`sim`, `sim-unchecked`, `device`), else
    /// on the device.
    pub gpu: Option<GpuMode>,
    /// Start the CUDA driver when a GPU form first needs it, not in the background at once.
    /// With it, a new session has no thread of its own until a cell runs code, so a process may
    /// fork it (`quasi server` does; CUDA does not survive a fork).
    pub defer_device: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            capture_output: false,
            opt_level: DEFAULT_OPT_LEVEL,
            load_prelude: true,
            gpu: None,
            defer_device: false,
        }
    }
}

/// Lets another thread interrupt what a session is doing: Rhai expansion, and compiled code,
/// which the executor thread stops where it stands (never inside libc or the runtime). The
/// handle only stores to an atomic flag, so a signal handler may use it.
#[derive(Clone, Debug)]
pub struct InterruptHandle(Arc<AtomicBool>);

impl InterruptHandle {
    /// Asks the running cell to stop as soon as it can.
    pub fn interrupt(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A session could not be started (LLVM or the JIT failed to initialise).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// LLVM could not be set up for this machine.
    #[error("LLVM: {0}")]
    Llvm(String),
    /// The executor thread could not be started.
    #[error("could not start the executor thread: {0}")]
    Thread(#[from] std::io::Error),
    /// The Rhai prelude failed to load.
    #[error("the prelude {0} failed to load: {1}")]
    Prelude(String, String),
    /// A setting from the environment is not one the session knows.
    #[error("{0}")]
    Setting(String),
}

/// What a completion candidate names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionKind {
    /// A session function or a declared C function.
    Function,
    /// A session global.
    Global,
    /// A struct type.
    Struct,
    /// A form, opcode, cast or type name of the language.
    Form,
    /// A `:command`.
    Command,
}

/// One completion candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The text that completes the word.
    pub text: String,
    /// What it names.
    pub kind: CompletionKind,
    /// A function's signature, a global's type, a struct's fields, a command's usage; empty
    /// for forms.
    pub detail: String,
}

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
    /// The GPU runtime, the target and the PTX built.
    gpu: SessionGpu,
}

impl Session {
    /// Starts a session: an ORC JIT, an executor thread, an empty environment.
    pub fn new(config: SessionConfig) -> Result<Session, SessionError> {
        let backend = Backend::new().map_err(SessionError::Llvm)?;
        let mut jit = Jit::new().map_err(|error| SessionError::Llvm(error.to_string()))?;
        jit.define_absolute(&run::runtime_symbols()).map_err(|error| SessionError::Llvm(error.to_string()))?;
        // The CUDA driver starts in the background now (unless deferred), so the first GPU cell
        // rarely waits.
        let gpu = SessionGpu::new(config.defer_device);
        let mode = match config.gpu {
            Some(mode) => Some(mode),
            None => GpuMode::from_environment().map_err(SessionError::Setting)?,
        };
        if let Some(mode) = mode {
            gpu.runtime.set_mode(mode);
        }
        jit.define_absolute(&gpu.runtime.runtime_symbols()).map_err(|error| SessionError::Llvm(error.to_string()))?;
        let interrupt = expand::new_interrupt_flag();
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
            if let Err(diagnostic) = self.staging.stage.run_script(text, source, 0, span) {
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
            self.ensure_trampoline(&signature, &mut PhaseTimes::default()).map_err(|diagnostics| {
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

    /// A cell under the current cell number (`:bench E` runs `(bench E)` as the cell it is).
    fn eval_cell(&mut self, text: &str, progress: &mut dyn FnMut(&Outcome)) -> Outcome {
        self.interrupt.store(false, Ordering::SeqCst);
        // A cell boundary: no compiled code runs, so promoted code can be swapped in.
        self.install_promotions();
        let name = format!("cell {}", self.history.cell_count);
        if text.trim_start().starts_with(':') {
            return self.run_command(text);
        }
        self.history.last_cell = Some(text.to_string());
        let mut outcome = self.eval_source(name, text.to_string(), EvalMode::Cell, progress);
        // Promotions swapped in before the cell, and before its benchmarks ran.
        outcome.timing.promotions = std::mem::take(&mut self.tiering.unreported);
        self.history.last_timing = Some(outcome.timing.clone());
        if self.history.show_timing {
            outcome.items.push(Item::Timing(outcome.timing.clone()));
        }
        outcome
    }

    /// Runs a whole file as `quasi run` does: the file is one cell, values are not shown,
    /// and `main` is called if defined. Returns the outcome and the exit status.
    pub fn run_file(&mut self, path: &str, text: String, args: &[String]) -> (Outcome, i32) {
        let (mut outcome, status) = self.run_script(path, text, args);
        // What kept the object cache from being read or written: the run is not worse for it.
        let problems = self.backend.object_cache().map(ObjectCache::take_problems).unwrap_or_default();
        outcome.diagnostics.extend(problems.into_iter().map(|problem| Diagnostic::warning(Kind::Io, problem)));
        (outcome, status)
    }

    /// Compiles a file as `run_file` would, and runs nothing: with an object cache, its object
    /// is stored there, so that `run_file` of the same text in a session like this one (as a
    /// `quasi server` prepares them) links it instead of compiling. Whether it compiled.
    pub fn compile_file(&mut self, path: &str, text: String) -> bool {
        self.history.cell_count += 1;
        self.interrupt.store(false, Ordering::SeqCst);
        !self.eval_source(path.to_string(), text, EvalMode::Compile, &mut |_| {}).failed()
    }

    fn run_script(&mut self, path: &str, text: String, args: &[String]) -> (Outcome, i32) {
        self.history.cell_count += 1;
        self.interrupt.store(false, Ordering::SeqCst);
        let mut outcome = self.eval_source(path.to_string(), text, EvalMode::Script, &mut |_| {});
        if let Some(status) = self.script_exit.take() {
            return (outcome, status & 0xff);
        }
        if outcome.failed() {
            let status = failure_status(&outcome);
            return (outcome, status);
        }
        let Some(main) = self.env.functions.get("main").cloned() else { return (outcome, 0) };
        if let Some(diagnostic) = main_shape_error(&main, crate::check::defined(&self.env, "main").map(|def| def.span))
        {
            outcome.diagnostics.push(diagnostic);
            self.history.attach_sources(&mut outcome);
            return (outcome, 1);
        }
        let call = match main.signature.params.len() {
            0 => "(call main)".to_string(),
            1 => format!("(call main {})", args.len() + 1),
            _ => {
                // argv: C strings in memory the session keeps, passed as an address, so the call
                // is a call cell (its trampoline, nothing compiled).
                let argv = ScriptArgv::new(std::iter::once(path).chain(args.iter().map(String::as_str)));
                let call = format!(
                    "(call main {} (inttoptr {} {}))",
                    args.len() + 1,
                    argv.address(),
                    main.signature.params[1]
                );
                self.script_argv = Some(argv);
                call
            }
        };
        // The call of `main` is a cell of its own (its entry must not reuse the file's names).
        self.history.cell_count += 1;
        let main_outcome = self.eval_source(format!("{path} (main)"), call, EvalMode::Main, &mut |_| {});
        let status = match main_outcome.items.iter().find_map(|item| match item {
            Item::Value { text, .. } => text.parse::<i64>().ok(),
            _ => None,
        }) {
            Some(value) => (value & 0xff) as i32,
            None => 0,
        };
        let status = match self.script_exit.take() {
            Some(exit) => exit & 0xff,
            None if main_outcome.failed() => failure_status(&main_outcome),
            None => status,
        };
        outcome.items.extend(main_outcome.items);
        outcome.diagnostics.extend(main_outcome.diagnostics);
        outcome.sources.extend(main_outcome.sources);
        (outcome, status)
    }

    /// Completion candidates for the word that ends at byte `cursor` of `text`: session names,
    /// forms and opcodes, or `:commands` at the start of a line. Returns the byte offset where
    /// the word starts and the sorted candidates.
    pub fn completions(&self, text: &str, cursor: usize) -> (usize, Vec<String>) {
        let (start, items) = self.completion_items(text, cursor);
        (start, items.into_iter().map(|item| item.text).collect())
    }

    /// `completions` with what each candidate is: its kind and a detail (a function's signature,
    /// a global's type, a command's description). Asks nothing of the session's code and changes
    /// nothing: no cell runs.
    pub fn completion_items(&self, text: &str, cursor: usize) -> (usize, Vec<Completion>) {
        let cursor = cursor.min(text.len());
        let cursor = (0..=cursor).rev().find(|index| text.is_char_boundary(*index)).unwrap_or(0);
        let before = &text[..cursor];
        let start = before
            .rfind(|character: char| character.is_whitespace() || "()[]\"`,;".contains(character))
            .map_or(0, |index| index + 1);
        let word = &before[start..];
        let mut items: Vec<Completion> = if word.starts_with(':') && before[..start].trim().is_empty() {
            crate::command::COMMANDS
                .iter()
                .map(|(usage, description)| Completion {
                    text: usage.split_whitespace().next().unwrap_or(usage).to_string(),
                    kind: CompletionKind::Command,
                    detail: format!("{usage}: {description}"),
                })
                .collect()
        } else {
            let functions = self.env.functions.iter().map(|(name, entry)| Completion {
                text: name.clone(),
                kind: CompletionKind::Function,
                detail: format!("{}{}", entry.signature, report::function_note(entry, false)),
            });
            let globals = self.env.globals.iter().map(|(name, entry)| Completion {
                text: name.clone(),
                kind: CompletionKind::Global,
                detail: entry.ty.to_string(),
            });
            let structs = self.env.structs.iter().map(|(name, entry)| Completion {
                text: name.clone(),
                kind: CompletionKind::Struct,
                detail: report::struct_line(name, entry),
            });
            let forms = check::FORM_NAMES.iter().map(|name| Completion {
                text: name.to_string(),
                kind: CompletionKind::Form,
                detail: String::new(),
            });
            functions.chain(globals).chain(structs).chain(forms).collect()
        };
        items.retain(|item| item.text.starts_with(word));
        items.sort_by(|left, right| left.text.cmp(&right.text));
        items.dedup_by(|later, earlier| later.text == earlier.text);
        (start, items)
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

    /// What the session knows of a name, as `:defs` prints it (`sq : (int) -> int`), without
    /// evaluating anything: for inspection (Shift-Tab) and hovers.
    pub fn describe(&self, name: &str) -> Option<String> {
        [
            DefinitionKey::Function(name.to_string()),
            DefinitionKey::Global(name.to_string()),
            DefinitionKey::Struct(name.to_string()),
        ]
        .iter()
        .find_map(|key| self.definition_line(key))
    }

    fn fail(&self, mut outcome: Outcome, diagnostics: Vec<Diagnostic>) -> Outcome {
        outcome.diagnostics.extend(diagnostics);
        self.history.attach_sources(&mut outcome);
        outcome
    }

    /// Where a bodiless declaration's symbol is (docs/language.md §3.3): the `load-library`
    /// libraries, newest first, then the built-in runtime and the process.
    fn resolve_extern(&self, name: &str) -> Option<Resolution> {
        if let Some((library, address)) = self.libraries.find(name) {
            return Some(Resolution::Library { library: library.name.clone(), address });
        }
        run::runtime_function(name)
            .or_else(|| run::process_symbol(name).map(|_| name.to_string()))
            .map(Resolution::Link)
    }

    /// One cell through the whole pipeline.
    fn eval_source(
        &mut self,
        name: String,
        text: String,
        mode: EvalMode,
        progress: &mut dyn FnMut(&Outcome),
    ) -> Outcome {
        let mut outcome = Outcome::default();
        let forms = match self.read(name, text, &mut outcome.timing) {
            Ok(forms) => forms,
            Err(diagnostics) => return self.fail(outcome, diagnostics),
        };
        let saved_stage = self.staging.stage.snapshot();
        let expanded = match self.expand(forms, &mut outcome.timing) {
            Ok(expanded) => expanded,
            Err(diagnostics) => return self.fail(outcome, diagnostics),
        };
        if !expanded.printed.is_empty() {
            outcome.items.push(Item::Output { stream: Stream::Stdout, text: expanded.printed.clone() });
        }
        outcome.diagnostics.extend(expanded.warnings.iter().cloned());
        if mode == EvalMode::Cell {
            self.history.last_expansion = Some(expanded.forms.clone());
        }
        let forms = match self.load_libraries(expanded.forms.clone()) {
            Ok(forms) => forms,
            Err(diagnostics) => {
                self.undo_cell(saved_stage);
                return self.fail(outcome, diagnostics);
            }
        };
        // `(bench …)` and `(autotune …)` run after the cell's other code.
        let (session_forms, code_forms): (Vec<Sexp>, Vec<Sexp>) =
            forms.into_iter().partition(|form| matches!(form.head(), Some("bench" | "autotune")));
        let entry_prefix = format!("cell#{}", self.history.cell_count);
        let checked = outcome.timing.time(Phase::Check, || self.check(&self.env, &code_forms, &entry_prefix));
        let cell = match checked {
            Ok(cell) => cell,
            Err(diagnostics) => {
                self.undo_cell(saved_stage);
                return self.fail(outcome, explain_expansions(diagnostics, &expanded.sites));
            }
        };
        outcome.diagnostics.extend(explain_expansions(cell.warnings.clone(), &expanded.sites));
        let script = matches!(mode, EvalMode::Script | EvalMode::Compile);
        let short = || crate::cost::run_steps(&cell).is_some_and(|steps| steps <= crate::cost::SHORT_RUN_STEPS);
        if script && self.quick_short_runs && self.opt_level > crate::cost::SHORT_RUN_LEVEL && short() {
            // The batch session runs this program only.
            self.opt_level = crate::cost::SHORT_RUN_LEVEL;
        }
        // A cell that only calls a session function with constant or global arguments runs
        // through its signature's trampoline: nothing to compile, link or commit.
        let call_cell = match session_forms.is_empty() && expanded.includes.is_empty() {
            true => call_cell::call_cell(&cell, &self.program),
            false => None,
        };
        let tier = self.tiering_active() && mode == EvalMode::Cell;
        let compiled = match &call_cell {
            Some(call) => self.call_cell_entry(call, &mut outcome.timing).map(|entry| (vec![entry], None)),
            None => self
                .compile(&cell, &entry_prefix, TopLevel::Batched, tier, &mut outcome.timing)
                .map(|(linked, bitcode)| (linked.entries().to_vec(), Some((linked, bitcode)))),
        };
        let (entries, linked) = match compiled {
            Ok(compiled) => compiled,
            Err(diagnostics) => {
                self.undo_cell(saved_stage);
                return self.fail(outcome, diagnostics);
            }
        };
        if mode == EvalMode::Compile {
            // Compiled, and stored in the object cache: not committed, nothing run.
            self.undo_cell(saved_stage);
            return outcome;
        }
        if let Some((linked, bitcode)) = linked {
            let defined = self.commit(&cell, linked);
            self.queue_promotions(&cell, bitcode);
            if mode == EvalMode::Cell {
                outcome.items.extend(fold_included(defined, &expanded.includes));
            }
        }
        let run_start = Instant::now();
        // A bench's report is its output: nothing to show before it ends.
        let progress: &mut dyn FnMut(&Outcome) = if session_forms.is_empty() { progress } else { &mut |_| {} };
        self.run_top_level(&cell, &entries, mode, &mut outcome, progress);
        if !session_forms.is_empty() && !outcome.failed() {
            // A benchmark measures the code that will run from now on: the opt 3 code of tiered
            // compilation, once the background compiler has it (an interrupt stops the wait).
            match self.wait_for_promotions() {
                Ok(()) => bench::run_session_forms(self, &session_forms, &mut outcome),
                Err(diagnostic) => outcome.diagnostics.push(diagnostic),
            }
        }
        outcome.timing.add(Phase::Run, run_start.elapsed());
        // The cell has run: code of it (and of its benches) that no slot points to is unreachable.
        self.program.release_finished();
        self.history.attach_sources(&mut outcome);
        outcome
    }

    /// A cell that does not become the session's (it failed, or was only compiled): the
    /// libraries it loaded are dropped and the staging state goes back to `saved_stage`.
    fn undo_cell(&mut self, saved_stage: crate::expand::StageState) {
        self.libraries.drop_pending();
        self.staging.stage.restore(saved_stage);
    }

    /// Read: the text becomes a source of the session and is read into forms.
    fn read(&mut self, name: String, text: String, timing: &mut PhaseTimes) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
        let source = self.history.add_source(name, text);
        let text = self.history.text(source);
        timing.time(Phase::Parse, || reader::read(source, text))
    }

    /// Expand: unquotes run in Rhai. Only a cell that runs Rhai can read the session view, so
    /// most cells skip its rebuild.
    fn expand(&mut self, forms: Vec<Sexp>, timing: &mut PhaseTimes) -> Result<ExpandedCell, Vec<Diagnostic>> {
        if forms.iter().any(view::uses_staging) {
            self.refresh_view_if_stale();
        }
        timing.time(Phase::Expand, || self.staging.stage.expand(forms, &mut self.history.sources, false))
    }

    /// Check: forms against an environment, into the typed cell.
    fn check(&self, env: &Env, forms: &[Sexp], entry_prefix: &str) -> Result<TypedCell, Vec<Diagnostic>> {
        check::check(env, forms, &|name| self.resolve_extern(name), entry_prefix)
    }

    /// Codegen → optimise → emit → link: the checked cell becomes linked code, not yet part of
    /// the program.
    fn compile(
        &mut self,
        cell: &TypedCell,
        module_name: &str,
        top_level: TopLevel,
        tier: bool,
        timing: &mut PhaseTimes,
    ) -> Result<(Linked, Option<Bitcode>), Vec<Diagnostic>> {
        let target = Target::Host(self.opt_level);
        let target_data =
            self.backend.target_data(&target).map_err(|error| vec![Diagnostic::internal(error.to_string())])?;
        let names = self.program.name_cell(cell, &self.env);
        let backend = &self.backend;
        let lowered = timing.time(Phase::Codegen, || {
            codegen::lower(
                &backend.context,
                &target_data,
                &backend.triple(&target),
                cell,
                module_name,
                &names.naming(),
                top_level,
            )
        });
        let CellModule { module, entries, fault_sites, traps } =
            lowered.map_err(|error| vec![lowering_error(error, cell)])?;
        // The background compiler starts from the module as lowered (tiered compilation).
        let promotable = cell.functions.iter().chain(&cell.recompiled).any(|function| !function.placement.device_only);
        let bitcode = (tier && promotable).then(|| Arc::from(module.write_bitcode_to_memory().as_slice()));
        let compiled = backend.compile_cached(module, self.opt_level).map_err(|error| backend_error(error, cell))?;
        if let Some(optimise) = compiled.optimise {
            timing.add(Phase::Optimise, optimise);
        }
        let link_start = Instant::now();
        let emitted = Emitted { entries, fault_sites, traps };
        let linked =
            self.program.link(cell, names, &compiled.code, module_name, emitted).map_err(|error| vec![error])?;
        timing.add(Phase::Link, compiled.emit + link_start.elapsed());
        Ok((linked, bitcode))
    }

    /// Commit: makes a linked cell part of the session — the program takes its code, names and
    /// slots; the environment its definitions. Returns what it defined. Nothing here can fail.
    fn commit(&mut self, cell: &TypedCell, linked: Linked) -> Vec<Item> {
        let traps = self.program.commit(linked);
        let trap = |name: &str| traps.iter().find(|(trapped, _)| trapped == name).map(|(_, address)| *address);
        let mut items = Vec::new();
        for structure in &cell.structs {
            let entry = StructEntry { fields: structure.fields.clone() };
            let redefined = self.env.structs.contains_key(&structure.name);
            items.push(Item::Defined {
                name: format!("struct {}", structure.name),
                description: struct_line(&structure.name, &entry)
                    .trim_start_matches(&format!("struct {} ", structure.name))
                    .to_string()
                    + if redefined { "  (redefined)" } else { "" },
            });
            self.env.structs.insert(structure.name.clone(), entry);
            self.history.note_definition(DefinitionKey::Struct(structure.name.clone()));
        }
        for global in &cell.globals {
            let redefined = self.env.globals.contains_key(&global.name);
            let entry = GlobalEntry::from_def(global, self.env.globals.get(&global.name));
            self.env.globals.insert(global.name.clone(), entry);
            if let Some(init) = &global.init {
                self.program.initialise_global(&global.name, &global.ty, init, &self.env.structs);
            }
            let value = self.program.global_value_text(&global.name, &global.ty, &self.env.structs);
            items.push(Item::Defined {
                name: global.name.clone(),
                description: format!(
                    "{} = {value}{}",
                    global.ty,
                    if redefined && global.init.is_some() { "  (redefined)" } else { "" }
                ),
            });
            self.history.note_definition(DefinitionKey::Global(global.name.clone()));
        }
        for decl in &cell.externs {
            let existing = self.env.functions.get(&decl.name);
            if matches!(existing, Some(FunctionEntry { kind: FunctionKind::Defined(_), .. })) {
                continue;
            }
            let kind = match self.resolve_extern(&decl.name) {
                _ if decl.name.starts_with("llvm.") || intrinsics::is_libdevice(&decl.name) => {
                    FunctionKind::External(decl.name.clone())
                }
                Some(resolution) => resolution.kind(),
                None => FunctionKind::Unresolved,
            };
            self.tiering.changed(&decl.name);
            match (&kind, trap(&decl.name)) {
                (FunctionKind::Unresolved, Some(address)) => self.program.set_slot(&decl.name, address),
                (FunctionKind::Library { address, .. }, _) => self.program.set_slot_foreign(&decl.name, *address),
                _ => {}
            }
            let entry =
                FunctionEntry { signature: decl.signature.clone(), param_names: Vec::new(), kind, invalidated: None };
            items.push(Item::Defined {
                name: decl.name.clone(),
                description: format!("{}{}", entry.signature, function_note(&entry, false)),
            });
            self.env.functions.insert(decl.name.clone(), entry);
            self.history.note_definition(DefinitionKey::Function(decl.name.clone()));
        }
        for function in cell.functions.iter().chain(&cell.recompiled) {
            let recompiled = cell.recompiled.iter().any(|other| other.name == function.name);
            let previous = self.env.functions.get(&function.name);
            let redefined = matches!(previous, Some(FunctionEntry { kind: FunctionKind::Defined(_), .. }));
            let param_names =
                function.locals.iter().take(function.signature.params.len()).map(|local| local.name.clone()).collect();
            let mut kept = function.clone();
            kept.source = kept.source.compact(self.history.span_text(function.span));
            let entry = FunctionEntry {
                signature: function.signature.clone(),
                param_names,
                kind: FunctionKind::Defined(Rc::new(kept)),
                invalidated: None,
            };
            if !recompiled {
                items.push(Item::Defined {
                    name: function.name.clone(),
                    description: format!("{}{}", entry.signature, function_note(&entry, redefined)),
                });
            }
            self.gpu.note_defined(&function.name, function);
            self.tiering.changed(&function.name);
            self.compiled_levels.insert(function.name.clone(), self.opt_level);
            self.program.note_signature(&function.name, &function.signature);
            self.env.functions.insert(function.name.clone(), entry);
            self.history.note_definition(DefinitionKey::Function(function.name.clone()));
        }
        for invalidation in &cell.invalidated {
            if let Some(entry) = self.env.functions.get_mut(&invalidation.name) {
                entry.invalidated = Some(invalidation.message.clone());
            }
            self.tiering.changed(&invalidation.name);
            // Old code calling an invalidated function must not run it with the wrong types.
            if let Some(address) = trap(&invalidation.name) {
                self.program.set_slot(&invalidation.name, address);
            }
        }
        items.extend(self.commit_libraries());
        // Before any code of this cell, or of a bench or autotune variant, runs.
        self.settle_tiering();
        self.staging.view_stale = true;
        items
    }

    /// The cell's libraries become the session's, and every declaration still unresolved that
    /// one of them defines is bound to it: its slot, which held a trap, points at the symbol.
    fn commit_libraries(&mut self) -> Vec<Item> {
        let added = self.libraries.commit_pending();
        if added.is_empty() {
            return Vec::new();
        }
        let mut items: Vec<Item> = added.iter().map(|name| Item::Message(format!("loaded {name}"))).collect();
        let mut unresolved: Vec<String> = self
            .env
            .functions
            .iter()
            .filter(|(_, entry)| matches!(entry.kind, FunctionKind::Unresolved))
            .map(|(name, _)| name.clone())
            .collect();
        unresolved.sort();
        for name in unresolved {
            let Some((library, address)) = self.libraries.find(&name) else { continue };
            let kind = FunctionKind::Library { library: library.name.clone(), address };
            self.tiering.changed(&name);
            self.program.set_slot_foreign(&name, address);
            if let Some(entry) = self.env.functions.get_mut(&name) {
                entry.kind = kind;
                items.push(Item::Defined {
                    name: name.clone(),
                    description: format!("{}{}", entry.signature, function_note(entry, false)),
                });
            }
        }
        items
    }

    /// Loads the cell's `(load-library "NAME")` forms, in order, for the cell (they become the
    /// session's when it commits); returns the other forms.
    fn load_libraries(&mut self, forms: Vec<Sexp>) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
        let mut rest = Vec::with_capacity(forms.len());
        for form in forms {
            if form.head() != Some("load-library") {
                rest.push(form);
                continue;
            }
            let argument = match form.list() {
                Some([_, argument]) => argument,
                _ => {
                    return Err(vec![Diagnostic::error(Kind::Syntax, "`load-library` is `(load-library \"NAME\")`")
                        .with_label(form.span, "")])
                }
            };
            let SexpKind::Str(bytes) = &argument.kind else {
                return Err(vec![Diagnostic::error(
                    Kind::Syntax,
                    "`load-library` takes a string: a library's name or path",
                )
                .with_label(argument.span, "")]);
            };
            let name = String::from_utf8_lossy(bytes).into_owned();
            if let Err(message) = self.libraries.load(&name) {
                let searched = std::env::var(LIBRARY_PATH_VARIABLE).unwrap_or_default();
                let note = if name.contains('/') {
                    "a name with `/` is a path, used as it is".to_string()
                } else if searched.is_empty() {
                    format!("searched by the system loader; {LIBRARY_PATH_VARIABLE} (directories, colon-separated) is not set")
                } else {
                    format!("searched {LIBRARY_PATH_VARIABLE}={searched}, then by the system loader")
                };
                return Err(vec![Diagnostic::error(Kind::Ffi, format!("cannot load library `{name}`: {message}"))
                    .with_label(argument.span, "")
                    .with_note(note)]);
            }
        }
        Ok(rest)
    }

    /// Run: the cell's top-level code, in one call of its batched entries, until an item
    /// faults; each item's output and value are shown in order, as the items finish, values as
    /// the language spells them.
    fn run_top_level(
        &mut self,
        cell: &TypedCell,
        entries: &[usize],
        mode: EvalMode,
        outcome: &mut Outcome,
        progress: &mut dyn FnMut(&Outcome),
    ) {
        let top: Vec<&FunctionDef> = cell.top.iter().map(|item| &item.function).collect();
        self.prepare_launches(&top, &mut outcome.timing);
        if entries.is_empty() {
            return;
        }
        let structs = &self.env.structs;
        let size = cell.top.iter().filter_map(|item| item.value.as_ref()).map(|ty| value::size_align(ty, structs).0);
        let size = size.max().unwrap_or(0);
        let gpu = &self.gpu;
        let value_text = |bytes: &[u8], ty: &Ty| {
            value::format_value_with(bytes, 0, ty, structs, &|handle, element| gpu.describe_buffer(handle, element))
        };
        let mut shown = TopLevelRun::new(&cell.top, mode != EvalMode::Script);
        let capture = self.config.capture_output;
        // Output that is not captured goes to the terminal as it is written: each value must be
        // shown before the next item runs.
        let lockstep = !capture && mode == EvalMode::Cell;
        let report = self.runner.call(entries, size, capture, lockstep, &mut |done| {
            shown.absorb(done, false, outcome, &value_text);
            progress(outcome);
        });
        shown.absorb(report.rest, true, outcome, &value_text);
        outcome.timing.device.extend(self.gpu.runtime.take_rows());
        self.program.keep_allocations(report.allocations);
        let faulting = cell.top.get(shown.finished());
        match (report.fault, faulting) {
            // A script that calls exit ends as a C program does: with that status, quietly.
            (Some(Fault::Exit { status, .. }), _) if mode != EvalMode::Cell => self.script_exit = Some(status),
            // An interrupt that came after the last item stopped nothing.
            (Some(Fault::Interrupted { .. }), None) => progress(outcome),
            (Some(fault), item) => {
                // Every item finished yet the call faulted: the last item's, after its end.
                if let Some(item) = item.or(cell.top.last()) {
                    outcome.diagnostics.push(self.fault_diagnostic(&fault, item.function.span));
                }
            }
            (None, _) => progress(outcome),
        }
    }

    /// Builds current PTX for every function host code can launch, before code runs.
    /// In the simulator, builds for the host and links them instead.
    fn prepare_launches(&mut self, top: &[&FunctionDef], timing: &mut PhaseTimes) {
        let pending = self.gpu.prepare_launches(&device_source(&self.env, &self.backend, &self.program), top, timing);
        if !pending.is_empty() {
            self.gpu.install_simulated(&mut self.program, pending);
        }
    }
}

impl Pipeline for Session {
    fn compile_quietly(&mut self, forms: &[Sexp], with_clock: bool) -> Result<QuietCell, Vec<Diagnostic>> {
        self.history.quiet_count += 1;
        let prefix = format!("cell#{}q{}", self.history.cell_count, self.history.quiet_count);
        let cell = if with_clock {
            let mut env = self.env.clone();
            env.functions.insert(crate::abi::RT_CLOCK.to_string(), bench::clock_entry());
            self.check(&env, forms, &prefix)
        } else {
            self.check(&self.env, forms, &prefix)
        }?;
        let (linked, _) = self.compile(&cell, &prefix, TopLevel::PerItem, false, &mut PhaseTimes::default())?;
        let entries = linked.entries().to_vec();
        self.commit(&cell, linked);
        // What its top-level code launches (a bench's or autotune's run) is built now.
        let top: Vec<&FunctionDef> = cell.top.iter().map(|item| &item.function).collect();
        self.prepare_launches(&top, &mut PhaseTimes::default());
        Ok((cell.top.iter().map(|item| item.value.clone()).collect(), entries))
    }

    fn call_for_value(&mut self, entry: usize, size: usize, span: Span) -> Result<Vec<u8>, Vec<Diagnostic>> {
        self.prepare_launches(&[], &mut PhaseTimes::default());
        // Bench and autotune runs: their output is not shown, only what they measure.
        let report = self.runner.call(&[entry], size, self.config.capture_output, false, &mut |_| {});
        self.gpu.runtime.take_rows();
        self.program.keep_allocations(report.allocations);
        match report.fault {
            Some(fault) => Err(vec![self.fault_diagnostic(&fault, span)]),
            None => Ok(report.result),
        }
    }

    fn expand_quietly(&mut self, form: &Sexp) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
        self.refresh_view_if_stale();
        self.staging.stage.expand(vec![form.clone()], &mut self.history.sources, false).map(|expanded| expanded.forms)
    }

    fn env(&self) -> &Env {
        &self.env
    }
}

/// What device code is lowered from, lent by the session's parts (not by `&self`: the GPU part
/// that takes it is borrowed mutably beside them).
fn device_source<'s>(env: &'s Env, backend: &'s Backend, program: &'s Program) -> DeviceSource<'s> {
    DeviceSource { env, backend, struct_names: program.struct_names() }
}

/// Why `quasi run` cannot call this `main` (docs/language.md §5.5): it takes `()`, `(argc)` or
/// `(argc argv)`, argc an integer and argv a pointer to pointers, and returns an integer or
/// nothing.
fn main_shape_error(main: &crate::check::FunctionEntry, span: Option<Span>) -> Option<Diagnostic> {
    let params = &main.signature.params;
    let argc_ok = params.first().is_none_or(|argc| matches!(argc, crate::types::Ty::Int(_)));
    let argv_ok = params.get(1).is_none_or(|argv| argv.pointee().and_then(crate::types::Ty::pointee).is_some());
    let ret_ok = matches!(main.signature.ret, crate::types::Ty::Int(_) | crate::types::Ty::Void);
    if params.len() <= 2 && argc_ok && argv_ok && ret_ok {
        return None;
    }
    let found: Vec<String> = params.iter().map(ToString::to_string).collect();
    let mut diagnostic = Diagnostic::error(
        Kind::Type,
        format!(
            "`quasi run` cannot call `main` : ({}) -> {}: it takes (), (argc) or (argc argv) and returns an integer or void",
            found.join(", "),
            main.signature.ret
        ),
    )
    .with_note("argc is an integer (1 + the arguments after FILE), argv a pointer to pointers, e.g. (ptr (ptr int8))");
    if let Some(span) = span {
        diagnostic = diagnostic.with_label(span, "");
    }
    Some(diagnostic)
}

/// `quasi run`'s status after an error: 130 if interrupted, 2 after a runtime fault or GPU
/// error, 1 for an error before running.
fn failure_status(outcome: &Outcome) -> i32 {
    let has =
        |kind: Kind| outcome.diagnostics.iter().any(|diagnostic| diagnostic.is_error() && diagnostic.kind == kind);
    if has(Kind::Interrupted) {
        130
    } else if has(Kind::RuntimeFault) || has(Kind::Gpu) {
        2
    } else {
        1
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum EvalMode {
    /// An interactive cell: definitions and values are shown.
    Cell,
    /// `quasi run`: only the program's own output.
    Script,
    /// The call of `main` after a script: its value is the exit status.
    Main,
    /// `compile_file`: a script compiled into the object cache, not run.
    Compile,
}

/// An `include` reports one summary line instead of a line per declaration it made.
fn fold_included(defined: Vec<Item>, includes: &[(String, HashSet<String>)]) -> Vec<Item> {
    if includes.is_empty() {
        return defined;
    }
    let included = |name: &str| includes.iter().any(|(_, names)| names.contains(name));
    let mut items: Vec<Item> =
        defined.into_iter().filter(|item| !matches!(item, Item::Defined { name, .. } if included(name))).collect();
    items.splice(0..0, includes.iter().map(|(summary, _)| Item::Message(summary.clone())));
    items
}

/// `quasi run`'s argv as C wants it: NUL-terminated strings and a null-terminated array of
/// pointers to them. An argument holding a NUL ends there, as it would through `execve`.
struct ScriptArgv {
    _strings: Vec<std::ffi::CString>,
    pointers: Vec<*const std::ffi::c_char>,
}

// SAFETY: the pointers point into `_strings`, which the value owns and moves with it.
unsafe impl Send for ScriptArgv {}

impl ScriptArgv {
    fn new<'a>(arguments: impl Iterator<Item = &'a str>) -> ScriptArgv {
        let strings: Vec<std::ffi::CString> = arguments
            .map(|argument| {
                let bytes = argument.as_bytes();
                let end = bytes.iter().position(|&byte| byte == 0).unwrap_or(bytes.len());
                std::ffi::CString::new(&bytes[..end]).unwrap_or_default()
            })
            .collect();
        let pointers = strings.iter().map(|string| string.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        ScriptArgv { _strings: strings, pointers }
    }

    /// The array's address (the strings' heap buffers do not move when the vector does).
    fn address(&self) -> usize {
        self.pointers.as_ptr() as usize
    }
}
