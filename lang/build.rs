//! Builds the C part of the runtime: the setjmp-based fault guard and the test runtime.

fn main() {
    println!("cargo:rerun-if-changed=csrc/guard.c");
    cc::Build::new().file("csrc/guard.c").flag_if_supported("-fno-omit-frame-pointer").compile("quasi_guard");
}
