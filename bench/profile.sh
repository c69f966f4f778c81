#!/usr/bin/env bash
# Compares plugin builds by their own CPU cost on the kernel boot, a finer measure than wall
# time on a noisy box (DEVELOPERS.md): each build runs RUNS times, interleaved, under
# `perf record -e cpu-clock`; printed are the medians of the plugin's self time and of all
# of QEMU's threads but the writer, in ms.
# Usage: bench/profile.sh NAME=PLUGIN.so [NAME=PLUGIN.so,ARG=VALUE ...]    (RUNS=5 by default;
#        WORKLOAD=kernel-x86 or another of bench/common.sh's for another boot than arm64's)
# A build is a plugin .so (e.g. target/release/libqemu_uftrace_plugin.so, copied aside);
# extra plugin arguments may follow it, as on QEMU's -plugin option.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-5}
rate=20000
. "$root/bench/common.sh"
command -v perf >/dev/null || { echo "bench/profile.sh: perf not found; install linux-perf" >&2; exit 2; }
[ "$#" -gt 0 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# QEMU_UFTRACE_BENCH_READY=1: the fixtures are known to be installed (as bench/run.sh).
[ -n "${QEMU_UFTRACE_BENCH_READY:-}" ] || "$root/scripts/install-deps.sh" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
workload_argv "${WORKLOAD:-kernel}"

# Samples of one perf report column ($1: sort key) whose name matches $2.
samples() {
    perf report -i "$work/perf.data" --stdio -n --sort "$1" 2>/dev/null | awk -v m="$2" '$3 ~ m {n += $2} END {print n + 0}'
}

for r in $(seq "$runs"); do
    for build in "$@"; do
        name=${build%%=*}
        plugin=${build#*=}
        mkdir -p "$work/out"
        warm_memory
        perf record -q -e cpu-clock -F "$rate" -o "$work/perf.data" -- \
            "${argv[@]}" -plugin "$plugin,out=$work/out" </dev/null >/dev/null 2>&1 || true
        [ -s "$work/out/plugin.stats" ] || { echo "bench/profile.sh: $name recorded nothing" >&2; exit 1; }
        so=$(basename "${plugin%%,*}")
        echo "$(samples dso "^${so//./\\.}\$") $(samples comm '^qemu-system')" >>"$work/$name"
        rm -rf "$work/out" "$work/perf.data"
    done
done
printf '%-16s %14s %14s\n' build plugin_ms qemu_ms
for build in "$@"; do
    name=${build%%=*}
    self=$(cut -d' ' -f1 "$work/$name" | median)
    qemu=$(cut -d' ' -f2 "$work/$name" | median)
    printf '%-16s %14.0f %14.0f\n' "$name" "$((self * 1000 / rate))" "$((qemu * 1000 / rate))"
done
