//! An autotune's Slurm side (`bench::slurm`): a batch of points sent as one step, its rows
//! recorded as the nodes send them, and a worker's share of the points visited as a local
//! autotune visits them.

use std::collections::{HashMap, HashSet};

use super::super::slurm::{self, Job, JobEnd, JobError, SlurmOptions, WorkerLine};
use super::super::{syntax, Bencher};
use super::key::reached_source;
use super::{interrupted, Failure, Space, Tuner, Tuning};
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::Sexp;
use crate::timing::{VariantReport, VariantSource};
use crate::tune_cache::TuneResult;

impl Bencher<'_> {
    /// Times `points` on a Slurm cluster (`bench::slurm`): each row as its node sends it.
    pub(super) fn visit_on_slurm(
        &mut self,
        space: &Space<'_>,
        tuning: &Tuning<'_>,
        options: &SlurmOptions,
        tuner: &mut Tuner,
        points: Vec<Vec<usize>>,
    ) -> Result<(), Vec<Diagnostic>> {
        if points.is_empty() || tuner.out_of_budget {
            return Ok(());
        }
        let span = tuning.run.span;
        let (settings, cells) = self.pipeline.replay_job();
        let tune_cache = self.pipeline.tune_cache().map(|cache| cache.directory().to_path_buf());
        let job = Job { settings, cells, form: tuning.form_text.clone(), points: points.clone(), tune_cache };
        let deadline = tuning.budget.map(|budget| tuner.started + budget);
        let mut nodes: HashMap<usize, String> = HashMap::new();
        let mut task_failures: HashMap<usize, String> = HashMap::new();
        let mut on_line = |line: WorkerLine| match line {
            WorkerLine::Ready { task, node } => {
                nodes.insert(task, node);
            }
            WorkerLine::Failed { task, node, reason } => {
                task_failures.insert(task, format!("on {node}: {reason}"));
            }
            WorkerLine::Variant { point, result, cached, node, machine } => {
                if !points.contains(&point) || tuner.by_point.contains_key(&point) {
                    return;
                }
                let result = crate::tune_cache::parse_result(&result)
                    .map_or_else(|| Err(format!("{node} sent a result Quasi cannot read")), |parsed| parsed.result);
                let source = if cached { VariantSource::Cached } else { VariantSource::Timed };
                let report = VariantReport { values: space.labels(&point), result, source, node: Some(node) };
                tuner.record_from(&point, report, None, Some(machine));
                if let Some(line) = tuner.status(tuning.name, tuning.budget, false) {
                    (self.status)(&line);
                }
            }
        };
        let ended = slurm::run(&job, options, self.pipeline.interrupt_flag(), deadline, &mut on_line);
        let why_missing = match ended {
            Err(JobError::Interrupted) => {
                return Err(vec![Diagnostic::error(Kind::Interrupted, "interrupted while Slurm timed the variants")
                    .with_label(span, "")
                    .with_note("the Slurm step was cancelled (scancel)")])
            }
            Err(JobError::Failed(reason)) => {
                return Err(vec![
                    Diagnostic::error(Kind::Io, format!("cannot tune on Slurm: {reason}")).with_label(span, "")
                ])
            }
            Ok(JobEnd::OutOfBudget) => {
                tuner.out_of_budget = true;
                return Ok(());
            }
            Ok(JobEnd::Finished { failure }) => failure,
        };
        // A point no node answered for failed with its task.
        let tasks = options.nodes as usize;
        for (index, point) in points.iter().enumerate() {
            if tuner.by_point.contains_key(point) {
                continue;
            }
            let task = index % tasks.max(1);
            let reason = task_failures.get(&task).cloned().unwrap_or_else(|| {
                let node =
                    nodes.get(&task).map_or_else(|| format!("task {task}"), |node| format!("the task on {node}"));
                let said = why_missing.clone().unwrap_or_else(|| "it sent no result".to_string());
                format!("{node} ended before timing it ({said})")
            });
            let report = VariantReport {
                values: space.labels(point),
                result: Err(reason),
                source: VariantSource::Timed,
                node: nodes.get(&task).cloned(),
            };
            tuner.record(point, report, None);
        }
        Ok(())
    }
}

impl Bencher<'_> {
    /// A Slurm worker's share of an autotune (`bench::slurm`): each of `points` visited as a
    /// local autotune visits it — from the tuning cache, or compiled, checked and timed — and
    /// handed to `emit` with its row, its result as the tuning cache writes it, and this
    /// machine's key. The variants are checked against the first point's values (run untimed
    /// first when it is another task's).
    pub(in crate::bench) fn tune_points(
        &mut self,
        form: &Sexp,
        points: &[Vec<usize>],
        emit: &mut super::super::EmitVariant<'_>,
    ) -> Result<(), Vec<Diagnostic>> {
        let (space, mut tuning) = self.tuning_of(form)?;
        (tuning.slurm, tuning.budget) = (None, None);
        let radices = space.radices();
        if let Some(point) = points.iter().find(|point| {
            point.len() != radices.len() || point.iter().zip(&radices).any(|(value, radix)| value >= radix)
        }) {
            return Err(syntax(form.span, format!("the point {point:?} is not in the autotune's space")));
        }
        let mut tuner = Tuner::new();
        let first = vec![0; radices.len()];
        if !points.contains(&first) {
            let candidate = self.candidate(&space, &tuning, &first)?;
            if let Err(Failure::Diagnostics(diagnostics)) =
                self.run_variant(&candidate, &tuning, &mut tuner.reference, false)
            {
                if interrupted(&diagnostics) {
                    return Err(diagnostics);
                }
            }
        }
        let (_, gpu) = reached_source(self.pipeline.env(), &[form], &HashSet::new());
        let machine = self.pipeline.tuning_machine(gpu);
        for point in points {
            self.visit(&space, &tuning, &mut tuner, point)?;
            let Some(&index) = tuner.by_point.get(point) else { continue };
            let report = &tuner.visited[index].report;
            let result = crate::tune_cache::print_result(&TuneResult { result: report.result.clone(), check: 0 });
            emit(point, report, result, machine.clone());
        }
        Ok(())
    }
}
