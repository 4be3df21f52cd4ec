//! Long sessions: whether a session stays fast and small as cells pile up. Resident memory
//! retained per definition cell and per expression cell after 10,000 of each, cell latency near
//! cell 100 against near cell 10,000, and the time of one cell of many top-level forms.
//!
//! Memory is the process's resident set (`/proc/self/statm`), read before and after a run of
//! cells: what the session keeps, plus what the allocator does not give back.

use std::time::{Duration, Instant};

use anyhow::Result;
use quasi_lang::{Phase, Session, SessionConfig};

use crate::stats::{ms, Samples};
use crate::{check, new_table, Options};

/// Cells of each kind in the long session.
const CELLS: usize = 10_000;
/// The window, in cells, whose median is "the latency at cell N".
const WINDOW: usize = 100;
/// Top-level forms in the one-cell rows.
const FORMS: [usize; 2] = [4_000, 8_000];

/// The latency and memory of one run of cells of a kind.
struct Run {
    /// Cells CELLS/100 - WINDOW/2 .. CELLS/100 + WINDOW/2, around cell 100.
    early: Samples,
    /// The last WINDOW cells, up to cell CELLS.
    late: Samples,
    /// Resident bytes gained from cell 100 to cell CELLS, per cell.
    bytes_per_cell: f64,
}

pub fn run(_options: &Options) -> Result<()> {
    println!("== Long sessions: {CELLS} definition cells, then {CELLS} expression cells, in one session ==");
    println!(
        "Resident set growth from cell 100 to cell {CELLS} of each kind, per cell; the p50 of the {WINDOW} cells\n\
         around cell 100 against the p50 of the last {WINDOW}. The session captures output as the REPL does.\n"
    );
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
    let definitions =
        measure(&mut session, |index| format!("(define ((f{index} int) (x int)) (ret (add x {index})))"))?;
    let expressions = measure(&mut session, |index| format!("(call f{index} 2)"))?;
    let mut table = new_table(
        &["cells", "retained bytes / cell", "goal", "p50 ms near cell 100", "p50 ms at cell 10,000", "ratio", "goal"],
        &[1, 3, 4, 5],
    );
    for (name, run, goal) in
        [("definitions (define ((fN int) …))", &definitions, 4096.0), ("expressions (call fN 2)", &expressions, 1024.0)]
    {
        let ratio = run.late.median().as_secs_f64() / run.early.median().as_secs_f64().max(1e-9);
        table.add_row(vec![
            name.to_string(),
            format!("{:.0}", run.bytes_per_cell),
            verdict(run.bytes_per_cell <= goal, &format!("<= {goal:.0}")),
            ms(run.early.median()),
            ms(run.late.median()),
            format!("{ratio:.2}"),
            verdict(ratio <= 1.2, "<= 1.20"),
        ]);
    }
    println!("{table}\n");
    many_forms()
}

/// CELLS cells made by `cell` (given 0, 1, …), each checked to succeed.
fn measure(session: &mut Session, mut cell: impl FnMut(usize) -> String) -> Result<Run> {
    let early_window = 100 - WINDOW / 2..100 + WINDOW / 2;
    let (mut early, mut late) = (Vec::new(), Vec::new());
    let mut resident_at_100 = 0;
    for index in 0..CELLS {
        let text = cell(index);
        let start = Instant::now();
        let outcome = session.eval(&text);
        let elapsed = start.elapsed();
        check(&outcome, &text)?;
        if early_window.contains(&index) {
            early.push(elapsed);
        }
        if index >= CELLS - WINDOW {
            late.push(elapsed);
        }
        if index + 1 == 100 {
            resident_at_100 = resident_bytes();
        }
    }
    let gained = resident_bytes().saturating_sub(resident_at_100);
    Ok(Run {
        early: Samples::new(early),
        late: Samples::new(late),
        bytes_per_cell: gained as f64 / (CELLS - 100) as f64,
    })
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
