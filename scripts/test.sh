#!/usr/bin/env bash
# The whole test suite: unit tests, transcripts, binary tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
. scripts/env.sh
cargo test --workspace --no-fail-fast
