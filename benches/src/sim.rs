//! The GPU simulator (`:gpu sim`): vector add, the prelude's staged SGEMM and its two sums (a
//! tree in shared memory, warp shuffles) run on the CPU, checked and unchecked, against the same work done by compiled C-Lisp on the CPU, and against
//! Numba's CUDA simulator when a Python with numba is given (`QUASI_NUMBA_PYTHON`).
//!
//! Everything goes through one `Session`, as a user's cells would: a launch's time is its
//! `kernel NAME` timing row (the simulated kernel alone, not staging the host arrays in and
//! out), a CPU reference's time is its cell's `run` phase. Every result is checked, untimed,
//! against the CPU reference before it counts; inputs are small integers, so every sum is exact
//! and results must be equal bit for bit. A mismatch ends the bench with an error.

use std::collections::HashMap;
use std::io::Write;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use quasi_lang::{Phase, Session};

use crate::stats::{ms, Samples};
use crate::{eval, new_table, value_of, Options};

/// The largest input: 2^20 floats (vector add), enough for every matrix (512² = 2^18).
const CAPACITY: usize = 1 << 20;

/// Definitions of the bench's session, one cell each. `a`, `b`: inputs filled with small
/// integers once; `c`: what a launch writes; `r`: the reference; `s`: what the timed CPU
/// versions write.
const SETUP: [&str; 17] = [
    ":opt 3",
    "(define ((malloc (ptr float)) (bytes int64)))",
    "(define ((fill void) (p (ptr float)) (len int) (seed int))
       (declare i int)
       (for ((set i 0) (lt i len) (set i (add i 1)))
         (store (ptradd p i) (sitofp (sub (rem (add (mul i 7) seed) 9) 4) float))))",
    "(define ((poison void) (p (ptr float)) (len int))
       (declare i int)
       (for ((set i 0) (lt i len) (set i (add i 1))) (store (ptradd p i) 12345.0)))",
    "(define ((differ int) (x (ptr float)) (y (ptr float)) (len int))
       (declare i int) (declare bad int)
       (for ((set i 0) (lt i len) (set i (add i 1)))
         (if (fne (load (ptradd x i)) (load (ptradd y i))) (set bad (add bad 1))))
       (ret bad))",
    "(define-kernel ((vadd void) (a (ptr float) in n) (b (ptr float) in n) (c (ptr float) out n) (n int))
       (declare i int)
       (set i (add (tid.x) (mul (bdim.x) (bid.x))))
       (if (lt i n) (store (ptradd c i) (fadd (load (ptradd a i)) (load (ptradd b i))))))",
    "(define ((vadd-cpu void) (a (ptr float)) (b (ptr float)) (c (ptr float)) (n int))
       (declare i int)
       (for ((set i 0) (lt i n) (set i (add i 1)))
         (store (ptradd c i) (fadd (load (ptradd a i)) (load (ptradd b i))))))",
    ",@(sgemm sgemm-128 128 128 8 8 8)",
    ",@(sgemm sgemm-64 64 64 8 4 4)",
    ",@(reduce tree-sum 256)",
    ",@(warp_reduce shuffle-sum 256)",
    "(define ((sum-cpu void) (x (ptr float)) (n int) (out (ptr float)))
       (declare i int) (declare s float)
       (for ((set i 0) (lt i n) (set i (add i 1))) (set s (fadd s (load (ptradd x i)))))
       (store out s))",
    "(define ((matmul-ijk void) (m int) (n int) (k int) (a (ptr float)) (b (ptr float)) (c (ptr float)))
       (declare i int) (declare j int) (declare q int) (declare sum float)
       (for ((set i 0) (lt i m) (set i (add i 1)))
         (for ((set j 0) (lt j n) (set j (add j 1)))
           (set sum 0.0)
           (for ((set q 0) (lt q k) (set q (add q 1)))
             (set sum (fadd sum (fmul (load (ptradd a (add (mul i k) q))) (load (ptradd b (add (mul q n) j)))))))
           (store (ptradd c (add (mul i n) j)) sum))))",
    "(define ((matmul-ikj void) (m int) (n int) (k int) (a (ptr float)) (b (ptr float)) (c (ptr float)))
       (declare i int) (declare j int) (declare q int) (declare x float)
       (for ((set i 0) (lt i (mul m n)) (set i (add i 1))) (store (ptradd c i) 0.0))
       (for ((set i 0) (lt i m) (set i (add i 1)))
         (for ((set q 0) (lt q k) (set q (add q 1)))
           (set x (load (ptradd a (add (mul i k) q))))
           (for ((set j 0) (lt j n) (set j (add j 1)))
             (store (ptradd c (add (mul i n) j))
                    (fadd (load (ptradd c (add (mul i n) j))) (fmul x (load (ptradd b (add (mul q n) j))))))))))",
    "(declare a (ptr float)) (declare b (ptr float)) (declare c (ptr float)) (declare r (ptr float)) (declare s (ptr float))",
    "(set a (call malloc (int64 4194304))) (set b (call malloc (int64 4194304))) (set c (call malloc (int64 4194304)))
     (set r (call malloc (int64 4194304))) (set s (call malloc (int64 4194304)))",
    "(call fill a 1048576 3) (call fill b 1048576 5)",
];

/// What a row computes.
#[derive(Clone, Copy)]
enum Work {
    /// c = a + b over `n` floats, blocks of 256 threads.
    VectorAdd { n: usize },
    /// An `n`×`n`×`n` product by the staged kernel `kernel`, whose block is a `tile`² tile of C.
    Sgemm { n: usize, kernel: &'static str, tile: usize, label: &'static str },
    /// c[0] = the sum of a[0..n] by the prelude's `kernel`, 64 blocks of 256 threads.
    Sum { n: usize, kernel: &'static str, label: &'static str },
}

impl Work {
    /// The elements of the result.
    fn len(self) -> usize {
        match self {
            Work::VectorAdd { n } => n,
            Work::Sgemm { n, .. } => n * n,
            Work::Sum { .. } => 1,
        }
    }

    /// The cell that readies `c` for a launch: poison, or zero for a sum (which adds to it).
    fn prepare(self, out: &str) -> String {
        match self {
            Work::Sum { .. } => format!("(store {out} 0.0)"),
            _ => format!("(call poison {out} {})", self.len()),
        }
    }

    /// Elements (vector add) or multiply-adds (SGEMM): what Numba's numbers are divided by.
    fn units(self) -> f64 {
        match self {
            Work::VectorAdd { n } | Work::Sum { n, .. } => n as f64,
            Work::Sgemm { n, .. } => (n * n * n) as f64,
        }
    }

    fn kernel(self) -> &'static str {
        match self {
            Work::VectorAdd { .. } => "vadd",
            Work::Sgemm { kernel, .. } | Work::Sum { kernel, .. } => kernel,
        }
    }

    fn launch(self) -> String {
        match self {
            Work::VectorAdd { n } => format!("(launch vadd (grid {}) (block 256) a b c {n})", n.div_ceil(256)),
            Work::Sgemm { n, kernel, tile, .. } => {
                let blocks = n.div_ceil(tile);
                format!("(launch {kernel} (grid {blocks} {blocks}) (block 256) {n} {n} {n} a b c)")
            }
            Work::Sum { n, kernel, .. } => format!("(launch {kernel} (grid 64) (block 256) {n} a c)"),
        }
    }

    /// The CPU versions: (name, a cell writing to the buffer `out`). The first also computes
    /// the reference.
    fn cpu(self, out: &str) -> Vec<(&'static str, String)> {
        match self {
            Work::VectorAdd { n } => vec![("loop", format!("(call vadd-cpu a b {out} {n})"))],
            Work::Sgemm { n, .. } => vec![
                ("i-j-k", format!("(call matmul-ijk {n} {n} {n} a b {out})")),
                ("i-k-j", format!("(call matmul-ikj {n} {n} {n} a b {out})")),
            ],
            Work::Sum { n, .. } => vec![("loop", format!("(call sum-cpu a {n} {out})"))],
        }
    }

    /// The same-sized job of `benches/numba_sim.py`, if it has one.
    fn numba_job(self) -> Option<String> {
        match self {
            Work::VectorAdd { n } => Some(format!("vadd:{n}")),
            Work::Sgemm { n: 64, .. } => Some("sgemm:64".into()),
            // Numba's simulator runs about 10 µs an element: the sum's job is 2^16 floats.
            Work::Sum { kernel: "tree-sum", .. } => Some("reduce:65536".into()),
            Work::Sgemm { .. } | Work::Sum { .. } => None,
        }
    }

    fn name(self) -> String {
        match self {
            Work::VectorAdd { .. } => "vector add".into(),
            Work::Sgemm { label, .. } => format!("sgemm {label}"),
            Work::Sum { label, .. } => format!("sum, {label}"),
        }
    }

    fn size(self) -> String {
        match self {
            Work::VectorAdd { n } | Work::Sum { n, .. } if n.is_power_of_two() => {
                format!("2^{} floats", n.trailing_zeros())
            }
            Work::VectorAdd { n } | Work::Sum { n, .. } => format!("{n} floats"),
            Work::Sgemm { n, .. } => format!("{n}³"),
        }
    }

    /// A rate at `time`: elements/s for vector add, GFLOP/s (2 per multiply-add) for SGEMM.
    fn rate(self, time: Duration) -> String {
        let seconds = time.as_secs_f64().max(1e-12);
        match self {
            Work::VectorAdd { n } | Work::Sum { n, .. } => format!("{:.0} M/s", n as f64 / seconds / 1e6),
            Work::Sgemm { .. } => format!("{:.2} GF/s", 2.0 * self.units() / seconds / 1e9),
        }
    }

    /// The goals this row is reported against: (time limit of a checked launch, its text).
    fn goal(self) -> Option<(Duration, &'static str)> {
        match self {
            Work::VectorAdd { n: 1_048_576 } => Some((Duration::from_millis(50), "<= 50 ms")),
            Work::Sgemm { n: 512, .. } => Some((Duration::from_secs(1), "<= 1 s")),
            _ => None,
        }
    }
}

const ROWS: [Work; 9] = [
    Work::VectorAdd { n: 1 << 16 },
    Work::VectorAdd { n: 1 << 20 },
    Work::Sgemm { n: 64, kernel: "sgemm-64", tile: 64, label: "64×64×8 4×4" },
    Work::Sgemm { n: 256, kernel: "sgemm-128", tile: 128, label: "128×128×8 8×8" },
    Work::Sgemm { n: 256, kernel: "sgemm-64", tile: 64, label: "64×64×8 4×4" },
    Work::Sgemm { n: 512, kernel: "sgemm-128", tile: 128, label: "128×128×8 8×8" },
    Work::Sgemm { n: 512, kernel: "sgemm-64", tile: 64, label: "64×64×8 4×4" },
    Work::Sum { n: 1 << 20, kernel: "tree-sum", label: "shared-memory tree (reduce)" },
    Work::Sum { n: 1 << 20, kernel: "shuffle-sum", label: "warp shuffles (warp_reduce)" },
];

/// One row's measurements.
struct Measured {
    work: Work,
    checked: Samples,
    unchecked: Samples,
    /// Per CPU version (name, times); shared by the rows of one size.
    cpu: Vec<(&'static str, Samples)>,
}

fn value(session: &mut Session, cell: &str) -> Result<String> {
    value_of(&eval(session, cell)?).with_context(|| format!("`{cell}` gave no value"))
}

/// Elements where `x` and `y` differ; an error unless none.
fn verify(session: &mut Session, x: &str, y: &str, len: usize, what: &str) -> Result<()> {
    let differ = value(session, &format!("(call differ {x} {y} {len})"))?;
    if differ != "0" {
        bail!("{what}: {differ} of {len} elements differ from the CPU reference");
    }
    Ok(())
}

/// One simulated launch, verified: the time of its `kernel NAME` row.
fn simulate(session: &mut Session, work: Work, checked: bool) -> Result<Duration> {
    let len = work.len();
    eval(session, &work.prepare("c"))?;
    let launch = work.launch();
    let outcome = eval(session, &launch)?;
    let label = format!("kernel {}", work.kernel());
    let row = outcome
        .timing
        .device
        .iter()
        .find(|row| row.label == label)
        .with_context(|| format!("`{launch}` gave no `{label}` timing row"))?;
    if !row.detail.starts_with("simulated") {
        bail!("`{launch}` did not run in the simulator: {}", row.detail);
    }
    let mode = if checked { "checked" } else { "unchecked" };
    verify(session, "c", "r", len, &format!("{} {} in the simulator, {mode}", work.name(), work.size()))?;
    Ok(row.duration)
}

/// `reps` timed simulated launches after one untimed launch (which also builds the kernel).
fn simulate_all(session: &mut Session, work: Work, checked: bool, reps: usize) -> Result<Samples> {
    eval(session, if checked { ":gpu sim" } else { ":gpu sim unchecked" })?;
    simulate(session, work, checked)?;
    let times = (0..reps).map(|_| simulate(session, work, checked)).collect::<Result<Vec<_>>>()?;
    Ok(Samples::new(times))
}

/// A CPU version's runs (after one untimed), each verified: the `run` phase of its cell.
fn cpu_all(session: &mut Session, work: Work, name: &str, cell: &str, reps: usize) -> Result<Samples> {
    let mut times = Vec::new();
    for repetition in 0..=reps {
        eval(session, &work.prepare("s"))?;
        let outcome = eval(session, cell)?;
        verify(session, "s", "r", work.len(), &format!("{} {} on the CPU, {name}", work.name(), work.size()))?;
        if repetition > 0 {
            times.push(outcome.timing.get(Phase::Run));
        }
    }
    Ok(Samples::new(times))
}

/// Numba's simulator on the rows' jobs: the median and the number of runs per job, or why it
/// was not measured.
type NumbaResults = HashMap<String, std::result::Result<(Duration, usize), String>>;

fn numba(jobs: &[String]) -> Result<std::result::Result<(String, NumbaResults), String>> {
    let Some(python) = std::env::var_os("QUASI_NUMBA_PYTHON") else {
        return Ok(Err("numba: not measured (set QUASI_NUMBA_PYTHON)".into()));
    };
    let budget = std::env::var("QUASI_NUMBA_BUDGET").unwrap_or_else(|_| "150".into());
    let script = std::env::temp_dir().join(format!("quasi-bench-numba-{}.py", std::process::id()));
    std::fs::File::create(&script)
        .and_then(|mut file| file.write_all(include_str!("../numba_sim.py").as_bytes()))
        .with_context(|| format!("cannot write {}", script.display()))?;
    let version = Command::new(&python)
        .args(["-c", "import numba, sys; print(f'numba {numba.__version__}, Python {sys.version.split()[0]}')"])
        .output();
    let output = Command::new(&python).arg(&script).args(["--budget", &budget, "--reps", "3"]).args(jobs).output();
    let _ = std::fs::remove_file(&script);
    let output = output.with_context(|| format!("cannot run {}", python.to_string_lossy()))?;
    if !output.status.success() {
        bail!(
            "benches/numba_sim.py failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let version =
        version.ok().map(|version| String::from_utf8_lossy(&version.stdout).trim().to_string()).unwrap_or_default();
    let mut results = NumbaResults::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let mut words = line.split_whitespace();
        let (Some("numba-sim"), Some(job), Some(result)) = (words.next(), words.next(), words.next_back()) else {
            continue;
        };
        let runs = words.next().and_then(|runs| runs.strip_prefix("runs=")).and_then(|runs| runs.parse().ok());
        let measured = if let Some(reason) = result.strip_prefix("skipped=") {
            Err(reason.replace('-', " "))
        } else if let Some(seconds) = result.strip_prefix("median_s=") {
            let seconds: f64 = seconds.parse().with_context(|| format!("numba_sim.py printed `{line}`"))?;
            Ok((Duration::from_secs_f64(seconds), runs.unwrap_or(0)))
        } else {
            bail!("numba_sim.py printed `{line}`");
        };
        results.insert(job.to_string(), measured);
    }
    Ok(Ok((format!("{version}, budget {budget} s"), results)))
}

/// A session in the simulator holding the kernels, the CPU versions and filled inputs.
fn session() -> Result<Session> {
    crate::sim_session(true, &SETUP)
}

/// The reference of `work` into `r`, from its first CPU version.
fn reference(session: &mut Session, work: Work) -> Result<()> {
    eval(session, &work.prepare("r"))?;
    eval(session, &work.cpu("r")[0].1)?;
    Ok(())
}

pub fn run(options: &Options) -> Result<()> {
    println!("== GPU simulator: launches on the CPU (:gpu sim), checked and unchecked ==");
    let mut session = session()?;
    debug_assert!(ROWS.iter().all(|work| work.len() <= CAPACITY));
    let reps = options.reps;
    let mut cpu_by_size: HashMap<String, Vec<(&'static str, Samples)>> = HashMap::new();
    let mut measured = Vec::new();
    for work in ROWS {
        // The reference, from the first CPU version (untimed), then the simulator (checked,
        // unchecked) and the CPU versions, each verified against it.
        reference(&mut session, work)?;
        let checked = simulate_all(&mut session, work, true, reps)?;
        let unchecked = simulate_all(&mut session, work, false, reps)?;
        let key = work.size();
        if !cpu_by_size.contains_key(&key) {
            let mut versions = Vec::new();
            for (name, cell) in &work.cpu("s") {
                versions.push((*name, cpu_all(&mut session, work, name, cell, reps)?));
            }
            cpu_by_size.insert(key.clone(), versions);
        }
        measured.push(Measured { work, checked, unchecked, cpu: cpu_by_size[&key].clone() });
    }
    let mut jobs: Vec<String> = ROWS.iter().filter_map(|work| work.numba_job()).collect();
    jobs.dedup();
    // The largest last: it gets what is left of the budget, or is skipped.
    jobs.sort_by_key(|job| job.starts_with("vadd:1048576"));
    let numba = numba(&jobs)?;
    print_table(&measured, &numba, reps);
    Ok(())
}

/// A Numba job's elements (multiply-adds for `sgemm:N`): what its time is divided by.
fn job_units(job: &str) -> f64 {
    let (kind, size) = job.split_once(':').unwrap_or((job, "1"));
    let size: f64 = size.parse().unwrap_or(1.0);
    if kind == "sgemm" {
        size * size * size
    } else {
        size
    }
}

fn ratio(numerator: Duration, denominator: Duration) -> String {
    format!("{:.2}", numerator.as_secs_f64() / denominator.as_secs_f64().max(1e-12))
}

fn print_table(measured: &[Measured], numba: &std::result::Result<(String, NumbaResults), String>, reps: usize) {
    let mut table = new_table(
        &[
            "launch",
            "size",
            "sim checked ms",
            "sim unchecked ms",
            "checked / unchecked",
            "checked rate",
            "unchecked rate",
            "CPU C-Lisp :opt 3 ms",
            "sim checked / CPU",
            "sim unchecked / CPU",
            "Numba sim ms",
            "Numba / Quasi checked, per element",
            "goal",
        ],
        &[2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    );
    for row in measured {
        let work = row.work;
        let (checked, unchecked) = (row.checked.median(), row.unchecked.median());
        // The CPU baseline of the ratios: the first version (the plain loop, i-j-k).
        let cpu = row.cpu.first().map(|(_, samples)| samples.median()).unwrap_or_default();
        let cpu_text = row
            .cpu
            .iter()
            .map(|(name, samples)| format!("{name} {} ({})", ms(samples.median()), work.rate(samples.median())))
            .collect::<Vec<_>>()
            .join("; ");
        let (numba_ms, numba_ratio) = match (numba, work.numba_job()) {
            (Ok((_, results)), Some(job)) => match results.get(&job) {
                Some(Ok((time, runs))) => (
                    format!("{} ({runs} run{})", ms(*time), if *runs == 1 { "" } else { "s" }),
                    format!("{:.0}×", (time.as_secs_f64() / job_units(&job)) / (checked.as_secs_f64() / work.units())),
                ),
                Some(Err(reason)) => (format!("skipped: {reason}"), "-".into()),
                None => ("-".into(), "-".into()),
            },
            _ => ("-".into(), "-".into()),
        };
        let mut goals = Vec::new();
        let verdict = |meets: bool| if meets { "meets" } else { "misses" };
        if let Some((limit, text)) = work.goal() {
            goals.push(format!("checked {text}: {}", verdict(checked <= limit)));
        }
        // The issue's (#30) goals: checking at most 3× the unchecked time for SGEMM 256³ and
        // the shared-memory sum; the warp-shuffle sum within 2× of the shared-memory one.
        let checked_goal = matches!(work, Work::Sgemm { n: 256, .. } | Work::Sum { kernel: "tree-sum", .. });
        if checked_goal {
            goals.push(format!(
                "checked <= 3× unchecked: {}",
                verdict(checked.as_secs_f64() <= 3.0 * unchecked.as_secs_f64())
            ));
        }
        if let Work::Sum { kernel: "shuffle-sum", .. } = work {
            let tree = measured.iter().find(|row| matches!(row.work, Work::Sum { kernel: "tree-sum", .. }));
            if let Some(tree) = tree {
                let (limit_checked, limit_unchecked) = (tree.checked.median() * 2, tree.unchecked.median() * 2);
                goals.push(format!(
                    "<= 2× reduce's: checked {}, unchecked {}",
                    verdict(checked <= limit_checked),
                    verdict(unchecked <= limit_unchecked)
                ));
            }
        }
        if numba_ratio != "-" {
            let times = numba_ratio.trim_end_matches('×').parse::<f64>().unwrap_or(0.0);
            goals.push(format!("Numba ≥ 1000×: {}", if times >= 1000.0 { "meets" } else { "misses" }));
        }
        table.add_row(vec![
            work.name(),
            work.size(),
            ms(checked),
            ms(unchecked),
            ratio(checked, unchecked),
            work.rate(checked),
            work.rate(unchecked),
            cpu_text,
            ratio(checked, cpu),
            ratio(unchecked, cpu),
            numba_ms,
            numba_ratio,
            if goals.is_empty() { "-".into() } else { goals.join("; ") },
        ]);
    }
    println!(
        "Medians of {reps} timed runs after one untimed run, each through Session::eval in one session at :opt 3.\n\
         sim = the launch's `kernel NAME` timing row (the simulated kernel only, one thread of the CPU; not\n\
         staging the annotated host arrays); CPU = the `run` phase of a cell calling a compiled C-Lisp `define`\n\
         (vector add: a plain loop; SGEMM: i-j-k with a float accumulator, and i-k-j), the first version being the\n\
         baseline of the ratios. Inputs are small integers, so sums are exact: every result was compared with the\n\
         CPU reference, element by element, before it counted. Rates: elements/s (vector add), GFLOP/s = 2·n³/s.\n\
         SGEMM kernels: prelude/gpu.rhai's sgemm (block tile bm×bn×bk, tm×tn per thread), 256 threads a block.\n\
         Sums: prelude/gpu.rhai's reduce (a tree in shared memory) and warp_reduce (warp shuffles), 64 blocks of 256."
    );
    match numba {
        Ok((version, _)) => println!(
            "Numba = its CUDA simulator (NUMBA_ENABLE_CUDASIM=1, {version}) running benches/numba_sim.py: vector add\n\
             with blocks of 256, SGEMM with 16×16 shared-memory tiles, the shared-memory sum at 2^16 floats (Numba's\n\
             simulator has no warp shuffles); median of up to 3 runs, checked against NumPy.\n\
             Numba / Quasi = Numba's time per element (per multiply-add for SGEMM) over the checked simulator's."
        ),
        Err(message) => println!("{message}"),
    }
    println!("{table}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench's cells compile, and small launches of every kernel give the CPU reference in
    /// the simulator, checked and unchecked, as the CPU versions do (nothing is timed here).
    #[test]
    fn small_launches_match_the_cpu_reference() -> Result<()> {
        let mut session = session()?;
        for work in [
            Work::VectorAdd { n: 1000 },
            Work::Sgemm { n: 70, kernel: "sgemm-64", tile: 64, label: "64×64×8 4×4" },
            Work::Sgemm { n: 130, kernel: "sgemm-128", tile: 128, label: "128×128×8 8×8" },
        ] {
            reference(&mut session, work)?;
            for checked in [true, false] {
                assert_eq!(simulate_all(&mut session, work, checked, 1)?.len(), 1);
            }
            for (name, cell) in work.cpu("s") {
                cpu_all(&mut session, work, name, &cell, 1)?;
            }
        }
        // A launch that leaves part of the result unwritten is caught.
        reference(&mut session, Work::VectorAdd { n: 1000 })?;
        eval(&mut session, "(call poison c 1000)")?;
        eval(&mut session, "(launch vadd (grid 1) (block 256) a b c 1000)")?;
        assert!(verify(&mut session, "c", "r", 1000, "a short grid").is_err());
        Ok(())
    }
}
