//! Display: a cell's `Outcome` as the iopub outputs a notebook shows, in the order a terminal
//! prints them: warnings, then the items in cell order, then the errors. Text comes from
//! `quasi_repl`; MIME bundles and message kinds are decided here.

use jupyter_protocol::{Media, MediaType, Stdio};
use quasi_lang::{Diagnostic, Item, Outcome, Stream};
use quasi_repl::notebook::{self, CellOutput, OutputKind, OutputSource};
use quasi_repl::{render_diagnostic, Style};

use crate::{chart, html};

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

/// Converts an outcome into outputs: `quasi_repl::notebook` decides what a cell shows and in
/// which order (so `quasi test` compares notebooks against the same), this adds the MIME types.
pub fn outputs(outcome: &Outcome) -> Vec<Output> {
    notebook::outputs(outcome).into_iter().map(|output| message(output, outcome)).collect()
}

fn message(output: CellOutput<'_>, outcome: &Outcome) -> Output {
    let CellOutput { kind, plain, source } = output;
    match (kind, source) {
        (OutputKind::Stream(stream), _) => Output::Stream {
            name: match stream {
                Stream::Stdout => Stdio::Stdout,
                Stream::Stderr => Stdio::Stderr,
            },
            text: plain,
        },
        (_, OutputSource::Errors(errors)) => error(&errors, outcome),
        (kind, source) => {
            let rich = match source {
                OutputSource::Warning(_) => vec![MediaType::Html(html::diagnostic(&plain, false))],
                OutputSource::Definitions(definitions) => vec![MediaType::Html(html::definitions(&definitions))],
                OutputSource::Item(item) => rich_item(item, &plain),
                OutputSource::Stream | OutputSource::Errors(_) => Vec::new(),
            };
            let bundle = Media::new(std::iter::once(MediaType::Plain(plain)).chain(rich).collect());
            if kind == OutputKind::Result {
                Output::Result(bundle)
            } else {
                Output::Display(bundle)
            }
        }
    }
}

/// What an item shows besides its plain text.
fn rich_item(item: &Item, plain: &str) -> Vec<MediaType> {
    match item {
        Item::Value { text, ty } => vec![MediaType::Html(html::value(text, ty))],
        // Listings go as Markdown code blocks too, which front ends highlight by language.
        Item::Listing { title, language, text } => vec![
            MediaType::Markdown(html::listing_markdown(title, *language, text)),
            MediaType::Html(html::listing(title, *language, text)),
        ],
        Item::Timing(timing) => vec![MediaType::Html(html::timing(timing))],
        Item::Bench(report) => with_chart(html::bench(plain, report), chart::bench(report)),
        Item::Autotune(report) => with_chart(html::autotune(report), chart::autotune(report)),
        Item::Message(_) | Item::Output { .. } | Item::Defined { .. } => Vec::new(),
    }
}

/// A table and its chart: the chart as `image/svg+xml`, and in the HTML below the table too.
/// Front ends show one MIME type of a bundle and rank HTML above SVG (JupyterLab's renderers:
/// `text/html` 50, `image/svg+xml` 80; the classic notebook and nbconvert alike), so a chart only
/// in `image/svg+xml` would never be seen. A chart plotters cannot draw leaves the table alone.
fn with_chart(table: String, chart: Result<String, chart::ChartError>) -> Vec<MediaType> {
    match chart {
        Ok(svg) => vec![MediaType::Html(format!("{table}<div class=\"quasi-chart\">{svg}</div>")), MediaType::Svg(svg)],
        Err(_) => vec![MediaType::Html(table)],
    }
}

/// The cell's errors as one `error` output, in the terminal's order (compile-time errors, then
/// a runtime fault). The traceback is the terminal's rendering in colour: Jupyter front ends
/// show tracebacks as ANSI text, carets and all.
fn error(errors: &[&Diagnostic], outcome: &Outcome) -> Output {
    let first = errors.first();
    Output::Error {
        ename: first.map_or_else(String::new, |first| format!("error[{}]", first.kind.code())),
        evalue: first.map_or_else(String::new, |first| first.message.clone()),
        traceback: errors
            .iter()
            .map(|diagnostic| render_diagnostic(diagnostic, outcome, Style::Color).trim_end_matches('\n').to_string())
            .collect(),
    }
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
        let mut shown = String::new();
        for output in outputs(cells) {
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

    /// The outputs of the last of `cells`, run in one session.
    fn outputs(cells: &[&str]) -> Vec<Output> {
        let mut session =
            Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() }).expect("a session starts");
        let mut outcome = None;
        for cell in cells {
            outcome = Some(session.eval(cell));
        }
        super::outputs(&outcome.expect("at least one cell"))
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

    /// Bench and autotune outputs carry a chart as SVG and below their HTML table; timings
    /// vary, so this shows the MIME types and what the HTML holds.
    #[test]
    fn bench_and_autotune_carry_charts() {
        let shown = |cells: &[&str]| -> String {
            let output = outputs(cells).into_iter().find_map(|output| match output {
                Output::Display(media) | Output::Result(media) => Some(media),
                Output::Stream { .. } | Output::Error { .. } => None,
            });
            let content = output.map(|media| media.content).unwrap_or_default();
            content
                .iter()
                .map(|media| match media {
                    MediaType::Html(html) => {
                        format!("text/html (table: {}, svg: {})", html.contains("<table"), html.contains("<svg"))
                    }
                    other => other.mime_type().to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let square = "(define ((sq int) (x int)) (ret (mul x x)))";
        expect!["text/plain, text/html (table: true, svg: true), image/svg+xml"]
            .assert_eq(&shown(&[square, "(bench (call sq 3) (iters 20))"]));
        let generator = r#"(rhai "fn gen_add(k) { quote(\"(define ((add_k int) (x int)) (ret (add x (mul ,k 0))))\", #{ k: k }) }")"#;
        expect!["text/plain, text/html (table: true, svg: true), image/svg+xml"]
            .assert_eq(&shown(&[generator, "(autotune add_k (gen gen_add k) (params (k 1 2)) (run (call add_k 3)))"]));
    }
}
