//! Finding the suite's inputs: shared by the test binaries that walk `tests/`, `docs/` and
//! `notebooks/` (`mod files;` in each).

use std::path::{Path, PathBuf};

/// The files under `directory` (its subfolders too when `recursive`) whose name ends in
/// `.extension`, appended to `found` in the order the file system lists them.
pub fn files(directory: &Path, extension: &str, recursive: bool, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(directory) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && recursive {
            files(&path, extension, recursive, found);
        } else if path.is_file() && path.extension().is_some_and(|found| found == extension) {
            found.push(path);
        }
    }
}
