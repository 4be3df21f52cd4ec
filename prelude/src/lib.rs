//! quasi-prelude: the Rhai macro library every session loads at start-up (`prelude/*.rhai`,
//! embedded with `include_str!`). Later definitions of the same name and arity override these.

/// The prelude's files, in load order: (file name, Rhai source).
pub const FILES: &[(&str, &str)] = &[
    ("prelisp.rhai", include_str!("../prelisp.rhai")),
    ("loops.rhai", include_str!("../loops.rhai")),
    ("metaocaml.rhai", include_str!("../metaocaml.rhai")),
    ("gpu.rhai", include_str!("../gpu.rhai")),
    ("blas.rhai", include_str!("../blas.rhai")),
];
