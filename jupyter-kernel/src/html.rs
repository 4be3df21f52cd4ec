//! HTML: the `text/html` side of the kernel's MIME bundles. The text itself always comes from
//! `quasi_repl`, so a notebook shows what a terminal shows; this module only adds markup.

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

const ERROR_COLOUR: &str = "#c62828";
const WARNING_COLOUR: &str = "#b26a00";
const DIM: &str = "color:#757575";
/// JupyterLab gives a `<pre>` in an HTML output margins and padding that plain-text outputs do not
/// have: definitions and values then stood 20 px right of printed output, with a band above and
/// below that pushed a result's `[n]:` prompt off its line (seen in the browser test). Its text
/// outputs are indented by one character (`padding-left: 1ch`), so these are too.
const FLUSH: &str = "margin:0;padding:0 0 0 1ch";

/// A diagnostic as rendered by `quasi_repl::render_diagnostic` (plain), in a `<pre>` with the
/// headline coloured, and the caret line and the source text it points at highlighted.
pub fn diagnostic(plain: &str, is_error: bool) -> String {
    let colour = if is_error { ERROR_COLOUR } else { WARNING_COLOUR };
    let lines: Vec<&str> = plain.lines().collect();
    let mut html = format!("<pre class=\"quasi-diagnostic\" style=\"{FLUSH}\">");
    for (index, line) in lines.iter().enumerate() {
        if index == 0 {
            html.push_str(&format!("<span style=\"color:{colour};font-weight:bold\">{}</span>", escape(line)));
        } else if let Some(marks) = caret_marks(line) {
            html.push_str(&highlight(line, &marks, &format!("color:{colour};font-weight:bold")));
        } else if let Some(marks) =
            lines.get(index + 1).and_then(|next| caret_marks(next)).filter(|_| is_source_line(line))
        {
            // The source line above a caret line: the same columns are the labelled span.
            html.push_str(&highlight(line, &marks, &format!("background:{colour}26;border-bottom:2px solid {colour}")));
        } else {
            html.push_str(&escape(line));
        }
        html.push('\n');
    }
    html.push_str("</pre>");
    html
}

/// The columns (in characters) of a caret line's marks, if `line` is one: an empty gutter,
/// `|`, then a run of `^` (primary label) or `-` (secondary) with an optional message.
fn caret_marks(line: &str) -> Option<Vec<usize>> {
    let bar = line.find('|')?;
    if !line[..bar].chars().all(char::is_whitespace) {
        return None;
    }
    let after_bar = line[bar + 1..].trim_start();
    let mark = after_bar.chars().next().filter(|first| matches!(first, '^' | '-'))?;
    // `= note` lines and `|` alone have no marks; a run must start the label.
    let start = line.chars().count() - after_bar.chars().count();
    let run = after_bar.chars().take_while(|character| *character == mark).count();
    Some((start..start + run).collect())
}

/// A line of quoted source: a line number, then `|`.
fn is_source_line(line: &str) -> bool {
    line.split_once('|').is_some_and(|(gutter, _)| {
        let gutter = gutter.trim();
        !gutter.is_empty() && gutter.chars().all(|character| character.is_ascii_digit())
    })
}

/// Escapes `line`, wrapping the characters at `columns` (one contiguous run) in a styled span.
fn highlight(line: &str, columns: &[usize], style: &str) -> String {
    let (Some(&first), Some(&last)) = (columns.first(), columns.last()) else { return escape(line) };
    let characters: Vec<char> = line.chars().collect();
    let end = (last + 1).min(characters.len());
    let start = first.min(end);
    let slice = |range: std::ops::Range<usize>| escape(&characters[range].iter().collect::<String>());
    format!("{}<span style=\"{style}\">{}</span>{}", slice(0..start), slice(start..end), slice(end..characters.len()))
}

/// A value line `TEXT : TYPE`, the type dimmed.
pub fn value(text: &str, ty: &str) -> String {
    format!(
        "<pre class=\"quasi-value\" style=\"{FLUSH}\">{} <span style=\"{DIM}\">: {}</span></pre>",
        escape(text),
        escape(ty)
    )
}

/// Definition lines `NAME : DESCRIPTION`, the names in bold.
pub fn definitions(lines: &[(&str, &str)]) -> String {
    let mut html = format!("<pre class=\"quasi-definitions\" style=\"{FLUSH}\">");
    for (index, (name, description)) in lines.iter().enumerate() {
        if index > 0 {
            html.push('\n');
        }
        let separator = match quasi_repl::definition_separator(name) {
            " : " => format!(" <span style=\"{DIM}\">:</span> "),
            separator => separator.to_string(),
        };
        html.push_str(&format!("<b>{}</b>{separator}{}", escape(name), escape(description)));
    }
    html.push_str("</pre>");
    html
}

/// A listing as a Markdown code block, for front ends that highlight by language.
pub fn listing_markdown(title: &str, language: quasi_lang::Language, text: &str) -> String {
    let tag = match language {
        quasi_lang::Language::CLisp => "lisp",
        quasi_lang::Language::LlvmIr => "llvm",
        quasi_lang::Language::Assembly => "asm",
        quasi_lang::Language::Ptx => "ptx",
    };
    let heading = if title.is_empty() { String::new() } else { format!("**{}**\n\n", title.replace('*', "\\*")) };
    format!("{heading}```{tag}\n{text}\n```\n")
}

/// A listing as HTML: its title, then the text highlighted by `quasi_repl::highlight`. The
/// classes are coloured by the theme's editor colours through a `<style>` of this output's own,
/// which JupyterLab keeps for outputs of the running kernel (trusted) and drops, with the colours
/// only, from an untrusted notebook. Indented by one character as text outputs are, so a listing
/// and the line after it (`:ptx`'s ptxas line) start at one left edge.
pub fn listing(title: &str, language: quasi_lang::Language, text: &str) -> String {
    let heading = if title.is_empty() { String::new() } else { format!("<b>{}</b>", escape(title)) };
    format!(
        "<div class=\"quasi-listing\" style=\"padding-left:1ch\"><style>{}</style>{heading}<pre>{}</pre></div>",
        quasi_repl::highlight::css(".quasi-listing"),
        quasi_repl::highlight::html(language, text)
    )
}

fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut html = String::from("<table class=\"quasi-table\"><thead><tr>");
    for cell in header {
        html.push_str(&format!("<th>{}</th>", escape(cell)));
    }
    html.push_str("</tr></thead><tbody>");
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            html.push_str(&format!("<td style=\"text-align: right\">{}</td>", escape(cell)));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table>");
    html
}

/// A cell's phase times as a compact table.
pub fn timing(timing: &quasi_lang::PhaseTimes) -> String {
    let total = timing.total().as_secs_f64().max(1e-12);
    let mut rows: Vec<Vec<String>> = timing
        .phases
        .iter()
        .map(|(phase, duration)| {
            vec![
                phase.name().to_string(),
                quasi_repl::format_duration(*duration),
                format!("{:.1}%", 100.0 * duration.as_secs_f64() / total),
            ]
        })
        .collect();
    // GPU rows (§7.5, §7.8) inside `run`, as the terminal shows them.
    for device in &timing.device {
        let label = if device.during_run { format!("  {}", device.label) } else { device.label.clone() };
        let detail = device_detail(device.bytes, &device.detail);
        let label = if detail.is_empty() { label } else { format!("{label} ({detail})") };
        rows.push(vec![
            label,
            quasi_repl::format_duration(device.duration),
            format!("{:.1}%", 100.0 * device.duration.as_secs_f64() / total),
        ]);
    }
    rows.push(vec!["total".into(), quasi_repl::format_duration(timing.total()), "100%".into()]);
    // Tiered compilation's swaps since the last cell: background work, not in the total.
    for promotion in &timing.promotions {
        rows.push(vec![
            quasi_repl::promotion_label(promotion),
            quasi_repl::format_duration(promotion.compile),
            "-".into(),
        ]);
    }
    table(&["phase".into(), "time".into(), "share".into()], &rows)
}

/// A timeline's spans, lane by lane, as a table (the chart goes below it).
pub fn timeline(timeline: &quasi_lang::Timeline) -> String {
    let mut rows = Vec::new();
    for lane in timeline.lanes() {
        for span in timeline.spans.iter().filter(|span| span.lane == lane) {
            rows.push(vec![
                lane.name(),
                span.label.clone(),
                quasi_repl::format_duration(span.start),
                quasi_repl::format_duration(span.end()),
                quasi_repl::format_duration(span.duration),
                device_detail(span.bytes, &span.detail),
            ]);
        }
    }
    let header = ["lane", "what", "start", "end", "time", "detail"].map(String::from);
    table(&header, &rows)
}

/// What a device row says besides its time: bytes, then its detail.
fn device_detail(bytes: Option<u64>, detail: &str) -> String {
    let mut parts: Vec<String> = bytes.map(quasi_repl::byte_text).into_iter().collect();
    if !detail.is_empty() {
        parts.push(detail.to_string());
    }
    parts.join(", ")
}

/// A benchmark's statistics as a one-row table under its summary line.
pub fn bench(summary: &str, report: &quasi_lang::BenchReport) -> String {
    let first = summary.lines().next().unwrap_or("");
    let mut header: Vec<String> = ["runs", "min", "median", "mean", "std"].map(String::from).to_vec();
    let mut row = vec![
        report.runs.to_string(),
        quasi_repl::format_duration(report.min),
        quasi_repl::format_duration(report.median),
        quasi_repl::format_duration(report.mean),
        quasi_repl::format_duration(report.std),
    ];
    // The throughputs `(bytes E)` and `(flops E)` give, as the terminal shows them.
    for throughput in &report.throughput {
        header.push("throughput".to_string());
        row.push(quasi_repl::throughput_text(*throughput));
    }
    // Flush with the text outputs beside it (definitions, values), as `FLUSH` makes a `<pre>`.
    let mut html = format!("<div style=\"{FLUSH}\">{}</div>{}", escape(first), table(&header, &[row]));
    if let Some(noise) = report.noise() {
        html.push_str(&format!("<div style=\"{FLUSH}\">warning: {}</div>", escape(&noise)));
    }
    html
}

/// The autotuning table, fastest first, as the terminal shows it.
pub fn autotune(report: &quasi_lang::AutotuneReport) -> String {
    let (header, rows) = quasi_repl::autotune_table(report, quasi_repl::Masking::None);
    format!("<div style=\"{FLUSH}\">{}</div>{}", escape(&report.summary()), table(&header, &rows))
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};

    fn check(actual: String, expected: Expect) {
        expected.assert_eq(&actual);
    }

    #[test]
    fn a_bench_table_shows_every_throughput() {
        use std::time::Duration;
        let report = quasi_lang::BenchReport {
            runs: 50,
            elapsed: Duration::from_millis(5),
            warmup: 3,
            min: Duration::from_micros(90),
            median: Duration::from_micros(100),
            mean: Duration::from_micros(101),
            std: Duration::from_micros(2),
            throughput: vec![quasi_lang::Throughput::Bytes(4e7), quasi_lang::Throughput::Flops(1e7)],
            samples: Vec::new(),
        };
        let html = super::bench("bench: 50 runs", &report);
        let cells: Vec<&str> = html.split("<td").skip(1).collect();
        assert_eq!(cells.len(), 7, "{html}");
        assert!(cells[5].contains("40.0 MB/s") && cells[6].contains("10.0 MFLOP/s"), "{html}");
        assert_eq!(html.matches(">throughput<").count(), 2, "{html}");
        assert!(!html.contains("noisy"), "{html}");
        // A mean far above the median is flagged under the table, as the terminal does.
        let noisy = quasi_lang::BenchReport { mean: Duration::from_micros(300), ..report };
        let html = super::bench("bench: 50 runs", &noisy);
        assert!(html.ends_with("\">warning: noisy: the mean is 3.0× the median and the slowest run 0.0×: a few runs took much longer (other work on the machine, a first run&#39;s cold caches or page faults, or state that changes from run to run); the median is the typical run</div>"), "{html}");
    }

    #[test]
    fn escapes_markup() {
        check(super::escape("<a href=\"x\">&'</a>"), expect!["&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"]);
    }

    #[test]
    fn diagnostic_highlights_caret_line_and_span() {
        let plain = "error[type]: operands of `add` must have one integer type\n  --> cell 3:1:6\n  |\n1 | (add 1 2.5 <x>)\n  |        ^^^ this is `float`\n  |\n  = note: C-Lisp converts only with explicit casts\n";
        check(
            super::diagnostic(plain, true),
            expect![[r#"
                <pre class="quasi-diagnostic" style="margin:0;padding:0 0 0 1ch"><span style="color:#c62828;font-weight:bold">error[type]: operands of `add` must have one integer type</span>
                  --&gt; cell 3:1:6
                  |
                1 | (add 1 <span style="background:#c6282826;border-bottom:2px solid #c62828">2.5</span> &lt;x&gt;)
                  |        <span style="color:#c62828;font-weight:bold">^^^</span> this is `float`
                  |
                  = note: C-Lisp converts only with explicit casts
                </pre>"#]],
        );
    }

    #[test]
    fn listing_is_highlighted_with_scope_classes_and_theme_colours() {
        let html = super::listing("sq: LLVM IR", quasi_lang::Language::LlvmIr, "  %0 = mul i32 %x, 2 ; <sq>");
        let (style, body) = html.split_once("</style>").expect("a style element");
        check(
            body.to_string(),
            expect![[
                r#"<b>sq: LLVM IR</b><pre><span class="ql-source ql-llvm">  <span class="ql-variable ql-other ql-local ql-llvm">%0</span> = <span class="ql-keyword ql-instruction ql-llvm">mul</span> <span class="ql-storage ql-type ql-llvm">i32</span> <span class="ql-variable ql-other ql-local ql-llvm">%x</span>, <span class="ql-constant ql-numeric ql-llvm">2</span> <span class="ql-comment ql-line ql-semicolon ql-llvm">; &lt;sq&gt;</span></span></pre></div>"#
            ]],
        );
        assert!(
            style.contains(".quasi-listing .ql-keyword { color: var(--jp-mirror-editor-keyword-color, #008000)"),
            "{style}"
        );
        assert!(style.contains(".quasi-listing .ql-comment { color: var(--jp-mirror-editor-comment-color"), "{style}");
    }

    #[test]
    fn an_expansion_listing_has_no_heading() {
        let html = super::listing("", quasi_lang::Language::CLisp, "(add 1 2)");
        let (_, body) = html.split_once("</style>").expect("a style element");
        check(
            body.to_string(),
            expect![[
                r#"<pre><span class="ql-source ql-c-lisp">(<span class="ql-support ql-function ql-opcode ql-c-lisp">add</span> <span class="ql-constant ql-numeric ql-c-lisp">1</span> <span class="ql-constant ql-numeric ql-c-lisp">2</span>)</span></pre></div>"#
            ]],
        );
        check(
            super::listing_markdown("", quasi_lang::Language::CLisp, "(add 1 2)"),
            expect![[r#"
            ```lisp
            (add 1 2)
            ```
        "#]],
        );
    }

    #[test]
    fn value_and_definitions() {
        check(
            super::value("\"<b>\"", "(ptr int8)"),
            expect![[
                r#"<pre class="quasi-value" style="margin:0;padding:0 0 0 1ch">&quot;&lt;b&gt;&quot; <span style="color:#757575">: (ptr int8)</span></pre>"#
            ]],
        );
        check(
            super::definitions(&[("sq", "(int) -> int"), ("a<b", "int = 0")]),
            expect![[r#"
                <pre class="quasi-definitions" style="margin:0;padding:0 0 0 1ch"><b>sq</b> <span style="color:#757575">:</span> (int) -&gt; int
                <b>a&lt;b</b> <span style="color:#757575">:</span> int = 0</pre>"#]],
        );
    }
}
