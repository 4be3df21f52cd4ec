#!/usr/bin/env bash
# Installs what building Quasi needs on Debian 12 (as root): LLVM 19 and the C libraries it
# links against, g++ for the C++ object emitter (lang/csrc/emit.cpp), clang-19 for the benchmarks' C reference, libclang 19 for `include` (loaded at
# run time), Chromium and its WebDriver for the notebooks' browser test
# (tests/jupyter/test_browser.py; on a bare Debian 12 about 200 MB to download, 650 MiB on
# disk), Slurm and munge for the single-node cluster that `(autotune … (on slurm))` is tested
# against (scripts/slurm-cluster), OpenBLAS and BLIS for `quasi-bench gemm`, and Rust if it is
# missing.
set -euo pipefail
packages=(g++ llvm-19-dev libpolly-19-dev zlib1g-dev libzstd-dev libxml2-dev libffi-dev clang-19 libclang1-19 python3-venv chromium chromium-driver slurm-wlm munge libopenblas0-serial libopenblas-dev libblis-dev)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is missing: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
# The test command checks formatting and lints; a minimal rustup profile lacks both tools.
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1 && command -v rustup >/dev/null 2>&1; then
        rustup component add "$component"
    fi
done
