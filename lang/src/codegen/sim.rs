//! Device code lowered for the host, for the GPU simulator (`gpu::sim`): the same members as
//! for NVPTX, with what NVPTX's special registers, barriers and memory spaces are replaced by.
//!
//! - `(tid.x)` and the other indices read the simulator's frame (`abi::SimFrame`), which every
//!   function of the build takes as its last parameter (the executor that runs the launch passes
//!   its own to the entry): the executor writes the running thread's indices there before it
//!   runs or resumes the thread. A frame per executor lets several launches run at once, one
//!   per thread (asynchronous submissions, docs/language.md §7.8).
//! - `(syncthreads)` calls `SIM_SYNC`, which suspends the thread's fiber until every thread of
//!   the block has arrived.
//! - Shared memory is one allocation per block, at `SimFrame::shared`; each `define-shared`
//!   array is at a fixed offset in it.
//! - A global used in device code is storage of the simulator's (initialised from the
//!   definition, like the GPU's copy), named by an external symbol the simulator defines.
//! - With checking on, every `load` and `store` passes its address through `SIM_CHECK`, which
//!   returns it when it lies in memory the thread may use, and reports it otherwise.
//! - The entry takes the launch's argument words and the frame (`void (ptr words, ptr frame)`)
//!   and calls the kernel.

use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, FunctionValue, IntValue, PointerValue};
use inkwell::AddressSpace;

use super::lowering::{no_value, CodegenError, Lowering, Result, SimGlobal, SimLowering, SimSite};
use crate::abi::{sim_check_tag, Access, FaultCode, SimFrame, SIM_CHECK, SIM_FAULT, SIM_SYNC};
use crate::reader::Span;
use crate::tree::FunctionDef;
use crate::types::Ty;

/// The special register an NVVM intrinsic reads (`llvm.nvvm.read.ptx.sreg.tid.x`).
fn intrinsic_register(link: &str) -> Option<(&str, u8)> {
    let rest = link.strip_prefix("llvm.nvvm.read.ptx.sreg.")?;
    let (register, axis) = rest.split_once('.')?;
    let axis = match axis {
        "x" => 0,
        "y" => 1,
        "z" => 2,
        _ => return None,
    };
    matches!(register, "tid" | "ctaid" | "ntid" | "nctaid").then_some((register, axis))
}

impl<'ctx> Lowering<'ctx, '_> {
    pub(super) fn is_sim(&self) -> bool {
        self.device.as_ref().is_some_and(|device| device.sim.is_some())
    }

    fn sim_state(&mut self) -> Option<&mut SimLowering> {
        self.device.as_mut().and_then(|device| device.sim.as_mut())
    }

    /// The frame: the last parameter of the function being emitted.
    fn frame(&self) -> PointerValue<'ctx> {
        let frame = self.builder.get_insert_block().and_then(|block| block.get_parent()).and_then(|function| {
            function.get_last_param().filter(|param| param.is_pointer_value()).map(|param| param.into_pointer_value())
        });
        frame.unwrap_or_else(|| self.context.ptr_type(AddressSpace::default()).const_null())
    }

    /// The frame as the last argument of a call between the build's functions.
    pub(super) fn sim_frame_argument(&self) -> Option<BasicMetadataValueEnum<'ctx>> {
        self.is_sim().then(|| self.frame().into())
    }

    /// A member function's type: its signature's, and in a simulator build the frame last.
    pub(super) fn member_function_type(
        &self,
        signature: &crate::types::Signature,
    ) -> inkwell::types::FunctionType<'ctx> {
        let plain = self.function_type(signature, false);
        if !self.is_sim() {
            return plain;
        }
        let mut params = plain.get_param_types();
        params.push(self.context.ptr_type(AddressSpace::default()).into());
        match plain.get_return_type() {
            Some(ret) => inkwell::types::BasicType::fn_type(&ret, &params, false),
            None => self.context.void_type().fn_type(&params, false),
        }
    }

    /// A special register: a load from the frame (the simulator sets it per thread).
    pub(super) fn sim_index(&mut self, register: &str, axis: u8) -> Result<BasicValueEnum<'ctx>> {
        let int = self.context.i32_type();
        let slot = self.context.i64_type().const_int(SimFrame::slot(register, axis), false);
        // SAFETY: the slot is below 12, inside `SimFrame::index`.
        let pointer = unsafe { self.builder.build_in_bounds_gep(int, self.frame(), &[slot], "")? };
        Ok(self.builder.build_load(int, pointer, "")?)
    }

    /// `(syncthreads)`: the simulator's barrier, numbered by its site.
    pub(super) fn sim_barrier(&mut self, function: &str, span: Span) -> Result<()> {
        let site = self.sim_site(function, span);
        if let Some(sim) = self.sim_state() {
            sim.barrier = true;
        }
        let ptr = self.context.ptr_type(AddressSpace::default());
        let int = self.context.i32_type();
        let sync = self.runtime_function(SIM_SYNC, self.context.void_type().fn_type(&[ptr.into(), int.into()], false));
        self.builder.build_call(sync, &[self.frame().into(), int.const_int(u64::from(site), false).into()], "")?;
        Ok(())
    }

    /// A collective warp operation's site; the kernel then runs a fiber per thread, as one with
    /// barriers does, so that the lanes of a warp can meet.
    pub(super) fn sim_warp_site(&mut self, function: &str, span: Span) -> u32 {
        if let Some(sim) = self.sim_state() {
            sim.barrier = true;
            sim.warp = true;
        }
        self.sim_site(function, span)
    }

    /// The address an atomic uses: with checking on, what the simulator's check gives it.
    pub(super) fn sim_checked_atomic(
        &mut self,
        pointer: PointerValue<'ctx>,
        ty: &Ty,
        function: &str,
        span: Span,
    ) -> Result<PointerValue<'ctx>> {
        self.sim_checked_access(pointer, ty, Access::Atomic, function, span)
    }

    fn sim_site(&mut self, function: &str, span: Span) -> u32 {
        let Some(sim) = self.sim_state() else { return 0 };
        sim.sites.push(SimSite { span, function: function.to_string() });
        (sim.sites.len() - 1) as u32
    }

    /// A division's checks in the simulator: a zero divisor (or `MIN / -1`, `overflows`) calls
    /// `SIM_FAULT`, which the launch reports with the block and thread, and the thread goes on
    /// dividing by 1. Returns the divisor to use.
    pub(super) fn sim_check_division(
        &mut self,
        right: IntValue<'ctx>,
        is_zero: IntValue<'ctx>,
        overflows: Option<IntValue<'ctx>>,
        function: String,
        span: Span,
    ) -> Result<IntValue<'ctx>> {
        let site = self.sim_site(&function, span);
        let word = self.context.i64_type();
        let code = |code: FaultCode| word.const_int(code as u64, false);
        let (failed, code) = match overflows {
            Some(overflows) => (
                self.builder.build_or(is_zero, overflows, "")?,
                self.builder
                    .build_select(is_zero, code(FaultCode::DivideByZero), code(FaultCode::DivideOverflow), "")?
                    .into_int_value(),
            ),
            None => (is_zero, code(FaultCode::DivideByZero)),
        };
        let current = self.builder.get_insert_block().and_then(|block| block.get_parent()).ok_or_else(no_value)?;
        let fault_block = self.context.append_basic_block(current, "division_fault");
        let join = self.context.append_basic_block(current, "division");
        self.builder.build_conditional_branch(failed, fault_block, join)?;
        self.builder.position_at_end(fault_block);
        let ptr = self.context.ptr_type(AddressSpace::default());
        let fault = self.runtime_function(
            SIM_FAULT,
            self.context.void_type().fn_type(&[ptr.into(), word.into(), word.into()], false),
        );
        let frame = self.frame();
        self.builder.build_call(
            fault,
            &[frame.into(), code.into(), word.const_int(u64::from(site), false).into()],
            "",
        )?;
        self.builder.build_unconditional_branch(join)?;
        self.builder.position_at_end(join);
        let one = right.get_type().const_int(1, false);
        Ok(self.builder.build_select(failed, one, right, "")?.into_int_value())
    }

    /// The address a `load` or `store` of a `ty` uses: with checking on, what the simulator's
    /// check returns for it.
    pub(super) fn sim_checked(
        &mut self,
        pointer: PointerValue<'ctx>,
        ty: &Ty,
        write: bool,
        function: &str,
        span: Span,
    ) -> Result<PointerValue<'ctx>> {
        let access = if write { Access::Write } else { Access::Read };
        self.sim_checked_access(pointer, ty, access, function, span)
    }

    fn sim_checked_access(
        &mut self,
        pointer: PointerValue<'ctx>,
        ty: &Ty,
        access: Access,
        function: &str,
        span: Span,
    ) -> Result<PointerValue<'ctx>> {
        if !self.device.as_ref().and_then(|device| device.sim.as_ref()).is_some_and(|sim| sim.check) {
            return Ok(pointer);
        }
        let site = self.sim_site(function, span);
        let bytes = self.size_of(ty);
        let ptr = self.context.ptr_type(AddressSpace::default());
        let word = self.context.i64_type();
        let check =
            self.runtime_function(SIM_CHECK, ptr.fn_type(&[ptr.into(), ptr.into(), word.into(), word.into()], false));
        let generic = if pointer.get_type().get_address_space() == AddressSpace::default() {
            pointer
        } else {
            self.builder.build_address_space_cast(pointer, ptr, "")?
        };
        let tag = word.const_int(sim_check_tag(site, access), false);
        // The site's guard: an address inside it is used as it is; another calls the check.
        let frame = self.frame();
        let guards = self.frame_load(std::mem::offset_of!(SimFrame, guards), ptr.into(), true)?.into_pointer_value();
        let guard_type = self.context.struct_type(&[word.into(), word.into()], false);
        let index = word.const_int(u64::from(site), false);
        let zero = self.context.i32_type().const_zero();
        let one = self.context.i32_type().const_int(1, false);
        // SAFETY: as above.
        let (low_slot, high_slot) = unsafe {
            (
                self.builder.build_in_bounds_gep(guard_type, guards, &[index, zero], "")?,
                self.builder.build_in_bounds_gep(guard_type, guards, &[index, one], "")?,
            )
        };
        let low = self.invariant_load(word.into(), low_slot)?.into_int_value();
        let high = self.invariant_load(word.into(), high_slot)?.into_int_value();
        let address = self.builder.build_ptr_to_int(generic, word, "")?;
        let end = self.builder.build_int_add(address, bytes, "")?;
        let above = self.builder.build_int_compare(inkwell::IntPredicate::UGE, address, low, "")?;
        let below = self.builder.build_int_compare(inkwell::IntPredicate::ULE, end, high, "")?;
        let inside = self.builder.build_and(above, below, "")?;
        let function = self.builder.get_insert_block().and_then(|block| block.get_parent()).ok_or_else(no_value)?;
        let here = self.builder.get_insert_block().ok_or_else(no_value)?;
        let slow = self.context.append_basic_block(function, "check");
        let join = self.context.append_basic_block(function, "checked");
        self.builder.build_conditional_branch(inside, join, slow)?;
        self.builder.position_at_end(slow);
        // Outside its guard, an aligned read or write of whole granules of shared memory may
        // still go through on its stamps.
        let granules = match bytes.get_zero_extended_constant() {
            Some(size @ (4 | 8 | 16)) if access != Access::Atomic => size / 4,
            _ => 0,
        };
        let mut stamped = None;
        if granules > 0 {
            let call = self.context.append_basic_block(function, "call");
            // The shared memory's place and length and the stamps' place do not change while
            // a launch runs (loads LLVM may hoist); the running thread's stamps change at each
            // barrier.
            let shared =
                self.frame_load(std::mem::offset_of!(SimFrame, shared), ptr.into(), true)?.into_pointer_value();
            let shared = self.builder.build_ptr_to_int(shared, word, "")?;
            let length =
                self.frame_load(std::mem::offset_of!(SimFrame, shared_len), word.into(), true)?.into_int_value();
            let offset = self.builder.build_int_sub(address, shared, "")?;
            let last = self.builder.build_int_add(offset, word.const_int(granules * 4, false), "")?;
            let fits = self.builder.build_int_compare(inkwell::IntPredicate::ULE, last, length, "")?;
            let below = self.builder.build_int_compare(inkwell::IntPredicate::ULT, offset, length, "")?;
            let misaligned = self.builder.build_and(offset, word.const_int(3, false), "")?;
            let aligned =
                self.builder.build_int_compare(inkwell::IntPredicate::EQ, misaligned, word.const_zero(), "")?;
            let within = self.builder.build_and(self.builder.build_and(fits, below, "")?, aligned, "")?;
            let stamps_block = self.context.append_basic_block(function, "stamps");
            self.builder.build_conditional_branch(within, stamps_block, call)?;
            self.builder.position_at_end(stamps_block);
            let stamps =
                self.frame_load(std::mem::offset_of!(SimFrame, stamps), ptr.into(), true)?.into_pointer_value();
            let written =
                self.frame_load(std::mem::offset_of!(SimFrame, stamp_written), word.into(), false)?.into_int_value();
            let (read, shared_read) = if access == Access::Read {
                (
                    Some(
                        self.frame_load(std::mem::offset_of!(SimFrame, stamp_read), word.into(), false)?
                            .into_int_value(),
                    ),
                    Some(
                        self.frame_load(std::mem::offset_of!(SimFrame, stamp_shared), word.into(), false)?
                            .into_int_value(),
                    ),
                )
            } else {
                (None, None)
            };
            let first = self.builder.build_right_shift(offset, word.const_int(2, false), false, "")?;
            let mut all = self.context.bool_type().const_all_ones();
            for granule in 0..granules {
                let index = self.builder.build_int_add(first, word.const_int(granule, false), "")?;
                // SAFETY: the stamps have one word per granule of shared memory, and the
                // access lies inside shared memory.
                let slot = unsafe { self.builder.build_in_bounds_gep(word, stamps, &[index], "")? };
                let stamp = self.builder.build_load(word, slot, "")?.into_int_value();
                let mut ok = self.builder.build_int_compare(inkwell::IntPredicate::EQ, stamp, written, "")?;
                for other in [read, shared_read].into_iter().flatten() {
                    let same = self.builder.build_int_compare(inkwell::IntPredicate::EQ, stamp, other, "")?;
                    ok = self.builder.build_or(ok, same, "")?;
                }
                all = self.builder.build_and(all, ok, "")?;
            }
            self.builder.build_conditional_branch(all, join, call)?;
            stamped = Some(stamps_block);
            self.builder.position_at_end(call);
        }
        let call_block = self.builder.get_insert_block().ok_or_else(no_value)?;
        let called = self
            .builder
            .build_call(check, &[frame.into(), generic.into(), bytes.into(), tag.into()], "")?
            .try_as_basic_value()
            .basic()
            .ok_or_else(no_value)?
            .into_pointer_value();
        self.builder.build_unconditional_branch(join)?;
        self.builder.position_at_end(join);
        let merged = self.builder.build_phi(ptr, "")?;
        merged.add_incoming(&[(&generic, here), (&called, call_block)]);
        if let Some(stamped) = stamped {
            merged.add_incoming(&[(&generic, stamped)]);
        }
        let checked = merged.as_basic_value().into_pointer_value();
        if pointer.get_type() == ptr {
            Ok(checked)
        } else {
            Ok(self.builder.build_address_space_cast(checked, pointer.get_type(), "")?)
        }
    }

    /// A load of the frame's field at byte `offset`; `invariant` when it does not change while
    /// a launch runs (`invariant_load`).
    fn frame_load(
        &self,
        offset: usize,
        ty: inkwell::types::BasicTypeEnum<'ctx>,
        invariant: bool,
    ) -> Result<BasicValueEnum<'ctx>> {
        let offset = self.context.i64_type().const_int(offset as u64, false);
        // SAFETY: callers name a field of `SimFrame`.
        let slot = unsafe { self.builder.build_in_bounds_gep(self.context.i8_type(), self.frame(), &[offset], "")? };
        if invariant {
            self.invariant_load(ty, slot)
        } else {
            Ok(self.builder.build_load(ty, slot, "")?)
        }
    }

    /// A load of memory that does not change while a launch runs (the frame's guard table):
    /// `!invariant.load`, so that LLVM may hoist it out of loops past the check's call.
    fn invariant_load(
        &self,
        ty: inkwell::types::BasicTypeEnum<'ctx>,
        pointer: PointerValue<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>> {
        let value = self.builder.build_load(ty, pointer, "")?;
        if let Some(instruction) = inkwell::values::BasicValue::as_instruction_value(&value) {
            let kind = self.context.get_kind_id("invariant.load");
            let _ = instruction.set_metadata(self.context.metadata_node(&[]), kind);
        }
        Ok(value)
    }

    /// A device global for the simulator: in shared memory at its offset (read from the frame
    /// where it is used, so never cached across functions), or storage the simulator makes
    /// under a symbol of this build.
    pub(super) fn sim_global(
        &self,
        name: &str,
        ty: &Ty,
        shared: bool,
        init: Option<&crate::tree::Constant>,
        size: usize,
        align: usize,
    ) -> Option<PointerValue<'ctx>> {
        let device = self.device.as_ref()?;
        let sim = device.sim.as_ref()?;
        if shared {
            let (offset, _) = *device.sim_shared.borrow_mut().entry(name.to_string()).or_insert_with(|| {
                let align = align.max(16) as u64;
                let offset = device.shared_bytes.get().div_ceil(align) * align;
                device.shared_bytes.set(offset + size as u64);
                (offset, size as u64)
            });
            let generic = self.context.ptr_type(AddressSpace::default());
            let base = self.builder.build_load(generic, self.sim_shared_slot(), "").ok()?.into_pointer_value();
            let offset = self.context.i64_type().const_int(offset, false);
            // SAFETY: an offset inside the block's shared memory, which is `shared_bytes` long.
            return unsafe { self.builder.build_gep(self.context.i8_type(), base, &[offset], "") }.ok();
        }
        let mut image = vec![0u8; size.max(1)];
        if let Some(init) = init {
            crate::value::encode_constant(&mut image, 0, ty, init, device.unit.structs, &|_| 0);
        }
        let symbol = format!("quasi#sim#{}#{name}", sim.prefix);
        let global = self.external_global(&symbol);
        device.sim_globals.borrow_mut().push(SimGlobal { name: name.to_string(), symbol, image });
        Some(global)
    }

    fn sim_shared_slot(&self) -> PointerValue<'ctx> {
        let word = self.context.i64_type();
        let offset = word.const_int(std::mem::offset_of!(SimFrame, shared) as u64, false);
        // SAFETY: `shared` lies inside the frame.
        unsafe { self.builder.build_in_bounds_gep(self.context.i8_type(), self.frame(), &[offset], "") }
            .unwrap_or_else(|_| self.frame())
    }

    /// A call of an NVVM intrinsic in simulated code: the registers and the barrier; others
    /// have no simulation.
    pub(super) fn sim_intrinsic(
        &mut self,
        link: &str,
        function: &str,
        span: Span,
    ) -> Result<Option<BasicValueEnum<'ctx>>> {
        if let Some((register, axis)) = intrinsic_register(link) {
            return self.sim_index(register, axis).map(Some);
        }
        if matches!(link, "llvm.nvvm.barrier0" | "llvm.nvvm.barrier.sync") {
            self.sim_barrier(function, span)?;
            return Ok(None);
        }
        Err(CodegenError::Unsupported(format!("the simulator cannot run the NVVM intrinsic `{link}`")))
    }

    /// Inline PTX in simulated code: the atomic additions C-Lisp kernels use (`red.add` and
    /// `atom.add`, as the prelude's `reduce` does); other PTX has no simulation.
    pub(super) fn sim_asm(
        &mut self,
        template: &str,
        values: &[BasicValueEnum<'ctx>],
        result: &Ty,
    ) -> Result<Option<BasicValueEnum<'ctx>>> {
        let opcode = template.split_whitespace().next().unwrap_or("");
        let parts: Vec<&str> = opcode.trim_end_matches(';').split('.').collect();
        let atomic = matches!(parts.first(), Some(&"red") | Some(&"atom")) && parts.contains(&"add");
        let float = parts.iter().any(|part| matches!(*part, "f32" | "f64"));
        let unsupported =
            || CodegenError::Unsupported(format!("the simulator cannot run the inline PTX `{}`", template.trim()));
        if !atomic {
            return Err(unsupported());
        }
        // red: (address, value); atom: (address, value) with the old value as the result.
        let (pointer, value) = match values {
            [BasicValueEnum::PointerValue(pointer), value] => (*pointer, *value),
            _ => return Err(unsupported()),
        };
        if !pointer.is_const() && pointer.get_type().get_address_space() != AddressSpace::default() {
            return Err(unsupported());
        }
        let op = if float {
            llvm_sys::LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpFAdd
        } else {
            llvm_sys::LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpAdd
        };
        // SAFETY: builder, pointer and value belong to this module's context; inkwell 0.11's
        // `build_atomicrmw` takes integers only.
        let old = unsafe {
            use inkwell::values::AsValueRef;
            let raw = llvm_sys::core::LLVMBuildAtomicRMW(
                self.builder.as_mut_ptr(),
                op,
                pointer.as_value_ref(),
                value.as_value_ref(),
                llvm_sys::LLVMAtomicOrdering::LLVMAtomicOrderingMonotonic,
                0,
            );
            if raw.is_null() {
                None
            } else {
                Some(BasicValueEnum::new(raw))
            }
        };
        let old = old.ok_or_else(unsupported)?;
        Ok((*result != Ty::Void).then_some(old))
    }

    /// The simulator's entry: `void (ptr words)`, the launch's argument words converted back
    /// to the kernel's parameter types.
    /// Declared before the members, so that it is the object's first function and a fault's
    /// address in any of them is after it (`Program::function_at`).
    pub(super) fn sim_entry_declaration(&mut self) -> (String, FunctionValue<'ctx>) {
        let prefix = self.device.as_ref().and_then(|device| device.sim.as_ref()).map(|sim| sim.prefix.clone());
        let name = format!("quasi#sim#{}#entry", prefix.unwrap_or_default());
        let ptr = self.context.ptr_type(AddressSpace::default());
        let function_type = self.context.void_type().fn_type(&[ptr.into(), ptr.into()], false);
        let entry = self.module.get_function(&name).unwrap_or_else(|| {
            self.module.add_function(&name, function_type, Some(inkwell::module::Linkage::External))
        });
        (name, entry)
    }

    pub(super) fn sim_entry(&mut self, root: &FunctionDef, kernel: FunctionValue<'ctx>) -> Result<String> {
        let (name, entry) = self.sim_entry_declaration();
        let block = self.context.append_basic_block(entry, "entry");
        self.builder.position_at_end(block);
        let words = entry.get_first_param().ok_or_else(no_value)?.into_pointer_value();
        let word = self.context.i64_type();
        let mut args: Vec<BasicMetadataValueEnum<'ctx>> = Vec::new();
        for (index, param) in root.signature.params.iter().enumerate() {
            let offset = word.const_int(index as u64, false);
            // SAFETY: the simulator passes one word per parameter.
            let slot = unsafe { self.builder.build_in_bounds_gep(word, words, &[offset], "")? };
            let value = self.builder.build_load(word, slot, "")?.into_int_value();
            let target = self.basic_type(param);
            let converted: BasicValueEnum<'ctx> = match target {
                inkwell::types::BasicTypeEnum::IntType(int) => {
                    self.builder.build_int_truncate_or_bit_cast(value, int, "")?.into()
                }
                inkwell::types::BasicTypeEnum::FloatType(float) => {
                    let bits = if float == self.context.f32_type() { self.context.i32_type() } else { word };
                    let bits = self.builder.build_int_truncate_or_bit_cast(value, bits, "")?;
                    self.builder.build_bit_cast(bits, float, "")?
                }
                inkwell::types::BasicTypeEnum::PointerType(pointer) => {
                    self.builder.build_int_to_ptr(value, pointer, "")?.into()
                }
                _ => return Err(CodegenError::Other("a kernel parameter that is not a scalar".into())),
            };
            args.push(converted.into());
        }
        args.extend(self.sim_frame_argument());
        self.builder.build_call(kernel, &args, "")?;
        self.builder.build_return(None)?;
        Ok(name)
    }
}
