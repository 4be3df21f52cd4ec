//! The `Outcome` of a cell: everything it produced, in order, as plain data (values, definitions,
//! program output, listings, tables) with the diagnostics and the sources they point into.
//! Front ends render it; nothing here renders itself.

use crate::diagnostics::Diagnostic;
use crate::source::{SourceFile, SourceId};
use crate::timeline::Timeline;
use crate::timing::{AutotuneReport, BenchReport, PhaseTimes};

/// Everything one cell produced, in order. Plain data: nothing here renders itself.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Values, definitions, program output and messages, in cell order.
    pub items: Vec<Item>,
    /// Errors and warnings (warnings may accompany a successful cell).
    pub diagnostics: Vec<Diagnostic>,
    /// Time spent in each phase.
    pub timing: PhaseTimes,
    /// Every text a diagnostic points into, by `SourceId`.
    pub sources: Vec<(SourceId, SourceFile)>,
    /// The cell asked the front end to exit (`:quit`).
    pub quit: bool,
    /// The cell asked the front end to save the session so far as a transcript (`:save FILE`):
    /// the path. Front ends keep what they showed; the session does not.
    pub save: Option<String>,
    /// What a long cell is doing now, while it runs — an autotune's progress: `autotune mm: 12
    /// of 64 variants (3 cached), 4.1 s, about 17 s left`. A front end shows it in place of
    /// the last one (the terminal on one line it then erases, Jupyter in a display it updates);
    /// a finished cell's outcome has none.
    pub status: Option<String>,
}

impl Outcome {
    /// What the program wrote to `stream`, in order.
    pub fn written(&self, stream: Stream) -> String {
        self.items
            .iter()
            .filter_map(|item| match item {
                Item::Output { stream: written, text } if *written == stream => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Whether the cell had an error.
    pub fn failed(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// An output stream of compiled code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// File descriptor 1.
    Stdout,
    /// File descriptor 2.
    Stderr,
}

/// One thing a cell produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// A top-level expression's value: rendered `TEXT : TYPE`.
    Value {
        /// The value as the language spells it.
        text: String,
        /// The type in C-Lisp spelling.
        ty: String,
    },
    /// A definition: rendered as its line, e.g. `fib : (int) -> int  (redefined)`.
    Defined {
        /// The defined name.
        name: String,
        /// The line after the name: signature or type, with notes.
        description: String,
    },
    /// What the program wrote to stdout or stderr while the session captured it.
    Output {
        /// Which file descriptor.
        stream: Stream,
        /// The bytes, decoded as UTF-8 (invalid sequences replaced).
        text: String,
    },
    /// A message from a command (`:help`, `:opt`…).
    Message(String),
    /// A listing of one stage of a definition (`:ir`, `:asm`, `:stages`…) or of an expansion
    /// (`:expand`).
    Listing {
        /// What it shows, e.g. `fib: LLVM IR (opt 1)`; empty for `:expand`, whose forms are shown
        /// bare.
        title: String,
        /// How to highlight it.
        language: Language,
        /// The text.
        text: String,
    },
    /// Phase times of a cell (`:time on`, `:time last`).
    Timing(PhaseTimes),
    /// What `(bench …)` measured.
    Bench(BenchReport),
    /// What `(autotune …)` measured and chose.
    Autotune(AutotuneReport),
    /// The last cell's code and device work as lanes (`:timeline`).
    Timeline(Timeline),
}

/// The language of a listing, for highlighting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// C-Lisp forms (source, expansion, typed tree).
    CLisp,
    /// LLVM IR.
    LlvmIr,
    /// x86-64 assembly.
    Assembly,
    /// NVIDIA PTX.
    Ptx,
}
