//! Call cells: a cell whose one item calls a session function with constants or globals as
//! arguments (`(call sq 7)`, `(call f g 1.5)`) runs through its signature's call trampoline
//! (`codegen::lower_trampoline`), made once per session, instead of a module of its own: no
//! codegen, emission or linking per cell. The trampoline behaves as the cell's one-item entry
//! would (the callee through its slot, `quasi#item_done`, the fault guard), so the cell's
//! output is the same; only `:time` shows that the compiling phases did not run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::backend::{Backend, BackendError, Emit, Target};
use crate::codegen::{self, block_words, is_trampoline_scalar};
use crate::diagnostics::Diagnostic;
use crate::link::Program;
use crate::timing::{Phase, PhaseTimes};
use crate::tree::{CallExpr, Callee, CastOp, ExprKind, Place, Stmt, TypedCell};
use crate::types::{Signature, Ty};

/// A call cell, resolved against the program: what its trampoline's block is filled with.
pub(super) struct CallCell {
    signature: Signature,
    /// The callee's slot.
    slot: usize,
    arguments: Vec<Argument>,
}

enum Argument {
    /// A literal's bits, as the parameter's type lays them out in a word.
    Constant(u64),
    /// The storage of a global, read when the call runs.
    Storage(usize),
}

/// The session's call trampolines, by signature. Each block is read by its trampoline only
/// while the executor runs it, one call at a time, and written by the session between calls.
#[derive(Default)]
pub(super) struct Trampolines {
    by_signature: HashMap<String, Trampoline>,
}

struct Trampoline {
    entry: usize,
    // Boxed: its address is a constant in the trampoline's code.
    block: Box<[AtomicU64]>,
}

/// The call cell `cell` is, if it is one: its only item is `(call f ARG…)` with `f` called
/// through its slot, not variadic, every parameter and the result a scalar (or no result), and
/// every argument a literal of its parameter's type (for a pointer, `(inttoptr N T)` of an
/// integer literal) or a read of a global of that type. The
/// cell defines and declares nothing. Anything else takes the compiling path.
pub(super) fn call_cell(cell: &TypedCell, program: &Program) -> Option<CallCell> {
    let defines_nothing = cell.structs.is_empty()
        && cell.globals.is_empty()
        && cell.externs.is_empty()
        && cell.functions.is_empty()
        && cell.recompiled.is_empty()
        && cell.invalidated.is_empty()
        && cell.inline_bodies.is_empty()
        && cell.asm_spans.is_empty();
    let [item] = cell.top.as_slice() else { return None };
    if !defines_nothing || !item.function.locals.is_empty() {
        return None;
    }
    let [Stmt::Expr(expr)] = item.function.body.as_slice() else { return None };
    let ExprKind::Call(call) = &expr.kind else { return None };
    let CallExpr { callee: Callee::Slot(name), signature, args, .. } = call.as_ref() else { return None };
    let scalar_result = signature.ret == Ty::Void || is_trampoline_scalar(&signature.ret);
    if signature.variadic || !scalar_result || args.len() != signature.params.len() {
        return None;
    }
    let mut arguments = Vec::with_capacity(args.len());
    for (arg, param) in args.iter().zip(&signature.params) {
        if arg.ty != *param || !is_trampoline_scalar(param) {
            return None;
        }
        let argument = match (&arg.kind, param) {
            (ExprKind::Int(value), Ty::Int(_)) => Argument::Constant(*value as u64),
            (ExprKind::Float(value), Ty::Float) => Argument::Constant(u64::from((*value as f32).to_bits())),
            (ExprKind::Float(value), Ty::Double) => Argument::Constant(value.to_bits()),
            (ExprKind::Bool(value), Ty::Bool) => Argument::Constant(u64::from(*value)),
            (ExprKind::Read(Place::Global(global)), _) => Argument::Storage(program.global_address(global)?),
            // An address: `(inttoptr N T)` of an integer literal (zero-extended, as LLVM does).
            (ExprKind::Cast(CastOp::IntToPtr, inner), Ty::Ptr(..)) => match (&inner.kind, &inner.ty) {
                (ExprKind::Int(value), Ty::Int(64)) => Argument::Constant(*value as u64),
                (ExprKind::Int(value), Ty::Int(bits)) => Argument::Constant(*value as u64 & ((1u64 << bits) - 1)),
                _ => return None,
            },
            _ => return None,
        };
        arguments.push(argument);
    }
    Some(CallCell { signature: signature.clone(), slot: program.slot_address(name)?, arguments })
}

impl Trampolines {
    /// The entry that runs `call`: its signature's trampoline, made and linked on first use
    /// (timed as codegen and link), with its block filled for this call.
    pub(super) fn entry(
        &mut self,
        call: &CallCell,
        backend: &Backend,
        program: &mut Program,
        level: u8,
        timing: &mut PhaseTimes,
    ) -> Result<usize, Vec<Diagnostic>> {
        let key = self.ensure(&call.signature, backend, program, level, timing)?;
        let trampoline = self.by_signature.get(&key).ok_or_else(|| vec![Diagnostic::internal("no trampoline")])?;
        let block = &trampoline.block;
        let count = call.arguments.len();
        let word = |index: usize| block.get(index).ok_or_else(|| vec![Diagnostic::internal("a short argument block")]);
        word(0)?.store(call.slot as u64, Ordering::Relaxed);
        for (index, argument) in call.arguments.iter().enumerate() {
            let constant = word(1 + count + index)?;
            let place = match argument {
                Argument::Constant(bits) => {
                    constant.store(*bits, Ordering::Relaxed);
                    constant.as_ptr() as u64
                }
                Argument::Storage(address) => *address as u64,
            };
            word(1 + index)?.store(place, Ordering::Relaxed);
        }
        Ok(trampoline.entry)
    }

    /// The key of `signature`'s trampoline, made and linked now if the session has none yet.
    pub(super) fn ensure(
        &mut self,
        signature: &Signature,
        backend: &Backend,
        program: &mut Program,
        level: u8,
        timing: &mut PhaseTimes,
    ) -> Result<String, Vec<Diagnostic>> {
        let key = signature.to_string();
        if !self.by_signature.contains_key(&key) {
            let symbol = format!("call#trampoline{}", self.by_signature.len());
            let trampoline = make_trampoline(&symbol, signature, backend, program, level, timing)?;
            self.by_signature.insert(key.clone(), trampoline);
        }
        Ok(key)
    }
}

/// Lowers, compiles and links the trampoline of `signature` under `symbol`, pinned for the
/// session.
fn make_trampoline(
    symbol: &str,
    signature: &Signature,
    backend: &Backend,
    program: &mut Program,
    level: u8,
    timing: &mut PhaseTimes,
) -> Result<Trampoline, Vec<Diagnostic>> {
    let block: Box<[AtomicU64]> = (0..block_words(signature)).map(|_| AtomicU64::new(0)).collect();
    let target = Target::Host(level);
    let internal = |error: BackendError| vec![Diagnostic::internal(error.to_string())];
    let target_data = backend.target_data(&target).map_err(internal)?;
    let lowered = timing.time(Phase::Codegen, || {
        codegen::lower_trampoline(
            &backend.context,
            &target_data,
            &backend.triple(&target),
            symbol,
            signature,
            block.as_ptr() as usize,
        )
    });
    let module = lowered.map_err(|error| vec![Diagnostic::internal(format!("code generation failed: {error}"))])?;
    let compiled = backend.compile(module, &target, Emit::Code).map_err(internal)?;
    let link_start = Instant::now();
    let entry = program.link_pinned(&compiled.code, symbol, symbol).map_err(|error| vec![error])?;
    // A trampoline's passes are part of making it, as its emission is: all in `link`.
    let optimise = compiled.optimise.unwrap_or_default();
    timing.add(Phase::Link, optimise + compiled.emit + link_start.elapsed());
    Ok(Trampoline { entry, block })
}
