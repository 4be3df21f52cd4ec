//! quasi-repl: the one text renderer of session outcomes, used by the terminal, the kernel's
//! `text/plain` and the transcript harness alike.

use codespan_reporting::diagnostic::{Diagnostic as Report, Label as ReportLabel, LabelStyle, Severity as ReportSeverity};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::termcolor::{Ansi, NoColor, WriteColor};
use codespan_reporting::term::{self, Chars, Config};
use quasi_lang::{Diagnostic, Item, Kind, Outcome, Severity, Stream};

/// Whether to colour diagnostics (terminals) or not (transcripts, files).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Plain text.
    Plain,
    /// ANSI colours.
    Color,
}

/// How much of an outcome to show literally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Masking {
    /// Everything as it is (terminals).
    None,
    /// Addresses replaced by `0x<address>`, so transcripts compare across runs.
    Addresses,
}

/// Renders an outcome as the terminal shows it: compile-time diagnostics, then items in
/// order, then a fault that stopped the cell.
pub fn render(outcome: &Outcome, style: Style) -> String {
    render_masked(outcome, style, Masking::None)
}

/// `render` with run-dependent values masked.
pub fn render_masked(outcome: &Outcome, style: Style, masking: Masking) -> String {
    render_chunks(outcome, style, masking).into_iter().map(|(_, text)| text).collect()
}

/// `render`'s text cut where the stream changes, for a terminal that sends what compiled
/// code wrote to stderr to its own stderr. Chunks are in cell order; joined, they are exactly
/// `render`'s text, so terminal and transcripts cannot drift apart.
pub fn render_streams(outcome: &Outcome, style: Style) -> Vec<(Stream, String)> {
    render_chunks(outcome, style, Masking::None)
}

/// The one place that orders an outcome: compile-time diagnostics, items, then the fault
/// that stopped the cell. Everything but program output to stderr belongs on stdout.
fn render_chunks(outcome: &Outcome, style: Style, masking: Masking) -> Vec<(Stream, String)> {
    let mut chunks: Vec<(Stream, String)> = Vec::new();
    let mut push = |stream: Stream, text: String| match chunks.last_mut() {
        Some((last, joined)) if *last == stream => joined.push_str(&text),
        _ if text.is_empty() => {}
        _ => chunks.push((stream, text)),
    };
    let (faults, others): (Vec<&Diagnostic>, Vec<&Diagnostic>) = outcome.diagnostics.iter().partition(|diagnostic| diagnostic.kind == Kind::RuntimeFault);
    for diagnostic in others {
        push(Stream::Stdout, render_diagnostic(diagnostic, outcome, style));
    }
    for item in &outcome.items {
        let stream = match item {
            Item::Output { stream, .. } => *stream,
            _ => Stream::Stdout,
        };
        push(stream, render_item(item, masking));
    }
    for diagnostic in faults {
        push(Stream::Stdout, render_diagnostic(diagnostic, outcome, style));
    }
    chunks
}

/// One item as text, ending with a newline unless it is raw program output.
pub fn render_item(item: &Item, masking: Masking) -> String {
    match item {
        Item::Value { text, ty } if masking == Masking::Addresses && ty.starts_with("(ptr") && text != "0x0" => format!("0x<address> : {ty}\n"),
        Item::Value { text, ty } => format!("{text} : {ty}\n"),
        Item::Defined { name, description } => format!("{name} : {description}\n"),
        Item::Output { text, .. } => text.clone(),
        Item::Message(message) => format!("{message}\n"),
    }
}

/// A diagnostic in rustc's layout, with the source line and carets.
pub fn render_diagnostic(diagnostic: &Diagnostic, outcome: &Outcome, style: Style) -> String {
    let mut files = SimpleFiles::new();
    let mut file_ids = Vec::new();
    for (id, file) in &outcome.sources {
        file_ids.push((*id, files.add(file.name.clone(), file.text.clone())));
    }
    let file_of = |id| file_ids.iter().find(|(source, _)| *source == id).map(|(_, file)| *file);
    let severity = match diagnostic.severity {
        Severity::Error => ReportSeverity::Error,
        Severity::Warning => ReportSeverity::Warning,
    };
    let labels = diagnostic
        .labels
        .iter()
        .filter_map(|label| {
            let file = file_of(label.span.source)?;
            let range = label.span.start as usize..label.span.end as usize;
            let style = if label.primary { LabelStyle::Primary } else { LabelStyle::Secondary };
            Some(ReportLabel::new(style, file, range).with_message(label.message.clone()))
        })
        .collect();
    let report = Report::new(severity).with_code(diagnostic.kind.code()).with_message(diagnostic.message.clone()).with_labels(labels).with_notes(diagnostic.notes.iter().map(|note| format!("note: {note}")).collect());
    let config = Config { chars: Chars::ascii(), ..Config::default() };
    let mut buffer = Vec::new();
    let emitted = match style {
        Style::Plain => emit(&mut NoColor::new(&mut buffer), &config, &files, &report),
        Style::Color => emit(&mut Ansi::new(&mut buffer), &config, &files, &report),
    };
    match emitted {
        Ok(()) => String::from_utf8_lossy(&buffer).into_owned(),
        Err(_) => format!("error[{}]: {}\n", diagnostic.kind.code(), diagnostic.message),
    }
}

fn emit(writer: &mut dyn WriteColor, config: &Config, files: &SimpleFiles<String, String>, report: &Report<usize>) -> Result<(), codespan_reporting::files::Error> {
    term::emit(writer, config, files, report)
}
