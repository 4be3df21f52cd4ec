//! Cell latency: the wall time of `Session::eval` from cell text to printed value, for a small
//! definition and a small expression at every optimisation level, with the time per phase.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quasi_lang::{Item, Outcome, Phase, Session, SessionConfig};

use crate::stats::{ms, Samples};
use crate::{new_table, Options};

/// Definitions already in the session for the row that shows per-cell work growing with it.
const LARGE_SESSION: usize = 1000;
const LARGE_SESSION_ROW: &str = "(call sq 7), session already holding 1,000 definitions";
const CALL_CELL_ROW: &str = "(call sq 7), call cell: no compiling";
const COMPILED_CALL_ROW: &str = "(call sq (add 3 4)), compiled";

/// The goal for call cells (issue 15): at most this p50, in process.
const CALL_CELL_GOAL: Duration = Duration::from_micros(50);

/// The `:opt` column of the session's default: tiered compilation (cells at opt 1, functions
/// promoted to opt 3 in the background).
const TIERED: &str = "tiered";

/// One measured row: a kind of cell at one level.
struct Row {
    cell: &'static str,
    /// `tiered`, or the pinned level.
    level: String,
    wall: Samples,
    /// Every phase of `Phase::ALL`, in that order.
    phases: Vec<Samples>,
    /// Wall time outside the phases `PhaseTimes` records (commit, rendering values, bookkeeping).
    other: Samples,
}

/// What a cell must produce, so that a failing cell is never timed as a fast one.
enum Expect {
    /// Any outcome without an error (commands).
    Success,
    Defined,
    Value(&'static str),
}

pub fn run(options: &Options) -> Result<()> {
    println!("== Cell latency: wall time of Session::eval (read -> check -> codegen -> optimise -> link -> run) ==");
    println!(
        "{} timed iterations per row after {} warm-up iterations; one fresh session per setting: the default\n\
         (`tiered`: opt {}, every function promoted to opt 3 by a background thread, which stays busy while the\n\
         rows define a function per cell) and each level pinned with `:opt N` (no background work);\n\
         sessions capture program output as the REPL does (SessionConfig {{ capture_output: true }}).\n",
        options.iterations,
        options.warmup,
        SessionConfig::default().opt_level
    );
    let mut rows = Vec::new();
    for setting in [None, Some(0u8), Some(1), Some(2), Some(3)] {
        let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
        let level = match setting {
            Some(level) => {
                expect(&session.eval(&format!(":opt {level}")), &Expect::Success, ":opt")?;
                level.to_string()
            }
            None => TIERED.to_string(),
        };
        let level = level.as_str();
        // A fresh name each iteration: a new slot, a new symbol, a new definition line.
        let mut counter = 0u32;
        rows.push(measure(
            &mut session,
            options,
            "(define ((sqN int) (x int)) (ret (mul x x))), N fresh",
            level,
            Expect::Defined,
            || {
                counter += 1;
                format!("(define ((sq{counter} int) (x int)) (ret (mul x x)))")
            },
        )?);
        // The same name each iteration: a redefinition with the same signature (slot rewritten).
        rows.push(measure(
            &mut session,
            options,
            "(define ((sq int) (x int)) (ret (mul x x))), redefined",
            level,
            Expect::Defined,
            || "(define ((sq int) (x int)) (ret (mul x x)))".to_string(),
        )?);
        // A call cell (constant or global arguments) runs through its signature's trampoline;
        // the same call with a computed argument compiles a module, as every cell once did.
        rows.push(measure(&mut session, options, CALL_CELL_ROW, level, Expect::Value("49"), || {
            "(call sq 7)".to_string()
        })?);
        expect(&session.eval("(define-global (seven int) (const 7))"), &Expect::Defined, "seven")?;
        rows.push(measure(
            &mut session,
            options,
            "(call sq seven), call cell, a global argument",
            level,
            Expect::Value("49"),
            || "(call sq seven)".to_string(),
        )?);
        rows.push(measure(&mut session, options, COMPILED_CALL_ROW, level, Expect::Value("49"), || {
            "(call sq (add 3 4))".to_string()
        })?);
        if setting.is_none() {
            let mut quiet = Session::new(SessionConfig { capture_output: false, ..SessionConfig::default() })?;
            expect(&quiet.eval("(define ((sq int) (x int)) (ret (mul x x)))"), &Expect::Defined, "sq")?;
            rows.push(measure(
                &mut quiet,
                options,
                "(call sq 7), output not captured",
                level,
                Expect::Value("49"),
                || "(call sq 7)".to_string(),
            )?);
            // The same cell in a session that already holds many definitions: per-cell work that
            // grows with the session shows here and nowhere else.
            let mut full = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
            expect(&full.eval(":opt 0"), &Expect::Success, ":opt")?;
            for index in 0..LARGE_SESSION {
                expect(
                    &full.eval(&format!("(define ((filler{index} int) (x int)) (ret (add x {index})))")),
                    &Expect::Defined,
                    "filler",
                )?;
            }
            expect(&full.eval(":opt tiered"), &Expect::Success, ":opt")?;
            expect(&full.eval("(define ((sq int) (x int)) (ret (mul x x)))"), &Expect::Defined, "sq")?;
            rows.push(measure(&mut full, options, LARGE_SESSION_ROW, level, Expect::Value("49"), || {
                "(call sq 7)".to_string()
            })?);
        }
    }
    print_latency(&rows);
    print_phases(&rows);
    through_the_binary(options)?;
    redefinitions()?;
    time_to_promotion(options)?;
    Ok(())
}

/// Cells typed into the `quasi` binary over a pipe, as users run it: each cell written, then
/// its answer line awaited, at the default setting. The same definitions and call cells as
/// the in-process rows above.
/// A REPL driven over pipes, as a user's terminal would feed it: a cell written, then its
/// output read up to the line that answers it.
struct Piped {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Piped {
    fn spawn(program: &std::path::Path, arguments: &[&str]) -> Result<Piped> {
        let mut child = std::process::Command::new(program)
            .args(arguments)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let stdin = child.stdin.take().context("no stdin pipe")?;
        let stdout = std::io::BufReader::new(child.stdout.take().context("no stdout pipe")?);
        Ok(Piped { child, stdin, stdout })
    }

    /// Writes `text` (a line), reads until a line starting with `answer`; the time in between.
    fn cell(&mut self, text: &str, answer: &str) -> Result<Duration> {
        use std::io::{BufRead, Write};
        let start = Instant::now();
        self.stdin.write_all(format!("{text}\n").as_bytes())?;
        self.stdin.flush()?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("the REPL ended before answering `{text}`");
            }
            if line.starts_with(answer) {
                return Ok(start.elapsed());
            }
        }
    }

    /// The mean time per cell of `cells` written at once and followed by `marker`, whose own
    /// time (`marker_alone`) is taken off: for a REPL that prints nothing for a definition
    /// (clang-repl), and the same way for Quasi beside it.
    fn batch(&mut self, cells: &[String], marker: &str, answer: &str, marker_alone: Duration) -> Result<Duration> {
        let text = cells.join("\n");
        let took = self.cell(&format!("{text}\n{marker}"), answer)?;
        Ok(took.saturating_sub(marker_alone) / cells.len().max(1) as u32)
    }

    fn end(self) {
        let Piped { mut child, stdin, .. } = self;
        drop(stdin);
        let _ = child.wait();
    }
}

fn through_the_binary(options: &Options) -> Result<()> {
    let Some(quasi) = crate::startup::quasi_binary(options)? else {
        println!("(no `quasi` binary beside this one, nor --quasi: the rows through the binary are skipped)\n");
        return Ok(());
    };
    println!("== Cells through the `quasi` binary over a pipe, at the default setting (tiered) ==");
    let mut repl = Piped::spawn(&quasi, &[])?;
    repl.cell("(add 1 2)", "3 : int")?;
    let count = options.iterations + options.warmup;
    let mut definitions = Vec::new();
    for index in 0..count {
        let took =
            repl.cell(&format!("(define ((sq{index} int) (x int)) (ret (mul x x)))"), &format!("sq{index} : "))?;
        if index >= options.warmup {
            definitions.push(took);
        }
    }
    let mut calls = Vec::new();
    for index in 0..count {
        let took = repl.cell("(call sq0 7)", "49 : int")?;
        if index >= options.warmup {
            calls.push(took);
        }
    }
    // Definitions in a batch, as clang-repl's are measured below.
    let marker = repl.cell("(add 1 2)", "3 : int")?;
    let cells: Vec<String> =
        (0..options.iterations).map(|index| format!("(define ((batch{index} int) (x int)) (ret (mul x x)))")).collect();
    let quasi_batch = repl.batch(&cells, "(add 1 2)", "3 : int", marker)?;
    // Memory kept per cell: the process's resident size between two marks, each taken after
    // the background compiler has caught up (`:tier wait`).
    let pid = repl.child.id();
    let mut retained = Vec::new();
    for (what, redefine) in [("definition", false), ("redefinition", true)] {
        let mut marks = Vec::new();
        for index in 0..RETENTION_MARKS[1] {
            let (text, answer) = if redefine {
                (format!("(define ((again int) (x int)) (ret (add (mul x x) {index})))"), "again : ".to_string())
            } else {
                (format!("(define ((kept{index} int) (x int)) (ret (mul x x)))"), format!("kept{index} : "))
            };
            repl.cell(&text, &answer)?;
            if RETENTION_MARKS.contains(&(index + 1)) {
                // Its listing ends with the line on later cells.
                repl.cell(":tier wait", "later cells:")?;
                marks.push(resident_kb(pid)?);
            }
        }
        let cells = (RETENTION_MARKS[1] - RETENTION_MARKS[0]) as f64;
        retained.push((what, (marks[1] - marks[0]) as f64 / cells));
    }
    repl.end();
    let (definitions, calls) = (Samples::new(definitions), Samples::new(calls));
    let mut table = new_table(&["cell, written and answered over the pipe", "p50 ms", "best ms", "n"], &[1, 2, 3]);
    for (what, samples) in
        [("(define ((sqN int) (x int)) (ret (mul x x))), N fresh", &definitions), ("(call sq0 7), call cell", &calls)]
    {
        table.add_row(vec![what.to_string(), ms(samples.median()), ms(samples.best()), samples.len().to_string()]);
    }
    println!("{table}");
    let verdict = if definitions.median() <= Duration::from_micros(250) { "meets" } else { "misses" };
    println!("goal p50 <= 0.25 ms for a definition through the binary: {verdict} ({} ms)", ms(definitions.median()));
    for ((what, kilobytes), goal) in retained.iter().zip([4.0, 1.0]) {
        let verdict = if *kilobytes <= goal { "meets" } else { "misses" };
        println!(
            "KB retained per {what} from the {}th to the {}th (resident size): {kilobytes:.2}; goal <= {goal}: {verdict}",
            RETENTION_MARKS[0], RETENTION_MARKS[1]
        );
    }
    println!();
    beside_clang_repl(options, quasi_batch, &definitions, &calls)
}

/// clang-repl 19 (LLVM's C++ REPL on the same ORC JIT) beside Quasi, when it is installed: the
/// same definitions, written in one batch (it prints nothing for a definition) and timed up to
/// a marker line, and the call cell, each answered before the next.
fn beside_clang_repl(options: &Options, quasi_batch: Duration, definitions: &Samples, calls: &Samples) -> Result<()> {
    let Some(path) = which("clang-repl").or_else(|| which("clang-repl-19")) else {
        println!("clang-repl is not installed here (Debian: apt install clang-tools-19): no side-by-side rows\n");
        return Ok(());
    };
    println!("== Beside clang-repl ({}), over a pipe, in the same run ==", path.display());
    let mut clang = Piped::spawn(&path, &[])?;
    clang.cell("#include <stdio.h>\nputs(\"ready\"); fflush(stdout);", "ready")?;
    let marker_text = "puts(\"marked\"); fflush(stdout);";
    let mut marker = Duration::MAX;
    for _ in 0..5 {
        marker = marker.min(clang.cell(marker_text, "marked")?);
    }
    let cells: Vec<String> =
        (0..options.iterations).map(|index| format!("int sq{index}(int x) {{ return x * x; }}")).collect();
    let clang_batch = clang.batch(&cells, marker_text, "marked", marker)?;
    let count = options.iterations + options.warmup;
    let mut clang_calls = Vec::new();
    for index in 0..count {
        let took = clang.cell("printf(\"%d\\n\", sq0(7)); fflush(stdout);", "49")?;
        if index >= options.warmup {
            clang_calls.push(took);
        }
    }
    clang.end();
    let clang_calls = Samples::new(clang_calls);
    let mut table =
        new_table(&["per cell, through the binary", "Quasi ms", "clang-repl ms", "Quasi / clang-repl"], &[1, 2, 3]);
    let ratio =
        |quasi: Duration, clang: Duration| format!("{:.2}", quasi.as_secs_f64() / clang.as_secs_f64().max(1e-9));
    table.add_row(vec![
        format!("definition, mean of {} in one batch (the marker's time taken off)", options.iterations),
        ms(quasi_batch),
        ms(clang_batch),
        ratio(quasi_batch, clang_batch),
    ]);
    table.add_row(vec![
        "call cell, p50 (`(call sq0 7)` / `printf(\"%d\\n\", sq0(7));`)".to_string(),
        ms(calls.median()),
        ms(clang_calls.median()),
        ratio(calls.median(), clang_calls.median()),
    ]);
    println!("{table}");
    println!(
        "(Quasi compiles each definition at once, errors and :asm immediate; clang-repl defers code generation to\n\
         first use. Quasi's definition p50 answered one by one: {} ms.)\n",
        ms(definitions.median())
    );
    Ok(())
}

/// The cells between which the binary's retention is measured.
const RETENTION_MARKS: [usize; 2] = [1_000, 5_000];

/// The resident size of process `pid`, in KB.
fn resident_kb(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/PID/status")
}

/// A program on PATH.
fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|directory| std::path::Path::new(directory).join(program))
        .find(|path| path.is_file())
}

/// Redefinitions of one function in a row, at the default (tiered) setting.
const REDEFINITIONS: usize = 10_000;
/// Around which redefinitions the p50s are taken, and how many on each side.
const REDEFINITION_MARKS: [usize; 2] = [100, 10_000];
const REDEFINITION_WINDOW: usize = 50;

/// One function redefined `REDEFINITIONS` times: the p50 of a redefinition near the 100th and
/// near the 10,000th. A redefinition must cost the same however many came before (issue 32).
fn redefinitions() -> Result<()> {
    println!("== Redefining one function {REDEFINITIONS} times, at the default setting (tiered) ==");
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
    let mut times = Vec::with_capacity(REDEFINITIONS);
    for index in 0..REDEFINITIONS {
        // Another body each time, so nothing is cached.
        let cell = format!("(define ((sq int) (x int)) (ret (add (mul x x) {index})))");
        let start = Instant::now();
        let outcome = session.eval(&cell);
        times.push(start.elapsed());
        expect(&outcome, &Expect::Defined, &cell)?;
    }
    let mut table = new_table(&["redefinition", "p50 ms", "best ms"], &[1, 2]);
    let mut medians = Vec::new();
    for mark in REDEFINITION_MARKS {
        let window = times[mark - REDEFINITION_WINDOW..mark + REDEFINITION_WINDOW.min(REDEFINITIONS - mark)].to_vec();
        let samples = Samples::new(window);
        medians.push(samples.median());
        table.add_row(vec![format!("around the {mark}th"), ms(samples.median()), ms(samples.best())]);
    }
    println!("{table}");
    let ratio = medians[1].as_secs_f64() / medians[0].as_secs_f64();
    let verdict = if ratio <= 1.2 { "meets" } else { "misses" };
    println!("goal p50 at redefinition 10,000 <= 1.2x at 100: {verdict} ({ratio:.2}x)\n");
    Ok(())
}

/// A matrix product, with `int` indices, defined in a session at the default (tiered) setting and
/// run again and again: how long each run takes before and after its promotion, and when the
/// promotion came.
const MATMUL: &str = "(define ((mm void) (n int) (a (ptr double)) (b (ptr double)) (c (ptr double)))
  (declare i int) (declare j int) (declare k int)
  (for ((set i 0) (lt i n) (set i (add i 1)))
    (for ((set j 0) (lt j n) (set j (add j 1)))
      (store (ptradd c (add (mul i n) j)) (double 0.0)))
    (for ((set k 0) (lt k n) (set k (add k 1)))
      (declare aik double)
      (set aik (load (ptradd a (add (mul i n) k))))
      (for ((set j 0) (lt j n) (set j (add j 1)))
        (store (ptradd c (add (mul i n) j))
               (fadd (load (ptradd c (add (mul i n) j))) (fmul aik (load (ptradd b (add (mul k n) j))))))))))";

fn time_to_promotion(options: &Options) -> Result<()> {
    const N: usize = 256;
    println!("== Tiered compilation: a 256x256 double matrix product defined at the default setting ==");
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
    for global in ["a", "b", "c"] {
        let cell = format!(
            "(define-global (mm-{global} (ptr double))) (set mm-{global} (bitcast (alloc double {}) (ptr double)))",
            N * N
        );
        expect(&session.eval(&cell), &Expect::Defined, &cell)?;
    }
    let fill = "(define ((mm-fill void) (n int)) (declare i int)
      (for ((set i 0) (lt i (mul n n)) (set i (add i 1)))
        (store (ptradd mm-a i) (sitofp (rem i 7) double)) (store (ptradd mm-b i) (sitofp (rem i 5) double))))";
    expect(&session.eval(fill), &Expect::Defined, fill)?;
    expect(&session.eval(&format!("(call mm-fill {N})")), &Expect::Success, "mm-fill")?;
    expect(&session.eval(":tier wait"), &Expect::Success, ":tier wait")?;
    let defined = Instant::now();
    let outcome = session.eval(MATMUL);
    let define_time = defined.elapsed();
    expect(&outcome, &Expect::Defined, "mm")?;
    let call = format!("(call mm {N} mm-a mm-b mm-c)");
    let mut quick = Vec::new();
    let mut promoted = Vec::new();
    let mut promoted_after = None;
    let mut background = Duration::ZERO;
    while promoted.len() < options.iterations.clamp(5, 50) {
        let start = Instant::now();
        let outcome = session.eval(&call);
        let run = outcome.timing.get(Phase::Run);
        expect(&outcome, &Expect::Success, &call)?;
        if let Some(promotion) = outcome.timing.promotions.iter().find(|promotion| promotion.function == "mm") {
            promoted_after = Some(start.duration_since(defined));
            background = promotion.compile;
        }
        match promoted_after {
            Some(_) => promoted.push(run),
            None => quick.push(run),
        }
        if defined.elapsed() > Duration::from_secs(60) {
            bail!("`mm` was not promoted within a minute");
        }
    }
    let promoted_after = promoted_after.unwrap_or_default();
    let (quick, promoted) = (Samples::new(quick), Samples::new(promoted));
    let mut table = new_table(&["what", "ms"], &[1]);
    table.add_row(vec!["the defining cell (opt 1, answers at once)".to_string(), ms(define_time)]);
    table.add_row(vec!["background compile at opt 3".to_string(), ms(background)]);
    table.add_row(vec!["definition until the first run of the opt 3 code".to_string(), ms(promoted_after)]);
    table.add_row(vec![format!("one product before promotion (opt 1), median of {}", quick.len()), ms(quick.median())]);
    table.add_row(vec![
        format!("one product after promotion (opt 3), median of {}", promoted.len()),
        ms(promoted.median()),
    ]);
    println!("{table}");
    println!(
        "runs of `{call}`, one cell each, back to back from the definition: the opt 3 code answers {:.1}x faster\n",
        quick.median().as_secs_f64() / promoted.median().as_secs_f64().max(1e-12)
    );
    Ok(())
}

fn measure(
    session: &mut Session,
    options: &Options,
    cell: &'static str,
    level: &str,
    expected: Expect,
    mut next: impl FnMut() -> String,
) -> Result<Row> {
    let mut wall = Vec::with_capacity(options.iterations);
    let mut phases: Vec<Vec<Duration>> = vec![Vec::with_capacity(options.iterations); Phase::ALL.len()];
    let mut other = Vec::with_capacity(options.iterations);
    for iteration in 0..options.warmup + options.iterations {
        let text = next();
        let start = Instant::now();
        let outcome = session.eval(&text);
        let elapsed = start.elapsed();
        expect(&outcome, &expected, &text)?;
        if iteration >= options.warmup {
            wall.push(elapsed);
            for (samples, phase) in phases.iter_mut().zip(Phase::ALL) {
                samples.push(outcome.timing.get(phase));
            }
            other.push(elapsed.saturating_sub(outcome.timing.total()));
        }
    }
    Ok(Row {
        cell,
        level: level.to_string(),
        wall: Samples::new(wall),
        phases: phases.into_iter().map(Samples::new).collect(),
        other: Samples::new(other),
    })
}

fn expect(outcome: &Outcome, expected: &Expect, text: &str) -> Result<()> {
    let produced = match expected {
        _ if outcome.failed() => false,
        Expect::Defined => outcome.items.iter().any(|item| matches!(item, Item::Defined { .. })),
        Expect::Success => true,
        Expect::Value(value) => {
            outcome.items.iter().any(|item| matches!(item, Item::Value { text, .. } if text == value))
        }
    };
    if !produced {
        bail!(
            "the cell `{text}` did not give what the benchmark expects:\n{}",
            quasi_repl::render(outcome, quasi_repl::Style::Plain)
        );
    }
    Ok(())
}

fn print_latency(rows: &[Row]) {
    let mut table = new_table(&["cell", ":opt", "p50 ms", "p95 ms", "best ms", "n"], &[1, 2, 3, 4, 5]);
    for row in rows {
        table.add_row(vec![
            row.cell.to_string(),
            row.level.clone(),
            ms(row.wall.median()),
            ms(row.wall.percentile(95.0)),
            ms(row.wall.best()),
            row.wall.len().to_string(),
        ]);
    }
    println!("{table}");
    let goal = Duration::from_millis(1);
    for row in rows
        .iter()
        .filter(|row| row.level == TIERED && !row.cell.contains("not captured") && row.cell != LARGE_SESSION_ROW)
    {
        let verdict = if row.wall.median() <= goal { "meets" } else { "misses" };
        println!(
            "goal p50 <= 1 ms at the default setting (tiered): {verdict} for {} ({} ms)",
            row.cell,
            ms(row.wall.median())
        );
    }
    let call_cell = rows.iter().find(|row| row.level == TIERED && row.cell == CALL_CELL_ROW);
    let compiled = rows.iter().find(|row| row.level == TIERED && row.cell == COMPILED_CALL_ROW);
    if let (Some(call_cell), Some(compiled)) = (call_cell, compiled) {
        let verdict = if call_cell.wall.median() <= CALL_CELL_GOAL { "meets" } else { "misses" };
        println!(
            "goal p50 <= 0.050 ms for a call cell: {verdict} ({} ms; the same call compiled: {} ms, {:.0}x)",
            ms(call_cell.wall.median()),
            ms(compiled.wall.median()),
            compiled.wall.median().as_secs_f64() / call_cell.wall.median().as_secs_f64().max(1e-9)
        );
    }
    println!();
}

fn print_phases(rows: &[Row]) {
    // Only phases some cell went through: a phase no cell ran (e.g. expand without unquotes)
    // would be a column of zeros.
    let shown: Vec<usize> = (0..Phase::ALL.len())
        .filter(|index| rows.iter().any(|row| row.phases[*index].percentile(100.0) > Duration::ZERO))
        .collect();
    let mut header = vec!["cell", ":opt"];
    header.extend(shown.iter().map(|index| Phase::ALL[*index].name()));
    header.extend(["other", "wall p50"]);
    let right: Vec<usize> = (1..header.len()).collect();
    let mut table = new_table(&header, &right);
    for row in rows {
        let mut cells = vec![row.cell.to_string(), row.level.clone()];
        cells.extend(shown.iter().map(|index| ms(row.phases[*index].median())));
        cells.push(ms(row.other.median()));
        cells.push(ms(row.wall.median()));
        table.add_row(cells);
    }
    println!("Per-phase breakdown (ms): the median of each phase over the same iterations (Outcome.timing);");
    println!("`other` is the median of wall time minus the recorded phases (commit, values, bookkeeping).");
    println!("{table}\n");
}
