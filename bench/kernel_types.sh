#!/usr/bin/env bash
# The time `record` spends on the kernel's struct offsets before QEMU starts: from the -dbg
# DWARF vmlinux against from the kernel's own BTF (raw image, and the vmlinux's .BTF), on
# Debian's arm64, amd64 and riscv64 kernels, page cache warm.
#   bench/kernel_types.sh
# Runs symbols/examples/kernel_offsets (release); prints its lines and /usr/bin/time's RSS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/common.sh"
cd "$root"
cargo build --release --quiet -p qemu-uftrace-symbols --example kernel_offsets
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/kernel_offsets"

measure() {
    cat "$@" >/dev/null
    local out
    out=$( { /usr/bin/time -f 'peak RSS %M KB' "$bin" "$@"; } 2>&1 )
    sed "s/^/  /" <<<"$out"
}

for k in "kernel kernel-dbg" "kernel-amd64 kernel-amd64-dbg" "kernel-riscv64 kernel-riscv64-dbg"; do
    read -r image dbg <<<"$k"
    echo "$image:"
    measure "$cache/$image/vmlinuz" "$cache/$dbg/vmlinux"
    measure "$cache/$image/vmlinuz"
done
