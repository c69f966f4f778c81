#!/usr/bin/env bash
# The Debian VM (issue 36): systemd's boot from its kernel and initramfs-tools initrd to its
# own power-off, plain QEMU against `record --sysroot ROOT`, in interleaved pairs (RUNS,
# plain first in odd pairs), for each of ARCHS (amd64 arm64) on QEMU (10.2.2: the one that
# reports exceptions). The VMs are the test fixtures (scripts/install-deps.sh builds them).
#   record   the whole boot
#   tfilter  the whole boot with -t 10us (what tests/debian_vm records)
#   startat  --start-at START_AT (/lib/systemd/systemd-journald:main): written from a
#            service's main on (issue 36), the rest followed but not written
#   ffile    -F FILTER (/lib/systemd/systemd-journald:main): a service's main subtree
#            only, placed in each process that maps the file (issue 36)
#   off      --trace=off, never switched on: the tracer installed, not tracing
#   offat    --trace=off --trace-on-at OFF_AT (/usr/bin/apt:main, which the boot never
#            runs): off, the processes followed for a guest file's function (issue 37)
#   late     --trace=off, switched on by `qemu-uftrace trace on` when the guest's console
#            says LATE_AT (multi-user.target: systemd reached it, ~88% into the boot;
#            issue 37's "the last part" on a boot long enough for record's fixed costs,
#            ~0.5 s before and after QEMU, to matter less); its events are said as a share
#            of the whole boot's (record's). A guest event, not a share of a plain run's
#            time: a traced run faster than that plain run would end before it
# Prints per layer: the pairs' wall and CPU ratios (median and range, CPU = user + system of
# every thread, record's own included), the largest process's peak RSS, the trace's bytes,
# the processes and modules record saw and named (its summary), and record's time after
# QEMU exited (from the plugin's last write to record's end: the trace's assembly, symbols).
# Usage: [RUNS=3] [ARCHS="amd64 arm64"] [LAYERS="record tfilter"] [QEMU=10.2.2] [LATE_AT=TEXT]
#        [START_AT=PATH:FUNC] [OFF_AT=PATH:FUNC] [FILTER=PATH:FUNC]
#        bench/vm.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-3}
. "$root/bench/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bench_recorder
version=${QEMU:-10.2.2}

# The VM's boot into `argv` and its root into `sysroot`, as the tests boot it (the tests
# crate's debian_vm example prints both).
vm_argv() {
    local emulator lines q
    case "$1" in
        amd64) emulator=qemu-system-x86_64 ;;
        arm64) emulator=qemu-system-aarch64 ;;
    esac
    q=$(qemu_program "$version")
    mapfile -t lines < <(cargo run --quiet --release --manifest-path "$root/Cargo.toml" \
        -p qemu-uftrace-tests --example debian_vm -- "$1" "${q%qemu-system-aarch64}$emulator")
    [ "${#lines[@]}" -gt 1 ] || { echo "bench/vm.sh: no $1 VM: run scripts/install-deps.sh" >&2; exit 2; }
    sysroot=${lines[0]}
    argv=("${lines[@]:1}")
}

# One timed run into file $1: "wall max_rss_kb cpu".
timed() {
    local into=$1
    shift
    warm_memory
    timed_into "%e %M %U %S" "$work/time" "$@"
    awk '{ printf "%s %s %.2f\n", $1, $2, $3 + $4 }' "$work/time" >>"$into"
}

# A traced run of layer $1 into "$work/trace", its figures appended to "$work/$1.*".
traced() {
    local layer=$1 opts=()
    [ "$layer" = tfilter ] && opts=(-t 10us)
    [ "$layer" = startat ] && opts=(--start-at "${START_AT:-/lib/systemd/systemd-journald:main}")
    [ "$layer" = ffile ] && opts=(-F "${FILTER:-/lib/systemd/systemd-journald:main}")
    [ "$layer" = off ] && opts=(--trace=off)
    [ "$layer" = offat ] && opts=(--trace=off --trace-on-at "${OFF_AT:-/usr/bin/apt:main}")
    rm -rf "$work/trace"
    local console=/dev/null
    if [ "$layer" = late ]; then
        opts=(--trace=off)
        console=$work/console
        : >"$console"
        # Polled (a line comes once per boot); given up once record has ended.
        (
            until grep -qF -- "${LATE_AT:-multi-user.target}" "$console"; do
                [ -e "$work/done" ] || [ ! -d "$work" ] && exit 0
                sleep 0.01
            done
            "$qu" trace on -d "$work/trace" >/dev/null 2>&1
        ) &
    fi
    rm -f "$work/done"
    # Never switched on, record says so and fails, by design: what it costs is still timed.
    local fails=
    [ "$layer" = off ] || [ "$layer" = offat ] && fails="tracing was never switched on"
    TIMED_STDOUT=$console TIMED_FAILS_SAYING=$fails timed "$work/$layer" "$qu" record \
        -o "$work/trace" --sysroot "$sysroot" "${opts[@]}" -- "${argv[@]}"
    touch "$work/done"
    wait
    if [ -n "$fails" ]; then
        # No trace: its figures are none.
        echo 0 >>"$work/$layer.bytes"
        echo 0 >>"$work/$layer.after"
        cp "$work/time.err" "$work/$layer.said"
        return
    fi
    sed -n 's/^events=//p' "$work/trace/plugin.stats" >>"$work/$layer.events"
    # /usr/bin/time writes its file as record ends; the plugin its stats as QEMU exits.
    echo "$(stat -c %.9Y "$work/time") $(stat -c %.9Y "$work/trace/plugin.stats")" |
        awk '{ printf "%.2f\n", $1 - $2 }' >>"$work/$layer.after"
    du -sb "$work/trace" | cut -f1 >>"$work/$layer.bytes"
    cp "$work/time.err" "$work/$layer.said"
}

layers=(${LAYERS:-record tfilter})
for arch in ${ARCHS:-amd64 arm64}; do
    vm_argv "$arch"
    : >"$work/plain"
    for l in "${layers[@]}"; do
        : >"$work/$l"; : >"$work/$l.after"; : >"$work/$l.bytes"; : >"$work/$l.events"
    done
    for i in $(seq "$runs"); do
        if [ $((i % 2)) = 1 ]; then timed "$work/plain" "${argv[@]}"; fi
        for l in "${layers[@]}"; do traced "$l"; done
        if [ $((i % 2)) = 0 ]; then timed "$work/plain" "${argv[@]}"; fi
    done
    rm -rf "$work/trace"
    echo "$arch on QEMU $version: plain wall $(cut -d' ' -f1 "$work/plain" | median) s, cpu $(cut -d' ' -f3 "$work/plain" | median) s, peak RSS $(($(cut -d' ' -f2 "$work/plain" | median) / 1024)) MB ($runs runs)"
    for l in "${layers[@]}"; do
        echo "  $l: $(ratio_line "$work/plain" "$work/$l")"
        echo "    peak RSS $(($(cut -d' ' -f2 "$work/$l" | median) / 1024)) MB, trace $(($(median <"$work/$l.bytes") / 1048576)) MB, record after QEMU $(median <"$work/$l.after") s (medians)"
        # What the last run's summary said of calls, processes and modules, and how many
        # files it could not name (one warning each).
        { grep -E 'calls and|guest processes: [0-9]|kernel modules:|record: wrote' "$work/$l.said" || true; } |
            sed 's/^qemu-uftrace: /    said: /'
        echo "    files without symbols: $(grep -c 'has no symbols' "$work/$l.said"), with only exported ones: $(grep -c 'only its exported symbols' "$work/$l.said")"
        if [ "$l" = late ] && [ -s "$work/record.events" ]; then
            echo "    traced $(awk -v w="$(median <"$work/record.events")" '{ print $1 / w }' "$work/late.events" | sort -g | paste -sd' ') of the whole boot's events"
        fi
    done
done
