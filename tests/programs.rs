//! Programs against C: every `tests/programs/NAME.cl` (a C-Lisp program with a `main`) and every
//! `NAME.sexp` (a standalone Brilisp program, `(brilisp …)`) has a `NAME.c` that does the same in
//! C. The C is compiled with `clang-19 -O0` and run; the program runs as `quasi run` runs it
//! (`Session::run_file`, output captured). Their stdout and exit status must be equal, byte for
//! byte.

use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::{Arguments, Failed, Trial};
use quasi_lang::{Session, SessionConfig, Stream};
use similar::TextDiff;

/// What a program printed and how it ended.
#[derive(Debug, PartialEq)]
struct Run {
    stdout: String,
    status: i32,
}

fn run_c(source: &Path) -> Result<Run, Failed> {
    let stem = source.file_stem().and_then(|stem| stem.to_str()).unwrap_or("program");
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("program-{stem}"));
    let compiled = Command::new("clang-19")
        .args(["-O0", "-w", "-o"])
        .arg(&binary)
        .arg(source)
        .arg("-lm")
        .output()
        .map_err(|error| format!("cannot run clang-19 (it must be installed): {error}"))?;
    if !compiled.status.success() {
        return Err(
            format!("clang-19 rejected {}:\n{}", source.display(), String::from_utf8_lossy(&compiled.stderr)).into()
        );
    }
    let ran = Command::new(&binary).output().map_err(|error| format!("cannot run {}: {error}", binary.display()))?;
    let status = ran.status.code().ok_or_else(|| format!("{} ended by a signal", binary.display()))?;
    Ok(Run { stdout: String::from_utf8_lossy(&ran.stdout).into_owned(), status })
}

fn run_clisp(source: &Path) -> Result<Run, Failed> {
    let text = std::fs::read_to_string(source).map_err(|error| format!("cannot read {}: {error}", source.display()))?;
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })
        .map_err(|error| error.to_string())?;
    let path = source.display().to_string();
    let (outcome, status) = session.run_file(&path, text, &[]);
    if outcome.failed() {
        let rendered = quasi_repl::render(&outcome, quasi_repl::Style::Plain);
        return Err(format!("{} did not run cleanly (status {status}):\n{rendered}", source.display()).into());
    }
    Ok(Run { stdout: outcome.written(Stream::Stdout), status })
}

fn check(program: &Path) -> Result<(), Failed> {
    let c_source = program.with_extension("c");
    if !c_source.exists() {
        return Err(format!("{} has no C counterpart {}", program.display(), c_source.display()).into());
    }
    let expected = run_c(&c_source)?;
    let actual = run_clisp(program)?;
    if expected == actual {
        return Ok(());
    }
    let diff = TextDiff::from_lines(&expected.stdout, &actual.stdout).unified_diff().header("C", "Quasi").to_string();
    Err(format!(
        "{} differs from {}: exit status {} (C) and {} (Quasi)\n{diff}",
        program.display(),
        c_source.display(),
        expected.status,
        actual.status
    )
    .into())
}

fn main() {
    let mut arguments = Arguments::from_args();
    // Sessions capture file descriptor 1, which is process-wide: one program at a time.
    arguments.test_threads = Some(1);
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs");
    let mut programs: Vec<PathBuf> = std::fs::read_dir(&directory)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|extension| extension == "cl" || extension == "sexp"))
                .collect()
        })
        .unwrap_or_default();
    programs.sort();
    let trials = programs
        .into_iter()
        .map(|program| {
            let name = format!("programs/{}", program.file_stem().and_then(|stem| stem.to_str()).unwrap_or("?"));
            Trial::test(name, move || check(&program))
        })
        .collect();
    libtest_mimic::run(&arguments, trials).exit();
}
