//! The pass list a cell goes through before it changes anything:
//!
//! read → expand → load-library → check → device build → lower → optimise/emit → link
//!
//! `Session::compile` runs it, each step a named call ending in `?`, and gives back a
//! `Compiled` that still holds the session in a `Transaction`; `Compiled::commit` makes the cell
//! the session's (`commit.rs`). A transaction dropped before that puts the staging state (Rhai's
//! scope, functions and gensym counter) back and closes the libraries the cell loaded, so a
//! cell that fails leaves the session as it was because this guard says so, not because each
//! early return remembers to (as evcxr reverts a cloned state on failure).
//!
//! Invariant: before `commit`, only the staging state, the cell's libraries and the history
//! (sources, the last expansion) change; the environment, the program's slots and code, and the
//! GPU's builds change only in `commit`. Device code is built here, for the environment as the
//! cell will leave it, and installed there: nothing compiles in the run step.

use std::collections::HashSet;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::call_cell;
use super::commit::{Code, EnvDelta};
use super::report::{backend_error, explain_expansions, lowering_error};
use super::view;
use super::{device_source, Session};
use crate::bench;
use crate::check::Env;
use crate::codegen::{self, CellModule, TopLevel};
use crate::diagnostics::{Diagnostic, Kind};
use crate::expand::{ExpansionSite, StageState};
use crate::gpu::DeviceBuilds;
use crate::jit::library::{LoadError, LIBRARY_PATH_VARIABLE};
use crate::link::Emitted;
use crate::reader::{self, Sexp, SexpKind};
use crate::source::Span;
use crate::timing::{Phase, PhaseTimes};
use crate::tree::{CellId, CellKind, TypedCell};
use crate::{Item, Outcome, Stream};

/// Why a cell is evaluated, which decides what it shows and how it is compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EvalMode {
    /// An interactive cell: definitions and values are shown.
    Cell,
    /// `quasi run`: only the program's own output.
    Script,
    /// The call of `main` after a script: its value is the exit status.
    Main,
    /// `compile_file`: a script compiled into the object cache, not run.
    Compile,
    /// A cell a benchmark or an autotune makes (a timing loop, a variant): forms, not text,
    /// compiled one entry per top-level item and shown nowhere.
    Quiet,
}

/// What a cell is made of.
pub(super) enum CellInput {
    /// Text the user wrote, named for diagnostics: read and expanded.
    Text { name: String, text: String },
    /// Forms a benchmark made: neither read nor expanded.
    Forms(Vec<Sexp>),
}

/// How a cell is compiled.
#[derive(Clone, Copy, Debug)]
pub(super) struct CellOptions {
    pub(super) mode: EvalMode,
    /// The level, when not the session's (`:load` compiles at the batch level).
    pub(super) level: Option<u8>,
    /// The bench clock may be called (a timing loop).
    pub(super) with_clock: bool,
}

impl CellOptions {
    pub(super) fn of(mode: EvalMode) -> CellOptions {
        CellOptions { mode, level: None, with_clock: false }
    }
}

/// The session while a cell is in flight: dropped before `Compiled::commit`, it puts back the
/// staging state as it was before the cell and closes the libraries the cell loaded.
pub(super) struct Transaction<'s> {
    session: &'s mut Session,
    /// The staging state before the cell; `None` once the cell is committed.
    saved: Option<StageState>,
    /// The cell's text, for an interrupt while it compiles (`stop_if_interrupted`).
    span: Option<Span>,
}

impl<'s> Transaction<'s> {
    pub(super) fn begin(session: &'s mut Session) -> Transaction<'s> {
        let saved = Some(session.staging.stage.snapshot());
        Transaction { session, saved, span: None }
    }
}

impl Deref for Transaction<'_> {
    type Target = Session;
    fn deref(&self) -> &Session {
        self.session
    }
}

impl DerefMut for Transaction<'_> {
    fn deref_mut(&mut self) -> &mut Session {
        self.session
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if let Some(saved) = self.saved.take() {
            self.session.libraries.drop_pending();
            self.session.staging.stage.restore(saved);
        }
    }
}

/// What the pass list made of a cell, for `commit`.
pub(super) struct Parts {
    pub(super) cell: TypedCell,
    pub(super) delta: EnvDelta,
    pub(super) code: Code,
    pub(super) device: DeviceBuilds,
    /// The level the cell was compiled at.
    pub(super) level: u8,
    /// The level the session keeps from now on, when the cell changes it (a provably short
    /// script: `quasi run` runs this program only).
    pub(super) session_level: Option<u8>,
    /// What each `include` of the cell declared, for its one summary line.
    pub(super) includes: Vec<(String, HashSet<String>)>,
    /// What the cell's includes left out, for `:skipped`.
    pub(super) skipped: Vec<(String, Vec<String>)>,
    /// `(bench …)` and `(autotune …)`: run after the cell's code, as further cells.
    pub(super) session_forms: Vec<Sexp>,
}

/// A cell that passed every step and is not the session's yet.
pub(super) struct Compiled<'s> {
    pub(super) transaction: Transaction<'s>,
    /// What the cell showed so far (Rhai's output, warnings) and the time of each step.
    pub(super) outcome: Outcome,
    pub(super) parts: Parts,
    pub(super) mode: EvalMode,
}

/// A cell made the session's: what its run needs.
pub(super) struct Committed {
    pub(super) outcome: Outcome,
    pub(super) cell: TypedCell,
    pub(super) entries: Vec<usize>,
    pub(super) session_forms: Vec<Sexp>,
}

/// Why a cell stopped before its commit: what it showed until then, and its errors (with the
/// sources they point into).
pub(super) struct Failed(pub(super) Box<Outcome>);

impl Compiled<'_> {
    /// The cell becomes the session's (`Session::commit`).
    pub(super) fn commit(self) -> Committed {
        let Compiled { mut transaction, mut outcome, parts, mode } = self;
        // From here on nothing is put back.
        transaction.saved = None;
        let Parts { cell, delta, code, device, level, session_level, includes, skipped, session_forms } = parts;
        if !includes.is_empty() || !skipped.is_empty() {
            transaction.history.skipped = skipped;
        }
        let entries = match &code {
            Code::Trampoline(entry) => vec![*entry],
            Code::Linked { linked, .. } => linked.entries().to_vec(),
        };
        let defined = transaction.commit(&cell, delta, code, device, level, session_level);
        if mode == EvalMode::Cell {
            outcome.items.extend(fold_included(defined.iter().map(super::report::describe).collect(), &includes));
        }
        Committed { outcome, cell, entries, session_forms }
    }

    /// The cell is dropped uncommitted (it was only compiled, into the object cache): its
    /// transaction puts the staging state back.
    pub(super) fn abandon(mut self) -> Outcome {
        let mut outcome = std::mem::take(&mut self.outcome);
        self.transaction.history.attach_sources(&mut outcome);
        outcome
    }
}

impl Session {
    /// The pass list, over a cell: its result holds the session until it is committed.
    pub(super) fn compile(&mut self, input: CellInput, options: CellOptions) -> Result<Compiled<'_>, Failed> {
        let mut transaction = Transaction::begin(self);
        let mut outcome = Outcome::default();
        match transaction.passes(input, options, &mut outcome) {
            Ok(parts) => Ok(Compiled { transaction, outcome, parts, mode: options.mode }),
            Err(diagnostics) => {
                outcome.diagnostics.extend(diagnostics);
                transaction.history.attach_sources(&mut outcome);
                // Dropping the transaction here puts the staging state back.
                Err(Failed(Box::new(outcome)))
            }
        }
    }
}

impl Transaction<'_> {
    /// The steps, in order.
    fn passes(
        &mut self,
        input: CellInput,
        options: CellOptions,
        outcome: &mut Outcome,
    ) -> Result<Parts, Vec<Diagnostic>> {
        let (forms, sites, includes, skipped) = match input {
            CellInput::Text { name, text } => {
                let forms = self.read(name, text, &mut outcome.timing)?;
                self.span = forms.first().zip(forms.last()).map(|(first, last)| Span {
                    source: first.span.source,
                    start: first.span.start,
                    end: if last.span.source == first.span.source { last.span.end } else { first.span.end },
                });
                self.expand(forms, options.mode, outcome)?
            }
            CellInput::Forms(forms) => (forms, Vec::new(), Vec::new(), Vec::new()),
        };
        self.stop_if_interrupted()?;
        let forms = self.load_libraries(forms, outcome)?;
        // `(bench …)` and `(autotune …)` run after the cell's other code.
        let (session_forms, code_forms): (Vec<Sexp>, Vec<Sexp>) =
            forms.into_iter().partition(|form| matches!(form.head(), Some("bench" | "autotune")));
        let cell_id = self.cell_id(options.mode);
        let cell = self.check_cell(&code_forms, cell_id, options, &sites, outcome)?;
        self.stop_if_interrupted()?;
        let (level, session_level) = self.level_for(&cell, options);
        let delta = EnvDelta::of(&cell, &self.env, &self.history);
        let device = self.build_device_code(&cell, &delta, &mut outcome.timing);
        let call_only = session_forms.is_empty() && includes.is_empty() && options.mode != EvalMode::Quiet;
        self.stop_if_interrupted()?;
        let code = self.lower_and_link(&cell, cell_id, level, call_only, options.mode, &mut outcome.timing)?;
        Ok(Parts { cell, delta, code, device, level, session_level, includes, skipped, session_forms })
    }

    /// Compiling a large cell (an include of thousands of declarations) takes seconds: an
    /// interrupt stops it between its steps, before anything of it is committed.
    fn stop_if_interrupted(&self) -> Result<(), Vec<Diagnostic>> {
        stop_if_interrupted(&self.interrupt, self.span)
    }

    /// Read: the text becomes a source of the session and is read into forms.
    fn read(&mut self, name: String, text: String, timing: &mut PhaseTimes) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
        let source = self.history.add_source(name, text);
        let text = self.history.text(source);
        timing.time(Phase::Parse, || reader::read(source, text))
    }

    /// Expand: unquotes run in Rhai; what Rhai printed and warned is shown. Only a cell that
    /// runs Rhai can read the session view, so most cells skip its rebuild.
    #[allow(clippy::type_complexity)]
    fn expand(
        &mut self,
        forms: Vec<Sexp>,
        mode: EvalMode,
        outcome: &mut Outcome,
    ) -> Result<
        (Vec<Sexp>, Vec<ExpansionSite>, Vec<(String, HashSet<String>)>, Vec<(String, Vec<String>)>),
        Vec<Diagnostic>,
    > {
        if forms.iter().any(view::uses_staging) {
            self.refresh_view_if_stale();
        }
        let session = &mut **self;
        let expanded = outcome
            .timing
            .time(Phase::Expand, || session.staging.stage.expand(forms, &mut session.history.sources, false))?;
        if !expanded.printed.is_empty() {
            outcome.items.push(Item::Output { stream: Stream::Stdout, text: expanded.printed.clone() });
        }
        outcome.diagnostics.extend(expanded.warnings.iter().cloned());
        if mode == EvalMode::Cell {
            self.history.last_expansion = Some(expanded.forms.clone());
        }
        Ok((expanded.forms, expanded.sites, expanded.includes, expanded.skipped))
    }

    /// Load-library: the cell's `(load-library "NAME")` forms are loaded, in order, for the
    /// cell (they become the session's when it commits); the other forms go on.
    fn load_libraries(&mut self, forms: Vec<Sexp>, outcome: &mut Outcome) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
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
            let interrupt = Arc::clone(&self.interrupt);
            let message = match self.libraries.load(&name, &interrupt) {
                Ok(0) => continue,
                Ok(restored) => {
                    outcome.diagnostics.push(
                        Diagnostic::warning(
                            Kind::Ffi,
                            format!(
                                "library `{name}` replaced the handlers of {restored} signals the session needs; they were put back"
                            ),
                        )
                        .with_label(argument.span, "")
                        .with_note("faults in compiled code are still reported as runtime faults"),
                    );
                    continue;
                }
                Err(LoadError::Loader(message)) => message,
                Err(LoadError::Interrupted) => {
                    return Err(vec![Diagnostic::error(
                        Kind::Interrupted,
                        format!("interrupted while loading library `{name}`"),
                    )
                    .with_label(argument.span, "")
                    .with_note(
                        "its initialisers ran in a helper process, which was stopped; the session did not load it",
                    )])
                }
                Err(LoadError::Refused { end, errors }) => {
                    let mut diagnostic = Diagnostic::error(
                        Kind::Ffi,
                        format!("cannot load library `{name}`: loading it ended the process with {end}"),
                    )
                    .with_label(argument.span, "")
                    .with_note(
                        "its initialisers ran first in a helper process, which they ended; the session did not load it",
                    );
                    if !errors.is_empty() {
                        diagnostic = diagnostic.with_note(format!("it wrote: {errors}"));
                    }
                    return Err(vec![diagnostic]);
                }
            };
            let searched = std::env::var(LIBRARY_PATH_VARIABLE).unwrap_or_default();
            let note = if name.contains('/') {
                "a name with `/` is a path, used as it is".to_string()
            } else if searched.is_empty() {
                format!(
                    "searched by the system loader; {LIBRARY_PATH_VARIABLE} (directories, colon-separated) is not set"
                )
            } else {
                format!("searched {LIBRARY_PATH_VARIABLE}={searched}, then by the system loader")
            };
            return Err(vec![Diagnostic::error(Kind::Ffi, format!("cannot load library `{name}`: {message}"))
                .with_label(argument.span, "")
                .with_note(note)]);
        }
        Ok(rest)
    }

    /// Check: the forms against the environment, into the typed cell; errors in generated code
    /// name the unquote that generated it.
    fn check_cell(
        &mut self,
        forms: &[Sexp],
        cell_id: CellId,
        options: CellOptions,
        sites: &[ExpansionSite],
        outcome: &mut Outcome,
    ) -> Result<TypedCell, Vec<Diagnostic>> {
        let env = if options.with_clock {
            let mut env = self.env.clone();
            env.functions.insert(crate::abi::RT_CLOCK.to_string(), bench::clock_entry());
            std::borrow::Cow::Owned(env)
        } else {
            std::borrow::Cow::Borrowed(&self.env)
        };
        let checked = outcome.timing.time(Phase::Check, || self.check(&env, forms, cell_id));
        let cell = checked.map_err(|diagnostics| explain_expansions(diagnostics, sites))?;
        outcome.diagnostics.extend(explain_expansions(cell.warnings.clone(), sites));
        Ok(cell)
    }

    /// Which cell this is: the session's cell, or the next quiet cell of it.
    fn cell_id(&mut self, mode: EvalMode) -> CellId {
        let number = self.history.cell_count;
        if mode == EvalMode::Quiet {
            self.history.quiet_count += 1;
            CellId { number, kind: CellKind::Quiet(self.history.quiet_count) }
        } else {
            CellId::cell(number)
        }
    }

    /// The level the cell compiles at; a script whose whole run its text bounds to a few
    /// thousand steps compiles at level 0, and the batch session keeps that level (§5.5).
    fn level_for(&self, cell: &TypedCell, options: CellOptions) -> (u8, Option<u8>) {
        let level = options.level.unwrap_or(self.opt_level);
        let script = matches!(options.mode, EvalMode::Script | EvalMode::Compile);
        let short = || crate::cost::run_steps(cell).is_some_and(|steps| steps <= crate::cost::SHORT_RUN_STEPS);
        if script && self.quick_short_runs && level > crate::cost::SHORT_RUN_LEVEL && short() {
            (crate::cost::SHORT_RUN_LEVEL, Some(crate::cost::SHORT_RUN_LEVEL))
        } else {
            (level, None)
        }
    }

    /// Device build: current code, for the device `:gpu` chose, of every function host code
    /// may launch once the cell is the session's — built for the environment the cell leaves,
    /// installed by `commit`. A function that cannot be built is installed with its reason.
    fn build_device_code(&mut self, cell: &TypedCell, delta: &EnvDelta, timing: &mut PhaseTimes) -> DeviceBuilds {
        let session = &mut **self;
        let targets = session.gpu.launch_targets(cell);
        if targets.is_empty() {
            return DeviceBuilds::default();
        }
        let after: std::borrow::Cow<'_, Env> = if delta.is_empty() {
            std::borrow::Cow::Borrowed(&session.env)
        } else {
            let mut env = session.env.clone();
            delta.apply(&mut env);
            std::borrow::Cow::Owned(env)
        };
        let source = device_source(&after, &session.backend, &session.program);
        session.gpu.build(&source, targets, timing)
    }

    /// Lower → optimise/emit → link: the cell's code, linked but not yet the program's. A cell
    /// that only calls a session function with constant or global arguments runs through its
    /// signature's trampoline instead: nothing to compile, link or commit.
    fn lower_and_link(
        &mut self,
        cell: &TypedCell,
        cell_id: CellId,
        level: u8,
        call_only: bool,
        mode: EvalMode,
        timing: &mut PhaseTimes,
    ) -> Result<Code, Vec<Diagnostic>> {
        let (interrupt, span) = (Arc::clone(&self.interrupt), self.span);
        let session = &mut **self;
        if let Some(call) = call_only.then(|| call_cell::call_cell(cell, &session.program)).flatten() {
            let entry = session.trampolines.entry(&call, &session.backend, &mut session.program, level, timing)?;
            return Ok(Code::Trampoline(entry));
        }
        let module_name = cell_id.symbol();
        let top_level = if mode == EvalMode::Quiet { TopLevel::PerItem } else { TopLevel::Batched };
        let tier = mode == EvalMode::Cell && session.tiering_active_at(level);
        let target = crate::backend::Target::Host(level);
        let internal = |error: crate::backend::BackendError| vec![Diagnostic::internal(error.to_string())];
        let target_data = session.backend.target_data(&target).map_err(internal)?;
        let names = session.program.name_cell(cell, &session.env);
        let backend = &session.backend;
        let lowered = timing.time(Phase::Codegen, || {
            codegen::lower(
                &backend.context,
                &target_data,
                &backend.triple(&target),
                cell,
                &module_name,
                &names.naming(),
                top_level,
            )
        });
        let CellModule { module, entries, fault_sites, traps } =
            lowered.map_err(|error| vec![lowering_error(error, cell)])?;
        stop_if_interrupted(&interrupt, span)?;
        // The background compiler starts from the module as lowered (tiered compilation).
        let promotable = cell.functions.iter().chain(&cell.recompiled).any(|function| !function.placement.device_only);
        let bitcode = (tier && promotable).then(|| Arc::from(module.write_bitcode_to_memory().as_slice()));
        let compiled = backend.compile_cached(module, level).map_err(|error| backend_error(error, cell))?;
        stop_if_interrupted(&interrupt, span)?;
        if let Some(optimise) = compiled.optimise {
            timing.add(Phase::Optimise, optimise);
        }
        let link_start = Instant::now();
        let emitted = Emitted { entries, fault_sites, traps };
        let linked =
            session.program.link(cell, names, &compiled.code, &module_name, emitted).map_err(|error| vec![error])?;
        timing.add(Phase::Link, compiled.emit + link_start.elapsed());
        Ok(Code::Linked { linked: Box::new(linked), bitcode })
    }
}

/// `Err` when the session was interrupted: the cell `span` stops where it is.
fn stop_if_interrupted(interrupt: &AtomicBool, span: Option<Span>) -> Result<(), Vec<Diagnostic>> {
    match (interrupt.load(Ordering::SeqCst), span) {
        (true, Some(span)) => Err(vec![Diagnostic::error(Kind::Interrupted, "interrupted while the cell compiled")
            .with_label(span, "")
            .with_note("nothing of the cell was kept; the session is as it was")]),
        _ => Ok(()),
    }
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
