//! `render_streams`: the terminal's split of an outcome into stdout and stderr chunks, coloured
//! only for terminals.

use quasi_lang::{Diagnostic, Item, Kind, Language, Outcome, Session, SessionConfig, Severity, Stream};
use quasi_repl::notebook::strip_ansi;
use quasi_repl::{render, render_streams, Masking, Rendering, Style};

#[test]
fn chunks_keep_cell_order_and_join_to_render() {
    let outcome = Outcome {
        items: vec![
            Item::Output { stream: Stream::Stdout, text: "one ".into() },
            Item::Output { stream: Stream::Stdout, text: "two\n".into() },
            Item::Output { stream: Stream::Stderr, text: "warned\n".into() },
            Item::Value { text: "3".into(), ty: "int".into() },
        ],
        ..Outcome::default()
    };
    let chunks = render_streams(&outcome, Style::Plain);
    assert_eq!(
        chunks,
        vec![
            (Stream::Stdout, "one two\n".to_string()),
            (Stream::Stderr, "warned\n".to_string()),
            (Stream::Stdout, "3 : int\n".to_string())
        ]
    );
    let joined: String = chunks.into_iter().map(|(_, text)| text).collect();
    assert_eq!(joined, render(&outcome, Style::Plain));
}

#[test]
fn an_empty_outcome_has_no_chunks() {
    assert!(render_streams(&Outcome::default(), Style::Color).is_empty());
}

#[test]
fn listings_are_coloured_only_under_style_color() {
    let outcome = Outcome {
        items: vec![
            Item::Listing {
                title: "sq: LLVM IR (opt 1)".into(),
                language: Language::LlvmIr,
                text: "define i32 @sq(i32 %x) {\nframe:\n  %0 = mul i32 %x, %x ; square\n  ret i32 %0\n}".into(),
            },
            // `:expand`: no title, so the forms print bare.
            Item::Listing { title: String::new(), language: Language::CLisp, text: "(add 1 (set x 2))".into() },
        ],
        ..Outcome::default()
    };
    let plain = render(&outcome, Style::Plain);
    assert_eq!(
        plain,
        "== sq: LLVM IR (opt 1) ==\ndefine i32 @sq(i32 %x) {\nframe:\n  %0 = mul i32 %x, %x ; square\n  ret i32 %0\n}\n\
         (add 1 (set x 2))\n"
    );
    let coloured: String = render_streams(&outcome, Style::Color).into_iter().map(|(_, text)| text).collect();
    assert!(coloured.contains("\x1b[1;32mdefine\x1b[0m"), "{coloured:?}");
    assert!(coloured.contains("\x1b[90m; square\x1b[0m"), "{coloured:?}");
    assert!(coloured.contains("\x1b[32madd\x1b[0m"), "{coloured:?}");
    // Colour adds escape sequences and nothing else, and none of them spans a line end.
    assert_eq!(strip_ansi(&coloured), plain);
    assert!(coloured.lines().all(|line| line.matches("\x1b[").count() % 2 == 0), "{coloured:?}");
}

/// What a terminal shows of a running cell: each outcome through one `Rendering`, as the REPL
/// does, counting the bytes rendered.
struct Shown {
    rendering: Rendering,
    text: String,
    rendered: usize,
    updates: usize,
}

impl Shown {
    fn new() -> Shown {
        Shown { rendering: Rendering::new(Style::Plain, Masking::None), text: String::new(), rendered: 0, updates: 0 }
    }

    fn update(&mut self, outcome: &Outcome) {
        self.updates += 1;
        for (_, text) in self.rendering.next(outcome) {
            self.rendered += text.len();
            self.text.push_str(&text);
        }
    }
}

#[test]
fn a_running_cell_is_rendered_once_however_often_it_is_shown() {
    // A session shows the outcome after every top-level value; rendering each whole would cost
    // bytes quadratic in the cell's output (a cell of 8,000 values took seconds to show).
    let mut session =
        Session::new(SessionConfig { capture_output: false, ..SessionConfig::default() }).expect("a session starts");
    let cell = vec!["(add 1 2)"; 2_000].join(" ");
    let mut shown = Shown::new();
    let outcome = session.eval_streaming(&cell, &mut |partial| shown.update(partial));
    shown.update(&outcome);
    assert!(shown.updates > 2_000, "the cell was shown {} times", shown.updates);
    assert_eq!(shown.text, render(&outcome, Style::Plain));
    assert_eq!(shown.rendered, shown.text.len(), "every byte is rendered once");
}

#[test]
fn a_fault_renders_last_when_output_streamed_before_it() {
    let output = |text: &str| Item::Output { stream: Stream::Stdout, text: text.into() };
    let warning = Diagnostic {
        severity: Severity::Warning,
        kind: Kind::Type,
        message: "a warning".into(),
        labels: Vec::new(),
        notes: Vec::new(),
    };
    let fault = Diagnostic {
        severity: Severity::Error,
        kind: Kind::RuntimeFault,
        message: "a fault".into(),
        ..warning.clone()
    };
    let first =
        Outcome { items: vec![output("tick"), output(" 1\n")], diagnostics: vec![warning], ..Outcome::default() };
    let mut second = first.clone();
    second.items.extend([Item::Value { text: "3".into(), ty: "int".into() }, output("cut")]);
    // The session adds the fault when the cell stops, and `:time`'s table after it.
    let mut last = second.clone();
    last.diagnostics.push(fault);
    last.items.push(Item::Message("after the fault".into()));
    let mut shown = Shown::new();
    for outcome in [&first, &second, &last] {
        shown.update(outcome);
    }
    assert_eq!(shown.text, render(&last, Style::Plain));
    assert_eq!(shown.rendered, shown.text.len());
    assert!(shown.text.find("after the fault") < shown.text.find("a fault"), "{:?}", shown.text);
}

/// A timing table lists the functions promoted in the background since the last cell, with
/// the background compile's time, outside the total; transcripts leave those rows out (which
/// cell a promotion lands before depends on timing).
#[test]
fn timing_tables_list_promotions_except_in_transcripts() {
    use std::time::Duration;
    let mut timing = quasi_lang::PhaseTimes::default();
    timing.phases.push((quasi_lang::Phase::Run, Duration::from_micros(40)));
    timing.promotions.push(quasi_lang::Promotion {
        function: "matmul".into(),
        level: 3,
        compile: Duration::from_millis(12),
        since_definition: Duration::from_millis(15),
    });
    let outcome = Outcome { items: vec![Item::Timing(timing)], ..Outcome::default() };
    let shown = quasi_repl::render_masked(&outcome, Style::Plain, Masking::None);
    let row = shown.lines().find(|line| line.contains("promoted matmul")).expect("a promotion row");
    assert!(row.contains("opt 3 in the background, 15.000 ms after its definition"), "{row}");
    assert!(row.contains("12.000 ms"), "{row}");
    assert!(shown.lines().any(|line| line.contains("total") && line.contains("40.000 µs")), "{shown}");
    let transcript = quasi_repl::render_masked(&outcome, Style::Plain, Masking::Addresses);
    assert!(!transcript.contains("promoted"), "{transcript}");
}
