//! Codegen for function bodies: frames and parameters, statements, loops, Brilisp labels and
//! jumps, and returns.

use std::collections::HashSet;

use inkwell::basic_block::BasicBlock;
use inkwell::values::{FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

use super::lowering::{is_aggregate, remove_unreachable_blocks, CodegenError, FunctionState, Lowering, Result, Value};
use super::versioning::{self, Bound, Check, NestPlan};
use crate::abi::RT_ITEM_DONE;
use crate::tree::{address_taken, Expr, FunctionDef, Stmt, TopItem};
use crate::types::Ty;

impl<'ctx> Lowering<'ctx, '_> {
    pub(super) fn emit_function(
        &mut self,
        def: &FunctionDef,
        function: FunctionValue<'ctx>,
        result: Option<&Ty>,
    ) -> Result<()> {
        if self.device.is_none() {
            self.host_function_attributes(function);
        }
        let allocas = self.context.append_basic_block(function, "frame");
        let entry = self.context.append_basic_block(function, "entry");
        let sret = match is_aggregate(&def.signature.ret) {
            true => Some(
                function
                    .get_nth_param(0)
                    .ok_or_else(|| CodegenError::Other("missing result parameter".into()))?
                    .into_pointer_value(),
            ),
            false => None,
        };
        let mut state = self.function_state(def, function, allocas, entry, sret)?;
        let out = match result {
            Some(_) => Some(
                function
                    .get_nth_param(0)
                    .ok_or_else(|| CodegenError::Other("entry without output".into()))?
                    .into_pointer_value(),
            ),
            None => None,
        };
        self.emit_body(&mut state, def, result.zip(out))?;
        if self.current_block_open() {
            // Falling off the end returns zero (the checker warned about it).
            self.return_zero(&state)?;
        }
        self.builder.position_at_end(state.allocas);
        self.builder.build_unconditional_branch(entry)?;
        remove_unreachable_blocks(function);
        Ok(())
    }

    /// Adds a top-level item to a chunk of batched top-level code, an entry `void (ptr out)`
    /// that runs its items in order: the item stores its value at `out` and then tells the
    /// runtime (`RT_ITEM_DONE`) where its value is. Each item keeps its own variables, as if it
    /// were its own function. `finish_top_level_chunk` ends the chunk.
    pub(super) fn extend_top_level_chunk(&mut self, item: &TopItem, function: FunctionValue<'ctx>) -> Result<()> {
        let allocas = match function.get_first_basic_block() {
            Some(allocas) => allocas,
            None => {
                self.host_function_attributes(function);
                let allocas = self.context.append_basic_block(function, "frame");
                let entry = self.context.append_basic_block(function, "entry");
                self.builder.position_at_end(entry);
                allocas
            }
        };
        let here = self.builder.get_insert_block().ok_or_else(|| CodegenError::Other("no insertion block".into()))?;
        let out = function
            .get_nth_param(0)
            .ok_or_else(|| CodegenError::Other("entry without output".into()))?
            .into_pointer_value();
        let mut state = self.function_state(&item.function, function, allocas, here, None)?;
        self.emit_body(&mut state, &item.function, item.value.as_ref().map(|ty| (ty, out)))?;
        if !self.current_block_open() {
            // The item never ends (it calls something that does not return): the items after
            // it are never reached.
            self.continue_in_dead_block(&state);
        }
        let pointer = self.context.ptr_type(AddressSpace::default());
        let i64_type = self.context.i64_type();
        let item_done = self.runtime_function(
            RT_ITEM_DONE,
            self.context.void_type().fn_type(&[pointer.into(), i64_type.into()], false),
        );
        let size = item.value.as_ref().map_or_else(|| i64_type.const_zero(), |ty| self.size_of(ty));
        self.builder.build_call(item_done, &[out.into(), size.into()], "")?;
        Ok(())
    }

    /// Ends a chunk of batched top-level code: it returns after its last item.
    pub(super) fn finish_top_level_chunk(&mut self, function: FunctionValue<'ctx>) -> Result<()> {
        self.builder.build_return(None)?;
        let allocas = function.get_first_basic_block().ok_or_else(|| CodegenError::Other("an empty chunk".into()))?;
        let entry = allocas.get_next_basic_block().ok_or_else(|| CodegenError::Other("a chunk without code".into()))?;
        self.builder.position_at_end(allocas);
        self.builder.build_unconditional_branch(entry)?;
        remove_unreachable_blocks(function);
        Ok(())
    }

    /// The bytes of the variables in a function's first block so far: a chunk of top-level
    /// items is cut before its frame grows past what one item's own frame would be by much.
    pub(super) fn frame_bytes(&self, function: FunctionValue<'ctx>) -> u64 {
        let Some(frame) = function.get_first_basic_block() else { return 0 };
        frame
            .get_instructions()
            .filter_map(|instruction| instruction.get_allocated_type().ok())
            .map(|ty| self.target_data.get_abi_size(&ty))
            .sum()
    }

    /// A function's state with its variables made: allocas in `allocas`, parameters stored into
    /// them; the builder is left at the end of `body`.
    fn function_state(
        &mut self,
        def: &FunctionDef,
        function: FunctionValue<'ctx>,
        allocas: BasicBlock<'ctx>,
        body: BasicBlock<'ctx>,
        sret: Option<PointerValue<'ctx>>,
    ) -> Result<FunctionState<'ctx>> {
        match allocas.get_terminator() {
            Some(terminator) => self.builder.position_before(&terminator),
            None => self.builder.position_at_end(allocas),
        }
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
            address_taken: address_taken(&def.body),
            // Brilisp labels are blocks made once, which a second copy of a nest cannot reuse.
            versioning: self.device.is_none() && def.labels.is_empty(),
            no_wrap: HashSet::new(),
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
        self.builder.position_at_end(body);
        // Brilisp labels get their blocks up front, so jumps may go forward.
        state.labels =
            def.labels.iter().map(|label| self.context.append_basic_block(function, &sanitize(label))).collect();
        Ok(state)
    }

    /// A body's statements; for a top-level item with a value, the value is stored at `out`.
    fn emit_body(
        &mut self,
        state: &mut FunctionState<'ctx>,
        def: &FunctionDef,
        out: Option<(&Ty, PointerValue<'ctx>)>,
    ) -> Result<()> {
        match (out, def.body.as_slice()) {
            (Some((ty, out)), [Stmt::Expr(expr)]) => match self.expr(state, expr)? {
                Value::Scalar(value) => {
                    self.builder.build_store(out, value)?;
                }
                Value::Memory(memory) => self.copy_aggregate(out, memory, ty)?,
                Value::Nothing => {}
            },
            _ => {
                for stmt in &def.body {
                    self.stmt(state, stmt)?;
                }
            }
        }
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
            Stmt::For(init, cond, step, body) => {
                let plan = if state.versioning { versioning::plan_nest(stmt, &state.address_taken) } else { None };
                match plan {
                    Some(plan) => {
                        self.emit_versioned_loop(state, &plan, init.as_deref(), cond, step.as_deref(), body)?
                    }
                    None => self.emit_loop(state, init.as_deref(), cond, step.as_deref(), body)?,
                }
            }
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
        self.emit_loop_after_init(state, cond, step, body)
    }

    /// A `for` nest in two copies (see `versioning`): after INIT, a guard checks that none of
    /// the plan's operations can overflow and picks the copy where they carry `nsw`, else the
    /// plain one. A guard that folds to a constant leaves one copy.
    fn emit_versioned_loop(
        &mut self,
        state: &mut FunctionState<'ctx>,
        plan: &NestPlan,
        init: Option<&Expr>,
        cond: &Expr,
        step: Option<&Expr>,
        body: &[Stmt],
    ) -> Result<()> {
        if let Some(init) = init {
            self.expr(state, init)?;
        }
        let guard = self.emit_guard(state, plan)?;
        state.versioning = false;
        let result = match guard.get_zero_extended_constant() {
            Some(holds) => self.emit_loop_copy(state, plan, holds != 0, cond, step, body),
            None => {
                let checked = self.context.append_basic_block(state.function, "nowrap");
                let plain = self.context.append_basic_block(state.function, "wrap");
                let join = self.context.append_basic_block(state.function, "endnest");
                self.builder.build_conditional_branch(guard, checked, plain)?;
                self.builder.position_at_end(checked);
                self.emit_loop_copy(state, plan, true, cond, step, body)?;
                self.branch_if_open(join)?;
                self.builder.position_at_end(plain);
                self.emit_loop_copy(state, plan, false, cond, step, body)?;
                self.branch_if_open(join)?;
                self.builder.position_at_end(join);
                Ok(())
            }
        };
        state.versioning = true;
        result
    }

    /// One copy of a versioned nest: with the plan's operations `nsw` or without.
    fn emit_loop_copy(
        &mut self,
        state: &mut FunctionState<'ctx>,
        plan: &NestPlan,
        no_wrap: bool,
        cond: &Expr,
        step: Option<&Expr>,
        body: &[Stmt],
    ) -> Result<()> {
        if no_wrap {
            state.no_wrap.clone_from(&plan.no_wrap);
        }
        let result = self.emit_loop_after_init(state, cond, step, body);
        state.no_wrap.clear();
        result
    }

    /// The guard of a versioned nest: every interval of the plan, in 64 bits (wrapping: a value
    /// that wraps there comes from an operand outside `int`, whose own check fails), and whether
    /// every check holds.
    fn emit_guard(&mut self, state: &FunctionState<'ctx>, plan: &NestPlan) -> Result<IntValue<'ctx>> {
        let i64_type = self.context.i64_type();
        let b = &self.builder;
        let smaller = |left: IntValue<'ctx>, right: IntValue<'ctx>| -> Result<IntValue<'ctx>> {
            let less = b.build_int_compare(IntPredicate::SLT, left, right, "")?;
            Ok(b.build_select(less, left, right, "")?.into_int_value())
        };
        let larger = |left: IntValue<'ctx>, right: IntValue<'ctx>| -> Result<IntValue<'ctx>> {
            let more = b.build_int_compare(IntPredicate::SGT, left, right, "")?;
            Ok(b.build_select(more, left, right, "")?.into_int_value())
        };
        let mut intervals: Vec<(IntValue<'ctx>, IntValue<'ctx>)> = Vec::with_capacity(plan.bounds.len());
        for bound in &plan.bounds {
            let interval = match bound {
                Bound::Constant(value) => {
                    let value = i64_type.const_int(*value as u64, true);
                    (value, value)
                }
                Bound::Entry(local) => {
                    let value = b.build_load(self.context.i32_type(), state.locals[*local], "")?.into_int_value();
                    let value = b.build_int_s_extend(value, i64_type, "")?;
                    (value, value)
                }
                Bound::Add(left, right) => {
                    let ((left_low, left_high), (right_low, right_high)) = (intervals[*left], intervals[*right]);
                    (b.build_int_add(left_low, right_low, "")?, b.build_int_add(left_high, right_high, "")?)
                }
                Bound::Sub(left, right) => {
                    let ((left_low, left_high), (right_low, right_high)) = (intervals[*left], intervals[*right]);
                    (b.build_int_sub(left_low, right_high, "")?, b.build_int_sub(left_high, right_low, "")?)
                }
                Bound::Mul(left, right) => {
                    let ((left_low, left_high), (right_low, right_high)) = (intervals[*left], intervals[*right]);
                    let products = [
                        b.build_int_mul(left_low, right_low, "")?,
                        b.build_int_mul(left_low, right_high, "")?,
                        b.build_int_mul(left_high, right_low, "")?,
                        b.build_int_mul(left_high, right_high, "")?,
                    ];
                    let low = smaller(smaller(products[0], products[1])?, smaller(products[2], products[3])?)?;
                    let high = larger(larger(products[0], products[1])?, larger(products[2], products[3])?)?;
                    (low, high)
                }
                Bound::Induction { start, limit, strict } => {
                    let high = intervals[*limit].1;
                    let high = match strict {
                        true => b.build_int_sub(high, i64_type.const_int(1, false), "")?,
                        false => high,
                    };
                    (intervals[*start].0, high)
                }
                Bound::Union(parts) => {
                    let (mut low, mut high) = intervals[parts[0]];
                    for part in &parts[1..] {
                        low = smaller(low, intervals[*part].0)?;
                        high = larger(high, intervals[*part].1)?;
                    }
                    (low, high)
                }
            };
            intervals.push(interval);
        }
        let int_min = i64_type.const_int(i64::from(i32::MIN) as u64, true);
        let int_max = i64_type.const_int(i32::MAX as u64, true);
        let mut holds = self.context.bool_type().const_int(1, false);
        for check in &plan.checks {
            let fine = match *check {
                Check::Fits(bound) => {
                    let (low, high) = intervals[bound];
                    let above = b.build_int_compare(IntPredicate::SGE, low, int_min, "")?;
                    let below = b.build_int_compare(IntPredicate::SLE, high, int_max, "")?;
                    b.build_and(above, below, "")?
                }
                Check::NotNegative(bound) => {
                    b.build_int_compare(IntPredicate::SGE, intervals[bound].0, i64_type.const_zero(), "")?
                }
            };
            holds = b.build_and(holds, fine, "")?;
        }
        Ok(holds)
    }

    /// A loop once its INIT has run.
    fn emit_loop_after_init(
        &mut self,
        state: &mut FunctionState<'ctx>,
        cond: &Expr,
        step: Option<&Expr>,
        body: &[Stmt],
    ) -> Result<()> {
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
