#!/usr/bin/env bash
# The unwinding after a run from a Linux snapshot with ~100 tasks (issue 25's target: at most
# 1 s): Debian's arm64 kernel (ARCH=x86_64: amd64's) with /init (tests/guests/linux/manyinit.c) and its 100 children
# asleep, saved once through the monitor; then RUNS recordings from the snapshot (-loadvm),
# each giving /init its line (it wakes and reaps the children, then powers off), with
# --symbols /init and the kernel's -dbg vmlinux. Prints each run's tasks and frames
# recovered and the unwinding's time as record's summary reports it (the symbol files'
# tables loaded and indexed, every cookie unwound, every task's stream rewritten), then the
# range, and the whole record's wall time for scale.
# Usage: [RUNS=3] [ARCH=arm64|x86_64] bench/unwind.sh   (QEMU 10.2.2)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-3}
. "$root/bench/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bench_recorder

# The guest, booted and saved: /init's ELF, the vmlinux, then the QEMU command, one argument
# a line.
mapfile -t lines < <(QEMU_UFTRACE_GUEST_DIR="$work/guests" cargo run --quiet \
    --manifest-path "$root/Cargo.toml" -p qemu-uftrace-tests --example manytasks -- \
    "$work" "${ARCH:-arm64}")
[ "${#lines[@]}" -gt 2 ] || { echo "bench: the snapshot guest did not build or boot" >&2; exit 1; }
elf=${lines[0]}
vmlinux=${lines[1]}
argv=("${lines[@]:2}")
printf 'g\n' >"$work/input"

printf '%-4s %6s %7s %10s %9s\n' run tasks frames unwind_ms record_s
for i in $(seq "$runs"); do
    rm -rf "$work/trace"
    warm_memory
    timed_into "%e" "$work/time" "$qu" record -o "$work/trace" \
        --symbols "$elf" --symbols "$vmlinux" -- "${argv[@]}" \
        -loadvm s1 -monitor none \
        -chardev "file,id=uart,path=$work/console,input-path=$work/input" -serial chardev:uart
    if ! grep -q "MANY: done" "$work/console"; then
        echo "bench: the guest did not finish from the snapshot:" >&2
        tail -n 5 "$work/console" "$work/time.err" >&2
        exit 1
    fi
    line=$(grep "the run started mid-way" "$work/time.err") || {
        echo "bench: no unwinding summary:" >&2
        cat "$work/time.err" >&2
        exit 1
    }
    frames=$(sed -n 's/.*: \([0-9]*\) open frames\{0,1\} recovered.*/\1/p' <<<"$line")
    tasks=$(sed -n 's/.* unwinding \([0-9]*\) tasks\{0,1\}.*/\1/p' <<<"$line")
    ms=$(sed -n 's/.* in \([0-9]*\) ms$/\1/p' <<<"$line")
    echo "$ms" >>"$work/ms"
    printf '%-4s %6s %7s %10s %9s\n' "$i" "$tasks" "$frames" "$ms" "$(cat "$work/time")"
done
echo "unwinding: $(sort -n "$work/ms" | sed -n '1p;$p' | paste -sd-) ms over $runs runs"
