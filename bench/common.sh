# Sourced by the bench scripts: the cache, the workloads' QEMU commands, memory warming.

cache="${QEMU_UFTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qemu-uftrace}"

# The emulator of a QEMU version the install script provides: 10.0 (bookworm-backports, on
# PATH), 10.2.2 (built from Debian's source), 11.1.3 (trixie-backports); or a path.
qemu_program() {
    case "$1" in
        10.0) echo qemu-system-aarch64 ;;
        10.2.2 | 11.1.3) echo "$cache/qemu-$1/bin/qemu-system-aarch64" ;;
        *) echo "$1" ;;
    esac
}

# The QEMU command of a workload, into the array `argv` (calldense needs its guest built
# into "$work/guests"), on the emulator $qemu (default: the one on PATH).
workload_argv() {
    argv=("${qemu:-qemu-system-aarch64}" -M virt -cpu cortex-a57 -nographic -nic none)
    case "$1" in
        calldense) argv+=(-semihosting -kernel "$work/guests/calldense.elf") ;;
        kernel) argv+=(-m 1G -no-reboot -kernel "$cache/kernel/vmlinuz"
            -append "console=ttyAMA0 panic=-1 nokaslr") ;;
        *) echo "bench: unknown workload $1 (calldense, kernel)" >&2; exit 2 ;;
    esac
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

# timed_into FORMAT FILE CMD...: runs CMD under /usr/bin/time (FORMAT into FILE), stdin
# closed, output dropped, stderr kept in FILE.err. A command that fails ends the benchmark:
# GNU time would otherwise put a "Command exited" line in FILE, which sorts as a time of 0.
timed_into() {
    local fmt=$1 out=$2
    shift 2
    if ! /usr/bin/time -f "$fmt" -o "$out" "$@" </dev/null >/dev/null 2>"$out.err"; then
        echo "bench: failed: $*" >&2
        tail -n 5 "$out.err" >&2
        exit 1
    fi
}
