//! Cases run in a child process, so that a crash of the session (a panic, an abort, a signal
//! outside compiled code, a stack overflow) is seen and reported with its input instead of
//! ending the fuzzer. The child is the running executable itself, started with
//! `QUASI_FUZZ_WORKER` naming a file of cells: every binary that runs cases calls
//! [`worker_if_asked`] first thing in `main`.
//!
//! The child runs the cells in one fresh session and reports on a copy of its stdout taken
//! before the session captures file descriptors 1 and 2: `start N` before cell N, then
//! `done N FAILED INTERNAL LEN LEN` followed by the cell's program output and its rendering.
//! A watchdog thread in the child stops a cell that runs past the limit, and says whether
//! compiled code was running (a program that loops, on the executor or as a kernel of a
//! submission on the simulator's device workers, which is the program's business: a runaway)
//! or the session itself (a hang: a bug).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use quasi_lang::{Kind, Session, SessionConfig, Stream};

const WORKER_VARIABLE: &str = "QUASI_FUZZ_WORKER";
const LIMIT_VARIABLE: &str = "QUASI_FUZZ_CELL_LIMIT_MS";

/// The worker's address space is bounded, so that a cell asking for absurd memory meets a
/// failed allocation, not the machine's other users.
const ADDRESS_SPACE_LIMIT: u64 = 8 << 30;

/// What one cell did, as the worker saw it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellReport {
    /// The cell had an error diagnostic.
    pub failed: bool,
    /// One of its diagnostics is `error[internal]`: the machinery failed (the LLVM verifier
    /// among others), which no input may cause.
    pub internal: bool,
    /// What compiled code wrote to stdout.
    pub stdout: String,
    /// The cell's outcome as the terminal shows it.
    pub rendered: String,
}

/// How a case ended.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// Every cell ran to its end.
    Finished(Vec<CellReport>),
    /// The worker died during cell `cell` (a panic, an abort, a signal).
    Crashed { cell: usize, how: String, reports: Vec<CellReport> },
    /// Compiled code of cell `cell` ran past the limit: the program loops, not a bug.
    Runaway { cell: usize, reports: Vec<CellReport> },
    /// The session itself spent past the limit in cell `cell`, or blocked.
    Hung { cell: usize, how: String, reports: Vec<CellReport> },
}

impl Verdict {
    /// The reports of the cells that ended.
    pub fn reports(&self) -> &[CellReport] {
        match self {
            Verdict::Finished(reports)
            | Verdict::Crashed { reports, .. }
            | Verdict::Runaway { reports, .. }
            | Verdict::Hung { reports, .. } => reports,
        }
    }
}

/// Runs cells in a fresh session in a child process, each allowed `cell_limit`.
pub fn run_cells(cells: &[String], cell_limit: Duration, scratch: &Path) -> Verdict {
    match spawn_and_watch(cells, cell_limit, scratch) {
        Ok(verdict) => verdict,
        Err(error) => {
            Verdict::Crashed { cell: 0, how: format!("the worker could not run: {error}"), reports: Vec::new() }
        }
    }
}

enum Event {
    Start(usize),
    Done(CellReport),
    Runaway(usize),
    Hung(usize, String),
    Panic(String),
}

fn spawn_and_watch(cells: &[String], cell_limit: Duration, scratch: &Path) -> std::io::Result<Verdict> {
    std::fs::create_dir_all(scratch)?;
    let job = scratch.join("job.cells");
    let mut text = String::new();
    for cell in cells {
        text.push_str(&format!("{}\n{cell}", cell.len()));
    }
    std::fs::write(&job, text)?;
    let mut child = Command::new(std::env::current_exe()?)
        .env(WORKER_VARIABLE, &job)
        .env(LIMIT_VARIABLE, cell_limit.as_millis().to_string())
        .current_dir(scratch)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout"))?;
    let mut stderr = child.stderr.take().ok_or_else(|| std::io::Error::other("no stderr"))?;
    let (sender, events) = mpsc::channel();
    std::thread::spawn(move || read_events(stdout, sender));
    let stderr_tail = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        let start = text.len().saturating_sub(4000);
        String::from_utf8_lossy(&text[start..]).into_owned()
    });
    let mut reports = Vec::new();
    let mut current = 0;
    let mut panic = None;
    // The watchdog in the child acts at the limit; this one is for a child too stuck for that.
    let patience = cell_limit * 2 + Duration::from_secs(20);
    let verdict = loop {
        match events.recv_timeout(patience) {
            Ok(Event::Start(cell)) => current = cell,
            Ok(Event::Done(report)) => reports.push(report),
            Ok(Event::Runaway(cell)) => break Some(Verdict::Runaway { cell, reports: std::mem::take(&mut reports) }),
            Ok(Event::Hung(cell, how)) => {
                break Some(Verdict::Hung { cell, how, reports: std::mem::take(&mut reports) })
            }
            Ok(Event::Panic(message)) => panic = Some(message),
            Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                break Some(Verdict::Hung {
                    cell: current,
                    how: "the worker went silent (its watchdog did not act)".to_string(),
                    reports: std::mem::take(&mut reports),
                })
            }
        }
    };
    if verdict.is_some() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    let tail = stderr_tail.join().unwrap_or_default();
    if let Some(verdict) = verdict {
        return Ok(verdict);
    }
    if status.success() && reports.len() == cells.len() && panic.is_none() {
        return Ok(Verdict::Finished(reports));
    }
    let mut how = describe_status(status);
    if let Some(message) = panic {
        how.push_str(&format!("\npanic: {message}"));
    }
    if !tail.trim().is_empty() {
        how.push_str(&format!("\nstderr:\n{tail}"));
    }
    Ok(Verdict::Crashed { cell: current, how, reports })
}

fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(signal)) => format!("the worker was killed by signal {signal}"),
        (Some(code), _) => format!("the worker exited with status {code}"),
        _ => "the worker ended".to_string(),
    }
}

fn read_events(stdout: impl Read, sender: mpsc::Sender<Event>) {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |index: usize| words.get(index).and_then(|word| word.parse::<usize>().ok()).unwrap_or(0);
        let mut payload = |length: usize| {
            let mut bytes = vec![0; length];
            let _ = reader.read_exact(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let event = match words.first().copied() {
            Some("start") => Event::Start(number(1)),
            Some("done") => {
                let (failed, internal) = (number(2) == 1, number(3) == 1);
                let (stdout_length, rendered_length) = (number(4), number(5));
                let stdout = payload(stdout_length);
                let rendered = payload(rendered_length);
                Event::Done(CellReport { failed, internal, stdout, rendered })
            }
            Some("runaway") => Event::Runaway(number(1)),
            Some("hung") => {
                let length = number(2);
                Event::Hung(number(1), payload(length))
            }
            Some("panic") => {
                let length = number(1);
                Event::Panic(payload(length))
            }
            _ => continue,
        };
        if sender.send(event).is_err() {
            return;
        }
    }
}

/// The report channel of a worker: its stdout as it was before any session captured it.
static PROTOCOL: OnceLock<Mutex<File>> = OnceLock::new();

fn send(header: &str, payloads: &[&str]) {
    let Some(protocol) = PROTOCOL.get() else { return };
    let mut file = protocol.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut message = format!("{header}\n").into_bytes();
    for payload in payloads {
        message.extend_from_slice(payload.as_bytes());
    }
    let _ = file.write_all(&message);
    let _ = file.flush();
}

/// If this process was started as a worker, runs its cells and exits; otherwise returns.
pub fn worker_if_asked() {
    let Some(job) = std::env::var_os(WORKER_VARIABLE) else { return };
    let limit = std::env::var(LIMIT_VARIABLE).ok().and_then(|text| text.parse().ok()).unwrap_or(10_000);
    std::process::exit(worker(Path::new(&job), Duration::from_millis(limit)));
}

fn worker(job: &Path, cell_limit: Duration) -> i32 {
    let Ok(protocol) = std::io::stdout().as_fd().try_clone_to_owned() else { return 10 };
    let _ = PROTOCOL.set(Mutex::new(File::from(protocol)));
    limit_address_space();
    std::panic::set_hook(Box::new(|info| {
        let message = format!("{info}\n{}", std::backtrace::Backtrace::force_capture());
        send(&format!("panic {}", message.len()), &[&message]);
    }));
    let Ok(text) = std::fs::read_to_string(job) else { return 11 };
    let Some(cells) = job_cells(&text) else { return 11 };
    let mut session = match Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() }) {
        Ok(session) => session,
        Err(error) => {
            let message = error.to_string();
            send(&format!("panic {}", message.len()), &[&message]);
            return 12;
        }
    };
    // Staging stops itself (error[expansion-limit]) well before the watchdog would call it a hang.
    session.eval(&format!(":limits time-ms {}", (cell_limit / 2).as_millis()));
    let current: Arc<Mutex<Option<(usize, Instant)>>> = Arc::new(Mutex::new(None));
    let watched = current.clone();
    let _ = std::thread::Builder::new().name("quasi-fuzz-watch".into()).spawn(move || watch(watched, cell_limit));
    // `:save` writes as the front ends write it (into the scratch folder, this process's).
    let mut recording = quasi_repl::transcript::Recording::default();
    for (index, cell) in cells.iter().enumerate() {
        send(&format!("start {index}"), &[]);
        *current.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((index, Instant::now()));
        let mut outcome = session.eval(cell);
        quasi_repl::transcript::record_or_save(&mut recording, cell, &mut outcome);
        *current.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        let stdout = outcome.written(Stream::Stdout);
        let rendered = quasi_repl::render(&outcome, quasi_repl::Style::Plain);
        let internal = outcome.diagnostics.iter().any(|diagnostic| diagnostic.kind == Kind::Internal);
        send(
            &format!(
                "done {index} {} {} {} {}",
                u8::from(outcome.failed()),
                u8::from(internal),
                stdout.len(),
                rendered.len()
            ),
            &[&stdout, &rendered],
        );
    }
    0
}

/// The cells of a job file: each is its length in bytes, a newline, and its text (cells may
/// hold any character, NUL and newlines included).
fn job_cells(mut text: &str) -> Option<Vec<&str>> {
    let mut cells = Vec::new();
    while !text.is_empty() {
        let (length, rest) = text.split_once('\n')?;
        let length: usize = length.parse().ok()?;
        cells.push(rest.get(..length)?);
        text = rest.get(length..)?;
    }
    Some(cells)
}

fn limit_address_space() {
    let limit = libc::rlimit { rlim_cur: ADDRESS_SPACE_LIMIT, rlim_max: ADDRESS_SPACE_LIMIT };
    // SAFETY: `setrlimit` only reads the struct passed by reference; it lowers a limit of this
    // process, which is a fuzzing worker.
    unsafe {
        libc::setrlimit(libc::RLIMIT_AS, &limit);
    }
}

/// Stops the worker when a cell runs past the limit, saying which thread was busy.
fn watch(current: Arc<Mutex<Option<(usize, Instant)>>>, cell_limit: Duration) {
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let running = *current.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some((cell, started)) = running else { continue };
        if started.elapsed() < cell_limit {
            continue;
        }
        let before = thread_times();
        std::thread::sleep(Duration::from_millis(400));
        let after = thread_times();
        // Compiled code runs on the executor, and kernels of submissions on the simulator's
        // device workers.
        let runs_code = |name: &str| name == "quasi-run" || name.starts_with("quasi-sim-");
        let busy = |compiled: bool| -> u64 {
            after
                .iter()
                .filter(|(name, _, _)| runs_code(name) == compiled && name != "quasi-fuzz-watch")
                .map(|(_, id, ticks)| {
                    let earlier = before.iter().find(|(_, other, _)| other == id).map_or(0, |(_, _, ticks)| *ticks);
                    ticks.saturating_sub(earlier)
                })
                .sum()
        };
        let (compiled, session) = (busy(true), busy(false));
        if compiled > 0 && compiled >= session {
            send(&format!("runaway {cell}"), &[]);
        } else {
            let how = if session > 0 {
                format!("the session spent more than {cell_limit:?} outside compiled code")
            } else {
                format!("the cell was still blocked after {cell_limit:?}, no thread busy")
            };
            send(&format!("hung {cell} {}", how.len()), &[&how]);
        }
        // SAFETY: `_exit` ends the process at once, which is what a stuck worker needs: no
        // destructors, no stdio locks that a stuck thread may hold.
        unsafe { libc::_exit(3) };
    }
}

/// (thread name, thread id, user+system clock ticks) of every thread of this process.
fn thread_times() -> Vec<(String, String, u64)> {
    let mut times = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc/self/task") else { return times };
    for entry in entries.flatten() {
        let path: PathBuf = entry.path();
        let id = entry.file_name().to_string_lossy().into_owned();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_string();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is the first, utime the 12th, stime the 13th.
        let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
        let ticks = |index: usize| fields.get(index).and_then(|field| field.parse::<u64>().ok()).unwrap_or(0);
        times.push((name, id, ticks(11) + ticks(12)));
    }
    times
}
