//! Round trip of a trivial cell through the kernel against the session engine called directly,
//! in one run, as a table (`cargo bench -p quasi-kernel --bench roundtrip [-- ITERATIONS]`).
//!
//! Rows: `Session::eval` in this process (what the kernel does on its session thread); an
//! `execute_request` to its `execute_reply`, and to its `idle` status (when a notebook
//! considers the cell done); a `kernel_info_request` (the transport alone, no session). The
//! kernel's cost is the difference between the first two. Times are printed, never asserted.

#[path = "../tests/client/mod.rs"]
mod client;

use std::time::{Duration, Instant};

use client::Kernel;
use comfy_table::{presets, CellAlignment, Table};
use jupyter_protocol::{ExecuteRequest, KernelInfoRequest};
use quasi_lang::{Session, SessionConfig};

const CELL: &str = "(add 1 2)";
const WARMUP: usize = 50;

fn main() -> anyhow::Result<()> {
    let iterations: usize = std::env::args().skip(1).find_map(|arg| arg.parse().ok()).unwrap_or(500);
    let direct = direct(iterations)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (reply, idle, info) = runtime.block_on(through_kernel(iterations))?;

    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED);
    table.set_header(vec!["`(add 1 2)`", "median", "p90", "min", "added (median)"]);
    let base = median(&direct);
    for (name, times) in [("Session::eval, in process", &direct), ("kernel: execute -> execute_reply", &reply), ("kernel: execute -> idle", &idle), ("kernel: kernel_info -> reply", &info)] {
        let added = if std::ptr::eq(times, &direct) || std::ptr::eq(times, &info) { "".to_string() } else { micros(median(times).saturating_sub(base)) };
        table.add_row(vec![name.to_string(), micros(median(times)), micros(percentile(times, 0.9)), micros(times.iter().copied().min().unwrap_or_default()), added]);
    }
    for column in 1..5 {
        if let Some(column) = table.column_mut(column) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    println!("{iterations} iterations after {WARMUP} warm-up, loopback TCP, one kernel process\n{table}");
    Ok(())
}

fn direct(iterations: usize) -> anyhow::Result<Vec<Duration>> {
    // The kernel's own configuration: output captured.
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
    for _ in 0..WARMUP {
        session.eval(CELL);
    }
    Ok((0..iterations)
        .map(|_| {
            let started = Instant::now();
            let outcome = session.eval(CELL);
            let elapsed = started.elapsed();
            assert!(!outcome.failed());
            elapsed
        })
        .collect())
}

async fn through_kernel(iterations: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, Vec<Duration>)> {
    let executable = env!("CARGO_BIN_EXE_quasi-kernel");
    let mut kernel = Kernel::start(executable).await?;
    for _ in 0..WARMUP {
        let msg_id = kernel.send(ExecuteRequest::new(CELL.to_string())).await?;
        kernel.reply_to(&msg_id).await?;
        kernel.idle_after(&msg_id).await?;
    }
    let (mut reply, mut idle, mut info) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..iterations {
        let started = Instant::now();
        let msg_id = kernel.send(ExecuteRequest::new(CELL.to_string())).await?;
        kernel.reply_to(&msg_id).await?;
        reply.push(started.elapsed());
        kernel.idle_after(&msg_id).await?;
        idle.push(started.elapsed());
    }
    for _ in 0..iterations {
        let started = Instant::now();
        let msg_id = kernel.send(KernelInfoRequest {}).await?;
        kernel.reply_to(&msg_id).await?;
        info.push(started.elapsed());
        kernel.idle_after(&msg_id).await?;
    }
    Ok((reply, idle, info))
}

fn median(times: &[Duration]) -> Duration {
    percentile(times, 0.5)
}

fn percentile(times: &[Duration], fraction: f64) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted.get(((sorted.len() as f64 - 1.0) * fraction).round() as usize).copied().unwrap_or_default()
}

fn micros(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}
