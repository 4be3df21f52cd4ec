//! The transcript suite: every `.repl` file under `tests/` is one test, and so is every
//! Markdown document in `docs/` (its ```` ```repl ```` blocks run in order in one session), run
//! through the same session engine and renderer as the `quasi` REPL. `UPDATE_EXPECT=1` rewrites
//! expectations in place, prose untouched (never under `CI`).

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

fn documents(directory: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(directory) else { return Vec::new() };
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_file() && path.extension().is_some_and(|extension| extension == "md"))
        .collect()
}

/// A transcript file's text with every expected output replaced by the actual one.
fn rerun_transcript(text: &str) -> Result<String, Failed> {
    let transcript = quasi_tests::parse(text);
    let outputs = quasi_tests::run(&transcript)?;
    Ok(quasi_tests::format(&transcript, &outputs))
}

/// A Markdown document's text with every expected output in its blocks replaced by the
/// actual one.
fn rerun_document(text: &str) -> Result<String, Failed> {
    let document = quasi_tests::parse_markdown(text);
    let outputs = quasi_tests::run(&document.transcript())?;
    Ok(document.format(&outputs))
}

fn check(path: &Path, rerun: fn(&str) -> Result<String, Failed>) -> Result<(), Failed> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let actual = rerun(&text)?;
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
    let mut docs = documents(&root.parent().unwrap_or(root).join("docs"));
    docs.sort();
    let trial = |path: PathBuf, name: String, rerun: fn(&str) -> Result<String, Failed>| {
        Trial::test(name, move || check(&path, rerun))
    };
    let trials = paths
        .into_iter()
        .map(|path| {
            let name = path.strip_prefix(root).unwrap_or(&path).with_extension("").display().to_string();
            trial(path, name, rerun_transcript)
        })
        .chain(docs.into_iter().map(|path| {
            let name = Path::new("docs").join(path.file_stem().unwrap_or_default()).display().to_string();
            trial(path, name, rerun_document)
        }))
        .collect();
    libtest_mimic::run(&arguments, trials).exit();
}
