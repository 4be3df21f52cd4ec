//! Function bodies: the `BodyChecker` (locals, scopes, nesting, placement) and the statement
//! forms. Expressions are in `expr`, calls in `call`, GPU forms in `gpu`, inline assembly in `asm`:
//! each adds an `impl BodyChecker` block of its own.

use std::collections::HashMap;

use super::context::{arity, cast_note, global_memory_pointer, syntax, type_error, BodyChecker, MAX_LOCAL_BYTES};
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::{Sexp, Span};
use crate::tree::{Expr, ExprKind, Local, Place, Stmt, MAX_NESTING};
use crate::types::Ty;

impl<'c, 'a> BodyChecker<'c, 'a> {
    pub fn error(&mut self, diagnostic: Diagnostic) {
        self.cell.error(diagnostic);
    }

    pub fn declare_local(&mut self, name: &str, ty: Ty, span: Span) -> Option<usize> {
        let scope = self.scopes.last_mut().expect("a body always has its outermost scope");
        if scope.contains_key(name) {
            self.cell.error(
                Diagnostic::error(Kind::DuplicateName, format!("`{name}` is already declared in this scope"))
                    .with_label(span, "")
                    .with_note("an inner block may shadow it: wrap the code in a compound statement ((…))"),
            );
            return None;
        }
        let index = self.locals.len();
        self.locals.push(Local { name: name.to_string(), ty });
        scope.insert(name.to_string(), index);
        Some(index)
    }

    /// Finds a variable: locals from the innermost scope outwards, then globals.
    pub fn lookup_variable(&mut self, name: &str) -> Option<(Place, Ty)> {
        for scope in self.scopes.iter().rev() {
            if let Some(&index) = scope.get(name) {
                return Some((Place::Local(index), self.locals[index].ty.clone()));
            }
        }
        let global = self.cell.lookup_global(name)?.ty.clone();
        self.uses.insert(format!("global:{name}"));
        Some((Place::Global(name.to_string()), global))
    }

    pub(super) fn variable(&mut self, name: &str, span: Span) -> Option<(Place, Ty)> {
        let found = self.lookup_variable(name);
        // One report per unknown name and body is enough.
        if found.is_none() && self.reported_unknown.insert(name.to_string()) {
            let mut error =
                Diagnostic::error(Kind::UnknownName, format!("no variable named `{name}`")).with_label(span, "");
            if self.cell.lookup_function(name).is_some() {
                error = error.with_note(format!("`{name}` is a function: call it with (call {name} …)"));
            } else {
                let locals = self.scopes.iter().flat_map(|scope| scope.keys()).map(String::as_str);
                let globals: Vec<String> = self.cell.global_names();
                let known: Vec<&str> = locals.chain(globals.iter().map(String::as_str)).collect();
                error = error.with_suggestion(name, known);
            }
            self.error(error);
        }
        found
    }

    pub(super) fn with_scope<T>(&mut self, body: impl FnOnce(&mut Self) -> T) -> T {
        self.scopes.push(HashMap::new());
        let result = body(self);
        self.scopes.pop();
        result
    }

    /// Brilisp assignment: `name` at `ty` names the same variable as before when the type is
    /// the same, and a new one otherwise. Brilisp bodies have one scope.
    pub fn bind_variable(&mut self, name: &str, ty: Ty) -> usize {
        if let Some(&index) = self.scopes.first().and_then(|scope| scope.get(name)) {
            if self.locals.get(index).is_some_and(|local| local.ty == ty) {
                return index;
            }
        }
        let index = self.locals.len();
        self.locals.push(Local { name: name.to_string(), ty });
        if let Some(scope) = self.scopes.first_mut() {
            scope.insert(name.to_string(), index);
        }
        index
    }

    /// The field types of a struct (empty for an opaque or unknown one).
    pub fn struct_fields(&mut self, name: &str) -> Vec<Ty> {
        self.uses.insert(format!("struct:{name}"));
        self.cell
            .lookup_struct(name)
            .and_then(|entry| entry.fields.as_ref())
            .map(|fields| fields.iter().map(|(_, ty)| ty.clone()).collect())
            .unwrap_or_default()
    }

    pub fn ty(&mut self, form: &Sexp) -> Option<Ty> {
        let ty = self.cell.parse_ty(form)?;
        if let Ty::Struct(name) = &ty {
            self.uses.insert(format!("struct:{name}"));
        }
        Some(ty)
    }

    /// The statements of a block (function body, loop body), sharing the current scope.
    pub fn check_block_items(&mut self, items: &[Sexp]) -> Vec<Stmt> {
        items.iter().filter_map(|item| self.check_stmt(item)).collect()
    }

    pub fn check_stmt(&mut self, form: &Sexp) -> Option<Stmt> {
        self.nested(form, |this| this.check_stmt_here(form))
    }

    /// Runs `check` one nesting level deeper, or reports that the form nests too deeply.
    pub(super) fn nested<T>(&mut self, form: &Sexp, check: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        if self.nesting >= MAX_NESTING {
            if !std::mem::replace(&mut self.reported_nesting, true) {
                self.error(
                    Diagnostic::error(Kind::Limit, format!("this form nests more than {MAX_NESTING} levels deep"))
                        .with_label(form.span, "")
                        .with_note("compute parts into variables first"),
                );
            }
            return None;
        }
        self.nesting += 1;
        let result = check(self);
        self.nesting -= 1;
        result
    }

    fn check_stmt_here(&mut self, form: &Sexp) -> Option<Stmt> {
        match form.list() {
            Some([]) => return Some(Stmt::Block(Vec::new())),
            Some(items @ [first, ..]) if first.list().is_some() => {
                return Some(Stmt::Block(self.with_scope(|this| this.check_block_items(items))));
            }
            _ => {}
        }
        let items = form.list().unwrap_or(&[]);
        match form.head() {
            Some("declare") => self.check_declare(form, items, false),
            Some("declare-global") => self.check_declare(form, items, true),
            Some("if") => self.check_if(form, items),
            Some("while") => {
                let Some(cond_form) = items.get(1) else {
                    self.error(syntax(form.span, "a loop is `(while COND STATEMENT…)`"));
                    return None;
                };
                let cond = self.check_condition("while", cond_form);
                self.loop_depth += 1;
                let body = self.with_scope(|this| this.check_block_items(&items[2..]));
                self.loop_depth -= 1;
                Some(Stmt::While(cond?, body))
            }
            Some("for") => self.check_for(form, items),
            Some("ret") => self.check_ret(form, items),
            Some(word @ ("break" | "continue")) => {
                if items.len() != 1 {
                    self.error(arity(form.span, format!("`{word}` takes no operands")));
                    return None;
                }
                if self.loop_depth == 0 {
                    self.error(syntax(form.span, format!("`{word}` is only allowed inside a loop")));
                    return None;
                }
                Some(if word == "break" { Stmt::Break } else { Stmt::Continue })
            }
            _ => self.check_expr(form).map(Stmt::Expr),
        }
    }

    fn check_declare(&mut self, form: &Sexp, items: &[Sexp], global_pointer: bool) -> Option<Stmt> {
        let (Some(name), 3) = (items.get(1).and_then(Sexp::symbol), items.len()) else {
            self.error(syntax(form.span, "a declaration is `(declare NAME TYPE)`"));
            return None;
        };
        let mut ty = self.ty(&items[2])?;
        if global_pointer {
            // cuda-lisp's `declare-global`: a local holding a pointer into global memory.
            ty = global_memory_pointer(ty, items[2].span).map_err(|error| self.error(error)).ok()?;
        }
        if !ty.is_value() {
            self.error(type_error(items[2].span, "a variable cannot be `void`"));
            return None;
        }
        if !self.cell.require_sized(&ty, items[2].span, "a variable")
            || !self.cell.require_size(&ty, items[2].span, "a local variable", MAX_LOCAL_BYTES)
        {
            return None;
        }
        self.declare_local(name, ty, items[1].span).map(Stmt::Declare)
    }

    /// The condition of `statement` (`if`, `while`, `for`): a `bool`, C-Lisp has no truthiness.
    fn check_condition(&mut self, statement: &str, form: &Sexp) -> Option<Expr> {
        let cond = self.check_expr(form)?;
        if cond.ty != Ty::Bool {
            let hint = if cond.ty.is_ptr() {
                "compare explicitly, e.g. (ne p (inttoptr 0 (ptr T)))"
            } else {
                "compare explicitly, e.g. (ne x 0); write #t for an endless loop"
            };
            self.error(
                type_error(form.span, format!("the condition of `{statement}` must be `bool`, found `{}`", cond.ty))
                    .with_note(hint),
            );
            return None;
        }
        Some(cond)
    }

    fn check_if(&mut self, form: &Sexp, items: &[Sexp]) -> Option<Stmt> {
        if !(3..=4).contains(&items.len()) {
            self.error(
                arity(form.span, "`if` is `(if COND THEN [ELSE])`, one statement per branch")
                    .with_note("several statements need a compound: (if c ((call f) (call g)))"),
            );
            return None;
        }
        let cond = self.check_condition("if", &items[1]);
        let then = self.with_scope(|this| this.check_stmt(&items[2]));
        let otherwise = items.get(3).map(|form| self.with_scope(|this| this.check_stmt(form)));
        let otherwise = match otherwise {
            Some(None) => return None,
            Some(Some(stmt)) => Some(Box::new(stmt)),
            None => None,
        };
        Some(Stmt::If(cond?, Box::new(then?), otherwise))
    }

    fn check_for(&mut self, form: &Sexp, items: &[Sexp]) -> Option<Stmt> {
        let header = items.get(1).and_then(Sexp::list);
        let Some([init, cond, step]) = header else {
            self.error(
                syntax(
                    items.get(1).map_or(form.span, |header| header.span),
                    "a `for` header is `(INIT COND STEP)`: exactly three expressions",
                )
                .with_note("for example (for ((set i 0) (lt i n) (set i (add i 1))) …)"),
            );
            return None;
        };
        let optional = |this: &mut Self, form: &Sexp| -> Option<Option<Expr>> {
            if matches!(form.list(), Some([])) {
                Some(None)
            } else {
                this.check_expr(form).map(Some)
            }
        };
        let init = optional(self, init);
        let cond = self.check_condition("for", cond);
        let step = optional(self, step);
        self.loop_depth += 1;
        let body = self.with_scope(|this| this.check_block_items(&items[2..]));
        self.loop_depth -= 1;
        Some(Stmt::For(init?.map(Box::new), cond?, step?.map(Box::new), body))
    }

    pub fn check_ret(&mut self, form: &Sexp, items: &[Sexp]) -> Option<Stmt> {
        if self.top_level {
            self.error(syntax(form.span, "`ret` is only allowed inside a function"));
            return None;
        }
        match items {
            [_] => {
                if self.ret != Ty::Void {
                    let name = self.name.clone();
                    let ret = self.ret.clone();
                    self.warnings.push(
                        Diagnostic::warning(
                            Kind::Type,
                            format!("`(ret)` in `{name}`, which returns `{ret}`: it returns 0"),
                        )
                        .with_label(form.span, ""),
                    );
                    return Some(Stmt::Ret(Some(Expr { kind: ExprKind::Zero, ty: ret, span: form.span })));
                }
                Some(Stmt::Ret(None))
            }
            [_, value] => {
                let ret = self.ret.clone();
                let value = self.check_expr_expecting(value, &ret)?;
                if self.ret == Ty::Void {
                    self.error(type_error(
                        form.span,
                        format!("`{}` returns `void`, so `ret` takes no value", self.name),
                    ));
                    return None;
                }
                if value.ty != self.ret {
                    self.error(
                        type_error(value.span, format!("`{}` returns `{}`, found `{}`", self.name, self.ret, value.ty))
                            .with_note(cast_note(&value.ty, &self.ret)),
                    );
                    return None;
                }
                Some(Stmt::Ret(Some(value)))
            }
            _ => {
                self.error(arity(form.span, "`ret` takes at most one value"));
                None
            }
        }
    }
}

/// Statement forms (as opposed to expressions) at the top of a cell or in a body.
pub(super) fn is_statement_form(form: &Sexp) -> bool {
    match form.list() {
        Some([]) => true,
        Some([first, ..]) if first.list().is_some() => true,
        _ => matches!(
            form.head(),
            Some("declare" | "declare-global" | "if" | "while" | "for" | "ret" | "break" | "continue")
        ),
    }
}
