//! The session's public types besides `Session` itself: its configuration, the handle that
//! interrupts it, why it could not start, completion candidates, and the optimisation levels
//! front ends name.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::gpu::Mode as GpuMode;

/// The optimisation level a session starts with: the lowest cell latency (see docs/performance.md); `:opt 3` for fast code.
pub const DEFAULT_OPT_LEVEL: u8 = 1;
/// The optimisation level of batch compilation (`quasi run`, `:load`), where nobody waits for a
/// prompt, unless a level was chosen.
pub const BATCH_OPT_LEVEL: u8 = 3;

/// How a session is set up.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Capture what compiled code writes to stdout into `Item::Output` (transcripts, kernel);
    /// otherwise it goes straight to the process's stdout (terminal, `quasi run`).
    pub capture_output: bool,
    /// The initial optimisation level, 0 to 3.
    pub opt_level: u8,
    /// Load the Rhai macro library of `prelude/` at start-up (and after `:reset`).
    pub load_prelude: bool,
    /// Where launches run; `None`: as `QUASI_GPU` says (`sim`, `sim-unchecked`, `device`), else
    /// on the device.
    pub gpu: Option<GpuMode>,
    /// Start the CUDA driver when a GPU form first needs it, not in the background at once.
    /// With it, a new session has no thread of its own until a cell runs code, so a process may
    /// fork it (`quasi server` does; CUDA does not survive a fork).
    pub defer_device: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            capture_output: false,
            opt_level: DEFAULT_OPT_LEVEL,
            load_prelude: true,
            gpu: None,
            defer_device: false,
        }
    }
}

/// Lets another thread interrupt what a session is doing: Rhai expansion, and compiled code,
/// which the executor thread stops where it stands (never inside libc or the runtime). The
/// handle only stores to an atomic flag, so a signal handler may use it.
#[derive(Clone, Debug)]
pub struct InterruptHandle(pub(super) Arc<AtomicBool>);

impl InterruptHandle {
    /// Asks the running cell to stop as soon as it can.
    pub fn interrupt(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A session could not be started (LLVM or the JIT failed to initialise).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// LLVM could not be set up for this machine.
    #[error("LLVM: {0}")]
    Llvm(String),
    /// The executor thread could not be started.
    #[error("could not start the executor thread: {0}")]
    Thread(#[from] std::io::Error),
    /// The Rhai prelude failed to load.
    #[error("the prelude {0} failed to load: {1}")]
    Prelude(String, String),
    /// A setting from the environment is not one the session knows.
    #[error("{0}")]
    Setting(String),
}

/// What a completion candidate names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionKind {
    /// A session function or a declared C function.
    Function,
    /// A session global.
    Global,
    /// A struct type.
    Struct,
    /// A form, opcode, cast or type name of the language.
    Form,
    /// A `:command`.
    Command,
    /// A C header file (or a folder of them) for `(include "…")`.
    Header,
}

/// One completion candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The text that completes the word.
    pub text: String,
    /// What it names.
    pub kind: CompletionKind,
    /// A function's signature, a global's type, a struct's fields, a command's usage; empty
    /// for forms.
    pub detail: String,
}
