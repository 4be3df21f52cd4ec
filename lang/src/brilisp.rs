//! Brilisp bodies (`define-brilisp`): flat instruction lists with labels, checked into statements.

use crate::check::{BodyChecker, Stmt};
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::Sexp;

/// Checks a Brilisp body.
pub(crate) fn check_body(checker: &mut BodyChecker<'_, '_>, items: &[Sexp]) -> Vec<Stmt> {
    if let Some(first) = items.first() {
        checker.error(Diagnostic::error(Kind::Syntax, "`define-brilisp` bodies are not supported yet").with_label(first.span, ""));
    }
    Vec::new()
}
