//! Reports: how the session words what happened — runtime faults at their fault site, errors in
//! generated code traced to the unquote that generated it, and the one-line descriptions of
//! definitions that cells and `:defs` print.

use super::Session;
use crate::abi::FaultCode;
use crate::backend::BackendError;
use crate::check::{FunctionEntry, FunctionKind};
use crate::diagnostics::{Diagnostic, Kind};
use crate::expand::ExpansionSite;
use crate::run::{self, Fault};
use crate::source::Span;
use crate::tree::TypedCell;
use crate::types::StructEntry;

impl Session {
    /// The diagnostic for a fault while `item_span`'s code ran.
    pub(super) fn fault_diagnostic(&self, fault: &Fault, item_span: Span) -> Diagnostic {
        let note = "the session is intact; all definitions and globals are kept";
        match fault {
            Fault::Check { code, site } => {
                let site = self.program.fault_site(*site);
                let (kind, message, span) = match (code, site) {
                    (Some(FaultCode::DivideByZero), Some(site)) => (
                        Kind::RuntimeFault,
                        format!("integer division by zero in function `{}`", display_function(&site.function)),
                        site.span,
                    ),
                    (Some(FaultCode::DivideOverflow), Some(site)) => (
                        Kind::RuntimeFault,
                        format!("integer overflow in division in function `{}`", display_function(&site.function)),
                        site.span,
                    ),
                    (Some(FaultCode::Unresolved), Some(site)) => (
                        Kind::UnknownName,
                        format!(
                            "`{}` was called, but nothing defines it: no session function, library or process symbol",
                            site.function
                        ),
                        site.span,
                    ),
                    (Some(FaultCode::Invalidated), Some(site)) => (
                        Kind::Type,
                        format!(
                            "`{}` was invalidated by the redefinition of {}; redefine `{}`",
                            site.function, site.detail, site.function
                        ),
                        site.span,
                    ),
                    (Some(FaultCode::Gpu), Some(site)) => (
                        Kind::Gpu,
                        self.gpu.runtime.take_error().unwrap_or_else(|| "the GPU runtime failed".into()),
                        site.span,
                    ),
                    (Some(FaultCode::StalePointer), Some(site)) => (
                        Kind::RuntimeFault,
                        format!(
                            "`{}` was called through a pointer from (fn-ptr {}) made for its old type `{}`; it has another type now",
                            site.function, site.function, site.detail
                        ),
                        site.span,
                    ),
                    (Some(FaultCode::DeviceOnly), Some(site)) => (
                        Kind::Gpu,
                        format!("`{}` is device code now: host code compiled earlier cannot call it", site.function),
                        site.span,
                    ),
                    _ => (Kind::RuntimeFault, "a runtime check failed".to_string(), item_span),
                };
                let mut diagnostic = Diagnostic::error(kind, message).with_label(span, "");
                let stale = *code == Some(FaultCode::StalePointer);
                if (kind != Kind::RuntimeFault || stale) && span != item_span {
                    diagnostic = diagnostic.with_secondary(item_span, "while running this");
                }
                if kind == Kind::Gpu {
                    // The simulator names the access or barrier in the kernel's source.
                    if let Some(site) = self.gpu.runtime.take_error_site() {
                        diagnostic = diagnostic.with_secondary(site, "here in the kernel");
                    }
                }
                if kind == Kind::Gpu && diagnostic.message.starts_with("no CUDA device") {
                    diagnostic = diagnostic
                        .with_note("kernels still compile without a device, and `:ptx NAME` shows their PTX")
                        .with_note(
                            "`:gpu sim` runs launches on the CPU, in the simulator (or start with QUASI_GPU=sim)",
                        );
                }
                diagnostic.with_note(note)
            }
            Fault::Signal { signal, address, pc, write, raised } => {
                let place = self.program.function_at(*pc).map(|name| format!(" in {}", function_phrase(name)));
                let place = place.unwrap_or_default();
                let what = match *signal {
                    other if *raised && other != libc::SIGABRT => {
                        format!("the program raised signal {}", crate::guard::signal_name(other))
                    }
                    // First: a fiber's stack is often mapped just below the executor's, inside the
                    // looser window `run::is_stack_overflow` allows.
                    libc::SIGSEGV if self.gpu.runtime.simulated_stack_overflow(*address) => format!(
                        "stack overflow{place} in a simulated GPU thread (its stack is {} KiB; is the recursion unbounded?)",
                        crate::gpu::sim::THREAD_STACK >> 10
                    ),
                    libc::SIGSEGV if run::is_stack_overflow(*address) => format!(
                        "stack overflow{place} (compiled code's stack is 64 MiB; is the recursion unbounded?)"
                    ),
                    libc::SIGSEGV => {
                        let access = if *write { "write to" } else { "read of" };
                        format!("segmentation fault{place}: {access} address {address:#x}")
                    }
                    libc::SIGBUS => format!("bus error{place} at address {address:#x}"),
                    libc::SIGFPE => format!("arithmetic exception{place}"),
                    libc::SIGILL => format!("illegal instruction{place}"),
                    libc::SIGTRAP => format!("trap instruction{place} (SIGTRAP)"),
                    libc::SIGABRT => {
                        "the program aborted (SIGABRT; glibc does this when it finds the heap corrupted, e.g. a double free)"
                            .to_string()
                    }
                    other => format!("the program raised signal {}", crate::guard::signal_name(other)),
                };
                Diagnostic::error(Kind::RuntimeFault, what).with_label(item_span, "").with_note(note)
            }
            Fault::Exit { function, status } => {
                Diagnostic::error(Kind::RuntimeFault, format!("the program called {function}({status})"))
                    .with_label(item_span, "")
                    .with_note(note)
            }
            Fault::Abort => Diagnostic::error(Kind::RuntimeFault, "the program called abort()")
                .with_label(item_span, "")
                .with_note(note),
            Fault::Interrupted { pc } => {
                let place =
                    self.program.function_at(*pc).map(function_phrase).unwrap_or_else(|| "compiled code".into());
                Diagnostic::error(Kind::Interrupted, format!("interrupted in {place}"))
                    .with_label(item_span, "")
                    .with_note(note)
            }
            Fault::Lost => {
                Diagnostic::error(Kind::RuntimeFault, "the executor thread stopped").with_label(item_span, "")
            }
        }
    }
}

/// `function `f`` or `top-level code`, for messages.
fn function_phrase(name: &str) -> String {
    if name == crate::link::TOP_LEVEL {
        name.to_string()
    } else {
        format!("function `{name}`")
    }
}

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

fn display_function(name: &str) -> String {
    if name.starts_with("cell#") {
        "top-level code".into()
    } else {
        name.to_string()
    }
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
