//! quasi-repl: the one text renderer of session outcomes, used by the terminal, the kernel's
//! `text/plain` and the transcript harness alike; the transcript engine (`transcript`) and the
//! notebook outputs of a cell (`notebook`) that `quasi test`, the harness and the kernel share;
//! the one highlighter of listings (`highlight`), for the terminal's colours and the kernel's HTML.

pub mod highlight;
pub mod notebook;
mod timeline;
pub mod transcript;
mod width;

pub use width::terminal_width;

use codespan_reporting::diagnostic::{
    Diagnostic as Report, Label as ReportLabel, LabelStyle, Severity as ReportSeverity,
};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::termcolor::{Ansi, NoColor, WriteColor};
use codespan_reporting::term::{self, Chars, Config};
use std::time::Duration;

use comfy_table::{presets, Table};
use quasi_lang::{
    AutotuneReport, BenchReport, Diagnostic, Item, Language, Outcome, PhaseTimes, Severity, Stream, Throughput,
};

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
    /// Addresses replaced by `0x<address>`, durations by `<time>` (and what depends on them,
    /// like the order of autotuned variants), so transcripts compare across runs.
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

fn render_chunks(outcome: &Outcome, style: Style, masking: Masking) -> Vec<(Stream, String)> {
    Rendering::new(style, masking).next(outcome)
}

/// The one place that orders an outcome: compile-time diagnostics, items, then the fault
/// that stopped the cell. Everything but program output to stderr belongs on stdout.
///
/// It renders a running cell as it grows: each `next` renders only what the outcome gained
/// since the last, so showing a cell costs time linear in its output however often it is
/// shown. A fresh `Rendering`'s first `next` is the whole `render_streams`.
#[derive(Debug)]
pub struct Rendering {
    style: Style,
    masking: Masking,
    /// Compile-time diagnostics rendered.
    diagnostics: usize,
    /// Items rendered.
    items: usize,
    /// The last item rendered is program output that stopped mid-line: it is ended before the
    /// next line Quasi prints.
    open_line: bool,
    /// The fault was rendered (it comes last: `lang` adds it when the cell stops).
    faulted: bool,
    /// The terminal's width, which diagnostics' source lines are fitted to (`width`).
    width: Option<usize>,
}

impl Rendering {
    /// Nothing rendered yet.
    pub fn new(style: Style, masking: Masking) -> Rendering {
        Rendering { style, masking, diagnostics: 0, items: 0, open_line: false, faulted: false, width: None }
    }

    /// Diagnostics' source lines wider than `width` columns are shown as a window around their
    /// labels, so that a terminal of that width does not wrap them apart from their carets.
    pub fn with_width(self, width: Option<usize>) -> Rendering {
        Rendering { width, ..self }
    }

    fn diagnostic(&self, diagnostic: &Diagnostic, outcome: &Outcome) -> String {
        let text = render_diagnostic(diagnostic, outcome, self.style);
        match self.width {
            Some(width) => width::fit_diagnostic(&text, width),
            None => text,
        }
    }

    /// What `outcome` adds to the outcomes rendered before, as chunks of one stream each.
    /// `lang` only appends to a running cell's outcome (`Session::eval_streaming`), so the
    /// chunks of every call, joined, are the rendering of the last outcome.
    pub fn next(&mut self, outcome: &Outcome) -> Vec<(Stream, String)> {
        let mut chunks: Vec<(Stream, String)> = Vec::new();
        let mut push = |stream: Stream, text: String| match chunks.last_mut() {
            Some((last, joined)) if *last == stream => joined.push_str(&text),
            _ if text.is_empty() => {}
            _ => chunks.push((stream, text)),
        };
        let (faults, others): (Vec<&Diagnostic>, Vec<&Diagnostic>) =
            outcome.diagnostics.iter().partition(|diagnostic| diagnostic.ends_the_run());
        for diagnostic in others.iter().skip(self.diagnostics) {
            push(Stream::Stdout, self.diagnostic(diagnostic, outcome));
        }
        self.diagnostics = others.len();
        for item in outcome.items.get(self.items..).unwrap_or_default() {
            let stream = match item {
                Item::Output { stream, text } => {
                    self.open_line = !text.is_empty() && !text.ends_with('\n');
                    push(*stream, text.clone());
                    continue;
                }
                _ => Stream::Stdout,
            };
            if std::mem::take(&mut self.open_line) {
                push(Stream::Stdout, "\n".to_string());
            }
            let text = match item {
                Item::Listing { title, language, text } => render_listing(title, *language, text, self.style),
                _ => render_item(item, self.masking),
            };
            push(stream, text);
        }
        self.items = outcome.items.len();
        if !faults.is_empty() && !self.faulted {
            if std::mem::take(&mut self.open_line) {
                push(Stream::Stdout, "\n".to_string());
            }
            for diagnostic in faults {
                push(Stream::Stdout, self.diagnostic(diagnostic, outcome));
            }
            self.faulted = true;
        }
        chunks
    }
}

/// What stands between a defined name and its description (§5.3 of docs/language.md): a struct's
/// line reads `struct point { x : int, y : int }`, every other `NAME : …`.
pub fn definition_separator(name: &str) -> &'static str {
    if name.starts_with("struct ") {
        " "
    } else {
        " : "
    }
}

/// One item as text, ending with a newline unless it is raw program output.
pub fn render_item(item: &Item, masking: Masking) -> String {
    match item {
        Item::Value { text, ty } if masking == Masking::Addresses && ty.starts_with("(ptr") && text != "0x0" => {
            format!("0x<address> : {ty}\n")
        }
        Item::Value { text, ty } => format!("{text} : {ty}\n"),
        Item::Defined { name, description } if masking == Masking::Addresses && description.contains("autotuned: ") => {
            let kept = description.split("autotuned: ").next().unwrap_or("");
            format!("{name} : {kept}autotuned: <fastest>)\n")
        }
        Item::Defined { name, description } => format!("{name}{}{description}\n", definition_separator(name)),
        Item::Listing { title, language, text } => render_listing(title, *language, text, Style::Plain),
        Item::Timing(timing) => render_timing(timing, masking),
        Item::Bench(report) => render_bench(report, masking),
        Item::Autotune(report) => render_autotune(report, masking),
        Item::Timeline(timeline) => timeline::render_timeline(timeline, masking),
        Item::Output { text, .. } => text.clone(),
        Item::Message(message) => format!("{message}\n"),
    }
}

/// A listing under its title (`:expand` has none, so its forms print bare), coloured by its
/// grammar under `Style::Color`.
fn render_listing(title: &str, language: Language, text: &str, style: Style) -> String {
    let (heading, text) = match style {
        Style::Plain => (format!("== {title} =="), text.to_string()),
        Style::Color => (format!("\x1b[1m== {title} ==\x1b[0m"), highlight::ansi(language, text)),
    };
    if title.is_empty() {
        format!("{text}\n")
    } else {
        format!("{heading}\n{text}\n")
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
    // Errors name their kind (`error[type]`); warnings are plain `warning:` (docs/language.md §10).
    let report = Report::new(severity);
    let report = if diagnostic.is_error() { report.with_code(diagnostic.kind.code()) } else { report };
    let report = report
        .with_message(diagnostic.message.clone())
        .with_labels(labels)
        .with_notes(diagnostic.notes.iter().map(|note| format!("note: {note}")).collect());
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

fn emit(
    writer: &mut dyn WriteColor,
    config: &Config,
    files: &SimpleFiles<String, String>,
    report: &Report<usize>,
) -> Result<(), codespan_reporting::files::Error> {
    term::emit(writer, config, files, report)
}

/// A duration in the unit that keeps three significant decimals readable.
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos() as f64;
    if nanos >= 100_000.0 {
        format!("{:.3} ms", nanos / 1e6)
    } else if nanos >= 100.0 {
        format!("{:.3} µs", nanos / 1e3)
    } else {
        format!("{nanos:.0} ns")
    }
}

fn masked_duration(duration: Duration, masking: Masking) -> String {
    if masking == Masking::Addresses {
        "<time>".into()
    } else {
        format_duration(duration)
    }
}

/// The phase table of a cell (`:time`).
fn render_timing(timing: &PhaseTimes, masking: Masking) -> String {
    let mut table = Table::new();
    // GPU rows (§7.5) say more than a time: bytes, GB/s, the launch's geometry.
    let detailed = !timing.device.is_empty();
    let mut header = vec!["phase", "time", "share"];
    if detailed {
        header.push("detail");
    }
    table.load_style(presets::UTF8_FULL_CONDENSED).set_header(header);
    let total = timing.total().as_secs_f64().max(1e-12);
    let share = |duration: Duration| {
        if masking == Masking::Addresses {
            "<share>".to_string()
        } else {
            format!("{:.1}%", 100.0 * duration.as_secs_f64() / total)
        }
    };
    for (phase, duration) in &timing.phases {
        let mut row = vec![phase.name().to_string(), masked_duration(*duration, masking), share(*duration)];
        if detailed {
            row.push(String::new());
        }
        table.add_row(row);
    }
    for device in &timing.device {
        let mut detail: Vec<String> = device.bytes.map(byte_text).into_iter().collect();
        detail.extend((!device.detail.is_empty()).then(|| device.detail.clone()));
        let detail = detail.join(", ");
        let detail =
            if masking == Masking::Addresses && detail.contains("/s") { "<detail>".to_string() } else { detail };
        // Rows inside `run` are part of it, not added to the total.
        let label = if device.during_run { format!("  {}", device.label) } else { device.label.clone() };
        table.add_row(vec![label, masked_duration(device.duration, masking), share(device.duration), detail]);
    }
    let mut last = vec!["total".to_string(), masked_duration(timing.total(), masking), "100%".to_string()];
    if detailed {
        last.push(String::new());
    }
    table.add_row(last);
    // Tiered compilation's swaps since the last cell: background work, not in the total. Which
    // cell's boundary a swap falls on depends on timing, so transcripts leave them out.
    if masking != Masking::Addresses {
        for promotion in &timing.promotions {
            let mut row = vec![promotion_label(promotion), format_duration(promotion.compile), "-".to_string()];
            if detailed {
                row.push(String::new());
            }
            table.add_row(row);
        }
    }
    format!("{table}\n")
}

/// A timing row's label for a function tiered compilation promoted; the row's time is the
/// background compile's.
pub fn promotion_label(promotion: &quasi_lang::Promotion) -> String {
    format!(
        "promoted {} (opt {} in the background, {} after its definition)",
        promotion.function,
        promotion.level,
        format_duration(promotion.since_definition)
    )
}

/// A byte count in decimal units, as bandwidths are quoted.
pub fn byte_text(bytes: u64) -> String {
    let value = bytes as f64;
    let (scaled, unit) = [(1e9, "GB"), (1e6, "MB"), (1e3, "kB")]
        .into_iter()
        .find(|(scale, _)| value >= *scale)
        .map_or((value, "B"), |(scale, unit)| (value / scale, unit));
    if unit == "B" {
        format!("{bytes} B")
    } else {
        format!("{scaled:.1} {unit}")
    }
}

/// A throughput as a bench shows it: `23.7 GB/s`, `1.2 GFLOP/s`.
pub fn throughput_text(throughput: Throughput) -> String {
    let (value, unit) = match throughput {
        Throughput::Bytes(bytes) => (bytes, "B/s"),
        Throughput::Flops(flops) => (flops, "FLOP/s"),
    };
    let (scaled, prefix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(scale, _)| value >= *scale)
        .map_or((value, ""), |(scale, prefix)| (value / scale, prefix));
    format!("{scaled:.1} {prefix}{unit}")
}

/// `(bench …)` as BenchmarkTools/`%timeit` users expect it.
fn render_bench(report: &BenchReport, masking: Masking) -> String {
    let time = |duration| masked_duration(duration, masking);
    let runs = if masking == Masking::Addresses { "<runs>".to_string() } else { report.runs.to_string() };
    let elapsed = if masking == Masking::Addresses {
        "<time>".to_string()
    } else {
        format!("{:.2} s", report.elapsed.as_secs_f64())
    };
    let mut text = format!("bench: {runs} runs in {elapsed} ({} warm-up)\n", report.warmup);
    text.push_str(&format!(
        "  min {}  median {}  mean {}  std {}",
        time(report.min),
        time(report.median),
        time(report.mean),
        time(report.std)
    ));
    for throughput in &report.throughput {
        text.push_str("  ");
        text.push_str(&if masking == Masking::Addresses {
            "<throughput>".to_string()
        } else {
            throughput_text(*throughput)
        });
    }
    text.push('\n');
    // Whether a run is noisy depends on the machine: a transcript does not show it.
    if let Some(noise) = report.noise().filter(|_| masking != Masking::Addresses) {
        text.push_str(&format!("  warning: {noise}\n"));
    }
    text
}

/// The autotuning table, fastest first (in parameter order when masked: the order depends on
/// timings).
fn render_autotune(report: &AutotuneReport, masking: Masking) -> String {
    // A Slurm node is the machine's host name: a transcript masks it.
    let node = |name: &str| if masking == Masking::Addresses { "<node>".to_string() } else { name.to_string() };
    let mut text = format!("{}\n", report.summary_naming_nodes(&node));
    let (header, rows) = autotune_table(report, masking);
    let mut table = Table::new();
    table.load_style(presets::UTF8_FULL_CONDENSED);
    table.set_header(header);
    for row in rows {
        table.add_row(row);
    }
    text.push_str(&format!("{table}\n"));
    text
}

/// The autotuning table's head and rows, as the terminal and the notebook show them: rank, the
/// parameters, median, min, the throughput of each `(bytes E)` and `(flops E)`, vs first, check,
/// source and (when timed on Slurm) node. Fastest first, or in parameter order when masked.
pub fn autotune_table(report: &AutotuneReport, masking: Masking) -> (Vec<String>, Vec<Vec<String>>) {
    let masked = masking == Masking::Addresses;
    let mut header = vec!["rank".to_string()];
    header.extend(report.params.iter().cloned());
    header.extend(["median", "min"].map(String::from));
    // As many throughputs as the variants that passed have (they all have the same kinds).
    let throughputs = report
        .variants
        .iter()
        .find_map(|variant| variant.result.as_ref().ok())
        .map_or(0, |bench| bench.throughput.len());
    header.extend((0..throughputs).map(|_| "throughput".to_string()));
    header.extend(["vs first", "check", "source"].map(String::from));
    let on_nodes = report.variants.iter().any(|variant| variant.node.is_some());
    if on_nodes {
        header.push("node".to_string());
    }
    let mut variants: Vec<_> = report.variants.iter().collect();
    if masked {
        variants.sort_by(|a, b| a.values.cmp(&b.values));
    }
    let rows = variants
        .iter()
        .enumerate()
        .map(|(rank, variant)| {
            let rank_text = match (&variant.result, masked) {
                (Err(_), _) => "-".to_string(),
                (Ok(_), true) => "<rank>".to_string(),
                (Ok(_), false) => (rank + 1).to_string(),
            };
            let mut row = vec![rank_text];
            row.extend(variant.values.iter().cloned());
            match &variant.result {
                Ok(bench) => {
                    let speedup = match (report.baseline, masked) {
                        (_, true) => "<ratio>".to_string(),
                        (Some(baseline), false) => {
                            format!("{:.2}×", baseline.as_secs_f64() / bench.median.as_secs_f64().max(1e-12))
                        }
                        (None, false) => "-".to_string(),
                    };
                    row.extend([masked_duration(bench.median, masking), masked_duration(bench.min, masking)]);
                    row.extend((0..throughputs).map(|index| match bench.throughput.get(index) {
                        Some(_) if masked => "<throughput>".to_string(),
                        Some(throughput) => throughput_text(*throughput),
                        None => "-".to_string(),
                    }));
                    row.extend([speedup, "ok".to_string()]);
                }
                Err(reason) => {
                    row.extend(std::iter::repeat_n("-".to_string(), 3 + throughputs));
                    row.push(reason.clone());
                }
            }
            row.push(variant.source.label().to_string());
            if on_nodes {
                let node = variant.node.as_deref().map_or_else(
                    || "-".to_string(),
                    |name| {
                        if masked {
                            "<node>".to_string()
                        } else {
                            name.to_string()
                        }
                    },
                );
                row.push(node);
            }
            row
        })
        .collect();
    (header, rows)
}
