//! Warp-level operations and atomics (docs/language.md §7.9): the warp operations are device
//! code (in top-level code, `error[gpu]`); the atomics are valid everywhere. Operand types are
//! checked with a caret at the operand.

use super::context::{arity, cast_note, type_error, BodyChecker};
use crate::reader::Sexp;
use crate::tree::{AtomicOp, Expr, ExprKind, WarpOp};
use crate::types::{Ty, INT};

/// The types a shuffle moves.
fn shuffled(ty: &Ty) -> bool {
    matches!(ty, Ty::Int(32) | Ty::Int(64) | Ty::Float | Ty::Double)
}

impl BodyChecker<'_, '_> {
    /// `(lane-id)`, `(shfl-sync MASK V LANE)`, `(ballot-sync MASK P)`, `(syncwarp [MASK])`…
    pub(super) fn check_warp(&mut self, form: &Sexp, op: WarpOp, operands: &[Sexp]) -> Option<Expr> {
        let name = op.name();
        let shape = match op {
            WarpOp::LaneId | WarpOp::WarpSize => format!("({name})"),
            WarpOp::Shfl => format!("({name} MASK V LANE)"),
            WarpOp::ShflUp | WarpOp::ShflDown => format!("({name} MASK V DELTA)"),
            WarpOp::ShflXor => format!("({name} MASK V LANE-MASK)"),
            WarpOp::Ballot | WarpOp::All | WarpOp::Any => format!("({name} MASK PREDICATE)"),
            WarpOp::SyncWarp => format!("({name} [MASK])"),
        };
        let wanted = match op {
            WarpOp::LaneId | WarpOp::WarpSize => 0..=0,
            WarpOp::SyncWarp => 0..=1,
            WarpOp::Ballot | WarpOp::All | WarpOp::Any => 2..=2,
            _ => 3..=3,
        };
        if !wanted.contains(&operands.len()) {
            self.error(arity(form.span, format!("`{name}` is `{shape}`")));
            for operand in operands {
                self.check_expr(operand);
            }
            return None;
        }
        let values: Vec<Option<Expr>> = operands.iter().map(|operand| self.check_expr(operand)).collect();
        if !self.use_device(form.span, format!("`({name})`")) {
            return None;
        }
        let values: Vec<Expr> = values.into_iter().collect::<Option<_>>()?;
        let mut ok = true;
        if let Some(mask) = values.first().filter(|_| op.is_collective()) {
            ok &= self.expect_type(mask, &INT, &format!("the MASK of `{name}`"), "bit i names lane i; -1 names all 32");
        }
        let ty = match op {
            WarpOp::LaneId | WarpOp::WarpSize | WarpOp::Ballot => INT,
            WarpOp::All | WarpOp::Any => Ty::Bool,
            WarpOp::SyncWarp => Ty::Void,
            WarpOp::Shfl | WarpOp::ShflUp | WarpOp::ShflDown | WarpOp::ShflXor => values[1].ty.clone(),
        };
        match op {
            WarpOp::Shfl | WarpOp::ShflUp | WarpOp::ShflDown | WarpOp::ShflXor => {
                if !shuffled(&values[1].ty) {
                    self.error(type_error(
                        values[1].span,
                        format!("`{name}` moves an int, int64, float or double, found `{}`", values[1].ty),
                    ));
                    ok = false;
                }
                ok &= self.expect_type(&values[2], &INT, &format!("the third operand of `{name}`"), "lanes are ints");
            }
            WarpOp::Ballot | WarpOp::All | WarpOp::Any => {
                ok &= self.expect_type(
                    &values[1],
                    &Ty::Bool,
                    &format!("the predicate of `{name}`"),
                    "compare to get a bool: (ne x 0)",
                );
            }
            _ => {}
        }
        ok.then_some(Expr { kind: ExprKind::Warp(op, values), ty, span: form.span })
    }

    /// `(atomic-add P V)`, `(atomic-min P V)`, `(atomic-max P V)`, `(atomic-exch P V)`,
    /// `(atomic-cas P EXPECTED NEW)`: the old value.
    pub(super) fn check_atomic(&mut self, form: &Sexp, op: AtomicOp, operands: &[Sexp]) -> Option<Expr> {
        let name = op.name();
        let count = if op == AtomicOp::Cas { 3 } else { 2 };
        let mut values = self.operands(form, name, operands, count)?;
        let pointer = values.remove(0);
        let Some(element) = pointer.ty.pointee().cloned() else {
            self.error(type_error(pointer.span, format!("`{name}` needs a pointer, found `{}`", pointer.ty)));
            return None;
        };
        let allowed = match op {
            AtomicOp::Add | AtomicOp::Exch => matches!(element, Ty::Int(32) | Ty::Int(64) | Ty::Float | Ty::Double),
            AtomicOp::Min | AtomicOp::Max | AtomicOp::Cas => matches!(element, Ty::Int(32) | Ty::Int(64)),
        };
        if !allowed {
            let which = if matches!(op, AtomicOp::Add | AtomicOp::Exch) {
                "int, int64, float or double"
            } else {
                "int or int64"
            };
            self.error(type_error(
                pointer.span,
                format!("`{name}` works on a pointer to {which}, found `{}`", pointer.ty),
            ));
            return None;
        }
        let mut ok = true;
        for value in &values {
            ok &= self.expect_type(
                value,
                &element,
                &format!("an operand of `{name}` on `{}`", pointer.ty),
                &cast_note(&value.ty, &element),
            );
        }
        if !ok {
            return None;
        }
        let mut operands = vec![pointer];
        operands.extend(values);
        Some(Expr { kind: ExprKind::Atomic(op, operands), ty: element, span: form.span })
    }

    /// Reports `value` unless it has type `wanted`.
    fn expect_type(&mut self, value: &Expr, wanted: &Ty, what: &str, note: &str) -> bool {
        if value.ty == *wanted {
            return true;
        }
        let mut diagnostic = type_error(value.span, format!("{what} must be `{wanted}`, found `{}`", value.ty));
        if !note.is_empty() {
            diagnostic = diagnostic.with_note(note.to_string());
        }
        self.error(diagnostic);
        false
    }
}
