//! Types: C-Lisp's types, their spellings, and reading them from forms.

use std::fmt;
use std::rc::Rc;

use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::{Sexp, SexpKind};

/// A C-Lisp type. Equality is structural; structs are nominal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ty {
    Bool,
    /// Bit width: 8, 16, 32 or 64.
    Int(u32),
    Float,
    Double,
    Void,
    /// Pointee and address space.
    Ptr(Rc<Ty>, u32),
    Arr(u64, Rc<Ty>),
    Struct(Rc<str>),
    /// `(gpu-buf T)`: a host handle to a device buffer of T (held as an `i64`).
    GpuBuf(Rc<Ty>),
    /// `encoder`: a handle to a command buffer being encoded (docs/language.md §7.8).
    Encoder,
    /// `fence`: a handle to a submission, to await (docs/language.md §7.8).
    Fence,
}

pub(crate) const INT: Ty = Ty::Int(32);
pub(crate) const INT64: Ty = Ty::Int(64);

impl Ty {
    pub fn ptr(pointee: Ty) -> Ty {
        Ty::Ptr(Rc::new(pointee), 0)
    }

    pub fn is_int(&self) -> bool {
        matches!(self, Ty::Int(_))
    }

    pub fn is_float(&self) -> bool {
        matches!(self, Ty::Float | Ty::Double)
    }

    pub fn is_ptr(&self) -> bool {
        matches!(self, Ty::Ptr(..))
    }

    /// Integer or bool: the types the integer casts accept.
    pub fn is_int_or_bool(&self) -> bool {
        matches!(self, Ty::Int(_) | Ty::Bool)
    }

    pub fn bits(&self) -> u32 {
        match self {
            Ty::Bool => 1,
            Ty::Int(bits) => *bits,
            Ty::Float => 32,
            Ty::Double => 64,
            _ => 64,
        }
    }

    pub fn pointee(&self) -> Option<&Ty> {
        match self {
            Ty::Ptr(pointee, _) => Some(pointee),
            _ => None,
        }
    }

    pub fn is_scalar(&self) -> bool {
        matches!(self, Ty::Bool | Ty::Int(_) | Ty::Float | Ty::Double | Ty::Ptr(..))
    }

    /// Whether values of this type can be stored in a variable (not void).
    pub fn is_value(&self) -> bool {
        !matches!(self, Ty::Void)
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Bool => f.write_str("bool"),
            Ty::Int(32) => f.write_str("int"),
            Ty::Int(bits) => write!(f, "int{bits}"),
            Ty::Float => f.write_str("float"),
            Ty::Double => f.write_str("double"),
            Ty::Void => f.write_str("void"),
            Ty::Ptr(pointee, 0) => write!(f, "(ptr {pointee})"),
            Ty::Ptr(pointee, space) => write!(f, "(ptr {pointee} (addrspace {space}))"),
            Ty::Arr(length, element) => write!(f, "(arr {length} {element})"),
            Ty::Struct(name) => write!(f, "(struct {name})"),
            Ty::GpuBuf(element) => write!(f, "(gpu-buf {element})"),
            Ty::Encoder => f.write_str("encoder"),
            Ty::Fence => f.write_str("fence"),
        }
    }
}

/// A function's type: parameter types, result, C variadic tail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Signature {
    pub params: Vec<Ty>,
    pub ret: Ty,
    pub variadic: bool,
}

impl Signature {
    /// Whether a parameter or the result is a struct or an array by value, which the C
    /// convention passes differently from C-Lisp's own calls.
    pub(crate) fn has_aggregates(&self) -> bool {
        self.params.iter().chain([&self.ret]).any(|ty| matches!(ty, Ty::Struct(_) | Ty::Arr(..)))
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (index, param) in self.params.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{param}")?;
        }
        if self.variadic {
            f.write_str(if self.params.is_empty() { "..." } else { ", ..." })?;
        }
        write!(f, ") -> {}", self.ret)
    }
}

/// The scalar type named by a typed-literal or cast head such as `int64`.
pub(crate) fn scalar_type_name(name: &str) -> Option<Ty> {
    Some(match name {
        "bool" => Ty::Bool,
        "int8" => Ty::Int(8),
        "int16" => Ty::Int(16),
        "int" | "int32" => Ty::Int(32),
        "int64" => Ty::Int(64),
        "float" => Ty::Float,
        "double" => Ty::Double,
        _ => return None,
    })
}

/// How deeply type forms may nest (`(ptr (ptr …))`): reading, printing and laying out types
/// recurse over them.
const MAX_TYPE_NESTING: usize = 32;

/// Reads a type form. `known_struct` says whether a struct name exists.
pub(crate) fn parse_type(form: &Sexp, known_struct: &dyn Fn(&str) -> bool) -> Result<Ty, Diagnostic> {
    parse_type_at(form, known_struct, 0)
}

fn parse_type_at(form: &Sexp, known_struct: &dyn Fn(&str) -> bool, depth: usize) -> Result<Ty, Diagnostic> {
    if depth > MAX_TYPE_NESTING {
        return Err(Diagnostic::error(
            Kind::Limit,
            format!("this type nests more than {MAX_TYPE_NESTING} levels deep"),
        )
        .with_label(form.span, ""));
    }
    let parse_type = |inner: &Sexp, known_struct: &dyn Fn(&str) -> bool| parse_type_at(inner, known_struct, depth + 1);
    let bad = |message: String| Diagnostic::error(Kind::Type, message).with_label(form.span, "");
    match &form.kind {
        SexpKind::Symbol(name) => match &**name {
            "void" => Ok(Ty::Void),
            "encoder" => Ok(Ty::Encoder),
            "fence" => Ok(Ty::Fence),
            _ => scalar_type_name(name).ok_or_else(|| {
                bad(format!("`{name}` is not a type")).with_note(
                    "types are bool int8 int16 int int32 int64 float double void (ptr T) (arr N T) (struct S)",
                )
            }),
        },
        SexpKind::List(items) => {
            let head = items.first().and_then(Sexp::symbol).unwrap_or("");
            match (head, items.len()) {
                ("ptr", 2) => Ok(Ty::Ptr(Rc::new(parse_type(&items[1], known_struct)?), 0)),
                ("ptr", 3) => {
                    let space = parse_addrspace(&items[2])?;
                    Ok(Ty::Ptr(Rc::new(parse_type(&items[1], known_struct)?), space))
                }
                ("arr", 3) => {
                    let length = match items[1].kind {
                        SexpKind::Int(length) if length > 0 && length <= u32::MAX as i128 => length as u64,
                        SexpKind::Int(length) if length > 0 => {
                            return Err(Diagnostic::error(
                                Kind::Limit,
                                format!("an array length is at most {}, found {length}", u32::MAX),
                            )
                            .with_label(items[1].span, ""))
                        }
                        _ => {
                            return Err(Diagnostic::error(
                                Kind::Type,
                                "an array length must be a positive integer literal",
                            )
                            .with_label(items[1].span, ""))
                        }
                    };
                    let element = parse_type(&items[2], known_struct)?;
                    if !element.is_value() {
                        return Err(Diagnostic::error(Kind::Type, "arrays of `void` are not allowed")
                            .with_label(items[2].span, ""));
                    }
                    Ok(Ty::Arr(length, Rc::new(element)))
                }
                ("struct", 2) => match items[1].symbol() {
                    Some(name) if known_struct(name) => Ok(Ty::Struct(name.into())),
                    Some(name) => Err(Diagnostic::error(Kind::UnknownName, format!("no struct named `{name}`"))
                        .with_label(items[1].span, "")
                        .with_note("define it first with (define-struct NAME (FIELD TYPE)…)")),
                    None => Err(bad("a struct type is `(struct NAME)`".into())),
                },
                ("gpu-buf", 2) => {
                    let element = parse_type(&items[1], known_struct)?;
                    if !is_buffer_element(&element) {
                        return Err(bad(format!("a device buffer holds integers or floats, not `{element}`"))
                            .with_note("buffers are (gpu-buf T) with T one of int8 int16 int int64 float double"));
                    }
                    Ok(Ty::GpuBuf(Rc::new(element)))
                }
                _ => Err(bad(format!("`{form}` is not a type")).with_note(
                    "types are bool int8 int16 int int32 int64 float double void (ptr T) (arr N T) (struct S)",
                )),
            }
        }
        _ => Err(bad(format!("`{form}` is not a type"))),
    }
}

/// The element types a device buffer may hold: the numbers a kernel reads and writes.
pub(crate) fn is_buffer_element(ty: &Ty) -> bool {
    matches!(ty, Ty::Int(_) | Ty::Float | Ty::Double)
}

/// `(addrspace N)`.
pub(crate) fn parse_addrspace(form: &Sexp) -> Result<u32, Diagnostic> {
    if let Some([head, number]) = form.list() {
        if head.symbol() == Some("addrspace") {
            if let SexpKind::Int(space @ 0..=255) = number.kind {
                return Ok(space as u32);
            }
        }
    }
    Err(Diagnostic::error(Kind::Type, "expected `(addrspace N)` with N from 0 to 255").with_label(form.span, ""))
}

/// A struct as the session knows it; its layout follows from the fields (`value::layout`).
#[derive(Clone, Debug)]
pub(crate) struct StructEntry {
    /// `None` for an opaque struct.
    pub fields: Option<Vec<(String, Ty)>>,
}
