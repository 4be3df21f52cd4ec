//! Sources: the texts a session has read (cells, files, Rhai scripts) and byte spans into them.
//!
//! Below every stage: the reader makes spans, diagnostics point with them, and the front ends
//! turn them into lines and carets. Nothing here knows forms or errors.

/// Which source text a span points into (an index into the session's source list).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId(pub u32);

/// A byte range in one source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Span {
    /// The text the range is in.
    pub source: SourceId,
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    pub(crate) fn new(source: SourceId, start: usize, end: usize) -> Span {
        Span { source, start: start as u32, end: end as u32 }
    }
}

/// A named source text: a cell, a file, a Rhai script.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// `cell 3`, a path, or a script name.
    pub name: String,
    /// The whole text.
    pub text: String,
}
