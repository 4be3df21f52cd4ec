#!/usr/bin/env bash
# Installs what is missing, builds Quasi in release mode and runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
. scripts/env.sh
cargo build --release -p quasi-repl   # `quasi` (the launcher) and `quasi-engine`
echo "== demo: target/release/quasi < examples/demo.cl"
./target/release/quasi < examples/demo.cl
