//! Runtime faults as diagnostics: a check that failed in compiled code at its fault site, a
//! signal, an exit, an interrupt — each worded with the function it happened in and a caret.

use super::Session;
use crate::abi::FaultCode;
use crate::diagnostics::{Diagnostic, Kind};
use crate::run::{self, Fault};
use crate::source::Span;

impl Session {
    /// The diagnostic for a fault while `item_span`'s code ran.
    pub(super) fn fault_diagnostic(&self, fault: &Fault, item_span: Span) -> Diagnostic {
        let note = "the session is intact; all definitions and globals are kept";
        // The host side of a GPU copy faulted: the program's pointer was wild.
        let copy = match fault {
            Fault::Signal { signal: libc::SIGSEGV, address, raised: false, .. } => Some(*address),
            _ => None,
        };
        if let Some(message) = self.gpu.runtime.faulted_copy(copy) {
            return Diagnostic::error(Kind::RuntimeFault, message).with_label(item_span, "").with_note(note);
        }
        match fault {
            Fault::Check { code, site } => {
                let site = self.program.fault_site(*site);
                // A failed host GPU form: the runtime kept why.
                let gpu_error = (*code == Some(FaultCode::Gpu)).then(|| self.gpu.runtime.take_error()).flatten();
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
                        gpu_error.as_ref().map_or_else(|| "the GPU runtime failed".into(), |error| error.message.clone()),
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
                // The simulator names the access or barrier in the kernel's source.
                if let Some(site) = gpu_error.as_ref().and_then(|error| error.site) {
                    diagnostic = diagnostic.with_secondary(site, "here in the kernel");
                }
                if let Some((site, label)) = gpu_error.as_ref().and_then(|error| error.also) {
                    diagnostic = diagnostic.with_secondary(site, label);
                }
                if gpu_error.as_ref().is_some_and(|error| error.unavailable) {
                    diagnostic = diagnostic
                        .with_note("kernels still compile without a device, and `:ptx NAME` shows their PTX")
                        .with_note(
                            "`:gpu sim` runs launches on the CPU, in the simulator (or start with QUASI_GPU=sim)",
                        );
                }
                diagnostic.with_note(note)
            }
            Fault::Signal { signal, address, pc, write, raised } => {
                // A host access that raced with a running submission (the simulator protects
                // the `host-alloc` memory submissions use).
                let conflict = (*signal == libc::SIGSEGV && !*raised)
                    .then(|| self.gpu.runtime.host_conflict(*address, *write))
                    .flatten();
                if let Some(message) = conflict {
                    let place = self
                        .program
                        .function_at(*pc)
                        .map_or_else(String::new, |name| format!(" (in {})", function_phrase(name)));
                    return Diagnostic::error(Kind::Gpu, format!("{message}{place}"))
                        .with_label(item_span, "")
                        .with_note(note);
                }
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

fn display_function(name: &str) -> String {
    if crate::tree::is_top_level_name(name) {
        "top-level code".into()
    } else {
        name.to_string()
    }
}
