//! The transcript suite: every `.repl` file under `tests/` is one test, run through the same
//! session engine and renderer as the `quasi` REPL. `UPDATE_EXPECT=1` rewrites expectations
//! (never under `CI`).

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};
use similar::TextDiff;

fn transcripts(directory: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(directory) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            transcripts(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "repl") {
            found.push(path);
        }
    }
}

fn check(path: &Path) -> Result<(), Failed> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let transcript = quasi_tests::parse(&text);
    let outputs = quasi_tests::run(&transcript)?;
    let actual = quasi_tests::format(&transcript, &outputs);
    if actual == text {
        return Ok(());
    }
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    if update && std::env::var_os("CI").is_none() {
        std::fs::write(path, &actual).map_err(|error| format!("cannot update {}: {error}", path.display()))?;
        return Ok(());
    }
    let diff = TextDiff::from_lines(&text, &actual).unified_diff().header("expected", "actual").to_string();
    let hint =
        if update { "UPDATE_EXPECT is ignored under CI" } else { "run with UPDATE_EXPECT=1 to accept the new output" };
    Err(format!("transcript {} does not match ({hint}):\n{diff}", path.display()).into())
}

fn main() {
    let mut arguments = Arguments::from_args();
    // Sessions capture file descriptor 1, which is process-wide: run one transcript at a time.
    arguments.test_threads = Some(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    transcripts(root, &mut paths);
    paths.sort();
    let trials = paths
        .into_iter()
        .map(|path| {
            let name = path.strip_prefix(root).unwrap_or(&path).with_extension("").display().to_string();
            Trial::test(name, move || check(&path))
        })
        .collect();
    libtest_mimic::run(&arguments, trials).exit();
}
