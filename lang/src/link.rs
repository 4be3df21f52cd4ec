//! Link: the symbol names of a cell (function bodies, global storage, struct types), the
//! indirection slots, the storage of globals, linking a cell's object into ORC, and
//! committing what linked into the session's program.
//!
//! Invariant: every call between user functions loads the callee's slot, and a slot always
//! holds the newest linked definition, so every caller sees the newest definition.
//! Invariant: a cell's names are chosen before code generation but become the program's only
//! in `commit`, after ORC linked the cell; a cell that fails to link leaves no code behind.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::check::{Env, FunctionKind};
use crate::codegen::{self, FaultSite, Naming, Thunk};
use crate::diagnostics::Diagnostic;
use crate::jit::{CellCode, Jit};
use crate::tree::{visit_exprs, Constant, ExprKind, FunctionAddress, TypedCell};
use crate::types::StructEntry;
use crate::types::Ty;
use crate::value;

/// What `Program::function_at` calls a cell's top-level code.
pub(crate) const TOP_LEVEL: &str = "top-level code";

/// Storage of one global, owned by the session and read by compiled code by symbol.
struct GlobalStorage {
    symbol: String,
    memory: *mut u8,
    layout: std::alloc::Layout,
}

impl GlobalStorage {
    fn new(symbol: String, size: usize, align: usize) -> GlobalStorage {
        // Address space 3 globals promise 16-byte alignment; use it for all.
        let layout = std::alloc::Layout::from_size_align(size.max(1), align.max(16))
            .unwrap_or(std::alloc::Layout::new::<u128>());
        // SAFETY: the layout has a non-zero size.
        let memory = unsafe { std::alloc::alloc_zeroed(layout) };
        if memory.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        GlobalStorage { symbol, memory, layout }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `memory` is a live allocation of `layout.size()` bytes until drop.
        unsafe { std::slice::from_raw_parts(self.memory, self.layout.size()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; compiled code is not running while the session writes.
        unsafe { std::slice::from_raw_parts_mut(self.memory, self.layout.size()) }
    }
}

impl Drop for GlobalStorage {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.memory, self.layout) }
    }
}

/// The names a cell's module is lowered with: existing symbols, and fresh ones for what the
/// cell defines. Fresh storage for new or retyped globals is allocated here and becomes the
/// program's in `commit`.
pub(crate) struct CellNames {
    global_symbols: HashMap<String, String>,
    new_globals: Vec<(String, GlobalStorage)>,
    struct_names: HashMap<String, String>,
    new_struct_names: HashMap<String, String>,
    body_symbols: HashMap<String, String>,
    first_site: u32,
    /// The `fn-ptr` thunks the cell uses.
    thunks: Thunks,
    /// The signature id each function with a new thunk has now (0: none), for its signature
    /// word if the cell makes the word.
    current_signatures: Vec<(String, u64)>,
}

impl CellNames {
    /// The names as code generation takes them.
    pub(crate) fn naming(&self) -> Naming<'_> {
        Naming {
            global_symbols: &self.global_symbols,
            struct_names: &self.struct_names,
            body_symbols: &self.body_symbols,
            first_site: self.first_site,
            thunks: &self.thunks,
        }
    }
}

/// The `fn-ptr` thunks a cell uses, by function name and signature text.
type Thunks = HashMap<(String, String), Thunk>;

/// What code generation emitted besides the module: the names the link step looks up.
pub(crate) struct Emitted {
    /// Entry symbols of the top-level items, in order.
    pub(crate) entries: Vec<String>,
    /// Runtime-check sites of the module, numbered from `CellNames::first_site`.
    pub(crate) fault_sites: Vec<FaultSite>,
    /// Traps for unresolved declarations and invalidated functions, by name.
    pub(crate) traps: Vec<String>,
}

/// A cell ORC has linked, not yet part of the program.
pub(crate) struct Linked {
    bodies: Vec<(String, usize)>,
    body_symbols: HashMap<String, String>,
    traps: Vec<(String, usize)>,
    entries: Vec<usize>,
    code: CellCode,
    fault_sites: Vec<FaultSite>,
    new_globals: Vec<(String, GlobalStorage)>,
    struct_names: HashMap<String, String>,
    /// The thunks this cell defines, which keep its code linked for the session.
    new_thunks: Vec<((String, String), String)>,
}

impl Linked {
    /// Addresses of the cell's top-level entries, in order.
    pub(crate) fn entries(&self) -> &[usize] {
        &self.entries
    }
}

/// A committed cell's code, and how many slots point into it (at its bodies or traps).
struct LiveCell {
    code: CellCode,
    slots: usize,
    /// Its runtime-check sites, a range of `Program::fault_sites`.
    sites: std::ops::Range<usize>,
    /// Where its entries and bodies start, keys of `Program::code_starts`.
    starts: Vec<usize>,
    /// It defines `fn-ptr` thunks, which C may call at any time: it is never removed.
    pinned: bool,
    /// A background promotion with inlined callees holds the cell its quick bodies are in for
    /// as long as it lives: a function goes back to its quick body if such a callee changes.
    holds: Option<u64>,
}

/// The session's linked program: the JIT and every cell's code, slots, global storage, and the
/// names chosen so far.
///
/// Invariant: a cell's code stays linked while a slot points into it or its top-level code may
/// still run; then it is removed and its memory reused. Only slots lead from one cell's code to
/// another's, so code no slot points into is unreachable once its cell has run (read-only data
/// stays: see `jit::memory`).
pub(crate) struct Program {
    // Field order matters for drop: the cells' code is released before the JIT is freed.
    cells: HashMap<u64, LiveCell>,
    /// Code of the GPU simulator's kernel builds, by id (`link_device`), and where it starts.
    device_code: HashMap<u64, (CellCode, usize)>,
    /// The cell whose code each slot points into.
    slot_owners: HashMap<String, u64>,
    /// Cells committed since `release_finished`: their top-level code may not have run yet.
    running: Vec<u64>,
    cell_counter: u64,
    /// Code kept for the session's life (call trampolines), released with the program.
    pinned_code: Vec<CellCode>,
    jit: Jit,
    /// One slot per function name, at a fixed address for the session's life.
    slots: HashMap<String, Box<AtomicUsize>>,
    globals: HashMap<String, GlobalStorage>,
    /// Storage of globals that were replaced (retyped): freed with the session, not before.
    retired_globals: Vec<GlobalStorage>,
    /// The LLVM name of every struct type, by C-Lisp name.
    struct_names: HashMap<String, String>,
    used_symbols: HashSet<String>,
    /// The last version `fresh_body_symbol` gave each name (1: the name itself).
    body_versions: HashMap<String, u32>,
    symbol_counter: u64,
    fault_sites: Vec<FaultSite>,
    /// The current body symbol of every defined function, for listings.
    body_symbols: HashMap<String, String>,
    /// Memory compiled code allocated for the session (`alloc` at the top level), freed with it.
    memory: Vec<usize>,
    /// Where each linked function body and top-level entry starts, to name the function an
    /// instruction address lies in (a cell's code is one contiguous block).
    code_starts: BTreeMap<usize, String>,
    /// The symbol of every `fn-ptr` thunk made, by function name and signature text.
    thunks: HashMap<(String, String), String>,
    /// One word per function a thunk was made for, at a fixed address for the session's life:
    /// the id of the function's current signature (0: none yet).
    signature_words: HashMap<String, Box<AtomicU64>>,
    /// Ids of signatures, by their text, from 1.
    signature_ids: HashMap<String, u64>,
    /// Cells removed since `take_removed`.
    removed: Vec<u64>,
}

impl Program {
    /// An empty program over a JIT that already resolves the runtime's symbols.
    pub(crate) fn new(jit: Jit) -> Program {
        Program {
            cells: HashMap::new(),
            device_code: HashMap::new(),
            slot_owners: HashMap::new(),
            running: Vec::new(),
            cell_counter: 0,
            jit,
            slots: HashMap::new(),
            globals: HashMap::new(),
            retired_globals: Vec::new(),
            struct_names: HashMap::new(),
            used_symbols: HashSet::new(),
            body_versions: HashMap::new(),
            symbol_counter: 0,
            fault_sites: Vec::new(),
            body_symbols: HashMap::new(),
            memory: Vec::new(),
            code_starts: BTreeMap::new(),
            thunks: HashMap::new(),
            signature_words: HashMap::new(),
            signature_ids: HashMap::new(),
            pinned_code: Vec::new(),
            removed: Vec::new(),
        }
    }

    fn signature_id(&mut self, signature: &str) -> u64 {
        let next = self.signature_ids.len() as u64 + 1;
        *self.signature_ids.entry(signature.to_string()).or_insert(next)
    }

    /// Records that `name` now has this signature, for the thunks made for it.
    pub(crate) fn note_signature(&mut self, name: &str, signature: &crate::types::Signature) {
        let id = self.signature_id(&signature.to_string());
        if let Some(word) = self.signature_words.get(name) {
            word.store(id, Ordering::SeqCst);
        }
    }

    /// The thunks the cell's code uses: those made earlier, and fresh symbols for new ones.
    fn name_thunks(&mut self, cell: &TypedCell, env: &Env) -> (Thunks, Vec<(String, u64)>) {
        let mut used = Vec::new();
        let bodies = cell
            .functions
            .iter()
            .chain(&cell.recompiled)
            .chain(cell.top.iter().map(|item| &item.function))
            .chain(cell.inline_bodies.values().map(|body| body.as_ref()));
        for function in bodies {
            visit_exprs(&function.body, &mut |expr| {
                if let ExprKind::FunctionAddress(address) = &expr.kind {
                    if let FunctionAddress::Thunk { name, signature } = address.as_ref() {
                        used.push((name.clone(), signature.clone(), expr.span));
                    }
                }
            });
        }
        let mut thunks = HashMap::new();
        let mut current_signatures = Vec::new();
        for (name, signature, span) in used {
            let key = (name.clone(), signature.to_string());
            if thunks.contains_key(&key) {
                continue;
            }
            let id = self.signature_id(&key.1);
            let (symbol, new) = match self.thunks.get(&key) {
                Some(symbol) => (symbol.clone(), false),
                None => {
                    self.symbol_counter += 1;
                    (format!("{name}#fn-ptr{}", self.symbol_counter), true)
                }
            };
            if new {
                let current = match env.functions.get(&name) {
                    Some(entry) if matches!(entry.kind, FunctionKind::Defined(_)) => {
                        self.signature_id(&entry.signature.to_string())
                    }
                    _ => 0,
                };
                current_signatures.push((name.clone(), current));
            }
            thunks.insert(key, Thunk { symbol, signature, id, new, span });
        }
        (thunks, current_signatures)
    }

    /// Names for a cell about to be compiled and linked: new storage for new or retyped
    /// globals, LLVM names for its structs, fresh body symbols for its functions.
    pub(crate) fn name_cell(&mut self, cell: &TypedCell, env: &Env) -> CellNames {
        let mut global_symbols = self.global_symbols();
        let mut new_globals = Vec::new();
        let overlay_structs = if cell.globals.is_empty() { HashMap::new() } else { structs_with(env, cell) };
        for global in &cell.globals {
            if global.init.is_none() {
                continue;
            }
            let (size, align) = value::size_align(&global.ty, &overlay_structs);
            // A global defined again with its type keeps its storage (commit re-initialises it):
            // code compiled earlier, and pointers the program holds, still refer to it.
            let same_type = env.globals.get(&global.name).is_some_and(|existing| existing.ty == global.ty);
            if same_type && self.globals.get(&global.name).is_some_and(|storage| storage.layout.size() >= size) {
                continue;
            }
            self.symbol_counter += 1;
            let symbol = format!("{}#g{}", global.name, self.symbol_counter);
            new_globals.push((global.name.clone(), GlobalStorage::new(symbol.clone(), size, align)));
            global_symbols.insert(global.name.clone(), symbol);
        }
        let mut struct_names = self.struct_names.clone();
        let mut new_struct_names = HashMap::new();
        for structure in &cell.structs {
            self.symbol_counter += 1;
            let llvm_name = format!("{}#s{}", structure.name, self.symbol_counter);
            struct_names.insert(structure.name.clone(), llvm_name.clone());
            new_struct_names.insert(structure.name.clone(), llvm_name);
        }
        let mut body_symbols = HashMap::new();
        for function in cell.functions.iter().chain(&cell.recompiled) {
            let symbol = self.fresh_body_symbol(&function.name);
            body_symbols.insert(function.name.clone(), symbol);
        }
        let (thunks, current_signatures) = self.name_thunks(cell, env);
        CellNames {
            global_symbols,
            new_globals,
            struct_names,
            new_struct_names,
            body_symbols,
            first_site: self.fault_sites.len() as u32,
            thunks,
            current_signatures,
        }
    }

    /// Names for a listing of a cell that is never linked: only the program's current names.
    pub(crate) fn scratch_names(&self, cell: &TypedCell) -> CellNames {
        let body_symbols = cell
            .functions
            .iter()
            .map(|function| {
                let symbol = self.body_symbols.get(&function.name).cloned().unwrap_or_else(|| function.name.clone());
                (function.name.clone(), symbol)
            })
            .collect();
        CellNames {
            global_symbols: self.global_symbols(),
            new_globals: Vec::new(),
            struct_names: self.struct_names.clone(),
            new_struct_names: HashMap::new(),
            body_symbols,
            first_site: self.fault_sites.len() as u32,
            thunks: HashMap::new(),
            current_signatures: Vec::new(),
        }
    }

    fn global_symbols(&self) -> HashMap<String, String> {
        self.globals.iter().map(|(name, storage)| (name.clone(), storage.symbol.clone())).collect()
    }

    /// A symbol no linked code uses, made from `name` (a body's, or a promoted body's).
    pub(crate) fn fresh_body_symbol(&mut self, name: &str) -> String {
        // A body is named like its function unless that name is taken, or belongs to a C
        // symbol that code generated by LLVM itself may call (memset, memcpy…); then `NAME#2`,
        // `NAME#3`… Each name keeps the last version it gave, so the next is found at once (the
        // N-th redefinition probed N names, each with a dlsym: linear in N).
        let version = self.body_versions.entry(name.to_string()).or_insert(0);
        loop {
            *version += 1;
            let candidate = if *version == 1 { name.to_string() } else { format!("{name}#{version}") };
            // A name with `#` is never a C symbol.
            let taken = self.used_symbols.contains(&candidate)
                || (*version == 1 && crate::jit::library::process_symbol(&candidate).is_some());
            if !taken {
                self.used_symbols.insert(candidate.clone());
                return candidate;
            }
        }
    }

    /// Links a cell's object into ORC: slots for the names it defines or declares (made once
    /// per name), its globals' storage as absolute symbols, then the object; returns the
    /// addresses of its bodies, traps and entries.
    pub(crate) fn link(
        &mut self,
        cell: &TypedCell,
        names: CellNames,
        object: &[u8],
        module_name: &str,
        emitted: Emitted,
    ) -> Result<Linked, Diagnostic> {
        let mut absolute = Vec::new();
        for name in cell
            .functions
            .iter()
            .map(|function| &function.name)
            .chain(cell.recompiled.iter().map(|function| &function.name))
            .chain(cell.externs.iter().map(|decl| &decl.name))
        {
            if !self.slots.contains_key(name) {
                let slot = Box::new(AtomicUsize::new(0));
                absolute.push((codegen::slot_symbol(name), &*slot as *const AtomicUsize as usize));
                self.slots.insert(name.clone(), slot);
            }
        }
        for (_, storage) in &names.new_globals {
            absolute.push((storage.symbol.clone(), storage.memory as usize));
        }
        // A new thunk reads its function's slot and signature word.
        for (name, current) in &names.current_signatures {
            if !self.slots.contains_key(name) {
                let slot = Box::new(AtomicUsize::new(0));
                absolute.push((codegen::slot_symbol(name), &*slot as *const AtomicUsize as usize));
                self.slots.insert(name.clone(), slot);
            }
            if !self.signature_words.contains_key(name) {
                let word = Box::new(AtomicU64::new(*current));
                absolute.push((codegen::signature_symbol(name), &*word as *const AtomicU64 as usize));
                self.signature_words.insert(name.clone(), word);
            }
        }
        self.jit.define_absolute(&absolute).map_err(|error| Diagnostic::internal(error.to_string()))?;
        let Emitted { entries, fault_sites, traps } = emitted;
        let function_names: Vec<String> =
            cell.functions.iter().chain(&cell.recompiled).map(|function| function.name.clone()).collect();
        let lookups: Vec<String> = function_names
            .iter()
            .map(|name| names.body_symbols[name].clone())
            .chain(traps.iter().map(|name| codegen::trap_symbol(name, module_name)))
            .chain(entries.iter().cloned())
            .collect();
        let (code, addresses) =
            self.jit.link(object, module_name, &lookups).map_err(|error| Diagnostic::internal(error.to_string()))?;
        let (body_addresses, rest) = addresses.split_at(function_names.len());
        let (trap_addresses, entry_addresses) = rest.split_at(traps.len());
        let new_thunks =
            names.thunks.into_iter().filter(|(_, thunk)| thunk.new).map(|(key, thunk)| (key, thunk.symbol)).collect();
        Ok(Linked {
            new_thunks,
            bodies: function_names.into_iter().zip(body_addresses.iter().copied()).collect(),
            body_symbols: names.body_symbols,
            traps: traps.into_iter().zip(trap_addresses.iter().copied()).collect(),
            entries: entry_addresses.to_vec(),
            code,
            fault_sites,
            new_globals: names.new_globals,
            struct_names: names.new_struct_names,
        })
    }

    /// Makes a linked cell part of the program: its code, fault sites, names and storage, and
    /// every body it linked in its function's slot. Returns the cell's traps by name, for the
    /// session to route unresolved and invalidated functions to (with `set_slot`, before the
    /// next commit). Nothing here can fail.
    pub(crate) fn commit(&mut self, linked: Linked) -> Vec<(String, usize)> {
        let Linked { bodies, body_symbols, traps, entries, code, fault_sites, new_globals, struct_names, new_thunks } =
            linked;
        self.cell_counter += 1;
        let sites = self.fault_sites.len()..self.fault_sites.len() + fault_sites.len();
        let starts = entries.iter().chain(bodies.iter().map(|(_, address)| address)).copied().collect();
        let pinned = !new_thunks.is_empty();
        self.thunks.extend(new_thunks);
        self.cells.insert(self.cell_counter, LiveCell { code, slots: 0, sites, starts, pinned, holds: None });
        self.running.push(self.cell_counter);
        self.fault_sites.extend(fault_sites);
        // Struct LLVM names: the next module looks them up by these.
        self.struct_names.extend(struct_names);
        for (name, storage) in new_globals {
            // Replaced storage stays allocated: pointers into it may survive in the program.
            if let Some(replaced) = self.globals.insert(name, storage) {
                self.retired_globals.push(replaced);
            }
        }
        self.body_symbols.extend(body_symbols);
        for address in entries {
            self.code_starts.insert(address, TOP_LEVEL.to_string());
        }
        for (name, address) in bodies {
            self.code_starts.insert(address, name.clone());
            self.set_slot(&name, address);
        }
        traps
    }

    /// Points a function's slot at `address`, a body or a trap of the cell committed last, if
    /// the function has a slot. The code the slot pointed into is removed if nothing else can
    /// reach it now.
    pub(crate) fn set_slot(&mut self, name: &str, address: usize) {
        self.point_slot(name, address, Some(self.cell_counter));
    }

    /// Points a function's slot at code the program does not own (a library's function); the
    /// code it pointed into is removed if nothing else can reach it now.
    pub(crate) fn set_slot_foreign(&mut self, name: &str, address: usize) {
        self.point_slot(name, address, None);
    }

    /// Points a slot at `address`, which lies in the cell `owner` or, without one, outside the
    /// program.
    fn point_slot(&mut self, name: &str, address: usize, owner: Option<u64>) {
        let Some(slot) = self.slots.get(name) else { return };
        slot.store(address, Ordering::SeqCst);
        let previous = match owner {
            Some(owner) => {
                if let Some(cell) = self.cells.get_mut(&owner) {
                    cell.slots += 1;
                }
                self.slot_owners.insert(name.to_string(), owner)
            }
            None => self.slot_owners.remove(name),
        };
        if let Some(previous) = previous {
            self.release(previous);
        }
    }

    /// Drops one reference (a slot, or a promotion holding it) to a cell's code, removing the
    /// code if nothing else can reach it now.
    fn release(&mut self, id: u64) {
        let Some(cell) = self.cells.get_mut(&id) else { return };
        cell.slots -= 1;
        if cell.slots == 0 && !cell.pinned && !self.running.contains(&id) {
            self.remove_cell(id);
        }
    }

    /// Points a function's slot at `address` in the live cell `owner` (a background
    /// promotion's code, or the quick body it replaced).
    pub(crate) fn point_slot_into(&mut self, name: &str, address: usize, owner: u64) {
        self.point_slot(name, address, Some(owner));
    }

    /// Links the object of a background promotion of bodies whose quick versions are in the
    /// live cell `base`; `bodies` are (function name, symbol). Returns the code's id and the
    /// bodies' addresses; no slot points into it yet. With `hold`, the promotion keeps `base`
    /// linked while it lives (its functions may have to go back to their quick bodies); without,
    /// `base` may go once no slot points into it, and its fault sites, which the promoted code
    /// reports too, are kept for the session.
    pub(crate) fn link_promoted(
        &mut self,
        object: &[u8],
        name: &str,
        bodies: &[(String, String)],
        base: u64,
        hold: bool,
    ) -> Result<(u64, Vec<usize>), Diagnostic> {
        if !self.cells.contains_key(&base) {
            return Err(Diagnostic::internal("the quick code of a promotion is gone"));
        }
        let symbols: Vec<String> = bodies.iter().map(|(_, symbol)| symbol.clone()).collect();
        let (code, addresses) =
            self.jit.link(object, name, &symbols).map_err(|error| Diagnostic::internal(error.to_string()))?;
        self.cell_counter += 1;
        let sites = self.fault_sites.len()..self.fault_sites.len();
        for ((function, _), address) in bodies.iter().zip(&addresses) {
            self.code_starts.insert(*address, function.clone());
        }
        let holds = hold.then_some(base);
        let cell = LiveCell { code, slots: 0, sites, starts: addresses.clone(), pinned: false, holds };
        self.cells.insert(self.cell_counter, cell);
        if let Some(held) = self.cells.get_mut(&base) {
            match hold {
                true => held.slots += 1,
                false => held.sites = held.sites.start..held.sites.start,
            }
        }
        Ok((self.cell_counter, addresses))
    }

    /// The id of the cell committed or promoted last.
    pub(crate) fn last_cell(&self) -> u64 {
        self.cell_counter
    }

    /// The cells removed since the last call.
    pub(crate) fn take_removed(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.removed)
    }

    /// The cell a function's slot points into.
    pub(crate) fn slot_owner(&self, name: &str) -> Option<u64> {
        self.slot_owners.get(name).copied()
    }

    /// The address a function's slot holds.
    pub(crate) fn slot_value(&self, name: &str) -> Option<usize> {
        self.slots.get(name).map(|slot| slot.load(Ordering::SeqCst))
    }

    /// The symbol of a function's newest committed body.
    pub(crate) fn body_symbol(&self, name: &str) -> Option<&str> {
        self.body_symbols.get(name).map(String::as_str)
    }

    /// Removes the code of the cells committed since the last call that no slot points into:
    /// their top-level code has run (the session calls this at the end of a cell, after any
    /// `(bench …)` forms) and nothing else can reach it.
    pub(crate) fn release_finished(&mut self) {
        for id in std::mem::take(&mut self.running) {
            if self.cells.get(&id).is_some_and(|cell| cell.slots == 0 && !cell.pinned) {
                self.remove_cell(id);
            }
        }
    }

    fn remove_cell(&mut self, id: u64) {
        let Some(cell) = self.cells.remove(&id) else { return };
        self.removed.push(id);
        // Its fault sites can go too when they are the last ones: no code reports them now.
        if cell.sites.end == self.fault_sites.len() {
            self.fault_sites.truncate(cell.sites.start);
        }
        for start in &cell.starts {
            self.code_starts.remove(start);
        }
        cell.code.remove();
        if let Some(held) = cell.holds {
            self.release(held);
        }
    }

    /// Writes a global's initial value into its storage.
    pub(crate) fn initialise_global(
        &mut self,
        name: &str,
        ty: &Ty,
        init: &Constant,
        structs: &HashMap<String, StructEntry>,
    ) {
        let mut bytes = vec![0u8; value::size_align(ty, structs).0];
        let globals = &self.globals;
        value::encode_constant(&mut bytes, 0, ty, init, structs, &|target| {
            globals.get(target).map_or(0, |storage| storage.memory as usize)
        });
        if let Some(storage) = self.globals.get_mut(name) {
            let target = storage.bytes_mut();
            let length = bytes.len().min(target.len());
            target[..length].copy_from_slice(&bytes[..length]);
        }
    }

    /// A global's current value as the language spells it (`?` if it has no storage).
    pub(crate) fn global_value_text(&self, name: &str, ty: &Ty, structs: &HashMap<String, StructEntry>) -> String {
        match self.globals.get(name) {
            Some(storage) => value::format_value(storage.bytes(), 0, ty, structs),
            None => "?".into(),
        }
    }

    /// The runtime-check site a fault reported.
    /// The function compiled code at `pc` belongs to: the C-Lisp name, or `TOP_LEVEL`.
    pub(crate) fn function_at(&self, pc: usize) -> Option<&str> {
        self.code_starts.range(..=pc).next_back().map(|(_, name)| name.as_str())
    }

    pub(crate) fn fault_site(&self, index: u32) -> Option<&FaultSite> {
        self.fault_sites.get(index as usize)
    }

    /// The LLVM name of every struct type (device code is lowered with the same names).
    pub(crate) fn struct_names(&self) -> &HashMap<String, String> {
        &self.struct_names
    }

    /// Bytes of code memory the program's cells hold, for tests that code is given back.
    #[cfg(test)]
    pub(crate) fn code_in_use(&self) -> usize {
        self.jit.code_in_use()
    }

    /// Links an object of device code built for the simulator: `symbols` at fixed addresses
    /// (its globals' storage), then the object; returns the code's id and the entry's address.
    pub(crate) fn link_device(
        &mut self,
        object: &[u8],
        name: &str,
        symbols: &[(String, usize)],
        entry: &str,
    ) -> Result<(u64, usize), Diagnostic> {
        self.jit.define_absolute(symbols).map_err(|error| Diagnostic::internal(error.to_string()))?;
        // Its code runs on the simulator's workers while later cells link: on pages of its own.
        let (code, addresses) = self
            .jit
            .link_isolated(object, name, &[entry.to_string()])
            .map_err(|error| Diagnostic::internal(error.to_string()))?;
        let address = addresses.first().copied().ok_or_else(|| Diagnostic::internal("no entry was linked"))?;
        self.cell_counter += 1;
        self.device_code.insert(self.cell_counter, (code, address));
        // The entry is the object's first function (`codegen::sim`): a fault in the kernel is
        // named after it.
        self.code_starts.insert(address, name.to_string());
        Ok((self.cell_counter, address))
    }

    /// Links an object whose code is kept for the session's life (a call trampoline) and
    /// returns the address of `entry`, top-level code for `function_at`.
    pub(crate) fn link_pinned(&mut self, object: &[u8], name: &str, entry: &str) -> Result<usize, Diagnostic> {
        let (code, addresses) = self
            .jit
            .link(object, name, &[entry.to_string()])
            .map_err(|error| Diagnostic::internal(error.to_string()))?;
        let Some(address) = addresses.first().copied() else {
            code.remove();
            return Err(Diagnostic::internal("no entry was linked"));
        };
        self.pinned_code.push(code);
        self.code_starts.insert(address, TOP_LEVEL.to_string());
        Ok(address)
    }

    /// The address of a function's slot, if it has one.
    pub(crate) fn slot_address(&self, name: &str) -> Option<usize> {
        self.slots.get(name).map(|slot| &**slot as *const AtomicUsize as usize)
    }

    /// The address of a global's storage, if it has one.
    pub(crate) fn global_address(&self, name: &str) -> Option<usize> {
        self.globals.get(name).map(|storage| storage.memory as usize)
    }

    /// Frees device code that was replaced by a new build (never while it runs: builds happen
    /// before a cell's code runs).
    pub(crate) fn remove_device(&mut self, id: u64) {
        if let Some((code, start)) = self.device_code.remove(&id) {
            self.code_starts.remove(&start);
            code.remove();
        }
    }

    /// Keeps memory compiled code allocated for the session until the session ends.
    pub(crate) fn keep_allocations(&mut self, allocations: Vec<usize>) {
        self.memory.extend(allocations);
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        for pointer in self.memory.drain(..) {
            // SAFETY: every pointer here came from calloc in `run::session_alloc`, and the
            // code that could still use it is being dropped with the program.
            unsafe { libc::free(pointer as *mut libc::c_void) };
        }
    }
}

/// The session's structs with the cell's own (new or redefined) ones laid over them.
fn structs_with(env: &Env, cell: &TypedCell) -> HashMap<String, StructEntry> {
    let mut structs = env.structs.clone();
    for structure in &cell.structs {
        structs.insert(structure.name.clone(), StructEntry { fields: structure.fields.clone() });
    }
    structs
}
