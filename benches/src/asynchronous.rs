//! Asynchronous device work in the simulator (docs/language.md §7.8), through one `Session` as a
//! user's cells would run it: what `encode-call` + `submit` + `await` costs over a plain `launch`
//! of an empty kernel (`(bench …)` medians); whether two submissions of a kernel that takes T
//! alone, and a host loop of T beside a submission of T, really overlap (each cell's `run`
//! phase, medians of `--reps` runs, T ≈ 50 ms); and how soon an interrupt stops a cell waiting
//! in `await` (from the interrupt to the cell's return). Every result is checked before it
//! counts: the kernels and the host loop compute the same hash sums.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quasi_lang::{Phase, Session};

use crate::stats::{ms, Samples};
use crate::{bench_median, eval, new_table, value_of, Options};

/// The bench's definitions, one cell each. `spin` and `spin-host` sum `mix` over 0..n (a hash
/// loop the compiler cannot shortcut); `gate` runs until the host writes 1 to `flag` (checked:
/// unchecked, the compiler may hoist its load out of the loop).
const SETUP: [&str; 14] = [
    ":opt 3",
    "(define-inline ((mix int) (x int))
       (declare r int)
       (for ((set r 0) (lt r 32) (set r (add r 1))) (set x (mul (xor x (lshr x 7)) 747796405)))
       (ret x))",
    "(define-kernel ((spin void) (out (ptr int)) (n int))
       (declare i int) (declare s int)
       (for ((set i 0) (lt i n) (set i (add i 1))) (set s (add s (call mix i))))
       (store out s))",
    "(define ((spin-host int) (n int))
       (declare i int) (declare s int)
       (for ((set i 0) (lt i n) (set i (add i 1))) (set s (add s (call mix i))))
       (ret s))",
    "(define-kernel ((empty void) (out (ptr int))) (ret))",
    "(define-kernel ((gate void) (flag (ptr int))) (while (eq (atomic-add flag 0) 0)))",
    "(define-global (x (gpu-buf int))) (define-global (y (gpu-buf int))) (define-global (flag (gpu-buf int)))
     (define-global (go (ptr int))) (define-global (held fence))",
    "(set x (gpu-alloc int 1)) (set y (gpu-alloc int 1)) (set flag (gpu-alloc int 1))
     (set go (host-alloc int 1)) (store go 1)",
    "(define ((launch-empty void)) (launch empty (grid 1) (block 1) x))",
    "(define ((submit-empty void))
       (declare e encoder)
       (set e (encode-begin gpu))
       (encode-call e empty (grid 1) (block 1) x)
       (await (submit e)))",
    "(define ((one void) (n int))
       (declare e encoder)
       (set e (encode-begin gpu))
       (encode-call e spin (grid 1) (block 1) x n)
       (await (submit e)))",
    "(define ((two void) (n int))
       (declare e encoder) (declare g encoder) (declare fe fence) (declare fg fence)
       (set e (encode-begin gpu))
       (set g (encode-begin gpu))
       (encode-call e spin (grid 1) (block 1) x n)
       (encode-call g spin (grid 1) (block 1) y n)
       (set fe (submit e))
       (set fg (submit g))
       (await fe)
       (await fg))",
    "(define ((overlap int) (device int) (host int))
       (declare e encoder) (declare f fence) (declare s int)
       (set e (encode-begin gpu))
       (encode-call e spin (grid 1) (block 1) x device)
       (set f (submit e))
       (set s (call spin-host host))
       (await f)
       (ret s))",
    "(define ((hold void))
       (declare e encoder)
       (set e (encode-begin gpu))
       (encode-call e gate (grid 1) (block 1) flag)
       (set held (submit e)))",
];

/// The time one piece of the overlap rows should take alone.
const TARGET: Duration = Duration::from_millis(50);

fn session() -> Result<Session> {
    crate::sim_session(false, &SETUP)
}

/// `reps` runs of `cell` after one untimed: each run's `run` phase.
fn runs(session: &mut Session, cell: &str, reps: usize) -> Result<Samples> {
    eval(session, cell)?;
    let mut times = Vec::new();
    for _ in 0..reps {
        times.push(eval(session, cell)?.timing.get(Phase::Run));
    }
    Ok(Samples::new(times))
}

/// The value of `x` (or `y`) after a kernel, against the host's sum.
fn verify(session: &mut Session, buffer: &str, n: u64) -> Result<()> {
    let device = value_of(&eval(session, buffer)?)?;
    let host = value_of(&eval(session, &format!("(call spin-host {n})"))?)?;
    if device != format!("<gpu 1 × int> [{host}]") {
        bail!("`{buffer}` is {device} after `spin` over {n}, but the host's sum is {host}");
    }
    Ok(())
}

/// An `n` for which `cell` (with `N` in it) takes about `TARGET`.
fn calibrate(session: &mut Session, cell: &str) -> Result<u64> {
    let mut n: u64 = 1 << 16;
    loop {
        let time = eval(session, &cell.replace('N', &n.to_string()))?.timing.get(Phase::Run);
        if time >= TARGET / 4 || n >= 1 << 31 {
            let scaled = n as f64 * TARGET.as_secs_f64() / time.as_secs_f64().max(1e-9);
            return Ok(scaled.clamp(1.0, i32::MAX as f64) as u64);
        }
        n *= 4;
    }
}

/// From an interrupt to the return of a cell that waits in `await` for a submission that runs
/// until released; then the submission is released and awaited.
fn interrupt_latency(session: &mut Session, reps: usize) -> Result<Samples> {
    // Checked: each load of the flag goes through the runtime, so the loop sees the release.
    eval(session, ":gpu sim")?;
    let mut latencies = Vec::new();
    for _ in 0..reps {
        eval(session, "(call hold)")?;
        let interrupt = session.interrupt_handle();
        let sent = std::sync::Arc::new(std::sync::Mutex::new(None::<Instant>));
        let timer = {
            let sent = std::sync::Arc::clone(&sent);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                *sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
                interrupt.interrupt();
            })
        };
        let outcome = session.eval("(await held)");
        let returned = Instant::now();
        timer.join().map_err(|_| anyhow::anyhow!("the interrupting thread panicked"))?;
        let message = outcome.diagnostics.first().map(|diagnostic| diagnostic.message.clone()).unwrap_or_default();
        if !message.starts_with("interrupted") {
            bail!("`(await held)` was not interrupted: {message:?}");
        }
        let sent = sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).context("no interrupt was sent")?;
        latencies.push(returned.duration_since(sent));
        eval(session, "(gpu-copy flag go 1)")?;
        eval(session, "(await held)")?;
        eval(session, "(gpu-free flag) (set flag (gpu-alloc int 1))")?;
    }
    eval(session, ":gpu sim unchecked")?;
    Ok(Samples::new(latencies))
}

pub fn run(options: &Options) -> Result<()> {
    println!("== Asynchronous device work in the simulator (:gpu sim unchecked): encode, submit, await ==");
    let mut session = session()?;
    let reps = options.reps;
    // Overhead: an empty kernel launched, against the same kernel encoded, submitted, awaited.
    let launch = bench_median(&mut session, "(bench (call launch-empty))")?;
    let submit = bench_median(&mut session, "(bench (call submit-empty))")?;
    // Overlap: T for a submission of `spin` and for the host loop, each alone, then together.
    let device_n = calibrate(&mut session, "(call one N)")?;
    let host_n = calibrate(&mut session, "(call spin-host N)")?;
    let one = runs(&mut session, &format!("(call one {device_n})"), reps)?;
    verify(&mut session, "x", device_n)?;
    let two = runs(&mut session, &format!("(call two {device_n})"), reps)?;
    verify(&mut session, "y", device_n)?;
    let host = runs(&mut session, &format!("(call spin-host {host_n})"), reps)?;
    let both = runs(&mut session, &format!("(call overlap {device_n} {host_n})"), reps)?;
    verify(&mut session, "x", device_n)?;
    let latency = interrupt_latency(&mut session, reps)?;

    let mut table = new_table(&["what", "median ms", "best ms", "against", "ratio", "goal"], &[1, 2, 4]);
    let us = |duration: Duration| format!("{:.1} µs", duration.as_secs_f64() * 1e6);
    table.add_row(vec!["empty kernel: launch".to_string(), ms(launch), "-".into(), us(launch), "-".into(), "-".into()]);
    table.add_row(vec![
        "empty kernel: encode-call + submit + await".to_string(),
        ms(submit),
        "-".into(),
        format!("launch, +{}", us(submit.saturating_sub(launch))),
        format!("{:.2}×", submit.as_secs_f64() / launch.as_secs_f64().max(1e-12)),
        "≤ +20 µs".into(),
    ]);
    let ratio = |a: Duration, b: Duration| format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64().max(1e-12));
    table.add_row(vec![
        format!("one submission of spin over {device_n} (T)"),
        ms(one.median()),
        ms(one.best()),
        "-".into(),
        "-".into(),
        "-".into(),
    ]);
    table.add_row(vec![
        "two submissions of it, awaited together".to_string(),
        ms(two.median()),
        ms(two.best()),
        "T".into(),
        ratio(two.median(), one.median()),
        "≤ 1.3×".into(),
    ]);
    table.add_row(vec![
        format!("host loop over {host_n} alone (T')"),
        ms(host.median()),
        ms(host.best()),
        "-".into(),
        "-".into(),
        "-".into(),
    ]);
    let slower = one.median().max(host.median());
    table.add_row(vec![
        "the host loop beside one submission".to_string(),
        ms(both.median()),
        ms(both.best()),
        "max(T, T')".into(),
        ratio(both.median(), slower),
        "≤ 1.3×".into(),
    ]);
    table.add_row(vec![
        "an interrupt stops a cell waiting in await".to_string(),
        ms(latency.median()),
        ms(latency.best()),
        format!("worst {} ms", ms(latency.percentile(100.0))),
        "-".into(),
        "≤ 100 ms".into(),
    ]);
    println!("{table}");
    println!(
        "(medians of {reps} runs, each after one untimed; bench medians for the empty kernel; {} device workers)\n",
        std::thread::available_parallelism().map_or(2, usize::from).max(2)
    );
    Ok(())
}
