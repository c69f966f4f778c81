#!/usr/bin/env bash
# How far the plugin is from the floor of its design: plain QEMU, then the layers of
# bench/floor/floor.c (a throwaway plugin that instruments as ours does, with empty or
# minimal callbacks), then our plugin, interleaved in one run (median of RUNS).
#   tax      a translation callback that instruments nothing
#   counter  + the per-block instruction counter of --clock insn
#   empty    + callbacks on calls and landings, flag stores on returns, all doing nothing
#   minimal  + a shadow stack and 16-byte records into a ring (no writer, no checks)
#   plugin   qemu-uftrace's plugin, writing its trace
# Usage: bench/floor.sh [kernel|calldense|smp4|initramfs|kernel-x86|riscv64]    (RUNS=9 by default)
# kernel-x86 decodes x86_64 calls in the empty and minimal layers (64-bit forms only; the plugin
# runs without the kernel's task slot, which `record` finds); riscv64 has no such layers.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-9}
. "$root/bench/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$root/scripts/install-deps.sh" >&2
cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p qemu-uftrace-plugin
plugin="${CARGO_TARGET_DIR:-$root/target}/release/libqemu_uftrace_plugin.so"
gcc -O2 -shared -fPIC -o "$work/floor.so" "$root/bench/floor/floor.c"
workload=${1:-kernel}
build_workload_guest "$workload"
workload_argv "$workload"

layers=(plain tax counter empty minimal plugin)
isa=
case "$workload" in
    kernel-x86) isa=,isa=x86 ;;
    riscv64) layers=(plain tax counter plugin) ;;
esac
plugin_arg() {
    case "$1" in
        plain) ;;
        tax) echo "$work/floor.so,level=1" ;;
        counter) echo "$work/floor.so,level=2" ;;
        empty) echo "$work/floor.so,level=3$isa" ;;
        minimal) echo "$work/floor.so,level=4$isa" ;;
        plugin) echo "$plugin,out=$work/trace" ;;
    esac
}

for i in $(seq "$runs"); do
    for layer in "${layers[@]}"; do
        extra=()
        arg=$(plugin_arg "$layer")
        [ -n "$arg" ] && extra=(-plugin "$arg")
        mkdir -p "$work/trace"
        warm_memory
        timed_into "%e" "$work/time" "${argv[@]}" "${extra[@]}"
        cat "$work/time" >>"$work/$layer"
        rm -rf "$work/trace"
    done
done

# Every run's time on stderr: the spread tells whether the medians can be trusted.
for layer in "${layers[@]}"; do echo "$layer: $(tr '\n' ' ' <"$work/$layer")" >&2; done
plain=$(median <"$work/plain")
printf '%-8s %8s %7s %8s\n' layer seconds ratio step_s
prev=$plain
for layer in "${layers[@]}"; do
    t=$(median <"$work/$layer")
    awk -v l="$layer" -v t="$t" -v p="$plain" -v q="$prev" \
        'BEGIN { printf "%-8s %8.2f %6.2fx %+8.2f\n", l, t, t / p, t - q }'
    prev=$t
done
