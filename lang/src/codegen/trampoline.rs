//! Call trampolines: the entry that runs a call cell (`(call f 7)`, `(call f g)`) without
//! compiling the cell. One is made per signature and kept for the session; it behaves like a
//! one-item batched entry (`extend_top_level_chunk`), but reads its callee and arguments from
//! an argument block that the session fills before each call:
//!
//! ```text
//! word 0      the callee's slot (its address: the trampoline loads the slot, so it calls the
//!             newest definition)
//! word 1 + i  where argument i is: a global's storage, or word 1 + n + i of the block
//! word 1+n+i  argument i's bits, when it is a constant
//! ```
//!
//! The block's address is a constant in the code, as the bench loop's buffers are.

use std::collections::HashMap;

use inkwell::context::Context;
use inkwell::module::Linkage;
use inkwell::targets::{TargetData, TargetTriple};
use inkwell::values::BasicMetadataValueEnum;
use inkwell::AddressSpace;

use super::lowering::{CodegenError, Lowering, LoweringTarget, Naming, Result};
use crate::abi::RT_ITEM_DONE;
use crate::types::{Signature, Ty};

/// Words of a signature's argument block: the slot's address, then a pointer and a constant
/// per parameter.
pub(crate) fn block_words(signature: &Signature) -> usize {
    1 + 2 * signature.params.len()
}

/// Whether values of the type can go through a trampoline: scalars the block holds in one word
/// (not aggregates, which are passed by pointer, nor GPU buffers).
pub(crate) fn is_trampoline_scalar(ty: &Ty) -> bool {
    matches!(ty, Ty::Bool | Ty::Int(_) | Ty::Float | Ty::Double | Ty::Ptr(..))
}

/// The module of one trampoline for `signature` (scalar parameters, a scalar or void result,
/// not variadic), reading the block at `block`; its one function, `symbol`, is an entry
/// `void (ptr out)`.
pub(crate) fn lower_trampoline<'ctx>(
    context: &'ctx Context,
    target_data: &TargetData,
    triple: &TargetTriple,
    symbol: &str,
    signature: &Signature,
    block: usize,
) -> Result<inkwell::module::Module<'ctx>> {
    let ok = !signature.variadic
        && signature.params.iter().all(is_trampoline_scalar)
        && (signature.ret == Ty::Void || is_trampoline_scalar(&signature.ret));
    if !ok {
        return Err(CodegenError::Other(format!("no trampoline calls a function of type {signature}")));
    }
    let empty = HashMap::new();
    let thunks = HashMap::new();
    let inline_bodies = HashMap::new();
    let naming =
        Naming { global_symbols: &empty, struct_names: &empty, body_symbols: &empty, first_site: 0, thunks: &thunks };
    let target = LoweringTarget { context, target_data, triple, module_name: symbol };
    let lowering = Lowering::new(target, &naming, &inline_bodies, None);
    lowering.emit_trampoline(symbol, signature, block)?;
    lowering.module.verify().map_err(|message| CodegenError::Verify(message.to_string()))?;
    Ok(lowering.module)
}

impl<'ctx> Lowering<'ctx, '_> {
    fn emit_trampoline(&self, symbol: &str, signature: &Signature, block: usize) -> Result<()> {
        let pointer = self.context.ptr_type(AddressSpace::default());
        let i64_type = self.context.i64_type();
        let entry_type = self.context.void_type().fn_type(&[pointer.into()], false);
        let function = self.module.add_function(symbol, entry_type, Some(Linkage::External));
        self.host_function_attributes(function);
        self.builder.position_at_end(self.context.append_basic_block(function, "entry"));
        let out = function
            .get_nth_param(0)
            .ok_or_else(|| CodegenError::Other("entry without output".into()))?
            .into_pointer_value();
        let word = |index: usize| -> Result<inkwell::values::PointerValue<'ctx>> {
            let address = i64_type.const_int((block + 8 * index) as u64, false);
            Ok(self.builder.build_int_to_ptr(address, pointer, "")?)
        };
        // Load the callee from its slot, as every call between session functions does: the
        // function may have been redefined since the trampoline was made.
        let slot = self.builder.build_load(pointer, word(0)?, "slot")?.into_pointer_value();
        let callee = self.builder.build_load(pointer, slot, "callee")?.into_pointer_value();
        let mut values: Vec<BasicMetadataValueEnum<'ctx>> = Vec::new();
        for (index, ty) in signature.params.iter().enumerate() {
            let place = self.builder.build_load(pointer, word(1 + index)?, "")?.into_pointer_value();
            values.push(self.builder.build_load(self.basic_type(ty), place, "")?.into());
        }
        // The type the callee's callers call it with (`call::call`).
        let function_type = self.function_type(signature, false);
        let call = self.builder.build_indirect_call(function_type, callee, &values, "")?;
        let size = match call.try_as_basic_value().basic() {
            Some(value) => {
                self.builder.build_store(out, value)?;
                self.size_of(&signature.ret)
            }
            None => i64_type.const_zero(),
        };
        let item_done = self.runtime_function(
            RT_ITEM_DONE,
            self.context.void_type().fn_type(&[pointer.into(), i64_type.into()], false),
        );
        self.builder.build_call(item_done, &[out.into(), size.into()], "")?;
        self.builder.build_return(None)?;
        Ok(())
    }
}
