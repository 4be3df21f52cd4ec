//! The session's GPU side (`SessionGpu`): the runtime, the GPU architecture PTX is built for,
//! and what every launched function's device code was last built from. Before a cell's code
//! runs, every function host code can launch gets current code for the device `:gpu` chose —
//! PTX for the CUDA device (`ptx`), a host build for the simulator (`sim::build`) — rebuilt only
//! when a member or a global it reads changed.
//!
//! Code is built on the session's thread: the runtime, on the executor thread, only loads it.
//! A function that cannot be built is registered with its reason, which the launch then
//! reports as `error[gpu]`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::cuda::CompiledPtx;
use super::device::Mode;
use super::ptx::{self, PtxListing, DEFAULT_ARCH};
use super::runtime::Runtime;
use super::sim::build::{self as sim_build, SimBuild};
use super::source::{Built, DeviceSource};
use crate::backend::Emit;
use crate::check;
use crate::codegen::SimTarget;
use crate::diagnostics::{Diagnostic, Kind};
use crate::link::Program;
use crate::timing::{DeviceTiming, Lane, PhaseTimes};
use crate::tree::{self, FunctionDef, TypedCell};
use crate::types::Ty;

/// The session's GPU side: the runtime, the target, and what PTX was built from.
pub(crate) struct SessionGpu {
    pub runtime: Box<Runtime>,
    pub arch: String,
    /// Per launched function: the members its PTX was built from, kept alive so that pointer
    /// equality means "not redefined since", and the target and globals it was built for.
    built: HashMap<String, Built>,
    /// Per launched function: what its simulator build came from, and its code's id.
    sim_built: HashMap<String, (Built, Option<u64>)>,
    /// Replaced simulator builds a submission may still run, with their code's id: freed when
    /// nothing else holds them.
    retired_sim: Vec<(Arc<crate::gpu::sim::SimKernel>, u64)>,
    /// The functions each session function launches, for the functions that launch any: kept
    /// as definitions are committed (`note_defined`), so a cell never walks every function.
    launches: HashMap<String, Vec<String>>,
    builds: u64,
    /// Threads per block of the last launch of each function the session compiled whose block
    /// is constant, for the occupancy `:ptx` reports.
    last_block: HashMap<String, u32>,
    /// Every function host code launched, kernel or not.
    launched: BTreeSet<String>,
    /// `kernels_ptx`'s listings, rebuilt when a member changes (as `built`).
    listed: HashMap<String, (Built, Result<String, Diagnostic>)>,
}

impl SessionGpu {
    pub fn new(defer_device: bool, interrupt: std::sync::Arc<std::sync::atomic::AtomicBool>) -> SessionGpu {
        SessionGpu {
            runtime: Runtime::new(defer_device, interrupt),
            arch: DEFAULT_ARCH.to_string(),
            built: HashMap::new(),
            sim_built: HashMap::new(),
            retired_sim: Vec::new(),
            launches: HashMap::new(),
            builds: 0,
            last_block: HashMap::new(),
            launched: BTreeSet::new(),
            listed: HashMap::new(),
        }
    }
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

    /// The functions host code may launch once `cell` is committed: those its top-level code
    /// launches, and those every session function launches (the cell's own definitions
    /// replacing what their earlier bodies launched).
    pub(crate) fn launch_targets(&self, cell: &TypedCell) -> BTreeSet<String> {
        let defined: Vec<&FunctionDef> = cell.functions.iter().chain(&cell.recompiled).collect();
        let mut targets: BTreeSet<String> = cell
            .top
            .iter()
            .map(|item| &item.function)
            .chain(defined.iter().copied())
            .flat_map(|function| tree::launch_targets(&function.body))
            .map(|(name, _)| name)
            .collect();
        for (name, launched) in &self.launches {
            if !defined.iter().any(|function| function.name == *name) {
                targets.extend(launched.iter().cloned());
            }
        }
        targets
    }

    /// Builds current code for `targets`, for the device `:gpu` chose, from `source` (the
    /// environment as the cell being compiled leaves it); `install` registers it. Builds add
    /// `ptx` and `sim` rows to `timing`.
    pub(crate) fn build(
        &mut self,
        source: &DeviceSource<'_>,
        targets: BTreeSet<String>,
        timing: &mut PhaseTimes,
    ) -> DeviceBuilds {
        let mut builds = DeviceBuilds::default();
        for target in targets {
            match self.runtime.mode() {
                Mode::Device => builds.ptx.extend(self.build_stale_ptx(source, &target, timing)),
                Mode::Sim { check } => builds.sim.extend(self.ensure_simulated(source, &target, check, timing)),
            }
        }
        builds
    }

    /// Registers what `build` made with the runtime (linking the simulator's builds), and notes
    /// what `cell`'s top-level code launches.
    pub(crate) fn install(&mut self, builds: DeviceBuilds, cell: &TypedCell, program: &mut Program) {
        for item in &cell.top {
            self.note_launches(&item.function.body);
        }
        for (name, built, ptx) in builds.ptx {
            self.runtime.install_ptx(&name, ptx);
            self.built.insert(name, built);
        }
        self.install_simulated(program, builds.sim);
    }

    /// Notes the functions `body` launches and, where a launch's block is constant, its size.
    fn note_launches(&mut self, body: &[tree::Stmt]) {
        tree::visit_exprs(body, &mut |expr| {
            if let Some(launch) = tree::launched(expr) {
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

    /// `name`'s PTX, unless the registered one is current.
    fn build_stale_ptx(
        &mut self,
        source: &DeviceSource<'_>,
        name: &str,
        timing: &mut PhaseTimes,
    ) -> Option<(String, Built, Result<Arc<CompiledPtx>, String>)> {
        // A launch of a function that is gone was invalidated with it: nothing to build.
        let root = check::defined(source.env, name)?;
        let now = Built::of(source, &root, &self.arch);
        if self.built.get(name).is_some_and(|built| built.is_current(&now)) {
            return None;
        }
        let start = Instant::now();
        let built = self.build_ptx(source, &root, Emit::Code).map(|(ptx, _)| Arc::new(ptx));
        timing.device.push(DeviceTiming {
            label: "ptx".into(),
            duration: start.elapsed(),
            bytes: None,
            detail: format!("`{name}` for {}", self.arch),
            during_run: false,
            lane: Lane::Host,
            start: None,
        });
        Some((name.to_string(), now, built.map_err(|diagnostic| diagnostic.message)))
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

    /// `root`'s device code as PTX for the session's architecture, numbered as the next build.
    fn build_ptx(
        &mut self,
        source: &DeviceSource<'_>,
        root: &std::rc::Rc<FunctionDef>,
        emit: Emit,
    ) -> Result<(CompiledPtx, Option<PtxListing>), Diagnostic> {
        self.builds += 1;
        ptx::build_ptx(source, root, &self.arch, self.builds, emit)
    }

    /// The simulator's build of `name`, unless the current one is up to date.
    fn ensure_simulated(
        &mut self,
        source: &DeviceSource<'_>,
        name: &str,
        check: bool,
        timing: &mut PhaseTimes,
    ) -> Option<PendingSim> {
        let root = check::defined(source.env, name)?;
        let now = Built::of(source, &root, &format!("sim check={check}"));
        if self.sim_built.get(name).is_some_and(|(built, _)| built.is_current(&now)) {
            return None;
        }
        let start = Instant::now();
        self.builds += 1;
        let prefix = format!("{}#{name}", self.builds);
        let result = sim_build::compile(source, &root, SimTarget { check, prefix });
        timing.device.push(DeviceTiming {
            label: "sim".into(),
            duration: start.elapsed(),
            bytes: None,
            detail: format!("`{name}` for the simulator"),
            during_run: false,
            lane: Lane::Host,
            start: None,
        });
        Some(PendingSim { name: name.to_string(), built: now, result })
    }

    /// Links pending simulator builds and registers them with the simulator, freeing the
    /// builds they replace once no submission still runs them.
    fn install_simulated(&mut self, program: &mut Program, pending: Vec<PendingSim>) {
        for PendingSim { name, built, result } in pending {
            let linked = result.and_then(|build| sim_build::link(program, &name, build));
            let (kernel, id) = match linked {
                Ok((kernel, id)) => (Ok(Arc::new(kernel)), Some(id)),
                Err(message) => (Err(message), None),
            };
            let replaced = self.runtime.install_simulated(&name, kernel);
            if let Some((_, Some(old))) = self.sim_built.insert(name, (built, id)) {
                match replaced {
                    Some(kernel) => self.retired_sim.push((kernel, old)),
                    None => program.remove_device(old),
                }
            }
        }
        // A retired build that only this list holds runs nowhere any more.
        self.retired_sim.retain(|(kernel, id)| {
            let running = Arc::strong_count(kernel) > 1;
            if !running {
                program.remove_device(*id);
            }
            running
        });
    }

    /// What `:gpu` says: where launches run.
    pub(crate) fn describe_mode(&self) -> String {
        self.runtime.describe_mode()
    }

    /// `:gpu-arch [sm_XX]`.
    pub(crate) fn gpu_arch_command(&mut self, argument: &str) -> Result<String, Diagnostic> {
        if argument.is_empty() {
            return Ok(format!("GPU target {}", self.arch));
        }
        if !super::ptx::known_arch(argument) {
            return Err(Diagnostic::error(Kind::Syntax, format!("`{argument}` is not a GPU target LLVM knows"))
                .with_note(format!("the targets are: {}", super::ptx::arch_list())));
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

/// Device code built for a cell and not yet installed (`SessionGpu::install`).
#[derive(Default)]
pub(crate) struct DeviceBuilds {
    ptx: Vec<(String, Built, Result<Arc<CompiledPtx>, String>)>,
    sim: Vec<PendingSim>,
}

/// A simulator build waiting to be linked (the program is borrowed by the build's source until
/// then).
pub(crate) struct PendingSim {
    name: String,
    built: Built,
    result: Result<SimBuild, String>,
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
