//! Codegen: the typed tree to LLVM IR with inkwell, one module per cell; calls through slots.
//!
//! Names in a module that users cannot write contain `#` (the reader rejects it in symbols):
//! `f#slot` is `f`'s indirection slot, `x#g2` a global's storage, `cell#3.0` an entry. So no
//! user name can collide with the machinery's.
//!
//! Here: the surface the session uses (`lower`, `CellModule`, `Naming`, symbols, runtime and fault
//! codes), the lowering state and LLVM types. Function bodies and statements are in `stmt`,
//! expressions in `expr`, calls and faults in `call`, GPU code in `device`.

mod call;
mod device;
mod expr;
mod sim;
mod stmt;
mod trampoline;
pub(crate) mod versioning;

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

use device::DeviceState;
pub(crate) use device::{lower_device, DeviceUnit};
pub(crate) use sim::{SimFrame, SimLowering, SimSite, SimTarget, SIM_CHECK, SIM_FRAME, SIM_SYNC};
pub(crate) use trampoline::{block_words, is_trampoline_scalar, lower_trampoline};

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

type Result<T> = std::result::Result<T, CodegenError>;

/// What an expression leaves. Scalars are SSA values. Struct and array values live in memory:
/// LLVM's instruction selection handles first-class aggregates element by element, which
/// takes quadratic time and overflows its stack for arrays of a few thousand elements, so they
/// are moved with `memmove` and passed to functions by pointer.
#[derive(Clone, Copy)]
enum Value<'ctx> {
    Scalar(BasicValueEnum<'ctx>),
    /// Memory holding an aggregate value. It may be a variable's own storage, valid until the
    /// next evaluation that could write it: consumers copy it out before evaluating anything.
    Memory(PointerValue<'ctx>),
    /// A void call.
    Nothing,
}

/// Whether values of the type are aggregates (kept in memory; see `Value`).
fn is_aggregate(ty: &Ty) -> bool {
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
/// `FAULT_STALE_POINTER` once NAME has another type.
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

/// Runtime functions that compiled code calls; `run` provides them.
pub(crate) const RT_FAULT: &str = "quasi#fault";
pub(crate) const RT_SESSION_ALLOC: &str = "quasi#session_alloc";
/// Called by batched top-level code after each item, with where the item's value is and its
/// size (0 without a value): `void (ptr value, i64 size)`.
pub(crate) const RT_ITEM_DONE: &str = "quasi#item_done";

/// How a cell's top-level items become entries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopLevel {
    /// One entry per item, which stores the item's value at its `out` parameter: for bench and
    /// autotune, which call one item at a time, and for listings.
    PerItem,
    /// The items run in order by a few entries (chunks), each item reporting to
    /// `RT_ITEM_DONE` when it is done: one call runs a whole cell. Thousands of one-item
    /// functions cost LLVM's code generation more per item than the items themselves.
    Batched,
}

/// At most this many items go into one chunk of batched top-level code, which bounds the size
/// of the functions LLVM works on.
const CHUNK_ITEMS: usize = 256;

/// A chunk of batched top-level code ends once its variables take this many bytes: each item
/// keeps its own variables, all live for the whole chunk.
const CHUNK_FRAME_BYTES: u64 = 64 << 10;

/// The session's GPU runtime (its address is the symbol's), and the functions that host GPU
/// forms call with it (`gpu` provides them). Each returns a status that compiled code checks:
/// a failure faults with `FAULT_GPU`, and the runtime keeps the message.
pub(crate) const RT_GPU: &str = "quasi#gpu";
pub(crate) const RT_GPU_ALLOC: &str = "quasi#gpu_alloc";
pub(crate) const RT_GPU_FREE: &str = "quasi#gpu_free";
pub(crate) const RT_GPU_LEN: &str = "quasi#gpu_len";
pub(crate) const RT_GPU_COPY: &str = "quasi#gpu_copy";
pub(crate) const RT_GPU_LAUNCH: &str = "quasi#gpu_launch";

/// Words per launch argument in the descriptor `RT_GPU_LAUNCH` reads: kind, value, count
/// (-1: none), element size, direction (0 none, 1 in, 2 out, 3 inout).
pub(crate) const LAUNCH_ARG_WORDS: usize = 5;

/// Fault codes passed to `RT_FAULT`.
pub(crate) const FAULT_DIVIDE_BY_ZERO: u64 = 1;
pub(crate) const FAULT_DIVIDE_OVERFLOW: u64 = 2;
pub(crate) const FAULT_UNRESOLVED: u64 = 3;
pub(crate) const FAULT_INVALIDATED: u64 = 4;
/// A host GPU form failed; the GPU runtime holds the message.
pub(crate) const FAULT_GPU: u64 = 5;
/// Old host code called a function that is now device code.
pub(crate) const FAULT_DEVICE_ONLY: u64 = 6;
/// A `fn-ptr` thunk was called after its function was redefined with another type.
pub(crate) const FAULT_STALE_POINTER: u64 = 7;

/// The zero (null) constant of an LLVM type.
fn zero_of(ty: BasicTypeEnum<'_>) -> BasicValueEnum<'_> {
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
            lowering.emit_fault_body(value, FAULT_DEVICE_ONLY, function.span, &function.name)?;
        } else {
            lowering.emit_function(function, value, None)?;
        }
    }
    // A slot must never hold an address that calls with the wrong types, nor null: unresolved
    // declarations and invalidated functions get a trap that reports what went wrong.
    let mut traps = Vec::new();
    for decl in cell.externs.iter().filter(|decl| decl.unresolved) {
        lowering.emit_trap(&decl.name, FAULT_UNRESOLVED, decl.span, String::new())?;
        traps.push(decl.name.clone());
    }
    let mut new_thunks: Vec<(&(String, String), &Thunk)> =
        naming.thunks.iter().filter(|(_, thunk)| thunk.new).collect();
    new_thunks.sort_by(|left, right| left.1.symbol.cmp(&right.1.symbol));
    for ((name, _), thunk) in new_thunks {
        lowering.emit_thunk(name, thunk)?;
    }
    for invalidation in &cell.invalidated {
        lowering.emit_trap(&invalidation.name, FAULT_INVALIDATED, invalidation.span, invalidation.message.clone())?;
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

struct Lowering<'ctx, 'n> {
    context: &'ctx Context,
    module: Module<'ctx>,
    builder: Builder<'ctx>,
    naming: &'n Naming<'n>,
    /// Sizes and alignments of LLVM types on the host.
    target_data: &'n TargetData,
    fault_sites: Vec<FaultSite>,
    /// The bodies of the `define-inline` functions the cell calls.
    inline_bodies: &'n HashMap<String, Rc<FunctionDef>>,
    /// Private copies of `define-inline` callees emitted into this module.
    inline_copies: HashMap<String, FunctionValue<'ctx>>,
    /// Set when lowering device code for NVPTX.
    device: Option<DeviceState<'ctx, 'n>>,
}

/// Where a `Lowering` emits: a new module for the target, and what its code may refer to.
struct LoweringTarget<'ctx, 'n> {
    context: &'ctx Context,
    target_data: &'n TargetData,
    triple: &'n inkwell::targets::TargetTriple,
    module_name: &'n str,
}

impl<'ctx, 'n> Lowering<'ctx, 'n> {
    /// A lowering into a new, empty module for the target.
    fn new(
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
struct FunctionState<'ctx> {
    function: FunctionValue<'ctx>,
    name: String,
    ret: Ty,
    locals: Vec<PointerValue<'ctx>>,
    local_types: Vec<Ty>,
    /// (break target, continue target) of the enclosing loops.
    loops: Vec<(BasicBlock<'ctx>, BasicBlock<'ctx>)>,
    /// The blocks of Brilisp labels, by label index.
    labels: Vec<BasicBlock<'ctx>>,
    /// The first block: every alloca of the function (variables and temporaries), so that
    /// each has one slot per activation however often its code runs.
    allocas: BasicBlock<'ctx>,
    /// Where an aggregate result goes: the caller's memory, passed as the first parameter.
    sret: Option<PointerValue<'ctx>>,
    /// Locals whose address `ptr-to` takes: loop versioning treats them as unknown.
    address_taken: HashSet<usize>,
    /// Whether a `for` nest may be versioned here (host code, not inside a versioned copy).
    versioning: bool,
    /// The `int` operations that get `nsw` while a versioned nest's checked copy is emitted.
    no_wrap: HashSet<*const Expr>,
}

impl<'ctx> Lowering<'ctx, '_> {
    fn struct_type(&self, name: &str) -> StructType<'ctx> {
        let llvm_name = self.naming.struct_names.get(name).map(String::as_str).unwrap_or(name);
        self.context.get_struct_type(llvm_name).unwrap_or_else(|| self.context.opaque_struct_type(llvm_name))
    }

    fn define_struct_bodies(&mut self, cell: &TypedCell) -> Result<()> {
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
    fn basic_type(&self, ty: &Ty) -> BasicTypeEnum<'ctx> {
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
            Ty::GpuBuf(_) => self.context.i64_type().into(),
            Ty::Arr(length, element) => self.basic_type(element).array_type(*length as u32).into(),
            Ty::Struct(name) => self.struct_type(name).into(),
        }
    }

    /// The LLVM type of a function. Aggregate parameters are passed as pointers to the caller's
    /// private copy, and an aggregate result is written to memory the caller passes first.
    fn function_type(&self, signature: &Signature, variadic: bool) -> FunctionType<'ctx> {
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
    fn temporary(&self, state: &FunctionState<'ctx>, ty: &Ty) -> Result<PointerValue<'ctx>> {
        self.temporary_of(state, self.basic_type(ty))
    }

    /// A static slot of an LLVM type in the function's first block.
    fn temporary_of(&self, state: &FunctionState<'ctx>, llvm_type: BasicTypeEnum<'ctx>) -> Result<PointerValue<'ctx>> {
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
    fn size_of(&self, ty: &Ty) -> IntValue<'ctx> {
        self.context.i64_type().const_int(self.target_data.get_abi_size(&self.basic_type(ty)), false)
    }

    fn alignment_of(&self, ty: &Ty) -> u32 {
        self.target_data.get_abi_alignment(&self.basic_type(ty))
    }

    /// Copies an aggregate between memory that may overlap (`(set a (select c b a))`).
    fn copy_aggregate(&self, destination: PointerValue<'ctx>, source: PointerValue<'ctx>, ty: &Ty) -> Result<()> {
        let align = self.alignment_of(ty);
        self.builder
            .build_memmove(destination, align, source, align, self.size_of(ty))
            .map_err(|message| CodegenError::Other(message.to_string()))?;
        Ok(())
    }

    fn zero_memory(&self, destination: PointerValue<'ctx>, ty: &Ty) -> Result<()> {
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
    fn host_function_attributes(&self, function: FunctionValue<'ctx>) {
        for name in ["null_pointer_is_valid", "nounwind"] {
            let kind = Attribute::get_named_enum_kind_id(name);
            function.add_attribute(AttributeLoc::Function, self.context.create_enum_attribute(kind, 0));
        }
    }

    fn mark_inline(&self, function: FunctionValue<'ctx>) {
        let kind = Attribute::get_named_enum_kind_id("alwaysinline");
        function.add_attribute(AttributeLoc::Function, self.context.create_enum_attribute(kind, 0));
    }

    fn zero(&self, ty: &Ty) -> BasicValueEnum<'ctx> {
        zero_of(self.basic_type(ty))
    }

    fn external_global(&self, symbol: &str) -> PointerValue<'ctx> {
        let global = self.module.get_global(symbol).unwrap_or_else(|| {
            // The type only matters for the declaration; accesses use their own types.
            let global = self.module.add_global(self.context.i8_type(), None, symbol);
            global.set_linkage(Linkage::External);
            global
        });
        global.as_pointer_value()
    }

    fn runtime_function(&self, name: &str, ty: FunctionType<'ctx>) -> FunctionValue<'ctx> {
        self.module.get_function(name).unwrap_or_else(|| self.module.add_function(name, ty, Some(Linkage::External)))
    }
}

fn no_value() -> CodegenError {
    CodegenError::Other("an expression without a value where one was needed".into())
}
