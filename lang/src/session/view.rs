//! The session as Rhai sees it: signatures, struct fields and scalar global values that
//! macros read (`signature`, `struct_fields`, `global_value`), rebuilt only when Rhai runs.

use super::Session;
use crate::check::FunctionKind;
use crate::expand::SessionView;
use crate::reader::{self, Sexp, SexpKind};
use crate::source::{SourceId, Span};
use crate::types::Ty;

impl Session {
    /// Refreshes what Rhai macros can see of the session (`signature`, `global_value`…) if a
    /// commit changed it. Called before Rhai runs, not after every cell: rebuilding costs about
    /// a microsecond per definition, which a session of a thousand definitions would pay on
    /// every cell.
    pub(super) fn refresh_view_if_stale(&mut self) {
        if std::mem::take(&mut self.staging.view_stale) {
            self.refresh_view();
        }
    }

    fn refresh_view(&mut self) {
        let mut view = SessionView::default();
        let symbol =
            |name: &str| Sexp { kind: SexpKind::Symbol(name.into()), span: Span::new(SourceId(u32::MAX), 0, 0) };
        let list = |items: Vec<Sexp>| Sexp { kind: SexpKind::List(items), span: Span::new(SourceId(u32::MAX), 0, 0) };
        let type_form =
            |ty: &Ty| reader::read(SourceId(u32::MAX), &ty.to_string()).ok().and_then(|mut forms| forms.pop());
        for (name, entry) in &self.env.functions {
            let mut items =
                vec![list(vec![symbol(name), type_form(&entry.signature.ret).unwrap_or_else(|| symbol("void"))])];
            for (index, ty) in entry.signature.params.iter().enumerate() {
                let param = entry.param_names.get(index).cloned().unwrap_or_else(|| format!("arg-{index}"));
                items.push(list(vec![symbol(&param), type_form(ty).unwrap_or_else(|| symbol("void"))]));
            }
            if entry.signature.variadic {
                items.push(symbol("..."));
            }
            view.signatures.insert(name.clone(), list(items));
            if matches!(entry.kind, FunctionKind::Defined(_)) {
                view.defined.insert(name.clone());
            }
        }
        for (name, entry) in &self.env.structs {
            let fields = entry
                .fields
                .iter()
                .flatten()
                .map(|(field, ty)| (field.clone(), type_form(ty).unwrap_or_else(|| symbol("void"))))
                .collect();
            view.struct_fields.insert(name.clone(), fields);
        }
        for (name, entry) in &self.env.globals {
            if entry.ty.is_scalar() && !entry.ty.is_ptr() {
                let text = self.program.global_value_text(name, &entry.ty, &self.env.structs);
                if let Ok(mut forms) =
                    reader::read(SourceId(u32::MAX), &text.replace("inf", "+inf.0").replace("nan", "+nan.0"))
                {
                    if let Some(form) = forms.pop() {
                        view.global_values.insert(name.clone(), form);
                    }
                }
            }
        }
        *self.staging.stage.view.borrow_mut() = view;
    }
}

/// Whether a form runs Rhai when expanded (an unquote, or a `rhai`/`rhai-file` form), or reads
/// the session view (`include`).
pub(super) fn uses_staging(form: &Sexp) -> bool {
    match &form.kind {
        SexpKind::Unquote(_) | SexpKind::UnquoteSplicing(_) => true,
        SexpKind::Quasiquote(inner) => uses_staging(inner),
        SexpKind::List(items) => {
            matches!(form.head(), Some("rhai" | "rhai-file" | "autotune" | "include")) || items.iter().any(uses_staging)
        }
        _ => false,
    }
}
