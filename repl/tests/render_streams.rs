//! `render_streams`: the terminal's split of an outcome into stdout and stderr chunks, coloured
//! only for terminals.

use quasi_lang::{Item, Language, Outcome, Stream};
use quasi_repl::notebook::strip_ansi;
use quasi_repl::{render, render_streams, Style};

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
