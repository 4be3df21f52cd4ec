//! Parsing C headers with libclang into plain data (`Header`): functions, records, typedefs,
//! enum constants and `#define` constants, each with the header line that declared it.
//!
//! libclang parses in a helper process (`helper`, job `include`), never in the session's: a
//! header can make it take all memory (macros that expand exponentially), loop for long or
//! crash, and the helper is bounded in memory (`PARSE_MEMORY`) and processor time
//! (`PARSE_SECONDS`), and killed by an interrupt. It sends back the parse as JSON. Parsed
//! headers are cached in the session's process by headers, flags and the modification times of
//! every file the parse read.
//!
//! Invariant: no libclang type leaves the helper; what it sends back is plain data.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::helper::{self, HelperEnd, HelperError};

use clang::{
    diagnostic::Severity, source::SourceLocation, Clang, Entity, EntityKind, EvaluationResult, Index, StorageClass,
    TranslationUnit, Type, TypeKind, Unsaved,
};

/// Where a declaration is: a header file and line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Place {
    pub file: PathBuf,
    pub line: u32,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", shown(&self.file), self.line)
    }
}

/// A path as the user would write it: relative to the current directory when inside it.
pub(crate) fn shown(path: &std::path::Path) -> String {
    let relative =
        std::env::current_dir().ok().and_then(|directory| path.strip_prefix(directory).ok().map(PathBuf::from));
    relative.unwrap_or_else(|| path.to_path_buf()).display().to_string()
}

/// A C type, as far as C-Lisp cares.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum CType {
    Void,
    Bool,
    Int {
        bytes: u8,
        signed: bool,
    },
    Float,
    Double,
    Pointer(Box<CType>),
    FunctionPointer,
    Array(u64, Box<CType>),
    /// A struct or union, by its key in `Header::records`.
    Record(String),
    /// A type with no C-Lisp equivalent, by its C spelling (`long double`).
    Other(String),
}

/// A struct or union.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Record {
    /// Its C-Lisp name: the tag, or the typedef that names an anonymous one.
    pub name: Option<String>,
    /// `struct tm`, `union sigval`…
    pub spelling: String,
    pub union: bool,
    /// `None` when incomplete.
    pub fields: Option<Vec<Field>>,
    pub size: u64,
    pub align: u64,
    pub place: Option<Place>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Field {
    /// Empty for an anonymous member.
    pub name: String,
    pub ty: CType,
    pub offset: u64,
    pub size: u64,
    pub align: u64,
    pub bit_field: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Function {
    pub name: String,
    pub params: Vec<(Option<String>, CType)>,
    pub ret: CType,
    pub variadic: bool,
    pub place: Option<Place>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum ConstantValue {
    Int(i64),
    /// Sent as its bits: JSON has no NaN or infinity (math.h's `NAN`, `INFINITY`).
    Float(#[serde(with = "float_bits")] f64),
    /// A C `double` (`M_PI`): a `double` in C-Lisp too, not a `float` literal.
    Double(#[serde(with = "float_bits")] f64),
}

/// An `f64` as its IEEE-754 bits, through serde.
mod float_bits {
    pub fn serialize<S: serde::Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.to_bits())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        <u64 as serde::Deserialize>::deserialize(deserializer).map(f64::from_bits)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Constant {
    pub name: String,
    pub value: ConstantValue,
}

/// What a set of headers declares, in header order.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Header {
    pub functions: Vec<Function>,
    pub records: HashMap<String, Record>,
    /// Record keys in the order they were declared.
    pub record_order: Vec<String>,
    pub typedefs: Vec<(String, CType, Option<Place>)>,
    pub constants: Vec<Constant>,
    /// Every file the parse read, with its modification time: the cache's key.
    files: Vec<(PathBuf, i64)>,
}

/// Why a parse failed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum ParseError {
    /// libclang could not be loaded.
    Unavailable(String),
    /// A header was not found.
    NotFound { header: String },
    /// C errors, with where they are.
    Errors(Vec<(String, Option<Place>)>),
    /// The session was interrupted: the parse was stopped.
    Interrupted,
    /// The parser's process ended without an answer: out of memory or processor time (past
    /// `PARSE_MEMORY` or `PARSE_SECONDS`), or a crash; how, and what it wrote.
    Ended { end: HelperEnd, errors: String },
}

struct Worker<'c> {
    index: Index<'c>,
}

/// The cache key: headers, flags and the current directory (where `"x.h"` and relative `-I`
/// directories are looked for); the value also records the files' times.
type Cache = HashMap<(Vec<String>, Vec<String>, PathBuf), Arc<Header>>;

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The helper job that parses headers (`parse_in_helper`).
const INCLUDE: &str = "include";

/// The most memory a parse may take (its helper's address space, the binary included).
pub(crate) const PARSE_MEMORY: u64 = 2 << 30;
/// The most processor time a parse may take.
pub(crate) const PARSE_SECONDS: u64 = 120;
/// The largest parse a helper may send back (as JSON).
const PARSE_ANSWER: usize = 512 << 20;

helper::helper_job!(INCLUDE, parse_in_helper);

/// What a parse is asked: headers and flags.
#[derive(Serialize, Deserialize)]
struct Job {
    headers: Vec<String>,
    flags: Vec<String>,
}

/// In the helper: parses the job's headers with libclang and answers the result as JSON.
fn parse_in_helper(argument: &std::ffi::CStr) -> i32 {
    helper::answer_with(|| {
        let parsed = serde_json::from_slice::<Job>(argument.to_bytes())
            .map_err(|error| ParseError::Unavailable(format!("a parse request that is not one: {error}")))
            .and_then(|job| {
                // Clang parses on the calling thread and wants more than a main thread may have.
                let parse = std::thread::Builder::new()
                    .stack_size(64 << 20)
                    .spawn(move || parse_here(&job.headers, &job.flags))
                    .map_err(|error| ParseError::Unavailable(error.to_string()))?;
                parse.join().map_err(|_| ParseError::Unavailable("the parse panicked (a bug in Quasi)".into()))?
            });
        serde_json::to_vec(&parsed).unwrap_or_default()
    })
}

/// Loads libclang and parses, in this process.
fn parse_here(headers: &[String], flags: &[String]) -> Result<Header, ParseError> {
    // libclang installs crash-recovery signal handlers unless told not to. The library is
    // looked for in the LLVM that Quasi was built against first (clang-sys searches many
    // places otherwise, which costs 100 ms).
    std::env::set_var("LIBCLANG_DISABLE_CRASH_RECOVERY", "1");
    if std::env::var_os("LIBCLANG_PATH").is_none() {
        if let Some(prefix) = option_env!("LLVM_SYS_191_PREFIX") {
            std::env::set_var("LIBCLANG_PATH", format!("{prefix}/lib"));
        }
    }
    let clang = Clang::new().map_err(ParseError::Unavailable)?;
    let worker = Worker { index: Index::new(&clang, false, false) };
    let mut flags = flags.to_vec();
    if !flags.iter().any(|flag| flag.starts_with("-resource-dir")) {
        if let Some(directory) = clang_sys::get_library().and_then(|library| resource_dir(library.path())) {
            flags.push(format!("-resource-dir={}", directory.display()));
        }
    }
    worker.parse(headers, &flags)
}

/// The builtin headers (stddef.h, stdarg.h…) of the libclang at `library`: `clang/N` beside
/// it. libclang finds them itself only where its build put them (Debian: /usr/lib/llvm-19),
/// so a libclang copied elsewhere, with LIBCLANG_PATH pointing at it, failed every include of
/// a system header with "'stddef.h' file not found".
fn resource_dir(library: &std::path::Path) -> Option<PathBuf> {
    let versions = std::fs::read_dir(library.parent()?.join("clang")).ok()?;
    let mut found: Vec<PathBuf> =
        versions.flatten().map(|entry| entry.path()).filter(|path| path.join("include/stddef.h").is_file()).collect();
    found.sort();
    found.pop()
}

/// Parses `headers` (as `#include "…"` lines) with `flags` in a helper process, or takes the
/// cached parse if no file it read has changed since.
pub(crate) fn parse(headers: &[String], flags: &[String], interrupt: &AtomicBool) -> Result<Arc<Header>, ParseError> {
    let key = (headers.to_vec(), flags.to_vec(), main_file());
    if let Some(header) = cache().lock().ok().and_then(|cache| cache.get(&key).cloned()) {
        if header.files.iter().all(|(path, time)| modified(path) == Some(*time)) {
            return Ok(header);
        }
    }
    let job = serde_json::to_string(&Job { headers: headers.to_vec(), flags: flags.to_vec() })
        .map_err(|error| ParseError::Unavailable(error.to_string()))?;
    let limits = helper::Limits { memory: Some(PARSE_MEMORY), cpu_seconds: Some(PARSE_SECONDS), answer: PARSE_ANSWER };
    let answer = match helper::run(INCLUDE, &job, limits, interrupt) {
        Ok(answer) => answer,
        Err(HelperError::Interrupted) => return Err(ParseError::Interrupted),
        Err(HelperError::Start) => return Err(ParseError::Unavailable("the parser's process did not start".into())),
        Err(HelperError::Ended { end, errors }) => return Err(ParseError::Ended { end, errors }),
    };
    let parsed: Result<Header, ParseError> = serde_json::from_slice(&answer)
        .map_err(|error| ParseError::Unavailable(format!("the parser's answer was not read: {error}")))?;
    let header = Arc::new(parsed?);
    if let Ok(mut cache) = cache().lock() {
        cache.insert(key, header.clone());
    }
    Ok(header)
}

/// A file's modification time in seconds, as libclang reports it.
fn modified(path: &std::path::Path) -> Option<i64> {
    let time = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(time.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs() as i64)
}

/// The unsaved main file's path: in the current directory, so `#include "x.h"` finds x.h there.
fn main_file() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")).join("quasi-include.c")
}

fn place(location: Option<SourceLocation<'_>>) -> Option<Place> {
    let location = location?.get_expansion_location();
    Some(Place { file: location.file?.get_path(), line: location.line })
}

impl Worker<'_> {
    fn parse(&self, headers: &[String], flags: &[String]) -> Result<Header, ParseError> {
        let main = main_file();
        let includes: String = headers.iter().map(|header| format!("#include \"{header}\"\n")).collect();
        let mut arguments: Vec<String> = vec!["-ferror-limit=0".into(), "-w".into()];
        arguments.extend(flags.iter().cloned());
        let unit = self.translation_unit(&main, &includes, &arguments)?;
        let mut reader = Reader::new();
        let mut macros = Vec::new();
        for entity in unit.get_entity().get_children() {
            match entity.get_kind() {
                EntityKind::MacroDefinition => {
                    if !entity.is_builtin_macro()
                        && !entity.is_function_like_macro()
                        && place(entity.get_location()).is_some()
                    {
                        if let Some(name) = entity.get_name() {
                            macros.push(name);
                        }
                    }
                }
                EntityKind::InclusionDirective => {
                    if let Some(file) = entity.get_file() {
                        reader.header.files.push((file.get_path(), file.get_time()));
                    }
                }
                _ => reader.declaration(entity),
            }
        }
        self.macro_values(&main, &includes, &arguments, macros, &mut reader)?;
        Ok(reader.header)
    }

    /// `text` parsed as the file `main`, with the preprocessing record (macros, inclusions) when
    /// `record` asks for it.
    fn unit<'i>(
        &'i self,
        main: &std::path::Path,
        text: &str,
        arguments: &[String],
        record: bool,
    ) -> Result<TranslationUnit<'i>, ParseError> {
        self.index
            .parser(main)
            .arguments(arguments)
            .detailed_preprocessing_record(record)
            .skip_function_bodies(true)
            .unsaved(&[Unsaved::new(main, text)])
            .parse()
            .map_err(|error| ParseError::Errors(vec![(format!("libclang could not parse: {error}"), None)]))
    }

    fn translation_unit<'i>(
        &'i self,
        main: &std::path::Path,
        text: &str,
        arguments: &[String],
    ) -> Result<TranslationUnit<'i>, ParseError> {
        let unit = self.unit(main, text, arguments, true)?;
        let mut errors = Vec::new();
        for diagnostic in unit.get_diagnostics() {
            if diagnostic.get_severity() < Severity::Error {
                continue;
            }
            let text = diagnostic.get_text();
            let location = diagnostic.get_location().get_file_location();
            let at = location.file.map(|file| Place { file: file.get_path(), line: location.line });
            if let Some(header) = text.strip_prefix('\'').and_then(|rest| rest.strip_suffix("' file not found")) {
                if at.as_ref().is_some_and(|at| at.file == main) {
                    return Err(ParseError::NotFound { header: header.to_string() });
                }
            }
            errors.push((text, at));
        }
        if errors.is_empty() {
            Ok(unit)
        } else {
            Err(ParseError::Errors(errors))
        }
    }

    /// The values of object-like macros that are integer or floating constants: each becomes
    /// `__auto_type` variable of a second parse, which clang evaluates.
    fn macro_values(
        &self,
        main: &std::path::Path,
        includes: &str,
        arguments: &[String],
        macros: Vec<String>,
        reader: &mut Reader,
    ) -> Result<(), ParseError> {
        if macros.is_empty() {
            return Ok(());
        }
        let mut text = includes.to_string();
        for (index, name) in macros.iter().enumerate() {
            text.push_str(&format!("\n__auto_type quasi_macro_{index} = ({name});"));
        }
        let unit = self.unit(main, &text, arguments, false)?;
        for entity in unit.get_entity().get_children() {
            if entity.get_kind() != EntityKind::VarDecl {
                continue;
            }
            let Some(index) =
                entity.get_name().and_then(|name| name.strip_prefix("quasi_macro_")?.parse::<usize>().ok())
            else {
                continue;
            };
            let Some(name) = macros.get(index) else { continue };
            let Some(ty) = entity.get_type() else { continue };
            let ty = reader.ctype(ty);
            let value = match entity.evaluate() {
                Some(EvaluationResult::SignedInteger(value)) => ConstantValue::Int(value),
                Some(EvaluationResult::UnsignedInteger(value)) => ConstantValue::Int(value as i64),
                Some(EvaluationResult::Float(value)) if matches!(ty, CType::Double) => ConstantValue::Double(value),
                Some(EvaluationResult::Float(value)) => ConstantValue::Float(value),
                _ => continue,
            };
            if matches!(ty, CType::Int { .. } | CType::Float | CType::Double | CType::Bool) {
                reader.header.constants.push(Constant { name: name.clone(), value });
            }
        }
        Ok(())
    }
}

/// Walks declarations into a `Header`.
struct Reader {
    header: Header,
    functions_seen: HashSet<String>,
    typedefs_seen: HashSet<String>,
    /// Typedef names of anonymous records, by the record's key.
    typedef_names: HashMap<String, String>,
    /// Records whose fields are being read (a field may point back).
    reading: HashSet<String>,
}

impl Reader {
    fn new() -> Reader {
        Reader {
            header: Header::default(),
            functions_seen: HashSet::new(),
            typedefs_seen: HashSet::new(),
            typedef_names: HashMap::new(),
            reading: HashSet::new(),
        }
    }

    fn declaration(&mut self, entity: Entity<'_>) {
        match entity.get_kind() {
            EntityKind::FunctionDecl => self.function(entity),
            EntityKind::TypedefDecl => self.typedef(entity),
            EntityKind::StructDecl | EntityKind::UnionDecl => {
                if let Some(ty) = entity.get_type() {
                    self.ctype(ty);
                }
                self.enum_constants_inside(entity);
            }
            EntityKind::EnumDecl => self.enum_constants(entity),
            _ => {}
        }
    }

    fn function(&mut self, entity: Entity<'_>) {
        // A static (inline) function of the header has no symbol to call.
        if entity.get_storage_class() == Some(StorageClass::Static) {
            return;
        }
        let Some(name) = entity.get_name() else { return };
        if !self.functions_seen.insert(name.clone()) {
            return;
        }
        let Some(ty) = entity.get_type() else { return };
        let ret = ty.get_result_type().map_or(CType::Other("an unknown type".into()), |ret| self.ctype(ret));
        let params = entity
            .get_arguments()
            .unwrap_or_default()
            .into_iter()
            .map(|param| {
                let name = param.get_name().filter(|name| !name.is_empty());
                let ty = param.get_type().map_or(CType::Other("an unknown type".into()), |ty| self.ctype(ty));
                (name, ty)
            })
            .collect();
        let variadic = ty.is_variadic();
        self.header.functions.push(Function { name, params, ret, variadic, place: place(entity.get_location()) });
    }

    fn typedef(&mut self, entity: Entity<'_>) {
        let Some(name) = entity.get_name() else { return };
        let Some(underlying) = entity.get_typedef_underlying_type() else { return };
        let canonical = underlying.get_canonical_type();
        if let (TypeKind::Record, Some(declaration)) = (canonical.get_kind(), canonical.get_declaration()) {
            if is_anonymous(&declaration) {
                if let Some(key) = record_key(&declaration) {
                    self.typedef_names.entry(key.clone()).or_insert_with(|| name.clone());
                    if let Some(record) = self.header.records.get_mut(&key) {
                        record.name.get_or_insert_with(|| name.clone());
                    }
                }
            }
        }
        if canonical.get_kind() == TypeKind::Enum {
            if let Some(declaration) = canonical.get_declaration() {
                self.enum_constants(declaration);
            }
        }
        if !self.typedefs_seen.insert(name.clone()) {
            return;
        }
        let ty = self.ctype(underlying);
        self.header.typedefs.push((name, ty, place(entity.get_location())));
    }

    fn enum_constants_inside(&mut self, entity: Entity<'_>) {
        for child in entity.get_children() {
            match child.get_kind() {
                EntityKind::EnumDecl => self.enum_constants(child),
                EntityKind::StructDecl | EntityKind::UnionDecl => self.enum_constants_inside(child),
                _ => {}
            }
        }
    }

    fn enum_constants(&mut self, entity: Entity<'_>) {
        for child in entity.get_children() {
            if child.get_kind() != EntityKind::EnumConstantDecl {
                continue;
            }
            let (Some(name), Some((value, _))) = (child.get_name(), child.get_enum_constant_value()) else {
                continue;
            };
            if self.header.constants.iter().any(|constant| constant.name == name) {
                continue;
            }
            self.header.constants.push(Constant { name, value: ConstantValue::Int(value) });
        }
    }

    /// A C type; records it refers to are read into `Header::records` on the way.
    fn ctype(&mut self, ty: Type<'_>) -> CType {
        let canonical = ty.get_canonical_type();
        let size = canonical.get_sizeof().unwrap_or(0) as u8;
        match canonical.get_kind() {
            TypeKind::Void => CType::Void,
            TypeKind::Bool => CType::Bool,
            TypeKind::CharS
            | TypeKind::SChar
            | TypeKind::Short
            | TypeKind::Int
            | TypeKind::Long
            | TypeKind::LongLong => CType::Int { bytes: size, signed: true },
            TypeKind::CharU
            | TypeKind::UChar
            | TypeKind::UShort
            | TypeKind::UInt
            | TypeKind::ULong
            | TypeKind::ULongLong
            | TypeKind::WChar
            | TypeKind::Char16
            | TypeKind::Char32 => CType::Int { bytes: size, signed: false },
            TypeKind::Float => CType::Float,
            TypeKind::Double => CType::Double,
            TypeKind::Pointer => {
                let Some(pointee) = canonical.get_pointee_type() else { return CType::Pointer(Box::new(CType::Void)) };
                match pointee.get_canonical_type().get_kind() {
                    TypeKind::FunctionPrototype | TypeKind::FunctionNoPrototype => CType::FunctionPointer,
                    _ => CType::Pointer(Box::new(self.ctype(pointee))),
                }
            }
            TypeKind::ConstantArray => {
                let length = canonical.get_size().unwrap_or(0) as u64;
                match canonical.get_element_type() {
                    Some(element) => CType::Array(length, Box::new(self.ctype(element))),
                    None => CType::Other(canonical.get_display_name()),
                }
            }
            TypeKind::Enum => {
                match canonical.get_declaration().and_then(|declaration| declaration.get_enum_underlying_type()) {
                    Some(underlying) => self.ctype(underlying),
                    None => CType::Int { bytes: 4, signed: true },
                }
            }
            TypeKind::Record => match canonical.get_declaration() {
                Some(declaration) => self.record(declaration, canonical),
                None => CType::Other(canonical.get_display_name()),
            },
            TypeKind::IncompleteArray => CType::Other(format!("{} (an array of unknown size)", ty.get_display_name())),
            _ => CType::Other(canonical.get_display_name()),
        }
    }

    fn record(&mut self, declaration: Entity<'_>, ty: Type<'_>) -> CType {
        let Some(key) = record_key(&declaration) else { return CType::Other(ty.get_display_name()) };
        if self.header.records.contains_key(&key) && self.reading.contains(&key) {
            return CType::Record(key);
        }
        if self.header.records.contains_key(&key) {
            // A later complete definition of an incomplete one fills it in.
            let incomplete = self.header.records.get(&key).is_some_and(|record| record.fields.is_none());
            let definition = declaration.get_definition();
            if !(incomplete && definition.is_some()) {
                return CType::Record(key);
            }
        }
        let union = declaration.get_kind() == EntityKind::UnionDecl;
        let name =
            if is_anonymous(&declaration) { self.typedef_names.get(&key).cloned() } else { declaration.get_name() };
        let spelling = ty.get_display_name();
        // Insert first: a field may point back to this record.
        self.header.records.insert(
            key.clone(),
            Record {
                name,
                spelling,
                union,
                fields: None,
                size: ty.get_sizeof().unwrap_or(0) as u64,
                align: ty.get_alignof().unwrap_or(1) as u64,
                place: place(declaration.get_location()),
            },
        );
        if !self.header.record_order.contains(&key) {
            self.header.record_order.push(key.clone());
        }
        if let (Some(definition), Some(fields)) = (declaration.get_definition(), ty.get_fields()) {
            self.reading.insert(key.clone());
            let mut read = Vec::new();
            for field in fields {
                let Some(field_type) = field.get_type() else { continue };
                read.push(Field {
                    name: field.get_name().unwrap_or_default(),
                    size: field_type.get_sizeof().unwrap_or(0) as u64,
                    align: field_type.get_alignof().unwrap_or(1) as u64,
                    ty: self.ctype(field_type),
                    offset: field.get_offset_of_field().unwrap_or(0) as u64 / 8,
                    bit_field: field.is_bit_field(),
                });
            }
            self.reading.remove(&key);
            if let Some(record) = self.header.records.get_mut(&key) {
                record.fields = Some(read);
                record.place = place(definition.get_location());
            }
        }
        CType::Record(key)
    }
}

fn is_anonymous(declaration: &Entity<'_>) -> bool {
    declaration.is_anonymous() || declaration.get_name().is_none_or(|name| name.is_empty() || name.contains('('))
}

/// A record's identity across its declarations.
fn record_key(declaration: &Entity<'_>) -> Option<String> {
    declaration.get_canonical_entity().get_usr().map(|usr| usr.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_wait_ends_and_the_parse_is_cached_when_done() {
        let directory = std::env::temp_dir().join(format!("quasi-header-test-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("a temporary folder");
        let header = directory.join("interrupted.h");
        std::fs::write(&header, "int interrupted_function(int x);\n").expect("the header");
        let headers = vec![header.display().to_string()];
        let interrupted = parse(&headers, &[], &AtomicBool::new(true));
        assert!(matches!(interrupted, Err(ParseError::Interrupted)), "{interrupted:?}");
        let parsed = parse(&headers, &[], &AtomicBool::new(false)).expect("the parse");
        assert_eq!(
            parsed.functions.iter().map(|function| function.name.as_str()).collect::<Vec<_>>(),
            ["interrupted_function"]
        );
        let _ = std::fs::remove_dir_all(&directory);
    }

    #[test]
    fn builtin_headers_are_found_beside_a_libclang_moved_elsewhere() {
        let directory = std::env::temp_dir().join(format!("quasi-resource-dir-{}", std::process::id()));
        let library = directory.join("lib/libclang-19.so.1");
        assert_eq!(resource_dir(&library), None, "no folder yet");
        for version in ["18", "19"] {
            let include = directory.join("lib/clang").join(version).join("include");
            std::fs::create_dir_all(&include).expect("a temporary folder");
            std::fs::write(include.join("stddef.h"), "").expect("stddef.h");
        }
        std::fs::create_dir_all(directory.join("lib/clang/20")).expect("a version without headers");
        assert_eq!(resource_dir(&library), Some(directory.join("lib/clang/19")));
        let _ = std::fs::remove_dir_all(&directory);
    }

    #[test]
    fn records_keep_c_offsets_and_anonymous_ones_their_typedef_name() {
        let directory = std::env::temp_dir().join(format!("quasi-header-records-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("a temporary folder");
        let header = directory.join("records.h");
        std::fs::write(
            &header,
            "typedef struct { char c; double d; } pair;\nstruct list { struct list *next; int v; };\n",
        )
        .expect("the header");
        let parsed = parse(&[header.display().to_string()], &[], &AtomicBool::new(false)).expect("the parse");
        let pair = parsed.records.values().find(|record| record.name.as_deref() == Some("pair")).expect("pair");
        let offsets: Vec<u64> = pair.fields.as_ref().expect("fields").iter().map(|field| field.offset).collect();
        assert_eq!((offsets, pair.size, pair.align), (vec![0, 8], 16, 8));
        let list = parsed.records.values().find(|record| record.name.as_deref() == Some("list")).expect("list");
        assert_eq!(
            list.fields.as_ref().expect("fields")[0].ty,
            CType::Pointer(Box::new(CType::Record(
                parsed
                    .record_order
                    .iter()
                    .find(|key| parsed.records[*key].name.as_deref() == Some("list"))
                    .expect("key")
                    .clone()
            )))
        );
        let _ = std::fs::remove_dir_all(&directory);
    }
}
