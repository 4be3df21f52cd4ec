//! The fuzzer's bounded run (`quasi-fuzz` runs for as long as asked): a fixed set of mutated
//! cells and twin programs, and every input that once failed, kept in `fuzz/regressions/`
//! (`NAME.cells`: cells that must not crash, hang or give an internal error; `NAME.cl` with its
//! `NAME.c`: a program whose output must equal C's at every `:opt` level). Cases run in child
//! processes (this binary again, as a worker), so a crash fails its trial, not the suite.

use std::path::{Path, PathBuf};
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};
use quasi_fuzz::mutate::Corpus;
use quasi_fuzz::{check_cells, check_regression, check_twin, find_clang, program, twin_levels, Failure, Settings};

/// The seed of the bounded run; changing it changes every case.
const SEED: u64 = 14;
/// Mutated cases (each mutates one to four cells, about 2.5 on average).
const MUTATED_CASES: u64 = 120;
/// Twin programs, each run at three `:opt` levels.
const TWINS: u64 = 50;

fn settings(name: &str, clang: Option<String>) -> Settings {
    Settings {
        cell_limit: Duration::from_secs(10),
        scratch: Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-{name}-{}", std::process::id())),
        clang,
    }
}

fn report(failures: Vec<Failure>, out: &Path) -> Result<(), Failed> {
    if failures.is_empty() {
        return Ok(());
    }
    let mut text = format!("{} failing cases (inputs saved in {}):\n", failures.len(), out.display());
    for (index, failure) in failures.iter().enumerate() {
        let path = failure.save(out, &format!("{}-{index}", failure.kind.name()));
        let saved = path.map(|path| path.display().to_string()).unwrap_or_else(|error| error.to_string());
        text.push_str(&format!("\n{}: {}\n{}\nsaved as {saved}\n", failure.kind.name(), failure.case, failure.detail));
    }
    Err(text.into())
}

fn mutated_cells() -> Result<(), Failed> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = Corpus::load(root, &root.join("../docs"));
    let settings = settings("cells", None);
    let failures: Vec<Failure> = (0..MUTATED_CASES)
        .filter_map(|case| {
            let mutated = corpus.case(SEED, case);
            check_cells(&mutated.cells, &format!("seed {SEED} case {case}: {}", mutated.origin), &settings).err()
        })
        .collect();
    let _ = std::fs::remove_dir_all(&settings.scratch);
    report(failures, &Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures"))
}

/// Cases aimed at the surfaces that once killed sessions (`quasi_fuzz::surfaces`).
const SURFACE_CASES: u64 = 16;

fn surfaces(clang: Option<String>) -> Result<(), Failed> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let settings = settings("surfaces", None);
    let folder = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-surfaces-{}", std::process::id()));
    let resources = quasi_fuzz::surfaces::Resources::build(root, clang.as_deref(), &folder);
    let failures: Vec<Failure> = (0..SURFACE_CASES)
        .filter_map(|case| {
            let (origin, cells) = quasi_fuzz::surfaces::case(SEED, case, &resources);
            check_cells(&cells, &format!("seed {SEED} surface case {case}: {origin}"), &settings).err()
        })
        .collect();
    let _ = std::fs::remove_dir_all(&settings.scratch);
    let _ = std::fs::remove_dir_all(&folder);
    report(failures, &Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures"))
}

fn twins(clang: String) -> Result<(), Failed> {
    let settings = settings("twins", Some(clang));
    let failures: Vec<Failure> = (0..TWINS)
        .filter_map(|case| {
            let twin = program::generate(SEED, case);
            check_twin(&twin, &format!("seed {SEED} case {case} (twin)"), &twin_levels(case), &settings).err()
        })
        .collect();
    let _ = std::fs::remove_dir_all(&settings.scratch);
    report(failures, &Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures"))
}

fn regression(path: &Path, clang: Option<String>) -> Result<(), Failed> {
    let is_twin = path.extension().is_some_and(|extension| extension == "cl");
    if is_twin && clang.is_none() {
        println!("{}: clang-19 is not installed, the C twin is not compared", path.display());
        return Ok(());
    }
    let settings = settings("regression", clang);
    let result = check_regression(path, &settings);
    let _ = std::fs::remove_dir_all(&settings.scratch);
    result
        .map(|_| ())
        .map_err(|failure| format!("{}: {}\n{}", failure.kind.name(), failure.case, failure.detail).into())
}

fn main() {
    quasi_fuzz::worker_if_asked();
    let arguments = Arguments::from_args();
    let clang = find_clang();
    let mut trials = vec![Trial::test("fuzz/mutated-cells", mutated_cells)];
    let for_surfaces = clang.clone();
    trials.push(Trial::test("fuzz/surfaces", move || surfaces(for_surfaces)));
    match clang.clone() {
        Some(clang) => trials.push(Trial::test("fuzz/twin-programs", move || twins(clang))),
        None => {
            println!("fuzz/twin-programs: clang-19 is not installed, twin programs are skipped");
            trials.push(Trial::test("fuzz/twin-programs", || Ok(())).with_ignored_flag(true));
        }
    }
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&directory)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|extension| extension == "cells" || extension == "cl"))
                .collect()
        })
        .unwrap_or_default();
    inputs.sort();
    for input in inputs {
        let name = format!("fuzz/regressions/{}", input.file_name().and_then(|name| name.to_str()).unwrap_or("?"));
        let clang = clang.clone();
        trials.push(Trial::test(name, move || regression(&input, clang)));
    }
    libtest_mimic::run(&arguments, trials).exit();
}
