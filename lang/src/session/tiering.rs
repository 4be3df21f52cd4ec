//! Tiered compilation, the session's side: which bodies go to the background compiler
//! (`tier`), and installing what it sends back at a cell boundary.
//!
//! Every cell compiled at a quick level (`:opt` not pinned, below 3) hands its unoptimised module
//! to the worker, which recompiles the cell's host bodies at opt 3 with the bodies of their
//! callees copied in for inlining. Nothing is installed while code runs: at the start of each
//! cell (and by `:tier wait`) the finished objects are linked and the functions' slots pointed at
//! them, so a call always runs one whole version. A result is used only if every function it
//! holds, and every callee copied into it, still has the definition it was compiled from (a
//! generation per name, bumped by every commit that changes the name); otherwise it is dropped,
//! and its functions queued again if they are still current. A promoted body whose inlined
//! callee is later redefined is swapped back to its quick body at once (in that commit, before
//! any code runs) and queued again. The quick body stays linked while its promotion lives.
//!
//! Policy: every host function is promoted, newest first, by one worker thread at a lower
//! priority — measured on the 2-core dev machine, a cell's latency with the worker busy stays
//! within noise of an idle one (README, performance), and counting calls first would cost the
//! quick code a counter on every call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::tier_state::Bitcode;
use super::tier_state::{Base, Installed, Pending, TierState};
use super::Session;
use crate::check::FunctionKind;
use crate::diagnostics::{Diagnostic, Kind};
use crate::tier::{Callee, CalleeBody, Done, Job, PROMOTED_LEVEL};
use crate::timing::Promotion;
use crate::tree::TypedCell;

/// How long `:tier wait` sleeps between looks at the interrupt flag.
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// At most this many callees' bodies are copied into one promotion.
const CALLEES_PER_JOB: usize = 16;

impl Session {
    /// Whether a function's code is a background promotion's.
    pub(super) fn promoted(&self, name: &str) -> bool {
        self.program.slot_owner(name).is_some_and(|owner| self.tiering.installed.contains_key(&owner))
    }

    /// Whether cells are compiled quickly and promoted in the background.
    pub(super) fn tiering_active(&self) -> bool {
        self.tiering_active_at(self.opt_level)
    }

    /// Whether code compiled at `level` is promoted in the background.
    pub(super) fn tiering_active_at(&self, level: u8) -> bool {
        !self.opt_pinned && level < PROMOTED_LEVEL
    }

    /// At the end of every commit (cells, and the quiet cells of benches and autotune variants):
    /// promotions into which a callee that changed was inlined go back to their quick bodies,
    /// and jobs whose functions all changed are cancelled.
    pub(super) fn settle_tiering(&mut self) {
        let removed = self.program.take_removed();
        self.tiering.forget_removed(removed);
        for name in std::mem::take(&mut self.tiering.changed) {
            for id in self.tiering.inliners.remove(&name).unwrap_or_default() {
                self.revert_promotion(id);
            }
            let jobs = self.tiering.pending_by_name.remove(&name).unwrap_or_default();
            let tiering = &self.tiering;
            for id in jobs {
                let Some(pending) = tiering.pending.get(&id) else { continue };
                let current = |(name, generation, _): &(String, u64, String)| tiering.generation(name) == *generation;
                if !pending.functions.iter().any(current) {
                    pending.cancelled.store(true, Ordering::SeqCst);
                }
            }
        }
    }

    /// After a cell's commit: its host bodies are queued for promotion.
    pub(super) fn queue_promotions(&mut self, cell: &TypedCell, bitcode: Option<Bitcode>, level: u8) {
        let Some(bitcode) = bitcode else { return };
        let cell_id = self.program.last_cell();
        let mut names = Vec::new();
        for function in cell.functions.iter().chain(&cell.recompiled) {
            if function.placement.device_only {
                continue;
            }
            let Some(address) = self.program.slot_value(&function.name) else { continue };
            let base = Base { cell: cell_id, address, level, defined: Instant::now() };
            self.tiering.set_base(&function.name, base);
            names.push(function.name.clone());
        }
        if names.is_empty() {
            return;
        }
        self.tiering.keep_module(cell_id, bitcode);
        self.submit_promotion(cell_id, names);
    }

    /// Queues the recompilation of `names`, whose quick bodies are in the cell `base_cell`.
    fn submit_promotion(&mut self, base_cell: u64, names: Vec<String>) {
        let Some(bitcode) = self.tiering.modules.get(&base_cell).cloned() else { return };
        let mut bodies = Vec::new();
        let mut functions = Vec::new();
        for name in &names {
            // A quick body's symbol is the function's newest committed one (promotions do not
            // change it).
            let (Some(_), Some(symbol)) = (self.tiering.bases.get(name), self.program.body_symbol(name)) else {
                continue;
            };
            let symbol = symbol.to_string();
            let new = self.program.fresh_body_symbol(&format!("{name}#opt{PROMOTED_LEVEL}"));
            bodies.push((symbol, new.clone()));
            functions.push((name.clone(), self.tiering.generation(name), new));
        }
        if functions.is_empty() {
            return;
        }
        let mut callees = Vec::new();
        let mut inlined = Vec::new();
        for callee in callee_names(&self.env, &names) {
            if callees.len() == CALLEES_PER_JOB {
                break;
            }
            let Some(base) = self.tiering.bases.get(&callee) else { continue };
            let body = match functions.iter().find(|(name, _, _)| *name == callee) {
                Some((_, _, new)) => CalleeBody::Promoted(new.clone()),
                None => match self.tiering.modules.get(&base.cell) {
                    Some(module) if module.len() <= crate::tier::CALLEE_BITCODE_LIMIT => {
                        let Some(symbol) = self.program.body_symbol(&callee) else { continue };
                        CalleeBody::Module { bitcode: module.clone(), symbol: symbol.to_string() }
                    }
                    _ => continue,
                },
            };
            inlined.push((callee.clone(), self.tiering.generation(&callee)));
            callees.push(Callee { name: callee, body });
        }
        self.tiering.next_job += 1;
        let id = self.tiering.next_job;
        let cancelled = Arc::new(AtomicBool::new(false));
        for (name, _, _) in &functions {
            self.tiering.states.insert(name.clone(), TierState::Queued);
            self.tiering.pending_by_name.entry(name.clone()).or_default().push(id);
        }
        self.tiering.pending.insert(id, Pending { base_cell, functions, inlined, cancelled: cancelled.clone() });
        self.tiering.worker.submit(Job { id, bitcode, bodies, callees, cancelled });
    }

    /// Installs every promotion the worker finished (at a cell boundary: no compiled code runs).
    pub(super) fn install_promotions(&mut self) {
        for done in self.tiering.worker.finished() {
            self.install(done);
        }
    }

    /// `:tier wait`: waits for the background compiler to finish everything queued, installing
    /// as results come; an interrupt stops the wait (not the compiler).
    pub(super) fn wait_for_promotions(&mut self) -> Result<(), Diagnostic> {
        self.install_promotions();
        while self.tiering.worker.outstanding() > 0 {
            if self.interrupt.swap(false, Ordering::SeqCst) {
                return Err(Diagnostic::error(
                    Kind::Interrupted,
                    "interrupted while waiting for the background compiler",
                )
                .with_note("the functions not promoted yet keep running their quick code"));
            }
            if let Some(done) = self.tiering.worker.next_finished(WAIT_SLICE) {
                self.install(done);
            }
        }
        self.install_promotions();
        Ok(())
    }

    fn install(&mut self, done: Done) {
        let Some(pending) = self.tiering.pending.remove(&done.id) else { return };
        for (name, _, _) in &pending.functions {
            if let Some(jobs) = self.tiering.pending_by_name.get_mut(name) {
                jobs.retain(|job| *job != done.id);
                if jobs.is_empty() {
                    self.tiering.pending_by_name.remove(name);
                }
            }
        }
        let tiering = &self.tiering;
        let current: Vec<(String, String)> = pending
            .functions
            .iter()
            .filter(|(name, generation, _)| {
                tiering.generation(name) == *generation
                    && tiering.bases.get(name).is_some_and(|base| base.cell == pending.base_cell)
            })
            .map(|(name, _, symbol)| (name.clone(), symbol.clone()))
            .collect();
        if current.is_empty() {
            self.tiering.dropped += 1;
            return;
        }
        let inlined_current = pending.inlined.iter().all(|(name, generation)| tiering.generation(name) == *generation);
        let object = match done.result {
            None => {
                // Dropped from a full queue: the functions keep their quick code.
                for (name, _) in &current {
                    self.tiering.states.remove(name);
                }
                return;
            }
            Some(Err(message)) => {
                for (name, _) in &current {
                    self.tiering.states.insert(name.clone(), TierState::Failed(message.clone()));
                }
                return;
            }
            Some(Ok(_)) if !inlined_current => {
                // A callee changed while it compiled: compile again against the new one.
                self.tiering.dropped += 1;
                let names = current.into_iter().map(|(name, _)| name).collect();
                self.submit_promotion(pending.base_cell, names);
                return;
            }
            Some(Ok(object)) => object,
        };
        let name = format!("promoted#{}", done.id);
        // Only code with inlined callees may have to go back to its quick bodies.
        let hold = !pending.inlined.is_empty();
        let linked = self.program.link_promoted(&object, &name, &current, pending.base_cell, hold);
        let (promoted_cell, addresses) = match linked {
            Ok(linked) => linked,
            Err(diagnostic) => {
                for (name, _) in &current {
                    self.tiering.states.insert(name.clone(), TierState::Failed(diagnostic.message.clone()));
                }
                return;
            }
        };
        let now = Instant::now();
        let mut functions = Vec::new();
        for ((name, _), address) in current.into_iter().zip(addresses) {
            self.program.point_slot_into(&name, address, promoted_cell);
            self.compiled_levels.insert(name.clone(), PROMOTED_LEVEL);
            self.tiering.states.remove(&name);
            let since_definition = self.tiering.bases.get(&name).map_or(Duration::ZERO, |base| now - base.defined);
            self.tiering.unreported.push(Promotion {
                function: name.clone(),
                level: PROMOTED_LEVEL,
                compile: done.compile,
                since_definition,
            });
            functions.push(name);
        }
        for (callee, _) in &pending.inlined {
            self.tiering.inliners.entry(callee.clone()).or_default().push(promoted_cell);
        }
        self.tiering.installed.insert(promoted_cell, Installed { functions });
    }

    /// A promotion into which a callee since redefined was inlined: its functions go back to
    /// their quick bodies, which call the callee through its slot, and are queued again.
    fn revert_promotion(&mut self, id: u64) {
        let Some(installed) = self.tiering.installed.remove(&id) else { return };
        let mut requeue: HashMap<u64, Vec<String>> = HashMap::new();
        for name in installed.functions {
            if self.program.slot_owner(&name) != Some(id) {
                continue;
            }
            let Some(base) = self.tiering.bases.get(&name) else { continue };
            let (cell, address, level) = (base.cell, base.address, base.level);
            self.program.point_slot_into(&name, address, cell);
            self.compiled_levels.insert(name.clone(), level);
            self.tiering.states.remove(&name);
            requeue.entry(cell).or_default().push(name);
        }
        for (cell, names) in requeue {
            self.submit_promotion(cell, names);
        }
    }
}

/// The session functions `names` call (through slots), in name order.
fn callee_names(env: &crate::check::Env, names: &[String]) -> Vec<String> {
    let mut callees: Vec<String> = names
        .iter()
        .filter_map(|name| crate::check::defined(env, name))
        .flat_map(|function| {
            function.uses.iter().filter_map(|used| used.strip_prefix("fn:")).map(str::to_string).collect::<Vec<_>>()
        })
        .filter(|callee| matches!(env.functions.get(callee).map(|entry| &entry.kind), Some(FunctionKind::Defined(_))))
        .collect();
    callees.sort_unstable();
    callees.dedup();
    callees
}
