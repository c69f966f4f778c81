//! The kernel-module guest (issue 34): Debian's arm64 or amd64 kernel boots an initramfs whose
//! `/init` (`tests/guests/linux/modinit.c`) loads two of that kernel's own modules (`dummy.ko`,
//! then `ifb.ko` at the range `dummy.ko` left), printing where the kernel placed each section.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::{anyhow, Context, Result};

use crate::linux_guest::INITRAMFS_APPEND;
use crate::{cached, guest_build_dir};

/// The modules `/init` loads, in order.
pub const MODULES: [&str; 2] = ["dummy", "ifb"];

/// Which of Debian's kernels the guest boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModArch {
    Arm64,
    Amd64,
}

impl ModArch {
    /// The cache directory of the kernel's two modules (scripts/install-deps.sh).
    fn modules_dir(self) -> &'static str {
        match self {
            ModArch::Arm64 => "kernel-modules",
            ModArch::Amd64 => "kernel-amd64-modules",
        }
    }

    /// Its QEMU system emulator's name.
    pub fn emulator(self) -> &'static str {
        match self {
            ModArch::Arm64 => "qemu-system-aarch64",
            ModArch::Amd64 => "qemu-system-x86_64",
        }
    }

    fn program(self) -> &'static str {
        match self {
            ModArch::Arm64 => "modinit",
            ModArch::Amd64 => "modinit-x86_64",
        }
    }
}

/// `<name>.ko` of the cached kernel's package.
pub fn debian_module(arch: ModArch, name: &str) -> PathBuf {
    cached(&format!("{}/{name}.ko", arch.modules_dir()))
}

/// Builds `/init` and packs it with the modules, once per process: `(cpio, init ELF)`.
pub fn modules_guest(arch: ModArch) -> Result<(PathBuf, PathBuf)> {
    type Built = OnceLock<std::result::Result<(PathBuf, PathBuf), String>>;
    static ARM64: Built = OnceLock::new();
    static AMD64: Built = OnceLock::new();
    let built = match arch {
        ModArch::Arm64 => &ARM64,
        ModArch::Amd64 => &AMD64,
    };
    built
        .get_or_init(|| build(arch).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the module guest failed: {e}"))
}

fn build(arch: ModArch) -> Result<(PathBuf, PathBuf)> {
    let program = arch.program();
    let goal = guest_build_dir()
        .join("linux")
        .join(format!("{program}.elf"));
    let dir = crate::linux_guest::make_linux_guests(Some(&goal))?;
    let elf = dir.join(format!("{program}.elf"));
    let init = std::fs::read(&elf).with_context(|| format!("reading {}", elf.display()))?;
    let kos: Vec<(String, Vec<u8>)> = MODULES
        .iter()
        .map(|m| {
            let path = debian_module(arch, m);
            std::fs::read(&path)
                .map(|d| (format!("{m}.ko"), d))
                .with_context(|| format!("reading {}", path.display()))
        })
        .collect::<Result<_>>()?;
    let name = format!("{program}.cpio");
    let path = crate::linux_guest::pack_initramfs(&dir, &name, &init, &["sys"], &kos)?;
    Ok((path, elf))
}

/// The QEMU command (argv, emulator first) booting the module guest on `qemu` (the
/// [`ModArch::emulator`] of some QEMU), one vCPU.
pub fn modules_boot_args(arch: ModArch, qemu: &str) -> Result<Vec<String>> {
    let (cpio, _) = modules_guest(arch)?;
    let (machine, kernel, append): (&[&str], PathBuf, &str) = match arch {
        ModArch::Arm64 => (
            &["-M", "virt", "-cpu", "max"],
            cached("kernel/vmlinuz"),
            INITRAMFS_APPEND,
        ),
        ModArch::Amd64 => (
            &["-M", "pc"],
            cached("kernel-amd64/vmlinuz"),
            crate::procs_guest::X86_64_APPEND,
        ),
    };
    Ok(crate::linux_guest::initramfs_boot(
        qemu, machine, "512M", 1, &kernel, &cpio, append,
    ))
}

/// Where the kernel placed each module's sections, as `/init` printed them
/// (`MOD NAME SECTION 0xADDRESS`): module → section → address.
pub fn placed_sections(console: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for line in console.lines() {
        let mut w = line.split_whitespace();
        let (Some("MOD"), Some(module), Some(section), Some(addr), None) =
            (w.next(), w.next(), w.next(), w.next(), w.next())
        else {
            continue;
        };
        let Some(addr) = addr
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
        else {
            continue;
        };
        out.entry(module.to_string())
            .or_default()
            .insert(section.to_string(), addr);
    }
    out
}
