//! The `:command` bodies: each runs one `Command` against the session's parts, so every front
//! end has them. Listings recompile in scratch modules that are never linked, and expansions
//! are undone, so inspecting changes nothing.

use std::time::Instant;

use super::history::DefinitionKey;
use super::pipeline::{CellOptions, EvalMode, Transaction};
use super::report::{function_note, struct_line};
use super::tier_state::TierState;
use super::{device_source, Session, SessionConfig, SessionError, BATCH_OPT_LEVEL};
use crate::backend::{BackendError, Emit, Target};
use crate::check::{self, FunctionEntry, FunctionKind};
use crate::codegen::{self, CellModule, TopLevel};
use crate::command::{self, Command, OptSetting, TimeSetting};
use crate::diagnostics::{Diagnostic, Kind};
use crate::expand;
use crate::gpu;
use crate::inspect::{self, Stage};
use crate::reader::{self, Sexp};
use crate::source::Span;
use crate::tier::PROMOTED_LEVEL;
use crate::timeline::Timeline;
use crate::timing::Phase;
use crate::tree::{CellId, CellKind, TypedCell};
use crate::{Item, Language, Outcome, Stream};

impl Session {
    /// `:skipped`: each include of the last cell that included headers, and what it left out.
    fn skipped_lines(&self) -> String {
        if self.history.skipped.is_empty() {
            return "no include left anything out".into();
        }
        let mut text = String::new();
        for (headers, lines) in &self.history.skipped {
            text.push_str(&format!("left out of {headers} ({}):\n", lines.len()));
            for line in lines {
                text.push_str(&format!("  {line}\n"));
            }
        }
        text.pop();
        text
    }

    /// Runs one `:command` line.
    pub(super) fn run_command(&mut self, line: &str) -> Outcome {
        let mut outcome = Outcome::default();
        let command = match command::parse(line) {
            Ok(command) => command,
            Err(diagnostic) => {
                outcome.diagnostics.push(diagnostic);
                return outcome;
            }
        };
        let message = |text: String| Item::Message(text);
        match command {
            Command::Help(None) => outcome.items.push(message(command::help())),
            Command::Help(Some(topic)) => match command::help_on(topic) {
                Ok(text) => outcome.items.push(message(text)),
                Err(diagnostic) => outcome.diagnostics.push(diagnostic),
            },
            Command::Quit => outcome.quit = true,
            Command::Reset => match self.reset() {
                Ok(()) => outcome.items.push(message("session reset".into())),
                Err(error) => {
                    outcome.diagnostics.push(Diagnostic::error(Kind::Internal, format!("could not reset: {error}")))
                }
            },
            Command::Opt(OptSetting::Show) => outcome.items.push(message(self.opt_line())),
            Command::Opt(OptSetting::Pin(level)) => {
                self.opt_level = level.min(3);
                self.opt_pinned = true;
                outcome.items.push(message(format!("optimisation level {level}")));
            }
            Command::Opt(OptSetting::Tiered) => {
                self.opt_level = self.config.opt_level.min(3);
                self.opt_pinned = false;
                outcome.items.push(message(self.opt_line()));
            }
            Command::Tier { wait } => {
                if wait {
                    if let Err(diagnostic) = self.wait_for_promotions() {
                        outcome.diagnostics.push(diagnostic);
                    }
                }
                outcome.items.push(message(self.tier_lines()));
            }
            Command::Defs => {
                let lines = self.definition_lines();
                outcome.items.push(message(if lines.is_empty() {
                    "no definitions yet".into()
                } else {
                    lines.join("\n")
                }));
            }
            Command::Skipped => outcome.items.push(message(self.skipped_lines())),
            Command::Load(path) => return self.load_file(path),
            // Only the front end has what the session printed; it writes the file.
            Command::Save(path) => outcome.save = Some(path.to_string()),
            Command::Expand { text, single_level } => return self.expand_command(text, single_level),
            Command::Inspect { stages, subject, level } => return self.inspect_command(stages, subject, level),
            Command::Ptx(subject) => {
                let default = || self.history.last_expansion.as_deref().and_then(gpu::default_ptx_subject);
                match subject.map(str::to_string).or_else(default) {
                    Some(name) => {
                        let mut outcome = self.inspect_command(&[Stage::Ptx], Some(&name), None);
                        // The listing ends with what NVIDIA's assembler makes of it.
                        if let Some(Item::Listing { language: Language::Ptx, text, .. }) = outcome.items.last() {
                            let block = self.gpu.last_block(&name);
                            let line = gpu::ptxas_line(&self.gpu.arch, &name, text, block);
                            outcome.items.push(message(line));
                        }
                        return outcome;
                    }
                    None => outcome.diagnostics.push(
                        Diagnostic::error(
                            Kind::Syntax,
                            "`:ptx` needs a kernel: the last cell defined or launched none",
                        )
                        .with_note("write `:ptx NAME`"),
                    ),
                }
            }
            Command::Gpu(mode) => {
                if let Some(mode) = mode {
                    self.gpu.runtime.set_mode(mode);
                }
                outcome.items.push(message(self.gpu.describe_mode()));
            }
            Command::GpuArch(argument) => match self.gpu.gpu_arch_command(argument) {
                Ok(text) => outcome.items.push(message(text)),
                Err(diagnostic) => outcome.diagnostics.push(diagnostic),
            },
            Command::Time(TimeSetting::On) => {
                self.history.show_timing = true;
                outcome.items.push(message("timing on".into()));
            }
            Command::Time(TimeSetting::Off) => {
                self.history.show_timing = false;
                outcome.items.push(message("timing off".into()));
            }
            Command::Time(TimeSetting::Last) => {
                // Promotions swapped in since that cell ran are shown with it.
                let promoted = std::mem::take(&mut self.tiering.unreported);
                match &mut self.history.last_timing {
                    Some(timing) => {
                        timing.promotions.extend(promoted);
                        outcome.items.push(Item::Timing(timing.clone()));
                    }
                    None => outcome.items.push(message("no cell has run yet".into())),
                }
            }
            Command::Timeline => match self.history.last_timing.as_ref().and_then(Timeline::of) {
                Some(timeline) => outcome.items.push(Item::Timeline(timeline)),
                None => outcome.items.push(message("no cell's code has run yet".into())),
            },
            Command::Trace(path) => {
                let (json, events) = self.history.trace.take_json();
                match std::fs::write(path, json) {
                    Ok(()) => outcome.items.push(message(format!(
                        "wrote {events} events to {path} (Chrome trace-event JSON: open it in ui.perfetto.dev)"
                    ))),
                    Err(error) => outcome
                        .diagnostics
                        .push(Diagnostic::error(Kind::Syntax, format!("cannot write {path}: {error}"))),
                }
            }
            Command::Bench(text) => return self.eval_cell(&format!("(bench {text})"), &mut |_| {}),
            Command::Limits { name, value } => return self.limits_command(name, value),
            Command::TuneCache { clear } => match self.tune_cache_line(clear) {
                Ok(line) => outcome.items.push(message(line)),
                Err(diagnostic) => outcome.diagnostics.push(diagnostic),
            },
            Command::TuneOn(text) => match self.tune_on(text) {
                Ok(line) => outcome.items.push(message(line)),
                Err(diagnostics) => outcome.diagnostics.extend(diagnostics),
            },
        }
        outcome
    }

    /// Evaluates a file as one cell (`:load`); a `.rhai` file runs as Rhai in the session scope.
    fn load_file(&mut self, path: &str) -> Outcome {
        self.refresh_view_if_stale();
        match crate::files::read_source(path) {
            Ok(text) if path.ends_with(".rhai") => self.run_rhai(path, text),
            Ok(text) => {
                // A file is compiled at full speed, as `quasi run` compiles it, unless `:opt`
                // pinned a level: nobody waits for a prompt between its definitions.
                let level = (!self.opt_pinned).then_some(BATCH_OPT_LEVEL);
                let options = CellOptions { level, ..CellOptions::of(EvalMode::Cell) };
                self.eval_source(path.to_string(), text, options, &mut |_| {})
            }
            Err(error) => {
                let mut outcome = Outcome::default();
                outcome.diagnostics.push(error);
                outcome
            }
        }
    }

    /// A Rhai script, `:load`ed from `path` (or replayed under that name): its functions and
    /// variables join the session's scope. Kept in the journal when it ran.
    pub(super) fn run_rhai(&mut self, path: &str, text: String) -> Outcome {
        let source = self.history.add_source(path.to_string(), text);
        let text = self.history.text(source).to_string();
        let mut outcome = Outcome::default();
        let start = Instant::now();
        let script = expand::ScriptText { source, base: 0, text: &text };
        let result = self.staging.stage.run_script(&text, script, Span::new(source, 0, 0));
        outcome.timing.add(Phase::Expand, start.elapsed());
        let printed = self.staging.stage.take_printed();
        if !printed.is_empty() {
            outcome.items.push(Item::Output { stream: Stream::Stdout, text: printed });
        }
        match result {
            Ok(()) => {
                outcome.items.push(Item::Message(format!("loaded {path}")));
                self.journal_rhai(source);
            }
            Err(diagnostic) => outcome.diagnostics.push(*diagnostic),
        }
        self.history.attach_sources(&mut outcome);
        outcome
    }

    /// `:expand [N] [TEXT]`: the expansion of TEXT (default: the last cell), pretty-printed.
    /// The session is left as it was: Rhai effects of the expansion are undone.
    fn expand_command(&mut self, text: Option<&str>, single_level: bool) -> Outcome {
        self.refresh_view_if_stale();
        let mut outcome = Outcome::default();
        if let (None, false, Some(forms)) = (text, single_level, &self.history.last_expansion) {
            outcome.items.push(expansion_listing(forms.iter().map(|form| crate::reader::pretty::pretty(form, 0))));
            return outcome;
        }
        let Some(text) = text.map(str::to_string).or_else(|| self.history.last_cell.clone()) else {
            outcome.diagnostics.push(
                Diagnostic::error(Kind::Syntax, "`:expand` needs a cell: no cell was evaluated yet")
                    .with_note("write `:expand TEXT`"),
            );
            return outcome;
        };
        match self.expand_and_undo(&text, single_level) {
            Ok(forms) => {
                outcome.items.push(expansion_listing(forms.iter().map(|form| crate::reader::pretty::pretty(form, 0))));
                outcome
            }
            Err(diagnostics) => self.fail(outcome, diagnostics),
        }
    }

    /// A command's subject cell, read and expanded with the Rhai effects of the expansion undone
    /// (the scope, functions and gensym counter as they were), so inspecting changes nothing.
    fn expand_and_undo(&mut self, text: &str, single_level: bool) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
        let source = self.history.add_source(format!("cell {}", self.history.cell_count), text.to_string());
        let forms = reader::read(source, text)?;
        // Never committed: dropping the transaction puts the staging state back.
        let mut transaction = Transaction::begin(self);
        let session = &mut *transaction;
        session.staging.stage.expand(forms, &mut session.history.sources, single_level).map(|expanded| expanded.forms)
    }

    /// `:stages`, `:types`, `:ir [opt]`, `:asm`: listings of a definition (or, without a name,
    /// of the last cell), recompiled in a scratch module that is never linked. A function's are
    /// at the level of its code that runs (promoted code's, level 3), unless `asked` names one,
    /// and the title says which (as Julia's `@code_native` shows the code that runs).
    fn inspect_command(&mut self, stages: &[Stage], subject: Option<&str>, asked: Option<u8>) -> Outcome {
        self.refresh_view_if_stale();
        let mut outcome = Outcome::default();
        let defined = subject.and_then(|name| match self.env.functions.get(name) {
            Some(FunctionEntry { kind: FunctionKind::Defined(def), .. }) => Some(def.clone()),
            _ => None,
        });
        let (label, forms, source_text) = match (subject, defined) {
            (Some(name), Some(def)) => (name.to_string(), vec![def.source.form()], self.history.span_text(def.span)),
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
                match self.expand_and_undo(text, false) {
                    Ok(forms) => ("cell".to_string(), forms, Some(text.to_string())),
                    Err(diagnostics) => return self.fail(outcome, diagnostics),
                }
            }
            (None, _) => match &self.history.last_expansion {
                Some(forms) => ("last cell".to_string(), forms.clone(), self.history.last_cell.clone()),
                None => {
                    outcome.diagnostics.push(
                        Diagnostic::error(Kind::Syntax, "there is no cell to list yet")
                            .with_note("name a function, e.g. `:ir fib`"),
                    );
                    return outcome;
                }
            },
        };
        let cell_id = CellId { number: self.history.cell_count, kind: CellKind::Inspect };
        let mut cell = match self.check(&self.env, &forms, cell_id) {
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
        let running = subject.and_then(|name| self.compiled_levels.get(name).copied());
        let level = asked.or(running).unwrap_or(self.opt_level);
        let level_note = match (asked, running) {
            (None, Some(running)) if running != self.opt_level => format!("opt {level}, the code that runs"),
            (Some(asked), Some(running)) if asked != running => {
                format!("opt {asked}; the code that runs is opt {running}")
            }
            _ => format!("opt {level}"),
        };
        // Device code lists its GPU build: IR for NVPTX, and PTX instead of x86-64 assembly.
        let device_subject = subject.filter(|name| {
            label == *name
                && (stages.contains(&Stage::Ptx)
                    || check::defined(&self.env, name).is_some_and(|def| def.placement.device_only))
        });
        let device = match device_subject {
            Some(name)
                if stages
                    .iter()
                    .any(|stage| matches!(stage, Stage::Ir | Stage::OptimisedIr | Stage::Assembly | Stage::Ptx)) =>
            {
                let source = device_source(&self.env, &self.backend, &self.program);
                match self.gpu.ptx_listing(&source, name) {
                    Ok(listing) => Some(listing),
                    Err(diagnostic) => return self.fail(outcome, vec![diagnostic]),
                }
            }
            _ => None,
        };
        let needs_code = device.is_none()
            && stages.iter().any(|stage| matches!(stage, Stage::Ir | Stage::OptimisedIr | Stage::Assembly));
        let code = if needs_code {
            match self.scratch_listings(&cell, level) {
                Ok(code) => Some(code),
                Err(diagnostic) => return self.fail(outcome, vec![diagnostic]),
            }
        } else {
            None
        };
        for stage in stages {
            let (language, text) = match stage {
                Stage::Source => (Language::CLisp, source_text.clone().unwrap_or_default()),
                Stage::Expanded => (
                    Language::CLisp,
                    forms.iter().map(|form| crate::reader::pretty::pretty(form, 0)).collect::<Vec<_>>().join("\n"),
                ),
                Stage::Typed => {
                    let mut parts: Vec<String> = cell
                        .functions
                        .iter()
                        .map(|function| {
                            crate::reader::pretty::pretty(&inspect::typed_tree(function, &self.env.structs), 0)
                        })
                        .collect();
                    for item in &cell.top {
                        parts.extend(
                            inspect::typed_statements(&item.function, &self.env.structs)
                                .iter()
                                .map(|form| crate::reader::pretty::pretty(form, 0)),
                        );
                    }
                    (Language::CLisp, parts.join("\n"))
                }
                Stage::Ir if device.is_some() => {
                    (Language::LlvmIr, device.as_ref().map(|device| device.ir.clone()).unwrap_or_default())
                }
                Stage::OptimisedIr if device.is_some() => {
                    (Language::LlvmIr, device.as_ref().map(|device| device.optimised.clone()).unwrap_or_default())
                }
                Stage::Assembly | Stage::Ptx if device.is_some() => {
                    (Language::Ptx, device.as_ref().map(|device| device.ptx.clone()).unwrap_or_default())
                }
                Stage::Ir => (Language::LlvmIr, code.as_ref().map(|code| code.0.clone()).unwrap_or_default()),
                Stage::OptimisedIr => (Language::LlvmIr, code.as_ref().map(|code| code.1.clone()).unwrap_or_default()),
                Stage::Assembly | Stage::Ptx => {
                    (Language::Assembly, code.as_ref().map(|code| code.2.clone()).unwrap_or_default())
                }
            };
            let arch = self.gpu.arch.clone();
            let title = match stage {
                Stage::Ir | Stage::OptimisedIr if device.is_some() => {
                    format!("{label}: {} for {arch} (opt 3)", stage.title())
                }
                Stage::Assembly | Stage::Ptx if device.is_some() => format!("{label}: PTX ({arch})"),
                // IR before optimisation is the same at every level: it is titled with the
                // level asked for, or the session's, as the input of that level's passes.
                Stage::Ir => format!("{label}: {} (opt {})", stage.title(), asked.unwrap_or(self.opt_level)),
                Stage::OptimisedIr | Stage::Assembly => format!("{label}: {} ({level_note})", stage.title()),
                _ => format!("{label}: {}", stage.title()),
            };
            outcome.items.push(Item::Listing { title, language, text });
        }
        outcome
    }

    /// IR before and after passes and assembly of a checked cell, from a module never linked.
    fn scratch_listings(&self, cell: &TypedCell, level: u8) -> Result<(String, String, String), Diagnostic> {
        let names = self.program.scratch_names(cell);
        let target = Target::Host(level);
        let internal = |error: BackendError| Diagnostic::internal(error.to_string());
        let target_data = self.backend.target_data(&target).map_err(internal)?;
        let CellModule { module, .. } = codegen::lower(
            &self.backend.context,
            &target_data,
            &self.backend.triple(&target),
            cell,
            "inspect",
            &names.naming(),
            TopLevel::PerItem,
        )
        .map_err(|error| Diagnostic::internal(format!("code generation failed: {error}")))?;
        let compiled = self.backend.compile(module, &target, Emit::Listing).map_err(internal)?;
        let listing = compiled.listing.ok_or_else(|| Diagnostic::internal("the back end gave no listing"))?;
        let ir = inspect::trim_ir(&listing.ir);
        let optimised = inspect::trim_ir(&listing.optimised);
        Ok((ir, optimised, inspect::trim_assembly(&listing.assembly)))
    }

    /// `:limits [NAME VALUE]`.
    fn limits_command(&mut self, name: Option<&str>, value: Option<&str>) -> Outcome {
        let mut outcome = Outcome::default();
        if let Some(name) = name {
            let parsed = value.and_then(|value| value.replace('_', "").parse::<u64>().ok());
            match parsed {
                Some(number) if self.staging.stage.limits.set(name, number) => self.staging.stage.apply_limits(),
                _ => {
                    let names: Vec<&str> = self.staging.stage.limits.entries().iter().map(|(name, _)| *name).collect();
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
            self.staging.stage.limits.entries().iter().map(|(name, value)| format!("{name:<17} {value}")).collect();
        outcome.items.push(Item::Message(lines.join("\n")));
        outcome
    }

    /// Starts over: a fresh session with the same configuration.
    fn reset(&mut self) -> Result<(), SessionError> {
        let count = self.history.cell_count;
        let gpu = Some(self.gpu.runtime.mode());
        let mut fresh = Session::new(SessionConfig { opt_level: self.opt_level, gpu, ..self.config.clone() })?;
        fresh.history.cell_count = count;
        fresh.opt_pinned = self.opt_pinned;
        // What autotuning measured, and where it tunes, outlive the session's definitions.
        fresh.tune_cache = self.tune_cache.take();
        fresh.tune_executor = self.tune_executor.take();
        *self = fresh;
        Ok(())
    }

    /// `:tune on slurm …` / `:tune on local` (or `:tune on`, which says where): where autotunes
    /// without an `(on …)` clause time their variants.
    fn tune_on(&mut self, text: &str) -> Result<String, Vec<Diagnostic>> {
        if !text.trim().is_empty() {
            let source = self.history.add_source(format!("cell {}", self.history.cell_count), format!("(on {text})"));
            let forms = crate::reader::read(source, self.history.text(source))?;
            let mut outcome = Outcome::default();
            let clause = match forms.as_slice() {
                [clause] => clause,
                _ => {
                    outcome
                        .diagnostics
                        .push(Diagnostic::error(Kind::Syntax, "`:tune on` takes one place: `slurm …` or `local`"));
                    return Err(outcome.diagnostics);
                }
            };
            let items = clause.list().expect("read as a list");
            self.tune_executor = crate::bench::slurm::parse_on(clause, &items[1..]).map_err(|mut diagnostics| {
                let mut outcome = Outcome { diagnostics: std::mem::take(&mut diagnostics), ..Outcome::default() };
                self.history.attach_sources(&mut outcome);
                outcome.diagnostics
            })?;
        }
        Ok(match &self.tune_executor {
            Some(options) => format!("autotunes time their variants on {}", options.describe()),
            None => "autotunes time their variants here, in this session".to_string(),
        })
    }

    /// `:tune cache [clear]`: where the tuning cache is, how many results and bytes it holds;
    /// `clear` removes them.
    fn tune_cache_line(&self, clear: bool) -> Result<String, Diagnostic> {
        let Some(cache) = &self.tune_cache else {
            return Ok(format!(
                "tuning cache: off (this session keeps no results; {}=off turns it off, or there is no HOME)",
                crate::tune_cache::TUNE_CACHE_VARIABLE
            ));
        };
        let folder = cache.directory().display();
        let results = |count: usize| format!("{count} result{}", if count == 1 { "" } else { "s" });
        let kib = |bytes: u64| format!("{:.1} KiB", bytes as f64 / 1024.0);
        let failed = |error: std::io::Error| {
            Diagnostic::error(Kind::Io, format!("cannot read the tuning cache in {folder}: {error}"))
        };
        if clear {
            let (count, bytes) = cache.clear().map_err(failed)?;
            return Ok(format!("tuning cache: removed {} ({})", results(count), kib(bytes)));
        }
        let (count, bytes) = cache.usage().map_err(failed)?;
        Ok(format!(
            "tuning cache: {} ({}) in {folder}, kept under {} MiB; `(fresh)` in an autotune times its variants again",
            results(count),
            kib(bytes),
            crate::tune_cache::TUNE_CACHE_BUDGET >> 20
        ))
    }

    /// `:opt`'s line: the level of later cells and whether they are promoted.
    fn opt_line(&self) -> String {
        match (self.opt_pinned, self.tiering_active()) {
            (true, _) => format!("optimisation level {} (pinned by :opt)", self.opt_level),
            (false, true) => format!(
                "optimisation level {}, tiered: functions are promoted to opt {PROMOTED_LEVEL} in the background",
                self.opt_level
            ),
            (false, false) => format!("optimisation level {}", self.opt_level),
        }
    }

    /// `:tier`: each defined function, the level its code has and where its promotion stands,
    /// in name order.
    fn tier_lines(&self) -> String {
        let mut functions: Vec<(&String, &u8)> = self.compiled_levels.iter().collect();
        if functions.is_empty() {
            return "no functions yet".into();
        }
        functions.sort();
        let mut lines: Vec<String> = functions
            .iter()
            .map(|(name, level)| {
                let state = match self.tiering.states.get(*name) {
                    Some(TierState::Queued) => format!(" (opt {PROMOTED_LEVEL} compiling in the background)"),
                    Some(TierState::Failed(message)) => format!(" (opt {PROMOTED_LEVEL} failed: {message})"),
                    None if self.promoted(name) => " (promoted in the background)".to_string(),
                    None => String::new(),
                };
                format!("{name} : opt {level}{state}")
            })
            .collect();
        lines.push(match (self.opt_pinned, self.tiering_active()) {
            (true, _) => format!("later cells: opt {} (pinned by :opt)", self.opt_level),
            (false, true) => format!(
                "later cells: opt {}, promoted to opt {PROMOTED_LEVEL} in the background; :load and quasi run: opt {BATCH_OPT_LEVEL}",
                self.opt_level
            ),
            (false, false) => format!("later cells: opt {}; :load and quasi run: opt {BATCH_OPT_LEVEL}", self.opt_level),
        });
        lines.join("\n")
    }

    /// Lines describing every definition, for `:defs`.
    fn definition_lines(&self) -> Vec<String> {
        self.history.definitions_in_order().into_iter().filter_map(|key| self.definition_line(key)).collect()
    }

    /// One definition's line, as `:defs` and the cell that defined it print it.
    pub(super) fn definition_line(&self, key: &DefinitionKey) -> Option<String> {
        let structs = &self.env.structs;
        match key {
            DefinitionKey::Struct(name) => structs.get(name).map(|entry| struct_line(name, entry)),
            DefinitionKey::Global(name) => self.env.globals.get(name).map(|entry| {
                format!("{name} : {} = {}", entry.ty, self.program.global_value_text(name, &entry.ty, structs))
            }),
            DefinitionKey::Function(name) => self
                .env
                .functions
                .get(name)
                .map(|entry| format!("{name} : {}{}", entry.signature, function_note(entry, false))),
        }
    }
}

/// `:expand`'s forms as a C-Lisp listing without a title, which text renders as the bare forms.
fn expansion_listing(forms: impl Iterator<Item = String>) -> Item {
    Item::Listing { title: String::new(), language: Language::CLisp, text: forms.collect::<Vec<_>>().join("\n") }
}
