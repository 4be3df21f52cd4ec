//! Long sessions: code that nothing can reach any more gives its memory back.

use super::{Session, SessionConfig};
use crate::Item;

fn session() -> Session {
    let config = SessionConfig { capture_output: true, load_prelude: false, ..SessionConfig::default() };
    Session::new(config).expect("a session starts")
}

/// The value a cell gave, or its diagnostics.
fn value(session: &mut Session, cell: &str) -> String {
    let outcome = session.eval(cell);
    let values: Vec<&str> = outcome
        .items
        .iter()
        .filter_map(|item| match item {
            Item::Value { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(!outcome.failed(), "`{cell}` failed: {:?}", outcome.diagnostics);
    values.join(" ")
}

#[test]
fn expression_cells_give_their_code_back() {
    let mut session = session();
    value(&mut session, "(define ((sq int) (x int)) (ret (mul x x)))");
    assert_eq!(value(&mut session, "(call sq 3)"), "9");
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
    let in_use = session.program.code_in_use();
    for n in 3..30 {
        value(&mut session, &format!("(define ((version int)) (ret {n}))"));
        assert_eq!(value(&mut session, "(call caller)"), format!("{}", n + 10));
    }
    assert_eq!(session.program.code_in_use(), in_use);
}
