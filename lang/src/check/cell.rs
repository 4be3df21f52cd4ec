//! The per-cell checker: two passes over a cell's forms (declarations in `collect`, then bodies),
//! the inline bodies the cell needs, and re-checking the session functions a redefinition
//! touches (recompiled if they still check, invalidated if not).

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use super::body::is_statement_form;
use super::context::{define_attributes, parse_prototype, syntax, BodyChecker, CellChecker, TopForm, MAX_VALUE_BYTES};
use super::env::{FunctionEntry, FunctionKind};
use crate::diagnostics::{Diagnostic, Kind};
use crate::intrinsics::{check_intrinsic, IntrinsicError, IntrinsicFacts};
use crate::reader::{Sexp, Span};
use crate::tree::{
    always_returns, visit_exprs, Callee, Constant, DefinitionSource, Dialect, FunctionDef, GlobalDef, GlobalEntry,
    Invalidation, Placement, Stmt, StructDef, TopItem, MAX_NESTING,
};
use crate::types::{parse_type, Signature, StructEntry, Ty};

impl<'a> CellChecker<'a> {
    pub(super) fn error(&mut self, diagnostic: Diagnostic) {
        self.errors.push(diagnostic);
    }

    pub(super) fn parse_ty(&mut self, form: &Sexp) -> Option<Ty> {
        let overlay = &self.overlay.structs;
        let env = &self.env.structs;
        match parse_type(form, &|name| overlay.contains_key(name) || env.contains_key(name)) {
            Ok(ty) => Some(ty),
            Err(diagnostic) => {
                self.error(diagnostic);
                None
            }
        }
    }

    pub(super) fn lookup_function(&self, name: &str) -> Option<&FunctionEntry> {
        self.overlay.functions.get(name).or_else(|| self.env.functions.get(name))
    }

    /// The names of every function the cell can call: the session's and the cell's own.
    pub(super) fn function_names(&self) -> Vec<String> {
        self.overlay.functions.keys().chain(self.env.functions.keys()).cloned().collect()
    }

    /// The names of every global the cell can use: the session's and the cell's own.
    pub(super) fn global_names(&self) -> Vec<String> {
        self.overlay.globals.keys().chain(self.env.globals.keys()).cloned().collect()
    }

    pub(super) fn lookup_global(&self, name: &str) -> Option<&GlobalEntry> {
        self.overlay.globals.get(name).or_else(|| self.env.globals.get(name))
    }

    pub(super) fn lookup_struct(&self, name: &str) -> Option<&StructEntry> {
        self.overlay.structs.get(name).or_else(|| self.env.structs.get(name))
    }

    /// What LLVM says about an intrinsic declaration, asked once per cell and signature.
    pub(super) fn intrinsic_facts(
        &mut self,
        link: &str,
        signature: &Signature,
    ) -> Result<IntrinsicFacts, IntrinsicError> {
        let key = format!("{link} {signature}");
        if let Some(known) = self.intrinsics.get(&key) {
            return known.clone();
        }
        let overlay = &self.overlay.structs;
        let env = &self.env.structs;
        let fields = |name: &str| {
            overlay
                .get(name)
                .or_else(|| env.get(name))
                .and_then(|entry| entry.fields.as_ref())
                .map(|fields| fields.iter().map(|(_, ty)| ty.clone()).collect())
        };
        let facts = check_intrinsic(link, signature, &fields);
        self.intrinsics.insert(key, facts.clone());
        facts
    }

    /// Unwraps `(c-lisp …)` and `(cuda-lisp …)`, and `(brilisp …)`, whose forms follow the rules
    /// of a standalone Brilisp program.
    pub(super) fn flatten<'f>(&mut self, forms: &'f [Sexp], out: &mut Vec<TopForm<'f>>) {
        for form in forms {
            match form.head() {
                Some("c-lisp" | "cuda-lisp") => self.flatten(&form.list().unwrap_or(&[])[1..], out),
                Some("brilisp") => self.flatten_brilisp(&form.list().unwrap_or(&[])[1..], out),
                _ => out.push(TopForm { form, dialect: Dialect::CLisp }),
            }
        }
    }

    /// A Brilisp program holds definitions only, as llama.lisp's `brilisp.py` requires.
    fn flatten_brilisp<'f>(&mut self, forms: &'f [Sexp], out: &mut Vec<TopForm<'f>>) {
        for form in forms {
            match form.head() {
                Some("define-struct" | "define-global" | "define-string") => {}
                Some(head) if define_attributes(head).is_some() => {}
                _ => {
                    self.error(
                        syntax(form.span, "a Brilisp program holds only definitions")
                            .with_note("its forms are define…, define-struct, define-global and define-string"),
                    );
                    continue;
                }
            }
            out.push(TopForm { form, dialect: Dialect::BrilispProgram });
        }
    }

    /// Second pass: function bodies and top-level code.
    pub(super) fn check_bodies(&mut self, forms: &[TopForm<'_>], top_level_name: &str) {
        for &TopForm { form, dialect } in forms {
            match form.head() {
                Some("define-struct" | "define-global" | "define-shared" | "declare" | "declare-global") => {}
                Some("define-string") if dialect == Dialect::BrilispProgram => {}
                Some(head) if define_attributes(head).is_some() => {
                    let items = form.list().unwrap_or(&[]);
                    if items.len() > 2 {
                        if let Some(function) = self.check_function(form) {
                            self.cell.functions.push(function);
                        }
                    }
                }
                Some(_) | None => {
                    let index = self.cell.top.len();
                    if let Some(item) = self.check_top_item(form, &format!("{top_level_name}.{index}")) {
                        self.cell.top.push(item);
                    }
                }
            }
        }
    }

    fn check_function(&mut self, form: &Sexp) -> Option<FunctionDef> {
        let items = form.list()?;
        let prototype = parse_prototype(items.get(1)?).ok()?;
        // A cell's own definition, or a session function being re-checked after a change.
        let entry =
            self.overlay.functions.get(&prototype.name).or_else(|| self.env.functions.get(&prototype.name))?.clone();
        let FunctionKind::Defined(placeholder) = &entry.kind else { return None };
        let inline = placeholder.inline;
        let (kernel, annotations) = (placeholder.kernel, placeholder.annotations.clone());
        let dialect = placeholder.dialect;
        let brilisp = define_attributes(items[0].symbol()?)?.brilisp || dialect == Dialect::BrilispProgram;
        let errors_before = self.errors.len();
        let mut body_checker = BodyChecker::new(self, prototype.name.clone(), entry.signature.ret.clone(), false);
        body_checker.kernel = kernel;
        body_checker.dialect = dialect;
        for ((name, span, _), ty) in prototype.params.iter().zip(&entry.signature.params) {
            body_checker.declare_local(name, ty.clone(), *span);
        }
        let (body, labels, falls_through) = if brilisp {
            let checked = super::brilisp::check_body(&mut body_checker, &items[2..]);
            (checked.body, checked.labels, checked.falls_through)
        } else {
            let body = body_checker.check_block_items(&items[2..]);
            let falls_through = !always_returns(&body);
            (body, Vec::new(), falls_through)
        };
        let BodyChecker { locals, uses, mut warnings, ret, placement, .. } = body_checker;
        if let (false, Some((device_span, device)), Some((host_span, host))) =
            (kernel, &placement.device_use, &placement.host_use)
        {
            self.error(
                Diagnostic::error(
                    Kind::Gpu,
                    format!(
                        "`{}` uses {device}, so it is device code, and device code cannot use {host}",
                        prototype.name
                    ),
                )
                .with_label(*host_span, "host code")
                .with_secondary(*device_span, "device code")
                .with_note("device code may call intrinsics, libdevice (`__nv_*`) and session functions"),
            );
        }
        if falls_through && ret != Ty::Void {
            warnings.push(
                Diagnostic::warning(
                    Kind::Type,
                    format!("`{}` can reach its end without `(ret …)`; it then returns 0", prototype.name),
                )
                .with_label(prototype.name_span, ""),
            );
        }
        // Warnings about a body with errors would only be noise.
        if self.errors.len() == errors_before {
            self.cell.warnings.extend(warnings);
        }
        let placement = Placement { device_only: kernel || placement.device_use.is_some(), ..placement };
        Some(FunctionDef {
            name: prototype.name,
            signature: entry.signature,
            locals,
            body,
            labels,
            inline,
            span: form.span,
            source: DefinitionSource::Form(form.clone()),
            uses,
            kernel,
            annotations,
            placement,
            dialect,
        })
    }

    fn check_top_item(&mut self, form: &Sexp, entry_name: &str) -> Option<TopItem> {
        if let Some(head @ ("ret" | "break" | "continue")) = form.head() {
            let place = if head == "ret" { "a function" } else { "a loop" };
            self.error(syntax(form.span, format!("`{head}` is only allowed inside {place}")));
            return None;
        }
        let mut body_checker = BodyChecker::new(self, entry_name.to_string(), Ty::Void, true);
        let errors_before = body_checker.cell.errors.len();
        let (body, value) = if is_statement_form(form) {
            (vec![body_checker.check_stmt(form)?], None)
        } else {
            let expr = body_checker.check_expr(form)?;
            if !body_checker.cell.require_size(&expr.ty, form.span, "a top-level value", MAX_VALUE_BYTES) {
                return None;
            }
            let value = expr.ty.is_value().then(|| expr.ty.clone());
            (vec![Stmt::Expr(expr)], value)
        };
        let BodyChecker { locals, uses, warnings, .. } = body_checker;
        self.cell.warnings.extend(warnings);
        if self.errors.len() > errors_before {
            return None;
        }
        let function = FunctionDef {
            name: entry_name.to_string(),
            signature: Signature { params: Vec::new(), ret: Ty::Void, variadic: false },
            locals,
            body,
            labels: Vec::new(),
            inline: false,
            span: form.span,
            source: DefinitionSource::Form(form.clone()),
            uses,
            kernel: false,
            annotations: Vec::new(),
            placement: Placement::default(),
            dialect: Dialect::CLisp,
        };
        Some(TopItem { function, value })
    }

    pub(super) fn struct_layouts(&self) -> HashMap<String, StructEntry> {
        let mut structs = self.env.structs.clone();
        structs.extend(self.overlay.structs.iter().map(|(name, entry)| (name.clone(), entry.clone())));
        structs
    }

    /// Gathers the finished bodies of the inline functions the cell calls, transitively. The
    /// checker only names them in `Callee::Inline`: while a cell is checked, the bodies of its
    /// own inline functions are not finished yet.
    pub(super) fn collect_inline_bodies(&mut self) {
        let mut pending: Vec<String> = std::mem::take(&mut self.inline_used).into_iter().collect();
        while let Some(name) = pending.pop() {
            if self.cell.inline_bodies.contains_key(&name) {
                continue;
            }
            let here = self
                .cell
                .functions
                .iter()
                .chain(&self.cell.recompiled)
                .find(|function| function.name == name)
                .map(|function| Rc::new(function.clone()));
            let body = here.or_else(|| match self.env.functions.get(&name) {
                Some(FunctionEntry { kind: FunctionKind::Defined(def), .. }) => Some(def.clone()),
                _ => None,
            });
            let Some(body) = body else { continue };
            visit_exprs(&body.body, &mut |expr| {
                if let Some(Callee::Inline(callee)) = expr.callee() {
                    pending.push(callee.clone());
                }
            });
            self.cell.inline_bodies.insert(name, body);
        }
    }

    /// Re-checks session functions that use a name whose type changed in this cell (or an
    /// inline function that was redefined); the ones that fail are invalidated.
    pub(super) fn recheck_dependents(&mut self, cell_label: &str) {
        if !self.errors.is_empty() {
            return;
        }
        let mut changed: BTreeSet<String> = BTreeSet::new();
        for function in &self.cell.functions {
            match self.env.functions.get(&function.name) {
                Some(old) if old.signature != function.signature => {
                    changed.insert(format!("fn:{}", function.name));
                }
                // Callers of a function that moved to the GPU (or back) must be checked again.
                Some(FunctionEntry { kind: FunctionKind::Defined(old), .. })
                    if old.placement.device_only != function.placement.device_only || old.kernel != function.kernel =>
                {
                    changed.insert(format!("fn:{}", function.name));
                }
                Some(FunctionEntry { kind: FunctionKind::Defined(old), .. }) if old.inline || function.inline => {
                    changed.insert(format!("fn:{}", function.name));
                }
                // A definition replacing a declaration: callers compiled against the C symbol (or
                // the built-in runtime) call it directly, and must now reach the definition.
                Some(FunctionEntry { kind: FunctionKind::External(_), .. }) => {
                    changed.insert(format!("fn:{}", function.name));
                }
                _ => {}
            }
        }
        for global in &self.cell.globals {
            if self.env.globals.get(&global.name).is_some_and(|old| old.ty != global.ty) {
                changed.insert(format!("global:{}", global.name));
            }
        }
        for structure in &self.cell.structs {
            if self.env.structs.get(&structure.name).is_some_and(|old| old.fields != structure.fields) {
                changed.insert(format!("struct:{}", structure.name));
            }
        }
        self.relayout_containers(&mut changed);
        if changed.is_empty() {
            return;
        }
        // Recompiling an inline function changes the code its callers inline, so dependents
        // are re-checked until nothing more changes.
        let mut done: BTreeSet<String> = BTreeSet::new();
        let mut broken_inline: HashMap<String, String> = HashMap::new();
        loop {
            let mut dependents: Vec<(String, Rc<FunctionDef>)> = self
                .env
                .functions
                .iter()
                .filter(|(name, _)| !self.overlay.defined_here.contains_key(*name) && !done.contains(*name))
                .filter_map(|(name, entry)| match &entry.kind {
                    FunctionKind::Defined(def)
                        if entry.invalidated.is_none() && def.uses.iter().any(|used| changed.contains(used)) =>
                    {
                        Some((name.clone(), def.clone()))
                    }
                    _ => None,
                })
                .collect();
            if dependents.is_empty() {
                break;
            }
            dependents.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, def) in dependents {
                done.insert(name.clone());
                self.recheck_dependent(name, &def, cell_label, &mut changed, &mut broken_inline);
            }
        }
    }

    /// Whether the cell redefines, with other fields, a struct that `ty` holds by value
    /// (directly, in arrays, or in the fields of structs it holds).
    pub(super) fn layout_changes_here(&self, ty: &Ty, depth: usize) -> bool {
        match ty {
            _ if depth > MAX_NESTING => false,
            Ty::Arr(_, element) => self.layout_changes_here(element, depth + 1),
            Ty::Struct(name) => {
                let here = self.overlay.structs.get(&**name);
                let changed = here
                    .is_some_and(|entry| self.env.structs.get(&**name).is_some_and(|old| old.fields != entry.fields));
                let fields = self.lookup_struct(name).and_then(|entry| entry.fields.clone()).unwrap_or_default();
                changed || fields.iter().any(|(_, field)| self.layout_changes_here(field, depth + 1))
            }
            _ => false,
        }
    }

    /// A struct whose layout changed changes the layout of every struct that holds it by value,
    /// and of every global that does: such structs are defined again in this cell (same fields,
    /// new layout), and such globals are made again, zeroed, since their storage no longer fits.
    fn relayout_containers(&mut self, changed: &mut BTreeSet<String>) {
        let mut changed_structs: Vec<(String, Span)> = self
            .cell
            .structs
            .iter()
            .filter(|structure| changed.contains(&format!("struct:{}", structure.name)))
            .map(|structure| (structure.name.clone(), structure.span))
            .collect();
        if changed_structs.is_empty() {
            return;
        }
        let mut env_structs: Vec<(&String, &StructEntry)> = self.env.structs.iter().collect();
        env_structs.sort_by(|a, b| a.0.cmp(b.0));
        loop {
            let mut grown = false;
            for (name, entry) in &env_structs {
                if self.overlay.structs.contains_key(*name) || changed.contains(&format!("struct:{name}")) {
                    continue;
                }
                let fields = entry.fields.clone().unwrap_or_default();
                let cause = changed_structs
                    .iter()
                    .find(|(inner, _)| fields.iter().any(|(_, ty)| holds_by_value(ty, inner)))
                    .cloned();
                if let Some((_, span)) = cause {
                    self.cell.structs.push(StructDef { name: (*name).clone(), fields: entry.fields.clone(), span });
                    changed.insert(format!("struct:{name}"));
                    changed_structs.push(((*name).clone(), span));
                    grown = true;
                }
            }
            if !grown {
                break;
            }
        }
        let mut globals: Vec<(String, GlobalEntry)> = self
            .env
            .globals
            .iter()
            .filter(|(name, _)| !self.overlay.globals.contains_key(*name))
            .map(|(name, global)| (name.clone(), global.clone()))
            .collect();
        globals.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, global) in globals {
            let Some((inner, span)) = changed_structs.iter().find(|(inner, _)| holds_by_value(&global.ty, inner))
            else {
                continue;
            };
            // The new layout is held to a global's limit too: a struct grown past it must not
            // make its globals again at that size (it once overflowed the allocation).
            let what = format!("the global `{name}`, made again for the new layout,");
            if !self.require_size(&global.ty, *span, &what, MAX_VALUE_BYTES) {
                continue;
            }
            self.cell.warnings.push(Diagnostic::warning(Kind::Type, format!("the global `{name}` holds a `(struct {inner})`, whose layout changed: it is made again, zeroed")).with_label(*span, ""));
            self.cell.globals.push(GlobalDef {
                name: name.clone(),
                ty: global.ty.clone(),
                init: Some(Constant::Zero),
                span: *span,
                space: global.space,
            });
            changed.insert(format!("global:{name}"));
        }
    }

    /// Re-checks one session function after a change it depends on: recompiled if it still
    /// type-checks, invalidated (with a warning at the call sites) otherwise.
    /// `broken_inline` maps the inline functions invalidated so far (`fn:NAME`) to the name
    /// whose redefinition caused it.
    fn recheck_dependent(
        &mut self,
        name: String,
        def: &Rc<FunctionDef>,
        cell_label: &str,
        changed: &mut BTreeSet<String>,
        broken_inline: &mut HashMap<String, String>,
    ) {
        let cause_of = |used: &String| used.split_once(':').map_or(used.as_str(), |(_, name)| name).to_string();
        // A caller of an inline function that was just invalidated holds a copy of a body that
        // no longer type-checks: (the inline function, the root cause).
        let inlined_broken =
            def.uses.iter().find_map(|used| broken_inline.get(used).map(|root| (cause_of(used), root.clone())));
        let errors_before = self.errors.len();
        let rechecked = if inlined_broken.is_some() { None } else { self.check_function(&def.source.form()) };
        let new_errors: Vec<Diagnostic> = self.errors.drain(errors_before..).collect();
        match rechecked {
            Some(function) if new_errors.is_empty() => {
                if function.inline || def.inline {
                    changed.insert(format!("fn:{name}"));
                }
                self.cell.recompiled.push(function);
            }
            _ => {
                let cause = match &inlined_broken {
                    Some((_, root)) => root.clone(),
                    None => changed
                        .iter()
                        .find(|used| def.uses.contains(*used))
                        .map(cause_of)
                        .unwrap_or_else(|| "a definition".to_string()),
                };
                let headline = match &inlined_broken {
                    Some((inlined, _)) => format!("`{name}` inlines `{inlined}`, which the redefinition of `{cause}` invalidated, and is invalidated too"),
                    None => format!("`{name}` no longer type-checks after the redefinition of `{cause}` and is invalidated"),
                };
                let mut warning =
                    Diagnostic::warning(Kind::Type, headline).with_note(format!("redefine `{name}` to use it again"));
                // Point at the call sites that no longer check, the first one primary.
                for (index, error) in new_errors.iter().take(3).enumerate() {
                    if let Some(label) = error.labels.first() {
                        warning = if index == 0 {
                            warning.with_label(label.span, error.message.clone())
                        } else {
                            warning.with_secondary(label.span, error.message.clone())
                        };
                    }
                }
                if new_errors.is_empty() {
                    warning = warning.with_label(def.span, "");
                }
                if def.inline {
                    broken_inline.insert(format!("fn:{name}"), cause.clone());
                    changed.insert(format!("fn:{name}"));
                }
                self.cell.warnings.push(warning);
                self.cell.invalidated.push(Invalidation {
                    name,
                    message: format!("`{cause}` (cell {cell_label})"),
                    span: def.span,
                });
            }
        }
    }
}

/// Whether a value of type `ty` contains a `(struct name)` by value (not through a pointer).
fn holds_by_value(ty: &Ty, name: &str) -> bool {
    match ty {
        Ty::Struct(own) => &**own == name,
        Ty::Arr(_, element) => holds_by_value(element, name),
        _ => false,
    }
}
