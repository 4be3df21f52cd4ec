//! PTX: device code (a launched function and the session functions it calls) lowered for
//! `nvptx64-nvidia-cuda`, compiled by the back end (`Target::Nvptx`, O3), with libdevice linked
//! in when it is installed; the GPU architectures LLVM knows; what `:ptx` adds (ptxas's line, the
//! default subject). `build` decides when PTX is built and registers it with the CUDA device.

use std::path::PathBuf;
use std::rc::Rc;

use inkwell::module::{FlagBehavior, Linkage, Module};

use super::cuda::CompiledPtx;
use super::source::{launchable, llvm_crashed, DeviceSource, LowerError};
use crate::backend::{BackendError, Emit, Target};
use crate::check::MAX_SHARED_BYTES;
use crate::diagnostics::{Diagnostic, Kind};
use crate::reader::Sexp;
use crate::tree::FunctionDef;

/// The GPU target when the session starts; `:gpu-arch` changes it.
pub(crate) const DEFAULT_ARCH: &str = "sm_90";

/// The targets LLVM 19's NVPTX back end knows.
const ARCHES: &[&str] = &[
    "sm_30", "sm_32", "sm_35", "sm_37", "sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72",
    "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a",
];

/// PTX and the LLVM IR it came from, before and after optimisation.
pub(crate) struct PtxListing {
    pub ir: String,
    pub optimised: String,
    pub ptx: String,
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

/// Compiles `root`'s device code to PTX for `arch`; with `Emit::Listing`, the listing too.
/// `build` numbers the build, for the module cache's fingerprint.
pub(crate) fn build_ptx(
    source: &DeviceSource<'_>,
    root: &Rc<FunctionDef>,
    arch: &str,
    build: u64,
    emit: Emit,
) -> Result<(CompiledPtx, Option<PtxListing>), Diagnostic> {
    let gpu_error = |message: String| Diagnostic::error(Kind::Gpu, message);
    let name = root.name.clone();
    let members = launchable(source, root)?;
    let target = Target::Nvptx(arch.to_string());
    let backend = source.backend;
    let lowered = source.lower(&members, &target, None, &format!("ptx#{name}")).map_err(|error| match error {
        LowerError::Backend(error) => gpu_error(error.to_string()),
        LowerError::Codegen(error) => {
            Diagnostic::error(Kind::Internal, format!("code generation for the GPU failed: {error}"))
                .with_note("this is a bug in Quasi; the session is unchanged")
        }
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
        BackendError::Crashed(signal) => llvm_crashed(&name, signal, arch),
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
    let text = std::ffi::CString::new(compiled.code).map_err(|_| gpu_error("LLVM's PTX holds a NUL byte".into()))?;
    let compiled =
        CompiledPtx { text, entry: lowered.entry, fingerprint: format!("{name}#{build}"), missing_libdevice };
    Ok((compiled, listing))
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
