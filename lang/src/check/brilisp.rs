//! Brilisp bodies (`define-brilisp`): flat instruction lists with labels, checked into the same
//! typed statements as C-Lisp bodies (plus `Label`, `Jump` and `Branch`).
//!
//! A Brilisp variable is a name and a type: `(set (x int) …)` after `(set (x float) …)` makes a
//! second variable, and later uses of `x` (in the text) mean the newest one, as llama.lisp's
//! `llvm.py` does. Operands are variable names or literals; anything else must be computed
//! into a variable first. Types are checked as in C-Lisp (docs/language.md §3.5).

use std::collections::HashMap;

use super::context::{cast_note, literal_of, syntax, type_error, BodyChecker};
use super::expr::cast_op;
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::{Sexp, SexpKind, Span};
use crate::tree::{Dialect, Expr, ExprKind, Place, Stmt};
use crate::types::Ty;

/// A checked Brilisp body.
pub(crate) struct BrilispBody {
    pub body: Vec<Stmt>,
    /// Label names, indexed by the statements' label numbers.
    pub labels: Vec<String>,
    /// Whether some reachable path runs off the end without `ret`.
    pub falls_through: bool,
}

/// Checks a Brilisp body.
pub(crate) fn check_body(checker: &mut BodyChecker<'_, '_>, items: &[Sexp]) -> BrilispBody {
    let labels = collect_labels(checker, items);
    let names: Vec<String> = labels.iter().map(|(name, _)| name.clone()).collect();
    let index: HashMap<String, usize> =
        names.iter().enumerate().map(|(position, name)| (name.clone(), position)).collect();
    let mut body = Vec::new();
    let mut dead = false;
    let mut next_label = 0;
    for item in items {
        if item.head() == Some("label") {
            // Labels were validated by `collect_labels`; a bad one was reported there.
            if let Some(position) = label_name(item).and_then(|name| index.get(name)) {
                if *position == next_label {
                    body.push(Stmt::Label(*position));
                    next_label += 1;
                    dead = false;
                }
            }
            continue;
        }
        // Code after a terminator up to the next label can never run: llama.lisp drops it.
        if dead {
            continue;
        }
        if let Some(stmt) = check_instruction(checker, item, &index) {
            dead = matches!(stmt, Stmt::Ret(_) | Stmt::Jump(_) | Stmt::Branch(..));
            body.push(stmt);
        }
    }
    let falls_through = falls_through(&body);
    BrilispBody { body, labels: names, falls_through }
}

fn label_name(form: &Sexp) -> Option<&str> {
    match form.list() {
        Some([_, name]) => name.symbol(),
        _ => None,
    }
}

/// First pass: every `(label L)`, so jumps may go forward. Returns names with their spans.
fn collect_labels(checker: &mut BodyChecker<'_, '_>, items: &[Sexp]) -> Vec<(String, Span)> {
    let mut labels: Vec<(String, Span)> = Vec::new();
    for item in items.iter().filter(|item| item.head() == Some("label")) {
        let Some(name) = label_name(item) else {
            checker.error(syntax(item.span, "a label is `(label NAME)`"));
            continue;
        };
        if let Some((_, first)) = labels.iter().find(|(existing, _)| existing == name) {
            let first = *first;
            checker.error(
                Diagnostic::error(Kind::DuplicateName, format!("label `{name}` appears twice in this body"))
                    .with_label(item.span, "")
                    .with_secondary(first, "first here"),
            );
            continue;
        }
        labels.push((name.to_string(), item.span));
    }
    labels
}

fn check_instruction(checker: &mut BodyChecker<'_, '_>, item: &Sexp, labels: &HashMap<String, usize>) -> Option<Stmt> {
    let Some(items) = item.list() else {
        checker.error(syntax(item.span, format!("`{item}` is not a Brilisp instruction")).with_note(
            "instructions are (set (NAME TYPE) …), (store P V), (ret [A]), (jmp L), (br C L1 L2), (label L), (nop)",
        ));
        return None;
    };
    match item.head() {
        Some("set") => check_set(checker, item, items),
        Some("store") => {
            operands_are_atoms(checker, &items[1..])?;
            checker.check_expr(item).map(Stmt::Expr)
        }
        Some("ret") => {
            operands_are_atoms(checker, &items[1..])?;
            checker.check_ret(item, items)
        }
        Some("jmp") => match items {
            [_, target] => Some(Stmt::Jump(label_target(checker, target, labels)?)),
            _ => {
                checker.error(Diagnostic::error(Kind::Arity, "a jump is `(jmp LABEL)`").with_label(item.span, ""));
                None
            }
        },
        Some("br") => check_branch(checker, item, items, labels),
        Some("nop") if items.len() == 1 => None,
        // A call whose result is not wanted may stand alone.
        Some("call") => {
            operands_are_atoms(checker, items.get(2..).unwrap_or(&[]))?;
            checker.check_expr(item).map(Stmt::Expr)
        }
        _ => {
            checker.error(syntax(item.span, format!("`{item}` is not a Brilisp instruction")).with_note(
                "instructions are (set (NAME TYPE) …), (store P V), (ret [A]), (jmp L), (br C L1 L2), (label L), (nop)",
            ));
            None
        }
    }
}

fn label_target(checker: &mut BodyChecker<'_, '_>, target: &Sexp, labels: &HashMap<String, usize>) -> Option<usize> {
    let found = target.symbol().and_then(|name| labels.get(name)).copied();
    if found.is_none() {
        checker.error(
            Diagnostic::error(Kind::UnknownName, format!("no label named `{target}` in this body"))
                .with_label(target.span, ""),
        );
    }
    found
}

fn check_branch(
    checker: &mut BodyChecker<'_, '_>,
    item: &Sexp,
    items: &[Sexp],
    labels: &HashMap<String, usize>,
) -> Option<Stmt> {
    let [_, cond_form, then_form, else_form] = items else {
        checker.error(
            Diagnostic::error(Kind::Arity, "a branch is `(br COND LABEL-IF-TRUE LABEL-IF-FALSE)`")
                .with_label(item.span, ""),
        );
        return None;
    };
    operands_are_atoms(checker, std::slice::from_ref(cond_form))?;
    let cond = checker.check_expr(cond_form);
    let then = label_target(checker, then_form, labels);
    let otherwise = label_target(checker, else_form, labels);
    let cond = cond?;
    if cond.ty != Ty::Bool {
        checker.error(type_error(cond_form.span, format!("the condition of `br` must be `bool`, found `{}`", cond.ty)));
        return None;
    }
    Some(Stmt::Branch(cond, then?, otherwise?))
}

/// Brilisp operands are names or literals; nested expressions are C-Lisp's, not Brilisp's.
fn operands_are_atoms(checker: &mut BodyChecker<'_, '_>, operands: &[Sexp]) -> Option<()> {
    let mut ok = true;
    for operand in operands {
        if matches!(operand.kind, SexpKind::List(_)) {
            checker.error(
                syntax(operand.span, "a Brilisp operand is a variable name or a literal")
                    .with_note("compute it into a variable first: (set (NAME TYPE) …)"),
            );
            ok = false;
        }
    }
    ok.then_some(())
}

/// `(set (NAME TYPE) VALUE)`.
fn check_set(checker: &mut BodyChecker<'_, '_>, item: &Sexp, items: &[Sexp]) -> Option<Stmt> {
    let shape = "a Brilisp assignment is `(set (NAME TYPE) VALUE)`";
    let [_, target, value_form] = items else {
        checker.error(syntax(item.span, shape));
        return None;
    };
    let (Some(name), Some(type_form)) = (
        target.list().and_then(|pair| pair.first()).and_then(Sexp::symbol),
        target.list().and_then(|pair| pair.get(1)),
    ) else {
        checker.error(
            syntax(target.span, shape)
                .with_note("C-Lisp's (set NAME VALUE) is not Brilisp: name the type of the destination"),
        );
        return None;
    };
    if target.list().map_or(0, <[Sexp]>::len) != 2 {
        checker.error(syntax(target.span, shape));
        return None;
    }
    let ty = checker.ty(type_form)?;
    if checker.dialect == Dialect::BrilispProgram && is_global(checker, name) {
        return check_global_set(checker, item, name, &ty, value_form);
    }
    let Some(value) = check_value(checker, value_form, &ty) else {
        // Later uses of the name should not add errors of their own.
        if ty != Ty::Void {
            checker.bind_variable(name, ty);
        }
        return None;
    };
    if ty == Ty::Void {
        // `(set (tmp void) (call f …))`: nothing is stored.
        return Some(Stmt::Expr(value));
    }
    if value.ty != ty {
        checker.error(
            type_error(value_form.span, format!("`{name}` is set as `{ty}`, but the value is `{}`", value.ty))
                .with_note(cast_note(&value.ty, &ty)),
        );
        // As above: the name is declared, so its later uses add no errors of their own.
        checker.bind_variable(name, ty);
        return None;
    }
    let local = checker.bind_variable(name, ty.clone());
    Some(Stmt::Expr(Expr { kind: ExprKind::Set(Place::Local(local), Box::new(value)), ty, span: item.span }))
}

/// Whether `name` is a global that no local variable hides.
fn is_global(checker: &mut BodyChecker<'_, '_>, name: &str) -> bool {
    matches!(checker.lookup_variable(name), Some((Place::Global(_), _)))
}

/// `(set (G T) VALUE)` with G a global, in a Brilisp program: llama.lisp's `llvm.py` stores
/// VALUE into the global (while G as an operand is its address), so T must be G's type.
fn check_global_set(
    checker: &mut BodyChecker<'_, '_>,
    item: &Sexp,
    name: &str,
    ty: &Ty,
    value_form: &Sexp,
) -> Option<Stmt> {
    let (place, global_ty) = checker.lookup_variable(name)?;
    let value = check_value(checker, value_form, ty)?;
    if *ty != global_ty || value.ty != global_ty {
        checker.error(
            type_error(item.span, format!("`{name}` is a global of type `{global_ty}`, set here as `{ty}`"))
                .with_note("in a Brilisp program, setting a global's name stores into the global"),
        );
        return None;
    }
    Some(Stmt::Expr(Expr { kind: ExprKind::Set(place, Box::new(value)), ty: global_ty, span: item.span }))
}

/// The right-hand side of a Brilisp assignment to a variable of type `ty`.
fn check_value(checker: &mut BodyChecker<'_, '_>, form: &Sexp, ty: &Ty) -> Option<Expr> {
    let Some(items) = form.list() else {
        // A bare operand is a copy, as `(id A)`.
        return checker.check_expr(form);
    };
    let operands = items.get(1..).unwrap_or(&[]);
    match form.head() {
        Some("const") => check_const(checker, form, operands, ty),
        Some("id") => match operands {
            [operand] => {
                operands_are_atoms(checker, operands)?;
                checker.check_expr(operand)
            }
            _ => {
                checker.error(Diagnostic::error(Kind::Arity, "`id` is `(id VARIABLE)`").with_label(form.span, ""));
                None
            }
        },
        Some("alloc") => check_alloc(checker, form, operands, ty),
        Some("ptradd") if operands.len() > 2 => check_gep_path(checker, form, operands),
        Some("asm") => {
            // The template and constraints are strings; the arguments are operands.
            operands_are_atoms(checker, operands.get(2..).unwrap_or(&[]))?;
            checker.check_expr_expecting(form, ty)
        }
        Some("call") => {
            operands_are_atoms(checker, operands.get(1..).unwrap_or(&[]))?;
            let call = checker.check_expr(form)?;
            // A call's result may be dropped by assigning it to a `void` destination.
            if *ty == Ty::Void {
                return Some(Expr { ty: Ty::Void, ..call });
            }
            Some(call)
        }
        Some("string-ref") if checker.dialect == Dialect::BrilispProgram => check_string_ref(checker, form, operands),
        Some(name) if checker.dialect == Dialect::BrilispProgram && cast_op(name).is_some() => {
            check_program_cast(checker, form, name, operands, ty)
        }
        Some(name) if cast_op(name).is_some() => {
            // The last operand of a cast is its type, which may be a list.
            operands_are_atoms(checker, operands.split_last().map_or(&[][..], |(_, rest)| rest))?;
            checker.check_expr(form)
        }
        _ => {
            operands_are_atoms(checker, operands)?;
            checker.check_expr(form)
        }
    }
}

/// `(string-ref NAME)` in a Brilisp program: the address of the string `NAME`, as `(ptr int8)`.
fn check_string_ref(checker: &mut BodyChecker<'_, '_>, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
    let [name_form] = operands else {
        checker.error(Diagnostic::error(Kind::Arity, "`string-ref` is `(string-ref NAME)`").with_label(form.span, ""));
        return None;
    };
    let name = name_form.symbol();
    let global = name.and_then(|name| checker.cell.lookup_global(name)).map(|entry| entry.ty.clone());
    let (Some(name), Some(Ty::Arr(_, element))) = (name, global) else {
        checker.error(
            Diagnostic::error(Kind::UnknownName, format!("no string named `{name_form}`"))
                .with_label(name_form.span, "")
                .with_note("strings are defined with (define-string NAME \"TEXT\")"),
        );
        return None;
    };
    if *element != Ty::Int(8) {
        checker.error(type_error(name_form.span, format!("`{name}` is not a string: its elements are `{element}`")));
        return None;
    }
    checker.uses.insert(format!("global:{name}"));
    Some(Expr { kind: ExprKind::AddressOf(Place::Global(name.to_string())), ty: Ty::ptr(Ty::Int(8)), span: form.span })
}

/// A cast in a Brilisp program converts to the destination's type, as llama.lisp's `llvm.py`
/// does: the type written after the operand is not read (its tests write `(bitcast p int8)`
/// for a `(ptr int8)` destination, and `(ptr (addrspace 3))`, which is no type).
fn check_program_cast(
    checker: &mut BodyChecker<'_, '_>,
    form: &Sexp,
    name: &str,
    operands: &[Sexp],
    ty: &Ty,
) -> Option<Expr> {
    let (Some(op), [value_form, _]) = (cast_op(name), operands) else {
        checker.error(
            Diagnostic::error(Kind::Arity, format!("a Brilisp cast is `({name} OPERAND TYPE)`"))
                .with_label(form.span, ""),
        );
        return None;
    };
    operands_are_atoms(checker, std::slice::from_ref(value_form))?;
    let value = checker.check_expr(value_form)?;
    checker.cast_to(form, name, op, value, ty.clone())
}

/// `(const V)`: V converted to the destination type as a typed literal (in a Brilisp program,
/// integers wrap to the destination's width); `true`/`false` are llama.lisp's spellings of
/// booleans.
fn check_const(checker: &mut BodyChecker<'_, '_>, form: &Sexp, operands: &[Sexp], ty: &Ty) -> Option<Expr> {
    let [literal] = operands else {
        checker.error(Diagnostic::error(Kind::Arity, "a constant is `(const LITERAL)`").with_label(form.span, ""));
        return None;
    };
    let literal = match literal.symbol() {
        Some(word @ ("true" | "false")) => Sexp { kind: SexpKind::Bool(word == "true"), span: literal.span },
        _ => literal.clone(),
    };
    match literal_of(checker.dialect, &literal, ty) {
        Ok(expr) => Some(expr),
        Err(error) => {
            checker.error(error);
            None
        }
    }
}

/// `(alloc COUNT)`: the element type comes from the destination, a pointer.
fn check_alloc(checker: &mut BodyChecker<'_, '_>, form: &Sexp, operands: &[Sexp], ty: &Ty) -> Option<Expr> {
    let [count_form] = operands else {
        checker.error(
            Diagnostic::error(Kind::Arity, "a Brilisp allocation is `(set (NAME (ptr TYPE)) (alloc COUNT))`")
                .with_label(form.span, ""),
        );
        return None;
    };
    operands_are_atoms(checker, operands)?;
    let count = checker.check_expr(count_form)?;
    let Ty::Ptr(element, _) = ty else {
        checker.error(type_error(form.span, format!("`alloc` needs a pointer destination, found `{ty}`")));
        return None;
    };
    if !element.is_value() {
        checker.error(type_error(form.span, "cannot allocate `void`"));
        return None;
    }
    if !count.ty.is_int() {
        checker.error(type_error(
            count_form.span,
            format!("the count of `alloc` must be an integer, found `{}`", count.ty),
        ));
        return None;
    }
    Some(Expr {
        kind: ExprKind::Alloc((**element).clone(), Box::new(count)),
        ty: Ty::ptr((**element).clone()),
        span: form.span,
    })
}

/// `(ptradd P I J…)`: a multi-index `gep`. The first index steps over whole pointees; each
/// later one selects an array element or, as a literal, a struct field.
fn check_gep_path(checker: &mut BodyChecker<'_, '_>, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
    operands_are_atoms(checker, operands)?;
    let (pointer_form, index_forms) = operands.split_first()?;
    let pointer = checker.check_expr(pointer_form)?;
    let Ty::Ptr(pointee, space) = &pointer.ty else {
        checker.error(type_error(pointer_form.span, format!("`ptradd` needs a pointer, found `{}`", pointer.ty)));
        return None;
    };
    let space = *space;
    let mut current: Ty = (**pointee).clone();
    let mut indices = Vec::with_capacity(index_forms.len());
    for (position, index_form) in index_forms.iter().enumerate() {
        if position > 0 {
            current = match &current {
                Ty::Arr(_, element) => (**element).clone(),
                Ty::Struct(name) => {
                    let SexpKind::Int(field) = index_form.kind else {
                        checker.error(type_error(
                            index_form.span,
                            format!("an index into `{current}` selects a field: it must be an integer literal"),
                        ));
                        return None;
                    };
                    let fields = checker.struct_fields(name);
                    let Some(field_ty) = usize::try_from(field).ok().and_then(|field| fields.get(field)).cloned()
                    else {
                        checker.error(type_error(
                            index_form.span,
                            format!("`{current}` has {} fields; index {field} is out of range", fields.len()),
                        ));
                        return None;
                    };
                    indices.push(Expr { kind: ExprKind::Int(field as i64), ty: Ty::Int(32), span: index_form.span });
                    current = field_ty;
                    continue;
                }
                other => {
                    checker.error(type_error(index_form.span, format!("cannot index into `{other}`")));
                    return None;
                }
            };
        }
        let index = checker.check_expr(index_form)?;
        if !index.ty.is_int() {
            checker.error(type_error(
                index_form.span,
                format!("an index of `ptradd` must be an integer, found `{}`", index.ty),
            ));
            return None;
        }
        indices.push(index);
    }
    Some(Expr {
        kind: ExprKind::GepPath(Box::new(pointer), indices),
        ty: Ty::Ptr(current.into(), space),
        span: form.span,
    })
}

/// Whether a reachable block runs off the end of the body. Blocks start at the entry and at
/// each label; a block without a terminator falls into the next.
fn falls_through(body: &[Stmt]) -> bool {
    // Split into blocks: block 0 is the entry, block k + 1 starts at label k.
    let mut blocks: Vec<Vec<&Stmt>> = vec![Vec::new()];
    for stmt in body {
        if matches!(stmt, Stmt::Label(_)) {
            blocks.push(Vec::new());
        } else if let Some(block) = blocks.last_mut() {
            block.push(stmt);
        }
    }
    let count = blocks.len();
    let mut reached = vec![false; count];
    let mut pending = vec![0];
    let mut off_the_end = false;
    while let Some(block) = pending.pop() {
        if std::mem::replace(&mut reached[block], true) {
            continue;
        }
        let successors: Vec<usize> = match blocks[block].last() {
            Some(Stmt::Ret(_)) => Vec::new(),
            Some(Stmt::Jump(label)) => vec![label + 1],
            Some(Stmt::Branch(_, then, otherwise)) => vec![then + 1, otherwise + 1],
            _ if block + 1 < count => vec![block + 1],
            _ => {
                off_the_end = true;
                Vec::new()
            }
        };
        pending.extend(successors.into_iter().filter(|next| *next < count));
    }
    off_the_end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ret() -> Stmt {
        Stmt::Ret(None)
    }

    #[test]
    fn reachability_of_the_end() {
        // (ret)
        assert!(!falls_through(&[ret()]));
        // nothing at all
        assert!(falls_through(&[]));
        // (jmp done) (label never) … (label done) (ret): the unreachable block is ignored.
        assert!(!falls_through(&[Stmt::Jump(1), Stmt::Label(0), Stmt::Label(1), ret()]));
        // (label loop) (jmp loop): an endless loop never reaches the end.
        assert!(!falls_through(&[Stmt::Label(0), Stmt::Jump(0)]));
        // (label a) (ret) (label b): nothing jumps to b, so the end is unreachable.
        assert!(!falls_through(&[Stmt::Label(0), ret(), Stmt::Label(1)]));
        // (jmp b) (label a) (ret) (label b): b runs off the end.
        assert!(falls_through(&[Stmt::Jump(1), Stmt::Label(0), ret(), Stmt::Label(1)]));
    }
}
