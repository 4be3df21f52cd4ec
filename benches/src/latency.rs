//! Cell latency: the wall time of `Session::eval` from cell text to printed value, for a small
//! definition and a small expression at every optimisation level, with the time per phase.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
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

/// One measured row: a kind of cell at one level.
struct Row {
    cell: &'static str,
    level: u8,
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
    let default_level = SessionConfig::default().opt_level;
    println!("== Cell latency: wall time of Session::eval (read -> check -> codegen -> optimise -> link -> run) ==");
    println!(
        "{} timed iterations per row after {} warm-up iterations; one fresh session per level, set with `:opt N`;\n\
         sessions capture program output as the REPL does (SessionConfig {{ capture_output: true }}).\n",
        options.iterations, options.warmup
    );
    let mut rows = Vec::new();
    for level in 0..=3u8 {
        let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
        expect(&session.eval(&format!(":opt {level}")), &Expect::Success, ":opt")?;
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
        if level == default_level {
            let mut quiet = Session::new(SessionConfig { capture_output: false, ..SessionConfig::default() })?;
            expect(&quiet.eval(&format!(":opt {level}")), &Expect::Success, ":opt")?;
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
            expect(&full.eval(&format!(":opt {level}")), &Expect::Success, ":opt")?;
            expect(&full.eval("(define ((sq int) (x int)) (ret (mul x x)))"), &Expect::Defined, "sq")?;
            rows.push(measure(&mut full, options, LARGE_SESSION_ROW, level, Expect::Value("49"), || {
                "(call sq 7)".to_string()
            })?);
        }
    }
    print_latency(&rows, default_level);
    print_phases(&rows);
    Ok(())
}

fn measure(
    session: &mut Session,
    options: &Options,
    cell: &'static str,
    level: u8,
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
        level,
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

fn print_latency(rows: &[Row], default_level: u8) {
    let mut table = new_table(&["cell", ":opt", "p50 ms", "p95 ms", "best ms", "n"], &[1, 2, 3, 4, 5]);
    for row in rows {
        table.add_row(vec![
            row.cell.to_string(),
            row.level.to_string(),
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
        .filter(|row| row.level == default_level && !row.cell.contains("not captured") && row.cell != LARGE_SESSION_ROW)
    {
        let verdict = if row.wall.median() <= goal { "meets" } else { "misses" };
        println!(
            "goal p50 <= 1 ms at the default level (:opt {default_level}): {verdict} for {} ({} ms)",
            row.cell,
            ms(row.wall.median())
        );
    }
    let call_cell = rows.iter().find(|row| row.level == default_level && row.cell == CALL_CELL_ROW);
    let compiled = rows.iter().find(|row| row.level == default_level && row.cell == COMPILED_CALL_ROW);
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
        let mut cells = vec![row.cell.to_string(), row.level.to_string()];
        cells.extend(shown.iter().map(|index| ms(row.phases[*index].median())));
        cells.push(ms(row.other.median()));
        cells.push(ms(row.wall.median()));
        table.add_row(cells);
    }
    println!("Per-phase breakdown (ms): the median of each phase over the same iterations (Outcome.timing);");
    println!("`other` is the median of wall time minus the recorded phases (commit, values, bookkeeping).");
    println!("{table}\n");
}
