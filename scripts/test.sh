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
cpu_file=$(mktemp)
started=$SECONDS
summary() {
  local status=${1:-$?}
  echo "test.sh: time per step (wall, and the CPU its processes used; $(nproc) cores × all steps = $(($(nproc) * (SECONDS - started))) s)"
  printf '  %s\n' "${steps[@]}"
  printf '  %-34s %8d s\n' "all steps" $((SECONDS - started))
  if grep -q '^ *Running ' "$log"; then
    echo "test.sh: time per test binary (slowest first)"
    awk -f "$root/scripts/test-timing.awk" "$log" | grep -v '^binaries: \|^tests: '
    if [ -s "${QEMU_UFTRACE_TEST_PASSES:-}" ]; then
      echo "test.sh: time waited for record and for uftrace, per test binary"
      awk -f "$root/scripts/test-passes.awk" "$QEMU_UFTRACE_TEST_PASSES"
    fi
    # Why each failed test failed, where a page showing the log's tail shows it.
    awk -f "$root/scripts/test-failures.awk" "$log"
    # The plain closing line ("tests: N passed, N failed"), last, for whoever reads the log.
    awk -f "$root/scripts/test-timing.awk" "$log" | grep '^tests: '
  fi
  rm -f "$log" "$cpu_file"
  # Interrupted mid-suite: the shared recordings go too.
  [ -z "${shared_recordings:-}" ] || rm -rf "$shared_recordings"
  exit "$status"
}
trap summary EXIT
# step_line NAME WALL CPU STATUS: a line of the summary's steps.
step_line() {
  printf '%-34s %8d s %8s s CPU%s' "$1" "$2" "$3" "$([ "$4" -eq 0 ] || echo "  FAILED ($4)")"
}
# step NAME COMMAND...: runs COMMAND and keeps its time, its CPU (scripts/with-cpu.sh) and its
# failure for the summary.
step() {
  local name=$1 t0=$SECONDS status=0
  shift
  rm -f "$cpu_file"
  "$root/scripts/with-cpu.sh" "$cpu_file" "$@" || status=$?
  steps+=("$(step_line "$name" $((SECONDS - t0)) "$(cat "$cpu_file" 2>/dev/null || echo '?')" $status)")
  return $status
}
# beside DIR NICE NAME COMMAND...: runs COMMAND in the background's job at priority NICE, its
# output appended to DIR/output and "NAME SECONDS STATUS CPU" to DIR/steps (read by collect).
beside() {
  local dir=$1 prio=$2 name=$3 t0=$SECONDS status=0
  shift 3
  nice -n "$prio" "$root/scripts/with-cpu.sh" "$dir/cpu" "$@" >>"$dir/output" 2>&1 || status=$?
  echo "$name $((SECONDS - t0)) $status $(cat "$dir/cpu" 2>/dev/null || echo '?')" >>"$dir/steps"
  return $status
}
# collect PID DIR WHAT: waits for the job PID, run beside WHAT, prints what it printed, keeps its
# steps (named "NAME (beside WHAT)") and the time waited for it; fails if one of them failed.
collect() {
  local pid=$1 dir=$2 what=$3 status=0 name secs code cpu t0=$SECONDS names=()
  wait "$pid" || true
  cat "$dir/output"
  while read -r name secs code cpu; do
    [ "$code" -eq 0 ] || status=$code
    names+=("$name")
    steps+=("$(step_line "$name (beside $what)" "$secs" "$cpu" "$code")")
  done <"$dir/steps"
  [ "${#names[@]}" -eq 1 ] || names=(them)
  steps+=("$(printf '%-34s %8d s' "then waited for ${names[*]}" $((SECONDS - t0)))")
  rm -rf "$dir"
  return $status
}
jobs_started=()
# The fuzzers' workspace (fuzz/) builds into a target directory of its own inside this run's:
# cargo-fuzz's default (fuzz/target) is left for CARGO_TARGET_DIR, which would mix the two.
fuzz_target=$target/fuzz
# scripts/crates-cache.py, or nothing where python3 is not installed yet (a bare machine:
# the install brings it, and the next run keeps the crates).
crates_cache=(sh -c 'command -v python3 >/dev/null 2>&1 || exit 0; exec python3 "$0" "$@"' "$root/scripts/crates-cache.py")
# The dependencies' outputs kept by an earlier run (scripts/crates-cache.py), copied into an
# empty target directory: a fresh clone then compiles the workspace's own crates alone (the
# build 252 s → 180 s, the fuzzers' 150 s → 64 s on 2 cores, 2026-12-06). A bare machine
# has nothing kept.
step "crates kept, restored" "${crates_cache[@]}" restore main "$root" "$target"
step "fuzz crates kept, restored" "${crates_cache[@]}" restore fuzz "$root/fuzz" "$fuzz_target"
# The workspace's build and lints need nothing install-deps brings (the tests build their guests
# themselves), so they run beside the install, whose downloads leave the cores idle for minutes,
# at a lower priority than its own builds (QEMU, OpenSBI, uftrace). Their output is printed, and
# their status and time kept, when the install is done.
build_dir=$(mktemp -d)
(
  set +e
  beside "$build_dir" 10 build cargo test --workspace --no-run --quiet
  beside "$build_dir" 10 clippy cargo clippy --workspace --all-targets --quiet -- -D warnings
  # The plugin's API 7 build (a cargo feature) is compiled and linted on its own.
  beside "$build_dir" 10 clippy-api-v7 cargo clippy -p qemu-uftrace-plugin --features api-v7 --quiet -- -D warnings
  # Kept for the next run where this one built them anew (another toolchain or lock file).
  beside "$build_dir" 10 crates-kept "${crates_cache[@]}" save main "$root" "$target" --except fuzz
) &
build_pid=$!
jobs_started+=("$build_pid")
# A failed step ends the run: the jobs beside it go too.
# (set +e: under set -e a kill that found nothing ended the trap before the summary.)
trap 'rc=$?; set +e; "$root/scripts/kill-tree.sh" "${jobs_started[@]}"; summary "$rc"' EXIT
step install-deps scripts/install-deps.sh
collect "$build_pid" "$build_dir" "the install"
step fmt cargo fmt --all -- --check
# Miri and the fuzz targets need none of the test binaries: they run beside the tests at the
# lowest priority, each in a job of its own, taking what cycles the tests leave and both cores
# once they end (one after the other, the fuzzers started only after Miri: 2026-12-02, Miri
# 1,234 s starved beside 1,121 s of tests, then 466 s of fuzzing). The fuzzers run two targets
# at a time: in CI Miri ended 173 s before them, which then had one core to themselves. Their
# output is printed, and their status and time kept, when the tests are done.
# The engine's unsafe hot path (unchecked pushes and record writes) and its state machine,
# under Miri's checks (about four minutes of CPU), in two processes: Miri interprets on one
# core, and its tail after the tests was the run's longest wait (CI 2026-12-02: 325 s; the
# unit tests took 79 s, tests/engine.rs 151, tasks.rs 141 before 2026-12-06, when a boot
# context's id stopped zeroing 512 KiB of bits per table: 9 s, spaces.rs 32). One runs
# engine.rs, the other the unit tests, every other file of engine/tests (a new one
# included) and the doc-tests; the second waits for the first's build (one target).
miri_first=(engine)
miri_rest=()
for f in engine/tests/*.rs; do
  t=$(basename "$f" .rs)
  [[ " ${miri_first[*]} " == *" $t "* ]] || miri_rest+=("$t")
done
miri_dir=$(mktemp -d)
( set +e; beside "$miri_dir" 19 miri cargo +nightly miri test -p qemu-uftrace-engine \
    "${miri_first[@]/#/--test=}" ) &
miri_pid=$!
jobs_started+=("$miri_pid")
miri2_dir=$(mktemp -d)
( set +e
  beside "$miri2_dir" 19 miri-rest cargo +nightly miri test -p qemu-uftrace-engine --lib "${miri_rest[@]/#/--test=}"
  beside "$miri2_dir" 19 miri-doc cargo +nightly miri test -p qemu-uftrace-engine --doc ) &
miri2_pid=$!
jobs_started+=("$miri2_pid")
fuzz_dir=$(mktemp -d)
# Bounded: the fuzzers' first build takes two minutes, then each target for FUZZ_SECONDS: 10 s
# without a sanitizer runs each target about three times as often as 20 s under
# AddressSanitizer did (elf: 317 k executions in 4 s, 258 k in 21 s; 2026-12-06).
( set +e
  beside "$fuzz_dir" 19 fuzz env FUZZ_SECONDS="${FUZZ_SECONDS:-10}" FUZZ_JOBS=2 CARGO_TARGET_DIR="$fuzz_target" fuzz/run.sh
  beside "$fuzz_dir" 19 fuzz-crates-kept "${crates_cache[@]}" save fuzz "$root/fuzz" "$fuzz_target" +nightly ) &
fuzz_pid=$!
jobs_started+=("$fuzz_pid")
# The kernel boots that several tests read are recorded once a run, there
# (cli/tests/common/shared.rs): emptied before, so a run never reads an older one, and after,
# as they take about 1.1 GB (four kernel traces of 250–320 MB).
shared_recordings=$target/tmp/shared-recordings
rm -rf "$shared_recordings"
# Each recording and uftrace pass a test waits for, timed (tests/src/passes.rs), for the
# summary's per-binary split and its slowest commands.
export QEMU_UFTRACE_TEST_PASSES=$target/tmp/test-passes.log
rm -f "$QEMU_UFTRACE_TEST_PASSES"
# The test binaries run two at a time (xtask/src/testrun.rs: a binary's last long test leaves a
# core idle), each one's output printed whole as cargo prints it, then the doc-tests. The test
# output goes to the terminal and to the log the summary reads.
tested=0
run_tests() {
  local status=0
  cargo run --quiet --package xtask --target-dir "$target/xtask" -- test-run || status=$?
  cargo test --workspace --doc || status=$?
  return $status
}
export -f run_tests
export target
step "cargo test" bash -o pipefail -c 'run_tests 2>&1 | tee "$1"' _ "$log" || tested=$?
rm -rf "$shared_recordings"
# Miri's and the fuzzers' results count whether or not a test failed.
besides=0
collect "$miri_pid" "$miri_dir" "the tests" || besides=$?
collect "$miri2_pid" "$miri2_dir" "the tests" || besides=$?
collect "$fuzz_pid" "$fuzz_dir" "the tests" || besides=$?
[ "$tested" -eq 0 ] || exit "$tested"
step "every test binary ran" scripts/test-binaries-ran.sh "$log"
exit "$besides"
