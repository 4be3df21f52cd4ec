//! Codegen for calls and faults: calls through slots, direct and intrinsic calls, inline copies,
//! inline assembly, and the checks and traps that report runtime faults.

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Linkage;
use inkwell::types::{BasicMetadataTypeEnum, BasicType, StructType};
use inkwell::values::{BasicMetadataValueEnum, BasicValue, BasicValueEnum, FunctionValue, IntValue};
use inkwell::{AddressSpace, IntPredicate};

use super::lowering::{
    is_aggregate, no_value, signature_symbol, slot_symbol, trap_symbol, CodegenError, FaultSite, FunctionState,
    Lowering, Result, Thunk, Value,
};
use crate::abi::{FaultCode, RT_FAULT};
use crate::reader::Span;
use crate::tree::{Callee, Expr, FunctionAddress};
use crate::types::{Signature, Ty};

impl<'ctx> Lowering<'ctx, '_> {
    /// Division by zero, and `MIN / -1`, fault at every optimisation level. Returns the divisor
    /// to divide by: in the simulator a failed check is reported when the launch ends and the
    /// thread goes on, dividing by 1.
    pub(super) fn check_division(
        &mut self,
        state: &FunctionState<'ctx>,
        left: IntValue<'ctx>,
        right: IntValue<'ctx>,
        signed: bool,
        span: Span,
    ) -> Result<IntValue<'ctx>> {
        let int_type = right.get_type();
        let is_zero = self.builder.build_int_compare(IntPredicate::EQ, right, int_type.const_zero(), "")?;
        let overflows = if signed {
            let bits = int_type.get_bit_width();
            let min = int_type.const_int(1u64 << (bits - 1), false);
            let is_min = self.builder.build_int_compare(IntPredicate::EQ, left, min, "")?;
            let is_minus_one =
                self.builder.build_int_compare(IntPredicate::EQ, right, int_type.const_all_ones(), "")?;
            Some(self.builder.build_and(is_min, is_minus_one, "")?)
        } else {
            None
        };
        if self.is_sim() {
            return self.sim_check_division(right, is_zero, overflows, state.name.clone(), span);
        }
        self.fault_if(state, is_zero, FaultCode::DivideByZero, span)?;
        if let Some(overflows) = overflows {
            self.fault_if(state, overflows, FaultCode::DivideOverflow, span)?;
        }
        Ok(right)
    }

    /// A body for `function` that only reports fault `code` (device code on the host).
    pub(super) fn emit_fault_body(
        &mut self,
        function: FunctionValue<'ctx>,
        code: FaultCode,
        span: Span,
        name: &str,
    ) -> Result<()> {
        let block = self.context.append_basic_block(function, "entry");
        self.builder.position_at_end(block);
        let site = self.naming.first_site + self.fault_sites.len() as u32;
        self.fault_sites.push(FaultSite { span, function: name.to_string(), detail: String::new() });
        self.call_fault(code, site)
    }

    pub(super) fn emit_trap(&mut self, name: &str, code: FaultCode, span: Span, detail: String) -> Result<()> {
        let symbol = trap_symbol(name, &self.module.get_name().to_string_lossy());
        let trap =
            self.module.add_function(&symbol, self.context.void_type().fn_type(&[], false), Some(Linkage::External));
        let block = self.context.append_basic_block(trap, "entry");
        self.builder.position_at_end(block);
        let site = self.naming.first_site + self.fault_sites.len() as u32;
        self.fault_sites.push(FaultSite { span, function: name.to_string(), detail });
        self.call_fault(code, site)
    }

    /// A `fn-ptr` thunk (see `Thunk`): checks `name`'s signature word, then calls through its
    /// slot with its own arguments, or faults when `name` has another type now.
    pub(super) fn emit_thunk(&mut self, name: &str, thunk: &Thunk) -> Result<()> {
        let function_type = self.function_type(&thunk.signature, false);
        let function = self.runtime_function(&thunk.symbol, function_type);
        let entry = self.context.append_basic_block(function, "entry");
        let call_block = self.context.append_basic_block(function, "call");
        let stale_block = self.context.append_basic_block(function, "stale");
        self.builder.position_at_end(entry);
        let i64_type = self.context.i64_type();
        let word = self.external_global(&signature_symbol(name));
        let current = self.builder.build_load(i64_type, word, "")?.into_int_value();
        let same =
            self.builder.build_int_compare(IntPredicate::EQ, current, i64_type.const_int(thunk.id, false), "")?;
        self.builder.build_conditional_branch(same, call_block, stale_block)?;
        self.builder.position_at_end(stale_block);
        let site = self.naming.first_site + self.fault_sites.len() as u32;
        self.fault_sites.push(FaultSite {
            span: thunk.span,
            function: name.to_string(),
            detail: thunk.signature.to_string(),
        });
        self.call_fault(FaultCode::StalePointer, site)?;
        self.builder.position_at_end(call_block);
        let slot = self.external_global(&slot_symbol(name));
        let pointer =
            self.builder.build_load(self.context.ptr_type(AddressSpace::default()), slot, "")?.into_pointer_value();
        let args: Vec<BasicMetadataValueEnum> = function.get_param_iter().map(Into::into).collect();
        let call = self.builder.build_indirect_call(function_type, pointer, &args, "")?;
        call.set_tail_call(true);
        match call.try_as_basic_value().basic() {
            Some(value) => self.builder.build_return(Some(&value))?,
            None => self.builder.build_return(None)?,
        };
        Ok(())
    }

    /// The address `(fn-ptr NAME)` gives: a session function's thunk, a C function's symbol,
    /// or what a library function's slot holds.
    pub(super) fn function_address(&mut self, address: &FunctionAddress) -> Result<BasicValueEnum<'ctx>> {
        let function = match address {
            FunctionAddress::Thunk { name, signature } => {
                let thunk = self
                    .naming
                    .thunks
                    .get(&(name.clone(), signature.to_string()))
                    .ok_or_else(|| CodegenError::Other(format!("no thunk was named for `(fn-ptr {name})`")))?;
                self.runtime_function(&thunk.symbol, self.function_type(signature, false))
            }
            FunctionAddress::Symbol { name, link, signature } => {
                let variadic = signature.variadic || is_c_variadic(name);
                self.runtime_function(link, self.function_type(signature, variadic))
            }
            FunctionAddress::Slot(name) => {
                let slot = self.external_global(&slot_symbol(name));
                return Ok(self.builder.build_load(self.context.ptr_type(AddressSpace::default()), slot, "")?);
            }
        };
        Ok(function.as_global_value().as_pointer_value().into())
    }

    pub(super) fn fault_if(
        &mut self,
        state: &FunctionState<'ctx>,
        condition: IntValue<'ctx>,
        code: FaultCode,
        span: Span,
    ) -> Result<()> {
        if self.device.is_some() {
            // The GPU has no fault runtime: a failed check traps, and the launch reports it.
            let fault_block = self.context.append_basic_block(state.function, "trap");
            let ok_block = self.context.append_basic_block(state.function, "ok");
            self.builder.build_conditional_branch(condition, fault_block, ok_block)?;
            self.builder.position_at_end(fault_block);
            let trap = Intrinsic::find("llvm.trap")
                .and_then(|trap| trap.get_declaration(&self.module, &[]))
                .ok_or_else(|| CodegenError::Other("no llvm.trap".into()))?;
            self.builder.build_call(trap, &[], "")?;
            self.builder.build_unreachable()?;
            self.builder.position_at_end(ok_block);
            return Ok(());
        }
        let site = self.naming.first_site + self.fault_sites.len() as u32;
        self.fault_sites.push(FaultSite { span, function: state.name.clone(), detail: String::new() });
        let fault_block = self.context.append_basic_block(state.function, "fault");
        let ok_block = self.context.append_basic_block(state.function, "ok");
        self.builder.build_conditional_branch(condition, fault_block, ok_block)?;
        self.builder.position_at_end(fault_block);
        self.call_fault(code, site)?;
        self.builder.position_at_end(ok_block);
        Ok(())
    }

    /// Calls the runtime's fault function, which never returns.
    fn call_fault(&mut self, code: FaultCode, site: u32) -> Result<()> {
        let i64_type = self.context.i64_type();
        let fault_type = self.context.void_type().fn_type(&[i64_type.into(), i64_type.into()], false);
        let fault = self.runtime_function(RT_FAULT, fault_type);
        let noreturn = Attribute::get_named_enum_kind_id("noreturn");
        fault.add_attribute(AttributeLoc::Function, self.context.create_enum_attribute(noreturn, 0));
        let cold = Attribute::get_named_enum_kind_id("cold");
        fault.add_attribute(AttributeLoc::Function, self.context.create_enum_attribute(cold, 0));
        self.builder.build_call(
            fault,
            &[i64_type.const_int(code.code(), false).into(), i64_type.const_int(u64::from(site), false).into()],
            "",
        )?;
        self.builder.build_unreachable()?;
        Ok(())
    }

    pub(super) fn call(
        &mut self,
        state: &mut FunctionState<'ctx>,
        callee: &Callee,
        name: &str,
        signature: &Signature,
        args: &[Expr],
        span: Span,
    ) -> Result<Value<'ctx>> {
        let mut values: Vec<BasicMetadataValueEnum<'ctx>> = Vec::new();
        // An aggregate result is written to memory the caller passes first.
        let result = match (callee, is_aggregate(&signature.ret)) {
            (Callee::Intrinsic(_), _) | (_, false) => None,
            (_, true) => Some(self.temporary(state, &signature.ret)?),
        };
        values.extend(result.map(BasicMetadataValueEnum::from));
        for arg in args {
            // Aggregates are passed by value: a private copy, by pointer.
            let value: BasicMetadataValueEnum = if is_aggregate(&arg.ty) {
                self.owned_copy(state, arg)?.into()
            } else {
                self.value(state, arg)?.into()
            };
            values.push(value);
        }
        let member = match callee {
            Callee::Slot(target) | Callee::Inline(target) => self.device.as_ref().map(|device| {
                device
                    .functions
                    .get(target)
                    .copied()
                    .ok_or_else(|| CodegenError::Other(format!("`{target}` is not part of this device code")))
            }),
            _ => None,
        };
        // In a simulator build, the functions of the build pass the frame along.
        let mut member_values = values.clone();
        member_values.extend(self.sim_frame_argument());
        let call = match callee {
            // Device code is one module: its functions call each other directly.
            _ if member.is_some() => {
                self.builder.build_call(member.transpose()?.ok_or_else(no_value)?, &member_values, "")?
            }
            Callee::Intrinsic(link) if self.is_sim() && link.starts_with("llvm.nvvm.") => {
                return Ok(match self.sim_intrinsic(link, &state.name, span)? {
                    Some(value) => Value::Scalar(value),
                    None => Value::Nothing,
                });
            }
            Callee::Direct(link) if self.device.is_some() => {
                // The simulator runs libdevice's functions as the C library's (`__nv_sinf` is `sinf`).
                let link = match link.strip_prefix("__nv_") {
                    Some(host) if self.is_sim() => host,
                    _ => link.as_str(),
                };
                let function = self.module.get_function(link).unwrap_or_else(|| {
                    self.module.add_function(link, self.function_type(signature, false), Some(Linkage::External))
                });
                self.builder.build_call(function, &values, "")?
            }
            Callee::SelfCall => self.builder.build_call(state.function, &member_values, "")?,
            Callee::Slot(target) => {
                // Load the callee from its slot rather than calling it directly: a later cell may
                // redefine it, and callers compiled before that must reach the new body.
                let slot = self.external_global(&slot_symbol(target));
                let pointer = self
                    .builder
                    .build_load(self.context.ptr_type(AddressSpace::default()), slot, "")?
                    .into_pointer_value();
                let function_type = self.function_type(signature, signature.variadic);
                self.builder.build_indirect_call(function_type, pointer, &values, "")?
            }
            Callee::Intrinsic(link) => return self.call_intrinsic(state, link, signature, &values),
            Callee::Direct(link) => {
                let variadic = signature.variadic || is_c_variadic(name);
                let function = match self.module.get_function(link) {
                    Some(function) => function,
                    None => {
                        self.module.add_function(link, self.function_type(signature, variadic), Some(Linkage::External))
                    }
                };
                if function.get_type() != self.function_type(signature, variadic) {
                    // Another declaration of the same C function in this cell: call through its address.
                    let pointer = function.as_global_value().as_pointer_value();
                    self.builder.build_indirect_call(self.function_type(signature, variadic), pointer, &values, "")?
                } else {
                    self.builder.build_call(function, &values, "")?
                }
            }
            Callee::Inline(target) => {
                let function = self.inline_copy(target)?;
                self.builder.build_call(function, &values, "")?
            }
        };
        Ok(match (result, call.try_as_basic_value().basic()) {
            (Some(memory), _) => Value::Memory(memory),
            (None, Some(value)) => Value::Scalar(value),
            (None, None) => Value::Nothing,
        })
    }

    /// Puts an SSA struct value (an intrinsic's or inline assembly's result) into memory.
    fn spill(&mut self, state: &FunctionState<'ctx>, value: BasicValueEnum<'ctx>, ty: &Ty) -> Result<Value<'ctx>> {
        let memory = self.temporary(state, ty)?;
        self.builder.build_store(memory, value)?;
        Ok(Value::Memory(memory))
    }

    /// Intrinsics return structs as literal structs (`{ i32, i1 }`); C-Lisp's are named, so the
    /// result is rebuilt field by field.
    fn call_intrinsic(
        &mut self,
        state: &FunctionState<'ctx>,
        link: &str,
        signature: &Signature,
        values: &[BasicMetadataValueEnum<'ctx>],
    ) -> Result<Value<'ctx>> {
        let params: Vec<BasicMetadataTypeEnum> = signature.params.iter().map(|ty| self.basic_type(ty).into()).collect();
        let named = match &signature.ret {
            Ty::Struct(name) => Some(self.struct_type(name)),
            _ => None,
        };
        let function_type = match (&signature.ret, named) {
            (Ty::Void, _) => self.context.void_type().fn_type(&params, signature.variadic),
            (_, Some(named)) => {
                self.context.struct_type(&named.get_field_types(), false).fn_type(&params, signature.variadic)
            }
            (ret, None) => self.basic_type(ret).fn_type(&params, signature.variadic),
        };
        let host_link;
        let link = if self.device.is_none() {
            host_link = crate::intrinsics::host_intrinsic_name(link);
            host_link.as_str()
        } else {
            link
        };
        let function = match self.module.get_function(link) {
            Some(function) => function,
            None => self.module.add_function(link, function_type, Some(Linkage::External)),
        };
        let result = self.builder.build_call(function, values, "")?.try_as_basic_value().basic();
        match (result, named) {
            (Some(BasicValueEnum::StructValue(literal)), Some(named)) => {
                let value = self.rename_struct(literal, named)?;
                self.spill(state, value, &signature.ret)
            }
            (Some(value), _) => Ok(Value::Scalar(value)),
            (None, _) => Ok(Value::Nothing),
        }
    }

    /// Copies a literal struct value into a value of the named struct with the same fields.
    fn rename_struct(
        &mut self,
        literal: inkwell::values::StructValue<'ctx>,
        named: StructType<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>> {
        let mut value: inkwell::values::AggregateValueEnum = named.get_undef().into();
        for index in 0..named.count_fields() {
            let field = self.builder.build_extract_value(literal, index, "")?;
            value = self.builder.build_insert_value(value, field, index, "")?;
        }
        Ok(value.as_basic_value_enum())
    }

    /// A private copy of a `define-inline` function in this module, so LLVM can inline it.
    fn inline_copy(&mut self, name: &str) -> Result<FunctionValue<'ctx>> {
        if let Some(function) = self.inline_copies.get(name) {
            return Ok(*function);
        }
        let inline_bodies = self.inline_bodies;
        let def = inline_bodies
            .get(name)
            .ok_or_else(|| CodegenError::Other(format!("no body for the inline function `{name}`")))?;
        let function = self.module.add_function(
            &format!("{}#inline", def.name),
            self.function_type(&def.signature, false),
            Some(Linkage::Internal),
        );
        self.mark_inline(function);
        // Registered before its body is emitted, so a recursive inline function calls itself.
        self.inline_copies.insert(def.name.clone(), function);
        let saved = self.builder.get_insert_block();
        self.emit_function(def, function, None)?;
        if let Some(block) = saved {
            self.builder.position_at_end(block);
        }
        Ok(function)
    }

    pub(super) fn asm(
        &mut self,
        state: &mut FunctionState<'ctx>,
        ty: &Ty,
        template: &str,
        constraints: &str,
        args: &[Expr],
    ) -> Result<Value<'ctx>> {
        let mut values: Vec<BasicMetadataValueEnum<'ctx>> = Vec::new();
        let mut param_types: Vec<BasicMetadataTypeEnum<'ctx>> = Vec::new();
        for arg in args {
            param_types.push(self.basic_type(&arg.ty).into());
            values.push(self.value(state, arg)?.into());
        }
        if self.is_sim() {
            let scalars: Vec<BasicValueEnum<'ctx>> =
                values.iter().filter_map(|value| BasicValueEnum::try_from(*value).ok()).collect();
            return Ok(match self.sim_asm(template, &scalars, ty)? {
                Some(value) => Value::Scalar(value),
                None => Value::Nothing,
            });
        }
        // Several outputs come back as a literal struct, converted to the named one after.
        let (function_type, fields) = match ty {
            Ty::Void => (self.context.void_type().fn_type(&param_types, false), None),
            Ty::Struct(name) => {
                let named = self.struct_type(name);
                let field_types = named.get_field_types();
                let result = match field_types.as_slice() {
                    [single] => *single,
                    _ => self.context.struct_type(&field_types, false).into(),
                };
                (result.fn_type(&param_types, false), Some(named))
            }
            other => (self.basic_type(other).fn_type(&param_types, false), None),
        };
        let inline_asm = self.context.create_inline_asm(
            function_type,
            template.to_string(),
            constraints.to_string(),
            true,
            false,
            None,
            false,
        );
        let call = self.builder.build_indirect_call(function_type, inline_asm, &values, "")?;
        let result = call.try_as_basic_value().basic();
        match (result, fields) {
            // One output comes back as itself, several as a literal struct.
            (Some(BasicValueEnum::StructValue(literal)), Some(named)) if named.count_fields() > 1 => {
                let value = self.rename_struct(literal, named)?;
                self.spill(state, value, ty)
            }
            (Some(single), Some(named)) => {
                let value = self.builder.build_insert_value(named.get_undef(), single, 0, "")?.as_basic_value_enum();
                self.spill(state, value, ty)
            }
            (Some(value), None) => Ok(Value::Scalar(value)),
            (None, _) => Ok(Value::Nothing),
        }
    }
}

/// C's variadic functions: declared with a fixed list, they are still called as variadic so
/// that the x86-64 convention (AL = vector registers used) holds.
fn is_c_variadic(name: &str) -> bool {
    matches!(
        name,
        "printf"
            | "fprintf"
            | "sprintf"
            | "snprintf"
            | "dprintf"
            | "scanf"
            | "fscanf"
            | "sscanf"
            | "open"
            | "fcntl"
            | "ioctl"
            | "execl"
            | "execlp"
    )
}
