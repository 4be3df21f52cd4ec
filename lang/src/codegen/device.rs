//! Codegen for the GPU: device modules for NVPTX (kernels, device globals, NVVM intrinsics) and
//! the host side of GPU forms (runtime calls, launch descriptors).

use std::collections::HashMap;

use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::{Linkage, Module};
use inkwell::targets::TargetData;
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum};
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

use super::lowering::{
    no_value, CodegenError, DeviceState, DeviceUnit, FunctionState, Lowering, LoweringTarget, Naming, Result,
    SimLowering,
};
use crate::abi::{
    ArgKind, Direction, FaultCode, LaunchArg, LAUNCH_ARG_WORDS, LAUNCH_DIMENSIONS, RT_GPU, RT_GPU_ENCODE_CALL,
    RT_GPU_LAUNCH,
};
use crate::reader::Span;
use crate::types::Ty;

/// A lowered device module: its kernel entry's PTX name and the shared memory it declares.
pub(crate) struct DeviceModule<'ctx> {
    pub module: Module<'ctx>,
    pub entry: String,
    pub shared_bytes: u64,
    /// libdevice functions it calls (`__nv_…`).
    pub libdevice: Vec<String>,
    /// For the simulator: the storage of device globals, and the source of each barrier and
    /// checked access (numbered as the code passes them to the simulator).
    pub sim: Option<SimLowering>,
}

/// The PTX calling convention of kernels (LLVM's `ptx_kernel`).
const PTX_KERNEL: u32 = 71;

/// A PTX identifier for a C-Lisp name: PTX allows letters, digits, `_` and `$`, so every
/// other byte (and `$`) becomes `$` and two hex digits; `prefix` keeps classes apart.
pub(crate) fn ptx_identifier(prefix: &str, name: &str) -> String {
    let mut identifier = prefix.to_string();
    for (index, byte) in name.bytes().enumerate() {
        let plain =
            byte.is_ascii_alphabetic() || byte == b'_' || (byte.is_ascii_digit() && (index > 0 || !prefix.is_empty()));
        if plain {
            identifier.push(byte as char);
        } else {
            identifier.push_str(&format!("${byte:02x}"));
        }
    }
    identifier
}

/// Lowers device code for NVPTX: the members as internal functions, and a kernel entry with
/// the PTX calling convention that calls the first one (so a launched function may also be
/// called, even by itself).
pub(crate) fn lower_device<'ctx>(
    context: &'ctx Context,
    target_data: &TargetData,
    triple: &inkwell::targets::TargetTriple,
    unit: &DeviceUnit<'_>,
    struct_names: &HashMap<String, String>,
    module_name: &str,
) -> Result<DeviceModule<'ctx>> {
    let empty = HashMap::new();
    let naming =
        Naming { global_symbols: &empty, struct_names, body_symbols: &empty, first_site: 0, thunks: &HashMap::new() };
    let no_inline_bodies = HashMap::new();
    let device = DeviceState {
        unit,
        functions: HashMap::new(),
        globals: std::cell::RefCell::new(HashMap::new()),
        shared_bytes: std::cell::Cell::new(0),
        sim: unit.sim.as_ref().map(SimLowering::new),
        sim_globals: Default::default(),
        sim_shared: Default::default(),
    };
    let target = LoweringTarget { context, target_data, triple, module_name };
    let mut lowering = Lowering::new(target, &naming, &no_inline_bodies, Some(device));
    let root = unit.members.first().ok_or_else(|| CodegenError::Other("device code without a kernel".into()))?;
    let mut functions = HashMap::new();
    if unit.sim.is_some() {
        lowering.sim_entry_declaration();
    }
    for member in unit.members {
        let function = lowering.module.add_function(
            &ptx_identifier("$f_", &member.name),
            lowering.member_function_type(&member.signature),
            Some(Linkage::Internal),
        );
        if member.inline {
            lowering.mark_inline(function);
        }
        functions.insert(member.name.clone(), function);
    }
    if let Some(device) = &mut lowering.device {
        device.functions = functions.clone();
    }
    for member in unit.members {
        lowering.emit_function(member, functions[&member.name], None)?;
    }
    if unit.sim.is_some() {
        let entry = lowering.sim_entry(root, functions[&root.name])?;
        lowering.module.verify().map_err(|message| CodegenError::Verify(message.to_string()))?;
        let shared_bytes = lowering.device.as_ref().map_or(0, |device| device.shared_bytes.get());
        let sim = lowering.device.as_mut().and_then(|device| {
            let mut sim = device.sim.take()?;
            sim.globals = device.sim_globals.take();
            sim.shared = device.sim_shared.borrow().values().copied().collect();
            sim.shared.sort_unstable();
            Some(sim)
        });
        return Ok(DeviceModule { module: lowering.module, entry, shared_bytes, libdevice: Vec::new(), sim });
    }
    let entry = ptx_identifier("", &root.name);
    let kernel =
        lowering.module.add_function(&entry, lowering.function_type(&root.signature, false), Some(Linkage::External));
    kernel.set_call_conventions(PTX_KERNEL);
    let block = context.append_basic_block(kernel, "entry");
    lowering.builder.position_at_end(block);
    let args: Vec<BasicMetadataValueEnum> = kernel.get_param_iter().map(Into::into).collect();
    lowering.builder.build_call(functions[&root.name], &args, "")?;
    lowering.builder.build_return(None)?;
    // LLVM 19 also reads kernels from `!nvvm.annotations`; older drivers' tools expect it.
    let annotation = context.metadata_node(&[
        kernel.as_global_value().as_pointer_value().into(),
        context.metadata_string("kernel").into(),
        context.i32_type().const_int(1, false).into(),
    ]);
    lowering
        .module
        .add_global_metadata("nvvm.annotations", &annotation)
        .map_err(|error| CodegenError::Other(error.to_string()))?;
    lowering.module.verify().map_err(|message| CodegenError::Verify(message.to_string()))?;
    let shared_bytes = lowering.device.as_ref().map_or(0, |device| device.shared_bytes.get());
    let libdevice = lowering
        .module
        .get_functions()
        .filter(|function| function.count_basic_blocks() == 0)
        .map(|function| function.get_name().to_string_lossy().into_owned())
        .filter(|name| crate::intrinsics::is_libdevice(name))
        .collect();
    Ok(DeviceModule { module: lowering.module, entry, shared_bytes, libdevice, sim: None })
}

impl<'ctx> Lowering<'ctx, '_> {
    /// Device code's copy of a global, made on first use: shared memory (address space 3) for
    /// `define-shared`, else global memory initialised from the definition. C-Lisp sees a
    /// generic pointer, as `aptradd` of a shared array gives; NVPTX infers the space back.
    pub(super) fn device_global(&self, name: &str) -> PointerValue<'ctx> {
        let generic = self.context.ptr_type(AddressSpace::default());
        let Some(device) = &self.device else { return generic.const_null() };
        if let Some(pointer) = device.globals.borrow().get(name) {
            return *pointer;
        }
        let entry = device.unit.globals.get(name);
        let (ty, space, init) = match entry {
            Some(entry) => (entry.ty.clone(), entry.space, Some(&entry.init)),
            None => (Ty::Int(8), 0, None),
        };
        let (size, align) = crate::value::size_align(&ty, device.unit.structs);
        if device.sim.is_some() {
            let pointer = self.sim_global(name, &ty, space == 3, init, size, align);
            let pointer = pointer.unwrap_or_else(|| generic.const_null());
            if space != 3 {
                device.globals.borrow_mut().insert(name.to_string(), pointer);
            }
            return pointer;
        }
        let bytes = self.context.i8_type().array_type(size.max(1) as u32);
        let shared = space == 3;
        let global = self.module.add_global(
            bytes,
            Some(AddressSpace::from(if shared { 3 } else { 1 })),
            &ptx_identifier("$g_", name),
        );
        global.set_linkage(Linkage::Internal);
        if shared {
            // Shared memory cannot be initialised; C-Lisp promises 16-byte alignment.
            global.set_initializer(&bytes.get_undef());
            global.set_alignment(align.max(16) as u32);
            device.shared_bytes.set(device.shared_bytes.get() + size as u64);
        } else {
            let mut image = vec![0u8; size.max(1)];
            if let Some(init) = init {
                crate::value::encode_constant(&mut image, 0, &ty, init, device.unit.structs, &|_| 0);
            }
            let values: Vec<IntValue> =
                image.iter().map(|byte| self.context.i8_type().const_int(u64::from(*byte), false)).collect();
            global.set_initializer(&self.context.i8_type().const_array(&values));
            global.set_alignment(align.max(1) as u32);
        }
        let pointer = global.as_pointer_value().const_address_space_cast(generic);
        device.globals.borrow_mut().insert(name.to_string(), pointer);
        pointer
    }

    /// A value as the 64-bit word the GPU runtime takes: integers sign-extended, floats by
    /// their bits, pointers by address.
    pub(super) fn as_word(&self, value: BasicValueEnum<'ctx>) -> Result<IntValue<'ctx>> {
        let word = self.context.i64_type();
        Ok(match value {
            BasicValueEnum::IntValue(int) if int.get_type().get_bit_width() == 1 => {
                self.builder.build_int_z_extend(int, word, "")?
            }
            BasicValueEnum::IntValue(int) => self.builder.build_int_s_extend_or_bit_cast(int, word, "")?,
            BasicValueEnum::FloatValue(float) => {
                let bits = if float.get_type() == self.context.f32_type() { self.context.i32_type() } else { word };
                let bits = self.builder.build_bit_cast(float, bits, "")?.into_int_value();
                self.builder.build_int_z_extend_or_bit_cast(bits, word, "")?
            }
            BasicValueEnum::PointerValue(pointer) => self.builder.build_ptr_to_int(pointer, word, "")?,
            _ => return Err(CodegenError::Other("an aggregate where the GPU runtime wants a word".into())),
        })
    }

    /// Calls a GPU runtime function with the session's GPU runtime first.
    pub(super) fn call_gpu(
        &mut self,
        name: &str,
        result: BasicTypeEnum<'ctx>,
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> Result<IntValue<'ctx>> {
        let gpu = self.external_global(RT_GPU);
        let mut values: Vec<BasicMetadataValueEnum<'ctx>> = vec![gpu.into()];
        values.extend_from_slice(args);
        let types: Vec<BasicMetadataTypeEnum<'ctx>> = values
            .iter()
            .map(|value| match value {
                BasicMetadataValueEnum::PointerValue(pointer) => pointer.get_type().into(),
                BasicMetadataValueEnum::IntValue(int) => int.get_type().into(),
                _ => self.context.i64_type().into(),
            })
            .collect();
        let function = self.runtime_function(name, result.fn_type(&types, false));
        let call = self.builder.build_call(function, &values, "")?;
        Ok(call.try_as_basic_value().basic().ok_or_else(no_value)?.into_int_value())
    }

    pub(super) fn fault_unless_zero(
        &mut self,
        state: &FunctionState<'ctx>,
        status: IntValue<'ctx>,
        span: Span,
    ) -> Result<()> {
        let failed = self.builder.build_int_compare(IntPredicate::NE, status, status.get_type().const_zero(), "")?;
        self.fault_if(state, failed, FaultCode::Gpu, span)
    }

    /// `(launch …)`, or with an encoder `(encode-call E …)`: the arguments are evaluated, then
    /// described to the runtime, which moves memory, launches and waits (or records the launch
    /// into the encoder). Arguments are evaluated first, then the element counts (an
    /// annotation's SIZE reads the arguments).
    pub(super) fn launch(
        &mut self,
        state: &mut FunctionState<'ctx>,
        launch: &crate::tree::Launch,
        encoder: Option<IntValue<'ctx>>,
        span: Span,
    ) -> Result<()> {
        let word = self.context.i64_type();
        let mut dimensions = Vec::new();
        for dimension in launch.grid.iter().chain(&launch.block) {
            dimensions.push(self.index(state, dimension)?);
        }
        let mut values = Vec::new();
        for (arg, local) in launch.args.iter().zip(&launch.arg_locals) {
            let value = self.value(state, &arg.value)?;
            if let Some(local) = local {
                self.builder.build_store(state.locals[*local], value)?;
            }
            values.push(self.as_word(value)?);
        }
        let mut counts = Vec::new();
        for arg in &launch.args {
            counts.push(match &arg.count {
                Some(count) => self.index(state, count)?,
                None => word.const_all_ones(),
            });
        }
        let dimensions_memory = self.temporary_of(state, word.array_type(LAUNCH_DIMENSIONS as u32).into())?;
        for (index, dimension) in dimensions.into_iter().enumerate() {
            self.store_word(dimensions_memory, LAUNCH_DIMENSIONS as u32, index, dimension)?;
        }
        let words = (launch.args.len() * LAUNCH_ARG_WORDS).max(1) as u32;
        let descriptor = self.temporary_of(state, word.array_type(words).into())?;
        for (index, ((arg, value), count)) in launch.args.iter().zip(values).zip(counts).enumerate() {
            let kind = match arg.kind {
                crate::tree::LaunchArgKind::Scalar => ArgKind::Scalar,
                crate::tree::LaunchArgKind::DevicePointer => ArgKind::DevicePointer,
                crate::tree::LaunchArgKind::Buffer => ArgKind::Buffer,
                crate::tree::LaunchArgKind::Host => ArgKind::Host,
            };
            let direction = match arg.direction {
                None => Direction::None,
                Some(crate::tree::Direction::In) => Direction::In,
                Some(crate::tree::Direction::Out) => Direction::Out,
                Some(crate::tree::Direction::InOut) => Direction::InOut,
            };
            let fields = [
                (LaunchArg::KIND, word.const_int(kind as u64, false)),
                (LaunchArg::VALUE, value),
                (LaunchArg::COUNT, count),
                (LaunchArg::ELEMENT_SIZE, word.const_int(arg.element_size, false)),
                (LaunchArg::DIRECTION, word.const_int(direction as u64, false)),
            ];
            for (field, field_value) in fields {
                self.store_word(descriptor, words, index * LAUNCH_ARG_WORDS + field, field_value)?;
            }
        }
        let name = self.builder.build_global_string_ptr(&launch.kernel, ".kernel")?.as_pointer_value();
        let mut arguments: Vec<BasicMetadataValueEnum<'ctx>> = encoder.into_iter().map(Into::into).collect();
        arguments.extend::<[BasicMetadataValueEnum<'ctx>; 5]>([
            name.into(),
            word.const_int(launch.kernel.len() as u64, false).into(),
            dimensions_memory.into(),
            descriptor.into(),
            word.const_int(launch.args.len() as u64, false).into(),
        ]);
        let runtime = if encoder.is_some() { RT_GPU_ENCODE_CALL } else { RT_GPU_LAUNCH };
        let status = self.call_gpu(runtime, self.context.i32_type().into(), &arguments)?;
        self.fault_unless_zero(state, status, span)
    }

    fn store_word(&self, array: PointerValue<'ctx>, length: u32, index: usize, value: IntValue<'ctx>) -> Result<()> {
        let word = self.context.i64_type();
        let indices = [word.const_zero(), word.const_int(index as u64, false)];
        // SAFETY: `index` is below the array's length by construction.
        let pointer = unsafe { self.builder.build_in_bounds_gep(word.array_type(length), array, &indices, "")? };
        self.builder.build_store(pointer, value)?;
        Ok(())
    }

    /// `(tid.x)` and friends: NVPTX's special registers.
    pub(super) fn gpu_index(
        &mut self,
        register: crate::tree::GpuRegister,
        dimension: u8,
    ) -> Result<BasicValueEnum<'ctx>> {
        if self.is_sim() {
            return self.sim_index(register.ptx(), dimension.min(2));
        }
        let axis = ["x", "y", "z"][usize::from(dimension.min(2))];
        let name = format!("llvm.nvvm.read.ptx.sreg.{}.{axis}", register.ptx());
        self.device_intrinsic(&name, &[])?.ok_or_else(no_value)
    }

    /// Calls a (non-overloaded) NVVM intrinsic; only device code has them.
    pub(super) fn device_intrinsic(
        &mut self,
        name: &str,
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> Result<Option<BasicValueEnum<'ctx>>> {
        if self.device.is_none() {
            return Err(CodegenError::Other(format!("`{name}` in host code")));
        }
        let intrinsic =
            Intrinsic::find(name).ok_or_else(|| CodegenError::Other(format!("LLVM has no intrinsic {name}")))?;
        let declaration = intrinsic
            .get_declaration(&self.module, &[])
            .ok_or_else(|| CodegenError::Other(format!("no declaration of {name}")))?;
        Ok(self.builder.build_call(declaration, args, "")?.try_as_basic_value().basic())
    }
}
