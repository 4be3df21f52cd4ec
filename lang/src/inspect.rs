//! Inspect: listings of every stage of a definition — expanded forms, the typed tree, LLVM IR
//! before and after passes, x86-64 assembly or PTX — made by recompiling it in a scratch module that
//! is never linked, so inspecting changes nothing.

use std::collections::HashMap;

use crate::reader::{Sexp, SexpKind, SourceId, Span};
use crate::tree::{
    BinOp, CastOp, Expr, ExprKind, FloatCmp, FunctionAddress, FunctionDef, IntCmp, Launch, LaunchArgKind, Place, Stmt,
};
use crate::types::{StructEntry, Ty};

/// The stages a listing command can show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    Source,
    Expanded,
    Typed,
    Ir,
    OptimisedIr,
    Assembly,
    /// NVIDIA PTX of device code (`:ptx`); `:stages` of a kernel shows it for `Assembly`.
    Ptx,
}

impl Stage {
    pub const ALL: [Stage; 6] =
        [Stage::Source, Stage::Expanded, Stage::Typed, Stage::Ir, Stage::OptimisedIr, Stage::Assembly];

    pub fn title(self) -> &'static str {
        match self {
            Stage::Source => "source",
            Stage::Expanded => "expanded",
            Stage::Typed => "typed",
            Stage::Ir => "LLVM IR",
            Stage::OptimisedIr => "optimised LLVM IR",
            Stage::Assembly => "x86-64 assembly",
            Stage::Ptx => "PTX",
        }
    }
}

const NO_SPAN: Span = Span { source: SourceId(u32::MAX), start: 0, end: 0 };

fn symbol(text: impl Into<String>) -> Sexp {
    Sexp { kind: SexpKind::Symbol(text.into().into()), span: NO_SPAN }
}

fn list(items: Vec<Sexp>) -> Sexp {
    Sexp { kind: SexpKind::List(items), span: NO_SPAN }
}

/// `head:type` for an annotated node.
fn annotated(head: &str, ty: &Ty) -> Sexp {
    symbol(format!("{head}:{ty}"))
}

/// A function's typed tree as forms whose heads and leaves carry their types, e.g.
/// `(set:int y (add:int x:int 1:int))`, laid out by the same pretty printer as `:expand`.
pub(crate) fn typed_tree(function: &FunctionDef, structs: &HashMap<String, StructEntry>) -> Sexp {
    let printer = TypedPrinter { function, structs };
    let mut prototype = vec![list(vec![symbol(function.name.clone()), symbol(function.signature.ret.to_string())])];
    for (local, ty) in function.locals.iter().zip(&function.signature.params) {
        prototype.push(list(vec![symbol(local.name.clone()), symbol(ty.to_string())]));
    }
    let head = if function.kernel {
        "define-kernel"
    } else if function.inline {
        "define-inline"
    } else {
        "define"
    };
    let mut items = vec![symbol(head), list(prototype)];
    items.extend(function.body.iter().map(|stmt| printer.stmt(stmt)));
    list(items)
}

/// Top-level code: its statements, without a prototype.
pub(crate) fn typed_statements(function: &FunctionDef, structs: &HashMap<String, StructEntry>) -> Vec<Sexp> {
    let printer = TypedPrinter { function, structs };
    function.body.iter().map(|stmt| printer.stmt(stmt)).collect()
}

struct TypedPrinter<'a> {
    function: &'a FunctionDef,
    structs: &'a HashMap<String, StructEntry>,
}

impl TypedPrinter<'_> {
    fn place(&self, place: &Place) -> String {
        match place {
            Place::Local(index) => {
                self.function.locals.get(*index).map_or_else(|| format!("local{index}"), |local| local.name.clone())
            }
            Place::Global(name) => name.clone(),
        }
    }

    fn label(&self, index: usize) -> Sexp {
        symbol(self.function.labels.get(index).cloned().unwrap_or_else(|| format!("L{index}")))
    }

    fn stmts(&self, head: Vec<Sexp>, body: &[Stmt]) -> Sexp {
        let mut items = head;
        items.extend(body.iter().map(|stmt| self.stmt(stmt)));
        list(items)
    }

    fn stmt(&self, stmt: &Stmt) -> Sexp {
        match stmt {
            Stmt::Expr(expr) => self.expr(expr),
            Stmt::Declare(index) => {
                let local = &self.function.locals[*index];
                list(vec![symbol("declare"), symbol(local.name.clone()), symbol(local.ty.to_string())])
            }
            Stmt::If(cond, then, otherwise) => {
                let mut items = vec![symbol("if"), self.expr(cond), self.stmt(then)];
                items.extend(otherwise.iter().map(|otherwise| self.stmt(otherwise)));
                list(items)
            }
            Stmt::While(cond, body) => self.stmts(vec![symbol("while"), self.expr(cond)], body),
            Stmt::For(init, cond, step, body) => {
                let part =
                    |expr: &Option<Box<Expr>>| expr.as_deref().map_or_else(|| list(Vec::new()), |expr| self.expr(expr));
                self.stmts(vec![symbol("for"), list(vec![part(init), self.expr(cond), part(step)])], body)
            }
            Stmt::Ret(value) => {
                list(std::iter::once(symbol("ret")).chain(value.iter().map(|value| self.expr(value))).collect())
            }
            Stmt::Break => list(vec![symbol("break")]),
            Stmt::Continue => list(vec![symbol("continue")]),
            Stmt::Block(body) => list(body.iter().map(|stmt| self.stmt(stmt)).collect()),
            Stmt::Label(index) => list(vec![symbol("label"), self.label(*index)]),
            Stmt::Jump(index) => list(vec![symbol("jmp"), self.label(*index)]),
            Stmt::Branch(cond, then, otherwise) => {
                list(vec![symbol("br"), self.expr(cond), self.label(*then), self.label(*otherwise)])
            }
        }
    }

    fn node(&self, head: &str, ty: &Ty, operands: Vec<Sexp>) -> Sexp {
        list(std::iter::once(annotated(head, ty)).chain(operands).collect())
    }

    fn exprs(&self, exprs: &[&Expr]) -> Vec<Sexp> {
        exprs.iter().map(|expr| self.expr(expr)).collect()
    }

    fn expr(&self, expr: &Expr) -> Sexp {
        let ty = &expr.ty;
        match &expr.kind {
            ExprKind::Int(value) => symbol(format!("{value}:{ty}")),
            ExprKind::Float(value) => symbol(format!("{}:{ty}", crate::reader::format_float_literal(*value))),
            ExprKind::Bool(value) => symbol(format!("{}:{ty}", if *value { "#t" } else { "#f" })),
            ExprKind::Str(bytes) => symbol(format!("{:?}:{ty}", String::from_utf8_lossy(bytes))),
            ExprKind::Zero => symbol(format!("0:{ty}")),
            ExprKind::Read(place) => symbol(format!("{}:{ty}", self.place(place))),
            ExprKind::Set(place, value) => self.node("set", ty, vec![symbol(self.place(place)), self.expr(value)]),
            ExprKind::Binary(op, left, right) => self.node(binary_name(*op, &left.ty), ty, self.exprs(&[left, right])),
            ExprKind::Not(operand) => self.node("not", ty, self.exprs(&[operand])),
            ExprKind::FNeg(operand) => self.node("fneg", ty, self.exprs(&[operand])),
            ExprKind::Select(cond, then, otherwise) => self.node("select", ty, self.exprs(&[cond, then, otherwise])),
            ExprKind::Load(pointer) => self.node("load", ty, self.exprs(&[pointer])),
            ExprKind::Store(pointer, value) => self.node("store", ty, self.exprs(&[pointer, value])),
            ExprKind::PtrAdd(pointer, index) => self.node("ptradd", ty, self.exprs(&[pointer, index])),
            ExprKind::GepPath(pointer, indices) => self.node(
                "ptradd",
                ty,
                std::iter::once(self.expr(pointer)).chain(indices.iter().map(|index| self.expr(index))).collect(),
            ),
            ExprKind::FieldPtr(pointer, field) => {
                let field_name = match pointer.ty.pointee() {
                    Some(Ty::Struct(name)) => self
                        .structs
                        .get(&**name)
                        .and_then(|entry| entry.fields.as_ref())
                        .and_then(|fields| fields.get(*field as usize))
                        .map(|(name, _)| name.clone()),
                    _ => None,
                };
                self.node(
                    "sptradd",
                    ty,
                    vec![self.expr(pointer), symbol(field_name.unwrap_or_else(|| field.to_string()))],
                )
            }
            ExprKind::ElemPtr(array, index) => self.node("aptradd", ty, self.exprs(&[array, index])),
            ExprKind::AddressOf(place) => self.node("ptr-to", ty, vec![symbol(self.place(place))]),
            ExprKind::FunctionAddress(address) => {
                let (FunctionAddress::Thunk { name, .. }
                | FunctionAddress::Symbol { name, .. }
                | FunctionAddress::Slot(name)) = address.as_ref();
                self.node("fn-ptr", ty, vec![symbol(name.clone())])
            }
            ExprKind::Alloc(element, count) | ExprKind::SessionAlloc(element, count) => {
                self.node("alloc", ty, vec![symbol(element.to_string()), self.expr(count)])
            }
            ExprKind::Extract(aggregate, index) => {
                self.node("extractvalue", ty, vec![self.expr(aggregate), symbol(index.to_string())])
            }
            ExprKind::Insert(aggregate, value, index) => {
                self.node("insertvalue", ty, vec![self.expr(aggregate), self.expr(value), symbol(index.to_string())])
            }
            ExprKind::Call(call) => self.node(
                "call",
                ty,
                std::iter::once(symbol(call.name.clone())).chain(call.args.iter().map(|arg| self.expr(arg))).collect(),
            ),
            ExprKind::Cast(op, value) => self.node(cast_name(*op), ty, vec![self.expr(value)]),
            ExprKind::Asm(asm) => {
                let strings = [&asm.template, &asm.constraints].into_iter().map(|text| symbol(format!("{text:?}")));
                self.node("asm", ty, strings.chain(asm.args.iter().map(|arg| self.expr(arg))).collect())
            }
            ExprKind::GpuIndex(register, dimension) => self.node(
                &format!("{}.{}", register.builtin(), ["x", "y", "z"][usize::from(*dimension).min(2)]),
                ty,
                Vec::new(),
            ),
            ExprKind::Barrier => list(vec![symbol("syncthreads")]),
            ExprKind::Warp(op, operands) => {
                self.node(op.name(), ty, operands.iter().map(|operand| self.expr(operand)).collect())
            }
            ExprKind::Atomic(op, operands) => {
                self.node(op.name(), ty, operands.iter().map(|operand| self.expr(operand)).collect())
            }
            ExprKind::GpuAlloc(element, count) => {
                self.node("gpu-alloc", ty, vec![symbol(element.to_string()), self.expr(count)])
            }
            ExprKind::GpuFree(buffer) => self.node("gpu-free", ty, self.exprs(&[buffer])),
            ExprKind::GpuLen(buffer) => self.node("gpu-len", ty, self.exprs(&[buffer])),
            ExprKind::GpuCopy(_, destination, source, count) => {
                self.node("gpu-copy", ty, self.exprs(&[destination, source, count]))
            }
            ExprKind::Launch(launch) => self.node("launch", ty, self.launch_operands(launch)),
            ExprKind::EncodeBegin => self.node("encode-begin", ty, vec![symbol("gpu")]),
            ExprKind::EncodeCopy(_, operands) => {
                let [encoder, destination, source, count] = operands.as_ref();
                self.node("encode-copy", ty, self.exprs(&[encoder, destination, source, count]))
            }
            ExprKind::EncodeCall(encoder, launch) => self.node(
                "encode-call",
                ty,
                std::iter::once(self.expr(encoder)).chain(self.launch_operands(launch)).collect(),
            ),
            ExprKind::Submit(encoder) => self.node("submit", ty, self.exprs(&[encoder])),
            ExprKind::Await(fence) => self.node("await", ty, self.exprs(&[fence])),
            ExprKind::FenceDone(fence) => self.node("fence-done", ty, self.exprs(&[fence])),
            ExprKind::HostAlloc(element, count) => {
                self.node("host-alloc", ty, vec![symbol(element.to_string()), self.expr(count)])
            }
        }
    }

    /// A launch's kernel, grid, block and arguments, as written.
    fn launch_operands(&self, launch: &Launch) -> Vec<Sexp> {
        let dimensions = |word: &str, values: &[Expr]| {
            list(std::iter::once(symbol(word)).chain(values.iter().map(|value| self.expr(value))).collect())
        };
        let mut operands =
            vec![symbol(launch.kernel.clone()), dimensions("grid", &launch.grid), dimensions("block", &launch.block)];
        for arg in &launch.args {
            operands.push(match (arg.kind, arg.direction, &arg.count) {
                (LaunchArgKind::Host, Some(direction), Some(count)) => {
                    list(vec![symbol(direction.word()), self.expr(&arg.value), self.expr(count)])
                }
                _ => self.expr(&arg.value),
            });
        }
        operands
    }
}

fn binary_name(op: BinOp, operand: &Ty) -> &'static str {
    let pointers = operand.is_ptr();
    match op {
        BinOp::Add => "add",
        BinOp::Sub => "sub",
        BinOp::Mul => "mul",
        BinOp::Div => "div",
        BinOp::Rem => "rem",
        BinOp::UDiv => "udiv",
        BinOp::URem => "urem",
        BinOp::Shl => "shl",
        BinOp::LShr => "lshr",
        BinOp::AShr => "ashr",
        BinOp::Xor => "xor",
        BinOp::And => "and",
        BinOp::Or => "or",
        BinOp::FAdd => "fadd",
        BinOp::FSub => "fsub",
        BinOp::FMul => "fmul",
        BinOp::FDiv => "fdiv",
        BinOp::ICmp(cmp) => match cmp {
            IntCmp::Eq => "eq",
            IntCmp::Ne => "ne",
            IntCmp::Slt | IntCmp::Ult if pointers => "lt",
            IntCmp::Sgt | IntCmp::Ugt if pointers => "gt",
            IntCmp::Sle | IntCmp::Ule if pointers => "le",
            IntCmp::Sge | IntCmp::Uge if pointers => "ge",
            IntCmp::Slt => "lt",
            IntCmp::Sgt => "gt",
            IntCmp::Sle => "le",
            IntCmp::Sge => "ge",
            IntCmp::Ult => "ult",
            IntCmp::Ugt => "ugt",
            IntCmp::Ule => "ule",
            IntCmp::Uge => "uge",
        },
        BinOp::FCmp(cmp) => match cmp {
            FloatCmp::Oeq => "feq",
            FloatCmp::One => "fne",
            FloatCmp::Olt => "flt",
            FloatCmp::Ogt => "fgt",
            FloatCmp::Ole => "fle",
            FloatCmp::Oge => "fge",
        },
    }
}

fn cast_name(op: CastOp) -> &'static str {
    match op {
        CastOp::Sext => "sext",
        CastOp::Zext => "zext",
        CastOp::Trunc => "trunc",
        CastOp::FpExt => "fpext",
        CastOp::FpTrunc => "fptrunc",
        CastOp::SiToFp => "sitofp",
        CastOp::UiToFp => "uitofp",
        CastOp::FpToSi => "fptosi",
        CastOp::FpToUi => "fptoui",
        CastOp::PtrToInt => "ptrtoint",
        CastOp::IntToPtr => "inttoptr",
        CastOp::Bitcast => "bitcast",
        CastOp::AddrSpaceCast => "addrspacecast",
    }
}

/// IR text without the module boilerplate (ID, data layout, triple).
pub(crate) fn trim_ir(ir: &str) -> String {
    ir.lines()
        .filter(|line| {
            !(line.starts_with("; ModuleID")
                || line.starts_with("source_filename")
                || line.starts_with("target datalayout")
                || line.starts_with("target triple"))
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

/// Assembly with only labels and instructions: directives and comment lines go.
pub(crate) fn trim_assembly(assembly: &str) -> String {
    assembly
        .lines()
        .filter(|line| {
            let trimmed = line.trim_start();
            !(trimmed.is_empty()
                || trimmed.starts_with('.') && !trimmed.contains(':')
                || trimmed.starts_with('#')
                || trimmed.starts_with(".Lfunc_end"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}
