#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests, the integration tests that drive real
# QEMU and real uftrace, the engine's tests under Miri, and every fuzz target for FUZZ_SECONDS
# (default 20) each. Installs what is missing first. Ends with the time of each step and of each
# test binary (scripts/test-timing.awk), failed or not, so a slower suite shows in the next log.
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

steps=()
log=$(mktemp)
started=$SECONDS
summary() {
  local status=${1:-$?}
  echo "test.sh: time per step"
  printf '  %s\n' "${steps[@]}"
  printf '  %-34s %8d s\n' "all steps" $((SECONDS - started))
  if grep -q '^ *Running ' "$log"; then
    echo "test.sh: time per test binary (slowest first)"
    awk -f "$root/scripts/test-timing.awk" "$log" | grep -v '^binaries: \|^tests: '
    # The plain closing line ("tests: N passed, N failed"), last, for whoever reads the log.
    awk -f "$root/scripts/test-timing.awk" "$log" | grep '^tests: '
  fi
  rm -f "$log"
  # Interrupted mid-suite: the shared recordings go too.
  [ -z "${shared_recordings:-}" ] || rm -rf "$shared_recordings"
  exit "$status"
}
trap summary EXIT
# step NAME COMMAND...: runs COMMAND and keeps its time (and its failure) for the summary.
step() {
  local name=$1 t0=$SECONDS status=0
  shift
  "$@" || status=$?
  steps+=("$(printf '%-34s %8d s%s' "$name" $((SECONDS - t0)) "$([ $status -eq 0 ] || echo "  FAILED ($status)")")")
  return $status
}
# The workspace's build and lints need nothing install-deps brings (the tests build their guests
# themselves), so they run beside the install, whose downloads leave the cores idle for minutes,
# at a lower priority than its own builds (QEMU, OpenSBI, uftrace). Their output is printed, and
# their status and time kept, when the install is done.
beside=$(mktemp -d)
(
  set +e
  run() {
    local name=$1 t0=$SECONDS status=0
    shift
    nice -n 10 "$@" >>"$beside/output" 2>&1 || status=$?
    echo "$name $((SECONDS - t0)) $status" >>"$beside/steps"
    return $status
  }
  run build cargo test --workspace --no-run --quiet
  run clippy cargo clippy --workspace --all-targets --quiet -- -D warnings
  # The plugin's API 7 build (a cargo feature) is compiled and linted on its own.
  run clippy-api-v7 cargo clippy -p qemu-uftrace-plugin --features api-v7 --quiet -- -D warnings
) &
beside_pid=$!
# A failed install ends the run: the build beside it goes too.
# (set +e: under set -e a pkill that matched nothing ended the trap before the summary.)
trap 'rc=$?; set +e; pkill -P "$beside_pid" 2>/dev/null; kill "$beside_pid" 2>/dev/null; summary "$rc"' EXIT
step install-deps scripts/install-deps.sh
# beside_done: waits for the build and lints, prints what they printed, keeps their steps.
beside_done() {
  local status=0 name secs code
  wait "$beside_pid" || true
  cat "$beside/output"
  while read -r name secs code; do
    [ "$code" -eq 0 ] || status=$code
    steps+=("$(printf '%-34s %8d s%s' "$name (beside the install)" "$secs" "$([ "$code" -eq 0 ] || echo "  FAILED ($code)")")")
  done <"$beside/steps"
  steps+=("$(printf '%-34s %8d s' "waited for them after the install" $((SECONDS - beside_wait)))")
  rm -rf "$beside"
  return $status
}
beside_wait=$SECONDS
beside_done
step fmt cargo fmt --all -- --check
# The kernel boots that several tests read are recorded once a run, there
# (cli/tests/common/shared.rs): emptied before, so a run never reads an older one, and after,
# as they take about 1.1 GB (four kernel traces of 250–320 MB).
shared_recordings=$target/tmp/shared-recordings
rm -rf "$shared_recordings"
# The test output goes to the terminal and to the log the summary reads.
tested=0
step "cargo test" bash -o pipefail -c 'cargo test --workspace --no-fail-fast 2>&1 | tee "$1"' _ "$log" || tested=$?
rm -rf "$shared_recordings"
[ "$tested" -eq 0 ] || exit "$tested"
step "every test binary ran" scripts/test-binaries-ran.sh "$log"
# The engine's unsafe hot path (unchecked pushes and record writes) and its state machine,
# under Miri's checks (about two minutes).
step miri cargo +nightly miri test -p qemu-uftrace-engine
# Bounded: the fuzzers' first build takes a few minutes, then each target for FUZZ_SECONDS.
step fuzz env FUZZ_SECONDS="${FUZZ_SECONDS:-20}" fuzz/run.sh
