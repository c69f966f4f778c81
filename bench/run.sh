#!/usr/bin/env bash
# Traced vs plain QEMU, measured in the same run (interleaved, median of RUNS):
#   calldense  a call-dense bare-metal loop (20 M calls)
#   kernel     Debian's arm64 cloud kernel booting to its "Unable to mount root fs" panic
#   smp4       the same boot on 4 vCPUs
#   filter     the same boot with -F of one small subtree (FILTER=FUNC, default
#              of_find_property); also prints its trace's size as % of the unfiltered one's
#   notrace    the same boot with -N of that subtree (NOTRACE=FUNC, same default); its size too
#   tfilter    the same boot with -t 10us (TFILTER=TIME, wall clock); its size too
#   tfilter-insn  the same boot with --clock insn -t 10000 (TFILTER_INSN=N); its size too
#   off        the same boot with --trace=off, switched on at panic (--trace-on-at): a
#              recording that traces only the end (bench/off.sh: the plugin's cost while off)
#   args       the same boot with -A of five kernel functions (ARGS="SPEC …"; default
#              __kmalloc, kmem_cache_alloc, of_find_property, kstrdup, _printk): against kernel's
#   tfilter-args  the same boot with tfilter's -t and args' -A: against tfilter
#   retvals    the same boot with -R of five kernel functions (RETVALS="SPEC …"; default
#              __kmalloc, kmem_cache_alloc, of_find_property, kstrdup, strlen): against args'
#   autoargs   the same boot with -a -F of one subsystem (AUTOARGS=FUNC, default ^of_) and
#              the kernel's DWARF vmlinux; autoargs-none: the same without -a; autoargs-all:
#              the whole boot with -a
#   initramfs  Debian's kernel booting our initramfs guest (tests/guests/linux) to power-off:
#              user space, syscalls, page faults, a fork; traced with --symbols init.elf
#   procs      the process guest (tests/guests/procs: dynamic PIEs, glibc, two processes of
#              one program) with the kernel's DWARF vmlinux: every process named
#   procs-nowatch  the same boot with System.map only (--no-auto-symbols: no DWARF nor BTF,
#                  no mapping watch)
#   user       user mode, bench/user.sh: bzip2 and the sqlite3 shell under qemu-aarch64,
#              qemu-x86_64 and qemu-riscv64 (10.2.2), with QEMU's own uftrace plugin beside
#   riscv64    Debian's riscv64 kernel (linux-image-*-riscv64: trixie's, or forky's 7.x where
#              trixie's lists fail) from OpenSBI's first instruction to its panic, under
#              qemu-system-riscv64
#   kernel-x86 Debian's amd64 cloud kernel (bzImage) booting to its panic under
#              qemu-system-x86_64 -M pc, SeaBIOS and the decompressor included
# Prints wall time, ratio, peak RSS, trace size, events and events/s for each workload, on
# each QEMU of QEMUS (versions the install script provides, or paths; default 10.0); then
# the range of each, and the verdict: the median and range of each interleaved pair's
# ratio, of wall and of CPU time (every thread's user + system), and the fastest runs' ratio.
# Usage: [QEMUS="10.0 10.2.2 11.1.3"] bench/run.sh [calldense] [kernel] [smp4] [filter] [notrace]
#        [tfilter] [tfilter-insn] [tfilter-args] [off] [args] [retvals] [autoargs] [autoargs-none] [autoargs-all]
#        [initramfs] [procs]
#        [procs-nowatch] [user] [riscv64] [kernel-x86]
#        (RUNS=3 by default; no workload named: calldense, kernel and user)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-3}
. "$root/bench/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bench_recorder

# One timed run: prints "seconds max_rss_kb cpu_seconds" (user + system, every thread).
timed() {
    warm_memory
    timed_into "%e %M %U %S" "$work/time" "$@"
    awk '{ printf "%s %s %.2f\n", $1, $2, $3 + $4 }' "$work/time"
}

# "min-max" of the first column of a file of timings.
spread() { cut -d' ' -f1 "$1" | sort -n | sed -n '1p;$p' | paste -sd-; }

stat_of() { sed -n "s/^$1=//p" "$work/trace/plugin.stats" 2>/dev/null | head -n1; }

workloads=()
user_mode=0
for name in "${@:-calldense kernel user}"; do
    for w in $name; do
        if [ "$w" = user ]; then user_mode=1; else workloads+=("$w"); fi
    done
done
[ "${#workloads[@]}" -eq 0 ] || printf '%-8s %-10s %9s %9s %7s %9s %9s %9s %12s %12s\n' \
    qemu workload plain_s traced_s ratio plain_MB traced_MB trace_MB events events/s
for name in "${workloads[@]}"; do build_workload_guest "$name"; done
for version in ${QEMUS:-10.0}; do
    qemu=$(qemu_program "$version")
    for name in "${workloads[@]}"; do
        workload_argv "$name"
        : >"$work/plain" ; : >"$work/traced"
        for i in $(seq "$runs"); do
            # Plain first in odd pairs, traced first in even ones (as bench/user.sh).
            if [ $((i % 2)) = 1 ]; then
                timed "${argv[@]}" >>"$work/plain"
                timed "$qu" record -o "$work/trace" "${record_opts[@]}" -- "${argv[@]}" >>"$work/traced"
            else
                timed "$qu" record -o "$work/trace" "${record_opts[@]}" -- "${argv[@]}" >>"$work/traced"
                timed "${argv[@]}" >>"$work/plain"
            fi
            # Keep the last trace for its figures. Delete the others at once: left in the page
            # cache, a fresh 250 MB trace slows the next run (measured: ~0.05 s on the boot), and
            # that must not fall on the plain runs only.
            if [ "$i" -lt "$runs" ]; then rm -rf "$work/trace" "$work/trace.old"; fi
        done
        p=$(cut -d' ' -f1 "$work/plain" | median)
        t=$(cut -d' ' -f1 "$work/traced" | median)
        pm=$(cut -d' ' -f2 "$work/plain" | median)
        tm=$(cut -d' ' -f2 "$work/traced" | median)
        events=$(stat_of events)
        bytes=$(du -sb "$work/trace" | cut -f1)
        awk -v q="$version" -v n="$name" -v p="$p" -v t="$t" -v pm="$pm" -v tm="$tm" -v b="$bytes" -v e="${events:-0}" 'BEGIN {
            printf "%-8s %-10s %9.2f %9.2f %6.2fx %9.0f %9.0f %9.0f %12d %12.0f\n",
                q, n, p, t, t / p, pm / 1024, tm / 1024, b / 1048576, e, e / t }'
        grep -E '^(calls|returns|unmatched_returns|resyncs)=' "$work/trace/plugin.stats" | tr '\n' ' ' | sed 's/^/           /'
        # The spread says how far the medians can be trusted on a noisy machine.
        echo
        printf '           range: plain %s s, traced %s s\n' "$(spread "$work/plain")" "$(spread "$work/traced")"
        # The verdict: each interleaved pair's ratio (median, range), of wall and CPU time.
        printf '           pairs: %s\n' "$(ratio_line "$work/plain" "$work/traced")"
        # A filtered run's size against the whole trace's (recorded once more, untimed).
        case $name in filter | notrace | tfilter | tfilter-insn | tfilter-args) filtered=1 ;; *) filtered=0 ;; esac
        if [ "$filtered" = 1 ]; then
            "$qu" record -q -o "$work/full" -- "${argv[@]}" >/dev/null 2>&1 </dev/null
            full=$(du -sb "$work/full" | cut -f1)
            awk -v b="$bytes" -v f="$full" 'BEGIN {
                printf "           trace: %.2f%% of the unfiltered one (%.0f MB)\n", 100 * b / f, f / 1048576 }'
            rm -rf "$work/full" "$work/full.old"
        fi
    done
done

# User mode has its own table (per guest architecture, QEMU's plugin beside ours).
if [ "$user_mode" = 1 ]; then
    echo
    QEMU_UFTRACE_BENCH_READY=1 RUNS="$runs" "$root/bench/user.sh"
fi
