//! Builds the C part of the runtime (the setjmp-based fault guard and the test runtime) and the
//! C++ object emitter over LLVM's headers (`backend`).

fn main() {
    println!("cargo:rerun-if-changed=csrc/guard.c");
    cc::Build::new().file("csrc/guard.c").flag_if_supported("-fno-omit-frame-pointer").compile("quasi_guard");
    println!("cargo:rerun-if-changed=csrc/emit.cpp");
    println!("cargo:rerun-if-env-changed=LLVM_SYS_191_PREFIX");
    let llvm = std::env::var("LLVM_SYS_191_PREFIX").unwrap_or_else(|_| "/usr/lib/llvm-19".to_string());
    // As LLVM itself is built: C++17, no RTTI, no exceptions.
    cc::Build::new()
        .cpp(true)
        .file("csrc/emit.cpp")
        .include(format!("{llvm}/include"))
        .flag("-std=c++17")
        .flag("-fno-rtti")
        .flag("-fno-exceptions")
        .define("_GNU_SOURCE", None)
        .define("__STDC_CONSTANT_MACROS", None)
        .define("__STDC_FORMAT_MACROS", None)
        .define("__STDC_LIMIT_MACROS", None)
        .warnings(false)
        .compile("quasi_emit");
}
