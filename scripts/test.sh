#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests, the integration tests that drive real
# QEMU and real uftrace, the engine's tests under Miri, and every fuzz target for FUZZ_SECONDS (default 20) each. Installs
# what is missing first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Out of disk, the build fails late with a linker's "No space left on device": say it first.
target=${CARGO_TARGET_DIR:-$root/target}
mkdir -p "$target"
free_gib=$(df -P -k "$target" | awk 'NR==2 { print int($4 / 1048576) }')
if [ "$free_gib" -lt 4 ]; then
  echo "test.sh: only ${free_gib} GiB free under $target; the build and tests need about 4 GiB (free some, or set CARGO_TARGET_DIR to a larger disk)" >&2
fi
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The plugin's API 7 build (a cargo feature) is compiled and linted on its own.
cargo clippy -p qemu-uftrace-plugin --features api-v7 --quiet -- -D warnings
cargo test --workspace --no-fail-fast
# The engine's unsafe hot path (unchecked pushes and record writes) and its state machine,
# under Miri's checks (about two minutes).
cargo +nightly miri test -p qemu-uftrace-engine
# Bounded: the fuzzers' first build takes a few minutes, then 6 targets x FUZZ_SECONDS.
FUZZ_SECONDS=${FUZZ_SECONDS:-20} fuzz/run.sh
