#!/usr/bin/env bash
# Wall time and peak RSS of the symbols crate at kernel scale: Debian's arm64 vmlinux with
# DWARF source lines (the -dbg package's), and kallsyms recovery from the raw image.
#   bench/symbols.sh [VMLINUX] [IMAGE]
# Runs symbols/examples/load (release); prints its counts and /usr/bin/time's figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/common.sh"
vmlinux=${1:-$cache/kernel-dbg/vmlinux}
image=${2:-$cache/kernel/vmlinuz}
if [ ! -s "$vmlinux" ] || [ ! -s "$image" ] || [ ! -x /usr/bin/time ]; then
    "$root/scripts/install-deps.sh"
fi

cd "$root"
cargo build --release --quiet -p qemu-uftrace-symbols --example load
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/load"

measure() {
    local label=$1
    shift
    # Warm the page cache: the figure is about parsing, not the disk.
    cat "${@: -1}" >/dev/null
    local out counts
    counts=$(mktemp)
    out=$( { /usr/bin/time -v "$bin" "$@" >"$counts"; } 2>&1 )
    sed "s/^/  /" "$counts"
    rm -f "$counts"
    local wall rss
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' <<<"$out")
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' <<<"$out")
    printf '%-34s wall %s  peak RSS %d MB\n' "$label" "$wall" "$((rss / 1024))"
}

for i in 1 2 3; do
    measure "vmlinux + source lines (run $i)" "$vmlinux"
done
measure "vmlinux, symbols only" --no-lines "$vmlinux"
measure "kallsyms from raw image" "$image"
