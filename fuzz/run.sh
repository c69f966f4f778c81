#!/usr/bin/env bash
# Runs each symbols fuzz target for a bounded time (cargo-fuzz, nightly).
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, all targets)
# Corpora are seeded from real inputs: the test ELFs compiled from symbols/tests/data,
# Debian's System.map, and the head of the cached kernel image. Crashes land in
# fuzz/artifacts/<target>/ and make this script fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
secs=${1:-${FUZZ_SECONDS:-60}}
shift || true
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(elf system_map kernel_image any)
cache="${QEMU_UFTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qemu-uftrace}"

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
rustup run nightly rustc --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal

seed() {
    local dir="$here/corpus/$1"
    mkdir -p "$dir"
    [ -z "$(ls -A "$dir")" ] || return 0
    case $1 in
    elf|any)
        if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1; then
            local d="$here/../symbols/tests/data"
            aarch64-linux-gnu-gcc -g -O2 -ffreestanding -nostdlib -static -Wl,-Ttext=0x40080000 \
                -o "$dir/bare" "$d/bare.c" || true
            aarch64-linux-gnu-gcc -g -O0 -ffreestanding -nostdlib -static -o "$dir/bare-O0" "$d/bare.c" || true
        fi
        ;;
    esac
    case $1 in
    system_map|any)
        [ -s "$cache/kernel-dbg/System.map" ] && head -c 16384 "$cache/kernel-dbg/System.map" >"$dir/System.map"
        printf 'ffffffffc0001000 t foo\t[mod]\nffffffffc0002000 T bar\t[mod]\n' >"$dir/kallsyms"
        ;;
    esac
    case $1 in
    kernel_image|any)
        [ -s "$cache/kernel/vmlinuz" ] && head -c 4096 "$cache/kernel/vmlinuz" >"$dir/image-head"
        printf '0\0001\0002\0003\0004\0005\0006\0007\0008\0009\000' >"$dir/digits"
        ;;
    esac
    [ -n "$(ls -A "$dir")" ] || printf 'x' >"$dir/empty"
}

cd "$here"
status=0
for t in "${targets[@]}"; do
    seed "$t"
    echo "fuzz/run.sh: $t for ${secs}s" >&2
    args=(-max_total_time="$secs" -max_len=262144 -rss_limit_mb=2048 -timeout=10)
    [ "$t" = kernel_image ] && args+=(-dict="$here/kernel_image.dict")
    cargo +nightly fuzz run "$t" "corpus/$t" -- "${args[@]}" || status=1
done
exit $status
