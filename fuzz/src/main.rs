//! `quasi-fuzz`: runs mutated cells and twin programs for as long as asked, prints a table of
//! cases by kind and failures, and writes every failing input into a folder.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quasi_fuzz::mutate::Corpus;
use quasi_fuzz::{check_cells, check_twin, find_clang, program, twin_levels, Failure, Passed, Settings};

const USAGE: &str =
    "usage: quasi-fuzz [--seconds N | --cases N] [--seed S] [--out DIR] [--cell-limit-ms N] [--twins-every N]
       quasi-fuzz [--cell-limit-ms N] --check FILE...   (runs saved inputs again)

  --seconds N       run for N seconds (default 60)
  --cases N         run N cases instead (mutated and twin cases together)
  --seed S          the run's seed (default: from the clock); case K of seed S is always the same
  --out DIR         where failing inputs go (default fuzz-failures)
  --cell-limit-ms N the longest one cell may take (default 5000)
  --twins-every N   one twin program every N cases (default 3; 1: only twins, 0: none)
Twins need clang-19 (or $QUASI_FUZZ_CLANG); without it only mutated cells run.";

struct Options {
    seconds: Option<u64>,
    cases: Option<u64>,
    seed: u64,
    out: PathBuf,
    cell_limit: Duration,
    twins_every: u64,
    /// Saved inputs to run again instead of fuzzing.
    check: Vec<PathBuf>,
}

fn parse_options() -> Result<Options> {
    let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs());
    let mut options = Options {
        seconds: None,
        cases: None,
        seed: clock,
        out: PathBuf::from("fuzz-failures"),
        cell_limit: Duration::from_millis(5000),
        twins_every: 3,
        check: Vec::new(),
    };
    let mut arguments = std::env::args().skip(1);
    while let Some(argument) = arguments.next() {
        let mut value = || arguments.next().with_context(|| format!("{argument} needs a value\n{USAGE}"));
        match argument.as_str() {
            "--seconds" => options.seconds = Some(value()?.parse()?),
            "--cases" => options.cases = Some(value()?.parse()?),
            "--seed" => options.seed = value()?.parse()?,
            "--out" => options.out = PathBuf::from(value()?),
            "--cell-limit-ms" => options.cell_limit = Duration::from_millis(value()?.parse()?),
            "--twins-every" => options.twins_every = value()?.parse()?,
            "--check" => options.check.extend(arguments.by_ref().map(PathBuf::from)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(options)
}

/// Counts by kind of case.
#[derive(Default)]
struct Tally {
    mutated_cases: u64,
    mutated_cells: u64,
    runaways: u64,
    twins: u64,
    twin_runs: u64,
    failures: Vec<Failure>,
}

fn main() -> Result<()> {
    quasi_fuzz::worker_if_asked();
    let options = parse_options()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let corpus = Corpus::load(&root.join("tests"), &root.join("docs"));
    let clang = find_clang();
    let scratch = std::env::temp_dir().join(format!("quasi-fuzz-{}", std::process::id()));
    let settings = Settings { cell_limit: options.cell_limit, scratch: scratch.clone(), clang: clang.clone() };
    if !options.check.is_empty() {
        return check_saved(&options.check, &settings);
    }
    let twins_every = if clang.is_none() {
        println!("clang-19 not found: twin programs are skipped, only mutated cells run");
        0
    } else {
        options.twins_every
    };
    println!(
        "quasi-fuzz: seed {}, {} seeds of cells, {}",
        options.seed,
        corpus.seeds.len(),
        match (options.cases, options.seconds) {
            (Some(cases), _) => format!("{cases} cases"),
            (None, seconds) => format!("{} s", seconds.unwrap_or(60)),
        }
    );
    // Every seventh case that is not a twin aims at the surfaces that once killed sessions.
    let resources =
        quasi_fuzz::surfaces::Resources::build(&root.join("tests"), clang.as_deref(), &scratch.join("surfaces"));
    let started = Instant::now();
    let deadline = Duration::from_secs(options.seconds.unwrap_or(60));
    let mut tally = Tally::default();
    let mut last_progress = Instant::now();
    for case in 0.. {
        let done = match options.cases {
            Some(cases) => case >= cases,
            None => started.elapsed() >= deadline,
        };
        if done {
            break;
        }
        let is_twin = twins_every > 0 && case % twins_every == twins_every - 1;
        let result = if is_twin {
            let twin = program::generate(options.seed, case);
            let levels = twin_levels(case);
            tally.twins += 1;
            tally.twin_runs += levels.len() as u64;
            check_twin(&twin, &format!("seed {} case {case} (twin)", options.seed), &levels, &settings)
                .map(|()| Passed::Finished)
        } else if case % 7 == 6 {
            let (origin, cells) = quasi_fuzz::surfaces::case(options.seed, case, &resources);
            tally.mutated_cases += 1;
            check_cells(&cells, &format!("seed {} surface case {case}: {origin}", options.seed), &settings)
        } else {
            let mutated = corpus.case(options.seed, case);
            tally.mutated_cases += 1;
            tally.mutated_cells += mutated.mutated as u64;
            check_cells(&mutated.cells, &format!("seed {} case {case}: {}", options.seed, mutated.origin), &settings)
        };
        match result {
            Ok(Passed::Finished) => {}
            Ok(Passed::Runaway) => tally.runaways += 1,
            Err(failure) => {
                let stem = format!("{}-{}-{case}", failure.kind.name(), options.seed);
                let path = failure.save(&options.out, &stem)?;
                println!(
                    "FAILED {}: {}\n  {}\n  saved as {}",
                    failure.kind.name(),
                    failure.case,
                    first_lines(&failure.detail),
                    path.display()
                );
                tally.failures.push(failure);
            }
        }
        if last_progress.elapsed() > Duration::from_secs(30) {
            last_progress = Instant::now();
            println!(
                "  {:>5.0} s: {} cases, {} failures",
                started.elapsed().as_secs_f64(),
                tally.mutated_cases + tally.twins,
                tally.failures.len()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    print_table(&tally, started.elapsed());
    if !tally.failures.is_empty() {
        println!("failing inputs are in {}", options.out.display());
        std::process::exit(1);
    }
    Ok(())
}

/// Runs saved inputs again and says how each ended.
fn check_saved(paths: &[PathBuf], settings: &Settings) -> Result<()> {
    let mut failed = 0;
    for path in paths {
        match quasi_fuzz::check_regression(path, settings) {
            Ok(Passed::Finished) => println!("{}: passed", path.display()),
            Ok(Passed::Runaway) => println!("{}: passed (compiled code ran past the limit)", path.display()),
            Err(failure) => {
                failed += 1;
                println!("{}: FAILED {}\n{}", path.display(), failure.kind.name(), failure.detail);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&settings.scratch);
    if failed > 0 {
        bail!("{failed} of {} inputs failed", paths.len());
    }
    Ok(())
}

fn first_lines(text: &str) -> String {
    text.lines().take(6).collect::<Vec<_>>().join("\n  ")
}

fn print_table(tally: &Tally, elapsed: Duration) {
    let failures =
        |kinds: &[&str]| tally.failures.iter().filter(|failure| kinds.contains(&failure.kind.name())).count();
    println!("\n{:<16} {:>8} {:>8} {:>9} {:>9}", "kind", "cases", "cells", "runaways", "failures");
    println!(
        "{:<16} {:>8} {:>8} {:>9} {:>9}",
        "mutated cells",
        tally.mutated_cases,
        tally.mutated_cells,
        tally.runaways,
        tally.failures.iter().filter(|failure| matches!(failure.input, quasi_fuzz::Input::Cells(_))).count()
    );
    println!(
        "{:<16} {:>8} {:>8} {:>9} {:>9}",
        "twin programs",
        tally.twins,
        tally.twin_runs,
        "-",
        tally.failures.iter().filter(|failure| matches!(failure.input, quasi_fuzz::Input::Twin(_))).count()
    );
    println!(
        "failures by kind: crash {}, hang {}, internal {}, rejected {}, mismatch {}, generator {}",
        failures(&["crash"]),
        failures(&["hang"]),
        failures(&["internal"]),
        failures(&["rejected"]),
        failures(&["mismatch"]),
        failures(&["generator"])
    );
    println!("{:.0} s in all", elapsed.as_secs_f64());
}
