//! Shown: a cell written to the terminal (or the pipe) as it runs, with an autotune's progress
//! line drawn in place on a terminal.

use quasi_lang::{Outcome, Stream};
use quasi_repl::{Masking, Rendering, Style};

use super::{terminal_streams, write_flushed};

/// Writes a cell to the terminal as it runs: program output to stderr goes to stderr, the rest
/// to stdout, in cell order. `lang` promises that each outcome it shows while a cell runs renders
/// as a prefix of the next, so only the new part is rendered and written each time.
pub(crate) struct Shown {
    terminal: bool,
    /// What of the cell is rendered, and so written.
    rendering: Rendering,
    ends_line: bool,
    /// The progress line on the terminal's last line (`Outcome::status`), to be erased before
    /// anything else is written.
    status: Option<String>,
    width: Option<usize>,
}

impl Shown {
    /// `terminal`: program output to stderr goes to stderr and the next prompt starts on a fresh
    /// line. Otherwise (the pipe mode) everything goes to stdout, exactly the renderer's text.
    pub(crate) fn new(style: Style, terminal: bool) -> Shown {
        let width = if terminal { quasi_repl::terminal_width(&terminal_streams().0) } else { None };
        Shown {
            terminal,
            rendering: Rendering::new(style, Masking::None).with_width(width),
            ends_line: true,
            status: None,
            width,
        }
    }

    /// On a terminal, shows `status` on the last line in place of the one shown (cut to the
    /// terminal's width, so it stays one line), or erases it (`None`). Pipes show none.
    fn show_status(&mut self, status: Option<&str>) {
        if !self.terminal || self.status.as_deref() == status || !self.ends_line {
            return;
        }
        let mut text = String::from("\r\x1b[2K");
        if let Some(line) = status {
            let width = self.width.unwrap_or(80).saturating_sub(1).max(1);
            text.extend(line.chars().take(width));
        }
        let _ = write_flushed(&mut &terminal_streams().1, &text);
        self.status = status.map(str::to_string);
    }

    /// Writes what `outcome` adds to what was written, then its progress line.
    pub(crate) fn update(&mut self, outcome: &Outcome) {
        let parts = self.rendering.next(outcome);
        if !parts.is_empty() {
            self.show_status(None);
        }
        for (stream, text) in parts {
            // A closed or broken terminal stream is no reason to stop the session.
            let (out, err) = terminal_streams();
            let _ = match stream {
                Stream::Stderr if self.terminal => write_flushed(&mut &*err, &text),
                _ => write_flushed(&mut &*out, &text),
            };
            if !text.is_empty() {
                self.ends_line = text.ends_with('\n');
            }
        }
        self.show_status(outcome.status.as_deref());
    }

    /// The whole cell is shown; on a terminal the next prompt starts on a fresh line.
    pub(crate) fn finish(mut self) {
        self.show_status(None);
        if self.terminal && !self.ends_line {
            let _ = write_flushed(&mut &terminal_streams().0, "\n");
        }
    }
}
