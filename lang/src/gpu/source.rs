//! What device code is built from: the session's environment, lent to a build
//! (`DeviceSource`); the members of a launched function's device code (`launchable`); what a
//! build came from, to tell when it is stale (`Built`); how a crash of LLVM on device code is
//! reported. Shared by the PTX build (`ptx`), the simulator's (`sim::build`) and `build`.

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use crate::backend::{Backend, BackendError, Target};
use crate::check::{self, Env};
use crate::codegen::{self, CodegenError, DeviceModule, DeviceUnit, SimTarget};
use crate::diagnostics::{Diagnostic, Kind};
use crate::tree::FunctionDef;
use crate::types::Ty;

/// What device code is lowered from, lent by the session: its environment, the LLVM context
/// (through the back end) and the struct type names host code uses.
pub(crate) struct DeviceSource<'s> {
    pub env: &'s Env,
    pub backend: &'s Backend,
    pub struct_names: &'s HashMap<String, String>,
}

impl<'s> DeviceSource<'s> {
    /// Lowers `members` (a launched function first) for `target` — NVPTX, or the host for the
    /// simulator (`sim`) — into a module named `module_name` of the back end's context.
    pub(crate) fn lower(
        &self,
        members: &[Rc<FunctionDef>],
        target: &Target,
        sim: Option<SimTarget>,
        module_name: &str,
    ) -> Result<DeviceModule<'s>, LowerError> {
        let target_data = self.backend.target_data(target).map_err(LowerError::Backend)?;
        let unit = DeviceUnit { members, globals: &self.env.globals, structs: &self.env.structs, sim };
        let backend = self.backend;
        codegen::lower_device(
            &backend.context,
            &target_data,
            &backend.triple(target),
            &unit,
            self.struct_names,
            module_name,
        )
        .map_err(LowerError::Codegen)
    }
}

/// Why device code could not be lowered.
pub(crate) enum LowerError {
    /// The back end has no target machine for the target.
    Backend(BackendError),
    Codegen(CodegenError),
}

/// What a build of a launched function's device code came from: its members (kept alive, so
/// that pointer equality means "not redefined since") and a key of the target and the globals
/// it reads.
pub(crate) struct Built {
    members: Vec<Rc<FunctionDef>>,
    key: String,
}

impl Built {
    /// What a build of `root` for `target` (the PTX arch, or the simulator's setting) would come
    /// from now.
    pub(crate) fn of(source: &DeviceSource<'_>, root: &Rc<FunctionDef>, target: &str) -> Built {
        let members = check::device_members(root, &|callee| check::defined(source.env, callee));
        let key = format!("{target} {}", globals_key(source.env, &members));
        Built { members, key }
    }

    /// Whether a build from `self` is still current for `now`.
    pub(crate) fn is_current(&self, now: &Built) -> bool {
        self.key == now.key
            && self.members.len() == now.members.len()
            && self.members.iter().zip(&now.members).all(|(a, b)| Rc::ptr_eq(a, b))
    }
}

/// What device code reads of the session's globals, for the cache key: a changed global
/// changes its device copy.
fn globals_key(env: &Env, members: &[Rc<FunctionDef>]) -> String {
    let used: BTreeSet<&str> =
        members.iter().flat_map(|member| member.uses.iter()).filter_map(|used| used.strip_prefix("global:")).collect();
    used.into_iter()
        .map(|name| format!("{name}={:?};", env.globals.get(name).map(|entry| (&entry.ty, entry.space, &entry.init))))
        .collect()
}

/// A crash inside LLVM's code generation as a diagnostic (`BackendError::Crashed`): `error[gpu]`, as
/// for other device code LLVM cannot compile (not an internal error of Quasi's).
pub(crate) fn llvm_crashed(name: &str, signal: i32, target: &str) -> Diagnostic {
    Diagnostic::error(
        Kind::Gpu,
        format!("LLVM crashed ({}) compiling `{name}` for {target}", crate::guard::signal_name(signal)),
    )
    .with_note("a bug in LLVM's back end on this code; the kernel was not built, and the session is intact")
}

/// The device code of a function a launch may run: the function and every session function it
/// calls; `error[gpu]` when it cannot run on a GPU.
pub(crate) fn launchable(
    source: &DeviceSource<'_>,
    root: &Rc<FunctionDef>,
) -> Result<Vec<Rc<FunctionDef>>, Diagnostic> {
    let gpu_error = |message: String| Diagnostic::error(Kind::Gpu, message);
    let name = &root.name;
    if root.signature.ret != Ty::Void {
        return Err(gpu_error(format!(
            "`{name}` returns `{}`: only kernels and void functions run on the GPU",
            root.signature.ret
        )));
    }
    if let Some(param) = root.signature.params.iter().find(|param| !param.is_scalar()) {
        return Err(gpu_error(format!("`{name}` takes a `{param}`: kernels take scalars and pointers")));
    }
    let lookup = |callee: &str| check::defined(source.env, callee);
    if let Some(problem) = check::device_problem(root, &lookup) {
        return Err(gpu_error(format!("`{name}` cannot run on the GPU: {problem}")));
    }
    Ok(check::device_members(root, &lookup))
}
