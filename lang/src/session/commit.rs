//! Commit: the one place a cell changes the session. The pass list works out what the cell
//! changes in the environment (`EnvDelta`), once — the device build reads the environment with
//! it applied — and `Session::commit` applies it: the program takes the cell's code, names and
//! slots, the environment its definitions, the GPU its device builds, the session its
//! libraries. It returns what the cell defined, as data (`report::Defined`). Nothing here can
//! fail.
//!
//! Invariant: `env`, global values and slots change only here, after linking succeeded (the
//! Rhai view is marked stale here too). Faults and interrupts come after `commit`, so they
//! never cost a definition.

use super::history::{DefinitionKey, History};
use super::report::Defined;
use super::tier_state::Bitcode;
use super::Session;
use crate::check::{Env, FunctionEntry, FunctionKind};
use crate::gpu::DeviceBuilds;
use crate::intrinsics;
use crate::link::Linked;
use crate::source::Span;
use crate::tree::{GlobalDef, GlobalEntry, Resolution, TypedCell};
use crate::types::StructEntry;

/// The code a cell runs.
pub(super) enum Code {
    /// A call cell: its signature's trampoline, filled for this call (nothing to commit).
    Trampoline(usize),
    /// The cell's own code, linked, and its module for the background compiler.
    Linked { linked: Box<Linked>, bitcode: Option<Bitcode> },
}

/// What a cell changes in the environment.
#[derive(Default)]
pub(super) struct EnvDelta {
    /// Each struct, with the span of its definition.
    structs: Vec<(String, StructEntry, Span)>,
    /// Each global's definition (its initialiser, if it has one) and entry.
    globals: Vec<(GlobalDef, GlobalEntry)>,
    /// Declarations that do not replace a definition, with their spans.
    externs: Vec<(String, FunctionEntry, Span)>,
    /// Definitions, and the dependents recompiled with them (`true`), with their spans.
    definitions: Vec<(String, FunctionEntry, bool, Span)>,
    /// Functions a redefinition made ill-typed, and why.
    invalidated: Vec<(String, String)>,
}

impl EnvDelta {
    /// What `cell` changes in `env`. A definition keeps the text it was written as (`:defs`,
    /// `:ir NAME`); a declaration is provided by what `check` resolved it to.
    pub(super) fn of(cell: &TypedCell, env: &Env, history: &History) -> EnvDelta {
        let structs = cell
            .structs
            .iter()
            .map(|structure| (structure.name.clone(), StructEntry { fields: structure.fields.clone() }, structure.span))
            .collect();
        let globals = cell
            .globals
            .iter()
            .map(|global| (global.clone(), GlobalEntry::from_def(global, env.globals.get(&global.name))))
            .collect();
        let externs = cell
            .externs
            .iter()
            .filter(|decl| {
                !matches!(env.functions.get(&decl.name), Some(FunctionEntry { kind: FunctionKind::Defined(_), .. }))
            })
            .map(|decl| {
                let kind = match &decl.resolution {
                    _ if decl.name.starts_with("llvm.") || intrinsics::is_libdevice(&decl.name) => {
                        FunctionKind::External(decl.name.clone())
                    }
                    Some(resolution) => FunctionKind::from(resolution.clone()),
                    None => FunctionKind::Unresolved,
                };
                let entry = FunctionEntry {
                    signature: decl.signature.clone(),
                    param_names: Vec::new(),
                    kind,
                    invalidated: None,
                };
                (decl.name.clone(), entry, decl.span)
            })
            .collect();
        let definitions = cell
            .functions
            .iter()
            .chain(&cell.recompiled)
            .map(|function| {
                let recompiled = cell.recompiled.iter().any(|other| other.name == function.name);
                let param_names = function
                    .locals
                    .iter()
                    .take(function.signature.params.len())
                    .map(|local| local.name.clone())
                    .collect();
                let mut kept = function.clone();
                kept.source = kept.source.compact(history.span_text(function.span));
                let entry = FunctionEntry {
                    signature: function.signature.clone(),
                    param_names,
                    kind: FunctionKind::Defined(std::rc::Rc::new(kept)),
                    invalidated: None,
                };
                (function.name.clone(), entry, recompiled, function.span)
            })
            .collect();
        let invalidated = cell
            .invalidated
            .iter()
            .map(|invalidation| (invalidation.name.clone(), invalidation.message.clone()))
            .collect();
        EnvDelta { structs, globals, externs, definitions, invalidated }
    }

    /// Whether the cell changes nothing in the environment.
    pub(super) fn is_empty(&self) -> bool {
        self.structs.is_empty()
            && self.globals.is_empty()
            && self.externs.is_empty()
            && self.definitions.is_empty()
            && self.invalidated.is_empty()
    }

    /// `env` as the cell leaves it.
    pub(super) fn apply(&self, env: &mut Env) {
        for (name, entry, _) in &self.structs {
            env.structs.insert(name.clone(), entry.clone());
        }
        for (global, entry) in &self.globals {
            env.globals.insert(global.name.clone(), entry.clone());
        }
        for (name, entry, _) in &self.externs {
            env.functions.insert(name.clone(), entry.clone());
        }
        for (name, entry, _, _) in &self.definitions {
            env.functions.insert(name.clone(), entry.clone());
        }
        for (name, message) in &self.invalidated {
            if let Some(entry) = env.functions.get_mut(name) {
                entry.invalidated = Some(message.clone());
            }
        }
    }
}

impl Session {
    /// Makes a compiled cell part of the session; returns what it defined, in order.
    pub(super) fn commit(
        &mut self,
        cell: &TypedCell,
        delta: EnvDelta,
        code: Code,
        device: DeviceBuilds,
        level: u8,
        session_level: Option<u8>,
    ) -> Vec<Defined> {
        if let Some(level) = session_level {
            self.opt_level = level;
        }
        let mut defined = Vec::new();
        match code {
            Code::Linked { linked, bitcode } => {
                defined = self.commit_definitions(delta, *linked, level);
                self.queue_promotions(cell, bitcode, level);
            }
            // A call cell defines nothing.
            Code::Trampoline(_) => {}
        }
        self.gpu.install(device, cell, &mut self.program);
        defined.extend(self.commit_libraries());
        // Before any code of this cell, or of a bench or autotune variant, runs.
        self.settle_tiering();
        self.staging.view_stale = true;
        defined
    }

    /// The program takes the cell's code, names and slots; the environment its definitions.
    /// What they defined comes back in the order the cell wrote them (generated forms share
    /// their unquote's span and keep the order struct, global, declaration, function).
    fn commit_definitions(&mut self, delta: EnvDelta, linked: crate::link::Linked, level: u8) -> Vec<Defined> {
        // A map: an include declares thousands of functions, each with its trap.
        let traps: std::collections::HashMap<String, usize> = self.program.commit(linked).into_iter().collect();
        let trap = |name: &str| traps.get(name).copied();
        let mut defined = Vec::new();
        for (name, entry, span) in delta.structs {
            let redefined = self.env.structs.contains_key(&name);
            self.env.structs.insert(name.clone(), entry.clone());
            self.history.note_definition(DefinitionKey::Struct(name.clone()));
            defined.push((span, Defined::Struct { name, entry, redefined }));
        }
        for (global, entry) in delta.globals {
            let redefined = self.env.globals.contains_key(&global.name) && global.init.is_some();
            self.env.globals.insert(global.name.clone(), entry);
            if let Some(init) = &global.init {
                self.program.initialise_global(&global.name, &global.ty, init, &self.env.structs);
            }
            let value = self.program.global_value_text(&global.name, &global.ty, &self.env.structs);
            self.history.note_definition(DefinitionKey::Global(global.name.clone()));
            defined.push((global.span, Defined::Global { name: global.name, ty: global.ty, value, redefined }));
        }
        for (name, entry, span) in delta.externs {
            self.tiering.changed(&name);
            match (&entry.kind, trap(&name)) {
                (FunctionKind::Unresolved, Some(address)) => self.program.set_slot(&name, address),
                (FunctionKind::Library { address, .. }, _) => self.program.set_slot_foreign(&name, *address),
                _ => {}
            }
            self.env.functions.insert(name.clone(), entry.clone());
            self.history.note_definition(DefinitionKey::Function(name.clone()));
            defined.push((span, Defined::Function { name, entry, redefined: false }));
        }
        for (name, entry, recompiled, span) in delta.definitions {
            let previous = self.env.functions.get(&name);
            let redefined = matches!(previous, Some(FunctionEntry { kind: FunctionKind::Defined(_), .. }));
            if let FunctionKind::Defined(function) = &entry.kind {
                self.gpu.note_defined(&name, function);
                self.program.note_signature(&name, &function.signature);
            }
            self.tiering.changed(&name);
            self.compiled_levels.insert(name.clone(), level);
            self.env.functions.insert(name.clone(), entry.clone());
            self.history.note_definition(DefinitionKey::Function(name.clone()));
            if !recompiled {
                defined.push((span, Defined::Function { name, entry, redefined }));
            }
        }
        for (name, message) in delta.invalidated {
            if let Some(entry) = self.env.functions.get_mut(&name) {
                entry.invalidated = Some(message);
            }
            self.tiering.changed(&name);
            // Old code calling an invalidated function must not run it with the wrong types.
            if let Some(address) = trap(&name) {
                self.program.set_slot(&name, address);
            }
        }
        // A stable sort: what one unquote generated keeps its order above.
        defined.sort_by_key(|(span, _)| (span.source, span.start));
        defined.into_iter().map(|(_, defined)| defined).collect()
    }

    /// The cell's libraries become the session's, and every declaration still unresolved that
    /// one of them defines is bound to it: its slot, which held a trap, points at the symbol.
    fn commit_libraries(&mut self) -> Vec<Defined> {
        let added = self.libraries.commit_pending();
        if added.is_empty() {
            return Vec::new();
        }
        let mut defined: Vec<Defined> = added.into_iter().map(Defined::Library).collect();
        let mut unresolved: Vec<String> = self
            .env
            .functions
            .iter()
            .filter(|(_, entry)| matches!(entry.kind, FunctionKind::Unresolved))
            .map(|(name, _)| name.clone())
            .collect();
        unresolved.sort();
        for name in unresolved {
            let Some((library, address)) = self.libraries.find(&name) else { continue };
            let kind = FunctionKind::from(Resolution::Library { library: library.name.clone(), address });
            self.tiering.changed(&name);
            self.program.set_slot_foreign(&name, address);
            if let Some(entry) = self.env.functions.get_mut(&name) {
                entry.kind = kind;
                defined.push(Defined::Function { name: name.clone(), entry: entry.clone(), redefined: false });
            }
        }
        defined
    }
}
