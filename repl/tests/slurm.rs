//! `(autotune … (on slurm))` through the `quasi` binary against a real Slurm cluster (the test
//! command starts a single-node one: scripts/slurm-cluster): a task that fails leaves its
//! variants failed with what `srun` said, Ctrl-C cancels the step at once, and without `srun`
//! the autotune is an error — the session going on after each. The tests that need a cluster
//! skip, saying why, when `sinfo` finds none.

mod common;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

/// One test at a time: each looks at the whole queue.
static CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The generator and data every test tunes over.
const SESSION: &str = r#"(rhai "fn gen_nap(f) { quote(`(define ((nap int) (n int)) (call usleep (mul n ,f)) (ret ,f))`, #{ f: f }) }")
(define ((usleep int) (us int)))
"#;

/// `quasi` reading cells from a pipe, with `environment` set.
fn quasi(environment: &[(&str, &str)]) -> (std::process::Child, std::process::ChildStdin) {
    let tune_cache = tempfile::tempdir().expect("a temporary directory").keep();
    let mut all: Vec<(&str, &std::ffi::OsStr)> =
        vec![("QUASI_SERVER", "0".as_ref()), ("QUASI_TUNE_CACHE", tune_cache.as_os_str())];
    all.extend(environment.iter().map(|(name, value)| (*name, value.as_ref())));
    common::quasi_reading_cells(&all)
}

/// Everything `quasi` printed for `cells` (stdin closed after them).
fn run(environment: &[(&str, &str)], cells: &str) -> String {
    let (child, mut stdin) = quasi(environment);
    stdin.write_all(cells.as_bytes()).expect("cells written");
    common::output_at_end(child, stdin)
}

/// A task whose binary fails: each of its variants is failed with what `srun` said, NAME stays
/// as it was, and the session goes on. And with no `srun` at all, `error[io]`.
#[test]
fn a_failed_task_leaves_its_variants_failed() {
    let _cluster = CLUSTER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let cells = format!(
        "{SESSION},(gen_nap 1)\n(autotune nap (gen gen_nap f) (params (f 1 2)) (run (call nap 1)) (on slurm))\n(call nap 0)\n"
    );
    let output = run(&[("PATH", "/nonexistent")], &cells);
    assert!(
        output.contains(
            "error[io]: cannot tune on Slurm: cannot run srun: it is not on the PATH (`on slurm` needs Slurm's client)"
        ),
        "{output}"
    );
    assert!(output.ends_with("1 : int\n"), "{output}");
    if let Some(reason) = quasi_lang::tools::missing_slurm() {
        eprintln!("skipped the rest: {reason}");
        return;
    }
    let output = run(&[("QUASI_SLURM_BINARY", "/bin/false")], &cells);
    assert!(output.contains("autotune nap: 2 variants, 0 ok (2 timed, 0 cached); on slurm (nodes 1): "), "{output}");
    assert_eq!(output.matches("ended before timing it (srun exited with status 1").count(), 2, "{output}");
    assert!(output.contains("error[type]: no variant of `nap` compiled, ran and passed its check"), "{output}");
    assert!(output.ends_with("1 : int\n"), "the first definition stays: {output}");
}

/// Ctrl-C while a node times a variant that sleeps 30 s: the autotune stops at once with
/// `error[interrupted]`, the Slurm step is cancelled (no job of it is left in the queue), and
/// the session answers the next cell.
#[test]
fn an_interrupt_cancels_the_slurm_step() {
    let _cluster = CLUSTER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(reason) = quasi_lang::tools::missing_slurm() {
        eprintln!("skipped: {reason}");
        return;
    }
    let (child, mut stdin) = quasi(&[]);
    let cells = format!(
        "{SESSION},(gen_nap 1)\n(autotune nap (gen gen_nap f) (params (f 1 2)) (run (call nap 30000000)) (on slurm))\n"
    );
    stdin.write_all(cells.as_bytes()).expect("cells written");
    // Until the step runs on the node.
    let started = Instant::now();
    while !queued().iter().any(|name| name.starts_with("quasi-tune-")) {
        assert!(started.elapsed() < Duration::from_secs(60), "no Slurm step started");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let interrupted = Instant::now();
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(killed.success());
    stdin.write_all(b"(add 1 2)\n").expect("a cell written");
    let output = common::output_at_end(child, stdin);
    assert!(interrupted.elapsed() < Duration::from_secs(20), "the interrupt waited for the variant: {output}");
    assert!(output.contains("error[interrupted]: interrupted while Slurm timed the variants"), "{output}");
    assert!(output.ends_with("3 : int\n"), "{output}");
    // scancel returns before the job has left the queue (it is completing): it goes within seconds.
    let cancelled = Instant::now();
    let mut left: Vec<String> = Vec::new();
    while cancelled.elapsed() < Duration::from_secs(20) {
        left = queued().into_iter().filter(|name| name.starts_with("quasi-tune-")).collect();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(left, Vec::<String>::new(), "the step was not cancelled");
}

/// The names of the jobs in Slurm's queue.
fn queued() -> Vec<String> {
    let output = Command::new("squeue").args(["--noheader", "--format=%j"]).output().expect("squeue runs");
    String::from_utf8_lossy(&output.stdout).lines().map(str::to_string).collect()
}
