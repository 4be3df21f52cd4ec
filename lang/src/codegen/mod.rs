//! Codegen: the typed tree to LLVM IR with inkwell, one module per cell; calls through slots.
//!
//! Names in a module that users cannot write contain `#` (the reader rejects it in symbols):
//! `f#slot` is `f`'s indirection slot, `x#g2` a global's storage, `cell#3.0` an entry. So no
//! user name can collide with the machinery's.

mod call;
mod device;

use std::collections::HashMap;
use std::rc::Rc;

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::{Linkage, Module};
use inkwell::targets::TargetData;
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, FunctionType, StructType};
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate};

use crate::reader::Span;
use crate::tree::{BinOp, CastOp, Expr, ExprKind, FloatCmp, FunctionDef, IntCmp, Place, Stmt, TypedCell};
use crate::types::{Signature, Ty};

use device::DeviceState;
pub(crate) use device::{lower_device, DeviceUnit};

/// A failure of the code generator itself (never of the user's program).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CodegenError {
    #[error("LLVM builder: {0}")]
    Builder(#[from] inkwell::builder::BuilderError),
    #[error("the generated module does not verify: {0}")]
    Verify(String),
    #[error("{0}")]
    Other(String),
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
}

/// A cell's module, verified, with what the session needs to link and run it.
pub(crate) struct CellModule<'ctx> {
    pub module: Module<'ctx>,
    /// Entry symbols of the top-level items, in order.
    pub entries: Vec<String>,
    pub fault_sites: Vec<FaultSite>,
    /// Traps emitted for unresolved declarations and invalidated functions, by name.
    pub traps: Vec<String>,
}

/// Runtime functions that compiled code calls; `run` provides them.
pub(crate) const RT_FAULT: &str = "quasi#fault";
pub(crate) const RT_SESSION_ALLOC: &str = "quasi#session_alloc";

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
) -> Result<CellModule<'ctx>> {
    let module = context.create_module(module_name);
    module.set_triple(triple);
    module.set_data_layout(&target_data.get_data_layout());
    let mut lowering = Lowering {
        context,
        module,
        builder: context.create_builder(),
        naming,
        target_data,
        fault_sites: Vec::new(),
        inline_bodies: &cell.inline_bodies,
        inline_copies: HashMap::new(),
        device: None,
    };
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
    for invalidation in &cell.invalidated {
        lowering.emit_trap(&invalidation.name, FAULT_INVALIDATED, invalidation.span, invalidation.message.clone())?;
        traps.push(invalidation.name.clone());
    }
    let mut entries = Vec::new();
    for (index, item) in cell.top.iter().enumerate() {
        let symbol = format!("{module_name}.{index}");
        let ptr = lowering.context.ptr_type(AddressSpace::default());
        let value = lowering.module.add_function(
            &symbol,
            context.void_type().fn_type(&[ptr.into()], false),
            Some(Linkage::External),
        );
        lowering.emit_function(&item.function, value, item.value.as_ref())?;
        entries.push(symbol);
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

    fn emit_function(&mut self, def: &FunctionDef, function: FunctionValue<'ctx>, result: Option<&Ty>) -> Result<()> {
        let allocas = self.context.append_basic_block(function, "frame");
        let entry = self.context.append_basic_block(function, "entry");
        self.builder.position_at_end(allocas);
        let sret = match is_aggregate(&def.signature.ret) {
            true => Some(
                function
                    .get_nth_param(0)
                    .ok_or_else(|| CodegenError::Other("missing result parameter".into()))?
                    .into_pointer_value(),
            ),
            false => None,
        };
        let first_param = u32::from(sret.is_some());
        let mut state = FunctionState {
            function,
            name: def.name.clone(),
            ret: def.signature.ret.clone(),
            locals: Vec::new(),
            local_types: Vec::new(),
            loops: Vec::new(),
            labels: Vec::new(),
            allocas,
            sret,
        };
        for (index, local) in def.locals.iter().enumerate() {
            let slot = self.builder.build_alloca(self.basic_type(&local.ty), &sanitize(&local.name))?;
            if index < def.signature.params.len() {
                let param = function
                    .get_nth_param(first_param + index as u32)
                    .ok_or_else(|| CodegenError::Other("missing parameter".into()))?;
                param.set_name(&sanitize(&local.name));
                if is_aggregate(&local.ty) {
                    self.copy_aggregate(slot, param.into_pointer_value(), &local.ty)?;
                } else {
                    self.builder.build_store(slot, param)?;
                }
            }
            state.locals.push(slot);
            state.local_types.push(local.ty.clone());
        }
        self.builder.position_at_end(entry);
        // Brilisp labels get their blocks up front, so jumps may go forward.
        state.labels =
            def.labels.iter().map(|label| self.context.append_basic_block(function, &sanitize(label))).collect();
        match (result, def.body.as_slice()) {
            (Some(ty), [Stmt::Expr(expr)]) => {
                let value = self.expr(&mut state, expr)?;
                let out = function
                    .get_nth_param(0)
                    .ok_or_else(|| CodegenError::Other("entry without output".into()))?
                    .into_pointer_value();
                match value {
                    Value::Scalar(value) => {
                        self.builder.build_store(out, value)?;
                    }
                    Value::Memory(memory) => self.copy_aggregate(out, memory, ty)?,
                    Value::Nothing => {}
                }
            }
            _ => {
                for stmt in &def.body {
                    self.stmt(&mut state, stmt)?;
                }
            }
        }
        if self.current_block_open() {
            // Falling off the end returns zero (the checker warned about it).
            self.return_zero(&state)?;
        }
        self.builder.position_at_end(state.allocas);
        self.builder.build_unconditional_branch(entry)?;
        Ok(())
    }

    /// `(ret)` in a function with a result, or its end: the result is zero.
    fn return_zero(&self, state: &FunctionState<'ctx>) -> Result<()> {
        match (&state.ret, state.sret) {
            (Ty::Void, _) => {
                self.builder.build_return(None)?;
            }
            (ret, Some(sret)) => {
                self.zero_memory(sret, ret)?;
                self.builder.build_return(None)?;
            }
            (ret, None) => {
                let zero = self.zero(ret);
                self.builder.build_return(Some(&zero))?;
            }
        }
        Ok(())
    }

    fn current_block_open(&self) -> bool {
        self.builder.get_insert_block().is_some_and(|block| block.get_terminator().is_none())
    }

    /// After a terminator, later statements go to a fresh block nothing jumps to.
    fn continue_in_dead_block(&self, state: &FunctionState<'ctx>) {
        let dead = self.context.append_basic_block(state.function, "dead");
        self.builder.position_at_end(dead);
    }

    fn stmt(&mut self, state: &mut FunctionState<'ctx>, stmt: &Stmt) -> Result<()> {
        match stmt {
            Stmt::Expr(expr) => {
                self.expr(state, expr)?;
            }
            Stmt::Declare(index) => {
                let (slot, ty) = (state.locals[*index], state.local_types[*index].clone());
                if is_aggregate(&ty) {
                    self.zero_memory(slot, &ty)?;
                } else {
                    self.builder.build_store(slot, self.zero(&ty))?;
                }
            }
            Stmt::Block(body) => {
                for stmt in body {
                    self.stmt(state, stmt)?;
                }
            }
            Stmt::If(cond, then, otherwise) => {
                let cond = self.value(state, cond)?.into_int_value();
                let then_block = self.context.append_basic_block(state.function, "then");
                let else_block = self.context.append_basic_block(state.function, "else");
                let join = self.context.append_basic_block(state.function, "endif");
                self.builder.build_conditional_branch(cond, then_block, else_block)?;
                self.builder.position_at_end(then_block);
                self.stmt(state, then)?;
                self.branch_if_open(join)?;
                self.builder.position_at_end(else_block);
                if let Some(otherwise) = otherwise {
                    self.stmt(state, otherwise)?;
                }
                self.branch_if_open(join)?;
                self.builder.position_at_end(join);
            }
            Stmt::While(cond, body) => self.emit_loop(state, None, cond, None, body)?,
            Stmt::For(init, cond, step, body) => self.emit_loop(state, init.as_deref(), cond, step.as_deref(), body)?,
            Stmt::Ret(value) => {
                match (value, state.sret) {
                    (Some(value), Some(sret)) => {
                        let memory = self.memory(state, value)?;
                        self.copy_aggregate(sret, memory, &value.ty)?;
                        self.builder.build_return(None)?;
                    }
                    (Some(value), None) => {
                        let value = self.value(state, value)?;
                        self.builder.build_return(Some(&value))?;
                    }
                    (None, _) => self.return_zero(state)?,
                }
                self.continue_in_dead_block(state);
            }
            Stmt::Break | Stmt::Continue => {
                let (exit, next) =
                    *state.loops.last().ok_or_else(|| CodegenError::Other("break outside a loop".into()))?;
                self.builder.build_unconditional_branch(if matches!(stmt, Stmt::Break) { exit } else { next })?;
                self.continue_in_dead_block(state);
            }
            Stmt::Label(label) => {
                // A block that runs into a label falls through to it, as in Brilisp.
                let block = label_block(state, *label)?;
                self.branch_if_open(block)?;
                self.builder.position_at_end(block);
            }
            Stmt::Jump(label) => {
                let block = label_block(state, *label)?;
                self.builder.build_unconditional_branch(block)?;
                self.continue_in_dead_block(state);
            }
            Stmt::Branch(cond, then, otherwise) => {
                let cond = self.value(state, cond)?.into_int_value();
                let (then, otherwise) = (label_block(state, *then)?, label_block(state, *otherwise)?);
                self.builder.build_conditional_branch(cond, then, otherwise)?;
                self.continue_in_dead_block(state);
            }
        }
        Ok(())
    }

    fn branch_if_open(&self, target: BasicBlock<'ctx>) -> Result<()> {
        if self.current_block_open() {
            self.builder.build_unconditional_branch(target)?;
        }
        Ok(())
    }

    fn emit_loop(
        &mut self,
        state: &mut FunctionState<'ctx>,
        init: Option<&Expr>,
        cond: &Expr,
        step: Option<&Expr>,
        body: &[Stmt],
    ) -> Result<()> {
        if let Some(init) = init {
            self.expr(state, init)?;
        }
        let head = self.context.append_basic_block(state.function, "loop");
        let body_block = self.context.append_basic_block(state.function, "body");
        let step_block = self.context.append_basic_block(state.function, "step");
        let exit = self.context.append_basic_block(state.function, "endloop");
        self.builder.build_unconditional_branch(head)?;
        self.builder.position_at_end(head);
        let cond = self.value(state, cond)?.into_int_value();
        self.builder.build_conditional_branch(cond, body_block, exit)?;
        self.builder.position_at_end(body_block);
        state.loops.push((exit, step_block));
        for stmt in body {
            self.stmt(state, stmt)?;
        }
        state.loops.pop();
        self.branch_if_open(step_block)?;
        self.builder.position_at_end(step_block);
        if let Some(step) = step {
            self.expr(state, step)?;
        }
        self.builder.build_unconditional_branch(head)?;
        self.builder.position_at_end(exit);
        Ok(())
    }

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
    fn value(&mut self, state: &mut FunctionState<'ctx>, expr: &Expr) -> Result<BasicValueEnum<'ctx>> {
        match self.expr(state, expr)? {
            Value::Scalar(value) => Ok(value),
            Value::Memory(_) | Value::Nothing => Err(no_value()),
        }
    }

    /// Emits an aggregate expression: the memory holding its value (see `Value::Memory`).
    fn memory(&mut self, state: &mut FunctionState<'ctx>, expr: &Expr) -> Result<PointerValue<'ctx>> {
        match self.expr(state, expr)? {
            Value::Memory(memory) => Ok(memory),
            Value::Scalar(_) | Value::Nothing => Err(no_value()),
        }
    }

    /// Emits an aggregate expression into a temporary of its own, so that later evaluations
    /// (a `set` in the next argument) cannot change it.
    fn owned_copy(&mut self, state: &mut FunctionState<'ctx>, expr: &Expr) -> Result<PointerValue<'ctx>> {
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
    fn expr(&mut self, state: &mut FunctionState<'ctx>, expr: &Expr) -> Result<Value<'ctx>> {
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
                self.binary(state, *op, &left.ty, left_value, right_value, expr.span)?
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
                return self.read_value(pointer, &expr.ty);
            }
            ExprKind::Store(pointer, value) => {
                let pointer = self.value(state, pointer)?.into_pointer_value();
                let value = self.expr(state, value)?;
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
            ExprKind::Call { callee, name, signature, args } => return self.call(state, callee, name, signature, args),
            ExprKind::Cast(op, value) => {
                let from = value.ty.clone();
                let value = self.value(state, value)?;
                self.cast(*op, &from, &expr.ty, value)?
            }
            ExprKind::Asm { template, constraints, args } => {
                return self.asm(state, &expr.ty, template, constraints, args)
            }
            ExprKind::GpuIndex(register, dimension) => self.gpu_index(*register, *dimension)?,
            ExprKind::Barrier => {
                self.device_intrinsic("llvm.nvvm.barrier0", &[])?;
                return Ok(Value::Nothing);
            }
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
                self.fault_if(state, failed, FAULT_GPU, expr.span)?;
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
                self.fault_if(state, failed, FAULT_GPU, expr.span)?;
                length.into()
            }
            ExprKind::GpuCopy(direction, destination, source, count) => {
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
                    crate::tree::CopyDirection::HostToDevice => 0,
                    crate::tree::CopyDirection::DeviceToHost => 1,
                    crate::tree::CopyDirection::DeviceToDevice => 2,
                };
                let direction = self.context.i64_type().const_int(code, false);
                let status = self.call_gpu(
                    RT_GPU_COPY,
                    self.context.i32_type().into(),
                    &[direction.into(), destination.into(), source.into(), count.into(), self.size_of(&element).into()],
                )?;
                self.fault_unless_zero(state, status, expr.span)?;
                return Ok(Value::Nothing);
            }
            ExprKind::Launch(launch) => {
                self.launch(state, launch, expr.span)?;
                return Ok(Value::Nothing);
            }
        };
        Ok(Value::Scalar(value))
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
    fn index(&mut self, state: &mut FunctionState<'ctx>, index: &Expr) -> Result<IntValue<'ctx>> {
        let value = self.value(state, index)?.into_int_value();
        Ok(self.builder.build_int_s_extend_or_bit_cast(value, self.context.i64_type(), "")?)
    }

    fn binary(
        &mut self,
        state: &mut FunctionState<'ctx>,
        op: BinOp,
        operand_ty: &Ty,
        left: BasicValueEnum<'ctx>,
        right: BasicValueEnum<'ctx>,
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
                self.check_division(state, l, r, signed, span)?;
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

fn label_block<'ctx>(state: &FunctionState<'ctx>, label: usize) -> Result<BasicBlock<'ctx>> {
    state.labels.get(label).copied().ok_or_else(|| CodegenError::Other("a jump to an unknown label".into()))
}

/// LLVM value names for locals: readable, with characters LLVM would quote replaced.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(
            |character| {
                if character.is_ascii_alphanumeric() || character == '_' || character == '.' {
                    character
                } else {
                    '_'
                }
            },
        )
        .collect()
}

fn no_value() -> CodegenError {
    CodegenError::Other("an expression without a value where one was needed".into())
}

fn unreachable_op() -> ! {
    panic!("codegen: the checker admitted an operator this branch does not handle")
}
