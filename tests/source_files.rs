//! The workspace's own source files keep to the project's habit (ARCHITECTURE.md, layering): a
//! file grows past 1,000 lines only with a reason at its top — a `//!` line of its module documentation
//! that starts `Long because` and says why the file is not split.

mod files;

use std::path::{Path, PathBuf};

/// The most lines a source file has without a reason.
const LIMIT: usize = 1000;

/// The marker that starts the reason, in the file's module documentation.
const REASON: &str = "//! Long because";

/// Why `text` breaks the rule, if it does: its line count, past the limit, with no reason at
/// its top (the `//!` lines it starts with, blank lines and attributes among them).
fn problem(text: &str) -> Option<usize> {
    let lines = text.lines().count();
    if lines <= LIMIT {
        return None;
    }
    let documented = text
        .lines()
        .take_while(|line| line.starts_with("//!") || line.trim().is_empty() || line.starts_with("#!["))
        .any(|line| line.starts_with(REASON));
    (!documented).then_some(lines)
}

#[test]
fn the_rule_sees_a_long_file_and_its_reason() {
    let long = "fn f() {}\n".repeat(LIMIT + 1);
    assert_eq!(problem(&long), Some(LIMIT + 1));
    assert_eq!(problem(&format!("//! What it owns.\n//!\n{REASON} one table of 900 entries.\n\n{long}")), None);
    // A reason further down is no reason at its top.
    assert_eq!(problem(&format!("//! What it owns.\n{long}{REASON} late.\n")), Some(LIMIT + 3));
    assert_eq!(problem(&"x\n".repeat(LIMIT)), None);
}

#[test]
fn no_source_file_is_over_1000_lines_without_a_reason_at_its_top() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf();
    let mut sources: Vec<PathBuf> = Vec::new();
    for crate_folder in ["lang", "repl", "jupyter-kernel", "benches", "fuzz", "prelude", "tests"] {
        files::files(&root.join(crate_folder), "rs", true, &mut sources);
    }
    sources.retain(|path| !path.components().any(|part| part.as_os_str() == "target"));
    assert!(sources.len() > 100, "found only {} source files under {}", sources.len(), root.display());
    let mut problems: Vec<String> = sources
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            problem(&text)
                .map(|lines| format!("{} has {lines} lines", path.strip_prefix(&root).unwrap_or(path).display()))
        })
        .collect();
    problems.sort();
    assert!(
        problems.is_empty(),
        "source files over {LIMIT} lines without a `{REASON} …` line in their module documentation:\n{}",
        problems.join("\n")
    );
}
