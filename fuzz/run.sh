#!/usr/bin/env bash
# Runs each fuzz target for a bounded time (cargo-fuzz, nightly; scripts/install-deps.sh
# installs both): the symbol parsers (elf, system_map, kernel_image, any), the plugin's
# argument parser (plugin_args), the CLI's QEMU command-line reader (qemu_cmdline), its
# user-mode program reader (user_elf), and what guests and their files feed the CLI: the
# -initrd archive reader (initrd), SFrame and ORC unwind tables (sframe, orc), and the
# plugin's files read back after a run (plugin_files: plugin.procs, plugin.maps,
# plugin.tasks, stack cookies).
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default: $FUZZ_SECONDS or 60 s, all)
# Corpora are seeded from real inputs: the test ELFs compiled from symbols/tests/data,
# Debian's System.map, the head of the cached kernel image, plugin arguments and QEMU
# command lines as record writes and reads them, a cpio archive, a gcc-built .sframe
# section, the plugin's file lines as the CLI's tests write them. Crashes land in fuzz/artifacts/<target>/
# and make this script fail; a table of executions per target ends the output.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
secs=${1:-${FUZZ_SECONDS:-60}}
shift || true
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(elf system_map kernel_image any plugin_args qemu_cmdline user_elf initrd sframe orc plugin_files)
cache="${QEMU_UFTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qemu-uftrace}"

if ! command -v cargo-fuzz >/dev/null 2>&1 || ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: cargo-fuzz or the nightly toolchain is missing: run scripts/install-deps.sh" >&2
    exit 1
fi

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
        # A kernel module's debug file (relocatable, its DWARF relocated by the reader).
        [ ! -s "$cache/kernel-dbg/dummy.ko" ] || cp "$cache/kernel-dbg/dummy.ko" "$dir/dummy.ko"
        ;;
    esac
    case $1 in
    user_elf)
        # A host program, and the bare-metal ELFs (a machine user mode refuses).
        cp /bin/true "$dir/true"
        cp "$here/corpus/elf/"* "$dir/" 2>/dev/null || true
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
    case $1 in
    plugin_args)
        # NUL-separated arguments, as QEMU hands them over; the first doubles as a directory.
        printf 'out=/tmp/t=r\377ce,a.partial\0clock=insn\0max_depth=64' >"$dir/record"
        printf 'probe=on' >"$dir/probe"
        ;;
    qemu_cmdline)
        # NUL-separated words, as argv.
        printf '%s\0' qemu-system-aarch64 -M virt,accel=tcg -cpu max -nographic -semihosting \
            -kernel hello.elf -device loader,file=fw,,1.elf,addr=0x1000,force-raw=off \
            -m size=1G >"$dir/bare-metal"
        printf '%s\0' qemu-system-aarch64 -S -s -device '{"driver":"loader","file":"a.elf"}' \
            -accel kvm -plugin p.so,out=d -bios edk2.fd disk.img >"$dir/refused"
        ;;
    esac
    case $1 in
    initrd)
        # A newc archive written here (no cpio needed): a directory, a file, a symlink.
        newc() { # NAME MODE DATA
            local name=$1 mode=$2 data=$3 n
            n=$(( ${#name} + 1 ))
            printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%s\0' \
                1 "$mode" 0 0 1 0 "${#data}" 0 0 0 0 "$n" 0 "$name"
            head -c $(( (4 - (110 + n) % 4) % 4 )) /dev/zero
            printf '%s' "$data"
            head -c $(( (4 - ${#data} % 4) % 4 )) /dev/zero
        }
        {
            newc bin $((040755)) ''
            newc init $((0100755)) '#!/bin/sh'
            newc bin/sh $((0120777)) '../init'
            newc 'TRAILER!!!' 0 ''
        } >"$dir/archive"
        ;;
    sframe)
        # A section binutils wrote (as --gsframe, 2.41 on), cut out of a program.
        local src
        src=$(mktemp -d)
        printf 'int f(int x){return x+1;}\nint g(int x){return f(x)*2;}\nint main(void){return g(1);}\n' >"$src/s.c"
        gcc -O1 -fno-inline -Wa,--gsframe -o "$src/s" "$src/s.c" 2>/dev/null &&
            objcopy -O binary --only-section=.sframe "$src/s" "$dir/sframe" || true
        rm -rf "$src"
        ;;
    orc)
        # Three entries (split byte 3): offsets to 0, 4, 8; sp+8 calls, an end of stack.
        printf '\003\000\000\000\000\000\000\000\000\000\000\000\000\010\000\000\000\000\000\005\002\020\000\360\377\024\002\000\000\000\000\000\001' >"$dir/entries"
        ;;
    plugin_files)
        printf 'task\ttime=1\ttid=1\ttgid=1\tparent=0\nexec\ttime=2\ttid=1\ttgid=1\nmmap\ttime=3\ttid=1\ttgid=1\tstart=aaaa0000\tlen=1000\toffset=0\tpath=/init\nexit\ttime=9\ttid=1\ttgid=1\n' >"$dir/procs"
        printf 'tid=5\tpid=5\ttgid=5\tcomm=sh\tlevel=EL0\n' >"$dir/tasks"
        printf 'aux\tentry=400100\tbase=7fff1000\tvdso=7fff0000\nmmap\tstart=400000\toffset=0\tpath=/bin/true\n' >"$dir/maps"
        ;;
    esac
    [ -n "$(ls -A "$dir")" ] || printf 'x' >"$dir/empty"
}

cd "$here"
# FUZZ_JOBS targets at a time (default 1): scripts/test.sh runs two, so that the fuzzers left
# when the tests and Miri are done keep both cores busy. Each target's output is printed whole
# when it ends (its first and last lines where it found nothing).
jobs=${FUZZ_JOBS:-1}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# Seeded first (user_elf's corpus copies elf's), and built once before any target runs
# (targets started together would each wait for the build; a failed build fails each run).
for t in "${targets[@]}"; do
    seed "$t"
done
# No sanitizer: every function the targets reach is safe Rust (the engine's unsafe hot path is
# Miri's, scripts/test.sh), whose bounds and overflow checks stay on (cargo-fuzz builds with
# debug assertions), and AddressSanitizer adds nothing to safe code: it cost a fifth of the
# build's CPU (80 s of 360, 2026-12-06) and slowed every execution.
sanitizer=(-s none)
[ "$jobs" -le 1 ] || cargo +nightly fuzz build "${sanitizer[@]}" >&2 || true
fuzz_one() {
    local t=$1 args
    args=(-max_total_time="$secs" -max_len=262144 -rss_limit_mb=2048 -timeout=10)
    [ -f "$here/$t.dict" ] && args+=(-dict="$here/$t.dict")
    echo "fuzz/run.sh: $t for ${secs}s" >"$logs/$t.log"
    if cargo +nightly fuzz run "${sanitizer[@]}" "$t" "corpus/$t" -- "${args[@]}" >>"$logs/$t.log" 2>&1; then
        echo ok >"$logs/$t.result"
        # A run that found nothing: its first and last lines (libFuzzer's ~150 lines of
        # recommended dictionary filled CI's page, which shows the log's tail, and pushed a
        # failed test's message off it). FUZZ_VERBOSE=1 prints all of it.
        if [ -n "${FUZZ_VERBOSE:-}" ]; then
            cat "$logs/$t.log" >&2
        else
            { head -n 1 "$logs/$t.log"; tail -n 1 "$logs/$t.log"; } >&2
        fi
    else
        echo "FAILED (a crash lands in fuzz/artifacts/$t/)" >"$logs/$t.result"
        cat "$logs/$t.log" >&2
    fi
}
running=0
for t in "${targets[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait
status=0
table=()
for t in "${targets[@]}"; do
    result=$(cat "$logs/$t.result" 2>/dev/null || echo "FAILED (did not run)")
    [ "$result" = ok ] || status=1
    # libFuzzer's last words: "Done 123456 runs in 21 second(s)".
    done_line=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$logs/$t.log" 2>/dev/null | tail -n1 || true)
    table+=("$(printf '%-14s %12s runs %5s s  %s' "$t" \
        "$(echo "$done_line" | awk '{print $2}')" "$(echo "$done_line" | awk '{print $5}')" "$result")")
done
echo "fuzz/run.sh: summary" >&2
printf '  %s\n' "${table[@]}" >&2
exit $status
