//! Bench: `(bench EXPR …)` and `(autotune NAME …)` — repeated timed runs of compiled code,
//! statistics, and Caiman-style "time every variant" tuning over a Rhai generator, or over
//! hand-written implementations (`impls`).
//!
//! The timing loop is itself C-Lisp, generated here and compiled like any cell, so a run costs
//! one clock read per sample and no call back into Rust; parameters and samples live in session
//! buffers whose addresses are literals in the generated code.

use std::time::Instant;

use crate::abi::RT_CLOCK as CLOCK;
use crate::check::{Env, FunctionEntry, FunctionKind};
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::{Sexp, SexpKind, Span};
use crate::timing::{BenchReport, Throughput};
use crate::tune_cache::TuneCache;
use crate::types::{Signature, Ty};
use crate::value;
use crate::{Item, Outcome};

mod autotune;
pub(crate) mod slurm;

pub use slurm::SlurmOptions;

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
    /// Where autotuning keeps its results across sessions, if anywhere.
    fn tune_cache(&self) -> Option<&TuneCache>;
    /// What of the session decides a variant's timing besides its code, for the tuning cache's
    /// key: the CPU and its features, the opt level, and (if `gpu`) the GPU or the simulator.
    fn tuning_machine(&self, gpu: bool) -> String;
    /// Set when the session is interrupted: a wait on Slurm looks at it.
    fn interrupt_flag(&self) -> &std::sync::atomic::AtomicBool;
    /// Where autotunes without an `(on …)` clause time their variants (`:tune on …`).
    fn tune_executor(&self) -> Option<SlurmOptions>;
    /// The session as a Slurm worker replays it: the commands that set it up as this one is,
    /// and its cells in order.
    fn replay_job(&self) -> (Vec<String>, Vec<slurm::JobCell>);
    /// A replay of the session writes `text` instead of the form at `span` (an autotune: its
    /// winner's generator call or definition; nothing when it ended without one).
    fn replay_as(&mut self, span: Span, text: String);
}

/// Runs the cell's `(bench …)` and `(autotune …)` forms, in order, after its other code.
/// `status` gets an autotune's progress line as it goes.
pub(crate) fn run_session_forms(
    pipeline: &mut dyn Pipeline,
    forms: &[Sexp],
    outcome: &mut Outcome,
    status: &mut dyn FnMut(&str),
) {
    let mut bencher = Bencher { pipeline, status };
    for form in forms {
        let result = match form.head() {
            Some("bench") => {
                // A bench changes nothing: a replay of the session skips it.
                bencher.pipeline.replay_as(form.span, String::new());
                bencher.bench_form(form).map(|report| outcome.items.push(Item::Bench(report)))
            }
            _ => bencher.autotune_form(form, outcome),
        };
        if let Err(diagnostics) = result {
            outcome.diagnostics.extend(diagnostics);
            break;
        }
    }
}

/// Where a Slurm worker's variants go as they are visited: the point, its row, its result as
/// the tuning cache writes it, and the machine's key.
pub(crate) type EmitVariant<'e> = dyn FnMut(&[usize], &crate::timing::VariantReport, String, String) + 'e;

/// A Slurm worker's share of the autotune `form`: each of `points` visited, and handed to
/// `emit` with its row, its result as text and the machine's key (`bench::slurm`).
pub(crate) fn tune_points(
    pipeline: &mut dyn Pipeline,
    form: &Sexp,
    points: &[Vec<usize>],
    emit: &mut EmitVariant<'_>,
) -> Result<(), Vec<Diagnostic>> {
    Bencher { pipeline, status: &mut |_| {} }.tune_points(form, points, emit)
}

/// `bench` and `autotune` over the session's pipeline.
struct Bencher<'p> {
    pipeline: &'p mut dyn Pipeline,
    /// Where an autotune's progress line goes (`Outcome::status`).
    status: &'p mut dyn FnMut(&str),
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

    /// One sample of `evals` runs: a run's time in ns (at least 0.01).
    fn one_sample(&mut self, harness: &mut Harness, evals: i64, span: Span) -> Result<f64, Vec<Diagnostic>> {
        Ok(self.run_harness(harness, 1, evals, span)?.first().copied().unwrap_or(0.0).max(0.01))
    }

    /// Times the harness: `(iters N)` runs N runs, each timed on its own; otherwise a sample
    /// times a batch of runs long enough for the clock (calibrated until two estimates of a
    /// run's time agree), and samples are taken in chunks until the wall-clock budget is spent.
    fn measure(
        &mut self,
        harness: &mut Harness,
        options: &BenchOptions,
        span: Span,
    ) -> Result<BenchReport, Vec<Diagnostic>> {
        if options.warmup > 0 {
            self.run_harness(harness, options.warmup as usize, 1, span)?;
        }
        if let Some(runs) = options.iterations {
            let start = Instant::now();
            let samples = self.run_harness(harness, runs as usize, 1, span)?;
            return Ok(BenchReport::from_samples(samples, options.warmup, start.elapsed()));
        }
        let budget_ns = options.seconds * 1e9;
        let (per_run, evals) = self.calibrate(harness, budget_ns, span)?;
        // Past the sample buffer, fill the budget with larger batches: half the buffer is the
        // estimate's, half is room for runs faster than it.
        let evals = evals.max((2.0 * budget_ns / per_run / MAX_SAMPLES as f64).ceil() as i64);
        let planned = (budget_ns / (per_run * evals as f64)).clamp(1.0, MAX_SAMPLES as f64);
        // A few chunks: each ends with a look at the clock, so the budget holds whatever the
        // estimate was, and an overrun is at most one chunk's tail of one sample.
        let chunk_limit = (planned / 8.0).ceil().max(1.0) as usize;
        let start = Instant::now();
        let mut samples: Vec<f64> = Vec::new();
        while samples.len() < MAX_SAMPLES {
            let elapsed = start.elapsed().as_nanos() as f64;
            let remaining = budget_ns - elapsed;
            if !samples.is_empty() && remaining <= 0.0 {
                break;
            }
            let per_sample = if samples.is_empty() { per_run * evals as f64 } else { elapsed / samples.len() as f64 };
            let chunk = ((remaining / per_sample.max(1.0)).ceil().max(1.0) as usize)
                .min(chunk_limit)
                .min(MAX_SAMPLES - samples.len());
            samples.extend(self.run_harness(harness, chunk, evals, span)?);
        }
        let mut report = BenchReport::from_samples(samples, options.warmup, start.elapsed());
        // Report runs, not samples.
        report.runs *= evals as u64;
        Ok(report)
    }

    /// How long a run takes (ns) and how many runs a sample batches so that it lasts at least
    /// `SAMPLE_TARGET_NS`: the batch grows until it does, then is timed again until two
    /// estimates agree within 10% (at most 8 tries, and at most a tenth of the budget), and
    /// the median estimate stands. One sample is mostly clock for a short run, and one
    /// estimate can be a preempted one: a single sample made a budget of 1 s run 0.1 s or 2.5 s.
    fn calibrate(&mut self, harness: &mut Harness, budget_ns: f64, span: Span) -> Result<(f64, i64), Vec<Diagnostic>> {
        let start = Instant::now();
        let mut evals: i64 = 1;
        let mut per_run = loop {
            let per_run = self.one_sample(harness, evals, span)?;
            let batch = per_run * evals as f64;
            if batch >= SAMPLE_TARGET_NS || evals >= 1 << 40 {
                break per_run;
            }
            // Grow towards the target, by at most 100× at a time (a first run can be slow).
            evals =
                (evals * 2).max(((evals as f64) * SAMPLE_TARGET_NS / batch.max(1.0)).ceil() as i64).min(evals * 100);
        };
        let mut estimates = vec![per_run];
        while estimates.len() < 8 && (start.elapsed().as_nanos() as f64) < budget_ns / 10.0 {
            let estimate = self.one_sample(harness, evals, span)?;
            let last = estimates[estimates.len() - 1];
            estimates.push(estimate);
            if (estimate - last).abs() <= 0.1 * estimate.min(last) {
                break;
            }
        }
        estimates.sort_by(f64::total_cmp);
        per_run = estimates[estimates.len() / 2];
        Ok((per_run, evals))
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
