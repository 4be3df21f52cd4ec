//! Tune: `(autotune …)` through the `quasi` binary — a 64-variant autotune after a 20-cell
//! session, timed from writing the cell until its last line is read back: the first run, the
//! same cell run again from the tuning cache, and (when `sinfo` finds a cluster) the same on
//! Slurm, with the fixed cost of a step (job start and session replay) apart from the cost per
//! variant.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::stats::ms;
use crate::{new_table, Options};

/// The generator: `a` unrolls a sum, `b` only tags the code (so each point is its own variant).
const GENERATOR: &str = r#"(rhai "fn gen_tune(a, b) {
  let i = gensym(\"i\"); let s = gensym(\"s\"); let body = [];
  for k in 0..a { body.push(quote(\"(set ,s (add ,s (load (ptradd p (add ,i ,k)))))\", #{ s: s, i: i, k: k })); }
  quote(`(define ((tsum int) (p (ptr int)) (n int))
           (declare ,i int) (declare ,s int)
           (for ((set ,i 0) (lt (add ,i ,l) n) (set ,i (add ,i ,a))) ,@body)
           (while (lt ,i n) (set ,s (add ,s (load (ptradd p ,i)))) (set ,i (add ,i 1)))
           (ret (add ,s (mul 0 ,b))))`, #{ i: i, s: s, l: a - 1, a: a, b: b, body: body })
}")"#;

/// The 20 cells before the autotune: the generator, data, a first definition and helpers.
fn session() -> Vec<String> {
    let mut cells = vec![
        GENERATOR.to_string(),
        "(declare data (ptr int))".to_string(),
        "(set data (alloc int 4096))".to_string(),
        "((declare k int) (for ((set k 0) (lt k 4096) (set k (add k 1))) (store (ptradd data k) k)))".to_string(),
        ",(gen_tune 1 0)".to_string(),
    ];
    cells.extend((0..15).map(|index| format!("(define ((helper{index} int) (x int)) (ret (add x {index})))")));
    cells
}

fn autotune(values: &str, on: &str) -> String {
    format!(
        "(autotune tsum (gen gen_tune a b) (params (a {values}) (b 1 2 3 4 5 6 7 8)) (run (call tsum data 4096)){on})"
    )
}

pub fn run(options: &Options) -> Result<()> {
    println!("== Tune: a 64-variant autotune after a 20-cell session, through `quasi` ==");
    let Some(quasi) = crate::startup::quasi_binary(options)? else {
        println!("(the `quasi` binary was not found next to quasi-bench: build it with `cargo build --release -p quasi-repl`; skipped)\n");
        return Ok(());
    };
    let all = "1 2 3 4 5 6 7 8";
    let mut table = new_table(&["measurement", "ms", "note"], &[1]);
    let cache = tempfile::tempdir()?;
    let first = cell_time(&quasi, cache.path(), &autotune(all, ""))?;
    let again = cell_time(&quasi, cache.path(), &autotune(all, ""))?;
    table.add_row(vec!["64 variants, first run (each compiled, checked, timed)".to_string(), ms(first), String::new()]);
    table.add_row(vec![
        "the same cell again, from the tuning cache".into(),
        ms(again),
        format!("{:.1}% of the first (goal ≤ 5%)", 100.0 * again.as_secs_f64() / first.as_secs_f64()),
    ]);
    match quasi_lang::tools::missing_slurm() {
        Some(reason) => {
            table.add_row(vec!["on Slurm".into(), "-".into(), format!("skipped: {reason}")]);
        }
        None => {
            let fresh = tempfile::tempdir()?;
            let slurm = cell_time(&quasi, fresh.path(), &autotune(all, " (on slurm)"))?;
            let (local_one, slurm_one) = {
                let (a, b) = (tempfile::tempdir()?, tempfile::tempdir()?);
                let one = "(autotune tsum (gen gen_tune a b) (params (a 2) (b 1)) (run (call tsum data 4096))";
                (
                    cell_time(&quasi, a.path(), &format!("{one})"))?,
                    cell_time(&quasi, b.path(), &format!("{one} (on slurm))"))?,
                )
            };
            let fixed = slurm_one.saturating_sub(local_one);
            let per_variant = (slurm.as_secs_f64() - first.as_secs_f64() - fixed.as_secs_f64()) / 63.0;
            table.add_row(vec![
                "64 variants on single-node Slurm, first run".into(),
                ms(slurm),
                format!("{:.2}× in process", slurm.as_secs_f64() / first.as_secs_f64()),
            ]);
            table.add_row(vec![
                "fixed cost of a step: 1 variant on Slurm − in process".into(),
                ms(fixed),
                "job start + replay of the 20 cells".into(),
            ]);
            table.add_row(vec![
                "added cost per further variant on Slurm".into(),
                format!("{:.1}", per_variant * 1e3),
                "goal ≤ 50 ms".into(),
            ]);
        }
    }
    table.add_row(vec![
        "64 variants compiled on 2 threads".to_string(),
        "-".into(),
        "not built (issue 34, item 2)".into(),
    ]);
    println!("{table}");
    println!("Each row: one `quasi` process fed the session, then the autotune cell, timed from writing it");
    println!("until its `autotuned:` line is read back. Every variant is benched for 0.2 s.\n");
    Ok(())
}

/// The time of the autotune cell `cell`, after the session, in a `quasi` whose tuning cache is
/// `cache`.
fn cell_time(quasi: &Path, cache: &Path, cell: &str) -> Result<Duration> {
    let mut child = Command::new(quasi)
        .env("QUASI_TUNE_CACHE", cache)
        .env("QUASI_SERVER", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", quasi.display()))?;
    let mut stdin = child.stdin.take().context("no stdin pipe")?;
    let mut reader = BufReader::new(child.stdout.take().context("no stdout pipe")?);
    let mut cells = session().join("\n");
    cells.push_str("\n(add 40 2)\n");
    stdin.write_all(cells.as_bytes())?;
    stdin.flush()?;
    read_until(&mut reader, |line| line == "42 : int")?;
    let start = Instant::now();
    stdin.write_all(format!("{cell}\n").as_bytes())?;
    stdin.flush()?;
    read_until(&mut reader, |line| line.contains("autotuned:"))?;
    let elapsed = start.elapsed();
    drop(stdin);
    child.wait()?;
    Ok(elapsed)
}

fn read_until(reader: &mut impl BufRead, done: impl Fn(&str) -> bool) -> Result<()> {
    let mut seen = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            bail!("quasi ended first; it printed:\n{seen}");
        }
        if done(line.trim_end()) {
            return Ok(());
        }
        seen.push_str(&line);
    }
}
