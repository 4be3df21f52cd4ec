//! The simulator inside a session: interrupts and faults leave a launch from inside compiled
//! code (on a fiber when the kernel has barriers), and the next launch still works; a rebuilt
//! kernel gives its old code back. Submissions (docs/language.md §7.8): an interrupt stops an
//! `await`, not the submission; a reset stops a submission that never ends; a fault on a device
//! worker surfaces at `await` and the worker goes on.

use std::time::Duration;

use crate::{Outcome, Session, SessionConfig};

fn session() -> Session {
    // Not capturing output: a capture is of the process's file descriptors, and the session
    // tests beside these capture theirs.
    let config = SessionConfig {
        capture_output: false,
        load_prelude: false,
        gpu: Some(crate::GpuMode::Sim { check: true }),
        ..SessionConfig::default()
    };
    Session::new(config).expect("a session starts")
}

fn ok(session: &mut Session, cell: &str) -> Outcome {
    let outcome = session.eval(cell);
    assert!(!outcome.failed(), "`{cell}` failed: {:?}", outcome.diagnostics);
    outcome
}

fn value(session: &mut Session, cell: &str) -> String {
    let outcome = ok(session, cell);
    outcome
        .items
        .iter()
        .filter_map(|item| match item {
            crate::Item::Value { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cell`, interrupting it after 200 ms; returns the first diagnostic's message.
fn interrupted(session: &mut Session, cell: &str) -> String {
    let interrupt = session.interrupt_handle();
    let timer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        interrupt.interrupt();
    });
    let outcome = session.eval(cell);
    timer.join().expect("the timer thread");
    outcome.diagnostics.first().map(|diagnostic| diagnostic.message.clone()).unwrap_or_default()
}

const SUM: &str = "(define-shared part (64 int))
(define-kernel ((block-sum void) (out (ptr int) out 1))
  (store (aptradd part (tid.x)) (tid.x))
  (syncthreads)
  (if (eq (tid.x) 0)
    (store out (add (load (aptradd part 63)) (load (aptradd part 1))))))
(define-global (result int))";

#[test]
fn an_interrupted_launch_leaves_the_simulator_ready() {
    let mut session = session();
    ok(&mut session, SUM);
    ok(&mut session, "(define-kernel ((spin void) (n int)) (while (gt n 0) (set n (add n 1))))");
    ok(&mut session, "(define-kernel ((spin-at-barrier void)) (while #t (syncthreads)))");
    // Without barriers the threads run on one fiber; with them, on a fiber each.
    for spinner in ["(launch spin (grid 2) (block 32) 1)", "(launch spin-at-barrier (grid 1) (block 64))"] {
        let message = interrupted(&mut session, spinner);
        assert!(message.starts_with("interrupted"), "{spinner}: {message}");
        ok(&mut session, "(launch block-sum (grid 1) (block 64) (ptr-to result))");
        assert_eq!(value(&mut session, "result"), "64", "after {spinner}");
    }
    // A session whose last launch was interrupted at a barrier ends (or resets) cleanly: the
    // fibers left suspended there are reset, not unwound.
    assert!(interrupted(&mut session, "(launch spin-at-barrier (grid 1) (block 64))").starts_with("interrupted"));
    ok(&mut session, ":reset");
    assert!(interrupted(
        &mut session,
        "(define-kernel ((s void)) (while #t (syncthreads))) (launch s (grid 1) (block 8))"
    )
    .starts_with("interrupted"));
    drop(session);
}

#[test]
fn a_fault_inside_a_fiber_leaves_the_simulator_ready() {
    let mut session = session();
    ok(&mut session, SUM);
    ok(&mut session, ":gpu sim unchecked");
    ok(&mut session, "(define-kernel ((wild void) (p (ptr int (addrspace 1)))) (syncthreads) (store p 1))");
    let outcome = session.eval("(launch wild (grid 1) (block 64) (inttoptr 8 (ptr int (addrspace 1))))");
    let message = outcome.diagnostics.first().map(|diagnostic| diagnostic.message.clone()).unwrap_or_default();
    assert!(message.starts_with("segmentation fault in function `wild`"), "{message}");
    ok(&mut session, "(launch block-sum (grid 1) (block 64) (ptr-to result))");
    assert_eq!(value(&mut session, "result"), "64");
}

#[test]
fn a_rebuilt_kernel_gives_its_old_code_back() {
    let mut session = session();
    ok(&mut session, SUM);
    ok(&mut session, "(launch block-sum (grid 1) (block 64) (ptr-to result))");
    let in_use = session.code_in_use();
    for n in 2..12 {
        ok(
            &mut session,
            &format!(
                "(define-kernel ((block-sum void) (out (ptr int) out 1))
                   (store (aptradd part (tid.x)) (mul (tid.x) {n}))
                   (syncthreads)
                   (if (eq (tid.x) 0) (store out (load (aptradd part 63)))))"
            ),
        );
        ok(&mut session, "(launch block-sum (grid 1) (block 64) (ptr-to result))");
        assert_eq!(value(&mut session, "result"), format!("{}", 63 * n));
    }
    assert!(session.code_in_use() <= in_use + 4096, "{} > {in_use}", session.code_in_use());
}

/// A kernel that spins until the host writes 1 to its flag, and a submission of it.
const GATE: &str = "(define-kernel ((gate void) (flag (ptr int))) (while (eq (atomic-add flag 0) 0)))
(define-global (flag (gpu-buf int)))
(define-global (go (ptr int)))
(define-global (e encoder))
(define-global (f fence))
(set flag (gpu-alloc int 1))
(set go (host-alloc int 1))
(store go 1)
(set e (encode-begin gpu))
(encode-call e gate (grid 1) (block 1) flag)
(set f (submit e))";

#[test]
fn an_interrupt_stops_an_await_and_the_submission_runs_on() {
    let mut session = session();
    ok(&mut session, GATE);
    let message = interrupted(&mut session, "(await f)");
    assert!(message.starts_with("interrupted"), "{message}");
    assert_eq!(value(&mut session, "(fence-done f)"), "#f", "the submission still runs");
    ok(&mut session, "(gpu-copy flag go 1)");
    ok(&mut session, "(await f)");
    assert_eq!(value(&mut session, "(fence-done f)"), "#t");
}

#[test]
fn a_reset_stops_a_submission_that_never_ends() {
    let mut session = session();
    ok(&mut session, GATE);
    // Without the stop, the reset would wait for the gate for ever (and the old session's code
    // would be freed under it).
    ok(&mut session, ":reset");
    ok(&mut session, GATE);
    drop(session);
}

#[test]
fn a_fault_on_a_device_worker_surfaces_at_await_and_the_worker_goes_on() {
    let mut session = session();
    ok(&mut session, ":gpu sim unchecked");
    ok(&mut session, "(define-kernel ((wild void) (p (ptr int (addrspace 1)))) (store p 1))");
    ok(&mut session, "(define-kernel ((seven void) (p (ptr int))) (store p 7))");
    ok(&mut session, "(define-global (e encoder)) (define-global (f fence)) (define-global (b (gpu-buf int)))");
    // More faults than there are workers: each worker survives its fault.
    for _ in 0..4 {
        ok(&mut session, "(set e (encode-begin gpu))");
        ok(&mut session, "(encode-call e wild (grid 1) (block 1) (inttoptr 8 (ptr int (addrspace 1))))");
        ok(&mut session, "(set f (submit e))");
        let outcome = session.eval("(await f)");
        let message = outcome.diagnostics.first().map(|diagnostic| diagnostic.message.clone()).unwrap_or_default();
        assert!(message.contains("segmentation fault in kernel `wild`: write to address 0x8"), "{message}");
    }
    ok(&mut session, "(set b (gpu-alloc int 1))");
    ok(&mut session, "(set e (encode-begin gpu))");
    ok(&mut session, "(encode-call e seven (grid 1) (block 1) b)");
    ok(&mut session, "(await (submit e))");
    assert_eq!(value(&mut session, "b"), "<gpu 1 × int> [7]");
}

const TWO_SUBMISSIONS: &str = "(define-kernel ((count void) (a (ptr int)) (n int))
  (declare i int)
  (for ((set i 0) (lt i n) (set i (add i 1))) (store a (add (load a) 1))))
(define-global (x (gpu-buf int)))
(define-global (y (gpu-buf int)))
(set x (gpu-alloc int 1))
(set y (gpu-alloc int 1))
(define ((both void))
  (declare ex encoder) (declare ey encoder) (declare fx fence) (declare fy fence)
  (set ex (encode-begin gpu))
  (set ey (encode-begin gpu))
  (encode-call ex count (grid 1) (block 1) x 1000)
  (encode-call ey count (grid 1) (block 1) y 2000)
  (set fx (submit ex))
  (set fy (submit ey))
  (await fx)
  (await fy))";

#[test]
fn a_timeline_has_a_lane_per_submission_inside_the_cell() {
    let mut session = session();
    ok(&mut session, TWO_SUBMISSIONS);
    ok(&mut session, "(call both)");
    let outcome = ok(&mut session, ":timeline");
    let Some(crate::Item::Timeline(timeline)) = outcome.items.first() else { panic!("{:?}", outcome.items) };
    use crate::timing::Lane;
    assert_eq!(timeline.lanes(), [Lane::Host, Lane::Submission(1), Lane::Submission(2)]);
    let labels = |lane: Lane| -> Vec<&str> {
        timeline.spans.iter().filter(|span| span.lane == lane).map(|span| span.label.as_str()).collect()
    };
    assert_eq!(labels(Lane::Host), ["code", "submit", "submit", "await", "await"]);
    assert_eq!(labels(Lane::Submission(1)), ["kernel count"]);
    assert_eq!(labels(Lane::Submission(2)), ["kernel count"]);
    // Every span lies in the host code's span, which starts the timeline.
    let code = &timeline.spans[0];
    assert_eq!(code.start, Duration::ZERO);
    for span in &timeline.spans {
        assert!(span.end() <= code.end() && span.end() <= timeline.length, "{span:?} outside {code:?}");
    }
    assert_eq!(value(&mut session, "x"), "<gpu 1 × int> [1000]");
    assert_eq!(value(&mut session, "y"), "<gpu 1 × int> [2000]");
}

#[test]
fn the_trace_is_chrome_trace_event_json_with_a_thread_per_lane() {
    let mut session = session();
    ok(&mut session, TWO_SUBMISSIONS);
    ok(&mut session, "(call both)");
    let path = std::env::temp_dir().join(format!("quasi-trace-{}.json", std::process::id()));
    let outcome = ok(&mut session, &format!(":trace {}", path.display()));
    let text = std::fs::read_to_string(&path).expect("the trace was written");
    std::fs::remove_file(&path).ok();
    let document: serde_json::Value = serde_json::from_str(&text).expect("the trace is JSON");
    let events = document["traceEvents"].as_array().expect("a traceEvents array");
    let named = |tid: u64| {
        events
            .iter()
            .find(|event| event["ph"] == "M" && event["name"] == "thread_name" && event["tid"] == tid)
            .and_then(|event| event["args"]["name"].as_str())
            .map(str::to_string)
    };
    assert_eq!(named(0).as_deref(), Some("host"));
    assert_eq!(named(1).as_deref(), Some("submission 1"));
    assert_eq!(named(2).as_deref(), Some("submission 2"));
    let complete: Vec<&serde_json::Value> = events.iter().filter(|event| event["ph"] == "X").collect();
    for event in &complete {
        assert_eq!(event["pid"], 1);
        assert!(event["ts"].as_f64().is_some_and(|ts| ts >= 0.0), "{event}");
        assert!(event["dur"].as_f64().is_some_and(|dur| dur >= 0.0), "{event}");
    }
    let mut kernels: Vec<u64> = complete
        .iter()
        .filter(|event| event["name"] == "kernel count")
        .filter_map(|event| event["tid"].as_u64())
        .collect();
    kernels.sort_unstable();
    assert_eq!(kernels, [1, 2], "each kernel on its submission's thread");
    // Each cell's code is a span on the host's thread, named after the cell.
    assert!(complete
        .iter()
        .any(|event| event["tid"] == 0 && event["name"].as_str().is_some_and(|name| name.starts_with("cell "))));
    let wrote = format!("wrote {} events", complete.len());
    assert!(
        matches!(outcome.items.first(), Some(crate::Item::Message(text)) if text.starts_with(&wrote)),
        "{:?}",
        outcome.items
    );
    // The trace starts over.
    let path = std::env::temp_dir().join(format!("quasi-trace-again-{}.json", std::process::id()));
    let outcome = ok(&mut session, &format!(":trace {}", path.display()));
    std::fs::remove_file(&path).ok();
    assert!(matches!(outcome.items.first(), Some(crate::Item::Message(text)) if text.starts_with("wrote 0 events")));
}
