//! Transcripts: `.repl` files (and the ```` ```repl ```` blocks of Markdown documents) as the
//! third front end. One engine reads them, runs them through a fresh session and this crate's
//! renderer, compares outputs (with wildcards), rewrites expectations, and records a live session
//! as a transcript (`:save`): the project's test harness and `quasi test` both call it.
//!
//! The format: `> ` starts a cell, `. ` continues it, and every line up to the next `> ` is the
//! exact expected output. Lines before the first cell are the header: `#` comments, and `#: `
//! lines holding a command run (unshown) before the first cell, e.g. `#: :opt 3`. In expected
//! output, `[..]` matches any text within a line and a line `...` matches any number of lines.
//! A header line `# requires: cuda-device` marks a transcript that needs a real GPU: where
//! there is none it is skipped, with the reason (`no-cuda-device`: the reverse);
//! `# requires: library:libNAME.so` one that loads a library found only through
//! `QUASI_LIBRARY_PATH` (the suite's test libraries, which the harness builds);
//! `# requires: header:NAME.h` one that includes a header that may be missing (`cuda.h`).

use std::path::Path;

use quasi_lang::{Diagnostic, Item, Kind, Outcome, Session, SessionConfig, Severity};

use crate::{render_masked, Masking, Style};

/// The header prefix of a command run before the first cell.
const SETUP_PREFIX: &str = "#: ";
/// The header prefix of what a transcript needs of the machine.
const REQUIRES_PREFIX: &str = "# requires:";

/// One cell of a transcript and the output it should give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// The cell's text (without the `> `/`. ` markers).
    pub input: String,
    /// The expected output.
    pub expected: String,
    /// The 1-based line of the cell's `> ` in its file (0 for cells not read from a file).
    pub line: usize,
}

/// A parsed transcript: its header and cells.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transcript {
    /// Lines before the first cell (comments and `#: ` commands), kept when rewriting.
    pub header: String,
    /// The cells in order.
    pub cells: Vec<Cell>,
}

impl Transcript {
    /// The header's `#: ` commands, in order.
    pub fn setup_commands(&self) -> Vec<&str> {
        self.header.lines().filter_map(|line| line.strip_prefix(SETUP_PREFIX)).map(str::trim).collect()
    }

    /// Why this transcript cannot run on this machine (`# requires: cuda-device` without a
    /// CUDA device, or a requirement nobody knows), if it cannot.
    pub fn unmet_requirement(&self) -> Option<String> {
        let requirements = self.header.lines().filter_map(|line| line.strip_prefix(REQUIRES_PREFIX));
        static PROBE: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
        for requirement in requirements.flat_map(str::split_whitespace) {
            match (requirement, PROBE.get_or_init(quasi_lang::tools::gpu_probe)) {
                ("cuda-device", Err(reason)) => return Some(format!("needs a CUDA device ({reason})")),
                ("no-cuda-device", Ok(device)) => {
                    return Some(format!("needs a machine without a CUDA device ({device})"))
                }
                ("cuda-device" | "no-cuda-device", _) => {}
                ("slurm", _) => {
                    static SLURM: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
                    if let Some(reason) = SLURM.get_or_init(quasi_lang::tools::missing_slurm) {
                        return Some(reason.clone());
                    }
                }
                (other, _) if other.starts_with("library:") => {
                    let library = &other["library:".len()..];
                    if let Some(reason) = missing_library(library) {
                        return Some(reason);
                    }
                }
                (other, _) if other.starts_with("header:") => {
                    let header = &other["header:".len()..];
                    if let Some(reason) = missing_header(header) {
                        return Some(reason);
                    }
                }
                (other, _) => {
                    return Some(format!(
                    "requires `{other}`, which is not a known requirement (cuda-device, no-cuda-device, slurm, library:NAME, header:NAME)"
                ))
                }
            }
        }
        None
    }
}

/// Why a library named in `# requires: library:NAME` cannot be loaded by name: it is in no
/// directory of `QUASI_LIBRARY_PATH`, where `load-library` looks first.
fn missing_library(library: &str) -> Option<String> {
    let search_path = std::env::var("QUASI_LIBRARY_PATH").unwrap_or_default();
    let found =
        search_path.split(':').any(|directory| !directory.is_empty() && Path::new(directory).join(library).is_file());
    if found {
        return None;
    }
    let setting = if search_path.is_empty() { "unset".to_string() } else { format!("`{search_path}`") };
    Some(format!(
        "needs {library} in a directory of QUASI_LIBRARY_PATH ({setting}); the transcript suite builds tests/ffi's libraries into target/tmp/ffi (cargo test -p quasi-tests --test transcripts): set QUASI_LIBRARY_PATH to that directory"
    ))
}

/// Why a header named in `# requires: header:NAME` cannot be included: it is in none of the
/// directories `include` searches besides `-I` flags (QUASI_INCLUDE_PATH, CPATH and
/// C_INCLUDE_PATH, the system's, and CUDA's usual /usr/local/cuda/include).
fn missing_header(header: &str) -> Option<String> {
    let from_environment: Vec<String> = ["QUASI_INCLUDE_PATH", "CPATH", "C_INCLUDE_PATH"]
        .iter()
        .filter_map(|variable| std::env::var(variable).ok())
        .flat_map(|value| value.split(':').map(str::to_string).collect::<Vec<_>>())
        .filter(|directory| !directory.is_empty())
        .collect();
    let standard = ["/usr/local/include", "/usr/include", "/usr/local/cuda/include"].map(str::to_string);
    let found = from_environment.iter().chain(&standard).any(|directory| Path::new(directory).join(header).is_file());
    (!found).then(|| {
        format!("needs the header {header}: put its directory in QUASI_INCLUDE_PATH (scripts/test.sh does, for cuda.h from the nvidia-cuda-runtime-cu12 wheel)")
    })
}

/// Parses a transcript; `first_line` is the file line of the text's first line (1 for a file).
pub fn parse_at(text: &str, first_line: usize) -> Transcript {
    let mut transcript = Transcript::default();
    for (offset, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.strip_suffix('\n').unwrap_or(line);
        if let Some(input) = bare.strip_prefix("> ").or_else(|| (bare == ">").then_some("")) {
            let line = first_line + offset;
            transcript.cells.push(Cell { input: input.to_string(), expected: String::new(), line });
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

/// Parses a transcript file's text.
pub fn parse(text: &str) -> Transcript {
    parse_at(text, 1)
}

/// A cell's input as a transcript writes it: `> ` before its first line, `. ` before the others
/// (a bare `>` for an empty cell); no newline after the last line.
pub fn format_input(input: &str) -> String {
    if input.is_empty() {
        return ">".to_string();
    }
    let lines = input.lines().enumerate();
    let prompted: Vec<String> =
        lines.map(|(index, line)| format!("{}{line}", if index == 0 { "> " } else { ". " })).collect();
    prompted.join("\n")
}

/// The cells of a pasted transcript — text whose first line that is not blank starts with the
/// `> ` prompt (or is a bare `>`): their prompts taken off, what they printed left out. `None`
/// for any other text (no C-Lisp cell starts with `>`). The terminal and the kernel run each cell
/// in turn, as Julia's REPL and IPython strip their prompts from a paste.
pub fn pasted_cells(text: &str) -> Option<Vec<String>> {
    let first = text.lines().find(|line| !line.trim().is_empty())?;
    if !(first.starts_with("> ") || first.trim_end() == ">") {
        return None;
    }
    let cells = parse(text).cells.into_iter().map(|cell| cell.input);
    Some(cells.filter(|input| !input.trim().is_empty()).collect())
}

/// Writes a transcript back, with the given outputs (one per cell).
pub fn format(transcript: &Transcript, outputs: &[String]) -> String {
    let mut text = transcript.header.clone();
    for (cell, output) in transcript.cells.iter().zip(outputs) {
        text.push_str(&format_input(&cell.input));
        text.push('\n');
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
    let mut block: Option<(String, usize)> = None;
    for (offset, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.strip_suffix('\n').unwrap_or(line);
        match &mut block {
            Some((body, first_line)) if bare == FENCE_CLOSE => {
                document.blocks.push(parse_at(body, *first_line));
                document.prose.push(line.to_string());
                block = None;
            }
            Some((body, _)) => body.push_str(line),
            None => {
                if let Some(prose) = document.prose.last_mut() {
                    prose.push_str(line);
                }
                if bare == FENCE_OPEN {
                    block = Some((String::new(), offset + 2));
                }
            }
        }
    }
    if let Some((body, first_line)) = block {
        document.blocks.push(parse_at(&body, first_line));
        document.prose.push(String::new());
    }
    document
}

/// A fresh session as transcripts run in: program output captured into the outcome, and a
/// tuning cache of its own (removed with it), so an autotune is timed the first time the
/// transcript runs it and cached the next, whatever earlier sessions measured.
pub fn new_session() -> Result<Session, String> {
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })
        .map_err(|error| error.to_string())?;
    session.set_tune_cache(Some(quasi_lang::TuneCache::temporary()));
    Ok(session)
}

/// The output a cell's outcome gives in a transcript: the terminal's text, plain, with addresses
/// and durations masked.
pub fn output(outcome: &Outcome) -> String {
    render_masked(outcome, Style::Plain, Masking::Addresses)
}

/// Runs every cell in a fresh session, after the header's commands, and returns what each
/// printed. A header command that fails is the error.
pub fn run(transcript: &Transcript) -> Result<Vec<String>, String> {
    run_reporting(transcript, &mut |_| {})
}

/// `run`, calling `starting` with each cell before it runs (`quasi test`'s worker says which
/// cell a run past `--timeout` was in).
pub fn run_reporting(transcript: &Transcript, starting: &mut dyn FnMut(&Cell)) -> Result<Vec<String>, String> {
    let mut session = new_session()?;
    for command in transcript.setup_commands() {
        let outcome = session.eval(command);
        if outcome.failed() {
            return Err(format!("the header command `{command}` failed:\n{}", output(&outcome)));
        }
    }
    let mut recording = Recording::default();
    // `:save` in a transcript under test writes to a scratch folder (made on the first one,
    // removed after the run), never over the transcript or another test file.
    let mut scratch: Option<tempfile::TempDir> = None;
    let mut outputs = Vec::new();
    for cell in &transcript.cells {
        // A cell interrupted when it was recorded (`:save` keeps it, output and all) is not run
        // again: it would run until stopped, and nothing stops a replay. Its recorded output
        // stands; what it did before it was stopped is not redone.
        if was_interrupted(&cell.expected) {
            outputs.push(cell.expected.clone());
            continue;
        }
        starting(cell);
        let mut outcome = session.eval(&cell.input);
        if outcome.save.is_some() && scratch.is_none() {
            scratch = Some(tempfile::tempdir().map_err(|error| format!("no scratch folder for `:save`: {error}"))?);
        }
        record_or_save_in(&mut recording, &cell.input, &mut outcome, scratch.as_ref().map(tempfile::TempDir::path));
        outputs.push(output(&outcome));
    }
    Ok(outputs)
}

/// Whether a cell's recorded output ends in Ctrl-C's `error[interrupted]`.
pub fn was_interrupted(expected: &str) -> bool {
    expected.lines().any(|line| line.starts_with("error[interrupted]"))
}

/// What a front end does with each cell it showed: records it, or, for `:save FILE`, writes
/// the recording so far and says so in the outcome (a message, or an `error[io]`).
pub fn record_or_save(recording: &mut Recording, input: &str, outcome: &mut Outcome) {
    record_or_save_in(recording, input, outcome, None);
}

/// `record_or_save`, a `:save FILE` written into `scratch` (as FILE's name there) when given;
/// the message names FILE as written.
fn record_or_save_in(recording: &mut Recording, input: &str, outcome: &mut Outcome, scratch: Option<&Path>) {
    match outcome.save.take() {
        Some(path) => match recording.save(&saved_to(&path, scratch), Path::new(&path)) {
            Ok(message) => outcome.items.push(Item::Message(message)),
            Err(error) => outcome.diagnostics.push(Diagnostic {
                severity: Severity::Error,
                kind: Kind::Io,
                message: format!("cannot write `{path}`: {error}"),
                labels: Vec::new(),
                notes: Vec::new(),
            }),
        },
        None => recording.record(input, outcome),
    }
}

fn saved_to(path: &str, scratch: Option<&Path>) -> std::path::PathBuf {
    match scratch {
        Some(folder) => folder.join(Path::new(path).file_name().unwrap_or_else(|| std::ffi::OsStr::new("saved.repl"))),
        None => std::path::PathBuf::from(path),
    }
}

/// Whether an actual output matches an expected one: equal, or equal but for the wildcards
/// (`[..]` within a line, a `...` line for any number of lines).
pub fn matches(expected: &str, actual: &str) -> bool {
    if expected == actual {
        return true;
    }
    // A location's cell number is where the cell stands in the session, not what it printed:
    // deleting or inserting a cell must not break every later error cell.
    let expected: Vec<String> = expected.lines().map(without_cell_number).collect();
    let actual: Vec<String> = actual.lines().map(without_cell_number).collect();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    let actual: Vec<&str> = actual.iter().map(String::as_str).collect();
    lines_match(&expected, &actual)
}

/// A diagnostic's location line (`  --> cell 41:3:5`) without its cell number; any other line
/// as it is.
fn without_cell_number(line: &str) -> String {
    let body = line.trim_start();
    if let Some(rest) = body.strip_prefix("--> cell ") {
        if let Some((number, place)) = rest.split_once(':') {
            if !number.is_empty() && number.bytes().all(|byte| byte.is_ascii_digit()) {
                return format!("{}--> cell #:{place}", &line[..line.len() - body.len()]);
            }
        }
    }
    line.to_string()
}

fn lines_match(expected: &[&str], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((&"...", rest)) => (0..=actual.len()).any(|skipped| lines_match(rest, &actual[skipped..])),
        Some((pattern, rest)) => {
            actual.first().is_some_and(|line| line_matches(pattern, line)) && lines_match(rest, &actual[1..])
        }
    }
}

/// One line against a pattern whose `[..]` match any text: the first piece is a prefix, the
/// last a suffix, and the ones between are found in order, leftmost first (which is enough for
/// literal pieces).
fn line_matches(pattern: &str, line: &str) -> bool {
    let pieces: Vec<&str> = pattern.split("[..]").collect();
    let [first, middle @ .., last] = pieces.as_slice() else { return pattern == line };
    let Some(mut rest) = line.strip_prefix(first) else { return false };
    for piece in middle {
        match rest.find(piece) {
            Some(index) => rest = &rest[index + piece.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The outputs to write back: each cell's expected output where it still matches (so wildcards
/// survive), the actual one where it does not.
pub fn blessed_outputs(transcript: &Transcript, actual: &[String]) -> Vec<String> {
    transcript
        .cells
        .iter()
        .zip(actual)
        .map(|(cell, actual)| if matches(&cell.expected, actual) { cell.expected.clone() } else { actual.clone() })
        .collect()
}

/// A live session recorded as a transcript, for `:save`: every cell and what it printed,
/// failures included, in the form `quasi test` checks.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    cells: Vec<Cell>,
}

impl Recording {
    /// Adds a cell and its outcome.
    pub fn record(&mut self, input: &str, outcome: &Outcome) {
        self.cells.push(Cell { input: input.trim_end_matches('\n').to_string(), expected: output(outcome), line: 0 });
    }

    /// The number of cells recorded.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// Whether nothing was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The transcript's text.
    pub fn text(&self) -> String {
        let transcript = Transcript {
            header: "# Recorded with `:save`; check it with `quasi test`.\n".to_string(),
            cells: self.cells.clone(),
        };
        let outputs: Vec<String> = self.cells.iter().map(|cell| cell.expected.clone()).collect();
        format(&transcript, &outputs)
    }

    /// Writes the transcript to `path`; returns the message the front end shows, which names
    /// `shown` (the path the user gave; `quasi test` writes elsewhere).
    pub fn save(&self, path: &Path, shown: &Path) -> std::io::Result<String> {
        std::fs::write(path, self.text())?;
        let cells = self.cells.len();
        Ok(format!("saved {cells} cell{} to {}", if cells == 1 { "" } else { "s" }, shown.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_matches_whatever_its_cell_number() {
        assert!(matches("error[type]: x\n  --> cell 41:3:5\n", "error[type]: x\n  --> cell 40:3:5\n"));
        assert!(!matches("  --> cell 41:3:5\n", "  --> cell 41:3:6\n"), "lines and columns still count");
        assert!(!matches("error: cell 41\n", "error: cell 40\n"), "only location lines");
        assert!(matches("  --> cell 7:1:[..]\n", "  --> cell 12:1:9\n"));
    }

    #[test]
    fn a_pasted_transcript_is_its_cells_without_prompts_or_outputs() {
        let pasted =
            "> (define ((sq int) (x int))\n.   (ret (mul x x)))\nsq : (int) -> int\n>\n> (call sq 7)\n49 : int\n";
        assert_eq!(
            pasted_cells(pasted),
            Some(vec!["(define ((sq int) (x int))\n  (ret (mul x x)))".to_string(), "(call sq 7)".to_string()])
        );
        assert_eq!(pasted_cells("\n  \n> :time on\n"), Some(vec![":time on".to_string()]));
        assert_eq!(pasted_cells("(call sq 7)\n> 3"), None, "only a first line with the prompt makes a paste");
        assert_eq!(pasted_cells(">(call sq 7)"), None, "the prompt is `> `");
        assert_eq!(format_input("(a\n b)"), "> (a\n.  b)");
        assert_eq!(format_input(""), ">");
    }

    #[test]
    fn wildcards_match_within_a_line_and_across_lines() {
        assert!(matches("a [..] c\n", "a b c\n"));
        assert!(matches("[..]: took [..] ms\n", "bench: took 12.5 ms\n"));
        assert!(!matches("a [..] c\n", "a b d\n"));
        assert!(matches("first\n...\nlast\n", "first\nx\ny\nlast\n"));
        assert!(matches("first\n...\nlast\n", "first\nlast\n"));
        assert!(!matches("first\n...\nlast\n", "first\nx\n"));
        assert!(!matches("exact\n", "other\n"));
        assert!(matches("[..]\n", "anything at all\n"));
    }

    #[test]
    fn cells_know_their_lines_and_the_header_its_commands() {
        let transcript = parse("# comment\n#: :opt 3\n> (add 1 2)\n3 : int\n> (define ((f int))\n.   (ret 1))\n");
        assert_eq!(transcript.setup_commands(), [":opt 3"]);
        assert_eq!(transcript.unmet_requirement(), None);
        let unknown = parse("# requires: a-quantum-computer\n> 1\n1 : int\n");
        assert!(unknown.unmet_requirement().is_some_and(|reason| reason.contains("not a known requirement")));
        let lines: Vec<usize> = transcript.cells.iter().map(|cell| cell.line).collect();
        assert_eq!(lines, [3, 5]);
    }

    #[test]
    fn blessing_keeps_wildcards_that_still_match() {
        let transcript = parse("> a\nx [..] z\n> b\nold\n");
        let blessed = blessed_outputs(&transcript, &["x y z\n".to_string(), "new\n".to_string()]);
        assert_eq!(blessed, ["x [..] z\n", "new\n"]);
    }

    const DOCUMENT: &str = "# Title\n\nProse.\n\n```repl\n> (add 1 2)\n3 : int\n> (define ((f int))\n.   (ret 1))\nf : () -> int\n```\n\nMore prose.\n```lisp\n(not a transcript)\n```\n```repl\n# a comment\n> (call f)\n1 : int\n\n```\nEnd.\n";

    fn expected(document: &Document) -> Vec<String> {
        document.transcript().cells.into_iter().map(|cell| cell.expected).collect()
    }

    #[test]
    fn a_document_is_rewritten_unchanged_with_its_own_outputs() {
        let document = parse_markdown(DOCUMENT);
        assert_eq!(document.blocks.len(), 2);
        assert_eq!(document.prose.len(), 3);
        let cells = document.transcript().cells;
        let inputs: Vec<&str> = cells.iter().map(|cell| cell.input.as_str()).collect();
        assert_eq!(inputs, ["(add 1 2)", "(define ((f int))\n  (ret 1))", "(call f)"]);
        let lines: Vec<usize> = cells.iter().map(|cell| cell.line).collect();
        assert_eq!(lines, [6, 8, 19]);
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
