//! Notebooks: the outputs a cell shows in a notebook — the one ordering that `quasi-kernel`
//! sends and that `quasi test NOTEBOOK.ipynb` compares — and reading the outputs a saved
//! `.ipynb` file holds.
//!
//! A notebook cell shows warnings first, then the items in cell order (consecutive definitions
//! as one output, program output as streams, the last value as the cell's result), then one
//! error holding every error. The kernel adds HTML and Markdown to these plain texts.

use std::sync::LazyLock;

use quasi_lang::{Diagnostic, Item, Outcome, Stream};
use regex::Regex;

use crate::{render_diagnostic, render_item, Masking, Style};

/// What kind of message an output is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// Program output (`stream`).
    Stream(Stream),
    /// Shown in place (`display_data`).
    Display,
    /// The cell's result (`execute_result`): its last value.
    Result,
    /// The cell failed (`error`).
    Error,
}

/// Where an output came from, for front ends that show more than text.
#[derive(Clone, Debug)]
pub enum OutputSource<'o> {
    /// A warning.
    Warning(&'o Diagnostic),
    /// Consecutive definitions: names and descriptions.
    Definitions(Vec<(&'o str, &'o str)>),
    /// A value, message, listing, timing, bench or autotune item.
    Item(&'o Item),
    /// Program output (consecutive writes to one stream joined).
    Stream,
    /// Every error of the cell: compile-time errors, then a runtime fault.
    Errors(Vec<&'o Diagnostic>),
}

/// One output of a notebook cell.
#[derive(Clone, Debug)]
pub struct CellOutput<'o> {
    /// The message kind.
    pub kind: OutputKind,
    /// Its text as `text/plain` (a stream's text; an error's plain traceback).
    pub plain: String,
    /// What it shows.
    pub source: OutputSource<'o>,
}

/// A cell's outcome as notebook outputs, in the order a notebook shows them.
pub fn outputs(outcome: &Outcome) -> Vec<CellOutput<'_>> {
    let mut outputs = warnings(outcome);
    outputs.extend(item_outputs(outcome, 0).into_iter().map(|(output, _)| output));
    outputs.extend(errors(outcome));
    outputs
}

/// The outputs a notebook shows first: one per warning.
pub fn warnings(outcome: &Outcome) -> Vec<CellOutput<'_>> {
    let warnings = outcome.diagnostics.iter().filter(|diagnostic| !diagnostic.is_error());
    warnings
        .map(|diagnostic| {
            let plain = render_diagnostic(diagnostic, outcome, Style::Plain).trim_end_matches('\n').to_string();
            CellOutput { kind: OutputKind::Display, plain, source: OutputSource::Warning(diagnostic) }
        })
        .collect()
}

/// The outputs of the items from index `start` on, each with the index one past its last item.
/// Those of a running cell's new items, for a front end that shows the cell as it grows: it
/// starts where an output ends (or mid-stream: the stream's rest is one more stream output), so
/// showing a cell costs time linear in its output.
pub fn item_outputs(outcome: &Outcome, start: usize) -> Vec<(CellOutput<'_>, usize)> {
    let items = outcome.items.get(start..).unwrap_or_default();
    let last_value = items.iter().rposition(|item| matches!(item, Item::Value { .. }));
    let mut outputs = Vec::new();
    let mut definitions: Vec<(&str, &str)> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        if let Item::Defined { name, description } = item {
            definitions.push((name, description));
            continue;
        }
        flush_definitions(&mut definitions, &mut outputs, start + index);
        let end = start + index + 1;
        match item {
            Item::Output { stream, text } => push_stream(&mut outputs, *stream, text, end),
            Item::Value { .. } => {
                let kind = if Some(index) == last_value { OutputKind::Result } else { OutputKind::Display };
                outputs.push((CellOutput { kind, plain: line(item), source: OutputSource::Item(item) }, end));
            }
            _ => outputs.push((
                CellOutput { kind: OutputKind::Display, plain: line(item), source: OutputSource::Item(item) },
                end,
            )),
        }
    }
    flush_definitions(&mut definitions, &mut outputs, outcome.items.len());
    outputs
}

/// The output a notebook shows last: one error holding every error of the cell, compile-time
/// errors first, then a runtime fault.
pub fn errors(outcome: &Outcome) -> Option<CellOutput<'_>> {
    let (faults, others): (Vec<&Diagnostic>, Vec<&Diagnostic>) = outcome
        .diagnostics
        .iter()
        .filter(|diagnostic| diagnostic.is_error())
        .partition(|diagnostic| diagnostic.ends_the_run());
    let errors: Vec<&Diagnostic> = others.into_iter().chain(faults).collect();
    if errors.is_empty() {
        return None;
    }
    let plain = errors
        .iter()
        .map(|diagnostic| render_diagnostic(diagnostic, outcome, Style::Plain).trim_end_matches('\n').to_string())
        .collect::<Vec<_>>()
        .join("\n");
    Some(CellOutput { kind: OutputKind::Error, plain, source: OutputSource::Errors(errors) })
}

/// An item's line as the terminal prints it, without the final newline.
fn line(item: &Item) -> String {
    render_item(item, Masking::None).trim_end_matches('\n').to_string()
}

/// Consecutive definitions make one output, so a cell of ten functions is one block; it ends
/// before item `end`.
fn flush_definitions<'o>(
    definitions: &mut Vec<(&'o str, &'o str)>,
    outputs: &mut Vec<(CellOutput<'o>, usize)>,
    end: usize,
) {
    if definitions.is_empty() {
        return;
    }
    let plain = definitions
        .iter()
        .map(|(name, description)| format!("{name}{}{description}", crate::definition_separator(name)))
        .collect::<Vec<_>>()
        .join("\n");
    let source = OutputSource::Definitions(std::mem::take(definitions));
    outputs.push((CellOutput { kind: OutputKind::Display, plain, source }, end));
}

/// Appends program output, joining it to the previous output of the same stream; the output
/// ends before item `end`.
fn push_stream(outputs: &mut Vec<(CellOutput<'_>, usize)>, stream: Stream, text: &str, end: usize) {
    if text.is_empty() {
        return;
    }
    if let Some((CellOutput { kind: OutputKind::Stream(previous), plain, .. }, previous_end)) = outputs.last_mut() {
        if *previous == stream {
            plain.push_str(text);
            *previous_end = end;
            return;
        }
    }
    let output = CellOutput { kind: OutputKind::Stream(stream), plain: text.to_string(), source: OutputSource::Stream };
    outputs.push((output, end));
}

/// A cell's outputs as one text to compare: streams as written, every other output's plain
/// text on lines of its own.
pub fn cell_text<'t>(outputs: impl IntoIterator<Item = (bool, &'t str)>) -> String {
    let mut text = String::new();
    for (is_stream, plain) in outputs {
        text.push_str(plain);
        if !is_stream && !plain.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

/// What a saved cell showed and how it is tagged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedCell {
    /// The position of the cell among all cells of the notebook, from 0.
    pub index: usize,
    /// The code.
    pub source: String,
    /// The saved outputs as `cell_text` joins them (tracebacks without colour).
    pub text: String,
    /// The cell is tagged `raises-exception`: it is meant to fail.
    pub raises: bool,
    /// Its metadata says `"quasi": {"varies": true}`: what it shows depends on timing beyond
    /// what `comparable` masks (an autotune's ranking and winner, the timeline of the fastest),
    /// so only whether it fails and whether it shows anything are compared.
    pub varies: bool,
}

/// The code cells of a notebook (nbformat 4) with their saved outputs.
pub fn read_notebook(text: &str) -> Result<Vec<SavedCell>, String> {
    let notebook: serde_json::Value = serde_json::from_str(text).map_err(|error| format!("not a notebook: {error}"))?;
    let cells = notebook.get("cells").and_then(|cells| cells.as_array()).ok_or("not a notebook: no `cells` list")?;
    let mut saved = Vec::new();
    for (index, cell) in cells.iter().enumerate() {
        if cell.get("cell_type").and_then(|kind| kind.as_str()) != Some("code") {
            continue;
        }
        let raises = cell
            .pointer("/metadata/tags")
            .and_then(|tags| tags.as_array())
            .is_some_and(|tags| tags.iter().any(|tag| tag.as_str() == Some("raises-exception")));
        let varies = cell.pointer("/metadata/quasi/varies").and_then(|varies| varies.as_bool()).unwrap_or(false);
        let outputs = cell.get("outputs").and_then(|outputs| outputs.as_array()).map_or(&[][..], Vec::as_slice);
        // A progress display (an autotune's, `"quasi": {"progress": true}`) is what the cell
        // showed while it ran, shown or not as timing decides: not compared.
        let progress = |output: &&serde_json::Value| {
            output.pointer("/metadata/quasi/progress").and_then(|progress| progress.as_bool()).unwrap_or(false)
        };
        let pieces: Vec<(bool, String)> = outputs.iter().filter(|output| !progress(output)).map(saved_output).collect();
        saved.push(SavedCell {
            index,
            source: multiline(cell.get("source")),
            text: cell_text(pieces.iter().map(|(is_stream, text)| (*is_stream, text.as_str()))),
            raises,
            varies,
        });
    }
    Ok(saved)
}

/// What a notebook needs of the machine (`"quasi": {"requires": ["cuda-device"]}` in its
/// metadata), as a transcript header's `# requires:` line says it.
pub fn requirements(text: &str) -> Vec<String> {
    let notebook: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let requires = notebook.pointer("/metadata/quasi/requires").and_then(|requires| requires.as_array());
    requires.into_iter().flatten().filter_map(|requirement| requirement.as_str().map(str::to_string)).collect()
}

/// One saved output as (is a stream, plain text).
fn saved_output(output: &serde_json::Value) -> (bool, String) {
    match output.get("output_type").and_then(|kind| kind.as_str()) {
        Some("stream") => (true, multiline(output.get("text"))),
        Some("error") => (false, strip_ansi(&multiline(output.get("traceback")))),
        _ => (false, multiline(output.pointer("/data/text~1plain"))),
    }
}

/// nbformat's multiline strings: one string, or a list of strings to join. Tracebacks are a list
/// of lines without their ends.
fn multiline(value: Option<&serde_json::Value>) -> String {
    match value {
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(serde_json::Value::Array(parts)) => {
            let strings: Vec<&str> = parts.iter().filter_map(|part| part.as_str()).collect();
            if strings.iter().all(|part| !part.ends_with('\n')) && strings.len() > 1 {
                strings.join("\n")
            } else {
                strings.concat()
            }
        }
        _ => String::new(),
    }
}

/// Text without ANSI colour sequences.
pub fn strip_ansi(text: &str) -> String {
    static ANSI: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\x1b\[[0-9;]*[A-Za-z]").expect("a valid pattern"));
    ANSI.replace_all(text, "").into_owned()
}

/// A cell's text without what legitimately changes between runs: colour, addresses, durations
/// and shares of time, the column widths of tables that hold them, `:ptx`'s ptxas line (it
/// depends on whether and which ptxas is installed), timing rows of functions promoted by
/// tiered compilation (which cell's boundary a background compile ends at depends on timing),
/// and the bars of a `:timeline`.
pub fn comparable(text: &str) -> String {
    static VOLATILE: LazyLock<[(Regex, &str); 9]> = LazyLock::new(|| {
        let pattern = |text: &str| Regex::new(text).expect("a valid pattern");
        [
            (pattern(r"[─■▒█ ]*[■▒█][─■▒█ ]*"), "<bars>"),
            (pattern(r"(?m)^\W*promoted \S+ \(opt \d in the background.*\n"), ""),
            (pattern(r"(?m)^ptxas[ :].*$"), "ptxas <resources>"),
            (pattern(r"0x[0-9a-f]+"), "0x<address>"),
            (pattern(r"\b\d+(\.\d+)?\s?(ns|µs|us|ms|s)\b"), "<duration>"),
            (pattern(r"\b\d+(\.\d+)?\s?%"), "<share>"),
            (pattern(r"\b\d+(\.\d+)?\s?[KMGT]?(B|FLOP)/s\b"), "<throughput>"),
            // Table rules and padding grow with the widest cell.
            (pattern(r"([─━═=\-+┼┬┴├┤])[─━═=\-+┼┬┴├┤]{2,}"), "$1"),
            (pattern(r"[ \t]+"), " "),
        ]
    });
    let mut text = strip_ansi(text);
    for (pattern, replacement) in VOLATILE.iter() {
        text = pattern.replace_all(&text, *replacement).into_owned();
    }
    text.lines().map(|line| format!("{}\n", line.trim_end())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_parts_do_not_count() {
        assert_eq!(comparable("\u{1b}[1mtook 1.25 ms\u{1b}[0m at 0x7f00ab"), comparable("took 3 µs at 0x55aa"));
        assert_eq!(comparable("| a    | 12.0 ms |\n+------+---------+"), comparable("| a | 9 ms |\n+---+----+"));
        assert_ne!(comparable("49 : int"), comparable("48 : int"));
        let found = "}\nptxas sm_90: 8 registers, 0 bytes spill stores, 0 bytes spill loads, 0 bytes smem; occupancy …";
        assert_eq!(comparable(found), comparable("}\nptxas: not found, so no register count (…)"));
        assert_ne!(comparable(found), comparable("}\n"));
        let bars = "host          ■■■─────██\nsubmission 2    ▒▒▒███████▒\n";
        assert_eq!(comparable(bars), comparable("host          ──■■■■■■■■■■■\nsubmission 2  ▒▒████▒\n"));
        let promoted = "│ total ┆ 1 ms ┆ 100% │\n│ promoted sq (opt 3 in the background, 9 ms after its definition) ┆ 3 ms ┆ - │\n└─┘\n";
        assert_eq!(comparable(promoted), comparable("│ total ┆ 2 ms ┆ 100% │\n└─┘\n"));
    }

    #[test]
    fn a_notebook_says_what_it_requires_in_its_metadata() {
        let device = r#"{"cells": [], "metadata": {"quasi": {"requires": ["cuda-device"]}}}"#;
        assert_eq!(requirements(device), vec!["cuda-device".to_string()]);
        assert!(requirements(r#"{"cells": [], "metadata": {}}"#).is_empty());
        assert!(requirements("not json").is_empty());
    }

    #[test]
    fn a_saved_notebook_reads_as_code_cells_with_their_text() {
        let text = r##"{"cells": [
            {"cell_type": "markdown", "source": ["# Title"], "metadata": {}},
            {"cell_type": "code", "source": ["(define ((sq int) (x int))\n", "  (ret (mul x x)))"], "metadata": {},
             "outputs": [{"output_type": "display_data", "data": {"text/plain": ["sq : (int) -> int"]}, "metadata": {}}]},
            {"cell_type": "code", "source": "(call printf \"hi\\n\")", "metadata": {"tags": ["raises-exception"]},
             "outputs": [{"output_type": "stream", "name": "stdout", "text": ["h", "i\n"]},
                         {"output_type": "error", "ename": "e", "evalue": "v",
                          "traceback": ["\u001b[1merror[type]\u001b[0m: bad", "  --> cell 2:1:1"]}]}
        ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"##;
        let cells = read_notebook(text).expect("a notebook");
        assert_eq!(cells.len(), 2);
        assert_eq!(cells[0].index, 1);
        assert_eq!(cells[0].source, "(define ((sq int) (x int))\n  (ret (mul x x)))");
        assert_eq!(cells[0].text, "sq : (int) -> int\n");
        assert!(!cells[0].raises);
        assert!(cells[1].raises);
        assert_eq!(cells[1].text, "hi\nerror[type]: bad\n  --> cell 2:1:1\n");
    }
}
