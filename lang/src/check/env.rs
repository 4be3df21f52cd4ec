//! The session environment the checker reads: the committed functions, globals and structs.
//!
//! `GlobalEntry` lives in `tree` and `StructEntry` in `types`, because `codegen` and `value`
//! read them too and must not import `check`.

use std::collections::HashMap;
use std::rc::Rc;

use crate::tree::{FunctionDef, GlobalEntry, Resolution};
use crate::types::{Signature, StructEntry};

/// A session function as the checker sees it: its type, and what provides its code.
#[derive(Clone, Debug)]
pub(crate) struct FunctionEntry {
    pub signature: Signature,
    pub param_names: Vec<String>,
    pub kind: FunctionKind,
    /// Set when a redefinition made this function ill-typed; calling it is an error.
    pub invalidated: Option<String>,
}

/// What provides a session function's code.
#[derive(Clone, Debug)]
pub(crate) enum FunctionKind {
    /// A definition with a body, as last checked.
    Defined(Rc<FunctionDef>),
    /// A declaration resolved to a process or runtime symbol of this name.
    External(String),
    /// A declaration resolved to a symbol of a `load-library` library (named here) at this
    /// address; calls go through its slot, which points there.
    Library { library: String, address: usize },
    /// A declaration nothing provides yet; calls go through its slot.
    Unresolved,
}

impl From<Resolution> for FunctionKind {
    /// What provides a declaration resolved so.
    fn from(resolution: Resolution) -> FunctionKind {
        match resolution {
            Resolution::Link(link) => FunctionKind::External(link),
            Resolution::Library { library, address } => FunctionKind::Library { library, address },
        }
    }
}

/// The committed definitions of a session.
#[derive(Clone, Debug, Default)]
pub(crate) struct Env {
    pub functions: HashMap<String, FunctionEntry>,
    pub globals: HashMap<String, GlobalEntry>,
    pub structs: HashMap<String, StructEntry>,
}

/// The body of a session function, if it is defined and valid.
pub(crate) fn defined(env: &Env, name: &str) -> Option<Rc<FunctionDef>> {
    match env.functions.get(name) {
        Some(FunctionEntry { kind: FunctionKind::Defined(def), invalidated: None, .. }) => Some(def.clone()),
        _ => None,
    }
}
