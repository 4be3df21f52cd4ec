//! The expander on its own (docs/language.md §6): what cells expand to, one level or fully,
//! and the hygiene of generated names. One stage per test, driven as the session drives it:
//! a Rhai script run in the session scope, then cells expanded in order.

use expect_test::{expect, Expect};

use std::sync::atomic::Ordering;

use rhai::{EvalAltResult, Map};

use super::engine::TIME;

use super::convert::parse_forms;
use super::template::{compile_form, quote_each};
use super::*;
use crate::reader::pretty::pretty;
use crate::reader::{self, SexpKind, SourceFile, SourceId};

/// A stage and the sources its cells are read from.
struct Fixture {
    stage: Stage,
    sources: Vec<SourceFile>,
}

impl Fixture {
    /// A fresh stage that has run `script`, as `(rhai "…")` in an earlier cell would.
    fn new(script: &str) -> Fixture {
        let mut fixture = Fixture { stage: Stage::new(new_interrupt_flag()), sources: Vec::new() };
        let source = fixture.add_source("script", script);
        let text = ScriptText { source, base: 0, text: script };
        if let Err(failure) = fixture.stage.run_script(script, text, Span::new(source, 0, 0)) {
            panic!("the script failed: {}", failure.message);
        }
        fixture
    }

    fn add_source(&mut self, name: &str, text: &str) -> SourceId {
        self.sources.push(SourceFile { name: name.to_string(), text: text.to_string() });
        SourceId(self.sources.len() as u32 - 1)
    }

    /// Reads and expands a cell, as the session does (a failed cell leaves the stage as it was).
    fn expand(&mut self, cell: &str, single_level: bool) -> Result<ExpandedCell, Vec<Diagnostic>> {
        let source = self.add_source("cell", cell);
        let forms = reader::read(source, cell)?;
        self.stage.expand(forms, &mut self.sources, single_level)
    }
}

/// An expanded cell as text: its forms pretty-printed, then what Rhai printed; or the
/// diagnostics' kinds, messages and notes.
fn show(result: Result<ExpandedCell, Vec<Diagnostic>>) -> String {
    match result {
        Ok(cell) => {
            let forms = cell.forms.iter().map(|form| pretty(form, 0));
            let printed = cell.printed.lines().map(|line| format!("print: {line}"));
            forms.chain(printed).collect::<Vec<_>>().join("\n")
        }
        Err(diagnostics) => diagnostics
            .iter()
            .map(|diagnostic| {
                let notes = diagnostic.notes.iter().map(|note| format!("\n  note: {note}"));
                format!("error[{}]: {}{}", diagnostic.kind.code(), diagnostic.message, notes.collect::<String>())
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// Expands `cells` in order after `script`: one cell's result alone, several each after its
/// `> ` input line.
fn check(script: &str, cells: &[&str], expect: Expect) {
    let mut fixture = Fixture::new(script);
    let results: Vec<String> = cells.iter().map(|cell| show(fixture.expand(cell, false))).collect();
    let actual = match (cells, results.as_slice()) {
        ([_], [result]) => result.clone(),
        _ => cells
            .iter()
            .zip(&results)
            .map(|(cell, result)| format!("> {cell}\n{result}"))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    expect.assert_eq(&actual);
}

/// `:expand 1`: only the unquotes written in the cell are evaluated.
fn check_one_level(script: &str, cell: &str, expect: Expect) {
    expect.assert_eq(&show(Fixture::new(script).expand(cell, true)));
}

/// Every atom of the expansion with the source text its span points at.
fn check_spans(script: &str, cell: &str, expect: Expect) {
    fn atoms(form: &Sexp, cell: &str, out: &mut Vec<String>) {
        match &form.kind {
            SexpKind::List(items) => items.iter().for_each(|item| atoms(item, cell, out)),
            _ => out.push(format!("{form} ← {}", &cell[form.span.start as usize..form.span.end as usize])),
        }
    }
    let mut fixture = Fixture::new(script);
    let expanded = fixture.expand(cell, false).unwrap_or_else(|diagnostics| panic!("{}", show(Err(diagnostics))));
    let mut out = Vec::new();
    expanded.forms.iter().for_each(|form| atoms(form, cell, &mut out));
    expect.assert_eq(&out.join("\n"));
}

const MACROS: &str = r#"
let width = 8;
let elem_type = sym("int64");
let op = sym("mul");
let items = [1, 2, 3];
fn twice(x) { [sym("add"), x, x] }
fn declarations(names, ty) { names.map(|name| [sym("declare"), name, ty]) }
fn nothing() { () }
fn number() { 42 }
fn config(a, options) { [sym("add"), a, options.bias, options.the_scale] }
fn two(a, b) { a }
fn two(a) { a }
fn keep(template) { template }
fn unroll(hole, count, template) {
    let out = [];
    for k in 0..count { let holes = #{}; holes[hole.name] = k; out.push(fill(template, holes)); }
    out
}
fn getter(name, ty) { quote("(define ((,n ,t)) (ret (,t 0)))", #{ n: name, t: ty }) }
fn wrap(x) { parse(",(add_one " + x + ")") }
fn add_one(x) { [sym("add"), x, 1] }
fn again() { parse(",(again)") }
fn fresh() { gensym("i") }
fn loop_sum(n, acc) {
    let i = gensym("i");
    [quote("(declare ,i int)", #{ i: i }),
     quote("(for ((set ,i 0) (lt ,i ,n) (set ,i (add ,i 1))) (set ,acc (add ,acc ,i)))", #{ i: i, n: n, acc: acc })]
}
fn swap(a, b) { quote("((declare tmp# int) (set tmp# ,a) (set ,a ,b) (set ,b tmp#))", #{ a: a, b: b }) }
"#;

#[test]
fn unquoted_names() {
    check(MACROS, &["(add ,width (,op 2 3))"], expect![["(add 8 (mul 2 3))"]]);
    check(MACROS, &["(declare x ,elem-type)"], expect![["(declare x int64)"]]);
    check(
        MACROS,
        &["(define-global (g (arr 3 int)) (const (,@items)))"],
        expect![[r#"
        (define-global (g (arr 3 int))
          (const (1 2 3)))"#]],
    );
    check(
        MACROS,
        &[",missing"],
        expect![[r#"
            error[macro]: no Rhai variable `missing`
              note: define it with (rhai "let NAME = …;") or (rhai "const NAME = …;")"#]],
    );
    check(
        MACROS,
        &[",5"],
        expect![["error[macro]: cannot unquote `5`: an unquote takes a Rhai variable name or a call (F ARG…)"]],
    );
}

#[test]
fn calls_take_their_arguments_as_data() {
    check(
        MACROS,
        &["(define ((f int) (n int)) (ret ,(twice (call g n))))"],
        expect![[r#"
        (define ((f int) (n int))
          (ret (add (call g n) (call g n))))"#]],
    );
    check(MACROS, &[",(number)"], expect![["42"]]);
    check(MACROS, &[",(add-one 41)"], expect!["(add 41 1)"]);
    check(MACROS, &[",(two 1 2) ,(two 3)"], expect![["1\n3"]]);
    check(MACROS, &[",(two)"], expect![["error[macro]: Rhai function `two` takes 1 or 2 argument(s), found 0"]]);
    check(MACROS, &[",(missing 1)"], expect![["error[macro]: no Rhai function `missing`"]]);
    check(
        MACROS,
        &[",(nothing)"],
        expect![["error[macro]: the Rhai value `()` has no C-Lisp form (from `,(nothing)`)"]],
    );
}

#[test]
fn keyword_arguments_arrive_as_one_map_last() {
    check(MACROS, &[",(config 1 (#:the-scale 3) (#:bias 41))"], expect![["(add 1 41 3)"]]);
    check(MACROS, &[",(config (#:bias 41) 1 (#:the-scale 3))"], expect![["(add 1 41 3)"]]);
}

#[test]
fn splices() {
    check(
        MACROS,
        &["(define ((f void)) ,@(declarations (a b) int) (set a b))"],
        expect![[r#"
        (define ((f void))
          (declare a int)
          (declare b int)
          (set a b))"#]],
    );
    check(MACROS, &["(add 1 2 ,@(nothing))"], expect![["(add 1 2)"]]);
    check(MACROS, &["(f ,@items)"], expect![["(f 1 2 3)"]]);
    check(
        MACROS,
        &[",(getter zero-int int) ,(getter zero-float float)"],
        expect![[r#"
        (define ((zero-int int))
          (ret (int 0)))
        (define ((zero-float float))
          (ret (float 0)))"#]],
    );
    check(MACROS, &["(f ,@(number))"], expect![["error[macro]: `,@(number)` must give an array to splice, found i64"]]);
    check(MACROS, &[",@(nothing)"], expect![[""]]);
}

#[test]
fn results_are_expanded_again() {
    check(MACROS, &["(ret ,(wrap 41))"], expect![["(ret (add 41 1))"]]);
    check_one_level(MACROS, "(ret ,(wrap 41))", expect![["(ret ,(add_one 41))"]]);
    check(
        MACROS,
        &[",(again)"],
        expect![[r#"
        error[expansion-limit]: expansion exceeded the `depth` limit (64)
          note: `:limits depth N` raises it"#]],
    );
}

#[test]
fn nested_quasiquote() {
    // A backquoted argument is a template: its unquotes stay, `,,x` is evaluated now, and the
    // `quasiquote` wrapper is dropped when it is passed.
    check_one_level(MACROS, ",(keep `(store (ptradd a ,k) ,,width))", expect!["(store (ptradd a ,k) ,8)"]);
    check(
        MACROS,
        &["(define ((z void) (a (ptr int))) ,@(unroll k 3 `(store (ptradd a ,k) 0)))"],
        expect![[r#"
        (define ((z void) (a (ptr int)))
          (store (ptradd a 0) 0)
          (store (ptradd a 1) 0)
          (store (ptradd a 2) 0))"#]],
    );
    check(MACROS, &["(ret `(add 1 ,,width))"], expect![["(ret `(add 1 ,8))"]]);
    check(MACROS, &["(f ,@width)"], expect![["error[macro]: `,@width` must give an array to splice, found i64"]]);
}

#[test]
fn rhai_forms_in_a_cell_and_failed_cells() {
    check(
        MACROS,
        &[
            r#"(rhai "let kept = 1; print(\"ran\");") ,kept"#,
            r#"(rhai "kept = 2;") ,(fresh) ,missing"#,
            ",kept ,(fresh)",
        ],
        expect![[r#"
            > (rhai "let kept = 1; print(\"ran\");") ,kept
            1
            print: ran
            > (rhai "kept = 2;") ,(fresh) ,missing
            error[macro]: no Rhai variable `missing`
              note: define it with (rhai "let NAME = …;") or (rhai "const NAME = …;")
            > ,kept ,(fresh)
            1
            i#1"#]],
    );
}

#[test]
fn gensyms_are_fresh_across_calls_and_cells() {
    check(
        MACROS,
        &["(,(fresh) ,(fresh) i)", ",@(loop_sum 3 total)", "(,(fresh))"],
        expect![[r#"
            > (,(fresh) ,(fresh) i)
            (i#1 i#2 i)
            > ,@(loop_sum 3 total)
            (declare i#3 int)
            (for ((set i#3 0) (lt i#3 3) (set i#3 (add i#3 1))) (set total (add total i#3)))
            > (,(fresh))
            (i#4)"#]],
    );
}

#[test]
fn gensyms_cannot_be_written_by_users() {
    check(MACROS, &["i#1"], expect![["error[syntax]: `#` may not occur in a symbol: it is reserved for gensyms"]]);
    check(
        MACROS,
        &["(rhai \"sym(\\\"i#1\\\")\")"],
        expect![["error[macro]: Rhai: Runtime error: `i#1` is not a C-Lisp symbol"]],
    );
    check(
        MACROS,
        &["(rhai \"parse(\\\"i#1\\\")\")"],
        expect![[r#"
        error[macro]: Rhai: Runtime error: parse: `#` may not occur in a symbol: it is reserved for gensyms"#]],
    );
}

#[test]
fn auto_gensyms_in_fill() {
    // One gensym per `t#` name and call: the same within a template, fresh for the next call.
    check(
        MACROS,
        &[",(swap a b)", ",(swap c d)"],
        expect![[r#"
            > ,(swap a b)
            ((declare tmp#1 int) (set tmp#1 a) (set a b) (set b tmp#1))
            > ,(swap c d)
            ((declare tmp#2 int) (set tmp#2 c) (set c d) (set d tmp#2))"#]],
    );
    check(r#"fn two_names() { fill(parse("(x# y# x#)"), #{}) }"#, &[",(two_names)"], expect!["(x#1 y#2 x#1)"]);
    check(
        MACROS,
        &["(rhai \"quote(\\\"(f ,hole)\\\", #{})\")"],
        expect![[r#"
        error[macro]: Rhai: Runtime error: fill: the template uses `hole`, which the map does not have"#]],
    );
}

#[test]
fn quote_fills_as_fill_of_parse_does() {
    // `quote` fills its cached, parsed template directly; `fill(parse(…))` fills Rhai data. Both
    // must give the same forms, gensyms included, for holes at every position and level.
    let templates = [
        "(f ,a ,@xs (g ,a) ,@none)",
        "(,@xs ,a)",
        "(,head ,@xs)",
        "(unquote a)",
        "(f (unquote a) (unquote-splicing xs))",
        "(quasiquote (f ,a ,,a (g ,@xs) ,,@xs))",
        "(f `(g ,a ,,a) ``(h ,,,a))",
        "(f (quasiquote (unquote a)) (unquote (unquote a)))",
        "((declare t# int) (set t# ,a) (g t# u# #:key (k 1.5 \"s\" #t)))",
        "(f ,(g a) ,@(h xs))",
        ",a",
        ",@xs",
        "`,a",
        "t#",
        "7",
    ];
    for template in templates {
        let literal = template.replace('\\', "\\\\").replace('"', "\\\"");
        let map = r#"#{ a: [sym("x"), 1], xs: [2, sym("y")], none: (), head: sym("h") }"#;
        // Twice each, in fresh stages: the second `quote` finds its template in the cache, and
        // both runs count gensyms from the same start.
        let run = |call: &str| {
            let script = format!("print(show({call})); print(show({call}));");
            let mut fixture = Fixture::new("");
            let source = fixture.add_source("script", &script);
            let text = ScriptText { source, base: 0, text: &script };
            if let Err(failure) = fixture.stage.run_script(&script, text, Span::new(source, 0, 0)) {
                panic!("{template}: {}", failure.message);
            }
            fixture.stage.take_printed()
        };
        let filled = run(&format!(r#"fill(parse("{literal}"), {map})"#));
        let quoted = run(&format!(r#"quote("{literal}", {map})"#));
        assert_eq!(filled, quoted, "{template}");
    }
}

/// `quote_each` is `count` calls of `quote` with the hole 0, 1, …: each fill its own gensyms,
/// splices and `-`/`_` names as in `quote`; a negative or too large count is an error.
#[test]
fn quote_each_fills_a_template_once_per_index() {
    let script = r#"
        fn loads(n) { quote_each("(set t# (load (ptradd ,base ,k)))", #{ base: sym("a") }, "k", n) }
        fn spliced() { quote_each("(f ,@rest ,i)", #{ rest: [1, 2] }, "i", 2) }
        fn by_loop(n) { let out = []; for k in 0..n { out.push(quote("(g ,k ,x)", #{ k: k, x: sym("x") })); } out }
        fn same(n) { quote_each("(g ,k ,x)", #{ x: sym("x") }, "k", n) == by_loop(n) }
    "#;
    check(
        script,
        &[",@(loads 3)", ",@(loads 0)", ",@(spliced)", ",(same 5)", ",@(loads -1)", ",@(loads 2000000)"],
        expect![[r#"
            > ,@(loads 3)
            (set t#1 (load (ptradd a 0)))
            (set t#2 (load (ptradd a 1)))
            (set t#3 (load (ptradd a 2)))
            > ,@(loads 0)

            > ,@(spliced)
            (f 1 2 0)
            (f 1 2 1)
            > ,(same 5)
            #t
            > ,@(loads -1)
            error[macro]: Rhai: Runtime error: quote_each: the count must not be negative, not -1
              note: Rhai call stack: loads
            > ,@(loads 2000000)
            error[expansion-limit]: Rhai: Size of array exceeds the staging limits (string-size 1048576, array-size 1000000, map-size 100000)"#]],
    );
}

/// The interrupt and the `time-ms` limit stop `quote_each` between two fills (no Rhai operation
/// runs inside it for the engine's own checks to see); a stopped fill reads as an interrupted
/// expansion.
#[test]
fn an_interrupt_stops_quote_each() {
    let template = compile_form(&parse_forms("(f ,k)").expect("a template")[0], 1);
    let (counter, flag) = (Rc::new(Cell::new(0)), AtomicBool::new(false));
    let second = std::time::Duration::from_secs(1);
    let filled = quote_each(&template, Map::new(), "k", 3, &counter, &flag, second).expect("filled");
    assert_eq!(filled.len(), 3);
    // Its own time against the `time-ms` limit, read every 256 fills.
    let timed_out = quote_each(&template, Map::new(), "k", 1000, &counter, &flag, std::time::Duration::ZERO)
        .expect_err("out of time");
    assert!(
        matches!(&*timed_out, EvalAltResult::ErrorTerminated(token, _) if token.clone().into_string().ok().as_deref() == Some(TIME)),
        "{timed_out:?}"
    );
    flag.store(true, Ordering::SeqCst);
    let stopped = quote_each(&template, Map::new(), "k", 3, &counter, &flag, second).expect_err("stopped");
    assert!(matches!(*stopped, EvalAltResult::ErrorTerminated(..)), "{stopped:?}");
    let mut fixture = Fixture::new("fn many() { quote_each(\"(f ,k)\", #{}, \"k\", 1000) }");
    fixture.stage.interrupt.store(true, Ordering::SeqCst);
    expect!["error[interrupted]: interrupted while expanding"].assert_eq(&show(fixture.expand(",@(many)", false)));
}

#[test]
fn balanced_pairs_neighbours_level_by_level() {
    let script = r#"
        fn sum(n) { let terms = []; for k in 0..n { terms.push(sym("t" + k)); } balanced(sym("add"), terms) }
        fn tree(forms) { balanced([sym("f"), 1], forms) }
    "#;
    check(
        script,
        &[",(sum 1)", ",(sum 2)", ",(sum 3)", ",(sum 6)", ",(tree ((a) b))", ",@(sum 0)"],
        expect![[r#"
            > ,(sum 1)
            t0
            > ,(sum 2)
            (add t0 t1)
            > ,(sum 3)
            (add (add t0 t1) t2)
            > ,(sum 6)
            (add (add (add t0 t1) (add t2 t3)) (add t4 t5))
            > ,(tree ((a) b))
            ((f 1) (a) b)
            > ,@(sum 0)
        "#]],
    );
}

#[test]
fn generated_nodes_carry_the_unquote_span() {
    // Everything an unquote gives points at the unquote, so a check error in generated code
    // points there. (docs/language.md §6.8 asks that nodes from the arguments keep their own
    // spans; here the argument `n` takes the unquote's too.)
    check_spans(
        MACROS,
        "(ret ,(twice n))",
        expect![[r#"
        ret ← ret
        add ← ,(twice n)
        n ← ,(twice n)
        n ← ,(twice n)"#]],
    );
}
