//! Codegen: the typed tree to LLVM IR with inkwell, one module per cell; calls through slots.
//!
//! Names in a module that users cannot write contain `#` (the reader rejects it in symbols):
//! `f#slot` is `f`'s indirection slot, `x#g2` a global's storage, `cell#3.0` an entry. So no
//! user name can collide with the machinery's.
//!
//! Here: the entry point of a cell (`lower`, `CellModule`, `TopLevel`) and what the session
//! uses of the others. The lowering state and LLVM types are in `lowering`; function bodies and
//! statements in `stmt`, expressions in `expr`, calls and faults in `call`, GPU code in `device`
//! (and for the simulator, `sim`), call trampolines in `trampoline`. The runtime's symbols and
//! fault codes are the ABI's (`crate::abi`).

mod call;
mod device;
mod expr;
mod lowering;
mod sim;
mod stmt;
mod trampoline;
pub(crate) mod versioning;
mod warp;

use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::targets::TargetData;
use inkwell::values::FunctionValue;
use inkwell::AddressSpace;

use crate::abi::FaultCode;
use crate::tree::{FunctionDef, TypedCell};

use lowering::{Lowering, LoweringTarget, Result};

pub(crate) use device::{lower_device, DeviceModule};
pub(crate) use lowering::{
    signature_symbol, slot_symbol, trap_symbol, CodegenError, DeviceUnit, FaultSite, Naming, SimLowering, SimSite,
    SimTarget, Thunk,
};
pub(crate) use trampoline::{block_words, is_trampoline_scalar, lower_trampoline};

/// A cell's module, verified, with what the session needs to link and run it.
pub(crate) struct CellModule<'ctx> {
    pub module: Module<'ctx>,
    /// Entry symbols of the top-level code, in order: one per item, or the chunks of batched
    /// code (see `TopLevel`).
    pub entries: Vec<String>,
    pub fault_sites: Vec<FaultSite>,
    /// Traps emitted for unresolved declarations and invalidated functions, by name.
    pub traps: Vec<String>,
}

/// How a cell's top-level items become entries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopLevel {
    /// One entry per item, which stores the item's value at its `out` parameter: for bench and
    /// autotune, which call one item at a time, and for listings.
    PerItem,
    /// The items run in order by a few entries (chunks), each item reporting to
    /// `abi::RT_ITEM_DONE` when it is done: one call runs a whole cell. Thousands of one-item
    /// functions cost LLVM's code generation more per item than the items themselves.
    Batched,
}

/// At most this many items go into one chunk of batched top-level code, which bounds the size
/// of the functions LLVM works on.
const CHUNK_ITEMS: usize = 256;

/// A chunk of batched top-level code ends once its variables take this many bytes: each item
/// keeps its own variables, all live for the whole chunk.
const CHUNK_FRAME_BYTES: u64 = 64 << 10;

pub(crate) fn lower<'ctx>(
    context: &'ctx Context,
    target_data: &TargetData,
    triple: &inkwell::targets::TargetTriple,
    cell: &TypedCell,
    module_name: &str,
    naming: &Naming<'_>,
    top_level: TopLevel,
) -> Result<CellModule<'ctx>> {
    let target = LoweringTarget { context, target_data, triple, module_name };
    let mut lowering = Lowering::new(target, naming, &cell.inline_bodies, None);
    lowering.define_struct_bodies(cell)?;
    let mut to_emit: Vec<(&FunctionDef, FunctionValue<'ctx>)> = Vec::new();
    for function in cell.functions.iter().chain(&cell.recompiled) {
        let symbol = naming.body_symbols.get(&function.name).cloned().unwrap_or_else(|| function.name.clone());
        let value = lowering.module.add_function(
            &symbol,
            lowering.function_type(&function.signature, false),
            Some(Linkage::External),
        );
        if function.inline {
            lowering.mark_inline(value);
        }
        to_emit.push((function, value));
    }
    for (function, value) in to_emit {
        if function.placement.device_only {
            // Device code is compiled only for the GPU; its slot gets a body that reports it.
            lowering.emit_fault_body(value, FaultCode::DeviceOnly, function.span, &function.name)?;
        } else {
            lowering.emit_function(function, value, None)?;
        }
    }
    // A slot must never hold an address that calls with the wrong types, nor null: unresolved
    // declarations and invalidated functions get a trap that reports what went wrong.
    let mut traps = Vec::new();
    for decl in cell.externs.iter().filter(|decl| decl.unresolved()) {
        lowering.emit_trap(&decl.name, FaultCode::Unresolved, decl.span, String::new())?;
        traps.push(decl.name.clone());
    }
    let mut new_thunks: Vec<(&(String, String), &Thunk)> =
        naming.thunks.iter().filter(|(_, thunk)| thunk.new).collect();
    new_thunks.sort_by(|left, right| left.1.symbol.cmp(&right.1.symbol));
    for ((name, _), thunk) in new_thunks {
        lowering.emit_thunk(name, thunk)?;
    }
    for invalidation in &cell.invalidated {
        lowering.emit_trap(
            &invalidation.name,
            FaultCode::Invalidated,
            invalidation.span,
            invalidation.message.clone(),
        )?;
        traps.push(invalidation.name.clone());
    }
    let ptr = lowering.context.ptr_type(AddressSpace::default());
    let entry_type = context.void_type().fn_type(&[ptr.into()], false);
    let mut entries = Vec::new();
    match top_level {
        TopLevel::PerItem => {
            for (index, item) in cell.top.iter().enumerate() {
                let symbol = format!("{module_name}.{index}");
                let value = lowering.module.add_function(&symbol, entry_type, Some(Linkage::External));
                lowering.emit_function(&item.function, value, item.value.as_ref())?;
                entries.push(symbol);
            }
        }
        TopLevel::Batched => {
            let mut rest = cell.top.as_slice();
            while !rest.is_empty() {
                let symbol = format!("{module_name}.top{}", entries.len());
                let value = lowering.module.add_function(&symbol, entry_type, Some(Linkage::External));
                // Items go in one at a time, so the frame is measured with what they made.
                let mut taken = 0;
                while taken < rest.len() && taken < CHUNK_ITEMS && lowering.frame_bytes(value) < CHUNK_FRAME_BYTES {
                    lowering.extend_top_level_chunk(&rest[taken], value)?;
                    taken += 1;
                }
                lowering.finish_top_level_chunk(value)?;
                entries.push(symbol);
                rest = &rest[taken..];
            }
        }
    }
    lowering.module.verify().map_err(|message| CodegenError::Verify(message.to_string()))?;
    Ok(CellModule { module: lowering.module, entries, fault_sites: lowering.fault_sites, traps })
}
