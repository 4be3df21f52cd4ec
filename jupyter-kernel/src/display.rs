//! Display: a cell's `Outcome` as the iopub outputs a notebook shows, in the order a terminal
//! prints them: warnings, then the items in cell order, then the errors. Text comes from
//! `quasi_repl`; MIME bundles and message kinds are decided here.

use jupyter_protocol::{Media, MediaType, Stdio};
use quasi_lang::{Diagnostic, Item, Kind, Outcome, Stream};
use quasi_repl::{render_diagnostic, render_item, Masking, Style};

use crate::html;

/// One output message of a cell.
#[derive(Clone, Debug)]
pub enum Output {
    /// Program output (`stream`).
    Stream { name: Stdio, text: String },
    /// A bundle shown in place (`display_data`): definitions, warnings, command messages.
    Display(Media),
    /// The cell's result (`execute_result`): its last value.
    Result(Media),
    /// The cell failed (`error`): the first error names it, the traceback holds them all.
    Error { ename: String, evalue: String, traceback: Vec<String> },
}

/// Converts an outcome into outputs.
pub fn outputs(outcome: &Outcome) -> Vec<Output> {
    let mut outputs = Vec::new();
    for diagnostic in outcome.diagnostics.iter().filter(|diagnostic| !diagnostic.is_error()) {
        let plain = render_diagnostic(diagnostic, outcome, Style::Plain).trim_end_matches('\n').to_string();
        let html = html::diagnostic(&plain, false);
        outputs.push(Output::Display(Media::new(vec![MediaType::Plain(plain), MediaType::Html(html)])));
    }
    let last_value = outcome.items.iter().rposition(|item| matches!(item, Item::Value { .. }));
    let mut definitions: Vec<(&str, &str)> = Vec::new();
    for (index, item) in outcome.items.iter().enumerate() {
        if let Item::Defined { name, description } = item {
            definitions.push((name, description));
            continue;
        }
        flush_definitions(&mut definitions, &mut outputs);
        match item {
            Item::Value { text, ty } => {
                let bundle = Media::new(vec![MediaType::Plain(line(item)), MediaType::Html(html::value(text, ty))]);
                outputs.push(if Some(index) == last_value { Output::Result(bundle) } else { Output::Display(bundle) });
            }
            Item::Output { stream, text } => push_stream(&mut outputs, *stream, text),
            Item::Message(_) => outputs.push(Output::Display(Media::new(vec![MediaType::Plain(line(item))]))),
            // Listings go as Markdown code blocks too, which front ends highlight by language.
            Item::Listing { title, language, text } => outputs.push(Output::Display(Media::new(vec![
                MediaType::Plain(line(item)),
                MediaType::Markdown(html::listing_markdown(title, *language, text)),
                MediaType::Html(html::listing(title, text)),
            ]))),
            Item::Timing(timing) => outputs.push(Output::Display(Media::new(vec![
                MediaType::Plain(line(item)),
                MediaType::Html(html::timing(timing)),
            ]))),
            Item::Bench(report) => outputs.push(Output::Display(Media::new(vec![
                MediaType::Plain(line(item)),
                MediaType::Html(html::bench(&line(item), report)),
            ]))),
            Item::Autotune(report) => outputs.push(Output::Display(Media::new(vec![
                MediaType::Plain(line(item)),
                MediaType::Html(html::autotune(report)),
            ]))),
            Item::Defined { .. } => {}
        }
    }
    flush_definitions(&mut definitions, &mut outputs);
    outputs.extend(error(outcome));
    outputs
}

/// An item's line as the terminal prints it, without the final newline.
fn line(item: &Item) -> String {
    render_item(item, Masking::None).trim_end_matches('\n').to_string()
}

/// Consecutive definitions make one output, so a cell of ten functions is one block.
fn flush_definitions(definitions: &mut Vec<(&str, &str)>, outputs: &mut Vec<Output>) {
    if definitions.is_empty() {
        return;
    }
    let plain =
        definitions.iter().map(|(name, description)| format!("{name} : {description}")).collect::<Vec<_>>().join("\n");
    outputs.push(Output::Display(Media::new(vec![
        MediaType::Plain(plain),
        MediaType::Html(html::definitions(definitions)),
    ])));
    definitions.clear();
}

/// Appends program output, joining it to the previous output of the same stream.
fn push_stream(outputs: &mut Vec<Output>, stream: Stream, text: &str) {
    if text.is_empty() {
        return;
    }
    let name = match stream {
        Stream::Stdout => Stdio::Stdout,
        Stream::Stderr => Stdio::Stderr,
    };
    if let Some(Output::Stream { name: previous, text: joined }) = outputs.last_mut() {
        if std::mem::discriminant(previous) == std::mem::discriminant(&name) {
            joined.push_str(text);
            return;
        }
    }
    outputs.push(Output::Stream { name, text: text.to_string() });
}

/// The cell's errors as one `error` output, in the terminal's order (compile-time errors, then
/// a runtime fault). The traceback is the terminal's rendering in colour: Jupyter front ends
/// show tracebacks as ANSI text, carets and all.
fn error(outcome: &Outcome) -> Option<Output> {
    let (faults, others): (Vec<&Diagnostic>, Vec<&Diagnostic>) = outcome
        .diagnostics
        .iter()
        .filter(|diagnostic| diagnostic.is_error())
        .partition(|diagnostic| diagnostic.kind == Kind::RuntimeFault);
    let errors: Vec<&Diagnostic> = others.into_iter().chain(faults).collect();
    let first = errors.first()?;
    Some(Output::Error {
        ename: format!("error[{}]", first.kind.code()),
        evalue: first.message.clone(),
        traceback: errors
            .iter()
            .map(|diagnostic| render_diagnostic(diagnostic, outcome, Style::Color).trim_end_matches('\n').to_string())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::Output;
    use expect_test::{expect, Expect};
    use jupyter_protocol::MediaType;
    use quasi_lang::{Session, SessionConfig};

    /// Runs cells in one session and shows the outputs of the last, one line per output with
    /// the MIME types of bundles.
    fn check(cells: &[&str], expected: Expect) {
        let mut session =
            Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() }).expect("a session starts");
        let mut outcome = None;
        for cell in cells {
            outcome = Some(session.eval(cell));
        }
        let outcome = outcome.expect("at least one cell");
        let mut shown = String::new();
        for output in super::outputs(&outcome) {
            match output {
                Output::Stream { name, text } => shown.push_str(&format!("stream {name:?}: {text:?}\n")),
                Output::Display(media) => shown.push_str(&format!("display {}\n", bundle(&media.content))),
                Output::Result(media) => shown.push_str(&format!("result {}\n", bundle(&media.content))),
                Output::Error { ename, evalue, traceback } => {
                    shown.push_str(&format!("error {ename}: {evalue} ({} in traceback)\n", traceback.len()))
                }
            }
        }
        expected.assert_eq(&shown);
    }

    fn bundle(content: &[MediaType]) -> String {
        content
            .iter()
            .map(|media| match media {
                MediaType::Plain(text) => format!("text/plain {text:?}"),
                other => other.mime_type().to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    #[test]
    fn definitions_group_and_last_value_is_the_result() {
        check(
            &["(define ((sq int) (x int)) (ret (mul x x)))\n(define ((cube int) (x int)) (ret (mul x (call sq x))))\n(call sq 3)\n(call cube 2)"],
            expect![[r#"
                display text/plain "sq : (int) -> int\ncube : (int) -> int", text/html
                display text/plain "9 : int", text/html
                result text/plain "8 : int", text/html
            "#]],
        );
    }

    #[test]
    fn program_output_is_a_stream_in_order() {
        check(
            &["(define ((printf int) (fmt (ptr int8)) ...))", "(call printf \"a\\n\")\n(call printf \"b\\n\")"],
            expect![[r#"
                stream Stdout: "a\n"
                display text/plain "2 : int", text/html
                stream Stdout: "b\n"
                result text/plain "2 : int", text/html
            "#]],
        );
    }

    #[test]
    fn compile_error_is_one_error_output() {
        check(
            &["(add 1 2.5)\n(add x 1)"],
            expect![[r#"
            error error[type]: operands of `add` must have one integer type, found `int` and `float` (2 in traceback)
        "#]],
        );
    }

    #[test]
    fn command_message_is_plain_text() {
        check(
            &["(define ((sq int) (x int)) (ret (mul x x)))", ":defs"],
            expect![[r#"
            display text/plain "sq : (int) -> int"
        "#]],
        );
    }
}
