//! Builds the initramfs guest (`tests/guests/linux`) and prints `CPIO<TAB>INIT_ELF`, for the
//! benchmarks (`bench/common.sh`). Set `QEMU_UFTRACE_GUEST_DIR` to choose where it goes.

fn main() -> anyhow::Result<()> {
    let (cpio, elf) = qemu_uftrace_tests::linux_guest::initramfs_guest()?;
    println!("{}\t{}", cpio.display(), elf.display());
    Ok(())
}
