//! GPU placement: which functions are device code, the rules for mixing device and host code,
//! the device builtins (`tid.x`, `syncthreads`) and the host GPU forms (`gpu-alloc`, `gpu-copy`,
//! `launch`).

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use super::context::{arity, cast_note, syntax, type_error, BodyChecker, CellChecker};
use super::env::{defined, FunctionEntry, FunctionKind};
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::{Sexp, Span};
use crate::tree::{
    first_call, launch_targets, visit_exprs, Annotation, Callee, CopyDirection, Direction, Expr, ExprKind, FunctionDef,
    GpuRegister, Launch, LaunchArg, LaunchArgKind,
};
use crate::types::{Ty, INT, INT64};

impl CellChecker<'_> {
    /// Whether the session function `name`, as this cell leaves it, is device-only.
    fn is_device_function(&self, name: &str) -> bool {
        match self.cell.functions.iter().chain(&self.cell.recompiled).find(|function| function.name == name) {
            Some(function) => function.placement.device_only,
            None => {
                matches!(self.env.functions.get(name), Some(FunctionEntry { kind: FunctionKind::Defined(def), .. }) if def.placement.device_only)
            }
        }
    }

    /// A function that calls a device-only function is device-only too: settles that over
    /// the cell's functions.
    pub(super) fn settle_placement(&mut self) {
        if !self.errors.is_empty() {
            return;
        }
        loop {
            let mut newly_device = Vec::new();
            for (index, function) in self.cell.functions.iter().chain(&self.cell.recompiled).enumerate() {
                if function.placement.device_only {
                    continue;
                }
                if let Some((span, callee)) = first_call(&function.body, &|name| self.is_device_function(name)) {
                    newly_device.push((index, span, callee));
                }
            }
            if newly_device.is_empty() {
                break;
            }
            let own = self.cell.functions.len();
            for (index, span, callee) in newly_device {
                let function =
                    if index < own { &mut self.cell.functions[index] } else { &mut self.cell.recompiled[index - own] };
                function.placement.device_only = true;
                function.placement.device_use = Some((span, format!("the device function `{callee}`")));
            }
        }
    }

    /// The GPU rules only the whole cell shows: device code mixed with host code, host code
    /// calling device code, and device code (of kernels, device functions and launched
    /// functions) that reaches something the GPU cannot run.
    pub(super) fn placement_errors(&mut self) {
        if !self.errors.is_empty() {
            return;
        }
        let mut errors = Vec::new();
        for function in self.cell.functions.iter().chain(&self.cell.recompiled) {
            let placement = &function.placement;
            let propagated =
                placement.device_use.as_ref().is_some_and(|(_, what)| what.starts_with("the device function"));
            if let (false, true, Some((device_span, device)), Some((host_span, host))) =
                (function.kernel, propagated, &placement.device_use, &placement.host_use)
            {
                errors.push(
                    Diagnostic::error(
                        Kind::Gpu,
                        format!(
                            "`{}` calls {device}, so it is device code, and device code cannot use {host}",
                            function.name
                        ),
                    )
                    .with_label(*host_span, "host code")
                    .with_secondary(*device_span, "device code")
                    .with_note("device code may call intrinsics, libdevice (`__nv_*`) and session functions"),
                );
            }
        }
        for item in &self.cell.top {
            if let Some((span, callee)) = first_call(&item.function.body, &|name| self.is_device_function(name)) {
                errors.push(
                    Diagnostic::error(Kind::Gpu, format!("`{callee}` is device code: host code cannot call it"))
                        .with_label(span, "")
                        .with_note("call it from a kernel, and launch the kernel"),
                );
            }
        }
        let roots: Vec<&FunctionDef> = self
            .cell
            .functions
            .iter()
            .chain(&self.cell.recompiled)
            .filter(|function| function.placement.device_only && !function.inline)
            .collect();
        let launches: Vec<(String, Span)> = self
            .cell
            .functions
            .iter()
            .chain(&self.cell.recompiled)
            .map(|function| &function.body)
            .chain(self.cell.top.iter().map(|item| &item.function.body))
            .flat_map(|body| launch_targets(body))
            .collect();
        if errors.is_empty() && (!roots.is_empty() || !launches.is_empty()) {
            let here: HashMap<String, Rc<FunctionDef>> = self
                .cell
                .functions
                .iter()
                .chain(&self.cell.recompiled)
                .map(|function| (function.name.clone(), Rc::new(function.clone())))
                .collect();
            let lookup = |name: &str| here.get(name).cloned().or_else(|| defined(self.env, name));
            for root in roots {
                if let Some(problem) = device_problem(root, &lookup) {
                    errors.push(
                        Diagnostic::error(Kind::Gpu, format!("`{}` is device code, but {problem}", root.name))
                            .with_label(root.span, "")
                            .with_note("device code may call intrinsics, libdevice (`__nv_*`) and session functions"),
                    );
                }
            }
            for (kernel, span) in launches {
                if let Some(problem) = lookup(&kernel).and_then(|root| device_problem(&root, &lookup)) {
                    errors.push(
                        Diagnostic::error(Kind::Gpu, format!("`{kernel}` cannot run on the GPU: {problem}"))
                            .with_label(span, "")
                            .with_note("device code may call intrinsics, libdevice (`__nv_*`) and session functions"),
                    );
                }
            }
        }
        for error in errors {
            self.error(error);
        }
    }
}

/// The session functions `root` calls, transitively, itself first: its device code.
pub(crate) fn device_members(
    root: &Rc<FunctionDef>,
    lookup: &dyn Fn(&str) -> Option<Rc<FunctionDef>>,
) -> Vec<Rc<FunctionDef>> {
    let mut members = vec![root.clone()];
    let mut seen = BTreeSet::from([root.name.clone()]);
    let mut index = 0;
    while let Some(function) = members.get(index).cloned() {
        index += 1;
        visit_exprs(&function.body, &mut |expr| {
            if let Some(Callee::Slot(name) | Callee::Inline(name)) = expr.callee() {
                if seen.insert(name.clone()) {
                    if let Some(callee) = lookup(name) {
                        members.push(callee);
                    }
                }
            }
        });
    }
    members
}

/// Why the device code of `root` cannot run on the GPU: the first member that uses what
/// device code cannot, or calls what is not a valid session function; `None` if it can.
pub(crate) fn device_problem(root: &FunctionDef, lookup: &dyn Fn(&str) -> Option<Rc<FunctionDef>>) -> Option<String> {
    let root = Rc::new(root.clone());
    let members = device_members(&root, lookup);
    for member in &members {
        let whose =
            if member.name == root.name { "it".to_string() } else { format!("`{}`, which it calls,", member.name) };
        if let Some((_, what)) = &member.placement.host_use {
            return Some(format!("{whose} uses {what}"));
        }
        if member.kernel && member.name != root.name {
            return Some(format!("it calls the kernel `{}`", member.name));
        }
        let mut missing = None;
        visit_exprs(&member.body, &mut |expr| {
            if let Some(Callee::Slot(name)) = expr.callee() {
                if missing.is_none() && lookup(name).is_none() {
                    missing = Some(name.clone());
                }
            }
        });
        if let Some(name) = missing {
            return Some(format!("{whose} calls `{name}`, which is not a valid session function"));
        }
    }
    None
}

impl BodyChecker<'_, '_> {
    /// Notes a construct that needs the GPU; in top-level code it is an error.
    pub(super) fn use_device(&mut self, span: Span, what: String) -> bool {
        if self.top_level {
            self.error(
                Diagnostic::error(Kind::Gpu, format!("{what} is device code: host code cannot use it"))
                    .with_label(span, "")
                    .with_note("use it in a kernel (define-kernel), or in a function a kernel calls"),
            );
            return false;
        }
        if self.placement.device_use.is_none() {
            self.placement.device_use = Some((span, what));
        }
        true
    }

    /// Notes a construct device code cannot have; in a kernel it is an error.
    pub(super) fn use_host(&mut self, span: Span, what: String) -> bool {
        if self.kernel {
            self.error(
                Diagnostic::error(Kind::Gpu, format!("the kernel `{}` cannot use {what}", self.name))
                    .with_label(span, "")
                    .with_note("device code may call intrinsics, libdevice (`__nv_*`) and session functions"),
            );
            return false;
        }
        if self.placement.host_use.is_none() {
            self.placement.host_use = Some((span, what));
        }
        true
    }

    /// `(tid.x)`, `[bdim.y]`, `(syncthreads)`…
    pub(super) fn check_gpu_builtin(&mut self, form: &Sexp, name: &str, operands: &[Sexp]) -> Option<Expr> {
        if !operands.is_empty() {
            self.error(arity(form.span, format!("`{name}` takes no operands")));
            return None;
        }
        if !self.use_device(form.span, format!("`({name})`")) {
            return None;
        }
        let (kind, ty) = match GpuRegister::from_builtin(name) {
            Some((register, dimension)) => (ExprKind::GpuIndex(register, dimension), INT),
            None => (ExprKind::Barrier, Ty::Void),
        };
        Some(Expr { kind, ty, span: form.span })
    }

    pub(super) fn check_gpu_alloc(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [type_form, count_form] = operands else {
            self.error(arity(form.span, "`gpu-alloc` is `(gpu-alloc TYPE COUNT)`"));
            return None;
        };
        if !self.use_host(form.span, "`gpu-alloc`".into()) {
            return None;
        }
        let element = self.ty(type_form);
        let count = self.check_expr(count_form);
        let (element, count) = (element?, count?);
        if !crate::types::is_buffer_element(&element) {
            self.error(type_error(
                type_form.span,
                format!("a device buffer holds integers or floats, not `{element}`"),
            ));
            return None;
        }
        if !self.check_index("gpu-alloc", &count) {
            return None;
        }
        let ty = Ty::GpuBuf(Rc::new(element.clone()));
        Some(Expr { kind: ExprKind::GpuAlloc(element, Box::new(count)), ty, span: form.span })
    }

    /// `(gpu-free b)`, `(gpu-len b)`.
    pub(super) fn check_gpu_buffer_op(&mut self, form: &Sexp, name: &str, operands: &[Sexp]) -> Option<Expr> {
        let buffer = self.operands(form, name, operands, 1)?.pop()?;
        if !self.use_host(form.span, format!("`{name}`")) {
            return None;
        }
        if !matches!(buffer.ty, Ty::GpuBuf(_)) {
            self.error(type_error(
                buffer.span,
                format!("`{name}` needs a device buffer `(gpu-buf T)`, found `{}`", buffer.ty),
            ));
            return None;
        }
        let (kind, ty) = if name == "gpu-free" {
            (ExprKind::GpuFree(Box::new(buffer)), Ty::Void)
        } else {
            (ExprKind::GpuLen(Box::new(buffer)), INT64)
        };
        Some(Expr { kind, ty, span: form.span })
    }

    /// `(gpu-copy DST SRC n)`: buffer ← host pointer, host pointer ← buffer, buffer ← buffer.
    pub(super) fn check_gpu_copy(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [destination, source, count] = self.copy_operands(form, "gpu-copy", operands)?;
        let direction = self.copy_direction(form, "gpu-copy", &destination, &source)?;
        if !self.check_index("gpu-copy", &count) {
            return None;
        }
        Some(Expr {
            kind: ExprKind::GpuCopy(direction, Box::new(destination), Box::new(source), Box::new(count)),
            ty: Ty::Void,
            span: form.span,
        })
    }

    /// The checked operands DST SRC n of `gpu-copy` (or of `encode-copy` after its encoder);
    /// `None` after reporting.
    pub(super) fn copy_operands(&mut self, form: &Sexp, name: &str, operands: &[Sexp]) -> Option<[Expr; 3]> {
        let values = self.operands(form, name, operands, 3)?;
        if !self.use_host(form.span, format!("`{name}`")) {
            return None;
        }
        values.try_into().ok()
    }

    /// A copy's direction from its operand types.
    pub(super) fn copy_direction(
        &mut self,
        form: &Sexp,
        name: &str,
        destination: &Expr,
        source: &Expr,
    ) -> Option<CopyDirection> {
        match (&destination.ty, &source.ty) {
            (Ty::GpuBuf(to), Ty::Ptr(from, 0)) if to == from => Some(CopyDirection::HostToDevice),
            (Ty::Ptr(to, 0), Ty::GpuBuf(from)) if to == from => Some(CopyDirection::DeviceToHost),
            (Ty::GpuBuf(to), Ty::GpuBuf(from)) if to == from => Some(CopyDirection::DeviceToDevice),
            (to, from) => {
                let shape =
                    if name == "gpu-copy" { "(gpu-copy DST SRC COUNT)" } else { "(encode-copy E DST SRC COUNT)" };
                self.error(
                    type_error(form.span, format!("`{name}` copies between a `(gpu-buf T)` and a `(ptr T)` or another `(gpu-buf T)`, found `{to}` ← `{from}`"))
                        .with_note(format!("the destination comes first: {shape}")),
                );
                None
            }
        }
    }

    /// `(grid X [Y [Z]])` or `(block …)`: three integer expressions, missing ones 1.
    fn launch_dimensions(&mut self, word: &str, form: &Sexp) -> Option<Vec<Expr>> {
        let items = form.list().filter(|items| items.first().and_then(Sexp::symbol) == Some(word));
        let Some(items) = items.filter(|items| (2..=4).contains(&items.len())) else {
            self.error(
                syntax(form.span, format!("expected `({word} X [Y [Z]])`"))
                    .with_note("a launch is (launch KERNEL (grid X [Y [Z]]) (block X [Y [Z]]) ARG…)"),
            );
            return None;
        };
        let mut dimensions = Vec::new();
        for item in &items[1..] {
            let value = self.check_expr(item)?;
            if !value.ty.is_int() {
                self.error(type_error(
                    value.span,
                    format!("a {word} dimension must be an integer, found `{}`", value.ty),
                ));
                return None;
            }
            dimensions.push(value);
        }
        while dimensions.len() < 3 {
            dimensions.push(Expr { kind: ExprKind::Int(1), ty: INT, span: form.span });
        }
        Some(dimensions)
    }

    pub(super) fn check_launch(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let launch = self.launch_parts(form, "launch", operands)?;
        Some(Expr { kind: ExprKind::Launch(Box::new(launch)), ty: Ty::Void, span: form.span })
    }

    /// `KERNEL (grid …) (block …) ARG…` of `launch`, or of `encode-call` after its encoder
    /// (`name` says which: an encoded launch moves no host memory).
    pub(super) fn launch_parts(&mut self, form: &Sexp, name: &str, operands: &[Sexp]) -> Option<Launch> {
        let encoded = name == "encode-call";
        let [kernel_form, grid_form, block_form, arg_forms @ ..] = operands else {
            let shape = if encoded { "(encode-call E KERNEL" } else { "(launch KERNEL" };
            self.error(arity(form.span, format!("a launch is `{shape} (grid X [Y [Z]]) (block X [Y [Z]]) ARG…)`")));
            return None;
        };
        let Some(kernel) = kernel_form.symbol() else {
            self.error(syntax(kernel_form.span, format!("`{name}` takes a kernel's name")));
            return None;
        };
        if !self.use_host(form.span, format!("`{name}`")) {
            return None;
        }
        let grid = self.launch_dimensions("grid", grid_form);
        let block = self.launch_dimensions("block", block_form);
        let (grid, block) = (grid?, block?);
        let entry = match self.cell.lookup_function(kernel).cloned() {
            Some(entry) => entry,
            None => {
                self.error(
                    Diagnostic::error(Kind::UnknownName, format!("no kernel named `{kernel}`"))
                        .with_label(kernel_form.span, "")
                        .with_note("define one with (define-kernel ((NAME void) (PARAM TYPE)…) BODY…)"),
                );
                return None;
            }
        };
        let FunctionKind::Defined(def) = &entry.kind else {
            self.error(type_error(kernel_form.span, format!("`{kernel}` is declared without a body: only kernels and void functions of the session can be launched")));
            return None;
        };
        if let Some(cause) = &entry.invalidated {
            self.error(type_error(
                kernel_form.span,
                format!("`{kernel}` was invalidated by the redefinition of {cause}; redefine `{kernel}`"),
            ));
            return None;
        }
        let signature = entry.signature.clone();
        if signature.ret != Ty::Void {
            self.error(type_error(
                kernel_form.span,
                format!("only kernels and void functions can be launched, but `{kernel}` returns `{}`", signature.ret),
            ));
            return None;
        }
        if arg_forms.len() != signature.params.len() {
            let count = signature.params.len();
            self.error(
                arity(
                    form.span,
                    format!(
                        "`{kernel}` takes {count} argument{}, found {}",
                        if count == 1 { "" } else { "s" },
                        arg_forms.len()
                    ),
                )
                .with_note(format!("{kernel} : {signature}")),
            );
            return None;
        }
        self.uses.insert(format!("fn:{kernel}"));
        let annotations = def.annotations.clone();
        let mut args = Vec::new();
        let mut sizes = Vec::new();
        let mut ok = true;
        for (index, (arg_form, param)) in arg_forms.iter().zip(&signature.params).enumerate() {
            let param_name = entry.param_names.get(index).cloned().unwrap_or_default();
            let annotation = annotations.get(index).cloned().flatten();
            if encoded && arg_form.head().and_then(Direction::from_word).is_some() {
                self.error(no_lapis_copies(arg_form.span));
                ok = false;
                continue;
            }
            match self.launch_arg(kernel, index, &param_name, param, annotation.as_ref(), arg_form) {
                Some((arg, _)) if encoded && arg.kind == LaunchArgKind::Host => {
                    self.error(no_lapis_copies(arg_form.span).with_note(format!(
                        "`{param_name}` is annotated, so a launch would copy this host pointer; an encoded launch takes a (gpu-buf T)"
                    )));
                    ok = false;
                }
                Some((arg, size)) => {
                    args.push(arg);
                    sizes.push(size);
                }
                None => ok = false,
            }
        }
        if !ok {
            return None;
        }
        // Annotation sizes read the arguments through hidden locals named like the parameters.
        let mut arg_locals = vec![None; args.len()];
        if sizes.iter().any(Option::is_some) {
            let counts = self.with_scope(|this| {
                for (index, (param, arg)) in signature.params.iter().zip(&args).enumerate() {
                    if param.is_int() && arg.kind == LaunchArgKind::Scalar {
                        arg_locals[index] =
                            this.declare_local(&entry.param_names[index], param.clone(), arg.value.span);
                    }
                }
                sizes.iter().map(|size| size.as_ref().map(|size| this.check_expr(size))).collect::<Vec<_>>()
            });
            for (arg, count) in args.iter_mut().zip(counts) {
                match count {
                    Some(Some(count)) if count.ty.is_int() => arg.count = Some(count),
                    Some(Some(count)) => {
                        self.error(type_error(
                            count.span,
                            format!("an annotated size must be an integer, found `{}`", count.ty),
                        ));
                        return None;
                    }
                    Some(None) => return None,
                    None => {}
                }
            }
        }
        Some(Launch { kernel: kernel.to_string(), grid, block, args, arg_locals })
    }

    /// One launch argument against its parameter; with the annotated SIZE still to check.
    fn launch_arg(
        &mut self,
        kernel: &str,
        index: usize,
        param_name: &str,
        param: &Ty,
        annotation: Option<&Annotation>,
        form: &Sexp,
    ) -> Option<(LaunchArg, Option<Sexp>)> {
        let what = format!("argument {} of `{kernel}` (`{param_name}`)", index + 1);
        let structs = self.cell.struct_layouts();
        let size_of = |ty: &Ty| crate::value::size_align(ty, &structs).0 as u64;
        let Ty::Ptr(element, _) = param else {
            if !param.is_scalar() {
                self.error(
                    type_error(
                        form.span,
                        format!("`{kernel}` cannot be launched: its parameter `{param_name}` is `{param}`"),
                    )
                    .with_note("kernels take scalars and pointers"),
                );
                return None;
            }
            let value = self.check_expr(form)?;
            if value.ty != *param {
                self.error(
                    type_error(value.span, format!("{what} must be `{param}`, found `{}`", value.ty))
                        .with_note(cast_note(&value.ty, param)),
                );
                return None;
            }
            return Some((
                LaunchArg {
                    kind: LaunchArgKind::Scalar,
                    value,
                    count: None,
                    direction: None,
                    element_size: size_of(param),
                },
                None,
            ));
        };
        let element_size = size_of(element);
        // `(in PTR N)`, `(out PTR N)`, `(inout PTR N)`: host memory moved for this launch.
        if let Some(direction) = form.head().and_then(Direction::from_word) {
            let [_, pointer_form, count_form] = form.list().unwrap_or(&[]) else {
                self.error(arity(
                    form.span,
                    format!("`{}` is `({} HOST-POINTER COUNT)`", direction.word(), direction.word()),
                ));
                return None;
            };
            let pointer = self.check_expr(pointer_form);
            let count = self.check_expr(count_form);
            let (pointer, count) = (pointer?, count?);
            if pointer.ty != Ty::ptr((**element).clone()) {
                self.error(type_error(
                    pointer.span,
                    format!(
                        "{what} is `{param}`, so `{}` needs a host `(ptr {element})`, found `{}`",
                        direction.word(),
                        pointer.ty
                    ),
                ));
                return None;
            }
            if !self.check_index(direction.word(), &count) {
                return None;
            }
            return Some((
                LaunchArg {
                    kind: LaunchArgKind::Host,
                    value: pointer,
                    count: Some(count),
                    direction: Some(direction),
                    element_size,
                },
                None,
            ));
        }
        let value = self.check_expr(form)?;
        let (direction, size) = match annotation {
            Some(Annotation::Sized(direction, size)) => (Some(*direction), Some(size.clone())),
            _ => (None, None),
        };
        let kind = match (&value.ty, annotation) {
            (ty, Some(Annotation::Handle)) if ty == param => LaunchArgKind::Scalar,
            (Ty::GpuBuf(held), _) if held == element => LaunchArgKind::Buffer,
            (Ty::Ptr(pointee, 1), _) if pointee == element => LaunchArgKind::DevicePointer,
            (Ty::Ptr(pointee, 0), Some(Annotation::Sized(..))) if pointee == element => LaunchArgKind::Host,
            (Ty::Ptr(pointee, 0), None) if pointee == element => {
                self.error(type_error(value.span, format!("{what} is a host pointer, but `{param_name}` has no size to copy")).with_note(format!("pass (in PTR N), (out PTR N) or (inout PTR N), a (gpu-buf {element}), or annotate the parameter: ({param_name} {param} in N)")));
                return None;
            }
            (found, _) => {
                self.error(type_error(value.span, format!("{what} must be a `(gpu-buf {element})`, a `(ptr {element} (addrspace 1))` or `(in|out|inout PTR N)`, found `{found}`")));
                return None;
            }
        };
        let element_size = if kind == LaunchArgKind::Scalar { size_of(param) } else { element_size };
        let size = size.filter(|_| matches!(kind, LaunchArgKind::Buffer | LaunchArgKind::Host));
        Some((
            LaunchArg {
                kind,
                value,
                count: None,
                direction: direction.filter(|_| kind != LaunchArgKind::Scalar),
                element_size,
            },
            size,
        ))
    }
}

/// A Lapis copy (or a host pointer to an annotated parameter) in `encode-call`.
fn no_lapis_copies(span: Span) -> Diagnostic {
    type_error(span, "no Lapis copies in `encode-call`: move data with `encode-copy`")
        .with_note("pass a (gpu-buf T) or a device pointer, and encode the copies before and after the call")
}
