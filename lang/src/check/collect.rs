//! The first pass over a cell: structs, globals and function prototypes, so that order inside a
//! cell is free and bodies may use anything the cell declares.

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use super::call::intrinsic_error;
use super::context::{
    define_attributes, global_memory_pointer, literal_of, parse_prototype, syntax, type_error, Attributes, CellChecker,
    Prototype, TopForm, MAX_LOCAL_BYTES, MAX_SHARED_BYTES, MAX_VALUE_BYTES,
};
use super::env::{FunctionEntry, FunctionKind};
use crate::diagnostics::{Diagnostic, Kind};
use crate::intrinsics::{intrinsic_name, is_libdevice};
use crate::reader::{Sexp, SexpKind, Span};
use crate::tree::{
    Annotation, Constant, DefinitionSource, Dialect, Direction, ExprKind, ExternDef, FunctionDef, GlobalDef,
    GlobalEntry, Placement, Resolution, StructDef,
};
use crate::types::{parse_addrspace, Signature, StructEntry, Ty};

impl CellChecker<'_> {
    /// First pass: structs, globals and prototypes, so order inside a cell is free.
    pub(super) fn collect_declarations(&mut self, forms: &[TopForm<'_>]) {
        // Struct names first, so fields and prototypes may name any struct of the cell.
        for &TopForm { form, .. } in forms {
            if form.head() == Some("define-struct") {
                let items = form.list().unwrap_or(&[]);
                match items.get(1).and_then(Sexp::symbol) {
                    Some(name) if self.overlay.structs.contains_key(name) => {
                        let error = Diagnostic::error(
                            Kind::DuplicateName,
                            format!("struct `{name}` is defined twice in this cell"),
                        )
                        .with_label(items[1].span, "");
                        self.error(error);
                    }
                    Some(name) => {
                        // Until its fields are read, a struct with fields is not opaque.
                        let fields = if items.len() == 2 { None } else { Some(Vec::new()) };
                        self.overlay.structs.insert(name.to_string(), StructEntry { fields });
                    }
                    None => {
                        self.error(syntax(form.span, "a struct definition is `(define-struct NAME (FIELD TYPE)…)`"))
                    }
                }
            }
        }
        for &TopForm { form, dialect } in forms {
            if form.head() == Some("define-struct") {
                self.collect_struct(form, dialect);
            }
        }
        self.reject_struct_cycles();
        for &TopForm { form, dialect } in forms {
            match form.head() {
                Some("define-global") => self.collect_global(form, dialect),
                Some("define-string") if dialect == Dialect::BrilispProgram => self.collect_string(form),
                Some("define-shared") => self.collect_shared(form),
                Some("declare") => self.collect_top_declare(form, false),
                Some("declare-global") => self.collect_top_declare(form, true),
                _ => {}
            }
        }
        // Definitions before declarations: a forward declaration of a function the cell defines
        // (before or after it) is checked against the definition, not taken as an extern.
        let functions: Vec<TopForm<'_>> = forms
            .iter()
            .copied()
            .filter(|top| top.form.head().is_some_and(|head| define_attributes(head).is_some()))
            .collect();
        let (definitions, declarations): (Vec<TopForm<'_>>, Vec<TopForm<'_>>) =
            functions.into_iter().partition(|top| top.form.list().is_some_and(|items| items.len() > 2));
        let mut declared: HashMap<String, (Signature, Span)> = HashMap::new();
        for TopForm { form, dialect } in definitions.into_iter().chain(declarations) {
            self.collect_function(form, dialect, &mut declared);
        }
    }

    /// `(define-struct NAME (FIELD TYPE)…)`; in a Brilisp program `(define-struct NAME (TYPE…))`,
    /// whose fields are named by their positions.
    fn collect_struct(&mut self, form: &Sexp, dialect: Dialect) {
        let items = form.list().unwrap_or(&[]);
        let Some(name) = items.get(1).and_then(Sexp::symbol) else { return };
        let declared = self.struct_fields(&items[2..], dialect);
        let mut ok = declared.is_some();
        let mut fields = Vec::new();
        for (name_span, field_name, field_type) in declared.unwrap_or_default() {
            if fields.iter().any(|(existing, _)| *existing == field_name) {
                self.error(
                    Diagnostic::error(
                        Kind::DuplicateName,
                        format!("field `{field_name}` appears twice in struct `{name}`"),
                    )
                    .with_label(name_span, ""),
                );
                ok = false;
            }
            match self.parse_ty(field_type) {
                Some(ty) if ty == Ty::Struct(name.into()) => {
                    self.error(
                        type_error(field_type.span, format!("struct `{name}` cannot contain itself by value"))
                            .with_note("use a pointer: (ptr (struct NAME))"),
                    );
                    ok = false;
                }
                Some(Ty::Void) => {
                    self.error(type_error(field_type.span, "a field cannot be `void`"));
                    ok = false;
                }
                Some(ty) if !self.require_sized(&ty, field_type.span, "a field") => ok = false,
                Some(ty) => fields.push((field_name, ty)),
                None => ok = false,
            }
        }
        let fields = if items.len() == 2 { None } else { Some(fields) };
        if ok {
            self.overlay.structs.insert(name.to_string(), StructEntry { fields: fields.clone() });
            self.cell.structs.push(StructDef { name: name.to_string(), fields, span: form.span });
        }
    }

    /// The fields a struct definition declares after its name: (the span naming the field, its
    /// name, its type form). The well-formed ones are checked on, so `None` comes after every
    /// malformed field was reported.
    fn struct_fields<'f>(&mut self, after_name: &'f [Sexp], dialect: Dialect) -> Option<Vec<(Span, String, &'f Sexp)>> {
        if dialect == Dialect::BrilispProgram {
            let types = match after_name {
                [] => return Some(Vec::new()),
                [types] if types.list().is_some() => types.list().unwrap_or_default(),
                [first, ..] => {
                    self.error(
                        syntax(first.span, "a Brilisp struct is `(define-struct NAME (TYPE…))`")
                            .with_note("its fields have no names: `ptradd` and `extractvalue` select them by position"),
                    );
                    return None;
                }
            };
            return Some(types.iter().enumerate().map(|(position, ty)| (ty.span, position.to_string(), ty)).collect());
        }
        let mut fields = Vec::new();
        let mut ok = true;
        for field in after_name {
            match field.list() {
                Some([field_name, field_type]) if field_name.symbol().is_some() => {
                    fields.push((field_name.span, field_name.symbol().unwrap_or_default().to_string(), field_type))
                }
                _ => {
                    self.error(syntax(field.span, "a struct field is `(NAME TYPE)`"));
                    ok = false;
                }
            }
        }
        // The well-formed fields are still checked, to report their errors too.
        if !ok {
            for (_, _, field_type) in &fields {
                self.parse_ty(field_type);
            }
            return None;
        }
        Some(fields)
    }

    /// A struct that contains itself by value, through other structs or arrays, has no size.
    fn reject_struct_cycles(&mut self) {
        let mut cyclic = Vec::new();
        for structure in &self.cell.structs {
            let fields = structure.fields.clone().unwrap_or_default();
            let mut visited = BTreeSet::new();
            if fields.iter().any(|(_, field)| self.contains_by_value(field, &structure.name, &mut visited)) {
                cyclic.push((structure.name.clone(), structure.span));
            }
        }
        for (name, span) in cyclic {
            self.error(
                type_error(span, format!("struct `{name}` contains itself by value, through its fields"))
                    .with_note("use a pointer: (ptr (struct NAME))"),
            );
            self.cell.structs.retain(|structure| structure.name != name);
        }
    }

    fn contains_by_value(&self, ty: &Ty, target: &str, visited: &mut BTreeSet<String>) -> bool {
        match ty {
            Ty::Arr(_, element) => self.contains_by_value(element, target, visited),
            Ty::Struct(name) if &**name == target => true,
            Ty::Struct(name) => {
                if !visited.insert(name.to_string()) {
                    return false;
                }
                let fields = self.lookup_struct(name).and_then(|entry| entry.fields.clone()).unwrap_or_default();
                fields.iter().any(|(_, field)| self.contains_by_value(field, target, visited))
            }
            _ => false,
        }
    }

    /// Reports a value too large for where it lives (`what`), against `limit` bytes.
    pub(super) fn require_size(&mut self, ty: &Ty, span: Span, what: &str, limit: u64) -> bool {
        let (size, _) =
            crate::value::layout(ty, &|name| self.lookup_struct(name).and_then(|entry| entry.fields.clone()));
        if size > limit {
            let note = if limit == MAX_LOCAL_BYTES {
                "locals live on the 64 MiB stack: use a global, or memory from malloc"
            } else {
                "use memory from malloc, and pointers"
            };
            // Layout sizes saturate: a size of u64::MAX stands for one past what 64 bits hold.
            let message = if size == u64::MAX {
                format!("{what} of type `{ty}` takes more than 2^64 bytes (the limit is {limit})")
            } else {
                format!("{what} of type `{ty}` takes {size} bytes, more than the {limit} allowed")
            };
            self.error(Diagnostic::error(Kind::Limit, message).with_label(span, "").with_note(note));
            return false;
        }
        true
    }

    /// Reports a by-value use of an opaque struct (directly or as array elements): such a value
    /// has no size. `what` names the use.
    pub(super) fn require_sized(&mut self, ty: &Ty, span: Span, what: &str) -> bool {
        let mut inner = ty;
        while let Ty::Arr(_, element) = inner {
            inner = element;
        }
        if let Ty::Struct(name) = inner {
            if self.lookup_struct(name).is_some_and(|entry| entry.fields.is_none()) {
                self.error(
                    type_error(span, format!("{what} cannot be `{ty}`: struct `{name}` is opaque"))
                        .with_note("an opaque struct is used through pointers only"),
                );
                return false;
            }
        }
        true
    }

    fn define_global_name(&mut self, name: &str, span: Span) -> bool {
        if self.overlay.globals.contains_key(name) {
            self.error(
                Diagnostic::error(Kind::DuplicateName, format!("global `{name}` is defined twice in this cell"))
                    .with_label(span, ""),
            );
            return false;
        }
        true
    }

    fn collect_global(&mut self, form: &Sexp, dialect: Dialect) {
        let items = form.list().unwrap_or(&[]);
        let shape = "a global is `(define-global (NAME TYPE) [INIT])`";
        let (Some(Some([name, ty])), 2..=3) = (items.get(1).map(Sexp::list), items.len()) else {
            self.error(syntax(form.span, shape));
            return;
        };
        let Some(name_text) = name.symbol() else {
            self.error(syntax(name.span, shape));
            return;
        };
        if !self.define_global_name(name_text, name.span) {
            return;
        }
        let Some(mut ty) = self.parse_ty(ty) else { return };
        if !ty.is_value() {
            self.error(type_error(items[1].span, "a global cannot be `void`"));
            return;
        }
        if !self.require_sized(&ty, items[1].span, "a global")
            || !self.require_size(&ty, items[1].span, "a global", MAX_VALUE_BYTES)
        {
            return;
        }
        let init = match items.get(2) {
            None => Some(Constant::Zero),
            Some(init) => self.global_initializer(init, &mut ty, dialect),
        };
        let Some(init) = init else { return };
        // `(addrspace N)` places the global on the GPU; on the CPU it is plain memory.
        let space = items
            .get(2)
            .filter(|init| init.head() == Some("addrspace"))
            .and_then(|init| parse_addrspace(init).ok())
            .unwrap_or(0);
        self.add_global(GlobalDef { name: name_text.to_string(), ty, init: Some(init), span: form.span, space });
    }

    fn add_global(&mut self, global: GlobalDef) {
        let entry = GlobalEntry::from_def(&global, self.env.globals.get(&global.name));
        self.overlay.globals.insert(global.name.clone(), entry);
        self.cell.globals.push(global);
    }

    /// `(define-shared NAME (N T))`: `(define-global (NAME (arr N T)) (addrspace 3))`.
    fn collect_shared(&mut self, form: &Sexp) {
        let items = form.list().unwrap_or(&[]);
        let (Some(name), Some(Some([length, element])), 3) =
            (items.get(1).and_then(Sexp::symbol), items.get(2).map(Sexp::list), items.len())
        else {
            self.error(
                syntax(form.span, "shared memory is `(define-shared NAME (LENGTH TYPE))`")
                    .with_note("for example (define-shared tile (256 float))"),
            );
            return;
        };
        if !self.define_global_name(name, items[1].span) {
            return;
        }
        let array = Sexp {
            kind: SexpKind::List(vec![
                Sexp { kind: SexpKind::Symbol("arr".into()), span: items[2].span },
                length.clone(),
                element.clone(),
            ]),
            span: items[2].span,
        };
        let Some(ty) = self.parse_ty(&array) else { return };
        if !self.require_sized(&ty, items[2].span, "shared memory")
            || !self.require_size(&ty, items[2].span, "shared memory", MAX_SHARED_BYTES)
        {
            return;
        }
        self.add_global(GlobalDef {
            name: name.to_string(),
            ty,
            init: Some(Constant::Zero),
            span: form.span,
            space: 3,
        });
    }

    fn global_initializer(&mut self, init: &Sexp, ty: &mut Ty, dialect: Dialect) -> Option<Constant> {
        let items = init.list().unwrap_or(&[]);
        match (items.first().and_then(Sexp::symbol), items.len()) {
            (Some("const"), 2) => match self.constant(&items[1], ty, dialect) {
                Ok(constant) => Some(constant),
                Err(diagnostic) => {
                    self.error(diagnostic);
                    None
                }
            },
            (Some("ptr-to"), 2) => {
                let Some(target) = items[1].symbol() else {
                    self.error(syntax(items[1].span, "`ptr-to` takes a global's name"));
                    return None;
                };
                let Some(global) = self.lookup_global(target) else {
                    self.error(
                        Diagnostic::error(Kind::UnknownName, format!("no global named `{target}`"))
                            .with_label(items[1].span, ""),
                    );
                    return None;
                };
                let expected = Ty::ptr(global.ty.clone());
                if !matches!(ty, Ty::Ptr(..)) || ty.pointee() != expected.pointee() {
                    self.error(type_error(
                        init.span,
                        format!("`(ptr-to {target})` has type `{expected}`, but the global is `{ty}`"),
                    ));
                    return None;
                }
                Some(Constant::AddressOf(target.to_string()))
            }
            (Some("addrspace"), 2) => match parse_addrspace(init) {
                // Address spaces are ignored on the CPU; the value is zero.
                Ok(_) => Some(Constant::Zero),
                Err(diagnostic) => {
                    self.error(diagnostic);
                    None
                }
            },
            _ => {
                self.error(syntax(
                    init.span,
                    "an initializer is `(const LITERAL)`, `(const (LITERAL…))`, `(ptr-to GLOBAL)` or `(addrspace N)`",
                ));
                None
            }
        }
    }

    /// A literal (or nested list of literals) converted to `ty` as a typed literal, or by
    /// Brilisp's `const` rule in a Brilisp program.
    fn constant(&self, literal: &Sexp, ty: &Ty, dialect: Dialect) -> Result<Constant, Diagnostic> {
        match (ty, &literal.kind) {
            (Ty::Arr(length, element), SexpKind::List(items)) => {
                if items.len() as u64 != *length {
                    return Err(type_error(
                        literal.span,
                        format!("`{ty}` needs {length} elements, found {}", items.len()),
                    ));
                }
                items
                    .iter()
                    .map(|item| self.constant(item, element, dialect))
                    .collect::<Result<_, _>>()
                    .map(Constant::Aggregate)
            }
            (Ty::Struct(name), SexpKind::List(items)) => {
                let fields = self.lookup_struct(name).and_then(|entry| entry.fields.clone()).unwrap_or_default();
                if items.len() != fields.len() {
                    return Err(type_error(
                        literal.span,
                        format!("struct `{name}` has {} fields, found {} values", fields.len(), items.len()),
                    ));
                }
                items
                    .iter()
                    .zip(&fields)
                    .map(|(item, (_, field_ty))| self.constant(item, field_ty, dialect))
                    .collect::<Result<_, _>>()
                    .map(Constant::Aggregate)
            }
            _ => literal_of(dialect, literal, ty).map(|expr| match expr.kind {
                ExprKind::Int(value) => Constant::Int(value),
                ExprKind::Float(value) => Constant::Float(value),
                ExprKind::Bool(value) => Constant::Bool(value),
                _ => Constant::Zero,
            }),
        }
    }

    /// `(define-string NAME "TEXT")` in a Brilisp program: a global `(arr N int8)` holding the
    /// text's bytes and a terminating zero, whose address `(string-ref NAME)` gives.
    fn collect_string(&mut self, form: &Sexp) {
        let items = form.list().unwrap_or(&[]);
        let (Some(name), Some(SexpKind::Str(bytes)), 3) =
            (items.get(1).and_then(Sexp::symbol), items.get(2).map(|text| &text.kind), items.len())
        else {
            self.error(syntax(form.span, "a string is `(define-string NAME \"TEXT\")`"));
            return;
        };
        if !self.define_global_name(name, items[1].span) {
            return;
        }
        let text: Vec<Constant> = bytes.iter().chain([&0]).map(|byte| Constant::Int(i64::from(*byte as i8))).collect();
        let ty = Ty::Arr(text.len() as u64, Ty::Int(8).into());
        self.add_global(GlobalDef {
            name: name.to_string(),
            ty,
            init: Some(Constant::Aggregate(text)),
            span: form.span,
            space: 0,
        });
    }

    /// A top-level `(declare NAME TYPE)`: a session global. `(declare-global NAME (ptr T))` is
    /// the same with the pointer into GPU global memory (address space 1), as in a body.
    fn collect_top_declare(&mut self, form: &Sexp, global_pointer: bool) {
        let items = form.list().unwrap_or(&[]);
        let (Some(name), 3) = (items.get(1).and_then(Sexp::symbol), items.len()) else {
            self.error(syntax(form.span, "a declaration is `(declare NAME TYPE)`"));
            return;
        };
        if !self.define_global_name(name, items[1].span) {
            return;
        }
        let Some(mut ty) = self.parse_ty(&items[2]) else { return };
        if global_pointer {
            match global_memory_pointer(ty, items[2].span) {
                Ok(pointer) => ty = pointer,
                Err(error) => return self.error(error),
            }
        }
        if !ty.is_value() {
            self.error(type_error(items[2].span, "a variable cannot be `void`"));
            return;
        }
        if !self.require_sized(&ty, items[2].span, "a variable")
            || !self.require_size(&ty, items[2].span, "a global", MAX_VALUE_BYTES)
        {
            return;
        }
        // The same type again keeps the value; another type (or a layout this cell changes)
        // replaces the global.
        let keep =
            self.env.globals.get(name).is_some_and(|existing| existing.ty == ty) && !self.layout_changes_here(&ty, 0);
        self.add_global(GlobalDef {
            name: name.to_string(),
            ty,
            init: if keep { None } else { Some(Constant::Zero) },
            span: form.span,
            space: 0,
        });
    }

    fn signature_of(&mut self, prototype: &Prototype<'_>) -> Option<Signature> {
        let ret = self.parse_ty(prototype.ret);
        let mut params = Vec::new();
        let mut ok = ret.is_some();
        let mut seen = BTreeSet::new();
        for (name, span, ty_form) in &prototype.params {
            if !seen.insert(name.clone()) {
                self.error(
                    Diagnostic::error(Kind::DuplicateName, format!("parameter `{name}` appears twice"))
                        .with_label(*span, ""),
                );
                ok = false;
            }
            match self.parse_ty(ty_form) {
                Some(Ty::Void) => {
                    self.error(type_error(ty_form.span, "a parameter cannot be `void`"));
                    ok = false;
                }
                Some(ty)
                    if !self.require_sized(&ty, ty_form.span, "a parameter")
                        || !self.require_size(&ty, ty_form.span, "a parameter", MAX_LOCAL_BYTES) =>
                {
                    ok = false
                }
                Some(ty) => params.push(ty),
                None => ok = false,
            }
        }
        if let Some(ret_ty) = &ret {
            if !self.require_sized(&ret_ty.clone(), prototype.ret.span, "a result")
                || !self.require_size(&ret_ty.clone(), prototype.ret.span, "a result", MAX_LOCAL_BYTES)
            {
                ok = false;
            }
        }
        ok.then(|| Signature { params, ret: ret.unwrap_or(Ty::Void), variadic: prototype.variadic })
    }

    fn collect_function(&mut self, form: &Sexp, dialect: Dialect, declared: &mut HashMap<String, (Signature, Span)>) {
        let items = form.list().unwrap_or(&[]);
        let Some(head) = items.first().and_then(Sexp::symbol) else { return };
        let Some(attributes) = define_attributes(head) else { return };
        let inline = attributes.inline;
        let Some(proto_form) = items.get(1) else {
            self.error(syntax(form.span, "a definition is `(define ((NAME TYPE) (PARAM TYPE)…) BODY…)`"));
            return;
        };
        let prototype = match parse_prototype(proto_form) {
            Ok(prototype) => prototype,
            Err(diagnostic) => {
                self.error(diagnostic);
                return;
            }
        };
        let Some(signature) = self.signature_of(&prototype) else { return };
        let name = prototype.name.clone();
        let has_body = items.len() > 2;
        let param_names = prototype.params.iter().map(|(name, _, _)| name.clone()).collect();
        let Some(annotations) = self.annotations(&prototype, &signature) else { return };
        if attributes.kernel && !self.kernel_prototype(&prototype, &signature, attributes, has_body) {
            return;
        }
        if name.starts_with("llvm.") {
            if has_body {
                self.error(syntax(prototype.name_span, "`llvm.` names are LLVM intrinsics and cannot be defined"));
                return;
            }
            let link = intrinsic_name(&name);
            if let Err(error) = self.intrinsic_facts(&link, &signature) {
                self.error(intrinsic_error(&name, &link, &signature, error, proto_form.span));
                return;
            }
            self.overlay.functions.insert(
                name.clone(),
                FunctionEntry {
                    signature: signature.clone(),
                    param_names,
                    kind: FunctionKind::External(link.clone()),
                    invalidated: None,
                },
            );
            let resolution = Some(Resolution::Link(link));
            self.cell.externs.push(ExternDef { name, signature, span: proto_form.span, resolution });
            return;
        }
        if !has_body {
            // A forward declaration of a function defined in this cell or the session must agree.
            if let Some((existing, _)) = declared.get(&name) {
                if *existing != signature {
                    self.error(type_error(
                        proto_form.span,
                        format!(
                            "this declaration of `{name}` does not match its definition: `{signature}` vs `{existing}`"
                        ),
                    ));
                }
                return;
            }
            if let Some(FunctionEntry { signature: existing, kind: FunctionKind::Defined(_), .. }) =
                self.env.functions.get(&name)
            {
                if *existing != signature {
                    self.error(type_error(proto_form.span, format!("this declaration of `{name}` does not match the session's definition `{name} : {existing}`")).with_note("redefine the function to change its type"));
                }
                return;
            }
            if signature.variadic && signature.params.is_empty() {
                self.error(type_error(proto_form.span, "a variadic declaration needs at least one fixed parameter"));
                return;
            }
            // Not a forward declaration (checked above): a C function, whose convention for
            // structs and arrays by value is not C-Lisp's.
            if signature.has_aggregates() {
                self.error(
                    type_error(proto_form.span, "external functions cannot take or return structs or arrays by value")
                        .with_note("pass a pointer instead; a forward declaration of a C-Lisp function is fine when its definition follows in the same cell"),
                );
                return;
            }
            // libdevice is linked into device code: nothing on the host provides it.
            let resolution =
                if is_libdevice(&name) { Some(Resolution::Link(name.clone())) } else { self.symbols.resolve(&name) };
            let kind = resolution.clone().map_or(FunctionKind::Unresolved, FunctionKind::from);
            self.overlay.functions.insert(
                name.clone(),
                FunctionEntry { signature: signature.clone(), param_names, kind, invalidated: None },
            );
            self.cell.externs.push(ExternDef { name, signature, span: proto_form.span, resolution });
            return;
        }
        if signature.variadic {
            self.error(syntax(proto_form.span, "only declarations (without a body) can be variadic"));
            return;
        }
        if let Some(previous) = self.overlay.defined_here.get(&name) {
            let previous = *previous;
            self.error(
                Diagnostic::error(Kind::DuplicateName, format!("`{name}` is defined twice in this cell"))
                    .with_label(prototype.name_span, "")
                    .with_secondary(previous, "first defined here"),
            );
            return;
        }
        // A forward declaration earlier in the cell must match.
        if let Some(existing) = self.overlay.functions.get(&name) {
            if existing.signature != signature {
                self.error(type_error(
                    proto_form.span,
                    format!(
                        "this definition of `{name}` does not match its declaration: `{signature}` vs `{}`",
                        existing.signature
                    ),
                ));
                return;
            }
        }
        self.overlay.defined_here.insert(name.clone(), prototype.name_span);
        declared.insert(name.clone(), (signature.clone(), proto_form.span));
        // The body is filled in by the second pass; `Unresolved` stands in until then.
        let placeholder = Rc::new(FunctionDef {
            name: name.clone(),
            signature: signature.clone(),
            locals: Vec::new(),
            body: Vec::new(),
            labels: Vec::new(),
            inline,
            span: form.span,
            source: DefinitionSource::Form(form.clone()),
            uses: BTreeSet::new(),
            kernel: attributes.kernel,
            annotations,
            placement: Placement { device_only: attributes.kernel, ..Placement::default() },
            dialect,
        });
        self.overlay.functions.insert(
            name,
            FunctionEntry { signature, param_names, kind: FunctionKind::Defined(placeholder), invalidated: None },
        );
    }

    /// The rules a `define-kernel` prototype follows: a body, no result, no variadic tail,
    /// parameters a launch can pass (scalars and pointers).
    fn kernel_prototype(
        &mut self,
        prototype: &Prototype<'_>,
        signature: &Signature,
        attributes: Attributes,
        has_body: bool,
    ) -> bool {
        let gpu = |span: Span, message: String| Diagnostic::error(Kind::Gpu, message).with_label(span, "");
        let name = &prototype.name;
        if !has_body {
            self.error(syntax(prototype.name_span, format!("the kernel `{name}` needs a body")));
            return false;
        }
        if attributes.inline {
            self.error(gpu(
                prototype.name_span,
                format!("the kernel `{name}` cannot be inline: kernels are launched, not called"),
            ));
            return false;
        }
        if signature.ret != Ty::Void {
            self.error(
                type_error(
                    prototype.ret.span,
                    format!("a kernel returns `void`, but `{name}` returns `{}`", signature.ret),
                )
                .with_note("kernels write their results through pointers"),
            );
            return false;
        }
        if signature.variadic {
            self.error(syntax(prototype.name_span, "a kernel cannot be variadic"));
            return false;
        }
        let mut ok = true;
        for ((param, _, ty_form), ty) in prototype.params.iter().zip(&signature.params) {
            if !ty.is_scalar() {
                self.error(
                    type_error(
                        ty_form.span,
                        format!("the kernel parameter `{param}` is `{ty}`, but kernels take scalars and pointers"),
                    )
                    .with_note("pass a (gpu-buf T) at the launch to a (ptr T) parameter"),
                );
                ok = false;
            }
        }
        ok
    }

    /// Reads the Lapis annotations of a prototype (§7.4). SIZE may use only literals and the
    /// integer parameters, so a launch can evaluate it from its own arguments.
    fn annotations(&mut self, prototype: &Prototype<'_>, signature: &Signature) -> Option<Vec<Option<Annotation>>> {
        let mut annotations = Vec::new();
        let mut ok = true;
        for (((param, span, _), words), ty) in
            prototype.params.iter().zip(&prototype.annotations).zip(&signature.params)
        {
            let annotation = match words {
                [] => None,
                [word] => Some(Annotation::Handle).filter(|_| word.symbol() == Some("handle")),
                [direction, size] => direction
                    .symbol()
                    .and_then(Direction::from_word)
                    .map(|direction| Annotation::Sized(direction, size.clone())),
                _ => None,
            };
            if !words.is_empty() && !ty.is_ptr() {
                self.error(type_error(
                    *span,
                    format!("the annotated parameter `{param}` is `{ty}`, but annotations describe pointers"),
                ));
                ok = false;
            }
            if let Some(Annotation::Sized(_, size)) = &annotation {
                if let Err(error) = self.check_size_form(size, prototype, signature) {
                    self.error(error);
                    ok = false;
                }
            }
            annotations.push(annotation);
        }
        ok.then_some(annotations)
    }

    fn check_size_form(&self, size: &Sexp, prototype: &Prototype<'_>, signature: &Signature) -> Result<(), Diagnostic> {
        match &size.kind {
            SexpKind::Int(value) if *value >= 0 => Ok(()),
            SexpKind::Symbol(name) => {
                let index = prototype.params.iter().position(|(param, _, _)| **param == **name);
                match index.and_then(|index| signature.params.get(index)) {
                    Some(ty) if ty.is_int() => Ok(()),
                    Some(ty) => {
                        Err(type_error(size.span, format!("a size must be an integer, but `{name}` is `{ty}`")))
                    }
                    None => Err(Diagnostic::error(
                        Kind::UnknownName,
                        format!("`{name}` is not a parameter of `{}`", prototype.name),
                    )
                    .with_label(size.span, "")
                    .with_note("a size is a literal, an integer parameter, or an expression over them like (mul m n)")),
                }
            }
            SexpKind::List(items) if items.first().and_then(Sexp::symbol).is_some() => {
                items[1..].iter().try_for_each(|item| self.check_size_form(item, prototype, signature))
            }
            _ => Err(syntax(size.span, format!("`{size}` is not a size"))
                .with_note("a size is a literal, an integer parameter, or an expression over them like (mul m n)")),
        }
    }
}
