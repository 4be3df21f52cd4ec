//! Expand: quasiquote/unquote over a cell, evaluated in Rhai — the staging of C-Lisp.
//!
//! A cell is implicitly quasiquoted (level 1). `,NAME` reads a Rhai variable, `,(F A…)` calls a
//! Rhai function with its arguments as data, `,@…` splices a list. Results are converted back
//! to forms and expanded again. Nodes an unquote produces carry the unquote's span, so a check
//! error in generated code points at the unquote that generated it.
//!
//! A folder by concern: `engine` (the Rhai engine, its sandbox and limits, the `Stage` and its
//! state, Rhai's errors as diagnostics), `api` (the code-building functions registered into
//! Rhai), `template` (`quote`, `fill`, `quote_each`), `convert` (Rhai data and forms), `walk`
//! (the expander over a cell). This file makes a `Stage` and runs scripts and cells with it.
//! The pretty-printer is the reader's (`reader::pretty`).

mod api;
mod convert;
mod engine;
mod host;
mod template;
#[cfg(test)]
mod tests;
mod walk;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use rhai::{Scope, AST};

use engine::{sandboxed_engine, Failure, ScriptOrigin};
pub(crate) use engine::{Limits, ScriptText, SessionView, Stage, StageState};
use walk::Expander;
pub(crate) use walk::{ExpandedCell, ExpansionSite};

use crate::diagnostics::Diagnostic;
use crate::reader::{Sexp, SourceFile, Span};

impl Stage {
    pub fn new(interrupt: Arc<AtomicBool>) -> Stage {
        let gensym = Rc::new(Cell::new(0));
        let printed = Rc::new(RefCell::new(String::new()));
        let view = Rc::new(RefCell::new(SessionView::default()));
        let limits = Limits::default();
        let included = Rc::new(RefCell::new(Vec::new()));
        let mut engine = sandboxed_engine(&printed, &interrupt, &limits);
        api::register(&mut engine, &gensym, &view, &included, &interrupt, &limits);
        Stage {
            engine,
            state: StageState {
                scope: Scope::new(),
                functions: AST::empty(),
                gensym: 0,
                function_scripts: HashMap::new(),
            },
            origins: Rc::new(RefCell::new(HashMap::new())),
            gensym,
            printed,
            included,
            view,
            limits,
            interrupt,
            script_counter: 0,
            call_programs: HashMap::new(),
        }
    }

    /// Applies changed limits to the engine.
    pub fn apply_limits(&mut self) {
        self.call_programs.clear();
        self.engine = sandboxed_engine(&self.printed, &self.interrupt, &self.limits);
        api::register(&mut self.engine, &self.gensym, &self.view, &self.included, &self.interrupt, &self.limits);
    }

    /// Runs a Rhai script in the session scope, keeping its functions and variables.
    pub fn run_script(&mut self, script: &str, origin: ScriptText<'_>, span: Span) -> Result<(), Failure> {
        let ScriptText { source, base, text } = origin;
        self.script_counter += 1;
        let key = format!("script#{}", self.script_counter);
        let text: Rc<str> = text.get(base..).unwrap_or("").into();
        self.origins.borrow_mut().insert(key.clone(), ScriptOrigin { source, base, text });
        let mut ast = self.engine.compile_with_scope(&self.state.scope, script).map_err(|error| {
            let position = error.position();
            self.rhai_diagnostic(format!("Rhai: {}", error.err_type()), Some(&key), position, span, Vec::new())
        })?;
        ast.set_source(key.clone());
        // The script sees the functions of earlier scripts (its own replace theirs).
        let mut runnable = self.state.functions.merge(&ast);
        runnable.set_source(key.clone());
        self.engine
            .run_ast_with_scope(&mut self.state.scope, &runnable)
            .map_err(|error| self.runtime_diagnostic(&error, Some(&key), span))?;
        ast.clear_statements();
        for function in ast.iter_functions() {
            self.state.function_scripts.insert(function.name.to_string(), key.clone());
            self.state.function_scripts.insert(format!("{}/{}", function.name, function.params.len()), key.clone());
        }
        // A later `fn` replaces the same name and arity.
        self.state.functions = self.state.functions.merge(&ast);
        self.call_programs.clear();
        Ok(())
    }

    /// Expands a cell. On failure the Rhai state is as before the call.
    pub fn expand(
        &mut self,
        forms: Vec<Sexp>,
        sources: &mut Vec<SourceFile>,
        single_level: bool,
    ) -> Result<ExpandedCell, Vec<Diagnostic>> {
        let saved = self.snapshot();
        self.printed.borrow_mut().clear();
        // What the `include` built-in made outside a cell (`:load x.rhai`) is no cell's.
        self.included.borrow_mut().clear();
        let mut expander = Expander {
            stage: self,
            sources,
            sites: Vec::new(),
            single_level,
            nodes: 0,
            warnings: Vec::new(),
            includes: Vec::new(),
            skipped: Vec::new(),
        };
        let result = expander.top_level(forms);
        let sites = std::mem::take(&mut expander.sites);
        let warnings = std::mem::take(&mut expander.warnings);
        let includes = std::mem::take(&mut expander.includes);
        let skipped = std::mem::take(&mut expander.skipped);
        match result {
            Ok(forms) => Ok(ExpandedCell {
                forms,
                sites,
                printed: std::mem::take(&mut *self.printed.borrow_mut()),
                warnings,
                includes,
                skipped,
            }),
            Err(failure) => {
                self.restore(saved);
                Err(vec![*failure])
            }
        }
    }
}

/// The interrupt flag shared with front ends.
pub(crate) fn new_interrupt_flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}
