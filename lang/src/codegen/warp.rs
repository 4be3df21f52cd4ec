//! Warp-level operations and atomics (docs/language.md §7.9). For PTX, NVVM's intrinsics
//! (`llvm.nvvm.shfl.sync.*`, `llvm.nvvm.vote.*.sync`, `llvm.nvvm.bar.warp.sync`, the `laneid`
//! register) and `atomicrmw`/`cmpxchg`, relaxed as CUDA's atomics are; in the simulator, a
//! call of `abi::SIM_WARP`, where the lanes of the warp meet, and the same atomics; in host
//! code, sequentially consistent atomics.

use inkwell::values::{AsValueRef, BasicMetadataValueEnum, BasicValueEnum, IntValue};
use inkwell::AddressSpace;
use llvm_sys::{LLVMAtomicOrdering, LLVMAtomicRMWBinOp};

use super::lowering::{no_value, CodegenError, FunctionState, Lowering, Result, Value};
use crate::abi::SIM_WARP;
use crate::reader::Span;
use crate::tree::{AtomicOp, Expr, WarpOp};
use crate::types::Ty;

/// What a lane gets from `shfl-*-sync` when CUDA's `width` is 32: the clamp operand of NVVM's
/// shuffles (`up` clamps at lane 0, the others at lane 31).
fn shuffle_clamp(op: WarpOp) -> u64 {
    if op == WarpOp::ShflUp {
        0
    } else {
        0x1f
    }
}

fn shuffle_mode(op: WarpOp) -> &'static str {
    match op {
        WarpOp::ShflUp => "up",
        WarpOp::ShflDown => "down",
        WarpOp::ShflXor => "bfly",
        _ => "idx",
    }
}

impl<'ctx> Lowering<'ctx, '_> {
    /// A warp-level operation (device code only: the checker keeps it out of host code).
    pub(super) fn warp(
        &mut self,
        state: &mut FunctionState<'ctx>,
        op: WarpOp,
        operands: &[Expr],
        span: Span,
    ) -> Result<Value<'ctx>> {
        let int = self.context.i32_type();
        if op == WarpOp::WarpSize {
            return Ok(Value::Scalar(int.const_int(32, false).into()));
        }
        if op == WarpOp::LaneId {
            return Ok(Value::Scalar(self.lane_id()?.into()));
        }
        let mut values = Vec::with_capacity(operands.len());
        for operand in operands {
            values.push(self.value(state, operand)?);
        }
        // `(syncwarp)` without a mask names every lane.
        let mask = values.first().map_or(int.const_all_ones(), |mask| mask.into_int_value());
        if self.is_sim() {
            return self.sim_warp(&state.name, op, mask, &values, operands, span);
        }
        let value = match op {
            WarpOp::Shfl | WarpOp::ShflUp | WarpOp::ShflDown | WarpOp::ShflXor => {
                let ty = &operands[1].ty;
                self.shuffle(op, mask, values[1], values[2].into_int_value(), ty)?
            }
            WarpOp::Ballot | WarpOp::All | WarpOp::Any => {
                let name = match op {
                    WarpOp::Ballot => "llvm.nvvm.vote.ballot.sync",
                    WarpOp::All => "llvm.nvvm.vote.all.sync",
                    _ => "llvm.nvvm.vote.any.sync",
                };
                self.device_intrinsic(name, &[mask.into(), values[1].into()])?.ok_or_else(no_value)?
            }
            WarpOp::SyncWarp => {
                self.device_intrinsic("llvm.nvvm.bar.warp.sync", &[mask.into()])?;
                return Ok(Value::Nothing);
            }
            WarpOp::LaneId | WarpOp::WarpSize => unreachable!("handled above"),
        };
        Ok(Value::Scalar(value))
    }

    /// `(lane-id)`: NVVM's `laneid`; in the simulator, the thread's linear index in its block
    /// (x fastest) modulo 32.
    fn lane_id(&mut self) -> Result<IntValue<'ctx>> {
        if !self.is_sim() {
            let lane = self.device_intrinsic("llvm.nvvm.read.ptx.sreg.laneid", &[])?.ok_or_else(no_value)?;
            return Ok(lane.into_int_value());
        }
        let read = |this: &mut Self, register: &str, axis: u8| -> Result<IntValue<'ctx>> {
            Ok(this.sim_index(register, axis)?.into_int_value())
        };
        let (x, y, z) = (read(self, "tid", 0)?, read(self, "tid", 1)?, read(self, "tid", 2)?);
        let (width, height) = (read(self, "ntid", 0)?, read(self, "ntid", 1)?);
        let plane = self.builder.build_int_mul(width, height, "")?;
        let linear = self.builder.build_int_add(x, self.builder.build_int_mul(y, width, "")?, "")?;
        let linear = self.builder.build_int_add(linear, self.builder.build_int_mul(z, plane, "")?, "")?;
        Ok(self.builder.build_and(linear, self.context.i32_type().const_int(31, false), "")?)
    }

    /// A shuffle through NVVM's 32-bit shuffles: 64-bit values as two halves.
    fn shuffle(
        &mut self,
        op: WarpOp,
        mask: IntValue<'ctx>,
        value: BasicValueEnum<'ctx>,
        lane: IntValue<'ctx>,
        ty: &Ty,
    ) -> Result<BasicValueEnum<'ctx>> {
        let int = self.context.i32_type();
        let clamp = int.const_int(shuffle_clamp(op), false);
        let mode = shuffle_mode(op);
        let half = |this: &mut Self, bits: BasicValueEnum<'ctx>, kind: &str| -> Result<BasicValueEnum<'ctx>> {
            let name = format!("llvm.nvvm.shfl.sync.{mode}.{kind}");
            this.device_intrinsic(&name, &[mask.into(), bits.into(), lane.into(), clamp.into()])?.ok_or_else(no_value)
        };
        match ty {
            Ty::Int(32) => half(self, value, "i32"),
            Ty::Float => half(self, value, "f32"),
            _ => {
                let word = self.context.i64_type();
                let bits = self.builder.build_bit_cast(value, word, "")?.into_int_value();
                let low = self.builder.build_int_truncate(bits, int, "")?;
                let high = self.builder.build_right_shift(bits, word.const_int(32, false), false, "")?;
                let high = self.builder.build_int_truncate(high, int, "")?;
                let low = half(self, low.into(), "i32")?.into_int_value();
                let high = half(self, high.into(), "i32")?.into_int_value();
                let low = self.builder.build_int_z_extend(low, word, "")?;
                let high = self.builder.build_int_z_extend(high, word, "")?;
                let high = self.builder.build_left_shift(high, word.const_int(32, false), "")?;
                let joined = self.builder.build_or(high, low, "")?;
                Ok(self.builder.build_bit_cast(joined, self.basic_type(ty), "")?)
            }
        }
    }

    /// A collective warp operation in the simulator: `SIM_WARP(frame, site, op, mask, value,
    /// operand)` meets the warp's lanes and returns this lane's result as bits.
    #[allow(clippy::too_many_arguments)]
    fn sim_warp(
        &mut self,
        function: &str,
        op: WarpOp,
        mask: IntValue<'ctx>,
        values: &[BasicValueEnum<'ctx>],
        operands: &[Expr],
        span: Span,
    ) -> Result<Value<'ctx>> {
        let site = self.sim_warp_site(function, span);
        let int = self.context.i32_type();
        let word = self.context.i64_type();
        // The value as 64 bits (a predicate as 0 or 1), and the lane, distance or xor mask.
        let (bits, operand) = match op {
            WarpOp::Shfl | WarpOp::ShflUp | WarpOp::ShflDown | WarpOp::ShflXor => {
                (self.bits_of(values[1], &operands[1].ty)?, values[2].into_int_value())
            }
            WarpOp::Ballot | WarpOp::All | WarpOp::Any => {
                (self.builder.build_int_z_extend(values[1].into_int_value(), word, "")?, int.const_zero())
            }
            _ => (word.const_zero(), int.const_zero()),
        };
        let ptr = self.context.ptr_type(AddressSpace::default());
        let function_type =
            word.fn_type(&[ptr.into(), int.into(), int.into(), int.into(), word.into(), int.into()], false);
        let runtime = self.runtime_function(SIM_WARP, function_type);
        let arguments: [BasicMetadataValueEnum<'ctx>; 6] = [
            self.sim_frame_argument().ok_or_else(no_value)?,
            int.const_int(u64::from(site), false).into(),
            int.const_int(u64::from(op.code()), false).into(),
            mask.into(),
            bits.into(),
            operand.into(),
        ];
        let result =
            self.builder.build_call(runtime, &arguments, "")?.try_as_basic_value().basic().ok_or_else(no_value)?;
        let result = result.into_int_value();
        let value: BasicValueEnum<'ctx> = match op {
            WarpOp::Shfl | WarpOp::ShflUp | WarpOp::ShflDown | WarpOp::ShflXor => {
                self.scalar_of_bits(result, &operands[1].ty)?
            }
            WarpOp::Ballot => self.builder.build_int_truncate(result, int, "")?.into(),
            WarpOp::All | WarpOp::Any => self.builder.build_int_truncate(result, self.context.bool_type(), "")?.into(),
            _ => return Ok(Value::Nothing),
        };
        Ok(Value::Scalar(value))
    }

    /// A scalar of `ty` as 64 bits (zero-extended).
    fn bits_of(&mut self, value: BasicValueEnum<'ctx>, ty: &Ty) -> Result<IntValue<'ctx>> {
        let word = self.context.i64_type();
        Ok(match ty {
            Ty::Float => {
                let bits = self.builder.build_bit_cast(value, self.context.i32_type(), "")?.into_int_value();
                self.builder.build_int_z_extend(bits, word, "")?
            }
            Ty::Double => self.builder.build_bit_cast(value, word, "")?.into_int_value(),
            Ty::Int(64) => value.into_int_value(),
            _ => self.builder.build_int_z_extend(value.into_int_value(), word, "")?,
        })
    }

    /// 64 bits as a scalar of `ty`.
    fn scalar_of_bits(&mut self, bits: IntValue<'ctx>, ty: &Ty) -> Result<BasicValueEnum<'ctx>> {
        let int = self.context.i32_type();
        Ok(match ty {
            Ty::Float => {
                let low = self.builder.build_int_truncate(bits, int, "")?;
                self.builder.build_bit_cast(low, self.context.f32_type(), "")?
            }
            Ty::Double => self.builder.build_bit_cast(bits, self.context.f64_type(), "")?,
            Ty::Int(64) => bits.into(),
            _ => self.builder.build_int_truncate(bits, int, "")?.into(),
        })
    }

    /// `(atomic-add P V)` and its kin: `atomicrmw` or `cmpxchg` on P (in the simulator, the
    /// address its check gives), relaxed in device code, sequentially consistent on the host.
    pub(super) fn atomic(
        &mut self,
        state: &mut FunctionState<'ctx>,
        op: AtomicOp,
        operands: &[Expr],
        span: Span,
    ) -> Result<Value<'ctx>> {
        let element = operands[0]
            .ty
            .pointee()
            .cloned()
            .ok_or_else(|| CodegenError::Other("an atomic on a non-pointer".into()))?;
        let pointer = self.value(state, &operands[0])?.into_pointer_value();
        let mut values = Vec::with_capacity(2);
        for operand in &operands[1..] {
            values.push(self.value(state, operand)?);
        }
        let pointer =
            if self.is_sim() { self.sim_checked_atomic(pointer, &element, &state.name, span)? } else { pointer };
        let ordering = if self.device.is_some() {
            LLVMAtomicOrdering::LLVMAtomicOrderingMonotonic
        } else {
            LLVMAtomicOrdering::LLVMAtomicOrderingSequentiallyConsistent
        };
        // SAFETY: builder, pointer and values belong to this module's context; inkwell 0.11's
        // `build_atomicrmw` takes integers only (not `fadd`, nor `xchg` of floats).
        let old = unsafe {
            let builder = self.builder.as_mut_ptr();
            let raw = if op == AtomicOp::Cas {
                let pair = llvm_sys::core::LLVMBuildAtomicCmpXchg(
                    builder,
                    pointer.as_value_ref(),
                    values[0].as_value_ref(),
                    values[1].as_value_ref(),
                    ordering,
                    ordering,
                    0,
                );
                llvm_sys::core::LLVMBuildExtractValue(builder, pair, 0, c"".as_ptr())
            } else {
                let float = element.is_float();
                let rmw = match op {
                    AtomicOp::Add if float => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpFAdd,
                    AtomicOp::Add => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpAdd,
                    AtomicOp::Min => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpMin,
                    AtomicOp::Max => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpMax,
                    _ => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpXchg,
                };
                llvm_sys::core::LLVMBuildAtomicRMW(
                    builder,
                    rmw,
                    pointer.as_value_ref(),
                    values[0].as_value_ref(),
                    ordering,
                    0,
                )
            };
            if raw.is_null() {
                None
            } else {
                Some(BasicValueEnum::new(raw))
            }
        };
        old.map(Value::Scalar).ok_or_else(|| CodegenError::Other(format!("LLVM built no `{}`", op.name())))
    }
}
