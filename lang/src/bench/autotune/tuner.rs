//! The state of an autotune while it runs: the variants visited, the reference values the
//! others are checked against, the budget's clock, and the progress line it shows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::reader::Sexp;
use crate::timing::{VariantReport, VariantSource};

/// The least time between two progress lines of an autotune (the last always goes out): a
/// front end redraws each.
const STATUS_INTERVAL: Duration = Duration::from_millis(100);
/// How long an autotune runs before it shows its progress, as tqdm's `delay`.
const STATUS_DELAY: Duration = Duration::from_millis(500);

/// One point of the space, made concrete: its labels, its definition of the tuned function (or
/// why there is none), and the run and check with the point's values in them.
#[derive(Clone)]
pub(super) struct Candidate {
    pub(super) labels: Vec<String>,
    /// What a replay of the session writes for the autotune this point won: the generator's
    /// call (`,(gen_sum 4)`), or the implementation's definition renamed.
    pub(super) replay: String,
    pub(super) definition: Result<Vec<Sexp>, String>,
    pub(super) run: Sexp,
    pub(super) check: Option<Sexp>,
    pub(super) check_buffer: Option<(Sexp, Sexp)>,
}

/// What the first variant of an `autotune` left for the others: its check values, and the
/// checked buffer's contents before it ran.
#[derive(Default)]
pub(super) struct Reference {
    pub(super) values: Option<Vec<String>>,
    pub(super) initial: Option<Vec<u8>>,
}

/// A variant visited: its point and row, its definition if it passed (a variant timed on a
/// Slurm node has none until it wins), and the key of the machine that timed it there.
pub(super) struct Visited {
    pub(super) point: Vec<usize>,
    pub(super) report: VariantReport,
    pub(super) definition: Option<Vec<Sexp>>,
    pub(super) machine: Option<String>,
}

/// An autotune in progress: the variants visited so far, the reference values they are checked
/// against, and the clock of the budget.
pub(super) struct Tuner {
    pub(super) visited: Vec<Visited>,
    pub(super) by_point: HashMap<Vec<usize>, usize>,
    pub(super) reference: Reference,
    /// A variant the cache gave, whose check values are the reference once a variant is timed:
    /// it runs again (untimed) before that variant.
    pub(super) cached_reference: Option<Candidate>,
    pub(super) started: Instant,
    /// Whether the budget ran out before the search ended.
    pub(super) out_of_budget: bool,
    /// The work per run of each `(bytes E)` or `(flops E)` evaluated, by E's text with the
    /// point's values in it.
    pub(super) work: HashMap<String, f64>,
    /// How many points the search will visit, when it knows (not greedy's).
    pub(super) planned: Option<usize>,
    /// When the last progress line went out.
    pub(super) last_status: Option<Instant>,
}

impl Tuner {
    pub(super) fn new() -> Tuner {
        Tuner {
            visited: Vec::new(),
            by_point: HashMap::new(),
            reference: Reference::default(),
            cached_reference: None,
            started: Instant::now(),
            out_of_budget: false,
            work: HashMap::new(),
            planned: None,
            last_status: None,
        }
    }

    /// The progress line: variants visited (of how many), how many came from the cache, the
    /// time so far and an estimate of the time left (the timed variants' mean time for each
    /// point still to visit, within the budget). `None` before the autotune has run for
    /// `STATUS_DELAY` (a quick one, or one the cache answers, shows no progress, not even its
    /// last line) and when the last line went out less than `STATUS_INTERVAL` ago, unless
    /// `finished`.
    pub(super) fn status(&mut self, name: &str, budget: Option<Duration>, finished: bool) -> Option<String> {
        let now = Instant::now();
        match self.last_status {
            None if finished || now - self.started < STATUS_DELAY => return None,
            Some(last) if !finished && now - last < STATUS_INTERVAL => return None,
            _ => {}
        }
        self.last_status = Some(now);
        let visited = self.visited.len();
        let cached = self.visited.iter().filter(|visited| visited.report.source == VariantSource::Cached).count();
        let elapsed = self.started.elapsed();
        let mut line = match self.planned {
            Some(planned) => format!("autotune {name}: {visited} of {planned} variants"),
            None => format!("autotune {name}: {visited} variant{}", if visited == 1 { "" } else { "s" }),
        };
        if cached > 0 {
            line.push_str(&format!(" ({cached} cached)"));
        }
        if finished {
            line.push_str(&format!(" in {:.1} s", elapsed.as_secs_f64()));
            return Some(line);
        }
        line.push_str(&format!(", {:.1} s", elapsed.as_secs_f64()));
        let timed = visited - cached;
        if let (Some(planned), true) = (self.planned, timed > 0) {
            let mut left = elapsed.as_secs_f64() / timed as f64 * planned.saturating_sub(visited) as f64;
            if let Some(budget) = budget {
                left = left.min(budget.saturating_sub(elapsed).as_secs_f64());
            }
            line.push_str(&format!(", about {left:.0} s left"));
        }
        Some(line)
    }

    /// The median of the variant visited at `index`, if it passed.
    pub(super) fn median(&self, index: usize) -> Option<Duration> {
        self.visited[index].report.result.as_ref().ok().map(|report| report.median)
    }

    /// Adds a visited variant; returns its median if it passed.
    pub(super) fn record(
        &mut self,
        point: &[usize],
        report: VariantReport,
        definition: Option<Vec<Sexp>>,
    ) -> Option<Duration> {
        self.record_from(point, report, definition, None)
    }

    /// `record`, for a variant timed on a machine of key `machine`.
    pub(super) fn record_from(
        &mut self,
        point: &[usize],
        report: VariantReport,
        definition: Option<Vec<Sexp>>,
        machine: Option<String>,
    ) -> Option<Duration> {
        let index = self.visited.len();
        self.by_point.insert(point.to_vec(), index);
        self.visited.push(Visited { point: point.to_vec(), report, definition, machine });
        self.median(index)
    }

    /// The median of the variant at `point`, if it was visited and passed.
    pub(super) fn median_at(&self, point: &[usize]) -> Option<Duration> {
        self.by_point.get(point).and_then(|&index| self.median(index))
    }
}
