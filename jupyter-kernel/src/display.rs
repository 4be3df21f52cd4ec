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
    /// A running cell's progress line (`Outcome::status`, an autotune's): one display per cell,
    /// made by the first line (`display_data` with a display id) and updated in place by the
    /// next (`update_display_data`); it keeps the last line when the cell ends.
    Progress { text: String, update: bool },
}

/// A finished cell's outputs: `quasi_repl::notebook` decides what a cell shows and in which order
/// (so `quasi test` compares notebooks against the same), this adds the MIME types. The kernel
/// publishes them as they come, through `Published`.
#[cfg(test)]
pub fn outputs(outcome: &Outcome) -> Vec<Output> {
    Published::default().take(outcome, true)
}

/// What of a running cell's outputs has been published, so that each step publishes only what
/// is new, and looks only at what is new: `lang` only appends to a running cell's outcome, so its
/// outputs only grow, and publishing a cell costs time linear in its output.
#[derive(Debug, Default)]
pub struct Published {
    /// The warnings are published: a running cell has all of its own from the start.
    warned: bool,
    /// Items whose outputs are published: whole, or a stream's text written so far.
    items: usize,
    /// The error output is published: it comes last, when the cell has ended.
    ended: bool,
    /// The progress line last published.
    status: Option<String>,
}

impl Published {
    /// The outputs of `outcome` not published yet. While the cell runs (`finished` false) its
    /// last output is held back unless it is a stream — the last value may not stay the last,
    /// which decides whether it is the cell's result — and a stream goes out as it grows.
    pub fn take(&mut self, outcome: &Outcome, finished: bool) -> Vec<Output> {
        let mut new = Vec::new();
        if !std::mem::replace(&mut self.warned, true) {
            new.extend(notebook::warnings(outcome).into_iter().map(|output| message(output, outcome)));
        }
        let outputs = notebook::item_outputs(outcome, self.items);
        let count = outputs.len();
        for (index, (output, end)) in outputs.into_iter().enumerate() {
            let stream = matches!(output.kind, OutputKind::Stream(_));
            if index + 1 == count && !finished && !stream {
                break;
            }
            new.push(message(output, outcome));
            self.items = end;
        }
        if let Some(status) = outcome.status.as_ref().filter(|status| self.status.as_ref() != Some(*status)) {
            new.push(Output::Progress { text: status.clone(), update: self.status.is_some() });
            self.status = Some(status.clone());
        }
        if finished && !std::mem::replace(&mut self.ended, true) {
            new.extend(notebook::errors(outcome).map(|output| message(output, outcome)));
        }
        new
    }
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
        Item::Timeline(timeline) => with_chart(html::timeline(timeline), chart::timeline(timeline)),
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
        // The table has every number; a chart that cannot be drawn is logged, not shown.
        Err(error) => {
            crate::logging::warning!("no chart for a bench, autotune or timeline table: {error}");
            vec![MediaType::Html(table)]
        }
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
    use quasi_lang::{Item, Outcome, Session, SessionConfig, Stream};

    /// Runs cells in one session and shows the outputs of the last, one line per output with
    /// the MIME types of bundles.
    fn check(cells: &[&str], expected: Expect) {
        expected.assert_eq(&shown(outputs(cells)));
    }

    /// A hand-made outcome's outputs, one line each.
    fn show(outcome: &Outcome, expected: Expect) {
        expected.assert_eq(&shown(super::outputs(outcome)));
    }

    fn shown(outputs: Vec<Output>) -> String {
        let mut shown = String::new();
        for output in outputs {
            match output {
                Output::Stream { name, text } => shown.push_str(&format!("stream {name:?}: {text:?}\n")),
                Output::Display(media) => shown.push_str(&format!("display {}\n", bundle(&media.content))),
                Output::Result(media) => shown.push_str(&format!("result {}\n", bundle(&media.content))),
                Output::Error { ename, evalue, traceback } => {
                    shown.push_str(&format!("error {ename}: {evalue} ({} in traceback)\n", traceback.len()))
                }
                Output::Progress { text, update } => shown.push_str(&format!("progress {text:?} (update {update})\n")),
            }
        }
        shown
    }

    /// The outputs of the last of `cells`, run in one session.
    fn outputs(cells: &[&str]) -> Vec<Output> {
        let mut session =
            // Not capturing: a capture redirects file descriptor 1 for the whole process, and the
            // test harness reports other tests on it meanwhile.
            Session::new(SessionConfig { capture_output: false, ..SessionConfig::default() })
                .expect("a session starts");
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
        // What a capturing session gives for `(call printf "a\n")` `(call printf "b\n")`.
        let output = |text: &str| Item::Output { stream: Stream::Stdout, text: text.to_string() };
        let value = Item::Value { text: "2".to_string(), ty: "int".to_string() };
        let outcome = Outcome { items: vec![output("a\n"), value.clone(), output("b\n"), value], ..Outcome::default() };
        show(
            &outcome,
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
                Output::Stream { .. } | Output::Error { .. } | Output::Progress { .. } => None,
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

    fn kinds(outputs: &[Output]) -> Vec<String> {
        outputs
            .iter()
            .map(|output| match output {
                Output::Stream { text, .. } => format!("stream {text:?}"),
                Output::Display(_) => "display".to_string(),
                Output::Result(_) => "result".to_string(),
                Output::Error { .. } => "error".to_string(),
                Output::Progress { .. } => "progress".to_string(),
            })
            .collect()
    }

    #[test]
    fn a_running_cell_publishes_streams_as_they_grow_and_holds_back_its_last_value() {
        let output = |text: &str| Item::Output { stream: Stream::Stdout, text: text.to_string() };
        let value = |text: &str| Item::Value { text: text.to_string(), ty: "int".to_string() };
        let mut published = super::Published::default();
        let mut outcome = Outcome { items: vec![output("tick 1\n")], ..Outcome::default() };
        assert_eq!(kinds(&published.take(&outcome, false)), ["stream \"tick 1\\n\""]);
        outcome.items.push(output("tick 2\n"));
        assert_eq!(kinds(&published.take(&outcome, false)), ["stream \"tick 2\\n\""]);
        outcome.items.push(value("9"));
        assert!(published.take(&outcome, false).is_empty(), "the last value may not stay the last");
        outcome.items.push(output("after\n"));
        assert_eq!(kinds(&published.take(&outcome, false)), ["result", "stream \"after\\n\""]);
        outcome.items.push(value("10"));
        assert_eq!(kinds(&published.take(&outcome, true)), ["result"]);
        assert!(published.take(&outcome, true).is_empty());
    }

    #[test]
    fn a_progress_line_makes_one_display_and_updates_it() {
        let mut published = super::Published::default();
        let mut outcome = Outcome { status: Some("autotune f: 1 of 4 variants".into()), ..Outcome::default() };
        let progress = |outputs: Vec<Output>| -> Vec<(String, bool)> {
            outputs
                .into_iter()
                .filter_map(|output| match output {
                    Output::Progress { text, update } => Some((text, update)),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(progress(published.take(&outcome, false)), [("autotune f: 1 of 4 variants".to_string(), false)]);
        // The same line again is nothing new; the next updates the display.
        assert!(progress(published.take(&outcome, false)).is_empty());
        outcome.status = Some("autotune f: 4 of 4 variants in 1.0 s".into());
        assert_eq!(
            progress(published.take(&outcome, false)),
            [("autotune f: 4 of 4 variants in 1.0 s".to_string(), true)]
        );
        // The finished outcome has no line: the display keeps its last.
        outcome.status = None;
        assert!(progress(published.take(&outcome, true)).is_empty());
    }

    #[test]
    fn a_running_cell_publishes_each_output_once_without_looking_back() {
        let output = |text: &str| Item::Output { stream: Stream::Stdout, text: text.to_string() };
        let mut published = super::Published::default();
        let mut outcome = Outcome::default();
        let mut shown = Vec::new();
        for tick in 0..1_000 {
            outcome.items.push(output(&format!("tick {tick}\n")));
            outcome.items.push(Item::Message(format!("message {tick}")));
            shown.extend(published.take(&outcome, false));
            // What is published is not looked at again: a step that went over the whole cell
            // (time quadratic in its output) would find one output fewer and lose its place.
            if let Some(first) = outcome.items.first_mut() {
                *first = output("");
            }
        }
        shown.extend(published.take(&outcome, true));
        let kinds = kinds(&shown);
        assert_eq!(kinds.len(), 2_000);
        assert!(kinds.iter().step_by(2).all(|kind| kind.starts_with("stream")), "{kinds:?}");
        assert!(kinds.iter().skip(1).step_by(2).all(|kind| kind == "display"), "{kinds:?}");
    }
}
