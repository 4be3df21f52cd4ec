//! Templates: `quote`'s text read once and compiled (`Piece`), then filled from a map — holes
//! `,NAME` and `,@NAME` at quasiquote level 1, and a fresh gensym per fill for every `x#` —
//! and `fill` over a form already built; `quote_each` fills one template many times into one
//! array.

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

use rhai::{Array, Dynamic, EvalAltResult, Map, Position, INT};

use super::convert::{parse_forms, rhai_error, to_dynamic, Sym};
use super::engine::TIME;
use crate::reader::{Sexp, SexpKind};

/// `quote`'s templates, read and compiled once per text: a generator calls `quote` with the
/// same text in a loop, and reading it again each time cost as much as filling it.
#[derive(Default)]
pub(super) struct Templates {
    parsed: HashMap<String, Rc<Piece>>,
}

impl Templates {
    /// Enough for every template of a session's macros; past it the cache starts over, so a
    /// script quoting computed texts cannot grow it without bound.
    const CAPACITY: usize = 1024;

    pub(super) fn get(&mut self, text: &str) -> Result<Rc<Piece>, Box<EvalAltResult>> {
        if let Some(template) = self.parsed.get(text) {
            return Ok(template.clone());
        }
        let mut forms = parse_forms(text)?;
        if forms.len() != 1 {
            return Err(rhai_error(format!("quote: the template must be one form, found {}", forms.len())));
        }
        if self.parsed.len() >= Self::CAPACITY {
            self.parsed.clear();
        }
        let template = Rc::new(compile_form(&forms.remove(0), 1));
        self.parsed.insert(text.to_string(), template.clone());
        Ok(template)
    }
}

/// Fills a template: level-1 `(unquote NAME)` from the map, `(unquote-splicing NAME)` spliced,
/// and every symbol ending in `#` replaced by one fresh gensym per call.
pub(super) fn fill(form: Dynamic, map: &Map, counter: &Rc<Cell<u64>>) -> Result<Dynamic, Box<EvalAltResult>> {
    let mut fresh: HashMap<String, Sym> = HashMap::new();
    fill_level(form, map, counter, &mut fresh, 1)
}

pub(super) fn unquote_name(value: &Dynamic, head: &str) -> Option<String> {
    let array = value.as_array_ref().ok()?;
    match array.as_slice() {
        [first, name] if first.read_lock::<Sym>().is_some_and(|symbol| &*symbol.0 == head) => {
            name.read_lock::<Sym>().map(|symbol| symbol.0.to_string())
        }
        _ => None,
    }
}

pub(super) fn lookup_hole(map: &Map, name: &str) -> Result<Dynamic, Box<EvalAltResult>> {
    map.get(name)
        .or_else(|| map.get(name.replace('-', "_").as_str()))
        .cloned()
        .ok_or_else(|| rhai_error(format!("fill: the template uses `{name}`, which the map does not have")))
}

/// A `,@NAME` hole: the elements of NAME's array go into `out` (nothing for `()`).
pub(super) fn splice_hole(map: &Map, name: &str, out: &mut Array) -> Result<(), Box<EvalAltResult>> {
    let value = lookup_hole(map, name)?;
    if value.is_unit() {
        return Ok(());
    }
    let elements = value.into_array().map_err(|name| rhai_error(format!("fill: `,@` needs an array, found {name}")))?;
    out.extend(elements);
    Ok(())
}

pub(super) fn fill_level(
    form: Dynamic,
    map: &Map,
    counter: &Rc<Cell<u64>>,
    fresh: &mut HashMap<String, Sym>,
    level: usize,
) -> Result<Dynamic, Box<EvalAltResult>> {
    if let Some(symbol) = form.read_lock::<Sym>().map(|symbol| symbol.clone()) {
        return Ok(gensym(&symbol.0, counter, fresh).map_or(form, Dynamic::from));
    }
    if !form.is_array() {
        return Ok(form);
    }
    if level == 1 {
        if let Some(name) = unquote_name(&form, "unquote") {
            return lookup_hole(map, &name);
        }
    }
    let array = form.into_array().unwrap_or_default();
    let head = array.first().and_then(|head| head.read_lock::<Sym>().map(|symbol| symbol.0.to_string()));
    // A nested quasiquote raises the level of its operand; an unquote lowers it.
    let operand_level = match head.as_deref() {
        Some("quasiquote") if array.len() == 2 => level + 1,
        Some("unquote" | "unquote-splicing") if array.len() == 2 => level.saturating_sub(1).max(1),
        _ => level,
    };
    let mut out = Array::new();
    for (index, item) in array.into_iter().enumerate() {
        let item_level = if index == 1 { operand_level } else { level };
        if item_level == 1 && (index > 0 || head.is_none()) {
            if let Some(name) = unquote_name(&item, "unquote-splicing") {
                splice_hole(map, &name, &mut out)?;
                continue;
            }
        }
        out.push(fill_level(item, map, counter, fresh, item_level)?);
    }
    Ok(Dynamic::from_array(out))
}

/// A `quote` template compiled for filling: `fill_level`'s rules applied once, when the text is
/// first quoted, so a fill only copies what is fixed and looks up what is not. A wrapper `,x`
/// (`SexpKind::Unquote`) reads as the array `[unquote, x]` that `to_dynamic` makes of it, and a
/// keyword as its symbol `#:key`.
#[derive(Debug)]
pub(super) enum Piece {
    /// Fixed: a symbol already made (a fill clones it, without building its name again), a
    /// literal, a wrapper's head.
    Leaf(Dynamic),
    /// `x#`: the fill's gensym for it.
    Gensym(String),
    /// A level-1 `,NAME`: the map's value.
    Hole(String),
    /// A level-1 `,@NAME` inside a list: the elements of the map's array.
    Splice(String),
    List(Vec<Piece>),
}

/// An element of a template list while it is compiled: a form, or the head symbol of a
/// wrapper (`quasiquote`, `unquote`, `unquote-splicing`).
#[derive(Clone, Copy)]
pub(super) enum TemplateItem<'f> {
    Head(&'static str),
    Form(&'f Sexp),
}

/// A form's text as a `Sym`: a symbol's name, or a keyword's `#:key`.
pub(super) fn symbol_text(form: &Sexp) -> Option<std::borrow::Cow<'_, str>> {
    match &form.kind {
        SexpKind::Symbol(name) => Some(std::borrow::Cow::Borrowed(&**name)),
        SexpKind::Keyword(name) => Some(format!("#:{name}").into()),
        _ => None,
    }
}

/// `unquote_name` over a template form: NAME if the form is `(head NAME)`.
pub(super) fn template_hole<'f>(form: &'f Sexp, head: &str) -> Option<std::borrow::Cow<'f, str>> {
    match &form.kind {
        SexpKind::Unquote(inner) if head == "unquote" => symbol_text(inner),
        SexpKind::UnquoteSplicing(inner) if head == "unquote-splicing" => symbol_text(inner),
        SexpKind::List(items) => match items.as_slice() {
            [first, name] if symbol_text(first).is_some_and(|text| text == head) => symbol_text(name),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a template symbol is a gensym request `x#`.
pub(super) fn is_gensym_name(name: &str) -> bool {
    name.strip_suffix('#').is_some_and(|stem| !stem.is_empty() && !stem.contains('#'))
}

pub(super) fn compile_form(form: &Sexp, level: usize) -> Piece {
    let (wrapper, inner) = match &form.kind {
        SexpKind::Symbol(name) if is_gensym_name(name) => return Piece::Gensym(name.to_string()),
        SexpKind::Symbol(name) => return Piece::Leaf(Dynamic::from(Sym(name.clone()))),
        SexpKind::List(items) => return compile_items(items.iter().map(TemplateItem::Form), form, level),
        SexpKind::Quasiquote(inner) => ("quasiquote", inner),
        SexpKind::Unquote(inner) => ("unquote", inner),
        SexpKind::UnquoteSplicing(inner) => ("unquote-splicing", inner),
        _ => return Piece::Leaf(to_dynamic(form)),
    };
    let items = [TemplateItem::Head(wrapper), TemplateItem::Form(inner)];
    compile_items(items.into_iter(), form, level)
}

pub(super) fn compile_items<'f>(
    items: impl ExactSizeIterator<Item = TemplateItem<'f>> + Clone,
    form: &Sexp,
    level: usize,
) -> Piece {
    if level == 1 {
        if let Some(name) = template_hole(form, "unquote") {
            return Piece::Hole(name.into_owned());
        }
    }
    let length = items.len();
    let head = match items.clone().next() {
        Some(TemplateItem::Head(head)) => Some(std::borrow::Cow::Borrowed(head)),
        Some(TemplateItem::Form(first)) => symbol_text(first),
        None => None,
    };
    // A nested quasiquote raises the level of its operand; an unquote lowers it.
    let operand_level = match head.as_deref() {
        Some("quasiquote") if length == 2 => level + 1,
        Some("unquote" | "unquote-splicing") if length == 2 => level.saturating_sub(1).max(1),
        _ => level,
    };
    let mut pieces = Vec::with_capacity(length);
    for (index, item) in items.enumerate() {
        let item_level = if index == 1 { operand_level } else { level };
        let item = match item {
            TemplateItem::Head(head) => {
                pieces.push(Piece::Leaf(Dynamic::from(Sym(head.into()))));
                continue;
            }
            TemplateItem::Form(item) => item,
        };
        if item_level == 1 && (index > 0 || head.is_none()) {
            if let Some(name) = template_hole(item, "unquote-splicing") {
                pieces.push(Piece::Splice(name.into_owned()));
                continue;
            }
        }
        pieces.push(compile_form(item, item_level));
    }
    Piece::List(pieces)
}

/// `quote`'s fill of a compiled template; every `x#` of one fill gets the same gensym.
pub(super) fn fill_template(
    template: &Piece,
    map: &Map,
    counter: &Rc<Cell<u64>>,
) -> Result<Dynamic, Box<EvalAltResult>> {
    let mut fresh: HashMap<String, Sym> = HashMap::new();
    fill_piece(template, map, counter, &mut fresh)
}

pub(super) fn fill_piece(
    piece: &Piece,
    map: &Map,
    counter: &Rc<Cell<u64>>,
    fresh: &mut HashMap<String, Sym>,
) -> Result<Dynamic, Box<EvalAltResult>> {
    match piece {
        Piece::Leaf(value) => Ok(value.clone()),
        Piece::Gensym(name) => {
            Ok(gensym(name, counter, fresh).map_or_else(|| Dynamic::from(Sym(name.as_str().into())), Dynamic::from))
        }
        Piece::Hole(name) => lookup_hole(map, name),
        // Compiled only inside lists, where the list's fill splices it.
        Piece::Splice(name) => lookup_hole(map, name),
        Piece::List(pieces) => {
            let mut out = Array::with_capacity(pieces.len());
            for piece in pieces {
                match piece {
                    Piece::Splice(name) => splice_hole(map, name, &mut out)?,
                    piece => out.push(fill_piece(piece, map, counter, fresh)?),
                }
            }
            Ok(Dynamic::from_array(out))
        }
    }
}

/// `quote_each`: the template filled `count` times, its hole `hole` being 0, 1, … in turn and
/// the others from `map`, each fill with its own gensyms (as `count` calls of `quote`). Built
/// here in one array: a Rhai loop storing each form into an array paid for checking the whole
/// array's size after every store, and for a map per call. No Rhai operation runs here for the
/// script's own checks to see, so the interrupt and the `time-ms` limit (its own time) are
/// checked here, between two fills.
pub(super) fn quote_each(
    template: &Piece,
    mut map: Map,
    hole: &str,
    count: INT,
    counter: &Rc<Cell<u64>>,
    interrupt: &AtomicBool,
    time_limit: std::time::Duration,
) -> Result<Array, Box<EvalAltResult>> {
    if count < 0 {
        return Err(rhai_error(format!("quote_each: the count must not be negative, not {count}")));
    }
    let started = std::time::Instant::now();
    let mut forms = Array::with_capacity(count.min(1 << 16) as usize);
    for index in 0..count {
        if interrupt.load(Ordering::Relaxed) {
            return Err(EvalAltResult::ErrorTerminated(Dynamic::from("interrupted"), Position::NONE).into());
        }
        if index % 256 == 255 && started.elapsed() > time_limit {
            return Err(EvalAltResult::ErrorTerminated(Dynamic::from(TIME), Position::NONE).into());
        }
        map.insert(hole.into(), Dynamic::from(index));
        forms.push(fill_template(template, &map, counter)?);
    }
    Ok(forms)
}

/// The call's gensym for a template symbol `x#` (the same one for every `x#` of the call), or
/// `None` for any other symbol.
pub(super) fn gensym(name: &str, counter: &Rc<Cell<u64>>, fresh: &mut HashMap<String, Sym>) -> Option<Sym> {
    if !is_gensym_name(name) {
        return None;
    }
    let stem = &name[..name.len() - 1];
    let sym = fresh.entry(name.to_string()).or_insert_with(|| {
        counter.set(counter.get() + 1);
        Sym(format!("{stem}#{}", counter.get()).into())
    });
    Some(sym.clone())
}
