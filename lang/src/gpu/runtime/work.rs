//! What the runtime keeps of asynchronous device work (docs/language.md §7.8): encoders and
//! their recorded commands, submissions and their fences, `host-alloc` memory. Plain data; the
//! forms that use it are `encode`'s. Handles are numbered from 1 and never reused, so a long
//! session (an autotune submits thousands of times) keeps only what is live: `submit` forgets
//! its encoder and `await` its submission, and a number issued but forgotten is an encoder
//! that was submitted, or a submission that ended and was awaited.

use std::collections::HashMap;
use std::sync::Arc;

use crate::abi::{LaunchArg, LAUNCH_DIMENSIONS};
use crate::gpu::device::Fence;

/// A command as `encode-copy` or `encode-call` recorded it: handles, not yet addresses.
pub(super) enum Encoded {
    Copy { direction: i64, destination: i64, source: i64, count: i64, element_size: i64 },
    Call { name: String, dimensions: [i64; LAUNCH_DIMENSIONS], args: Vec<LaunchArg> },
}

pub(super) struct Encoder {
    pub(super) place: &'static str,
    pub(super) commands: Vec<Encoded>,
}

pub(super) struct Submitted {
    pub(super) place: &'static str,
    pub(super) fence: Arc<Fence>,
    /// The buffers its commands use, which `gpu-free` must not free while it runs.
    pub(super) buffers: Vec<u64>,
}

/// The runtime's encoders, submissions and `host-alloc` memory.
#[derive(Default)]
pub(super) struct Work {
    pub(super) encoders: HashMap<u64, Encoder>,
    pub(super) next_encoder: u64,
    pub(super) submissions: HashMap<u64, Submitted>,
    pub(super) next_submission: u64,
    /// `host-alloc` memory by address: the device that made it.
    pub(super) hosts: HashMap<u64, &'static str>,
}

impl Work {
    /// The running submission that uses buffer `handle`, if any.
    pub(super) fn user_of(&self, handle: u64) -> Option<u64> {
        let mut users: Vec<u64> = self
            .submissions
            .iter()
            .filter(|(_, submitted)| submitted.buffers.contains(&handle) && !submitted.fence.is_ended())
            .map(|(id, _)| *id)
            .collect();
        users.sort_unstable();
        users.first().copied()
    }
}
