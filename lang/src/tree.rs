//! The typed tree: what `check` makes of a cell, with a `Ty` and a `Span` on every node.
//!
//! It is the one IR between `check` and `codegen`: `codegen` lowers it, `inspect` prints it and
//! `gpu` walks it to find device code. Only `check` builds it (see `TypedCell::empty`). It is
//! plain data and knows no stage: besides the visitors over it, nothing here checks or lowers.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;

use crate::diagnostics::Diagnostic;
use crate::reader::{Sexp, Span};
use crate::types::{Signature, Ty};

/// How deeply statements and expressions may nest. Checking and code generation recurse over
/// the tree, and the caller's thread (a REPL's main thread, 8 MiB) must not run out of stack:
/// a debug build needs about 16 KiB per level for both.
pub(crate) const MAX_NESTING: usize = 256;

#[derive(Clone, Debug)]
pub(crate) struct Expr {
    pub kind: ExprKind,
    pub ty: Ty,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    UDiv,
    URem,
    Shl,
    LShr,
    AShr,
    Xor,
    And,
    Or,
    FAdd,
    FSub,
    FMul,
    FDiv,
    /// Integer, bool or pointer comparison: `eq ne slt sgt sle sge ult ugt ule uge`.
    ICmp(IntCmp),
    FCmp(FloatCmp),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntCmp {
    Eq,
    Ne,
    Slt,
    Sgt,
    Sle,
    Sge,
    Ult,
    Ugt,
    Ule,
    Uge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatCmp {
    Oeq,
    One,
    Olt,
    Ogt,
    Ole,
    Oge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CastOp {
    Sext,
    Zext,
    Trunc,
    FpExt,
    FpTrunc,
    SiToFp,
    UiToFp,
    FpToSi,
    FpToUi,
    PtrToInt,
    IntToPtr,
    Bitcast,
    AddrSpaceCast,
}

/// A variable that can be assigned and addressed.
///
/// Invariant: `Local` indexes the `locals` of the function whose body holds it.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    Local(usize),
    Global(String),
}

/// What `(fn-ptr NAME)` gives the address of.
#[derive(Clone, Debug)]
pub(crate) enum FunctionAddress {
    /// A session function: its thunk for this signature, made once per session, which calls
    /// through the function's slot while the function has this signature and faults after.
    Thunk { name: String, signature: Signature },
    /// A C function of the process or the built-in runtime, under this link name.
    Symbol { name: String, link: String, signature: Signature },
    /// A `load-library` library's function: the address its slot holds.
    Slot(String),
}

/// How a call reaches its callee.
#[derive(Clone, Debug)]
pub(crate) enum Callee {
    /// A session function, through its indirection slot.
    Slot(String),
    /// The function calling itself: the running body is always the newest, so a direct call is exact.
    SelfCall,
    /// A `define-inline` function: its body (from `TypedCell::inline_bodies`) is emitted into
    /// the caller's module.
    Inline(String),
    /// A C function resolved in the process (or the built-in runtime) under this link name.
    Direct(String),
    /// An LLVM intrinsic, under its (opaque-pointer) name.
    Intrinsic(String),
}

/// A call. Boxed in `ExprKind`, as the other large payloads are: every expression is as large as
/// the largest kind, and sessions keep every function's typed body.
#[derive(Clone, Debug)]
pub(crate) struct CallExpr {
    pub callee: Callee,
    pub name: String,
    pub signature: Signature,
    pub args: Vec<Expr>,
}

/// Inline assembly: its template, constraints and operands.
#[derive(Clone, Debug)]
pub(crate) struct AsmExpr {
    pub template: String,
    pub constraints: String,
    pub args: Vec<Expr>,
}

impl Expr {
    /// What a call expression calls.
    pub(crate) fn callee(&self) -> Option<&Callee> {
        match &self.kind {
            ExprKind::Call(call) => Some(&call.callee),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum ExprKind {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(Vec<u8>),
    Read(Place),
    Set(Place, Box<Expr>),
    /// The set value needs an address-space cast first (C-Lisp's generic/global pointer mix).
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    FNeg(Box<Expr>),
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    Load(Box<Expr>),
    Store(Box<Expr>, Box<Expr>),
    PtrAdd(Box<Expr>, Box<Expr>),
    /// Brilisp's multi-index `ptradd`: a `gep` through the pointee type. Indices after the
    /// first that select a struct field are `int` literals.
    GepPath(Box<Expr>, Vec<Expr>),
    /// `sptradd`: field index into the pointee struct.
    FieldPtr(Box<Expr>, u32),
    /// `aptradd`: the operand is a pointer to the array.
    ElemPtr(Box<Expr>, Box<Expr>),
    AddressOf(Place),
    /// `(fn-ptr NAME)`: a function's address, for C to call.
    FunctionAddress(Box<FunctionAddress>),
    Alloc(Ty, Box<Expr>),
    /// Session memory for `alloc` in top-level code: freed at `:reset`.
    SessionAlloc(Ty, Box<Expr>),
    Extract(Box<Expr>, u32),
    Insert(Box<Expr>, Box<Expr>, u32),
    Call(Box<CallExpr>),
    Cast(CastOp, Box<Expr>),
    Asm(Box<AsmExpr>),
    /// The zero of the expression's type (default results).
    Zero,
    /// A GPU special register, `(tid.x)` and friends: device code only.
    GpuIndex(GpuRegister, u8),
    /// `(syncthreads)`: a barrier for the threads of a block; device code only.
    Barrier,
    /// `(gpu-alloc T n)`: a zeroed device buffer of n elements of T.
    GpuAlloc(Ty, Box<Expr>),
    GpuFree(Box<Expr>),
    GpuLen(Box<Expr>),
    /// `(gpu-copy DST SRC n)`, the direction read from the operand types.
    GpuCopy(CopyDirection, Box<Expr>, Box<Expr>, Box<Expr>),
    Launch(Box<Launch>),
    /// `(encode-begin gpu)`: a new, empty command buffer (docs/language.md §7.8).
    EncodeBegin,
    /// `(encode-copy E DST SRC n)`: a copy as `gpu-copy`, recorded into encoder E; the operands
    /// are E, DST, SRC and n.
    EncodeCopy(CopyDirection, Box<[Expr; 4]>),
    /// `(encode-call E K (grid …) (block …) ARG…)`: a launch recorded into encoder E.
    EncodeCall(Box<Expr>, Box<Launch>),
    /// `(submit E)`: E's commands start, concurrently; the fence to await.
    Submit(Box<Expr>),
    /// `(await F)`: waits for F's submission; its first failure is this form's.
    Await(Box<Expr>),
    /// `(fence-done F)`: whether F's submission finished.
    FenceDone(Box<Expr>),
    /// `(host-alloc T n)`: page-locked host memory for n elements of T.
    HostAlloc(Ty, Box<Expr>),
    /// A warp-level operation of §7.9 and its operands (device code only).
    Warp(WarpOp, Vec<Expr>),
    /// `(atomic-add P V)` and its kin (§7.9): P, then V (`atomic-cas`: EXPECTED and NEW).
    Atomic(AtomicOp, Vec<Expr>),
}

/// The warp-level operations of docs/language.md §7.9.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WarpOp {
    /// `(lane-id)`: the thread's lane in its warp.
    LaneId,
    /// `(warp-size)`: 32.
    WarpSize,
    /// `(shfl-sync MASK V LANE)`: V of lane LANE.
    Shfl,
    /// `(shfl-up-sync MASK V D)`: V of the lane D below.
    ShflUp,
    /// `(shfl-down-sync MASK V D)`: V of the lane D above.
    ShflDown,
    /// `(shfl-xor-sync MASK V M)`: V of the lane whose number is this one's xor M.
    ShflXor,
    /// `(ballot-sync MASK P)`: a bit per lane of MASK whose P holds.
    Ballot,
    /// `(all-sync MASK P)`: whether P holds in every lane of MASK.
    All,
    /// `(any-sync MASK P)`: whether P holds in some lane of MASK.
    Any,
    /// `(syncwarp [MASK])`: the lanes of MASK meet.
    SyncWarp,
}

impl WarpOp {
    pub const ALL: [WarpOp; 10] = [
        WarpOp::LaneId,
        WarpOp::WarpSize,
        WarpOp::Shfl,
        WarpOp::ShflUp,
        WarpOp::ShflDown,
        WarpOp::ShflXor,
        WarpOp::Ballot,
        WarpOp::All,
        WarpOp::Any,
        WarpOp::SyncWarp,
    ];

    /// The form's name.
    pub fn name(self) -> &'static str {
        match self {
            WarpOp::LaneId => "lane-id",
            WarpOp::WarpSize => "warp-size",
            WarpOp::Shfl => "shfl-sync",
            WarpOp::ShflUp => "shfl-up-sync",
            WarpOp::ShflDown => "shfl-down-sync",
            WarpOp::ShflXor => "shfl-xor-sync",
            WarpOp::Ballot => "ballot-sync",
            WarpOp::All => "all-sync",
            WarpOp::Any => "any-sync",
            WarpOp::SyncWarp => "syncwarp",
        }
    }

    pub fn from_name(name: &str) -> Option<WarpOp> {
        WarpOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether the lanes of its MASK execute it together (all but `lane-id` and `warp-size`).
    pub fn is_collective(self) -> bool {
        !matches!(self, WarpOp::LaneId | WarpOp::WarpSize)
    }

    /// Its code in the simulator's runtime call (`abi::SIM_WARP`).
    pub fn code(self) -> u32 {
        WarpOp::ALL.iter().position(|op| *op == self).unwrap_or(0) as u32
    }

    pub fn from_code(code: u32) -> Option<WarpOp> {
        WarpOp::ALL.get(code as usize).copied()
    }
}

/// The atomics of docs/language.md §7.9.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicOp {
    Add,
    Min,
    Max,
    Exch,
    Cas,
}

impl AtomicOp {
    pub const ALL: [AtomicOp; 5] = [AtomicOp::Add, AtomicOp::Min, AtomicOp::Max, AtomicOp::Exch, AtomicOp::Cas];

    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "atomic-add",
            AtomicOp::Min => "atomic-min",
            AtomicOp::Max => "atomic-max",
            AtomicOp::Exch => "atomic-exch",
            AtomicOp::Cas => "atomic-cas",
        }
    }

    pub fn from_name(name: &str) -> Option<AtomicOp> {
        AtomicOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

/// The special registers of §7.2: `tid` (threadIdx), `ctaid` (blockIdx), `ntid` (blockDim),
/// `nctaid` (gridDim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GpuRegister {
    Tid,
    Ctaid,
    Ntid,
    Nctaid,
}

impl GpuRegister {
    /// The register and dimension (0 to 2) of a builtin such as `bdim.y`.
    pub fn from_builtin(name: &str) -> Option<(GpuRegister, u8)> {
        let (register, dimension) = name.split_once('.')?;
        let register = match register {
            "tid" => GpuRegister::Tid,
            "bid" => GpuRegister::Ctaid,
            "bdim" => GpuRegister::Ntid,
            "gdim" => GpuRegister::Nctaid,
            _ => return None,
        };
        let dimension = match dimension {
            "x" => 0,
            "y" => 1,
            "z" => 2,
            _ => return None,
        };
        Some((register, dimension))
    }

    /// The builtin's spelling, for listings: `tid`, `bid`, `bdim`, `gdim`.
    pub fn builtin(self) -> &'static str {
        match self {
            GpuRegister::Tid => "tid",
            GpuRegister::Ctaid => "bid",
            GpuRegister::Ntid => "bdim",
            GpuRegister::Nctaid => "gdim",
        }
    }

    /// The PTX name of the register in LLVM's intrinsic names.
    pub fn ptx(self) -> &'static str {
        match self {
            GpuRegister::Tid => "tid",
            GpuRegister::Ctaid => "ctaid",
            GpuRegister::Ntid => "ntid",
            GpuRegister::Nctaid => "nctaid",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyDirection {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

/// Which way a Lapis annotation (or a launch argument) moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    In,
    Out,
    InOut,
}

impl Direction {
    /// The direction a Lapis word names: `in`, `out` or `inout`.
    pub fn from_word(word: &str) -> Option<Direction> {
        match word {
            "in" => Some(Direction::In),
            "out" => Some(Direction::Out),
            "inout" => Some(Direction::InOut),
            _ => None,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
            Direction::InOut => "inout",
        }
    }
}

/// A parameter's Lapis annotation (§7.4).
#[derive(Clone, Debug)]
pub(crate) enum Annotation {
    /// `(NAME TYPE DIR SIZE)`: SIZE elements move in the direction DIR at a launch.
    Sized(Direction, Sexp),
    /// `(NAME TYPE handle)`: an opaque pointer passed untouched.
    Handle,
}

/// A checked `(launch K (grid …) (block …) ARG…)`.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub kernel: String,
    /// x, y, z of the grid and of the block; missing dimensions are the literal 1.
    pub grid: Vec<Expr>,
    pub block: Vec<Expr>,
    pub args: Vec<LaunchArg>,
    /// Hidden locals that keep the integer scalar arguments, by argument: SIZE expressions
    /// of annotations read them, so each argument is evaluated once.
    pub arg_locals: Vec<Option<usize>>,
}

/// What one launch argument is, and what the launch moves for it.
#[derive(Clone, Debug)]
pub(crate) struct LaunchArg {
    pub kind: LaunchArgKind,
    /// The scalar, the device pointer, the buffer handle or the host pointer.
    pub value: Expr,
    /// Elements: of an `(in p N)` argument or an annotated parameter's SIZE.
    pub count: Option<Expr>,
    pub direction: Option<Direction>,
    /// Bytes of one element (of a scalar: its size).
    pub element_size: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaunchArgKind {
    /// Passed by value (scalars, handles).
    Scalar,
    /// A `(ptr T (addrspace 1))`: already device memory.
    DevicePointer,
    /// A `(gpu-buf T)`: its device address.
    Buffer,
    /// Host memory: copied to a temporary device buffer and back, per the direction.
    Host,
}

#[derive(Clone, Debug)]
pub(crate) enum Stmt {
    Expr(Expr),
    /// Zero the local whenever the declaration runs.
    Declare(usize),
    If(Expr, Box<Stmt>, Option<Box<Stmt>>),
    While(Expr, Vec<Stmt>),
    /// `(for (INIT COND STEP) BODY…)`; INIT and STEP are boxed to keep `Stmt` small.
    For(Option<Box<Expr>>, Expr, Option<Box<Expr>>, Vec<Stmt>),
    Ret(Option<Expr>),
    Break,
    Continue,
    Block(Vec<Stmt>),
    /// Brilisp `(label L)`: the start of block L (an index into `FunctionDef::labels`).
    Label(usize),
    /// Brilisp `(jmp L)`.
    Jump(usize),
    /// Brilisp `(br C L1 L2)`.
    Branch(Expr, usize, usize),
}

#[derive(Clone, Debug)]
pub(crate) struct Local {
    pub name: String,
    pub ty: Ty,
}

/// A definition's form as expanded. Most definitions contain no unquote: their form is what the
/// reader makes of their text, and keeping that text (tens of bytes) instead of the form (a tree
/// of allocations, most of a session's memory per definition) is what `compact` does when
/// reading the text again gives the same form.
#[derive(Clone, Debug)]
pub(crate) enum DefinitionSource {
    Form(Sexp),
    /// The text of the form, where it starts in its source.
    Text {
        text: Rc<str>,
        source: crate::source::SourceId,
        start: u32,
    },
}

impl DefinitionSource {
    /// The form.
    pub fn form(&self) -> Sexp {
        match self {
            DefinitionSource::Form(form) => form.clone(),
            DefinitionSource::Text { text, source, start } => {
                reread(text, *source, *start).expect("compact keeps only text that reads back to the form")
            }
        }
    }

    /// The same source, as text where `text` (the form's span in its source) reads back to the
    /// very form, spans included.
    pub fn compact(self, text: Option<String>) -> DefinitionSource {
        let DefinitionSource::Form(form) = &self else { return self };
        let Some(text) = text else { return self };
        match reread(&text, form.span.source, form.span.start) {
            Some(again) if crate::reader::same_form(&again, form) => {
                DefinitionSource::Text { text: text.into(), source: form.span.source, start: form.span.start }
            }
            _ => self,
        }
    }
}

/// The one form `text` holds, its spans placed at `start` of `source`.
fn reread(text: &str, source: crate::source::SourceId, start: u32) -> Option<Sexp> {
    let mut forms = crate::reader::read(source, text).ok()?;
    let mut form = forms.pop().filter(|_| forms.is_empty())?;
    crate::reader::shift_spans(&mut form, start);
    Some(form)
}

/// A compiled function: a definition, or a top-level item's entry.
#[derive(Clone, Debug)]
pub(crate) struct FunctionDef {
    pub name: String,
    pub signature: Signature,
    /// Parameters are the first locals.
    pub locals: Vec<Local>,
    pub body: Vec<Stmt>,
    /// Brilisp label names, indexed by `Stmt::Label`, `Stmt::Jump` and `Stmt::Branch`.
    pub labels: Vec<String>,
    pub inline: bool,
    pub span: Span,
    /// The definition form as expanded, kept to re-check it when what it uses changes.
    pub source: DefinitionSource,
    /// Session names it depends on: `fn:NAME`, `global:NAME`, `struct:NAME`.
    pub uses: BTreeSet<String>,
    /// `define-kernel`: launched, never called; compiled only for the GPU.
    pub kernel: bool,
    /// Lapis annotations of the parameters, by parameter.
    pub annotations: Vec<Option<Annotation>>,
    /// Where the GPU is needed and where the host is needed (see `Placement`).
    pub placement: Placement,
    /// The rules its body follows: C-Lisp's, or those of a standalone Brilisp program.
    pub dialect: Dialect,
}

/// The rules a top-level form follows. Forms inside `(brilisp …)` are a standalone Brilisp
/// program's: every body is Brilisp, a global's name is its address, `define-struct` lists
/// unnamed field types, and `const` wraps integers to the destination's width.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// C-Lisp, whose `define-brilisp` bodies are Brilisp with C-Lisp's globals and structs.
    #[default]
    CLisp,
    /// A form of a `(brilisp …)` program.
    BrilispProgram,
}

/// Where a function can run. Code using GPU builtins, `llvm.nvvm.*` or libdevice is
/// device-only: compiled only for the GPU, and host code cannot call it. Code calling C
/// functions or using host GPU forms cannot run on the GPU.
#[derive(Clone, Debug, Default)]
pub(crate) struct Placement {
    /// The first construct that needs the GPU, and what it is.
    pub device_use: Option<(Span, String)>,
    /// The first construct device code cannot have, and what it is.
    pub host_use: Option<(Span, String)>,
    /// A kernel, a direct device use, or a call of a device-only function.
    pub device_only: bool,
}

/// A constant initializer, typed by its global.
#[derive(Clone, Debug)]
pub(crate) enum Constant {
    Int(i64),
    Float(f64),
    Bool(bool),
    Aggregate(Vec<Constant>),
    /// The address of another global.
    AddressOf(String),
    Zero,
}

#[derive(Clone, Debug)]
pub(crate) struct GlobalDef {
    pub name: String,
    pub ty: Ty,
    /// `None`: a repeated `declare` of the same type keeps its value.
    pub init: Option<Constant>,
    // No stage reads it yet; kept so that every node of the tree carries its span.
    #[allow(dead_code)]
    pub span: Span,
    /// The address space on the GPU: 3 for `define-shared` and `(addrspace 3)`, else 0.
    pub space: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct StructDef {
    pub name: String,
    /// `None` for an opaque struct.
    pub fields: Option<Vec<(String, Ty)>>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub(crate) struct ExternDef {
    pub name: String,
    pub signature: Signature,
    pub span: Span,
    /// What provides the symbol, as `check` found it (`None`: nothing yet, and calls reach a
    /// trap until something does). `commit` uses it as it is: a declaration is resolved once.
    pub resolution: Option<Resolution>,
}

impl ExternDef {
    /// Whether nothing provides the symbol yet.
    pub fn unresolved(&self) -> bool {
        self.resolution.is_none()
    }
}

/// Which cell code comes from; it names the cell's symbols (`cell#3`, `cell#3q2`) and the cell
/// in messages (`cell 3`), so no stage parses one from the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CellId {
    /// The session's count of cells when it was made.
    pub number: u32,
    pub kind: CellKind,
}

/// What made a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CellKind {
    /// The user's cell (or file).
    Cell,
    /// The Nth cell a benchmark or an autotune made while the user's cell ran.
    Quiet(u32),
    /// A scratch cell a listing command checks and never links (`:types TEXT`).
    Inspect,
}

/// The prefix of the symbols of top-level code: the cell's symbol is `cell#N`.
pub(crate) const TOP_LEVEL_PREFIX: &str = "cell#";

impl CellId {
    /// A user's cell.
    pub(crate) fn cell(number: u32) -> CellId {
        CellId { number, kind: CellKind::Cell }
    }

    /// The prefix of the cell's symbols: its module, its entries and its top-level items.
    pub(crate) fn symbol(self) -> String {
        match self.kind {
            CellKind::Cell => format!("{TOP_LEVEL_PREFIX}{}", self.number),
            CellKind::Quiet(quiet) => format!("{TOP_LEVEL_PREFIX}{}q{quiet}", self.number),
            CellKind::Inspect => format!("inspect#{}", self.number),
        }
    }

    /// How messages name the cell: `3`, `3q2`.
    pub(crate) fn label(self) -> String {
        match self.kind {
            CellKind::Cell => self.number.to_string(),
            CellKind::Quiet(quiet) => format!("{}q{quiet}", self.number),
            CellKind::Inspect => format!("inspect#{}", self.number),
        }
    }
}

/// Whether a function name is a cell's top-level code (not a user's function).
pub(crate) fn is_top_level_name(name: &str) -> bool {
    name.starts_with(TOP_LEVEL_PREFIX)
}

/// Where a bodiless declaration's symbol was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// In the process or the built-in runtime, under this link name.
    Link(String),
    /// In a `load-library` library (named here), at this address.
    Library { library: String, address: usize },
}

/// One top-level statement or expression, compiled as an entry function `void (ptr out)`.
#[derive(Clone, Debug)]
pub(crate) struct TopItem {
    pub function: FunctionDef,
    /// The value's type when the item is an expression with a value.
    pub value: Option<Ty>,
}

/// A function invalidated by a change in this cell.
#[derive(Clone, Debug)]
pub(crate) struct Invalidation {
    pub name: String,
    /// The name whose change invalidated it.
    pub message: String,
    /// The invalidated function's definition.
    pub span: Span,
}

/// A checked cell: only `check` builds it, and `codegen` takes nothing else.
///
/// Invariant: every expression has its type and its operands the types its operation takes,
/// every variable and callee names something the cell or the session declares, and no statement
/// or expression nests deeper than `MAX_NESTING`; codegen relies on this and has no error path
/// for a wrong program.
#[derive(Debug)]
pub(crate) struct TypedCell {
    pub structs: Vec<StructDef>,
    pub globals: Vec<GlobalDef>,
    pub externs: Vec<ExternDef>,
    /// Functions defined by the cell, in source order.
    pub functions: Vec<FunctionDef>,
    /// Earlier functions recompiled because something they use changed.
    pub recompiled: Vec<FunctionDef>,
    pub invalidated: Vec<Invalidation>,
    pub top: Vec<TopItem>,
    pub warnings: Vec<Diagnostic>,
    /// The finished body of every `define-inline` function the cell's code calls, directly or
    /// through other inline functions: codegen emits a private copy of each into the module.
    pub inline_bodies: HashMap<String, Rc<FunctionDef>>,
    /// Where the cell's inline assembly is, to point at when the assembler rejects it.
    pub asm_spans: Vec<Span>,
    /// Private, so that no other module can write a `TypedCell` literal: see `TypedCell::empty`.
    _sealed: (),
}

impl TypedCell {
    /// The empty cell the checker fills. Only `check` calls it: a `TypedCell` that reaches
    /// `codegen` has been through the checker.
    pub(crate) fn empty() -> TypedCell {
        TypedCell {
            structs: Vec::new(),
            globals: Vec::new(),
            externs: Vec::new(),
            functions: Vec::new(),
            recompiled: Vec::new(),
            invalidated: Vec::new(),
            top: Vec::new(),
            warnings: Vec::new(),
            inline_bodies: HashMap::new(),
            asm_spans: Vec::new(),
            _sealed: (),
        }
    }
}

/// A global as the session holds it once its definition is committed.
#[derive(Clone, Debug)]
pub(crate) struct GlobalEntry {
    pub ty: Ty,
    /// Its address space on the GPU (device code gives shared globals their own storage).
    pub space: u32,
    /// The value its definition gives: device copies start from it.
    pub init: Constant,
}

impl GlobalEntry {
    /// The entry a committed definition makes; `previous` keeps the value of a repeated `declare`.
    pub fn from_def(global: &GlobalDef, previous: Option<&GlobalEntry>) -> GlobalEntry {
        let init = global.init.clone().or_else(|| previous.map(|entry| entry.init.clone())).unwrap_or(Constant::Zero);
        GlobalEntry { ty: global.ty.clone(), space: global.space, init }
    }
}

// ---------------------------------------------------------------------------------------------
// Visitors.

/// Calls `visit` on every expression of the statements, outer expressions first.
pub(crate) fn visit_exprs(body: &[Stmt], visit: &mut dyn FnMut(&Expr)) {
    visit_body(body, &mut |_| {}, visit);
}

/// Calls `on_stmt` on every statement, nested ones included (a statement before those inside
/// it), and `on_expr` on every expression of them, outer expressions first.
pub(crate) fn visit_body(body: &[Stmt], on_stmt: &mut dyn FnMut(&Stmt), on_expr: &mut dyn FnMut(&Expr)) {
    for stmt in body {
        on_stmt(stmt);
        match stmt {
            Stmt::Expr(expr) | Stmt::Ret(Some(expr)) | Stmt::Branch(expr, ..) => visit_expr(expr, on_expr),
            Stmt::If(cond, then, otherwise) => {
                visit_expr(cond, on_expr);
                visit_body(std::slice::from_ref(then), on_stmt, on_expr);
                if let Some(otherwise) = otherwise {
                    visit_body(std::slice::from_ref(otherwise), on_stmt, on_expr);
                }
            }
            Stmt::While(cond, body) => {
                visit_expr(cond, on_expr);
                visit_body(body, on_stmt, on_expr);
            }
            Stmt::For(init, cond, step, body) => {
                for expr in [init.as_deref(), Some(cond), step.as_deref()].into_iter().flatten() {
                    visit_expr(expr, on_expr);
                }
                visit_body(body, on_stmt, on_expr);
            }
            Stmt::Block(body) => visit_body(body, on_stmt, on_expr),
            Stmt::Declare(_) | Stmt::Ret(None) | Stmt::Break | Stmt::Continue | Stmt::Label(_) | Stmt::Jump(_) => {}
        }
    }
}

/// Calls `visit` on an expression and every expression inside it, outer expressions first.
pub(crate) fn visit_expr(expr: &Expr, visit: &mut dyn FnMut(&Expr)) {
    visit(expr);
    for child in expr_children(expr) {
        visit_expr(child, visit);
    }
}

/// The operands of an expression, in evaluation order.
pub(crate) fn expr_children(expr: &Expr) -> Vec<&Expr> {
    match &expr.kind {
        ExprKind::Set(_, a)
        | ExprKind::Not(a)
        | ExprKind::FNeg(a)
        | ExprKind::Load(a)
        | ExprKind::FieldPtr(a, _)
        | ExprKind::Alloc(_, a)
        | ExprKind::SessionAlloc(_, a)
        | ExprKind::Extract(a, _)
        | ExprKind::Cast(_, a) => vec![a.as_ref()],
        ExprKind::Binary(_, a, b)
        | ExprKind::Store(a, b)
        | ExprKind::PtrAdd(a, b)
        | ExprKind::ElemPtr(a, b)
        | ExprKind::Insert(a, b, _) => vec![a.as_ref(), b.as_ref()],
        ExprKind::Select(a, b, c) => vec![a.as_ref(), b.as_ref(), c.as_ref()],
        ExprKind::GepPath(pointer, indices) => std::iter::once(pointer.as_ref()).chain(indices.iter()).collect(),
        ExprKind::Call(call) => call.args.iter().collect(),
        ExprKind::Asm(asm) => asm.args.iter().collect(),
        ExprKind::GpuAlloc(_, a)
        | ExprKind::GpuFree(a)
        | ExprKind::GpuLen(a)
        | ExprKind::Submit(a)
        | ExprKind::Await(a)
        | ExprKind::FenceDone(a)
        | ExprKind::HostAlloc(_, a) => vec![a.as_ref()],
        ExprKind::EncodeCopy(_, operands) => operands.iter().collect(),
        ExprKind::Warp(_, operands) | ExprKind::Atomic(_, operands) => operands.iter().collect(),
        ExprKind::EncodeCall(encoder, launch) => std::iter::once(encoder.as_ref())
            .chain(&launch.grid)
            .chain(&launch.block)
            .chain(launch.args.iter().map(|arg| &arg.value))
            .collect(),
        ExprKind::GpuCopy(_, a, b, c) => vec![a.as_ref(), b.as_ref(), c.as_ref()],
        ExprKind::Launch(launch) => launch
            .grid
            .iter()
            .chain(&launch.block)
            .chain(launch.args.iter().flat_map(|arg| std::iter::once(&arg.value).chain(arg.count.as_ref())))
            .collect(),
        ExprKind::Int(_)
        | ExprKind::Float(_)
        | ExprKind::Bool(_)
        | ExprKind::Str(_)
        | ExprKind::Read(_)
        | ExprKind::AddressOf(_)
        | ExprKind::FunctionAddress(_)
        | ExprKind::Zero
        | ExprKind::GpuIndex(..)
        | ExprKind::Barrier
        | ExprKind::EncodeBegin => Vec::new(),
    }
}

/// The locals of a body whose address `ptr-to` takes.
pub(crate) fn address_taken(body: &[Stmt]) -> HashSet<usize> {
    let mut taken = HashSet::new();
    visit_exprs(body, &mut |expr| {
        if let ExprKind::AddressOf(Place::Local(local)) = expr.kind {
            taken.insert(local);
        }
    });
    taken
}

/// The first call of a session function `wanted` accepts: its span and the callee's name.
pub(crate) fn first_call(body: &[Stmt], wanted: &dyn Fn(&str) -> bool) -> Option<(Span, String)> {
    let mut found = None;
    visit_exprs(body, &mut |expr| {
        if let (None, Some(Callee::Slot(name) | Callee::Inline(name))) = (&found, expr.callee()) {
            if wanted(name) {
                found = Some((expr.span, name.clone()));
            }
        }
    });
    found
}

/// The kernels a body launches, with the launches' spans.
pub(crate) fn launch_targets(body: &[Stmt]) -> Vec<(String, Span)> {
    let mut targets = Vec::new();
    visit_exprs(body, &mut |expr| {
        if let Some(launch) = launched(expr) {
            targets.push((launch.kernel.clone(), expr.span));
        }
    });
    targets
}

/// The launch an expression makes or records: `launch` and `encode-call`.
pub(crate) fn launched(expr: &Expr) -> Option<&Launch> {
    match &expr.kind {
        ExprKind::Launch(launch) | ExprKind::EncodeCall(_, launch) => Some(launch),
        _ => None,
    }
}

/// Whether every path through the statements ends in `ret`.
pub(crate) fn always_returns(body: &[Stmt]) -> bool {
    body.iter().any(|stmt| match stmt {
        Stmt::Ret(_) => true,
        Stmt::Block(inner) => always_returns(inner),
        Stmt::If(_, then, Some(otherwise)) => {
            always_returns(std::slice::from_ref(then)) && always_returns(std::slice::from_ref(otherwise))
        }
        // `(while #t …)` without `break` never falls through.
        Stmt::While(Expr { kind: ExprKind::Bool(true), .. }, body) => !contains_break(body),
        _ => false,
    })
}

fn contains_break(body: &[Stmt]) -> bool {
    body.iter().any(|stmt| match stmt {
        Stmt::Break => true,
        Stmt::Block(inner) => contains_break(inner),
        Stmt::If(_, then, otherwise) => {
            contains_break(std::slice::from_ref(then))
                || otherwise.as_ref().is_some_and(|otherwise| contains_break(std::slice::from_ref(otherwise)))
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sessions keep every function's typed body, and every expression is as large as the
    /// largest kind: large payloads are boxed (`CallExpr`, `AsmExpr`, `FunctionAddress`). An
    /// expression is 80 bytes and a statement 120 (176 and 216 before the boxes).
    #[test]
    fn expressions_stay_small() {
        assert!(std::mem::size_of::<Expr>() <= 80, "{}", std::mem::size_of::<Expr>());
        assert!(std::mem::size_of::<Stmt>() <= 120, "{}", std::mem::size_of::<Stmt>());
    }
}
