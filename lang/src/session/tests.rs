//! Long sessions: code that nothing can reach any more gives its memory back. A cell's
//! top-level code, run in one call: values stream while later items run, and an interrupt stops
//! the item that runs.

use std::time::{Duration, Instant};

use super::{Session, SessionConfig};
use crate::{Item, Outcome};

fn session() -> Session {
    let config = SessionConfig { capture_output: true, load_prelude: false, ..SessionConfig::default() };
    Session::new(config).expect("a session starts")
}

/// The value a cell gave, or its diagnostics.
fn value(session: &mut Session, cell: &str) -> String {
    let outcome = session.eval(cell);
    assert!(!outcome.failed(), "`{cell}` failed: {:?}", outcome.diagnostics);
    values_of(&outcome).join(" ")
}

#[test]
fn expression_cells_give_their_code_back() {
    let mut session = session();
    value(&mut session, "(define ((sq int) (x int)) (ret (mul x x)))");
    assert_eq!(value(&mut session, "(call sq 3)"), "9");
    // `sq`'s promotion to opt 3 is linked first (tiered compilation).
    value(&mut session, ":tier wait");
    let in_use = session.program.code_in_use();
    for n in 0..50 {
        assert_eq!(
            value(&mut session, &format!("(call sq {n}) (add (call sq 2) {n})")),
            format!("{} {}", n * n, 4 + n)
        );
    }
    assert_eq!(session.program.code_in_use(), in_use);
}

#[test]
fn redefined_functions_give_their_old_code_back() {
    let mut session = session();
    value(&mut session, "(define ((version int)) (ret 1))");
    value(&mut session, "(define ((caller int)) (ret (add (call version) 10)))");
    value(&mut session, "(define ((version int)) (ret 2))");
    // The call cells' trampoline for `() -> int` is made once and kept for the session.
    assert_eq!(value(&mut session, "(call caller)"), "12");
    // Promoted code too: `caller`'s, with `version` inlined, goes back to its quick body when
    // `version` changes, and is promoted again.
    // Measured once redefinitions of `version` went through that cycle twice (code of the first
    // promotions is given back a cell late).
    let mut in_use = None;
    for n in 3..30 {
        value(&mut session, &format!("(define ((version int)) (ret {n}))"));
        assert_eq!(value(&mut session, "(call caller)"), format!("{}", n + 10));
        value(&mut session, ":tier wait");
        assert_eq!(value(&mut session, "(call caller)"), format!("{}", n + 10));
        let now = session.program.code_in_use();
        if n > 4 {
            assert_eq!(*in_use.get_or_insert(now), now, "after version {n}");
        }
    }
}

fn values_of(outcome: &Outcome) -> Vec<String> {
    outcome
        .items
        .iter()
        .filter_map(|item| match item {
            Item::Value { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn values_stream_while_a_later_item_of_the_cell_runs() {
    let mut session = session();
    value(&mut session, "(define ((usleep int) (us int)))");
    let mut seen = Vec::new();
    let outcome = session.eval_streaming("1 2 (call usleep 600000) 4", &mut |partial| {
        seen.push((Instant::now(), values_of(partial)));
    });
    let ended = Instant::now();
    assert!(!outcome.failed(), "{:?}", outcome.diagnostics);
    assert_eq!(values_of(&outcome), ["1", "2", "0", "4"]);
    // The first two values were shown while the third item still slept.
    let (shown, _) = seen.iter().find(|(_, values)| values.len() == 2).expect("the first values were shown");
    assert!(ended.duration_since(*shown) >= Duration::from_millis(300), "{seen:?}");
}

#[test]
fn an_interrupt_stops_the_item_that_runs_and_names_top_level_code() {
    let mut session = session();
    let interrupt = session.interrupt_handle();
    // Once the first value is shown, the second item loops for ever.
    let outcome = session.eval_streaming("1 (while #t) 3", &mut |partial| {
        if !values_of(partial).is_empty() {
            interrupt.interrupt();
        }
    });
    assert_eq!(values_of(&outcome), ["1"]);
    let [diagnostic] = outcome.diagnostics.as_slice() else { panic!("{:?}", outcome.diagnostics) };
    assert_eq!(diagnostic.message, "interrupted in top-level code");
    // The label is on the item that was stopped, `(while #t)`.
    assert_eq!(diagnostic.labels.first().map(|label| (label.span.start, label.span.end)), Some((2, 12)));
    assert_eq!(value(&mut session, "(add 1 2)"), "3", "the session goes on");
}

/// A definition with no unquote keeps its text, not its form (most of its memory); one built by
/// an unquote keeps the form. Either way a change it depends on re-checks it from the very form
/// it was defined by: a redefined struct invalidates both.
#[test]
fn definitions_keep_text_where_it_reads_back_to_their_form() {
    use crate::check::FunctionKind;
    use crate::tree::DefinitionSource;
    let mut session = session();
    value(&mut session, "(define-struct p (x int))");
    value(&mut session, "(define ((plain int) (v (ptr (struct p)))) (ret (load (sptradd v x))))");
    value(&mut session, "(define ((built int) (v (ptr (struct p)))) (ret (load (sptradd v ,(sym \"x\")))))");
    let source = |session: &Session, name: &str| match &session.env.functions[name].kind {
        FunctionKind::Defined(def) => def.source.clone(),
        _ => panic!("`{name}` is defined"),
    };
    let DefinitionSource::Text { text, .. } = source(&session, "plain") else { panic!("`plain` keeps its text") };
    assert_eq!(&*text, "(define ((plain int) (v (ptr (struct p)))) (ret (load (sptradd v x))))");
    assert!(matches!(source(&session, "built"), DefinitionSource::Form(_)));
    let outcome = session.eval("(define-struct p (y int))");
    let messages: Vec<String> = outcome.diagnostics.iter().map(|diagnostic| diagnostic.message.clone()).collect();
    assert!(messages.iter().any(|message| message.contains("`plain`")), "{messages:?}");
    assert!(messages.iter().any(|message| message.contains("`built`")), "{messages:?}");
}

/// The phases a cell went through.
fn phases(outcome: &Outcome) -> Vec<&'static str> {
    outcome.timing.phases.iter().map(|(phase, _)| phase.name()).collect()
}

/// A call cell with constant or global arguments runs through its signature's trampoline: the
/// first one of a signature compiles and links it, later ones (other functions of that signature
/// too) compile nothing and link no code; other cells compile as before.
#[test]
fn call_cells_compile_nothing_once_their_signature_has_a_trampoline() {
    let mut session = session();
    value(&mut session, "(define ((sq int) (x int)) (ret (mul x x)))");
    value(&mut session, "(define ((inc int) (x int)) (ret (add x 1)))");
    value(&mut session, "(define-global (g int) (const 6))");
    let first = session.eval("(call sq 7)");
    assert_eq!(values_of(&first), ["49"]);
    assert_eq!(phases(&first), ["parse", "expand", "check", "codegen", "link", "run"]);
    // Promotions (tiered compilation) link code of their own: done before measuring.
    value(&mut session, ":tier wait");
    let in_use = session.program.code_in_use();
    for (cell, expected) in [("(call sq 8)", "64"), ("(call inc g)", "7"), ("(call sq -2)", "4")] {
        let outcome = session.eval(cell);
        assert_eq!(values_of(&outcome), [expected], "{cell}");
        assert_eq!(phases(&outcome), ["parse", "expand", "check", "run"], "{cell}");
    }
    assert_eq!(session.program.code_in_use(), in_use, "no code was linked");
    // Typed literals are constants too; a computed argument is not.
    value(&mut session, "(define ((low int8) (x int8)) (ret x))");
    value(&mut session, "(call low (int8 -7))");
    assert_eq!(phases(&session.eval("(call low (int8 3))")), ["parse", "expand", "check", "run"]);
    let computed = session.eval("(call sq (add 3 4))");
    assert_eq!(values_of(&computed), ["49"]);
    assert!(phases(&computed).contains(&"codegen"), "{:?}", phases(&computed));
    // An address given as `(inttoptr N T)` of a literal is a constant: `quasi run` passes argv
    // that way. A 32-bit literal is zero-extended, as the compiled cast does.
    value(&mut session, "(define ((address int64) (p (ptr int))) (ret (ptrtoint p int64)))");
    value(&mut session, "(call address (inttoptr 1 (ptr int)))");
    for (literal, expected) in [("140000000000000", "140000000000000"), ("-1", "4294967295"), ("(int64 -1)", "-1")] {
        let cell = format!("(call address (inttoptr {literal} (ptr int)))");
        let outcome = session.eval(&cell);
        assert_eq!(values_of(&outcome), [expected], "{cell}");
        assert_eq!(phases(&outcome), ["parse", "expand", "check", "run"], "{cell}");
        // The compiled cast agrees.
        let compiled = session.eval(&format!("(add (int64 0) (ptrtoint (inttoptr {literal} (ptr int)) int64))"));
        assert_eq!(values_of(&compiled), [expected], "{literal}: {:?}", compiled.diagnostics);
    }
}

/// A prepared session (`quasi server`'s) has made `main`'s trampolines and started no thread;
/// calling `main` then compiles nothing.
#[test]
fn a_prepared_session_calls_main_without_compiling() {
    let config = SessionConfig { load_prelude: false, defer_device: true, ..SessionConfig::default() };
    let mut session = Session::new(config).expect("a session starts");
    session.prepare().expect("prepared");
    assert!(!session.runner.started(), "a prepared session started its executor");
    value(&mut session, "(define ((main int) (argc int) (argv (ptr (ptr int8)))) (ret argc))");
    let outcome = session.eval("(call main 2 (inttoptr 0 (ptr (ptr int8))))");
    assert_eq!(values_of(&outcome), ["2"]);
    assert_eq!(phases(&outcome), ["parse", "expand", "check", "run"]);
}

/// An interrupt stops a call cell inside its callee, as it stops any cell.
#[test]
fn an_interrupted_call_cell_names_the_function_it_stopped() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mut session = session();
    value(&mut session, "(define ((forever int) (x int)) (while #t) (ret x))");
    let interrupt = session.interrupt_handle();
    let done = Arc::new(AtomicBool::new(false));
    let interrupter = {
        let done = Arc::clone(&done);
        // Again and again: an interrupt before the cell starts is forgotten when it starts.
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
                interrupt.interrupt();
            }
        })
    };
    let outcome = session.eval("(call forever 1)");
    done.store(true, Ordering::SeqCst);
    interrupter.join().expect("the interrupter ends");
    assert_eq!(phases(&outcome), ["parse", "expand", "check", "codegen", "link", "run"]);
    let [diagnostic] = outcome.diagnostics.as_slice() else { panic!("{:?}", outcome.diagnostics) };
    assert_eq!(diagnostic.message, "interrupted in function `forever`");
    assert_eq!(diagnostic.labels.first().map(|label| (label.span.start, label.span.end)), Some((0, 16)));
    assert_eq!(value(&mut session, "(add 2 2)"), "4", "the session goes on");
}

/// Waits until the background compiler has taken every queued job.
fn until_taken(session: &Session) {
    let start = Instant::now();
    while !session.tiering.worker.queue_taken() {
        assert!(start.elapsed() < Duration::from_secs(20), "the worker never took its job");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A redefinition while the old version is being promoted: the promotion, compiled from the old
/// body, is dropped when it comes back, and the new body is promoted in its turn.
#[test]
fn a_promotion_of_a_redefined_function_is_dropped() {
    let mut session = session();
    let hold = session.tiering.worker.hold();
    hold.set(true);
    value(&mut session, "(define ((work int) (x int)) (ret (add x 1)))");
    until_taken(&session);
    value(&mut session, "(define ((work int) (x int)) (ret (add x 2)))");
    assert_eq!(value(&mut session, "(call work 1)"), "3");
    hold.set(false);
    value(&mut session, ":tier wait");
    assert_eq!(session.tiering.dropped, 1);
    assert_eq!(session.compiled_levels.get("work"), Some(&3));
    assert_eq!(value(&mut session, "(call work 1)"), "3");
}

/// A session where `caller` is promoted with `work` (`x + 1`) inlined, and the background
/// compiler held: later promotions wait until the hold is released.
fn promoted_caller() -> (Session, crate::tier::Hold) {
    let mut session = session();
    value(&mut session, "(define ((work int) (x int)) (ret (add x 1)))");
    value(&mut session, "(define ((caller int) (x int)) (ret (mul (call work x) 10)))");
    value(&mut session, ":tier wait");
    assert_eq!(session.compiled_levels.get("caller"), Some(&3));
    let hold = session.tiering.worker.hold();
    hold.set(true);
    (session, hold)
}

/// A caller promoted with its callee inlined goes back to its quick code in the cell that
/// redefines the callee, so that cell's own code already sees the new callee.
#[test]
fn a_promoted_caller_goes_back_to_quick_code_when_an_inlined_callee_changes() {
    let (mut session, hold) = promoted_caller();
    caller_goes_back_and_is_promoted_again(&mut session, &hold);
}

/// With the worker held: redefining `work` sends `caller`, promoted with `work` inlined, back
/// to its quick code in that very cell; once the worker goes on, `caller` is promoted again.
fn caller_goes_back_and_is_promoted_again(session: &mut Session, hold: &crate::tier::Hold) {
    assert_eq!(value(session, "(define ((work int) (x int)) (ret (add x 2))) (call caller 1)"), "30");
    assert_eq!(session.compiled_levels.get("caller"), Some(&1));
    hold.set(false);
    value(session, ":tier wait");
    assert_eq!(session.compiled_levels.get("caller"), Some(&3));
    assert_eq!(value(session, "(call caller 2)"), "40");
}

/// `:reset` while a promotion compiles: the reset waits for the compile in flight to end (no
/// thread may be left using LLVM), and the new session knows nothing of it.
#[test]
fn a_reset_drops_the_promotions_in_flight() {
    let mut session = session();
    let hold = session.tiering.worker.hold();
    hold.set(true);
    value(&mut session, "(define ((work int) (x int)) (ret (add x 1)))");
    until_taken(&session);
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        hold.set(false);
    });
    value(&mut session, ":reset");
    release.join().expect("the releasing thread ends");
    assert_eq!(session.eval(":tier wait").items, [Item::Message("no functions yet".into())]);
    value(&mut session, "(define ((work int) (x int)) (ret (add x 5)))");
    value(&mut session, ":tier wait");
    assert_eq!(session.compiled_levels.get("work"), Some(&3));
    assert_eq!(value(&mut session, "(call work 1)"), "6");
}

/// A benchmark measures the code that runs from then on: under tiered compilation it waits for
/// the background compiler first, so it times the promoted code. Its session does not capture
/// output: capturing redirects the process's stdout, which the streaming test beside it reads.
#[test]
fn a_benchmark_times_promoted_code() {
    let config = SessionConfig { capture_output: false, load_prelude: false, ..SessionConfig::default() };
    let mut session = Session::new(config).expect("a session starts");
    let outcome = session.eval("(define ((work int) (x int)) (ret (mul x 3))) (bench (call work 5))");
    assert!(!outcome.failed(), "{:?}", outcome.diagnostics);
    assert_eq!(session.compiled_levels.get("work"), Some(&3));
    assert!(outcome.timing.promotions.iter().any(|promotion| promotion.function == "work"));
}

/// A callee promoted before its caller is defined: its quick code is given back once its slot
/// points at the promotion, but its unoptimised body is still copied into the caller's
/// promotion, so a redefinition of the callee sends the caller back to its quick code. (When the
/// callee's module went with its quick code, the caller was promoted without the callee
/// inlined, and kept that code after the callee changed only by luck of the slot.)
#[test]
fn a_callee_promoted_before_its_caller_is_still_inlined_into_it() {
    let mut session = session();
    value(&mut session, "(define ((work int) (x int)) (ret (add x 1)))");
    value(&mut session, ":tier wait");
    assert_eq!(session.compiled_levels.get("work"), Some(&3));
    value(&mut session, "(define ((caller int) (x int)) (ret (mul (call work x) 10)))");
    value(&mut session, ":tier wait");
    assert_eq!(session.compiled_levels.get("caller"), Some(&3));
    let hold = session.tiering.worker.hold();
    hold.set(true);
    caller_goes_back_and_is_promoted_again(&mut session, &hold);
    // The module of a body whose code is gone is kept only while the body is current.
    let kept = session.tiering.modules_kept();
    for n in 3..10 {
        value(&mut session, &format!("(define ((work int) (x int)) (ret (add x {n})))"));
        value(&mut session, ":tier wait");
        // A compiled cell, whose commit takes note of the code the promotion let go.
        assert_eq!(value(&mut session, "(add (call caller 1) 0)"), format!("{}", (1 + n) * 10));
        assert_eq!(session.tiering.modules_kept(), kept, "after work {n}");
    }
}

/// An autotune variant is defined by a quiet cell (`Pipeline::compile_quietly`), not a cell: a
/// caller promoted with the variant's function inlined goes back to its quick code in that
/// commit too, before the variant's run calls it.
#[test]
fn a_quiet_redefinition_sends_a_promoted_caller_back_to_quick_code() {
    use crate::bench::Pipeline;
    let (mut session, hold) = promoted_caller();
    let variant = "(define ((work int) (x int)) (ret (add x 2)))";
    let forms = crate::reader::read(crate::source::SourceId(0), variant).expect("the variant reads");
    session.compile_quietly(&forms, false).expect("the variant compiles");
    assert_eq!(session.compiled_levels.get("caller"), Some(&1));
    assert_eq!(value(&mut session, "(call caller 1)"), "30");
    hold.set(false);
}

/// `quasi run` with an object cache: a second process (here, a second session) that compiles
/// the same program links the object the first one stored, skipping the optimiser, and runs it
/// the same; a program whose generated code differs, or the same at another level, is compiled.
#[test]
fn a_program_compiled_again_links_its_object_from_the_cache() {
    let directory = std::env::temp_dir().join(format!("quasi-session-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    let program = |value: i32| {
        format!(
            "(define ((printf int) (format (ptr int8)) ...))
             (define ((main int)) (call printf \"value %d\\n\" {value}) (ret {value}))"
        )
    };
    let run = |text: String, level: u8| {
        let config =
            SessionConfig { capture_output: true, load_prelude: false, opt_level: level, ..SessionConfig::default() };
        let mut session = Session::new(config).expect("a session starts");
        session.set_object_cache(Some(crate::ObjectCache::new(&directory)));
        let (outcome, status) = session.run_file("program.cl", text, &[]);
        assert!(!outcome.failed() && outcome.diagnostics.is_empty(), "{:?}", outcome.diagnostics);
        (outcome.written(crate::Stream::Stdout), status, phases(&outcome).contains(&"optimise"))
    };
    let entries = || std::fs::read_dir(&directory).map_or(0, Iterator::count);
    assert_eq!(run(program(7), 3), ("value 7\n".to_string(), 7, true), "compiled");
    assert_eq!(entries(), 1);
    assert_eq!(run(program(7), 3), ("value 7\n".to_string(), 7, false), "from the cache");
    assert_eq!(run(program(9), 3), ("value 9\n".to_string(), 9, true), "other code, compiled");
    assert_eq!(run(program(7), 2), ("value 7\n".to_string(), 7, true), "another level, compiled");
    assert_eq!(run(program(7), 2), ("value 7\n".to_string(), 7, false));
    assert_eq!(entries(), 3);
    // `compile_file` (a server compiling a saved program): stored, nothing run, and the next
    // run links it.
    let config = SessionConfig { capture_output: true, load_prelude: false, opt_level: 3, ..SessionConfig::default() };
    let mut session = Session::new(config).expect("a session starts");
    session.set_object_cache(Some(crate::ObjectCache::new(&directory)));
    assert!(session.compile_file("program.cl", program(11)));
    assert!(!session.compile_file("program.cl", "(define ((main int)) (ret 1.5))".to_string()));
    assert_eq!(entries(), 4);
    assert_eq!(run(program(11), 3), ("value 11\n".to_string(), 11, false), "compiled before, not run");
    std::fs::remove_dir_all(&directory).expect("the cache folder is removed");
}

/// `quasi run` without `--opt`: a program whose whole run its text bounds to a few thousand
/// steps compiles at level 0 (optimising would take longer than running it), any other
/// at the batch level; with `--opt` (the flag off), the level is the session's.
#[test]
fn a_provably_short_run_compiles_at_level_0() {
    let program = |bound: &str| {
        format!(
            "(define ((printf int) (format (ptr int8)) ...))
             (define ((main int) (argc int) (argv (ptr (ptr int8)))) (declare i int) (declare sum int)
               (for ((set i 0) (lt i {bound}) (set i (add i 1))) (set sum (add sum i)))
               (call printf \"%d\\n\" sum) (ret 0))"
        )
    };
    let level = |bound: &str, quick_short_runs: bool| {
        let config =
            SessionConfig { capture_output: true, load_prelude: false, opt_level: 3, ..SessionConfig::default() };
        let mut session = Session::new(config).expect("a session starts");
        session.set_quick_short_runs(quick_short_runs);
        let (outcome, status) = session.run_file("short.cl", program(bound), &[]);
        assert!(!outcome.failed(), "{:?}", outcome.diagnostics);
        assert_eq!(status, 0);
        session.compiled_levels.get("main").copied()
    };
    assert_eq!(level("100", true), Some(0));
    assert_eq!(level("100", false), Some(3));
    assert_eq!(level("argc", true), Some(3));
    assert_eq!(level("1000000", true), Some(3));
}

/// The first operand of `call` completes to functions only; the string of `(include "…` to
/// header files and folders.
#[test]
fn completion_knows_call_operands_and_include_strings() {
    let mut session = session();
    value(&mut session, "(define ((square int) (x int)) (ret (mul x x)))");
    value(&mut session, "(define-global (sq-total int))");
    let names = |session: &Session, text: &str| session.completions(text, text.len());
    let (_, anywhere) = names(&session, "(add sq");
    assert!(anywhere.contains(&"square".to_string()) && anywhere.contains(&"sq-total".to_string()), "{anywhere:?}");
    let (start, after_call) = names(&session, "(add (call sq");
    assert_eq!((start, after_call), (11, vec!["square".to_string()]));
    let (start, headers) = names(&session, "(include \"stdi");
    assert_eq!(start, 10);
    assert!(headers.contains(&"stdio.h".to_string()), "{headers:?}");
    let (_, nested) = names(&session, "(include \"stdio.h\" \"sys/typ");
    assert!(nested.contains(&"sys/types.h".to_string()), "{nested:?}");
    let (_, closed) = names(&session, "(include \"stdio.h\") (add st");
    assert!(!closed.iter().any(|name| name.ends_with(".h")), "a closed string completes names: {closed:?}");
}

/// `(flops E)` and `(bytes E)` in an autotune: each variant's throughput is E, with the point's
/// values in it, over that variant's median (the table's column, the chart's bars).
#[test]
fn an_autotune_gives_each_variant_its_throughput() {
    let mut session = session();
    value(
        &mut session,
        r#"(rhai "fn gen_work(f) { quote(\"(define ((work int) (n int)) (declare i int) (declare s int) (for ((set i 0) (lt i (mul n ,f)) (set i (add i 1))) (set s (add s i))) (ret s))\", #{ f: f }) }")"#,
    );
    let outcome = session.eval(
        "(autotune work (gen gen_work f) (params (f 1 3)) (run (call work 100)) (check 0) (bytes (mul f 8)) (flops (sitofp (mul f 100) double)))",
    );
    assert!(!outcome.failed(), "{:?}", outcome.diagnostics);
    let Some(Item::Autotune(report)) = outcome.items.iter().find(|item| matches!(item, Item::Autotune(_))) else {
        panic!("no autotune report in {:?}", outcome.items)
    };
    assert_eq!(report.variants.len(), 2);
    for variant in &report.variants {
        let bench = variant.result.as_ref().expect("the variant passed");
        let f: f64 = variant.values[0].parse().expect("f is a number");
        let seconds = bench.median.as_secs_f64();
        let want = [crate::Throughput::Bytes(f * 8.0 / seconds), crate::Throughput::Flops(f * 100.0 / seconds)];
        assert_eq!(bench.throughput.len(), 2, "{:?}", bench.throughput);
        for (got, want) in bench.throughput.iter().zip(want) {
            let (
                crate::Throughput::Bytes(got) | crate::Throughput::Flops(got),
                crate::Throughput::Bytes(want) | crate::Throughput::Flops(want),
            ) = (got, want);
            assert!((got / want - 1.0).abs() < 1e-9, "f = {f}: {got} against {want}");
        }
        assert!(matches!(bench.throughput[0], crate::Throughput::Bytes(_)));
        assert!(matches!(bench.throughput[1], crate::Throughput::Flops(_)));
    }
    // A work expression that does not evaluate is said before anything is timed, at the expression.
    let outcome =
        session.eval("(autotune work (gen gen_work f) (params (f 1 3)) (run (call work 100)) (flops (call nosuch f)))");
    assert!(outcome.failed());
    assert!(outcome.items.iter().all(|item| !matches!(item, Item::Autotune(_))), "{:?}", outcome.items);
}

/// An autotune that runs for a while shows its progress while it runs: status lines counting
/// the variants up to the space's size with the time left, then the whole count and the time;
/// the finished outcome has none. Each variant is timed for 0.2 s: six run for over a second,
/// past the half second before which nothing is shown.
#[test]
fn a_long_autotune_streams_its_progress() {
    let mut session = session();
    value(
        &mut session,
        r#"(rhai "fn gen_id(k) { quote(\"(define ((id int) (n int)) (ret (add n ,k)))\", #{ k: k }) }")"#,
    );
    let mut statuses: Vec<String> = Vec::new();
    let outcome = session.eval_streaming(
        "(autotune id (gen gen_id k) (params (k 0 1 2 3 4 5)) (run (call id 1)) (check 0) (fresh))",
        &mut |partial| statuses.extend(partial.status.clone()),
    );
    assert!(!outcome.failed(), "{:?}", outcome.diagnostics);
    assert_eq!(outcome.status, None);
    assert!(outcome.items.iter().any(|item| matches!(item, Item::Autotune(_))), "{:?}", outcome.items);
    let (last, running) = statuses.split_last().expect("progress was shown");
    assert!(last.starts_with("autotune id: 6 of 6 variants in ") && last.ends_with(" s"), "{statuses:?}");
    assert!(!running.is_empty(), "{statuses:?}");
    let mut counts = Vec::new();
    for line in running {
        let count: usize = line
            .strip_prefix("autotune id: ")
            .and_then(|rest| rest.split(" of 6 variants, ").next())
            .and_then(|count| count.parse().ok())
            .unwrap_or_else(|| panic!("not a progress line: {line}"));
        assert!(line.ends_with(" s left"), "{line}");
        counts.push(count);
    }
    assert!(counts.windows(2).all(|pair| pair[0] <= pair[1]) && counts.last() <= Some(&6), "{statuses:?}");
}
