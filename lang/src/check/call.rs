//! Calls: session functions (through slots, inline or to themselves), C functions, libdevice and
//! LLVM intrinsics.

use super::context::{arity, cast_note, syntax, type_error, BodyChecker};
use super::env::{FunctionEntry, FunctionKind};
use crate::diagnostics::{Diagnostic, Kind};
use crate::intrinsics::{device_only_intrinsic, host_intrinsic, intrinsic_name, is_libdevice, IntrinsicError};
use crate::reader::{Sexp, Span};
use crate::tree::{CallExpr, Callee, Expr, ExprKind, FunctionAddress};
use crate::types::{Signature, Ty};

impl BodyChecker<'_, '_> {
    /// Reports a call or address of a function a redefinition invalidated; whether it was.
    fn invalidated(&mut self, entry: &FunctionEntry, name: &str, span: Span) -> bool {
        let Some(cause) = &entry.invalidated else { return false };
        self.error(type_error(
            span,
            format!("`{name}` was invalidated by the redefinition of {cause}; redefine `{name}`"),
        ));
        true
    }

    pub(super) fn check_call(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let Some((name_form, arg_forms)) = operands.split_first() else {
            self.error(arity(form.span, "`call` needs a function name: (call NAME ARG…)"));
            return None;
        };
        let Some(name) = name_form.symbol() else {
            self.error(syntax(name_form.span, "`call` takes a function name"));
            return None;
        };
        let args: Vec<Option<Expr>> = arg_forms.iter().map(|arg| self.check_expr(arg)).collect();
        let Some(entry) = self.cell.lookup_function(name).cloned() else {
            let mut error = Diagnostic::error(Kind::UnknownName, format!("no function named `{name}`"))
                .with_label(name_form.span, "");
            // A C function of the process is declared the C-Lisp way; anything else is a session
            // function that is not (or no longer, after a restart or `:reset`) defined.
            if self.cell.symbols.resolve(name).is_some() {
                let note = format!("`{name}` is a C function: declare it first, e.g. (define (({name} int) (x int)))");
                error = error.with_note(note);
            } else if let Some(near) =
                crate::diagnostics::nearest(name, self.cell.function_names().iter().map(String::as_str))
            {
                error = error.with_note(format!("did you mean `{near}`?"));
            } else {
                error = error.with_note("define it first: a session keeps only what was evaluated in it (a restart or `:reset` drops every definition)");
            }
            self.error(error);
            return None;
        };
        if self.invalidated(&entry, name, name_form.span) {
            return None;
        }
        if let FunctionKind::Defined(def) = &entry.kind {
            if def.kernel {
                self.error(
                    Diagnostic::error(Kind::Gpu, format!("`{name}` is a kernel: kernels are launched, not called"))
                        .with_label(form.span, "")
                        .with_note(format!("write (launch {name} (grid N) (block N) ARG…)")),
                );
                return None;
            }
            if def.placement.device_only && !self.use_device(form.span, format!("the device function `{name}`")) {
                return None;
            }
        }
        let args: Vec<Expr> = args.into_iter().collect::<Option<_>>()?;
        let signature = entry.signature.clone();
        let fixed = signature.params.len();
        if args.len() < fixed || (!signature.variadic && args.len() != fixed) {
            let expected = if signature.variadic { format!("at least {fixed}") } else { fixed.to_string() };
            self.error(
                arity(
                    form.span,
                    format!(
                        "`{name}` takes {expected} argument{}, found {}",
                        if fixed == 1 { "" } else { "s" },
                        args.len()
                    ),
                )
                .with_note(format!("{name} : {signature}")),
            );
            return None;
        }
        let mut ok = true;
        for (index, arg) in args.iter().enumerate() {
            match signature.params.get(index) {
                Some(param) if *param != arg.ty => {
                    let param_name = entry
                        .param_names
                        .get(index)
                        .filter(|param_name| !param_name.is_empty())
                        .map(|param_name| format!(" (`{param_name}`)"))
                        .unwrap_or_default();
                    let mut error = type_error(
                        arg.span,
                        format!("argument {} of `{name}`{param_name} must be `{param}`, found `{}`", index + 1, arg.ty),
                    );
                    if arg.ty.is_value() {
                        error = error.with_note(cast_note(&arg.ty, param));
                    }
                    self.error(error);
                    ok = false;
                }
                Some(_) => {}
                None => {
                    let allowed = matches!(arg.ty, Ty::Int(32) | Ty::Int(64) | Ty::Double | Ty::Ptr(..));
                    if !allowed {
                        let hint = match arg.ty {
                            Ty::Float => " (widen with (fpext x double))",
                            Ty::Int(_) => " (widen with (sext x int))",
                            Ty::Bool => " (widen with (zext x int))",
                            _ => "",
                        };
                        self.error(type_error(
                            arg.span,
                            format!(
                                "a variadic argument must be `int`, `int64`, `double` or a pointer, found `{}`{hint}",
                                arg.ty
                            ),
                        ));
                        ok = false;
                    }
                }
            }
        }
        if !ok {
            return None;
        }
        let callee = match &entry.kind {
            FunctionKind::Defined(def) if def.inline => {
                self.cell.inline_used.insert(name.to_string());
                Callee::Inline(name.to_string())
            }
            FunctionKind::Defined(_) if name == self.name => Callee::SelfCall,
            FunctionKind::Defined(_) | FunctionKind::Unresolved => Callee::Slot(name.to_string()),
            // A library's symbol is reached through the slot, which the session points at it.
            FunctionKind::Library { .. } => {
                if !self.use_host(form.span, format!("the C function `{name}`")) {
                    return None;
                }
                Callee::Slot(name.to_string())
            }
            FunctionKind::External(_) if name.starts_with("llvm.") => {
                Callee::Intrinsic(self.check_intrinsic_call(form, name, &signature, &args)?)
            }
            FunctionKind::External(link) if is_libdevice(name) => {
                if !self.use_device(form.span, format!("libdevice's `{name}`")) {
                    return None;
                }
                Callee::Direct(link.clone())
            }
            FunctionKind::External(link) => {
                if !self.use_host(form.span, format!("the C function `{name}`")) {
                    return None;
                }
                Callee::Direct(link.clone())
            }
        };
        if matches!(entry.kind, FunctionKind::Unresolved)
            && !self.use_host(form.span, format!("`{name}`, which nothing defines"))
        {
            return None;
        }
        self.uses.insert(format!("fn:{name}"));
        let ty = signature.ret.clone();
        let call = CallExpr { callee, name: name.to_string(), signature, args };
        Some(Expr { kind: ExprKind::Call(Box::new(call)), ty, span: form.span })
    }

    /// An intrinsic call: its LLVM name, after checking what LLVM requires of the call site.
    fn check_intrinsic_call(
        &mut self,
        form: &Sexp,
        name: &str,
        signature: &Signature,
        args: &[Expr],
    ) -> Option<String> {
        let link = intrinsic_name(name);
        let nvvm = link.starts_with("llvm.nvvm.");
        if nvvm {
            if !self.use_device(form.span, format!("the device intrinsic `{name}`")) {
                return None;
            }
        } else if device_only_intrinsic(name) {
            self.error(
                Diagnostic::error(
                    Kind::Gpu,
                    format!("`{name}` is an intrinsic of another target: Quasi compiles for x86-64 and NVPTX"),
                )
                .with_label(form.span, ""),
            );
            return None;
        }
        if !nvvm && !host_intrinsic(&link) {
            self.error(type_error(form.span, format!("`{name}` is not among the intrinsics Quasi compiles for the CPU")).with_note("host code may call the math, bit, overflow, memory and trap intrinsics; LLVM cannot lower the others everywhere"));
            return None;
        }
        let facts = match self.cell.intrinsic_facts(&link, signature) {
            Ok(facts) => facts,
            Err(error) => {
                self.error(intrinsic_error(name, &link, signature, error, form.span));
                return None;
            }
        };
        let mut ok = true;
        for index in facts.immediate {
            if let Some(arg) = args
                .get(index)
                .filter(|arg| !matches!(arg.kind, ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_)))
            {
                self.error(type_error(
                    arg.span,
                    format!("argument {} of `{name}` must be a literal: LLVM requires a constant there", index + 1),
                ));
                ok = false;
            }
        }
        ok.then_some(link)
    }
}

/// The diagnostic for an intrinsic declaration LLVM rejects.
pub(super) fn intrinsic_error(
    name: &str,
    link: &str,
    signature: &Signature,
    error: IntrinsicError,
    span: Span,
) -> Diagnostic {
    match error {
        IntrinsicError::Unknown => {
            Diagnostic::error(Kind::UnknownName, format!("LLVM has no intrinsic named `{name}`"))
                .with_label(span, "")
                .with_note("names starting with `llvm.` are LLVM intrinsics")
        }
        IntrinsicError::Signature { message, expected_name } => {
            let mut error = type_error(span, format!("the intrinsic `{name}` has no signature `{signature}`"))
                .with_note(format!("LLVM: {message}"));
            if let Some(expected) = expected_name.filter(|expected| expected != link) {
                error = error.with_note(format!("for these types LLVM names it `{expected}`"));
            }
            error
        }
    }
}

impl BodyChecker<'_, '_> {
    /// `(fn-ptr NAME)`: a function's address as a `(ptr int8)` that C can call (a callback).
    pub(super) fn check_fn_ptr(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [name_form] = operands else {
            self.error(arity(form.span, "`fn-ptr` is `(fn-ptr NAME)`"));
            return None;
        };
        let Some(name) = name_form.symbol() else {
            self.error(syntax(name_form.span, "`fn-ptr` takes a function name"));
            return None;
        };
        let Some(entry) = self.cell.lookup_function(name).cloned() else {
            self.error(
                Diagnostic::error(Kind::UnknownName, format!("no function named `{name}`"))
                    .with_label(name_form.span, "")
                    .with_note("define the function, or declare the C function, before taking its address"),
            );
            return None;
        };
        if self.invalidated(&entry, name, name_form.span) {
            return None;
        }
        let signature = entry.signature.clone();
        let address = match &entry.kind {
            FunctionKind::Defined(def) if def.inline => {
                self.error(
                    type_error(name_form.span, format!("`{name}` is an inline function: it has no address"))
                        .with_note("define it with `define` to pass it to C"),
                );
                return None;
            }
            FunctionKind::Defined(def) if def.kernel || def.placement.device_only => {
                let what = if def.kernel { "a kernel" } else { "device code" };
                self.error(
                    Diagnostic::error(
                        Kind::Gpu,
                        format!("`{name}` is {what}: the host cannot call it through a pointer"),
                    )
                    .with_label(name_form.span, ""),
                );
                return None;
            }
            FunctionKind::Defined(_) => {
                if signature.has_aggregates() {
                    self.error(
                        type_error(
                            name_form.span,
                            format!(
                                "C cannot call `{name} : {signature}`: it takes or returns a struct or array by value"
                            ),
                        )
                        .with_note("C-Lisp passes structs and arrays by value its own way; take and return pointers"),
                    );
                    return None;
                }
                FunctionAddress::Thunk { name: name.to_string(), signature: signature.clone() }
            }
            FunctionKind::External(_) if name.starts_with("llvm.") || is_libdevice(name) => {
                self.error(type_error(
                    name_form.span,
                    format!("`{name}` is an intrinsic of LLVM or libdevice: it has no address"),
                ));
                return None;
            }
            FunctionKind::External(link) => {
                FunctionAddress::Symbol { name: name.to_string(), link: link.clone(), signature: signature.clone() }
            }
            FunctionKind::Library { .. } => FunctionAddress::Slot(name.to_string()),
            FunctionKind::Unresolved => {
                self.error(
                    Diagnostic::error(Kind::UnknownName, format!("`{name}` is declared, but nothing defines it"))
                        .with_label(name_form.span, "")
                        .with_note("define it, or load the library that does with (load-library \"NAME\"), first"),
                );
                return None;
            }
        };
        if !self.use_host(form.span, format!("`(fn-ptr {name})`")) {
            return None;
        }
        self.uses.insert(format!("fn:{name}"));
        Some(Expr { kind: ExprKind::FunctionAddress(Box::new(address)), ty: Ty::ptr(Ty::Int(8)), span: form.span })
    }
}
