//! The walk over a cell: quasiquote levels, unquotes evaluated in Rhai (a variable, or a call
//! with its arguments as data), splices, `(rhai …)` and `(include …)` forms, and results
//! expanded again; every node an unquote produces carries the unquote's span.

use std::collections::hash_map::Entry;
use std::collections::HashSet;
use std::fmt;

use rhai::{Dynamic, EvalAltResult, Map, Position, INT};

use super::convert::{rhai_type_name, to_dynamic, to_sexp, CDouble, NO_SPAN};
use super::engine::ScriptText;
use super::engine::{macro_error, Failure, Stage};
use crate::diagnostics::{Diagnostic, Kind};
use crate::header::{self, ConstantForm, Included};
use crate::reader::{Sexp, SexpKind, SourceFile, SourceId, Span};

/// One unquote that was evaluated: where, and what it became.
#[derive(Clone, Debug)]
pub(crate) struct ExpansionSite {
    pub span: Span,
    /// The unquote as written, e.g. `,(scale 1.5)`.
    pub written: String,
    /// The forms it produced, pretty-printed only when a diagnostic shows them.
    pub expanded: ExpandedForms,
}

/// What an unquote produced, kept as the Rhai values it returned (already converted once, so
/// they convert again): most cells never show them, and copying or printing a large generated
/// function cost as much as generating it.
#[derive(Clone, Debug)]
pub(crate) struct ExpandedForms {
    pub(super) values: Vec<Dynamic>,
    pub(super) span: Span,
}

impl fmt::Display for ExpandedForms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let forms = self.values.iter().filter_map(|value| to_sexp(value, self.span).ok());
        for (index, form) in forms.enumerate() {
            if index > 0 {
                f.write_str(" ")?;
            }
            f.write_str(&crate::reader::pretty::pretty(&form, 0))?;
        }
        Ok(())
    }
}

/// A cell after expansion.
pub(crate) struct ExpandedCell {
    pub forms: Vec<Sexp>,
    pub sites: Vec<ExpansionSite>,
    /// What Rhai's `print`/`debug` wrote.
    pub printed: String,
    /// Warnings of `include`s.
    pub warnings: Vec<Diagnostic>,
    /// Each `include`'s one-line summary and the names it declared, whose own lines it replaces.
    pub includes: Vec<(String, HashSet<String>)>,
    /// What each include left out (its headers, a line per item), for `:skipped`.
    pub skipped: Vec<(String, Vec<String>)>,
}

pub(super) struct Expander<'s> {
    pub(super) stage: &'s mut Stage,
    pub(super) sources: &'s mut Vec<SourceFile>,
    pub(super) sites: Vec<ExpansionSite>,
    pub(super) single_level: bool,
    pub(super) nodes: usize,
    pub(super) warnings: Vec<Diagnostic>,
    pub(super) includes: Vec<(String, HashSet<String>)>,
    pub(super) skipped: Vec<(String, Vec<String>)>,
}

impl Expander<'_> {
    pub(super) fn top_level(&mut self, forms: Vec<Sexp>) -> Result<Vec<Sexp>, Failure> {
        let mut out = Vec::new();
        for form in forms {
            match form.head() {
                Some("rhai") => self.rhai_form(&form)?,
                Some("rhai-file") => self.rhai_file_form(&form)?,
                Some("include") => {
                    let mut request = header::Request::from_form(&form)?;
                    // As in C, `"x.h"` is looked for beside the file that includes it.
                    if let Some(directory) = self.file_directory(form.span.source) {
                        request.flags.push(format!("-iquote{}", directory.display()));
                    }
                    let defined = self.stage.view.borrow().defined.clone();
                    let mut included = header::include(&request, &defined, &self.stage.interrupt)?;
                    out.append(&mut included.forms);
                    self.take_include(included, true);
                }
                _ => match form.kind {
                    // `,@(f)` at the top of a cell splices definitions into it.
                    SexpKind::UnquoteSplicing(ref inner) => {
                        let spliced = self.splice(inner, form.span, 0)?;
                        for item in spliced {
                            out.extend(self.form(item, 1, 1)?);
                        }
                    }
                    _ => out.extend(self.form(form, 1, 0)?),
                },
            }
        }
        if self.nodes > self.stage.limits.nodes {
            let span = out.first().map_or(NO_SPAN, |form| form.span);
            return Err(self.stage.limit_failure("nodes", self.stage.limits.nodes as u64, span));
        }
        Ok(out)
    }

    /// The directory of a source that is a file (`quasi run`, `:load`), not a cell.
    pub(super) fn file_directory(&self, source: SourceId) -> Option<std::path::PathBuf> {
        let file = self.sources.get(source.0 as usize)?;
        let path = std::path::Path::new(&file.name);
        if !path.is_file() {
            return None;
        }
        let directory = path.parent()?;
        Some(if directory.as_os_str().is_empty() { std::path::PathBuf::from(".") } else { directory.to_path_buf() })
    }

    /// Takes what the Rhai `include` built-in made while Rhai ran: its constants and warnings
    /// always, its summary only when its forms were `spliced` into the cell (elsewhere Rhai just
    /// got them as data).
    pub(super) fn take_pending_includes(&mut self, spliced: bool) {
        let pending: Vec<Included> = std::mem::take(&mut *self.stage.included.borrow_mut());
        for included in pending {
            self.take_include(included, spliced);
        }
    }

    /// Makes an include's constants Rhai variables of the session and keeps its report. A
    /// header's constant replaces a Rhai `const` of the same name (the prelude's `EOF`, a C-Lisp
    /// form) from this cell on, and the report says so: who includes `stdio.h` means C's `EOF`.
    pub(super) fn take_include(&mut self, included: Included, declared: bool) {
        let Included { constants, warnings, names, mut summary, skipped, .. } = included;
        let scope = &mut self.stage.state.scope;
        let mut replaced = Vec::new();
        for (name, value) in constants {
            let value = match value {
                ConstantForm::Type(form) => to_dynamic(&form),
                ConstantForm::Int(value) => Dynamic::from(value as INT),
                ConstantForm::Float(value) => Dynamic::from(value),
                ConstantForm::Double(value) => Dynamic::from(CDouble(value)),
            };
            // Variables, not constants: calls re-declare every constant (see `call`). A later
            // variable of the same name shadows a constant wherever Rhai looks the name up.
            if scope.is_constant(&name).unwrap_or(false) {
                scope.push_dynamic(name.clone(), value);
                replaced.push(format!("`{name}`"));
            } else {
                scope.set_or_push(name, value);
            }
        }
        self.stage.call_programs.clear();
        self.warnings.extend(warnings);
        if let Some(skipped) = skipped {
            self.skipped.push(skipped);
        }
        let replaced = (!replaced.is_empty()).then(|| match replaced.as_slice() {
            [one] => format!("{one} is the header's constant from here on, not the prelude's"),
            many => format!("{} are the header's constants from here on, not the prelude's", many.join(", ")),
        });
        if declared {
            if let Some(replaced) = replaced {
                summary.push_str(&format!("\nnote: {replaced}"));
            }
            self.includes.push((summary, names));
        } else if let Some(replaced) = replaced {
            self.warnings.push(Diagnostic::warning(Kind::Ffi, replaced));
        }
    }

    pub(super) fn string_argument<'f>(&self, form: &'f Sexp, name: &str) -> Result<(&'f [u8], Span), Failure> {
        match form.list() {
            Some([_, argument]) => match &argument.kind {
                SexpKind::Str(bytes) => Ok((bytes, argument.span)),
                _ => Err(macro_error(argument.span, format!("`{name}` takes a string"))),
            },
            _ => Err(macro_error(form.span, format!("`{name}` is `({name} \"…\")`"))),
        }
    }

    pub(super) fn rhai_form(&mut self, form: &Sexp) -> Result<(), Failure> {
        let (bytes, span) = self.string_argument(form, "rhai")?;
        let script = String::from_utf8_lossy(bytes).into_owned();
        // Rhai positions count in the string's text; its first byte follows the opening quote.
        let text = self.sources.get(span.source.0 as usize).map_or("", |file| file.text.as_str());
        let origin = ScriptText { source: span.source, base: span.start as usize + 1, text };
        self.stage.run_script(&script, origin, form.span)?;
        self.take_pending_includes(false);
        Ok(())
    }

    pub(super) fn rhai_file_form(&mut self, form: &Sexp) -> Result<(), Failure> {
        let (bytes, span) = self.string_argument(form, "rhai-file")?;
        let path = String::from_utf8_lossy(bytes).into_owned();
        let text = crate::files::read_source(&path).map_err(|error| Box::new(error.with_label(span, "")))?;
        self.sources.push(SourceFile { name: path, text: text.clone() });
        let source = SourceId(self.sources.len() as u32 - 1);
        self.stage.run_script(&text, ScriptText { source, base: 0, text: &text }, form.span)?;
        self.take_pending_includes(false);
        Ok(())
    }

    pub(super) fn count(&mut self, form: &Sexp) {
        self.nodes += 1;
        if let SexpKind::List(items) = &form.kind {
            for item in items {
                self.count(item);
            }
        }
    }

    /// Expands one form at a quasiquote level; may give several forms only for splices
    /// handled by the caller, so this returns exactly one form in a vector.
    pub(super) fn form(&mut self, form: Sexp, level: usize, depth: usize) -> Result<Vec<Sexp>, Failure> {
        let span = form.span;
        match form.kind {
            SexpKind::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item.kind {
                        SexpKind::UnquoteSplicing(ref inner) if level == 1 => {
                            let spliced = self.splice(inner, item.span, depth)?;
                            for element in spliced {
                                out.extend(self.reexpand(element, depth)?);
                            }
                        }
                        _ => out.extend(self.form(item, level, depth)?),
                    }
                }
                let list = Sexp { kind: SexpKind::List(out), span };
                self.nodes += 1;
                Ok(vec![list])
            }
            SexpKind::Quasiquote(inner) => {
                let inner = self.single(*inner, level + 1, depth)?;
                Ok(vec![Sexp { kind: SexpKind::Quasiquote(Box::new(inner)), span }])
            }
            SexpKind::Unquote(inner) if level == 1 => {
                let value = self.evaluate(&inner, span, depth)?;
                self.take_pending_includes(false);
                let expanded = to_sexp(&value, span)
                    .map_err(|message| macro_error(span, format!("{message} (from `{}`)", written(&inner, ","))))?;
                self.record_site(span, &inner, ",", vec![value]);
                self.reexpand(expanded, depth)
            }
            SexpKind::Unquote(inner) => {
                let inner = self.single(*inner, level - 1, depth)?;
                Ok(vec![Sexp { kind: SexpKind::Unquote(Box::new(inner)), span }])
            }
            SexpKind::UnquoteSplicing(inner) if level == 1 => Err(macro_error(
                span,
                format!("`,@` splices into a list; here it stands alone (`{}`)", written(&inner, ",@")),
            )),
            SexpKind::UnquoteSplicing(inner) => {
                let inner = self.single(*inner, level - 1, depth)?;
                Ok(vec![Sexp { kind: SexpKind::UnquoteSplicing(Box::new(inner)), span }])
            }
            kind => {
                self.nodes += 1;
                Ok(vec![Sexp { kind, span }])
            }
        }
    }

    pub(super) fn single(&mut self, form: Sexp, level: usize, depth: usize) -> Result<Sexp, Failure> {
        let span = form.span;
        let mut forms = self.form(form, level, depth)?;
        match forms.len() {
            1 => Ok(forms.remove(0)),
            _ => Err(macro_error(span, "an unquote here must give exactly one form")),
        }
    }

    /// Results of unquotes are expanded again, unless `:expand 1` asked for one level.
    pub(super) fn reexpand(&mut self, form: Sexp, depth: usize) -> Result<Vec<Sexp>, Failure> {
        if self.single_level {
            self.count(&form);
            return Ok(vec![form]);
        }
        if depth + 1 > self.stage.limits.depth {
            return Err(self.stage.limit_failure("depth", self.stage.limits.depth as u64, form.span));
        }
        // Most results hold no (quasi)quote: expanding them again would rebuild every list
        // unchanged, so they are only counted, as `form` would count them.
        if !has_quotes(&form) {
            self.count(&form);
            return Ok(vec![form]);
        }
        self.form(form, 1, depth + 1)
    }

    pub(super) fn record_site(&mut self, span: Span, inner: &Sexp, prefix: &str, values: Vec<Dynamic>) {
        let expanded = ExpandedForms { values, span };
        self.sites.push(ExpansionSite { span, written: written(inner, prefix), expanded });
    }

    pub(super) fn splice(&mut self, inner: &Sexp, span: Span, depth: usize) -> Result<Vec<Sexp>, Failure> {
        let value = self.evaluate(inner, span, depth)?;
        self.take_pending_includes(true);
        if value.is_unit() {
            return Ok(Vec::new());
        }
        let type_name = rhai_type_name(&value);
        let Ok(array) = value.into_array() else {
            return Err(macro_error(span, format!("`,@{inner}` must give an array to splice, found {type_name}")));
        };
        let forms = array
            .iter()
            .map(|item| to_sexp(item, span))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|message| macro_error(span, message))?;
        self.record_site(span, inner, ",@", array);
        Ok(forms)
    }

    /// Evaluates what follows `,`: a variable name, or a call `(F ARG…)`.
    pub(super) fn evaluate(&mut self, inner: &Sexp, span: Span, depth: usize) -> Result<Dynamic, Failure> {
        match &inner.kind {
            SexpKind::Symbol(name) => {
                let rhai_name = name.replace('-', "_");
                self.stage.state.scope.get_value::<Dynamic>(&rhai_name).ok_or_else(|| {
                    let mut diagnostic = macro_error(span, format!("no Rhai variable `{name}`"));
                    diagnostic
                        .notes
                        .push("define it with (rhai \"let NAME = …;\") or (rhai \"const NAME = …;\")".into());
                    diagnostic
                })
            }
            SexpKind::List(items) => {
                let Some((function, arguments)) = items.split_first() else {
                    return Err(macro_error(
                        span,
                        "an unquote needs a Rhai function call `(F ARG…)` or a variable name",
                    ));
                };
                let Some(function_name) = function.symbol() else {
                    return Err(macro_error(function.span, "the function of an unquoted call must be a name"));
                };
                let args = self.arguments(arguments, depth)?;
                self.call(function_name, args, span)
            }
            _ => Err(macro_error(
                span,
                format!("cannot unquote `{inner}`: an unquote takes a Rhai variable name or a call (F ARG…)"),
            )),
        }
    }

    /// Arguments are expanded first (their own unquotes run), then passed as data;
    /// `(#:key V)` arguments are gathered into one map passed last.
    pub(super) fn arguments(&mut self, arguments: &[Sexp], depth: usize) -> Result<Vec<Dynamic>, Failure> {
        let mut values = Vec::new();
        let mut keywords = Map::new();
        for argument in arguments {
            if let Some([key, value]) = argument.list() {
                if let SexpKind::Keyword(name) = &key.kind {
                    let value = self.single(value.clone(), 1, depth)?;
                    keywords.insert(name.replace('-', "_").into(), argument_value(&value));
                    continue;
                }
            }
            let expanded = self.single(argument.clone(), 1, depth)?;
            values.push(argument_value(&expanded));
        }
        if !keywords.is_empty() {
            values.push(Dynamic::from_map(keywords));
        }
        Ok(values)
    }

    pub(super) fn call(&mut self, name: &str, args: Vec<Dynamic>, span: Span) -> Result<Dynamic, Failure> {
        let rhai_name = name.replace('-', "_");
        let arity = args.len();
        let arities: Vec<usize> = self
            .stage
            .state
            .functions
            .iter_functions()
            .filter(|function| function.name == rhai_name)
            .map(|function| function.params.len())
            .collect();
        if !arities.is_empty() && !arities.contains(&arity) {
            let mut counts: Vec<String> = arities.iter().map(usize::to_string).collect();
            counts.sort();
            counts.dedup();
            return Err(macro_error(
                span,
                format!("Rhai function `{rhai_name}` takes {} argument(s), found {arity}", counts.join(" or ")),
            ));
        }
        let stage = &mut *self.stage;
        // The call runs as a tiny script with the session's constants re-declared first, so that
        // `global::NAME` works inside functions as it does in the script that defined them.
        let scope = &mut stage.state.scope;
        let base = scope.len();
        let mut constants: Vec<String> =
            scope.iter().filter(|(_, constant, _)| *constant).map(|(name, _, _)| name.to_string()).collect();
        constants.sort();
        constants.dedup();
        let mut script: String = constants.iter().map(|constant| format!("const {constant} = {constant};")).collect();
        let names: Vec<String> = (0..arity).map(|index| format!("quasi_argument_{index}")).collect();
        for (argument_name, value) in names.iter().zip(args) {
            scope.push_dynamic(argument_name.clone(), value);
        }
        script.push_str(&format!("{rhai_name}({})", names.join(", ")));
        if stage.call_programs.len() >= 256 && !stage.call_programs.contains_key(&script) {
            stage.call_programs.clear();
        }
        let program = match stage.call_programs.entry(script) {
            Entry::Occupied(entry) => Ok(&*entry.into_mut()),
            Entry::Vacant(entry) => stage
                .engine
                .compile_with_scope(scope, entry.key())
                .map(|call| &*entry.insert(stage.state.functions.merge(&call)))
                .map_err(|error| {
                    Box::new(EvalAltResult::ErrorRuntime(Dynamic::from(error.to_string()), Position::NONE))
                }),
        };
        let result = program.and_then(|program| stage.engine.eval_ast_with_scope::<Dynamic>(scope, program));
        scope.rewind(base);
        let script_key = stage.state.function_scripts.get(&format!("{rhai_name}/{arity}")).cloned();
        result.map_err(|error| match *error {
            EvalAltResult::ErrorFunctionNotFound(ref signature, _)
                if signature.starts_with(&format!("{rhai_name} (")) || signature == &rhai_name =>
            {
                macro_error(span, format!("no Rhai function `{rhai_name}`"))
            }
            _ => stage.runtime_diagnostic(&error, script_key.as_deref(), span),
        })
    }
}

/// Whether a form holds a quasiquote, unquote or splice anywhere.
pub(super) fn has_quotes(form: &Sexp) -> bool {
    match &form.kind {
        SexpKind::List(items) => items.iter().any(has_quotes),
        SexpKind::Quasiquote(_) | SexpKind::Unquote(_) | SexpKind::UnquoteSplicing(_) => true,
        _ => false,
    }
}

/// An argument as data: a backquoted template loses its `quasiquote` wrapper.
pub(super) fn argument_value(form: &Sexp) -> Dynamic {
    match &form.kind {
        SexpKind::Quasiquote(inner) => to_dynamic(inner),
        _ => to_dynamic(form),
    }
}

pub(super) fn written(inner: &Sexp, prefix: &str) -> String {
    format!("{prefix}{inner}")
}
