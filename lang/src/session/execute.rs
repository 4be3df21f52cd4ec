//! Run: a committed cell's top-level code, in one call of its entries on the executor thread,
//! behind the fault guard; each item's output and value are shown as the items finish. Nothing
//! is compiled here: the pass list built the cell's code and its device code before commit.

use super::pipeline::EvalMode;
use super::top_level::TopLevelRun;
use super::Session;
use crate::run::Fault;
use crate::tree::TypedCell;
use crate::types::Ty;
use crate::value;
use crate::Outcome;

impl Session {
    /// Run: the cell's top-level code, in one call of its batched entries, until an item
    /// faults; each item's output and value are shown in order, as the items finish, values as
    /// the language spells them.
    pub(super) fn run_top_level(
        &mut self,
        cell: &TypedCell,
        entries: &[usize],
        mode: EvalMode,
        outcome: &mut Outcome,
        progress: &mut dyn FnMut(&Outcome),
    ) {
        if entries.is_empty() {
            return;
        }
        let structs = &self.env.structs;
        let size = cell.top.iter().filter_map(|item| item.value.as_ref()).map(|ty| value::size_align(ty, structs).0);
        let size = size.max().unwrap_or(0);
        let gpu = &self.gpu;
        let value_text = |bytes: &[u8], ty: &Ty| {
            value::format_value_with(bytes, 0, ty, structs, &|handle, element| gpu.describe_buffer(handle, element))
        };
        let mut shown = TopLevelRun::new(&cell.top, mode != EvalMode::Script);
        let capture = self.config.capture_output;
        // Output that is not captured goes to the terminal as it is written: each value must be
        // shown before the next item runs.
        let lockstep = !capture && mode == EvalMode::Cell;
        let report = self.runner.call(entries, size, capture, lockstep, &mut |done| {
            shown.absorb(done, false, outcome, &value_text);
            progress(outcome);
        });
        shown.absorb(report.rest, true, outcome, &value_text);
        outcome.timing.device.extend(self.gpu.runtime.take_rows());
        self.program.keep_allocations(report.allocations);
        let faulting = cell.top.get(shown.finished());
        match (report.fault, faulting) {
            // A script that calls exit ends as a C program does: with that status, quietly.
            (Some(Fault::Exit { status, .. }), _) if mode != EvalMode::Cell => self.script_exit = Some(status),
            // An interrupt that came after the last item stopped nothing.
            (Some(Fault::Interrupted { .. }), None) => progress(outcome),
            (Some(fault), item) => {
                // Every item finished yet the call faulted: the last item's, after its end.
                if let Some(item) = item.or(cell.top.last()) {
                    outcome.diagnostics.push(self.fault_diagnostic(&fault, item.function.span));
                }
            }
            (None, _) => progress(outcome),
        }
    }
}
