//! `(autotune NAME …)`: Caiman-style "time every variant" tuning over a Rhai generator's
//! parameter space, or over hand-written implementations (`impls`) — every point, a random
//! sample or a greedy walk of them, within a time budget — with each variant's result kept in
//! the tuning cache (`crate::tune_cache`) so a cell run again times only what changed.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::slurm::{self, SlurmOptions};
use super::{list, map_tree, sym, syntax, BenchOptions, Bencher, Evaluated};
use crate::check::{FunctionEntry, FunctionKind};
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::{Sexp, SexpKind};
use crate::timing::{AutotuneReport, BenchReport, Throughput, VariantReport, VariantSource};
use crate::tune_cache::{check_digest, TuneResult};
use crate::types::{Signature, Ty};
use crate::value;
use crate::{Item, Outcome};

mod key;
mod on_slurm;
mod tuner;

use tuner::{Candidate, Reference, Tuner};

/// The clauses of `autotune`, each with how many items follow its name (`None`: any number).
const AUTOTUNE_CLAUSES: [(&str, Option<usize>, &str); 13] = [
    ("gen", None, "(gen F ARG…)"),
    ("impls", None, "(impls F…)"),
    ("params", None, "(params (P V…)…)"),
    ("run", Some(1), "(run EXPR)"),
    ("check", Some(1), "(check EXPR)"),
    ("check-buffer", Some(2), "(check-buffer PTR N)"),
    ("tolerance", Some(1), "(tolerance R)"),
    ("search", Some(1), "(search exhaustive | (random N) | greedy)"),
    ("budget", Some(1), "(budget SECONDS)"),
    ("fresh", Some(0), "(fresh)"),
    ("bytes", Some(1), "(bytes E)"),
    ("flops", Some(1), "(flops E)"),
    ("on", None, "(on slurm [(partition P)] [(nodes N)] [(gres G)] [(time T)])"),
];

/// The seed of `(search (random N))`: the same cell samples the same points, so running it
/// again finds them in the tuning cache.
const RANDOM_SEED: u64 = 0x005e_ed0f_a070;

/// How the points timed are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Search {
    /// Every point, in order (the first parameter varies slowest).
    Exhaustive,
    /// The first point and N − 1 others drawn at random.
    Random(u64),
    /// From the first point, each parameter in turn moved to its best value, while that helps.
    Greedy,
}

impl Search {
    fn describe(self) -> String {
        match self {
            Search::Exhaustive => "exhaustive".into(),
            Search::Random(count) => format!("random {count}"),
            Search::Greedy => "greedy".into(),
        }
    }
}

/// What is tuned over: a generator's variants over a product of parameter values, or
/// implementations defined in the session (one parameter, `impl`).
enum Space<'f> {
    Generated { generator: &'f [Sexp], names: Vec<String>, values: Vec<Vec<Sexp>> },
    Implementations { names: Vec<String>, wanted: Option<Signature> },
}

impl Space<'_> {
    /// The parameters' names, as the table heads them.
    fn params(&self) -> Vec<String> {
        match self {
            Space::Generated { names, .. } => names.clone(),
            Space::Implementations { .. } => vec!["impl".to_string()],
        }
    }

    /// The table's labels of `point`: each parameter's value.
    fn labels(&self, point: &[usize]) -> Vec<String> {
        match self {
            Space::Generated { values, .. } => {
                point.iter().zip(values).map(|(&index, choices)| choices[index].to_string()).collect()
            }
            Space::Implementations { names, .. } => vec![names[point[0]].clone()],
        }
    }

    /// How many values each parameter takes.
    fn radices(&self) -> Vec<usize> {
        match self {
            Space::Generated { values, .. } => values.iter().map(Vec::len).collect(),
            Space::Implementations { names, .. } => vec![names.len()],
        }
    }

    /// `form` with each parameter replaced by its value at `point` (as is, for implementations).
    fn bind(&self, point: &[usize], form: &Sexp) -> Sexp {
        let Space::Generated { names, values, .. } = self else { return form.clone() };
        let bindings: HashMap<&str, &Sexp> = names
            .iter()
            .map(String::as_str)
            .zip(point.iter().zip(values).map(|(&index, choices)| &choices[index]))
            .collect();
        map_tree(
            form,
            &|form: &Sexp| form.symbol().and_then(|symbol| bindings.get(symbol).map(|value| (*value).clone())),
            form.span,
        )
    }
}

/// What every variant of an `autotune` shares: the tuned function, how it is run and checked.
struct Tuning<'a> {
    name: &'a str,
    run: &'a Sexp,
    check: Option<&'a Sexp>,
    check_buffer: Option<(Sexp, Sexp)>,
    tolerance: f64,
    search: Search,
    budget: Option<Duration>,
    fresh: bool,
    /// The work per run that `(bytes E)` and `(flops E)` give, in that order: each variant's
    /// row shows its throughput at the median.
    work: Vec<(Work, &'a Sexp)>,
    /// Where the variants are timed: here (`None`), or on a Slurm cluster.
    slurm: Option<SlurmOptions>,
    /// The form, as the Slurm workers read it.
    form_text: String,
}

/// A kind of work per run, for a throughput.
#[derive(Clone, Copy)]
enum Work {
    Bytes,
    Flops,
}

/// Why a variant failed: diagnostics (compiling, running, a fault), or a reason that is not kept
/// in the tuning cache (its check against the first variant's values depends on that variant).
enum Failure {
    Diagnostics(Vec<Diagnostic>),
    Reason(String),
}

impl From<Vec<Diagnostic>> for Failure {
    fn from(diagnostics: Vec<Diagnostic>) -> Failure {
        Failure::Diagnostics(diagnostics)
    }
}

impl Bencher<'_> {
    pub(super) fn autotune_form(&mut self, form: &Sexp, outcome: &mut Outcome) -> Result<(), Vec<Diagnostic>> {
        let (space, tuning) = self.tuning_of(form)?;
        let name = tuning.name;
        // What NAME was: put back if the autotune ends without a winner (each variant redefined it).
        let original = crate::check::defined(self.pipeline.env(), name).map(|def| def.source.form());
        let result = self.search(&space, &tuning).and_then(|tuner| self.choose(form, &space, &tuning, tuner, outcome));
        match &result {
            Ok(replay) => self.pipeline.replay_as(form.span, replay.clone()),
            Err(_) => {
                if let Some(original) = original {
                    let _ = self.pipeline.compile_quietly(&[original], false);
                }
                // A replay of the session leaves NAME as it was too.
                self.pipeline.replay_as(form.span, String::new());
            }
        }
        result.map(|_| ())
    }

    /// What an `autotune` form asks for: its space and how each variant is run and checked.
    fn tuning_of<'f>(&self, form: &'f Sexp) -> Result<(Space<'f>, Tuning<'f>), Vec<Diagnostic>> {
        let shape = "`autotune` is `(autotune NAME (gen F ARG…) (params (P V…)…) (run EXPR) [(check EXPR) | (check-buffer PTR N)] [(tolerance R)] [(search S)] [(budget SECONDS)] [(fresh)] [(bytes E)] [(flops E)] [(on slurm …)])`, or `(autotune NAME (impls F…) (run EXPR) …)`";
        let items = form.list().unwrap_or(&[]);
        let Some(name) = items.get(1).and_then(Sexp::symbol) else { return Err(syntax(form.span, shape)) };
        check_clauses(&items[2..])?;
        let clause = |head: &str| items[2..].iter().find(|item| item.head() == Some(head)).and_then(Sexp::list);
        let Some(run) = clause("run").and_then(|run| run.get(1)) else { return Err(syntax(form.span, shape)) };
        let tolerance = match clause("tolerance").map(|items| &items[1]) {
            None => 1e-6,
            Some(value) => {
                number(value).ok_or_else(|| syntax(value.span, "`tolerance` is a relative tolerance: a number ≥ 0"))?
            }
        };
        let search = match clause("search") {
            None => Search::Exhaustive,
            Some(items) => search_of(&items[1])?,
        };
        let budget = match clause("budget").map(|items| &items[1]) {
            None => None,
            Some(value) => Some(
                number(value)
                    .filter(|seconds| *seconds > 0.0 && *seconds < 1e9)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| syntax(value.span, "`budget` is a number of seconds > 0"))?,
            ),
        };
        // `(on …)` in the form, else where the session tunes (`:tune on …`).
        let slurm = match items[2..].iter().find(|item| item.head() == Some("on")) {
            Some(on) => slurm::parse_on(on, &on.list().expect("a clause")[1..])?,
            None => self.pipeline.tune_executor(),
        };
        let check = clause("check").and_then(|items| items.get(1));
        let check_buffer =
            clause("check-buffer").and_then(|items| (items.len() == 3).then(|| (items[1].clone(), items[2].clone())));
        let space = match (clause("impls"), clause("gen"), clause("params")) {
            (Some(impls), None, None) => {
                let names = impls[1..]
                    .iter()
                    .map(|item| {
                        item.symbol()
                            .map(str::to_string)
                            .ok_or_else(|| syntax(item.span, "`impls` names functions: `(impls F…)`"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if names.is_empty() {
                    return Err(syntax(form.span, "`impls` names at least one function"));
                }
                // Each implementation must have the signature of NAME, or of the first if NAME is new.
                let functions = &self.pipeline.env().functions;
                let wanted = functions
                    .get(name)
                    .or_else(|| names.first().and_then(|first| functions.get(first)))
                    .map(|entry| entry.signature.clone());
                Space::Implementations { names, wanted }
            }
            (None, Some(generator), Some(params)) => {
                let mut names = Vec::new();
                let mut values = Vec::new();
                for param in &params[1..] {
                    let parsed = param.list().and_then(|items| items.split_first());
                    let Some((param_name, choices)) =
                        parsed.and_then(|(name, choices)| Some((name.symbol()?, choices)))
                    else {
                        return Err(syntax(param.span, "a parameter is `(P V…)`"));
                    };
                    if choices.is_empty() {
                        return Err(syntax(param.span, format!("`{param_name}` has no values: `({param_name} V…)`")));
                    }
                    names.push(param_name.to_string());
                    values.push(choices.to_vec());
                }
                Space::Generated { generator, names, values }
            }
            _ => return Err(syntax(form.span, shape)),
        };
        let fresh = clause("fresh").is_some();
        let work = [("bytes", Work::Bytes), ("flops", Work::Flops)]
            .into_iter()
            .filter_map(|(head, work)| clause(head).map(|items| (work, &items[1])))
            .collect();
        let form_text = form.to_string();
        let tuning =
            Tuning { name, run, check, check_buffer, tolerance, search, budget, fresh, work, slurm, form_text };
        Ok((space, tuning))
    }

    /// Visits the points `tuning.search` chooses, until it ends or the budget runs out. Only an
    /// interrupt is an error: a variant's failure is its row.
    fn search(&mut self, space: &Space<'_>, tuning: &Tuning<'_>) -> Result<Tuner, Vec<Diagnostic>> {
        let radices = space.radices();
        let mut tuner = Tuner::new();
        tuner.planned = match tuning.search {
            Search::Exhaustive => usize::try_from(space_size(&radices)).ok(),
            Search::Random(count) => usize::try_from(count.min(space_size(&radices))).ok(),
            Search::Greedy => None,
        };
        self.report_status(tuning, &mut tuner, false);
        let first = vec![0; radices.len()];
        // A work expression that does not evaluate is said before any variant is timed.
        self.work_at(space, tuning, &first, &mut tuner.work)?;
        match tuning.search {
            Search::Exhaustive => {
                let mut points = vec![first.clone()];
                let mut point = first;
                while next_point(&mut point, &radices) {
                    points.push(point.clone());
                }
                self.visit_all(space, tuning, &mut tuner, &points)?;
            }
            Search::Random(count) => {
                let wanted = usize::try_from(count.min(space_size(&radices))).unwrap_or(usize::MAX);
                let mut random = fastrand::Rng::with_seed(RANDOM_SEED);
                let mut points = vec![first];
                let mut drawn: HashSet<Vec<usize>> = points.iter().cloned().collect();
                while points.len() < wanted {
                    let point: Vec<usize> = radices.iter().map(|&radix| random.usize(..radix)).collect();
                    if drawn.insert(point.clone()) {
                        points.push(point);
                    }
                }
                self.visit_all(space, tuning, &mut tuner, &points)?;
            }
            Search::Greedy => {
                self.visit_all(space, tuning, &mut tuner, std::slice::from_ref(&first))?;
                let mut best = tuner.median_at(&first);
                let mut current = first;
                'rounds: loop {
                    let mut moved = false;
                    for param in 0..radices.len() {
                        // One parameter's values, the others where they are: one batch.
                        let sweep: Vec<Vec<usize>> = (0..radices[param])
                            .map(|value| {
                                let mut point = current.clone();
                                point[param] = value;
                                point
                            })
                            .collect();
                        self.visit_all(space, tuning, &mut tuner, &sweep)?;
                        if tuner.out_of_budget {
                            break 'rounds;
                        }
                        let mut best_point = current.clone();
                        for point in sweep {
                            let median = tuner.median_at(&point);
                            if median.is_some_and(|median| best.is_none_or(|best| median < best)) {
                                (best, best_point) = (median, point);
                            }
                        }
                        if best_point != current {
                            (current, moved) = (best_point, true);
                        }
                    }
                    if !moved {
                        break;
                    }
                }
            }
        }
        self.report_status(tuning, &mut tuner, true);
        Ok(tuner)
    }

    /// Sends the progress line (`Tuner::status`) to the front end.
    fn report_status(&mut self, tuning: &Tuning<'_>, tuner: &mut Tuner, finished: bool) {
        if let Some(line) = tuner.status(tuning.name, tuning.budget, finished) {
            (self.status)(&line);
        }
    }

    /// Visits `points` in order (those not visited yet): here, one at a time until the budget
    /// runs out, or as one job on Slurm.
    fn visit_all(
        &mut self,
        space: &Space<'_>,
        tuning: &Tuning<'_>,
        tuner: &mut Tuner,
        points: &[Vec<usize>],
    ) -> Result<(), Vec<Diagnostic>> {
        if let Some(options) = &tuning.slurm {
            let todo: Vec<Vec<usize>> =
                points.iter().filter(|point| !tuner.by_point.contains_key(*point)).cloned().collect();
            return self.visit_on_slurm(space, tuning, options, tuner, todo);
        }
        for point in points {
            self.visit(space, tuning, tuner, point)?;
            self.report_status(tuning, tuner, false);
            if tuner.out_of_budget {
                break;
            }
        }
        Ok(())
    }

    /// Visits one point: its result from the tuning cache, or compiled, checked and timed now
    /// (unless the budget has run out). Returns its median if it passed.
    fn visit(
        &mut self,
        space: &Space<'_>,
        tuning: &Tuning<'_>,
        tuner: &mut Tuner,
        point: &[usize],
    ) -> Result<Option<Duration>, Vec<Diagnostic>> {
        if let Some(&index) = tuner.by_point.get(point) {
            return Ok(tuner.median(index));
        }
        let candidate = self.candidate(space, tuning, point)?;
        let definition = match &candidate.definition {
            Ok(definition) => definition.clone(),
            Err(reason) => {
                let report = VariantReport {
                    values: candidate.labels,
                    result: Err(reason.clone()),
                    source: VariantSource::Timed,
                    node: None,
                };
                return Ok(tuner.record(point, report, None));
            }
        };
        let key = self.pipeline.tune_cache().is_some().then(|| self.tune_key(tuning, &candidate, &definition));
        let cached = match (&key, self.pipeline.tune_cache()) {
            (Some(key), Some(cache)) if !tuning.fresh => cache.lookup(key),
            _ => None,
        };
        if let Some(TuneResult { result, .. }) = cached {
            let passed = result.is_ok();
            if passed && tuner.reference.values.is_none() && tuner.cached_reference.is_none() {
                tuner.cached_reference = Some(candidate.clone());
            }
            let report = VariantReport { values: candidate.labels, result, source: VariantSource::Cached, node: None };
            return Ok(tuner.record(point, report, passed.then_some(definition)));
        }
        let any_passed = tuner.visited.iter().any(|visited| visited.report.result.is_ok());
        if any_passed && tuning.budget.is_some_and(|budget| tuner.started.elapsed() >= budget) {
            tuner.out_of_budget = true;
            return Ok(None);
        }
        // The first variant the cache gave is the one the others match: it runs, untimed, first.
        if let Some(reference) = tuner.cached_reference.take() {
            if let Err(Failure::Diagnostics(diagnostics)) =
                self.run_variant(&reference, tuning, &mut tuner.reference, false)
            {
                if interrupted(&diagnostics) {
                    return Err(diagnostics);
                }
            }
        }
        let (result, digest) = match self.run_variant(&candidate, tuning, &mut tuner.reference, true) {
            Ok((report, digest)) => (report.ok_or_else(|| "internal: not timed".to_string()), Some(digest)),
            Err(Failure::Diagnostics(diagnostics)) if interrupted(&diagnostics) => return Err(diagnostics),
            Err(Failure::Diagnostics(diagnostics)) => (Err(first_line(diagnostics)), Some(0)),
            Err(Failure::Reason(reason)) => (Err(reason), None),
        };
        if let (Some(key), Some(cache), Some(check)) = (&key, self.pipeline.tune_cache(), digest) {
            cache.store(key, &TuneResult { result: result.clone(), check });
        }
        let passed = result.is_ok();
        let report = VariantReport { values: candidate.labels, result, source: VariantSource::Timed, node: None };
        Ok(tuner.record(point, report, passed.then_some(definition)))
    }

    /// The variant at `point`: the generator's definition for its values (or the named
    /// implementation, renamed), and the run and check with its values. Only an interrupt while
    /// the generator runs is an error; any other failure is the candidate's.
    fn candidate(
        &mut self,
        space: &Space<'_>,
        tuning: &Tuning<'_>,
        point: &[usize],
    ) -> Result<Candidate, Vec<Diagnostic>> {
        let span = tuning.run.span;
        match space {
            Space::Implementations { names, wanted } => {
                let implementation = &names[point[0]];
                let definition = self.renamed(implementation, tuning.name, wanted.as_ref());
                let replay = definition.as_ref().map_or_else(
                    |_| String::new(),
                    |forms| forms.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"),
                );
                Ok(Candidate {
                    labels: vec![implementation.clone()],
                    replay,
                    definition,
                    run: tuning.run.clone(),
                    check: tuning.check.cloned(),
                    check_buffer: tuning.check_buffer.clone(),
                })
            }
            Space::Generated { generator, values, .. } => {
                let chosen: Vec<&Sexp> = point.iter().zip(values).map(|(&index, choices)| &choices[index]).collect();
                // Each parameter stands for the point's value: in the generator's arguments, and in
                // the run and check expressions too (a kernel's launch depends on its tiles).
                let bind = |form: &Sexp| space.bind(point, form);
                let arguments: Vec<Sexp> = generator[2..].iter().map(bind).collect();
                let call = Sexp {
                    kind: SexpKind::Unquote(Box::new(list(
                        generator[1..2].iter().cloned().chain(arguments).collect(),
                        span,
                    ))),
                    span,
                };
                let definition = match self.generated(&call, tuning.name) {
                    Err(Failure::Diagnostics(diagnostics)) if interrupted(&diagnostics) => return Err(diagnostics),
                    Err(Failure::Diagnostics(diagnostics)) => Err(first_line(diagnostics)),
                    Err(Failure::Reason(reason)) => Err(reason),
                    Ok(definition) => Ok(definition),
                };
                Ok(Candidate {
                    labels: chosen.iter().map(ToString::to_string).collect(),
                    replay: call.to_string(),
                    definition,
                    run: bind(tuning.run),
                    check: tuning.check.map(bind),
                    check_buffer: tuning.check_buffer.as_ref().map(|(pointer, count)| (bind(pointer), bind(count))),
                })
            }
        }
    }

    /// Reports the variants, fastest first, and makes `name` the fastest's definition. Returns
    /// what a replay of the session writes for the autotune: the winner's generator call or
    /// definition. Variants timed on Slurm nodes are ranked only against those of the first
    /// point's machine (or the first that passed): the others are listed, not compared.
    fn choose(
        &mut self,
        form: &Sexp,
        space: &Space<'_>,
        tuning: &Tuning<'_>,
        tuner: Tuner,
        outcome: &mut Outcome,
    ) -> Result<String, Vec<Diagnostic>> {
        let name = tuning.name;
        let params = space.params();
        let first = vec![0; params.len()];
        let baseline = tuner.by_point.get(&first).and_then(|&index| tuner.median(index));
        let out_of_budget = tuner.out_of_budget;
        let mut visited = tuner.visited;
        let reference = visited
            .iter()
            .find(|visited| visited.point == first && visited.report.result.is_ok())
            .or_else(|| visited.iter().find(|visited| visited.report.result.is_ok()))
            .and_then(|visited| visited.machine.clone());
        for visited in &mut visited {
            let (Some(reference), Some(machine), Ok(report)) = (&reference, &visited.machine, &visited.report.result)
            else {
                continue;
            };
            if machine != reference {
                let node = visited.report.node.clone().unwrap_or_default();
                visited.report.result = Err(format!(
                    "not ranked: {node} is another machine than the first variant's (median {:?})",
                    report.median
                ));
            }
        }
        let mut work = tuner.work;
        for visited in &mut visited {
            if let Ok(report) = &mut visited.report.result {
                let median_seconds = report.median.as_secs_f64().max(1e-12);
                report.throughput = self
                    .work_at(space, tuning, &visited.point, &mut work)?
                    .into_iter()
                    .map(|(kind, amount)| match kind {
                        Work::Bytes => Throughput::Bytes(amount / median_seconds),
                        Work::Flops => Throughput::Flops(amount / median_seconds),
                    })
                    .collect();
            }
        }
        visited.sort_by_key(|visited| {
            (
                visited.report.result.is_err(),
                visited.report.result.as_ref().map_or(Duration::MAX, |report| report.median),
            )
        });
        let winner = visited.first().filter(|visited| visited.report.result.is_ok());
        let chosen = winner.map(|winner| {
            let label = params
                .iter()
                .zip(&winner.report.values)
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join(", ");
            (label, winner.point.clone(), winner.definition.clone())
        });
        let on = tuning.slurm.as_ref().map(SlurmOptions::describe);
        outcome.items.push(Item::Autotune(AutotuneReport {
            name: name.to_string(),
            params,
            variants: visited.into_iter().map(|visited| visited.report).collect(),
            baseline,
            space: space_size(&space.radices()),
            search: tuning.search.describe(),
            budget_spent: out_of_budget.then_some(tuning.budget).flatten(),
            on,
        }));
        if let Some(cache) = self.pipeline.tune_cache() {
            outcome.diagnostics.extend(
                cache
                    .take_problems()
                    .into_iter()
                    .map(|problem| Diagnostic::warning(Kind::Io, problem).with_label(form.span, "")),
            );
        }
        let Some((label, point, definition)) = chosen else {
            return Err(vec![Diagnostic::error(
                Kind::Type,
                format!("no variant of `{name}` compiled, ran and passed its check"),
            )
            .with_label(form.span, "")]);
        };
        // The winner made again here: its generator's call (a variant timed on a node has no
        // definition in this session yet), and what a replay writes for it.
        let candidate = self.candidate(space, tuning, &point)?;
        let definition = match (definition, candidate.definition) {
            (Some(definition), _) | (None, Ok(definition)) => definition,
            (None, Err(reason)) => {
                return Err(vec![Diagnostic::error(
                    Kind::Type,
                    format!("the fastest variant of `{name}` ({label}) does not compile here: {reason}"),
                )
                .with_label(form.span, "")])
            }
        };
        self.pipeline.compile_quietly(&definition, false)?;
        if let Some(entry) = self.pipeline.env().functions.get(name) {
            outcome.items.push(Item::Defined {
                name: name.to_string(),
                description: format!("{}  (redefined, autotuned: {label})", entry.signature),
            });
        }
        Ok(candidate.replay)
    }

    /// The work per run at `point` that `(bytes E)` and `(flops E)` give: each expression with
    /// the point's values, evaluated once for each distinct text (`known`).
    fn work_at(
        &mut self,
        space: &Space<'_>,
        tuning: &Tuning<'_>,
        point: &[usize],
        known: &mut HashMap<String, f64>,
    ) -> Result<Vec<(Work, f64)>, Vec<Diagnostic>> {
        let mut work = Vec::new();
        for &(kind, expression) in &tuning.work {
            let bound = space.bind(point, expression);
            let text = bound.to_string();
            let amount = match known.get(&text) {
                Some(&amount) => amount,
                None => {
                    let amount = self.evaluate_number(&bound)?;
                    known.insert(text, amount);
                    amount
                }
            };
            work.push((kind, amount));
        }
        Ok(work)
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
    fn generated(&mut self, call: &Sexp, name: &str) -> Result<Vec<Sexp>, Failure> {
        // A generator may return several forms (a kernel's shared arrays and the kernel).
        let definition: Vec<Sexp> = self
            .pipeline
            .expand_quietly(call)?
            .into_iter()
            .flat_map(|form| match form.list() {
                Some(items) if items.first().is_some_and(|first| first.list().is_some()) => items.to_vec(),
                _ => vec![form],
            })
            .collect();
        if !definition.iter().any(|form| super::defines(form, name)) {
            return Err(Failure::Reason(format!("the generator did not return a definition of `{name}`")));
        }
        Ok(definition)
    }

    /// Installs one variant's definition of the tuned function, runs and checks it, and (if
    /// `timed`) benches it. Returns its timing and the digest of its check values.
    fn run_variant(
        &mut self,
        candidate: &Candidate,
        tuning: &Tuning<'_>,
        reference: &mut Reference,
        timed: bool,
    ) -> Result<(Option<BenchReport>, u64), Failure> {
        let Candidate { run, check, check_buffer, .. } = candidate;
        let definition = candidate.definition.as_ref().map_err(|reason| Failure::Reason(reason.clone()))?;
        self.pipeline.compile_quietly(definition, false)?;
        // Every variant's checked run starts from the buffer as it was before the first: a
        // variant that leaves part of it unwritten cannot pass on an earlier variant's results,
        // and one that works in place gets the same input.
        if let Some((pointer, count)) = check_buffer {
            match &reference.initial {
                None => reference.initial = Some(self.copy_buffer(pointer, count, None)?.0),
                Some(initial) => {
                    let initial = initial.clone();
                    self.copy_buffer(pointer, count, Some(initial))?;
                }
            }
        }
        let run_value = match self.evaluate_or_compile(run)? {
            Evaluated::Value(text, _) => text,
            // A statement runs for its effects.
            Evaluated::Statement(entries) => {
                for entry in entries {
                    self.call_quietly(entry, run.span)?;
                }
                String::new()
            }
        };
        let check_values = match (check, check_buffer) {
            (Some(check), _) => vec![self.evaluate_quietly(check)?.0],
            (None, Some((pointer, count))) => self.read_buffer(pointer, count)?,
            (None, None) => vec![run_value],
        };
        match &reference.values {
            None => reference.values = Some(check_values.clone()),
            Some(expected) => {
                if let Some((index, (want, got))) = expected
                    .iter()
                    .zip(&check_values)
                    .enumerate()
                    .find(|(_, (want, got))| !values_match(want, got, tuning.tolerance))
                {
                    return Err(Failure::Reason(format!(
                        "check failed: element {index} is {got}, the first variant gave {want}"
                    )));
                }
            }
        }
        let digest = check_digest(&check_values);
        if !timed {
            return Ok((None, digest));
        }
        let mut harness = self.build_harness(run)?;
        let options = BenchOptions { seconds: 0.2, iterations: None, warmup: 1, bytes: None, flops: None };
        let report = self.measure(&mut harness, &options, run.span)?;
        Ok((Some(report), digest))
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

/// A number ≥ 0 (an integer or a float literal).
fn number(value: &Sexp) -> Option<f64> {
    match value.kind {
        SexpKind::Float(value) if value >= 0.0 && value.is_finite() => Some(value),
        SexpKind::Int(value) if value >= 0 => Some(value as f64),
        _ => None,
    }
}

/// The search a `(search …)` clause names.
fn search_of(value: &Sexp) -> Result<Search, Vec<Diagnostic>> {
    let shape = "`search` is `(search exhaustive)`, `(search (random N))` with N ≥ 1, or `(search greedy)`";
    match (value.symbol(), value.list()) {
        (Some("exhaustive"), _) => Ok(Search::Exhaustive),
        (Some("greedy"), _) => Ok(Search::Greedy),
        (_, Some([head, count])) if head.symbol() == Some("random") => match count.kind {
            SexpKind::Int(count) if count >= 1 => Ok(Search::Random(u64::try_from(count).unwrap_or(u64::MAX))),
            _ => Err(syntax(count.span, shape)),
        },
        (Some(other), _) => {
            let diagnostic = Diagnostic::error(Kind::Syntax, format!("`{other}` is not a search"))
                .with_label(value.span, "")
                .with_note(shape)
                .with_suggestion(other, ["exhaustive", "random", "greedy"]);
            Err(vec![diagnostic])
        }
        _ => Err(syntax(value.span, shape)),
    }
}

/// Moves `point` to the next point of the space in order (the last parameter fastest); false
/// after the last.
fn next_point(point: &mut [usize], radices: &[usize]) -> bool {
    for (coordinate, &radix) in point.iter_mut().zip(radices).rev() {
        *coordinate += 1;
        if *coordinate < radix {
            return true;
        }
        *coordinate = 0;
    }
    false
}

/// How many points the space has (saturating: a space too large to count is too large to time).
fn space_size(radices: &[usize]) -> u64 {
    radices.iter().fold(1u64, |size, &radix| size.saturating_mul(radix as u64))
}

fn interrupted(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(|diagnostic| diagnostic.kind == Kind::Interrupted)
}

/// A variant's failure as its table row says it: the first diagnostic's line.
fn first_line(diagnostics: Vec<Diagnostic>) -> String {
    diagnostics.first().map_or_else(
        || "failed".to_string(),
        |diagnostic| format!("error[{}]: {}", diagnostic.kind.code(), diagnostic.message),
    )
}
