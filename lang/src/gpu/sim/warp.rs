//! Warps in the simulator (docs/language.md §7.9). A warp is 32 consecutive threads of a block
//! (x fastest, then y, then z). A thread at a collective warp operation suspends its fiber with a
//! `Request`; between the block's rounds the executor calls `resolve`, which completes every
//! operation whose MASK's lanes have all arrived at the same operation and makes them runnable
//! again with their results — or reports, as compute-sanitizer's synccheck would, a MASK that
//! names a lane that finished, waits at a barrier, waits at another warp operation, or does not
//! exist, and a shuffle that reads a lane its MASK does not name.

use crate::tree::WarpOp;

/// Lanes of a warp.
pub(super) const WARP: usize = 32;

/// A lane waiting at a collective warp operation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Request {
    pub site: u32,
    pub op: WarpOp,
    pub mask: u32,
    /// The lane's value as 64 bits (a predicate as 0 or 1).
    pub value: u64,
    /// A shuffle's lane, distance or xor mask.
    pub operand: i32,
}

/// What a thread of a block is doing between rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Waiting {
    Runnable,
    /// At the `syncthreads` of this site.
    Barrier(u32),
    /// At a collective warp operation (its `Request`).
    Warp,
    Done,
}

/// A synccheck report: the message and the site of the operation it is about.
pub(super) struct Stuck {
    pub message: String,
    pub site: u32,
}

/// Completes every warp operation whose lanes have all arrived: each lane's result goes to
/// `results`, the lane becomes runnable and its warp's epoch (`epochs`, by warp) counts one
/// more. Returns whether any completed. `describe` names a thread of the block by its index;
/// `kernel` names the kernel.
pub(super) fn resolve(
    states: &mut [Waiting],
    requests: &[Option<Request>],
    results: &mut [u64],
    epochs: &mut [u32],
    describe: &dyn Fn(usize) -> String,
    kernel: &str,
) -> Result<bool, Stuck> {
    let mut progress = false;
    let threads = states.len();
    for first in (0..threads).step_by(WARP) {
        let lanes = (threads - first).min(WARP);
        for lane in 0..lanes {
            let thread = first + lane;
            if states[thread] != Waiting::Warp {
                continue;
            }
            let Some(request) = requests[thread] else { continue };
            let stuck =
                |message: String| Stuck { message: format!("kernel `{kernel}`: {message}"), site: request.site };
            let name = request.op.name();
            if request.mask & (1 << lane) == 0 {
                return Err(stuck(format!(
                    "{} calls `{name}` with a MASK ({:#010x}) that does not name its own lane {lane}",
                    describe(thread),
                    request.mask
                )));
            }
            let mut ready = true;
            for other in 0..WARP {
                if request.mask & (1 << other) == 0 {
                    continue;
                }
                if other >= lanes {
                    return Err(stuck(format!(
                        "{} calls `{name}` with a MASK ({:#010x}) that names lane {other}, but its warp has {lanes} threads",
                        describe(thread),
                        request.mask
                    )));
                }
                let mate = first + other;
                match (states[mate], requests[mate]) {
                    (Waiting::Warp, Some(theirs)) if theirs.op == request.op && theirs.mask == request.mask => {}
                    (Waiting::Warp, Some(theirs)) => {
                        return Err(stuck(format!(
                            "{} waits at `{name}` with MASK {:#010x}, and lane {other} ({}) at `{}` with MASK {:#010x}: the lanes a MASK names must execute the same warp operation",
                            describe(thread),
                            request.mask,
                            describe(mate),
                            theirs.op.name(),
                            theirs.mask
                        )));
                    }
                    (Waiting::Runnable, _) | (Waiting::Warp, None) => ready = false,
                    (Waiting::Done, _) => {
                        return Err(stuck(format!(
                            "{} waits at `{name}`, whose MASK names lane {other} ({}), which finished without reaching it",
                            describe(thread),
                            describe(mate)
                        )))
                    }
                    (Waiting::Barrier(_), _) => {
                        return Err(stuck(format!(
                            "{} waits at `{name}`, whose MASK names lane {other} ({}), which waits at a `syncthreads` instead",
                            describe(thread),
                            describe(mate)
                        )))
                    }
                }
            }
            if !ready {
                continue;
            }
            complete(first, lanes, &request, requests, results, describe, kernel)?;
            // The warp's accesses before and after are ordered (racecheck).
            if let Some(epoch) = epochs.get_mut(first / WARP) {
                *epoch += 1;
            }
            for other in 0..lanes {
                if request.mask & (1 << other) != 0 {
                    states[first + other] = Waiting::Runnable;
                }
            }
            progress = true;
        }
    }
    Ok(progress)
}

/// The results of one warp operation for the lanes of its MASK.
fn complete(
    first: usize,
    lanes: usize,
    request: &Request,
    requests: &[Option<Request>],
    results: &mut [u64],
    describe: &dyn Fn(usize) -> String,
    kernel: &str,
) -> Result<(), Stuck> {
    let mask = request.mask;
    let named = |lane: usize| lane < lanes && mask & (1 << lane) != 0;
    let value = |lane: usize| requests[first + lane].map_or(0, |request| request.value);
    let participants = (0..lanes).filter(|lane| named(*lane));
    match request.op {
        WarpOp::Ballot | WarpOp::All | WarpOp::Any => {
            let ballot =
                participants.clone().filter(|lane| value(*lane) != 0).fold(0u64, |bits, lane| bits | 1 << lane);
            let votes = participants.clone().count() as u32;
            let answer = match request.op {
                WarpOp::Ballot => ballot,
                WarpOp::All => u64::from(ballot.count_ones() == votes),
                _ => u64::from(ballot != 0),
            };
            for lane in participants {
                results[first + lane] = answer;
            }
        }
        WarpOp::Shfl | WarpOp::ShflUp | WarpOp::ShflDown | WarpOp::ShflXor => {
            for lane in participants {
                let theirs = requests[first + lane].unwrap_or(*request);
                let operand = theirs.operand as u32;
                // CUDA's width 32: a source outside the warp gives the lane its own value.
                let source = match request.op {
                    WarpOp::Shfl => Some((operand & 31) as usize),
                    WarpOp::ShflUp => lane.checked_sub(operand as usize),
                    WarpOp::ShflDown => Some(lane + operand as usize).filter(|source| *source < WARP),
                    _ => Some(lane ^ (operand & 31) as usize),
                };
                let source = source.unwrap_or(lane);
                if !named(source) {
                    return Err(Stuck {
                        message: format!(
                            "kernel `{kernel}`: {} reads lane {source} with `{}`, which its MASK ({mask:#010x}) does not name{}",
                            describe(first + lane),
                            request.op.name(),
                            if source >= lanes { " (the warp has no such lane)" } else { "" }
                        ),
                        site: theirs.site,
                    });
                }
                results[first + lane] = value(source);
            }
        }
        WarpOp::SyncWarp | WarpOp::LaneId | WarpOp::WarpSize => {}
    }
    Ok(())
}
