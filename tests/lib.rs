//! Transcripts: parsing `.repl` files and running them through the session engine.
//!
//! A line starting `> ` starts a cell, `. ` continues it, and every line up to the next `> `
//! is the exact expected output. Lines starting `#` before the first cell are comments.
//!
//! A Markdown document (`docs/*.md`) holds transcripts too: each block fenced as ```` ```repl ````
//! is one, and all of a document's blocks run in order in one session.

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

/// The fence lines around a Markdown document's transcripts.
const FENCE_OPEN: &str = "```repl";
const FENCE_CLOSE: &str = "```";

/// A Markdown document cut into prose and the transcripts of its ```` ```repl ```` blocks.
#[derive(Clone, Debug, Default)]
pub struct Document {
    /// The text around the blocks, fence lines included: one more piece than blocks.
    pub prose: Vec<String>,
    /// The blocks, in order.
    pub blocks: Vec<Transcript>,
}

impl Document {
    /// Every block's cells in order, as one transcript for one session.
    pub fn transcript(&self) -> Transcript {
        Transcript { header: String::new(), cells: self.blocks.iter().flat_map(|block| block.cells.clone()).collect() }
    }

    /// Writes the document back with the given outputs (one per cell of `transcript`), each
    /// block rewritten by `format` and the prose as it was.
    pub fn format(&self, outputs: &[String]) -> String {
        let mut text = self.prose[0].clone();
        let mut rest = outputs;
        for (block, prose) in self.blocks.iter().zip(&self.prose[1..]) {
            let (mine, later) = rest.split_at(block.cells.len().min(rest.len()));
            text.push_str(&format(block, mine));
            text.push_str(prose);
            rest = later;
        }
        text
    }
}

/// Parses a Markdown document: a line ```` ```repl ```` opens a transcript, the next line
/// ```` ``` ```` closes it (an unclosed block runs to the end).
pub fn parse_markdown(text: &str) -> Document {
    let mut document = Document { prose: vec![String::new()], blocks: Vec::new() };
    let mut block: Option<String> = None;
    for line in text.split_inclusive('\n') {
        let bare = line.strip_suffix('\n').unwrap_or(line);
        match &mut block {
            Some(body) if bare == FENCE_CLOSE => {
                document.blocks.push(parse(body));
                document.prose.push(line.to_string());
                block = None;
            }
            Some(body) => body.push_str(line),
            None => {
                document.prose.last_mut().expect("one piece at least").push_str(line);
                if bare == FENCE_OPEN {
                    block = Some(String::new());
                }
            }
        }
    }
    if let Some(body) = block {
        document.blocks.push(parse(&body));
        document.prose.push(String::new());
    }
    document
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

#[cfg(test)]
mod tests {
    use super::*;

    const DOCUMENT: &str = "# Title\n\nProse.\n\n```repl\n> (add 1 2)\n3 : int\n> (define ((f int))\n.   (ret 1))\nf : () -> int\n```\n\nMore prose.\n```lisp\n(not a transcript)\n```\n```repl\n# a comment\n> (call f)\n1 : int\n\n```\nEnd.\n";

    fn expected(document: &Document) -> Vec<String> {
        document.transcript().cells.into_iter().map(|cell| cell.expected).collect()
    }

    #[test]
    fn a_document_is_rewritten_unchanged_with_its_own_outputs() {
        let document = parse_markdown(DOCUMENT);
        assert_eq!(document.blocks.len(), 2);
        assert_eq!(document.prose.len(), 3);
        let inputs: Vec<String> = document.transcript().cells.into_iter().map(|cell| cell.input).collect();
        assert_eq!(inputs, ["(add 1 2)", "(define ((f int))\n  (ret 1))", "(call f)"]);
        assert_eq!(document.format(&expected(&document)), DOCUMENT);
    }

    #[test]
    fn new_outputs_replace_only_the_outputs() {
        let document = parse_markdown(DOCUMENT);
        let mut outputs = expected(&document);
        outputs[0] = "4 : int\n".into();
        outputs[2] = "2 : int\n".into();
        let rewritten = document.format(&outputs);
        assert_eq!(rewritten, DOCUMENT.replace("3 : int", "4 : int").replace("1 : int\n\n", "2 : int\n"));
    }

    #[test]
    fn an_unclosed_block_runs_to_the_end() {
        let text = "Prose.\n```repl\n> 1\n1 : int\n";
        let document = parse_markdown(text);
        assert_eq!(document.blocks.len(), 1);
        assert_eq!(document.format(&expected(&document)), text);
    }
}
