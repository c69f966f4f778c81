//! For `bench/unwind.sh`: builds the unwinding benchmark's guest
//! (`tests/guests/linux/manyinit.c`), boots it on Debian's arm64 kernel (or amd64's) until
//! PID 1 and its 100 children sleep, and saves snapshot `s1` on a qcow2 disk in WORK. Prints
//! `/init`'s ELF and the kernel's -dbg vmlinux on the first two lines, then the QEMU command
//! that boots the same machine (to which the benchmark adds `-loadvm s1` and its serial), one
//! argument a line.
//!
//! Usage: manytasks WORK [arm64|x86_64] (QEMU 10.2.2's emulators, as the tests cache them).

use anyhow::{bail, Context, Result};
use qemu_uftrace_tests::linux_guest::{many_initramfs_guest, INITRAMFS_APPEND, INITRAMFS_TIMEOUT};
use qemu_uftrace_tests::snapshot::{create_disk, disk_args, save_at_marker};
use qemu_uftrace_tests::{cached, debian_kernel};
use std::path::PathBuf;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(work) = args.next().map(PathBuf::from) else {
        bail!("usage: manytasks WORK [arm64|x86_64]");
    };
    let x86_64 = match args.next().as_deref() {
        None | Some("arm64") => false,
        Some("x86_64") => true,
        Some(other) => bail!("manytasks: unknown architecture {other} (arm64, x86_64)"),
    };
    let (cpio, elf) = many_initramfs_guest(x86_64)?;
    let disk = work.join("disk.qcow2");
    create_disk(&disk)?;
    let (qemu, machine, kernel, append, vmlinux) = if x86_64 {
        (
            cached("qemu-10.2.2/bin/qemu-system-x86_64"),
            vec!["-M", "pc"],
            cached("kernel-amd64/vmlinuz"),
            "console=ttyS0 panic=-1 nokaslr rdinit=/init",
            cached("kernel-amd64-dbg/vmlinux"),
        )
    } else {
        (
            cached("qemu-10.2.2/bin/qemu-system-aarch64"),
            vec!["-M", "virt", "-cpu", "max"],
            debian_kernel(),
            INITRAMFS_APPEND,
            cached("kernel-dbg/vmlinux"),
        )
    };
    let mut argv: Vec<String> = vec![qemu.to_string_lossy().into_owned()];
    argv.extend(machine.iter().map(|s| s.to_string()));
    argv.extend(
        [
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
            &kernel.to_string_lossy(),
            "-initrd",
            &cpio.to_string_lossy(),
            "-append",
            append,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    argv.extend(disk_args(&disk));
    let seen = save_at_marker(&argv, &work, "MANY: waiting", "s1", INITRAMFS_TIMEOUT)
        .context("snapshot the guest with its tasks asleep")?;
    if !seen.contains("MANY: waiting") {
        bail!("the guest did not reach its marker:\n{seen}");
    }
    println!("{}", elf.display());
    println!("{}", vmlinux.display());
    for a in &argv {
        println!("{a}");
    }
    Ok(())
}
