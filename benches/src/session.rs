//! Long sessions: whether a session stays fast and small as cells pile up. Resident memory
//! retained per definition cell and per expression cell after 10,000 of each, cell latency at
//! cell 10,000 against a young session's near cell 100, and the time of one cell of many
//! top-level forms.
//!
//! Memory is the process's resident set (`/proc/self/statm`), read before and after a run of
//! cells: what the session keeps, plus what the allocator does not give back. Latency is taken
//! side by side: the long session's next cells alternate with a young session's (about 100
//! cells old), ten cells at a time, so that both meet the same machine. Read one after the
//! other, p50s of cells of 30–50 µs moved by a third within a minute on this project's shared
//! 2-core machine, with no trend over 40,000 cells, and decided the ratio.

use std::time::{Duration, Instant};

use anyhow::Result;
use quasi_lang::{Phase, Session, SessionConfig};

use crate::stats::{ms, Samples};
use crate::{check, new_table, Options};

/// Cells of each kind in the long session.
const CELLS: usize = 10_000;
/// Cells of each kind the young session has run before it is timed.
const YOUNG: usize = 100;
/// Cells of each kind timed in each session, in alternating blocks of BLOCK cells (a block, not
/// a cell: a session's executor thread, woken by its first call, is still spinning for the next
/// one, as in a session typed or driven cell after cell).
const WINDOW: usize = 200;
const BLOCK: usize = 10;
/// Top-level forms in the one-cell rows.
const FORMS: [usize; 2] = [4_000, 8_000];

/// The latency and memory of one kind of cell.
struct Run {
    /// The young session's cells, from cell YOUNG on.
    young: Samples,
    /// The long session's cells, from cell CELLS on, each run just before a young one.
    long: Samples,
    /// Resident bytes gained from cell 100 to cell CELLS of the long session, per cell.
    bytes_per_cell: f64,
}

pub fn run(_options: &Options) -> Result<()> {
    println!("== Long sessions: {CELLS} definition cells, then {CELLS} expression cells, in one session ==");
    println!(
        "Resident set growth from cell 100 to cell {CELLS} of each kind, per cell; the p50 of {WINDOW} cells from\n\
         cell {CELLS} on against the p50 of {WINDOW} cells of a young session (from its cell {YOUNG} on), the two\n\
         alternating every {BLOCK} cells. The sessions capture output as the REPL does.\n"
    );
    let config = SessionConfig { capture_output: true, ..SessionConfig::default() };
    let mut session = Session::new(config.clone())?;
    let mut young = Session::new(config)?;
    let definition = |index: usize| format!("(define ((f{index} int) (x int)) (ret (add x {index})))");
    let expression = |index: usize| format!("(call f{index} 2)");
    let bytes_per_cell = grow(&mut session, CELLS, definition)?;
    grow(&mut young, YOUNG, definition)?;
    let (long, young_times) =
        side_by_side(&mut session, &mut young, |index| definition(CELLS + index), |index| definition(YOUNG + index))?;
    let definitions = Run { young: young_times, long, bytes_per_cell };
    let bytes_per_cell = grow(&mut session, CELLS, expression)?;
    grow(&mut young, YOUNG, expression)?;
    let (long, young_times) = side_by_side(&mut session, &mut young, expression, |index| expression(index % YOUNG))?;
    let expressions = Run { young: young_times, long, bytes_per_cell };
    let mut table = new_table(
        &["cells", "retained bytes / cell", "goal", "p50 ms, young session", "p50 ms at cell 10,000", "ratio", "goal"],
        &[1, 3, 4, 5],
    );
    for (name, run, goal) in
        [("definitions (define ((fN int) …))", &definitions, 4096.0), ("expressions (call fN 2)", &expressions, 1024.0)]
    {
        let ratio = run.long.median().as_secs_f64() / run.young.median().as_secs_f64().max(1e-9);
        table.add_row(vec![
            name.to_string(),
            format!("{:.0}", run.bytes_per_cell),
            verdict(run.bytes_per_cell <= goal, &format!("<= {goal:.0}")),
            ms(run.young.median()),
            ms(run.long.median()),
            format!("{ratio:.2}"),
            verdict(ratio <= 1.2, "<= 1.20"),
        ]);
    }
    println!("{table}\n");
    many_forms()
}

/// `count` cells made by `cell` (given 0, 1, …), each checked to succeed; the resident set
/// gained per cell from cell 100 on.
fn grow(session: &mut Session, count: usize, cell: impl Fn(usize) -> String) -> Result<f64> {
    let mut resident_at_100 = resident_bytes();
    for index in 0..count {
        let text = cell(index);
        check(&session.eval(&text), &text)?;
        if index + 1 == 100 {
            resident_at_100 = resident_bytes();
        }
    }
    let gained = resident_bytes().saturating_sub(resident_at_100);
    Ok(gained as f64 / count.saturating_sub(100).max(1) as f64)
}

/// WINDOW cells in each session, in alternating blocks (the long one first): the wall time of
/// each.
fn side_by_side(
    long: &mut Session,
    young: &mut Session,
    long_cell: impl Fn(usize) -> String,
    young_cell: impl Fn(usize) -> String,
) -> Result<(Samples, Samples)> {
    let timed = |session: &mut Session, text: String| -> Result<Duration> {
        let start = Instant::now();
        let outcome = session.eval(&text);
        let elapsed = start.elapsed();
        check(&outcome, &text)?;
        Ok(elapsed)
    };
    let (mut long_times, mut young_times) = (Vec::new(), Vec::new());
    for block in (0..WINDOW).step_by(BLOCK) {
        for index in block..block + BLOCK {
            long_times.push(timed(long, long_cell(index))?);
        }
        for index in block..block + BLOCK {
            young_times.push(timed(young, young_cell(index))?);
        }
    }
    Ok((Samples::new(long_times), Samples::new(young_times)))
}

/// One cell of many `(add 1 2)` forms, in a fresh session: its wall time and resident growth.
fn many_forms() -> Result<()> {
    println!("== Long sessions: one cell of N top-level forms `(add 1 2)`, in a fresh session ==");
    let mut table = new_table(
        &["forms", "wall ms", "check+codegen ms", "optimise ms", "link ms", "run ms", "resident MB gained", "goal"],
        &[0, 1, 2, 3, 4, 5, 6],
    );
    for forms in FORMS {
        let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
        let text = "(add 1 2) ".repeat(forms);
        let before = resident_bytes();
        let start = Instant::now();
        let outcome = session.eval(&text);
        let elapsed = start.elapsed();
        check(&outcome, "(add 1 2) …")?;
        let gained = resident_bytes().saturating_sub(before);
        let goal =
            if forms == 8_000 { verdict(elapsed <= Duration::from_millis(200), "<= 200 ms") } else { "-".into() };
        let phase = |phases: &[Phase]| ms(phases.iter().map(|phase| outcome.timing.get(*phase)).sum());
        table.add_row(vec![
            forms.to_string(),
            ms(elapsed),
            phase(&[Phase::Check, Phase::Codegen]),
            phase(&[Phase::Optimise]),
            phase(&[Phase::Link]),
            phase(&[Phase::Run]),
            format!("{:.1}", gained as f64 / 1e6),
            goal,
        ]);
    }
    println!("{table}\n");
    Ok(())
}

fn verdict(met: bool, goal: &str) -> String {
    format!("{} {goal}", if met { "meets" } else { "misses" })
}

/// The process's resident set in bytes (0 where /proc is not there).
fn resident_bytes() -> usize {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|text| text.split_whitespace().nth(1).and_then(|pages| pages.parse::<usize>().ok()))
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * usize::try_from(page).unwrap_or(4096)
}
