//! Benchmarks and autotuning (`bench`) driven by the session: each timing loop, variant and
//! check they make is a further cell through the pass list (`EvalMode::Quiet`), committed like
//! any other, and run on the executor; the run step itself never compiles.

use super::pipeline::{CellInput, CellOptions, Committed, EvalMode, Failed};
use super::Session;
use crate::bench::{self, Pipeline, QuietCell};
use crate::check::Env;
use crate::diagnostics::Diagnostic;
use crate::gpu::Mode as GpuMode;
use crate::reader::{Sexp, Span};
use crate::tier::PROMOTED_LEVEL;
use crate::tune_cache::TuneCache;
use crate::Outcome;

impl Session {
    /// Runs the cell's `(bench …)` and `(autotune …)` forms after its code. A benchmark measures
    /// the code that will run from now on: the opt 3 code of tiered compilation, once the
    /// background compiler has it (an interrupt stops the wait).
    pub(super) fn run_benches(&mut self, forms: &[Sexp], outcome: &mut Outcome, status: &mut dyn FnMut(&str)) {
        match self.wait_for_promotions() {
            Ok(()) => bench::run_session_forms(self, forms, outcome, status),
            Err(diagnostic) => outcome.diagnostics.push(diagnostic),
        }
    }
}

impl Session {
    /// The level benches, autotune variants and their checks compile at: the level code runs at
    /// from now on — the promoted level when tiered compilation would promote it later.
    fn bench_level(&self) -> u8 {
        if self.tiering_active() {
            PROMOTED_LEVEL
        } else {
            self.opt_level
        }
    }
}

impl Pipeline for Session {
    fn compile_quietly(&mut self, forms: &[Sexp], with_clock: bool) -> Result<QuietCell, Vec<Diagnostic>> {
        let options = CellOptions { with_clock, level: Some(self.bench_level()), ..CellOptions::of(EvalMode::Quiet) };
        let compiled =
            self.compile(CellInput::Forms(forms.to_vec()), options).map_err(|Failed(outcome)| outcome.diagnostics)?;
        let Committed { cell, entries, .. } = compiled.commit();
        Ok((cell.top.iter().map(|item| item.value.clone()).collect(), entries))
    }

    fn call_for_value(&mut self, entry: usize, size: usize, span: Span) -> Result<Vec<u8>, Vec<Diagnostic>> {
        // Bench and autotune runs: their output is not shown, only what they measure.
        let report = self.runner.call(&[entry], size, self.config.capture_output, false, &mut |_| {});
        self.gpu.runtime.take_rows();
        self.program.keep_allocations(report.allocations);
        match report.fault {
            Some(fault) => Err(vec![self.fault_diagnostic(&fault, span)]),
            None => Ok(report.result),
        }
    }

    fn expand_quietly(&mut self, form: &Sexp) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
        self.refresh_view_if_stale();
        self.staging.stage.expand(vec![form.clone()], &mut self.history.sources, false).map(|expanded| expanded.forms)
    }

    fn env(&self) -> &Env {
        &self.env
    }

    fn tune_cache(&self) -> Option<&TuneCache> {
        self.tune_cache.as_ref()
    }

    fn interrupt_flag(&self) -> &std::sync::atomic::AtomicBool {
        Session::interrupt_flag(self)
    }

    fn tune_executor(&self) -> Option<crate::bench::SlurmOptions> {
        self.tune_executor.clone()
    }

    fn replay_job(&self) -> (Vec<String>, Vec<crate::bench::slurm::JobCell>) {
        Session::replay_job(self)
    }

    fn replay_as(&mut self, span: Span, text: String) {
        self.replace_in_replay(span, text);
    }

    fn tuning_machine(&self, gpu: bool) -> String {
        let (cpu, features) = self.backend.host();
        let gpu = match (gpu, self.gpu.runtime.mode()) {
            (false, _) => "none".to_string(),
            (true, GpuMode::Sim { check: true }) => "the simulator, checked".to_string(),
            (true, GpuMode::Sim { check: false }) => "the simulator, unchecked".to_string(),
            (true, GpuMode::Device) => self.gpu.runtime.describe_mode(),
        };
        format!("cpu {cpu}\nfeatures {features}\nopt {}\ngpu {gpu}\n", self.bench_level())
    }
}
