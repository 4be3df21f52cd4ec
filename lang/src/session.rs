//! Session: the facade `Session::eval(cell) -> Outcome`; the pipeline, commit, completion.
//!
//! Invariant: every call between user functions loads the callee's slot, and a slot always
//! holds the newest linked definition, so every caller sees the newest definition.
//! Invariant: `env`, global values and slots change only in `commit`, after linking
//! succeeded; a cell that fails before that leaves the session exactly as it was.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use inkwell::context::Context;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};
use inkwell::OptimizationLevel;

use crate::check::{self, Env, FunctionEntry, FunctionKind};
use crate::codegen::{self, CellModule, FaultSite, Naming};
use crate::diagnostics::{Diagnostic, Kind};
use crate::expand::{self, ExpansionSite, PendingPosition, SessionView, Stage};
use crate::jit::{CellCode, Jit, LlvmDiagnostics};
use crate::reader::{self, SourceFile, SourceId, Span};
use crate::run::{self, Fault, Runner};
use crate::timing::{Phase, PhaseTimes};
use crate::tree::{Constant, FunctionDef, GlobalEntry, TypedCell};
use crate::types::{StructEntry, Ty};
use crate::value;
use crate::{inspect, Item, Language, Outcome, Stream};

/// The optimisation level a session starts with: the lowest cell latency (see the README's
/// measurements); `:opt 3` for fast code.
pub const DEFAULT_OPT_LEVEL: u8 = 1;

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
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig { capture_output: false, opt_level: DEFAULT_OPT_LEVEL, load_prelude: true }
    }
}

/// Lets another thread interrupt what a session is doing (Rhai expansion today; compiled
/// loops check it in a later version).
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
}

/// Storage of one global, owned by the session and read by compiled code by symbol.
struct GlobalStorage {
    symbol: String,
    memory: *mut u8,
    layout: std::alloc::Layout,
}

impl GlobalStorage {
    fn new(symbol: String, size: usize, align: usize) -> GlobalStorage {
        // Address space 3 globals promise 16-byte alignment; use it for all.
        let layout = std::alloc::Layout::from_size_align(size.max(1), align.max(16))
            .unwrap_or(std::alloc::Layout::new::<u128>());
        // SAFETY: the layout has a non-zero size.
        let memory = unsafe { std::alloc::alloc_zeroed(layout) };
        if memory.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        GlobalStorage { symbol, memory, layout }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `memory` is a live allocation of `layout.size()` bytes until drop.
        unsafe { std::slice::from_raw_parts(self.memory, self.layout.size()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; compiled code is not running while the session writes.
        unsafe { std::slice::from_raw_parts_mut(self.memory, self.layout.size()) }
    }
}

impl Drop for GlobalStorage {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.memory, self.layout) }
    }
}

/// A defined name in the order `:defs` lists them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum DefinitionKey {
    Struct(String),
    Global(String),
    Function(String),
}

/// An interactive session: definitions, globals and compiled code that persist across cells.
pub struct Session {
    config: SessionConfig,
    opt_level: u8,
    // Field order matters for drop: the runner stops before the JIT frees the code.
    runner: Runner,
    cells: Vec<CellCode>,
    jit: Jit,
    pub(crate) context: Context,
    /// LLVM's errors about the context's code (after `context`, so it is dropped after it).
    pub(crate) llvm_diagnostics: Box<LlvmDiagnostics>,
    machines: Vec<Option<TargetMachine>>,
    triple: TargetTriple,
    pub(crate) env: Env,
    sources: Vec<SourceFile>,
    cell_count: u32,
    /// One slot per function name, at a fixed address for the session's life.
    slots: HashMap<String, Box<AtomicUsize>>,
    globals: HashMap<String, GlobalStorage>,
    /// Storage of globals that were replaced (retyped): freed with the session, not before.
    retired_globals: Vec<GlobalStorage>,
    pub(crate) struct_names: HashMap<String, String>,
    used_symbols: HashSet<String>,
    symbol_counter: u64,
    fault_sites: Vec<FaultSite>,
    session_memory: Vec<usize>,
    definitions: BTreeMap<DefinitionKey, u32>,
    definition_counter: u32,
    stage: Stage,
    interrupt: Arc<AtomicBool>,
    /// The last cell's text, the default subject of `:expand`.
    last_cell: Option<String>,
    /// The last cell's expansion as it was compiled (same gensyms), for `:expand`.
    pub(crate) last_expansion: Option<Vec<reader::Sexp>>,
    /// Whether `stage.view` lags behind the environment.
    view_stale: bool,
    /// The current body symbol of every defined function, for listings.
    body_symbols: HashMap<String, String>,
    /// Show the timing table after every cell (`:time on`).
    pub(crate) show_timing: bool,
    /// The last cell's phase times, for `:time last`.
    pub(crate) last_timing: Option<PhaseTimes>,
    /// The GPU runtime, the target and the PTX built (last: compiled code may use it until
    /// the runner, dropped first, has stopped).
    pub(crate) gpu: crate::gpu::ptx::SessionGpu,
}

/// The back end's level per `:opt` level. Level 1 keeps LLVM's fast instruction selection and
/// register allocation (`None`): its IR passes already give the code most of its speed, and
/// the back end at `Less` tripled a small cell's latency (1.2 ms against 0.3 ms, measured).
const MACHINE_LEVELS: [OptimizationLevel; 4] =
    [OptimizationLevel::None, OptimizationLevel::None, OptimizationLevel::Default, OptimizationLevel::Aggressive];

fn initialise_llvm() -> Result<(), SessionError> {
    static INIT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    INIT.get_or_init(|| Target::initialize_native(&InitializationConfig::default())).clone().map_err(SessionError::Llvm)
}

impl Session {
    /// Starts a session: an ORC JIT, an executor thread, an empty environment.
    pub fn new(config: SessionConfig) -> Result<Session, SessionError> {
        initialise_llvm()?;
        let mut jit = Jit::new().map_err(|error| SessionError::Llvm(error.to_string()))?;
        jit.define_absolute(&run::runtime_symbols()).map_err(|error| SessionError::Llvm(error.to_string()))?;
        // The CUDA driver starts in the background now, so the first GPU cell rarely waits.
        let gpu = crate::gpu::ptx::SessionGpu::new();
        jit.define_absolute(&gpu.runtime.runtime_symbols()).map_err(|error| SessionError::Llvm(error.to_string()))?;
        let opt_level = config.opt_level.min(3);
        let interrupt = expand::new_interrupt_flag();
        let load_prelude = config.load_prelude;
        let context = Context::create();
        let llvm_diagnostics = LlvmDiagnostics::install(&context);
        let mut session = Session {
            config,
            opt_level,
            runner: Runner::new()?,
            cells: Vec::new(),
            jit,
            context,
            llvm_diagnostics,
            machines: (0..4).map(|_| None).collect(),
            triple: TargetMachine::get_default_triple(),
            env: Env::default(),
            sources: Vec::new(),
            cell_count: 0,
            slots: HashMap::new(),
            globals: HashMap::new(),
            retired_globals: Vec::new(),
            struct_names: HashMap::new(),
            used_symbols: HashSet::new(),
            symbol_counter: 0,
            fault_sites: Vec::new(),
            session_memory: Vec::new(),
            definitions: BTreeMap::new(),
            definition_counter: 0,
            stage: Stage::new(interrupt.clone()),
            interrupt,
            last_cell: None,
            last_expansion: None,
            body_symbols: HashMap::new(),
            view_stale: false,
            show_timing: false,
            last_timing: None,
            gpu,
        };
        if load_prelude {
            session.load_prelude()?;
        }
        Ok(session)
    }

    fn load_prelude(&mut self) -> Result<(), SessionError> {
        for (name, text) in quasi_prelude::FILES {
            let source = self.source_id(format!("prelude/{name}"), text.to_string());
            let span = Span::new(source, 0, 0);
            if let Err(diagnostic) = self.stage.run_script(text, source, 0, span) {
                return Err(SessionError::Prelude(name.to_string(), diagnostic.message));
            }
        }
        self.stage.take_printed();
        Ok(())
    }

    /// A handle that interrupts this session's running cell from another thread.
    pub fn interrupt_handle(&self) -> InterruptHandle {
        InterruptHandle(self.interrupt.clone())
    }

    /// The current optimisation level.
    pub fn opt_level(&self) -> u8 {
        self.opt_level
    }

    /// The number of cells evaluated so far (failed ones included).
    pub fn cell_count(&self) -> u32 {
        self.cell_count
    }

    /// Evaluates one cell: forms, or one `:command` line.
    pub fn eval(&mut self, text: &str) -> Outcome {
        self.cell_count += 1;
        self.interrupt.store(false, Ordering::SeqCst);
        let name = format!("cell {}", self.cell_count);
        if text.trim_start().starts_with(':') {
            return crate::command::run(self, text.trim());
        }
        self.last_cell = Some(text.to_string());
        let mut outcome = self.eval_source(name, text.to_string(), EvalMode::Cell);
        self.last_timing = Some(outcome.timing.clone());
        if self.show_timing {
            outcome.items.push(Item::Timing(outcome.timing.clone()));
        }
        outcome
    }

    /// Runs a whole file as `quasi run` does: the file is one cell, values are not shown,
    /// and `main` is called if defined. Returns the outcome and the exit status.
    pub fn run_file(&mut self, path: &str, text: String, args: &[String]) -> (Outcome, i32) {
        self.cell_count += 1;
        let mut outcome = self.eval_source(path.to_string(), text, EvalMode::Script);
        if outcome.failed() {
            let faulted = outcome.diagnostics.iter().any(|diagnostic| diagnostic.kind == Kind::RuntimeFault);
            return (outcome, if faulted { 2 } else { 1 });
        }
        let Some(main) = self.env.functions.get("main").cloned() else { return (outcome, 0) };
        let call = match main.signature.params.len() {
            0 => "(call main)".to_string(),
            1 => format!("(call main {})", args.len() + 1),
            _ => {
                // argv: a session array of C strings, built in compiled code from literals.
                let mut program = format!(
                    "((declare quasi-argv (ptr (ptr int8))) (set quasi-argv (alloc (ptr int8) {}))",
                    args.len() + 2
                );
                for (index, arg) in std::iter::once(&path.to_string()).chain(args).enumerate() {
                    program.push_str(&format!(" (store (ptradd quasi-argv {index}) {:?})", arg));
                }
                program.push_str(&format!(
                    " (store (ptradd quasi-argv {}) (inttoptr 0 (ptr int8))) (call main {} (bitcast quasi-argv {})))",
                    args.len() + 1,
                    args.len() + 1,
                    main.signature.params[1]
                ));
                program
            }
        };
        // The call of `main` is a cell of its own (its entry must not reuse the file's names).
        self.cell_count += 1;
        let main_outcome = self.eval_source(format!("{path} (main)"), call, EvalMode::Main);
        let status = match main_outcome.items.iter().find_map(|item| match item {
            Item::Value { text, .. } => text.parse::<i64>().ok(),
            _ => None,
        }) {
            Some(value) => (value & 0xff) as i32,
            None => 0,
        };
        let faulted = main_outcome.failed();
        outcome.items.extend(main_outcome.items);
        outcome.diagnostics.extend(main_outcome.diagnostics);
        outcome.sources.extend(main_outcome.sources);
        (outcome, if faulted { 2 } else { status })
    }

    /// Evaluates a file as one cell (`:load`); a `.rhai` file runs as Rhai in the session scope.
    pub(crate) fn load_file(&mut self, path: &str) -> Outcome {
        self.refresh_view_if_stale();
        match std::fs::read_to_string(path) {
            Ok(text) if path.ends_with(".rhai") => {
                let source = self.source_id(path.to_string(), text.clone());
                let mut outcome = Outcome::default();
                let start = Instant::now();
                let result = self.stage.run_script(&text, source, 0, Span::new(source, 0, 0));
                outcome.timing.add(Phase::Expand, start.elapsed());
                let printed = self.stage.take_printed();
                if !printed.is_empty() {
                    outcome.items.push(Item::Output { stream: Stream::Stdout, text: printed });
                }
                match result {
                    Ok(()) => outcome.items.push(Item::Message(format!("loaded {path}"))),
                    Err(diagnostic) => outcome.diagnostics.push(*diagnostic),
                }
                self.attach_sources(&mut outcome);
                outcome
            }
            Ok(text) => self.eval_source(path.to_string(), text, EvalMode::Cell),
            Err(error) => {
                let mut outcome = Outcome::default();
                outcome.diagnostics.push(Diagnostic::error(Kind::Io, format!("cannot read `{path}`: {error}")));
                outcome
            }
        }
    }

    /// `:expand [N] [TEXT]`: the expansion of TEXT (default: the last cell), pretty-printed.
    /// The session is left as it was: Rhai effects of the expansion are undone.
    pub(crate) fn expand_command(&mut self, text: Option<&str>, single_level: bool) -> Outcome {
        self.refresh_view_if_stale();
        let mut outcome = Outcome::default();
        if let (None, false, Some(forms)) = (text, single_level, &self.last_expansion) {
            let listing: Vec<String> = forms.iter().map(|form| expand::pretty(form, 0)).collect();
            outcome.items.push(Item::Message(listing.join("\n")));
            return outcome;
        }
        let Some(text) = text.map(str::to_string).or_else(|| self.last_cell.clone()) else {
            outcome.diagnostics.push(
                Diagnostic::error(Kind::Syntax, "`:expand` needs a cell: no cell was evaluated yet")
                    .with_note("write `:expand TEXT`"),
            );
            return outcome;
        };
        let source = self.source_id(format!("cell {}", self.cell_count), text.clone());
        let forms = match reader::read(source, &text) {
            Ok(forms) => forms,
            Err(diagnostics) => return self.fail(outcome, diagnostics),
        };
        let saved = self.stage.snapshot();
        let expanded = self.stage.expand(forms, &mut self.sources, single_level);
        self.stage.restore(saved);
        match expanded {
            Ok(expanded) => {
                let listing: Vec<String> = expanded.forms.iter().map(|form| expand::pretty(form, 0)).collect();
                outcome.items.push(Item::Message(listing.join("\n")));
                outcome
            }
            Err(diagnostics) => self.fail(outcome, diagnostics),
        }
    }

    /// The text a span covers in its source.
    fn span_text(&self, span: Span) -> Option<String> {
        self.sources
            .get(span.source.0 as usize)
            .and_then(|file| file.text.get(span.start as usize..span.end as usize))
            .map(str::to_string)
    }

    /// `:stages`, `:types`, `:ir [opt]`, `:asm`: listings of a definition (or, without a name,
    /// of the last cell), recompiled in a scratch module that is never linked.
    pub(crate) fn inspect_command(&mut self, stages: &[inspect::Stage], subject: Option<&str>) -> Outcome {
        self.refresh_view_if_stale();
        let mut outcome = Outcome::default();
        let defined = subject.and_then(|name| match self.env.functions.get(name) {
            Some(FunctionEntry { kind: FunctionKind::Defined(def), .. }) => Some(def.clone()),
            _ => None,
        });
        let (label, forms, source_text) = match (subject, defined) {
            (Some(name), Some(def)) => (name.to_string(), vec![def.source.clone()], self.span_text(def.span)),
            (Some(name), None) if reader::is_symbol(name) => {
                let message = if self.env.functions.contains_key(name) {
                    format!("`{name}` is declared without a body: there is nothing to list")
                } else {
                    format!("no function named `{name}`")
                };
                outcome.diagnostics.push(Diagnostic::error(Kind::UnknownName, message));
                return outcome;
            }
            (Some(text), None) => {
                // A cell's text (`:types (add 1 2)`): expanded here, never committed.
                let source = self.source_id(format!("cell {}", self.cell_count), text.to_string());
                let forms = match reader::read(source, text) {
                    Ok(forms) => forms,
                    Err(diagnostics) => return self.fail(outcome, diagnostics),
                };
                let saved = self.stage.snapshot();
                let expanded = self.stage.expand(forms, &mut self.sources, false);
                self.stage.restore(saved);
                match expanded {
                    Ok(expanded) => ("cell".to_string(), expanded.forms, Some(text.to_string())),
                    Err(diagnostics) => return self.fail(outcome, diagnostics),
                }
            }
            (None, _) => match &self.last_expansion {
                Some(forms) => ("last cell".to_string(), forms.clone(), self.last_cell.clone()),
                None => {
                    outcome.diagnostics.push(
                        Diagnostic::error(Kind::Syntax, "there is no cell to list yet")
                            .with_note("name a function, e.g. `:ir fib`"),
                    );
                    return outcome;
                }
            },
        };
        let prefix = format!("inspect#{}", self.cell_count);
        let mut cell = match check::check(&self.env, &forms, &Session::resolve_extern, &prefix) {
            Ok(cell) => cell,
            Err(diagnostics) => return self.fail(outcome, diagnostics),
        };
        // Only the subject itself: no recompiled dependents, no traps.
        cell.recompiled.clear();
        cell.invalidated.clear();
        if let Some(name) = subject.filter(|_| label != "cell") {
            cell.functions.retain(|function| function.name == name);
            cell.top.clear();
        } else if !cell.top.is_empty() {
            cell.functions.clear();
        }
        let level = self.opt_level;
        // Device code lists its GPU build: IR for NVPTX, and PTX instead of x86-64 assembly.
        let device_subject = subject.filter(|name| {
            label == *name
                && (stages.contains(&inspect::Stage::Ptx)
                    || check::defined(&self.env, name).is_some_and(|def| def.placement.device_only))
        });
        let device = match device_subject {
            Some(name)
                if stages.iter().any(|stage| {
                    matches!(
                        stage,
                        inspect::Stage::Ir
                            | inspect::Stage::OptimisedIr
                            | inspect::Stage::Assembly
                            | inspect::Stage::Ptx
                    )
                }) =>
            {
                match self.ptx_listing(name) {
                    Ok(listing) => Some(listing),
                    Err(diagnostic) => return self.fail(outcome, vec![diagnostic]),
                }
            }
            _ => None,
        };
        let needs_code = device.is_none()
            && stages.iter().any(|stage| {
                matches!(stage, inspect::Stage::Ir | inspect::Stage::OptimisedIr | inspect::Stage::Assembly)
            });
        let code = if needs_code {
            match self.scratch_listings(&cell, stages) {
                Ok(code) => Some(code),
                Err(diagnostic) => return self.fail(outcome, vec![diagnostic]),
            }
        } else {
            None
        };
        for stage in stages {
            let (language, text) = match stage {
                inspect::Stage::Source => (Language::CLisp, source_text.clone().unwrap_or_default()),
                inspect::Stage::Expanded => {
                    (Language::CLisp, forms.iter().map(|form| expand::pretty(form, 0)).collect::<Vec<_>>().join("\n"))
                }
                inspect::Stage::Typed => {
                    let mut parts: Vec<String> = cell
                        .functions
                        .iter()
                        .map(|function| expand::pretty(&inspect::typed_tree(function, &self.env.structs), 0))
                        .collect();
                    for item in &cell.top {
                        parts.extend(
                            inspect::typed_statements(&item.function, &self.env.structs)
                                .iter()
                                .map(|form| expand::pretty(form, 0)),
                        );
                    }
                    (Language::CLisp, parts.join("\n"))
                }
                inspect::Stage::Ir if device.is_some() => {
                    (Language::LlvmIr, device.as_ref().map(|device| device.ir.clone()).unwrap_or_default())
                }
                inspect::Stage::OptimisedIr if device.is_some() => {
                    (Language::LlvmIr, device.as_ref().map(|device| device.optimised.clone()).unwrap_or_default())
                }
                inspect::Stage::Assembly | inspect::Stage::Ptx if device.is_some() => {
                    (Language::Ptx, device.as_ref().map(|device| device.ptx.clone()).unwrap_or_default())
                }
                inspect::Stage::Ir => (Language::LlvmIr, code.as_ref().map(|code| code.0.clone()).unwrap_or_default()),
                inspect::Stage::OptimisedIr => {
                    (Language::LlvmIr, code.as_ref().map(|code| code.1.clone()).unwrap_or_default())
                }
                inspect::Stage::Assembly | inspect::Stage::Ptx => {
                    (Language::Assembly, code.as_ref().map(|code| code.2.clone()).unwrap_or_default())
                }
            };
            let arch = self.gpu.arch.clone();
            let title = match stage {
                inspect::Stage::Ir | inspect::Stage::OptimisedIr if device.is_some() => {
                    format!("{label}: {} for {arch} (opt 3)", stage.title())
                }
                inspect::Stage::Assembly | inspect::Stage::Ptx if device.is_some() => format!("{label}: PTX ({arch})"),
                inspect::Stage::Ir | inspect::Stage::OptimisedIr | inspect::Stage::Assembly => {
                    format!("{label}: {} (opt {level})", stage.title())
                }
                _ => format!("{label}: {}", stage.title()),
            };
            outcome.items.push(Item::Listing { title, language, text });
        }
        outcome
    }

    /// IR before and after passes and assembly of a checked cell, from a module never linked.
    fn scratch_listings(
        &mut self,
        cell: &TypedCell,
        stages: &[inspect::Stage],
    ) -> Result<(String, String, String), Diagnostic> {
        let global_symbols: HashMap<String, String> =
            self.globals.iter().map(|(name, storage)| (name.clone(), storage.symbol.clone())).collect();
        let body_symbols: HashMap<String, String> = cell
            .functions
            .iter()
            .map(|function| {
                (
                    function.name.clone(),
                    self.body_symbols.get(&function.name).cloned().unwrap_or_else(|| function.name.clone()),
                )
            })
            .collect();
        let struct_names = self.struct_names.clone();
        let naming = Naming {
            global_symbols: &global_symbols,
            struct_names: &struct_names,
            body_symbols: &body_symbols,
            first_site: self.fault_sites.len() as u32,
        };
        let level = self.opt_level;
        let target_data = self.machine(level)?.get_target_data();
        let triple = TargetTriple::create(&self.triple.as_str().to_string_lossy());
        let machine = self.machines[level as usize].as_ref().ok_or_else(|| internal("no target machine".into()))?;
        let CellModule { module, .. } = codegen::lower(&self.context, &target_data, &triple, cell, "inspect", &naming)
            .map_err(|error| internal(format!("code generation failed: {error}")))?;
        let ir = inspect::trim_ir(&module.print_to_string().to_string());
        if level > 0 {
            module
                .run_passes(pass_pipeline(level), machine, PassBuilderOptions::create())
                .map_err(|error| internal(format!("LLVM passes failed: {error}")))?;
        }
        let optimised = inspect::trim_ir(&module.print_to_string().to_string());
        let assembly = if stages.contains(&inspect::Stage::Assembly) {
            let buffer = machine
                .write_to_memory_buffer(&module, FileType::Assembly)
                .map_err(|error| internal(format!("LLVM could not emit assembly: {error}")))?;
            inspect::trim_assembly(&String::from_utf8_lossy(buffer.as_slice()))
        } else {
            String::new()
        };
        Ok((ir, optimised, assembly))
    }

    /// `:limits [NAME VALUE]`.
    pub(crate) fn limits_command(&mut self, name: Option<&str>, value: Option<&str>) -> Outcome {
        let mut outcome = Outcome::default();
        if let Some(name) = name {
            let parsed = value.and_then(|value| value.replace('_', "").parse::<u64>().ok());
            match parsed {
                Some(number) if self.stage.limits.set(name, number) => self.stage.apply_limits(),
                _ => {
                    let names: Vec<&str> = self.stage.limits.entries().iter().map(|(name, _)| *name).collect();
                    outcome.diagnostics.push(
                        Diagnostic::error(
                            Kind::Syntax,
                            format!(
                                "`:limits` takes a limit name and a number, found `{} {}`",
                                name,
                                value.unwrap_or("")
                            ),
                        )
                        .with_note(format!("the limits are: {}", names.join(", "))),
                    );
                    return outcome;
                }
            }
        }
        let lines: Vec<String> =
            self.stage.limits.entries().iter().map(|(name, value)| format!("{name:<17} {value}")).collect();
        outcome.items.push(Item::Message(lines.join("\n")));
        outcome
    }

    /// Starts over: a fresh session with the same configuration.
    pub(crate) fn reset(&mut self) -> Result<(), SessionError> {
        let count = self.cell_count;
        let mut fresh = Session::new(SessionConfig { opt_level: self.opt_level, ..self.config.clone() })?;
        fresh.cell_count = count;
        *self = fresh;
        Ok(())
    }

    pub(crate) fn set_opt_level(&mut self, level: u8) {
        self.opt_level = level.min(3);
    }

    /// Completion candidates for the word that ends at byte `cursor` of `text`: session names,
    /// forms and opcodes, or `:commands` at the start of a line. Returns the byte offset where
    /// the word starts and the sorted candidates.
    pub fn completions(&self, text: &str, cursor: usize) -> (usize, Vec<String>) {
        let cursor = cursor.min(text.len());
        let before = &text[..cursor];
        let start = before
            .rfind(|character: char| character.is_whitespace() || "()[]\"`,;".contains(character))
            .map_or(0, |index| index + 1);
        let word = &before[start..];
        let mut candidates: Vec<String> = if word.starts_with(':') && before[..start].trim().is_empty() {
            crate::command::COMMANDS
                .iter()
                .map(|(name, _)| name.split_whitespace().next().unwrap_or(name).to_string())
                .collect()
        } else {
            self.defined_names()
                .into_iter()
                .chain(crate::check::FORM_NAMES.iter().map(|name| name.to_string()))
                .collect()
        };
        candidates.retain(|candidate| candidate.starts_with(word));
        candidates.sort();
        candidates.dedup();
        (start, candidates)
    }

    /// Names for completion: defined functions, globals and structs.
    pub fn defined_names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.env.functions.keys().chain(self.env.globals.keys()).chain(self.env.structs.keys()).cloned().collect();
        names.sort();
        names.dedup();
        names
    }

    /// Lines describing every definition, for `:defs`.
    pub(crate) fn definition_lines(&self) -> Vec<String> {
        let mut ordered: Vec<(&u32, &DefinitionKey)> =
            self.definitions.iter().map(|(key, order)| (order, key)).collect();
        ordered.sort();
        ordered
            .into_iter()
            .filter_map(|(_, key)| match key {
                DefinitionKey::Struct(name) => self.env.structs.get(name).map(|entry| struct_line(name, entry)),
                DefinitionKey::Global(name) => self
                    .env
                    .globals
                    .get(name)
                    .map(|entry| format!("{name} : {} = {}", entry.ty, self.global_value_text(name, &entry.ty))),
                DefinitionKey::Function(name) => self
                    .env
                    .functions
                    .get(name)
                    .map(|entry| format!("{name} : {}{}", entry.signature, function_note(entry, false))),
            })
            .collect()
    }

    fn source_id(&mut self, name: String, text: String) -> SourceId {
        self.sources.push(SourceFile { name, text });
        SourceId(self.sources.len() as u32 - 1)
    }

    fn fail(&self, mut outcome: Outcome, diagnostics: Vec<Diagnostic>) -> Outcome {
        outcome.diagnostics.extend(diagnostics);
        self.attach_sources(&mut outcome);
        outcome
    }

    /// Adds every source a diagnostic of the outcome points into.
    fn attach_sources(&self, outcome: &mut Outcome) {
        for label in outcome.diagnostics.iter_mut().flat_map(|diagnostic| diagnostic.labels.iter_mut()) {
            if let Some(file) = self.sources.get(label.span.source.0 as usize) {
                label.span = PendingPosition::resolve(label.span, &file.text);
            }
        }
        let mut ids: Vec<SourceId> = outcome
            .diagnostics
            .iter()
            .flat_map(|diagnostic| diagnostic.labels.iter().map(|label| label.span.source))
            .collect();
        ids.sort();
        ids.dedup();
        for id in ids {
            if !outcome.sources.iter().any(|(existing, _)| *existing == id) {
                if let Some(file) = self.sources.get(id.0 as usize) {
                    outcome.sources.push((id, file.clone()));
                }
            }
        }
    }

    fn resolve_extern(name: &str) -> Option<String> {
        run::runtime_function(name).or_else(|| run::process_symbol(name).map(|_| name.to_string()))
    }

    fn eval_source(&mut self, name: String, text: String, mode: EvalMode) -> Outcome {
        let mut outcome = Outcome::default();
        let source = self.source_id(name, text);
        let text = self.sources[source.0 as usize].text.clone();
        let forms = match outcome.timing.time(Phase::Parse, || reader::read(source, &text)) {
            Ok(forms) => forms,
            Err(diagnostics) => return self.fail(outcome, diagnostics),
        };
        // Only a cell that runs Rhai can read the view: most cells skip the rebuild.
        if forms.iter().any(uses_staging) {
            self.refresh_view_if_stale();
        }
        let saved_stage = self.stage.snapshot();
        let expand_start = Instant::now();
        let expanded = self.stage.expand(forms, &mut self.sources, false);
        outcome.timing.add(Phase::Expand, expand_start.elapsed());
        let expanded = match expanded {
            Ok(expanded) => expanded,
            Err(diagnostics) => return self.fail(outcome, diagnostics),
        };
        if !expanded.printed.is_empty() {
            outcome.items.push(Item::Output { stream: Stream::Stdout, text: expanded.printed.clone() });
        }
        if mode == EvalMode::Cell {
            self.last_expansion = Some(expanded.forms.clone());
        }
        // `(bench …)` and `(autotune …)` run after the cell's other code.
        let (session_forms, code_forms): (Vec<reader::Sexp>, Vec<reader::Sexp>) =
            expanded.forms.iter().cloned().partition(|form| matches!(form.head(), Some("bench" | "autotune")));
        let entry_prefix = format!("cell#{}", self.cell_count);
        let checked = outcome
            .timing
            .time(Phase::Check, || check::check(&self.env, &code_forms, &Session::resolve_extern, &entry_prefix));
        let cell = match checked {
            Ok(cell) => cell,
            Err(diagnostics) => {
                self.stage.restore(saved_stage);
                let diagnostics = explain_expansions(diagnostics, &expanded.sites);
                return self.fail(outcome, diagnostics);
            }
        };
        outcome.diagnostics.extend(explain_expansions(cell.warnings.clone(), &expanded.sites));
        let linked = match self.compile_and_link(&cell, &entry_prefix, &mut outcome.timing) {
            Ok(linked) => linked,
            Err(diagnostics) => {
                self.stage.restore(saved_stage);
                return self.fail(outcome, diagnostics);
            }
        };
        let entries = linked.entries.clone();
        let defined = self.commit(&cell, linked);
        self.view_stale = true;
        if mode == EvalMode::Cell {
            outcome.items.extend(defined);
        }
        let top: Vec<&FunctionDef> = cell.top.iter().map(|item| &item.function).collect();
        self.prepare_launches(&top, &mut outcome.timing);
        let run_start = Instant::now();
        for (item, address) in cell.top.iter().zip(&entries) {
            let size = item.value.as_ref().map_or(0, |ty| value::size_align(ty, &self.env.structs).0);
            let report = self.runner.call(*address, size, self.config.capture_output);
            outcome.timing.device.extend(self.gpu.runtime.take_rows());
            self.session_memory.extend(report.allocations);
            for (stream, bytes) in [(Stream::Stdout, &report.output), (Stream::Stderr, &report.errors)] {
                if !bytes.is_empty() {
                    outcome.items.push(Item::Output { stream, text: String::from_utf8_lossy(bytes).into_owned() });
                }
            }
            if let Some(fault) = report.fault {
                outcome.diagnostics.push(self.fault_diagnostic(&fault, item.function.span));
                break;
            }
            if let Some(ty) = &item.value {
                if mode != EvalMode::Script {
                    let text =
                        value::format_value_with(&report.result, 0, ty, &self.env.structs, &|handle, element| {
                            self.describe_buffer(handle, element)
                        });
                    outcome.items.push(Item::Value { text, ty: ty.to_string() });
                }
            }
        }
        if !session_forms.is_empty() && !outcome.failed() {
            self.run_session_forms(&session_forms, &mut outcome);
        }
        outcome.timing.add(Phase::Run, run_start.elapsed());
        self.attach_sources(&mut outcome);
        outcome
    }

    /// Checks, compiles and commits forms without showing anything; returns the value types of
    /// the top-level items and their entries. `with_clock` lets the code call the bench clock.
    pub(crate) fn compile_quietly(
        &mut self,
        forms: &[reader::Sexp],
        with_clock: bool,
    ) -> Result<(Vec<Option<Ty>>, Vec<usize>), Vec<Diagnostic>> {
        self.cell_count += 1;
        let prefix = format!("cell#{}", self.cell_count);
        let checked = if with_clock {
            let mut env = self.env.clone();
            env.functions.insert(crate::bench::CLOCK.to_string(), crate::bench::clock_entry());
            check::check(&env, forms, &Session::resolve_extern, &prefix)
        } else {
            check::check(&self.env, forms, &Session::resolve_extern, &prefix)
        };
        let cell = checked?;
        let mut timing = PhaseTimes::default();
        let linked = self.compile_and_link(&cell, &prefix, &mut timing)?;
        let entries = linked.entries.clone();
        self.commit(&cell, linked);
        self.view_stale = true;
        Ok((cell.top.iter().map(|item| item.value.clone()).collect(), entries))
    }

    /// Runs an entry; a fault becomes the error.
    pub(crate) fn call_quietly(&mut self, entry: usize, span: Span) -> Result<(), Vec<Diagnostic>> {
        self.call_for_value(entry, 0, span).map(|_| ())
    }

    /// Runs an entry and returns the bytes of its value.
    pub(crate) fn call_for_value(&mut self, entry: usize, size: usize, span: Span) -> Result<Vec<u8>, Vec<Diagnostic>> {
        self.prepare_launches(&[], &mut PhaseTimes::default());
        let report = self.runner.call(entry, size, self.config.capture_output);
        self.gpu.runtime.take_rows();
        self.session_memory.extend(report.allocations);
        match report.fault {
            Some(fault) => Err(vec![self.fault_diagnostic(&fault, span)]),
            None => Ok(report.result),
        }
    }

    /// Expands one form (a generator call) in the session's Rhai scope.
    pub(crate) fn expand_quietly(&mut self, form: &reader::Sexp) -> Result<Vec<reader::Sexp>, Vec<Diagnostic>> {
        self.refresh_view_if_stale();
        self.stage.expand(vec![form.clone()], &mut self.sources, false).map(|expanded| expanded.forms)
    }

    fn fault_diagnostic(&self, fault: &Fault, item_span: Span) -> Diagnostic {
        let note = "the session is intact; all definitions and globals are kept";
        match fault {
            Fault::Check { code, site } => {
                let site = self.fault_sites.get(*site as usize);
                let (kind, message, span) = match (code, site) {
                    (&codegen::FAULT_DIVIDE_BY_ZERO, Some(site)) => (
                        Kind::RuntimeFault,
                        format!("integer division by zero in function `{}`", display_function(&site.function)),
                        site.span,
                    ),
                    (&codegen::FAULT_DIVIDE_OVERFLOW, Some(site)) => (
                        Kind::RuntimeFault,
                        format!("integer overflow in division in function `{}`", display_function(&site.function)),
                        site.span,
                    ),
                    (&codegen::FAULT_UNRESOLVED, Some(site)) => (
                        Kind::UnknownName,
                        format!(
                            "`{}` was called, but nothing defines it: no session function, library or process symbol",
                            site.function
                        ),
                        site.span,
                    ),
                    (&codegen::FAULT_INVALIDATED, Some(site)) => (
                        Kind::Type,
                        format!(
                            "`{}` was invalidated by the redefinition of {}; redefine `{}`",
                            site.function, site.detail, site.function
                        ),
                        site.span,
                    ),
                    (&codegen::FAULT_GPU, Some(site)) => (
                        Kind::Gpu,
                        self.gpu.runtime.take_error().unwrap_or_else(|| "the GPU runtime failed".into()),
                        site.span,
                    ),
                    (&codegen::FAULT_DEVICE_ONLY, Some(site)) => (
                        Kind::Gpu,
                        format!("`{}` is device code now: host code compiled earlier cannot call it", site.function),
                        site.span,
                    ),
                    _ => (Kind::RuntimeFault, "a runtime check failed".to_string(), item_span),
                };
                let mut diagnostic = Diagnostic::error(kind, message).with_label(span, "");
                if kind != Kind::RuntimeFault && span != item_span {
                    diagnostic = diagnostic.with_secondary(item_span, "while running this");
                }
                if kind == Kind::Gpu && diagnostic.message.starts_with("no CUDA device") {
                    diagnostic =
                        diagnostic.with_note("kernels still compile without a device, and `:ptx NAME` shows their PTX");
                }
                diagnostic.with_note(note)
            }
            Fault::Signal { signal, address } => {
                let what = match *signal {
                    libc::SIGSEGV if run::is_stack_overflow(*address) => {
                        "stack overflow in compiled code (its stack is 64 MiB; is the recursion unbounded?)".to_string()
                    }
                    libc::SIGSEGV => format!("segmentation fault at address {address:#x}"),
                    libc::SIGBUS => format!("bus error at address {address:#x}"),
                    libc::SIGFPE => "arithmetic exception".to_string(),
                    libc::SIGILL => "illegal instruction".to_string(),
                    _ => "the executor thread stopped".to_string(),
                };
                Diagnostic::error(Kind::RuntimeFault, what).with_label(item_span, "").with_note(note)
            }
        }
    }

    fn machine(&mut self, level: u8) -> Result<&TargetMachine, Diagnostic> {
        let index = level.min(3) as usize;
        if self.machines[index].is_none() {
            let target =
                Target::from_triple(&self.triple).map_err(|error| internal(format!("no LLVM target: {error}")))?;
            let cpu = TargetMachine::get_host_cpu_name();
            let features = TargetMachine::get_host_cpu_features();
            let machine = target
                .create_target_machine(
                    &self.triple,
                    &cpu.to_string_lossy(),
                    &features.to_string_lossy(),
                    MACHINE_LEVELS[index],
                    RelocMode::PIC,
                    CodeModel::Default,
                )
                .ok_or_else(|| internal("LLVM could not create a target machine for this CPU".into()))?;
            self.machines[index] = Some(machine);
        }
        self.machines[index].as_ref().ok_or_else(|| internal("no target machine".into()))
    }

    fn compile_and_link(
        &mut self,
        cell: &TypedCell,
        module_name: &str,
        timing: &mut PhaseTimes,
    ) -> Result<Linked, Vec<Diagnostic>> {
        // Names first: new storage for new or retyped globals, fresh body symbols.
        let mut global_symbols: HashMap<String, String> =
            self.globals.iter().map(|(name, storage)| (name.clone(), storage.symbol.clone())).collect();
        let mut new_globals = Vec::new();
        let overlay_structs = if cell.globals.is_empty() { HashMap::new() } else { self.structs_with(cell) };
        for global in &cell.globals {
            if global.init.is_none() {
                continue;
            }
            let (size, align) = value::size_align(&global.ty, &overlay_structs);
            // A global defined again with its type keeps its storage (commit re-initialises it):
            // code compiled earlier, and pointers the program holds, still refer to it.
            let same_type = self.env.globals.get(&global.name).is_some_and(|existing| existing.ty == global.ty);
            if same_type && self.globals.get(&global.name).is_some_and(|storage| storage.layout.size() >= size) {
                continue;
            }
            self.symbol_counter += 1;
            let symbol = format!("{}#g{}", global.name, self.symbol_counter);
            new_globals.push((global.name.clone(), GlobalStorage::new(symbol.clone(), size, align)));
            global_symbols.insert(global.name.clone(), symbol);
        }
        let mut struct_names = self.struct_names.clone();
        let mut new_struct_names = HashMap::new();
        for structure in &cell.structs {
            self.symbol_counter += 1;
            let llvm_name = format!("{}#s{}", structure.name, self.symbol_counter);
            struct_names.insert(structure.name.clone(), llvm_name.clone());
            new_struct_names.insert(structure.name.clone(), llvm_name);
        }
        let mut body_symbols = HashMap::new();
        for function in cell.functions.iter().chain(&cell.recompiled) {
            let symbol = self.fresh_body_symbol(&function.name);
            body_symbols.insert(function.name.clone(), symbol);
        }
        let naming = Naming {
            global_symbols: &global_symbols,
            struct_names: &struct_names,
            body_symbols: &body_symbols,
            first_site: self.fault_sites.len() as u32,
        };
        let triple = TargetTriple::create(&self.triple.as_str().to_string_lossy());
        let level = self.opt_level;
        let target_data = self.machine(level).map_err(|error| vec![error])?.get_target_data();
        let machine =
            self.machines[level as usize].as_ref().ok_or_else(|| vec![internal("no target machine".into())])?;
        // Errors left over from inspection commands belong to no cell.
        self.llvm_diagnostics.take_errors();
        let codegen_start = Instant::now();
        let lowered = codegen::lower(&self.context, &target_data, &triple, cell, module_name, &naming);
        timing.add(Phase::Codegen, codegen_start.elapsed());
        let CellModule { module, entries, fault_sites, traps } =
            lowered.map_err(|error| vec![lowering_error(error, cell)])?;
        if level > 0 {
            let optimise_start = Instant::now();
            module
                .run_passes(pass_pipeline(level), machine, PassBuilderOptions::create())
                .map_err(|error| vec![internal(format!("LLVM passes failed: {error}"))])?;
            timing.add(Phase::Optimise, optimise_start.elapsed());
        }
        let link_start = Instant::now();
        let object = machine
            .write_to_memory_buffer(&module, FileType::Object)
            .map_err(|error| vec![internal(format!("LLVM could not emit code: {error}"))])?;
        // Inline assembly the assembler rejects is reported through the context, not as an error.
        let llvm_errors = self.llvm_diagnostics.take_errors();
        if !llvm_errors.is_empty() {
            return Err(llvm_errors.into_iter().map(|message| assembly_error(message, cell)).collect());
        }
        drop(module);
        // Slots for every function the cell defines or declares, created once per name.
        let mut absolute = Vec::new();
        for name in cell
            .functions
            .iter()
            .map(|function| &function.name)
            .chain(cell.recompiled.iter().map(|function| &function.name))
            .chain(cell.externs.iter().map(|decl| &decl.name))
        {
            if !self.slots.contains_key(name) {
                let slot = Box::new(AtomicUsize::new(0));
                absolute.push((codegen::slot_symbol(name), &*slot as *const AtomicUsize as usize));
                self.slots.insert(name.clone(), slot);
            }
        }
        for (_, storage) in &new_globals {
            absolute.push((storage.symbol.clone(), storage.memory as usize));
        }
        self.jit.define_absolute(&absolute).map_err(|error| vec![internal(error.to_string())])?;
        let function_names: Vec<String> =
            cell.functions.iter().chain(&cell.recompiled).map(|function| function.name.clone()).collect();
        let lookups: Vec<String> = function_names
            .iter()
            .map(|name| body_symbols[name].clone())
            .chain(traps.iter().map(|name| codegen::trap_symbol(name, module_name)))
            .chain(entries.iter().cloned())
            .collect();
        let (code, addresses) = self
            .jit
            .link(object.as_slice(), module_name, &lookups)
            .map_err(|error| vec![internal(error.to_string())])?;
        timing.add(Phase::Link, link_start.elapsed());
        let (body_addresses, rest) = addresses.split_at(function_names.len());
        let (trap_addresses, entry_addresses) = rest.split_at(traps.len());
        Ok(Linked {
            bodies: function_names.into_iter().zip(body_addresses.iter().copied()).collect(),
            body_symbols: body_symbols.clone(),
            traps: traps.into_iter().zip(trap_addresses.iter().copied()).collect(),
            entries: entry_addresses.to_vec(),
            code,
            fault_sites,
            new_globals,
            struct_names: new_struct_names,
        })
    }

    fn structs_with(&self, cell: &TypedCell) -> HashMap<String, StructEntry> {
        let mut structs = self.env.structs.clone();
        for structure in &cell.structs {
            structs.insert(structure.name.clone(), StructEntry { fields: structure.fields.clone() });
        }
        structs
    }

    fn fresh_body_symbol(&mut self, name: &str) -> String {
        // A body is named like its function unless that name is taken, or belongs to a C
        // symbol that code generated by LLVM itself may call (memset, memcpy…).
        let mut candidate = name.to_string();
        let mut version = 1;
        while self.used_symbols.contains(&candidate) || run::process_symbol(&candidate).is_some() {
            version += 1;
            candidate = format!("{name}#{version}");
        }
        self.used_symbols.insert(candidate.clone());
        candidate
    }

    /// Makes a linked cell part of the session. Nothing here can fail.
    fn commit(&mut self, cell: &TypedCell, linked: Linked) -> Vec<Item> {
        let Linked { bodies, traps, code, fault_sites, new_globals, struct_names, body_symbols, .. } = linked;
        let mut items = Vec::new();
        self.cells.push(code);
        self.fault_sites.extend(fault_sites);
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
            self.note_definition(DefinitionKey::Struct(structure.name.clone()));
        }
        // Struct LLVM names: the next module looks them up by these.
        self.struct_names.extend(struct_names);
        for (name, storage) in new_globals {
            // Replaced storage stays allocated: pointers into it may survive in the program.
            if let Some(replaced) = self.globals.insert(name, storage) {
                self.retired_globals.push(replaced);
            }
        }
        for global in &cell.globals {
            let redefined = self.env.globals.contains_key(&global.name);
            let entry = GlobalEntry::from_def(global, self.env.globals.get(&global.name));
            self.env.globals.insert(global.name.clone(), entry);
            if let Some(init) = &global.init {
                self.initialise_global(&global.name, &global.ty, init);
            }
            let value = self.global_value_text(&global.name, &global.ty);
            items.push(Item::Defined {
                name: global.name.clone(),
                description: format!(
                    "{} = {value}{}",
                    global.ty,
                    if redefined && global.init.is_some() { "  (redefined)" } else { "" }
                ),
            });
            self.note_definition(DefinitionKey::Global(global.name.clone()));
        }
        for decl in &cell.externs {
            let existing = self.env.functions.get(&decl.name);
            if matches!(existing, Some(FunctionEntry { kind: FunctionKind::Defined(_), .. })) {
                continue;
            }
            let kind = match Session::resolve_extern(&decl.name) {
                _ if decl.name.starts_with("llvm.") || crate::intrinsics::is_libdevice(&decl.name) => {
                    FunctionKind::External(decl.name.clone())
                }
                Some(link) => FunctionKind::External(link),
                None => FunctionKind::Unresolved,
            };
            if let (FunctionKind::Unresolved, Some((_, trap)), Some(slot)) =
                (&kind, traps.iter().find(|(name, _)| *name == decl.name), self.slots.get(&decl.name))
            {
                slot.store(*trap, Ordering::SeqCst);
            }
            let entry =
                FunctionEntry { signature: decl.signature.clone(), param_names: Vec::new(), kind, invalidated: None };
            items.push(Item::Defined {
                name: decl.name.clone(),
                description: format!("{}{}", entry.signature, function_note(&entry, false)),
            });
            self.env.functions.insert(decl.name.clone(), entry);
            self.note_definition(DefinitionKey::Function(decl.name.clone()));
        }
        self.body_symbols.extend(body_symbols);
        let addresses: HashMap<String, usize> = bodies.into_iter().collect();
        for function in cell.functions.iter().chain(&cell.recompiled) {
            if let (Some(slot), Some(address)) = (self.slots.get(&function.name), addresses.get(&function.name)) {
                slot.store(*address, Ordering::SeqCst);
            }
            let recompiled = cell.recompiled.iter().any(|other| other.name == function.name);
            let previous = self.env.functions.get(&function.name);
            let redefined = matches!(previous, Some(FunctionEntry { kind: FunctionKind::Defined(_), .. }));
            let param_names =
                function.locals.iter().take(function.signature.params.len()).map(|local| local.name.clone()).collect();
            let entry = FunctionEntry {
                signature: function.signature.clone(),
                param_names,
                kind: FunctionKind::Defined(Rc::new(function.clone())),
                invalidated: None,
            };
            if !recompiled {
                items.push(Item::Defined {
                    name: function.name.clone(),
                    description: format!("{}{}", entry.signature, function_note(&entry, redefined)),
                });
            }
            self.env.functions.insert(function.name.clone(), entry);
            self.note_definition(DefinitionKey::Function(function.name.clone()));
        }
        for invalidation in &cell.invalidated {
            if let Some(entry) = self.env.functions.get_mut(&invalidation.name) {
                entry.invalidated = Some(invalidation.message.clone());
            }
            // Old code calling an invalidated function must not run it with the wrong types.
            if let (Some(slot), Some((_, trap))) =
                (self.slots.get(&invalidation.name), traps.iter().find(|(name, _)| *name == invalidation.name))
            {
                slot.store(*trap, Ordering::SeqCst);
            }
        }
        items
    }

    /// Refreshes what Rhai macros can see of the session (`signature`, `global_value`…) if a
    /// commit changed it. Called before Rhai runs, not after every cell: rebuilding costs about
    /// a microsecond per definition, which a session of a thousand definitions would pay on
    /// every cell.
    fn refresh_view_if_stale(&mut self) {
        if std::mem::take(&mut self.view_stale) {
            self.refresh_view();
        }
    }

    fn refresh_view(&mut self) {
        let mut view = SessionView::default();
        let symbol = |name: &str| reader::Sexp {
            kind: reader::SexpKind::Symbol(name.to_string()),
            span: Span::new(SourceId(u32::MAX), 0, 0),
        };
        let list = |items: Vec<reader::Sexp>| reader::Sexp {
            kind: reader::SexpKind::List(items),
            span: Span::new(SourceId(u32::MAX), 0, 0),
        };
        let type_form =
            |ty: &Ty| reader::read(SourceId(u32::MAX), &ty.to_string()).ok().and_then(|mut forms| forms.pop());
        for (name, entry) in &self.env.functions {
            let mut items =
                vec![list(vec![symbol(name), type_form(&entry.signature.ret).unwrap_or_else(|| symbol("void"))])];
            for (index, ty) in entry.signature.params.iter().enumerate() {
                let param = entry.param_names.get(index).cloned().unwrap_or_else(|| format!("arg-{index}"));
                items.push(list(vec![symbol(&param), type_form(ty).unwrap_or_else(|| symbol("void"))]));
            }
            if entry.signature.variadic {
                items.push(symbol("..."));
            }
            view.signatures.insert(name.clone(), list(items));
        }
        for (name, entry) in &self.env.structs {
            let fields = entry
                .fields
                .iter()
                .flatten()
                .map(|(field, ty)| (field.clone(), type_form(ty).unwrap_or_else(|| symbol("void"))))
                .collect();
            view.struct_fields.insert(name.clone(), fields);
        }
        for (name, entry) in &self.env.globals {
            if entry.ty.is_scalar() && !entry.ty.is_ptr() {
                let text = self.global_value_text(name, &entry.ty);
                if let Ok(mut forms) =
                    reader::read(SourceId(u32::MAX), &text.replace("inf", "+inf.0").replace("nan", "+nan.0"))
                {
                    if let Some(form) = forms.pop() {
                        view.global_values.insert(name.clone(), form);
                    }
                }
            }
        }
        *self.stage.view.borrow_mut() = view;
    }

    fn note_definition(&mut self, key: DefinitionKey) {
        if !self.definitions.contains_key(&key) {
            self.definition_counter += 1;
            self.definitions.insert(key, self.definition_counter);
        }
    }

    fn initialise_global(&mut self, name: &str, ty: &Ty, init: &Constant) {
        let mut bytes = vec![0u8; value::size_align(ty, &self.env.structs).0];
        let globals = &self.globals;
        value::encode_constant(&mut bytes, 0, ty, init, &self.env.structs, &|target| {
            globals.get(target).map_or(0, |storage| storage.memory as usize)
        });
        if let Some(storage) = self.globals.get_mut(name) {
            let target = storage.bytes_mut();
            let length = bytes.len().min(target.len());
            target[..length].copy_from_slice(&bytes[..length]);
        }
    }

    fn global_value_text(&self, name: &str, ty: &Ty) -> String {
        match self.globals.get(name) {
            Some(storage) => value::format_value(storage.bytes(), 0, ty, &self.env.structs),
            None => "?".into(),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for pointer in self.session_memory.drain(..) {
            // SAFETY: every pointer here came from calloc in `run::session_alloc`, and the
            // code that could still use it is being dropped with the session.
            unsafe { libc::free(pointer as *mut libc::c_void) };
        }
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
}

struct Linked {
    bodies: Vec<(String, usize)>,
    body_symbols: HashMap<String, String>,
    traps: Vec<(String, usize)>,
    entries: Vec<usize>,
    code: CellCode,
    fault_sites: Vec<FaultSite>,
    new_globals: Vec<(String, GlobalStorage)>,
    struct_names: HashMap<String, String>,
}

/// The LLVM pass pipeline of an optimisation level above 0.
fn pass_pipeline(level: u8) -> &'static str {
    match level {
        1 => "function(mem2reg,instcombine<no-verify-fixpoint>,simplifycfg)",
        2 => "default<O2>",
        _ => "default<O3>",
    }
}

/// Whether a form runs Rhai when expanded (an unquote, or a `rhai`/`rhai-file` form).
fn uses_staging(form: &reader::Sexp) -> bool {
    match &form.kind {
        reader::SexpKind::Unquote(_) | reader::SexpKind::UnquoteSplicing(_) => true,
        reader::SexpKind::Quasiquote(inner) => uses_staging(inner),
        reader::SexpKind::List(items) => {
            matches!(form.head(), Some("rhai" | "rhai-file" | "autotune")) || items.iter().any(uses_staging)
        }
        _ => false,
    }
}

/// Says which unquote generated the code a diagnostic points at, and what it expanded to.
fn explain_expansions(mut diagnostics: Vec<Diagnostic>, sites: &[ExpansionSite]) -> Vec<Diagnostic> {
    if sites.is_empty() {
        return diagnostics;
    }
    for diagnostic in &mut diagnostics {
        let mut notes = Vec::new();
        for label in &mut diagnostic.labels {
            let site = sites.iter().find(|site| {
                site.span.source == label.span.source
                    && site.span.start <= label.span.start
                    && label.span.end <= site.span.end
            });
            if let Some(site) = site {
                if label.message.is_empty() {
                    label.message = format!("in expansion of {}", site.written);
                }
                let note = format!("expanded to {}", site.expanded);
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
        }
        diagnostic.notes.splice(0..0, notes);
    }
    diagnostics
}

fn internal(message: String) -> Diagnostic {
    Diagnostic::error(Kind::Internal, message).with_note("this is a bug in Quasi; the session is unchanged")
}

fn assembly_error(message: String, cell: &TypedCell) -> Diagnostic {
    let mut diagnostic = Diagnostic::error(Kind::Syntax, format!("LLVM rejected inline assembly: {}", message.trim()))
        .with_note("the session is unchanged");
    if let Some(span) = cell.asm_spans.first() {
        diagnostic = diagnostic.with_label(*span, "");
    }
    diagnostic
}

fn lowering_error(error: codegen::CodegenError, cell: &TypedCell) -> Diagnostic {
    let mut diagnostic = internal(format!("code generation failed: {error}"));
    if let Some(function) = cell.functions.first() {
        diagnostic = diagnostic.with_label(function.span, "");
    }
    diagnostic
}

fn display_function(name: &str) -> String {
    if name.starts_with("cell#") {
        "top-level code".into()
    } else {
        name.to_string()
    }
}

fn struct_line(name: &str, entry: &StructEntry) -> String {
    match &entry.fields {
        None => format!("struct {name} (opaque)"),
        Some(fields) => {
            let fields: Vec<String> = fields.iter().map(|(field, ty)| format!("{field} : {ty}")).collect();
            format!("struct {name} {{ {} }}", fields.join(", "))
        }
    }
}

fn function_note(entry: &FunctionEntry, redefined: bool) -> String {
    let mut notes = Vec::new();
    match &entry.kind {
        FunctionKind::Defined(def) if def.inline => notes.push("inline"),
        FunctionKind::Defined(def) if def.kernel => notes.push("kernel"),
        FunctionKind::Defined(def) if def.placement.device_only => notes.push("device"),
        FunctionKind::External(_) => notes.push("extern"),
        FunctionKind::Unresolved => notes.push("extern, unresolved"),
        FunctionKind::Defined(_) => {}
    }
    if redefined {
        notes.push("redefined");
    }
    if entry.invalidated.is_some() {
        notes.push("invalidated");
    }
    if notes.is_empty() {
        String::new()
    } else {
        format!("  ({})", notes.join(", "))
    }
}
