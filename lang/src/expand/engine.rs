//! The Rhai engine a session stages with, and the `Stage` that holds it: the sandbox and the
//! limits (`Limits`, `:limits`), where Rhai's `print` goes, the session's Rhai scope and
//! functions (`StageState`, snapshotted so a failed cell can be undone), and Rhai's errors as
//! diagnostics with carets at the script's own line and column.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rhai::{Dynamic, Engine, EvalAltResult, Position, Scope, AST};

use crate::diagnostics::{Diagnostic, Kind};
use crate::header::Included;
use crate::reader::{Sexp, SourceId, Span};

/// Limits on staging, shown and set by `:limits`.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub depth: usize,
    pub nodes: usize,
    pub operations: u64,
    pub call_depth: usize,
    pub expression_depth: usize,
    pub string_size: usize,
    pub array_size: usize,
    pub map_size: usize,
    /// Wall-clock milliseconds per unquote or `rhai` form: Rhai's size checks make some
    /// scripts quadratic (10^6 `push`es take minutes) in few operations.
    pub time_ms: u64,
    /// Bytes Rhai's `print` and `debug` may write in one cell.
    pub output_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            depth: 64,
            nodes: 1_000_000,
            operations: 10_000_000,
            call_depth: 64,
            expression_depth: 128,
            string_size: 1 << 20,
            array_size: 1_000_000,
            map_size: 100_000,
            time_ms: 10_000,
            output_size: 1 << 20,
        }
    }
}

impl Limits {
    /// Name/value pairs, in `:limits` order.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("depth", self.depth as u64),
            ("nodes", self.nodes as u64),
            ("operations", self.operations),
            ("call-depth", self.call_depth as u64),
            ("expression-depth", self.expression_depth as u64),
            ("string-size", self.string_size as u64),
            ("array-size", self.array_size as u64),
            ("map-size", self.map_size as u64),
            ("time-ms", self.time_ms),
            ("output-size", self.output_size as u64),
        ]
    }

    /// Sets one limit by name.
    pub fn set(&mut self, name: &str, value: u64) -> bool {
        let value_usize = value as usize;
        match name {
            "depth" => self.depth = value_usize,
            "nodes" => self.nodes = value_usize,
            "operations" => self.operations = value,
            "call-depth" => self.call_depth = value_usize,
            "expression-depth" => self.expression_depth = value_usize,
            "string-size" => self.string_size = value_usize,
            "array-size" => self.array_size = value_usize,
            "map-size" => self.map_size = value_usize,
            "time-ms" => self.time_ms = value,
            "output-size" => self.output_size = value_usize,
            _ => return false,
        }
        true
    }
}

/// What macros may ask about the session (`signature`, `struct_fields`, `global_value`):
/// committed definitions only, refreshed by the session before each expansion.
#[derive(Clone, Debug, Default)]
pub(crate) struct SessionView {
    /// Function name → prototype form `((NAME RET) (P T)…)`.
    pub signatures: HashMap<String, Sexp>,
    /// Struct name → `[(field, type form)]`.
    pub struct_fields: HashMap<String, Vec<(String, Sexp)>>,
    /// Scalar global name → its value as a form.
    pub global_values: HashMap<String, Sexp>,
    /// Functions with a body, which an unrestricted `include` leaves alone.
    pub defined: HashSet<String>,
}

/// Where a script's text is: its source, the byte its first character is at, and the source's
/// whole text (to turn Rhai's lines and columns into bytes).
#[derive(Clone, Copy)]
pub(crate) struct ScriptText<'t> {
    pub source: SourceId,
    pub base: usize,
    pub text: &'t str,
}

/// Where a Rhai script's text came from, to map Rhai positions back to carets.
#[derive(Clone, Debug)]
pub(super) struct ScriptOrigin {
    pub(super) source: SourceId,
    /// Byte offset of the script's first character in the source.
    pub(super) base: usize,
    /// The source's text from `base` on: Rhai reports lines and columns, carets need bytes.
    pub(super) text: Rc<str>,
}

impl ScriptOrigin {
    /// The span of the character at a Rhai position (1-based line and column) of the script.
    pub(super) fn span_at(&self, line: usize, column: usize) -> Span {
        let mut offset = 0;
        for (index, line_text) in self.text.split_inclusive('\n').enumerate() {
            if index + 1 == line {
                offset += line_text.chars().take(column.saturating_sub(1)).map(char::len_utf8).sum::<usize>();
                break;
            }
            offset += line_text.len();
        }
        let width = self.text.get(offset..).and_then(|rest| rest.chars().next()).map_or(1, char::len_utf8);
        let end = (offset + width).min(self.text.len()).max(offset);
        Span::new(self.source, self.base + offset, self.base + end)
    }
}

/// The Rhai state a cell may change; snapshotted so a failed cell can be undone.
#[derive(Clone)]
pub(crate) struct StageState {
    pub(super) scope: Scope<'static>,
    pub(super) functions: AST,
    pub(super) gensym: u64,
    /// Which script defined each function (by name), for error positions.
    pub(super) function_scripts: HashMap<String, String>,
}

/// The staging engine of one session.
pub(crate) struct Stage {
    pub(super) engine: Engine,
    pub(super) state: StageState,
    pub(super) origins: Rc<RefCell<HashMap<String, ScriptOrigin>>>,
    pub(super) gensym: Rc<Cell<u64>>,
    pub(super) printed: Rc<RefCell<String>>,
    /// What the Rhai `include` built-in declared, drained after each unquote.
    pub(super) included: Rc<RefCell<Vec<Included>>>,
    pub view: Rc<RefCell<SessionView>>,
    pub limits: Limits,
    pub(super) interrupt: Arc<AtomicBool>,
    pub(super) script_counter: u64,
    /// The compiled call script of each unquoted call (its text → the session's functions with
    /// it), reused while the functions and constants it was compiled against stay: compiling
    /// and merging cost more than a small macro's run.
    pub(super) call_programs: HashMap<String, AST>,
}

/// An error while expanding, before it becomes a diagnostic.
pub(super) type Failure = Box<Diagnostic>;

pub(super) fn macro_error(span: Span, message: impl Into<String>) -> Failure {
    Box::new(Diagnostic::error(Kind::Macro, message).with_label(span, ""))
}

impl Stage {
    pub(crate) fn snapshot(&self) -> StageState {
        StageState { gensym: self.gensym.get(), ..self.state.clone() }
    }

    pub(crate) fn restore(&mut self, state: StageState) {
        self.gensym.set(state.gensym);
        self.state = state;
        self.call_programs.clear();
    }

    /// Takes whatever Rhai printed outside `expand` (e.g. `:load x.rhai`).
    pub fn take_printed(&mut self) -> String {
        std::mem::take(&mut *self.printed.borrow_mut())
    }

    pub(super) fn rhai_diagnostic(
        &self,
        message: String,
        script: Option<&str>,
        position: Position,
        fallback: Span,
        stack: Vec<String>,
    ) -> Failure {
        let origin = script.and_then(|key| self.origins.borrow().get(key).cloned());
        let mut diagnostic = Diagnostic::error(Kind::Macro, message);
        match (origin, position.line()) {
            (Some(origin), Some(line)) => {
                diagnostic = diagnostic.with_label(origin.span_at(line, position.position().unwrap_or(1)), "");
                // Name the unquote being expanded, unless the script is the form itself.
                let inside_form = fallback.source == origin.source
                    && fallback.start as usize <= origin.base
                    && origin.base <= fallback.end as usize;
                if !inside_form {
                    diagnostic = diagnostic.with_secondary(fallback, "while expanding this");
                }
            }
            _ => diagnostic = diagnostic.with_label(fallback, ""),
        }
        if !stack.is_empty() {
            diagnostic = diagnostic.with_note(format!("Rhai call stack: {}", stack.join(" → ")));
        }
        Box::new(diagnostic)
    }

    pub(super) fn runtime_diagnostic(&self, error: &EvalAltResult, script: Option<&str>, span: Span) -> Failure {
        // Unwrap nested function-call errors: the innermost error is the message, the names
        // form the call stack, and the innermost function's source gives the position.
        let mut stack = Vec::new();
        let mut current = error;
        let mut source = script.map(str::to_string);
        while let EvalAltResult::ErrorInFunctionCall(name, _, inner, _) = current {
            stack.push(name.clone());
            if let Some(key) = self.state.function_scripts.get(name) {
                source = Some(key.clone());
            }
            current = inner;
        }
        match current {
            EvalAltResult::ErrorTooManyOperations(_) => {
                return self.limit_failure("operations", self.limits.operations, span)
            }
            EvalAltResult::ErrorStackOverflow(_) => {
                return self.limit_failure("call-depth", self.limits.call_depth as u64, span)
            }
            EvalAltResult::ErrorDataTooLarge(what, _) => {
                return Box::new(
                    Diagnostic::error(
                        Kind::ExpansionLimit,
                        format!(
                            "Rhai: {what} exceeds the staging limits (string-size {}, array-size {}, map-size {})",
                            self.limits.string_size, self.limits.array_size, self.limits.map_size
                        ),
                    )
                    .with_label(span, ""),
                )
            }
            EvalAltResult::ErrorTerminated(token, _) if token.clone().into_string().ok().as_deref() == Some(TIME) => {
                return self.limit_failure(TIME, self.limits.time_ms, span)
            }
            EvalAltResult::ErrorTerminated(token, _)
                if token.clone().into_string().ok().as_deref() == Some(OUTPUT_SIZE) =>
            {
                return self.limit_failure(OUTPUT_SIZE, self.limits.output_size as u64, span)
            }
            EvalAltResult::ErrorTerminated(..) => {
                return Box::new(
                    Diagnostic::error(Kind::Interrupted, "interrupted while expanding").with_label(span, ""),
                )
            }
            _ => {}
        }
        let message = match current {
            EvalAltResult::ErrorTooManyModules(_) => {
                "Rhai: `import` is not available: macros cannot load modules".to_string()
            }
            _ => format!("Rhai: {}", first_line(&current.to_string())),
        };
        self.rhai_diagnostic(message, source.as_deref(), current.position(), span, stack)
    }

    pub(super) fn limit_failure(&self, name: &str, value: u64, span: Span) -> Failure {
        Box::new(
            Diagnostic::error(Kind::ExpansionLimit, format!("expansion exceeded the `{name}` limit ({value})"))
                .with_label(span, "")
                .with_note(format!("`:limits {name} N` raises it")),
        )
    }
}

pub(super) fn first_line(text: &str) -> &str {
    text.split(" (line ").next().unwrap_or(text)
}

/// The wall-clock and output limits' names, also the tokens that stop a script past them.
pub(super) const TIME: &str = "time-ms";
pub(super) const OUTPUT_SIZE: &str = "output-size";

/// A Rhai engine with the sandbox and `limits`: `print` and `debug` write to `printed` (up to
/// the output limit), an interrupt or the time limit stops a script at its next operation.
pub(super) fn sandboxed_engine(printed: &Rc<RefCell<String>>, interrupt: &Arc<AtomicBool>, limits: &Limits) -> Engine {
    let mut engine = Engine::new();
    engine.set_max_operations(limits.operations);
    engine.set_max_call_levels(limits.call_depth);
    engine.set_max_expr_depths(limits.expression_depth, limits.expression_depth);
    engine.set_max_string_size(limits.string_size);
    engine.set_max_array_size(limits.array_size);
    engine.set_max_map_size(limits.map_size);
    // The sandbox: no modules, no eval; Rhai's standard library has no files or network.
    engine.set_max_modules(0);
    engine.disable_symbol("eval");
    // Printing past the output limit stops the script at its next operation.
    let overflowed = Rc::new(Cell::new(false));
    let print = {
        let (sink, overflowed, limit) = (printed.clone(), overflowed.clone(), limits.output_size);
        move |text: &str| {
            let mut printed = sink.borrow_mut();
            if printed.len() + text.len() < limit {
                printed.push_str(text);
                printed.push('\n');
            } else {
                overflowed.set(true);
            }
        }
    };
    let debug = print.clone();
    engine.on_print(print);
    engine.on_debug(move |text, _, _| debug(text));
    let flag = interrupt.clone();
    let time_limit = std::time::Duration::from_millis(limits.time_ms);
    let started = Cell::new(std::time::Instant::now());
    engine.on_progress(move |operations| {
        if flag.load(Ordering::Relaxed) {
            return Some(Dynamic::from("interrupted"));
        }
        if overflowed.replace(false) {
            return Some(Dynamic::from(OUTPUT_SIZE));
        }
        // Every evaluation counts its operations from 1; the clock is read every 64.
        if operations == 1 {
            started.set(std::time::Instant::now());
        } else if operations % 64 == 0 && started.get().elapsed() > time_limit {
            return Some(Dynamic::from(TIME));
        }
        None
    });
    engine
}
