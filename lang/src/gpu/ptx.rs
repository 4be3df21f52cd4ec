//! PTX: device code (a launched function and the session functions it calls) lowered for
//! `nvptx64-nvidia-cuda`, optimised at O3 and printed as PTX by LLVM's NVPTX back end; the
//! cache that rebuilds it when a member is redefined; `:ptx` and the PTX stages of `:stages`.
//!
//! PTX is built on the session's thread, before a cell's code runs, for every function host
//! code launches: the runtime on the executor thread only loads it. A function that cannot
//! be built is registered with its reason, which the launch then reports as `error[gpu]`.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use inkwell::module::{FlagBehavior, Linkage, Module};

use super::{CompiledPtx, Gpu};
use crate::backend::{Backend, BackendError, Emit, Target};
use crate::check::{self, Env, MAX_SHARED_BYTES};
use crate::codegen::{self, DeviceUnit};
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::Sexp;
use crate::timing::{DeviceTiming, PhaseTimes};
use crate::tree::{self, FunctionDef};
use crate::types::Ty;

/// The GPU target when the session starts; `:gpu-arch` changes it.
pub(crate) const DEFAULT_ARCH: &str = "sm_90";

/// The targets LLVM 19's NVPTX back end knows.
const ARCHES: &[&str] = &[
    "sm_30", "sm_32", "sm_35", "sm_37", "sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72",
    "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a",
];

/// The session's GPU side: the runtime, the target, and what PTX was built from.
pub(crate) struct SessionGpu {
    pub runtime: Box<Gpu>,
    pub arch: String,
    /// Per launched function: the members its PTX was built from, kept alive so that pointer
    /// equality means "not redefined since", and the target and globals it was built for.
    built: HashMap<String, Built>,
    /// Per launched function: what its simulator build came from, and its code's id.
    pub(super) sim_built: HashMap<String, (Built, Option<u64>)>,
    /// The functions each session function launches, for the functions that launch any: kept
    /// as definitions are committed (`note_defined`), so a cell never walks every function.
    launches: HashMap<String, Vec<String>>,
    pub(super) builds: u64,
    /// Threads per block of the last launch of each function the session compiled whose block
    /// is constant, for the occupancy `:ptx` reports.
    last_block: HashMap<String, u32>,
    /// Every function host code launched, kernel or not.
    launched: BTreeSet<String>,
    /// `kernels_ptx`'s listings, rebuilt when a member changes (as `built`).
    listed: HashMap<String, (Built, Result<String, Diagnostic>)>,
}

/// What a build of a launched function's device code came from: its members (kept alive, so
/// that pointer equality means "not redefined since") and a key of the target and the globals
/// it reads.
pub(super) struct Built {
    members: Vec<Rc<FunctionDef>>,
    key: String,
}

impl Built {
    /// What a build of `root` for `target` (the PTX arch, or the simulator's setting) would come
    /// from now.
    pub(super) fn of(source: &DeviceSource<'_>, root: &Rc<FunctionDef>, target: &str) -> Built {
        let members = check::device_members(root, &|callee| check::defined(source.env, callee));
        let key = format!("{target} {}", globals_key(source.env, &members));
        Built { members, key }
    }

    /// Whether a build from `self` is still current for `now`.
    pub(super) fn is_current(&self, now: &Built) -> bool {
        self.key == now.key
            && self.members.len() == now.members.len()
            && self.members.iter().zip(&now.members).all(|(a, b)| Rc::ptr_eq(a, b))
    }
}

/// PTX and the LLVM IR it came from, before and after optimisation.
pub(crate) struct PtxListing {
    pub ir: String,
    pub optimised: String,
    pub ptx: String,
}

impl SessionGpu {
    pub fn new(defer_device: bool) -> SessionGpu {
        SessionGpu {
            runtime: Gpu::new(defer_device),
            arch: DEFAULT_ARCH.to_string(),
            built: HashMap::new(),
            sim_built: HashMap::new(),
            launches: HashMap::new(),
            builds: 0,
            last_block: HashMap::new(),
            launched: BTreeSet::new(),
            listed: HashMap::new(),
        }
    }
}

/// What device code is lowered from, lent by the session: its environment, the LLVM context
/// (through the back end) and the struct type names host code uses.
pub(crate) struct DeviceSource<'s> {
    pub env: &'s Env,
    pub backend: &'s Backend,
    pub struct_names: &'s HashMap<String, String>,
}

/// Whether LLVM can target `arch` (`:gpu-arch`).
pub(crate) fn known_arch(arch: &str) -> bool {
    ARCHES.contains(&arch)
}

/// The GPU targets `:gpu-arch` accepts, for its message.
pub(crate) fn arch_list() -> String {
    ARCHES.join(" ")
}

/// Where libdevice is: `QUASI_LIBDEVICE`, beside the ptxas `:ptx` uses (`BIN/../nvvm/libdevice`
/// in a CUDA toolkit and in the pip package `nvidia-cuda-nvcc-cu12`), or the CUDA toolkit's
/// usual places.
fn libdevice_path() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("QUASI_LIBDEVICE").map(PathBuf::from).into_iter().collect();
    let beside_ptxas = super::ptxas::find().and_then(|ptxas| Some(ptxas.parent()?.parent()?.to_path_buf()));
    candidates.extend(beside_ptxas.map(|toolkit| toolkit.join("nvvm/libdevice/libdevice.10.bc")));
    candidates.extend(
        [
            "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc",
            "/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc",
            "/opt/cuda/nvvm/libdevice/libdevice.10.bc",
        ]
        .map(PathBuf::from),
    );
    candidates.into_iter().find(|path| path.is_file())
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

impl SessionGpu {
    /// Records what a newly committed body of `name` launches, replacing what its earlier body
    /// launched.
    pub(crate) fn note_defined(&mut self, name: &str, body: &FunctionDef) {
        self.note_launches(&body.body);
        let launched: Vec<String> = tree::launch_targets(&body.body).into_iter().map(|(name, _)| name).collect();
        if launched.is_empty() {
            self.launches.remove(name);
        } else {
            self.launches.insert(name.to_string(), launched);
        }
    }

    /// Makes sure every function host code can launch has current PTX registered with the
    /// runtime; `top` is the cell's top-level code. Builds add `ptx` rows to `timing`.
    /// In the simulator, the builds that still need linking (`install_simulated`).
    pub(crate) fn prepare_launches(
        &mut self,
        source: &DeviceSource<'_>,
        top: &[&FunctionDef],
        timing: &mut PhaseTimes,
    ) -> Vec<super::sim_build::PendingSim> {
        for function in top {
            self.note_launches(&function.body);
        }
        let mut targets: BTreeSet<String> =
            top.iter().flat_map(|function| tree::launch_targets(&function.body)).map(|(name, _)| name).collect();
        targets.extend(self.launches.values().flat_map(|launched| launched.iter().cloned()));
        let mut pending = Vec::new();
        for target in targets {
            match self.runtime.mode() {
                super::Mode::Device => self.ensure_ptx(source, &target, timing),
                super::Mode::Sim { check } => pending.extend(self.ensure_simulated(source, &target, check, timing)),
            }
        }
        pending
    }

    /// Notes the functions `body` launches and, where a launch's block is constant, its size.
    fn note_launches(&mut self, body: &[tree::Stmt]) {
        tree::visit_exprs(body, &mut |expr| {
            if let tree::ExprKind::Launch(launch) = &expr.kind {
                self.launched.insert(launch.kernel.clone());
                let threads = launch.block.iter().try_fold(1i64, |product, dimension| {
                    constant(dimension).and_then(|size| product.checked_mul(size))
                });
                if let Some(threads) = threads.and_then(|threads| u32::try_from(threads).ok()) {
                    self.last_block.insert(launch.kernel.clone(), threads);
                }
            }
        });
    }

    /// Threads per block of the last launch of `name` compiled in the session, when constant.
    pub(crate) fn last_block(&self, name: &str) -> Option<u32> {
        self.last_block.get(name).copied()
    }

    /// Every kernel of the session (`define-kernel`s and the functions host code launched)
    /// with its current PTX, or why it has none; built only when a member changed since the
    /// last call.
    pub(crate) fn kernels_ptx(&mut self, source: &DeviceSource<'_>) -> Vec<(String, Result<String, Diagnostic>)> {
        let mut names: BTreeSet<String> = source
            .env
            .functions
            .keys()
            .filter(|name| check::defined(source.env, name).is_some_and(|def| def.kernel))
            .cloned()
            .collect();
        names.extend(self.launched.iter().filter(|name| check::defined(source.env, name).is_some()).cloned());
        let mut listings = Vec::new();
        for name in names {
            let Some(root) = check::defined(source.env, &name) else { continue };
            let now = Built::of(source, &root, &self.arch);
            if !self.listed.get(&name).is_some_and(|(built, _)| built.is_current(&now)) {
                let ptx =
                    self.build_ptx(source, &root, Emit::Code).map(|(ptx, _)| ptx.text.to_string_lossy().into_owned());
                self.listed.insert(name.clone(), (now, ptx));
            }
            if let Some((_, ptx)) = self.listed.get(&name) {
                listings.push((name, ptx.clone()));
            }
        }
        listings
    }

    fn ensure_ptx(&mut self, source: &DeviceSource<'_>, name: &str, timing: &mut PhaseTimes) {
        // A launch of a function that is gone was invalidated with it: nothing to build.
        let Some(root) = check::defined(source.env, name) else { return };
        let now = Built::of(source, &root, &self.arch);
        if self.built.get(name).is_some_and(|built| built.is_current(&now)) {
            return;
        }
        let start = Instant::now();
        let built = self.build_ptx(source, &root, Emit::Code).map(|(ptx, _)| Arc::new(ptx));
        timing.device.push(DeviceTiming {
            label: "ptx".into(),
            duration: start.elapsed(),
            bytes: None,
            detail: format!("`{name}` for {}", self.arch),
            during_run: false,
        });
        self.runtime.set_kernel(name, built.map_err(|diagnostic| diagnostic.message));
        self.built.insert(name.to_string(), now);
    }

    /// `:ptx NAME`, and the device stages of `:stages`: IR, optimised IR and PTX of NAME's
    /// device code, built afresh and registered nowhere.
    pub(crate) fn ptx_listing(&mut self, source: &DeviceSource<'_>, name: &str) -> Result<PtxListing, Diagnostic> {
        let Some(root) = check::defined(source.env, name) else {
            let message = if source.env.functions.contains_key(name) {
                format!("`{name}` has no valid body to compile for the GPU")
            } else {
                format!("no function named `{name}`")
            };
            return Err(Diagnostic::error(Kind::UnknownName, message));
        };
        let (_, listing) = self.build_ptx(source, &root, Emit::Listing)?;
        listing.ok_or_else(|| Diagnostic::internal("the back end gave no PTX listing"))
    }

    /// Compiles `root`'s device code to PTX; with `Emit::Listing`, the listing too.
    fn build_ptx(
        &mut self,
        source: &DeviceSource<'_>,
        root: &Rc<FunctionDef>,
        emit: Emit,
    ) -> Result<(CompiledPtx, Option<PtxListing>), Diagnostic> {
        let gpu_error = |message: String| Diagnostic::error(Kind::Gpu, message);
        let name = root.name.clone();
        let arch = self.arch.clone();
        let members = launchable(source, root)?;
        let target = Target::Nvptx(arch.clone());
        let backend = source.backend;
        let target_data = backend.target_data(&target).map_err(|error| gpu_error(error.to_string()))?;
        let unit =
            DeviceUnit { members: &members, globals: &source.env.globals, structs: &source.env.structs, sim: None };
        let lowered = codegen::lower_device(
            &backend.context,
            &target_data,
            &backend.triple(&target),
            &unit,
            source.struct_names,
            &format!("ptx#{name}"),
        )
        .map_err(|error| {
            Diagnostic::error(Kind::Internal, format!("code generation for the GPU failed: {error}"))
                .with_note("this is a bug in Quasi; the session is unchanged")
        })?;
        if lowered.shared_bytes > MAX_SHARED_BYTES {
            return Err(Diagnostic::error(
                Kind::Limit,
                format!(
                    "`{name}` uses {} bytes of shared memory, more than the {MAX_SHARED_BYTES} a kernel may have",
                    lowered.shared_bytes
                ),
            ));
        }
        let module = lowered.module;
        let missing_libdevice = if lowered.libdevice.is_empty() {
            Vec::new()
        } else {
            link_libdevice(&module, &backend.context, &lowered.entry, lowered.libdevice)
        };
        let compiled = backend.compile(module, &target, emit).map_err(|error| match error {
            BackendError::Crashed(signal) => llvm_crashed(&name, signal, &arch),
            BackendError::Rejected(errors) => gpu_error(format!(
                "LLVM could not compile `{name}` for {arch}: {}",
                errors.first().map(|error| error.trim()).unwrap_or_default()
            )),
            BackendError::Passes(error) => gpu_error(format!("LLVM passes failed on `{name}`: {error}")),
            BackendError::Emit(error) => gpu_error(format!("LLVM could not emit PTX for `{name}`: {error}")),
            BackendError::Machine(error) => gpu_error(error),
        })?;
        let listing = compiled.listing.map(|listing| PtxListing {
            ir: crate::inspect::trim_ir(&listing.ir),
            optimised: crate::inspect::trim_ir(&listing.optimised),
            ptx: listing.assembly,
        });
        self.builds += 1;
        let text =
            std::ffi::CString::new(compiled.code).map_err(|_| gpu_error("LLVM's PTX holds a NUL byte".into()))?;
        let compiled = CompiledPtx {
            text,
            entry: lowered.entry,
            fingerprint: format!("{name}#{}", self.builds),
            missing_libdevice,
        };
        Ok((compiled, listing))
    }

    /// `:gpu-arch [sm_XX]`.
    pub(crate) fn gpu_arch_command(&mut self, argument: &str) -> Result<String, Diagnostic> {
        if argument.is_empty() {
            return Ok(format!("GPU target {}", self.arch));
        }
        if !known_arch(argument) {
            return Err(Diagnostic::error(Kind::Syntax, format!("`{argument}` is not a GPU target LLVM knows"))
                .with_note(format!("the targets are: {}", arch_list())));
        }
        self.arch = argument.to_string();
        Ok(format!("GPU target {argument}"))
    }

    /// The device buffer spelling values use: contents read from the GPU.
    pub(crate) fn describe_buffer(&self, handle: u64, element: &Ty) -> String {
        if handle == 0 {
            return "<gpu null>".into();
        }
        self.runtime.describe(handle, element)
    }
}

/// A crash inside LLVM's code generation as a diagnostic (`BackendError::Crashed`): `error[gpu]`, as
/// for other device code LLVM cannot compile (not an internal error of Quasi's).
pub(super) fn llvm_crashed(name: &str, signal: i32, target: &str) -> Diagnostic {
    Diagnostic::error(
        Kind::Gpu,
        format!("LLVM crashed ({}) compiling `{name}` for {target}", crate::guard::signal_name(signal)),
    )
    .with_note("a bug in LLVM's back end on this code; the kernel was not built, and the session is intact")
}

/// The device code of a function a launch may run: the function and every session function it
/// calls; `error[gpu]` when it cannot run on a GPU.
pub(super) fn launchable(
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

/// The value of a launch dimension that is a constant: a literal, maybe cast, or a product of
/// such.
fn constant(expr: &tree::Expr) -> Option<i64> {
    match &expr.kind {
        tree::ExprKind::Int(value) => Some(*value),
        tree::ExprKind::Cast(_, inner) => constant(inner),
        tree::ExprKind::Binary(tree::BinOp::Mul, left, right) => constant(left)?.checked_mul(constant(right)?),
        _ => None,
    }
}

/// `:ptx`'s last line: what ptxas says of `name`'s PTX (its resources and the occupancy they
/// allow), ptxas's errors, or how to get ptxas.
pub(crate) fn ptxas_line(arch: &str, name: &str, ptx: &str, block: Option<u32>) -> String {
    let Some(ptxas) = super::ptxas::find() else { return super::ptxas::missing_line() };
    match super::ptxas::assemble(&ptxas, ptx, arch, name) {
        Ok(resources) => super::ptxas::resource_line(arch, &resources, block),
        Err(error) => format!("ptxas {arch} rejected the PTX of `{name}`:\n{error}"),
    }
}

/// What `:ptx` lists without a name: the last cell's first kernel, or what it launched.
pub(crate) fn default_ptx_subject(forms: &[Sexp]) -> Option<String> {
    let kernel = forms
        .iter()
        .find(|form| form.head() == Some("define-kernel"))
        .and_then(|form| form.list()?.get(1)?.list()?.first()?.list()?.first()?.symbol().map(str::to_string));
    kernel.or_else(|| {
        forms.iter().find_map(|form| {
            let mut found = None;
            find_launch(form, &mut found);
            found
        })
    })
}

fn find_launch(form: &Sexp, found: &mut Option<String>) {
    if found.is_some() {
        return;
    }
    if let Some(items) = form.list() {
        if form.head() == Some("launch") {
            *found = items.get(1).and_then(|kernel| kernel.symbol()).map(str::to_string);
            return;
        }
        for item in items {
            find_launch(item, found);
        }
    }
}

/// Links libdevice into `module` when it is installed, keeping only the kernel entry
/// external so that O3 drops what is unused; returns the libdevice functions left unlinked.
fn link_libdevice<'ctx>(
    module: &Module<'ctx>,
    context: &'ctx inkwell::context::Context,
    entry: &str,
    wanted: Vec<String>,
) -> Vec<String> {
    let Some(path) = libdevice_path() else { return wanted };
    let Ok(libdevice) = Module::parse_bitcode_from_path(&path, context) else { return wanted };
    libdevice.set_triple(&module.get_triple());
    if let Some(layout) = module.get_data_layout().as_str().to_str().ok().map(str::to_string) {
        libdevice.set_data_layout(&inkwell::targets::TargetData::create(&layout).get_data_layout());
    }
    if module.link_in_module(libdevice).is_err() {
        return wanted;
    }
    for function in module.get_functions() {
        if function.count_basic_blocks() > 0 && function.get_name().to_str() != Ok(entry) {
            function.set_linkage(Linkage::Internal);
        }
    }
    // libdevice asks NVVM's reflection whether denormals flush to zero: they do not.
    module.add_basic_value_flag("nvvm-reflect-ftz", FlagBehavior::Override, context.i32_type().const_zero());
    Vec::new()
}
