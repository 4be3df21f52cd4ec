//! What the checker's files share: the checkers of a cell (`CellChecker`) and of a body
//! (`BodyChecker`), the cell's overlay of new names, the limits, and the helpers every concern
//! uses (diagnostics of a kind, prototypes, `define…` heads, typed literals). Each concern adds
//! `impl` blocks of its own in its file (`cell`, `collect`, `body`, `expr`, `call`, `gpu`, `asm`)
//! and imports only this file and the leaves it needs, so `check/` has no import cycle.

use std::collections::{BTreeSet, HashMap};

use super::env::{Env, FunctionEntry};
use crate::diagnostics::{Diagnostic, Kind};
use crate::intrinsics::{IntrinsicError, IntrinsicFacts};
use crate::jit::library::Libraries;
use crate::reader::{Sexp, SexpKind, Span};
use crate::tree::{Dialect, Expr, ExprKind, GlobalEntry, Local, Placement, TypedCell};
use crate::types::{StructEntry, Ty};

pub(super) const MAX_ERRORS: usize = 20;

/// The largest global or top-level value in bytes: the session holds globals in its memory and
/// copies a top-level value out to print it.
pub(crate) const MAX_VALUE_BYTES: u64 = 1 << 30;

/// The largest local variable or by-value parameter in bytes: they live in the frame, and
/// compiled code runs on a 64 MiB stack.
pub(crate) const MAX_LOCAL_BYTES: u64 = 16 << 20;

/// The most static shared memory one kernel may use (CUDA's limit without opting in).
pub(crate) const MAX_SHARED_BYTES: u64 = 48 << 10;

/// Names the cell defines, seen before the session's.
#[derive(Default)]
pub(super) struct Overlay {
    pub(super) functions: HashMap<String, FunctionEntry>,
    pub(super) globals: HashMap<String, GlobalEntry>,
    pub(super) structs: HashMap<String, StructEntry>,
    /// Defined (with a body) in this cell, with the span of the definition.
    pub(super) defined_here: HashMap<String, Span>,
}

pub(super) fn syntax(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(Kind::Syntax, message).with_label(span, "")
}

/// Checks one cell against the session: collects its declarations, checks its bodies, and
/// re-checks the session functions that what it redefines touches.
pub(super) struct CellChecker<'a> {
    pub(super) env: &'a Env,
    /// Where declarations' symbols are found (`Libraries::resolve`).
    pub(super) symbols: &'a Libraries,
    pub(super) errors: Vec<Diagnostic>,
    pub(super) cell: TypedCell,
    pub(super) overlay: Overlay,
    /// Inline functions called by code checked in this cell.
    pub(super) inline_used: BTreeSet<String>,
    /// What LLVM said about each intrinsic declaration checked in this cell, by name.
    pub(super) intrinsics: HashMap<String, Result<IntrinsicFacts, IntrinsicError>>,
}

/// A top-level form of the cell, wrappers removed, with the rules it follows.
#[derive(Clone, Copy)]
pub(super) struct TopForm<'f> {
    pub form: &'f Sexp,
    pub dialect: Dialect,
}

/// Checks one function body (or a top-level item's statements) inside a cell.
pub(super) struct BodyChecker<'c, 'a> {
    pub(super) cell: &'c mut CellChecker<'a>,
    pub(super) name: String,
    pub(super) ret: Ty,
    pub(super) top_level: bool,
    pub(super) locals: Vec<Local>,
    pub(super) scopes: Vec<HashMap<String, usize>>,
    pub(super) loop_depth: usize,
    pub(super) uses: BTreeSet<String>,
    pub(super) warnings: Vec<Diagnostic>,
    pub(super) reported_unknown: BTreeSet<String>,
    /// Statements and expressions being checked, outermost first (see `MAX_NESTING`).
    pub(super) nesting: usize,
    pub(super) reported_nesting: bool,
    /// The body is a kernel's: host-only constructs are errors at once.
    pub(super) kernel: bool,
    /// What of the body needs the GPU or the host.
    pub(super) placement: Placement,
    /// C-Lisp's rules, or a Brilisp program's, where a global's name is its address.
    pub(super) dialect: Dialect,
}

impl<'c, 'a> BodyChecker<'c, 'a> {
    pub(super) fn new(cell: &'c mut CellChecker<'a>, name: String, ret: Ty, top_level: bool) -> Self {
        BodyChecker {
            cell,
            name,
            ret,
            top_level,
            locals: Vec::new(),
            scopes: vec![HashMap::new()],
            loop_depth: 0,
            uses: BTreeSet::new(),
            warnings: Vec::new(),
            reported_unknown: BTreeSet::new(),
            nesting: 0,
            reported_nesting: false,
            kernel: false,
            placement: Placement::default(),
            dialect: Dialect::CLisp,
        }
    }
}

/// The type `(declare-global NAME TYPE)` gives NAME, in a body or at the top level (cuda-lisp's
/// form): TYPE must be a pointer, and it points into GPU global memory (address space 1).
pub(super) fn global_memory_pointer(ty: Ty, span: Span) -> Result<Ty, Diagnostic> {
    match ty {
        Ty::Ptr(pointee, _) => Ok(Ty::Ptr(pointee, 1)),
        _ => Err(type_error(span, "`declare-global` declares a pointer")),
    }
}

pub(super) fn type_error(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(Kind::Type, message).with_label(span, "")
}

pub(super) fn arity(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(Kind::Arity, message).with_label(span, "")
}

/// The note after a type mismatch: the cast that converts `found` to `wanted`, if one does.
pub(crate) fn cast_note(found: &Ty, wanted: &Ty) -> String {
    let cast = match (found, wanted) {
        (Ty::Int(from), Ty::Int(to)) if from < to => Some("sext"),
        (Ty::Int(_), Ty::Int(_)) => Some("trunc"),
        (Ty::Bool, Ty::Int(_)) => Some("zext"),
        (Ty::Int(_), Ty::Bool) => Some("trunc"),
        (Ty::Float, Ty::Double) => Some("fpext"),
        (Ty::Double, Ty::Float) => Some("fptrunc"),
        (Ty::Int(_), Ty::Float | Ty::Double) => Some("sitofp"),
        (Ty::Float | Ty::Double, Ty::Int(_)) => Some("fptosi"),
        (Ty::Int(_), Ty::Ptr(..)) => Some("inttoptr"),
        (Ty::Ptr(..), Ty::Int(_)) => Some("ptrtoint"),
        (Ty::Ptr(_, a), Ty::Ptr(_, b)) if a == b => Some("bitcast"),
        (Ty::Ptr(..), Ty::Ptr(..)) => Some("addrspacecast"),
        _ => None,
    };
    match cast {
        Some(cast) => format!("C-Lisp converts only with explicit casts, e.g. ({cast} e {wanted})"),
        None => "C-Lisp converts only with explicit casts, and none converts these types".to_string(),
    }
}

/// The parts of a function head `((NAME RET) (P T)… [...])`.
pub(super) struct Prototype<'f> {
    pub(super) name: String,
    pub(super) name_span: Span,
    pub(super) ret: &'f Sexp,
    pub(super) params: Vec<(String, Span, &'f Sexp)>,
    /// The Lapis annotation words after each parameter's type (`in n`, `handle`), if any.
    pub(super) annotations: Vec<&'f [Sexp]>,
    pub(super) variadic: bool,
}

pub(super) fn parse_prototype(form: &Sexp) -> Result<Prototype<'_>, Diagnostic> {
    let shape = || syntax(form.span, "a prototype is `((NAME RESULT-TYPE) (PARAM TYPE)…)`");
    let items = form.list().ok_or_else(shape)?;
    let (first, rest) = items.split_first().ok_or_else(shape)?;
    let [name, ret] = first.list().ok_or_else(shape)? else { return Err(shape()) };
    let name_text = name.symbol().ok_or_else(|| syntax(name.span, "a function name must be a symbol"))?;
    let mut params = Vec::new();
    let mut annotations = Vec::new();
    let mut variadic = false;
    for (index, param) in rest.iter().enumerate() {
        if param.symbol() == Some("...") {
            if index + 1 != rest.len() {
                return Err(syntax(param.span, "`...` must come last in a prototype"));
            }
            variadic = true;
            continue;
        }
        let pair = param.list().unwrap_or(&[]);
        // Lapis annotations `(P T in N)` and `(P T handle)` only inform GPU launches.
        let valid = match pair.len() {
            2 => true,
            3 => pair[2].symbol() == Some("handle"),
            4 => matches!(pair[2].symbol(), Some("in" | "out" | "inout")),
            _ => false,
        };
        let param_name = pair.first().and_then(Sexp::symbol);
        match (valid, param_name) {
            (true, Some(param_name)) => {
                params.push((param_name.to_string(), pair[0].span, &pair[1]));
                annotations.push(&pair[2..]);
            }
            _ if pair.len() > 2 => {
                return Err(syntax(param.span, "a parameter is `(NAME TYPE)`")
                    .with_note("a Lapis annotation is (NAME TYPE in|out|inout SIZE) or (NAME TYPE handle)"))
            }
            _ => return Err(syntax(param.span, "a parameter is `(NAME TYPE)`")),
        }
    }
    Ok(Prototype { name: name_text.to_string(), name_span: name.span, ret, params, annotations, variadic })
}

/// The attributes of a `define…` head.
#[derive(Clone, Copy, Default)]
pub(super) struct Attributes {
    pub(super) inline: bool,
    pub(super) brilisp: bool,
    pub(super) kernel: bool,
}

/// Splits a `define…` head into its attributes: `define-kernel` (cuda-lisp) is one too.
pub(super) fn define_attributes(head: &str) -> Option<Attributes> {
    let mut parts = head.split('-');
    if parts.next() != Some("define") {
        return None;
    }
    let mut attributes = Attributes::default();
    for part in parts {
        match part {
            "inline" if !attributes.inline => attributes.inline = true,
            "brilisp" if !attributes.brilisp => attributes.brilisp = true,
            "kernel" if !attributes.kernel => attributes.kernel = true,
            _ => return None,
        }
    }
    Some(attributes)
}

/// A literal for a destination of type `ty` under `dialect`'s rules. A Brilisp program's
/// `const` wraps an integer to the destination's width (llama.lisp writes `i8 -129` into its
/// LLVM text, which LLVM reads as 127); otherwise the typed-literal rule holds.
pub(crate) fn literal_of(dialect: Dialect, literal: &Sexp, ty: &Ty) -> Result<Expr, Diagnostic> {
    match (dialect, &literal.kind, ty) {
        (Dialect::BrilispProgram, SexpKind::Int(value), Ty::Int(bits)) => {
            // Keep the low `bits` bits and sign-extend them: two's complement wrapping.
            let unused = 64 - bits;
            let wrapped = ((*value as i64) << unused) >> unused;
            Ok(Expr { kind: ExprKind::Int(wrapped), ty: ty.clone(), span: literal.span })
        }
        _ => typed_literal(literal, ty),
    }
}

/// A literal checked against a wanted type: the typed-literal rule `(T LIT)`.
pub(crate) fn typed_literal(literal: &Sexp, ty: &Ty) -> Result<Expr, Diagnostic> {
    let span = literal.span;
    let make = |kind| Ok(Expr { kind, ty: ty.clone(), span });
    match (&literal.kind, ty) {
        (SexpKind::Int(value), Ty::Int(bits)) => {
            let (min, max) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
            if *value < min || *value > max {
                return Err(type_error(span, format!("{value} does not fit in `{ty}` ({min} to {max})")));
            }
            make(ExprKind::Int(*value as i64))
        }
        (SexpKind::Int(value), Ty::Bool) if *value == 0 || *value == 1 => make(ExprKind::Bool(*value == 1)),
        (SexpKind::Bool(value), Ty::Bool) => make(ExprKind::Bool(*value)),
        (SexpKind::Int(value), Ty::Float) => make(ExprKind::Float(*value as f32 as f64)),
        (SexpKind::Int(value), Ty::Double) => make(ExprKind::Float(*value as f64)),
        (SexpKind::Float(value), Ty::Float) => {
            if value.is_finite() && (*value as f32).is_infinite() {
                return Err(type_error(
                    span,
                    format!("{value:e} is out of range for `float` (at most {:e} in magnitude)", f32::MAX),
                )
                .with_note("write (double …) for a double"));
            }
            make(ExprKind::Float(*value as f32 as f64))
        }
        (SexpKind::Float(value), Ty::Double) => make(ExprKind::Float(*value)),
        (SexpKind::Float(_), Ty::Int(_)) => Err(type_error(span, format!("a float literal cannot be `{ty}`"))
            .with_note(format!("convert with (fptosi e {ty})"))),
        _ => Err(type_error(span, format!("`{literal}` is not a literal of type `{ty}`"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceId;

    #[test]
    fn brilisp_program_constants_wrap_to_the_destination() {
        let wrapped = |value: i128, bits: u32| {
            let literal = Sexp { kind: SexpKind::Int(value), span: Span::new(SourceId(0), 0, 0) };
            match literal_of(Dialect::BrilispProgram, &literal, &Ty::Int(bits)).map(|expr| expr.kind) {
                Ok(ExprKind::Int(value)) => value,
                other => panic!("{value} into int{bits}: {other:?}"),
            }
        };
        assert_eq!(wrapped(200, 8), -56);
        assert_eq!(wrapped(-129, 8), 127);
        assert_eq!(wrapped(65535, 16), -1);
        assert_eq!(wrapped(2147483648, 32), -2147483648);
        assert_eq!(wrapped(9223372036854775808, 64), i64::MIN);
        assert_eq!(wrapped(-9223372036854775809, 64), i64::MAX);
        assert_eq!(wrapped(-5, 32), -5);
        // C-Lisp's typed-literal rule refuses what does not fit.
        let literal = Sexp { kind: SexpKind::Int(200), span: Span::new(SourceId(0), 0, 0) };
        assert!(literal_of(Dialect::CLisp, &literal, &Ty::Int(8)).is_err());
    }

    #[test]
    fn cast_notes_name_the_conversion() {
        assert_eq!(
            cast_note(&Ty::Int(32), &Ty::Int(64)),
            "C-Lisp converts only with explicit casts, e.g. (sext e int64)"
        );
        assert_eq!(
            cast_note(&Ty::Float, &Ty::Double),
            "C-Lisp converts only with explicit casts, e.g. (fpext e double)"
        );
        assert_eq!(
            cast_note(&Ty::Bool, &Ty::Float),
            "C-Lisp converts only with explicit casts, and none converts these types"
        );
    }
}
