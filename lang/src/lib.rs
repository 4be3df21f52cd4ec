//! quasi-lang: the Quasi language and session engine.
//!
//! A cell's trip, as `session` spells it: `reader` (text to spanned forms) → `expand` (unquotes
//! run in Rhai) → `check` (types, the `TypedCell` of `tree`) → `codegen` (LLVM IR, one module
//! per cell) → `backend` (passes, object code) → `link` (names, slots, ORC through `jit`) →
//! commit → `run` (the guarded call). Front ends call [`Session::eval`] and render the
//! [`Outcome`]; nothing in this crate prints or knows terminals or sockets. Modules import only
//! the stages before them (`scripts/module-graph` checks that there is no cycle).
#![deny(missing_docs)]

mod abi;
mod backend;
mod bench;
mod check;
mod codegen;
mod command;
mod cost;
mod diagnostics;
mod expand;
mod gpu;
mod guard;
mod header;
mod inspect;
mod intrinsics;
mod jit;
mod link;
mod reader;
mod run;
mod session;
mod source;
mod tier;
mod timing;
mod tree;
mod types;
mod value;

pub use backend::{ObjectCache, CACHE_BUDGET, CACHE_VARIABLE};
pub use cost::SHORT_RUN_LEVEL;
pub use diagnostics::{Diagnostic, Kind, Label, Severity};
pub use gpu::probe as gpu_probe;
/// NVIDIA's PTX assembler: finding it, its resource report, occupancy (`:ptx`'s last line).
pub use gpu::ptxas;
pub use gpu::Mode as GpuMode;
pub use reader::{completeness, Completeness};
pub use session::{
    Completion, CompletionKind, InterruptHandle, Session, SessionConfig, SessionError, BATCH_OPT_LEVEL,
    DEFAULT_OPT_LEVEL,
};
pub use source::{SourceFile, SourceId, Span};

/// The stack a thread that drives a `Session` should have: checking and code generation recurse
/// over a cell's forms, and Rhai recurses over nested values (an array nested 10,000 deep in a
/// debug build overflows 8 MiB). Only the pages used are resident.
pub const SESSION_STACK: usize = 256 << 20;
pub use timing::{AutotuneReport, BenchReport, DeviceTiming, Phase, PhaseTimes, Promotion, Throughput, VariantReport};

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
