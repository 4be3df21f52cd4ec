//! Transcripts: parsing `.repl` files and running them through the session engine.
//!
//! A line starting `> ` starts a cell, `. ` continues it, and every line up to the next `> `
//! is the exact expected output. Lines starting `#` before the first cell are comments.

use quasi_lang::{Session, SessionConfig};
use quasi_repl::{render_masked, Masking, Style};

/// One cell of a transcript and the output it should give.
#[derive(Clone, Debug)]
pub struct Cell {
    /// The cell's text (without the `> `/`. ` markers).
    pub input: String,
    /// The expected output.
    pub expected: String,
}

/// A parsed transcript: its comment header and cells.
#[derive(Clone, Debug, Default)]
pub struct Transcript {
    /// Comment lines before the first cell, kept when rewriting.
    pub header: String,
    /// The cells in order.
    pub cells: Vec<Cell>,
}

/// Parses a transcript file.
pub fn parse(text: &str) -> Transcript {
    let mut transcript = Transcript::default();
    for line in text.split_inclusive('\n') {
        let bare = line.strip_suffix('\n').unwrap_or(line);
        if let Some(input) = bare.strip_prefix("> ").or_else(|| (bare == ">").then_some("")) {
            transcript.cells.push(Cell { input: input.to_string(), expected: String::new() });
        } else if let (Some(more), Some(cell)) =
            (bare.strip_prefix(". ").or_else(|| (bare == ".").then_some("")), transcript.cells.last_mut())
        {
            if cell.expected.is_empty() {
                cell.input.push('\n');
                cell.input.push_str(more);
            } else {
                cell.expected.push_str(line);
            }
        } else if let Some(cell) = transcript.cells.last_mut() {
            cell.expected.push_str(line);
        } else {
            transcript.header.push_str(line);
        }
    }
    transcript
}

/// Writes a transcript back, with the given outputs.
pub fn format(transcript: &Transcript, outputs: &[String]) -> String {
    let mut text = transcript.header.clone();
    for (cell, output) in transcript.cells.iter().zip(outputs) {
        for (index, line) in cell.input.lines().enumerate() {
            text.push_str(if index == 0 { "> " } else { ". " });
            text.push_str(line);
            text.push('\n');
        }
        if cell.input.is_empty() {
            text.push_str(">\n");
        }
        text.push_str(output);
        if !output.is_empty() && !output.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

/// Runs every cell in a fresh session and returns what each printed, as the terminal shows
/// it (addresses masked).
pub fn run(transcript: &Transcript) -> Result<Vec<String>, String> {
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })
        .map_err(|error| error.to_string())?;
    Ok(transcript
        .cells
        .iter()
        .map(|cell| render_masked(&session.eval(&cell.input), Style::Plain, Masking::Addresses))
        .collect())
}
