//! The transcript suite: every `.repl` file under `tests/` is one test, and so is every
//! Markdown document in `docs/` (its ```` ```repl ```` blocks run in order in one session). A
//! thin caller of `quasi_repl::transcript`, the engine `quasi test` uses too: each file runs in
//! a fresh session from its own folder, outputs compared with wildcards. `UPDATE_EXPECT=1`
//! rewrites what differs in place, prose untouched (never under `CI`).

mod files;

use std::path::Path;
use std::sync::Mutex;

use libtest_mimic::{Arguments, Failed, Trial};
use quasi_repl::transcript::{self, Transcript};
use similar::TextDiff;

/// The working directory is process-wide and transcripts run from their own folder: one at a
/// time (sessions capture file descriptor 1, which is process-wide too).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The text a file would have if every output that differs were the actual one, and whether
/// anything differs.
fn rerun(path: &Path, text: &str) -> Result<(String, bool), Failed> {
    let is_document = path.extension().is_some_and(|extension| extension == "md");
    let document = is_document.then(|| transcript::parse_markdown(text));
    let parsed: Transcript = match &document {
        Some(document) => document.transcript(),
        None => transcript::parse(text),
    };
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let folder = path.parent().ok_or("a file without a folder")?;
    let back = std::env::current_dir().map_err(|error| error.to_string())?;
    std::env::set_current_dir(folder).map_err(|error| format!("cannot enter {}: {error}", folder.display()))?;
    let actual = transcript::run(&parsed);
    std::env::set_current_dir(back).map_err(|error| error.to_string())?;
    let actual = actual?;
    let differs = parsed.cells.iter().zip(&actual).any(|(cell, output)| !transcript::matches(&cell.expected, output));
    let blessed = transcript::blessed_outputs(&parsed, &actual);
    let rewritten = match &document {
        Some(document) => document.format(&blessed),
        None => transcript::format(&parsed, &blessed),
    };
    Ok((rewritten, differs))
}

fn check(path: &Path) -> Result<(), Failed> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let (actual, differs) = rerun(path, &text)?;
    if !differs {
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

/// Builds the test libraries of `tests/ffi` (`NAME.c` → `libNAME.so`) with clang-19 into a
/// directory put in front of `QUASI_LIBRARY_PATH`, where `(load-library "libNAME.so")` finds
/// them. A library that does not build leaves the transcripts that require it skipped, saying
/// so; the reason is printed here.
fn build_test_libraries(root: &Path) {
    let directory = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ffi");
    if let Err(error) = std::fs::create_dir_all(&directory) {
        eprintln!("cannot create {}: {error}", directory.display());
        return;
    }
    let mut sources = Vec::new();
    files::files(&root.join("ffi"), "c", false, &mut sources);
    for source in sources {
        let stem = source.file_stem().unwrap_or_default().to_string_lossy();
        let library = directory.join(format!("lib{stem}.so"));
        let built = std::process::Command::new("clang-19")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&library)
            .arg(&source)
            .output();
        match built {
            Ok(output) if output.status.success() => {}
            Ok(output) => {
                eprintln!("clang-19 rejected {}:\n{}", source.display(), String::from_utf8_lossy(&output.stderr))
            }
            Err(error) => eprintln!("cannot run clang-19 to build {}: {error}", library.display()),
        }
    }
    let mut search_path = directory.display().to_string();
    if let Some(outer) = std::env::var_os("QUASI_LIBRARY_PATH").filter(|outer| !outer.is_empty()) {
        search_path = format!("{search_path}:{}", outer.to_string_lossy());
    }
    // Before any session or thread starts: sessions read it when a `load-library` runs.
    std::env::set_var("QUASI_LIBRARY_PATH", search_path);
}

fn main() {
    let mut arguments = Arguments::from_args();
    arguments.test_threads = Some(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    build_test_libraries(root);
    let mut paths = Vec::new();
    files::files(root, "repl", true, &mut paths);
    files::files(&root.parent().unwrap_or(root).join("docs"), "md", false, &mut paths);
    // The README's examples are tested too.
    paths.push(root.parent().unwrap_or(root).join("README.md"));
    paths.sort();
    let trials = paths
        .into_iter()
        .map(|path| {
            let name = match path.strip_prefix(root) {
                Ok(inside) => inside.with_extension("").display().to_string(),
                Err(_) => Path::new("docs").join(path.file_stem().unwrap_or_default()).display().to_string(),
            };
            // A transcript that needs what this machine lacks (a CUDA device) is skipped, and
            // says why in its name.
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let parsed = if path.extension().is_some_and(|extension| extension == "md") {
                transcript::parse_markdown(&text).transcript()
            } else {
                transcript::parse(&text)
            };
            match parsed.unmet_requirement() {
                Some(reason) => Trial::test(format!("{name} (skipped: {reason})"), || Ok(())).with_ignored_flag(true),
                None => Trial::test(name, move || check(&path)),
            }
        })
        .collect();
    libtest_mimic::run(&arguments, trials).exit();
}
