//! A cell's trip through the session: a `:command`, or text through the pass list (`pipeline`)
//! → `commit` → run (`execute`) → benches (`benches`), as `eval_source` spells it.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::pipeline::{CellInput, CellOptions, Committed, EvalMode, Failed};
use super::Session;
use crate::timing::Phase;
use crate::{Item, Outcome};

impl Session {
    /// A cell under the current cell number (`:bench E` runs `(bench E)` as the cell it is).
    pub(super) fn eval_cell(&mut self, text: &str, progress: &mut dyn FnMut(&Outcome)) -> Outcome {
        self.interrupt.store(false, Ordering::SeqCst);
        // A cell boundary: no compiled code runs, so promoted code can be swapped in.
        self.install_promotions();
        let name = format!("cell {}", self.history.cell_count);
        if text.trim_start().starts_with(':') {
            return self.run_command(text);
        }
        self.history.last_cell = Some(text.to_string());
        let name_of_cell = name.clone();
        let mut outcome = self.eval_source(name, text.to_string(), CellOptions::of(EvalMode::Cell), progress);
        // Promotions swapped in before the cell, and before its benchmarks ran.
        outcome.timing.promotions = std::mem::take(&mut self.tiering.unreported);
        self.history.trace.record(&name_of_cell, &outcome.timing);
        self.history.last_timing = Some(outcome.timing.clone());
        if self.history.show_timing {
            outcome.items.push(Item::Timing(outcome.timing.clone()));
        }
        outcome
    }

    /// One cell through the whole pipeline: compile (the pass list) → commit → run → benches.
    pub(super) fn eval_source(
        &mut self,
        name: String,
        text: String,
        options: CellOptions,
        progress: &mut dyn FnMut(&Outcome),
    ) -> Outcome {
        // The cell's text becomes this source when it is read (the pass list's first step).
        let source = crate::source::SourceId(self.history.sources.len() as u32);
        let compiled = match self.compile(CellInput::Text { name, text }, options) {
            Ok(compiled) => compiled,
            // The pass list's transaction has put the staging state back.
            Err(Failed(outcome)) => return *outcome,
        };
        if options.mode == EvalMode::Compile {
            // Compiled, and stored in the object cache: not committed, nothing run.
            return compiled.abandon();
        }
        let Committed { mut outcome, cell, entries, session_forms } = compiled.commit();
        let run_start = Instant::now();
        outcome.timing.started = Some(run_start);
        // A bench's report is its output: nothing of the cell is shown before it ends but an
        // autotune's progress line, with what the cell showed before its benches (a prefix of
        // the final outcome: the benches' reports come after it).
        if session_forms.is_empty() {
            self.run_top_level(&cell, &entries, options.mode, &mut outcome, progress);
        } else {
            self.run_top_level(&cell, &entries, options.mode, &mut outcome, &mut |_| {});
            if !outcome.failed() {
                let mut shown = outcome.clone();
                let mut status = |line: &str| {
                    shown.status = Some(line.to_string());
                    progress(&shown);
                };
                self.run_benches(&session_forms, &mut outcome, &mut status);
            }
        }
        outcome.timing.add(Phase::Run, run_start.elapsed());
        // The cell has run: code of it (and of its benches) that no slot points to is unreachable.
        self.program.release_finished();
        if options.mode == EvalMode::Cell {
            self.journal_cell(source, &outcome);
        }
        self.finish(outcome)
    }

    /// What a cell shows, with the sources its diagnostics point into.
    fn finish(&self, mut outcome: Outcome) -> Outcome {
        self.history.attach_sources(&mut outcome);
        outcome
    }
}
