//! Checker: form shapes, names, types and placement (host or device) of a cell; builds the
//! `TypedCell` codegen accepts.
//!
//! Every error in the cell is collected (at most `MAX_ERRORS`) and reported in source order.
//! The typed tree is plain data; LLVM is asked only about intrinsic declarations (`intrinsics`).
//!
//! A folder by concern: `env` (what the session holds), `cell` (the checker of one cell, and
//! re-checking after a redefinition), `collect` (its first pass: declarations), `body` (function
//! bodies and statements), `expr`, `call`, `asm` (expressions), `gpu` (placement and the GPU
//! forms), `brilisp` (`define-brilisp` bodies); `context` holds what they share (the checkers'
//! state, the limits, the helpers). This file holds the entry point.

mod asm;
mod body;
mod brilisp;
mod caiman;
mod call;
mod cell;
mod collect;
mod context;
mod env;
mod expr;
mod gpu;
mod warp;

use std::collections::{BTreeSet, HashMap};

use crate::diagnostics::Diagnostic;
use crate::jit::library::Libraries;
use crate::reader::Sexp;
use crate::tree::{CellId, TypedCell};
use context::{CellChecker, Overlay, MAX_ERRORS};

pub(crate) use context::MAX_SHARED_BYTES;

pub(crate) use env::{defined, Env, FunctionEntry, FunctionKind};
pub(crate) use gpu::{device_members, device_problem};

/// Every form, opcode, cast and type name of the language, for completion.
pub(crate) const FORM_NAMES: &[&str] = &[
    "define",
    "define-inline",
    "define-brilisp",
    "define-inline-brilisp",
    "define-struct",
    "define-global",
    "define-kernel",
    "define-shared",
    "declare",
    "declare-global",
    "c-lisp",
    "cuda-lisp",
    "brilisp",
    "define-string",
    "string-ref",
    "if",
    "while",
    "for",
    "ret",
    "break",
    "continue",
    "set",
    "call",
    "asm",
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "udiv",
    "urem",
    "shl",
    "lshr",
    "ashr",
    "xor",
    "and",
    "or",
    "not",
    "fadd",
    "fsub",
    "fmul",
    "fdiv",
    "fneg",
    "eq",
    "ne",
    "lt",
    "gt",
    "le",
    "ge",
    "ult",
    "ugt",
    "ule",
    "uge",
    "feq",
    "fne",
    "flt",
    "fgt",
    "fle",
    "fge",
    "select",
    "load",
    "store",
    "ptradd",
    "sptradd",
    "aptradd",
    "ptr-to",
    "fn-ptr",
    "alloc",
    "extractvalue",
    "insertvalue",
    "sext",
    "zext",
    "trunc",
    "fpext",
    "fptrunc",
    "sitofp",
    "uitofp",
    "fptosi",
    "fptoui",
    "ptrtoint",
    "inttoptr",
    "bitcast",
    "addrspacecast",
    "bool",
    "int8",
    "int16",
    "int",
    "int32",
    "int64",
    "float",
    "double",
    "void",
    "ptr",
    "arr",
    "struct",
    "addrspace",
    "const",
    "label",
    "jmp",
    "br",
    "nop",
    "id",
    "gpu-buf",
    "gpu-alloc",
    "gpu-free",
    "gpu-len",
    "gpu-copy",
    "launch",
    "encode-begin",
    "encode-copy",
    "encode-call",
    "submit",
    "await",
    "fence-done",
    "host-alloc",
    "encoder",
    "fence",
    "lane-id",
    "warp-size",
    "shfl-sync",
    "shfl-up-sync",
    "shfl-down-sync",
    "shfl-xor-sync",
    "ballot-sync",
    "all-sync",
    "any-sync",
    "syncwarp",
    "atomic-add",
    "atomic-min",
    "atomic-max",
    "atomic-exch",
    "atomic-cas",
    "grid",
    "block",
    "in",
    "out",
    "inout",
    "handle",
    "tid.x",
    "tid.y",
    "tid.z",
    "bid.x",
    "bid.y",
    "bid.z",
    "bdim.x",
    "bdim.y",
    "bdim.z",
    "gdim.x",
    "gdim.y",
    "gdim.z",
    "syncthreads",
    "__syncthreads",
];

// ---------------------------------------------------------------------------------------------
// Cell checking.

/// Checks a cell's top-level forms against the session environment.
pub(crate) fn check(
    env: &Env,
    forms: &[Sexp],
    symbols: &Libraries,
    cell: CellId,
) -> Result<TypedCell, Vec<Diagnostic>> {
    let mut checker = CellChecker {
        env,
        symbols,
        errors: Vec::new(),
        cell: TypedCell::empty(),
        overlay: Overlay::default(),
        inline_used: BTreeSet::new(),
        intrinsics: HashMap::new(),
    };
    let mut flat = Vec::new();
    checker.flatten(forms, &mut flat);
    checker.collect_declarations(&flat);
    checker.check_bodies(&flat, &cell.symbol());
    checker.settle_placement();
    checker.recheck_dependents(&cell.label());
    checker.settle_placement();
    checker.placement_errors();
    checker.collect_inline_bodies();
    if checker.errors.is_empty() {
        Ok(checker.cell)
    } else {
        let mut errors = checker.errors;
        errors.sort_by_key(Diagnostic::sort_key);
        errors.truncate(MAX_ERRORS);
        Err(errors)
    }
}
