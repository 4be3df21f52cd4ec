//! Charts: bench and autotune reports and timelines as SVG for notebooks, drawn with plotters'
//! SVG backend.
//!
//! An autotuning run is one row per variant, fastest first as in the table: a bar to the
//! median, a whisker from the fastest run to the 99th percentile, the chosen variant in the
//! accent colour, failed variants with their reason. A bench is a histogram of its kept samples
//! with the median marked and outliers counted, or its median and fastest run when it kept none.
//! Charts go with the tables, never instead of them: the table has the exact numbers.
//!
//! No font is needed: the SVG backend writes `<text>` with an anchor and the notebook lays the
//! text out, and plotters without a font feature only estimates text sizes (its "naive" font),
//! which sizes the caption and axis labels here. The background is left transparent and axes
//! and text are mid-grey, so the chart reads on light and dark themes alike.

use std::time::Duration;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use quasi_lang::{AutotuneReport, BenchReport, Lane, SpanKind, Throughput, Timeline, VariantReport};

/// A chart's size in a notebook cell, in CSS pixels.
const WIDTH: u32 = 600;
const HEIGHT: u32 = 300;
/// A row chart is this many pixels per row up to `HEIGHT`, at least `MIN_ROWS_HEIGHT` in all,
/// and grows past `HEIGHT` to give each row at least `ROW_HEIGHT` pixels.
const ROW_PITCH: u32 = 44;
const ROW_HEIGHT: u32 = 22;
const MIN_ROWS_HEIGHT: u32 = 140;
/// Room above the rows and below them (caption, axis and its description).
const FRAME_HEIGHT: u32 = 80;
/// Row labels longer than this are cut (the table has them whole).
const LABEL_CHARS: usize = 32;
/// Histogram bins: the square root of the sample count, within these.
const MIN_BINS: usize = 10;
const MAX_BINS: usize = 40;
/// Bars take the middle three fifths of their row.
const BAR_HALF_HEIGHT: f64 = 0.3;

const FONT: &str = "sans-serif";
/// Font sizes as plotters takes them; its SVG backend writes a size over 1.24 as pixels, so
/// these are about 13.7, 12.9 and 12.1 px.
const CAPTION_SIZE: f64 = 17.0;
const LABEL_SIZE: f64 = 16.0;
const NOTE_SIZE: f64 = 15.0;
const GREY: RGBColor = RGBColor(128, 128, 128);
const BLUE: RGBColor = RGBColor(80, 130, 190);
const ORANGE: RGBColor = RGBColor(242, 142, 43);

/// Why a chart could not be drawn (plotters' error, as text).
pub type ChartError = String;

fn drawing_error(error: impl std::fmt::Display) -> ChartError {
    error.to_string()
}

/// One row of a row chart: a variant, or a bench without samples.
struct Row {
    label: String,
    timing: Result<Whisker, String>,
    chosen: bool,
}

/// Per-run times in nanoseconds, finite, not negative, `low <= median <= high`.
#[derive(Clone, Copy)]
struct Whisker {
    low: f64,
    median: f64,
    high: f64,
}

impl Whisker {
    /// The fastest run, the median and the 99th percentile of a report's samples. Not the
    /// slowest: one run the system interrupted can take a thousand times the median, and would
    /// squeeze every other variant into a corner of the axis. Without samples: the fastest run
    /// and the median.
    fn of(report: &BenchReport) -> Whisker {
        let sorted = sorted_samples(report);
        match sorted.first() {
            Some(&fastest) => {
                let median = quantile(&sorted, 0.5);
                Whisker { low: fastest, median, high: quantile(&sorted, 0.99).max(median) }
            }
            None => {
                let median = nanos(report.median);
                Whisker { low: nanos(report.min).min(median), median, high: median }
            }
        }
    }

    /// The same runs as work per second, from the report's last throughput (at its median): the
    /// bar is that throughput, the whisker from the 99th percentile's rate to the fastest run's.
    fn rate_of(report: &BenchReport) -> Whisker {
        let median_rate = finite(report.throughput.last().map_or(0.0, |throughput| match throughput {
            Throughput::Bytes(rate) | Throughput::Flops(rate) => *rate,
        }));
        let times = Whisker::of(report);
        let work = median_rate * nanos(report.median);
        let rate = |time: f64| if time > 0.0 { finite(work / time) } else { median_rate };
        Whisker { low: rate(times.high).min(median_rate), median: median_rate, high: rate(times.low).max(median_rate) }
    }
}

/// What a row chart's bars measure: time per run in nanoseconds, or work per second (its unit,
/// `FLOP/s` or `B/s`).
#[derive(Clone, Copy)]
enum Measure {
    Time,
    Rate(&'static str),
}

impl Measure {
    /// The axis' divisor and unit for values up to `top`: `ms`, `GFLOP/s`.
    fn unit(self, top: f64) -> (f64, String) {
        match self {
            Measure::Time => {
                let unit = Unit::of(top);
                (unit.nanos, unit.name.to_string())
            }
            Measure::Rate(unit) => {
                let (scale, prefix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
                    .into_iter()
                    .find(|(scale, _)| top >= *scale)
                    .unwrap_or((1.0, ""));
                (scale, format!("{prefix}{unit}"))
            }
        }
    }

    /// A value to three significant digits in its own unit: `1.20 µs`, `69.1 GFLOP/s`.
    fn text(self, value: f64) -> String {
        match self {
            Measure::Time => time_text(value),
            Measure::Rate(_) => {
                let (divisor, unit) = self.unit(value);
                format!("{} {unit}", three_digits(value / divisor))
            }
        }
    }

    /// The axis' description.
    fn axis(self, unit: &str) -> String {
        match self {
            Measure::Time => format!("time per run ({unit})"),
            Measure::Rate(_) => format!("{unit} at the median run"),
        }
    }
}

/// A unit of time for an axis: nanoseconds per unit and its name.
#[derive(Clone, Copy)]
struct Unit {
    nanos: f64,
    name: &'static str,
}

impl Unit {
    /// The unit `nanos` reads best in: the largest that keeps it at least 1.
    fn of(nanos: f64) -> Unit {
        let (nanos, name) = match nanos {
            nanos if nanos >= 1e9 => (1e9, "s"),
            nanos if nanos >= 1e6 => (1e6, "ms"),
            nanos if nanos >= 1e3 => (1e3, "µs"),
            _ => (1.0, "ns"),
        };
        Unit { nanos, name }
    }
}

/// A time to three significant digits (`1.65 ns`, `545 ns`, `12.3 µs`). Not
/// `quasi_repl::format_duration`: samples are means over batches of runs, finer than the whole
/// nanoseconds of a `Duration`, and a median of `1.65 ns` should not read `2 ns` in a chart.
fn time_text(nanos: f64) -> String {
    let unit = Unit::of(nanos);
    format!("{} {}", three_digits(nanos / unit.nanos), unit.name)
}

/// A number to three significant digits (for 0.01 to 999): `1.63`, `17.8`, `545`.
fn three_digits(value: f64) -> String {
    let decimals = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.decimals$}")
}

/// The chart of `(autotune …)`: one row per variant, fastest first — each variant's time per
/// run, or, when the autotune gives the work per run (`(flops E)`, `(bytes E)`), its throughput
/// (FLOP/s if both), so that larger is better and steps of a tuning story read as speed.
pub fn autotune(report: &AutotuneReport) -> Result<String, ChartError> {
    // Variants come sorted fastest first, so the chosen one (the fastest) is the first that ran.
    let chosen = report.variants.iter().position(|variant| variant.result.is_ok());
    let passed = || report.variants.iter().filter_map(|variant| variant.result.as_ref().ok());
    let rate = passed().next().and_then(|bench| bench.throughput.last()).map(|throughput| match throughput {
        Throughput::Bytes(_) => "B/s",
        Throughput::Flops(_) => "FLOP/s",
    });
    let rate = rate.filter(|_| passed().all(|bench| !bench.throughput.is_empty()));
    let rows: Vec<Row> = report
        .variants
        .iter()
        .enumerate()
        .map(|(index, variant)| {
            let timing = match (rate, &variant.result) {
                (Some(_), Ok(bench)) => Ok(Whisker::rate_of(bench)),
                (None, Ok(bench)) => Ok(Whisker::of(bench)),
                (_, Err(reason)) => Err(reason.clone()),
            };
            Row { label: variant_label(&report.params, variant), timing, chosen: Some(index) == chosen }
        })
        .collect();
    match rate {
        Some(unit) => {
            let caption =
                format!("autotune {}: {unit} at the median run, whiskers 99th percentile to fastest", report.name);
            row_chart(&caption, &rows, Measure::Rate(unit))
        }
        None => {
            let caption = format!("autotune {}: median per run, whiskers fastest to 99th percentile", report.name);
            row_chart(&caption, &rows, Measure::Time)
        }
    }
}

/// The chart of `(bench …)`: a histogram of its samples, or its median and fastest run when it
/// kept no samples.
pub fn bench(report: &BenchReport) -> Result<String, ChartError> {
    let sorted = sorted_samples(report);
    if sorted.is_empty() {
        let row = Row { label: "median".into(), timing: Ok(Whisker::of(report)), chosen: false };
        return row_chart("bench: median per run, whisker from the fastest", &[row], Measure::Time);
    }
    histogram(&sorted)
}

/// A report's samples that are drawable (finite; negatives as zero), sorted.
fn sorted_samples(report: &BenchReport) -> Vec<f64> {
    let mut sorted: Vec<f64> = report.samples.iter().copied().filter(|sample| sample.is_finite()).map(finite).collect();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// The sample at fraction `fraction` of the ranks of `sorted` (nearest rank); 0 when empty.
fn quantile(sorted: &[f64], fraction: f64) -> f64 {
    let rank = (fraction * sorted.len().saturating_sub(1) as f64).round() as usize;
    sorted.get(rank).copied().unwrap_or(0.0)
}

/// `p=1, q=8`, cut to `LABEL_CHARS`.
fn variant_label(params: &[String], variant: &VariantReport) -> String {
    let label = if params.len() == variant.values.len() {
        params.iter().zip(&variant.values).map(|(name, value)| format!("{name}={value}")).collect::<Vec<_>>().join(", ")
    } else {
        variant.values.join(", ")
    };
    cut(&label, LABEL_CHARS)
}

/// The axes of a chart with a row per label, the first on top, and time along x from 0.
struct RowAxes<'a> {
    caption: &'a str,
    labels: &'a [String],
    /// Pixels left of the plot for the labels.
    label_width: u32,
    x_end: f64,
    x_desc: String,
}

type RowChart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

impl RowAxes<'_> {
    /// Draws the caption, the axes, their labels and the vertical grid.
    fn draw<'a, 'b>(&self, root: &'a DrawingArea<SVGBackend<'b>, Shift>) -> Result<RowChart<'a, 'b>, ChartError> {
        let count = self.labels.len().max(1);
        // Plotters counts rows upwards. Row `index` is centred on `count - 1 - index` of an axis
        // from -0.5 to `count - 0.5`, whose ticks plotters puts on whole numbers: the row
        // centres, labelled with the rows' labels. (Plotters' segmented axes divide by zero for
        // a single row.)
        let label_of = |value: &f64| {
            let index = count as f64 - 1.0 - value.round();
            let whole = (value - value.round()).abs() < 1e-6 && (0.0..count as f64).contains(&index);
            self.labels.get(index as usize).filter(|_| whole).cloned().unwrap_or_default()
        };
        let time = |value: &f64| axis_number(*value);
        let mut chart = ChartBuilder::on(root)
            .caption(self.caption, (FONT, CAPTION_SIZE).into_font().color(&GREY))
            .margin(8)
            .margin_right(16)
            .x_label_area_size(36)
            .y_label_area_size(self.label_width)
            .build_cartesian_2d(0.0..self.x_end, -0.5..count as f64 - 0.5)
            .map_err(drawing_error)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(GREY.mix(0.25))
            .axis_style(GREY)
            .label_style((FONT, LABEL_SIZE).into_font().color(&GREY))
            .x_labels(6)
            .y_labels(count + 1)
            .x_label_formatter(&time)
            .y_label_formatter(&label_of)
            .x_desc(self.x_desc.clone())
            .axis_desc_style((FONT, LABEL_SIZE).into_font().color(&GREY))
            .draw()
            .map_err(drawing_error)?;
        Ok(chart)
    }
}

/// The y of row `index` of `count` on `RowAxes`' axis: the first row on top.
fn row_centre(count: usize, index: usize) -> f64 {
    (count - 1 - index) as f64
}

/// Rows of bars and whiskers in `measure`'s unit, from zero.
fn row_chart(caption: &str, rows: &[Row], measure: Measure) -> Result<String, ChartError> {
    let count = rows.len().max(1);
    let rows_height = |pitch: u32| FRAME_HEIGHT + pitch * count as u32;
    let height = rows_height(ROW_PITCH).clamp(MIN_ROWS_HEIGHT, HEIGHT).max(rows_height(ROW_HEIGHT));
    let longest = rows.iter().map(|row| row.label.chars().count()).max().unwrap_or(0);
    let label_width = (longest as u32 * 8 + 16).clamp(48, 280);
    // Why a variant failed is cut to stay inside the chart.
    let reason_chars = ((WIDTH - label_width - 40) / 8) as usize;
    let top = rows.iter().filter_map(|row| row.timing.as_ref().ok()).map(|whisker| whisker.high).fold(0.0, f64::max);
    let (divisor, unit) = measure.unit(top);
    // Room right of the longest whisker for its annotation (a rate's is the chosen variant's,
    // the longer note).
    let room = match measure {
        Measure::Time => 1.3,
        Measure::Rate(_) => 1.55,
    };
    let axis_end = if top > 0.0 { top * room / divisor } else { 1.0 };
    let labels: Vec<String> = rows.iter().map(|row| row.label.clone()).collect();
    let position = |index: usize| row_centre(count, index);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let axes = RowAxes { caption, labels: &labels, label_width, x_end: axis_end, x_desc: measure.axis(&unit) };
        let mut chart = axes.draw(&root)?;
        for (index, row) in rows.iter().enumerate() {
            let centre = position(index);
            match &row.timing {
                Ok(whisker) => {
                    let colour = if row.chosen { ORANGE } else { BLUE };
                    let scaled = |value: f64| value / divisor;
                    let bar = Rectangle::new(
                        [(0.0, centre - BAR_HALF_HEIGHT), (scaled(whisker.median), centre + BAR_HALF_HEIGHT)],
                        colour.mix(0.35).filled(),
                    );
                    chart.draw_series([bar]).map_err(drawing_error)?;
                    let range = ErrorBar::new_horizontal(
                        centre,
                        scaled(whisker.low),
                        scaled(whisker.median),
                        scaled(whisker.high),
                        colour.stroke_width(2),
                        8,
                    );
                    chart.draw_series([range]).map_err(drawing_error)?;
                    let mut note = measure.text(whisker.median);
                    if row.chosen {
                        note.push_str(" (chosen)");
                    }
                    let style = (FONT, NOTE_SIZE).into_font().color(if row.chosen { &ORANGE } else { &GREY });
                    let annotation = EmptyElement::at((scaled(whisker.high), centre))
                        + Text::new(note, (8, 0), style.pos(Pos::new(HPos::Left, VPos::Center)));
                    chart.draw_series([annotation]).map_err(drawing_error)?;
                }
                Err(reason) => {
                    let style = (FONT, NOTE_SIZE, FontStyle::Italic).into_font().color(&GREY);
                    let annotation = EmptyElement::at((0.0, centre))
                        + Text::new(cut(reason, reason_chars), (8, 0), style.pos(Pos::new(HPos::Left, VPos::Center)));
                    chart.draw_series([annotation]).map_err(drawing_error)?;
                }
            }
        }
        root.present().map_err(drawing_error)?;
    }
    Ok(svg)
}

/// A histogram of per-run times (finite, not negative, sorted, not empty) with the median marked.
fn histogram(sorted: &[f64]) -> Result<String, ChartError> {
    let median = quantile(sorted, 0.5);
    // Benchmarks have a tight core and a long tail of runs the system interrupted, which would
    // squeeze the core into one bin: the axis spans Tukey's far fences (three interquartile
    // ranges past the quartiles), or the 10th to 90th percentile where that is wider, and the
    // caption counts the outliers past them.
    let (first_quartile, third_quartile) = (quantile(sorted, 0.25), quantile(sorted, 0.75));
    let spread = 3.0 * (third_quartile - first_quartile);
    let mut low = (first_quartile - spread).min(quantile(sorted, 0.1)).max(quantile(sorted, 0.0));
    let mut high = (third_quartile + spread).max(quantile(sorted, 0.9)).min(quantile(sorted, 1.0));
    let outliers = sorted.iter().filter(|&&sample| sample < low || sample > high).count();
    // An axis a tenth of the median wide at least, so a tight core reads as a spike rather
    // than as noise in the last digits blown up to the chart's width.
    let least_width = if median > 0.0 { median * 0.1 } else { 1.0 };
    if high - low < least_width {
        let centre = (low + high) / 2.0;
        low = (centre - least_width / 2.0).max(0.0);
        high = low + least_width;
    }
    let bins = ((sorted.len() as f64).sqrt().ceil() as usize).clamp(MIN_BINS, MAX_BINS);
    let width = (high - low) / bins as f64;
    let mut counts = vec![0u32; bins];
    for &sample in sorted.iter().filter(|&&sample| (low..=high).contains(&sample)) {
        let bin = (((sample - low) / width).floor().max(0.0) as usize).min(bins - 1);
        counts[bin] += 1;
    }
    let tallest = counts.iter().copied().max().unwrap_or(0).max(1);
    // Room above the tallest bin for the median's label, half way up.
    let axis_top = tallest + tallest / 4 + 2;
    let line_top = tallest + (axis_top - tallest) / 2;
    let unit = Unit::of(high);
    let scaled = |value: f64| value / unit.nanos;
    let plural = if sorted.len() == 1 { "" } else { "s" };
    let mut caption = format!("bench: {} sample{plural} of the time per run", sorted.len());
    if outliers > 0 {
        caption.push_str(&format!(" ({outliers} outlier{} not shown)", if outliers == 1 { "" } else { "s" }));
    }
    let time = |value: &f64| axis_number(*value);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, (FONT, CAPTION_SIZE).into_font().color(&GREY))
            .margin(8)
            .margin_right(16)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(scaled(low)..scaled(high), 0u32..axis_top)
            .map_err(drawing_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(GREY.mix(0.25))
            .axis_style(GREY)
            .label_style((FONT, LABEL_SIZE).into_font().color(&GREY))
            .x_labels(6)
            .y_labels(6)
            .x_label_formatter(&time)
            .x_desc(format!("time per run ({})", unit.name))
            .y_desc("samples")
            .axis_desc_style((FONT, LABEL_SIZE).into_font().color(&GREY))
            .draw()
            .map_err(drawing_error)?;
        let bars = counts.iter().enumerate().filter(|(_, &count)| count > 0).map(|(bin, &count)| {
            let left = scaled(low + width * bin as f64);
            let right = scaled(low + width * (bin + 1) as f64);
            let mut bar = Rectangle::new([(left, 0), (right, count)], BLUE.mix(0.6).filled());
            bar.set_margin(0, 0, 1, 1);
            bar
        });
        chart.draw_series(bars).map_err(drawing_error)?;
        if (low..=high).contains(&median) {
            let line = PathElement::new(vec![(scaled(median), 0), (scaled(median), line_top)], ORANGE.stroke_width(2));
            let label = format!("median {}", time_text(median));
            let style = (FONT, NOTE_SIZE).into_font().color(&ORANGE);
            // The label reads away from the nearer edge, so it stays inside the chart.
            let (offset, anchor) = if median - low <= (high - low) * 0.6 { (6, HPos::Left) } else { (-6, HPos::Right) };
            let annotation = EmptyElement::at((scaled(median), line_top))
                + Text::new(label, (offset, 0), style.pos(Pos::new(anchor, VPos::Center)));
            chart.draw_series([line]).map_err(drawing_error)?;
            chart.draw_series([annotation]).map_err(drawing_error)?;
        }
        root.present().map_err(drawing_error)?;
    }
    Ok(svg)
}

/// The chart of `:timeline`: a row per lane (the host on top, then each submission), each span
/// a bar from its start to its end — host code thin and grey, what the host hands over or waits
/// for in dark grey, copies orange, kernels blue — with each span's label and times in its
/// tooltip.
pub fn timeline(timeline: &Timeline) -> Result<String, ChartError> {
    let lanes = timeline.lanes();
    let count = lanes.len().max(1);
    let height = (FRAME_HEIGHT + ROW_PITCH * count as u32).clamp(MIN_ROWS_HEIGHT, 2 * HEIGHT);
    let names: Vec<String> = lanes.iter().map(Lane::name).collect();
    let label_width = (names.iter().map(String::len).max().unwrap_or(4) as u32 * 8 + 16).clamp(48, 200);
    let unit = Unit::of(nanos(timeline.length).max(1.0));
    let axis_end = (nanos(timeline.length) / unit.nanos).max(1e-9);
    let position =
        |lane: Lane| lanes.iter().position(|other| *other == lane).map_or(0.0, |index| row_centre(count, index));
    let caption = "timeline: grey host code, dark grey the host waits, orange copies, blue kernels";
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let x_desc = format!("from the start of the cell's code ({})", unit.name);
        let axes = RowAxes { caption, labels: &names, label_width, x_end: axis_end, x_desc };
        let mut chart = axes.draw(&root)?;
        // Host code first, so that what the host waits for draws over it.
        let mut spans: Vec<_> = timeline.spans.iter().collect();
        spans.sort_by_key(|span| span.kind() != SpanKind::Code);
        let bars = spans.into_iter().map(|span| {
            let centre = position(span.lane);
            let (half, colour) = match span.kind() {
                SpanKind::Code => (0.12, GREY.mix(0.45)),
                SpanKind::Host => (BAR_HALF_HEIGHT, GREY.mix(0.9)),
                SpanKind::Copy => (BAR_HALF_HEIGHT, ORANGE.mix(0.8)),
                SpanKind::Kernel => (BAR_HALF_HEIGHT, BLUE.mix(0.8)),
            };
            let start = nanos(span.start) / unit.nanos;
            // A span too short to see still gets a sliver.
            let end = (nanos(span.end()) / unit.nanos).max(start + axis_end / 400.0);
            Rectangle::new([(start, centre - half), (end, centre + half)], colour.filled())
        });
        chart.draw_series(bars).map_err(drawing_error)?;
        root.present().map_err(drawing_error)?;
    }
    Ok(svg)
}

/// An axis tick: up to three significant decimals, no trailing zeros.
fn axis_number(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

fn nanos(duration: Duration) -> f64 {
    duration.as_nanos() as f64
}

/// A time that is drawable: NaN and infinities become zero, negatives zero.
fn finite(value: f64) -> f64 {
    if value.is_finite() {
        value.max(0.0)
    } else {
        0.0
    }
}

fn cut(text: &str, chars: usize) -> String {
    let first_line = text.lines().next().unwrap_or("");
    if first_line.chars().count() <= chars && first_line.len() == text.trim_end().len() {
        return first_line.to_string();
    }
    let kept: String = first_line.chars().take(chars.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use quasi_lang::{AutotuneReport, BenchReport, VariantReport};

    fn report(median_ns: u64, samples: Vec<f64>) -> BenchReport {
        BenchReport {
            runs: samples.len().max(1) as u64,
            elapsed: Duration::from_millis(10),
            warmup: 0,
            min: Duration::from_nanos(median_ns / 2),
            median: Duration::from_nanos(median_ns),
            mean: Duration::from_nanos(median_ns),
            std: Duration::ZERO,
            throughput: Vec::new(),
            samples,
        }
    }

    fn variant(value: &str, result: Result<BenchReport, &str>) -> VariantReport {
        VariantReport {
            values: vec![value.to_string()],
            result: result.map_err(str::to_string),
            source: quasi_lang::VariantSource::Timed,
            node: None,
        }
    }

    fn tuning(variants: Vec<VariantReport>) -> AutotuneReport {
        let space = variants.len() as u64;
        AutotuneReport {
            name: "vsum".into(),
            params: vec!["f".into()],
            variants,
            baseline: None,
            space,
            search: "exhaustive".into(),
            budget_spent: None,
            on: None,
        }
    }

    /// How often `needle` occurs in the SVG.
    fn count(svg: &str, needle: &str) -> usize {
        svg.matches(needle).count()
    }

    /// Where the SVG backend put the text `label` (its `y`), if anywhere.
    fn text_y(svg: &str, label: &str) -> Option<i64> {
        let element = svg.split("<text ").find(|element| element.contains(&format!(">\n{label}\n</text>")))?;
        let (_, after) = element.split_once(" y=\"")?;
        after.split('"').next()?.parse().ok()
    }

    /// A well-formed SVG of the notebook size whose numbers are all finite.
    fn assert_drawable(svg: &str) {
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert!(svg.contains(r#"width="600""#), "{svg}");
        for bad in ["NaN", "inf"] {
            assert!(!svg.contains(bad), "`{bad}` in {svg}");
        }
        assert!(!svg.contains(r##"fill="#FFFFFF""##), "the background stays transparent: {svg}");
    }

    #[test]
    fn a_timeline_has_a_row_per_lane_and_a_bar_per_span() {
        use quasi_lang::{Lane, Timeline, TimelineSpan};
        let span = |lane, label: &str, start_us: u64, length_us: u64| TimelineSpan {
            lane,
            label: label.into(),
            start: Duration::from_micros(start_us),
            duration: Duration::from_micros(length_us),
            bytes: None,
            detail: String::new(),
        };
        let timeline = Timeline {
            spans: vec![
                span(Lane::Host, "code", 0, 900),
                span(Lane::Host, "submit", 10, 5),
                span(Lane::Host, "await", 20, 800),
                span(Lane::Submission(7), "h2d", 16, 100),
                span(Lane::Submission(7), "kernel k", 120, 600),
                span(Lane::Submission(8), "kernel k", 30, 700),
            ],
            length: Duration::from_micros(900),
        };
        let svg = super::timeline(&timeline).expect("drawn");
        assert_drawable(&svg);
        for label in ["host", "submission 7", "submission 8", "from the start of the cell&apos;s code (µs)"] {
            assert!(svg.contains(label), "no `{label}` in {svg}");
        }
        assert_eq!(count(&svg, "<rect"), 6, "{svg}");
        // The host's lane on top, then the submissions in order.
        assert!(text_y(&svg, "host") < text_y(&svg, "submission 7"), "{svg}");
        assert!(text_y(&svg, "submission 7") < text_y(&svg, "submission 8"), "{svg}");
    }

    #[test]
    fn autotune_has_a_bar_and_whisker_per_variant() {
        let svg = super::autotune(&tuning(vec![
            variant("4", Ok(report(1_200, vec![600.0, 1_200.0, 2_000.0]))),
            variant("2", Ok(report(2_400, vec![1_200.0, 2_400.0, 3_000.0]))),
            variant("1", Ok(report(4_800, vec![2_400.0, 4_800.0, 9_000.0]))),
        ]))
        .expect("drawn");
        assert_drawable(&svg);
        for label in ["f=4", "f=2", "f=1", "autotune vsum", "time per run (µs)"] {
            assert!(svg.contains(label), "no `{label}` in {svg}");
        }
        // Each variant: one bar (a filled rectangle) and one dot at its median.
        assert_eq!(count(&svg, "<rect"), 3, "{svg}");
        assert_eq!(count(&svg, "<circle"), 3, "{svg}");
        // The fastest is marked chosen, in the accent colour.
        assert_eq!(count(&svg, "chosen"), 1, "{svg}");
        assert!(svg.contains("1.20 µs (chosen)"), "{svg}");
        assert!(svg.contains("#F28E2B"), "{svg}");
        // The fastest row is on top.
        assert!(text_y(&svg, "f=4") < text_y(&svg, "f=2") && text_y(&svg, "f=2") < text_y(&svg, "f=1"), "{svg}");
    }

    #[test]
    fn autotune_with_work_per_run_charts_throughput() {
        // 1e6 FLOPs a run: 1 µs is 1 TFLOP/s... at a median of 2 µs, 500 GFLOP/s.
        let with_flops = |median_ns: u64, samples: Vec<f64>| {
            let mut bench = report(median_ns, samples);
            bench.throughput = vec![quasi_lang::Throughput::Flops(1e6 / (median_ns as f64 * 1e-9))];
            bench
        };
        let svg = super::autotune(&tuning(vec![
            variant("4", Ok(with_flops(2_000, vec![1_000.0, 2_000.0, 4_000.0]))),
            variant("1", Ok(with_flops(8_000, vec![8_000.0, 8_000.0, 16_000.0]))),
            variant("2", Err("check failed")),
        ]))
        .expect("drawn");
        assert_drawable(&svg);
        for label in ["FLOP/s at the median run", "GFLOP/s at the median run", "500 GFLOP/s (chosen)", "125 GFLOP/s"] {
            assert!(svg.contains(label), "no `{label}` in {svg}");
        }
        assert!(!svg.contains("time per run"), "{svg}");
        // The faster variant's bar is the longer one: bars start at the axis' zero.
        let widths: Vec<f64> = svg
            .split("<rect ")
            .skip(1)
            .filter_map(|rect| rect.split(" width=\"").nth(1)?.split('"').next()?.parse().ok())
            .collect();
        assert_eq!(widths.len(), 2, "{svg}");
        assert!(widths[0] > 3.5 * widths[1] && widths[0] < 4.5 * widths[1], "{widths:?}");
    }

    #[test]
    fn rates_span_the_runs() {
        let mut bench = report(2_000, vec![1_000.0, 2_000.0, 4_000.0]);
        bench.throughput = vec![quasi_lang::Throughput::Bytes(1e9)];
        let whisker = super::Whisker::rate_of(&bench);
        // The fastest run did the median's work in half the time; the slowest in twice.
        assert_eq!((whisker.low, whisker.median, whisker.high), (0.5e9, 1e9, 2e9));
        assert_eq!(super::Measure::Rate("B/s").text(2.5e10), "25.0 GB/s");
        assert_eq!(super::Measure::Rate("FLOP/s").text(12.0), "12.0 FLOP/s");
    }

    #[test]
    fn failed_variant_shows_its_reason_and_no_bar() {
        let svg = super::autotune(&tuning(vec![
            variant("1", Ok(report(1_000, vec![900.0, 1_000.0]))),
            variant("2<b>", Err("check failed: element 0 is 7, the first variant gave 499500")),
        ]))
        .expect("drawn");
        assert_drawable(&svg);
        assert!(svg.contains("check failed: element 0 is 7"), "{svg}");
        assert!(svg.contains("f=2&lt;b&gt;") && !svg.contains("<b>"), "labels are escaped: {svg}");
        assert_eq!(count(&svg, "<rect"), 1, "{svg}");
        assert_eq!(count(&svg, "<circle"), 1, "{svg}");
    }

    #[test]
    fn degenerate_reports_draw_finite_charts() {
        let zero = report(0, vec![0.0; 5]);
        let cases = [
            tuning(vec![variant("1", Ok(zero.clone()))]),
            tuning(vec![variant("1", Err("error[type]: `vsum` returns `int`,\nfound `float`"))]),
            tuning(Vec::new()),
            tuning(vec![variant("1", Ok(report(10, vec![f64::NAN, f64::INFINITY, -1.0])))]),
        ];
        for case in &cases {
            assert_drawable(&super::autotune(case).expect("drawn"));
        }
        for bench in
            [zero, report(7, vec![7.0]), report(5, Vec::new()), report(0, Vec::new()), report(3, vec![f64::NAN])]
        {
            assert_drawable(&super::bench(&bench).expect("drawn"));
        }
    }

    #[test]
    fn bench_is_a_histogram_with_the_median() {
        let samples: Vec<f64> = (0..400).map(|index| 1_000.0 + f64::from(index % 20) * 10.0).collect();
        let svg = super::bench(&report(1_100, samples)).expect("drawn");
        assert_drawable(&svg);
        assert_eq!(count(&svg, "<rect"), 20, "one bar per bin that has samples: {svg}");
        for label in ["median 1.10 µs", "400 samples", "samples", "time per run (µs)"] {
            assert!(svg.contains(label), "no `{label}` in {svg}");
        }
    }

    #[test]
    fn bench_leaves_outliers_off_its_axis() {
        let mut samples = vec![100.0; 500];
        samples.extend([1e6, 1e6, 1e6, 1.0]);
        let svg = super::bench(&report(100, samples)).expect("drawn");
        assert_drawable(&svg);
        assert!(svg.contains("(4 outliers not shown)"), "{svg}");
        // The core is one narrow bar on an axis a tenth of the median wide.
        assert_eq!(count(&svg, "<rect"), 1, "{svg}");
        assert!(svg.contains("median 100 ns"), "{svg}");
    }

    #[test]
    fn bench_without_samples_is_one_row() {
        let svg = super::bench(&report(2_000, Vec::new())).expect("drawn");
        assert_drawable(&svg);
        assert!(svg.contains("median") && svg.contains("2.00 µs"), "{svg}");
        assert_eq!(count(&svg, "<circle"), 1, "{svg}");
    }

    #[test]
    fn times_read_to_three_digits() {
        let texts: Vec<String> =
            [0.0, 1.6349, 17.8, 545.0, 1_234.0, 98_765.0, 2.5e6, 3e9].map(super::time_text).to_vec();
        assert_eq!(texts, ["0.00 ns", "1.63 ns", "17.8 ns", "545 ns", "1.23 µs", "98.8 µs", "2.50 ms", "3.00 s"]);
    }

    #[test]
    fn identical_input_gives_identical_output() {
        let input = report(1_500, (0..1000).map(|index| 1_000.0 + f64::from(index)).collect());
        assert_eq!(super::bench(&input), super::bench(&input));
        let tuned = tuning(vec![variant("1", Ok(input.clone()))]);
        assert_eq!(super::autotune(&tuned), super::autotune(&tuned));
    }
}
