//! Bench: `(bench EXPR …)` and `(autotune NAME …)` — repeated timed runs of compiled code,
//! statistics, and Caiman-style "time every variant" tuning over a Rhai generator, or over
//! hand-written implementations (`impls`).
//!
//! The timing loop is itself C-Lisp, generated here and compiled like any cell, so a run costs
//! one clock read per sample and no call back into Rust; parameters and samples live in session
//! buffers whose addresses are literals in the generated code.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::abi::RT_CLOCK as CLOCK;
use crate::check::{Env, FunctionEntry, FunctionKind};
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::{Sexp, SexpKind, Span};
use crate::timing::{AutotuneReport, BenchReport, Throughput, VariantReport};
use crate::types::{Signature, Ty};
use crate::value;
use crate::{Item, Outcome};

/// Samples are timed over enough evaluations to last at least this long, so the clock's own
/// cost (tens of nanoseconds) stays below a percent.
const SAMPLE_TARGET_NS: f64 = 10_000.0;
const MAX_SAMPLES: usize = 100_000;

fn sym(text: &str, span: Span) -> Sexp {
    Sexp { kind: SexpKind::Symbol(text.into()), span }
}

fn int(value: i128, span: Span) -> Sexp {
    Sexp { kind: SexpKind::Int(value), span }
}

fn list(items: Vec<Sexp>, span: Span) -> Sexp {
    Sexp { kind: SexpKind::List(items), span }
}

fn syntax(span: Span, message: impl Into<String>) -> Vec<Diagnostic> {
    vec![Diagnostic::error(Kind::Syntax, message).with_label(span, "")]
}

/// Options of a `(bench …)` form.
struct BenchOptions {
    seconds: f64,
    iterations: Option<u64>,
    warmup: u64,
    bytes: Option<Sexp>,
    flops: Option<Sexp>,
}

fn bench_options(options: &[Sexp]) -> Result<BenchOptions, Vec<Diagnostic>> {
    let mut parsed = BenchOptions { seconds: 1.0, iterations: None, warmup: 3, bytes: None, flops: None };
    for option in options {
        let Some([name, value]) = option.list() else {
            return Err(syntax(
                option.span,
                "a bench option is `(time S)`, `(iters N)`, `(warmup N)`, `(bytes E)` or `(flops E)`",
            ));
        };
        let number = || match value.kind {
            SexpKind::Int(number) if number >= 0 => Some(number as f64),
            SexpKind::Float(number) if number >= 0.0 => Some(number),
            _ => None,
        };
        match (name.symbol(), number()) {
            (Some("time"), Some(seconds)) => parsed.seconds = seconds,
            (Some("iters"), Some(count)) if count >= 1.0 => parsed.iterations = Some(count as u64),
            (Some("warmup"), Some(count)) => parsed.warmup = count as u64,
            (Some("bytes"), _) => parsed.bytes = Some(value.clone()),
            (Some("flops"), _) => parsed.flops = Some(value.clone()),
            _ => return Err(syntax(option.span, format!("bad bench option `{option}`"))),
        }
    }
    Ok(parsed)
}

/// A compiled timing loop: `count` samples of `evals` evaluations of an expression.
struct Harness {
    entry: usize,
    parameters: Box<[i64; 2]>,
    samples: Vec<i64>,
}

/// A top-level form compiled quietly: an expression's value (run), or a statement's entries
/// (not run yet).
enum Evaluated {
    Value(String, Ty),
    Statement(Vec<usize>),
}

/// What a quietly compiled cell gives back: the value type of each top-level item (none for a
/// statement) and the entry addresses, in order.
pub(crate) type QuietCell = (Vec<Option<Ty>>, Vec<usize>);

/// What `bench` and `autotune` need of the session: compiling and committing forms quietly,
/// running an entry under the guard, expanding a generator call, and the environment. The
/// session implements it; nothing here sees the rest of the session.
pub(crate) trait Pipeline {
    /// Checks, compiles and commits forms without showing anything; returns the value types of
    /// the top-level items and their entries. `with_clock` lets the code call the bench clock.
    fn compile_quietly(&mut self, forms: &[Sexp], with_clock: bool) -> Result<QuietCell, Vec<Diagnostic>>;
    /// Runs an entry and returns the bytes of its value (`size` bytes); a fault is the error.
    fn call_for_value(&mut self, entry: usize, size: usize, span: Span) -> Result<Vec<u8>, Vec<Diagnostic>>;
    /// Expands one form (a generator call) in the session's Rhai scope.
    fn expand_quietly(&mut self, form: &Sexp) -> Result<Vec<Sexp>, Vec<Diagnostic>>;
    /// The session's environment after the last commit.
    fn env(&self) -> &Env;
}

/// Runs the cell's `(bench …)` and `(autotune …)` forms, in order, after its other code.
pub(crate) fn run_session_forms(pipeline: &mut dyn Pipeline, forms: &[Sexp], outcome: &mut Outcome) {
    let mut bencher = Bencher { pipeline };
    for form in forms {
        let result = match form.head() {
            Some("bench") => bencher.bench_form(form).map(|report| outcome.items.push(Item::Bench(report))),
            _ => bencher.autotune_form(form, outcome),
        };
        if let Err(diagnostics) = result {
            outcome.diagnostics.extend(diagnostics);
            break;
        }
    }
}

/// `bench` and `autotune` over the session's pipeline.
struct Bencher<'p> {
    pipeline: &'p mut dyn Pipeline,
}

impl Bencher<'_> {
    /// Runs an entry for its effects; a fault is the error.
    fn call_quietly(&mut self, entry: usize, span: Span) -> Result<(), Vec<Diagnostic>> {
        self.pipeline.call_for_value(entry, 0, span).map(|_| ())
    }

    fn bench_form(&mut self, form: &Sexp) -> Result<BenchReport, Vec<Diagnostic>> {
        let items = form.list().unwrap_or(&[]);
        let Some(expression) = items.get(1) else {
            return Err(syntax(
                form.span,
                "`bench` is `(bench EXPR [(time S)] [(iters N)] [(warmup N)] [(bytes E)] [(flops E)])`",
            ));
        };
        let options = bench_options(&items[2..])?;
        let mut harness = self.build_harness(expression)?;
        let mut report = self.measure(&mut harness, &options, expression.span)?;
        let median_seconds = report.median.as_secs_f64().max(1e-12);
        // Both when both are given: bytes first, as the options read.
        if let Some(bytes) = &options.bytes {
            report.throughput.push(Throughput::Bytes(self.evaluate_number(bytes)? / median_seconds));
        }
        if let Some(flops) = &options.flops {
            report.throughput.push(Throughput::Flops(self.evaluate_number(flops)? / median_seconds));
        }
        Ok(report)
    }

    /// Compiles the timing loop around an expression (as top-level code, so nothing is defined).
    fn build_harness(&mut self, expression: &Sexp) -> Result<Harness, Vec<Diagnostic>> {
        let span = expression.span;
        let parameters = Box::new([0i64; 2]);
        let samples = vec![0i64; MAX_SAMPLES];
        let pointer = |address: usize, ty: &str| {
            list(
                vec![
                    sym("inttoptr", span),
                    list(vec![sym("int64", span), int(address as i128, span)], span),
                    list(vec![sym("ptr", span), sym(ty, span)], span),
                ],
                span,
            )
        };
        let load = |address: usize, index: i128| {
            list(
                vec![
                    sym("load", span),
                    list(vec![sym("ptradd", span), pointer(address, "int64"), int(index, span)], span),
                ],
                span,
            )
        };
        // Names with `#` cannot clash with anything the expression refers to.
        let (sample, eval, start) = ("sample#bench", "eval#bench", "start#bench");
        let text = format!(
            "((declare {sample} int64) (declare {eval} int64) (declare {start} int64)
              (for ((set {sample} (int64 0)) (lt {sample} COUNT) (set {sample} (add {sample} (int64 1))))
                (set {start} (call {CLOCK}))
                (for ((set {eval} (int64 0)) (lt {eval} EVALS) (set {eval} (add {eval} (int64 1)))) EXPR)
                (store (ptradd SAMPLES {sample}) (sub (call {CLOCK}) {start}))))"
        );
        let template = crate::reader::read_template(span.source, &text.replace('#', "_q_"))
            .map_err(|_| syntax(span, "internal: bad bench template"))?;
        let substitute = |form: &Sexp| -> Option<Sexp> {
            match form.symbol()? {
                "COUNT" => Some(load(parameters.as_ptr() as usize, 0)),
                "EVALS" => Some(load(parameters.as_ptr() as usize, 1)),
                "SAMPLES" => Some(pointer(samples.as_ptr() as usize, "int64")),
                "EXPR" => Some(expression.clone()),
                name if name.contains("_q_") => Some(sym(&name.replace("_q_", "#"), span)),
                _ => None,
            }
        };
        let harness = map_tree(&template[0], &substitute, span);
        let (_, entries) = self.pipeline.compile_quietly(&[harness], true)?;
        let entry = entries.first().copied().ok_or_else(|| syntax(span, "internal: the bench loop has no entry"))?;
        Ok(Harness { entry, parameters, samples })
    }

    fn run_harness(
        &mut self,
        harness: &mut Harness,
        count: usize,
        evals: i64,
        span: Span,
    ) -> Result<Vec<f64>, Vec<Diagnostic>> {
        harness.parameters[0] = count.min(MAX_SAMPLES) as i64;
        harness.parameters[1] = evals;
        self.call_quietly(harness.entry, span)?;
        Ok(harness.samples[..count.min(MAX_SAMPLES)].iter().map(|&nanos| nanos as f64 / evals as f64).collect())
    }

    fn measure(
        &mut self,
        harness: &mut Harness,
        options: &BenchOptions,
        span: Span,
    ) -> Result<BenchReport, Vec<Diagnostic>> {
        if options.warmup > 0 {
            self.run_harness(harness, options.warmup as usize, 1, span)?;
        }
        let single = self.run_harness(harness, 1, 1, span)?.first().copied().unwrap_or(1.0).max(1.0);
        // `(iters N)` times each run on its own; otherwise each sample batches `evals` runs.
        let (count, evals) = match options.iterations {
            Some(runs) => (runs as usize, 1),
            None => {
                // A single run's sample is mostly the clock's own cost; time a batch of `evals`
                // runs to know how many samples fill the budget.
                let evals = (SAMPLE_TARGET_NS / single).ceil().max(1.0);
                let per_run =
                    self.run_harness(harness, 1, evals as i64, span)?.first().copied().unwrap_or(single).max(0.01);
                let runs = (options.seconds * 1e9 / per_run).max(1.0);
                // Past the sample buffer, fill the budget with larger batches.
                let evals = evals.max((runs / MAX_SAMPLES as f64).ceil());
                ((runs / evals).clamp(1.0, MAX_SAMPLES as f64) as usize, evals as i64)
            }
        };
        let start = Instant::now();
        let samples = self.run_harness(harness, count, evals, span)?;
        let mut report = BenchReport::from_samples(samples, options.warmup, start.elapsed());
        // Report runs, not samples.
        report.runs *= evals as u64;
        Ok(report)
    }

    /// The value of a constant expression, as a number (for `(bytes E)`, `(flops E)`).
    fn evaluate_number(&mut self, expression: &Sexp) -> Result<f64, Vec<Diagnostic>> {
        let (text, _) = self.evaluate_quietly(expression)?;
        text.parse::<f64>().map_err(|_| {
            vec![Diagnostic::error(Kind::Type, format!("expected a number, `{expression}` gave `{text}`"))
                .with_label(expression.span, "")]
        })
    }

    /// Runs one top-level expression without printing; returns its value's text and type.
    fn evaluate_quietly(&mut self, expression: &Sexp) -> Result<(String, Ty), Vec<Diagnostic>> {
        match self.evaluate_or_compile(expression)? {
            Evaluated::Value(text, ty) => Ok((text, ty)),
            Evaluated::Statement(_) => {
                Err(vec![Diagnostic::error(Kind::Type, format!("`{expression}` has no value"))
                    .with_label(expression.span, "")])
            }
        }
    }

    /// Compiles one top-level form quietly and, if it is an expression with a value, runs it.
    fn evaluate_or_compile(&mut self, expression: &Sexp) -> Result<Evaluated, Vec<Diagnostic>> {
        let (cell, entries) = self.pipeline.compile_quietly(std::slice::from_ref(expression), false)?;
        let (Some(item), Some(&entry)) = (cell.first(), entries.first()) else {
            return Err(vec![
                Diagnostic::error(Kind::Type, "expected an expression with a value").with_label(expression.span, "")
            ]);
        };
        let Some(ty) = item.clone() else { return Ok(Evaluated::Statement(entries)) };
        let size = value::size_align(&ty, &self.pipeline.env().structs).0;
        let bytes = self.pipeline.call_for_value(entry, size, expression.span)?;
        Ok(Evaluated::Value(value::format_value(&bytes, 0, &ty, &self.pipeline.env().structs), ty))
    }

    fn autotune_form(&mut self, form: &Sexp, outcome: &mut Outcome) -> Result<(), Vec<Diagnostic>> {
        let shape = "`autotune` is `(autotune NAME (gen F ARG…) (params (P V…)…) (run EXPR) [(check EXPR) | (check-buffer PTR N)] [(tolerance R)])`, or `(autotune NAME (impls F…) (run EXPR) …)`";
        let items = form.list().unwrap_or(&[]);
        let Some(name) = items.get(1).and_then(Sexp::symbol) else { return Err(syntax(form.span, shape)) };
        check_clauses(&items[2..])?;
        let clause = |head: &str| items[2..].iter().find(|item| item.head() == Some(head)).and_then(Sexp::list);
        let Some(run) = clause("run").and_then(|run| run.get(1)) else { return Err(syntax(form.span, shape)) };
        let tolerance = match clause("tolerance").map(|items| &items[1].kind) {
            Some(SexpKind::Float(value)) if *value >= 0.0 => *value,
            Some(SexpKind::Int(value)) if *value >= 0 => *value as f64,
            Some(_) => {
                let value = &clause("tolerance").expect("matched")[1];
                return Err(syntax(value.span, "`tolerance` is a relative tolerance: a number ≥ 0"));
            }
            None => 1e-6,
        };
        let check = clause("check").and_then(|items| items.get(1)).cloned();
        let check_buffer =
            clause("check-buffer").and_then(|items| (items.len() == 3).then(|| (items[1].clone(), items[2].clone())));
        let mut names = Vec::new();
        let mut values: Vec<Vec<Sexp>> = Vec::new();
        let (generator, params) = match (clause("impls"), clause("gen"), clause("params")) {
            (Some(impls), None, None) => {
                let implementations = impls[1..]
                    .iter()
                    .map(|item| {
                        item.symbol()
                            .map(str::to_string)
                            .ok_or_else(|| syntax(item.span, "`impls` names functions: `(impls F…)`"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if implementations.is_empty() {
                    return Err(syntax(form.span, "`impls` names at least one function"));
                }
                let tuning =
                    Tuning { name, run, check: check.as_ref(), check_buffer: check_buffer.as_ref(), tolerance };
                return self.autotune_impls(form, &tuning, &implementations, outcome);
            }
            (None, Some(generator), Some(params)) => (generator, params),
            _ => return Err(syntax(form.span, shape)),
        };
        for param in &params[1..] {
            let Some((param_name, choices)) = param.list().and_then(|items| items.split_first()) else {
                return Err(syntax(param.span, "a parameter is `(P V…)`"));
            };
            let Some(param_name) = param_name.symbol() else {
                return Err(syntax(param.span, "a parameter is `(P V…)`"));
            };
            names.push(param_name.to_string());
            values.push(choices.to_vec());
        }
        let points = cartesian(&values);
        let mut variants = Vec::new();
        let mut reference = Reference::default();
        let mut definitions: Vec<Option<Vec<Sexp>>> = Vec::new();
        for point in &points {
            let bindings: HashMap<&str, &Sexp> = names.iter().map(String::as_str).zip(point.iter()).collect();
            // Each parameter stands for the point's value: in the generator's arguments, and in
            // the run and check expressions too (a kernel's launch depends on its tiles).
            let bind = |form: &Sexp| {
                map_tree(
                    form,
                    &|form: &Sexp| form.symbol().and_then(|symbol| bindings.get(symbol).map(|value| (*value).clone())),
                    form.span,
                )
            };
            let arguments: Vec<Sexp> = generator[2..].iter().map(bind).collect();
            let call = Sexp {
                kind: SexpKind::Unquote(Box::new(list(
                    generator[1..2].iter().cloned().chain(arguments).collect(),
                    form.span,
                ))),
                span: form.span,
            };
            let labels: Vec<String> = point.iter().map(ToString::to_string).collect();
            let run = bind(run);
            let check = check.as_ref().map(bind);
            let check_buffer = check_buffer.as_ref().map(|(pointer, count)| (bind(pointer), bind(count)));
            let tuning =
                Tuning { name, run: &run, check: check.as_ref(), check_buffer: check_buffer.as_ref(), tolerance };
            let definition = self.generated(&call, name);
            let result = self.autotune_variant(&tuning, definition, &mut reference);
            match result {
                Ok((report, definition)) => {
                    variants.push(VariantReport { values: labels, result: Ok(report) });
                    definitions.push(Some(definition));
                }
                Err(reason) => {
                    variants.push(VariantReport { values: labels, result: Err(reason) });
                    definitions.push(None);
                }
            }
        }
        self.choose(form, name, names, variants, definitions, outcome)
    }

    /// `(autotune NAME (impls F…) …)`: each function F (of NAME's signature, or of the first
    /// F's if NAME is new) is installed under NAME in turn — its definition, renamed — checked
    /// and benched like a generated variant.
    fn autotune_impls(
        &mut self,
        form: &Sexp,
        tuning: &Tuning<'_>,
        implementations: &[String],
        outcome: &mut Outcome,
    ) -> Result<(), Vec<Diagnostic>> {
        let functions = &self.pipeline.env().functions;
        let wanted = functions
            .get(tuning.name)
            .or_else(|| implementations.first().and_then(|first| functions.get(first)))
            .map(|entry| entry.signature.clone());
        let mut variants = Vec::new();
        let mut definitions = Vec::new();
        let mut reference = Reference::default();
        for implementation in implementations {
            let definition = self.renamed(implementation, tuning.name, wanted.as_ref());
            match self.autotune_variant(tuning, definition, &mut reference) {
                Ok((report, definition)) => {
                    variants.push(VariantReport { values: vec![implementation.clone()], result: Ok(report) });
                    definitions.push(Some(definition));
                }
                Err(reason) => {
                    variants.push(VariantReport { values: vec![implementation.clone()], result: Err(reason) });
                    definitions.push(None);
                }
            }
        }
        self.choose(form, tuning.name, vec!["impl".to_string()], variants, definitions, outcome)
    }

    /// The definition of the session function `implementation`, as the definition of `name`.
    fn renamed(&self, implementation: &str, name: &str, wanted: Option<&Signature>) -> Result<Vec<Sexp>, String> {
        let entry = self.pipeline.env().functions.get(implementation);
        let Some(FunctionEntry { kind: FunctionKind::Defined(def), signature, .. }) = entry else {
            return Err(format!("`{implementation}` is not a function defined in the session"));
        };
        if let Some(wanted) = wanted.filter(|wanted| *wanted != signature) {
            return Err(format!("`{implementation}` is `{signature}`, but `{name}` is `{wanted}`"));
        }
        let form = def.source.form();
        rename_definition(&form, name)
            .map(|form| vec![form])
            .ok_or_else(|| format!("`{implementation}`'s definition cannot be renamed"))
    }

    /// A generator's definition of `name`: the forms its call returns.
    fn generated(&mut self, call: &Sexp, name: &str) -> Result<Vec<Sexp>, String> {
        // A generator may return several forms (a kernel's shared arrays and the kernel).
        let definition: Vec<Sexp> = self
            .pipeline
            .expand_quietly(call)
            .map_err(first_line)?
            .into_iter()
            .flat_map(|form| match form.list() {
                Some(items) if items.first().is_some_and(|first| first.list().is_some()) => items.to_vec(),
                _ => vec![form],
            })
            .collect();
        if !definition.iter().any(|form| crate::bench::defines(form, name)) {
            return Err(format!("the generator did not return a definition of `{name}`"));
        }
        Ok(definition)
    }

    /// Reports the variants, fastest first, and makes `name` the fastest's definition.
    fn choose(
        &mut self,
        form: &Sexp,
        name: &str,
        names: Vec<String>,
        variants: Vec<VariantReport>,
        definitions: Vec<Option<Vec<Sexp>>>,
        outcome: &mut Outcome,
    ) -> Result<(), Vec<Diagnostic>> {
        let baseline = variants.first().and_then(|variant| variant.result.as_ref().ok()).map(|report| report.median);
        let fastest = variants
            .iter()
            .enumerate()
            .filter_map(|(index, variant)| variant.result.as_ref().ok().map(|report| (index, report.median)))
            .min_by_key(|(_, median)| *median)
            .map(|(index, _)| index);
        let mut order: Vec<usize> = (0..variants.len()).collect();
        order.sort_by_key(|&index| {
            (
                variants[index].result.is_err(),
                variants[index].result.as_ref().map(|report| report.median).unwrap_or(Duration::MAX),
            )
        });
        let chosen_label = fastest.map(|index| {
            names
                .iter()
                .zip(&variants[index].values)
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let sorted: Vec<VariantReport> = order.iter().map(|&index| variants[index].clone()).collect();
        outcome.items.push(Item::Autotune(AutotuneReport {
            name: name.to_string(),
            params: names.clone(),
            variants: sorted,
            baseline,
        }));
        match (fastest, chosen_label) {
            (Some(index), Some(label)) => {
                let definition = definitions[index].clone().unwrap_or_default();
                self.pipeline.compile_quietly(&definition, false)?;
                if let Some(entry) = self.pipeline.env().functions.get(name) {
                    outcome.items.push(Item::Defined {
                        name: name.to_string(),
                        description: format!("{}  (redefined, autotuned: {label})", entry.signature),
                    });
                }
                Ok(())
            }
            _ => Err(vec![Diagnostic::error(
                Kind::Type,
                format!("no variant of `{name}` compiled, ran and passed its check"),
            )
            .with_label(form.span, "")]),
        }
    }

    /// Installs one variant's definition of the tuned function, runs and checks it, benches it.
    fn autotune_variant(
        &mut self,
        tuning: &Tuning<'_>,
        definition: Result<Vec<Sexp>, String>,
        reference: &mut Reference,
    ) -> Result<(BenchReport, Vec<Sexp>), String> {
        let Tuning { run, check, check_buffer, tolerance, .. } = *tuning;
        let definition = definition?;
        self.pipeline.compile_quietly(&definition, false).map_err(first_line)?;
        // Every variant's checked run starts from the buffer as it was before the first: a
        // variant that leaves part of it unwritten cannot pass on an earlier variant's results,
        // and one that works in place gets the same input.
        if let Some((pointer, count)) = check_buffer {
            match &reference.initial {
                None => reference.initial = Some(self.copy_buffer(pointer, count, None).map_err(first_line)?.0),
                Some(initial) => {
                    let initial = initial.clone();
                    self.copy_buffer(pointer, count, Some(initial)).map_err(first_line)?;
                }
            }
        }
        let run_value = match self.evaluate_or_compile(run).map_err(first_line)? {
            Evaluated::Value(text, _) => text,
            // A statement runs for its effects.
            Evaluated::Statement(entries) => {
                for entry in entries {
                    self.call_quietly(entry, run.span).map_err(first_line)?;
                }
                String::new()
            }
        };
        let check_values = match (check, check_buffer) {
            (Some(check), _) => vec![self.evaluate_quietly(check).map_err(first_line)?.0],
            (None, Some((pointer, count))) => self.read_buffer(pointer, count).map_err(first_line)?,
            (None, None) => vec![run_value],
        };
        match &reference.values {
            None => reference.values = Some(check_values),
            Some(expected) => {
                if let Some((index, (want, got))) = expected
                    .iter()
                    .zip(&check_values)
                    .enumerate()
                    .find(|(_, (want, got))| !values_match(want, got, tolerance))
                {
                    return Err(format!("check failed: element {index} is {got}, the first variant gave {want}"));
                }
            }
        }
        let mut harness = self.build_harness(run).map_err(first_line)?;
        let options = BenchOptions { seconds: 0.2, iterations: None, warmup: 1, bytes: None, flops: None };
        let report = self.measure(&mut harness, &options, run.span).map_err(first_line)?;
        Ok((report, definition))
    }

    fn compile_and_run_statement(&mut self, statement: &Sexp) -> Result<(), Vec<Diagnostic>> {
        let (_, entries) = self.pipeline.compile_quietly(std::slice::from_ref(statement), false)?;
        for entry in entries {
            self.call_quietly(entry, statement.span)?;
        }
        Ok(())
    }

    /// N elements at a pointer or of a `(gpu-buf T)`, as text.
    fn read_buffer(&mut self, pointer: &Sexp, count: &Sexp) -> Result<Vec<String>, Vec<Diagnostic>> {
        let (buffer, element) = self.copy_buffer(pointer, count, None)?;
        let structs = &self.pipeline.env().structs;
        let (size, _) = value::size_align(&element, structs);
        let count = buffer.len() / size.max(1);
        Ok((0..count).map(|index| value::format_value(&buffer, index * size, &element, structs)).collect())
    }

    /// N elements at a pointer, copied by compiled code (so a bad pointer faults in the guard),
    /// or of a `(gpu-buf T)`, copied by `gpu-copy` (bounds checked there): out of it into the
    /// bytes returned (with the element type), or, given `contents`, into it.
    fn copy_buffer(
        &mut self,
        pointer: &Sexp,
        count: &Sexp,
        contents: Option<Vec<u8>>,
    ) -> Result<(Vec<u8>, Ty), Vec<Diagnostic>> {
        let span = pointer.span;
        let (count_text, _) = self.evaluate_quietly(count)?;
        let count: usize = count_text.parse().map_err(|_| {
            vec![Diagnostic::error(Kind::Type, "the element count must be an integer").with_label(count.span, "")]
        })?;
        let (_, pointer_type) = self.evaluate_quietly(pointer)?;
        let (element, on_device) = match &pointer_type {
            Ty::GpuBuf(element) => ((**element).clone(), true),
            _ => match pointer_type.pointee() {
                Some(element) => (element.clone(), false),
                None => {
                    return Err(vec![Diagnostic::error(
                        Kind::Type,
                        format!("`check-buffer` needs a pointer or a `(gpu-buf T)`, found `{pointer_type}`"),
                    )
                    .with_label(span, "")])
                }
            },
        };
        let (size, _) = value::size_align(&element, &self.pipeline.env().structs);
        let inward = contents.is_some();
        let mut buffer = contents.unwrap_or_default();
        buffer.resize(size * count, 0);
        buffer.reserve(1);
        let host = format!("(inttoptr (int64 {}) (ptr {element}))", buffer.as_ptr() as usize);
        let (target, source) = if inward { ("POINTER", host.as_str()) } else { (host.as_str(), "POINTER") };
        let text = if on_device {
            format!("(gpu-copy {target} {source} {count})")
        } else {
            format!(
                "((declare k_q_copy int64) (for ((set k_q_copy (int64 0)) (lt k_q_copy (int64 {count})) (set k_q_copy (add k_q_copy (int64 1)))) (store (ptradd {target} k_q_copy) (load (ptradd {source} k_q_copy)))))"
            )
        };
        let template = crate::reader::read_template(span.source, &text)
            .map_err(|_| syntax(span, "internal: bad copy template"))?;
        let copy = map_tree(
            &template[0],
            &|form: &Sexp| match form.symbol()? {
                "POINTER" => Some(pointer.clone()),
                name if name.contains("_q_") => Some(sym(&name.replace("_q_", "#"), span)),
                _ => None,
            },
            span,
        );
        self.compile_and_run_statement(&copy)?;
        Ok((buffer, element))
    }
}

/// What the first variant of an `autotune` left for the others: its check values, and the
/// checked buffer's contents before it ran.
#[derive(Default)]
struct Reference {
    values: Option<Vec<String>>,
    initial: Option<Vec<u8>>,
}

/// The clauses of `autotune`, each with how many items follow its name (`None`: any number).
const AUTOTUNE_CLAUSES: [(&str, Option<usize>, &str); 7] = [
    ("gen", None, "(gen F ARG…)"),
    ("impls", None, "(impls F…)"),
    ("params", None, "(params (P V…)…)"),
    ("run", Some(1), "(run EXPR)"),
    ("check", Some(1), "(check EXPR)"),
    ("check-buffer", Some(2), "(check-buffer PTR N)"),
    ("tolerance", Some(1), "(tolerance R)"),
];

/// Every clause after `autotune NAME` is one Quasi knows, with its number of items, once; `check`
/// and `check-buffer` not both. Anything else is said, at the clause: a clause it drops would
/// silently run another autotune than the one written.
fn check_clauses(clauses: &[Sexp]) -> Result<(), Vec<Diagnostic>> {
    let known = AUTOTUNE_CLAUSES.iter().map(|(_, _, shape)| format!("`{shape}`")).collect::<Vec<_>>().join(", ");
    let mut seen: Vec<&str> = Vec::new();
    for clause in clauses {
        let head = clause.list().and_then(|items| items.first()).and_then(Sexp::symbol);
        let Some((name, arity, shape)) = head.and_then(|head| AUTOTUNE_CLAUSES.iter().find(|(name, ..)| *name == head))
        else {
            let what = head.map_or_else(|| format!("`{clause}`"), |head| format!("`({head} …)`"));
            let diagnostic = Diagnostic::error(Kind::Syntax, format!("{what} is not a clause of `autotune`"))
                .with_label(clause.span, "")
                .with_note(format!("its clauses are {known}"));
            let diagnostic = match head {
                Some(head) => diagnostic.with_suggestion(head, AUTOTUNE_CLAUSES.iter().map(|(name, ..)| *name)),
                None => diagnostic,
            };
            return Err(vec![diagnostic]);
        };
        let count = clause.list().map_or(0, |items| items.len() - 1);
        if arity.is_some_and(|arity| arity != count) {
            return Err(syntax(clause.span, format!("`{name}` is `{shape}`")));
        }
        if seen.contains(name) {
            return Err(syntax(clause.span, format!("`{name}` is given twice")));
        }
        seen.push(name);
    }
    if seen.contains(&"check") && seen.contains(&"check-buffer") {
        let second = clauses.iter().rfind(|clause| matches!(clause.head(), Some("check" | "check-buffer")));
        let span = second.map_or(clauses[0].span, |clause| clause.span);
        return Err(syntax(span, "`autotune` takes `(check EXPR)` or `(check-buffer PTR N)`, not both"));
    }
    Ok(())
}

/// What every variant of an `autotune` shares: the tuned function, how it is run and checked.
struct Tuning<'a> {
    name: &'a str,
    run: &'a Sexp,
    check: Option<&'a Sexp>,
    check_buffer: Option<&'a (Sexp, Sexp)>,
    tolerance: f64,
}

/// A variant's failure as its table row says it: the first diagnostic's line.
fn first_line(diagnostics: Vec<Diagnostic>) -> String {
    diagnostics.first().map_or_else(
        || "failed".to_string(),
        |diagnostic| format!("error[{}]: {}", diagnostic.kind.code(), diagnostic.message),
    )
}

/// A definition `(define ((F RET) PARAM…) BODY…)` (or `define-inline`, `define-kernel`…) as
/// the definition of `name`.
fn rename_definition(form: &Sexp, name: &str) -> Option<Sexp> {
    let items = form.list()?;
    let prototype = items.get(1)?.list()?;
    let head = prototype.first()?.list()?;
    let renamed_head =
        list(std::iter::once(sym(name, head[0].span)).chain(head[1..].iter().cloned()).collect(), prototype[0].span);
    let prototype = list(std::iter::once(renamed_head).chain(prototype[1..].iter().cloned()).collect(), items[1].span);
    Some(list(items[..1].iter().cloned().chain([prototype]).chain(items[2..].iter().cloned()).collect(), form.span))
}

/// Whether a definition form defines `name`.
pub(crate) fn defines(form: &Sexp, name: &str) -> bool {
    form.head().is_some_and(|head| head.starts_with("define"))
        && form
            .list()
            .and_then(|items| items.get(1))
            .and_then(Sexp::list)
            .and_then(|prototype| prototype.first())
            .and_then(Sexp::list)
            .and_then(|head| head.first())
            .and_then(Sexp::symbol)
            == Some(name)
}

/// Values equal, floats within a relative tolerance.
fn values_match(want: &str, got: &str, tolerance: f64) -> bool {
    if want == got {
        return true;
    }
    match (want.parse::<f64>(), got.parse::<f64>()) {
        (Ok(want), Ok(got)) => (want - got).abs() <= tolerance * want.abs().max(got.abs()).max(f64::MIN_POSITIVE),
        _ => false,
    }
}

/// Every combination of the parameters' values, the first parameter varying slowest.
fn cartesian(values: &[Vec<Sexp>]) -> Vec<Vec<Sexp>> {
    values.iter().fold(vec![Vec::new()], |points, choices| {
        points
            .iter()
            .flat_map(|point| {
                choices.iter().map(move |choice| point.iter().cloned().chain(std::iter::once(choice.clone())).collect())
            })
            .collect()
    })
}

/// Rebuilds a tree, replacing nodes for which `substitute` gives a form; every node gets `span`.
fn map_tree(form: &Sexp, substitute: &dyn Fn(&Sexp) -> Option<Sexp>, span: Span) -> Sexp {
    if let Some(replacement) = substitute(form) {
        return replacement;
    }
    match &form.kind {
        SexpKind::List(items) => list(items.iter().map(|item| map_tree(item, substitute, span)).collect(), span),
        kind => Sexp { kind: kind.clone(), span },
    }
}

/// The clock's entry in the checker's environment.
pub(crate) fn clock_entry() -> FunctionEntry {
    FunctionEntry {
        signature: Signature { params: Vec::new(), ret: Ty::Int(64), variadic: false },
        param_names: Vec::new(),
        kind: FunctionKind::External(CLOCK.to_string()),
        invalidated: None,
    }
}
