//! `(autotune … (on slurm …))`: an autotune's variants timed on the nodes of a Slurm cluster.
//!
//! The launcher writes a job file — the session as the cells that made it (its journal), the
//! settings its variants compile under, the autotune form and the points to time — into a
//! folder the nodes share (`QUASI_SLURM_DIR`, else `$XDG_CACHE_HOME/quasi/slurm` or
//! `~/.cache/quasi/slurm`: home folders are shared on clusters), and runs one `srun` step of one
//! task per node. Each task runs `quasi-engine tune-worker JOB` (the same path on the nodes, or
//! `QUASI_SLURM_BINARY`), which replays the cells once, then compiles, checks and times its share
//! of the points (every `ntasks`-th, from its rank) through the same code as a local autotune,
//! and writes one JSON line per variant on its standard output, which `srun` streams back.
//! The launcher never waits without looking at the session's interrupt flag: an interrupt, or
//! the autotune's budget running out, cancels the step (`scancel`); a task that fails or runs
//! past its `(time …)` leaves its variants failed, with what `srun` said.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::{Sexp, SexpKind};

/// The environment variable naming the folder job files go in (shared by the nodes).
pub const SLURM_DIR_VARIABLE: &str = "QUASI_SLURM_DIR";
/// The environment variable naming the binary the nodes run (default: `quasi-engine` beside
/// this process's binary, at the same path on every node).
pub const SLURM_BINARY_VARIABLE: &str = "QUASI_SLURM_BINARY";
/// The first word of a worker's line that carries a result (anything else it prints is not one).
pub(crate) const LINE_PREFIX: &str = "quasi-tune ";

/// Where an autotune runs its variants, and with what of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SlurmOptions {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--nodes`: one task per node.
    pub nodes: u32,
    /// `--gres`, e.g. `gpu:1`.
    pub gres: Option<String>,
    /// `--time`, e.g. `05:00`.
    pub time: Option<String>,
}

impl SlurmOptions {
    /// The clause again, for `:tune` and the table: `slurm (nodes 2) (partition gpu)`.
    pub fn describe(&self) -> String {
        let mut text = format!("slurm (nodes {})", self.nodes);
        for (name, value) in [("partition", &self.partition), ("gres", &self.gres), ("time", &self.time)] {
            if let Some(value) = value {
                text.push_str(&format!(" ({name} {value:?})"));
            }
        }
        text
    }
}

/// The shape of the clause, for its diagnostics.
pub(crate) const ON_SHAPE: &str =
    "(on slurm [(partition P)] [(nodes N)] [(gres \"gpu:1\")] [(time \"MM:SS\")])` or `(on local)";

/// `(on slurm …)` (`None`: `(on local)`), or what is wrong with it. `items` follow `on`.
pub(crate) fn parse_on(clause: &Sexp, items: &[Sexp]) -> Result<Option<SlurmOptions>, Vec<Diagnostic>> {
    let wrong = |span, message: String| {
        vec![Diagnostic::error(Kind::Syntax, message).with_label(span, "").with_note(format!("it is `{ON_SHAPE}`"))]
    };
    let Some((executor, options)) = items.split_first() else {
        return Err(wrong(clause.span, "`on` names where the variants run".into()));
    };
    match executor.symbol() {
        Some("local") if options.is_empty() => return Ok(None),
        Some("slurm") => {}
        _ => {
            let diagnostic = Diagnostic::error(Kind::Syntax, format!("`{executor}` is not a place to tune on"))
                .with_label(executor.span, "")
                .with_note(format!("it is `{ON_SHAPE}`"));
            let diagnostic = match executor.symbol() {
                Some(name) => diagnostic.with_suggestion(name, ["slurm", "local"]),
                None => diagnostic,
            };
            return Err(vec![diagnostic]);
        }
    }
    let mut parsed = SlurmOptions { nodes: 1, ..SlurmOptions::default() };
    let mut seen = Vec::new();
    for option in options {
        let Some([name, value]) = option.list() else {
            return Err(wrong(option.span, format!("`{option}` is not an option of `on slurm`")));
        };
        let name_text = name.symbol().unwrap_or("");
        if seen.contains(&name_text) {
            return Err(wrong(option.span, format!("`{name_text}` is given twice")));
        }
        seen.push(name_text);
        // Text options are strings or symbols (`(partition gpu)`); Slurm reads them, not Quasi.
        let text = || match &value.kind {
            SexpKind::Str(bytes) => String::from_utf8(bytes.clone()).ok().filter(|text| !text.is_empty()),
            SexpKind::Symbol(name) => Some(name.to_string()),
            _ => None,
        };
        match name_text {
            "nodes" => match value.kind {
                SexpKind::Int(count) if (1..=4096).contains(&count) => parsed.nodes = count as u32,
                _ => return Err(wrong(value.span, "`nodes` is a number of nodes from 1 to 4096".into())),
            },
            "partition" | "gres" | "time" => {
                let Some(text) = text().filter(|text| !text.chars().any(char::is_whitespace)) else {
                    return Err(wrong(value.span, format!("`{name_text}` is a string without spaces")));
                };
                let slot = match name_text {
                    "partition" => &mut parsed.partition,
                    "gres" => &mut parsed.gres,
                    _ => &mut parsed.time,
                };
                *slot = Some(text);
            }
            _ => {
                let diagnostic =
                    Diagnostic::error(Kind::Syntax, format!("`({name_text} …)` is not an option of `on slurm`"))
                        .with_label(option.span, "")
                        .with_note(format!("it is `{ON_SHAPE}`"))
                        .with_suggestion(name_text, ["partition", "nodes", "gres", "time"]);
                return Err(vec![diagnostic]);
            }
        }
    }
    Ok(Some(parsed))
}

/// A cell of the session as a worker replays it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) enum JobCell {
    /// A cell's text (its autotunes replaced by their winners).
    Cell { name: String, text: String },
    /// A Rhai script `:load`ed.
    Rhai { name: String, text: String },
}

/// What every task of a job is given.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Job {
    /// Commands that set the session up as the launcher's is (`:opt 3`, `:gpu sim`).
    pub settings: Vec<String>,
    /// The session's cells, in order.
    pub cells: Vec<JobCell>,
    /// The autotune form.
    pub form: String,
    /// The points to time; task R of N times those at R, R + N, R + 2N…
    pub points: Vec<Vec<usize>>,
    /// The launcher's tuning cache, which the workers use too (a folder the nodes share, like
    /// the job's); `None`: they keep no results.
    pub tune_cache: Option<PathBuf>,
}

/// One line of a worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum WorkerLine {
    /// The task replayed the session on `node`.
    Ready { task: usize, node: String },
    /// The task cannot time its points: why.
    Failed { task: usize, node: String, reason: String },
    /// One variant: its point, its result as the tuning cache writes it, whether it came from
    /// the node's cache, the node and its machine key.
    Variant { point: Vec<usize>, result: String, cached: bool, node: String, machine: String },
}

impl WorkerLine {
    /// The line as the worker prints it.
    pub(crate) fn to_line(&self) -> String {
        format!("{LINE_PREFIX}{}", serde_json::to_string(self).expect("plain data"))
    }
}

/// The points task `rank` of `tasks` times.
pub(crate) fn share(points: &[Vec<usize>], rank: usize, tasks: usize) -> Vec<Vec<usize>> {
    points.iter().skip(rank).step_by(tasks.max(1)).cloned().collect()
}

/// How a job ended, besides the lines it streamed.
pub(crate) enum JobEnd {
    /// Every task ended; what `srun` said if it failed.
    Finished { failure: Option<String> },
    /// The budget ran out: the step was cancelled.
    OutOfBudget,
}

/// Why no job ran, or it was stopped.
pub(crate) enum JobError {
    Interrupted,
    Failed(String),
}

/// A job's name: unique on the cluster for this process.
fn job_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("quasi-tune-{}-{}-{}", host.trim(), std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The folder job files go in.
fn job_folder() -> Result<PathBuf, String> {
    if let Some(folder) = std::env::var_os(SLURM_DIR_VARIABLE).filter(|value| !value.is_empty()) {
        return Ok(PathBuf::from(folder));
    }
    crate::backend::quasi_cache_folder("slurm")
        .ok_or_else(|| format!("no folder for Slurm job files: set {SLURM_DIR_VARIABLE} (or HOME)"))
}

/// Why no Slurm cluster can take an autotune's step now, if none can: `sinfo` does not answer,
/// or no node takes jobs. (The test command starts a single-node cluster: scripts/slurm-cluster.)
pub fn missing_slurm() -> Option<String> {
    let answer =
        Command::new("sinfo").args(["--noheader", "--format=%t"]).stdin(Stdio::null()).stderr(Stdio::piped()).output();
    match answer {
        Err(error) => Some(format!("needs a Slurm cluster (cannot run sinfo: {error})")),
        Ok(output) if !output.status.success() => Some(format!(
            "needs a Slurm cluster (sinfo: {})",
            String::from_utf8_lossy(&output.stderr).lines().next().unwrap_or("failed")
        )),
        Ok(output) => {
            let states = String::from_utf8_lossy(&output.stdout);
            let up = states.lines().any(|state| ["idle", "mix", "alloc"].contains(&state.trim_end_matches('*')));
            (!up).then(|| format!("needs a Slurm cluster with a node that takes jobs (sinfo: {})", states.trim()))
        }
    }
}

/// The binary the nodes run: `QUASI_SLURM_BINARY`, else `quasi-engine` beside this process's
/// binary (or one folder up, for a test binary in `target/…/deps`).
pub(crate) fn worker_binary() -> Result<PathBuf, String> {
    if let Some(binary) = std::env::var_os(SLURM_BINARY_VARIABLE).filter(|value| !value.is_empty()) {
        return Ok(PathBuf::from(binary));
    }
    let exe = std::env::current_exe().map_err(|error| format!("cannot find this process's binary: {error}"))?;
    let folder = exe.parent().unwrap_or(Path::new("/"));
    [folder.join("quasi-engine"), folder.join("../quasi-engine")]
        .into_iter()
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| format!("no quasi-engine beside {}: set {SLURM_BINARY_VARIABLE}", exe.display()))
}

/// What a reader thread hands the launcher.
enum Event {
    Line(String),
    ErrorText(String),
}

/// Runs `job` as one `srun` step, calling `on_line` for each worker line as it comes. Returns
/// when every task ended, the deadline passed (with a line already seen) or `interrupt` was set.
pub(crate) fn run(
    job: &Job,
    options: &SlurmOptions,
    interrupt: &AtomicBool,
    deadline: Option<Instant>,
    on_line: &mut dyn FnMut(WorkerLine),
) -> Result<JobEnd, JobError> {
    let folder = job_folder().map_err(JobError::Failed)?;
    std::fs::create_dir_all(&folder)
        .map_err(|error| JobError::Failed(format!("cannot make {}: {error}", folder.display())))?;
    let name = job_name();
    let path = folder.join(format!("{name}.json"));
    let text = serde_json::to_string(job).expect("plain data");
    std::fs::write(&path, text)
        .map_err(|error| JobError::Failed(format!("cannot write the job file {}: {error}", path.display())))?;
    let result = run_file(&path, &name, options, interrupt, deadline, on_line);
    let _ = std::fs::remove_file(&path);
    result
}

fn run_file(
    path: &Path,
    name: &str,
    options: &SlurmOptions,
    interrupt: &AtomicBool,
    deadline: Option<Instant>,
    on_line: &mut dyn FnMut(WorkerLine),
) -> Result<JobEnd, JobError> {
    let binary = worker_binary().map_err(JobError::Failed)?;
    let mut command = Command::new("srun");
    let nodes = options.nodes.to_string();
    command.args(["--job-name", name, "--nodes", &nodes, "--ntasks", &nodes, "--ntasks-per-node", "1"]);
    command.args(["--kill-on-bad-exit=0", "--quiet"]);
    for (flag, value) in [("--partition", &options.partition), ("--gres", &options.gres), ("--time", &options.time)] {
        if let Some(value) = value {
            command.arg(format!("{flag}={value}"));
        }
    }
    command.arg(&binary).arg("tune-worker").arg(path);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|error| {
        JobError::Failed(match error.kind() {
            std::io::ErrorKind::NotFound => {
                "cannot run srun: it is not on the PATH (`on slurm` needs Slurm's client)".into()
            }
            _ => format!("cannot run srun: {error}"),
        })
    })?;
    let (sender, events) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let lines = sender.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(Event::Line(line)).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stderr).take(1 << 20).read_to_string(&mut text);
        let _ = sender.send(Event::ErrorText(text));
    });
    let mut errors = String::new();
    let mut seen_variant = false;
    loop {
        if interrupt.load(Ordering::SeqCst) {
            cancel(name, &mut child);
            return Err(JobError::Interrupted);
        }
        if seen_variant && deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            cancel(name, &mut child);
            return Ok(JobEnd::OutOfBudget);
        }
        match events.recv_timeout(Duration::from_millis(20)) {
            Ok(Event::Line(line)) => {
                if let Some(parsed) = parse_line(&line) {
                    seen_variant |= matches!(parsed, WorkerLine::Variant { .. });
                    on_line(parsed);
                }
            }
            Ok(Event::ErrorText(text)) => errors = text,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Both streams are closed: srun has ended, or is ending.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait().map_err(|error| JobError::Failed(format!("cannot wait for srun: {error}")))?;
    let failure = (!status.success()).then(|| {
        let said: Vec<&str> = errors.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
        let tail = said[said.len().saturating_sub(3)..].join(" / ");
        let how = match status.code() {
            Some(code) => format!("srun exited with status {code}"),
            None => "srun was killed".to_string(),
        };
        if tail.is_empty() {
            how
        } else {
            format!("{how}: {tail}")
        }
    });
    Ok(JobEnd::Finished { failure })
}

/// A worker's line, if `line` is one.
fn parse_line(line: &str) -> Option<WorkerLine> {
    serde_json::from_str(line.strip_prefix(LINE_PREFIX)?).ok()
}

/// Cancels the step and waits for `srun` to end.
fn cancel(name: &str, child: &mut Child) {
    let _ = Command::new("scancel")
        .args(["--quiet", "--name", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceId;

    fn options(text: &str) -> Result<Option<SlurmOptions>, String> {
        let forms = crate::reader::read(SourceId(0), text).expect("reads");
        let items = forms[0].list().expect("a list");
        parse_on(&forms[0], &items[1..]).map_err(|diagnostics| diagnostics[0].message.clone())
    }

    #[test]
    fn the_clause_reads_its_options_and_says_what_is_wrong() {
        assert_eq!(options("(on local)"), Ok(None));
        assert_eq!(options("(on slurm)"), Ok(Some(SlurmOptions { nodes: 1, ..SlurmOptions::default() })));
        let full = options("(on slurm (nodes 2) (partition gpu) (gres \"gpu:1\") (time \"05:00\"))").unwrap().unwrap();
        assert_eq!(full.nodes, 2);
        assert_eq!(full.partition.as_deref(), Some("gpu"));
        assert_eq!(full.describe(), "slurm (nodes 2) (partition \"gpu\") (gres \"gpu:1\") (time \"05:00\")");
        assert_eq!(options("(on slrum)").unwrap_err(), "`slrum` is not a place to tune on");
        assert_eq!(options("(on slurm (nodes 0))").unwrap_err(), "`nodes` is a number of nodes from 1 to 4096");
        assert_eq!(options("(on slurm (node 2))").unwrap_err(), "`(node …)` is not an option of `on slurm`");
        assert_eq!(options("(on slurm (time 5) (time 6))").unwrap_err(), "`time` is a string without spaces");
        assert_eq!(options("(on slurm (gres \"a b\"))").unwrap_err(), "`gres` is a string without spaces");
        assert_eq!(options("(on slurm (nodes 1) (nodes 2))").unwrap_err(), "`nodes` is given twice");
    }

    #[test]
    fn tasks_share_the_points_round_robin() {
        let points: Vec<Vec<usize>> = (0..5).map(|index| vec![index]).collect();
        assert_eq!(share(&points, 0, 2), [vec![0], vec![2], vec![4]]);
        assert_eq!(share(&points, 1, 2), [vec![1], vec![3]]);
        assert_eq!(share(&points, 0, 1).len(), 5);
    }

    #[test]
    fn worker_lines_read_back() {
        let line = WorkerLine::Ready { task: 1, node: "n1".into() }.to_line();
        let parsed: WorkerLine = serde_json::from_str(line.strip_prefix(LINE_PREFIX).unwrap()).unwrap();
        assert!(matches!(parsed, WorkerLine::Ready { task: 1, .. }));
    }
}
