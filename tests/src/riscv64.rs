//! The riscv64 bare-metal guests (`tests/guests/riscv64`): the test programs built with
//! riscv64-linux-gnu-gcc for `qemu-system-riscv64 -M virt -bios none`, and the riscv64
//! system QEMUs the recording tests run them on.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Result;

use crate::{built_guest, cached, make_guests, system_qemus_of, SystemQemu, Variant};

/// The riscv64 system emulator on PATH (bookworm-backports' 10.0, `qemu-system-riscv`).
pub const QEMU_RISCV64: &str = "qemu-system-riscv64";

/// Every riscv64 system QEMU the recording tests run on, as [`crate::system_qemus`] lists
/// the aarch64 ones: 10.0 on PATH (plugin API 4), 10.2.2 built from Debian's source (API 5,
/// the discontinuity callback) and 11.1.3 from trixie-backports (API 7).
pub fn riscv64_qemus() -> Vec<SystemQemu> {
    system_qemus_of(QEMU_RISCV64)
}

/// The QEMU command line that runs a riscv64 guest ELF on `qemu`: `-M virt -bios none`
/// (QEMU's reset code enters the ELF in M-mode), the console on stdout, no NIC.
pub fn riscv64_qemu_args_on(qemu: &str, elf: &Path) -> Vec<String> {
    [
        qemu,
        "-M",
        "virt",
        "-bios",
        "none",
        "-nographic",
        "-nic",
        "none",
        "-kernel",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(std::iter::once(elf.display().to_string()))
    .collect()
}

/// A riscv64 test guest (`nested`, `exit3`…) in `variant` (natural, -nofp or -oracle), built
/// once per process with make into `<guest_build_dir>/riscv64`.
pub fn riscv64_guest_elf(program: &str, variant: Variant) -> Result<PathBuf> {
    static BUILT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let file = format!("{program}{}.elf", variant.suffix());
    built_guest(
        &BUILT,
        || make_guests("riscv64", "riscv64", &[]),
        "riscv64 guests",
        &file,
    )
}

/// Debian's riscv64 kernel image that `scripts/install-deps.sh` caches (trixie's, or forky's
/// where trixie's lists fail): a raw `Image` with an EFI stub, kallsyms inside.
pub fn riscv64_kernel() -> PathBuf {
    cached("kernel-riscv64/vmlinuz")
}

/// The DWARF `vmlinux` of [`riscv64_kernel`], from its -dbg package.
pub fn riscv64_vmlinux() -> PathBuf {
    cached("kernel-riscv64-dbg/vmlinux")
}

/// OpenSBI's `fw_dynamic.elf` with its symbols, which `scripts/install-deps.sh` builds from
/// Debian's opensbi source linked at 0x80000000, where `-M virt` loads its firmware.
pub fn riscv64_opensbi() -> PathBuf {
    cached("opensbi-riscv64/fw_dynamic.elf")
}

/// The QEMU command that boots [`riscv64_kernel`] on `qemu` under QEMU's own OpenSBI
/// (`-bios default`, M-mode) to its "Unable to mount root fs" panic; `-no-reboot`, so that
/// QEMU then exits.
pub fn riscv64_kernel_boot_args_on(qemu: &str) -> Vec<String> {
    riscv64_kernel_boot_args_with(qemu, "default")
}

/// [`riscv64_kernel_boot_args_on`] with `bios` as the firmware (`default`, or an ELF such
/// as [`riscv64_opensbi`]).
pub fn riscv64_kernel_boot_args_with(qemu: &str, bios: &str) -> Vec<String> {
    let kernel = riscv64_kernel().display().to_string();
    [
        qemu,
        "-M",
        "virt",
        "-m",
        "512M",
        "-nographic",
        "-nic",
        "none",
        "-no-reboot",
        "-bios",
        bios,
        "-kernel",
        &kernel,
        "-append",
        "console=ttyS0 panic=-1 nokaslr cryptomgr.notests",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
