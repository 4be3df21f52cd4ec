//! `quasi test [--bless] [--jobs N] [--timeout SECONDS] PATH…`: transcripts (`.repl`), the ```` ```repl ```` blocks
//! of Markdown documents (`.md`) and notebooks (`.ipynb`) run in a fresh session each and
//! compared with what they say they print.
//!
//! Each file runs in a worker process of its own (`quasi test --worker FILE`, `--jobs` at a
//! time): a session captures file descriptor 1, which is process-wide, and a transcript that
//! brings its process down must not take the others with it. The worker sends back each cell's
//! output; this side compares, prints a diff per failing cell with its file and line, blesses,
//! and ends with `N passed, N failed` (files).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use quasi_repl::notebook::{self, OutputKind, SavedCell};
use quasi_repl::transcript::{self, Transcript};
use quasi_repl::Style;
use similar::{ChangeTag, TextDiff};

/// How long one file may run by default: a transcript in an endless loop must not hang the
/// suite.
const DEFAULT_TIMEOUT_SECONDS: u64 = 300;

/// How long a failing cell's diff may search for the smallest one.
const DIFF_TIMEOUT: Duration = Duration::from_millis(200);

/// What `quasi test` was asked to do.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    pub bless: bool,
    pub jobs: usize,
    /// How long one file may run before its worker is stopped.
    pub timeout: Duration,
    pub paths: Vec<String>,
}

/// Reads `test`'s arguments (after `test`). `--worker FILE` is the worker's own invocation.
pub fn parse(arguments: &[String]) -> Result<Result<Options, String>, String> {
    if let [flag, file] = arguments {
        if flag == "--worker" {
            return Ok(Err(file.clone()));
        }
    }
    let mut options = Options {
        bless: false,
        jobs: std::thread::available_parallelism().map_or(1, usize::from),
        timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECONDS),
        paths: Vec::new(),
    };
    let mut rest = arguments.iter();
    while let Some(argument) = rest.next() {
        match argument.as_str() {
            "--bless" => options.bless = true,
            "--jobs" | "-j" => {
                let value = rest.next().ok_or("`--jobs` needs a number")?;
                options.jobs =
                    value.parse().ok().filter(|jobs| *jobs > 0).ok_or(format!("`--jobs {value}`: not a count"))?;
            }
            "--timeout" => {
                let value = rest.next().ok_or("`--timeout` needs a number of seconds")?;
                let seconds: u64 = value
                    .parse()
                    .ok()
                    .filter(|seconds| *seconds > 0)
                    .ok_or(format!("`--timeout {value}`: not a number of seconds"))?;
                options.timeout = Duration::from_secs(seconds);
            }
            flag if flag.starts_with('-') => return Err(format!("unknown option `{flag}` for `test`")),
            path => options.paths.push(path.to_string()),
        }
    }
    if options.paths.is_empty() {
        return Err("`test` needs a file or folder (transcripts .repl, documents .md, notebooks .ipynb)".into());
    }
    Ok(Ok(options))
}

/// The kinds of file `quasi test` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Transcript,
    Document,
    Notebook,
}

fn kind_of(path: &Path) -> Option<Kind> {
    match path.extension()?.to_str()? {
        "repl" => Some(Kind::Transcript),
        "md" => Some(Kind::Document),
        "ipynb" => Some(Kind::Notebook),
        _ => None,
    }
}

/// The files to run: files as given, folders searched for `.repl` and `.ipynb` files (a folder's
/// Markdown files are prose, not tests, unless named).
fn collect(paths: &[String]) -> Result<Vec<PathBuf>, String> {
    fn walk(directory: &Path, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(directory)?.flatten().map(|entry| entry.path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, found)?;
            } else if matches!(kind_of(&path), Some(Kind::Transcript | Kind::Notebook)) {
                found.push(path);
            }
        }
        Ok(())
    }
    let mut found = Vec::new();
    for path in paths.iter().map(PathBuf::from) {
        if path.is_dir() {
            walk(&path, &mut found).map_err(|error| format!("cannot read `{}`: {error}", path.display()))?;
        } else if !path.exists() {
            return Err(format!("no such file or folder: `{}`", path.display()));
        } else if kind_of(&path).is_none() {
            return Err(format!(
                "`{}` is not a transcript (.repl), document (.md) or notebook (.ipynb)",
                path.display()
            ));
        } else {
            found.push(path);
        }
    }
    Ok(found)
}

// ---------------------------------------------------------------------------------------------
// The worker: runs one file and writes each cell's output as `cell FAILED LENGTH\nTEXT\n`
// (or `fatal LENGTH\nTEXT\n`), lengths in bytes.

/// `quasi test --worker FILE`; returns the exit status.
pub fn worker(path: &str) -> i32 {
    let results = run_file(Path::new(path));
    let mut stdout = std::io::stdout().lock();
    let written = match results {
        Ok(cells) => cells
            .iter()
            .try_for_each(|(failed, text)| write!(stdout, "cell {} {}\n{text}\n", u8::from(*failed), text.len())),
        Err(message) => write!(stdout, "fatal {}\n{message}\n", message.len()),
    };
    i32::from(written.and_then(|()| stdout.flush()).is_err())
}

/// Each cell's output (and whether it failed) in a fresh session, run from the file's folder:
/// paths in a transcript (`:load files/x.rhai`) are relative to the transcript.
fn run_file(path: &Path) -> Result<Vec<(bool, String)>, String> {
    let text = quasi_lang::read_source(&path.to_string_lossy()).map_err(|error| error.message)?;
    if let Some(folder) = path.parent().filter(|folder| !folder.as_os_str().is_empty()) {
        std::env::set_current_dir(folder).map_err(|error| format!("cannot enter `{}`: {error}", folder.display()))?;
    }
    // Which cell runs, on standard error: the parent names it if the file runs past --timeout.
    let mut starting = |cell: &transcript::Cell| eprintln!("{RUNNING}the cell at line {}", cell.line);
    let outputs = match kind_of(path) {
        Some(Kind::Transcript) => transcript::run_reporting(&transcript::parse(&text), &mut starting)?,
        Some(Kind::Document) => {
            transcript::run_reporting(&transcript::parse_markdown(&text).transcript(), &mut starting)?
        }
        Some(Kind::Notebook) => return run_notebook(&notebook::read_notebook(&text)?),
        None => return Err(format!("`{}` is not a file `quasi test` runs", path.display())),
    };
    Ok(outputs.into_iter().map(|output| (false, output)).collect())
}

/// A notebook's code cells in one session, each as the notebook would show it.
fn run_notebook(cells: &[SavedCell]) -> Result<Vec<(bool, String)>, String> {
    let mut session = transcript::new_session()?;
    Ok(cells
        .iter()
        .enumerate()
        .map(|(index, cell)| {
            eprintln!("{RUNNING}code cell {}", index + 1);
            let outcome = session.eval(&cell.source);
            let outputs = notebook::outputs(&outcome);
            let text = notebook::cell_text(
                outputs.iter().map(|output| (matches!(output.kind, OutputKind::Stream(_)), output.plain.as_str())),
            );
            (outcome.failed(), text)
        })
        .collect())
}

/// Reads a worker's answer.
fn read_answer(bytes: &[u8]) -> Result<Vec<(bool, String)>, String> {
    let mut cells = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let end = rest.iter().position(|byte| *byte == b'\n').ok_or("a truncated answer")?;
        let header = std::str::from_utf8(&rest[..end]).map_err(|_| "a garbled answer")?;
        let words: Vec<&str> = header.split(' ').collect();
        let length: usize = words.last().and_then(|word| word.parse().ok()).ok_or("a garbled answer")?;
        let body = rest.get(end + 1..end + 1 + length).ok_or("a truncated answer")?;
        let text = String::from_utf8_lossy(body).into_owned();
        match words.as_slice() {
            ["cell", failed, _] => cells.push((*failed == "1", text)),
            ["fatal", _] => return Err(text),
            _ => return Err("a garbled answer".into()),
        }
        rest = rest.get(end + 2 + length..).unwrap_or_default();
    }
    Ok(cells)
}

// ---------------------------------------------------------------------------------------------
// The runner.

/// What one file gave.
struct Report {
    passed: bool,
    /// What to print: a line for a passing file, the failing cells' diffs otherwise.
    text: String,
}

/// `quasi test …`; returns the exit status.
pub fn main(options: Options, style: Style) -> i32 {
    if options.bless && std::env::var_os("CI").is_some() {
        eprintln!(
            "quasi test: --bless is refused under CI (CI is set): expectations change only where someone reads them"
        );
        return 2;
    }
    let files = match collect(&options.paths) {
        Ok(files) if files.is_empty() => {
            eprintln!("quasi test: no .repl or .ipynb file under {}", options.paths.join(" "));
            return 2;
        }
        Ok(files) => files,
        Err(message) => {
            eprintln!("quasi test: {message}");
            return 2;
        }
    };
    let executable = match std::env::current_exe() {
        Ok(executable) => executable,
        Err(error) => {
            eprintln!("quasi test: cannot find the quasi executable: {error}");
            return 2;
        }
    };
    // Files that need what this machine lacks (a CUDA device) are skipped, with the reason.
    let mut skipped = 0;
    let files: Vec<PathBuf> = files
        .into_iter()
        .filter(|path| match unmet_requirement(path) {
            Some(reason) => {
                println!("skip {}: {reason}", path.display());
                skipped += 1;
                false
            }
            None => true,
        })
        .collect();
    end_workers_on_signals();
    let queue = Arc::new(Mutex::new(files.iter().cloned().enumerate().collect::<Vec<_>>().into_iter()));
    let (sender, answers) = mpsc::channel();
    let workers: Vec<_> = (0..options.jobs.min(files.len()))
        .map(|_| {
            let (queue, sender, executable) = (Arc::clone(&queue), sender.clone(), executable.clone());
            let limit = options.timeout;
            std::thread::spawn(move || loop {
                let next = queue.lock().map(|mut queue| queue.next()).ok().flatten();
                let Some((index, path)) = next else { return };
                let _ = sender.send((index, spawn_worker(&executable, &path, limit)));
            })
        })
        .collect();
    drop(sender);
    // Reports are printed in the files' order as soon as every earlier one is in.
    let mut pending = BTreeMap::new();
    let mut next = 0;
    let (mut passed, mut failed) = (0, 0);
    let mut stdout = std::io::stdout();
    for (index, answer) in answers {
        pending.insert(index, answer);
        while let Some(answer) = pending.remove(&next) {
            let report = judge(&files[next], answer, options.bless, style);
            if report.passed {
                passed += 1;
            } else {
                failed += 1;
            }
            let _ = stdout.write_all(report.text.as_bytes());
            let _ = stdout.flush();
            next += 1;
        }
    }
    for worker in workers {
        let _ = worker.join();
    }
    if skipped > 0 {
        println!("{passed} passed, {failed} failed, {skipped} skipped");
    } else {
        println!("{passed} passed, {failed} failed");
    }
    i32::from(failed > 0)
}

/// Why a transcript, document or notebook cannot run here (see `Transcript::unmet_requirement`;
/// a notebook says what it needs in its metadata).
fn unmet_requirement(path: &Path) -> Option<String> {
    let text = quasi_lang::read_source(&path.to_string_lossy()).ok()?;
    match kind_of(path)? {
        Kind::Transcript => transcript::parse(&text).unmet_requirement(),
        Kind::Document => transcript::parse_markdown(&text).transcript().unmet_requirement(),
        Kind::Notebook => {
            let requirements = notebook::requirements(&text);
            let header = if requirements.is_empty() {
                String::new()
            } else {
                format!("# requires: {}\n", requirements.join(" "))
            };
            transcript::Transcript { header, cells: Vec::new() }.unmet_requirement()
        }
    }
}

/// The process groups of the workers running now (0: a free slot), for `end_workers`.
static WORKER_GROUPS: [AtomicI32; 64] = [const { AtomicI32::new(0) }; 64];

/// A worker's process group, listed in `WORKER_GROUPS` while it lives; dropping it kills what
/// is left of the group (processes a cell forked).
struct WorkerGroup {
    pid: i32,
    slot: Option<usize>,
}

impl WorkerGroup {
    fn new(pid: i32) -> WorkerGroup {
        let slot = WORKER_GROUPS.iter().position(|slot| slot.compare_exchange(0, pid, SeqCst, SeqCst).is_ok());
        WorkerGroup { pid, slot }
    }
}

impl Drop for WorkerGroup {
    fn drop(&mut self) {
        // SAFETY: kill of a process group this process made (the worker's pid is its id).
        unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        if let Some(slot) = self.slot {
            WORKER_GROUPS[slot].store(0, SeqCst);
        }
    }
}

/// Ctrl-C, SIGTERM or SIGHUP of `quasi test`: the workers' groups are killed (they are not in
/// the terminal's foreground group), then this process ends as the signal ends it.
extern "C" fn end_workers(signal: libc::c_int) {
    for slot in &WORKER_GROUPS {
        let group = slot.load(SeqCst);
        if group > 0 {
            // SAFETY: kill is async-signal-safe; the group is a worker's.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
    }
    // SAFETY: signal and raise are async-signal-safe: the default action ends the process.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

/// Installs `end_workers` for the signals that end `quasi test`.
fn end_workers_on_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `end_workers` calls only async-signal-safe functions.
        unsafe { libc::signal(signal, end_workers as *const () as libc::sighandler_t) };
    }
}

/// How a worker says, on standard error, which cell it starts.
const RUNNING: &str = "quasi test: running ";

/// A worker's standard error: where it was (` in the cell at line 12`, ` in code cell 3`, or
/// empty), and the rest.
fn worker_errors(bytes: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(bytes);
    let place = text.lines().rev().find_map(|line| line.strip_prefix(RUNNING));
    let rest: Vec<&str> = text.lines().filter(|line| !line.starts_with(RUNNING)).collect();
    (place.map_or_else(String::new, |place| format!(" in {place}")), rest.join("\n"))
}

/// Runs one file in a worker process, killed if it runs longer than `limit`. The worker leads
/// a process group of its own, killed when it ends or is stopped, so that nothing a cell forked
/// outlives its file (or holds the pipes this process reads); it dies with the thread that
/// started it.
fn spawn_worker(executable: &Path, path: &Path, limit: Duration) -> Result<Vec<(bool, String)>, String> {
    let mut command = Command::new(executable);
    command.arg("test").arg("--worker").arg(path).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|error| format!("cannot start a worker: {error}"))?;
    let group = WorkerGroup::new(child.id() as i32);
    // Both pipes are drained while the worker runs, so a talkative one cannot block on them.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let answer = drain(child.stdout.take().map(|pipe| Box::new(pipe) as Box<dyn Read + Send>));
    let errors = drain(child.stderr.take().map(|pipe| Box::new(pipe) as Box<dyn Read + Send>));
    let started = Instant::now();
    // The worker is reaped only after its group is killed: until then its pid, and so the
    // group's id, cannot be anybody else's.
    while !quasi_lang::tools::child_has_ended(child.id() as i32) {
        if started.elapsed() >= limit {
            drop(group);
            let _ = child.wait();
            // The pipes closed with the group: what the worker said it was running is all here.
            let (place, _) = worker_errors(&errors.join().unwrap_or_default());
            return Err(format!("it ran longer than {} s (--timeout) and was stopped{place}", limit.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // What the cells forked ends with the worker (and lets go of its pipes).
    drop(group);
    let status = child.wait().map_err(|error| format!("the worker was lost: {error}"))?;
    let answer = answer.join().unwrap_or_default();
    let (place, errors) = worker_errors(&errors.join().unwrap_or_default());
    if !status.success() {
        return Err(format!("the worker running it ended with {status}{place}\n{}", errors.trim_end()));
    }
    read_answer(&answer)
}

/// Compares a file's answer with what it expects; blesses if asked.
fn judge(path: &Path, answer: Result<Vec<(bool, String)>, String>, bless: bool, style: Style) -> Report {
    let name = path.display().to_string();
    let fail = |text: String| Report { passed: false, text };
    let outputs = match answer {
        Ok(outputs) => outputs,
        Err(message) => return fail(format!("FAIL {name}: {message}\n")),
    };
    let text = match quasi_lang::read_source(&path.to_string_lossy()) {
        Ok(text) => text,
        Err(error) => return fail(format!("FAIL {name}: {}\n", error.message)),
    };
    match kind_of(path) {
        Some(Kind::Notebook) => judge_notebook(&name, &text, &outputs, style),
        Some(Kind::Document) => {
            let document = transcript::parse_markdown(&text);
            let actual: Vec<String> = outputs.into_iter().map(|(_, output)| output).collect();
            judge_transcript(&name, &document.transcript(), &actual, bless, style, |blessed| document.format(blessed))
        }
        _ => {
            let parsed = transcript::parse(&text);
            let actual: Vec<String> = outputs.into_iter().map(|(_, output)| output).collect();
            judge_transcript(&name, &parsed, &actual, bless, style, |blessed| transcript::format(&parsed, blessed))
        }
    }
}

fn judge_transcript(
    name: &str,
    expected: &Transcript,
    actual: &[String],
    bless: bool,
    style: Style,
    rewrite: impl Fn(&[String]) -> String,
) -> Report {
    let mut text = String::new();
    let mut failing = 0;
    for (cell, output) in expected.cells.iter().zip(actual) {
        if !transcript::matches(&cell.expected, output) {
            failing += 1;
            text.push_str(&cell_failure(name, cell.line, &cell.input, &cell.expected, output, style));
        }
    }
    let cells = expected.cells.len();
    if failing == 0 {
        return Report { passed: true, text: format!("ok   {name} ({cells} cell{})\n", plural(cells)) };
    }
    if bless {
        let blessed = transcript::blessed_outputs(expected, actual);
        return match std::fs::write(name, rewrite(&blessed)) {
            Ok(()) => Report { passed: true, text: format!("bless {name}: {failing} of {cells} cells rewritten\n") },
            Err(error) => Report { passed: false, text: format!("FAIL {name}: cannot bless it: {error}\n") },
        };
    }
    Report { passed: false, text: format!("FAIL {name}: {failing} of {cells} cells differ\n{text}") }
}

fn judge_notebook(name: &str, text: &str, outputs: &[(bool, String)], style: Style) -> Report {
    let saved = match notebook::read_notebook(text) {
        Ok(saved) => saved,
        Err(message) => return Report { passed: false, text: format!("FAIL {name}: {message}\n") },
    };
    let mut report = String::new();
    let mut failing = 0;
    // A notebook saved without outputs (one made where it could not run, as cuda-driver.ipynb
    // without a device) is held to running without errors until its outputs are saved.
    let unsaved = saved.iter().all(|cell| cell.text.is_empty());
    for (cell, (failed, output)) in saved.iter().zip(outputs) {
        let line = cell.index + 1;
        if unsaved {
            if *failed && !cell.raises {
                failing += 1;
                report
                    .push_str(&format!("{name}, cell {line} failed (the notebook has no saved outputs):\n{output}\n"));
            }
            continue;
        }
        let problem = match (cell.raises, failed) {
            (false, true) => Some("the cell failed but is not tagged `raises-exception`"),
            (true, false) => Some("the cell is tagged `raises-exception` but ran without an error"),
            _ => None,
        };
        let (expected, actual) = if cell.varies {
            // Timing decides what it shows: only whether it shows something counts.
            let shows = |text: &str| if text.trim().is_empty() { "(nothing)\n" } else { "(something)\n" }.to_string();
            (shows(&cell.text), shows(output))
        } else {
            (notebook::comparable(&cell.text), notebook::comparable(output))
        };
        if problem.is_some() || expected != actual {
            failing += 1;
            report.push_str(&cell_failure(name, line, &cell.source, &expected, &actual, style).replacen(
                &format!("{name}:{line}"),
                &format!("{name}, cell {line}"),
                1,
            ));
            if let Some(problem) = problem {
                report.push_str(&format!("  {problem}\n"));
            }
        }
    }
    let cells = saved.len();
    if failing == 0 {
        return Report { passed: true, text: format!("ok   {name} ({cells} code cell{})\n", plural(cells)) };
    }
    let verb = if unsaved { "failed" } else { "differ" };
    Report { passed: false, text: format!("FAIL {name}: {failing} of {cells} code cells {verb}\n{report}") }
}

fn plural(count: usize) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

/// One failing cell: where it is, its input, and a unified diff of expected and actual output.
fn cell_failure(name: &str, line: usize, input: &str, expected: &str, actual: &str, style: Style) -> String {
    let mut text = format!("--- {name}:{line}\n");
    for (index, input_line) in input.lines().enumerate() {
        text.push_str(if index == 0 { "> " } else { ". " });
        text.push_str(input_line);
        text.push('\n');
    }
    // Myers' diff is quadratic in the worst case (two long outputs that share nothing): past
    // the deadline it falls back to a coarser diff, so a long mismatch is reported in time.
    let diff = TextDiff::configure().timeout(DIFF_TIMEOUT).diff_lines(expected, actual);
    for change in diff.iter_all_changes() {
        let (sign, colour) = match change.tag() {
            ChangeTag::Delete => ('-', "\u{1b}[31m"),
            ChangeTag::Insert => ('+', "\u{1b}[32m"),
            ChangeTag::Equal => (' ', ""),
        };
        let value = change.value();
        let value = value.strip_suffix('\n').unwrap_or(value);
        if style == Style::Color && !colour.is_empty() {
            text.push_str(&format!("{colour}{sign}{value}\u{1b}[0m\n"));
        } else {
            text.push_str(&format!("{sign}{value}\n"));
        }
        if change.missing_newline() {
            text.push_str("\\ no newline at the end\n");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn arguments() {
        let options = parse(&words("--bless -j 3 tests notebooks/tour.ipynb")).expect("valid").expect("not a worker");
        let timeout = Duration::from_secs(DEFAULT_TIMEOUT_SECONDS);
        assert_eq!(options, Options { bless: true, jobs: 3, timeout, paths: words("tests notebooks/tour.ipynb") });
        let options = parse(&words("--timeout 5 x.repl")).expect("valid").expect("not a worker");
        assert_eq!(options.timeout, Duration::from_secs(5));
        assert_eq!(parse(&words("--worker a.repl")), Ok(Err("a.repl".to_string())));
        assert!(parse(&words("--jobs 0 x.repl")).is_err());
        assert!(parse(&[]).is_err());
        assert!(parse(&words("--frobnicate x.repl")).is_err());
    }

    #[test]
    fn answers_read_back_as_written() {
        let answer = b"cell 0 8\n3 : int\n\ncell 1 0\n\n";
        assert_eq!(read_answer(answer), Ok(vec![(false, "3 : int\n".to_string()), (true, String::new())]));
        assert_eq!(read_answer(b"fatal 4\nboom\n"), Err("boom".to_string()));
        assert!(read_answer(b"cell 0 99\nshort\n").is_err());
    }

    #[test]
    fn a_failing_cell_shows_where_and_what() {
        let text = cell_failure("a.repl", 7, "(call f)", "1 : int\n", "2 : int\n", Style::Plain);
        assert_eq!(text, "--- a.repl:7\n> (call f)\n-1 : int\n+2 : int\n");
    }
}
