//! Header: `(include "stdio.h" …)` — C headers parsed by libclang (`parse`) become C-Lisp
//! declarations, `define-struct`s and Rhai constants (docs/language.md §9), as if written in the cell.
//!
//! Types map as §9 says: 8/16/32/64-bit integers → `int8 int16 int int64` (unsigned too, with a
//! note), `_Bool` → `bool`, `float`, `double`, `T *` → `(ptr T)`, `void *` and function pointers →
//! `(ptr int8)`, arrays → `(arr N T)`, variadic → `...`. What has no equivalent (`long double`,
//! unions, bit-fields, structs by value in a call, `__int128`) is left out with a warning that
//! names the header line, or is `error[ffi]` when it was asked for by name; a struct field of such
//! a type is declared as bytes at its C offset, so the struct keeps its C layout.

mod parse;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;

use crate::diagnostics::{Diagnostic, Kind};
use crate::helper::HelperEnd;
use crate::reader::{Sexp, SexpKind};
use crate::source::Span;

use parse::{CType, ConstantValue, Header, ParseError, Place, Record};

/// A name asked for in `(functions …)`, `(structs …)` or `(typedefs …)`, where it was written.
#[derive(Clone, Debug)]
pub(crate) struct Named {
    pub name: String,
    pub span: Span,
}

/// An `(include …)` form, or the Rhai `include(…)` call, read.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub headers: Vec<String>,
    /// `None`: not restricted (everything, when no list is given at all).
    pub functions: Option<Vec<Named>>,
    pub structs: Option<Vec<Named>>,
    pub typedefs: Option<Vec<Named>>,
    pub flags: Vec<String>,
    /// The form or unquote, where generated declarations point.
    pub span: Span,
}

/// A Rhai constant an include defines: a type form (typedefs) or a number.
#[derive(Clone, Debug)]
pub(crate) enum ConstantForm {
    Type(Sexp),
    Int(i64),
    Float(f64),
    /// A C `double`: a Rhai `double` value, which unquotes as `(double X)`.
    Double(f64),
}

/// What an include adds to the cell.
#[derive(Debug)]
pub(crate) struct Included {
    pub forms: Vec<Sexp>,
    pub constants: Vec<(String, ConstantForm)>,
    pub warnings: Vec<Diagnostic>,
    /// The functions and structs it declares, whose one-line reports fold into `summary`.
    pub names: HashSet<String>,
    pub summary: String,
    /// What an unrestricted include left out (its headers' names, then a line per item), for
    /// `:skipped`; its warning is one line.
    pub skipped: Option<(String, Vec<String>)>,
}

type Failure = Box<Diagnostic>;

fn ffi_error(span: Span, message: impl Into<String>) -> Failure {
    Box::new(Diagnostic::error(Kind::Ffi, message).with_label(span, ""))
}

impl Request {
    /// Reads `(include "HEADER"… [(functions F…)] [(structs S…)] [(typedefs T…)] [(flags "-I…"…)])`.
    pub(crate) fn from_form(form: &Sexp) -> Result<Request, Failure> {
        let items = form.list().unwrap_or_default();
        let mut request = Request {
            headers: Vec::new(),
            functions: None,
            structs: None,
            typedefs: None,
            flags: Vec::new(),
            span: form.span,
        };
        for item in items.iter().skip(1) {
            match &item.kind {
                SexpKind::Str(bytes) if !request.has_lists() && request.flags.is_empty() => {
                    request.headers.push(String::from_utf8_lossy(bytes).into_owned())
                }
                SexpKind::List(parts) => {
                    let names = || -> Result<Vec<Named>, Failure> {
                        parts[1..]
                            .iter()
                            .map(|part| match &part.kind {
                                SexpKind::Symbol(name) => Ok(Named { name: name.to_string(), span: part.span }),
                                SexpKind::Str(bytes) => {
                                    Ok(Named { name: String::from_utf8_lossy(bytes).into_owned(), span: part.span })
                                }
                                _ => Err(ffi_error(part.span, "a name of the header is a symbol")),
                            })
                            .collect()
                    };
                    match item.head() {
                        Some("functions") => request.functions = Some(names()?),
                        Some("structs") => request.structs = Some(names()?),
                        Some("typedefs") => request.typedefs = Some(names()?),
                        Some("flags") => {
                            for part in &parts[1..] {
                                match &part.kind {
                                    SexpKind::Str(bytes) => {
                                        request.flags.push(String::from_utf8_lossy(bytes).into_owned())
                                    }
                                    _ => {
                                        return Err(ffi_error(part.span, "a flag is a string, e.g. \"-I/opt/include\""))
                                    }
                                }
                            }
                        }
                        _ => {
                            return Err(ffi_error(
                                item.span,
                                "expected `(functions …)`, `(structs …)`, `(typedefs …)` or `(flags …)`",
                            ))
                        }
                    }
                }
                _ => return Err(Box::new(
                    Diagnostic::error(Kind::Ffi, "`include` takes header names (strings), then optional lists")
                        .with_label(item.span, "")
                        .with_note(
                            "(include \"HEADER\"… [(functions F…)] [(structs S…)] [(typedefs T…)] [(flags \"-I…\"…)])",
                        ),
                )),
            }
        }
        if request.headers.is_empty() {
            return Err(ffi_error(form.span, "`include` needs a header, e.g. (include \"stdio.h\")"));
        }
        Ok(request)
    }

    fn has_lists(&self) -> bool {
        self.functions.is_some() || self.structs.is_some() || self.typedefs.is_some()
    }

    fn unrestricted(&self) -> bool {
        !self.has_lists()
    }

    fn header_names(&self) -> String {
        self.headers.join(", ")
    }
}

/// Parses the request's headers (or takes them from the cache) and translates what it asks
/// for. `defined`: the session's functions with a body, which an unrestricted include leaves
/// alone (a named one is declared, and checking reports a conflict).
pub(crate) fn include(
    request: &Request,
    defined: &HashSet<String>,
    interrupt: &AtomicBool,
) -> Result<Included, Failure> {
    if let Some(header) = request.headers.iter().find(|header| header.is_empty() || header.contains(['"', '\n', '\0']))
    {
        return Err(ffi_error(request.span, format!("`{}` is not a header name", header.escape_debug())));
    }
    // A device or a pipe would be read forever.
    if let Some(header) = request.headers.iter().find(|header| {
        let path = std::path::Path::new(header.as_str());
        path.exists() && !path.is_file()
    }) {
        return Err(ffi_error(request.span, format!("`{header}` is not a regular file")));
    }
    // QUASI_INCLUDE_PATH's directories are searched after the form's own `-I` flags.
    let flags: Vec<String> =
        request.flags.iter().cloned().chain(include_path().iter().map(|directory| format!("-I{directory}"))).collect();
    let header =
        parse::parse(&request.headers, &flags, interrupt).map_err(|error| parse_failure(request, &flags, error))?;
    let mut translator = Translator::new(&header, request);
    translator.run(defined)?;
    let summary = translator.summary();
    let Translator { forms, constants, warnings, names, skipped, .. } = translator;
    let skipped = (!skipped.is_empty()).then(|| (request.header_names(), skipped));
    Ok(Included { forms, constants, warnings, names, summary, skipped })
}

/// The folders QUASI_INCLUDE_PATH names (colon-separated), searched after an include's own
/// `-I` flags, and offered by completion inside `(include "…`.
pub(crate) fn include_path() -> Vec<String> {
    let variable = std::env::var("QUASI_INCLUDE_PATH").unwrap_or_default();
    variable.split(':').filter(|directory| !directory.is_empty()).map(str::to_string).collect()
}

/// The diagnostic of a failed parse; `flags` are those the parse was given.
fn parse_failure(request: &Request, flags: &[String], error: ParseError) -> Failure {
    match error {
        ParseError::Unavailable(message) => Box::new(
            Diagnostic::error(Kind::Ffi, format!("libclang could not be loaded: {message}"))
                .with_label(request.span, "")
                .with_note("`include` needs libclang 19 (Debian: apt install libclang1-19)"),
        ),
        ParseError::NotFound { header } => {
            let mut searched = vec!["the current directory".to_string()];
            searched.extend(flags.iter().filter_map(|flag| flag.strip_prefix("-I")).map(str::to_string));
            searched.extend(system_include_directories());
            Box::new(
                Diagnostic::error(Kind::Ffi, format!("header `{header}` not found"))
                    .with_label(request.span, "")
                    .with_note(format!("searched: {}", searched.join(", ")))
                    .with_note("add a directory with (flags \"-I/path/to/dir\")"),
            )
        }
        ParseError::Interrupted => Box::new(
            Diagnostic::error(
                Kind::Interrupted,
                format!("interrupted while libclang parsed {}", request.header_names()),
            )
            .with_label(request.span, "")
            .with_note("the parse ran in a process of its own, which was stopped; the session is as it was"),
        ),
        ParseError::Ended { end, errors } => {
            let why = match end {
                HelperEnd::Signal(libc::SIGXCPU | libc::SIGKILL) => {
                    format!(
                        "libclang ran past {} s of processor time parsing {}",
                        parse::PARSE_SECONDS,
                        request.header_names()
                    )
                }
                _ if errors.contains("out of memory")
                    || errors.contains("bad_alloc")
                    || end == HelperEnd::Signal(libc::SIGABRT) =>
                {
                    format!(
                        "libclang ran out of memory ({} GiB) parsing {}",
                        parse::PARSE_MEMORY >> 30,
                        request.header_names()
                    )
                }
                _ => format!("libclang's process ended with {end} parsing {}", request.header_names()),
            };
            let mut diagnostic = Diagnostic::error(Kind::Limit, why).with_label(request.span, "").with_note(
                "headers are parsed in a process of their own, bounded in memory and time; the session is as it was",
            );
            if let Some(line) = errors.lines().rev().find(|line| !line.trim().is_empty()) {
                diagnostic = diagnostic.with_note(format!("libclang said: {}", line.trim()));
            }
            Box::new(diagnostic)
        }
        ParseError::Errors(errors) => {
            let mut diagnostic = Diagnostic::error(Kind::Ffi, format!("C errors in {}", request.header_names()))
                .with_label(request.span, "");
            for (message, place) in errors.iter().take(8) {
                diagnostic = diagnostic.with_note(match place {
                    Some(place) => format!("{place}: {message}"),
                    None => message.clone(),
                });
            }
            if errors.len() > 8 {
                diagnostic = diagnostic.with_note(format!("… and {} more", errors.len() - 8));
            }
            Box::new(diagnostic)
        }
    }
}

/// The directories clang searches for `<…>` headers on this machine, for a not-found note.
fn system_include_directories() -> Vec<String> {
    let mut directories = Vec::new();
    if let Some(prefix) = option_env!("LLVM_SYS_191_PREFIX") {
        if let Ok(entries) = std::fs::read_dir(format!("{prefix}/lib/clang")) {
            for entry in entries.flatten() {
                directories.push(entry.path().join("include").display().to_string());
            }
        }
    }
    for directory in ["/usr/local/include", "/usr/include/x86_64-linux-gnu", "/usr/include"] {
        if std::path::Path::new(directory).is_dir() {
            directories.push(directory.to_string());
        }
    }
    directories
}

/// Where a type appears, which decides what it may be.
#[derive(Clone, Copy, PartialEq)]
enum Position {
    Param,
    Return,
    Field,
    Typedef,
}

/// A struct field as declared: its form and alignment.
struct Member {
    form: Sexp,
    align: u64,
}

struct Translator<'h> {
    header: &'h Header,
    request: &'h Request,
    span: Span,
    forms: Vec<Sexp>,
    constants: Vec<(String, ConstantForm)>,
    warnings: Vec<Diagnostic>,
    names: HashSet<String>,
    /// Structs declared so far (by record key), to their C-Lisp names.
    structs: HashMap<String, String>,
    /// Those of them declared opaque.
    opaque: HashSet<String>,
    /// Left out: what and why.
    skipped: Vec<String>,
    /// Whether an unsigned C integer was declared (the summary then says how C-Lisp sees it).
    unsigned: bool,
    function_count: usize,
    struct_count: usize,
}

impl<'h> Translator<'h> {
    fn new(header: &'h Header, request: &'h Request) -> Translator<'h> {
        Translator {
            header,
            request,
            span: request.span,
            forms: Vec::new(),
            constants: Vec::new(),
            warnings: Vec::new(),
            names: HashSet::new(),
            structs: HashMap::new(),
            opaque: HashSet::new(),
            skipped: Vec::new(),
            unsigned: false,
            function_count: 0,
            struct_count: 0,
        }
    }

    fn run(&mut self, defined: &HashSet<String>) -> Result<(), Failure> {
        self.structs()?;
        self.functions(defined)?;
        self.constants()?;
        self.warn_skipped();
        Ok(())
    }

    /// The structs asked for, or all the named ones.
    fn structs(&mut self) -> Result<(), Failure> {
        if let Some(named) = &self.request.structs {
            for Named { name, span } in named {
                let key = self.record_named(name).ok_or_else(|| self.not_declared(*span, "struct", name))?;
                self.span = *span;
                if let Err(reason) = self.declare_struct(&key, true) {
                    let record = &self.header.records[&key];
                    return Err(self.no_equivalent(*span, &format!("`{}`", record.spelling), &reason, &record.place));
                }
            }
            self.span = self.request.span;
        } else if self.request.unrestricted() {
            for key in &self.header.record_order {
                let record = &self.header.records[key];
                if !record.union && record.name.is_some() {
                    let _ = self.declare_struct(key, false);
                }
            }
        }
        Ok(())
    }

    /// The functions asked for, or all but those the session defines.
    fn functions(&mut self, defined: &HashSet<String>) -> Result<(), Failure> {
        if let Some(named) = &self.request.functions {
            for Named { name, span } in named {
                let function = self
                    .header
                    .functions
                    .iter()
                    .find(|function| &function.name == name)
                    .ok_or_else(|| self.not_declared(*span, "function", name))?;
                self.span = *span;
                let form = self
                    .function(function)
                    .map_err(|reason| self.no_equivalent(*span, &format!("`{name}`"), &reason, &function.place))?;
                self.push_function(name, form);
            }
            self.span = self.request.span;
        } else if self.request.unrestricted() {
            for function in &self.header.functions {
                if defined.contains(&function.name) {
                    continue;
                }
                match self.function(function) {
                    Ok(form) => self.push_function(&function.name, form),
                    Err(reason) => self.skip(&function.name, &reason, &function.place),
                }
            }
        }
        Ok(())
    }

    /// The typedefs and constants asked for (by one list), or all.
    fn constants(&mut self) -> Result<(), Failure> {
        if let Some(named) = &self.request.typedefs {
            for Named { name, span } in named {
                self.span = *span;
                if let Some((_, ty, place)) = self.header.typedefs.iter().find(|(typedef, _, _)| typedef == name) {
                    let form = self
                        .type_form(ty, Position::Typedef)
                        .map_err(|reason| self.no_equivalent(*span, &format!("`{name}`"), &reason, place))?;
                    self.constants.push((name.clone(), ConstantForm::Type(form)));
                } else if let Some(constant) = self.header.constants.iter().find(|constant| &constant.name == name) {
                    self.constants.push((name.clone(), constant_form(&constant.value)));
                } else {
                    return Err(self.not_declared(*span, "typedef or constant", name));
                }
            }
            self.span = self.request.span;
        } else if self.request.unrestricted() {
            for (name, ty, place) in &self.header.typedefs {
                match self.type_form(ty, Position::Typedef) {
                    Ok(form) => self.constants.push((name.clone(), ConstantForm::Type(form))),
                    Err(reason) => self.skip(name, &reason, place),
                }
            }
            for constant in &self.header.constants {
                self.constants.push((constant.name.clone(), constant_form(&constant.value)));
            }
        }
        Ok(())
    }

    /// One warning, one line, for everything left out of an unrestricted include: standard
    /// headers leave out a hundred or more of glibc's internals, which no one wants listed every
    /// time. `:skipped` lists them.
    fn warn_skipped(&mut self) {
        let count = self.skipped.len();
        if count == 0 {
            return;
        }
        let internal =
            self.skipped.iter().filter(|line| line.starts_with("`_") || line.starts_with("`struct _")).count();
        let internal = match internal {
            0 => String::new(),
            all if all == count => " (all internal, named `_…`)".to_string(),
            some => format!(" ({some} of them internal, named `_…`)"),
        };
        self.warnings.push(Diagnostic::warning(
            Kind::Ffi,
            format!(
                "{count} declaration{} of {} {} no C-Lisp equivalent{internal}: left out, or as bytes in a struct; `:skipped` lists {}",
                if count == 1 { "" } else { "s" },
                self.request.header_names(),
                if count == 1 { "has" } else { "have" },
                if count == 1 { "it" } else { "them" },
            ),
        ));
    }

    fn summary(&self) -> String {
        let (functions, structs) = (self.function_count, self.struct_count);
        let plural = |count: usize, word: &str| format!("{count} {word}{}", if count == 1 { "" } else { "s" });
        let mut text = format!(
            "include {}: {}, {}, {}",
            self.request.header_names(),
            plural(functions, "function"),
            plural(structs, "struct"),
            plural(self.constants.len(), "Rhai constant"),
        );
        if self.unsigned {
            text.push_str("\nnote: unsigned C integers are declared as the C-Lisp integers of their width (use udiv, urem, ult… for unsigned arithmetic)");
        }
        text
    }

    fn not_declared(&self, span: Span, what: &str, name: &str) -> Failure {
        ffi_error(span, format!("{} declares no {what} `{name}`", self.request.header_names()))
    }

    fn no_equivalent(&self, span: Span, what: &str, reason: &str, place: &Option<Place>) -> Failure {
        let mut diagnostic = Diagnostic::error(Kind::Ffi, format!("{what} cannot be declared in C-Lisp: {reason}"))
            .with_label(span, "")
            .with_note("nothing was declared for it; C-Lisp has no equivalent of that C type");
        if let Some(place) = place {
            diagnostic = diagnostic.with_note(format!("declared at {place}"));
        }
        Box::new(diagnostic)
    }

    /// A declaration C-Lisp could not give as C has it: one line of the include's warning when
    /// everything was included, else a warning of its own.
    fn report(&mut self, name: &str, what: &str, place: &Option<Place>) {
        if self.request.unrestricted() {
            self.skip(name, what, place);
            return;
        }
        let mut warning = Diagnostic::warning(Kind::Ffi, format!("`{name}`: {what}")).with_label(self.span, "");
        if let Some(place) = place {
            warning = warning.with_note(format!("declared at {place}"));
        }
        self.warnings.push(warning);
    }

    fn skip(&mut self, name: &str, reason: &str, place: &Option<Place>) {
        self.skipped.push(match place {
            Some(place) => format!("`{name}` ({place}): {reason}"),
            None => format!("`{name}`: {reason}"),
        });
    }

    fn push_function(&mut self, name: &str, form: Sexp) {
        self.names.insert(name.to_string());
        self.function_count += 1;
        self.forms.push(form);
    }

    fn record_named(&self, name: &str) -> Option<String> {
        let name = name.strip_prefix("struct ").unwrap_or(name);
        self.header.record_order.iter().find(|key| self.header.records[*key].name.as_deref() == Some(name)).cloned()
    }

    // Forms.

    fn symbol(&self, name: &str) -> Sexp {
        Sexp { kind: SexpKind::Symbol(name.into()), span: self.span }
    }

    fn list(&self, items: Vec<Sexp>) -> Sexp {
        Sexp { kind: SexpKind::List(items), span: self.span }
    }

    fn int(&self, value: u64) -> Sexp {
        Sexp { kind: SexpKind::Int(value as i128), span: self.span }
    }

    /// `(define ((NAME RET) (P T)… [...]))`.
    fn function(&mut self, function: &parse::Function) -> Result<Sexp, String> {
        let ret = self.type_form(&function.ret, Position::Return).map_err(|reason| format!("it returns {reason}"))?;
        let mut prototype = vec![self.list(vec![self.symbol(&function.name), ret])];
        for (index, (name, ty)) in function.params.iter().enumerate() {
            let ty =
                self.type_form(ty, Position::Param).map_err(|reason| format!("parameter {} is {reason}", index + 1))?;
            let name =
                name.clone().filter(|name| crate::reader::is_symbol(name)).unwrap_or_else(|| format!("arg-{index}"));
            prototype.push(self.list(vec![self.symbol(&name), ty]));
        }
        if function.variadic {
            if function.params.is_empty() {
                return Err("variadic without a fixed parameter".into());
            }
            prototype.push(self.symbol("..."));
        }
        Ok(self.list(vec![self.symbol("define"), self.list(prototype)]))
    }

    /// A C type as a C-Lisp type form, or why it has none (`long double`, "a union"…).
    fn type_form(&mut self, ty: &CType, position: Position) -> Result<Sexp, String> {
        match ty {
            CType::Void if matches!(position, Position::Return | Position::Typedef) => Ok(self.symbol("void")),
            CType::Void => Err("`void`".into()),
            CType::Bool => Ok(self.symbol("bool")),
            CType::Int { bytes, signed } => {
                let name = match bytes {
                    1 => "int8",
                    2 => "int16",
                    4 => "int",
                    8 => "int64",
                    _ => return Err(format!("a {}-byte integer", bytes)),
                };
                if !signed {
                    self.unsigned = true;
                }
                Ok(self.symbol(name))
            }
            CType::Float => Ok(self.symbol("float")),
            CType::Double => Ok(self.symbol("double")),
            CType::FunctionPointer => Ok(self.pointer(self.symbol("int8"))),
            CType::Pointer(pointee) => {
                let inner = match &**pointee {
                    CType::Record(key) => match self.declare_struct(key, false) {
                        Ok(name) => self.list(vec![self.symbol("struct"), self.symbol(&name)]),
                        Err(_) => self.symbol("int8"),
                    },
                    CType::Void | CType::Other(_) => self.symbol("int8"),
                    other => self.type_form(other, Position::Field).unwrap_or_else(|_| self.symbol("int8")),
                };
                Ok(self.pointer(inner))
            }
            CType::Array(length, element) if position == Position::Field || position == Position::Typedef => {
                let element = self.type_form(element, Position::Field)?;
                Ok(self.list(vec![self.symbol("arr"), self.int(*length), element]))
            }
            // C passes an array parameter as a pointer to its first element.
            CType::Array(_, element) if position == Position::Param => {
                let pointer = CType::Pointer(element.clone());
                self.type_form(&pointer, position)
            }
            CType::Array(..) => Err("an array by value".into()),
            CType::Record(key) => {
                let record = &self.header.records[key];
                if record.union {
                    return Err(if record.name.is_some() {
                        format!("`{}`, a union", record.spelling)
                    } else {
                        "an anonymous union".to_string()
                    });
                }
                if matches!(position, Position::Param | Position::Return) {
                    return Err(format!("`{}` by value (pass a pointer)", record.spelling));
                }
                let complete = position == Position::Field;
                let name =
                    self.declare_struct(key, complete).map_err(|reason| format!("`{}` ({reason})", record.spelling))?;
                Ok(self.list(vec![self.symbol("struct"), self.symbol(&name)]))
            }
            CType::Other(spelling) => Err(format!("`{spelling}`")),
        }
    }

    fn pointer(&self, inner: Sexp) -> Sexp {
        self.list(vec![self.symbol("ptr"), inner])
    }

    /// Declares a struct and what it needs, once, and gives its C-Lisp name; opaque when C-Lisp
    /// cannot give its layout, unless `complete` (a by-value use) asks for the fields. Why not,
    /// for a union, an anonymous struct, or such an incomplete one.
    fn declare_struct(&mut self, key: &str, complete: bool) -> Result<String, String> {
        let header = self.header;
        let record: &Record = header.records.get(key).ok_or("an unknown struct")?;
        if record.union {
            return Err("it is a union".into());
        }
        let name = record.name.clone().filter(|name| crate::reader::is_symbol(name)).ok_or("an anonymous struct")?;
        if let Some(declared) = self.structs.get(key) {
            if complete && self.opaque.contains(key) {
                return Err("it has no C-Lisp layout".into());
            }
            return Ok(declared.clone());
        }
        // Known before its fields are, so a field may point back to it.
        self.structs.insert(key.to_string(), name.clone());
        let members = match &record.fields {
            Some(fields) => self.members(record, fields).map_err(|reason| format!("it has no C-Lisp layout: {reason}")),
            None => Err("it is incomplete in the header".into()),
        };
        let mut form = vec![self.symbol("define-struct"), self.symbol(&name)];
        match members {
            Ok(members) => form.extend(members),
            Err(reason) if complete => {
                self.structs.remove(key);
                return Err(reason);
            }
            Err(reason) => {
                if record.fields.is_some() {
                    let line = format!("{reason}; declared opaque");
                    self.report(&name, &line, &record.place);
                }
                self.opaque.insert(key.to_string());
            }
        }
        self.names.insert(format!("struct {name}"));
        self.struct_count += 1;
        let form = self.list(form);
        self.forms.push(form);
        Ok(name)
    }

    /// A struct's fields with C's offsets: a field C-Lisp cannot type (a union, a bit-field,
    /// `long double`…) becomes bytes of its size at its offset, with a warning.
    fn members(&mut self, record: &Record, fields: &[parse::Field]) -> Result<Vec<Sexp>, String> {
        let mut members: Vec<Member> = Vec::new();
        let mut cursor = 0u64;
        let mut replaced = Vec::new();
        let mut pads = 0;
        let mut index = 0;
        while index < fields.len() {
            let field = &fields[index];
            index += 1;
            if field.offset < cursor || (field.size == 0 && !field.bit_field) {
                continue;
            }
            let name = if field.name.is_empty() || !crate::reader::is_symbol(&field.name) {
                format!("anonymous-{index}")
            } else {
                field.name.clone()
            };
            let typed = if field.bit_field {
                Err("bit-fields".to_string())
            } else {
                self.type_form(&field.ty, Position::Field)
            };
            let (form, size, align) = match typed {
                Ok(form) => {
                    let (size, align) = self.layout(&field.ty);
                    (form, size, align)
                }
                Err(reason) => {
                    // Bytes up to the next field that starts past this one (bit-fields share).
                    let end = fields[index..]
                        .iter()
                        .map(|next| next.offset)
                        .find(|offset| *offset > field.offset)
                        .unwrap_or(record.size)
                        .min(if field.bit_field { u64::MAX } else { field.offset + field.size });
                    let size = end.saturating_sub(field.offset);
                    // Words of the C type's alignment, so the struct keeps C's alignment too.
                    let align = if field.bit_field { 1 } else { field.align };
                    let word = [8, 4, 2].into_iter().find(|word| *word <= align && size % word == 0).unwrap_or(1);
                    let form = self.words(size / word, word);
                    replaced.push(format!("`{name}` ({reason}) as {form}"));
                    (form, size, word)
                }
            };
            let aligned = align_up(cursor, align);
            if aligned > field.offset {
                return Err(format!("field `{name}` would be at offset {aligned}, C puts it at {}", field.offset));
            }
            if aligned < field.offset {
                pads += 1;
                members.push(self.padding(pads, field.offset - cursor));
            }
            cursor = field.offset + size;
            members.push(Member { form: self.list(vec![self.symbol(&name), form]), align });
        }
        let align = members.iter().map(|member| member.align).max().unwrap_or(1);
        if align != record.align.max(1) {
            return Err(format!("C aligns it to {} bytes, its C-Lisp fields to {align}", record.align));
        }
        if align_up(cursor, align) < record.size {
            let gap = record.size - cursor;
            members.push(self.padding(pads + 1, gap));
        }
        for field in replaced {
            let line = format!("field {field}");
            self.report(&record.spelling, &line, &record.place);
        }
        Ok(members.into_iter().map(|member| member.form).collect())
    }

    /// `(padding-N (arr GAP int8))`: bytes C leaves where C-Lisp's layout would not.
    fn padding(&self, number: usize, gap: u64) -> Member {
        Member { form: self.list(vec![self.symbol(&format!("padding-{number}")), self.bytes(gap)]), align: 1 }
    }

    fn bytes(&self, size: u64) -> Sexp {
        self.words(size, 1)
    }

    /// `(arr COUNT intN)`, N being 8 × `word`.
    fn words(&self, count: u64, word: u64) -> Sexp {
        let element = match word {
            8 => "int64",
            4 => "int",
            2 => "int16",
            _ => "int8",
        };
        self.list(vec![self.symbol("arr"), self.int(count), self.symbol(element)])
    }

    /// Size and alignment of a C type that `type_form` accepted as a field.
    fn layout(&self, ty: &CType) -> (u64, u64) {
        match ty {
            CType::Bool => (1, 1),
            CType::Int { bytes, .. } => (u64::from(*bytes), u64::from(*bytes)),
            CType::Float => (4, 4),
            CType::Double | CType::Pointer(_) | CType::FunctionPointer => (8, 8),
            CType::Array(length, element) => {
                let (size, align) = self.layout(element);
                (size * length, align)
            }
            CType::Record(key) => {
                self.header.records.get(key).map_or((0, 1), |record| (record.size, record.align.max(1)))
            }
            CType::Void | CType::Other(_) => (0, 1),
        }
    }
}

fn align_up(offset: u64, align: u64) -> u64 {
    offset.div_ceil(align.max(1)) * align.max(1)
}

fn constant_form(value: &ConstantValue) -> ConstantForm {
    match value {
        ConstantValue::Int(value) => ConstantForm::Int(*value),
        ConstantValue::Float(value) => ConstantForm::Float(*value),
        ConstantValue::Double(value) => ConstantForm::Double(*value),
    }
}
