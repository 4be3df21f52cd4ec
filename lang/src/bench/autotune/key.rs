//! The tuning cache's key of a variant: everything that decides its result, as text.

use std::collections::{HashMap, HashSet};

use super::super::{list, sym, Bencher};
use super::{Candidate, Tuning};
use crate::check::{Env, FunctionKind};
use crate::reader::{Sexp, SexpKind};
use crate::tune_cache::TuneKey;

impl Bencher<'_> {
    /// The tuning cache's key of a variant: its definition, its run and check, the source of
    /// everything they reach in the session, the opt level and the machine.
    pub(super) fn tune_key(&self, tuning: &Tuning<'_>, candidate: &Candidate, definition: &[Sexp]) -> TuneKey {
        // A generator's gensyms are new names on every call: the key names them in order of
        // first use, so the same code generated again has the same key.
        let mut gensyms = HashMap::new();
        let mut canonical = |form: &Sexp| rename_gensyms(form, &mut gensyms).to_string();
        let variant: Vec<String> = definition.iter().map(&mut canonical).collect();
        let mut text =
            format!("autotune {}\ntolerance {}\nrun {}\n", tuning.name, tuning.tolerance, canonical(&candidate.run));
        let mut roots: Vec<&Sexp> = definition.iter().chain([&candidate.run]).collect();
        match (&candidate.check, &candidate.check_buffer) {
            (Some(check), _) => {
                text.push_str(&format!("check {}\n", canonical(check)));
                roots.push(check);
            }
            (None, Some((pointer, count))) => {
                text.push_str(&format!("check-buffer {} {}\n", canonical(pointer), canonical(count)));
                roots.extend([pointer, count]);
            }
            (None, None) => text.push_str("check run\n"),
        }
        text.push_str("variant\n");
        for form in variant {
            text.push_str(&format!("{form}\n"));
        }
        let defined: HashSet<&str> = definition.iter().filter_map(defined_name).chain([tuning.name]).collect();
        let (reached, gpu) = reached_source(self.pipeline.env(), &roots, &defined);
        text.push_str(&reached);
        text.push_str(&self.pipeline.tuning_machine(gpu));
        TuneKey::new(&text)
    }
}

/// The name a definition form defines: `(define ((F …) …) …)`, `(define-global (G …))`,
/// `(define-struct S …)` and their kin.
fn defined_name(form: &Sexp) -> Option<&str> {
    if !form.head()?.starts_with("define") {
        return None;
    }
    let subject = form.list()?.get(1)?;
    match subject.list() {
        Some(prototype) => match prototype.first()?.list() {
            Some(head) => head.first()?.symbol(),
            None => prototype.first()?.symbol(),
        },
        None => subject.symbol(),
    }
}

/// The forms that use the GPU: code that reaches one is timed on the session's GPU (or the
/// simulator), which is then part of the tuning cache's key.
const GPU_FORMS: [&str; 4] = ["launch", "submit", "await", "define-kernel"];

/// The source of every session function, global and struct `roots` reach (except those
/// `defined` by the variant itself), one per line in name order, and whether any code reached
/// uses the GPU. A function's source is its definition's form, so editing a helper that a
/// variant calls changes the variant's key.
pub(super) fn reached_source(env: &Env, roots: &[&Sexp], defined: &HashSet<&str>) -> (String, bool) {
    let mut lines = std::collections::BTreeMap::new();
    let mut gpu = false;
    let mut seen: HashSet<String> = HashSet::new();
    let mut pending: Vec<Sexp> = roots.iter().map(|root| (*root).clone()).collect();
    while let Some(form) = pending.pop() {
        let mut names = Vec::new();
        symbols(&form, &mut names);
        for name in names {
            gpu |= name.starts_with("gpu-") || GPU_FORMS.contains(&name.as_str());
            if defined.contains(name.as_str()) || !seen.insert(name.clone()) {
                continue;
            }
            if let Some(entry) = env.functions.get(&name) {
                let text = match &entry.kind {
                    FunctionKind::Defined(def) => {
                        let form = def.source.form();
                        let text = form.to_string();
                        pending.push(form);
                        text
                    }
                    FunctionKind::External(symbol) => format!("{} external {symbol}", entry.signature),
                    FunctionKind::Library { library, .. } => format!("{} in {library}", entry.signature),
                    FunctionKind::Unresolved => format!("{} unresolved", entry.signature),
                };
                lines.insert(format!("function {name}"), text);
            }
            if let Some(global) = env.globals.get(&name) {
                let text = format!("{} space {} init {:?}", global.ty, global.space, global.init);
                lines.insert(format!("global {name}"), text);
            }
            if let Some(definition) = env.structs.get(&name) {
                lines.insert(format!("struct {name}"), format!("{:?}", definition.fields));
            }
        }
    }
    let text = lines.into_iter().map(|(what, source)| format!("{what}: {source}\n")).collect();
    (text, gpu)
}

/// `form` with each gensym (`prefix#N`: only staging makes names with `#`) renamed `prefix#gK`,
/// K counting the gensyms of `renamed` in order of first use.
fn rename_gensyms(form: &Sexp, renamed: &mut HashMap<String, String>) -> Sexp {
    match &form.kind {
        SexpKind::Symbol(name) => match name.rsplit_once('#') {
            Some((prefix, number)) if !number.is_empty() && number.bytes().all(|byte| byte.is_ascii_digit()) => {
                let count = renamed.len();
                let canonical = renamed.entry(name.to_string()).or_insert_with(|| format!("{prefix}#g{count}"));
                sym(canonical, form.span)
            }
            _ => form.clone(),
        },
        SexpKind::List(items) => list(items.iter().map(|item| rename_gensyms(item, renamed)).collect(), form.span),
        _ => form.clone(),
    }
}

/// Every symbol in `form`, in order.
fn symbols(form: &Sexp, names: &mut Vec<String>) {
    match &form.kind {
        SexpKind::Symbol(name) => names.push(name.to_string()),
        SexpKind::List(items) => items.iter().for_each(|item| symbols(item, names)),
        SexpKind::Quasiquote(inner) | SexpKind::Unquote(inner) | SexpKind::UnquoteSplicing(inner) => {
            symbols(inner, names)
        }
        _ => {}
    }
}
