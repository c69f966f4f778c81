#!/usr/bin/env bash
# What the tracer costs while tracing is off (issue 37: <= 1.05x plain QEMU), on Debian's
# arm64 boot to its panic, interleaved in one run (median of RUNS), QEMU with the plugin
# loaded directly (the CLI's own work, symbols and the like, is the same for any recording):
#   plain    QEMU alone
#   tax      bench/floor's plugin with a translation callback that instruments nothing:
#            QEMU's own cost of a plugin that translates (for comparison)
#   off      our plugin, trace=off, the wall clock: no translation callback at all while off
#            from QEMU 10.2 (interrupts switch); before, every block listens to the bell
#   off-insn our plugin, trace=off, --clock insn: a translation callback, a count and the
#            switch's bell (a conditional callback) in every block, so that windows keep
#            the instruction times of a full recording
# Prints CPU seconds (user + system) and wall seconds, median and fastest, and each layer's
# ratios of the medians to plain. Usage: [RUNS=9] [QEMUS="10.0 10.2.2"] bench/off.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-9}
. "$root/bench/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -n "${QEMU_UFTRACE_BENCH_READY:-}" ] || "$root/scripts/install-deps.sh" >&2
cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p qemu-uftrace-plugin
plugin="${CARGO_TARGET_DIR:-$root/target}/release/libqemu_uftrace_plugin.so"
gcc -O2 -shared -fPIC -o "$work/floor.so" "$root/bench/floor/floor.c"
layers=(plain tax off off-insn)

for version in ${QEMUS:-10.0}; do
    qemu=$(qemu_program "$version")
    workload_argv kernel
    for l in "${layers[@]}"; do : >"$work/$l"; done
    for i in $(seq "$runs"); do
        for l in "${layers[@]}"; do
            out="$work/out-$l-$i"
            mkdir -p "$out"
            case "$l" in
                plain) extra=() ;;
                tax) extra=(-plugin "$work/floor.so,level=1") ;;
                off) extra=(-plugin "file=$plugin,out=$out,clock=wall,trace=off,switch=$out/plugin.switch") ;;
                off-insn) extra=(-plugin "file=$plugin,out=$out,clock=insn,trace=off,switch=$out/plugin.switch") ;;
            esac
            warm_memory
            timed_into "%e %U %S" "$work/time" "${argv[@]}" "${extra[@]}"
            awk '{ printf "%s %.2f\n", $1, $2 + $3 }' "$work/time" >>"$work/$l"
            rm -rf "$out"
        done
    done
    med() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
    low() { sort -n | head -n1; }
    pc=$(cut -d' ' -f2 "$work/plain" | med)
    pw=$(cut -d' ' -f1 "$work/plain" | med)
    printf '%-8s %-9s %8s %8s %7s %8s %8s %7s\n' qemu layer cpu_med cpu_min cpu_x wall_med wall_min wall_x
    for l in "${layers[@]}"; do
        c=$(cut -d' ' -f2 "$work/$l" | med); cm=$(cut -d' ' -f2 "$work/$l" | low)
        w=$(cut -d' ' -f1 "$work/$l" | med); wm=$(cut -d' ' -f1 "$work/$l" | low)
        awk -v q="$version" -v l="$l" -v c="$c" -v cm="$cm" -v w="$w" -v wm="$wm" -v pc="$pc" -v pw="$pw" 'BEGIN {
            printf "%-8s %-9s %8.2f %8.2f %6.2fx %8.2f %8.2f %6.2fx\n", q, l, c, cm, c / pc, w, wm, w / pw }'
    done
done
