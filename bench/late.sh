#!/usr/bin/env bash
# Tracing switched on for the last 10% of the boot (issue 37: total time <= 1.05x plain + 10%
# of the traced cost), on Debian's arm64 boot to its panic, interleaved in one run (median of
# RUNS), every layer through `record` but plain:
#   plain  QEMU alone
#   full   record, the whole boot traced
#   late   record --trace=off, switched on by `qemu-uftrace trace on` once QEMU has run for
#          AT (0.8) of this round's plain wall time, as a user at a terminal would (timed
#          from the plugin's first status, after QEMU's own start: at 0.9 most runs on
#          10.2.2 switched in the boot's last 1%; 0.8 traced 10-19% of its events). By time,
#          not by a function: no function starts near 90% of the boot (from 43% to 99.9% of
#          its instructions PID 1 waits for one cryptomgr self-test, a single multiprecision
#          computation; the late initcalls start at 99.9%). TRIGGER=panic adds
#          --trace-on-at panic, for a switch that comes after the boot's end: a trigger
#          keeps a translation callback while off (~1.11x on its own: bench/off.sh).
#          A run switched on too late records nothing and is said, its time still counted.
# Prints CPU (user + system, every thread) and wall medians, each layer's ratios to plain,
# how much of the boot late traced (its events over full's, median), and the bound
# 1.05 + 0.10 x (full - 1), of CPU and of wall.
# Usage: [RUNS=5] [QEMUS="10.0 10.2.2"] bench/late.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-5}
. "$root/bench/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bench_recorder
layers=(plain full late)

# One timed run into "$work/$1": "wall cpu".
run() {
    local layer=$1
    shift
    warm_memory
    if [ "$layer" = late ]; then
        # Switched on too late, it fails for recording nothing: said below.
        /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" </dev/null >/dev/null 2>"$work/late.err" ||
            tail -n 2 "$work/late.err" >&2
    else
        timed_into "%e %U %S" "$work/time" "$@"
    fi
    tail -n 1 "$work/time" | awk '{ printf "%s %.2f\n", $1, $2 + $3 }' >>"$work/$layer"
}

for version in ${QEMUS:-10.0}; do
    qemu=$(qemu_program "$version")
    workload_argv kernel
    for l in "${layers[@]}" fraction; do : >"$work/$l"; done
    for i in $(seq "$runs"); do
        run plain "${argv[@]}"
        at=$(tail -n1 "$work/plain" | awk -v f="${AT:-0.8}" '{ print $1 * f }')
        run full "$qu" record -q -o "$work/trace" -- "${argv[@]}"
        full_events=$(sed -n 's/^events=//p' "$work/trace/plugin.stats")
        rm -rf "$work/trace"
        # `trace on` once QEMU has run for 90% of the plain boot's time (from the plugin's
        # first status: record's own start, ~1 s of symbols, comes before).
        (
            until [ -e "$work/trace.partial/plugin.status" ]; do sleep 0.01; done
            sleep "$at"
            "$qu" trace on -d "$work/trace" >/dev/null 2>&1
        ) &
        trigger=()
        [ -z "${TRIGGER:-}" ] || trigger=(--trace-on-at "$TRIGGER")
        run late "$qu" record -q -o "$work/trace" --trace=off "${trigger[@]}" -- "${argv[@]}"
        wait
        if [ -e "$work/trace/plugin.stats" ]; then
            sed -n 's/^events=//p' "$work/trace/plugin.stats" |
                awk -v f="$full_events" '{ print $1 / f }' >>"$work/fraction"
        else
            echo "late run $i: switched on after the boot's end, nothing traced" >&2
            echo 0 >>"$work/fraction"
        fi
        rm -rf "$work/trace"
    done
    pc=$(cut -d' ' -f2 "$work/plain" | median)
    pw=$(cut -d' ' -f1 "$work/plain" | median)
    fc=$(cut -d' ' -f2 "$work/full" | median)
    fw=$(cut -d' ' -f1 "$work/full" | median)
    printf '%-8s %-6s %8s %7s %8s %7s   %s\n' qemu layer cpu_med cpu_x wall_med wall_x 'cpu runs'
    for l in "${layers[@]}"; do
        c=$(cut -d' ' -f2 "$work/$l" | median)
        w=$(cut -d' ' -f1 "$work/$l" | median)
        runs_cpu=$(cut -d' ' -f2 "$work/$l" | sort -n | paste -sd' ')
        awk -v q="$version" -v l="$l" -v c="$c" -v w="$w" -v pc="$pc" -v pw="$pw" -v r="$runs_cpu" 'BEGIN {
            printf "%-8s %-6s %8.2f %6.2fx %8.2f %6.2fx   %s\n", q, l, c, c / pc, w, w / pw, r }'
    done
    echo "late traced $(median <"$work/fraction") of full's events (runs: $(sort -g "$work/fraction" | paste -sd' '))"
    awk -v pc="$pc" -v pw="$pw" -v fc="$fc" -v fw="$fw" 'BEGIN {
        printf "bound (1.05 + 10%% of the traced cost): cpu %.2fx, wall %.2fx\n",
            1.05 + 0.10 * (fc / pc - 1), 1.05 + 0.10 * (fw / pw - 1) }'
done
