//! The journal: the session as the cells that made it, for a Slurm worker to replay
//! (`bench::slurm`), and the worker's side of an autotune on Slurm (`run_tune_worker`).
//!
//! Each cell that committed is kept by its source (no copy of its text), with its autotune forms
//! replaced by what they left — the winner's generator call (`,(gen_sum 4)`) or renamed
//! definition, or nothing when the autotune ended without a winner — so a replay defines what
//! the session defined without tuning again; its benches are replaced by nothing. Only forms
//! written in the cell are replaced: an autotune a macro made runs again in the replay. A cell
//! interrupted while it ran is not kept (its replay could run as long); nor are commands, except
//! what sets the session up (`:opt`, `:gpu`, written when a job starts) and `:load`ed Rhai
//! scripts.

use std::sync::atomic::AtomicBool;

use super::history::JournalEntry;
use super::Session;
use crate::bench::slurm::{self, Job, JobCell, WorkerLine};
use crate::diagnostics::{Kind, Severity};
use crate::gpu::Mode as GpuMode;
use crate::reader::Span;
use crate::source::SourceId;
use crate::{Outcome, SessionConfig, TuneCache};

impl Session {
    /// Keeps the cell read from `source` in the journal, with the replacements its autotunes
    /// asked for, unless it was interrupted while it ran.
    pub(super) fn journal_cell(&mut self, source: SourceId, outcome: &Outcome) {
        let replacements = std::mem::take(&mut self.history.replacements);
        let interrupted = outcome
            .diagnostics
            .iter()
            .any(|diagnostic| diagnostic.severity == Severity::Error && diagnostic.kind == Kind::Interrupted);
        if interrupted {
            return;
        }
        let text = self.history.text(source);
        // Only a form written in the cell itself is replaced (one a macro made is replayed).
        let mut replaced: Vec<(usize, usize, String)> = replacements
            .into_iter()
            .filter(|(span, _)| span.source == source)
            .map(|(span, text)| (span.start as usize, span.end as usize, text))
            .filter(|(start, end, _)| {
                text.get(*start..*end).is_some_and(|form| form.starts_with("(autotune") || form.starts_with("(bench"))
            })
            .collect();
        replaced.sort_by_key(|(start, ..)| *start);
        self.history.journal.push(JournalEntry::Cell { source, replaced });
    }

    /// Keeps a `:load`ed Rhai script in the journal.
    pub(super) fn journal_rhai(&mut self, source: SourceId) {
        self.history.journal.push(JournalEntry::Rhai { source });
    }

    /// A replay writes `text` instead of the form at `span` (kept until the cell ends).
    pub(super) fn replace_in_replay(&mut self, span: Span, text: String) {
        self.history.replacements.push((span, text));
    }

    /// The commands that set a worker's session up as this one is, and the journal's cells.
    pub(super) fn replay_job(&self) -> (Vec<String>, Vec<JobCell>) {
        let opt = if self.opt_pinned { format!(":opt {}", self.opt_level) } else { ":opt tiered".to_string() };
        let gpu = match self.gpu.runtime.mode() {
            GpuMode::Sim { check: true } => ":gpu sim",
            GpuMode::Sim { check: false } => ":gpu sim unchecked",
            GpuMode::Device => ":gpu device",
        };
        let cells = self
            .history
            .journal
            .iter()
            .map(|entry| match entry {
                JournalEntry::Cell { source, replaced } => {
                    let text = self.history.text(*source);
                    let mut replayed = String::with_capacity(text.len());
                    let mut at = 0;
                    for (start, end, replacement) in replaced {
                        replayed.push_str(&text[at..*start]);
                        replayed.push_str(replacement);
                        at = *end;
                    }
                    replayed.push_str(&text[at..]);
                    JobCell::Cell { name: self.history.source_name(*source).to_string(), text: replayed }
                }
                JournalEntry::Rhai { source } => JobCell::Rhai {
                    name: self.history.source_name(*source).to_string(),
                    text: self.history.text(*source).to_string(),
                },
            })
            .collect();
        (vec![opt, gpu.to_string()], cells)
    }
}

/// `quasi-engine tune-worker JOB`: one task of an autotune on Slurm. Replays the job's session,
/// times this task's share of its points (`SLURM_PROCID` of `SLURM_NTASKS`) and hands `emit` a
/// line for each (and one when it is ready, or cannot go on). Returns the process's status.
pub fn run_tune_worker(job: &std::path::Path, emit: &mut dyn FnMut(&str)) -> i32 {
    let rank = slurm_number("SLURM_PROCID").unwrap_or(0);
    let tasks = slurm_number("SLURM_NTASKS").unwrap_or(1).max(1);
    let node = slurm_node();
    match tune_worker(job, rank, tasks, &node, emit) {
        Ok(()) => 0,
        Err(reason) => {
            emit(&WorkerLine::Failed { task: rank, node, reason }.to_line());
            1
        }
    }
}

fn tune_worker(
    job: &std::path::Path,
    rank: usize,
    tasks: usize,
    node: &str,
    emit: &mut dyn FnMut(&str),
) -> Result<(), String> {
    let text =
        std::fs::read_to_string(job).map_err(|error| format!("cannot read the job file {}: {error}", job.display()))?;
    let job: Job =
        serde_json::from_str(&text).map_err(|error| format!("the job file {} is not one: {error}", job.display()))?;
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })
        .map_err(|error| format!("cannot start a session: {error}"))?;
    session.set_tune_cache(job.tune_cache.as_ref().map(TuneCache::new));
    for command in &job.settings {
        let outcome = session.eval(command);
        if outcome.failed() {
            return Err(format!("`{command}`: {}", first_error(&outcome)));
        }
    }
    for (index, cell) in job.cells.iter().enumerate() {
        let (name, outcome) = match cell {
            JobCell::Cell { name, text } => (name, session.eval(text)),
            JobCell::Rhai { name, text } => (name, session.run_rhai(name, text.clone())),
        };
        // A fault at run time replays as it happened; a cell that no longer compiles does not.
        let compiled = outcome.diagnostics.iter().all(|diagnostic| {
            diagnostic.severity != Severity::Error || matches!(diagnostic.kind, Kind::RuntimeFault | Kind::Gpu)
        });
        if !compiled {
            return Err(format!("the replay of cell {} ({name}) failed: {}", index + 1, first_error(&outcome)));
        }
    }
    emit(&WorkerLine::Ready { task: rank, node: node.to_string() }.to_line());
    let points = slurm::share(&job.points, rank, tasks);
    session.tune_points(&job.form, &points, node, emit)
}

fn first_error(outcome: &Outcome) -> String {
    outcome.diagnostics.iter().find(|diagnostic| diagnostic.severity == Severity::Error).map_or_else(
        || "failed".to_string(),
        |diagnostic| format!("error[{}]: {}", diagnostic.kind.code(), diagnostic.message),
    )
}

fn slurm_number(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// The node's name: Slurm's, else the host's.
fn slurm_node() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|name| name.trim().to_string()))
        .unwrap_or_else(|| "?".to_string())
}

impl Session {
    /// Times `points` of the autotune written `form` and emits a worker line for each.
    fn tune_points(
        &mut self,
        form: &str,
        points: &[Vec<usize>],
        node: &str,
        emit: &mut dyn FnMut(&str),
    ) -> Result<(), String> {
        let source = self.history.add_source("autotune (Slurm job)".to_string(), form.to_string());
        let forms = crate::reader::read(source, self.history.text(source))
            .map_err(|diagnostics| format!("the job's autotune does not read: {}", diagnostics[0].message))?;
        let [form] = forms.as_slice() else { return Err("the job holds no single autotune form".to_string()) };
        let mut sent = |point: &[usize], report: &crate::VariantReport, result: String, machine: String| {
            let line = WorkerLine::Variant {
                point: point.to_vec(),
                result,
                cached: report.source == crate::VariantSource::Cached,
                node: node.to_string(),
                machine,
            };
            emit(&line.to_line());
        };
        crate::bench::tune_points(self, form, points, &mut sent).map_err(|diagnostics| {
            diagnostics.first().map_or_else(
                || "failed".to_string(),
                |diagnostic| format!("error[{}]: {}", diagnostic.kind.code(), diagnostic.message),
            )
        })
    }

    /// Whether the session was asked to stop.
    pub(super) fn interrupt_flag(&self) -> &AtomicBool {
        &self.interrupt
    }
}
