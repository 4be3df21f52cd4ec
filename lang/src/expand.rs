//! Expand: quasiquote/unquote over a cell, evaluated in Rhai; the Rhai engine, the session's
//! Rhai scope and functions, the code-building API registered into Rhai, limits and `gensym`.
//!
//! A cell is implicitly quasiquoted (level 1). `,NAME` reads a Rhai variable, `,(F A…)` calls a
//! Rhai function with its arguments as data, `,@…` splices a list. Results are converted back
//! to forms and expanded again. Nodes an unquote produces carry the unquote's span, so a check
//! error in generated code points at the unquote that generated it.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rhai::{Array, Dynamic, Engine, EvalAltResult, Map, Position, Scope, AST, INT};

use crate::diagnostics::{Diagnostic, Kind};
use crate::header::{self, ConstantForm, Included};
use crate::reader::{self, Sexp, SexpKind, SourceFile, SourceId, Span};

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

/// A C-Lisp symbol as a Rhai value (`sym("x")`). Its text is shared: Rhai copies values on
/// every use, and generated code passes the same few symbols around many times.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Sym(pub Rc<str>);

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
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

/// Where a Rhai script's text came from, to map Rhai positions back to carets.
#[derive(Clone, Debug)]
struct ScriptOrigin {
    source: SourceId,
    /// Byte offset of the script's first character in the source.
    base: usize,
}

/// The Rhai state a cell may change; snapshotted so a failed cell can be undone.
#[derive(Clone)]
pub(crate) struct StageState {
    scope: Scope<'static>,
    functions: AST,
    gensym: u64,
    /// Which script defined each function (by name), for error positions.
    function_scripts: HashMap<String, String>,
}

/// One unquote that was evaluated: where, and what it became.
#[derive(Clone, Debug)]
pub(crate) struct ExpansionSite {
    pub span: Span,
    /// The unquote as written, e.g. `,(scale 1.5)`.
    pub written: String,
    /// The forms it produced, pretty-printed only when a diagnostic shows them.
    pub expanded: ExpandedForms,
}

/// What an unquote produced, kept as the Rhai values it returned (already converted once, so
/// they convert again): most cells never show them, and copying or printing a large generated
/// function cost as much as generating it.
#[derive(Clone, Debug)]
pub(crate) struct ExpandedForms {
    values: Vec<Dynamic>,
    span: Span,
}

impl fmt::Display for ExpandedForms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let forms = self.values.iter().filter_map(|value| to_sexp(value, self.span).ok());
        for (index, form) in forms.enumerate() {
            if index > 0 {
                f.write_str(" ")?;
            }
            f.write_str(&pretty(&form, 0))?;
        }
        Ok(())
    }
}

/// A cell after expansion.
pub(crate) struct ExpandedCell {
    pub forms: Vec<Sexp>,
    pub sites: Vec<ExpansionSite>,
    /// What Rhai's `print`/`debug` wrote.
    pub printed: String,
    /// Warnings of `include`s.
    pub warnings: Vec<Diagnostic>,
    /// Each `include`'s one-line summary and the names it declared, whose own lines it replaces.
    pub includes: Vec<(String, HashSet<String>)>,
}

/// The staging engine of one session.
pub(crate) struct Stage {
    engine: Engine,
    state: StageState,
    origins: Rc<RefCell<HashMap<String, ScriptOrigin>>>,
    gensym: Rc<Cell<u64>>,
    printed: Rc<RefCell<String>>,
    /// What the Rhai `include` built-in declared, drained after each unquote.
    included: Rc<RefCell<Vec<Included>>>,
    pub view: Rc<RefCell<SessionView>>,
    pub limits: Limits,
    interrupt: Arc<AtomicBool>,
    script_counter: u64,
    /// The compiled call script of each unquoted call (its text → the session's functions with
    /// it), reused while the functions and constants it was compiled against stay: compiling
    /// and merging cost more than a small macro's run.
    call_programs: HashMap<String, AST>,
}

/// An error while expanding, before it becomes a diagnostic.
type Failure = Box<Diagnostic>;

fn macro_error(span: Span, message: impl Into<String>) -> Failure {
    Box::new(Diagnostic::error(Kind::Macro, message).with_label(span, ""))
}

impl Stage {
    pub fn new(interrupt: Arc<AtomicBool>) -> Stage {
        let gensym = Rc::new(Cell::new(0));
        let printed = Rc::new(RefCell::new(String::new()));
        let view = Rc::new(RefCell::new(SessionView::default()));
        let limits = Limits::default();
        let included = Rc::new(RefCell::new(Vec::new()));
        let engine = build_engine(&gensym, &printed, &view, &included, &interrupt, &limits);
        Stage {
            engine,
            state: StageState {
                scope: Scope::new(),
                functions: AST::empty(),
                gensym: 0,
                function_scripts: HashMap::new(),
            },
            origins: Rc::new(RefCell::new(HashMap::new())),
            gensym,
            printed,
            included,
            view,
            limits,
            interrupt,
            script_counter: 0,
            call_programs: HashMap::new(),
        }
    }

    /// Applies changed limits to the engine.
    pub fn apply_limits(&mut self) {
        self.call_programs.clear();
        self.engine =
            build_engine(&self.gensym, &self.printed, &self.view, &self.included, &self.interrupt, &self.limits);
    }

    pub(crate) fn snapshot(&self) -> StageState {
        StageState { gensym: self.gensym.get(), ..self.state.clone() }
    }

    pub(crate) fn restore(&mut self, state: StageState) {
        self.gensym.set(state.gensym);
        self.state = state;
        self.call_programs.clear();
    }

    /// Runs a Rhai script in the session scope, keeping its functions and variables.
    pub fn run_script(&mut self, script: &str, source: SourceId, base: usize, span: Span) -> Result<(), Failure> {
        self.script_counter += 1;
        let key = format!("script#{}", self.script_counter);
        self.origins.borrow_mut().insert(key.clone(), ScriptOrigin { source, base });
        let mut ast = self.engine.compile_with_scope(&self.state.scope, script).map_err(|error| {
            let position = error.position();
            self.rhai_diagnostic(format!("Rhai: {}", error.err_type()), Some(&key), position, span, Vec::new())
        })?;
        ast.set_source(key.clone());
        self.engine
            .run_ast_with_scope(&mut self.state.scope, &ast)
            .map_err(|error| self.runtime_diagnostic(&error, Some(&key), span))?;
        ast.clear_statements();
        for function in ast.iter_functions() {
            self.state.function_scripts.insert(function.name.to_string(), key.clone());
            self.state.function_scripts.insert(format!("{}/{}", function.name, function.params.len()), key.clone());
        }
        // A later `fn` replaces the same name and arity.
        self.state.functions = self.state.functions.merge(&ast);
        self.call_programs.clear();
        Ok(())
    }

    /// Expands a cell. On failure the Rhai state is as before the call.
    pub fn expand(
        &mut self,
        forms: Vec<Sexp>,
        sources: &mut Vec<SourceFile>,
        single_level: bool,
    ) -> Result<ExpandedCell, Vec<Diagnostic>> {
        let saved = self.snapshot();
        self.printed.borrow_mut().clear();
        // What the `include` built-in made outside a cell (`:load x.rhai`) is no cell's.
        self.included.borrow_mut().clear();
        let mut expander = Expander {
            stage: self,
            sources,
            sites: Vec::new(),
            single_level,
            nodes: 0,
            warnings: Vec::new(),
            includes: Vec::new(),
        };
        let result = expander.top_level(forms);
        let sites = std::mem::take(&mut expander.sites);
        let warnings = std::mem::take(&mut expander.warnings);
        let includes = std::mem::take(&mut expander.includes);
        match result {
            Ok(forms) => Ok(ExpandedCell {
                forms,
                sites,
                printed: std::mem::take(&mut *self.printed.borrow_mut()),
                warnings,
                includes,
            }),
            Err(failure) => {
                self.restore(saved);
                Err(vec![*failure])
            }
        }
    }

    /// Takes whatever Rhai printed outside `expand` (e.g. `:load x.rhai`).
    pub fn take_printed(&mut self) -> String {
        std::mem::take(&mut *self.printed.borrow_mut())
    }

    fn rhai_diagnostic(
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
                let span = Span::new(origin.source, origin.base, origin.base);
                let origin_for_check = origin.clone();
                diagnostic = diagnostic.with_label(span, "");
                diagnostic.labels[0].span = PendingPosition::encode(origin, line, position.position().unwrap_or(1));
                let origin = origin_for_check;
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

    fn runtime_diagnostic(&self, error: &EvalAltResult, script: Option<&str>, span: Span) -> Failure {
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

    fn limit_failure(&self, name: &str, value: u64, span: Span) -> Failure {
        Box::new(
            Diagnostic::error(Kind::ExpansionLimit, format!("expansion exceeded the `{name}` limit ({value})"))
                .with_label(span, "")
                .with_note(format!("`:limits {name} N` raises it")),
        )
    }
}

fn first_line(text: &str) -> &str {
    text.split(" (line ").next().unwrap_or(text)
}

/// Rhai reports line and column; carets need bytes. The origin's text is not at hand where
/// the error is made, so the position is encoded in the span and resolved by the session.
pub(crate) struct PendingPosition;

impl PendingPosition {
    const MARK: u32 = 1 << 31;

    fn encode(origin: ScriptOrigin, line: usize, column: usize) -> Span {
        Span {
            source: origin.source,
            start: Self::MARK | ((line as u32) << 12) | (column as u32 & 0xfff),
            end: origin.base as u32,
        }
    }

    /// Turns an encoded position into a byte span of one character in `text`.
    pub fn resolve(span: Span, text: &str) -> Span {
        if span.start & Self::MARK == 0 {
            return span;
        }
        let line = ((span.start & !Self::MARK) >> 12) as usize;
        let column = (span.start & 0xfff) as usize;
        let base = span.end as usize;
        let script = text.get(base..).unwrap_or("");
        let mut offset = base;
        for (index, line_text) in script.split_inclusive('\n').enumerate() {
            if index + 1 == line {
                let within: usize = line_text.chars().take(column.saturating_sub(1)).map(char::len_utf8).sum();
                offset += within;
                break;
            }
            offset += line_text.len();
        }
        let end = offset + text.get(offset..).and_then(|rest| rest.chars().next()).map_or(1, char::len_utf8);
        Span::new(span.source, offset, end.min(text.len()).max(offset))
    }
}

/// The wall-clock and output limits' names, also the tokens that stop a script past them.
const TIME: &str = "time-ms";
const OUTPUT_SIZE: &str = "output-size";

fn build_engine(
    gensym: &Rc<Cell<u64>>,
    printed: &Rc<RefCell<String>>,
    view: &Rc<RefCell<SessionView>>,
    included: &Rc<RefCell<Vec<Included>>>,
    interrupt: &Arc<AtomicBool>,
    limits: &Limits,
) -> Engine {
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
    register_api(&mut engine, gensym, view, interrupt, limits);
    register_include(&mut engine, view, included, interrupt);
    engine
}

/// `include(headers, functions, structs, typedefs)`: llama.lisp's spelling of `(include …)`
/// (docs/language.md §9), returning the declarations to splice; empty lists ask for nothing of
/// their kind unless all three are empty.
fn register_include(
    engine: &mut Engine,
    view: &Rc<RefCell<SessionView>>,
    included: &Rc<RefCell<Vec<Included>>>,
    interrupt: &Arc<AtomicBool>,
) {
    let (view, included, interrupt) = (view.clone(), included.clone(), interrupt.clone());
    engine.register_fn(
        "include",
        move |headers: Array, functions: Array, structs: Array, typedefs: Array| -> Result<Array, Box<EvalAltResult>> {
            let names = |values: &Array| -> Result<Vec<String>, Box<EvalAltResult>> {
                values
                    .iter()
                    .map(|value| {
                        value
                            .clone()
                            .try_cast::<Sym>()
                            .map(|symbol| symbol.0.to_string())
                            .or_else(|| value.clone().into_string().ok())
                            .ok_or_else(|| rhai_error("include: names are symbols or strings"))
                    })
                    .collect()
            };
            let named = |values: &Array| -> Result<Option<Vec<header::Named>>, Box<EvalAltResult>> {
                let list = names(values)?;
                Ok(Some(
                    list.into_iter()
                        .map(|name| header::Named { name, span: Span::new(SourceId(u32::MAX), 0, 0) })
                        .collect(),
                ))
            };
            let unrestricted = functions.is_empty() && structs.is_empty() && typedefs.is_empty();
            let request = header::Request {
                headers: names(&headers)?,
                functions: if unrestricted { None } else { named(&functions)? },
                structs: if unrestricted { None } else { named(&structs)? },
                typedefs: if unrestricted { None } else { named(&typedefs)? },
                flags: Vec::new(),
                span: Span::new(SourceId(u32::MAX), 0, 0),
            };
            let defined = view.borrow().defined.clone();
            let mut result = header::include(&request, &defined, &interrupt).map_err(|diagnostic| {
                let notes: String = diagnostic.notes.iter().map(|note| format!("; {note}")).collect();
                rhai_error(format!("include: {}{notes}", diagnostic.message))
            })?;
            let forms = std::mem::take(&mut result.forms).iter().map(to_dynamic).collect();
            included.borrow_mut().push(result);
            Ok(forms)
        },
    );
}

fn rhai_error(message: impl Into<String>) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(Dynamic::from(message.into()), Position::NONE))
}

fn register_api(
    engine: &mut Engine,
    gensym: &Rc<Cell<u64>>,
    view: &Rc<RefCell<SessionView>>,
    interrupt: &Arc<AtomicBool>,
    limits: &Limits,
) {
    engine.register_type_with_name::<Sym>("Sym");
    engine.register_fn("sym", |name: &str| -> Result<Sym, Box<EvalAltResult>> {
        if reader::is_symbol(name) {
            Ok(Sym(name.into()))
        } else {
            Err(rhai_error(format!("`{name}` is not a C-Lisp symbol")))
        }
    });
    engine.register_get("name", |symbol: &mut Sym| symbol.0.to_string());
    engine.register_fn("to_string", |symbol: &mut Sym| symbol.0.to_string());
    engine.register_fn("to_debug", |symbol: &mut Sym| symbol.0.to_string());
    engine.register_fn("==", |a: Sym, b: Sym| a == b);
    engine.register_fn("!=", |a: Sym, b: Sym| a != b);
    engine.register_fn("is_sym", |value: Dynamic| value.is::<Sym>());
    let counter = gensym.clone();
    engine.register_fn("gensym", move |prefix: &str| {
        counter.set(counter.get() + 1);
        Sym(format!("{prefix}#{}", counter.get()).into())
    });
    engine.register_fn("parse", |text: &str| -> Result<Dynamic, Box<EvalAltResult>> {
        let mut forms = parse_text(text)?;
        match forms.len() {
            1 => Ok(forms.remove(0)),
            count => Err(rhai_error(format!("parse: expected one form, found {count}"))),
        }
    });
    engine.register_fn("parse_all", |text: &str| -> Result<Array, Box<EvalAltResult>> { parse_text(text) });
    let templates = Rc::new(RefCell::new(Templates::default()));
    let (counter, cache) = (gensym.clone(), templates.clone());
    engine.register_fn("quote", move |text: &str, map: Map| -> Result<Dynamic, Box<EvalAltResult>> {
        let template = cache.borrow_mut().get(text)?;
        fill_template(&template, &map, &counter)
    });
    let (counter, cache) = (gensym.clone(), templates.clone());
    engine.register_fn("quote", move |text: &str| -> Result<Dynamic, Box<EvalAltResult>> {
        let template = cache.borrow_mut().get(text)?;
        fill_template(&template, &Map::new(), &counter)
    });
    let (counter, cache, flag, most) = (gensym.clone(), templates, interrupt.clone(), limits.array_size);
    let time_limit = std::time::Duration::from_millis(limits.time_ms);
    engine.register_fn(
        "quote_each",
        move |text: &str, map: Map, hole: &str, count: INT| -> Result<Array, Box<EvalAltResult>> {
            // As Rhai's own arrays: at most `array-size` elements, no bound when it is 0.
            if most > 0 && usize::try_from(count).is_ok_and(|count| count > most) {
                return Err(EvalAltResult::ErrorDataTooLarge("Size of array".into(), Position::NONE).into());
            }
            let template = cache.borrow_mut().get(text)?;
            quote_each(&template, map, hole, count, &counter, &flag, time_limit)
        },
    );
    let counter = gensym.clone();
    engine.register_fn("fill", move |form: Dynamic, map: Map| fill(form, &map, &counter));
    engine.register_fn("show", |form: Dynamic| -> Result<String, Box<EvalAltResult>> {
        let sexp = to_sexp(&form, NO_SPAN).map_err(rhai_error)?;
        Ok(pretty(&sexp, 0))
    });
    engine.register_fn("balanced", balanced);
    let session = view.clone();
    engine.register_fn("signature", move |name: &str| {
        session.borrow().signatures.get(name).map_or(Dynamic::UNIT, to_dynamic)
    });
    let session = view.clone();
    engine.register_fn("struct_fields", move |name: &str| {
        session.borrow().struct_fields.get(name).map_or(Dynamic::UNIT, |fields| {
            let array: Array = fields
                .iter()
                .map(|(field, ty)| Dynamic::from_array(vec![Dynamic::from(Sym(field.as_str().into())), to_dynamic(ty)]))
                .collect();
            Dynamic::from_array(array)
        })
    });
    let session = view.clone();
    engine.register_fn("global_value", move |name: &str| {
        session.borrow().global_values.get(name).map_or(Dynamic::UNIT, to_dynamic)
    });
}

const NO_SPAN: Span = Span { source: SourceId(u32::MAX), start: 0, end: 0 };

/// `balanced(op, forms)`: the forms joined into nested `(op x y)`, neighbours paired level by
/// level (an odd one out moves up a level), so the tree is balanced; one form gives itself,
/// none gives `()`. Done in Rust because in Rhai each pairing step copies or size-checks the
/// whole work list of forms.
fn balanced(op: Dynamic, forms: Array) -> Dynamic {
    let mut level = forms;
    while level.len() > 1 {
        let mut next = Array::with_capacity(level.len().div_ceil(2));
        let mut items = level.into_iter();
        while let Some(first) = items.next() {
            match items.next() {
                Some(second) => next.push(Dynamic::from_array(vec![op.clone(), first, second])),
                None => next.push(first),
            }
        }
        level = next;
    }
    level.pop().unwrap_or(Dynamic::UNIT)
}

fn parse_text(text: &str) -> Result<Array, Box<EvalAltResult>> {
    Ok(parse_forms(text)?.iter().map(to_dynamic).collect())
}

fn parse_forms(text: &str) -> Result<Vec<Sexp>, Box<EvalAltResult>> {
    reader::read_template(NO_SPAN.source, text).map_err(|diagnostics| {
        rhai_error(format!(
            "parse: {}",
            diagnostics.first().map_or("bad syntax", |diagnostic| diagnostic.message.as_str())
        ))
    })
}

/// `quote`'s templates, read and compiled once per text: a generator calls `quote` with the
/// same text in a loop, and reading it again each time cost as much as filling it.
#[derive(Default)]
struct Templates {
    parsed: HashMap<String, Rc<Piece>>,
}

impl Templates {
    /// Enough for every template of a session's macros; past it the cache starts over, so a
    /// script quoting computed texts cannot grow it without bound.
    const CAPACITY: usize = 1024;

    fn get(&mut self, text: &str) -> Result<Rc<Piece>, Box<EvalAltResult>> {
        if let Some(template) = self.parsed.get(text) {
            return Ok(template.clone());
        }
        let mut forms = parse_forms(text)?;
        if forms.len() != 1 {
            return Err(rhai_error(format!("quote: the template must be one form, found {}", forms.len())));
        }
        if self.parsed.len() >= Self::CAPACITY {
            self.parsed.clear();
        }
        let template = Rc::new(compile_form(&forms.remove(0), 1));
        self.parsed.insert(text.to_string(), template.clone());
        Ok(template)
    }
}

/// A form as Rhai data: lists become arrays, symbols `Sym`, literals themselves.
pub(crate) fn to_dynamic(form: &Sexp) -> Dynamic {
    let wrap = |head: &str, inner: &Sexp| Dynamic::from_array(vec![Dynamic::from(Sym(head.into())), to_dynamic(inner)]);
    match &form.kind {
        SexpKind::List(items) => Dynamic::from_array(items.iter().map(to_dynamic).collect()),
        SexpKind::Symbol(name) => Dynamic::from(Sym(name.clone())),
        SexpKind::Int(value) => Dynamic::from(*value as INT),
        SexpKind::Float(value) => Dynamic::from(*value),
        SexpKind::Bool(value) => Dynamic::from(*value),
        SexpKind::Str(bytes) => Dynamic::from(String::from_utf8_lossy(bytes).into_owned()),
        SexpKind::Keyword(name) => Dynamic::from(Sym(format!("#:{name}").into())),
        SexpKind::Quasiquote(inner) => wrap("quasiquote", inner),
        SexpKind::Unquote(inner) => wrap("unquote", inner),
        SexpKind::UnquoteSplicing(inner) => wrap("unquote-splicing", inner),
    }
}

fn rhai_type_name(value: &Dynamic) -> String {
    let name = value.type_name();
    match name {
        _ if value.is_map() => "map".into(),
        _ if value.is_char() => "char".into(),
        _ if value.is::<rhai::FnPtr>() => "function pointer".into(),
        _ => name.rsplit("::").next().unwrap_or(name).to_string(),
    }
}

/// Rhai data back to a form; every node gets `span` (the unquote that produced it).
/// Values are read in place: cloning a `Dynamic` array copies it deeply, which made
/// converting a deep generated tree quadratic.
pub(crate) fn to_sexp(value: &Dynamic, span: Span) -> Result<Sexp, String> {
    let make = |kind| Ok(Sexp { kind, span });
    if let Ok(array) = value.as_array_ref() {
        if let [head, inner] = array.as_slice() {
            let wrapper: Option<fn(Box<Sexp>) -> SexpKind> =
                head.read_lock::<Sym>().and_then(|symbol| match &*symbol.0 {
                    "quasiquote" => Some(SexpKind::Quasiquote as fn(Box<Sexp>) -> SexpKind),
                    "unquote" => Some(SexpKind::Unquote as fn(Box<Sexp>) -> SexpKind),
                    "unquote-splicing" => Some(SexpKind::UnquoteSplicing as fn(Box<Sexp>) -> SexpKind),
                    _ => None,
                });
            if let Some(kind) = wrapper {
                return make(kind(Box::new(to_sexp(inner, span)?)));
            }
        }
        let items = array.iter().map(|item| to_sexp(item, span)).collect::<Result<_, _>>()?;
        return make(SexpKind::List(items));
    }
    if let Some(symbol) = value.read_lock::<Sym>() {
        return make(SexpKind::Symbol(symbol.0.clone()));
    }
    if let Ok(value) = value.as_int() {
        return make(SexpKind::Int(value as i128));
    }
    if let Ok(value) = value.as_float() {
        return make(SexpKind::Float(value));
    }
    if let Ok(value) = value.as_bool() {
        return make(SexpKind::Bool(value));
    }
    if let Ok(text) = value.as_immutable_string_ref() {
        return make(SexpKind::Str(text.as_bytes().to_vec()));
    }
    if value.is_unit() {
        return Err("the Rhai value `()` has no C-Lisp form".into());
    }
    Err(format!("Rhai value of type {} has no C-Lisp form", rhai_type_name(value)))
}

/// Fills a template: level-1 `(unquote NAME)` from the map, `(unquote-splicing NAME)` spliced,
/// and every symbol ending in `#` replaced by one fresh gensym per call.
fn fill(form: Dynamic, map: &Map, counter: &Rc<Cell<u64>>) -> Result<Dynamic, Box<EvalAltResult>> {
    let mut fresh: HashMap<String, Sym> = HashMap::new();
    fill_level(form, map, counter, &mut fresh, 1)
}

fn unquote_name(value: &Dynamic, head: &str) -> Option<String> {
    let array = value.as_array_ref().ok()?;
    match array.as_slice() {
        [first, name] if first.read_lock::<Sym>().is_some_and(|symbol| &*symbol.0 == head) => {
            name.read_lock::<Sym>().map(|symbol| symbol.0.to_string())
        }
        _ => None,
    }
}

fn lookup_hole(map: &Map, name: &str) -> Result<Dynamic, Box<EvalAltResult>> {
    map.get(name)
        .or_else(|| map.get(name.replace('-', "_").as_str()))
        .cloned()
        .ok_or_else(|| rhai_error(format!("fill: the template uses `{name}`, which the map does not have")))
}

/// A `,@NAME` hole: the elements of NAME's array go into `out` (nothing for `()`).
fn splice_hole(map: &Map, name: &str, out: &mut Array) -> Result<(), Box<EvalAltResult>> {
    let value = lookup_hole(map, name)?;
    if value.is_unit() {
        return Ok(());
    }
    let elements = value.into_array().map_err(|name| rhai_error(format!("fill: `,@` needs an array, found {name}")))?;
    out.extend(elements);
    Ok(())
}

fn fill_level(
    form: Dynamic,
    map: &Map,
    counter: &Rc<Cell<u64>>,
    fresh: &mut HashMap<String, Sym>,
    level: usize,
) -> Result<Dynamic, Box<EvalAltResult>> {
    if let Some(symbol) = form.read_lock::<Sym>().map(|symbol| symbol.clone()) {
        return Ok(gensym(&symbol.0, counter, fresh).map_or(form, Dynamic::from));
    }
    if !form.is_array() {
        return Ok(form);
    }
    if level == 1 {
        if let Some(name) = unquote_name(&form, "unquote") {
            return lookup_hole(map, &name);
        }
    }
    let array = form.into_array().unwrap_or_default();
    let head = array.first().and_then(|head| head.read_lock::<Sym>().map(|symbol| symbol.0.to_string()));
    // A nested quasiquote raises the level of its operand; an unquote lowers it.
    let operand_level = match head.as_deref() {
        Some("quasiquote") if array.len() == 2 => level + 1,
        Some("unquote" | "unquote-splicing") if array.len() == 2 => level.saturating_sub(1).max(1),
        _ => level,
    };
    let mut out = Array::new();
    for (index, item) in array.into_iter().enumerate() {
        let item_level = if index == 1 { operand_level } else { level };
        if item_level == 1 && (index > 0 || head.is_none()) {
            if let Some(name) = unquote_name(&item, "unquote-splicing") {
                splice_hole(map, &name, &mut out)?;
                continue;
            }
        }
        out.push(fill_level(item, map, counter, fresh, item_level)?);
    }
    Ok(Dynamic::from_array(out))
}

/// A `quote` template compiled for filling: `fill_level`'s rules applied once, when the text is
/// first quoted, so a fill only copies what is fixed and looks up what is not. A wrapper `,x`
/// (`SexpKind::Unquote`) reads as the array `[unquote, x]` that `to_dynamic` makes of it, and a
/// keyword as its symbol `#:key`.
#[derive(Debug)]
enum Piece {
    /// Fixed: a symbol already made (a fill clones it, without building its name again), a
    /// literal, a wrapper's head.
    Leaf(Dynamic),
    /// `x#`: the fill's gensym for it.
    Gensym(String),
    /// A level-1 `,NAME`: the map's value.
    Hole(String),
    /// A level-1 `,@NAME` inside a list: the elements of the map's array.
    Splice(String),
    List(Vec<Piece>),
}

/// An element of a template list while it is compiled: a form, or the head symbol of a
/// wrapper (`quasiquote`, `unquote`, `unquote-splicing`).
#[derive(Clone, Copy)]
enum TemplateItem<'f> {
    Head(&'static str),
    Form(&'f Sexp),
}

/// A form's text as a `Sym`: a symbol's name, or a keyword's `#:key`.
fn symbol_text(form: &Sexp) -> Option<std::borrow::Cow<'_, str>> {
    match &form.kind {
        SexpKind::Symbol(name) => Some(std::borrow::Cow::Borrowed(&**name)),
        SexpKind::Keyword(name) => Some(format!("#:{name}").into()),
        _ => None,
    }
}

/// `unquote_name` over a template form: NAME if the form is `(head NAME)`.
fn template_hole<'f>(form: &'f Sexp, head: &str) -> Option<std::borrow::Cow<'f, str>> {
    match &form.kind {
        SexpKind::Unquote(inner) if head == "unquote" => symbol_text(inner),
        SexpKind::UnquoteSplicing(inner) if head == "unquote-splicing" => symbol_text(inner),
        SexpKind::List(items) => match items.as_slice() {
            [first, name] if symbol_text(first).is_some_and(|text| text == head) => symbol_text(name),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a template symbol is a gensym request `x#`.
fn is_gensym_name(name: &str) -> bool {
    name.strip_suffix('#').is_some_and(|stem| !stem.is_empty() && !stem.contains('#'))
}

fn compile_form(form: &Sexp, level: usize) -> Piece {
    let (wrapper, inner) = match &form.kind {
        SexpKind::Symbol(name) if is_gensym_name(name) => return Piece::Gensym(name.to_string()),
        SexpKind::Symbol(name) => return Piece::Leaf(Dynamic::from(Sym(name.clone()))),
        SexpKind::List(items) => return compile_items(items.iter().map(TemplateItem::Form), form, level),
        SexpKind::Quasiquote(inner) => ("quasiquote", inner),
        SexpKind::Unquote(inner) => ("unquote", inner),
        SexpKind::UnquoteSplicing(inner) => ("unquote-splicing", inner),
        _ => return Piece::Leaf(to_dynamic(form)),
    };
    let items = [TemplateItem::Head(wrapper), TemplateItem::Form(inner)];
    compile_items(items.into_iter(), form, level)
}

fn compile_items<'f>(
    items: impl ExactSizeIterator<Item = TemplateItem<'f>> + Clone,
    form: &Sexp,
    level: usize,
) -> Piece {
    if level == 1 {
        if let Some(name) = template_hole(form, "unquote") {
            return Piece::Hole(name.into_owned());
        }
    }
    let length = items.len();
    let head = match items.clone().next() {
        Some(TemplateItem::Head(head)) => Some(std::borrow::Cow::Borrowed(head)),
        Some(TemplateItem::Form(first)) => symbol_text(first),
        None => None,
    };
    // A nested quasiquote raises the level of its operand; an unquote lowers it.
    let operand_level = match head.as_deref() {
        Some("quasiquote") if length == 2 => level + 1,
        Some("unquote" | "unquote-splicing") if length == 2 => level.saturating_sub(1).max(1),
        _ => level,
    };
    let mut pieces = Vec::with_capacity(length);
    for (index, item) in items.enumerate() {
        let item_level = if index == 1 { operand_level } else { level };
        let item = match item {
            TemplateItem::Head(head) => {
                pieces.push(Piece::Leaf(Dynamic::from(Sym(head.into()))));
                continue;
            }
            TemplateItem::Form(item) => item,
        };
        if item_level == 1 && (index > 0 || head.is_none()) {
            if let Some(name) = template_hole(item, "unquote-splicing") {
                pieces.push(Piece::Splice(name.into_owned()));
                continue;
            }
        }
        pieces.push(compile_form(item, item_level));
    }
    Piece::List(pieces)
}

/// `quote`'s fill of a compiled template; every `x#` of one fill gets the same gensym.
fn fill_template(template: &Piece, map: &Map, counter: &Rc<Cell<u64>>) -> Result<Dynamic, Box<EvalAltResult>> {
    let mut fresh: HashMap<String, Sym> = HashMap::new();
    fill_piece(template, map, counter, &mut fresh)
}

fn fill_piece(
    piece: &Piece,
    map: &Map,
    counter: &Rc<Cell<u64>>,
    fresh: &mut HashMap<String, Sym>,
) -> Result<Dynamic, Box<EvalAltResult>> {
    match piece {
        Piece::Leaf(value) => Ok(value.clone()),
        Piece::Gensym(name) => {
            Ok(gensym(name, counter, fresh).map_or_else(|| Dynamic::from(Sym(name.as_str().into())), Dynamic::from))
        }
        Piece::Hole(name) => lookup_hole(map, name),
        // Compiled only inside lists, where the list's fill splices it.
        Piece::Splice(name) => lookup_hole(map, name),
        Piece::List(pieces) => {
            let mut out = Array::with_capacity(pieces.len());
            for piece in pieces {
                match piece {
                    Piece::Splice(name) => splice_hole(map, name, &mut out)?,
                    piece => out.push(fill_piece(piece, map, counter, fresh)?),
                }
            }
            Ok(Dynamic::from_array(out))
        }
    }
}

/// `quote_each`: the template filled `count` times, its hole `hole` being 0, 1, … in turn and
/// the others from `map`, each fill with its own gensyms (as `count` calls of `quote`). Built
/// here in one array: a Rhai loop storing each form into an array paid for checking the whole
/// array's size after every store, and for a map per call. No Rhai operation runs here for the
/// script's own checks to see, so the interrupt and the `time-ms` limit (its own time) are
/// checked here, between two fills.
fn quote_each(
    template: &Piece,
    mut map: Map,
    hole: &str,
    count: INT,
    counter: &Rc<Cell<u64>>,
    interrupt: &AtomicBool,
    time_limit: std::time::Duration,
) -> Result<Array, Box<EvalAltResult>> {
    if count < 0 {
        return Err(rhai_error(format!("quote_each: the count must not be negative, not {count}")));
    }
    let started = std::time::Instant::now();
    let mut forms = Array::with_capacity(count.min(1 << 16) as usize);
    for index in 0..count {
        if interrupt.load(Ordering::Relaxed) {
            return Err(EvalAltResult::ErrorTerminated(Dynamic::from("interrupted"), Position::NONE).into());
        }
        if index % 256 == 255 && started.elapsed() > time_limit {
            return Err(EvalAltResult::ErrorTerminated(Dynamic::from(TIME), Position::NONE).into());
        }
        map.insert(hole.into(), Dynamic::from(index));
        forms.push(fill_template(template, &map, counter)?);
    }
    Ok(forms)
}

/// The call's gensym for a template symbol `x#` (the same one for every `x#` of the call), or
/// `None` for any other symbol.
fn gensym(name: &str, counter: &Rc<Cell<u64>>, fresh: &mut HashMap<String, Sym>) -> Option<Sym> {
    if !is_gensym_name(name) {
        return None;
    }
    let stem = &name[..name.len() - 1];
    let sym = fresh.entry(name.to_string()).or_insert_with(|| {
        counter.set(counter.get() + 1);
        Sym(format!("{stem}#{}", counter.get()).into())
    });
    Some(sym.clone())
}

// ---------------------------------------------------------------------------------------------
// The walk over a cell.

struct Expander<'s> {
    stage: &'s mut Stage,
    sources: &'s mut Vec<SourceFile>,
    sites: Vec<ExpansionSite>,
    single_level: bool,
    nodes: usize,
    warnings: Vec<Diagnostic>,
    includes: Vec<(String, HashSet<String>)>,
}

impl Expander<'_> {
    fn top_level(&mut self, forms: Vec<Sexp>) -> Result<Vec<Sexp>, Failure> {
        let mut out = Vec::new();
        for form in forms {
            match form.head() {
                Some("rhai") => self.rhai_form(&form)?,
                Some("rhai-file") => self.rhai_file_form(&form)?,
                Some("include") => {
                    let mut request = header::Request::from_form(&form)?;
                    // As in C, `"x.h"` is looked for beside the file that includes it.
                    if let Some(directory) = self.file_directory(form.span.source) {
                        request.flags.push(format!("-iquote{}", directory.display()));
                    }
                    let defined = self.stage.view.borrow().defined.clone();
                    let mut included = header::include(&request, &defined, &self.stage.interrupt)?;
                    out.append(&mut included.forms);
                    self.take_include(included, true);
                }
                _ => match form.kind {
                    // `,@(f)` at the top of a cell splices definitions into it.
                    SexpKind::UnquoteSplicing(ref inner) => {
                        let spliced = self.splice(inner, form.span, 0)?;
                        for item in spliced {
                            out.extend(self.form(item, 1, 1)?);
                        }
                    }
                    _ => out.extend(self.form(form, 1, 0)?),
                },
            }
        }
        if self.nodes > self.stage.limits.nodes {
            let span = out.first().map_or(NO_SPAN, |form| form.span);
            return Err(self.stage.limit_failure("nodes", self.stage.limits.nodes as u64, span));
        }
        Ok(out)
    }

    /// The directory of a source that is a file (`quasi run`, `:load`), not a cell.
    fn file_directory(&self, source: SourceId) -> Option<std::path::PathBuf> {
        let file = self.sources.get(source.0 as usize)?;
        let path = std::path::Path::new(&file.name);
        if !path.is_file() {
            return None;
        }
        let directory = path.parent()?;
        Some(if directory.as_os_str().is_empty() { std::path::PathBuf::from(".") } else { directory.to_path_buf() })
    }

    /// Takes what the Rhai `include` built-in made while Rhai ran: its constants and warnings
    /// always, its summary only when its forms were `spliced` into the cell (elsewhere Rhai just
    /// got them as data).
    fn take_pending_includes(&mut self, spliced: bool) {
        let pending: Vec<Included> = std::mem::take(&mut *self.stage.included.borrow_mut());
        for included in pending {
            self.take_include(included, spliced);
        }
    }

    /// Makes an include's constants Rhai variables of the session and keeps its report.
    fn take_include(&mut self, included: Included, declared: bool) {
        let Included { constants, warnings, names, summary, .. } = included;
        let scope = &mut self.stage.state.scope;
        for (name, value) in constants {
            let value = match value {
                ConstantForm::Type(form) => to_dynamic(&form),
                ConstantForm::Int(value) => Dynamic::from(value as INT),
                ConstantForm::Float(value) => Dynamic::from(value),
            };
            // Variables, not constants: calls re-declare every constant (see `call`).
            if !scope.is_constant(&name).unwrap_or(false) {
                scope.set_or_push(name, value);
            }
        }
        self.stage.call_programs.clear();
        self.warnings.extend(warnings);
        if declared {
            self.includes.push((summary, names));
        }
    }

    fn string_argument<'f>(&self, form: &'f Sexp, name: &str) -> Result<(&'f [u8], Span), Failure> {
        match form.list() {
            Some([_, argument]) => match &argument.kind {
                SexpKind::Str(bytes) => Ok((bytes, argument.span)),
                _ => Err(macro_error(argument.span, format!("`{name}` takes a string"))),
            },
            _ => Err(macro_error(form.span, format!("`{name}` is `({name} \"…\")`"))),
        }
    }

    fn rhai_form(&mut self, form: &Sexp) -> Result<(), Failure> {
        let (bytes, span) = self.string_argument(form, "rhai")?;
        let script = String::from_utf8_lossy(bytes).into_owned();
        // Rhai positions count in the string's text; its first byte follows the opening quote.
        self.stage.run_script(&script, span.source, span.start as usize + 1, form.span)?;
        self.take_pending_includes(false);
        Ok(())
    }

    fn rhai_file_form(&mut self, form: &Sexp) -> Result<(), Failure> {
        let (bytes, span) = self.string_argument(form, "rhai-file")?;
        let path = String::from_utf8_lossy(bytes).into_owned();
        let text = std::fs::read_to_string(&path).map_err(|error| {
            Box::new(Diagnostic::error(Kind::Io, format!("cannot read `{path}`: {error}")).with_label(span, ""))
        })?;
        self.sources.push(SourceFile { name: path, text: text.clone() });
        let source = SourceId(self.sources.len() as u32 - 1);
        self.stage.run_script(&text, source, 0, form.span)?;
        self.take_pending_includes(false);
        Ok(())
    }

    fn count(&mut self, form: &Sexp) {
        self.nodes += 1;
        if let SexpKind::List(items) = &form.kind {
            for item in items {
                self.count(item);
            }
        }
    }

    /// Expands one form at a quasiquote level; may give several forms only for splices
    /// handled by the caller, so this returns exactly one form in a vector.
    fn form(&mut self, form: Sexp, level: usize, depth: usize) -> Result<Vec<Sexp>, Failure> {
        let span = form.span;
        match form.kind {
            SexpKind::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item.kind {
                        SexpKind::UnquoteSplicing(ref inner) if level == 1 => {
                            let spliced = self.splice(inner, item.span, depth)?;
                            for element in spliced {
                                out.extend(self.reexpand(element, depth)?);
                            }
                        }
                        _ => out.extend(self.form(item, level, depth)?),
                    }
                }
                let list = Sexp { kind: SexpKind::List(out), span };
                self.nodes += 1;
                Ok(vec![list])
            }
            SexpKind::Quasiquote(inner) => {
                let inner = self.single(*inner, level + 1, depth)?;
                Ok(vec![Sexp { kind: SexpKind::Quasiquote(Box::new(inner)), span }])
            }
            SexpKind::Unquote(inner) if level == 1 => {
                let value = self.evaluate(&inner, span, depth)?;
                self.take_pending_includes(false);
                let expanded = to_sexp(&value, span)
                    .map_err(|message| macro_error(span, format!("{message} (from `{}`)", written(&inner, ","))))?;
                self.record_site(span, &inner, ",", vec![value]);
                self.reexpand(expanded, depth)
            }
            SexpKind::Unquote(inner) => {
                let inner = self.single(*inner, level - 1, depth)?;
                Ok(vec![Sexp { kind: SexpKind::Unquote(Box::new(inner)), span }])
            }
            SexpKind::UnquoteSplicing(inner) if level == 1 => Err(macro_error(
                span,
                format!("`,@` splices into a list; here it stands alone (`{}`)", written(&inner, ",@")),
            )),
            SexpKind::UnquoteSplicing(inner) => {
                let inner = self.single(*inner, level - 1, depth)?;
                Ok(vec![Sexp { kind: SexpKind::UnquoteSplicing(Box::new(inner)), span }])
            }
            kind => {
                self.nodes += 1;
                Ok(vec![Sexp { kind, span }])
            }
        }
    }

    fn single(&mut self, form: Sexp, level: usize, depth: usize) -> Result<Sexp, Failure> {
        let span = form.span;
        let mut forms = self.form(form, level, depth)?;
        match forms.len() {
            1 => Ok(forms.remove(0)),
            _ => Err(macro_error(span, "an unquote here must give exactly one form")),
        }
    }

    /// Results of unquotes are expanded again, unless `:expand 1` asked for one level.
    fn reexpand(&mut self, form: Sexp, depth: usize) -> Result<Vec<Sexp>, Failure> {
        if self.single_level {
            self.count(&form);
            return Ok(vec![form]);
        }
        if depth + 1 > self.stage.limits.depth {
            return Err(self.stage.limit_failure("depth", self.stage.limits.depth as u64, form.span));
        }
        // Most results hold no (quasi)quote: expanding them again would rebuild every list
        // unchanged, so they are only counted, as `form` would count them.
        if !has_quotes(&form) {
            self.count(&form);
            return Ok(vec![form]);
        }
        self.form(form, 1, depth + 1)
    }

    fn record_site(&mut self, span: Span, inner: &Sexp, prefix: &str, values: Vec<Dynamic>) {
        let expanded = ExpandedForms { values, span };
        self.sites.push(ExpansionSite { span, written: written(inner, prefix), expanded });
    }

    fn splice(&mut self, inner: &Sexp, span: Span, depth: usize) -> Result<Vec<Sexp>, Failure> {
        let value = self.evaluate(inner, span, depth)?;
        self.take_pending_includes(true);
        if value.is_unit() {
            return Ok(Vec::new());
        }
        let type_name = rhai_type_name(&value);
        let Ok(array) = value.into_array() else {
            return Err(macro_error(span, format!("`,@{inner}` must give an array to splice, found {type_name}")));
        };
        let forms = array
            .iter()
            .map(|item| to_sexp(item, span))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|message| macro_error(span, message))?;
        self.record_site(span, inner, ",@", array);
        Ok(forms)
    }

    /// Evaluates what follows `,`: a variable name, or a call `(F ARG…)`.
    fn evaluate(&mut self, inner: &Sexp, span: Span, depth: usize) -> Result<Dynamic, Failure> {
        match &inner.kind {
            SexpKind::Symbol(name) => {
                let rhai_name = name.replace('-', "_");
                self.stage.state.scope.get_value::<Dynamic>(&rhai_name).ok_or_else(|| {
                    let mut diagnostic = macro_error(span, format!("no Rhai variable `{name}`"));
                    diagnostic
                        .notes
                        .push("define it with (rhai \"let NAME = …;\") or (rhai \"const NAME = …;\")".into());
                    diagnostic
                })
            }
            SexpKind::List(items) => {
                let Some((function, arguments)) = items.split_first() else {
                    return Err(macro_error(
                        span,
                        "an unquote needs a Rhai function call `(F ARG…)` or a variable name",
                    ));
                };
                let Some(function_name) = function.symbol() else {
                    return Err(macro_error(function.span, "the function of an unquoted call must be a name"));
                };
                let args = self.arguments(arguments, depth)?;
                self.call(function_name, args, span)
            }
            _ => Err(macro_error(
                span,
                format!("cannot unquote `{inner}`: an unquote takes a Rhai variable name or a call (F ARG…)"),
            )),
        }
    }

    /// Arguments are expanded first (their own unquotes run), then passed as data;
    /// `(#:key V)` arguments are gathered into one map passed last.
    fn arguments(&mut self, arguments: &[Sexp], depth: usize) -> Result<Vec<Dynamic>, Failure> {
        let mut values = Vec::new();
        let mut keywords = Map::new();
        for argument in arguments {
            if let Some([key, value]) = argument.list() {
                if let SexpKind::Keyword(name) = &key.kind {
                    let value = self.single(value.clone(), 1, depth)?;
                    keywords.insert(name.replace('-', "_").into(), argument_value(&value));
                    continue;
                }
            }
            let expanded = self.single(argument.clone(), 1, depth)?;
            values.push(argument_value(&expanded));
        }
        if !keywords.is_empty() {
            values.push(Dynamic::from_map(keywords));
        }
        Ok(values)
    }

    fn call(&mut self, name: &str, args: Vec<Dynamic>, span: Span) -> Result<Dynamic, Failure> {
        let rhai_name = name.replace('-', "_");
        let arity = args.len();
        let arities: Vec<usize> = self
            .stage
            .state
            .functions
            .iter_functions()
            .filter(|function| function.name == rhai_name)
            .map(|function| function.params.len())
            .collect();
        if !arities.is_empty() && !arities.contains(&arity) {
            let mut counts: Vec<String> = arities.iter().map(usize::to_string).collect();
            counts.sort();
            counts.dedup();
            return Err(macro_error(
                span,
                format!("Rhai function `{rhai_name}` takes {} argument(s), found {arity}", counts.join(" or ")),
            ));
        }
        let stage = &mut *self.stage;
        // The call runs as a tiny script with the session's constants re-declared first, so that
        // `global::NAME` works inside functions as it does in the script that defined them.
        let scope = &mut stage.state.scope;
        let base = scope.len();
        let mut constants: Vec<String> =
            scope.iter().filter(|(_, constant, _)| *constant).map(|(name, _, _)| name.to_string()).collect();
        constants.sort();
        constants.dedup();
        let mut script: String = constants.iter().map(|constant| format!("const {constant} = {constant};")).collect();
        let names: Vec<String> = (0..arity).map(|index| format!("quasi_argument_{index}")).collect();
        for (argument_name, value) in names.iter().zip(args) {
            scope.push_dynamic(argument_name.clone(), value);
        }
        script.push_str(&format!("{rhai_name}({})", names.join(", ")));
        if stage.call_programs.len() >= 256 && !stage.call_programs.contains_key(&script) {
            stage.call_programs.clear();
        }
        let program = match stage.call_programs.entry(script) {
            Entry::Occupied(entry) => Ok(&*entry.into_mut()),
            Entry::Vacant(entry) => stage
                .engine
                .compile_with_scope(scope, entry.key())
                .map(|call| &*entry.insert(stage.state.functions.merge(&call)))
                .map_err(|error| {
                    Box::new(EvalAltResult::ErrorRuntime(Dynamic::from(error.to_string()), Position::NONE))
                }),
        };
        let result = program.and_then(|program| stage.engine.eval_ast_with_scope::<Dynamic>(scope, program));
        scope.rewind(base);
        let script_key = stage.state.function_scripts.get(&format!("{rhai_name}/{arity}")).cloned();
        result.map_err(|error| match *error {
            EvalAltResult::ErrorFunctionNotFound(ref signature, _)
                if signature.starts_with(&format!("{rhai_name} (")) || signature == &rhai_name =>
            {
                macro_error(span, format!("no Rhai function `{rhai_name}`"))
            }
            _ => stage.runtime_diagnostic(&error, script_key.as_deref(), span),
        })
    }
}

/// Whether a form holds a quasiquote, unquote or splice anywhere.
fn has_quotes(form: &Sexp) -> bool {
    match &form.kind {
        SexpKind::List(items) => items.iter().any(has_quotes),
        SexpKind::Quasiquote(_) | SexpKind::Unquote(_) | SexpKind::UnquoteSplicing(_) => true,
        _ => false,
    }
}

/// An argument as data: a backquoted template loses its `quasiquote` wrapper.
fn argument_value(form: &Sexp) -> Dynamic {
    match &form.kind {
        SexpKind::Quasiquote(inner) => to_dynamic(inner),
        _ => to_dynamic(form),
    }
}

fn written(inner: &Sexp, prefix: &str) -> String {
    format!("{prefix}{inner}")
}

// ---------------------------------------------------------------------------------------------
// Pretty printing.

const WIDTH: usize = 100;

/// A form as indented C-Lisp text: definitions and loops one statement per line, anything
/// else on one line when it fits.
pub(crate) fn pretty(form: &Sexp, indent: usize) -> String {
    let flat = form.to_string();
    let Some(items) = form.list() else { return flat };
    let head = form.head().unwrap_or("");
    let always_break =
        head.starts_with("define") && items.len() > 2 || matches!(head, "c-lisp" | "cuda-lisp" | "brilisp");
    let body_from = match head {
        _ if head.starts_with("define") => 2,
        "for" | "while" => 2,
        "if" => 2,
        _ => 1,
    };
    let loop_breaks = matches!(head, "for" | "while") && items.len() > 3;
    if !always_break && !loop_breaks && indent + flat.len() <= WIDTH {
        return flat;
    }
    if items.len() <= body_from {
        return flat;
    }
    let mut text = String::from("(");
    let first: Vec<String> = items[..body_from].iter().map(|item| item.to_string()).collect();
    text.push_str(&first.join(" "));
    let mut rest = &items[body_from..];
    // Ordinary forms keep their first operand on the head's line, Lisp style.
    if body_from == 1 && !always_break {
        if let Some((operand, others)) = rest.split_first() {
            text.push(' ');
            text.push_str(&pretty(operand, indent + text.len()));
            rest = others;
        }
    }
    for item in rest {
        text.push('\n');
        text.push_str(&" ".repeat(indent + 2));
        text.push_str(&pretty(item, indent + 2));
    }
    text.push(')');
    text
}

/// The interrupt flag shared with front ends.
pub(crate) fn new_interrupt_flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

#[cfg(test)]
mod tests;
