//! Diagnostics: errors and warnings as plain data over spans; rendering belongs to front ends.

use crate::source::Span;

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The cell did not (fully) run.
    Error,
    /// The cell ran; something deserves attention.
    Warning,
}

/// The diagnostic kinds of the language specification, printed as `error[KIND]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Reader errors, misplaced forms.
    Syntax,
    /// A name that is not defined.
    UnknownName,
    /// A name declared twice in one scope or cell.
    DuplicateName,
    /// Type mismatches, bad casts, conditions, invalidated functions.
    Type,
    /// Wrong operand or argument count.
    Arity,
    /// Staging (Rhai) errors.
    Macro,
    /// An expansion limit was exceeded.
    ExpansionLimit,
    /// Source size or stack array limits.
    Limit,
    /// A fault while compiled code ran.
    RuntimeFault,
    /// The user interrupted the cell.
    Interrupted,
    /// GPU errors.
    Gpu,
    /// Foreign function interface errors.
    Ffi,
    /// Unreadable files.
    Io,
    /// A failure of the machinery (LLVM, the JIT) rather than of the program.
    Internal,
}

impl Kind {
    /// The spelling inside `error[…]`.
    pub fn code(self) -> &'static str {
        match self {
            Kind::Syntax => "syntax",
            Kind::UnknownName => "unknown-name",
            Kind::DuplicateName => "duplicate-name",
            Kind::Type => "type",
            Kind::Arity => "arity",
            Kind::Macro => "macro",
            Kind::ExpansionLimit => "expansion-limit",
            Kind::Limit => "limit",
            Kind::RuntimeFault => "runtime-fault",
            Kind::Interrupted => "interrupted",
            Kind::Gpu => "gpu",
            Kind::Ffi => "ffi",
            Kind::Io => "io",
            Kind::Internal => "internal",
        }
    }
}

/// A span with an optional message; the primary label gets the carets.
#[derive(Clone, Debug)]
pub struct Label {
    /// Where.
    pub span: Span,
    /// Text shown next to the carets (may be empty).
    pub message: String,
    /// Primary (`^^^`) or secondary (`---`).
    pub primary: bool,
}

/// One error or warning.
#[derive(Clone, Debug)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The `error[KIND]` kind.
    pub kind: Kind,
    /// The headline.
    pub message: String,
    /// Spans, primary first.
    pub labels: Vec<Label>,
    /// `note:` lines after the snippet.
    pub notes: Vec<String>,
}

impl Diagnostic {
    /// A new error without labels.
    pub(crate) fn error(kind: Kind, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Error, kind, message: message.into(), labels: Vec::new(), notes: Vec::new() }
    }

    /// A failure of Quasi's machinery (LLVM, the JIT), not of the program: a bug to report.
    pub(crate) fn internal(message: impl Into<String>) -> Diagnostic {
        Diagnostic::error(Kind::Internal, message).with_note("this is a bug in Quasi; the session is unchanged")
    }

    /// A new warning without labels.
    pub(crate) fn warning(kind: Kind, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(kind, message) }
    }

    pub(crate) fn with_label(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { span, message: message.into(), primary: true });
        self
    }

    pub(crate) fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { span, message: message.into(), primary: false });
        self
    }

    pub(crate) fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    /// Adds "did you mean `X`?" when one of `known` is close to the misspelt `name`.
    pub(crate) fn with_suggestion<'a>(self, name: &str, known: impl IntoIterator<Item = &'a str>) -> Diagnostic {
        match nearest(name, known) {
            Some(near) => self.with_note(format!("did you mean `{near}`?")),
            None => self,
        }
    }

    /// Whether this is an error (not a warning).
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Whether this is what stopped running code (a runtime fault or an interrupt): it is shown
    /// after what the code printed and the values before it, where the run stopped.
    pub fn ends_the_run(&self) -> bool {
        matches!(self.kind, Kind::RuntimeFault | Kind::Interrupted)
    }

    /// Where the primary label starts, for ordering a cell's diagnostics by source position.
    pub(crate) fn sort_key(&self) -> (u32, u32) {
        self.labels.first().map_or((u32::MAX, u32::MAX), |label| (label.span.source.0, label.span.start))
    }
}

/// The one of `known` nearest to a misspelt `name`: within a third of its length in edits
/// (a transposition counts as one), the nearest and then the first in order on a tie.
pub(crate) fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .filter(|candidate| *candidate != name)
        .map(|candidate| (strsim::damerau_levenshtein(name, candidate), candidate))
        .filter(|(distance, candidate)| *distance * 3 <= candidate.chars().count())
        .min()
        .map(|(_, candidate)| candidate)
}
