//! The tuning cache: what `(autotune …)` measured of each variant, kept on disk across
//! sessions, so an unchanged autotune cell run again times nothing.
//!
//! A result is keyed by everything that decides it: the variant's expanded source, the run
//! and check expressions and the tolerance, the source of every session function, global and
//! struct they reach, the opt level, and the machine (the CPU and its features; the GPU, or the
//! simulator, when the code reaches a GPU form). It holds the variant's statistics and the
//! digest of its check values, or why it failed. The store is the object cache's kind (atomic
//! writes, a bounded size, least recently used entries dropped, damaged entries ignored with a
//! warning) in `$XDG_CACHE_HOME/quasi/tune/`.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backend::{Format, ObjectCache, ObjectKey};
use crate::timing::BenchReport;

/// The environment variable that turns the tuning cache off (`off` or `0`) or names its folder.
pub const TUNE_CACHE_VARIABLE: &str = "QUASI_TUNE_CACHE";

/// The bytes the tuning cache keeps (a result with its samples is ~10 KiB).
pub const TUNE_CACHE_BUDGET: u64 = 64 << 20;

const EXTENSION: &str = "qt";

static TUNING: Format = Format::new(b"quasi-tune-1\n", EXTENSION, "the tuning cache", TUNE_CACHE_BUDGET);

/// A folder of tuning results.
#[derive(Debug)]
pub struct TuneCache {
    store: ObjectCache,
    /// A folder of its own, removed with it (`quasi test`: a transcript's tuning is its own).
    temporary: bool,
}

/// What one variant gave: its timing or why it failed, and the digest of its check values.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TuneResult {
    pub result: Result<BenchReport, String>,
    pub check: u64,
}

/// The key of one variant's result: its text, whole.
pub(crate) struct TuneKey(ObjectKey);

impl TuneKey {
    /// The key of `text`: every line of what decides the result.
    pub(crate) fn new(text: &str) -> TuneKey {
        let mut bytes = format!("quasi {}\n", env!("CARGO_PKG_VERSION")).into_bytes();
        bytes.extend_from_slice(text.as_bytes());
        TuneKey(ObjectKey::from_bytes(bytes, EXTENSION))
    }
}

/// The digest of a variant's check values, kept with its result.
pub(crate) fn check_digest(values: &[String]) -> u64 {
    let mut hasher = DefaultHasher::new();
    values.hash(&mut hasher);
    hasher.finish()
}

impl TuneCache {
    /// The cache in `directory` (made when the first result is stored).
    pub fn new(directory: impl Into<PathBuf>) -> TuneCache {
        TuneCache { store: ObjectCache::with_format(directory, &TUNING), temporary: false }
    }

    /// The cache the environment asks for: `QUASI_TUNE_CACHE=off` (or `0`) for none,
    /// `QUASI_TUNE_CACHE=DIR` for that folder, else `$XDG_CACHE_HOME/quasi/tune` or
    /// `~/.cache/quasi/tune`. `None` also when there is no home to put it in.
    pub fn from_environment() -> Option<TuneCache> {
        ObjectCache::from_environment_as(TUNE_CACHE_VARIABLE, "tune", &TUNING)
            .map(|store| TuneCache { store, temporary: false })
    }

    /// A cache in a new folder of the temporary directory, removed when the cache is dropped.
    pub fn temporary() -> TuneCache {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("quasi-tune-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        TuneCache { store: ObjectCache::with_format(std::env::temp_dir().join(name), &TUNING), temporary: true }
    }

    /// The cache's folder.
    pub fn directory(&self) -> &Path {
        self.store.directory()
    }

    /// The number of results and their bytes.
    pub fn usage(&self) -> std::io::Result<(usize, u64)> {
        self.store.usage()
    }

    /// Removes every result; returns how many there were and their bytes.
    pub fn clear(&self) -> std::io::Result<(usize, u64)> {
        self.store.clear()
    }

    /// What went wrong since the last call, as warnings.
    pub fn take_problems(&self) -> Vec<String> {
        self.store.take_problems()
    }

    /// The result stored under `key`; a damaged one is a miss, with a warning.
    pub(crate) fn lookup(&self, key: &TuneKey) -> Option<TuneResult> {
        let bytes = self.store.lookup(&key.0)?;
        let parsed = std::str::from_utf8(&bytes).ok().and_then(parse_result);
        if parsed.is_none() {
            self.store.note_corrupt(key.0.file_name());
        }
        parsed
    }

    /// Stores `result` under `key`.
    pub(crate) fn store(&self, key: &TuneKey, result: &TuneResult) {
        self.store.store(&key.0, print_result(result).as_bytes());
    }
}

impl Drop for TuneCache {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(self.store.directory());
        }
    }
}

/// A result as its entry holds it (and a Slurm worker sends it): a line per statistic
/// (nanoseconds), or `failed` and why.
pub(crate) fn print_result(result: &TuneResult) -> String {
    match &result.result {
        Ok(report) => {
            let samples: Vec<String> = report.samples.iter().map(f64::to_string).collect();
            format!(
                "ok\ncheck {:016x}\nruns {}\nwarmup {}\nelapsed {}\nmin {}\nmedian {}\nmean {}\nstd {}\nsamples {}\nend\n",
                result.check,
                report.runs,
                report.warmup,
                report.elapsed.as_nanos(),
                report.min.as_nanos(),
                report.median.as_nanos(),
                report.mean.as_nanos(),
                report.std.as_nanos(),
                samples.join(" ")
            )
        }
        Err(reason) => format!("failed\n{reason}\nend\n"),
    }
}

/// The result `print_result` wrote, or `None` if the text is not one (or was cut short: it ends
/// with `end`).
pub(crate) fn parse_result(text: &str) -> Option<TuneResult> {
    let text = text.strip_suffix("\nend\n")?;
    if let Some(reason) = text.strip_prefix("failed\n") {
        return Some(TuneResult { result: Err(reason.to_string()), check: 0 });
    }
    let mut lines = text.strip_prefix("ok\n")?.lines();
    let mut field = |name: &str| lines.next()?.strip_prefix(name)?.strip_prefix(' ').map(str::to_string);
    let check = u64::from_str_radix(&field("check")?, 16).ok()?;
    let number = |text: String| text.parse::<u64>().ok();
    let runs = number(field("runs")?)?;
    let warmup = number(field("warmup")?)?;
    let mut nanos = |name: &str| field(name).and_then(number).map(Duration::from_nanos);
    let (elapsed, min, median, mean, std) =
        (nanos("elapsed")?, nanos("min")?, nanos("median")?, nanos("mean")?, nanos("std")?);
    let samples = lines
        .next()?
        .strip_prefix("samples")?
        .split_whitespace()
        .map(|sample| sample.parse::<f64>().ok())
        .collect::<Option<Vec<f64>>>()?;
    if lines.next().is_some() {
        return None;
    }
    let report = BenchReport { runs, elapsed, warmup, min, median, mean, std, throughput: Vec::new(), samples };
    Some(TuneResult { result: Ok(report), check })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> BenchReport {
        BenchReport {
            runs: 40,
            elapsed: Duration::from_micros(4100),
            warmup: 1,
            min: Duration::from_micros(98),
            median: Duration::from_micros(100),
            mean: Duration::from_nanos(102_500),
            std: Duration::from_nanos(1_250),
            throughput: Vec::new(),
            samples: vec![98_000.0, 100_000.0, 112_345.5],
        }
    }

    #[test]
    fn a_result_reads_back_as_written() {
        let timed = TuneResult { result: Ok(report()), check: 0xdead_beef };
        assert_eq!(parse_result(&print_result(&timed)), Some(timed));
        let failed = TuneResult { result: Err("error[type]: no `x`\nsecond line".into()), check: 0 };
        assert_eq!(parse_result(&print_result(&failed)), Some(failed));
        assert_eq!(parse_result("ok\ncheck zz\n"), None);
        assert_eq!(parse_result("ok\ncheck 1\nruns 2\n"), None, "a result cut short is none");
    }

    #[test]
    fn results_are_kept_by_key_and_a_damaged_entry_is_a_miss_with_a_warning() {
        let cache = TuneCache::temporary();
        let directory = cache.directory().to_path_buf();
        let (key, other) = (TuneKey::new("variant a"), TuneKey::new("variant b"));
        let result = TuneResult { result: Ok(report()), check: 7 };
        cache.store(&key, &result);
        assert_eq!(cache.lookup(&key), Some(result));
        assert_eq!(cache.lookup(&other), None);
        assert_eq!(cache.take_problems(), Vec::<String>::new());
        // An entry whose result is not one Quasi wrote: ignored, said once.
        let path = directory.join(key.0.file_name());
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() - 20;
        bytes.truncate(at);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(cache.lookup(&key), None);
        let problems = cache.take_problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("the tuning cache ignored a damaged entry"), "{problems:?}");
        assert_eq!(cache.usage().unwrap().0, 1);
        drop(cache);
        assert!(!directory.exists(), "a temporary cache goes with its session");
    }
}
