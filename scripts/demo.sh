#!/usr/bin/env bash
# The first trace: installs only what the demo uses (QEMU with plugins for aarch64, uftrace, the
# aarch64 cross compiler), builds qemu-uftrace and the bundled example guest, records the guest
# under QEMU and prints uftrace's replay of it. A few minutes on a fresh machine, most of it
# `cargo build`; the test fixtures are installed by scripts/test.sh, not here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh demo
target=${CARGO_TARGET_DIR:-$root/target}
cargo build --quiet --release -p qemu-uftrace
make -s -C examples/hello O="$target/examples/hello"
out="$target/examples/uftrace.data"
# The guest ends itself (semihosting exit); -nographic keeps its console on this terminal.
"$target/release/qemu-uftrace" record -o "$out" -- \
    qemu-system-aarch64 -M virt -cpu cortex-a57 -nographic -nic none -semihosting \
    -kernel "$target/examples/hello/hello.elf"
"$target/release/qemu-uftrace" replay -d "$out"
