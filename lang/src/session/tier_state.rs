//! The state of tiered compilation the session keeps (`tiering.rs` drives it): the jobs in
//! flight, each function's newest quick body and generation, the promotions in use and the
//! unoptimised modules promotions copy callee bodies from.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crate::tier::Worker;
use crate::timing::Promotion;

/// A cell's module before optimisation, for the background compiler (tiered compilation).
pub(super) type Bitcode = Arc<[u8]>;

/// The unoptimised modules of at most this many cells are kept (about 3 KB each) to copy callee
/// bodies from and to promote again after a callee changed: functions defined longer ago are
/// called through their slots by promoted code, and stay at their level if a callee changes.
const MODULES_KEPT: usize = 512;

/// A function's newest quickly compiled body.
pub(super) struct Base {
    /// The program's id of the cell that holds it.
    pub(super) cell: u64,
    pub(super) address: usize,
    pub(super) level: u8,
    pub(super) defined: Instant,
}

/// A job the worker has not reported back yet.
pub(super) struct Pending {
    pub(super) base_cell: u64,
    /// (name, generation compiled from, new symbol).
    pub(super) functions: Vec<(String, u64, String)>,
    /// Callees copied in: (name, generation).
    pub(super) inlined: Vec<(String, u64)>,
    pub(super) cancelled: Arc<AtomicBool>,
}

/// A promotion whose code is linked and in use.
pub(super) struct Installed {
    pub(super) functions: Vec<String>,
}

/// Where a function's promotion stands until it is installed, for `:tier`.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum TierState {
    Queued,
    Failed(String),
}

/// The session's tiering state.
#[derive(Default)]
pub(super) struct Tiering {
    pub(super) worker: Worker,
    pub(super) next_job: u64,
    pub(super) pending: HashMap<u64, Pending>,
    /// The jobs each function is in, to cancel them when it changes (ids may be stale).
    pub(super) pending_by_name: HashMap<String, Vec<u64>>,
    /// The unoptimised modules of the newest live cells that hold bodies, by program cell id,
    /// and their ids oldest first.
    pub(super) modules: HashMap<u64, Bitcode>,
    pub(super) module_order: VecDeque<u64>,
    /// Kept modules whose cell's code the program removed: they go with their last base.
    pub(super) code_gone: HashSet<u64>,
    pub(super) bases: HashMap<String, Base>,
    /// How many functions' bases each cell holds.
    pub(super) base_counts: HashMap<u64, usize>,
    pub(super) generations: HashMap<String, u64>,
    /// Names whose definitions changed in the commit under way.
    pub(super) changed: Vec<String>,
    /// Promotions in use, by the program's id of their code.
    pub(super) installed: HashMap<u64, Installed>,
    /// The promotions each function was inlined into (ids may be stale).
    pub(super) inliners: HashMap<String, Vec<u64>>,
    /// Promotions installed since a cell's timing last showed them.
    pub(super) unreported: Vec<Promotion>,
    /// Functions queued for promotion or whose promotion failed.
    pub(super) states: HashMap<String, TierState>,
    /// Results dropped because a function they hold changed while they compiled.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) dropped: u64,
}

impl Tiering {
    pub(super) fn generation(&self, name: &str) -> u64 {
        self.generations.get(name).copied().unwrap_or(0)
    }

    /// The definition behind `name` changed (defined, recompiled, declared, invalidated, bound
    /// to a library): promotions compiled from the old one must not be used.
    pub(super) fn changed(&mut self, name: &str) {
        *self.generations.entry(name.to_string()).or_insert(0) += 1;
        if let Some(base) = self.bases.remove(name) {
            self.drop_base_of(base.cell);
        }
        self.states.remove(name);
        self.changed.push(name.to_string());
    }

    /// Keeps a cell's module, forgetting the oldest beyond `MODULES_KEPT`.
    pub(super) fn keep_module(&mut self, cell: u64, bitcode: Bitcode) {
        self.modules.insert(cell, bitcode);
        self.module_order.push_back(cell);
        while self.module_order.len() > MODULES_KEPT {
            if let Some(oldest) = self.module_order.pop_front() {
                self.modules.remove(&oldest);
                self.code_gone.remove(&oldest);
            }
        }
    }

    pub(super) fn forget_module(&mut self, cell: u64) {
        self.code_gone.remove(&cell);
        if self.modules.remove(&cell).is_some() {
            self.module_order.retain(|kept| *kept != cell);
        }
    }

    /// How many cells' modules are kept.
    #[cfg(test)]
    pub(super) fn modules_kept(&self) -> usize {
        self.modules.len()
    }

    /// Whether a cell holds some function's current quick body.
    pub(super) fn is_base(&self, cell: u64) -> bool {
        self.base_counts.contains_key(&cell)
    }

    /// `name`'s newest quick body is `base`.
    pub(super) fn set_base(&mut self, name: &str, base: Base) {
        *self.base_counts.entry(base.cell).or_insert(0) += 1;
        if let Some(old) = self.bases.insert(name.to_string(), base) {
            self.drop_base_of(old.cell);
        }
    }

    /// A base in `cell` is gone; the cell's module goes with its last one if its code is gone.
    pub(super) fn drop_base_of(&mut self, cell: u64) {
        if let Some(count) = self.base_counts.get_mut(&cell) {
            *count -= 1;
            if *count == 0 {
                self.base_counts.remove(&cell);
                if self.code_gone.contains(&cell) {
                    self.forget_module(cell);
                }
            }
        }
    }

    /// Forgets what belonged to code the program removed. A cell's module outlives its code
    /// while it holds a function's current quick body: a promotion without inlined callees
    /// lets that code go, but the body is still copied into its callers' promotions.
    pub(super) fn forget_removed(&mut self, removed: Vec<u64>) {
        for id in removed {
            match self.is_base(id) && self.modules.contains_key(&id) {
                true => _ = self.code_gone.insert(id),
                false => self.forget_module(id),
            }
            self.installed.remove(&id);
        }
    }
}
