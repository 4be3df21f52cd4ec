//! Expressions: literals, variables, operators, casts, assignment, memory and aggregates.

use std::rc::Rc;

use super::context::{arity, cast_note, define_attributes, syntax, type_error, typed_literal, BodyChecker};
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::{Sexp, SexpKind};
use crate::tree::{AtomicOp, BinOp, CastOp, Dialect, Expr, ExprKind, FloatCmp, IntCmp, Place, WarpOp};
use crate::types::{scalar_type_name, Ty, INT, INT64};

impl BodyChecker<'_, '_> {
    pub fn check_expr(&mut self, form: &Sexp) -> Option<Expr> {
        self.nested(form, |this| this.check_expr_here(form))
    }

    fn check_expr_here(&mut self, form: &Sexp) -> Option<Expr> {
        let span = form.span;
        match &form.kind {
            SexpKind::Int(value) => {
                let ty = if i32::try_from(*value).is_ok() { INT } else { INT64 };
                match typed_literal(form, &ty) {
                    Ok(expr) => Some(expr),
                    Err(_) => {
                        self.error(type_error(span, format!("integer literal {value} does not fit in `int64`")));
                        None
                    }
                }
            }
            SexpKind::Float(_) => typed_literal(form, &Ty::Float).map_err(|error| self.error(error)).ok(),
            SexpKind::Bool(value) => Some(Expr { kind: ExprKind::Bool(*value), ty: Ty::Bool, span }),
            SexpKind::Str(bytes) => Some(Expr { kind: ExprKind::Str(bytes.clone()), ty: Ty::ptr(Ty::Int(8)), span }),
            SexpKind::Symbol(name) => {
                let (place, ty) = self.variable(name, span)?;
                if let (Dialect::BrilispProgram, Place::Global(global)) = (self.dialect, &place) {
                    // In a Brilisp program a global's name is its address, as in llama.lisp's
                    // `llvm.py`: read it with (load G), write it with (store G V).
                    let space = self.cell.lookup_global(global).map_or(0, |entry| entry.space);
                    return Some(Expr { kind: ExprKind::AddressOf(place), ty: Ty::Ptr(ty.into(), space), span });
                }
                Some(Expr { kind: ExprKind::Read(place), ty, span })
            }
            SexpKind::Keyword(name) => {
                self.error(syntax(span, format!("the keyword `#:{name}` is only allowed in Rhai call arguments")));
                None
            }
            SexpKind::Quasiquote(_) => {
                self.error(
                    syntax(span, "a backquote left in C-Lisp code")
                        .with_note("C-Lisp code is already quasiquoted; backquotes pass templates to Rhai"),
                );
                None
            }
            SexpKind::Unquote(_) | SexpKind::UnquoteSplicing(_) => {
                self.error(
                    Diagnostic::error(
                        Kind::Macro,
                        "unquotes need the Rhai staging support, which this build does not have yet",
                    )
                    .with_label(span, ""),
                );
                None
            }
            SexpKind::List(items) => self.check_list(form, items),
        }
    }

    fn check_list(&mut self, form: &Sexp, items: &[Sexp]) -> Option<Expr> {
        let span = form.span;
        let Some(head) = items.first() else {
            self.error(syntax(span, "`()` is a statement and has no value"));
            return None;
        };
        let Some(name) = head.symbol() else {
            if head.list().is_some() {
                self.error(syntax(span, "a compound statement has no value"));
            } else {
                self.error(syntax(head.span, format!("`{head}` cannot start a form")));
            }
            return None;
        };
        let operands = &items[1..];
        if let Some(op) = binary_op(name) {
            return self.check_binary(form, name, op, operands);
        }
        if let Some(ty) = scalar_type_name(name) {
            return self.check_typed_literal(form, name, ty, operands);
        }
        if let Some(op) = cast_op(name) {
            return self.check_cast(form, name, op, operands);
        }
        match name {
            "set" => self.check_set(form, operands),
            "not" | "fneg" => self.check_unary(form, name, operands),
            "select" => self.check_select(form, operands),
            "load" => self.check_load(form, operands),
            "store" => self.check_store(form, operands),
            "ptradd" => self.check_ptradd(form, operands),
            "sptradd" => self.check_sptradd(form, operands),
            "aptradd" => self.check_aptradd(form, operands),
            "ptr-to" => self.check_ptr_to(form, operands),
            "fn-ptr" => self.check_fn_ptr(form, operands),
            "alloc" => self.check_alloc(form, operands),
            "extractvalue" => self.check_extract(form, operands),
            "insertvalue" => self.check_insert(form, operands),
            "call" => self.check_call(form, operands),
            "asm" => self.check_asm(form, operands, None),
            "declare" | "declare-global" | "if" | "while" | "for" | "ret" | "break" | "continue" => {
                self.error(syntax(span, format!("`{name}` is a statement and has no value")));
                None
            }
            "ptr" | "arr" | "struct" | "void" | "gpu-buf" | "addrspace" | "encoder" | "fence" => {
                self.error(
                    syntax(span, format!("`{form}` is a type, not an expression")).with_note(
                        "types appear in declarations, casts and (alloc TYPE N); typed literals are (int64 5)",
                    ),
                );
                None
            }
            "quasiquote" | "unquote" | "unquote-splicing" => {
                self.error(
                    syntax(span, format!("`{name}` left in C-Lisp code"))
                        .with_note("C-Lisp code is already quasiquoted; backquotes pass templates to Rhai"),
                );
                None
            }
            "tid.x" | "tid.y" | "tid.z" | "bid.x" | "bid.y" | "bid.z" | "bdim.x" | "bdim.y" | "bdim.z" | "gdim.x"
            | "gdim.y" | "gdim.z" | "__syncthreads" | "syncthreads" => self.check_gpu_builtin(form, name, operands),
            "gpu-alloc" => self.check_gpu_alloc(form, operands),
            "gpu-free" | "gpu-len" => self.check_gpu_buffer_op(form, name, operands),
            "gpu-copy" => self.check_gpu_copy(form, operands),
            "launch" => self.check_launch(form, operands),
            "encode-begin" => self.check_encode_begin(form, operands),
            "encode-copy" => self.check_encode_copy(form, operands),
            "encode-call" => self.check_encode_call(form, operands),
            "submit" | "await" | "fence-done" => self.check_fence_form(form, name, operands),
            "host-alloc" => self.check_host_alloc(form, operands),
            _ if WarpOp::from_name(name).is_some() => self.check_warp(form, WarpOp::from_name(name)?, operands),
            _ if AtomicOp::from_name(name).is_some() => self.check_atomic(form, AtomicOp::from_name(name)?, operands),
            _ if name.starts_with("define-")
                && define_attributes(name).is_none()
                && !matches!(name, "define-struct" | "define-global" | "define-kernel" | "define-shared") =>
            {
                let note = if name == "define-string" {
                    "strings are defined inside a Brilisp program: (brilisp (define-string NAME \"TEXT\") …)"
                } else {
                    "definitions are define, define-inline, define-brilisp, define-inline-brilisp, define-struct, define-global"
                };
                self.error(syntax(head.span, format!("`{name}` is not a definition form")).with_note(note));
                None
            }
            _ if define_attributes(name).is_some()
                || matches!(
                    name,
                    "define-struct"
                        | "define-global"
                        | "define-kernel"
                        | "define-shared"
                        | "c-lisp"
                        | "cuda-lisp"
                        | "brilisp"
                        | "load-library"
                ) =>
            {
                self.error(syntax(span, format!("`{name}` is only allowed at the top level of a cell")));
                None
            }
            _ => {
                let mut error =
                    Diagnostic::error(Kind::UnknownName, format!("`{name}` is not a form, an opcode or a type"))
                        .with_label(head.span, "");
                if self.cell.lookup_function(name).is_some() {
                    error = error.with_note(format!("calls are written (call {name} …)"));
                } else {
                    error = error
                        .with_note("calls are written (call NAME ARG…)")
                        .with_suggestion(name, super::FORM_NAMES.iter().copied());
                }
                self.error(error);
                None
            }
        }
    }

    pub(super) fn operands(&mut self, form: &Sexp, name: &str, operands: &[Sexp], count: usize) -> Option<Vec<Expr>> {
        if operands.len() != count {
            let noun = if count == 1 { "operand" } else { "operands" };
            self.error(arity(form.span, format!("`{name}` takes {count} {noun}, found {}", operands.len())));
            // Still check the operands to report their errors too.
            for operand in operands {
                self.check_expr(operand);
            }
            return None;
        }
        let checked: Vec<Option<Expr>> = operands.iter().map(|operand| self.check_expr(operand)).collect();
        checked.into_iter().collect()
    }

    fn check_binary(&mut self, form: &Sexp, name: &str, op: BinOp, operands: &[Sexp]) -> Option<Expr> {
        let mut values = self.operands(form, name, operands, 2)?;
        let right = values.pop()?;
        let left = values.pop()?;
        let (lt, rt) = (&left.ty, &right.ty);
        let same = lt == rt;
        let result = match op {
            BinOp::And | BinOp::Or if same && (lt.is_int() || *lt == Ty::Bool) => Some(lt.clone()),
            BinOp::And | BinOp::Or => None,
            BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv if same && lt.is_float() => Some(lt.clone()),
            BinOp::FCmp(_) if same && lt.is_float() => Some(Ty::Bool),
            BinOp::ICmp(IntCmp::Eq | IntCmp::Ne) if same && (lt.is_int() || *lt == Ty::Bool || lt.is_ptr()) => {
                Some(Ty::Bool)
            }
            BinOp::ICmp(IntCmp::Ult | IntCmp::Ugt | IntCmp::Ule | IntCmp::Uge) if same && lt.is_int() => Some(Ty::Bool),
            BinOp::ICmp(IntCmp::Slt | IntCmp::Sgt | IntCmp::Sle | IntCmp::Sge)
                if same && (lt.is_int() || lt.is_ptr()) =>
            {
                Some(Ty::Bool)
            }
            BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FCmp(_) | BinOp::ICmp(_) => None,
            _ if same && lt.is_int() => Some(lt.clone()),
            _ => None,
        };
        let Some(ty) = result else {
            let wanted = match op {
                BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FCmp(_) => "one float type",
                BinOp::And | BinOp::Or => "one integer type, or be `bool`",
                BinOp::ICmp(IntCmp::Eq | IntCmp::Ne) => "one integer, bool or pointer type",
                BinOp::ICmp(IntCmp::Ult | IntCmp::Ugt | IntCmp::Ule | IntCmp::Uge) => "one integer type",
                BinOp::ICmp(_) => "one integer or pointer type",
                _ => "one integer type",
            };
            let mut error =
                type_error(form.span, format!("operands of `{name}` must have {wanted}, found `{lt}` and `{rt}`"));
            if lt.is_float()
                && rt.is_float()
                && !matches!(op, BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FCmp(_))
            {
                let float_name = match name {
                    "add" | "sub" | "mul" | "div" => format!("f{name}"),
                    "eq" | "ne" | "lt" | "gt" | "le" | "ge" => format!("f{name}"),
                    _ => String::new(),
                };
                if !float_name.is_empty() && same {
                    error = error.with_note(format!("for floats use `{float_name}`"));
                }
            } else if lt.is_int()
                && rt.is_int()
                && matches!(op, BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FCmp(_))
                && same
            {
                error = error.with_note(format!("for integers use `{}`", &name[1..]));
            } else if !same && lt.is_value() && rt.is_value() {
                error = error.with_note(cast_note(rt, lt));
            }
            self.error(error);
            return None;
        };
        Some(Expr { kind: ExprKind::Binary(op, Box::new(left), Box::new(right)), ty, span: form.span })
    }

    fn check_unary(&mut self, form: &Sexp, name: &str, operands: &[Sexp]) -> Option<Expr> {
        let value = self.operands(form, name, operands, 1)?.pop()?;
        let ty = value.ty.clone();
        let (ok, kind) = if name == "not" {
            (ty == Ty::Bool || ty.is_int(), ExprKind::Not(Box::new(value)))
        } else {
            (ty.is_float(), ExprKind::FNeg(Box::new(value)))
        };
        if !ok {
            let wanted = if name == "not" { "`bool` or an integer type" } else { "a float type" };
            self.error(type_error(form.span, format!("the operand of `{name}` must be {wanted}, found `{ty}`")));
            return None;
        }
        Some(Expr { kind, ty, span: form.span })
    }

    fn check_typed_literal(&mut self, form: &Sexp, name: &str, ty: Ty, operands: &[Sexp]) -> Option<Expr> {
        let [literal] = operands else {
            self.error(arity(form.span, format!("a typed literal is `({name} LITERAL)`")));
            return None;
        };
        if !matches!(literal.kind, SexpKind::Int(_) | SexpKind::Float(_) | SexpKind::Bool(_)) {
            self.error(
                type_error(literal.span, format!("`({name} …)` takes a literal, not an expression"))
                    .with_note("convert expressions with casts such as (sext e int64) or (sitofp e double)"),
            );
            return None;
        }
        match typed_literal(literal, &ty) {
            Ok(mut expr) => {
                expr.span = form.span;
                Some(expr)
            }
            Err(error) => {
                self.error(error);
                None
            }
        }
    }

    fn check_cast(&mut self, form: &Sexp, name: &str, op: CastOp, operands: &[Sexp]) -> Option<Expr> {
        let [value_form, type_form] = operands else {
            self.error(arity(form.span, format!("a cast is `({name} EXPR TYPE)`")));
            return None;
        };
        let value = self.check_expr(value_form);
        let target = self.ty(type_form)?;
        self.cast_to(form, name, op, value?, target)
    }

    /// `value` converted by the cast `op` (spelled `name`) to `target`, if the cast allows it.
    pub(super) fn cast_to(&mut self, form: &Sexp, name: &str, op: CastOp, value: Expr, target: Ty) -> Option<Expr> {
        let from = &value.ty;
        let ok = match op {
            CastOp::Sext | CastOp::Zext => from.is_int_or_bool() && target.is_int() && target.bits() >= from.bits(),
            CastOp::Trunc => from.is_int_or_bool() && target.is_int_or_bool() && target.bits() <= from.bits(),
            CastOp::FpExt => *from == Ty::Float && target == Ty::Double,
            CastOp::FpTrunc => *from == Ty::Double && target == Ty::Float,
            CastOp::SiToFp | CastOp::UiToFp => from.is_int() && target.is_float(),
            CastOp::FpToSi | CastOp::FpToUi => from.is_float() && target.is_int(),
            CastOp::PtrToInt => from.is_ptr() && target.is_int(),
            CastOp::IntToPtr => from.is_int() && target.is_ptr(),
            CastOp::Bitcast => match (from, &target) {
                (Ty::Ptr(_, a), Ty::Ptr(_, b)) => a == b,
                (from, to) => {
                    from.is_scalar()
                        && to.is_scalar()
                        && !from.is_ptr()
                        && !to.is_ptr()
                        && from.bits() == to.bits()
                        && *from != Ty::Bool
                }
            },
            CastOp::AddrSpaceCast => matches!((from, &target), (Ty::Ptr(_, a), Ty::Ptr(_, b)) if a != b),
        };
        if !ok {
            self.error(
                type_error(form.span, format!("`{name}` cannot convert `{from}` to `{target}`"))
                    .with_note(cast_rule(op)),
            );
            return None;
        }
        Some(Expr { kind: ExprKind::Cast(op, Box::new(value)), ty: target, span: form.span })
    }

    fn check_set(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [target, value_form] = operands else {
            self.error(arity(form.span, format!("`set` is `(set NAME EXPR)`, found {} operands", operands.len())));
            return None;
        };
        if let Some([name, type_form]) = target.list() {
            return self.check_typed_set(form, name, type_form, value_form);
        }
        let Some(name) = target.symbol() else {
            self.error(
                syntax(target.span, "`set` assigns to a variable name")
                    .with_note("store through pointers with (store PTR VALUE)"),
            );
            self.check_expr(value_form);
            return None;
        };
        let variable = self.variable(name, target.span);
        let value = match &variable {
            Some((_, ty)) => self.check_expr_expecting(value_form, &ty.clone())?,
            None => self.check_expr(value_form)?,
        };
        let (place, ty) = variable?;
        let value = self.assignable(name, &ty, value)?;
        Some(Expr { kind: ExprKind::Set(place, Box::new(value)), ty, span: form.span })
    }

    /// The value of `(set NAME E)` for a variable of type `ty`: equal types, or a pointer that
    /// differs only in address space, cast with a warning.
    fn assignable(&mut self, name: &str, ty: &Ty, value: Expr) -> Option<Expr> {
        match (ty, &value.ty) {
            (a, b) if a == b => Some(value),
            (Ty::Ptr(wanted, a), Ty::Ptr(found, b)) if wanted == found && a != b => {
                self.warnings.push(
                    Diagnostic::warning(
                        Kind::Type,
                        format!("`{name}` is `{ty}`; the assigned pointer is cast from address space {b} to {a}"),
                    )
                    .with_label(value.span, ""),
                );
                let span = value.span;
                Some(Expr { kind: ExprKind::Cast(CastOp::AddrSpaceCast, Box::new(value)), ty: ty.clone(), span })
            }
            _ => {
                self.error(
                    type_error(value.span, format!("`{name}` is `{ty}`, but the value is `{}`", value.ty))
                        .with_note(cast_note(&value.ty, ty)),
                );
                None
            }
        }
    }

    /// `(set (NAME TYPE) E)`, the Brilisp spelling llama.lisp also accepts in C-Lisp bodies
    /// (`(set (tmp void) (asm …))`): TYPE `void` evaluates E and keeps nothing; otherwise NAME
    /// is the visible variable of that type, or a new one in the current block.
    fn check_typed_set(&mut self, form: &Sexp, name_form: &Sexp, type_form: &Sexp, value_form: &Sexp) -> Option<Expr> {
        let Some(name) = name_form.symbol() else {
            self.error(syntax(name_form.span, "`set` assigns to a variable name"));
            return None;
        };
        let ty = self.ty(type_form)?;
        let value = self.check_expr_expecting(value_form, &ty)?;
        if ty == Ty::Void {
            return Some(Expr { ty: Ty::Void, ..value });
        }
        let place = match self.lookup_variable(name) {
            Some((place, existing)) if existing == ty => place,
            Some((Place::Local(index), existing))
                if self.scopes.last().is_some_and(|scope| scope.get(name) == Some(&index)) =>
            {
                self.error(
                    type_error(
                        name_form.span,
                        format!("`{name}` is already a `{existing}` in this block, not a `{ty}`"),
                    )
                    .with_note("use another name, or an inner block"),
                );
                return None;
            }
            _ => Place::Local(self.declare_local(name, ty.clone(), name_form.span)?),
        };
        let value = self.assignable(name, &ty, value)?;
        Some(Expr { kind: ExprKind::Set(place, Box::new(value)), ty, span: form.span })
    }

    /// Checks an expression whose context wants `expected`: only inline assembly written
    /// without its type (`(set x (asm "…" "=r"))`, as llama.lisp's tests do) takes it from there.
    pub fn check_expr_expecting(&mut self, form: &Sexp, expected: &Ty) -> Option<Expr> {
        match form.list() {
            Some([head, template, rest @ ..])
                if head.symbol() == Some("asm") && matches!(template.kind, SexpKind::Str(_)) =>
            {
                let operands: Vec<Sexp> = std::iter::once(template.clone()).chain(rest.iter().cloned()).collect();
                self.check_asm(form, &operands, Some(expected))
            }
            _ => self.check_expr(form),
        }
    }

    fn check_select(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let mut values = self.operands(form, "select", operands, 3)?;
        let otherwise = values.pop()?;
        let then = values.pop()?;
        let cond = values.pop()?;
        if cond.ty != Ty::Bool {
            self.error(type_error(cond.span, format!("the condition of `select` must be `bool`, found `{}`", cond.ty)));
            return None;
        }
        if then.ty != otherwise.ty || !then.ty.is_value() {
            self.error(type_error(
                form.span,
                format!("both values of `select` must have one type, found `{}` and `{}`", then.ty, otherwise.ty),
            ));
            return None;
        }
        let ty = then.ty.clone();
        Some(Expr { kind: ExprKind::Select(Box::new(cond), Box::new(then), Box::new(otherwise)), ty, span: form.span })
    }

    fn pointer_operand(&mut self, name: &str, value: &Expr) -> Option<Ty> {
        match &value.ty {
            Ty::Ptr(pointee, _) => Some((**pointee).clone()),
            other => {
                self.error(type_error(value.span, format!("`{name}` needs a pointer, found `{other}`")));
                None
            }
        }
    }

    fn check_load(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let pointer = self.operands(form, "load", operands, 1)?.pop()?;
        let ty = self.pointer_operand("load", &pointer)?;
        if !ty.is_value() {
            self.error(type_error(form.span, "cannot load through a `(ptr void)`"));
            return None;
        }
        if !self.cell.require_sized(&ty, form.span, "a loaded value") {
            return None;
        }
        Some(Expr { kind: ExprKind::Load(Box::new(pointer)), ty, span: form.span })
    }

    fn check_store(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let mut values = self.operands(form, "store", operands, 2)?;
        let value = values.pop()?;
        let pointer = values.pop()?;
        let ty = self.pointer_operand("store", &pointer)?;
        if ty != value.ty {
            self.error(
                type_error(
                    value.span,
                    format!("`store` through `{}` needs a value of type `{ty}`, found `{}`", pointer.ty, value.ty),
                )
                .with_note(cast_note(&value.ty, &ty)),
            );
            return None;
        }
        Some(Expr { kind: ExprKind::Store(Box::new(pointer), Box::new(value)), ty, span: form.span })
    }

    pub(super) fn check_index(&mut self, name: &str, index: &Expr) -> bool {
        if !index.ty.is_int() {
            let what = if matches!(
                name,
                "alloc" | "gpu-alloc" | "host-alloc" | "gpu-copy" | "encode-copy" | "in" | "out" | "inout"
            ) {
                "count"
            } else {
                "offset"
            };
            self.error(type_error(
                index.span,
                format!("the {what} of `{name}` must be an integer, found `{}`", index.ty),
            ));
            return false;
        }
        true
    }

    fn check_ptradd(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let mut values = self.operands(form, "ptradd", operands, 2)?;
        let index = values.pop()?;
        let pointer = values.pop()?;
        let pointee = self.pointer_operand("ptradd", &pointer)?;
        if !pointee.is_value() {
            self.error(type_error(pointer.span, "cannot offset a `(ptr void)`"));
            return None;
        }
        if !self.cell.require_sized(&pointee, pointer.span, "the pointee of `ptradd`") {
            return None;
        }
        if !self.check_index("ptradd", &index) {
            return None;
        }
        let ty = pointer.ty.clone();
        Some(Expr { kind: ExprKind::PtrAdd(Box::new(pointer), Box::new(index)), ty, span: form.span })
    }

    fn check_sptradd(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [pointer_form, field] = operands else {
            self.error(arity(form.span, "`sptradd` is `(sptradd POINTER FIELD)`"));
            return None;
        };
        let pointer = self.check_expr(pointer_form)?;
        let Ty::Ptr(pointee, space) = &pointer.ty else {
            self.error(type_error(
                pointer.span,
                format!("`sptradd` needs a pointer to a struct, found `{}`", pointer.ty),
            ));
            return None;
        };
        let Ty::Struct(struct_name) = &**pointee else {
            self.error(type_error(
                pointer.span,
                format!("`sptradd` needs a pointer to a struct, found `{}`", pointer.ty),
            ));
            return None;
        };
        // The fields of a struct a Brilisp program defines are named by their positions.
        let field_name = match &field.kind {
            SexpKind::Symbol(name) => name.to_string(),
            SexpKind::Int(position) => position.to_string(),
            _ => {
                self.error(syntax(field.span, "`sptradd` takes a field name"));
                return None;
            }
        };
        let fields = self.cell.lookup_struct(struct_name).and_then(|entry| entry.fields.clone());
        let Some(fields) = fields else {
            self.error(type_error(pointer.span, format!("struct `{struct_name}` is opaque: it has no fields")));
            return None;
        };
        let Some(index) = fields.iter().position(|(name, _)| *name == field_name) else {
            let names: Vec<&str> = fields.iter().map(|(name, _)| name.as_str()).collect();
            self.error(
                Diagnostic::error(Kind::UnknownName, format!("struct `{struct_name}` has no field `{field_name}`"))
                    .with_label(field.span, "")
                    .with_note(format!("its fields are: {}", names.join(", "))),
            );
            return None;
        };
        let ty = Ty::Ptr(Rc::new(fields[index].1.clone()), *space);
        self.uses.insert(format!("struct:{struct_name}"));
        Some(Expr { kind: ExprKind::FieldPtr(Box::new(pointer), index as u32), ty, span: form.span })
    }

    fn check_aptradd(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [array_form, index_form] = operands else {
            self.error(arity(form.span, format!("`aptradd` takes 2 operands, found {}", operands.len())));
            return None;
        };
        // An array variable is used by address; any other operand must be a pointer to an array.
        let array = match array_form.symbol().and_then(|name| self.lookup_variable(name)) {
            Some((place, ty @ Ty::Arr(..))) => {
                Expr { kind: ExprKind::AddressOf(place), ty: Ty::ptr(ty), span: array_form.span }
            }
            _ => self.check_expr(array_form)?,
        };
        let index = self.check_expr(index_form)?;
        let element = match &array.ty {
            Ty::Ptr(pointee, _) => match &**pointee {
                Ty::Arr(_, element) => Some((**element).clone()),
                _ => None,
            },
            _ => None,
        };
        let Some(element) = element else {
            self.error(type_error(
                array.span,
                format!("`aptradd` needs an array variable or a pointer to an array, found `{}`", array.ty),
            ));
            return None;
        };
        if !self.check_index("aptradd", &index) {
            return None;
        }
        Some(Expr { kind: ExprKind::ElemPtr(Box::new(array), Box::new(index)), ty: Ty::ptr(element), span: form.span })
    }

    fn check_ptr_to(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [target] = operands else {
            self.error(arity(form.span, "`ptr-to` is `(ptr-to NAME)`"));
            return None;
        };
        let Some(name) = target.symbol() else {
            self.error(syntax(target.span, "`ptr-to` takes a variable name"));
            return None;
        };
        let (place, ty) = self.variable(name, target.span)?;
        Some(Expr { kind: ExprKind::AddressOf(place), ty: Ty::ptr(ty), span: form.span })
    }

    fn check_alloc(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [type_form, count_form] = operands else {
            self.error(arity(form.span, "`alloc` is `(alloc TYPE COUNT)`"));
            return None;
        };
        let ty = self.ty(type_form)?;
        let count = self.check_expr(count_form)?;
        if !ty.is_value() {
            self.error(type_error(type_form.span, "cannot allocate `void`"));
            return None;
        }
        if !self.cell.require_sized(&ty, type_form.span, "an allocation") {
            return None;
        }
        if !self.check_index("alloc", &count) {
            return None;
        }
        let kind = if self.top_level {
            ExprKind::SessionAlloc(ty.clone(), Box::new(count))
        } else {
            ExprKind::Alloc(ty.clone(), Box::new(count))
        };
        Some(Expr { kind, ty: Ty::ptr(ty), span: form.span })
    }

    fn field_index(&mut self, form: &Sexp, aggregate: &Ty, index_form: &Sexp) -> Option<(u32, Ty)> {
        let op = form.head().unwrap_or("extractvalue");
        if !matches!(aggregate, Ty::Struct(_) | Ty::Arr(..)) {
            self.error(type_error(form.span, format!("`{op}` needs a struct or array value, found `{aggregate}`")));
            return None;
        }
        let SexpKind::Int(index) = index_form.kind else {
            self.error(
                type_error(
                    index_form.span,
                    format!("the index of `{op}` must be an integer literal, found `{index_form}`"),
                )
                .with_note("fields are numbered from 0; by name, use (sptradd POINTER FIELD)"),
            );
            return None;
        };
        let element = match aggregate {
            Ty::Struct(name) => {
                let fields = self.struct_fields(name);
                usize::try_from(index).ok().and_then(|index| fields.get(index).cloned())
            }
            Ty::Arr(length, element) => (index >= 0 && (index as u64) < *length).then(|| (**element).clone()),
            _ => None,
        };
        match element {
            Some(ty) => Some((index as u32, ty)),
            None => {
                self.error(type_error(index_form.span, format!("index {index} is out of range for `{aggregate}`")));
                None
            }
        }
    }

    fn check_extract(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [aggregate_form, index_form] = operands else {
            self.error(arity(form.span, "`extractvalue` is `(extractvalue VALUE INDEX)`"));
            return None;
        };
        let aggregate = self.check_expr(aggregate_form)?;
        let (index, ty) = self.field_index(form, &aggregate.ty.clone(), index_form)?;
        Some(Expr { kind: ExprKind::Extract(Box::new(aggregate), index), ty, span: form.span })
    }

    fn check_insert(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [aggregate_form, value_form, index_form] = operands else {
            self.error(arity(form.span, "`insertvalue` is `(insertvalue VALUE FIELD-VALUE INDEX)`"));
            return None;
        };
        let aggregate = self.check_expr(aggregate_form)?;
        let value = self.check_expr(value_form)?;
        let (index, field_ty) = self.field_index(form, &aggregate.ty.clone(), index_form)?;
        if value.ty != field_ty {
            self.error(
                type_error(
                    value.span,
                    format!("element {index} of `{}` is `{field_ty}`, found `{}`", aggregate.ty, value.ty),
                )
                .with_note(cast_note(&value.ty, &field_ty)),
            );
            return None;
        }
        let ty = aggregate.ty.clone();
        Some(Expr { kind: ExprKind::Insert(Box::new(aggregate), Box::new(value), index), ty, span: form.span })
    }
}

fn binary_op(name: &str) -> Option<BinOp> {
    Some(match name {
        "add" => BinOp::Add,
        "sub" => BinOp::Sub,
        "mul" => BinOp::Mul,
        "div" => BinOp::Div,
        "rem" => BinOp::Rem,
        "udiv" => BinOp::UDiv,
        "urem" => BinOp::URem,
        "shl" => BinOp::Shl,
        "lshr" => BinOp::LShr,
        "ashr" => BinOp::AShr,
        "xor" => BinOp::Xor,
        "and" => BinOp::And,
        "or" => BinOp::Or,
        "fadd" => BinOp::FAdd,
        "fsub" => BinOp::FSub,
        "fmul" => BinOp::FMul,
        "fdiv" => BinOp::FDiv,
        "eq" => BinOp::ICmp(IntCmp::Eq),
        "ne" => BinOp::ICmp(IntCmp::Ne),
        "lt" => BinOp::ICmp(IntCmp::Slt),
        "gt" => BinOp::ICmp(IntCmp::Sgt),
        "le" => BinOp::ICmp(IntCmp::Sle),
        "ge" => BinOp::ICmp(IntCmp::Sge),
        "ult" => BinOp::ICmp(IntCmp::Ult),
        "ugt" => BinOp::ICmp(IntCmp::Ugt),
        "ule" => BinOp::ICmp(IntCmp::Ule),
        "uge" => BinOp::ICmp(IntCmp::Uge),
        "feq" => BinOp::FCmp(FloatCmp::Oeq),
        "fne" => BinOp::FCmp(FloatCmp::One),
        "flt" => BinOp::FCmp(FloatCmp::Olt),
        "fgt" => BinOp::FCmp(FloatCmp::Ogt),
        "fle" => BinOp::FCmp(FloatCmp::Ole),
        "fge" => BinOp::FCmp(FloatCmp::Oge),
        _ => return None,
    })
}

pub(super) fn cast_op(name: &str) -> Option<CastOp> {
    Some(match name {
        "sext" => CastOp::Sext,
        "zext" => CastOp::Zext,
        "trunc" => CastOp::Trunc,
        "fpext" => CastOp::FpExt,
        "fptrunc" => CastOp::FpTrunc,
        "sitofp" => CastOp::SiToFp,
        "uitofp" => CastOp::UiToFp,
        "fptosi" => CastOp::FpToSi,
        "fptoui" => CastOp::FpToUi,
        "ptrtoint" => CastOp::PtrToInt,
        "inttoptr" => CastOp::IntToPtr,
        "bitcast" => CastOp::Bitcast,
        "addrspacecast" => CastOp::AddrSpaceCast,
        _ => return None,
    })
}

fn cast_rule(op: CastOp) -> &'static str {
    match op {
        CastOp::Sext | CastOp::Zext => "sext/zext widen an integer (or bool) to a wider or equal integer type",
        CastOp::Trunc => "trunc narrows an integer to a narrower or equal integer type (or bool)",
        CastOp::FpExt => "fpext converts float to double",
        CastOp::FpTrunc => "fptrunc converts double to float",
        CastOp::SiToFp | CastOp::UiToFp => "sitofp/uitofp convert an integer to float or double",
        CastOp::FpToSi | CastOp::FpToUi => "fptosi/fptoui convert float or double to an integer",
        CastOp::PtrToInt => "ptrtoint converts a pointer to an integer",
        CastOp::IntToPtr => "inttoptr converts an integer to a pointer",
        CastOp::Bitcast => "bitcast reinterprets a value of the same size: integer <-> float, or pointer <-> pointer in one address space",
        CastOp::AddrSpaceCast => "addrspacecast converts a pointer to another address space",
    }
}
