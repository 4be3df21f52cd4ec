#!/usr/bin/env bash
# The whole test suite: format, lints and module layering, then unit tests, transcripts,
# binary tests and the Jupyter tests.
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

cargo test --workspace --no-fail-fast

# Jupyter: quasi-kernel against real clients (jupyter_kernel_test, nbclient, jupyter console)
# from a virtual environment of pinned versions. pytest's exit status is the script's.
cargo build -p quasi-kernel -p quasi-repl
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
"${CARGO_TARGET_DIR:-target}/debug/quasi-kernel" install --prefix "$venv" >/dev/null
# This environment's kernelspecs first: a user-wide `quasi` must not shadow the one under test.
export JUPYTER_PATH="$PWD/$venv/share/jupyter"
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest tests/jupyter -q -rs -p no:cacheprovider
