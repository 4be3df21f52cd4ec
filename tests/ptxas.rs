//! NVIDIA's PTX assembler on every kernel the project shows: each transcript under `tests/`,
//! each `docs/*.md` document and each notebook runs cell by cell in a fresh session (as
//! `transcripts.rs` runs them), and after every cell every kernel the session has, in its
//! current version, is assembled with `ptxas -arch=sm_90 -v`; so are the prelude's generators
//! at the configurations below. Any ptxas error fails, and so does a spill in a prelude SGEMM.
//! A table of kernel → registers, spills and shared memory is printed.
//!
//! A second test checks `:ptx`'s last line against what ptxas reports.
//!
//! ptxas is found as `:ptx` finds it (`quasi_lang::tools::ptxas::find`); scripts/test.sh points
//! `QUASI_PTXAS` at the pip package in `.venv-test` and sets `QUASI_REQUIRE_PTXAS=1`, so there
//! a missing ptxas fails. A plain `cargo test` without one skips, saying why.

mod files;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use libtest_mimic::{Arguments, Failed, Trial};
use quasi_lang::tools::ptxas::{self, Resources};
use quasi_lang::{Item, Session};
use quasi_repl::{notebook, transcript};

/// The prelude's `sgemm` at these arguments after the name (bm bn bk tm tn); none may spill.
const SGEMM: &[&str] = &[
    "16 16 2 4 4",
    "64 64 8 4 4",
    "64 64 8 8 8",
    "128 128 8 8 8",
    "128 128 16 8 8",
    "128 64 8 8 8",
    "128 64 8 8 4",
    "64 128 8 4 8",
];

/// The prelude's `reduce` at these block sizes.
const REDUCE: &[&str] = &["128", "256"];

/// The target every kernel is assembled for.
const ARCH: &str = "sm_90";

/// Sessions capture file descriptor 1 and transcripts run from their own folder: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The cells of one source, run in order in one session from `folder`.
struct Source {
    label: String,
    folder: PathBuf,
    setup: Vec<String>,
    cells: Vec<String>,
    /// Spills fail (the prelude's SGEMM).
    no_spills: bool,
}

fn root() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

/// Every transcript, document and notebook, then the prelude's generators.
fn sources() -> Result<Vec<Source>, String> {
    let root = root();
    let mut paths = Vec::new();
    files::files(&root.join("tests"), "repl", true, &mut paths);
    files::files(&root.join("docs"), "md", false, &mut paths);
    files::files(&root.join("notebooks"), "ipynb", false, &mut paths);
    paths.sort();
    let mut sources = Vec::new();
    for path in paths {
        let text =
            std::fs::read_to_string(&path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        let label = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
        let folder = path.parent().unwrap_or(&root).to_path_buf();
        let (setup, cells) = match path.extension().and_then(|extension| extension.to_str()) {
            Some("ipynb") => {
                let cells = notebook::read_notebook(&text).map_err(|error| format!("{label}: {error}"))?;
                (Vec::new(), cells.into_iter().map(|cell| cell.source).collect())
            }
            extension => {
                let parsed = match extension {
                    Some("md") => transcript::parse_markdown(&text).transcript(),
                    _ => transcript::parse(&text),
                };
                let setup = parsed.setup_commands().into_iter().map(str::to_string).collect();
                (setup, parsed.cells.into_iter().map(|cell| cell.input).collect())
            }
        };
        sources.push(Source { label, folder, setup, cells, no_spills: false });
    }
    let generated = |generator: &str, arguments: &str| {
        let name = format!("{generator}-{}", arguments.replace(' ', "-"));
        Source {
            label: format!("prelude/gpu.rhai {generator} {arguments}"),
            folder: root.clone(),
            setup: Vec::new(),
            cells: vec![format!(",@({generator} {name} {arguments})")],
            no_spills: generator == "sgemm",
        }
    };
    sources.extend(SGEMM.iter().map(|arguments| generated("sgemm", arguments)));
    sources.extend(REDUCE.iter().map(|arguments| generated("reduce", arguments)));
    Ok(sources)
}

/// One distinct PTX module: where it was first seen, in how many sources it was, and whether a
/// spill in it fails.
struct Kernel {
    label: String,
    name: String,
    sources: BTreeSet<String>,
    no_spills: bool,
}

/// Every distinct PTX module, and the kernels Quasi itself refused to build (by source and name).
#[derive(Default)]
struct Collected {
    kernels: BTreeMap<String, Kernel>,
    refused: BTreeSet<String>,
}

/// Runs a source's cells, collecting every version of every kernel's PTX; a generator that
/// does not give a kernel is an error.
fn collect(source: &Source, collected: &mut Collected) -> Result<(), String> {
    let mut session = transcript::new_session()?;
    let back = std::env::current_dir().map_err(|error| error.to_string())?;
    std::env::set_current_dir(&source.folder)
        .map_err(|error| format!("cannot enter {}: {error}", source.folder.display()))?;
    let mut failure = None;
    for command in &source.setup {
        session.eval(command);
    }
    for cell in &source.cells {
        let outcome = session.eval(cell);
        if source.no_spills
            && (outcome.failed() || !outcome.items.iter().any(|item| matches!(item, Item::Defined { .. })))
        {
            failure = Some(format!("{}: `{cell}` defined no kernel:\n{}", source.label, transcript::output(&outcome)));
        }
        note(&mut session, source, collected);
    }
    std::env::set_current_dir(back).map_err(|error| error.to_string())?;
    failure.map_or(Ok(()), Err)
}

fn note(session: &mut Session, source: &Source, collected: &mut Collected) {
    for (name, ptx) in session.kernels_ptx() {
        // Kernels Quasi itself refuses (the transcripts' error cases) have no PTX to assemble.
        let Ok(ptx) = ptx else {
            collected.refused.insert(format!("{} `{name}`", source.label));
            continue;
        };
        let kernel = collected.kernels.entry(ptx).or_insert_with(|| Kernel {
            label: source.label.clone(),
            name: name.clone(),
            sources: BTreeSet::new(),
            no_spills: false,
        });
        kernel.sources.insert(source.label.clone());
        kernel.no_spills |= source.no_spills;
    }
}

/// The ptxas to use, or why the test is skipped (an error when `QUASI_REQUIRE_PTXAS` is set).
fn ptxas_or_skip() -> Result<Option<PathBuf>, Failed> {
    if let Some(path) = ptxas::find() {
        return Ok(Some(path));
    }
    let why = format!("no ptxas found ({})", ptxas::HOW_TO_GET_PTXAS);
    if std::env::var_os("QUASI_REQUIRE_PTXAS").is_some_and(|value| !value.is_empty() && value != "0") {
        return Err(format!("{why}; QUASI_REQUIRE_PTXAS is set, so this fails").into());
    }
    println!("skipped: {why}; scripts/test.sh installs it into .venv-test");
    Ok(None)
}

fn every_kernel_assembles() -> Result<(), Failed> {
    let Some(ptxas) = ptxas_or_skip()? else { return Ok(()) };
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut collected = Collected::default();
    let mut failures = Vec::new();
    let sources = sources()?;
    for source in &sources {
        if let Err(error) = collect(source, &mut collected) {
            failures.push(error);
        }
    }
    let mut rows: Vec<(String, usize, Result<Resources, String>, bool)> = collected
        .kernels
        .iter()
        .map(|(ptx, kernel)| {
            let label = format!("{} `{}`", kernel.label, kernel.name);
            (label, kernel.sources.len(), ptxas::assemble(&ptxas, ptx, ARCH, &kernel.name), kernel.no_spills)
        })
        .collect();
    rows.sort_by(|left, right| left.0.cmp(&right.0));
    let width = rows.iter().map(|row| row.0.chars().count()).max().unwrap_or(0);
    println!(
        "ptxas -arch={ARCH} ({}): {} distinct kernels from {} sources; {} kernels Quasi refuses (error cases) skipped",
        ptxas.display(),
        rows.len(),
        sources.len(),
        collected.refused.len()
    );
    println!(
        "{:<width$}  {:>7}  {:>4}  {:>11}  {:>10}  {:>6}",
        "kernel (where first seen)", "sources", "regs", "spill st/ld", "smem bytes", "stack"
    );
    for (label, seen, result, no_spills) in &rows {
        match result {
            Ok(resources) => {
                let spills = format!("{}/{}", resources.spill_stores, resources.spill_loads);
                println!(
                    "{label:<width$}  {seen:>7}  {:>4}  {spills:>11}  {:>10}  {:>6}",
                    resources.registers, resources.shared_bytes, resources.stack_bytes
                );
                if *no_spills && resources.spills() {
                    failures.push(format!("{label} spills ({spills} bytes stored/loaded)"));
                }
            }
            Err(error) => {
                println!("{label:<width$}  {seen:>7}  ptxas error");
                failures.push(format!("ptxas rejects {label}:\n{error}"));
            }
        }
    }
    for required in SGEMM.iter().map(|arguments| format!("sgemm {arguments} `")) {
        if !rows.iter().any(|(label, ..)| label.contains(&required)) {
            failures.push(format!("no PTX was collected for the prelude's {}", required.trim_end_matches(" `")));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n").into())
    }
}

/// `:ptx`'s last line for `name` after `cells`.
fn ptx_line(cells: &[&str], name: &str) -> Result<String, String> {
    let mut session = transcript::new_session()?;
    for cell in cells {
        let outcome = session.eval(cell);
        if outcome.failed() {
            return Err(format!("`{cell}` failed:\n{}", transcript::output(&outcome)));
        }
    }
    let outcome = session.eval(&format!(":ptx {name}"));
    match outcome.items.as_slice() {
        [Item::Listing { .. }, Item::Message(line)] => Ok(line.clone()),
        _ => Err(format!("`:ptx {name}` gave:\n{}", transcript::output(&outcome))),
    }
}

/// The number before `word` in `line`.
fn number(line: &str, word: &str) -> Option<u64> {
    line.split(word).next()?.split_whitespace().last()?.parse().ok()
}

fn the_ptx_line_reports_ptxas() -> Result<(), Failed> {
    if ptxas_or_skip()?.is_none() {
        return Ok(());
    }
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // A store: a few registers, nothing shared, full occupancy at any block size.
    let line = ptx_line(&["(define-kernel ((ones void) (p (ptr float))) (store p 1.0))"], "ones")?;
    let registers = number(&line, " registers").ok_or_else(|| format!("no register count in `{line}`"))?;
    let expected = format!(
        "ptxas sm_90: {registers} registers, 0 bytes spill stores, 0 bytes spill loads, 0 bytes smem; \
         occupancy 100% at 128, 100% at 256, 100% at 512, 100% at 1024 threads"
    );
    if line != expected || !(1..=32).contains(&registers) {
        return Err(format!("`:ptx ones` ends with\n  {line}\nnot\n  {expected}").into());
    }
    // 32 KiB of shared memory and a launch of 128 threads: 6 blocks fit in 228 KiB (each
    // block also takes the runtime's 1 KiB), 24 of 64 warps.
    let shared = [
        "(define-shared big (8192 float))",
        "(define-kernel ((fill void) (p (ptr float)))
           (store (aptradd big (tid.x)) 1.0) (syncthreads) (store p (load (aptradd big 5))))",
        "(define ((go void) (p (ptr float (addrspace 1)))) (launch fill (grid 1) (block 128) p))",
    ];
    let line = ptx_line(&shared, "fill")?;
    let wanted = ["0 bytes spill stores", "32768 bytes smem", "occupancy 37% (24/64 warps, bound by shared memory)"];
    if !line.starts_with("ptxas sm_90: ")
        || !wanted.iter().all(|part| line.contains(part))
        || !line.ends_with("at 128 threads (the last launch)")
    {
        return Err(
            format!("`:ptx fill` ends with\n  {line}\nmissing one of {wanted:?} or the launch's 128 threads").into()
        );
    }
    // The target follows `:gpu-arch`; occupancy stays sm_90's.
    let line = ptx_line(&[":gpu-arch sm_80", "(define-kernel ((ones void) (p (ptr float))) (store p 1.0))"], "ones")?;
    if !line.starts_with("ptxas sm_80: ") || !line.ends_with("(by sm_90's limits)") {
        return Err(format!("`:ptx ones` for sm_80 ends with\n  {line}").into());
    }
    Ok(())
}

fn main() {
    let mut arguments = Arguments::from_args();
    arguments.test_threads = Some(1);
    let trials = vec![
        Trial::test("the_ptx_line_reports_ptxas", the_ptx_line_reports_ptxas),
        Trial::test("every_kernel_assembles", every_kernel_assembles),
    ];
    libtest_mimic::run(&arguments, trials).exit();
}
