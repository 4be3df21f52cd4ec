//! Listings whose exact text depends on the host CPU (optimised IR, assembly) are checked by
//! structure here, through the same session engine the REPL uses.

use quasi_lang::{Item, Language, Session, SessionConfig};

fn listings(session: &mut Session, command: &str) -> Vec<(String, Language, String)> {
    let outcome = session.eval(command);
    assert!(!outcome.failed(), "{command} failed: {:?}", outcome.diagnostics);
    outcome
        .items
        .into_iter()
        .filter_map(|item| match item {
            Item::Listing { title, language, text } => Some((title, language, text)),
            _ => None,
        })
        .collect()
}

fn session() -> Session {
    let mut session = Session::new(SessionConfig::default()).expect("session");
    let outcome = session.eval(
        "(define ((fib int) (n int)) (if (lt n 2) (ret n)) (ret (add (call fib (sub n 1)) (call fib (sub n 2)))))",
    );
    assert!(!outcome.failed());
    session
}

#[test]
fn stages_lists_every_stage_in_order() {
    let mut session = session();
    let stages = listings(&mut session, ":stages fib");
    let titles: Vec<&str> = stages.iter().map(|(title, _, _)| title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "fib: source",
            "fib: expanded",
            "fib: typed",
            "fib: LLVM IR (opt 1)",
            "fib: optimised LLVM IR (opt 1)",
            "fib: x86-64 assembly (opt 1)"
        ]
    );
    assert_eq!(stages[3].1, Language::LlvmIr);
    assert_eq!(stages[5].1, Language::Assembly);
    assert!(stages[0].2.starts_with("(define ((fib int) (n int))"));
    assert!(stages[2].2.contains("(lt:bool n:int 2:int)"));
}

#[test]
fn assembly_is_the_function_with_its_recursive_calls() {
    let mut session = session();
    let assembly = &listings(&mut session, ":asm fib")[0].2;
    assert!(assembly.lines().next().is_some_and(|line| line == "fib:"), "{assembly}");
    assert!(assembly.contains("call") && assembly.contains("fib"), "{assembly}");
    assert!(assembly.lines().any(|line| line.trim() == "retq"), "{assembly}");
    assert!(!assembly.contains(".cfi_"), "directives are filtered: {assembly}");
}

#[test]
fn optimised_ir_at_level_3_is_promoted_to_registers() {
    let mut session = session();
    session.eval(":opt 3");
    let ir = &listings(&mut session, ":ir opt fib")[0].2;
    assert!(ir.contains("define") && ir.contains("@fib("), "{ir}");
    assert!(!ir.contains("alloca"), "mem2reg ran: {ir}");
    let before = &listings(&mut session, ":ir fib")[0].2;
    assert!(before.contains("alloca"), "the unoptimised IR keeps its stack slots: {before}");
}

#[test]
fn inspecting_changes_nothing() {
    let mut session = session();
    let before = session.eval(":defs");
    listings(&mut session, ":stages fib");
    listings(&mut session, ":stages");
    let after = session.eval(":defs");
    assert_eq!(before.items, after.items);
    let outcome = session.eval("(call fib 10)");
    assert_eq!(outcome.items, vec![Item::Value { text: "55".into(), ty: "int".into() }]);
}

#[test]
fn a_loop_over_int_indices_has_a_copy_with_nsw_behind_a_guard() {
    let mut session = Session::new(SessionConfig::default()).expect("session");
    let outcome = session.eval(
        "(define ((fill void) (n int) (a (ptr int)))
           (declare i int)
           (for ((set i 0) (lt i n) (set i (add i 1))) (store (ptradd a (mul i 2)) i)))",
    );
    assert!(!outcome.failed(), "{:?}", outcome.diagnostics);
    let ir = &listings(&mut session, ":ir fill")[0].2;
    // The guard picks one of two copies of the loop: in one, the index product and the step
    // carry `nsw`; in the other they wrap.
    assert!(ir.contains("label %nowrap, label %wrap"), "{ir}");
    for operation in ["mul nsw i32", "add nsw i32", "mul i32", "add i32"] {
        assert_eq!(ir.matches(operation).count(), 1, "{operation}: {ir}");
    }
    assert!(ir.contains("icmp sle i64"), "the guard compares 64-bit intervals: {ir}");
}
