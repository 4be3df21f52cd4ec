//! Rhai data and C-Lisp forms, each into the other: a list is an array, a symbol a `Sym`, a
//! literal itself; `,x` is `[unquote, x]`. Conversions read values in place (a `Dynamic`
//! array's clone is deep) and share symbol texts (`Sym` and `SexpKind::Symbol` hold one
//! `Rc<str>`), so generated code costs no copies of names.

use std::fmt;
use std::rc::Rc;

use rhai::{Array, Dynamic, EvalAltResult, Position, INT};

use crate::reader::{self, Sexp, SexpKind, SourceId, Span};

/// A C-Lisp symbol as a Rhai value (`sym("x")`). Its text is shared: Rhai copies values on
/// every use, and generated code passes the same few symbols around many times.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Sym(pub Rc<str>);

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A C `double` as a Rhai value (a header's `M_PI`, or `double(x)`): arithmetic on it stays a
/// `double`, as in C, and it unquotes as `(double X)` where a Rhai float unquotes as a `float`
/// literal (§3.6).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub(crate) struct CDouble(pub f64);

pub(super) fn rhai_error(message: impl Into<String>) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(Dynamic::from(message.into()), Position::NONE))
}

pub(super) const NO_SPAN: Span = Span { source: SourceId(u32::MAX), start: 0, end: 0 };

pub(super) fn parse_text(text: &str) -> Result<Array, Box<EvalAltResult>> {
    Ok(parse_forms(text)?.iter().map(to_dynamic).collect())
}

pub(super) fn parse_forms(text: &str) -> Result<Vec<Sexp>, Box<EvalAltResult>> {
    reader::read_template(NO_SPAN.source, text).map_err(|diagnostics| {
        rhai_error(format!(
            "parse: {}",
            diagnostics.first().map_or("bad syntax", |diagnostic| diagnostic.message.as_str())
        ))
    })
}

/// A form as Rhai data: lists become arrays, symbols `Sym`, literals themselves.
pub(crate) fn to_dynamic(form: &Sexp) -> Dynamic {
    let wrap = |head: &str, inner: &Sexp| Dynamic::from_array(vec![Dynamic::from(Sym(head.into())), to_dynamic(inner)]);
    match &form.kind {
        SexpKind::List(items) => Dynamic::from_array(items.iter().map(to_dynamic).collect()),
        SexpKind::Symbol(name) => Dynamic::from(Sym(name.clone())),
        SexpKind::Int(value) => Dynamic::from(*value as INT),
        SexpKind::Float(value) => Dynamic::from(*value),
        SexpKind::Bool(value) => Dynamic::from(*value),
        SexpKind::Str(bytes) => Dynamic::from(String::from_utf8_lossy(bytes).into_owned()),
        SexpKind::Keyword(name) => Dynamic::from(Sym(format!("#:{name}").into())),
        SexpKind::Quasiquote(inner) => wrap("quasiquote", inner),
        SexpKind::Unquote(inner) => wrap("unquote", inner),
        SexpKind::UnquoteSplicing(inner) => wrap("unquote-splicing", inner),
    }
}

pub(super) fn rhai_type_name(value: &Dynamic) -> String {
    let name = value.type_name();
    match name {
        _ if value.is_map() => "map".into(),
        _ if value.is_char() => "char".into(),
        _ if value.is::<rhai::FnPtr>() => "function pointer".into(),
        _ => name.rsplit("::").next().unwrap_or(name).to_string(),
    }
}

/// Rhai data back to a form; every node gets `span` (the unquote that produced it).
/// Values are read in place: cloning a `Dynamic` array copies it deeply, which made
/// converting a deep generated tree quadratic.
pub(crate) fn to_sexp(value: &Dynamic, span: Span) -> Result<Sexp, String> {
    let make = |kind| Ok(Sexp { kind, span });
    if let Ok(array) = value.as_array_ref() {
        if let [head, inner] = array.as_slice() {
            let wrapper: Option<fn(Box<Sexp>) -> SexpKind> =
                head.read_lock::<Sym>().and_then(|symbol| match &*symbol.0 {
                    "quasiquote" => Some(SexpKind::Quasiquote as fn(Box<Sexp>) -> SexpKind),
                    "unquote" => Some(SexpKind::Unquote as fn(Box<Sexp>) -> SexpKind),
                    "unquote-splicing" => Some(SexpKind::UnquoteSplicing as fn(Box<Sexp>) -> SexpKind),
                    _ => None,
                });
            if let Some(kind) = wrapper {
                return make(kind(Box::new(to_sexp(inner, span)?)));
            }
        }
        let items = array.iter().map(|item| to_sexp(item, span)).collect::<Result<_, _>>()?;
        return make(SexpKind::List(items));
    }
    if let Some(symbol) = value.read_lock::<Sym>() {
        return make(SexpKind::Symbol(symbol.0.clone()));
    }
    if let Some(double) = value.read_lock::<CDouble>() {
        let head = Sexp { kind: SexpKind::Symbol("double".into()), span };
        return make(SexpKind::List(vec![head, Sexp { kind: SexpKind::Float(double.0), span }]));
    }
    if let Ok(value) = value.as_int() {
        return make(SexpKind::Int(value as i128));
    }
    if let Ok(value) = value.as_float() {
        return make(SexpKind::Float(value));
    }
    if let Ok(value) = value.as_bool() {
        return make(SexpKind::Bool(value));
    }
    if let Ok(text) = value.as_immutable_string_ref() {
        return make(SexpKind::Str(text.as_bytes().to_vec()));
    }
    if value.is_unit() {
        return Err("the Rhai value `()` has no C-Lisp form".into());
    }
    Err(format!("Rhai value of type {} has no C-Lisp form", rhai_type_name(value)))
}
