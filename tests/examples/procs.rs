//! Builds the process guest (`tests/guests/procs`: dynamic PIEs, glibc and the loader in a
//! gzip-compressed initramfs) and prints its cpio's path, for the benchmarks
//! (`bench/common.sh`). Set `QEMU_UFTRACE_GUEST_DIR` to choose where it goes.

fn main() -> anyhow::Result<()> {
    let guest = qemu_uftrace_tests::procs_guest::procs_guest()?;
    println!("{}", guest.cpio.display());
    Ok(())
}
