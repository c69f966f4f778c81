#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests and the integration tests that drive real
# QEMU and real uftrace. Installs what is missing first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace --no-fail-fast
