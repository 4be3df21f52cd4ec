//! quasi-fuzz: the whole pipeline under generated input.
//!
//! Two generators: [`mutate`] cuts cases from the transcripts, the docs and the prelude and
//! mutates their last cells; [`program`] writes random well-typed programs together with C
//! twins. Every case runs in a child process ([`worker`]), so a panic, an abort or a signal is a
//! reported failure with its input rather than the end of the run. What counts as a failure:
//! a crash, a session stuck past the cell limit outside compiled code, an `error[internal]`
//! (the LLVM verifier among others), and for twins any diagnostic or output that differs from
//! the C program compiled by `clang-19 -O0 -fwrapv -ffp-contract=off`, at `:opt` 0, 3 and one
//! of 1 and 2, and at the default setting once tiered compilation promoted its functions; and a
//! background promotion that failed (every case ends with `:tier wait`). A cell whose compiled
//! code merely runs long (a mutated loop bound) is a runaway, counted, not failed.
//!
//! Failing inputs are written as files that [`check_regression`] runs again:
//! `NAME.cells` (cells separated by [`CELL_SEPARATOR`] lines) or `NAME.cl` with its `NAME.c`.

pub mod mutate;
pub mod program;
pub mod rng;
pub mod sexp;
pub mod surfaces;
pub mod worker;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use worker::worker_if_asked;
use worker::{run_cells, Verdict};

/// The line between two cells in a `.cells` file.
pub const CELL_SEPARATOR: &str = "#### cell";

/// The `:opt` levels every twin runs at besides one of 1 and 2.
const TWIN_LEVELS: [u8; 2] = [0, 3];

/// How cases run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The longest a cell may take before the worker is stopped.
    pub cell_limit: Duration,
    /// A folder for jobs, C programs and binaries.
    pub scratch: PathBuf,
    /// The C compiler for twins; `None` skips twins.
    pub clang: Option<String>,
}

/// What kind of wrong a failure is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FailureKind {
    /// The session's process died.
    Crash,
    /// The session itself was busy or blocked past the limit.
    Hang,
    /// An `error[internal]`: LLVM's verifier or the JIT failed.
    Internal,
    /// A twin program was rejected, faulted or ran away in Quasi.
    Rejected,
    /// A twin's output differs from C's, or between `:opt` levels.
    Mismatch,
    /// clang could not compile or run the C twin: a generator bug.
    Generator,
}

impl FailureKind {
    /// The name in tables and file names.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Crash => "crash",
            FailureKind::Hang => "hang",
            FailureKind::Internal => "internal",
            FailureKind::Rejected => "rejected",
            FailureKind::Mismatch => "mismatch",
            FailureKind::Generator => "generator",
        }
    }
}

/// The input of a case, as it is saved.
#[derive(Clone, Debug)]
pub enum Input {
    /// Cells run in order in one fresh session.
    Cells(Vec<String>),
    /// A C-Lisp program and its C twin.
    Twin(program::Twin),
}

/// A failed case: what, where, and the input that reproduces it.
#[derive(Clone, Debug)]
pub struct Failure {
    /// What kind of wrong.
    pub kind: FailureKind,
    /// The case's name (seed, number, origin).
    pub case: String,
    /// What happened, for the report.
    pub detail: String,
    /// The input.
    pub input: Input,
}

impl Failure {
    /// Writes the input into `directory` as `STEM.cells` or `STEM.cl` + `STEM.c`, with the
    /// failure described in a comment at the top; returns the main file's path.
    pub fn save(&self, directory: &Path, stem: &str) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(directory)?;
        let comment: String = format!("{}: {}\n{}", self.kind.name(), self.case, self.detail)
            .lines()
            .take(30)
            .map(|line| format!(";; {line}\n"))
            .collect();
        match &self.input {
            Input::Cells(cells) => {
                let path = directory.join(format!("{stem}.cells"));
                std::fs::write(&path, format_cells(&comment, cells))?;
                Ok(path)
            }
            Input::Twin(twin) => {
                let path = directory.join(format!("{stem}.cl"));
                std::fs::write(&path, format!("{comment}{}", twin.clisp))?;
                std::fs::write(directory.join(format!("{stem}.c")), &twin.c)?;
                Ok(path)
            }
        }
    }
}

/// A `.cells` file: the comment, then each cell after a separator line.
pub fn format_cells(comment: &str, cells: &[String]) -> String {
    let mut text = comment.to_string();
    for cell in cells {
        let _ = writeln!(text, "{CELL_SEPARATOR}");
        text.push_str(cell);
        text.push('\n');
    }
    text
}

/// The cells of a `.cells` file (what precedes the first separator is comment).
pub fn parse_cells(text: &str) -> Vec<String> {
    let mut cells: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in text.split_inclusive('\n') {
        if line.trim_end_matches('\n') == CELL_SEPARATOR {
            cells.extend(current.take());
            current = Some(String::new());
        } else if let Some(cell) = &mut current {
            cell.push_str(line);
        }
    }
    cells.extend(current);
    // The newline before each separator belongs to the file, not the cell.
    cells.into_iter().map(|cell| cell.strip_suffix('\n').map(str::to_string).unwrap_or(cell)).collect()
}

/// How one case ended when it did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passed {
    /// Every cell ended.
    Finished,
    /// Compiled code ran past the limit (the input's loop, not a bug).
    Runaway,
}

/// Runs cells and judges them: crashes, hangs and internal errors fail.
pub fn check_cells(cells: &[String], case: &str, settings: &Settings) -> Result<Passed, Failure> {
    // Last, the background compiler's work (tiered compilation) is waited for: a promotion that
    // failed is the machinery's failure, as an internal error is.
    let mut cells = cells.to_vec();
    cells.push(TIER_WAIT.to_string());
    let cells = &cells[..];
    let verdict = run_cells(cells, settings.cell_limit, &settings.scratch);
    show(case, cells, &verdict);
    let failure =
        |kind, detail: String| Failure { kind, case: case.to_string(), detail, input: Input::Cells(cells.to_vec()) };
    if let Some(report) = verdict.reports().last().filter(|report| promotion_failed(&report.rendered)) {
        return Err(failure(FailureKind::Internal, format!("a background promotion failed:\n{}", report.rendered)));
    }
    if let Some((index, report)) = verdict.reports().iter().enumerate().find(|(_, report)| report.internal) {
        return Err(failure(
            FailureKind::Internal,
            format!("cell {} gave an internal error:\n{}", index + 1, report.rendered),
        ));
    }
    match verdict {
        Verdict::Finished(_) => Ok(Passed::Finished),
        Verdict::Runaway { .. } => Ok(Passed::Runaway),
        Verdict::Crashed { cell, how, .. } => Err(failure(FailureKind::Crash, format!("in cell {}: {how}", cell + 1))),
        Verdict::Hung { cell, how, .. } => Err(failure(FailureKind::Hang, format!("in cell {}: {how}", cell + 1))),
    }
}

/// The command that waits for tiered compilation's background compiler and lists each
/// function's level.
const TIER_WAIT: &str = ":tier wait";

/// Whether `:tier`'s listing shows a promotion that failed.
fn promotion_failed(tier_listing: &str) -> bool {
    tier_listing.lines().any(|line| line.contains(" failed: "))
}

/// Compiles and runs the C twin, then the C-Lisp program at each level, and at the default
/// setting once its functions are promoted (tiered compilation), and compares.
pub fn check_twin(twin: &program::Twin, case: &str, levels: &[u8], settings: &Settings) -> Result<(), Failure> {
    let failure =
        |kind, detail: String| Failure { kind, case: case.to_string(), detail, input: Input::Twin(twin.clone()) };
    let clang = settings.clang.as_deref().unwrap_or("clang-19");
    let expected =
        run_c(&twin.c, clang, &settings.scratch).map_err(|detail| failure(FailureKind::Generator, detail))?;
    let mut cells = Vec::new();
    for level in levels {
        cells.extend([format!(":opt {level}"), twin.clisp.clone(), "(call main)".to_string()]);
    }
    // Tiered: compiled at the quick level, then `main` (and what it calls) run promoted.
    cells.extend([":opt tiered".to_string(), twin.clisp.clone(), TIER_WAIT.to_string(), "(call main)".to_string()]);
    let verdict = run_cells(&cells, settings.cell_limit, &settings.scratch);
    show(case, &cells, &verdict);
    let reports = match verdict {
        Verdict::Finished(reports) => reports,
        Verdict::Crashed { cell, how, .. } => {
            return Err(failure(
                FailureKind::Crash,
                format!("in cell {} ({}): {how}", cell + 1, cell_role(cell, levels)),
            ))
        }
        Verdict::Hung { cell, how, .. } => {
            return Err(failure(
                FailureKind::Hang,
                format!("in cell {} ({}): {how}", cell + 1, cell_role(cell, levels)),
            ))
        }
        Verdict::Runaway { cell, .. } => {
            return Err(failure(
                FailureKind::Rejected,
                format!("cell {} ({}) ran past the limit", cell + 1, cell_role(cell, levels)),
            ))
        }
    };
    for (index, report) in reports.iter().enumerate() {
        if report.internal || report.failed {
            let kind = if report.internal { FailureKind::Internal } else { FailureKind::Rejected };
            return Err(failure(
                kind,
                format!("cell {} ({}) failed:\n{}", index + 1, cell_role(index, levels), report.rendered),
            ));
        }
    }
    let (pinned, tiered) = reports.split_at((levels.len() * 3).min(reports.len()));
    let settings = levels.iter().map(|level| format!(":opt {level}")).chain(["the default, promoted".to_string()]);
    for (setting, chunk) in settings.zip(pinned.chunks(3).chain([tiered])) {
        let actual = chunk.iter().map(|report| report.stdout.as_str()).collect::<String>();
        if actual != expected {
            let diff = first_difference(&expected, &actual);
            return Err(failure(FailureKind::Mismatch, format!("at {setting} the output differs from C's: {diff}")));
        }
        if chunk.iter().any(|report| promotion_failed(&report.rendered)) {
            return Err(failure(FailureKind::Internal, format!("at {setting} a background promotion failed")));
        }
    }
    Ok(())
}

/// With `QUASI_FUZZ_SHOW` set, every case's cells and what they printed go to stderr.
fn show(case: &str, cells: &[String], verdict: &Verdict) {
    if std::env::var_os("QUASI_FUZZ_SHOW").is_none() {
        return;
    }
    eprintln!("==== {case}");
    for (index, cell) in cells.iter().enumerate() {
        eprintln!("---- cell {}\n{cell}", index + 1);
        if let Some(report) = verdict.reports().get(index) {
            eprintln!("---- printed\n{}{}", report.stdout, report.rendered);
        }
    }
    if !matches!(verdict, Verdict::Finished(_)) {
        eprintln!("---- {verdict:?}");
    }
}

fn cell_role(cell: usize, levels: &[u8]) -> String {
    if cell >= levels.len() * 3 {
        let roles = [":opt tiered", "the program at the default", TIER_WAIT, "(call main), promoted"];
        return roles.get(cell - levels.len() * 3).copied().unwrap_or("a tiered cell").to_string();
    }
    let level = levels.get(cell / 3).copied().unwrap_or(0);
    match cell % 3 {
        0 => format!(":opt {level}"),
        1 => format!("the program at :opt {level}"),
        _ => format!("(call main) at :opt {level}"),
    }
}

/// The first line where two outputs part.
fn first_difference(expected: &str, actual: &str) -> String {
    let mut expected_lines = expected.lines();
    let mut actual_lines = actual.lines();
    for line in 1.. {
        match (expected_lines.next(), actual_lines.next()) {
            (None, None) => break,
            (left, right) if left == right => continue,
            (left, right) => return format!("line {line}: C printed {left:?}, C-Lisp {right:?}"),
        }
    }
    "only in line endings".to_string()
}

/// Compiles and runs a C program; its stdout, or why not.
fn run_c(source: &str, clang: &str, scratch: &Path) -> Result<String, String> {
    std::fs::create_dir_all(scratch).map_err(|error| error.to_string())?;
    let c_path = scratch.join("twin.c");
    let binary = scratch.join("twin");
    std::fs::write(&c_path, source).map_err(|error| error.to_string())?;
    let compiled = Command::new(clang)
        .args(["-O0", "-fwrapv", "-ffp-contract=off", "-w", "-o"])
        .arg(&binary)
        .arg(&c_path)
        .arg("-lm")
        .output()
        .map_err(|error| format!("cannot run {clang}: {error}"))?;
    if !compiled.status.success() {
        return Err(format!("{clang} rejected the twin:\n{}", String::from_utf8_lossy(&compiled.stderr)));
    }
    let ran = Command::new("timeout")
        .arg("20")
        .arg(&binary)
        .output()
        .map_err(|error| format!("cannot run the twin: {error}"))?;
    if !ran.status.success() {
        return Err(format!("the C twin ended with {}", ran.status));
    }
    Ok(String::from_utf8_lossy(&ran.stdout).into_owned())
}

/// The `:opt` levels of twin case `case`: 0, 3, and 1 or 2.
pub fn twin_levels(case: u64) -> Vec<u8> {
    let mut levels = TWIN_LEVELS.to_vec();
    levels.push(1 + (case % 2) as u8);
    levels
}

/// The C compiler for twins: `$QUASI_FUZZ_CLANG`, else `clang-19` or `clang` if installed.
pub fn find_clang() -> Option<String> {
    let candidates =
        std::env::var("QUASI_FUZZ_CLANG").ok().into_iter().chain(["clang-19".to_string(), "clang".to_string()]);
    candidates
        .into_iter()
        .find(|candidate| Command::new(candidate).arg("--version").output().is_ok_and(|output| output.status.success()))
}

/// Runs a saved regression input: a `.cells` file must not fail, a `.cl` must match its `.c`.
pub fn check_regression(path: &Path, settings: &Settings) -> Result<Passed, Failure> {
    let text = std::fs::read_to_string(path).map_err(|error| Failure {
        kind: FailureKind::Generator,
        case: path.display().to_string(),
        detail: format!("cannot read: {error}"),
        input: Input::Cells(Vec::new()),
    })?;
    let case = path.display().to_string();
    if path.extension().is_some_and(|extension| extension == "cl") {
        let c = std::fs::read_to_string(path.with_extension("c")).unwrap_or_default();
        let twin = program::Twin { clisp: text, c };
        check_twin(&twin, &case, &[0, 1, 2, 3], settings).map(|()| Passed::Finished)
    } else {
        check_cells(&parse_cells(&text), &case, settings)
    }
}

#[cfg(test)]
mod tests {
    use super::{format_cells, parse_cells};

    #[test]
    fn cells_files_round_trip() {
        let cells = vec!["(add 1 2)".to_string(), "(define ((f int))\n  (ret 1))\n".to_string(), String::new()];
        assert_eq!(parse_cells(&format_cells(";; x\n", &cells)), cells);
    }
}
