//! quasi-lang: the Quasi language and session engine.
//!
//! A cell's trip, as `session` spells it: `reader` (text to spanned forms) → `expand` (unquotes
//! run in Rhai) → `check` (types, the `TypedCell` of `tree`) → `codegen` (LLVM IR, one module
//! per cell) → `backend` (passes, object code) → `link` (names, slots, ORC through `jit`) →
//! commit → `run` (the guarded call). Front ends call [`Session::eval`] and render the
//! [`Outcome`]; nothing in this crate prints or knows terminals or sockets. Modules import only
//! the stages before them (`scripts/module-graph` checks that there is no cycle).
#![deny(missing_docs)]

mod abi;
mod backend;
mod bench;
mod check;
mod codegen;
mod command;
mod cost;
mod diagnostics;
mod expand;
mod files;
mod gpu;
mod guard;
mod header;
mod helper;
mod inspect;
mod intrinsics;
mod jit;
mod link;
mod outcome;
mod reader;
mod reference;
mod run;
mod session;
mod source;
mod tier;
mod timeline;
mod timing;
mod tree;
mod tune_cache;
mod types;
mod value;

// The session: what front ends drive.
/// Where `quasi run` keeps compiled objects (`Session::set_object_cache`).
pub use backend::ObjectCache;
/// Where launches run (`SessionConfig::gpu`).
pub use gpu::Mode as GpuMode;
pub use reader::{completeness, Completeness};
pub use session::journal::run_tune_worker;
pub use session::{
    Completion, CompletionKind, InterruptHandle, Session, SessionConfig, SessionError, BATCH_OPT_LEVEL,
    DEFAULT_OPT_LEVEL,
};
pub use tune_cache::TuneCache;

/// The stack a thread that drives a `Session` should have: checking and code generation recurse
/// over a cell's forms, and Rhai recurses over nested values (an array nested 10,000 deep in a
/// debug build overflows 8 MiB). Only the pages used are resident.
pub const SESSION_STACK: usize = 256 << 20;

// What a cell produced: plain data that front ends render.
pub use diagnostics::{Diagnostic, Kind, Label, Severity};
pub use files::{read_source, MAX_SOURCE_BYTES};
pub use outcome::{Item, Language, Outcome, Stream};
pub use source::{SourceFile, SourceId, Span};
pub use timeline::{SpanKind, Timeline, TimelineSpan};
pub use timing::{
    AutotuneReport, BenchReport, DeviceTiming, Lane, Phase, PhaseTimes, Promotion, Throughput, VariantReport,
    VariantSource,
};

/// What front ends use beside a session: the CUDA device probe, NVIDIA's PTX assembler, the
/// object cache's settings, the level short scripts compile at, and whether a child process
/// has ended (without reaping it).
pub mod tools {
    pub use crate::backend::{CACHE_BUDGET, CACHE_VARIABLE};
    pub use crate::bench::slurm::{missing_slurm, SLURM_BINARY_VARIABLE, SLURM_DIR_VARIABLE};
    pub use crate::cost::SHORT_RUN_LEVEL;
    pub use crate::gpu::probe as gpu_probe;
    /// NVIDIA's PTX assembler: finding it, its resource report, occupancy (`:ptx`'s last line).
    pub use crate::gpu::ptxas;
    pub use crate::helper::has_ended as child_has_ended;
    pub use crate::tune_cache::{TUNE_CACHE_BUDGET, TUNE_CACHE_VARIABLE};
}
