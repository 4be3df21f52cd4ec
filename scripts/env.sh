# Sourced by the scripts: where LLVM 19 is (Debian's default llvm-config may be another version).
export LLVM_SYS_191_PREFIX=/usr/lib/llvm-19
