#!/usr/bin/env bash
# `qemu-uftrace export` (Perfetto protobuf) against `uftrace dump --chrome` (JSON) of the same
# trace in the same run: wall time, bytes written and peak RSS, each run interleaved with the
# other's, then the ratios (targets: time <= 0.5x, bytes <= 0.15x, RSS <= 100 MB). Three
# exports: the default (packets in zlib-compressed bundles), --no-compress (plain packets)
# and a .gz name (the whole file gzipped).
#
#   kernel  Debian's arm64 cloud kernel booting to its panic (1 vCPU, --clock insn), recorded
#           once (the default workload)
#   DIR     an existing trace directory instead
#
# Usage: [RUNS=3] bench/export.sh [kernel | DIR]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-3}
. "$root/bench/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bench_recorder

what=${1:-kernel}
if [ -d "$what" ]; then
    trace=$what
else
    "$root/scripts/install-deps.sh" >&2
    workload_argv "$what"
    trace="$work/trace"
    "$qu" record -o "$trace" "${record_opts[@]}" -- "${argv[@]}" </dev/null >/dev/null
fi
events=$(sed -n 's/^events=//p' "$trace/plugin.stats" 2>/dev/null | head -n1)
dat_mb=$(cat "$trace"/*.dat | wc -c | awk '{printf "%.0f", $1 / 1048576}')
echo "trace: $trace (${events:-?} events, $dat_mb MB of records)"

# One timed run: "seconds max_rss_kb" into the named file, the output's bytes after it.
run() {
    local into=$1 out=$2
    shift 2
    warm_memory
    timed_into "%e %M" "$work/t" "$@"
    echo "$(cat "$work/t") $(stat -c %s "$out")" >>"$into"
    rm -f "$out"
}
: >"$work/chrome"; : >"$work/export"; : >"$work/raw"; : >"$work/gzip"
for i in $(seq "$runs"); do
    # uftrace writes the JSON to stdout: a shell writes it into a file, timed as one.
    run "$work/chrome" "$work/chrome.json" \
        sh -c 'exec uftrace dump --chrome -d "$1" >"$2"' sh "$trace" "$work/chrome.json"
    run "$work/export" "$work/out.pftrace" "$qu" export -d "$trace" -o "$work/out.pftrace"
    run "$work/raw" "$work/raw.pftrace" \
        "$qu" export --no-compress -d "$trace" -o "$work/raw.pftrace"
    run "$work/gzip" "$work/out.pftrace.gz" "$qu" export -d "$trace" -o "$work/out.pftrace.gz"
done

col() { cut -d' ' -f"$2" "$1" | median; }
range() { cut -d' ' -f1 "$1" | sort -n | sed -n '1p;$p' | paste -sd-; }
ct=$(col "$work/chrome" 1); cm=$(col "$work/chrome" 2); cb=$(col "$work/chrome" 3)
printf '%-22s %9s %9s %10s %8s %8s %8s\n' output time_s rss_MB bytes_MB time_x bytes_x range_s
for kind in chrome export raw gzip; do
    f="$work/$kind"
    awk -v k="$kind" -v t="$(col "$f" 1)" -v m="$(col "$f" 2)" -v b="$(col "$f" 3)" \
        -v ct="$ct" -v cb="$cb" -v r="$(range "$f")" 'BEGIN {
        name = k == "chrome" ? "uftrace dump --chrome" : k == "export" ? "export" : \
            k == "raw" ? "export --no-compress" : "export (.gz)"
        printf "%-22s %9.2f %9.0f %10.1f %7.2fx %7.3fx %8s\n",
            name, t, m / 1024, b / 1048576, t / ct, b / cb, r }'
done
