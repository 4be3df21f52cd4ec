//! Intrinsics: facts about LLVM intrinsics and builtins that both `check` and `codegen` need.
//!
//! Which intrinsics host code may call, how their names are spelled, what LLVM's own table
//! says about a declaration, and which C names are libdevice's. It knows no typed tree and no
//! session: only names, signatures and LLVM.

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Linkage;
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum};
use inkwell::values::BasicMetadataValueEnum;
use inkwell::AddressSpace;

use crate::types::{Signature, Ty};

/// What LLVM's intrinsic table says about a declaration the checker accepted.
#[derive(Clone, Debug)]
pub(crate) struct IntrinsicFacts {
    /// Parameters LLVM requires to be constants (`immarg`): their arguments must be literals.
    pub immediate: Vec<usize>,
}

/// Why LLVM rejects a declaration of an intrinsic.
#[derive(Clone, Debug)]
pub(crate) enum IntrinsicError {
    /// No intrinsic has this name.
    Unknown,
    /// The intrinsic exists but not with this signature: LLVM's verifier message, and the name
    /// it expects for these types when that is what is wrong.
    Signature { message: String, expected_name: Option<String> },
}

/// Checks a declaration of the intrinsic `name` (already in its opaque-pointer spelling) against
/// LLVM's own table, in a scratch context: a module that calls it with constant arguments
/// must pass the verifier. `struct_fields` gives the field types of a struct by name (`None`:
/// opaque). Intrinsics return structs as literal structs, which is how codegen calls them.
pub(crate) fn check_intrinsic(
    name: &str,
    signature: &Signature,
    struct_fields: &dyn Fn(&str) -> Option<Vec<Ty>>,
) -> std::result::Result<IntrinsicFacts, IntrinsicError> {
    if Intrinsic::find(name).is_none() {
        return Err(IntrinsicError::Unknown);
    }
    let context = Context::create();
    let module = context.create_module("intrinsic-check");
    let unsupported = |what: String| IntrinsicError::Signature { message: what, expected_name: None };
    let mut param_types: Vec<BasicTypeEnum> = Vec::new();
    for param in &signature.params {
        param_types.push(
            scratch_type(&context, param, struct_fields)
                .ok_or_else(|| unsupported(format!("`{param}` cannot be passed to an intrinsic")))?,
        );
    }
    let params: Vec<BasicMetadataTypeEnum> = param_types.iter().map(|ty| (*ty).into()).collect();
    let function_type = match &signature.ret {
        Ty::Void => context.void_type().fn_type(&params, signature.variadic),
        ret => scratch_type(&context, ret, struct_fields)
            .ok_or_else(|| unsupported(format!("an intrinsic cannot return `{ret}`")))?
            .fn_type(&params, signature.variadic),
    };
    let intrinsic = module.add_function(name, function_type, Some(Linkage::External));
    let caller = module.add_function("caller", context.void_type().fn_type(&[], false), None);
    let builder = context.create_builder();
    builder.position_at_end(context.append_basic_block(caller, "entry"));
    let args: Vec<BasicMetadataValueEnum> = param_types.iter().map(|ty| ty.const_zero().into()).collect();
    let built = builder.build_call(intrinsic, &args, "").and_then(|_| builder.build_return(None));
    if let Err(error) = built {
        return Err(unsupported(error.to_string()));
    }
    if let Err(message) = module.verify() {
        let message = message.to_string();
        let first_line = message.lines().next().unwrap_or("");
        let first = first_line.split("! Should be:").next().unwrap_or(first_line).trim_end_matches('!').to_string();
        let expected_name =
            message.split("Should be: ").nth(1).and_then(|rest| rest.split_whitespace().next()).map(str::to_string);
        return Err(IntrinsicError::Signature { message: first, expected_name });
    }
    let immarg = Attribute::get_named_enum_kind_id("immarg");
    let immediate = (0..signature.params.len())
        .filter(|index| intrinsic.get_enum_attribute(AttributeLoc::Param(*index as u32), immarg).is_some())
        .collect();
    Ok(IntrinsicFacts { immediate })
}

/// The LLVM type of `ty` in a scratch context, structs as literal structs.
fn scratch_type<'ctx>(
    context: &'ctx Context,
    ty: &Ty,
    struct_fields: &dyn Fn(&str) -> Option<Vec<Ty>>,
) -> Option<BasicTypeEnum<'ctx>> {
    Some(match ty {
        Ty::Bool => context.bool_type().into(),
        Ty::Int(8) => context.i8_type().into(),
        Ty::Int(16) => context.i16_type().into(),
        Ty::Int(32) => context.i32_type().into(),
        Ty::Int(_) => context.i64_type().into(),
        Ty::Float => context.f32_type().into(),
        Ty::Double => context.f64_type().into(),
        Ty::Ptr(_, space) => context.ptr_type(AddressSpace::from(u16::try_from(*space).ok()?)).into(),
        Ty::GpuBuf(_) | Ty::Encoder | Ty::Fence => context.i64_type().into(),
        Ty::Arr(length, element) => {
            scratch_type(context, element, struct_fields)?.array_type(u32::try_from(*length).ok()?).into()
        }
        Ty::Struct(name) => {
            let fields: Option<Vec<BasicTypeEnum>> =
                struct_fields(name)?.iter().map(|field| scratch_type(context, field, struct_fields)).collect();
            context.struct_type(&fields?, false).into()
        }
        Ty::Void => return None,
    })
}

/// The intrinsic families host code may call. LLVM aborts the process when instruction
/// selection meets an intrinsic it cannot lower (coroutines, exception handling, target
/// features the CPU lacks), so calls are limited to families that always lower on x86-64.
pub(crate) const HOST_INTRINSICS: &[&str] = &[
    // Floating point.
    "sqrt",
    "powi",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "pow",
    "exp",
    "exp2",
    "exp10",
    "log",
    "log10",
    "log2",
    "fma",
    "fmuladd",
    "fabs",
    "minnum",
    "maxnum",
    "minimum",
    "maximum",
    "copysign",
    "floor",
    "ceil",
    "trunc",
    "rint",
    "nearbyint",
    "round",
    "roundeven",
    "lround",
    "llround",
    "lrint",
    "llrint",
    "ldexp",
    "is.fpclass",
    "canonicalize",
    "fptosi.sat",
    "fptoui.sat",
    // Integers and bits.
    "bitreverse",
    "bswap",
    "ctpop",
    "ctlz",
    "cttz",
    "fshl",
    "fshr",
    "abs",
    "smax",
    "smin",
    "umax",
    "umin",
    "scmp",
    "ucmp",
    "sadd.with.overflow",
    "uadd.with.overflow",
    "ssub.with.overflow",
    "usub.with.overflow",
    "smul.with.overflow",
    "umul.with.overflow",
    "sadd.sat",
    "uadd.sat",
    "ssub.sat",
    "usub.sat",
    "sshl.sat",
    "ushl.sat",
    // Memory and the machine.
    "memcpy",
    "memcpy.inline",
    "memmove",
    "memset",
    "memset.inline",
    "prefetch",
    "ptrmask",
    "stacksave",
    "stackrestore",
    "trap",
    "debugtrap",
    "ubsantrap",
    "assume",
    "expect",
    "expect.with.probability",
    "readcyclecounter",
    "donothing",
    "sideeffect",
];

/// Whether host code may call the intrinsic `name` (see `HOST_INTRINSICS`).
pub(crate) fn host_intrinsic(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("llvm.") else { return false };
    HOST_INTRINSICS
        .iter()
        .any(|family| rest == *family || rest.strip_prefix(family).is_some_and(|tail| tail.starts_with('.')))
}

/// Intrinsics of targets other than the host's: LLVM cannot compile them for the CPU.
pub(crate) fn device_only_intrinsic(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "nvvm",
        "amdgcn",
        "r600",
        "aarch64",
        "arm",
        "ppc",
        "mips",
        "riscv",
        "wasm",
        "hexagon",
        "s390",
        "bpf",
        "loongarch",
        "spv",
        "dx",
        "ve",
        "xcore",
        "nvptx",
    ];
    name.strip_prefix("llvm.").and_then(|rest| rest.split('.').next()).is_some_and(|target| PREFIXES.contains(&target))
}

/// The LLVM name of an intrinsic: typed-pointer manglings become opaque (`p0i8` → `p0`).
pub(crate) fn intrinsic_name(name: &str) -> String {
    name.split('.')
        .map(|part| {
            let bytes = part.as_bytes();
            if bytes.len() > 2 && bytes[0] == b'p' && bytes[1].is_ascii_digit() {
                let digits = part[1..].chars().take_while(char::is_ascii_digit).count();
                format!("p{}", &part[1..1 + digits])
            } else {
                part.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The name host code calls an intrinsic by: host code erases address spaces (every pointer is
/// `ptr`), so its pointer manglings name address space 0 (`llvm.ptrmask.p1.i64` is
/// `llvm.ptrmask.p0.i64` there).
pub(crate) fn host_intrinsic_name(name: &str) -> String {
    name.split('.')
        .map(|part| match part.strip_prefix('p') {
            Some(space) if !space.is_empty() && space.bytes().all(|byte| byte.is_ascii_digit()) => "p0",
            _ => part,
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// libdevice's math functions (`__nv_sinf`…): declared like C functions, linked into device code.
pub(crate) fn is_libdevice(name: &str) -> bool {
    name.starts_with("__nv_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intrinsic_names_lose_typed_pointer_manglings() {
        assert_eq!(intrinsic_name("llvm.memcpy.p0i8.p0i8.i64"), "llvm.memcpy.p0.p0.i64");
        assert_eq!(intrinsic_name("llvm.memset.p1i8.i32"), "llvm.memset.p1.i32");
        assert_eq!(intrinsic_name("llvm.sqrt.f32"), "llvm.sqrt.f32");
        assert_eq!(intrinsic_name("llvm.ptrmask.p0.i64"), "llvm.ptrmask.p0.i64");
    }

    #[test]
    fn host_intrinsic_names_are_in_address_space_0() {
        assert_eq!(host_intrinsic_name("llvm.ptrmask.p1.i64"), "llvm.ptrmask.p0.i64");
        assert_eq!(host_intrinsic_name("llvm.memcpy.p3.p1.i64"), "llvm.memcpy.p0.p0.i64");
        assert_eq!(host_intrinsic_name("llvm.sqrt.f32"), "llvm.sqrt.f32");
        assert_eq!(host_intrinsic_name("llvm.nvvm.read.ptx.sreg.tid.x"), "llvm.nvvm.read.ptx.sreg.tid.x");
    }

    #[test]
    fn host_intrinsics_are_families() {
        assert!(host_intrinsic("llvm.memcpy.p0.p0.i64"));
        assert!(host_intrinsic("llvm.memcpy.inline.p0.p0.i64"));
        assert!(host_intrinsic("llvm.sadd.with.overflow.i32"));
        assert!(host_intrinsic("llvm.trap"));
        assert!(host_intrinsic("llvm.exp2.f64"));
        assert!(!host_intrinsic("llvm.coro.size.i32"));
        assert!(!host_intrinsic("llvm.sadd.i32"));
        assert!(!host_intrinsic("llvm.x86.rdtsc"));
        assert!(!host_intrinsic("llvm.trapx"));
    }
}
