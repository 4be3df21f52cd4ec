#!/usr/bin/env bash
# The whole test suite: format, lints and module layering, then unit tests, transcripts,
# binary tests, every kernel through NVIDIA's ptxas, and the Jupyter tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
. scripts/env.sh

# The machine keeps the style: formatting, lints, and the layering of lang and the kernel
# (scripts/module-graph fails on an import cycle between their modules).
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
python3 scripts/module-graph lang/src >/dev/null
python3 scripts/module-graph jupyter-kernel/src >/dev/null

# The test environment of pinned versions: the Jupyter clients below, and NVIDIA's PTX assembler
# (pip's nvidia-cuda-nvcc-cu12), with which tests/ptxas.rs assembles every kernel and which
# `:ptx` uses. Made before cargo test, which needs ptxas: QUASI_REQUIRE_PTXAS turns its absence
# into a failure instead of a skip.
venv=.venv-test
requirements=tests/jupyter/requirements.txt
if ! "$venv/bin/python" -c "" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
fi
# Installs only when the pins changed since the last run.
if ! cmp -s "$requirements" "$venv/requirements.installed"; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.installed"
fi
ptxas=("$PWD/$venv"/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas)
export QUASI_PTXAS="${ptxas[0]}"
export QUASI_REQUIRE_PTXAS=1
# cuda.h for the CUDA driver transcripts' `(include "cuda.h")`. Not CPATH: the cc crate's build
# scripts watch it, and a changed CPATH rebuilds the crates that compile C.
cuda_include=("$PWD/$venv"/lib/python3*/site-packages/nvidia/cuda_runtime/include)
export QUASI_INCLUDE_PATH="${cuda_include[0]}${QUASI_INCLUDE_PATH:+:$QUASI_INCLUDE_PATH}"

# A single-node Slurm cluster on this machine for tests/tune/slurm.repl (`# requires: slurm`),
# stopped when the script ends. Where it cannot start (no root, no Slurm), those tests skip and
# say why.
slurm_dir=$(mktemp -d /tmp/quasi-slurm.XXXXXX)
trap 'scripts/slurm-cluster stop "$slurm_dir" || true; rm -rf "$slurm_dir"' EXIT
if slurm_conf=$(scripts/slurm-cluster start "$slurm_dir"); then
    export "${slurm_conf?}"
    # Job files go where the node reads them: this machine's scratch folder.
    export QUASI_SLURM_DIR="$slurm_dir/jobs"
else
    echo "test.sh: no Slurm cluster (see above): the tests that need one are skipped" >&2
fi

cargo test --workspace --no-fail-fast

# Jupyter: quasi-kernel against real clients (jupyter_kernel_test, nbclient, jupyter console)
# from the virtual environment above. pytest's exit status is the script's.
cargo build -p quasi-kernel -p quasi-repl
"${CARGO_TARGET_DIR:-target}/debug/quasi-kernel" install --prefix "$venv" >/dev/null
# This environment's kernelspecs first: a user-wide `quasi` must not shadow the one under test.
export JUPYTER_PATH="$PWD/$venv/share/jupyter"
export PYTHONDONTWRITEBYTECODE=1
"$venv/bin/python" -m pytest tests/jupyter -q -rs -p no:cacheprovider
