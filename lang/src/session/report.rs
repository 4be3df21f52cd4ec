//! Reports: how the session words what happened — what a cell defined (`Defined`, as commit
//! returns it, into the lines cells and `:defs` print), errors in generated code traced to the
//! unquote that generated it, and the back end's failures. Runtime faults are `faults`'s.

use crate::backend::BackendError;
use crate::check::{FunctionEntry, FunctionKind};
use crate::diagnostics::{Diagnostic, Kind};
use crate::expand::ExpansionSite;
use crate::tree::TypedCell;
use crate::types::{StructEntry, Ty};
use crate::Item;

/// Says which unquote generated the code a diagnostic points at, and what it expanded to.
pub(super) fn explain_expansions(mut diagnostics: Vec<Diagnostic>, sites: &[ExpansionSite]) -> Vec<Diagnostic> {
    if sites.is_empty() {
        return diagnostics;
    }
    for diagnostic in &mut diagnostics {
        let mut notes = Vec::new();
        for label in &mut diagnostic.labels {
            let site = sites.iter().find(|site| {
                site.span.source == label.span.source
                    && site.span.start <= label.span.start
                    && label.span.end <= site.span.end
            });
            if let Some(site) = site {
                if label.message.is_empty() {
                    label.message = format!("in expansion of {}", site.written);
                }
                let note = format!("expanded to {}", site.expanded);
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
        }
        diagnostic.notes.splice(0..0, notes);
    }
    diagnostics
}

fn assembly_error(message: String, cell: &TypedCell) -> Diagnostic {
    let mut diagnostic = Diagnostic::error(Kind::Syntax, format!("LLVM rejected inline assembly: {}", message.trim()))
        .with_note("the session is unchanged");
    if let Some(span) = cell.asm_spans.first() {
        diagnostic = diagnostic.with_label(*span, "");
    }
    diagnostic
}

/// What the back end's failure on a cell's module says: inline assembly the assembler rejected
/// is the cell's syntax error (at its first `asm`); anything else is Quasi's or LLVM's.
pub(super) fn backend_error(error: BackendError, cell: &TypedCell) -> Vec<Diagnostic> {
    match error {
        BackendError::Rejected(messages) => messages.into_iter().map(|message| assembly_error(message, cell)).collect(),
        other => vec![Diagnostic::internal(other.to_string())],
    }
}

pub(super) fn lowering_error(error: crate::codegen::CodegenError, cell: &TypedCell) -> Diagnostic {
    let mut diagnostic = Diagnostic::internal(format!("code generation failed: {error}"));
    if let Some(function) = cell.functions.first() {
        diagnostic = diagnostic.with_label(function.span, "");
    }
    diagnostic
}

pub(super) fn struct_line(name: &str, entry: &StructEntry) -> String {
    match &entry.fields {
        None => format!("struct {name} (opaque)"),
        Some(fields) => {
            let fields: Vec<String> = fields.iter().map(|(field, ty)| format!("{field} : {ty}")).collect();
            format!("struct {name} {{ {} }}", fields.join(", "))
        }
    }
}

pub(super) fn function_note(entry: &FunctionEntry, redefined: bool) -> String {
    let mut library_note = String::new();
    let mut notes = Vec::new();
    match &entry.kind {
        FunctionKind::Defined(def) if def.inline => notes.push("inline"),
        FunctionKind::Defined(def) if def.kernel => notes.push("kernel"),
        FunctionKind::Defined(def) if def.placement.device_only => notes.push("device"),
        FunctionKind::External(_) => notes.push("extern"),
        FunctionKind::Library { library, .. } => library_note = format!("extern, from {library}"),
        FunctionKind::Unresolved => notes.push("extern, unresolved"),
        FunctionKind::Defined(_) => {}
    }
    if !library_note.is_empty() {
        notes.push(&library_note);
    }
    if redefined {
        notes.push("redefined");
    }
    if entry.invalidated.is_some() {
        notes.push("invalidated");
    }
    if notes.is_empty() {
        String::new()
    } else {
        format!("  ({})", notes.join(", "))
    }
}

/// What a commit defined, as data: `describe` words it.
pub(super) enum Defined {
    /// A struct type (new, or a redefinition).
    Struct { name: String, entry: StructEntry, redefined: bool },
    /// A global and its value after the cell's initialiser.
    Global { name: String, ty: Ty, value: String, redefined: bool },
    /// A function: a definition, a declaration, or a declaration a new library resolved.
    Function { name: String, entry: FunctionEntry, redefined: bool },
    /// A `load-library` library, now the session's.
    Library(String),
}

/// The item a definition shows as: `sq : (int) -> int  (redefined)`.
pub(super) fn describe(defined: &Defined) -> Item {
    match defined {
        Defined::Struct { name, entry, redefined } => Item::Defined {
            name: format!("struct {name}"),
            description: struct_line(name, entry).trim_start_matches(&format!("struct {name} ")).to_string()
                + if *redefined { "  (redefined)" } else { "" },
        },
        Defined::Global { name, ty, value, redefined } => Item::Defined {
            name: name.clone(),
            description: format!("{ty} = {value}{}", if *redefined { "  (redefined)" } else { "" }),
        },
        Defined::Function { name, entry, redefined } => Item::Defined {
            name: name.clone(),
            description: format!("{}{}", entry.signature, function_note(entry, *redefined)),
        },
        Defined::Library(name) => Item::Message(format!("loaded {name}")),
    }
}
