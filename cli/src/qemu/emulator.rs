//! Which QEMU a command runs, from its first word: system or user mode, and the target.

use std::ffi::OsStr;
use std::path::Path;

use anyhow::Result;
use qemu_uftrace_format::Arch;

use crate::errors::usage;

/// System emulation (`qemu-system-<arch>`) or user-mode emulation (`qemu-<arch>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    System,
    User,
}

/// Which QEMU the command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emulator {
    pub mode: Mode,
    /// The target as QEMU names it (`aarch64`, `x86_64`, `riscv64`, `mips`, …).
    pub target: String,
    /// The target, when it is one qemu-uftrace records (in both modes).
    pub arch: Option<Arch>,
}

impl Emulator {
    pub fn is_supported(&self) -> bool {
        self.arch.is_some()
    }

    /// `system-mode aarch64`, `user-mode x86_64`: for messages.
    pub fn describe(&self) -> String {
        let mode = match self.mode {
            Mode::System => "system-mode",
            Mode::User => "user-mode",
        };
        format!("{mode} {}", self.target)
    }
}

/// Targets QEMU builds emulators for; a name outside this list is not a QEMU emulator
/// (`qemu-img`, `qemu-nbd`, `qemu-io`, …).
const QEMU_TARGETS: &[&str] = &[
    "aarch64",
    "aarch64_be",
    "alpha",
    "arm",
    "armeb",
    "avr",
    "cris",
    "hexagon",
    "hppa",
    "i386",
    "loongarch64",
    "m68k",
    "microblaze",
    "microblazeel",
    "mips",
    "mips64",
    "mips64el",
    "mipsel",
    "mipsn32",
    "mipsn32el",
    "or1k",
    "ppc",
    "ppc64",
    "ppc64le",
    "riscv32",
    "riscv64",
    "rx",
    "s390x",
    "sh4",
    "sh4eb",
    "sparc",
    "sparc32plus",
    "sparc64",
    "tricore",
    "x86_64",
    "xtensa",
    "xtensaeb",
];

/// Detects the emulator from argv[0]'s file name.
pub fn detect_emulator(argv0: &OsStr) -> Result<Emulator> {
    let name = Path::new(argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Debian's statically linked user-mode emulators are named qemu-<arch>-static.
    let stem = name.strip_suffix("-static").unwrap_or(&name);
    let (mode, arch) = if let Some(arch) = stem.strip_prefix("qemu-system-") {
        (Mode::System, arch)
    } else if let Some(arch) = stem.strip_prefix("qemu-") {
        (Mode::User, arch)
    } else {
        return Err(not_an_emulator(argv0));
    };
    if !QEMU_TARGETS.contains(&arch) {
        return Err(not_an_emulator(argv0));
    }
    Ok(Emulator {
        mode,
        target: arch.to_string(),
        arch: Arch::from_qemu_target(arch),
    })
}

fn not_an_emulator(argv0: &OsStr) -> anyhow::Error {
    usage(
        format!(
            "'{}' is not a QEMU emulator (expected qemu-system-<arch> or qemu-<arch>)",
            argv0.to_string_lossy()
        ),
        "give a QEMU command after --, e.g. qemu-uftrace record -- qemu-system-aarch64 -M virt -kernel Image",
    )
}
#[cfg(test)]
mod tests {
    use super::*;

    fn err_text(r: Result<Emulator>) -> String {
        format!("{:#}", r.unwrap_err())
    }

    #[test]
    fn detects_system_and_user_emulators() {
        assert_eq!(
            detect_emulator("qemu-system-aarch64".as_ref()).unwrap(),
            Emulator {
                mode: Mode::System,
                target: "aarch64".into(),
                arch: Some(Arch::Aarch64),
            }
        );
        assert_eq!(
            detect_emulator("/opt/q/bin/qemu-system-x86_64".as_ref()).unwrap(),
            Emulator {
                mode: Mode::System,
                target: "x86_64".into(),
                arch: Some(Arch::X86_64),
            }
        );
        let user = detect_emulator("qemu-aarch64-static".as_ref()).unwrap();
        assert_eq!(user.mode, Mode::User);
        assert_eq!(user.arch, Some(Arch::Aarch64));
        assert!(detect_emulator("qemu-system-aarch64".as_ref())
            .unwrap()
            .is_supported());
        assert!(user.is_supported());
        assert!(detect_emulator("qemu-x86_64".as_ref())
            .unwrap()
            .is_supported());
        assert!(detect_emulator("qemu-system-x86_64".as_ref())
            .unwrap()
            .is_supported());
        assert!(detect_emulator("qemu-system-riscv64".as_ref())
            .unwrap()
            .is_supported());
        assert!(detect_emulator("qemu-riscv64".as_ref())
            .unwrap()
            .is_supported());
    }

    #[test]
    fn rejects_non_emulators() {
        for name in [
            "ls",
            "qemu-img",
            "qemu-nbd",
            "qemu-system-",
            "qemu-system-foo",
            "/usr/bin/",
        ] {
            let r = detect_emulator(name.as_ref());
            assert!(r.is_err(), "{name} accepted");
        }
        assert!(err_text(detect_emulator("ls".as_ref())).starts_with(
            "'ls' is not a QEMU emulator (expected qemu-system-<arch> or qemu-<arch>)"
        ));
    }
}
