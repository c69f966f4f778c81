# Sourced by the bench scripts: the cache, the workloads' QEMU commands, memory warming.

cache="${QEMU_UFTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qemu-uftrace}"

# The fixtures (the install script, unless QEMU_UFTRACE_BENCH_READY=1 says they are there)
# and the release recorder, its path in `qu` (CARGO_TARGET_DIR honoured).
bench_recorder() {
    [ -n "${QEMU_UFTRACE_BENCH_READY:-}" ] || "$root/scripts/install-deps.sh" >&2
    cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p qemu-uftrace
    qu="${CARGO_TARGET_DIR:-$root/target}/release/qemu-uftrace"
}

# The emulator of a QEMU version the install script provides: 10.0 (bookworm-backports, on
# PATH), 10.2.2 (built from Debian's source), 11.1.3 (trixie-backports); or a path.
qemu_program() {
    case "$1" in
        10.0) echo qemu-system-aarch64 ;;
        10.2.2 | 11.1.3) echo "$cache/qemu-$1/bin/qemu-system-aarch64" ;;
        *) echo "$1" ;;
    esac
}

# Builds what a workload's guest needs into "$work/guests": calldense's ELF (make), the
# initramfs guest's cpio and /init ELF (the tests crate writes the cpio); nothing for the
# kernel boots.
build_workload_guest() {
    case "$1" in
        calldense) make -s -C "$root/bench/guests" O="$work/guests" >/dev/null ;;
        initramfs) QEMU_UFTRACE_GUEST_DIR="$work/guests" cargo run --quiet \
            --manifest-path "$root/Cargo.toml" -p qemu-uftrace-tests --example initramfs >/dev/null ;;
        procs | procs-nowatch) QEMU_UFTRACE_GUEST_DIR="$work/guests" cargo run --quiet \
            --manifest-path "$root/Cargo.toml" -p qemu-uftrace-tests --example procs >/dev/null ;;
    esac
}

# The QEMU command of a workload, into the array `argv`, and the `record` options it needs
# into `record_opts` (after build_workload_guest), on the emulator $qemu (default: the one on
# PATH):
#   calldense  a call-dense bare-metal loop (20 M calls)
#   kernel     Debian's kernel booting to its "Unable to mount root fs" panic
#   smp4       the same boot on 4 vCPUs
#   kernel-kaslr  the same boot without nokaslr: the kernel runs at a random base (QEMU's
#              device-tree seed), which record finds as it boots (bench/profile.sh: give the
#              plugin kaslr_file=, the CLI's anchor)
#   filter     the same boot recorded with -F of one small subtree (FILTER, default
#              of_find_property: device-tree lookups all through the boot)
#   notrace    the same boot recorded with -N of that subtree (NOTRACE, same default): all
#              but it written, every call through the filter's path
#   tfilter    the same boot recorded with -t 10us (TFILTER, wall clock: calls shorter than
#              it not written, their longer ancestors kept)
#   tfilter-insn  the same boot with --clock insn -t 10000 (TFILTER_INSN): instructions
#   off        the same boot recorded with --trace=off, switched on at its panic (a tiny
#              window at the end; the trigger keeps a translation callback while off:
#              bench/off.sh measures the plugin off without one)
#   retvals    the same boot recorded with -R of five kernel functions (RETVALS)
#   tfilter-args  tfilter's recording with args' -A (issue 38 beside record's -t)
#   autoargs   the same boot recorded with -a -F of one subsystem (AUTOARGS, default ^of_)
#              and the kernel's DWARF vmlinux; autoargs-none: the same without -a;
#              autoargs-all: the whole boot with -a (every typed function's values)
#   initramfs  Debian's kernel booting the initramfs guest (tests/guests/linux): /init's
#              syscalls, page faults and fork, then power-off; -cpu max, 1 vCPU, --symbols
#   procs      Debian's kernel booting the process guest (tests/guests/procs): dynamic PIEs,
#              glibc and the loader, /init runs /worker twice; --symbols with the kernel's
#              DWARF vmlinux, so every process is named (the mapping watch on)
#   procs-nowatch  the same boot with --symbols System.map and --no-auto-symbols: neither
#              DWARF nor the image's BTF, so no mapping watch (nor task names), for the
#              watch's cost apart
#   riscv64    the riscv64 kernel (built from Debian's source) booting from OpenSBI to its
#              "Unable to mount root fs" panic, on qemu-system-riscv64
#   kernel-x86 Debian's amd64 cloud kernel (bzImage) booting to its panic on -M pc, from
#              SeaBIOS on
workload_argv() {
    local cpu=cortex-a57 extra
    local kernel=(-m 1G -no-reboot -kernel "$cache/kernel/vmlinuz" -append "console=ttyAMA0 panic=-1 nokaslr")
    record_opts=()
    case "$1" in
        calldense) extra=(-semihosting -kernel "$work/guests/calldense.elf") ;;
        kernel) extra=("${kernel[@]}") ;;
        kernel-kaslr) extra=("${kernel[@]:0:5}" -append "console=ttyAMA0 panic=-1") ;;
        smp4) extra=("${kernel[@]}" -smp 4) ;;
        filter) extra=("${kernel[@]}"); record_opts=(-F "${FILTER:-of_find_property}") ;;
        notrace) extra=("${kernel[@]}"); record_opts=(-N "${NOTRACE:-of_find_property}") ;;
        tfilter) extra=("${kernel[@]}"); record_opts=(--clock wall -t "${TFILTER:-10us}") ;;
        tfilter-insn) extra=("${kernel[@]}"); record_opts=(--clock insn -t "${TFILTER_INSN:-10000}") ;;
        off) extra=("${kernel[@]}"); record_opts=(--trace=off --trace-on-at panic) ;;
        # -A of five kernel functions (ARGS: space-separated specs), each call read at entry.
        args)
            extra=("${kernel[@]}")
            local spec
            for spec in ${ARGS:-__kmalloc@arg1/u,arg2/x kmem_cache_alloc@arg1/x,arg2/x \
                of_find_property@arg1/x,arg2/s kstrdup@arg1/s,arg2/x _printk@arg1/s}; do
                record_opts+=(-A "$spec")
            done ;;
        # The same -A with -t 10us: each call's values wait with its entry, and go with it
        # (against tfilter).
        tfilter-args)
            extra=("${kernel[@]}")
            record_opts=(--clock wall -t "${TFILTER:-10us}")
            local spec
            for spec in ${ARGS:-__kmalloc@arg1/u,arg2/x kmem_cache_alloc@arg1/x,arg2/x \
                of_find_property@arg1/x,arg2/s kstrdup@arg1/s,arg2/x _printk@arg1/s}; do
                record_opts+=(-A "$spec")
            done ;;
        # -R of five kernel functions (RETVALS: space-separated specs): each read at its
        # return, and every return instruction's callback listening for their tail calls.
        retvals)
            extra=("${kernel[@]}")
            # Return instructions need the functions' sizes: the ELF vmlinux's (the Image's
            # kallsyms have none).
            record_opts=(--symbols "$cache/kernel-dbg/vmlinux")
            local spec
            for spec in ${RETVALS:-__kmalloc@retval/x kmem_cache_alloc@retval/x \
                of_find_property@retval/x kstrdup@retval/s strlen@retval/d}; do
                record_opts+=(-R "$spec")
            done ;;
        # -a aimed by -F at one subsystem (AUTOARGS: -F's FUNC, default ^of_: the device
        # tree's, called all through the boot), typed by the kernel's DWARF vmlinux;
        # autoargs-none: the same recording without -a (what -a adds to it).
        autoargs | autoargs-none)
            extra=("${kernel[@]}")
            record_opts=(--symbols "$cache/kernel-dbg/vmlinux" -F "${AUTOARGS:-^of_}")
            [ "$1" = autoargs-none ] || record_opts+=(-a) ;;
        # -a over the whole boot: the 37 k typed functions' values, each call's.
        autoargs-all)
            extra=("${kernel[@]}")
            record_opts=(--symbols "$cache/kernel-dbg/vmlinux" -a) ;;
        initramfs)
            cpu=max
            extra=(-m 512M -no-reboot -smp 1 -kernel "$cache/kernel/vmlinuz"
                -initrd "$work/guests/linux/initramfs.cpio"
                -append "console=ttyAMA0 panic=-1 nokaslr rdinit=/init")
            record_opts=(--symbols "$work/guests/linux/init.elf") ;;
        procs | procs-nowatch)
            cpu=max
            extra=(-m 512M -no-reboot -smp 1 -kernel "$cache/kernel/vmlinuz"
                -initrd "$work/guests/procs/initramfs.cpio.gz"
                -append "console=ttyAMA0 panic=-1 nokaslr rdinit=/init")
            if [ "$1" = procs ]; then
                record_opts=(--symbols "$cache/kernel-dbg/vmlinux")
            else
                record_opts=(--no-auto-symbols --symbols "$cache/kernel-dbg/System.map")
            fi ;;
        riscv64)
            # Debian's riscv64 kernel install-deps caches, from OpenSBI (QEMU's own) to its
            # panic, on the riscv64 emulator of the same QEMU.
            local rv=${qemu:-qemu-system-aarch64}
            argv=("${rv/qemu-system-aarch64/qemu-system-riscv64}" -M virt -m 512M -nographic
                -nic none -no-reboot -bios default -kernel "$cache/kernel-riscv64/vmlinuz"
                -append "console=ttyS0 panic=-1 nokaslr")
            return ;;
        kernel-x86)
            # The same QEMU's x86_64 emulator (named like the aarch64 one), on the PC machine.
            local q=${qemu:-qemu-system-aarch64}
            argv=("${q%aarch64}x86_64" -M pc -m 512M -nographic -nic none -no-reboot
                -kernel "$cache/kernel-amd64/vmlinuz" -append "console=ttyS0 panic=-1 nokaslr")
            return ;;
        *) echo "bench: unknown workload $1 (calldense, kernel, smp4, initramfs, procs, procs-nowatch, riscv64, kernel-x86)" >&2
           exit 2 ;;
    esac
    argv=("${qemu:-qemu-system-aarch64}" -M virt -cpu "$cpu" -nographic -nic none "${extra[@]}")
}

# Touches 1.5 GiB and frees it. On a VM whose balloon reports free pages to the host (this
# project's CI machines do), memory left free for a few seconds goes back to the host, and
# touching it again costs ~6 us a page: the guest RAM QEMU touches and the trace's page cache
# would then cost whichever run comes after a pause. Every timed run starts warm instead.
warm_memory() {
    dd if=/dev/zero of=/dev/null bs=1536M count=1 2>/dev/null || true
}

# The median of the numbers on standard input, one per line.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# pair_ratios PLAIN TRACED COLUMN: the ratio of each interleaved pair of runs (line i of
# TRACED over line i of PLAIN, both of column COLUMN), as "median min max". A pair runs
# seconds apart, so the machine's slow drifts (other jobs, the host) cancel out in its ratio,
# where a ratio of two medians takes them from different moments.
pair_ratios() {
    paste -d' ' <(cut -d' ' -f"$3" "$1") <(cut -d' ' -f"$3" "$2") |
        awk '$1 > 0 { print $2 / $1 }' | sort -g |
        awk '{ a[NR] = $1 } END { printf "%.2f %.2f %.2f\n", a[int((NR + 1) / 2)], a[1], a[NR] }'
}

# best_ratio PLAIN TRACED COLUMN: the fastest traced run over the fastest plain one. Other
# jobs only ever add time, so each side's fastest run is the one they disturbed least.
best_ratio() {
    awk -v c="$3" 'NR == FNR { if (p == "" || $c < p) p = $c; next }
        { if (t == "" || $c < t) t = $c }
        END { printf "%.2f", (p > 0 ? t / p : 0) }' "$1" "$2"
}

# ratio_line PLAIN TRACED: "wall 1.23x (1.20..1.27), cpu 1.21x (1.19..1.22); best wall
# 1.21x, cpu 1.20x": the median and range of the pairs' ratios of wall time (column 1) and
# of CPU time (column 3: user + system of every thread), then the ratios of the fastest runs.
ratio_line() {
    local w c
    read -r -a w <<<"$(pair_ratios "$1" "$2" 1)"
    read -r -a c <<<"$(pair_ratios "$1" "$2" 3)"
    printf 'wall %sx (%s..%s), cpu %sx (%s..%s); best wall %sx, cpu %sx' "${w[@]}" "${c[@]}" \
        "$(best_ratio "$1" "$2" 1)" "$(best_ratio "$1" "$2" 3)"
}

# timed_into FORMAT FILE CMD...: runs CMD under /usr/bin/time (FORMAT into FILE), stdin
# closed, output dropped (or kept in $TIMED_STDOUT), stderr kept in FILE.err. A command that fails ends the benchmark:
# GNU time would otherwise put a "Command exited" line in FILE, which sorts as a time of 0.
# Unless its stderr says $TIMED_FAILS_SAYING (a failure the run expects: record never
# switched on), whose line is then taken out.
timed_into() {
    local fmt=$1 out=$2
    shift 2
    if ! /usr/bin/time -f "$fmt" -o "$out" "$@" </dev/null >"${TIMED_STDOUT:-/dev/null}" 2>"$out.err"; then
        if [ -n "${TIMED_FAILS_SAYING:-}" ] && grep -qF "$TIMED_FAILS_SAYING" "$out.err"; then
            sed -i '/^Command exited/d' "$out"
            return 0
        fi
        echo "bench: failed: $*" >&2
        tail -n 5 "$out.err" >&2
        exit 1
    fi
}
