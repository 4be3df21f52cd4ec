//! `:timeline` as text: a bar per lane (the host, each submission) over the time from the start
//! of the cell's code, then a table of every span with its start, end and time. Transcripts mask
//! what depends on timing: the bars and the times.

use comfy_table::{presets, Table};
use quasi_lang::{Lane, SpanKind, Timeline};

use crate::{byte_text, format_duration, masked_duration, Masking};

/// Columns of a lane's bar.
const WIDTH: usize = 64;

/// The character a span of this kind fills its columns with; later kinds draw over earlier.
fn mark(kind: SpanKind) -> char {
    match kind {
        SpanKind::Code => '─',
        SpanKind::Host => '■',
        SpanKind::Copy => '▒',
        SpanKind::Kernel => '█',
    }
}

/// A lane's bar: each column is `length / WIDTH` of time; a span fills at least one column.
fn bar(timeline: &Timeline, lane: Lane) -> String {
    let mut columns = [' '; WIDTH];
    let length = timeline.length.as_secs_f64().max(1e-12);
    let column = |at: f64| ((at / length) * WIDTH as f64).floor().clamp(0.0, (WIDTH - 1) as f64) as usize;
    // Host code first, so that what the host waits for draws over it.
    let mut spans: Vec<_> = timeline.spans.iter().filter(|span| span.lane == lane).collect();
    spans.sort_by_key(|span| span.kind() != SpanKind::Code);
    for span in spans {
        let first = column(span.start.as_secs_f64());
        let last = column((span.end().as_secs_f64() - length * 1e-9).max(span.start.as_secs_f64()));
        for cell in &mut columns[first..=last.max(first)] {
            *cell = mark(span.kind());
        }
    }
    columns.iter().collect::<String>().trim_end().to_string()
}

/// The timeline as the terminal shows it.
pub(crate) fn render_timeline(timeline: &Timeline, masking: Masking) -> String {
    let lanes = timeline.lanes();
    let names: Vec<String> = lanes.iter().map(Lane::name).collect();
    let name_width = names.iter().map(String::len).max().unwrap_or(4).max(4) + 2;
    let length = masked_duration(timeline.length, masking);
    let mut text = format!("timeline: {} lanes, {length} from the start of the cell's code\n", lanes.len());
    if masking == Masking::None {
        let end = format_duration(timeline.length);
        let axis = format!("0{end:>width$}", width = WIDTH - 1);
        text.push_str(&format!("{:name_width$}{axis}\n", ""));
        for (lane, name) in lanes.iter().zip(&names) {
            text.push_str(&format!("{name:name_width$}{}\n", bar(timeline, *lane)));
        }
        text.push_str(&format!(
            "{:name_width$}{} host code  {} the host hands over or waits  {} copy  {} kernel\n",
            "",
            mark(SpanKind::Code),
            mark(SpanKind::Host),
            mark(SpanKind::Copy),
            mark(SpanKind::Kernel)
        ));
    }
    let mut table = Table::new();
    table.load_style(presets::UTF8_FULL_CONDENSED).set_header(["lane", "what", "start", "end", "time", "detail"]);
    for lane in &lanes {
        for span in timeline.spans.iter().filter(|span| span.lane == *lane) {
            let mut detail: Vec<String> = span.bytes.map(byte_text).into_iter().collect();
            detail.extend((!span.detail.is_empty()).then(|| span.detail.clone()));
            let detail = detail.join(", ");
            let detail =
                if masking == Masking::Addresses && detail.contains("/s") { "<detail>".to_string() } else { detail };
            table.add_row([
                lane.name(),
                span.label.clone(),
                masked_duration(span.start, masking),
                masked_duration(span.end(), masking),
                masked_duration(span.duration, masking),
                detail,
            ]);
        }
    }
    text.push_str(&format!("{table}\n"));
    text
}
