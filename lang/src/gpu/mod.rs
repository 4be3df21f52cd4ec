//! GPU: where launches run and how device code is built for them.
//!
//! - `device`: the `Device` trait, which the CUDA device (`cuda`) and the simulator (`sim`)
//!   implement, and `Mode` (`:gpu`);
//! - `runtime`: what compiled host code calls (`abi::RT_GPU_*`): buffers, copies, launches,
//!   run on the device `:gpu` chose;
//! - `build`: the session's GPU side, which builds current code for every launched function
//!   before a cell runs — PTX (`ptx`) for the CUDA device, a host build (`sim::build`) for the
//!   simulator — from the session's definitions (`source`);
//! - `ptxas`: NVIDIA's assembler, for `:ptx`'s report and the tests.
//!
//! Nothing here knows C-Lisp's syntax; it moves bytes and builds the typed tree's device code.

mod build;
mod cuda;
mod device;
mod ptx;
pub mod ptxas;
mod runtime;
pub(crate) mod sim;
mod source;

pub(crate) use build::{DeviceBuilds, SessionGpu};
pub use cuda::probe;
pub use device::Mode;
pub(crate) use ptx::{default_ptx_subject, ptxas_line};
pub(crate) use source::DeviceSource;
