//! `quasi test` as a user runs it: the binary on the fixtures in `tests/quasi-test/` (a passing
//! transcript with a header, wildcards and `...`; a failing one; notebooks with and without
//! `raises-exception`), `--bless`, and the project's own transcripts, documents and notebooks.
//! The expected reports are files next to the fixtures (`UPDATE_EXPECT=1` rewrites them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use expect_test::expect_file;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/quasi-test")
}

/// `quasi test ARGS…` run from `folder`, never under CI unless asked.
fn quasi_test(folder: &Path, arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quasi"))
        .arg("test")
        .args(arguments)
        .current_dir(folder)
        .env_remove("CI")
        .env("NO_COLOR", "1")
        .output()
        .expect("quasi test runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn passing_files_report_ok() {
    let output = quasi_test(&fixtures(), &["--jobs", "2", "passing.repl", "notebook.ipynb"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    expect_file!["quasi-test/passing.out"].assert_eq(&stdout(&output));
}

#[test]
fn failing_cells_show_file_line_and_diff() {
    let output = quasi_test(&fixtures(), &["failing.repl", "untagged.ipynb"]);
    assert_eq!(output.status.code(), Some(1));
    expect_file!["quasi-test/failing.out"].assert_eq(&stdout(&output));
}

#[test]
fn bless_rewrites_what_differs_and_keeps_wildcards() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let copy = folder.path().join("failing.repl");
    let original = std::fs::read_to_string(fixtures().join("failing.repl")).expect("the fixture");
    // A wildcard that still matches survives blessing.
    std::fs::write(&copy, original.replace("4 : int", "[..] : int")).expect("a copy");
    let refused = Command::new(env!("CARGO_BIN_EXE_quasi"))
        .args(["test", "--bless", "failing.repl"])
        .current_dir(folder.path())
        .env("CI", "true")
        .output()
        .expect("quasi test runs");
    assert_eq!(refused.status.code(), Some(2), "--bless is refused under CI");
    let blessed = quasi_test(folder.path(), &["--bless", "failing.repl"]);
    assert_eq!(blessed.status.code(), Some(0), "{}", stdout(&blessed));
    assert_eq!(stdout(&blessed), "bless failing.repl: 2 of 4 cells rewritten\n1 passed, 0 failed\n");
    let text = std::fs::read_to_string(&copy).expect("the blessed file");
    expect_file!["quasi-test/failing.blessed.repl"].assert_eq(&text);
    let again = quasi_test(folder.path(), &["failing.repl"]);
    assert_eq!(stdout(&again), "ok   failing.repl (4 cells)\n1 passed, 0 failed\n");
}

/// `:save` in a transcript under test writes to a scratch folder: the transcript it names (here
/// itself) is never overwritten, and its message is checked like any output (issue 31, item 9).
#[test]
fn save_in_a_tested_transcript_never_overwrites_a_test_file() {
    let folder = tempfile::tempdir().expect("a temporary directory");
    let text = "> (add 1 2)\n3 : int\n> :save self.repl\nsaved 1 cell to self.repl\n";
    let path = folder.path().join("self.repl");
    std::fs::write(&path, text).expect("the transcript is written");
    let output = quasi_test(folder.path(), &["self.repl"]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert_eq!(stdout(&output), "ok   self.repl (2 cells)\n1 passed, 0 failed\n");
    assert_eq!(std::fs::read_to_string(&path).expect("the transcript is read"), text);
}

/// A cell whose 100,000 lines of output share nothing with the expected 100,000 fails with a
/// diff of every line, at once: the diff falls back to a coarse one past its deadline (it took
/// minutes, outside `--timeout`, before; issue 31, item 8).
#[test]
fn a_long_mismatch_is_reported_with_its_whole_diff() {
    let folder = tempfile::tempdir().expect("a temporary directory");
    let mut text = String::from("> (rhai \"for i in 0..100000 { print(`${i}`); }\")\n");
    for line in 0..100_000 {
        text.push_str(&format!("y{line}\n"));
    }
    std::fs::write(folder.path().join("long.repl"), text).expect("the transcript is written");
    let output = quasi_test(folder.path(), &["long.repl"]);
    assert_eq!(output.status.code(), Some(1));
    let report = stdout(&output);
    assert!(report.starts_with("FAIL long.repl: 1 of 1 cells differ\n"), "{}", &report[..200.min(report.len())]);
    assert_eq!(report.lines().filter(|line| line.starts_with("-y")).count(), 100_000);
    assert_eq!(report.lines().filter(|line| line.starts_with('+')).count(), 100_000);
}

#[test]
fn bad_invocations_are_usage_errors() {
    for arguments in [&[][..], &["--jobs", "0", "x.repl"], &["no-such.repl"], &["Cargo.toml"]] {
        let output = quasi_test(Path::new(env!("CARGO_MANIFEST_DIR")), arguments);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}");
        assert!(!output.stderr.is_empty(), "{arguments:?} says why");
    }
}

/// The project's own suite passes under `quasi test` as it does under the cargo harness:
/// every transcript, the language reference's examples, and the notebooks (gpu.ipynb runs its
/// launches in the simulator, so it shows the same with or without a CUDA device).
#[test]
fn the_projects_own_transcripts_and_notebooks_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let output = quasi_test(root, &["tests", "docs/language.md", "notebooks"]);
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    let files = report.lines().filter(|line| line.starts_with("ok ")).count();
    assert!(files > 70, "{report}");
    // Transcripts that need what this machine lacks (`# requires: cuda-device`) say so.
    let skipped = report.lines().filter(|line| line.starts_with("skip ")).count();
    let summary = match skipped {
        0 => format!("{files} passed, 0 failed\n"),
        _ => format!("{files} passed, 0 failed, {skipped} skipped\n"),
    };
    assert!(report.ends_with(&summary), "{report}");
}

#[test]
fn a_file_that_runs_too_long_is_stopped_and_fails() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let endless = "> (declare n int64)\n> (while (ge n (int64 0)) (set n (add n (int64 1))))\n";
    std::fs::write(folder.path().join("endless.repl"), endless).expect("a transcript");
    std::fs::write(folder.path().join("quick.repl"), "> (add 1 2)\n3 : int\n").expect("a transcript");
    let output = quasi_test(folder.path(), &["--timeout", "2", "endless.repl", "quick.repl"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stdout(&output),
        "FAIL endless.repl: it ran longer than 2 s (--timeout) and was stopped in the cell at line 2\nok   quick.repl (1 cell)\n1 passed, 1 failed\n"
    );
}

/// The processes whose command line names `file` (a worker, or what its cells forked).
fn processes_running(file: &Path) -> Vec<String> {
    let file = file.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let command = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let command = String::from_utf8_lossy(&command).replace('\0', " ");
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = state.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if command.contains(&file) && !zombie {
            found.push(format!("{}: {command}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// What a cell forks ends with its file, whether the file passed or ran out of time: nothing
/// is left running, and a forked process holding the worker's output does not keep `quasi
/// test` waiting (issue 31, item 10: `--timeout` left them running).
#[test]
fn what_cells_fork_ends_with_their_file() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let forks = "> (define ((fork int)))\nfork : () -> int  (extern)\n\
                 > (define ((sleep int) (seconds int)))\nsleep : (int) -> int  (extern)\n\
                 > (define ((_exit void) (status int)))\n_exit : (int) -> void  (extern)\n\
                 > (define ((child void)) (call sleep 60) (call _exit 0))\nchild : () -> void\n\
                 > (define ((linger void)) (if (eq (call fork) 0) (call child)))\nlinger : () -> void\n\
                 > (call linger)\n";
    std::fs::write(folder.path().join("forks.repl"), forks).expect("a transcript");
    let endless = format!("{forks}> (declare n int64)\n> (while (ge n (int64 0)) (set n (add n (int64 1))))\n");
    std::fs::write(folder.path().join("forks-endless.repl"), endless).expect("a transcript");
    let started = std::time::Instant::now();
    let output = quasi_test(folder.path(), &["--timeout", "3", "forks.repl", "forks-endless.repl"]);
    assert_eq!(
        stdout(&output),
        "ok   forks.repl (6 cells)\nFAIL forks-endless.repl: it ran longer than 3 s (--timeout) and was stopped in the cell at line 13\n\
         1 passed, 1 failed\n"
    );
    // Far from the 60 s the forked processes sleep.
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "{:?}", started.elapsed());
    for file in ["forks.repl", "forks-endless.repl"] {
        assert_eq!(processes_running(&folder.path().join(file)), Vec::<String>::new());
    }
}

#[test]
fn a_notebook_without_saved_outputs_must_run_without_errors() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let notebook = |cells: &[&str]| {
        let cells: Vec<String> = cells
            .iter()
            .map(|source| {
                format!(
                    r#"{{"cell_type": "code", "source": {source:?}, "metadata": {{}}, "outputs": [], "execution_count": null}}"#
                )
            })
            .collect();
        format!(r#"{{"cells": [{}], "metadata": {{}}, "nbformat": 4, "nbformat_minor": 5}}"#, cells.join(", "))
    };
    std::fs::write(
        folder.path().join("runs.ipynb"),
        notebook(&["(define ((sq int) (x int)) (ret (mul x x)))", "(call sq 3)"]),
    )
    .expect("a notebook");
    std::fs::write(folder.path().join("fails.ipynb"), notebook(&["(add 1 2.5)"])).expect("a notebook");
    let runs = quasi_test(folder.path(), &["runs.ipynb"]);
    assert_eq!(stdout(&runs), "ok   runs.ipynb (2 code cells)\n1 passed, 0 failed\n");
    let fails = quasi_test(folder.path(), &["fails.ipynb"]);
    assert_eq!(fails.status.code(), Some(1));
    assert!(
        stdout(&fails).contains("fails.ipynb, cell 1 failed (the notebook has no saved outputs)"),
        "{}",
        stdout(&fails)
    );
}
