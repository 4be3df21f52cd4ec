//! `quasi run`'s policy: a file is one cell whose values are not shown, then `main` is called
//! (with argc and argv when it takes them) in a cell of its own, and the exit status is what
//! `main` returned, what the program passed to `exit`, or the kind of error that stopped it.

use super::argv::ScriptArgv;
use super::pipeline::{CellOptions, EvalMode};
use super::Session;
use crate::backend::ObjectCache;
use crate::diagnostics::{Diagnostic, Kind};
use crate::source::Span;
use crate::{Item, Outcome};
use std::sync::atomic::Ordering;

impl Session {
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
        !self.eval_source(path.to_string(), text, CellOptions::of(EvalMode::Compile), &mut |_| {}).failed()
    }

    fn run_script(&mut self, path: &str, text: String, args: &[String]) -> (Outcome, i32) {
        self.history.cell_count += 1;
        self.interrupt.store(false, Ordering::SeqCst);
        let mut outcome = self.eval_source(path.to_string(), text, CellOptions::of(EvalMode::Script), &mut |_| {});
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
        let main_outcome =
            self.eval_source(format!("{path} (main)"), call, CellOptions::of(EvalMode::Main), &mut |_| {});
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
