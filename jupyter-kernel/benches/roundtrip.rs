//! Round trip of a trivial cell through the kernel against the session engine called directly,
//! in one run, as a table (`cargo bench -p quasi-kernel --bench roundtrip [-- ITERATIONS]`).
//!
//! Rows: `Session::eval` in this process (what the kernel does on its session thread); an
//! `execute_request` to its `execute_reply`, and to its `idle` status (when a notebook
//! considers the cell done); a `kernel_info_request` (the transport alone, no session); and a
//! definition of a fresh function and a call cell, through the kernel (to `idle`) and in process
//! at the default (tiered) setting, as users meet them (issue 32). Direct and kernel runs
//! alternate, so a busy machine slows both alike; "added" is the median of the per-iteration
//! differences. Times are printed, never asserted.

#[path = "../tests/client/mod.rs"]
mod client;

use std::time::{Duration, Instant};

use client::Kernel;
use comfy_table::{presets, CellAlignment, Table};
use jupyter_protocol::{ExecuteRequest, KernelInfoRequest};
use quasi_lang::{Session, SessionConfig};

const CELL: &str = "(add 1 2)";
const WARMUP: usize = 50;

#[derive(Default)]
struct Samples {
    direct: Vec<Duration>,
    reply: Vec<Duration>,
    idle: Vec<Duration>,
    info: Vec<Duration>,
    define_direct: Vec<Duration>,
    define_idle: Vec<Duration>,
    call_direct: Vec<Duration>,
    call_idle: Vec<Duration>,
}

fn main() -> anyhow::Result<()> {
    let iterations: usize = std::env::args().skip(1).find_map(|arg| arg.parse().ok()).unwrap_or(500);
    // The kernel's own configuration: output captured.
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let samples = runtime.block_on(measure(&mut session, iterations))?;

    let mut table = Table::new();
    table.load_style(presets::ASCII_MARKDOWN);
    table.set_header(vec!["`(add 1 2)`", "median", "p90", "min", "added (median of differences)"]);
    // Name, samples, and the samples it adds to.
    type Row<'a> = (&'a str, &'a [Duration], Option<&'a [Duration]>);
    let rows: [Row; 8] = [
        ("Session::eval, in process", &samples.direct, None),
        ("kernel: execute -> execute_reply", &samples.reply, Some(&samples.direct)),
        ("kernel: execute -> idle", &samples.idle, Some(&samples.direct)),
        ("kernel: kernel_info -> reply", &samples.info, None),
        ("`(define ((sqN int) (x int)) …)`, N fresh: Session::eval", &samples.define_direct, None),
        ("the same definition: kernel, execute -> idle", &samples.define_idle, Some(&samples.define_direct)),
        ("`(call sq0 7)`, call cell: Session::eval", &samples.call_direct, None),
        ("the same call cell: kernel, execute -> idle", &samples.call_idle, Some(&samples.call_direct)),
    ];
    for (name, times, base) in rows {
        let added = base.map(|base| {
            let differences: Vec<i128> = times
                .iter()
                .zip(base)
                .map(|(kernel, direct)| kernel.as_nanos() as i128 - direct.as_nanos() as i128)
                .collect();
            format!("{:.0} µs", median_of(differences) as f64 / 1e3)
        });
        table.add_row(vec![
            name.to_string(),
            micros(percentile(times, 0.5)),
            micros(percentile(times, 0.9)),
            micros(times.iter().copied().min().unwrap_or_default()),
            added.unwrap_or_default(),
        ]);
    }
    for column in 1..5 {
        if let Some(column) = table.column_mut(column) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    println!("{iterations} iterations after {WARMUP} warm-up; loopback TCP; the kernel in its own process\n{table}");
    Ok(())
}

async fn measure(session: &mut Session, iterations: usize) -> anyhow::Result<Samples> {
    let mut kernel = Kernel::start(env!("CARGO_BIN_EXE_quasi-kernel")).await?;
    let mut samples = Samples::default();
    for iteration in 0..WARMUP + iterations {
        let started = Instant::now();
        let outcome = session.eval(CELL);
        let direct = started.elapsed();
        anyhow::ensure!(!outcome.failed(), "the cell failed in process");

        let started = Instant::now();
        let msg_id = kernel.send(ExecuteRequest::new(CELL.to_string())).await?;
        within("execute_reply", kernel.reply_to(&msg_id)).await?;
        let reply = started.elapsed();
        within("idle after execute", kernel.idle_after(&msg_id)).await?;
        let idle = started.elapsed();

        let started = Instant::now();
        let msg_id = kernel.send(KernelInfoRequest {}).await?;
        within("kernel_info_reply", kernel.reply_to(&msg_id)).await?;
        let info = started.elapsed();
        within("idle after kernel_info", kernel.idle_after(&msg_id)).await?;

        // A definition of a fresh function, and a call cell, each in process and through the
        // kernel (the two sessions define the same names).
        let definition = format!("(define ((sq{iteration} int) (x int)) (ret (mul x x)))");
        let started = Instant::now();
        anyhow::ensure!(!session.eval(&definition).failed(), "the definition failed in process");
        let define_direct = started.elapsed();
        let started = Instant::now();
        let msg_id = kernel.send(ExecuteRequest::new(definition)).await?;
        let shown = within("idle after a definition", kernel.idle_after(&msg_id)).await?;
        let define_idle = started.elapsed();
        anyhow::ensure!(!shown.iter().any(failed), "the definition failed in the kernel");
        let started = Instant::now();
        anyhow::ensure!(!session.eval("(call sq0 7)").failed(), "the call failed in process");
        let call_direct = started.elapsed();
        let started = Instant::now();
        let msg_id = kernel.send(ExecuteRequest::new("(call sq0 7)".to_string())).await?;
        let shown = within("idle after a call", kernel.idle_after(&msg_id)).await?;
        let call_idle = started.elapsed();
        anyhow::ensure!(!shown.iter().any(failed), "the call failed in the kernel");

        if iteration >= WARMUP {
            samples.define_direct.push(define_direct);
            samples.define_idle.push(define_idle);
            samples.call_direct.push(call_direct);
            samples.call_idle.push(call_idle);
            samples.direct.push(direct);
            samples.reply.push(reply);
            samples.idle.push(idle);
            samples.info.push(info);
        }
    }
    Ok(samples)
}

/// Whether an iopub message is a cell's error.
fn failed(message: &jupyter_protocol::JupyterMessage) -> bool {
    matches!(message.content, jupyter_protocol::JupyterMessageContent::ErrorOutput(_))
}

/// Every wait has a limit, so a lost message ends the bench with an error instead of a hang.
async fn within<T>(what: &str, work: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    match tokio::time::timeout(client::TIMEOUT, work).await {
        Ok(result) => result,
        Err(_) => anyhow::bail!("timed out waiting for {what}"),
    }
}

fn percentile(times: &[Duration], fraction: f64) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted.get(((sorted.len() as f64 - 1.0) * fraction).round() as usize).copied().unwrap_or_default()
}

fn median_of(mut values: Vec<i128>) -> i128 {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn micros(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}
