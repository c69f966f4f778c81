//! The Debian VM (issue 36): a debootstrap'd bookworm root with systemd as PID 1, udev and
//! Debian's cloud kernel, on a virtio disk, booted from its own kernel and initramfs-tools
//! initrd until a unit of its own powers it off once `multi-user.target` is reached.
//! `scripts/debian-vm.sh` builds it into the cache (`debian-vm-amd64/`), and
//! `scripts/debian-vm-arm64.sh` the arm64 one from it (`debian-vm-arm64/`).

use std::path::PathBuf;

use crate::cache_dir;

/// The VM's files in the cache: `root/` (the tree `--sysroot` takes), `rootfs.ext4`,
/// `vmlinuz`, `initrd.img`.
pub fn debian_vm_dir() -> PathBuf {
    debian_vm_dir_of("amd64")
}

/// The VM of Debian architecture `arch` (`amd64`, `arm64`) in the cache.
pub fn debian_vm_dir_of(arch: &str) -> PathBuf {
    let dir = cache_dir().join(format!("debian-vm-{arch}"));
    assert!(
        dir.join("package").is_file(),
        "{} is missing: run scripts/install-deps.sh",
        dir.display()
    );
    dir
}

/// The root the VM's disk was made from.
pub fn debian_vm_root() -> PathBuf {
    debian_vm_dir().join("root")
}

/// The root the arm64 VM's disk was made from.
pub fn debian_vm_arm64_root() -> PathBuf {
    debian_vm_dir_of("arm64").join("root")
}

/// The kernel command line: the root on the virtio disk, the console on the serial port, no
/// KASLR (the kernel's symbols hold), QEMU ends at a panic; `no_timer_check` as for the
/// other amd64 boots (a loaded host's timer check can fail).
pub const DEBIAN_VM_APPEND: &str =
    "root=/dev/vda rw console=ttyS0 panic=-1 nokaslr no_timer_check cryptomgr.notests";

/// The line the guest's console shows last before the machine powers off.
pub const DEBIAN_VM_POWER_OFF: &str = "reboot: Power down";

/// The QEMU command (argv, emulator first) that boots the VM on one vCPU: the disk as a
/// `snapshot=on` virtio drive, so that the guest's writes never reach the cached image.
pub fn debian_vm_boot_args_on(qemu: &str) -> Vec<String> {
    vm_boot_args(qemu, "amd64", &["-M", "pc"], DEBIAN_VM_APPEND)
}

/// The arm64 VM's kernel command line: as amd64's, on the PL011 console.
pub const DEBIAN_VM_ARM64_APPEND: &str =
    "root=/dev/vda rw console=ttyAMA0 panic=-1 nokaslr cryptomgr.notests";

/// The QEMU command (argv, emulator first) that boots the arm64 VM on one Cortex-A57 (no
/// pointer authentication to emulate: the boot takes ~2/3 of `-cpu max`'s time), its disk a
/// `snapshot=on` virtio drive.
pub fn debian_vm_arm64_boot_args_on(qemu: &str) -> Vec<String> {
    vm_boot_args(
        qemu,
        "arm64",
        &["-M", "virt", "-cpu", "cortex-a57"],
        DEBIAN_VM_ARM64_APPEND,
    )
}

/// The boot both VMs share: an initramfs boot (`machine`'s options, 1 GiB, one vCPU) of
/// the VM's kernel and initrd of `arch`, its disk as a `snapshot=on` virtio drive.
fn vm_boot_args(qemu: &str, arch: &str, machine: &[&str], append: &str) -> Vec<String> {
    let dir = debian_vm_dir_of(arch);
    let mut args = crate::linux_guest::initramfs_boot(
        qemu,
        machine,
        "1G",
        1,
        &dir.join("vmlinuz"),
        &dir.join("initrd.img"),
        append,
    );
    args.extend([
        "-drive".to_string(),
        format!(
            "file={},if=virtio,format=raw,snapshot=on",
            dir.join("rootfs.ext4").display()
        ),
    ]);
    args
}
