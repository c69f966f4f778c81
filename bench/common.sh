# Sourced by the bench scripts: the cache, the workloads' QEMU commands, memory warming.

cache="${QEMU_UFTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qemu-uftrace}"

# The QEMU command of a workload, into the array `argv` (calldense needs its guest built
# into "$work/guests").
workload_argv() {
    argv=(qemu-system-aarch64 -M virt -cpu cortex-a57 -nographic -nic none)
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
