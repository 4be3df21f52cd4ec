//! `render_streams`: the terminal's split of an outcome into stdout and stderr chunks.

use quasi_lang::{Item, Outcome, Stream};
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
