//! Codegen for expressions: places, loads and stores, aggregates in memory, pointer arithmetic,
//! binary operators and casts.

use inkwell::intrinsics::Intrinsic;
use inkwell::module::Linkage;
use inkwell::types::{BasicType, BasicTypeEnum};
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate};

use super::lowering::{is_aggregate, no_value, CodegenError, FunctionState, Lowering, Result, Value};
use crate::abi::{
    CopyDirection, FaultCode, RT_GPU_ALLOC, RT_GPU_AWAIT, RT_GPU_COPY, RT_GPU_ENCODE_BEGIN, RT_GPU_ENCODE_COPY,
    RT_GPU_FENCE_DONE, RT_GPU_FREE, RT_GPU_HOST_ALLOC, RT_GPU_LEN, RT_GPU_SUBMIT, RT_SESSION_ALLOC,
};
use crate::reader::Span;
use crate::tree::{BinOp, CastOp, Expr, ExprKind, FloatCmp, IntCmp, Place};
use crate::types::Ty;

impl<'ctx> Lowering<'ctx, '_> {
    fn place_pointer(&self, state: &FunctionState<'ctx>, place: &Place) -> PointerValue<'ctx> {
        match place {
            Place::Local(index) => state.locals[*index],
            Place::Global(name) if self.device.is_some() => self.device_global(name),
            Place::Global(name) => {
                let symbol = self.naming.global_symbols.get(name).cloned().unwrap_or_else(|| name.clone());
                self.external_global(&symbol)
            }
        }
    }

    /// Emits a scalar expression.
    pub(super) fn value(&mut self, state: &mut FunctionState<'ctx>, expr: &Expr) -> Result<BasicValueEnum<'ctx>> {
        match self.expr(state, expr)? {
            Value::Scalar(value) => Ok(value),
            Value::Memory(_) | Value::Nothing => Err(no_value()),
        }
    }

    /// Emits an aggregate expression: the memory holding its value (see `Value::Memory`).
    pub(super) fn memory(&mut self, state: &mut FunctionState<'ctx>, expr: &Expr) -> Result<PointerValue<'ctx>> {
        match self.expr(state, expr)? {
            Value::Memory(memory) => Ok(memory),
            Value::Scalar(_) | Value::Nothing => Err(no_value()),
        }
    }

    /// Emits an aggregate expression into a temporary of its own, so that later evaluations
    /// (a `set` in the next argument) cannot change it.
    pub(super) fn owned_copy(&mut self, state: &mut FunctionState<'ctx>, expr: &Expr) -> Result<PointerValue<'ctx>> {
        let memory = self.memory(state, expr)?;
        let copy = self.temporary(state, &expr.ty)?;
        self.copy_aggregate(copy, memory, &expr.ty)?;
        Ok(copy)
    }

    /// Stores `value` (of type `ty`) at `pointer`: a store, or a copy for aggregates.
    fn store_value(&mut self, pointer: PointerValue<'ctx>, value: Value<'ctx>, ty: &Ty) -> Result<Value<'ctx>> {
        match value {
            Value::Scalar(scalar) => {
                self.builder.build_store(pointer, scalar)?;
                Ok(value)
            }
            Value::Memory(memory) => {
                self.copy_aggregate(pointer, memory, ty)?;
                Ok(Value::Memory(pointer))
            }
            Value::Nothing => Err(no_value()),
        }
    }

    /// Reads a value of type `ty` at `pointer`: a load, or the memory itself for aggregates.
    fn read_value(&mut self, pointer: PointerValue<'ctx>, ty: &Ty) -> Result<Value<'ctx>> {
        if is_aggregate(ty) {
            return Ok(Value::Memory(pointer));
        }
        Ok(Value::Scalar(self.builder.build_load(self.basic_type(ty), pointer, "")?))
    }

    /// A pointer to element `index` of the aggregate at `base`.
    fn element_pointer(&mut self, base: PointerValue<'ctx>, aggregate: &Ty, index: u32) -> Result<PointerValue<'ctx>> {
        match aggregate {
            Ty::Struct(name) => Ok(self.builder.build_struct_gep(self.struct_type(name), base, index, "")?),
            _ => {
                let indices =
                    [self.context.i64_type().const_zero(), self.context.i64_type().const_int(u64::from(index), false)];
                // SAFETY: the checker proved `index` is within the array's length.
                Ok(unsafe { self.builder.build_in_bounds_gep(self.basic_type(aggregate), base, &indices, "")? })
            }
        }
    }

    /// Emits an expression.
    pub(super) fn expr(&mut self, state: &mut FunctionState<'ctx>, expr: &Expr) -> Result<Value<'ctx>> {
        let value: BasicValueEnum<'ctx> = match &expr.kind {
            ExprKind::Int(value) => self.basic_type(&expr.ty).into_int_type().const_int(*value as u64, true).into(),
            ExprKind::Float(value) => self.basic_type(&expr.ty).into_float_type().const_float(*value).into(),
            ExprKind::Bool(value) => self.context.bool_type().const_int(u64::from(*value), false).into(),
            ExprKind::Zero if is_aggregate(&expr.ty) => {
                let memory = self.temporary(state, &expr.ty)?;
                self.zero_memory(memory, &expr.ty)?;
                return Ok(Value::Memory(memory));
            }
            ExprKind::Zero => self.zero(&expr.ty),
            ExprKind::Str(bytes) => {
                let constant = self.context.const_string(bytes, true);
                let global = self.module.add_global(constant.get_type(), None, ".str");
                global.set_initializer(&constant);
                global.set_constant(true);
                global.set_linkage(Linkage::Private);
                global.set_unnamed_addr(true);
                global.as_pointer_value().into()
            }
            ExprKind::Read(place) => {
                let pointer = self.place_pointer(state, place);
                return self.read_value(pointer, &expr.ty);
            }
            ExprKind::Set(place, value) => {
                let value = self.expr(state, value)?;
                let pointer = self.place_pointer(state, place);
                return self.store_value(pointer, value, &expr.ty);
            }
            ExprKind::Binary(op, left, right) => {
                let left_value = self.value(state, left)?;
                let right_value = self.value(state, right)?;
                let no_wrap = state.no_wrap.contains(&(expr as *const Expr));
                self.binary(state, *op, &left.ty, (left_value, right_value), no_wrap, expr.span)?
            }
            ExprKind::Not(operand) => {
                let operand = self.value(state, operand)?.into_int_value();
                self.builder.build_not(operand, "")?.into()
            }
            ExprKind::FNeg(operand) => {
                let operand = self.value(state, operand)?.into_float_value();
                self.builder.build_float_neg(operand, "")?.into()
            }
            ExprKind::Select(cond, then, otherwise) if is_aggregate(&expr.ty) => {
                // Both values are evaluated (and kept) before one is chosen.
                let cond = self.value(state, cond)?.into_int_value();
                let then = self.owned_copy(state, then)?;
                let otherwise = self.owned_copy(state, otherwise)?;
                return Ok(Value::Memory(self.builder.build_select(cond, then, otherwise, "")?.into_pointer_value()));
            }
            ExprKind::Select(cond, then, otherwise) => {
                let cond = self.value(state, cond)?.into_int_value();
                let then = self.value(state, then)?;
                let otherwise = self.value(state, otherwise)?;
                self.builder.build_select(cond, then, otherwise, "")?
            }
            ExprKind::Load(pointer) => {
                let pointer = self.value(state, pointer)?.into_pointer_value();
                let pointer = self.sim_checked(pointer, &expr.ty, false, &state.name, expr.span)?;
                return self.read_value(pointer, &expr.ty);
            }
            ExprKind::Store(pointer, value) => {
                let pointer = self.value(state, pointer)?.into_pointer_value();
                let value = self.expr(state, value)?;
                let pointer = self.sim_checked(pointer, &expr.ty, true, &state.name, expr.span)?;
                return self.store_value(pointer, value, &expr.ty);
            }
            ExprKind::PtrAdd(pointer, index) => {
                let pointee = self.basic_type(pointer.ty.pointee().unwrap_or(&Ty::Int(8)));
                let pointer = self.value(state, pointer)?.into_pointer_value();
                let index = self.index(state, index)?;
                // SAFETY: C-Lisp pointer arithmetic is unchecked by definition; `gep` without
                // `inbounds` is defined for any offset, and faults surface only on access.
                unsafe { self.builder.build_gep(pointee, pointer, &[index], "")? }.into()
            }
            ExprKind::GepPath(pointer, indices) => self.gep_path(state, pointer, indices)?,
            ExprKind::FieldPtr(pointer, field) => {
                let Some(Ty::Struct(name)) = pointer.ty.pointee() else {
                    return Err(CodegenError::Other("sptradd on a non-struct".into()));
                };
                let struct_type = self.struct_type(name);
                let pointer = self.value(state, pointer)?.into_pointer_value();
                self.builder.build_struct_gep(struct_type, pointer, *field, "")?.into()
            }
            ExprKind::ElemPtr(array, index) => {
                let array_type = self.basic_type(array.ty.pointee().unwrap_or(&Ty::Int(8)));
                let pointer = self.value(state, array)?.into_pointer_value();
                let index = self.index(state, index)?;
                let zero = self.context.i64_type().const_zero();
                // SAFETY: as for `ptradd`, no bounds are promised; the gep is not `inbounds`.
                unsafe { self.builder.build_gep(array_type, pointer, &[zero, index], "")? }.into()
            }
            ExprKind::AddressOf(place) => self.place_pointer(state, place).into(),
            ExprKind::FunctionAddress(address) => self.function_address(address)?,
            ExprKind::Alloc(ty, count) => {
                let element = self.basic_type(ty);
                let count = self.index(state, count)?;
                self.builder.build_array_alloca(element, count, "")?.into()
            }
            ExprKind::SessionAlloc(ty, count) => {
                let element = self.basic_type(ty);
                let count = self.index(state, count)?;
                let size = element.size_of().ok_or_else(|| CodegenError::Other("unsized element".into()))?;
                let bytes = self.builder.build_int_mul(count, size, "")?;
                let ptr = self.context.ptr_type(AddressSpace::default());
                let alloc_type = ptr.fn_type(&[self.context.i64_type().into()], false);
                let alloc = self.runtime_function(RT_SESSION_ALLOC, alloc_type);
                self.builder
                    .build_call(alloc, &[bytes.into()], "")?
                    .try_as_basic_value()
                    .basic()
                    .ok_or_else(no_value)?
            }
            ExprKind::Extract(aggregate, index) => {
                let base = self.memory(state, aggregate)?;
                let element = self.element_pointer(base, &aggregate.ty, *index)?;
                return self.read_value(element, &expr.ty);
            }
            ExprKind::Insert(aggregate, value, index) => {
                // A copy with one element replaced; the original is untouched.
                let copy = self.owned_copy(state, aggregate)?;
                let value_ty = value.ty.clone();
                let value = self.expr(state, value)?;
                let element = self.element_pointer(copy, &aggregate.ty, *index)?;
                self.store_value(element, value, &value_ty)?;
                return Ok(Value::Memory(copy));
            }
            ExprKind::Call(call) => {
                return self.call(state, &call.callee, &call.name, &call.signature, &call.args, expr.span)
            }
            ExprKind::Cast(op, value) => {
                let from = value.ty.clone();
                let value = self.value(state, value)?;
                self.cast(*op, &from, &expr.ty, value)?
            }
            ExprKind::Asm(asm) => return self.asm(state, &expr.ty, &asm.template, &asm.constraints, &asm.args),
            ExprKind::GpuIndex(register, dimension) => self.gpu_index(*register, *dimension)?,
            ExprKind::Barrier if self.is_sim() => {
                self.sim_barrier(&state.name, expr.span)?;
                return Ok(Value::Nothing);
            }
            ExprKind::Barrier => {
                self.device_intrinsic("llvm.nvvm.barrier0", &[])?;
                return Ok(Value::Nothing);
            }
            ExprKind::Warp(op, operands) => return self.warp(state, *op, operands, expr.span),
            ExprKind::Atomic(op, operands) => return self.atomic(state, *op, operands, expr.span),
            ExprKind::GpuAlloc(element, count) => {
                let element_size = self.size_of(element);
                let count = self.index(state, count)?;
                let handle =
                    self.call_gpu(RT_GPU_ALLOC, self.context.i64_type().into(), &[element_size.into(), count.into()])?;
                let failed = self.builder.build_int_compare(
                    IntPredicate::EQ,
                    handle,
                    self.context.i64_type().const_zero(),
                    "",
                )?;
                self.fault_if(state, failed, FaultCode::Gpu, expr.span)?;
                handle.into()
            }
            ExprKind::GpuFree(buffer) => {
                let handle = self.value(state, buffer)?;
                let status = self.call_gpu(RT_GPU_FREE, self.context.i32_type().into(), &[handle.into()])?;
                self.fault_unless_zero(state, status, expr.span)?;
                return Ok(Value::Nothing);
            }
            ExprKind::GpuLen(buffer) => {
                let handle = self.value(state, buffer)?;
                let length = self.call_gpu(RT_GPU_LEN, self.context.i64_type().into(), &[handle.into()])?;
                let failed = self.builder.build_int_compare(
                    IntPredicate::SLT,
                    length,
                    self.context.i64_type().const_zero(),
                    "",
                )?;
                self.fault_if(state, failed, FaultCode::Gpu, expr.span)?;
                length.into()
            }
            ExprKind::GpuCopy(direction, destination, source, count) => {
                self.gpu_copy(state, *direction, None, [destination, source, count], expr.span)?;
                return Ok(Value::Nothing);
            }
            ExprKind::Launch(launch) => {
                self.launch(state, launch, None, expr.span)?;
                return Ok(Value::Nothing);
            }
            ExprKind::EncodeBegin => {
                let handle = self.call_gpu(RT_GPU_ENCODE_BEGIN, self.context.i64_type().into(), &[])?;
                self.fault_if_zero(state, handle, expr.span)?;
                handle.into()
            }
            ExprKind::EncodeCopy(direction, operands) => {
                let [encoder, destination, source, count] = operands.as_ref();
                let encoder = self.value(state, encoder)?.into_int_value();
                self.gpu_copy(state, *direction, Some(encoder), [destination, source, count], expr.span)?;
                return Ok(Value::Nothing);
            }
            ExprKind::EncodeCall(encoder, launch) => {
                let encoder = self.value(state, encoder)?.into_int_value();
                self.launch(state, launch, Some(encoder), expr.span)?;
                return Ok(Value::Nothing);
            }
            ExprKind::Submit(encoder) => {
                let encoder = self.value(state, encoder)?;
                let fence = self.call_gpu(RT_GPU_SUBMIT, self.context.i64_type().into(), &[encoder.into()])?;
                self.fault_if_zero(state, fence, expr.span)?;
                fence.into()
            }
            ExprKind::Await(fence) => {
                let fence = self.value(state, fence)?;
                let status = self.call_gpu(RT_GPU_AWAIT, self.context.i32_type().into(), &[fence.into()])?;
                self.fault_unless_zero(state, status, expr.span)?;
                return Ok(Value::Nothing);
            }
            ExprKind::FenceDone(fence) => {
                let fence = self.value(state, fence)?;
                let status = self.call_gpu(RT_GPU_FENCE_DONE, self.context.i32_type().into(), &[fence.into()])?;
                let zero = status.get_type().const_zero();
                let failed = self.builder.build_int_compare(IntPredicate::SLT, status, zero, "")?;
                self.fault_if(state, failed, FaultCode::Gpu, expr.span)?;
                self.builder.build_int_compare(IntPredicate::NE, status, zero, "")?.into()
            }
            ExprKind::HostAlloc(element, count) => {
                let element_size = self.size_of(element);
                let count = self.index(state, count)?;
                let address = self.call_gpu(
                    RT_GPU_HOST_ALLOC,
                    self.context.i64_type().into(),
                    &[element_size.into(), count.into()],
                )?;
                self.fault_if_zero(state, address, expr.span)?;
                let pointer = self.context.ptr_type(inkwell::AddressSpace::default());
                self.builder.build_int_to_ptr(address, pointer, "")?.into()
            }
        };
        Ok(Value::Scalar(value))
    }

    /// `(gpu-copy DST SRC n)`, or with an encoder `(encode-copy E DST SRC n)`: the operands,
    /// then one runtime call that copies (or records the copy), its direction from the types.
    fn gpu_copy(
        &mut self,
        state: &mut FunctionState<'ctx>,
        direction: crate::tree::CopyDirection,
        encoder: Option<IntValue<'ctx>>,
        [destination, source, count]: [&Expr; 3],
        span: Span,
    ) -> Result<()> {
        let element = match &source.ty {
            Ty::GpuBuf(element) | Ty::Ptr(element, _) => (**element).clone(),
            _ => return Err(CodegenError::Other("gpu-copy from a non-buffer".into())),
        };
        let destination = self.value(state, destination)?;
        let destination = self.as_word(destination)?;
        let source = self.value(state, source)?;
        let source = self.as_word(source)?;
        let count = self.index(state, count)?;
        let code = match direction {
            crate::tree::CopyDirection::HostToDevice => CopyDirection::HostToDevice,
            crate::tree::CopyDirection::DeviceToHost => CopyDirection::DeviceToHost,
            crate::tree::CopyDirection::DeviceToDevice => CopyDirection::DeviceToDevice,
        };
        let direction = self.context.i64_type().const_int(code as u64, false);
        let mut arguments: Vec<inkwell::values::BasicMetadataValueEnum<'ctx>> =
            encoder.into_iter().map(Into::into).collect();
        arguments.extend::<[inkwell::values::BasicMetadataValueEnum<'ctx>; 5]>([
            direction.into(),
            destination.into(),
            source.into(),
            count.into(),
            self.size_of(&element).into(),
        ]);
        let runtime = if encoder.is_some() { RT_GPU_ENCODE_COPY } else { RT_GPU_COPY };
        let status = self.call_gpu(runtime, self.context.i32_type().into(), &arguments)?;
        self.fault_unless_zero(state, status, span)
    }

    /// Faults with the GPU runtime's message when a handle or address it returned is 0.
    fn fault_if_zero(&mut self, state: &FunctionState<'ctx>, value: IntValue<'ctx>, span: Span) -> Result<()> {
        let failed = self.builder.build_int_compare(IntPredicate::EQ, value, value.get_type().const_zero(), "")?;
        self.fault_if(state, failed, FaultCode::Gpu, span)
    }

    /// Brilisp's multi-index `ptradd`: the first index scales by the pointee, each later one
    /// selects an array element or (a literal) a struct field.
    fn gep_path(
        &mut self,
        state: &mut FunctionState<'ctx>,
        pointer: &Expr,
        indices: &[Expr],
    ) -> Result<BasicValueEnum<'ctx>> {
        let source =
            self.basic_type(pointer.ty.pointee().ok_or_else(|| CodegenError::Other("ptradd on a non-pointer".into()))?);
        let base = self.value(state, pointer)?.into_pointer_value();
        let mut current = source;
        let mut values = Vec::with_capacity(indices.len());
        for (position, index) in indices.iter().enumerate() {
            if position == 0 {
                values.push(self.index(state, index)?);
                continue;
            }
            match current {
                BasicTypeEnum::StructType(struct_type) => {
                    let ExprKind::Int(field) = index.kind else {
                        return Err(CodegenError::Other("a struct index that is not a literal".into()));
                    };
                    values.push(self.context.i32_type().const_int(field as u64, false));
                    current = struct_type
                        .get_field_type_at_index(field as u32)
                        .ok_or_else(|| CodegenError::Other("struct index out of range".into()))?;
                }
                BasicTypeEnum::ArrayType(array_type) => {
                    values.push(self.index(state, index)?);
                    current = array_type.get_element_type();
                }
                _ => return Err(CodegenError::Other("ptradd index into a scalar".into())),
            }
        }
        // SAFETY: as for `ptradd`: no bounds are promised and the gep is not `inbounds`.
        Ok(unsafe { self.builder.build_gep(source, base, &values, "")? }.into())
    }

    /// An offset widened to 64 bits, sign-extended as C-Lisp's `ptradd` specifies.
    pub(super) fn index(&mut self, state: &mut FunctionState<'ctx>, index: &Expr) -> Result<IntValue<'ctx>> {
        let value = self.value(state, index)?.into_int_value();
        Ok(self.builder.build_int_s_extend_or_bit_cast(value, self.context.i64_type(), "")?)
    }

    fn binary(
        &mut self,
        state: &mut FunctionState<'ctx>,
        op: BinOp,
        operand_ty: &Ty,
        (left, right): (BasicValueEnum<'ctx>, BasicValueEnum<'ctx>),
        no_wrap: bool,
        span: Span,
    ) -> Result<BasicValueEnum<'ctx>> {
        let b = &self.builder;
        if let BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FCmp(_) = op {
            let (l, r) = (left.into_float_value(), right.into_float_value());
            // NVPTX may fuse a*b+c into fma, as nvcc does (§7.1): device arithmetic may contract.
            let contract = |value: inkwell::values::FloatValue<'ctx>| {
                if self.device.is_some() {
                    if let Some(instruction) = value.as_instruction() {
                        let _ = instruction.set_fast_math_flags(inkwell::values::FastMathFlags::AllowContract);
                    }
                }
                value
            };
            return Ok(match op {
                BinOp::FAdd => contract(b.build_float_add(l, r, "")?).into(),
                BinOp::FSub => contract(b.build_float_sub(l, r, "")?).into(),
                BinOp::FMul => contract(b.build_float_mul(l, r, "")?).into(),
                BinOp::FDiv => b.build_float_div(l, r, "")?.into(),
                BinOp::FCmp(cmp) => {
                    let predicate = match cmp {
                        FloatCmp::Oeq => FloatPredicate::OEQ,
                        FloatCmp::One => FloatPredicate::ONE,
                        FloatCmp::Olt => FloatPredicate::OLT,
                        FloatCmp::Ogt => FloatPredicate::OGT,
                        FloatCmp::Ole => FloatPredicate::OLE,
                        FloatCmp::Oge => FloatPredicate::OGE,
                    };
                    b.build_float_compare(predicate, l, r, "")?.into()
                }
                _ => unreachable_op(),
            });
        }
        if let BinOp::ICmp(cmp) = op {
            // Pointers compare by unsigned address.
            let pointers = operand_ty.is_ptr();
            let predicate = match cmp {
                IntCmp::Eq => IntPredicate::EQ,
                IntCmp::Ne => IntPredicate::NE,
                IntCmp::Slt if pointers => IntPredicate::ULT,
                IntCmp::Sgt if pointers => IntPredicate::UGT,
                IntCmp::Sle if pointers => IntPredicate::ULE,
                IntCmp::Sge if pointers => IntPredicate::UGE,
                IntCmp::Slt => IntPredicate::SLT,
                IntCmp::Sgt => IntPredicate::SGT,
                IntCmp::Sle => IntPredicate::SLE,
                IntCmp::Sge => IntPredicate::SGE,
                IntCmp::Ult => IntPredicate::ULT,
                IntCmp::Ugt => IntPredicate::UGT,
                IntCmp::Ule => IntPredicate::ULE,
                IntCmp::Uge => IntPredicate::UGE,
            };
            if pointers {
                return Ok(b
                    .build_int_compare(predicate, left.into_pointer_value(), right.into_pointer_value(), "")?
                    .into());
            }
            return Ok(b.build_int_compare(predicate, left.into_int_value(), right.into_int_value(), "")?.into());
        }
        let (l, r) = (left.into_int_value(), right.into_int_value());
        Ok(match op {
            // A versioned nest's guard proved that these cannot overflow (see `versioning`).
            BinOp::Add if no_wrap => b.build_int_nsw_add(l, r, "")?.into(),
            BinOp::Sub if no_wrap => b.build_int_nsw_sub(l, r, "")?.into(),
            BinOp::Mul if no_wrap => b.build_int_nsw_mul(l, r, "")?.into(),
            BinOp::Add => b.build_int_add(l, r, "")?.into(),
            BinOp::Sub => b.build_int_sub(l, r, "")?.into(),
            BinOp::Mul => b.build_int_mul(l, r, "")?.into(),
            BinOp::Xor => b.build_xor(l, r, "")?.into(),
            BinOp::And => b.build_and(l, r, "")?.into(),
            BinOp::Or => b.build_or(l, r, "")?.into(),
            BinOp::Shl | BinOp::LShr | BinOp::AShr => {
                // Shift amounts are taken modulo the width (LLVM would give poison).
                let mask = l.get_type().const_int(u64::from(operand_ty.bits() - 1), false);
                let amount = b.build_and(r, mask, "")?;
                match op {
                    BinOp::Shl => b.build_left_shift(l, amount, "")?.into(),
                    BinOp::LShr => b.build_right_shift(l, amount, false, "")?.into(),
                    _ => b.build_right_shift(l, amount, true, "")?.into(),
                }
            }
            BinOp::Div | BinOp::Rem | BinOp::UDiv | BinOp::URem => {
                let signed = matches!(op, BinOp::Div | BinOp::Rem);
                let r = self.check_division(state, l, r, signed, span)?;
                let b = &self.builder;
                match op {
                    BinOp::Div => b.build_int_signed_div(l, r, "")?.into(),
                    BinOp::Rem => b.build_int_signed_rem(l, r, "")?.into(),
                    BinOp::UDiv => b.build_int_unsigned_div(l, r, "")?.into(),
                    _ => b.build_int_unsigned_rem(l, r, "")?.into(),
                }
            }
            _ => unreachable_op(),
        })
    }

    fn cast(&mut self, op: CastOp, from: &Ty, to: &Ty, value: BasicValueEnum<'ctx>) -> Result<BasicValueEnum<'ctx>> {
        let b = &self.builder;
        let target = self.basic_type(to);
        Ok(match op {
            CastOp::Sext | CastOp::Zext | CastOp::Trunc => {
                let value = value.into_int_value();
                let target = target.into_int_type();
                if from.bits() == to.bits() {
                    value.into()
                } else if op == CastOp::Sext {
                    b.build_int_s_extend(value, target, "")?.into()
                } else if op == CastOp::Zext {
                    b.build_int_z_extend(value, target, "")?.into()
                } else {
                    b.build_int_truncate(value, target, "")?.into()
                }
            }
            CastOp::FpExt | CastOp::FpTrunc => {
                if from == to {
                    value
                } else if op == CastOp::FpExt {
                    b.build_float_ext(value.into_float_value(), target.into_float_type(), "")?.into()
                } else {
                    b.build_float_trunc(value.into_float_value(), target.into_float_type(), "")?.into()
                }
            }
            CastOp::SiToFp => b.build_signed_int_to_float(value.into_int_value(), target.into_float_type(), "")?.into(),
            CastOp::UiToFp => {
                b.build_unsigned_int_to_float(value.into_int_value(), target.into_float_type(), "")?.into()
            }
            CastOp::FpToSi | CastOp::FpToUi => {
                // Saturating conversions define what LLVM leaves as poison (NaN gives 0).
                let name = if op == CastOp::FpToSi { "llvm.fptosi.sat" } else { "llvm.fptoui.sat" };
                let intrinsic =
                    Intrinsic::find(name).ok_or_else(|| CodegenError::Other(format!("no intrinsic {name}")))?;
                let declaration = intrinsic
                    .get_declaration(&self.module, &[target, value.get_type()])
                    .ok_or_else(|| CodegenError::Other(format!("no declaration of {name}")))?;
                self.builder
                    .build_call(declaration, &[value.into()], "")?
                    .try_as_basic_value()
                    .basic()
                    .ok_or_else(no_value)?
            }
            CastOp::PtrToInt => b.build_ptr_to_int(value.into_pointer_value(), target.into_int_type(), "")?.into(),
            CastOp::IntToPtr => b.build_int_to_ptr(value.into_int_value(), target.into_pointer_type(), "")?.into(),
            CastOp::Bitcast if from.is_ptr() => value,
            CastOp::Bitcast => b.build_bit_cast(value, target, "")?,
            // Address spaces are erased on the CPU.
            CastOp::AddrSpaceCast if self.device.is_some() => {
                b.build_address_space_cast(value.into_pointer_value(), target.into_pointer_type(), "")?.into()
            }
            CastOp::AddrSpaceCast => value,
        })
    }
}

fn unreachable_op() -> ! {
    panic!("codegen: the checker admitted an operator this branch does not handle")
}
