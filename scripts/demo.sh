#!/usr/bin/env bash
# Installs what is missing, builds qemu-uftrace and the bundled example guest, records the
# guest under QEMU and prints uftrace's replay of it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
cargo build --quiet --release -p qemu-uftrace
make -s -C examples/hello O="$root/target/examples/hello"
out="$root/target/examples/uftrace.data"
target/release/qemu-uftrace record -o "$out" -- \
    qemu-system-aarch64 -M virt -cpu cortex-a57 -nographic -nic none -semihosting \
    -kernel "$root/target/examples/hello/hello.elf"
target/release/qemu-uftrace replay -d "$out"
