//! `quasi-bench`: cell latency, REPL start-up and generated code against clang, as tables.
//!
//! Harness-less on purpose: a run prints measurements side by side and never asserts a time
//! (machines differ; ratios taken in one run are what compares). Sections:
//! `quasi-bench [latency] [startup] [kernels] [wrap] [staging] [session] [sim] [async] [ffi] [tune] [gemm] [--iterations N] [--runs N] [--reps N] [--placements N] [--quick]`.

mod asynchronous;
mod ffi;
mod gemm;
mod kernels;
mod latency;
mod session;
mod sim;
mod staging;
mod startup;
mod stats;
mod tune;
mod wrap;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use comfy_table::{presets, CellAlignment, Table};

/// What to run and how much.
#[derive(Clone, Debug)]
pub struct Options {
    pub latency: bool,
    pub startup: bool,
    pub kernels: bool,
    pub wrap: bool,
    pub staging: bool,
    pub session: bool,
    pub sim: bool,
    pub asynchronous: bool,
    pub ffi: bool,
    pub tune: bool,
    pub gemm: bool,
    /// `--quick`: also smaller sizes where a section has them (gemm: n ≤ 1000).
    pub quick: bool,
    /// Timed iterations per latency row (after warm-up).
    pub iterations: usize,
    /// Untimed iterations before each latency row.
    pub warmup: usize,
    /// Spawns of `quasi` and in-process session starts.
    pub runs: usize,
    /// Timed repetitions per kernel and language.
    pub reps: usize,
    /// Kernel bench: times everything is loaded anew (new code addresses on both sides).
    pub placements: usize,
    /// The `quasi` binary (start-up); by default the one next to this binary.
    pub quasi: Option<PathBuf>,
    /// The C compiler for the reference kernels.
    pub clang: String,
}

const USAGE: &str = "usage: quasi-bench [latency] [startup] [kernels] [wrap] [staging] [session] [sim] [async] [ffi] [tune] [gemm] [--iterations N] [--warmup N] [--runs N] [--reps N] [--placements N] [--quick] [--quasi PATH] [--clang PATH]

  latency   read->run wall time of Session::eval for small cells at :opt 0..3, with phases
  startup   spawning the release `quasi` until the first value is read back; Session::new
  kernels   eight compute kernels in C-Lisp (:opt 3 and the default level) against clang -O3 -march=native
  wrap      what C-Lisp's wrapping int costs quicksort's data-dependent scans: C forms, exact and not
  staging   expansion share of a 64-way unrolled macro cell; MetaOCaml vector-add variants;
            the cost of collecting phase times
  session   a long session: memory retained per definition and per expression cell after
            10,000 of each, p50 near cell 100 against cell 10,000, a cell of 8,000 forms
  sim       the GPU simulator (:gpu sim), checked and unchecked: vector add and the staged SGEMM
            against compiled C-Lisp on the CPU, and Numba's CUDA simulator when
            QUASI_NUMBA_PYTHON names a Python with numba (QUASI_NUMBA_BUDGET: its seconds, 150)
  async     asynchronous device work in the simulator: encode-call + submit + await against launch,
            two submissions and a host loop beside a submission against each alone, interrupts
  ffi       (include …) of C headers, first and cached, against clang -fsyntax-only; load-library
  tune      autotune through `quasi`: 64 variants, first run and from the tuning cache, and on Slurm
            when sinfo finds a cluster (job start + replay apart from the cost per variant)
  gemm      the prelude's staged GEMM, autotuned, against OpenBLAS (its fastest core type here),
            BLIS, clang -O3 of the same structure and llama.lisp's MMult kernels, n = 256…2048
Without a section name, all eleven run (start-up first, so its first Session::new is cold).
--quick  fewer iterations (50), runs (5), repetitions (3) and placements (2), for a first look.
--placements N  kernels: times everything is loaded anew at new addresses (3); ratios are judged on the median.";

/// The C compiler of the reference builds unless `--clang` names one: `CLANG`, or clang-19.
pub fn default_clang() -> String {
    std::env::var("CLANG").unwrap_or_else(|_| "clang-19".to_string())
}

fn parse_options() -> Result<Options> {
    let mut options = Options {
        latency: false,
        startup: false,
        kernels: false,
        wrap: false,
        staging: false,
        session: false,
        sim: false,
        asynchronous: false,
        ffi: false,
        tune: false,
        gemm: false,
        quick: false,
        iterations: 200,
        warmup: 20,
        runs: 25,
        reps: 7,
        placements: 3,
        quasi: std::env::var_os("QUASI_BIN").map(PathBuf::from),
        clang: default_clang(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<usize> {
            let value = args.next().with_context(|| format!("{name} needs a number"))?;
            value
                .parse::<usize>()
                .ok()
                .filter(|count| *count > 0)
                .with_context(|| format!("{name} needs a positive number, found `{value}`"))
        };
        match arg.as_str() {
            "latency" => options.latency = true,
            "startup" => options.startup = true,
            "kernels" => options.kernels = true,
            "wrap" => options.wrap = true,
            "staging" => options.staging = true,
            "session" => options.session = true,
            "sim" => options.sim = true,
            "async" => options.asynchronous = true,
            "ffi" => options.ffi = true,
            "tune" => options.tune = true,
            "gemm" => options.gemm = true,
            "--iterations" => options.iterations = number("--iterations")?,
            "--warmup" => options.warmup = number("--warmup")?,
            "--runs" => options.runs = number("--runs")?,
            "--reps" => options.reps = number("--reps")?,
            "--placements" => options.placements = number("--placements")?,
            "--quick" => {
                options.quick = true;
                options.iterations = 50;
                options.warmup = 5;
                options.runs = 5;
                options.reps = 3;
                options.placements = 2;
            }
            "--quasi" => options.quasi = Some(PathBuf::from(args.next().context("--quasi needs a path")?)),
            "--clang" => options.clang = args.next().context("--clang needs a path")?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    if !(options.latency
        || options.startup
        || options.kernels
        || options.wrap
        || options.staging
        || options.session
        || options.sim
        || options.asynchronous
        || options.ffi
        || options.tune
        || options.gemm)
    {
        (
            options.latency,
            options.startup,
            options.kernels,
            options.wrap,
            options.staging,
            options.session,
            options.sim,
            options.asynchronous,
            options.ffi,
            options.tune,
            options.gemm,
        ) = (true, true, true, true, true, true, true, true, true, true, true);
    }
    Ok(options)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "gemm-probe" {
        return gemm::probe(&args[2]);
    }
    let options = parse_options()?;
    print_machine(&options);
    // Start-up goes first: its "first Session::new in this process" is only cold then.
    if options.startup {
        startup::run(&options)?;
    }
    if options.latency {
        latency::run(&options)?;
    }
    if options.kernels {
        kernels::run(&options)?;
    }
    if options.wrap {
        wrap::run(&options)?;
    }
    if options.staging {
        staging::run(&options)?;
    }
    if options.session {
        session::run(&options)?;
    }
    if options.sim {
        sim::run(&options)?;
    }
    if options.asynchronous {
        asynchronous::run(&options)?;
    }
    if options.ffi {
        ffi::run(&options)?;
    }
    if options.tune {
        tune::run(&options)?;
    }
    if options.gemm {
        gemm::run(&options)?;
    }
    println!("load average at the end: {}", load_average());
    Ok(())
}

/// The machine, so that numbers are never read without it.
fn print_machine(options: &Options) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find_map(|line| {
        line.strip_prefix("model name").and_then(|rest| rest.split_once(':')).map(|(_, model)| model.trim().to_string())
    });
    let logical = cpuinfo.lines().filter(|line| line.starts_with("processor")).count();
    let usable = std::thread::available_parallelism().map_or(0, |count| count.get());
    let flags = cpuinfo
        .lines()
        .find_map(|line| {
            line.strip_prefix("flags").and_then(|rest| rest.split_once(':')).map(|(_, flags)| flags.to_string())
        })
        .unwrap_or_default();
    let vector = ["avx512f", "avx2", "avx", "sse4_2"]
        .into_iter()
        .find(|flag| flags.split_whitespace().any(|present| present == *flag))
        .unwrap_or("none found");
    let memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
        text.lines().next().map(|line| {
            line.split_whitespace()
                .nth(1)
                .and_then(|kib| kib.parse::<u64>().ok())
                .map_or("?".to_string(), |kib| format!("{:.1} GiB", kib as f64 / 1048576.0))
        })
    });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    println!("quasi-bench: machine");
    let mut table = new_table(&["property", "value"], &[]);
    table.add_row(vec!["CPU".to_string(), model.unwrap_or_else(|| "unknown (no model name in /proc/cpuinfo)".into())]);
    table.add_row(vec![
        "cores".to_string(),
        format!("{logical} logical in /proc/cpuinfo, {usable} usable by this process"),
    ]);
    table.add_row(vec!["widest vector extension".to_string(), vector.to_string()]);
    table.add_row(vec![
        "C compiler".to_string(),
        clang_version(&options.clang).unwrap_or_else(|| format!("{} not found", options.clang)),
    ]);
    table.add_row(vec![
        "clang -march=native CPU".to_string(),
        clang_native_cpu(&options.clang).unwrap_or_else(|| "?".into()),
    ]);
    table.add_row(vec!["memory".to_string(), memory.unwrap_or_else(|| "?".into())]);
    table.add_row(vec!["Linux".to_string(), kernel]);
    table.add_row(vec!["load average at the start".to_string(), load_average()]);
    println!("{table}\n");
}

/// The first line of `clang --version`.
fn clang_version(clang: &str) -> Option<String> {
    let output = Command::new(clang).arg("--version").output().ok()?;
    String::from_utf8_lossy(&output.stdout).lines().next().map(str::to_string)
}

/// The CPU `-march=native` resolves to, as the driver passes it to cc1 (`-target-cpu`).
fn clang_native_cpu(clang: &str) -> Option<String> {
    let output = Command::new(clang)
        .args(["-march=native", "-###", "-x", "c", "-c", "/dev/null", "-o", "/dev/null"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stderr);
    let after = text.split("\"-target-cpu\" \"").nth(1)?;
    Some(after.split('"').next()?.to_string())
}

/// Fails with the cell's rendered diagnostics when its outcome failed.
pub fn check(outcome: &quasi_lang::Outcome, cell: &str) -> Result<()> {
    if outcome.failed() {
        bail!("the cell `{cell}` failed:\n{}", quasi_repl::render(outcome, quasi_repl::Style::Plain));
    }
    Ok(())
}

/// Evaluates a cell that must succeed.
pub fn eval(session: &mut quasi_lang::Session, cell: &str) -> Result<quasi_lang::Outcome> {
    let outcome = session.eval(cell);
    check(&outcome, cell)?;
    Ok(outcome)
}

/// The median of a cell's `(bench …)` report.
pub fn bench_median(session: &mut quasi_lang::Session, cell: &str) -> Result<std::time::Duration> {
    let outcome = eval(session, cell)?;
    outcome
        .items
        .iter()
        .find_map(|item| match item {
            quasi_lang::Item::Bench(report) => Some(report.median),
            _ => None,
        })
        .with_context(|| format!("`{cell}` printed no bench report"))
}

/// The first value a cell printed.
pub fn value_of(outcome: &quasi_lang::Outcome) -> Result<String> {
    outcome
        .items
        .iter()
        .find_map(|item| match item {
            quasi_lang::Item::Value { text, .. } => Some(text.clone()),
            _ => None,
        })
        .context("the cell printed no value")
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews every number here.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A session capturing output in the simulator (`check`: `:gpu sim`, or unchecked), after the
/// bench's `setup` cells.
pub fn sim_session(check: bool, setup: &[&str]) -> Result<quasi_lang::Session> {
    let mut session = quasi_lang::Session::new(quasi_lang::SessionConfig {
        capture_output: true,
        gpu: Some(quasi_lang::GpuMode::Sim { check }),
        ..quasi_lang::SessionConfig::default()
    })?;
    for cell in setup {
        eval(&mut session, cell)?;
    }
    Ok(session)
}

/// A table in Markdown layout (pasteable into the README), the given columns right-aligned.
pub fn new_table(header: &[&str], right_aligned: &[usize]) -> Table {
    let mut table = Table::new();
    table.load_style(presets::ASCII_MARKDOWN).set_header(header.to_vec());
    for index in right_aligned {
        if let Some(column) = table.column_mut(*index) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}
