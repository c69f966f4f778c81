//! For `bench/unwind.sh`: builds the unwinding benchmark's guest
//! (`tests/guests/linux/manyinit.c`), boots it on Debian's arm64 kernel until PID 1 and its
//! 100 children sleep, and saves snapshot `s1` on a qcow2 disk in WORK. Prints `/init`'s ELF
//! on the first line, then the QEMU command that boots the same machine (to which the
//! benchmark adds `-loadvm s1` and its serial), one argument a line.
//!
//! Usage: manytasks WORK [QEMU] (default: the cached QEMU 10.2.2's qemu-system-aarch64).

use anyhow::{bail, Context, Result};
use qemu_uftrace_tests::linux_guest::{many_initramfs_guest, INITRAMFS_APPEND, INITRAMFS_TIMEOUT};
use qemu_uftrace_tests::snapshot::{create_disk, disk_args, save_at_marker};
use qemu_uftrace_tests::{cached, debian_kernel};
use std::path::PathBuf;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(work) = args.next().map(PathBuf::from) else {
        bail!("usage: manytasks WORK [QEMU]");
    };
    let qemu = match args.next() {
        Some(q) => q,
        None => cached("qemu-10.2.2/bin/qemu-system-aarch64")
            .to_string_lossy()
            .into_owned(),
    };
    let (cpio, elf) = many_initramfs_guest()?;
    let disk = work.join("disk.qcow2");
    create_disk(&disk)?;
    let mut argv: Vec<String> = [
        qemu.as_str(),
        "-M",
        "virt",
        "-cpu",
        "max",
        "-m",
        "512M",
        "-display",
        "none",
        "-nic",
        "none",
        "-no-reboot",
        "-smp",
        "1",
        "-kernel",
        &debian_kernel().to_string_lossy(),
        "-initrd",
        &cpio.to_string_lossy(),
        "-append",
        INITRAMFS_APPEND,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(disk_args(&disk));
    let seen = save_at_marker(&argv, &work, "MANY: waiting", "s1", INITRAMFS_TIMEOUT)
        .context("snapshot the guest with its tasks asleep")?;
    if !seen.contains("MANY: waiting") {
        bail!("the guest did not reach its marker:\n{seen}");
    }
    println!("{}", elf.display());
    for a in &argv {
        println!("{a}");
    }
    Ok(())
}
