//! Checker: form shapes, names and types of a cell; builds the `TypedCell` codegen accepts.
//!
//! Every error in the cell is collected (at most `MAX_ERRORS`) and reported in source order.
//! Nothing here touches LLVM: the typed tree is plain data.

mod brilisp;

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use crate::diagnostics::{Diagnostic, Kind};
use crate::intrinsics::{
    check_intrinsic, device_only_intrinsic, host_intrinsic, intrinsic_name, is_libdevice, IntrinsicError,
    IntrinsicFacts,
};
use crate::reader::{Sexp, SexpKind, Span};
use crate::tree::{
    always_returns, first_call, launch_targets, visit_exprs, Annotation, BinOp, Callee, CastOp, Constant,
    CopyDirection, Direction, Expr, ExprKind, ExternDef, FloatCmp, FunctionDef, GlobalDef, GlobalEntry, GpuRegister,
    IntCmp, Invalidation, Launch, LaunchArg, LaunchArgKind, Local, Place, Placement, Stmt, StructDef, TopItem,
    TypedCell, MAX_NESTING,
};
use crate::types::{parse_addrspace, parse_type, scalar_type_name, Signature, StructEntry, Ty, INT, INT64};

const MAX_ERRORS: usize = 20;

/// The largest global or top-level value in bytes: the session holds globals in its memory and
/// copies a top-level value out to print it.
pub(crate) const MAX_VALUE_BYTES: u64 = 1 << 30;

/// The largest local variable or by-value parameter in bytes: they live in the frame, and
/// compiled code runs on a 64 MiB stack.
pub(crate) const MAX_LOCAL_BYTES: u64 = 16 << 20;

/// Every form, opcode, cast and type name of the language, for completion.
pub(crate) const FORM_NAMES: &[&str] = &[
    "define",
    "define-inline",
    "define-brilisp",
    "define-inline-brilisp",
    "define-struct",
    "define-global",
    "define-kernel",
    "define-shared",
    "declare",
    "declare-global",
    "c-lisp",
    "cuda-lisp",
    "if",
    "while",
    "for",
    "ret",
    "break",
    "continue",
    "set",
    "call",
    "asm",
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "udiv",
    "urem",
    "shl",
    "lshr",
    "ashr",
    "xor",
    "and",
    "or",
    "not",
    "fadd",
    "fsub",
    "fmul",
    "fdiv",
    "fneg",
    "eq",
    "ne",
    "lt",
    "gt",
    "le",
    "ge",
    "ult",
    "ugt",
    "ule",
    "uge",
    "feq",
    "fne",
    "flt",
    "fgt",
    "fle",
    "fge",
    "select",
    "load",
    "store",
    "ptradd",
    "sptradd",
    "aptradd",
    "ptr-to",
    "alloc",
    "extractvalue",
    "insertvalue",
    "sext",
    "zext",
    "trunc",
    "fpext",
    "fptrunc",
    "sitofp",
    "uitofp",
    "fptosi",
    "fptoui",
    "ptrtoint",
    "inttoptr",
    "bitcast",
    "addrspacecast",
    "bool",
    "int8",
    "int16",
    "int",
    "int32",
    "int64",
    "float",
    "double",
    "void",
    "ptr",
    "arr",
    "struct",
    "addrspace",
    "const",
    "label",
    "jmp",
    "br",
    "nop",
    "id",
    "gpu-buf",
    "gpu-alloc",
    "gpu-free",
    "gpu-len",
    "gpu-copy",
    "launch",
    "grid",
    "block",
    "in",
    "out",
    "inout",
    "handle",
    "tid.x",
    "tid.y",
    "tid.z",
    "bid.x",
    "bid.y",
    "bid.z",
    "bdim.x",
    "bdim.y",
    "bdim.z",
    "gdim.x",
    "gdim.y",
    "gdim.z",
    "syncthreads",
    "__syncthreads",
];

/// The most static shared memory one kernel may use (CUDA's limit without opting in).
pub(crate) const MAX_SHARED_BYTES: u64 = 48 << 10;

// ---------------------------------------------------------------------------------------------
// The session environment the checker reads.

#[derive(Clone, Debug)]
pub(crate) struct FunctionEntry {
    pub signature: Signature,
    pub param_names: Vec<String>,
    pub kind: FunctionKind,
    /// Set when a redefinition made this function ill-typed; calling it is an error.
    pub invalidated: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) enum FunctionKind {
    Defined(Rc<FunctionDef>),
    /// A declaration resolved to a process or runtime symbol of this name.
    External(String),
    /// A declaration nothing provides yet; calls go through its slot.
    Unresolved,
}

/// The committed definitions of a session.
#[derive(Clone, Debug, Default)]
pub(crate) struct Env {
    pub functions: HashMap<String, FunctionEntry>,
    pub globals: HashMap<String, GlobalEntry>,
    pub structs: HashMap<String, StructEntry>,
}

/// Finds where a bodiless declaration's symbol lives (process, runtime), if anywhere.
pub(crate) type ResolveExtern<'a> = &'a dyn Fn(&str) -> Option<String>;

// ---------------------------------------------------------------------------------------------
// Cell checking.

/// Checks a cell's top-level forms against the session environment.
pub(crate) fn check(
    env: &Env,
    forms: &[Sexp],
    resolve: ResolveExtern<'_>,
    top_level_name: &str,
) -> Result<TypedCell, Vec<Diagnostic>> {
    let mut checker = CellChecker {
        env,
        resolve,
        errors: Vec::new(),
        cell: TypedCell::empty(),
        overlay: Overlay::default(),
        inline_used: BTreeSet::new(),
        intrinsics: HashMap::new(),
    };
    let mut flat = Vec::new();
    checker.flatten(forms, &mut flat);
    checker.collect_declarations(&flat);
    checker.check_bodies(&flat, top_level_name);
    checker.settle_placement();
    checker.recheck_dependents(top_level_name.trim_start_matches("cell#"));
    checker.settle_placement();
    checker.placement_errors();
    checker.collect_inline_bodies();
    if checker.errors.is_empty() {
        Ok(checker.cell)
    } else {
        let mut errors = checker.errors;
        errors.sort_by_key(Diagnostic::sort_key);
        errors.truncate(MAX_ERRORS);
        Err(errors)
    }
}

/// Names the cell defines, seen before the session's.
#[derive(Default)]
struct Overlay {
    functions: HashMap<String, FunctionEntry>,
    globals: HashMap<String, GlobalEntry>,
    structs: HashMap<String, StructEntry>,
    /// Defined (with a body) in this cell, with the span of the definition.
    defined_here: HashMap<String, Span>,
}

struct CellChecker<'a> {
    env: &'a Env,
    resolve: ResolveExtern<'a>,
    errors: Vec<Diagnostic>,
    cell: TypedCell,
    overlay: Overlay,
    /// Inline functions called by code checked in this cell.
    inline_used: BTreeSet<String>,
    /// What LLVM said about each intrinsic declaration checked in this cell, by name.
    intrinsics: HashMap<String, Result<IntrinsicFacts, IntrinsicError>>,
}

fn syntax(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(Kind::Syntax, message).with_label(span, "")
}

fn type_error(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(Kind::Type, message).with_label(span, "")
}

fn arity(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(Kind::Arity, message).with_label(span, "")
}

/// The note after a type mismatch: the cast that converts `found` to `wanted`, if one does.
pub(crate) fn cast_note(found: &Ty, wanted: &Ty) -> String {
    let cast = match (found, wanted) {
        (Ty::Int(from), Ty::Int(to)) if from < to => Some("sext"),
        (Ty::Int(_), Ty::Int(_)) => Some("trunc"),
        (Ty::Bool, Ty::Int(_)) => Some("zext"),
        (Ty::Int(_), Ty::Bool) => Some("trunc"),
        (Ty::Float, Ty::Double) => Some("fpext"),
        (Ty::Double, Ty::Float) => Some("fptrunc"),
        (Ty::Int(_), Ty::Float | Ty::Double) => Some("sitofp"),
        (Ty::Float | Ty::Double, Ty::Int(_)) => Some("fptosi"),
        (Ty::Int(_), Ty::Ptr(..)) => Some("inttoptr"),
        (Ty::Ptr(..), Ty::Int(_)) => Some("ptrtoint"),
        (Ty::Ptr(_, a), Ty::Ptr(_, b)) if a == b => Some("bitcast"),
        (Ty::Ptr(..), Ty::Ptr(..)) => Some("addrspacecast"),
        _ => None,
    };
    match cast {
        Some(cast) => format!("C-Lisp converts only with explicit casts, e.g. ({cast} e {wanted})"),
        None => "C-Lisp converts only with explicit casts, and none converts these types".to_string(),
    }
}

/// The parts of a function head `((NAME RET) (P T)… [...])`.
struct Prototype<'f> {
    name: String,
    name_span: Span,
    ret: &'f Sexp,
    params: Vec<(String, Span, &'f Sexp)>,
    /// The Lapis annotation words after each parameter's type (`in n`, `handle`), if any.
    annotations: Vec<&'f [Sexp]>,
    variadic: bool,
}

fn parse_prototype(form: &Sexp) -> Result<Prototype<'_>, Diagnostic> {
    let shape = || syntax(form.span, "a prototype is `((NAME RESULT-TYPE) (PARAM TYPE)…)`");
    let items = form.list().ok_or_else(shape)?;
    let (first, rest) = items.split_first().ok_or_else(shape)?;
    let [name, ret] = first.list().ok_or_else(shape)? else { return Err(shape()) };
    let name_text = name.symbol().ok_or_else(|| syntax(name.span, "a function name must be a symbol"))?;
    let mut params = Vec::new();
    let mut annotations = Vec::new();
    let mut variadic = false;
    for (index, param) in rest.iter().enumerate() {
        if param.symbol() == Some("...") {
            if index + 1 != rest.len() {
                return Err(syntax(param.span, "`...` must come last in a prototype"));
            }
            variadic = true;
            continue;
        }
        let pair = param.list().unwrap_or(&[]);
        // Lapis annotations `(P T in N)` and `(P T handle)` only inform GPU launches.
        let valid = match pair.len() {
            2 => true,
            3 => pair[2].symbol() == Some("handle"),
            4 => matches!(pair[2].symbol(), Some("in" | "out" | "inout")),
            _ => false,
        };
        let param_name = pair.first().and_then(Sexp::symbol);
        match (valid, param_name) {
            (true, Some(param_name)) => {
                params.push((param_name.to_string(), pair[0].span, &pair[1]));
                annotations.push(&pair[2..]);
            }
            _ if pair.len() > 2 => {
                return Err(syntax(param.span, "a parameter is `(NAME TYPE)`")
                    .with_note("a Lapis annotation is (NAME TYPE in|out|inout SIZE) or (NAME TYPE handle)"))
            }
            _ => return Err(syntax(param.span, "a parameter is `(NAME TYPE)`")),
        }
    }
    Ok(Prototype { name: name_text.to_string(), name_span: name.span, ret, params, annotations, variadic })
}

/// The attributes of a `define…` head.
#[derive(Clone, Copy, Default)]
struct Attributes {
    inline: bool,
    brilisp: bool,
    kernel: bool,
}

/// Splits a `define…` head into its attributes: `define-kernel` (cuda-lisp) is one too.
fn define_attributes(head: &str) -> Option<Attributes> {
    let mut parts = head.split('-');
    if parts.next() != Some("define") {
        return None;
    }
    let mut attributes = Attributes::default();
    for part in parts {
        match part {
            "inline" if !attributes.inline => attributes.inline = true,
            "brilisp" if !attributes.brilisp => attributes.brilisp = true,
            "kernel" if !attributes.kernel => attributes.kernel = true,
            _ => return None,
        }
    }
    Some(attributes)
}

impl<'a> CellChecker<'a> {
    fn error(&mut self, diagnostic: Diagnostic) {
        self.errors.push(diagnostic);
    }

    fn parse_ty(&mut self, form: &Sexp) -> Option<Ty> {
        let overlay = &self.overlay.structs;
        let env = &self.env.structs;
        match parse_type(form, &|name| overlay.contains_key(name) || env.contains_key(name)) {
            Ok(ty) => Some(ty),
            Err(diagnostic) => {
                self.error(diagnostic);
                None
            }
        }
    }

    fn lookup_function(&self, name: &str) -> Option<&FunctionEntry> {
        self.overlay.functions.get(name).or_else(|| self.env.functions.get(name))
    }

    fn lookup_global(&self, name: &str) -> Option<&GlobalEntry> {
        self.overlay.globals.get(name).or_else(|| self.env.globals.get(name))
    }

    fn lookup_struct(&self, name: &str) -> Option<&StructEntry> {
        self.overlay.structs.get(name).or_else(|| self.env.structs.get(name))
    }

    /// What LLVM says about an intrinsic declaration, asked once per cell and signature.
    fn intrinsic_facts(&mut self, link: &str, signature: &Signature) -> Result<IntrinsicFacts, IntrinsicError> {
        let key = format!("{link} {signature}");
        if let Some(known) = self.intrinsics.get(&key) {
            return known.clone();
        }
        let overlay = &self.overlay.structs;
        let env = &self.env.structs;
        let fields = |name: &str| {
            overlay
                .get(name)
                .or_else(|| env.get(name))
                .and_then(|entry| entry.fields.as_ref())
                .map(|fields| fields.iter().map(|(_, ty)| ty.clone()).collect())
        };
        let facts = check_intrinsic(link, signature, &fields);
        self.intrinsics.insert(key, facts.clone());
        facts
    }

    /// Unwraps `(c-lisp …)` and `(cuda-lisp …)`.
    fn flatten<'f>(&mut self, forms: &'f [Sexp], out: &mut Vec<&'f Sexp>) {
        for form in forms {
            match form.head() {
                Some("c-lisp" | "cuda-lisp") => self.flatten(&form.list().unwrap_or(&[])[1..], out),
                _ => out.push(form),
            }
        }
    }

    /// First pass: structs, globals and prototypes, so order inside a cell is free.
    fn collect_declarations(&mut self, forms: &[&Sexp]) {
        // Struct names first, so fields and prototypes may name any struct of the cell.
        for form in forms {
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
        for form in forms {
            if form.head() == Some("define-struct") {
                self.collect_struct(form);
            }
        }
        self.reject_struct_cycles();
        for form in forms {
            match form.head() {
                Some("define-global") => self.collect_global(form),
                Some("define-shared") => self.collect_shared(form),
                Some("declare") => self.collect_top_declare(form),
                _ => {}
            }
        }
        // Definitions before declarations: a forward declaration of a function the cell defines
        // (before or after it) is checked against the definition, not taken as an extern.
        let functions: Vec<&Sexp> = forms
            .iter()
            .copied()
            .filter(|form| form.head().is_some_and(|head| define_attributes(head).is_some()))
            .collect();
        let (definitions, declarations): (Vec<&Sexp>, Vec<&Sexp>) =
            functions.into_iter().partition(|form| form.list().is_some_and(|items| items.len() > 2));
        let mut declared: HashMap<String, (Signature, Span)> = HashMap::new();
        for form in definitions.into_iter().chain(declarations) {
            self.collect_function(form, &mut declared);
        }
    }

    fn collect_struct(&mut self, form: &Sexp) {
        let items = form.list().unwrap_or(&[]);
        let Some(name) = items.get(1).and_then(Sexp::symbol) else { return };
        let mut fields = Vec::new();
        let mut ok = true;
        for field in &items[2..] {
            match field.list() {
                Some([field_name, field_type]) if field_name.symbol().is_some() => {
                    let field_name_text = field_name.symbol().unwrap_or_default().to_string();
                    if fields.iter().any(|(existing, _)| *existing == field_name_text) {
                        self.error(
                            Diagnostic::error(
                                Kind::DuplicateName,
                                format!("field `{field_name_text}` appears twice in struct `{name}`"),
                            )
                            .with_label(field_name.span, ""),
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
                        Some(ty) => fields.push((field_name_text, ty)),
                        None => ok = false,
                    }
                }
                _ => {
                    self.error(syntax(field.span, "a struct field is `(NAME TYPE)`"));
                    ok = false;
                }
            }
        }
        let fields = if items.len() == 2 { None } else { Some(fields) };
        if ok {
            self.overlay.structs.insert(name.to_string(), StructEntry { fields: fields.clone() });
            self.cell.structs.push(StructDef { name: name.to_string(), fields, span: form.span });
        }
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
    fn require_size(&mut self, ty: &Ty, span: Span, what: &str, limit: u64) -> bool {
        let (size, _) =
            crate::value::layout(ty, &|name| self.lookup_struct(name).and_then(|entry| entry.fields.clone()));
        if size > limit {
            let note = if limit == MAX_LOCAL_BYTES {
                "locals live on the 64 MiB stack: use a global, or memory from malloc"
            } else {
                "use memory from malloc, and pointers"
            };
            self.error(
                Diagnostic::error(
                    Kind::Limit,
                    format!("{what} of type `{ty}` takes {size} bytes, more than the {limit} allowed"),
                )
                .with_label(span, "")
                .with_note(note),
            );
            return false;
        }
        true
    }

    /// Reports a by-value use of an opaque struct (directly or as array elements): such a value
    /// has no size. `what` names the use.
    fn require_sized(&mut self, ty: &Ty, span: Span, what: &str) -> bool {
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

    fn collect_global(&mut self, form: &Sexp) {
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
            Some(init) => self.global_initializer(init, &mut ty),
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

    fn global_initializer(&mut self, init: &Sexp, ty: &mut Ty) -> Option<Constant> {
        let items = init.list().unwrap_or(&[]);
        match (items.first().and_then(Sexp::symbol), items.len()) {
            (Some("const"), 2) => match self.constant(&items[1], ty) {
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

    /// A literal (or nested list of literals) converted to `ty` as a typed literal.
    fn constant(&self, literal: &Sexp, ty: &Ty) -> Result<Constant, Diagnostic> {
        match (ty, &literal.kind) {
            (Ty::Arr(length, element), SexpKind::List(items)) => {
                if items.len() as u64 != *length {
                    return Err(type_error(
                        literal.span,
                        format!("`{ty}` needs {length} elements, found {}", items.len()),
                    ));
                }
                items.iter().map(|item| self.constant(item, element)).collect::<Result<_, _>>().map(Constant::Aggregate)
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
                    .map(|(item, (_, field_ty))| self.constant(item, field_ty))
                    .collect::<Result<_, _>>()
                    .map(Constant::Aggregate)
            }
            _ => typed_literal(literal, ty).map(|expr| match expr.kind {
                ExprKind::Int(value) => Constant::Int(value),
                ExprKind::Float(value) => Constant::Float(value),
                ExprKind::Bool(value) => Constant::Bool(value),
                _ => Constant::Zero,
            }),
        }
    }

    fn collect_top_declare(&mut self, form: &Sexp) {
        let items = form.list().unwrap_or(&[]);
        let (Some(name), 3) = (items.get(1).and_then(Sexp::symbol), items.len()) else {
            self.error(syntax(form.span, "a declaration is `(declare NAME TYPE)`"));
            return;
        };
        if !self.define_global_name(name, items[1].span) {
            return;
        }
        let Some(ty) = self.parse_ty(&items[2]) else { return };
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

    fn collect_function(&mut self, form: &Sexp, declared: &mut HashMap<String, (Signature, Span)>) {
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
                    kind: FunctionKind::External(link),
                    invalidated: None,
                },
            );
            self.cell.externs.push(ExternDef { name, signature, span: proto_form.span, unresolved: false });
            return;
        }
        if !has_body {
            if signature.params.iter().chain([&signature.ret]).any(|ty| matches!(ty, Ty::Struct(_) | Ty::Arr(..))) {
                self.error(
                    type_error(proto_form.span, "external functions cannot take or return structs or arrays by value")
                        .with_note("pass a pointer instead"),
                );
                return;
            }
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
            let kind = match (self.resolve)(&name) {
                // libdevice is linked into device code: nothing on the host provides it.
                _ if is_libdevice(&name) => FunctionKind::External(name.clone()),
                Some(link) => FunctionKind::External(link),
                None => FunctionKind::Unresolved,
            };
            let unresolved = matches!(kind, FunctionKind::Unresolved);
            self.overlay.functions.insert(
                name.clone(),
                FunctionEntry { signature: signature.clone(), param_names, kind, invalidated: None },
            );
            self.cell.externs.push(ExternDef { name, signature, span: proto_form.span, unresolved });
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
            source: form.clone(),
            uses: BTreeSet::new(),
            kernel: attributes.kernel,
            annotations,
            placement: Placement { device_only: attributes.kernel, ..Placement::default() },
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
                let index = prototype.params.iter().position(|(param, _, _)| param == name);
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

    /// Second pass: function bodies and top-level code.
    fn check_bodies(&mut self, forms: &[&Sexp], top_level_name: &str) {
        for form in forms {
            match form.head() {
                Some("define-struct" | "define-global" | "define-shared" | "declare") => {}
                Some(head) if define_attributes(head).is_some() => {
                    let items = form.list().unwrap_or(&[]);
                    if items.len() > 2 {
                        if let Some(function) = self.check_function(form) {
                            self.cell.functions.push(function);
                        }
                    }
                }
                Some(_) | None => {
                    let index = self.cell.top.len();
                    if let Some(item) = self.check_top_item(form, &format!("{top_level_name}.{index}")) {
                        self.cell.top.push(item);
                    }
                }
            }
        }
    }

    fn check_function(&mut self, form: &Sexp) -> Option<FunctionDef> {
        let items = form.list()?;
        let prototype = parse_prototype(items.get(1)?).ok()?;
        // A cell's own definition, or a session function being re-checked after a change.
        let entry =
            self.overlay.functions.get(&prototype.name).or_else(|| self.env.functions.get(&prototype.name))?.clone();
        let FunctionKind::Defined(placeholder) = &entry.kind else { return None };
        let inline = placeholder.inline;
        let (kernel, annotations) = (placeholder.kernel, placeholder.annotations.clone());
        let brilisp = define_attributes(items[0].symbol()?)?.brilisp;
        let errors_before = self.errors.len();
        let mut body_checker = BodyChecker::new(self, prototype.name.clone(), entry.signature.ret.clone(), false);
        body_checker.kernel = kernel;
        for ((name, span, _), ty) in prototype.params.iter().zip(&entry.signature.params) {
            body_checker.declare_local(name, ty.clone(), *span);
        }
        let (body, labels, falls_through) = if brilisp {
            let checked = brilisp::check_body(&mut body_checker, &items[2..]);
            (checked.body, checked.labels, checked.falls_through)
        } else {
            let body = body_checker.check_block_items(&items[2..]);
            let falls_through = !always_returns(&body);
            (body, Vec::new(), falls_through)
        };
        let BodyChecker { locals, uses, mut warnings, ret, placement, .. } = body_checker;
        if let (false, Some((device_span, device)), Some((host_span, host))) =
            (kernel, &placement.device_use, &placement.host_use)
        {
            self.error(
                Diagnostic::error(
                    Kind::Gpu,
                    format!(
                        "`{}` uses {device}, so it is device code, and device code cannot use {host}",
                        prototype.name
                    ),
                )
                .with_label(*host_span, "host code")
                .with_secondary(*device_span, "device code")
                .with_note("device code may call intrinsics, libdevice (`__nv_*`) and session functions"),
            );
        }
        if falls_through && ret != Ty::Void {
            warnings.push(
                Diagnostic::warning(
                    Kind::Type,
                    format!("`{}` can reach its end without `(ret …)`; it then returns 0", prototype.name),
                )
                .with_label(prototype.name_span, ""),
            );
        }
        // Warnings about a body with errors would only be noise.
        if self.errors.len() == errors_before {
            self.cell.warnings.extend(warnings);
        }
        let placement = Placement { device_only: kernel || placement.device_use.is_some(), ..placement };
        Some(FunctionDef {
            name: prototype.name,
            signature: entry.signature,
            locals,
            body,
            labels,
            inline,
            span: form.span,
            source: form.clone(),
            uses,
            kernel,
            annotations,
            placement,
        })
    }

    fn check_top_item(&mut self, form: &Sexp, entry_name: &str) -> Option<TopItem> {
        if let Some(head @ ("ret" | "break" | "continue")) = form.head() {
            let place = if head == "ret" { "a function" } else { "a loop" };
            self.error(syntax(form.span, format!("`{head}` is only allowed inside {place}")));
            return None;
        }
        let mut body_checker = BodyChecker::new(self, entry_name.to_string(), Ty::Void, true);
        let errors_before = body_checker.cell.errors.len();
        let (body, value) = if is_statement_form(form) {
            (vec![body_checker.check_stmt(form)?], None)
        } else {
            let expr = body_checker.check_expr(form)?;
            if !body_checker.cell.require_size(&expr.ty, form.span, "a top-level value", MAX_VALUE_BYTES) {
                return None;
            }
            let value = expr.ty.is_value().then(|| expr.ty.clone());
            (vec![Stmt::Expr(expr)], value)
        };
        let BodyChecker { locals, uses, warnings, .. } = body_checker;
        self.cell.warnings.extend(warnings);
        if self.errors.len() > errors_before {
            return None;
        }
        let function = FunctionDef {
            name: entry_name.to_string(),
            signature: Signature { params: Vec::new(), ret: Ty::Void, variadic: false },
            locals,
            body,
            labels: Vec::new(),
            inline: false,
            span: form.span,
            source: form.clone(),
            uses,
            kernel: false,
            annotations: Vec::new(),
            placement: Placement::default(),
        };
        Some(TopItem { function, value })
    }

    fn struct_layouts(&self) -> HashMap<String, StructEntry> {
        let mut structs = self.env.structs.clone();
        structs.extend(self.overlay.structs.iter().map(|(name, entry)| (name.clone(), entry.clone())));
        structs
    }

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
    fn settle_placement(&mut self) {
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
    fn placement_errors(&mut self) {
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

    /// Gathers the finished bodies of the inline functions the cell calls, transitively. The
    /// checker only names them in `Callee::Inline`: while a cell is checked, the bodies of its
    /// own inline functions are not finished yet.
    fn collect_inline_bodies(&mut self) {
        let mut pending: Vec<String> = std::mem::take(&mut self.inline_used).into_iter().collect();
        while let Some(name) = pending.pop() {
            if self.cell.inline_bodies.contains_key(&name) {
                continue;
            }
            let here = self
                .cell
                .functions
                .iter()
                .chain(&self.cell.recompiled)
                .find(|function| function.name == name)
                .map(|function| Rc::new(function.clone()));
            let body = here.or_else(|| match self.env.functions.get(&name) {
                Some(FunctionEntry { kind: FunctionKind::Defined(def), .. }) => Some(def.clone()),
                _ => None,
            });
            let Some(body) = body else { continue };
            visit_exprs(&body.body, &mut |expr| {
                if let ExprKind::Call { callee: Callee::Inline(callee), .. } = &expr.kind {
                    pending.push(callee.clone());
                }
            });
            self.cell.inline_bodies.insert(name, body);
        }
    }

    /// Re-checks session functions that use a name whose type changed in this cell (or an
    /// inline function that was redefined); the ones that fail are invalidated.
    fn recheck_dependents(&mut self, cell_label: &str) {
        if !self.errors.is_empty() {
            return;
        }
        let mut changed: BTreeSet<String> = BTreeSet::new();
        for function in &self.cell.functions {
            match self.env.functions.get(&function.name) {
                Some(old) if old.signature != function.signature => {
                    changed.insert(format!("fn:{}", function.name));
                }
                // Callers of a function that moved to the GPU (or back) must be checked again.
                Some(FunctionEntry { kind: FunctionKind::Defined(old), .. })
                    if old.placement.device_only != function.placement.device_only || old.kernel != function.kernel =>
                {
                    changed.insert(format!("fn:{}", function.name));
                }
                Some(FunctionEntry { kind: FunctionKind::Defined(old), .. }) if old.inline || function.inline => {
                    changed.insert(format!("fn:{}", function.name));
                }
                // A definition replacing a declaration: callers compiled against the C symbol (or
                // the built-in runtime) call it directly, and must now reach the definition.
                Some(FunctionEntry { kind: FunctionKind::External(_), .. }) => {
                    changed.insert(format!("fn:{}", function.name));
                }
                _ => {}
            }
        }
        for global in &self.cell.globals {
            if self.env.globals.get(&global.name).is_some_and(|old| old.ty != global.ty) {
                changed.insert(format!("global:{}", global.name));
            }
        }
        for structure in &self.cell.structs {
            if self.env.structs.get(&structure.name).is_some_and(|old| old.fields != structure.fields) {
                changed.insert(format!("struct:{}", structure.name));
            }
        }
        self.relayout_containers(&mut changed);
        if changed.is_empty() {
            return;
        }
        // Recompiling an inline function changes the code its callers inline, so dependents
        // are re-checked until nothing more changes.
        let mut done: BTreeSet<String> = BTreeSet::new();
        let mut broken_inline: HashMap<String, String> = HashMap::new();
        loop {
            let mut dependents: Vec<(String, Rc<FunctionDef>)> = self
                .env
                .functions
                .iter()
                .filter(|(name, _)| !self.overlay.defined_here.contains_key(*name) && !done.contains(*name))
                .filter_map(|(name, entry)| match &entry.kind {
                    FunctionKind::Defined(def)
                        if entry.invalidated.is_none() && def.uses.iter().any(|used| changed.contains(used)) =>
                    {
                        Some((name.clone(), def.clone()))
                    }
                    _ => None,
                })
                .collect();
            if dependents.is_empty() {
                break;
            }
            dependents.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, def) in dependents {
                done.insert(name.clone());
                self.recheck_dependent(name, &def, cell_label, &mut changed, &mut broken_inline);
            }
        }
    }

    /// Whether the cell redefines, with other fields, a struct that `ty` holds by value
    /// (directly, in arrays, or in the fields of structs it holds).
    fn layout_changes_here(&self, ty: &Ty, depth: usize) -> bool {
        match ty {
            _ if depth > MAX_NESTING => false,
            Ty::Arr(_, element) => self.layout_changes_here(element, depth + 1),
            Ty::Struct(name) => {
                let here = self.overlay.structs.get(&**name);
                let changed = here
                    .is_some_and(|entry| self.env.structs.get(&**name).is_some_and(|old| old.fields != entry.fields));
                let fields = self.lookup_struct(name).and_then(|entry| entry.fields.clone()).unwrap_or_default();
                changed || fields.iter().any(|(_, field)| self.layout_changes_here(field, depth + 1))
            }
            _ => false,
        }
    }

    /// A struct whose layout changed changes the layout of every struct that holds it by value,
    /// and of every global that does: such structs are defined again in this cell (same fields,
    /// new layout), and such globals are made again, zeroed, since their storage no longer fits.
    fn relayout_containers(&mut self, changed: &mut BTreeSet<String>) {
        let mut changed_structs: Vec<(String, Span)> = self
            .cell
            .structs
            .iter()
            .filter(|structure| changed.contains(&format!("struct:{}", structure.name)))
            .map(|structure| (structure.name.clone(), structure.span))
            .collect();
        if changed_structs.is_empty() {
            return;
        }
        let mut env_structs: Vec<(&String, &StructEntry)> = self.env.structs.iter().collect();
        env_structs.sort_by(|a, b| a.0.cmp(b.0));
        loop {
            let mut grown = false;
            for (name, entry) in &env_structs {
                if self.overlay.structs.contains_key(*name) || changed.contains(&format!("struct:{name}")) {
                    continue;
                }
                let fields = entry.fields.clone().unwrap_or_default();
                let cause = changed_structs
                    .iter()
                    .find(|(inner, _)| fields.iter().any(|(_, ty)| holds_by_value(ty, inner)))
                    .cloned();
                if let Some((_, span)) = cause {
                    self.cell.structs.push(StructDef { name: (*name).clone(), fields: entry.fields.clone(), span });
                    changed.insert(format!("struct:{name}"));
                    changed_structs.push(((*name).clone(), span));
                    grown = true;
                }
            }
            if !grown {
                break;
            }
        }
        let mut globals: Vec<(&String, &GlobalEntry)> =
            self.env.globals.iter().filter(|(name, _)| !self.overlay.globals.contains_key(*name)).collect();
        globals.sort_by(|a, b| a.0.cmp(b.0));
        for (name, global) in globals {
            let Some((inner, span)) = changed_structs.iter().find(|(inner, _)| holds_by_value(&global.ty, inner))
            else {
                continue;
            };
            self.cell.warnings.push(Diagnostic::warning(Kind::Type, format!("the global `{name}` holds a `(struct {inner})`, whose layout changed: it is made again, zeroed")).with_label(*span, ""));
            self.cell.globals.push(GlobalDef {
                name: name.clone(),
                ty: global.ty.clone(),
                init: Some(Constant::Zero),
                span: *span,
                space: global.space,
            });
            changed.insert(format!("global:{name}"));
        }
    }

    /// Re-checks one session function after a change it depends on: recompiled if it still
    /// type-checks, invalidated (with a warning at the call sites) otherwise.
    /// `broken_inline` maps the inline functions invalidated so far (`fn:NAME`) to the name
    /// whose redefinition caused it.
    fn recheck_dependent(
        &mut self,
        name: String,
        def: &Rc<FunctionDef>,
        cell_label: &str,
        changed: &mut BTreeSet<String>,
        broken_inline: &mut HashMap<String, String>,
    ) {
        let cause_of = |used: &String| used.split_once(':').map_or(used.as_str(), |(_, name)| name).to_string();
        // A caller of an inline function that was just invalidated holds a copy of a body that
        // no longer type-checks: (the inline function, the root cause).
        let inlined_broken =
            def.uses.iter().find_map(|used| broken_inline.get(used).map(|root| (cause_of(used), root.clone())));
        let errors_before = self.errors.len();
        let rechecked = if inlined_broken.is_some() { None } else { self.check_function(&def.source) };
        let new_errors: Vec<Diagnostic> = self.errors.drain(errors_before..).collect();
        match rechecked {
            Some(function) if new_errors.is_empty() => {
                if function.inline || def.inline {
                    changed.insert(format!("fn:{name}"));
                }
                self.cell.recompiled.push(function);
            }
            _ => {
                let cause = match &inlined_broken {
                    Some((_, root)) => root.clone(),
                    None => changed
                        .iter()
                        .find(|used| def.uses.contains(*used))
                        .map(cause_of)
                        .unwrap_or_else(|| "a definition".to_string()),
                };
                let headline = match &inlined_broken {
                    Some((inlined, _)) => format!("`{name}` inlines `{inlined}`, which the redefinition of `{cause}` invalidated, and is invalidated too"),
                    None => format!("`{name}` no longer type-checks after the redefinition of `{cause}` and is invalidated"),
                };
                let mut warning =
                    Diagnostic::warning(Kind::Type, headline).with_note(format!("redefine `{name}` to use it again"));
                // Point at the call sites that no longer check, the first one primary.
                for (index, error) in new_errors.iter().take(3).enumerate() {
                    if let Some(label) = error.labels.first() {
                        warning = if index == 0 {
                            warning.with_label(label.span, error.message.clone())
                        } else {
                            warning.with_secondary(label.span, error.message.clone())
                        };
                    }
                }
                if new_errors.is_empty() {
                    warning = warning.with_label(def.span, "");
                }
                if def.inline {
                    broken_inline.insert(format!("fn:{name}"), cause.clone());
                    changed.insert(format!("fn:{name}"));
                }
                self.cell.warnings.push(warning);
                self.cell.invalidated.push(Invalidation {
                    name,
                    message: format!("`{cause}` (cell {cell_label})"),
                    span: def.span,
                });
            }
        }
    }
}

/// The body of a session function, if it is defined and valid.
pub(crate) fn defined(env: &Env, name: &str) -> Option<Rc<FunctionDef>> {
    match env.functions.get(name) {
        Some(FunctionEntry { kind: FunctionKind::Defined(def), invalidated: None, .. }) => Some(def.clone()),
        _ => None,
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
            if let ExprKind::Call { callee: Callee::Slot(name) | Callee::Inline(name), .. } = &expr.kind {
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
            if let ExprKind::Call { callee: Callee::Slot(name), .. } = &expr.kind {
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

/// Whether a value of type `ty` contains a `(struct name)` by value (not through a pointer).
fn holds_by_value(ty: &Ty, name: &str) -> bool {
    match ty {
        Ty::Struct(own) => &**own == name,
        Ty::Arr(_, element) => holds_by_value(element, name),
        _ => false,
    }
}

/// The diagnostic for an intrinsic declaration LLVM rejects.
fn intrinsic_error(name: &str, link: &str, signature: &Signature, error: IntrinsicError, span: Span) -> Diagnostic {
    match error {
        IntrinsicError::Unknown => {
            Diagnostic::error(Kind::UnknownName, format!("LLVM has no intrinsic named `{name}`"))
                .with_label(span, "")
                .with_note("names starting with `llvm.` are LLVM intrinsics")
        }
        IntrinsicError::Signature { message, expected_name } => {
            let mut error = type_error(span, format!("the intrinsic `{name}` has no signature `{signature}`"))
                .with_note(format!("LLVM: {message}"));
            if let Some(expected) = expected_name.filter(|expected| expected != link) {
                error = error.with_note(format!("for these types LLVM names it `{expected}`"));
            }
            error
        }
    }
}

/// Statement forms (as opposed to expressions) at the top of a cell or in a body.
fn is_statement_form(form: &Sexp) -> bool {
    match form.list() {
        Some([]) => true,
        Some([first, ..]) if first.list().is_some() => true,
        _ => matches!(
            form.head(),
            Some("declare" | "declare-global" | "if" | "while" | "for" | "ret" | "break" | "continue")
        ),
    }
}

/// A literal checked against a wanted type: the typed-literal rule `(T LIT)`.
pub(crate) fn typed_literal(literal: &Sexp, ty: &Ty) -> Result<Expr, Diagnostic> {
    let span = literal.span;
    let make = |kind| Ok(Expr { kind, ty: ty.clone(), span });
    match (&literal.kind, ty) {
        (SexpKind::Int(value), Ty::Int(bits)) => {
            let (min, max) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
            if *value < min || *value > max {
                return Err(type_error(span, format!("{value} does not fit in `{ty}` ({min} to {max})")));
            }
            make(ExprKind::Int(*value as i64))
        }
        (SexpKind::Int(value), Ty::Bool) if *value == 0 || *value == 1 => make(ExprKind::Bool(*value == 1)),
        (SexpKind::Bool(value), Ty::Bool) => make(ExprKind::Bool(*value)),
        (SexpKind::Int(value), Ty::Float) => make(ExprKind::Float(*value as f32 as f64)),
        (SexpKind::Int(value), Ty::Double) => make(ExprKind::Float(*value as f64)),
        (SexpKind::Float(value), Ty::Float) => {
            if value.is_finite() && (*value as f32).is_infinite() {
                return Err(type_error(
                    span,
                    format!("{value:e} is out of range for `float` (at most {:e} in magnitude)", f32::MAX),
                )
                .with_note("write (double …) for a double"));
            }
            make(ExprKind::Float(*value as f32 as f64))
        }
        (SexpKind::Float(value), Ty::Double) => make(ExprKind::Float(*value)),
        (SexpKind::Float(_), Ty::Int(_)) => Err(type_error(span, format!("a float literal cannot be `{ty}`"))
            .with_note(format!("convert with (fptosi e {ty})"))),
        _ => Err(type_error(span, format!("`{literal}` is not a literal of type `{ty}`"))),
    }
}

// ---------------------------------------------------------------------------------------------
// Function bodies.

pub(crate) struct BodyChecker<'c, 'a> {
    cell: &'c mut CellChecker<'a>,
    pub name: String,
    pub ret: Ty,
    pub top_level: bool,
    pub locals: Vec<Local>,
    scopes: Vec<HashMap<String, usize>>,
    loop_depth: usize,
    pub uses: BTreeSet<String>,
    pub warnings: Vec<Diagnostic>,
    reported_unknown: BTreeSet<String>,
    /// Statements and expressions being checked, outermost first (see `MAX_NESTING`).
    nesting: usize,
    reported_nesting: bool,
    /// The body is a kernel's: host-only constructs are errors at once.
    pub kernel: bool,
    /// What of the body needs the GPU or the host.
    pub placement: Placement,
}

impl<'c, 'a> BodyChecker<'c, 'a> {
    fn new(cell: &'c mut CellChecker<'a>, name: String, ret: Ty, top_level: bool) -> Self {
        BodyChecker {
            cell,
            name,
            ret,
            top_level,
            locals: Vec::new(),
            scopes: vec![HashMap::new()],
            loop_depth: 0,
            uses: BTreeSet::new(),
            warnings: Vec::new(),
            reported_unknown: BTreeSet::new(),
            nesting: 0,
            reported_nesting: false,
            kernel: false,
            placement: Placement::default(),
        }
    }

    pub fn error(&mut self, diagnostic: Diagnostic) {
        self.cell.error(diagnostic);
    }

    pub fn declare_local(&mut self, name: &str, ty: Ty, span: Span) -> Option<usize> {
        let scope = self.scopes.last_mut().expect("a body always has its outermost scope");
        if scope.contains_key(name) {
            self.cell.error(
                Diagnostic::error(Kind::DuplicateName, format!("`{name}` is already declared in this scope"))
                    .with_label(span, "")
                    .with_note("an inner block may shadow it: wrap the code in a compound statement ((…))"),
            );
            return None;
        }
        let index = self.locals.len();
        self.locals.push(Local { name: name.to_string(), ty });
        scope.insert(name.to_string(), index);
        Some(index)
    }

    /// Finds a variable: locals from the innermost scope outwards, then globals.
    pub fn lookup_variable(&mut self, name: &str) -> Option<(Place, Ty)> {
        for scope in self.scopes.iter().rev() {
            if let Some(&index) = scope.get(name) {
                return Some((Place::Local(index), self.locals[index].ty.clone()));
            }
        }
        let global = self.cell.lookup_global(name)?.ty.clone();
        self.uses.insert(format!("global:{name}"));
        Some((Place::Global(name.to_string()), global))
    }

    fn variable(&mut self, name: &str, span: Span) -> Option<(Place, Ty)> {
        let found = self.lookup_variable(name);
        // One report per unknown name and body is enough.
        if found.is_none() && self.reported_unknown.insert(name.to_string()) {
            let mut error =
                Diagnostic::error(Kind::UnknownName, format!("no variable named `{name}`")).with_label(span, "");
            if self.cell.lookup_function(name).is_some() {
                error = error.with_note(format!("`{name}` is a function: call it with (call {name} …)"));
            }
            self.error(error);
        }
        found
    }

    fn with_scope<T>(&mut self, body: impl FnOnce(&mut Self) -> T) -> T {
        self.scopes.push(HashMap::new());
        let result = body(self);
        self.scopes.pop();
        result
    }

    /// Brilisp assignment: `name` at `ty` names the same variable as before when the type is
    /// the same, and a new one otherwise. Brilisp bodies have one scope.
    pub fn bind_variable(&mut self, name: &str, ty: Ty) -> usize {
        if let Some(&index) = self.scopes.first().and_then(|scope| scope.get(name)) {
            if self.locals.get(index).is_some_and(|local| local.ty == ty) {
                return index;
            }
        }
        let index = self.locals.len();
        self.locals.push(Local { name: name.to_string(), ty });
        if let Some(scope) = self.scopes.first_mut() {
            scope.insert(name.to_string(), index);
        }
        index
    }

    /// The field types of a struct (empty for an opaque or unknown one).
    pub fn struct_fields(&mut self, name: &str) -> Vec<Ty> {
        self.uses.insert(format!("struct:{name}"));
        self.cell
            .lookup_struct(name)
            .and_then(|entry| entry.fields.as_ref())
            .map(|fields| fields.iter().map(|(_, ty)| ty.clone()).collect())
            .unwrap_or_default()
    }

    pub fn ty(&mut self, form: &Sexp) -> Option<Ty> {
        let ty = self.cell.parse_ty(form)?;
        if let Ty::Struct(name) = &ty {
            self.uses.insert(format!("struct:{name}"));
        }
        Some(ty)
    }

    /// The statements of a block (function body, loop body), sharing the current scope.
    pub fn check_block_items(&mut self, items: &[Sexp]) -> Vec<Stmt> {
        items.iter().filter_map(|item| self.check_stmt(item)).collect()
    }

    pub fn check_stmt(&mut self, form: &Sexp) -> Option<Stmt> {
        self.nested(form, |this| this.check_stmt_here(form))
    }

    /// Runs `check` one nesting level deeper, or reports that the form nests too deeply.
    fn nested<T>(&mut self, form: &Sexp, check: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        if self.nesting >= MAX_NESTING {
            if !std::mem::replace(&mut self.reported_nesting, true) {
                self.error(
                    Diagnostic::error(Kind::Limit, format!("this form nests more than {MAX_NESTING} levels deep"))
                        .with_label(form.span, "")
                        .with_note("compute parts into variables first"),
                );
            }
            return None;
        }
        self.nesting += 1;
        let result = check(self);
        self.nesting -= 1;
        result
    }

    fn check_stmt_here(&mut self, form: &Sexp) -> Option<Stmt> {
        match form.list() {
            Some([]) => return Some(Stmt::Block(Vec::new())),
            Some(items @ [first, ..]) if first.list().is_some() => {
                return Some(Stmt::Block(self.with_scope(|this| this.check_block_items(items))));
            }
            _ => {}
        }
        let items = form.list().unwrap_or(&[]);
        match form.head() {
            Some("declare") => self.check_declare(form, items, false),
            Some("declare-global") => self.check_declare(form, items, true),
            Some("if") => self.check_if(form, items),
            Some("while") => {
                let Some(cond_form) = items.get(1) else {
                    self.error(syntax(form.span, "a loop is `(while COND STATEMENT…)`"));
                    return None;
                };
                let cond = self.check_condition("while", cond_form);
                self.loop_depth += 1;
                let body = self.with_scope(|this| this.check_block_items(&items[2..]));
                self.loop_depth -= 1;
                Some(Stmt::While(cond?, body))
            }
            Some("for") => self.check_for(form, items),
            Some("ret") => self.check_ret(form, items),
            Some(word @ ("break" | "continue")) => {
                if items.len() != 1 {
                    self.error(arity(form.span, format!("`{word}` takes no operands")));
                    return None;
                }
                if self.loop_depth == 0 {
                    self.error(syntax(form.span, format!("`{word}` is only allowed inside a loop")));
                    return None;
                }
                Some(if word == "break" { Stmt::Break } else { Stmt::Continue })
            }
            _ => self.check_expr(form).map(Stmt::Expr),
        }
    }

    fn check_declare(&mut self, form: &Sexp, items: &[Sexp], global_pointer: bool) -> Option<Stmt> {
        let (Some(name), 3) = (items.get(1).and_then(Sexp::symbol), items.len()) else {
            self.error(syntax(form.span, "a declaration is `(declare NAME TYPE)`"));
            return None;
        };
        let mut ty = self.ty(&items[2])?;
        if global_pointer {
            // cuda-lisp's `declare-global`: a local holding a pointer into global memory.
            match ty {
                Ty::Ptr(pointee, _) => ty = Ty::Ptr(pointee, 1),
                _ => {
                    self.error(type_error(items[2].span, "`declare-global` declares a pointer"));
                    return None;
                }
            }
        }
        if !ty.is_value() {
            self.error(type_error(items[2].span, "a variable cannot be `void`"));
            return None;
        }
        if !self.cell.require_sized(&ty, items[2].span, "a variable")
            || !self.cell.require_size(&ty, items[2].span, "a local variable", MAX_LOCAL_BYTES)
        {
            return None;
        }
        self.declare_local(name, ty, items[1].span).map(Stmt::Declare)
    }

    /// The condition of `statement` (`if`, `while`, `for`): a `bool`, C-Lisp has no truthiness.
    fn check_condition(&mut self, statement: &str, form: &Sexp) -> Option<Expr> {
        let cond = self.check_expr(form)?;
        if cond.ty != Ty::Bool {
            let hint = if cond.ty.is_ptr() {
                "compare explicitly, e.g. (ne p (inttoptr 0 (ptr T)))"
            } else {
                "compare explicitly, e.g. (ne x 0); write #t for an endless loop"
            };
            self.error(
                type_error(form.span, format!("the condition of `{statement}` must be `bool`, found `{}`", cond.ty))
                    .with_note(hint),
            );
            return None;
        }
        Some(cond)
    }

    fn check_if(&mut self, form: &Sexp, items: &[Sexp]) -> Option<Stmt> {
        if !(3..=4).contains(&items.len()) {
            self.error(
                arity(form.span, "`if` is `(if COND THEN [ELSE])`, one statement per branch")
                    .with_note("several statements need a compound: (if c ((call f) (call g)))"),
            );
            return None;
        }
        let cond = self.check_condition("if", &items[1]);
        let then = self.with_scope(|this| this.check_stmt(&items[2]));
        let otherwise = items.get(3).map(|form| self.with_scope(|this| this.check_stmt(form)));
        let otherwise = match otherwise {
            Some(None) => return None,
            Some(Some(stmt)) => Some(Box::new(stmt)),
            None => None,
        };
        Some(Stmt::If(cond?, Box::new(then?), otherwise))
    }

    fn check_for(&mut self, form: &Sexp, items: &[Sexp]) -> Option<Stmt> {
        let header = items.get(1).and_then(Sexp::list);
        let Some([init, cond, step]) = header else {
            self.error(
                syntax(
                    items.get(1).map_or(form.span, |header| header.span),
                    "a `for` header is `(INIT COND STEP)`: exactly three expressions",
                )
                .with_note("for example (for ((set i 0) (lt i n) (set i (add i 1))) …)"),
            );
            return None;
        };
        let optional = |this: &mut Self, form: &Sexp| -> Option<Option<Expr>> {
            if matches!(form.list(), Some([])) {
                Some(None)
            } else {
                this.check_expr(form).map(Some)
            }
        };
        let init = optional(self, init);
        let cond = self.check_condition("for", cond);
        let step = optional(self, step);
        self.loop_depth += 1;
        let body = self.with_scope(|this| this.check_block_items(&items[2..]));
        self.loop_depth -= 1;
        Some(Stmt::For(init?, cond?, step?, body))
    }

    pub fn check_ret(&mut self, form: &Sexp, items: &[Sexp]) -> Option<Stmt> {
        if self.top_level {
            self.error(syntax(form.span, "`ret` is only allowed inside a function"));
            return None;
        }
        match items {
            [_] => {
                if self.ret != Ty::Void {
                    let name = self.name.clone();
                    let ret = self.ret.clone();
                    self.warnings.push(
                        Diagnostic::warning(
                            Kind::Type,
                            format!("`(ret)` in `{name}`, which returns `{ret}`: it returns 0"),
                        )
                        .with_label(form.span, ""),
                    );
                    return Some(Stmt::Ret(Some(Expr { kind: ExprKind::Zero, ty: ret, span: form.span })));
                }
                Some(Stmt::Ret(None))
            }
            [_, value] => {
                let ret = self.ret.clone();
                let value = self.check_expr_expecting(value, &ret)?;
                if self.ret == Ty::Void {
                    self.error(type_error(
                        form.span,
                        format!("`{}` returns `void`, so `ret` takes no value", self.name),
                    ));
                    return None;
                }
                if value.ty != self.ret {
                    self.error(
                        type_error(value.span, format!("`{}` returns `{}`, found `{}`", self.name, self.ret, value.ty))
                            .with_note(cast_note(&value.ty, &self.ret)),
                    );
                    return None;
                }
                Some(Stmt::Ret(Some(value)))
            }
            _ => {
                self.error(arity(form.span, "`ret` takes at most one value"));
                None
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Expressions.

    pub fn check_expr(&mut self, form: &Sexp) -> Option<Expr> {
        self.nested(form, |this| this.check_expr_here(form))
    }

    fn check_expr_here(&mut self, form: &Sexp) -> Option<Expr> {
        let span = form.span;
        match &form.kind {
            SexpKind::Int(value) => {
                let ty = if i32::try_from(*value).is_ok() { INT } else { INT64 };
                match typed_literal(form, &ty) {
                    Ok(expr) => Some(expr),
                    Err(_) => {
                        self.error(type_error(span, format!("integer literal {value} does not fit in `int64`")));
                        None
                    }
                }
            }
            SexpKind::Float(_) => typed_literal(form, &Ty::Float).map_err(|error| self.error(error)).ok(),
            SexpKind::Bool(value) => Some(Expr { kind: ExprKind::Bool(*value), ty: Ty::Bool, span }),
            SexpKind::Str(bytes) => Some(Expr { kind: ExprKind::Str(bytes.clone()), ty: Ty::ptr(Ty::Int(8)), span }),
            SexpKind::Symbol(name) => {
                let (place, ty) = self.variable(name, span)?;
                Some(Expr { kind: ExprKind::Read(place), ty, span })
            }
            SexpKind::Keyword(name) => {
                self.error(syntax(span, format!("the keyword `#:{name}` is only allowed in Rhai call arguments")));
                None
            }
            SexpKind::Quasiquote(_) => {
                self.error(
                    syntax(span, "a backquote left in C-Lisp code")
                        .with_note("C-Lisp code is already quasiquoted; backquotes pass templates to Rhai"),
                );
                None
            }
            SexpKind::Unquote(_) | SexpKind::UnquoteSplicing(_) => {
                self.error(
                    Diagnostic::error(
                        Kind::Macro,
                        "unquotes need the Rhai staging support, which this build does not have yet",
                    )
                    .with_label(span, ""),
                );
                None
            }
            SexpKind::List(items) => self.check_list(form, items),
        }
    }

    fn check_list(&mut self, form: &Sexp, items: &[Sexp]) -> Option<Expr> {
        let span = form.span;
        let Some(head) = items.first() else {
            self.error(syntax(span, "`()` is a statement and has no value"));
            return None;
        };
        let Some(name) = head.symbol() else {
            if head.list().is_some() {
                self.error(syntax(span, "a compound statement has no value"));
            } else {
                self.error(syntax(head.span, format!("`{head}` cannot start a form")));
            }
            return None;
        };
        let operands = &items[1..];
        if let Some(op) = binary_op(name) {
            return self.check_binary(form, name, op, operands);
        }
        if let Some(ty) = scalar_type_name(name) {
            return self.check_typed_literal(form, name, ty, operands);
        }
        if let Some(op) = cast_op(name) {
            return self.check_cast(form, name, op, operands);
        }
        match name {
            "set" => self.check_set(form, operands),
            "not" | "fneg" => self.check_unary(form, name, operands),
            "select" => self.check_select(form, operands),
            "load" => self.check_load(form, operands),
            "store" => self.check_store(form, operands),
            "ptradd" => self.check_ptradd(form, operands),
            "sptradd" => self.check_sptradd(form, operands),
            "aptradd" => self.check_aptradd(form, operands),
            "ptr-to" => self.check_ptr_to(form, operands),
            "alloc" => self.check_alloc(form, operands),
            "extractvalue" => self.check_extract(form, operands),
            "insertvalue" => self.check_insert(form, operands),
            "call" => self.check_call(form, operands),
            "asm" => self.check_asm(form, operands, None),
            "declare" | "declare-global" | "if" | "while" | "for" | "ret" | "break" | "continue" => {
                self.error(syntax(span, format!("`{name}` is a statement and has no value")));
                None
            }
            "ptr" | "arr" | "struct" | "void" | "gpu-buf" | "addrspace" => {
                self.error(
                    syntax(span, format!("`{form}` is a type, not an expression")).with_note(
                        "types appear in declarations, casts and (alloc TYPE N); typed literals are (int64 5)",
                    ),
                );
                None
            }
            "quasiquote" | "unquote" | "unquote-splicing" => {
                self.error(
                    syntax(span, format!("`{name}` left in C-Lisp code"))
                        .with_note("C-Lisp code is already quasiquoted; backquotes pass templates to Rhai"),
                );
                None
            }
            "tid.x" | "tid.y" | "tid.z" | "bid.x" | "bid.y" | "bid.z" | "bdim.x" | "bdim.y" | "bdim.z" | "gdim.x"
            | "gdim.y" | "gdim.z" | "__syncthreads" | "syncthreads" => self.check_gpu_builtin(form, name, operands),
            "gpu-alloc" => self.check_gpu_alloc(form, operands),
            "gpu-free" | "gpu-len" => self.check_gpu_buffer_op(form, name, operands),
            "gpu-copy" => self.check_gpu_copy(form, operands),
            "launch" => self.check_launch(form, operands),
            _ if name.starts_with("define-")
                && define_attributes(name).is_none()
                && !matches!(name, "define-struct" | "define-global" | "define-kernel" | "define-shared") =>
            {
                self.error(syntax(head.span, format!("`{name}` is not a definition form")).with_note("definitions are define, define-inline, define-brilisp, define-inline-brilisp, define-struct, define-global"));
                None
            }
            _ if define_attributes(name).is_some()
                || matches!(
                    name,
                    "define-struct" | "define-global" | "define-kernel" | "define-shared" | "c-lisp" | "cuda-lisp"
                ) =>
            {
                self.error(syntax(span, format!("`{name}` is only allowed at the top level of a cell")));
                None
            }
            _ => {
                let mut error =
                    Diagnostic::error(Kind::UnknownName, format!("`{name}` is not a form, an opcode or a type"))
                        .with_label(head.span, "");
                if self.cell.lookup_function(name).is_some() {
                    error = error.with_note(format!("calls are written (call {name} …)"));
                } else {
                    error = error.with_note("calls are written (call NAME ARG…)");
                }
                self.error(error);
                None
            }
        }
    }

    fn operands(&mut self, form: &Sexp, name: &str, operands: &[Sexp], count: usize) -> Option<Vec<Expr>> {
        if operands.len() != count {
            let noun = if count == 1 { "operand" } else { "operands" };
            self.error(arity(form.span, format!("`{name}` takes {count} {noun}, found {}", operands.len())));
            // Still check the operands to report their errors too.
            for operand in operands {
                self.check_expr(operand);
            }
            return None;
        }
        let checked: Vec<Option<Expr>> = operands.iter().map(|operand| self.check_expr(operand)).collect();
        checked.into_iter().collect()
    }

    fn check_binary(&mut self, form: &Sexp, name: &str, op: BinOp, operands: &[Sexp]) -> Option<Expr> {
        let mut values = self.operands(form, name, operands, 2)?;
        let right = values.pop()?;
        let left = values.pop()?;
        let (lt, rt) = (&left.ty, &right.ty);
        let same = lt == rt;
        let result = match op {
            BinOp::And | BinOp::Or if same && (lt.is_int() || *lt == Ty::Bool) => Some(lt.clone()),
            BinOp::And | BinOp::Or => None,
            BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv if same && lt.is_float() => Some(lt.clone()),
            BinOp::FCmp(_) if same && lt.is_float() => Some(Ty::Bool),
            BinOp::ICmp(IntCmp::Eq | IntCmp::Ne) if same && (lt.is_int() || *lt == Ty::Bool || lt.is_ptr()) => {
                Some(Ty::Bool)
            }
            BinOp::ICmp(IntCmp::Ult | IntCmp::Ugt | IntCmp::Ule | IntCmp::Uge) if same && lt.is_int() => Some(Ty::Bool),
            BinOp::ICmp(IntCmp::Slt | IntCmp::Sgt | IntCmp::Sle | IntCmp::Sge)
                if same && (lt.is_int() || lt.is_ptr()) =>
            {
                Some(Ty::Bool)
            }
            BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FCmp(_) | BinOp::ICmp(_) => None,
            _ if same && lt.is_int() => Some(lt.clone()),
            _ => None,
        };
        let Some(ty) = result else {
            let wanted = match op {
                BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FCmp(_) => "one float type",
                BinOp::And | BinOp::Or => "one integer type, or be `bool`",
                BinOp::ICmp(IntCmp::Eq | IntCmp::Ne) => "one integer, bool or pointer type",
                BinOp::ICmp(IntCmp::Ult | IntCmp::Ugt | IntCmp::Ule | IntCmp::Uge) => "one integer type",
                BinOp::ICmp(_) => "one integer or pointer type",
                _ => "one integer type",
            };
            let mut error =
                type_error(form.span, format!("operands of `{name}` must have {wanted}, found `{lt}` and `{rt}`"));
            if lt.is_float()
                && rt.is_float()
                && !matches!(op, BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FCmp(_))
            {
                let float_name = match name {
                    "add" | "sub" | "mul" | "div" => format!("f{name}"),
                    "eq" | "ne" | "lt" | "gt" | "le" | "ge" => format!("f{name}"),
                    _ => String::new(),
                };
                if !float_name.is_empty() && same {
                    error = error.with_note(format!("for floats use `{float_name}`"));
                }
            } else if lt.is_int()
                && rt.is_int()
                && matches!(op, BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FCmp(_))
                && same
            {
                error = error.with_note(format!("for integers use `{}`", &name[1..]));
            } else if !same && lt.is_value() && rt.is_value() {
                error = error.with_note(cast_note(rt, lt));
            }
            self.error(error);
            return None;
        };
        Some(Expr { kind: ExprKind::Binary(op, Box::new(left), Box::new(right)), ty, span: form.span })
    }

    fn check_unary(&mut self, form: &Sexp, name: &str, operands: &[Sexp]) -> Option<Expr> {
        let value = self.operands(form, name, operands, 1)?.pop()?;
        let ty = value.ty.clone();
        let (ok, kind) = if name == "not" {
            (ty == Ty::Bool || ty.is_int(), ExprKind::Not(Box::new(value)))
        } else {
            (ty.is_float(), ExprKind::FNeg(Box::new(value)))
        };
        if !ok {
            let wanted = if name == "not" { "`bool` or an integer type" } else { "a float type" };
            self.error(type_error(form.span, format!("the operand of `{name}` must be {wanted}, found `{ty}`")));
            return None;
        }
        Some(Expr { kind, ty, span: form.span })
    }

    fn check_typed_literal(&mut self, form: &Sexp, name: &str, ty: Ty, operands: &[Sexp]) -> Option<Expr> {
        let [literal] = operands else {
            self.error(arity(form.span, format!("a typed literal is `({name} LITERAL)`")));
            return None;
        };
        if !matches!(literal.kind, SexpKind::Int(_) | SexpKind::Float(_) | SexpKind::Bool(_)) {
            self.error(
                type_error(literal.span, format!("`({name} …)` takes a literal, not an expression"))
                    .with_note("convert expressions with casts such as (sext e int64) or (sitofp e double)"),
            );
            return None;
        }
        match typed_literal(literal, &ty) {
            Ok(mut expr) => {
                expr.span = form.span;
                Some(expr)
            }
            Err(error) => {
                self.error(error);
                None
            }
        }
    }

    fn check_cast(&mut self, form: &Sexp, name: &str, op: CastOp, operands: &[Sexp]) -> Option<Expr> {
        let [value_form, type_form] = operands else {
            self.error(arity(form.span, format!("a cast is `({name} EXPR TYPE)`")));
            return None;
        };
        let value = self.check_expr(value_form);
        let target = self.ty(type_form)?;
        let value = value?;
        let from = &value.ty;
        let ok = match op {
            CastOp::Sext | CastOp::Zext => from.is_int_or_bool() && target.is_int() && target.bits() >= from.bits(),
            CastOp::Trunc => from.is_int_or_bool() && target.is_int_or_bool() && target.bits() <= from.bits(),
            CastOp::FpExt => *from == Ty::Float && target == Ty::Double,
            CastOp::FpTrunc => *from == Ty::Double && target == Ty::Float,
            CastOp::SiToFp | CastOp::UiToFp => from.is_int() && target.is_float(),
            CastOp::FpToSi | CastOp::FpToUi => from.is_float() && target.is_int(),
            CastOp::PtrToInt => from.is_ptr() && target.is_int(),
            CastOp::IntToPtr => from.is_int() && target.is_ptr(),
            CastOp::Bitcast => match (from, &target) {
                (Ty::Ptr(_, a), Ty::Ptr(_, b)) => a == b,
                (from, to) => {
                    from.is_scalar()
                        && to.is_scalar()
                        && !from.is_ptr()
                        && !to.is_ptr()
                        && from.bits() == to.bits()
                        && *from != Ty::Bool
                }
            },
            CastOp::AddrSpaceCast => matches!((from, &target), (Ty::Ptr(_, a), Ty::Ptr(_, b)) if a != b),
        };
        if !ok {
            self.error(
                type_error(form.span, format!("`{name}` cannot convert `{from}` to `{target}`"))
                    .with_note(cast_rule(op)),
            );
            return None;
        }
        Some(Expr { kind: ExprKind::Cast(op, Box::new(value)), ty: target, span: form.span })
    }

    fn check_set(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [target, value_form] = operands else {
            self.error(arity(form.span, format!("`set` is `(set NAME EXPR)`, found {} operands", operands.len())));
            return None;
        };
        if let Some([name, type_form]) = target.list() {
            return self.check_typed_set(form, name, type_form, value_form);
        }
        let Some(name) = target.symbol() else {
            self.error(
                syntax(target.span, "`set` assigns to a variable name")
                    .with_note("store through pointers with (store PTR VALUE)"),
            );
            self.check_expr(value_form);
            return None;
        };
        let variable = self.variable(name, target.span);
        let value = match &variable {
            Some((_, ty)) => self.check_expr_expecting(value_form, &ty.clone())?,
            None => self.check_expr(value_form)?,
        };
        let (place, ty) = variable?;
        let value = self.assignable(name, &ty, value)?;
        Some(Expr { kind: ExprKind::Set(place, Box::new(value)), ty, span: form.span })
    }

    /// The value of `(set NAME E)` for a variable of type `ty`: equal types, or a pointer that
    /// differs only in address space, cast with a warning.
    fn assignable(&mut self, name: &str, ty: &Ty, value: Expr) -> Option<Expr> {
        match (ty, &value.ty) {
            (a, b) if a == b => Some(value),
            (Ty::Ptr(wanted, a), Ty::Ptr(found, b)) if wanted == found && a != b => {
                self.warnings.push(
                    Diagnostic::warning(
                        Kind::Type,
                        format!("`{name}` is `{ty}`; the assigned pointer is cast from address space {b} to {a}"),
                    )
                    .with_label(value.span, ""),
                );
                let span = value.span;
                Some(Expr { kind: ExprKind::Cast(CastOp::AddrSpaceCast, Box::new(value)), ty: ty.clone(), span })
            }
            _ => {
                self.error(
                    type_error(value.span, format!("`{name}` is `{ty}`, but the value is `{}`", value.ty))
                        .with_note(cast_note(&value.ty, ty)),
                );
                None
            }
        }
    }

    /// `(set (NAME TYPE) E)`, the Brilisp spelling llama.lisp also accepts in C-Lisp bodies
    /// (`(set (tmp void) (asm …))`): TYPE `void` evaluates E and keeps nothing; otherwise NAME
    /// is the visible variable of that type, or a new one in the current block.
    fn check_typed_set(&mut self, form: &Sexp, name_form: &Sexp, type_form: &Sexp, value_form: &Sexp) -> Option<Expr> {
        let Some(name) = name_form.symbol() else {
            self.error(syntax(name_form.span, "`set` assigns to a variable name"));
            return None;
        };
        let ty = self.ty(type_form)?;
        let value = self.check_expr_expecting(value_form, &ty)?;
        if ty == Ty::Void {
            return Some(Expr { ty: Ty::Void, ..value });
        }
        let place = match self.lookup_variable(name) {
            Some((place, existing)) if existing == ty => place,
            Some((Place::Local(index), existing))
                if self.scopes.last().is_some_and(|scope| scope.get(name) == Some(&index)) =>
            {
                self.error(
                    type_error(
                        name_form.span,
                        format!("`{name}` is already a `{existing}` in this block, not a `{ty}`"),
                    )
                    .with_note("use another name, or an inner block"),
                );
                return None;
            }
            _ => Place::Local(self.declare_local(name, ty.clone(), name_form.span)?),
        };
        let value = self.assignable(name, &ty, value)?;
        Some(Expr { kind: ExprKind::Set(place, Box::new(value)), ty, span: form.span })
    }

    /// Checks an expression whose context wants `expected`: only inline assembly written
    /// without its type (`(set x (asm "…" "=r"))`, as llama.lisp's tests do) takes it from there.
    pub fn check_expr_expecting(&mut self, form: &Sexp, expected: &Ty) -> Option<Expr> {
        match form.list() {
            Some([head, template, rest @ ..])
                if head.symbol() == Some("asm") && matches!(template.kind, SexpKind::Str(_)) =>
            {
                let operands: Vec<Sexp> = std::iter::once(template.clone()).chain(rest.iter().cloned()).collect();
                self.check_asm(form, &operands, Some(expected))
            }
            _ => self.check_expr(form),
        }
    }

    fn check_select(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let mut values = self.operands(form, "select", operands, 3)?;
        let otherwise = values.pop()?;
        let then = values.pop()?;
        let cond = values.pop()?;
        if cond.ty != Ty::Bool {
            self.error(type_error(cond.span, format!("the condition of `select` must be `bool`, found `{}`", cond.ty)));
            return None;
        }
        if then.ty != otherwise.ty || !then.ty.is_value() {
            self.error(type_error(
                form.span,
                format!("both values of `select` must have one type, found `{}` and `{}`", then.ty, otherwise.ty),
            ));
            return None;
        }
        let ty = then.ty.clone();
        Some(Expr { kind: ExprKind::Select(Box::new(cond), Box::new(then), Box::new(otherwise)), ty, span: form.span })
    }

    fn pointer_operand(&mut self, name: &str, value: &Expr) -> Option<Ty> {
        match &value.ty {
            Ty::Ptr(pointee, _) => Some((**pointee).clone()),
            other => {
                self.error(type_error(value.span, format!("`{name}` needs a pointer, found `{other}`")));
                None
            }
        }
    }

    fn check_load(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let pointer = self.operands(form, "load", operands, 1)?.pop()?;
        let ty = self.pointer_operand("load", &pointer)?;
        if !ty.is_value() {
            self.error(type_error(form.span, "cannot load through a `(ptr void)`"));
            return None;
        }
        if !self.cell.require_sized(&ty, form.span, "a loaded value") {
            return None;
        }
        Some(Expr { kind: ExprKind::Load(Box::new(pointer)), ty, span: form.span })
    }

    fn check_store(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let mut values = self.operands(form, "store", operands, 2)?;
        let value = values.pop()?;
        let pointer = values.pop()?;
        let ty = self.pointer_operand("store", &pointer)?;
        if ty != value.ty {
            self.error(
                type_error(
                    value.span,
                    format!("`store` through `{}` needs a value of type `{ty}`, found `{}`", pointer.ty, value.ty),
                )
                .with_note(cast_note(&value.ty, &ty)),
            );
            return None;
        }
        Some(Expr { kind: ExprKind::Store(Box::new(pointer), Box::new(value)), ty, span: form.span })
    }

    fn check_index(&mut self, name: &str, index: &Expr) -> bool {
        if !index.ty.is_int() {
            let what = if matches!(name, "alloc" | "gpu-alloc" | "gpu-copy" | "in" | "out" | "inout") {
                "count"
            } else {
                "offset"
            };
            self.error(type_error(
                index.span,
                format!("the {what} of `{name}` must be an integer, found `{}`", index.ty),
            ));
            return false;
        }
        true
    }

    fn check_ptradd(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let mut values = self.operands(form, "ptradd", operands, 2)?;
        let index = values.pop()?;
        let pointer = values.pop()?;
        let pointee = self.pointer_operand("ptradd", &pointer)?;
        if !pointee.is_value() {
            self.error(type_error(pointer.span, "cannot offset a `(ptr void)`"));
            return None;
        }
        if !self.cell.require_sized(&pointee, pointer.span, "the pointee of `ptradd`") {
            return None;
        }
        if !self.check_index("ptradd", &index) {
            return None;
        }
        let ty = pointer.ty.clone();
        Some(Expr { kind: ExprKind::PtrAdd(Box::new(pointer), Box::new(index)), ty, span: form.span })
    }

    fn check_sptradd(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [pointer_form, field] = operands else {
            self.error(arity(form.span, "`sptradd` is `(sptradd POINTER FIELD)`"));
            return None;
        };
        let pointer = self.check_expr(pointer_form)?;
        let Ty::Ptr(pointee, space) = &pointer.ty else {
            self.error(type_error(
                pointer.span,
                format!("`sptradd` needs a pointer to a struct, found `{}`", pointer.ty),
            ));
            return None;
        };
        let Ty::Struct(struct_name) = &**pointee else {
            self.error(type_error(
                pointer.span,
                format!("`sptradd` needs a pointer to a struct, found `{}`", pointer.ty),
            ));
            return None;
        };
        let Some(field_name) = field.symbol() else {
            self.error(syntax(field.span, "`sptradd` takes a field name"));
            return None;
        };
        let fields = self.cell.lookup_struct(struct_name).and_then(|entry| entry.fields.clone());
        let Some(fields) = fields else {
            self.error(type_error(pointer.span, format!("struct `{struct_name}` is opaque: it has no fields")));
            return None;
        };
        let Some(index) = fields.iter().position(|(name, _)| name == field_name) else {
            let names: Vec<&str> = fields.iter().map(|(name, _)| name.as_str()).collect();
            self.error(
                Diagnostic::error(Kind::UnknownName, format!("struct `{struct_name}` has no field `{field_name}`"))
                    .with_label(field.span, "")
                    .with_note(format!("its fields are: {}", names.join(", "))),
            );
            return None;
        };
        let ty = Ty::Ptr(Rc::new(fields[index].1.clone()), *space);
        self.uses.insert(format!("struct:{struct_name}"));
        Some(Expr { kind: ExprKind::FieldPtr(Box::new(pointer), index as u32), ty, span: form.span })
    }

    fn check_aptradd(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [array_form, index_form] = operands else {
            self.error(arity(form.span, format!("`aptradd` takes 2 operands, found {}", operands.len())));
            return None;
        };
        // An array variable is used by address; any other operand must be a pointer to an array.
        let array = match array_form.symbol().and_then(|name| self.lookup_variable(name)) {
            Some((place, ty @ Ty::Arr(..))) => {
                Expr { kind: ExprKind::AddressOf(place), ty: Ty::ptr(ty), span: array_form.span }
            }
            _ => self.check_expr(array_form)?,
        };
        let index = self.check_expr(index_form)?;
        let element = match &array.ty {
            Ty::Ptr(pointee, _) => match &**pointee {
                Ty::Arr(_, element) => Some((**element).clone()),
                _ => None,
            },
            _ => None,
        };
        let Some(element) = element else {
            self.error(type_error(
                array.span,
                format!("`aptradd` needs an array variable or a pointer to an array, found `{}`", array.ty),
            ));
            return None;
        };
        if !self.check_index("aptradd", &index) {
            return None;
        }
        Some(Expr { kind: ExprKind::ElemPtr(Box::new(array), Box::new(index)), ty: Ty::ptr(element), span: form.span })
    }

    fn check_ptr_to(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [target] = operands else {
            self.error(arity(form.span, "`ptr-to` is `(ptr-to NAME)`"));
            return None;
        };
        let Some(name) = target.symbol() else {
            self.error(syntax(target.span, "`ptr-to` takes a variable name"));
            return None;
        };
        let (place, ty) = self.variable(name, target.span)?;
        Some(Expr { kind: ExprKind::AddressOf(place), ty: Ty::ptr(ty), span: form.span })
    }

    fn check_alloc(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [type_form, count_form] = operands else {
            self.error(arity(form.span, "`alloc` is `(alloc TYPE COUNT)`"));
            return None;
        };
        let ty = self.ty(type_form)?;
        let count = self.check_expr(count_form)?;
        if !ty.is_value() {
            self.error(type_error(type_form.span, "cannot allocate `void`"));
            return None;
        }
        if !self.cell.require_sized(&ty, type_form.span, "an allocation") {
            return None;
        }
        if !self.check_index("alloc", &count) {
            return None;
        }
        let kind = if self.top_level {
            ExprKind::SessionAlloc(ty.clone(), Box::new(count))
        } else {
            ExprKind::Alloc(ty.clone(), Box::new(count))
        };
        Some(Expr { kind, ty: Ty::ptr(ty), span: form.span })
    }

    fn field_index(&mut self, form: &Sexp, aggregate: &Ty, index_form: &Sexp) -> Option<(u32, Ty)> {
        let op = form.head().unwrap_or("extractvalue");
        if !matches!(aggregate, Ty::Struct(_) | Ty::Arr(..)) {
            self.error(type_error(form.span, format!("`{op}` needs a struct or array value, found `{aggregate}`")));
            return None;
        }
        let SexpKind::Int(index) = index_form.kind else {
            self.error(
                type_error(
                    index_form.span,
                    format!("the index of `{op}` must be an integer literal, found `{index_form}`"),
                )
                .with_note("fields are numbered from 0; by name, use (sptradd POINTER FIELD)"),
            );
            return None;
        };
        let element = match aggregate {
            Ty::Struct(name) => {
                let fields = self.struct_fields(name);
                usize::try_from(index).ok().and_then(|index| fields.get(index).cloned())
            }
            Ty::Arr(length, element) => (index >= 0 && (index as u64) < *length).then(|| (**element).clone()),
            _ => None,
        };
        match element {
            Some(ty) => Some((index as u32, ty)),
            None => {
                self.error(type_error(index_form.span, format!("index {index} is out of range for `{aggregate}`")));
                None
            }
        }
    }

    fn check_extract(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [aggregate_form, index_form] = operands else {
            self.error(arity(form.span, "`extractvalue` is `(extractvalue VALUE INDEX)`"));
            return None;
        };
        let aggregate = self.check_expr(aggregate_form)?;
        let (index, ty) = self.field_index(form, &aggregate.ty.clone(), index_form)?;
        Some(Expr { kind: ExprKind::Extract(Box::new(aggregate), index), ty, span: form.span })
    }

    fn check_insert(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [aggregate_form, value_form, index_form] = operands else {
            self.error(arity(form.span, "`insertvalue` is `(insertvalue VALUE FIELD-VALUE INDEX)`"));
            return None;
        };
        let aggregate = self.check_expr(aggregate_form)?;
        let value = self.check_expr(value_form)?;
        let (index, field_ty) = self.field_index(form, &aggregate.ty.clone(), index_form)?;
        if value.ty != field_ty {
            self.error(
                type_error(
                    value.span,
                    format!("element {index} of `{}` is `{field_ty}`, found `{}`", aggregate.ty, value.ty),
                )
                .with_note(cast_note(&value.ty, &field_ty)),
            );
            return None;
        }
        let ty = aggregate.ty.clone();
        Some(Expr { kind: ExprKind::Insert(Box::new(aggregate), Box::new(value), index), ty, span: form.span })
    }

    /// Notes a construct that needs the GPU; in top-level code it is an error.
    fn use_device(&mut self, span: Span, what: String) -> bool {
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
    fn use_host(&mut self, span: Span, what: String) -> bool {
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
    fn check_gpu_builtin(&mut self, form: &Sexp, name: &str, operands: &[Sexp]) -> Option<Expr> {
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

    fn check_gpu_alloc(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
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
    fn check_gpu_buffer_op(&mut self, form: &Sexp, name: &str, operands: &[Sexp]) -> Option<Expr> {
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
    fn check_gpu_copy(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let mut values = self.operands(form, "gpu-copy", operands, 3)?;
        if !self.use_host(form.span, "`gpu-copy`".into()) {
            return None;
        }
        let count = values.pop()?;
        let source = values.pop()?;
        let destination = values.pop()?;
        let direction = match (&destination.ty, &source.ty) {
            (Ty::GpuBuf(to), Ty::Ptr(from, 0)) if to == from => CopyDirection::HostToDevice,
            (Ty::Ptr(to, 0), Ty::GpuBuf(from)) if to == from => CopyDirection::DeviceToHost,
            (Ty::GpuBuf(to), Ty::GpuBuf(from)) if to == from => CopyDirection::DeviceToDevice,
            (to, from) => {
                self.error(type_error(form.span, format!("`gpu-copy` copies between a `(gpu-buf T)` and a `(ptr T)` or another `(gpu-buf T)`, found `{to}` ← `{from}`")).with_note("the destination comes first: (gpu-copy DST SRC COUNT)"));
                return None;
            }
        };
        if !self.check_index("gpu-copy", &count) {
            return None;
        }
        Some(Expr {
            kind: ExprKind::GpuCopy(direction, Box::new(destination), Box::new(source), Box::new(count)),
            ty: Ty::Void,
            span: form.span,
        })
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

    fn check_launch(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [kernel_form, grid_form, block_form, arg_forms @ ..] = operands else {
            self.error(arity(form.span, "a launch is `(launch KERNEL (grid X [Y [Z]]) (block X [Y [Z]]) ARG…)`"));
            return None;
        };
        let Some(kernel) = kernel_form.symbol() else {
            self.error(syntax(kernel_form.span, "`launch` takes a kernel's name"));
            return None;
        };
        if !self.use_host(form.span, "`launch`".into()) {
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
            match self.launch_arg(kernel, index, &param_name, param, annotation.as_ref(), arg_form) {
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
        let launch = Launch { kernel: kernel.to_string(), grid, block, args, arg_locals };
        Some(Expr { kind: ExprKind::Launch(Box::new(launch)), ty: Ty::Void, span: form.span })
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

    fn check_call(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let Some((name_form, arg_forms)) = operands.split_first() else {
            self.error(arity(form.span, "`call` needs a function name: (call NAME ARG…)"));
            return None;
        };
        let Some(name) = name_form.symbol() else {
            self.error(syntax(name_form.span, "`call` takes a function name"));
            return None;
        };
        let args: Vec<Option<Expr>> = arg_forms.iter().map(|arg| self.check_expr(arg)).collect();
        let Some(entry) = self.cell.lookup_function(name).cloned() else {
            let mut error = Diagnostic::error(Kind::UnknownName, format!("no function named `{name}`"))
                .with_label(name_form.span, "");
            error = error.with_note(format!("declare C functions first, e.g. (define (({name} int) (x int)))"));
            self.error(error);
            return None;
        };
        if let Some(cause) = &entry.invalidated {
            self.error(type_error(
                name_form.span,
                format!("`{name}` was invalidated by the redefinition of {cause}; redefine `{name}`"),
            ));
            return None;
        }
        if let FunctionKind::Defined(def) = &entry.kind {
            if def.kernel {
                self.error(
                    Diagnostic::error(Kind::Gpu, format!("`{name}` is a kernel: kernels are launched, not called"))
                        .with_label(form.span, "")
                        .with_note(format!("write (launch {name} (grid N) (block N) ARG…)")),
                );
                return None;
            }
            if def.placement.device_only && !self.use_device(form.span, format!("the device function `{name}`")) {
                return None;
            }
        }
        let args: Vec<Expr> = args.into_iter().collect::<Option<_>>()?;
        let signature = entry.signature.clone();
        let fixed = signature.params.len();
        if args.len() < fixed || (!signature.variadic && args.len() != fixed) {
            let expected = if signature.variadic { format!("at least {fixed}") } else { fixed.to_string() };
            self.error(
                arity(
                    form.span,
                    format!(
                        "`{name}` takes {expected} argument{}, found {}",
                        if fixed == 1 { "" } else { "s" },
                        args.len()
                    ),
                )
                .with_note(format!("{name} : {signature}")),
            );
            return None;
        }
        let mut ok = true;
        for (index, arg) in args.iter().enumerate() {
            match signature.params.get(index) {
                Some(param) if *param != arg.ty => {
                    let param_name = entry
                        .param_names
                        .get(index)
                        .filter(|param_name| !param_name.is_empty())
                        .map(|param_name| format!(" (`{param_name}`)"))
                        .unwrap_or_default();
                    let mut error = type_error(
                        arg.span,
                        format!("argument {} of `{name}`{param_name} must be `{param}`, found `{}`", index + 1, arg.ty),
                    );
                    if arg.ty.is_value() {
                        error = error.with_note(cast_note(&arg.ty, param));
                    }
                    self.error(error);
                    ok = false;
                }
                Some(_) => {}
                None => {
                    let allowed = matches!(arg.ty, Ty::Int(32) | Ty::Int(64) | Ty::Double | Ty::Ptr(..));
                    if !allowed {
                        let hint = match arg.ty {
                            Ty::Float => " (widen with (fpext x double))",
                            Ty::Int(_) => " (widen with (sext x int))",
                            Ty::Bool => " (widen with (zext x int))",
                            _ => "",
                        };
                        self.error(type_error(
                            arg.span,
                            format!(
                                "a variadic argument must be `int`, `int64`, `double` or a pointer, found `{}`{hint}",
                                arg.ty
                            ),
                        ));
                        ok = false;
                    }
                }
            }
        }
        if !ok {
            return None;
        }
        let callee = match &entry.kind {
            FunctionKind::Defined(def) if def.inline => {
                self.cell.inline_used.insert(name.to_string());
                Callee::Inline(name.to_string())
            }
            FunctionKind::Defined(_) if name == self.name => Callee::SelfCall,
            FunctionKind::Defined(_) | FunctionKind::Unresolved => Callee::Slot(name.to_string()),
            FunctionKind::External(_) if name.starts_with("llvm.") => {
                Callee::Intrinsic(self.check_intrinsic_call(form, name, &signature, &args)?)
            }
            FunctionKind::External(link) if is_libdevice(name) => {
                if !self.use_device(form.span, format!("libdevice's `{name}`")) {
                    return None;
                }
                Callee::Direct(link.clone())
            }
            FunctionKind::External(link) => {
                if !self.use_host(form.span, format!("the C function `{name}`")) {
                    return None;
                }
                Callee::Direct(link.clone())
            }
        };
        if matches!(entry.kind, FunctionKind::Unresolved)
            && !self.use_host(form.span, format!("`{name}`, which nothing defines"))
        {
            return None;
        }
        self.uses.insert(format!("fn:{name}"));
        let ty = signature.ret.clone();
        Some(Expr { kind: ExprKind::Call { callee, name: name.to_string(), signature, args }, ty, span: form.span })
    }

    /// An intrinsic call: its LLVM name, after checking what LLVM requires of the call site.
    fn check_intrinsic_call(
        &mut self,
        form: &Sexp,
        name: &str,
        signature: &Signature,
        args: &[Expr],
    ) -> Option<String> {
        let link = intrinsic_name(name);
        let nvvm = link.starts_with("llvm.nvvm.");
        if nvvm {
            if !self.use_device(form.span, format!("the device intrinsic `{name}`")) {
                return None;
            }
        } else if device_only_intrinsic(name) {
            self.error(
                Diagnostic::error(
                    Kind::Gpu,
                    format!("`{name}` is an intrinsic of another target: Quasi compiles for x86-64 and NVPTX"),
                )
                .with_label(form.span, ""),
            );
            return None;
        }
        if !nvvm && !host_intrinsic(&link) {
            self.error(type_error(form.span, format!("`{name}` is not among the intrinsics Quasi compiles for the CPU")).with_note("host code may call the math, bit, overflow, memory and trap intrinsics; LLVM cannot lower the others everywhere"));
            return None;
        }
        let facts = match self.cell.intrinsic_facts(&link, signature) {
            Ok(facts) => facts,
            Err(error) => {
                self.error(intrinsic_error(name, &link, signature, error, form.span));
                return None;
            }
        };
        let mut ok = true;
        for index in facts.immediate {
            if let Some(arg) = args
                .get(index)
                .filter(|arg| !matches!(arg.kind, ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_)))
            {
                self.error(type_error(
                    arg.span,
                    format!("argument {} of `{name}` must be a literal: LLVM requires a constant there", index + 1),
                ));
                ok = false;
            }
        }
        ok.then_some(link)
    }

    /// `(asm TYPE "TEMPLATE" "CONSTRAINTS" ARG…)`, or without TYPE where the context gives it
    /// (`expected`) or there are no outputs.
    fn check_asm(&mut self, form: &Sexp, operands: &[Sexp], expected: Option<&Ty>) -> Option<Expr> {
        let shape = "inline assembly is `(asm TYPE \"TEMPLATE\" \"CONSTRAINTS\" ARG…)`";
        let typed = operands.first().is_some_and(|first| !matches!(first.kind, SexpKind::Str(_)));
        let rest = if typed { operands.get(1..).unwrap_or(&[]) } else { operands };
        let [template, constraints, arg_forms @ ..] = rest else {
            self.error(arity(form.span, shape));
            return None;
        };
        let declared = if typed { Some(self.ty(&operands[0])?) } else { None };
        let template_span = template.span;
        let (SexpKind::Str(template), SexpKind::Str(constraints_bytes)) = (&template.kind, &constraints.kind) else {
            self.error(syntax(form.span, shape).with_note("the template and the constraints are string literals"));
            return None;
        };
        let constraints_text = String::from_utf8_lossy(constraints_bytes).to_string();
        // LLVM reports malformed templates and constraints with a fatal error that would end
        // the process, so they are checked here.
        let operands = match parse_asm_constraints(&constraints_text) {
            Ok(operands) => operands,
            Err(message) => {
                self.error(
                    syntax(
                        constraints.span,
                        format!("bad inline assembly constraints `{constraints_text}`: {message}"),
                    )
                    .with_note(ASM_CONSTRAINTS_NOTE),
                );
                return None;
            }
        };
        let template_text = String::from_utf8_lossy(template).to_string();
        if let Err(message) = check_asm_template(&template_text, operands.len()) {
            self.error(
                syntax(template_span, format!("bad inline assembly template: {message}"))
                    .with_note("operands are $0, $1…, or ${0:k} with a modifier; $$ is a dollar sign"),
            );
            return None;
        }
        if nvptx_constraints(&operands) && !self.use_device(form.span, "PTX inline assembly".into()) {
            return None;
        }
        let outputs = operands.iter().filter(|operand| operand.output).count();
        let inputs = operands.len() - outputs;
        let ty = match (declared, expected) {
            (Some(ty), _) => ty,
            (None, _) if outputs == 0 => Ty::Void,
            (None, Some(expected)) => expected.clone(),
            (None, None) => {
                self.error(
                    type_error(form.span, "this inline assembly has outputs, so it needs its result type")
                        .with_note("write (asm TYPE \"TEMPLATE\" \"CONSTRAINTS\" ARG…)"),
                );
                return None;
            }
        };
        let expected_outputs = match &ty {
            Ty::Void => 0,
            Ty::Struct(name) => match self.cell.lookup_struct(name).and_then(|entry| entry.fields.as_ref()) {
                Some(fields) => fields.len(),
                None => {
                    self.error(type_error(
                        form.span,
                        format!("struct `{name}` is opaque: it cannot hold assembly outputs"),
                    ));
                    return None;
                }
            },
            Ty::Arr(..) => {
                self.error(
                    type_error(form.span, format!("inline assembly cannot produce `{ty}`"))
                        .with_note("outputs are scalars, or a struct with one field per output"),
                );
                return None;
            }
            _ => 1,
        };
        if outputs != expected_outputs {
            self.error(
                type_error(
                    constraints.span,
                    format!(
                        "inline assembly of type `{ty}` needs {expected_outputs} output constraint{}, found {outputs}",
                        if expected_outputs == 1 { "" } else { "s" }
                    ),
                )
                .with_note("outputs are the constraints starting with `=`; `void` has none, a struct one per field"),
            );
            return None;
        }
        let args: Vec<Option<Expr>> = arg_forms.iter().map(|arg| self.check_expr(arg)).collect();
        let args: Vec<Expr> = args.into_iter().collect::<Option<_>>()?;
        if args.len() != inputs {
            self.error(arity(
                form.span,
                format!(
                    "the constraints `{constraints_text}` have {inputs} input{}, but {} argument{} given",
                    if inputs == 1 { "" } else { "s" },
                    args.len(),
                    if args.len() == 1 { " is" } else { "s are" }
                ),
            ));
            return None;
        }
        if let Some(arg) = args.iter().find(|arg| !arg.ty.is_scalar()) {
            self.error(
                type_error(arg.span, format!("an inline assembly input must be a scalar, found `{}`", arg.ty))
                    .with_note("pass fields with (extractvalue s k)"),
            );
            return None;
        }
        let output_types: Vec<Ty> = match &ty {
            Ty::Void => Vec::new(),
            Ty::Struct(name) => self.struct_fields(name),
            other => vec![other.clone()],
        };
        for (operand, arg) in operands.iter().filter(|operand| !operand.output).zip(&args) {
            if operand.immediate && !matches!(arg.kind, ExprKind::Int(_)) {
                self.error(type_error(arg.span, format!("the constraint `{}` needs an integer literal", operand.text)));
                return None;
            }
            if let Some(tied) = operand.tied {
                match output_types.get(tied) {
                    Some(output) if *output == arg.ty => {}
                    Some(output) => {
                        self.error(
                            type_error(
                                arg.span,
                                format!("this input is tied to output {tied}, of type `{output}`, but is `{}`", arg.ty),
                            )
                            .with_note(cast_note(&arg.ty, output)),
                        );
                        return None;
                    }
                    None => {
                        self.error(syntax(
                            constraints.span,
                            format!(
                                "the constraint `{}` ties an input to output {tied}, which does not exist",
                                operand.text
                            ),
                        ));
                        return None;
                    }
                }
            }
        }
        self.cell.cell.asm_spans.push(form.span);
        Some(Expr {
            kind: ExprKind::Asm { template: template_text, constraints: constraints_text, args },
            ty,
            span: form.span,
        })
    }
}

const ASM_CONSTRAINTS_NOTE: &str =
    "outputs (=r, =x, ={eax}…) come first, then inputs (r, x, m, i, g, a tied 0…), then clobbers (~{memory}…)";

/// One operand constraint of inline assembly.
#[derive(Debug, PartialEq)]
struct AsmOperand {
    text: String,
    output: bool,
    /// The output a tied input (`0`) shares its register with.
    tied: Option<usize>,
    /// Only immediates fit (`i`, `n`): the argument must be a literal.
    immediate: bool,
}

/// Reads an x86-64 constraint string (`=r,=x,r,0,~{memory}`) into its operands, accepting a
/// conservative subset of what LLVM knows: outputs, then inputs, then clobbers.
fn parse_asm_constraints(text: &str) -> Result<Vec<AsmOperand>, String> {
    let mut operands: Vec<AsmOperand> = Vec::new();
    let mut seen_input = false;
    let mut seen_clobber = false;
    if text.trim().is_empty() {
        return Ok(operands);
    }
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            return Err("an empty constraint".into());
        }
        if let Some(clobber) = part.strip_prefix('~') {
            if !(clobber.starts_with('{') && clobber.ends_with('}') && clobber.len() > 2) {
                return Err(format!("the clobber `{part}` is not `~{{NAME}}`"));
            }
            seen_clobber = true;
            continue;
        }
        if seen_clobber {
            return Err(format!("`{part}` comes after a clobber"));
        }
        if part.starts_with('+') {
            return Err(
                "`+` (read-write) constraints are not supported; use an output `=r` and a tied input `0`".into()
            );
        }
        let output = part.starts_with('=');
        let codes = part.trim_start_matches('=').trim_start_matches('&');
        if output && seen_input {
            return Err(format!("the output `{part}` comes after an input"));
        }
        if !output && part.contains('&') {
            return Err(format!("`&` (early clobber) belongs to outputs, not `{part}`"));
        }
        seen_input |= !output;
        // `l` `f` `h` are NVPTX's 64-bit, float and 16-bit registers (see `nvptx_constraints`).
        let allowed = if output { "rqQRabcdSDAxlfh" } else { "rqQRabcdSDAxmoginXlfh" };
        let mut tied = None;
        let mut letters = String::new();
        let mut rest = codes;
        if rest.is_empty() {
            return Err(format!("`{part}` names no register class"));
        }
        while let Some(character) = rest.chars().next() {
            if character == '{' {
                let end = rest.find('}').ok_or_else(|| format!("`{part}` has an unclosed register name"))?;
                let register = &rest[1..end];
                if register.is_empty() || !register.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(format!("`{part}` has a bad register name"));
                }
                rest = &rest[end + 1..];
            } else if character.is_ascii_digit() && !output {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                let index: usize = digits.parse().map_err(|_| format!("`{part}` ties to a bad operand number"))?;
                tied = Some(index);
                rest = &rest[digits.len()..];
            } else if allowed.contains(character) {
                letters.push(character);
                rest = &rest[1..];
            } else {
                return Err(format!(
                    "`{character}` in `{part}` is not a constraint Quasi accepts for {}",
                    if output { "outputs" } else { "inputs" }
                ));
            }
        }
        let immediate =
            !letters.is_empty() && letters.chars().all(|letter| matches!(letter, 'i' | 'n')) && tied.is_none();
        operands.push(AsmOperand { text: part.to_string(), output, tied, immediate });
    }
    Ok(operands)
}

/// Whether constraints name NVPTX's own register classes (`l`, `f`, `h`): such assembly is PTX,
/// so the code is device code (x86-64 has no such classes, and LLVM would abort on them).
fn nvptx_constraints(operands: &[AsmOperand]) -> bool {
    operands.iter().any(|operand| {
        // Letters inside `{…}` name registers (`{bl}`), not classes.
        let mut depth = 0;
        operand.text.chars().any(|letter| {
            match letter {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0 && matches!(letter, 'l' | 'f' | 'h')
        })
    })
}

/// Checks the `$` references of an inline assembly template against the operand count.
fn check_asm_template(template: &str, operands: usize) -> Result<(), String> {
    let bytes = template.as_bytes();
    let mut position = 0;
    let operand = |digits: &[u8]| -> Result<(), String> {
        let text = std::str::from_utf8(digits).unwrap_or("");
        match text.parse::<usize>() {
            Ok(index) if index < operands => Ok(()),
            Ok(index) => Err(format!(
                "`${index}` refers to operand {index}, but there {} {operands}",
                if operands == 1 { "is" } else { "are" }
            )),
            Err(_) => Err("`$` must be followed by an operand number, `{`, or `$`".into()),
        }
    };
    while position < bytes.len() {
        if bytes[position] != b'$' {
            position += 1;
            continue;
        }
        position += 1;
        match bytes.get(position) {
            Some(b'$' | b'(' | b'|' | b')') => position += 1,
            Some(b'{') => {
                let close = template[position..].find('}').ok_or("`${` is never closed")? + position;
                let inner = &template[position + 1..close];
                let (number, modifier) = inner.split_once(':').unwrap_or((inner, ""));
                operand(number.as_bytes())?;
                let single_letter = modifier.len() == 1 && modifier.chars().all(|c| c.is_ascii_alphabetic());
                if !modifier.is_empty() && !single_letter {
                    return Err(format!("`${{{inner}}}` has a bad modifier"));
                }
                position = close + 1;
            }
            _ => {
                let start = position;
                while bytes.get(position).is_some_and(u8::is_ascii_digit) {
                    position += 1;
                }
                operand(&bytes[start..position])?;
            }
        }
    }
    Ok(())
}

fn binary_op(name: &str) -> Option<BinOp> {
    Some(match name {
        "add" => BinOp::Add,
        "sub" => BinOp::Sub,
        "mul" => BinOp::Mul,
        "div" => BinOp::Div,
        "rem" => BinOp::Rem,
        "udiv" => BinOp::UDiv,
        "urem" => BinOp::URem,
        "shl" => BinOp::Shl,
        "lshr" => BinOp::LShr,
        "ashr" => BinOp::AShr,
        "xor" => BinOp::Xor,
        "and" => BinOp::And,
        "or" => BinOp::Or,
        "fadd" => BinOp::FAdd,
        "fsub" => BinOp::FSub,
        "fmul" => BinOp::FMul,
        "fdiv" => BinOp::FDiv,
        "eq" => BinOp::ICmp(IntCmp::Eq),
        "ne" => BinOp::ICmp(IntCmp::Ne),
        "lt" => BinOp::ICmp(IntCmp::Slt),
        "gt" => BinOp::ICmp(IntCmp::Sgt),
        "le" => BinOp::ICmp(IntCmp::Sle),
        "ge" => BinOp::ICmp(IntCmp::Sge),
        "ult" => BinOp::ICmp(IntCmp::Ult),
        "ugt" => BinOp::ICmp(IntCmp::Ugt),
        "ule" => BinOp::ICmp(IntCmp::Ule),
        "uge" => BinOp::ICmp(IntCmp::Uge),
        "feq" => BinOp::FCmp(FloatCmp::Oeq),
        "fne" => BinOp::FCmp(FloatCmp::One),
        "flt" => BinOp::FCmp(FloatCmp::Olt),
        "fgt" => BinOp::FCmp(FloatCmp::Ogt),
        "fle" => BinOp::FCmp(FloatCmp::Ole),
        "fge" => BinOp::FCmp(FloatCmp::Oge),
        _ => return None,
    })
}

pub(crate) fn cast_op(name: &str) -> Option<CastOp> {
    Some(match name {
        "sext" => CastOp::Sext,
        "zext" => CastOp::Zext,
        "trunc" => CastOp::Trunc,
        "fpext" => CastOp::FpExt,
        "fptrunc" => CastOp::FpTrunc,
        "sitofp" => CastOp::SiToFp,
        "uitofp" => CastOp::UiToFp,
        "fptosi" => CastOp::FpToSi,
        "fptoui" => CastOp::FpToUi,
        "ptrtoint" => CastOp::PtrToInt,
        "inttoptr" => CastOp::IntToPtr,
        "bitcast" => CastOp::Bitcast,
        "addrspacecast" => CastOp::AddrSpaceCast,
        _ => return None,
    })
}

fn cast_rule(op: CastOp) -> &'static str {
    match op {
        CastOp::Sext | CastOp::Zext => "sext/zext widen an integer (or bool) to a wider or equal integer type",
        CastOp::Trunc => "trunc narrows an integer to a narrower or equal integer type (or bool)",
        CastOp::FpExt => "fpext converts float to double",
        CastOp::FpTrunc => "fptrunc converts double to float",
        CastOp::SiToFp | CastOp::UiToFp => "sitofp/uitofp convert an integer to float or double",
        CastOp::FpToSi | CastOp::FpToUi => "fptosi/fptoui convert float or double to an integer",
        CastOp::PtrToInt => "ptrtoint converts a pointer to an integer",
        CastOp::IntToPtr => "inttoptr converts an integer to a pointer",
        CastOp::Bitcast => "bitcast reinterprets a value of the same size: integer <-> float, or pointer <-> pointer in one address space",
        CastOp::AddrSpaceCast => "addrspacecast converts a pointer to another address space",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{expect, Expect};

    fn constraints(input: &str, expected: Expect) {
        let actual = match parse_asm_constraints(input) {
            Ok(operands) => operands
                .iter()
                .map(|operand| {
                    format!(
                        "{}{}{}{}",
                        operand.text,
                        if operand.output { " out" } else { " in" },
                        operand.tied.map(|tied| format!(" tied {tied}")).unwrap_or_default(),
                        if operand.immediate { " imm" } else { "" }
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(message) => format!("error: {message}"),
        };
        expected.assert_eq(&actual);
    }

    #[test]
    fn asm_constraints() {
        constraints("", expect![[""]]);
        constraints("=r,=x,r,0,i,~{memory}", expect![["=r out; =x out; r in; 0 in tied 0; i in imm"]]);
        constraints("={eax},&r", expect![["error: `&` (early clobber) belongs to outputs, not `&r`"]]);
        constraints("=&r,{ecx}", expect![["=&r out; {ecx} in"]]);
        constraints("r,=r", expect![["error: the output `=r` comes after an input"]]);
        constraints("=r,~{cc},r", expect![["error: `r` comes after a clobber"]]);
        constraints(
            "+r",
            expect![["error: `+` (read-write) constraints are not supported; use an output `=r` and a tied input `0`"]],
        );
        constraints("=Z", expect![["error: `Z` in `=Z` is not a constraint Quasi accepts for outputs"]]);
        constraints("=m", expect![["error: `m` in `=m` is not a constraint Quasi accepts for outputs"]]);
        constraints("=r,", expect![["error: an empty constraint"]]);
        constraints("~memory", expect![["error: the clobber `~memory` is not `~{NAME}`"]]);
        constraints("={eax", expect![["error: `={eax` has an unclosed register name"]]);
        constraints("=", expect![["error: `=` names no register class"]]);
    }

    fn template(input: &str, operands: usize, expected: Expect) {
        let actual = match check_asm_template(input, operands) {
            Ok(()) => "ok".to_string(),
            Err(message) => message,
        };
        expected.assert_eq(&actual);
    }

    #[test]
    fn asm_templates() {
        template("movl $$42, $0", 1, expect![["ok"]]);
        template("movl ${1:k}, $0; $(nop$)", 2, expect![["ok"]]);
        template("movl $5, $0", 2, expect![["`$5` refers to operand 5, but there are 2"]]);
        template("movl $x, $0", 1, expect![["`$` must be followed by an operand number, `{`, or `$`"]]);
        template("ends with $", 1, expect![["`$` must be followed by an operand number, `{`, or `$`"]]);
        template("${0", 1, expect![["`${` is never closed"]]);
        template("${:uid}", 1, expect![["`$` must be followed by an operand number, `{`, or `$`"]]);
        template("${0:kk}", 1, expect![["`${0:kk}` has a bad modifier"]]);
    }

    #[test]
    fn cast_notes_name_the_conversion() {
        assert_eq!(
            cast_note(&Ty::Int(32), &Ty::Int(64)),
            "C-Lisp converts only with explicit casts, e.g. (sext e int64)"
        );
        assert_eq!(
            cast_note(&Ty::Float, &Ty::Double),
            "C-Lisp converts only with explicit casts, e.g. (fpext e double)"
        );
        assert_eq!(
            cast_note(&Ty::Bool, &Ty::Float),
            "C-Lisp converts only with explicit casts, and none converts these types"
        );
    }
}
