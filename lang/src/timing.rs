//! Timing: the closed set of phases a cell goes through, and the time each took.

use std::time::{Duration, Instant};

/// The phases of a cell, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Reading text into forms.
    Parse,
    /// Running unquotes (Rhai).
    Expand,
    /// Type checking.
    Check,
    /// Emitting LLVM IR.
    Codegen,
    /// LLVM IR passes.
    Optimise,
    /// Object code and ORC linking.
    Link,
    /// Running the compiled code.
    Run,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 7] = [Phase::Parse, Phase::Expand, Phase::Check, Phase::Codegen, Phase::Optimise, Phase::Link, Phase::Run];

    /// The phase's row name in timing tables.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Parse => "parse",
            Phase::Expand => "expand",
            Phase::Check => "check",
            Phase::Codegen => "codegen",
            Phase::Optimise => "optimise",
            Phase::Link => "link",
            Phase::Run => "run",
        }
    }
}

/// Time per phase for one cell.
#[derive(Clone, Debug, Default)]
pub struct PhaseTimes {
    /// Phases in the order they ran, each with its total duration.
    pub phases: Vec<(Phase, Duration)>,
}

impl PhaseTimes {
    /// Runs `work`, adding its duration to `phase`.
    pub(crate) fn time<T>(&mut self, phase: Phase, work: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let result = work();
        self.add(phase, start.elapsed());
        result
    }

    pub(crate) fn add(&mut self, phase: Phase, duration: Duration) {
        match self.phases.iter_mut().find(|(existing, _)| *existing == phase) {
            Some((_, total)) => *total += duration,
            None => self.phases.push((phase, duration)),
        }
    }

    /// The duration of one phase (zero if it did not run).
    pub fn get(&self, phase: Phase) -> Duration {
        self.phases.iter().find(|(existing, _)| *existing == phase).map_or(Duration::ZERO, |(_, duration)| *duration)
    }

    /// The sum of all phases.
    pub fn total(&self) -> Duration {
        self.phases.iter().map(|(_, duration)| *duration).sum()
    }
}
