//! The code-building API registered into Rhai (docs/language.md §6.4): `sym`, `gensym`,
//! `parse`, `quote` and `quote_each` (over `template`), `fill`, `show`, `balanced`, what macros
//! may ask of the session (`signature`, `struct_fields`, `global_value`), of the machine
//! (`host_cpu`), and `include`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use rhai::{Array, Dynamic, Engine, EvalAltResult, Map, Position, FLOAT, INT};

use super::convert::{parse_text, rhai_error, to_dynamic, to_sexp, CDouble, Sym, NO_SPAN};
use super::engine::{Limits, SessionView};
use super::template::{fill, fill_template, quote_each, Templates};
use crate::header::{self, Included};
use crate::reader::{self, SourceId, Span};

/// Registers the API into `engine`.
pub(super) fn register(
    engine: &mut Engine,
    gensym: &Rc<Cell<u64>>,
    view: &Rc<RefCell<SessionView>>,
    included: &Rc<RefCell<Vec<Included>>>,
    interrupt: &Arc<AtomicBool>,
    limits: &Limits,
) {
    register_api(engine, gensym, view, interrupt, limits);
    register_include(engine, view, included, interrupt);
}

/// `include(headers, functions, structs, typedefs)`: llama.lisp's spelling of `(include …)`
/// (docs/language.md §9), returning the declarations to splice; empty lists ask for nothing of
/// their kind unless all three are empty.
fn register_include(
    engine: &mut Engine,
    view: &Rc<RefCell<SessionView>>,
    included: &Rc<RefCell<Vec<Included>>>,
    interrupt: &Arc<AtomicBool>,
) {
    let (view, included, interrupt) = (view.clone(), included.clone(), interrupt.clone());
    engine.register_fn(
        "include",
        move |headers: Array, functions: Array, structs: Array, typedefs: Array| -> Result<Array, Box<EvalAltResult>> {
            let names = |values: &Array| -> Result<Vec<String>, Box<EvalAltResult>> {
                values
                    .iter()
                    .map(|value| {
                        value
                            .clone()
                            .try_cast::<Sym>()
                            .map(|symbol| symbol.0.to_string())
                            .or_else(|| value.clone().into_string().ok())
                            .ok_or_else(|| rhai_error("include: names are symbols or strings"))
                    })
                    .collect()
            };
            let named = |values: &Array| -> Result<Option<Vec<header::Named>>, Box<EvalAltResult>> {
                let list = names(values)?;
                Ok(Some(
                    list.into_iter()
                        .map(|name| header::Named { name, span: Span::new(SourceId(u32::MAX), 0, 0) })
                        .collect(),
                ))
            };
            let unrestricted = functions.is_empty() && structs.is_empty() && typedefs.is_empty();
            let request = header::Request {
                headers: names(&headers)?,
                functions: if unrestricted { None } else { named(&functions)? },
                structs: if unrestricted { None } else { named(&structs)? },
                typedefs: if unrestricted { None } else { named(&typedefs)? },
                flags: Vec::new(),
                span: Span::new(SourceId(u32::MAX), 0, 0),
            };
            let defined = view.borrow().defined.clone();
            let mut result = header::include(&request, &defined, &interrupt).map_err(|diagnostic| {
                let notes: String = diagnostic.notes.iter().map(|note| format!("; {note}")).collect();
                rhai_error(format!("include: {}{notes}", diagnostic.message))
            })?;
            let forms = std::mem::take(&mut result.forms).iter().map(to_dynamic).collect();
            included.borrow_mut().push(result);
            Ok(forms)
        },
    );
}

fn register_api(
    engine: &mut Engine,
    gensym: &Rc<Cell<u64>>,
    view: &Rc<RefCell<SessionView>>,
    interrupt: &Arc<AtomicBool>,
    limits: &Limits,
) {
    engine.register_type_with_name::<Sym>("Sym");
    engine.register_fn("sym", |name: &str| -> Result<Sym, Box<EvalAltResult>> {
        if reader::is_symbol(name) {
            Ok(Sym(name.into()))
        } else {
            Err(rhai_error(format!("`{name}` is not a C-Lisp symbol")))
        }
    });
    engine.register_get("name", |symbol: &mut Sym| symbol.0.to_string());
    engine.register_fn("to_string", |symbol: &mut Sym| symbol.0.to_string());
    engine.register_fn("to_debug", |symbol: &mut Sym| symbol.0.to_string());
    engine.register_fn("==", |a: Sym, b: Sym| a == b);
    engine.register_fn("!=", |a: Sym, b: Sym| a != b);
    engine.register_fn("is_sym", |value: Dynamic| value.is::<Sym>());
    register_double(engine);
    let counter = gensym.clone();
    engine.register_fn("gensym", move |prefix: &str| {
        counter.set(counter.get() + 1);
        Sym(format!("{prefix}#{}", counter.get()).into())
    });
    engine.register_fn("parse", |text: &str| -> Result<Dynamic, Box<EvalAltResult>> {
        let mut forms = parse_text(text)?;
        match forms.len() {
            1 => Ok(forms.remove(0)),
            count => Err(rhai_error(format!("parse: expected one form, found {count}"))),
        }
    });
    engine.register_fn("parse_all", |text: &str| -> Result<Array, Box<EvalAltResult>> { parse_text(text) });
    let templates = Rc::new(RefCell::new(Templates::default()));
    let (counter, cache) = (gensym.clone(), templates.clone());
    engine.register_fn("quote", move |text: &str, map: Map| -> Result<Dynamic, Box<EvalAltResult>> {
        let template = cache.borrow_mut().get(text)?;
        fill_template(&template, &map, &counter)
    });
    let (counter, cache) = (gensym.clone(), templates.clone());
    engine.register_fn("quote", move |text: &str| -> Result<Dynamic, Box<EvalAltResult>> {
        let template = cache.borrow_mut().get(text)?;
        fill_template(&template, &Map::new(), &counter)
    });
    let (counter, cache, flag, most) = (gensym.clone(), templates, interrupt.clone(), limits.array_size);
    let time_limit = std::time::Duration::from_millis(limits.time_ms);
    engine.register_fn(
        "quote_each",
        move |text: &str, map: Map, hole: &str, count: INT| -> Result<Array, Box<EvalAltResult>> {
            // As Rhai's own arrays: at most `array-size` elements, no bound when it is 0.
            if most > 0 && usize::try_from(count).is_ok_and(|count| count > most) {
                return Err(EvalAltResult::ErrorDataTooLarge("Size of array".into(), Position::NONE).into());
            }
            let template = cache.borrow_mut().get(text)?;
            quote_each(&template, map, hole, count, &counter, &flag, time_limit)
        },
    );
    let counter = gensym.clone();
    engine.register_fn("fill", move |form: Dynamic, map: Map| fill(form, &map, &counter));
    engine.register_fn("show", |form: Dynamic| -> Result<String, Box<EvalAltResult>> {
        let sexp = to_sexp(&form, NO_SPAN).map_err(rhai_error)?;
        Ok(crate::reader::pretty::pretty(&sexp, 0))
    });
    engine.register_fn("balanced", balanced);
    engine.register_fn("host_cpu", super::host::host_cpu);
    let session = view.clone();
    engine.register_fn("signature", move |name: &str| {
        session.borrow().signatures.get(name).map_or(Dynamic::UNIT, to_dynamic)
    });
    let session = view.clone();
    engine.register_fn("struct_fields", move |name: &str| {
        session.borrow().struct_fields.get(name).map_or(Dynamic::UNIT, |fields| {
            let array: Array = fields
                .iter()
                .map(|(field, ty)| Dynamic::from_array(vec![Dynamic::from(Sym(field.as_str().into())), to_dynamic(ty)]))
                .collect();
            Dynamic::from_array(array)
        })
    });
    let session = view.clone();
    engine.register_fn("global_value", move |name: &str| {
        session.borrow().global_values.get(name).map_or(Dynamic::UNIT, to_dynamic)
    });
}

/// `balanced(op, forms)`: the forms joined into nested `(op x y)`, neighbours paired level by
/// level (an odd one out moves up a level), so the tree is balanced; one form gives itself,
/// none gives `()`. Done in Rust because in Rhai each pairing step copies or size-checks the
/// whole work list of forms.
fn balanced(op: Dynamic, forms: Array) -> Dynamic {
    let mut level = forms;
    while level.len() > 1 {
        let mut next = Array::with_capacity(level.len().div_ceil(2));
        let mut items = level.into_iter();
        while let Some(first) = items.next() {
            match items.next() {
                Some(second) => next.push(Dynamic::from_array(vec![op.clone(), first, second])),
                None => next.push(first),
            }
        }
        level = next;
    }
    level.pop().unwrap_or(Dynamic::UNIT)
}

/// The Rhai `double` type (`CDouble`): made by `double(x)` and by headers' `double` constants;
/// `+ - * / % **` with a double, a float or an integer give a double, comparisons a bool, and
/// Rhai's float functions (`sin`, `sqrt`, `floor`, …) keep it a double; `to_float()` is a Rhai
/// float again.
fn register_double(engine: &mut Engine) {
    engine.register_type_with_name::<CDouble>("double");
    engine.register_fn("double", |value: FLOAT| CDouble(value));
    engine.register_fn("double", |value: INT| CDouble(value as FLOAT));
    engine.register_fn("double", |value: CDouble| value);
    engine.register_fn("is_double", |value: Dynamic| value.is::<CDouble>());
    engine.register_fn("to_float", |value: CDouble| value.0);
    engine.register_fn("to_int", |value: CDouble| value.0 as INT);
    engine.register_fn("to_string", |value: &mut CDouble| format!("{:?}", value.0));
    engine.register_fn("to_debug", |value: &mut CDouble| format!("double({:?})", value.0));
    engine.register_fn("-", |value: CDouble| CDouble(-value.0));
    macro_rules! arithmetic {
        ($($op:literal => $apply:expr),*) => {$(
            let apply: fn(FLOAT, FLOAT) -> FLOAT = $apply;
            engine.register_fn($op, move |a: CDouble, b: CDouble| CDouble(apply(a.0, b.0)));
            engine.register_fn($op, move |a: CDouble, b: FLOAT| CDouble(apply(a.0, b)));
            engine.register_fn($op, move |a: FLOAT, b: CDouble| CDouble(apply(a, b.0)));
            engine.register_fn($op, move |a: CDouble, b: INT| CDouble(apply(a.0, b as FLOAT)));
            engine.register_fn($op, move |a: INT, b: CDouble| CDouble(apply(a as FLOAT, b.0)));
        )*};
    }
    arithmetic!("+" => |a, b| a + b, "-" => |a, b| a - b, "*" => |a, b| a * b, "/" => |a, b| a / b,
        "%" => |a, b| a % b, "**" => FLOAT::powf);
    macro_rules! comparison {
        ($($op:literal => $apply:expr),*) => {$(
            let apply: fn(&FLOAT, &FLOAT) -> bool = $apply;
            engine.register_fn($op, move |a: CDouble, b: CDouble| apply(&a.0, &b.0));
            engine.register_fn($op, move |a: CDouble, b: FLOAT| apply(&a.0, &b));
            engine.register_fn($op, move |a: FLOAT, b: CDouble| apply(&a, &b.0));
            engine.register_fn($op, move |a: CDouble, b: INT| apply(&a.0, &(b as FLOAT)));
            engine.register_fn($op, move |a: INT, b: CDouble| apply(&(a as FLOAT), &b.0));
        )*};
    }
    comparison!("==" => FLOAT::eq, "!=" => FLOAT::ne, "<" => FLOAT::lt, "<=" => FLOAT::le, ">" => FLOAT::gt,
        ">=" => FLOAT::ge);
    type Function = fn(FLOAT) -> FLOAT;
    let functions: [(&str, Function); 19] = [
        ("abs", FLOAT::abs),
        ("sqrt", FLOAT::sqrt),
        ("exp", FLOAT::exp),
        ("ln", FLOAT::ln),
        ("log", FLOAT::log10),
        ("sin", FLOAT::sin),
        ("cos", FLOAT::cos),
        ("tan", FLOAT::tan),
        ("asin", FLOAT::asin),
        ("acos", FLOAT::acos),
        ("atan", FLOAT::atan),
        ("sinh", FLOAT::sinh),
        ("cosh", FLOAT::cosh),
        ("tanh", FLOAT::tanh),
        ("floor", FLOAT::floor),
        ("ceiling", FLOAT::ceil),
        ("round", FLOAT::round),
        ("int", FLOAT::trunc),
        ("fraction", FLOAT::fract),
    ];
    for (name, apply) in functions {
        engine.register_fn(name, move |value: CDouble| CDouble(apply(value.0)));
    }
}
