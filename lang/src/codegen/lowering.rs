//! The lowering state every codegen file shares: `Lowering` (the module being built, its
//! builder, naming and target), `FunctionState` (one body being emitted), the `Value` an
//! expression leaves, the error type, and the state device code adds (`DeviceState`, with the
//! simulator's `SimLowering`). The concerns add `impl Lowering` blocks in their own files
//! (`stmt`, `expr`, `call`, `device`, `sim`, `trampoline`) and import only this file, so
//! `codegen/` has no import cycle; `mod.rs` holds the entry point of a cell.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::targets::TargetData;
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, FunctionType, StructType};
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue};
use inkwell::AddressSpace;

use crate::reader::Span;
use crate::tree::{Expr, FunctionDef, TypedCell};
use crate::types::{Signature, Ty};

/// A failure of the code generator itself (never of the user's program).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CodegenError {
    #[error("LLVM builder: {0}")]
    Builder(#[from] inkwell::builder::BuilderError),
    #[error("the generated module does not verify: {0}")]
    Verify(String),
    #[error("{0}")]
    Other(String),
    /// Device code the simulator cannot run (inline PTX, an NVVM intrinsic): the user's error.
    #[error("{0}")]
    Unsupported(String),
}

pub(super) type Result<T> = std::result::Result<T, CodegenError>;

/// What an expression leaves. Scalars are SSA values. Struct and array values live in memory:
/// LLVM's instruction selection handles first-class aggregates element by element, which
/// takes quadratic time and overflows its stack for arrays of a few thousand elements, so they
/// are moved with `memmove` and passed to functions by pointer.
#[derive(Clone, Copy)]
pub(super) enum Value<'ctx> {
    Scalar(BasicValueEnum<'ctx>),
    /// Memory holding an aggregate value. It may be a variable's own storage, valid until the
    /// next evaluation that could write it: consumers copy it out before evaluating anything.
    Memory(PointerValue<'ctx>),
    /// A void call.
    Nothing,
}

/// Whether values of the type are aggregates (kept in memory; see `Value`).
pub(super) fn is_aggregate(ty: &Ty) -> bool {
    matches!(ty, Ty::Arr(..) | Ty::Struct(_))
}

/// The slot symbol of a function name.
pub(crate) fn slot_symbol(name: &str) -> String {
    format!("{name}#slot")
}

/// The symbol of a function's signature word: the id of its current signature, which its
/// `fn-ptr` thunks compare with their own (see `Thunk`).
pub(crate) fn signature_symbol(name: &str) -> String {
    format!("{name}#signature")
}

/// The thunk `(fn-ptr NAME)` gives for one signature of NAME: made once per session and kept
/// linked for its life, so that C may keep the pointer. It calls through NAME's slot (so it
/// reaches the newest definition) while NAME's signature word holds `id`, and faults with
/// `FaultCode::StalePointer` once NAME has another type.
#[derive(Clone, Debug)]
pub(crate) struct Thunk {
    pub symbol: String,
    pub signature: Signature,
    pub id: u64,
    /// Whether this cell's module defines it (else an earlier cell did).
    pub new: bool,
    /// The `fn-ptr` that made it, for the fault.
    pub span: Span,
}

/// Where a runtime fault happened: reported with a caret when compiled code faults.
#[derive(Clone, Debug)]
pub(crate) struct FaultSite {
    pub span: Span,
    pub function: String,
    /// Extra words for the message (what invalidated a function).
    pub detail: String,
}

/// What the session decided about symbol names before codegen.
pub(crate) struct Naming<'n> {
    /// Storage symbol of every global the cell may reference.
    pub global_symbols: &'n HashMap<String, String>,
    /// LLVM struct type name of every struct the cell may reference.
    pub struct_names: &'n HashMap<String, String>,
    /// Body symbols for the functions this cell defines or recompiles.
    pub body_symbols: &'n HashMap<String, String>,
    /// The first id for this cell's fault sites.
    pub first_site: u32,
    /// The `fn-ptr` thunks the cell uses, by function name and signature text.
    pub thunks: &'n HashMap<(String, String), Thunk>,
}

/// The zero (null) constant of an LLVM type.
pub(super) fn zero_of(ty: BasicTypeEnum<'_>) -> BasicValueEnum<'_> {
    match ty {
        BasicTypeEnum::IntType(t) => t.const_zero().into(),
        BasicTypeEnum::FloatType(t) => t.const_zero().into(),
        BasicTypeEnum::PointerType(t) => t.const_null().into(),
        BasicTypeEnum::ArrayType(t) => t.const_zero().into(),
        BasicTypeEnum::StructType(t) => t.const_zero().into(),
        BasicTypeEnum::VectorType(t) => t.const_zero().into(),
        BasicTypeEnum::ScalableVectorType(t) => t.const_zero().into(),
    }
}

/// The symbol of the trap that stands in for an unresolved or invalidated function, made in
/// the module `module_name`: each cell that declares or invalidates `name` makes its own, and
/// symbols of linked cells must not collide.
pub(crate) fn trap_symbol(name: &str, module_name: &str) -> String {
    format!("{name}#trap.{module_name}")
}

pub(super) struct Lowering<'ctx, 'n> {
    pub(super) context: &'ctx Context,
    pub(super) module: Module<'ctx>,
    pub(super) builder: Builder<'ctx>,
    pub(super) naming: &'n Naming<'n>,
    /// Sizes and alignments of LLVM types on the host.
    pub(super) target_data: &'n TargetData,
    pub(super) fault_sites: Vec<FaultSite>,
    /// The bodies of the `define-inline` functions the cell calls.
    pub(super) inline_bodies: &'n HashMap<String, Rc<FunctionDef>>,
    /// Private copies of `define-inline` callees emitted into this module.
    pub(super) inline_copies: HashMap<String, FunctionValue<'ctx>>,
    /// Set when lowering device code for NVPTX.
    pub(super) device: Option<DeviceState<'ctx, 'n>>,
}

/// Where a `Lowering` emits: a new module for the target, and what its code may refer to.
pub(super) struct LoweringTarget<'ctx, 'n> {
    pub(super) context: &'ctx Context,
    pub(super) target_data: &'n TargetData,
    pub(super) triple: &'n inkwell::targets::TargetTriple,
    pub(super) module_name: &'n str,
}

impl<'ctx, 'n> Lowering<'ctx, 'n> {
    /// A lowering into a new, empty module for the target.
    pub(super) fn new(
        target: LoweringTarget<'ctx, 'n>,
        naming: &'n Naming<'n>,
        inline_bodies: &'n HashMap<String, Rc<FunctionDef>>,
        device: Option<DeviceState<'ctx, 'n>>,
    ) -> Lowering<'ctx, 'n> {
        let LoweringTarget { context, target_data, triple, module_name } = target;
        let module = context.create_module(module_name);
        module.set_triple(triple);
        module.set_data_layout(&target_data.get_data_layout());
        Lowering {
            context,
            module,
            builder: context.create_builder(),
            naming,
            target_data,
            fault_sites: Vec::new(),
            inline_bodies,
            inline_copies: HashMap::new(),
            device,
        }
    }
}

/// Per-function state while emitting a body.
pub(super) struct FunctionState<'ctx> {
    pub(super) function: FunctionValue<'ctx>,
    pub(super) name: String,
    pub(super) ret: Ty,
    pub(super) locals: Vec<PointerValue<'ctx>>,
    pub(super) local_types: Vec<Ty>,
    /// (break target, continue target) of the enclosing loops.
    pub(super) loops: Vec<(BasicBlock<'ctx>, BasicBlock<'ctx>)>,
    /// The blocks of Brilisp labels, by label index.
    pub(super) labels: Vec<BasicBlock<'ctx>>,
    /// The first block: every alloca of the function (variables and temporaries), so that
    /// each has one slot per activation however often its code runs.
    pub(super) allocas: BasicBlock<'ctx>,
    /// Where an aggregate result goes: the caller's memory, passed as the first parameter.
    pub(super) sret: Option<PointerValue<'ctx>>,
    /// Locals whose address `ptr-to` takes: loop versioning treats them as unknown.
    pub(super) address_taken: HashSet<usize>,
    /// Whether a `for` nest may be versioned here (host code, not inside a versioned copy).
    pub(super) versioning: bool,
    /// The `int` operations that get `nsw` while a versioned nest's checked copy is emitted.
    pub(super) no_wrap: HashSet<*const Expr>,
}

impl<'ctx> Lowering<'ctx, '_> {
    pub(super) fn struct_type(&self, name: &str) -> StructType<'ctx> {
        let llvm_name = self.naming.struct_names.get(name).map(String::as_str).unwrap_or(name);
        self.context.get_struct_type(llvm_name).unwrap_or_else(|| self.context.opaque_struct_type(llvm_name))
    }

    pub(super) fn define_struct_bodies(&mut self, cell: &TypedCell) -> Result<()> {
        for structure in &cell.structs {
            let struct_type = self.struct_type(&structure.name);
            if let Some(fields) = &structure.fields {
                if struct_type.is_opaque() {
                    let field_types: Vec<BasicTypeEnum> = fields.iter().map(|(_, ty)| self.basic_type(ty)).collect();
                    struct_type.set_body(&field_types, false);
                }
            }
        }
        Ok(())
    }

    /// The LLVM type of a value type. On the CPU address spaces are erased: they are all one.
    pub(super) fn basic_type(&self, ty: &Ty) -> BasicTypeEnum<'ctx> {
        match ty {
            Ty::Bool => self.context.bool_type().into(),
            Ty::Int(8) => self.context.i8_type().into(),
            Ty::Int(16) => self.context.i16_type().into(),
            Ty::Int(32) => self.context.i32_type().into(),
            Ty::Int(_) => self.context.i64_type().into(),
            Ty::Float => self.context.f32_type().into(),
            Ty::Double => self.context.f64_type().into(),
            // Device code keeps address spaces: NVPTX loads shared and global memory differently.
            Ty::Ptr(_, space) if self.device.is_some() => {
                self.context.ptr_type(AddressSpace::from(*space as u16)).into()
            }
            Ty::Ptr(..) | Ty::Void => self.context.ptr_type(AddressSpace::default()).into(),
            Ty::GpuBuf(_) | Ty::Encoder | Ty::Fence => self.context.i64_type().into(),
            Ty::Arr(length, element) => self.basic_type(element).array_type(*length as u32).into(),
            Ty::Struct(name) => self.struct_type(name).into(),
        }
    }

    /// The LLVM type of a function. Aggregate parameters are passed as pointers to the caller's
    /// private copy, and an aggregate result is written to memory the caller passes first.
    pub(super) fn function_type(&self, signature: &Signature, variadic: bool) -> FunctionType<'ctx> {
        let pointer: BasicMetadataTypeEnum = self.context.ptr_type(AddressSpace::default()).into();
        let sret = is_aggregate(&signature.ret).then_some(pointer);
        let params: Vec<BasicMetadataTypeEnum> = sret
            .into_iter()
            .chain(
                signature.params.iter().map(|ty| if is_aggregate(ty) { pointer } else { self.basic_type(ty).into() }),
            )
            .collect();
        match &signature.ret {
            Ty::Void => self.context.void_type().fn_type(&params, variadic),
            ret if is_aggregate(ret) => self.context.void_type().fn_type(&params, variadic),
            ret => self.basic_type(ret).fn_type(&params, variadic),
        }
    }

    /// A static slot for a value of `ty` in the function's first block.
    pub(super) fn temporary(&self, state: &FunctionState<'ctx>, ty: &Ty) -> Result<PointerValue<'ctx>> {
        self.temporary_of(state, self.basic_type(ty))
    }

    /// A static slot of an LLVM type in the function's first block.
    pub(super) fn temporary_of(
        &self,
        state: &FunctionState<'ctx>,
        llvm_type: BasicTypeEnum<'ctx>,
    ) -> Result<PointerValue<'ctx>> {
        let here = self.builder.get_insert_block();
        match state.allocas.get_terminator() {
            Some(terminator) => self.builder.position_before(&terminator),
            None => self.builder.position_at_end(state.allocas),
        }
        let slot = self.builder.build_alloca(llvm_type, "tmp");
        if let Some(block) = here {
            self.builder.position_at_end(block);
        }
        Ok(slot?)
    }

    /// The size of `ty` in bytes, as an `i64` constant.
    pub(super) fn size_of(&self, ty: &Ty) -> IntValue<'ctx> {
        self.context.i64_type().const_int(self.target_data.get_abi_size(&self.basic_type(ty)), false)
    }

    pub(super) fn alignment_of(&self, ty: &Ty) -> u32 {
        self.target_data.get_abi_alignment(&self.basic_type(ty))
    }

    /// Copies an aggregate between memory that may overlap (`(set a (select c b a))`).
    pub(super) fn copy_aggregate(
        &self,
        destination: PointerValue<'ctx>,
        source: PointerValue<'ctx>,
        ty: &Ty,
    ) -> Result<()> {
        let align = self.alignment_of(ty);
        self.builder
            .build_memmove(destination, align, source, align, self.size_of(ty))
            .map_err(|message| CodegenError::Other(message.to_string()))?;
        Ok(())
    }

    pub(super) fn zero_memory(&self, destination: PointerValue<'ctx>, ty: &Ty) -> Result<()> {
        self.builder
            .build_memset(destination, self.alignment_of(ty), self.context.i8_type().const_zero(), self.size_of(ty))
            .map_err(|message| CodegenError::Other(message.to_string()))?;
        Ok(())
    }

    /// Attributes of every host function. `null_pointer_is_valid`: C-Lisp's accesses through
    /// null fault where they stand, at every level; without it (clang's
    /// `-fno-delete-null-pointer-checks`) LLVM treats them as unreachable and deletes them with
    /// the code around them, so execution runs off the function's end. `nounwind`: nothing
    /// unwinds through C-Lisp code (faults and interrupts leave by longjmp), so it gets no unwind
    /// tables, whose registration with libgcc costs a walk of every registered table each time
    /// a cell's code is freed (a long session's cells grew slower with its definitions).
    pub(super) fn host_function_attributes(&self, function: FunctionValue<'ctx>) {
        for name in ["null_pointer_is_valid", "nounwind"] {
            let kind = Attribute::get_named_enum_kind_id(name);
            function.add_attribute(AttributeLoc::Function, self.context.create_enum_attribute(kind, 0));
        }
    }

    pub(super) fn mark_inline(&self, function: FunctionValue<'ctx>) {
        let kind = Attribute::get_named_enum_kind_id("alwaysinline");
        function.add_attribute(AttributeLoc::Function, self.context.create_enum_attribute(kind, 0));
    }

    pub(super) fn zero(&self, ty: &Ty) -> BasicValueEnum<'ctx> {
        zero_of(self.basic_type(ty))
    }

    pub(super) fn external_global(&self, symbol: &str) -> PointerValue<'ctx> {
        let global = self.module.get_global(symbol).unwrap_or_else(|| {
            // The type only matters for the declaration; accesses use their own types.
            let global = self.module.add_global(self.context.i8_type(), None, symbol);
            global.set_linkage(Linkage::External);
            global
        });
        global.as_pointer_value()
    }

    pub(super) fn runtime_function(&self, name: &str, ty: FunctionType<'ctx>) -> FunctionValue<'ctx> {
        self.module.get_function(name).unwrap_or_else(|| self.module.add_function(name, ty, Some(Linkage::External)))
    }
}

pub(super) fn no_value() -> CodegenError {
    CodegenError::Other("an expression without a value where one was needed".into())
}

/// What the PTX builder gives codegen: the device code of one launched function.
pub(crate) struct DeviceUnit<'u> {
    /// The launched function first, then every session function it calls, transitively.
    pub members: &'u [Rc<FunctionDef>],
    /// The session's globals: device code gets its own copies.
    pub globals: &'u HashMap<String, crate::tree::GlobalEntry>,
    pub structs: &'u HashMap<String, crate::types::StructEntry>,
    /// Set when the device code is lowered for the host, for the simulator (`super::sim`).
    pub sim: Option<SimTarget>,
}

/// Device code's extra state: its member functions and its copies of globals.
pub(super) struct DeviceState<'ctx, 'n> {
    pub(super) unit: &'n DeviceUnit<'n>,
    pub(super) functions: HashMap<String, FunctionValue<'ctx>>,
    pub(super) globals: std::cell::RefCell<HashMap<String, PointerValue<'ctx>>>,
    pub(super) shared_bytes: std::cell::Cell<u64>,
    /// For the simulator: the device globals' storage to make, and the barriers and checked
    /// accesses met so far (each call site is numbered for the simulator's reports).
    pub(super) sim: Option<SimLowering>,
    /// For the simulator: the globals' storage, and each shared array's offset.
    pub(super) sim_globals: std::cell::RefCell<Vec<SimGlobal>>,
    pub(super) sim_shared: std::cell::RefCell<HashMap<String, (u64, u64)>>,
}

/// How device code is lowered for the simulator.
#[derive(Clone, Debug)]
pub(crate) struct SimTarget {
    /// Whether loads and stores are checked.
    pub check: bool,
    /// Makes the symbols of this build's globals and entry unique in the session.
    pub prefix: String,
}

/// Storage the simulator makes for a device global: its symbol, initial bytes and alignment.
#[derive(Clone, Debug)]
pub(crate) struct SimGlobal {
    pub name: String,
    pub symbol: String,
    pub image: Vec<u8>,
}

/// A barrier or checked access in simulated code, by the number the code passes.
#[derive(Clone, Debug)]
pub(crate) struct SimSite {
    pub span: Span,
    pub function: String,
}

/// What lowering for the simulator collects.
#[derive(Clone, Debug, Default)]
pub(crate) struct SimLowering {
    /// Filled when lowering is done (from `DeviceState::sim_globals`).
    pub globals: Vec<SimGlobal>,
    pub sites: Vec<SimSite>,
    /// Whether the code has a barrier: without one, threads run one after another, no fibers.
    pub barrier: bool,
    /// Each shared-memory array's offset and length in bytes, in the block's shared memory.
    pub shared: Vec<(u64, u64)>,
    /// Whether the code has a warp operation.
    pub warp: bool,
    pub(super) prefix: String,
    pub(super) check: bool,
}

impl SimLowering {
    pub(super) fn new(target: &SimTarget) -> SimLowering {
        SimLowering { prefix: target.prefix.clone(), check: target.check, ..SimLowering::default() }
    }
}

/// Removes the blocks of `function` that no path from its entry reaches: the block codegen
/// opens after a `ret`, `break` or `continue` for the statements after it (`dead`), and the
/// blocks only such blocks jump to. LLVM's passes remove them at every level above 0; removed
/// here, they are also left out of what `:ir 0` and `:ir 1` list, and the code is the same. A
/// function where a reachable φ names such a block keeps them (the C API cannot remove an
/// incoming edge).
pub(super) fn remove_unreachable_blocks(function: FunctionValue<'_>) {
    use inkwell::values::{AsValueRef, Operand, PhiValue};
    let Some(entry) = function.get_first_basic_block() else { return };
    let mut reachable = HashSet::from([entry]);
    let mut work = vec![entry];
    while let Some(block) = work.pop() {
        let Some(terminator) = block.get_terminator() else { continue };
        for index in 0..terminator.get_num_operands() {
            if let Some(Operand::Block(successor)) = terminator.get_operand(index) {
                if reachable.insert(successor) {
                    work.push(successor);
                }
            }
        }
    }
    let unreachable: Vec<BasicBlock<'_>> =
        function.get_basic_blocks().into_iter().filter(|block| !reachable.contains(block)).collect();
    if unreachable.is_empty() {
        return;
    }
    let names_unreachable = |phi: PhiValue<'_>| {
        (0..phi.count_incoming())
            .any(|index| phi.get_incoming(index).is_some_and(|(_, from)| !reachable.contains(&from)))
    };
    let phis = reachable.iter().flat_map(|block| block.get_instructions());
    if phis.filter_map(|instruction| PhiValue::try_from(instruction).ok()).any(names_unreachable) {
        return;
    }
    for block in &unreachable {
        for instruction in block.get_instructions() {
            // Only other unreachable blocks can use a value made in one (a use must be
            // dominated by its definition): those uses become poison, so that no block is
            // deleted while another still uses its values.
            if instruction.get_first_use().is_some() {
                let value = instruction.as_value_ref();
                // SAFETY: `value` is a live instruction with a non-void type (it has uses), and
                // poison of its own type may replace it anywhere.
                unsafe {
                    let poison = llvm_sys::core::LLVMGetPoison(llvm_sys::core::LLVMTypeOf(value));
                    llvm_sys::core::LLVMReplaceAllUsesWith(value, poison);
                }
            }
        }
        // Its branches go first: no block is deleted while another still jumps to it.
        if let Some(terminator) = block.get_terminator() {
            terminator.erase_from_basic_block();
        }
    }
    for block in unreachable {
        // SAFETY: nothing uses the block or its values any more (above), and it is in `function`.
        let _ = unsafe { block.delete() };
    }
}
