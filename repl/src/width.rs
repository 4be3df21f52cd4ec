//! Diagnostics fitted to a terminal's width. A source line wider than the terminal would wrap,
//! and the caret line under it wrap apart from it; instead each such line is shown as a window
//! around its labels, `…` at the ends cut off, its caret lines cut the same on the left, so the
//! carets stay under their characters. Only the terminal front end asks for it: transcripts,
//! pipes and notebooks keep whole lines.

use std::io::IsTerminal;
use std::os::fd::AsFd;

use unicode_width::UnicodeWidthChar;

/// The fewest columns of source a window shows; a terminal narrower than that keeps whole lines.
const FEWEST_COLUMNS: usize = 12;

/// The width of the terminal `out` shows on, read for each cell (it may have been resized): the
/// terminal's own, else `COLUMNS`; `None` when `out` is not a terminal.
pub fn terminal_width(out: &impl AsFd) -> Option<usize> {
    use std::os::fd::AsRawFd;
    let out = out.as_fd();
    if !out.is_terminal() {
        return None;
    }
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one `winsize` into `size`, which lives across the call.
    let asked = unsafe { libc::ioctl(out.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
    if asked == 0 && size.ws_col > 0 {
        return Some(usize::from(size.ws_col));
    }
    std::env::var("COLUMNS").ok()?.trim().parse().ok().filter(|columns| *columns > 0)
}

/// The visible characters of a line, each with its byte range and width; ANSI escape
/// sequences (`ESC [ … final`) take no columns.
fn visible(line: &str) -> Vec<(usize, usize, char, usize)> {
    let mut out = Vec::new();
    let mut chars = line.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c == '\x1b' && chars.peek().is_some_and(|(_, next)| *next == '[') {
            chars.next();
            for (_, c) in chars.by_ref() {
                if ('\x40'..='\x7e').contains(&c) {
                    break;
                }
            }
            continue;
        }
        out.push((start, start + c.len_utf8(), c, c.width().unwrap_or(0)));
    }
    out
}

/// The columns `[from, to)` of `line` after its first `gutter` columns, which are kept, as are
/// all escape sequences (colours stay balanced).
fn cut(line: &str, gutter: usize, from: usize, to: usize, left: &str, right: &str) -> String {
    let chars = visible(line);
    let mut out = String::new();
    let mut column: usize = 0;
    let mut last = 0;
    let mut left_put = false;
    for (start, end, _, width) in chars {
        // Escape sequences between the visible characters.
        out.push_str(&line[last..start]);
        last = end;
        let content = column.saturating_sub(gutter);
        if column >= gutter && !left_put {
            out.push_str(left);
            left_put = true;
        }
        if column < gutter || (from <= content && content < to) {
            out.push_str(&line[start..end]);
        }
        column += width;
    }
    out.push_str(&line[last..]);
    if !left_put {
        out.push_str(left);
    }
    out.push_str(right);
    out
}

/// How wide a line shows.
fn width_of(line: &str) -> usize {
    visible(line).iter().map(|(_, _, _, width)| width).sum()
}

/// The text of a line without its escape sequences.
fn plain(line: &str) -> String {
    visible(line).into_iter().map(|(_, _, c, _)| c).collect()
}

/// `rendered` (one diagnostic as `render_diagnostic` writes it) with every source line wider
/// than `width` columns cut to a window around its labels.
pub fn fit_diagnostic(rendered: &str, width: usize) -> String {
    let lines: Vec<&str> = rendered.split('\n').collect();
    let mut out: Vec<String> = lines.iter().map(|line| line.to_string()).collect();
    for (index, line) in lines.iter().enumerate() {
        let text = plain(line);
        // A source line: `NUMBER | TEXT`, the number right-aligned in the gutter.
        let digits = text.trim_start().chars().take_while(char::is_ascii_digit).count();
        let number_end = text.len() - text.trim_start().len() + digits;
        if digits == 0 || !text[number_end..].starts_with(" | ") || width_of(line) <= width {
            continue;
        }
        let gutter = number_end + 3;
        let room = width.saturating_sub(gutter);
        if room < FEWEST_COLUMNS {
            continue;
        }
        // Its caret lines: the gutter without a number, then carets (`^` under the primary
        // label, `-` under others) and their messages.
        let blank = format!("{} | ", " ".repeat(number_end));
        let annotations: Vec<usize> =
            (index + 1..lines.len()).take_while(|&next| plain(lines[next]).starts_with(&blank)).collect();
        let mut labelled: Option<(usize, usize)> = None;
        let mut multiline = false;
        for &next in &annotations {
            let content: Vec<char> = plain(lines[next]).chars().skip(gutter).collect();
            let start = content.iter().take_while(|c| **c == ' ').count();
            match content.get(start) {
                Some('^' | '-') => {}
                // A label over several lines draws its edges on the left: left as it is.
                _ => multiline = true,
            }
            let end = start + content[start..].iter().take_while(|c| matches!(c, '^' | '-')).count();
            labelled = Some(labelled.map_or((start, end), |(lo, hi)| (lo.min(start), hi.max(end))));
        }
        if multiline {
            continue;
        }
        let (lo, hi) = labelled.unwrap_or((0, 0));
        let length = width_of(line) - gutter;
        // The window, `…` taking a column at each end it cuts.
        let (from, to) = if hi < room {
            (0, room - 1)
        } else if hi - lo >= room - 2 {
            (lo, lo + room - 2)
        } else if length - lo.saturating_sub((room - 2 - (hi - lo)) / 2) < room {
            (length - (room - 1), length)
        } else {
            let from = lo - (room - 2 - (hi - lo)) / 2;
            (from, from + room - 2)
        };
        let (left, right) = (if from > 0 { "…" } else { "" }, if to < length { "…" } else { "" });
        out[index] = cut(line, gutter, from, to, left, right);
        for &next in &annotations {
            out[next] = cut(lines[next], gutter, from, usize::MAX, if from > 0 { " " } else { "" }, "");
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const WIDE: &str = "\
error[type]: wrong
  --> cell 1:1:60
  |
1 | (define ((f int)) (ret (add 1 (add 2 (add 3 (add 4 (add 5 (add 6 1.5))))))))
  |                                                           ^^^^^^^^^^^ here
  |
";

    #[test]
    fn a_wide_line_shows_a_window_with_the_carets_under_their_characters() {
        let fitted = fit_diagnostic(WIDE, 40);
        let lines: Vec<&str> = fitted.lines().collect();
        assert_eq!(lines[3], "1 | … 3 (add 4 (add 5 (add 6 1.5))))))))");
        assert_eq!(lines[4], "  |                   ^^^^^^^^^^^ here");
        assert_eq!(column(lines[3], "(add 6"), column(lines[4], "^"));
        assert_eq!(lines[3].chars().count(), 40);
        // The header keeps the real column; narrow lines are left as they are.
        assert_eq!(lines[1], "  --> cell 1:1:60");
        assert_eq!(fit_diagnostic(WIDE, 200), WIDE);
    }

    /// The column `needle` starts at in `line`.
    fn column(line: &str, needle: &str) -> Option<usize> {
        line.find(needle).map(|at| line[..at].chars().count())
    }

    #[test]
    fn a_label_in_the_middle_of_a_long_line_shows_it_with_both_ends_cut() {
        let source = format!("{}(add x 1.5){}", "(add 1 ".repeat(20), ")".repeat(20));
        let at = source.find("(add x").unwrap_or_default();
        let text = format!("1 | {source}\n  | {}^^^^^^^^^^^\n", " ".repeat(at));
        let fitted = fit_diagnostic(&text, 40);
        let lines: Vec<&str> = fitted.lines().collect();
        assert!(lines[0].starts_with("1 | …") && lines[0].ends_with('…'), "{fitted}");
        assert_eq!(lines[0].chars().count(), 40);
        assert_eq!(column(lines[0], "(add x 1.5)"), column(lines[1], "^^^^^^^^^^^"));
    }

    #[test]
    fn a_label_near_the_start_cuts_only_the_end() {
        let text = "1 | (ret (add 1 (add 2 (add 3 (add 4 (add 5 (add 6 1.5))))))))\n  |      ^^^\n";
        let fitted = fit_diagnostic(text, 30);
        assert_eq!(fitted, "1 | (ret (add 1 (add 2 (add 3…\n  |      ^^^\n");
    }

    #[test]
    fn colours_are_kept_and_take_no_columns() {
        let text = "\x1b[34m1 | \x1b[0m(ret (add 1 (add 2 (add 3 (add 4 (add 5 (add 6 1.5))))))))\n\x1b[34m  | \x1b[0m     \x1b[31m^^^\x1b[0m\n";
        let fitted = fit_diagnostic(text, 30);
        assert_eq!(plain(fitted.lines().next().unwrap_or_default()), "1 | (ret (add 1 (add 2 (add 3…");
        assert!(fitted.contains("\x1b[31m^^^\x1b[0m"));
    }
}
