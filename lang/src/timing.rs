//! Timing: the closed set of phases a cell goes through, and the time each took.

use std::time::{Duration, Instant};

/// The phases of a cell, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Reading text into forms.
    Parse,
    /// Running unquotes (Rhai).
    Expand,
    /// Type checking.
    Check,
    /// Emitting LLVM IR.
    Codegen,
    /// LLVM IR passes.
    Optimise,
    /// Object code and ORC linking.
    Link,
    /// Running the compiled code.
    Run,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 7] =
        [Phase::Parse, Phase::Expand, Phase::Check, Phase::Codegen, Phase::Optimise, Phase::Link, Phase::Run];

    /// The phase's row name in timing tables.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Parse => "parse",
            Phase::Expand => "expand",
            Phase::Check => "check",
            Phase::Codegen => "codegen",
            Phase::Optimise => "optimise",
            Phase::Link => "link",
            Phase::Run => "run",
        }
    }
}

/// Time per phase for one cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhaseTimes {
    /// Phases in the order they ran, each with its total duration.
    pub phases: Vec<(Phase, Duration)>,
    /// GPU rows (§7.5): PTX built, modules loaded, transfers and kernels, in order.
    pub device: Vec<DeviceTiming>,
    /// Functions whose code the background compiler replaced before the cell ran (tiered
    /// compilation): not part of the cell's time.
    pub promotions: Vec<Promotion>,
    /// When the cell's code started to run (the zero of its timeline), if it ran.
    pub started: Option<Instant>,
}

/// A function promoted by tiered compilation: its code recompiled at a higher level in the
/// background and swapped in at a cell boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct Promotion {
    /// The function.
    pub function: String,
    /// The level its code now has.
    pub level: u8,
    /// The background compiler's time for it (and the other functions of its cell).
    pub compile: Duration,
    /// From its definition to the swap.
    pub since_definition: Duration,
}

/// One GPU row of a cell's timing table.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceTiming {
    /// `ptx`, `load`, `h2d`, `d2h`, `d2d` or `kernel NAME`.
    pub label: String,
    /// Wall time, or the time between CUDA events around a kernel.
    pub duration: Duration,
    /// Bytes moved (transfers) or read and written as annotated (kernels), when known.
    pub bytes: Option<u64>,
    /// What else the row says: the launch's grid and block, GB/s, the module's kernel.
    pub detail: String,
    /// Whether it happened while the cell's code ran, so `run` already counts it.
    pub during_run: bool,
    /// Where it ran: on the host's lane (work the host waited for), or in a submission.
    pub lane: Lane,
    /// When it started (the host's clock; a device's events are placed on it), for the
    /// timeline; `None` for rows outside the code's run (builds).
    pub start: Option<Instant>,
}

/// A lane of the timeline (docs/language.md §7.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// The host: its code, and the device work it waits for (`launch`, `gpu-copy`, `await`).
    Host,
    /// Submission N (its fence's number): its commands, concurrent with the host.
    Submission(u64),
}

impl PhaseTimes {
    /// Runs `work`, adding its duration to `phase`.
    pub(crate) fn time<T>(&mut self, phase: Phase, work: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let result = work();
        self.add(phase, start.elapsed());
        result
    }

    pub(crate) fn add(&mut self, phase: Phase, duration: Duration) {
        match self.phases.iter_mut().find(|(existing, _)| *existing == phase) {
            Some((_, total)) => *total += duration,
            None => self.phases.push((phase, duration)),
        }
    }

    /// The duration of one phase (zero if it did not run).
    pub fn get(&self, phase: Phase) -> Duration {
        self.phases.iter().find(|(existing, _)| *existing == phase).map_or(Duration::ZERO, |(_, duration)| *duration)
    }

    /// The sum of all phases, and of the GPU work outside them (building PTX).
    pub fn total(&self) -> Duration {
        let outside: Duration = self.device.iter().filter(|row| !row.during_run).map(|row| row.duration).sum();
        self.phases.iter().map(|(_, duration)| *duration).sum::<Duration>() + outside
    }
}

/// Throughput of a benchmark, from the work per run the user gave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Throughput {
    /// Bytes per second (`(bytes E)`).
    Bytes(f64),
    /// Floating-point operations per second (`(flops E)`).
    Flops(f64),
}

/// What `(bench EXPR)` measured: per-run statistics after warm-up.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchReport {
    /// Timed runs.
    pub runs: u64,
    /// Wall time of all timed runs.
    pub elapsed: Duration,
    /// Untimed warm-up runs.
    pub warmup: u64,
    /// Fastest run.
    pub min: Duration,
    /// Median run.
    pub median: Duration,
    /// Mean run.
    pub mean: Duration,
    /// Standard deviation of the runs.
    pub std: Duration,
    /// Work per second at the median, for each kind of work the user gave per run (bytes, then
    /// FLOPs).
    pub throughput: Vec<Throughput>,
    /// Per-run durations in nanoseconds (a batch's mean when runs were timed in batches),
    /// sorted, for charts: at most `SAMPLES_KEPT`, at evenly spaced ranks when there were more,
    /// always with the fastest and the slowest.
    pub samples: Vec<f64>,
}

/// How many samples a report keeps: enough for a histogram, few enough for every variant of an
/// autotuning run to keep its own.
const SAMPLES_KEPT: usize = 1000;

/// How far the mean may drift above the median before a benchmark says its runs are noisy.
const NOISY_MEAN: f64 = 1.5;

impl BenchReport {
    /// Statistics over per-run durations in nanoseconds (not empty).
    pub(crate) fn from_samples(mut samples: Vec<f64>, warmup: u64, elapsed: Duration) -> BenchReport {
        samples.sort_by(f64::total_cmp);
        let count = samples.len().max(1) as f64;
        let mean = samples.iter().sum::<f64>() / count;
        let variance = samples.iter().map(|sample| (sample - mean).powi(2)).sum::<f64>() / (count - 1.0).max(1.0);
        let median = match samples.len() {
            0 => 0.0,
            length if length % 2 == 1 => samples[length / 2],
            length => (samples[length / 2 - 1] + samples[length / 2]) / 2.0,
        };
        let nanos = |value: f64| Duration::from_nanos(value.max(0.0).round() as u64);
        BenchReport {
            runs: samples.len() as u64,
            elapsed,
            warmup,
            min: nanos(samples.first().copied().unwrap_or(0.0)),
            median: nanos(median),
            mean: nanos(mean),
            std: nanos(variance.sqrt()),
            throughput: Vec::new(),
            samples: keep_evenly(samples, SAMPLES_KEPT),
        }
    }

    /// A warning when a few slow runs took much of the time, as IPython's `%timeit` warns when
    /// its slowest run is far from the others: the mean at least 1.5× the median. (One slow
    /// sample among many batched ones, a preemption, moves the mean little and is no warning.)
    pub fn noise(&self) -> Option<String> {
        let median = self.median.as_secs_f64();
        let mean = self.mean.as_secs_f64();
        if median <= 0.0 || mean < NOISY_MEAN * median {
            return None;
        }
        let slowest = self.samples.last().copied().unwrap_or(0.0) / 1e9;
        let times = |ratio: f64| if ratio < 10.0 { format!("{ratio:.1}×") } else { format!("{ratio:.0}×") };
        Some(format!(
            "noisy: the mean is {} the median and the slowest run {}: a few runs took much longer \
             (other work on the machine, a first run's cold caches or page faults, or state that changes \
             from run to run); the median is the typical run",
            times(mean / median),
            times(slowest / median)
        ))
    }
}

/// At most `count` of the sorted `samples`, at evenly spaced ranks from the first to the last.
fn keep_evenly(samples: Vec<f64>, count: usize) -> Vec<f64> {
    if samples.len() <= count || count < 2 {
        return samples;
    }
    let step = (samples.len() - 1) as f64 / (count - 1) as f64;
    (0..count).map(|index| samples[((index as f64 * step).round() as usize).min(samples.len() - 1)]).collect()
}

/// One variant of an autotuning run.
#[derive(Clone, Debug, PartialEq)]
pub struct VariantReport {
    /// The parameter values, in the order of `AutotuneReport::params`.
    pub values: Vec<String>,
    /// Its timing, or why it was dropped.
    pub result: Result<BenchReport, String>,
    /// Whether it was timed now or its result came from the tuning cache.
    pub source: VariantSource,
    /// The Slurm node that timed it (`None`: this session).
    pub node: Option<String>,
}

/// Where a variant's result comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariantSource {
    /// Compiled, checked and timed by this autotune.
    Timed,
    /// The tuning cache's: an earlier autotune timed the same variant on this machine.
    Cached,
}

impl VariantSource {
    /// The table's word for it.
    pub fn label(self) -> &'static str {
        match self {
            VariantSource::Timed => "timed",
            VariantSource::Cached => "cached",
        }
    }
}

/// What `(autotune …)` found: every variant, sorted fastest first (failures last).
#[derive(Clone, Debug, PartialEq)]
pub struct AutotuneReport {
    /// The tuned definition's name.
    pub name: String,
    /// Parameter names.
    pub params: Vec<String>,
    /// The variants, fastest first.
    pub variants: Vec<VariantReport>,
    /// Median of the first variant (in parameter order), the baseline of "vs first".
    pub baseline: Option<Duration>,
    /// How many points the parameter space has (saturating).
    pub space: u64,
    /// How the variants were chosen: `exhaustive`, `random N`, `greedy`.
    pub search: String,
    /// The budget, if it ran out before the search ended.
    pub budget_spent: Option<Duration>,
    /// Where the variants were timed, when not here: `slurm (nodes 1)`.
    pub on: Option<String>,
}

impl AutotuneReport {
    /// The first line of its table: the variants tried (of how many points, by which search),
    /// how many passed, how many were timed now and how many came from the tuning cache.
    pub fn summary(&self) -> String {
        self.summary_naming_nodes(&|node| node.to_string())
    }

    /// `summary`, each Slurm node named by `name` (a transcript masks them: they are the
    /// machine's host names).
    pub fn summary_naming_nodes(&self, name: &dyn Fn(&str) -> String) -> String {
        let tried = self.variants.len();
        let ok = self.variants.iter().filter(|variant| variant.result.is_ok()).count();
        let cached = self.variants.iter().filter(|variant| variant.source == VariantSource::Cached).count();
        let plural = if self.space == 1 { "" } else { "s" };
        let mut text = if tried as u64 == self.space {
            format!("autotune {}: {tried} variant{plural}, {ok} ok", self.name)
        } else {
            format!("autotune {}: {tried} of {} variants (search: {}), {ok} ok", self.name, self.space, self.search)
        };
        text.push_str(&format!(" ({} timed, {cached} cached)", tried - cached));
        if let Some(budget) = self.budget_spent {
            text.push_str(&format!("; the budget of {} s ran out", budget.as_secs_f64()));
        }
        if let Some(on) = &self.on {
            let mut nodes: Vec<String> =
                self.variants.iter().filter_map(|variant| variant.node.as_deref()).map(name).collect();
            nodes.sort();
            nodes.dedup();
            let nodes = if nodes.is_empty() { "no node answered".to_string() } else { nodes.join(", ") };
            text.push_str(&format!("; on {on}: {nodes}"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::BenchReport;

    #[test]
    fn a_bench_is_noisy_when_slow_runs_pull_the_mean_above_the_median() {
        // %timeit's case: one run of twenty far slower than the rest.
        let mut samples = vec![100.0; 19];
        samples.push(100_000.0);
        let noisy = BenchReport::from_samples(samples, 0, Duration::from_millis(1));
        let warning = noisy.noise().expect("a warning");
        assert!(warning.starts_with("noisy: the mean is 51× the median and the slowest run 1000×"), "{warning}");
        // One preempted sample among a thousand moves the mean a little: no warning.
        let mut samples = vec![100.0; 999];
        samples.push(40_000.0);
        assert_eq!(BenchReport::from_samples(samples, 0, Duration::from_millis(1)).noise(), None);
        // Nor does a spread without a tail.
        let spread: Vec<f64> = (0..100).map(|index| 100.0 + index as f64).collect();
        assert_eq!(BenchReport::from_samples(spread, 0, Duration::from_millis(1)).noise(), None);
    }

    #[test]
    fn report_keeps_few_samples_with_both_extremes() {
        let samples: Vec<f64> = (0..100_000).rev().map(f64::from).collect();
        let report = BenchReport::from_samples(samples, 0, Duration::ZERO);
        assert_eq!(report.runs, 100_000);
        assert_eq!(report.samples.len(), super::SAMPLES_KEPT);
        assert_eq!(report.samples.first(), Some(&0.0));
        assert_eq!(report.samples.last(), Some(&99_999.0));
        assert!(report.samples.windows(2).all(|pair| pair[0] <= pair[1]));
        let few = BenchReport::from_samples(vec![3.0, 1.0, 2.0], 0, Duration::ZERO);
        assert_eq!(few.samples, [1.0, 2.0, 3.0]);
    }
}
