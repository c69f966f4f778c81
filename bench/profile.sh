#!/usr/bin/env bash
# Compares plugin builds by their own CPU cost on the kernel boot, a finer measure than wall
# time on a noisy box (DEVELOPERS.md): each build runs RUNS times, interleaved, under
# `perf record -e cpu-clock`; printed are the medians of the plugin's self time and of all
# of QEMU's threads but the writer, in ms.
# Usage: bench/profile.sh NAME=PLUGIN.so [NAME=PLUGIN.so,ARG=VALUE ...]    (RUNS=5 by default)
# A build is a plugin .so (e.g. target/release/libqemu_uftrace_plugin.so, copied aside);
# extra plugin arguments may follow it, as on QEMU's -plugin option.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-5}
rate=20000
cache="${QEMU_UFTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qemu-uftrace}"
command -v perf >/dev/null || { echo "bench/profile.sh: perf not found; install linux-perf" >&2; exit 2; }
[ "$#" -gt 0 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
"$root/scripts/install-deps.sh" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for r in $(seq "$runs"); do
    for build in "$@"; do
        name=${build%%=*}
        plugin=${build#*=}
        mkdir -p "$work/out"
        dd if=/dev/zero of=/dev/null bs=1536M count=1 2>/dev/null || true
        perf record -q -e cpu-clock -F "$rate" -o "$work/perf.data" -- \
            qemu-system-aarch64 -M virt -cpu cortex-a57 -nographic -nic none -m 1G -no-reboot \
            -kernel "$cache/kernel/vmlinuz" -append "console=ttyAMA0 panic=-1 nokaslr" \
            -plugin "$plugin,out=$work/out" </dev/null >/dev/null 2>&1 || true
        [ -s "$work/out/plugin.stats" ] || { echo "bench/profile.sh: $name recorded nothing" >&2; exit 1; }
        so=$(basename "${plugin%%,*}")
        self=$(perf report -i "$work/perf.data" --stdio -n --sort dso 2>/dev/null |
            awk -v so="$so" '$3 == so {print $2}')
        qemu=$(perf report -i "$work/perf.data" --stdio -n --sort comm 2>/dev/null |
            awk '$3 ~ /^qemu-system/ {print $2}')
        echo "$name ${self:-0} ${qemu:-0}"
        rm -rf "$work/out" "$work/perf.data"
    done
done | awk -v rate="$rate" '
    { self[$1] = self[$1] " " $2; qemu[$1] = qemu[$1] " " $3; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    function median(list,   a, k, i, j, t) {
        k = split(list, a, " ")
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return a[int((k + 1) / 2)]
    }
    END {
        printf "%-16s %14s %14s\n", "build", "plugin_ms", "qemu_ms"
        for (i = 1; i <= n; i++)
            printf "%-16s %14.0f %14.0f\n", order[i], median(self[order[i]]) * 1000 / rate, median(qemu[order[i]]) * 1000 / rate
    }'
