//! Which QEMU a command runs, from its first word: system or user mode, and the target.

use std::ffi::OsStr;
use std::path::Path;

use anyhow::Result;
use qemu_uftrace_format::Arch;

use crate::errors::{fail, usage};

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
        return Err(misspelled(argv0, mode, arch).unwrap_or_else(|| not_an_emulator(argv0)));
    }
    Ok(Emulator {
        mode,
        target: arch.to_string(),
        arch: Arch::from_qemu_target(arch),
    })
}

/// QEMU's programs that are not emulators, whose names also start with `qemu-`.
const QEMU_TOOLS: &[&str] = &[
    "img",
    "nbd",
    "io",
    "edid",
    "ga",
    "keymap",
    "pr-helper",
    "storage-daemon",
    "bridge-helper",
    "vmsr-helper",
];

/// `qemu-system-aarch46`: a name no program on PATH has, close to an emulator's, is a
/// typo, not some other program: say it is not found, and the name meant.
fn misspelled(argv0: &OsStr, mode: Mode, arch: &str) -> Option<anyhow::Error> {
    if (mode == Mode::User && QEMU_TOOLS.contains(&arch)) || exists(argv0) {
        return None;
    }
    let best = QEMU_TARGETS
        .iter()
        .map(|t| (strsim::damerau_levenshtein(arch, t), *t))
        .filter(|(d, t)| *d <= 2 && *d < t.len())
        .min()?
        .1;
    let prefix = match mode {
        Mode::System => "qemu-system-",
        Mode::User => "qemu-",
    };
    // Status 1, as for any QEMU not found (`find_executable`): a name close to a known
    // one is no other kind of problem.
    Some(fail(
        format!("'{}' not found on PATH", argv0.to_string_lossy()),
        format!("did you mean {prefix}{best}?"),
    ))
}

/// Whether the program exists: as a path when it has a `/`, else on PATH.
fn exists(argv0: &OsStr) -> bool {
    let p = Path::new(argv0);
    if p.components().count() > 1 {
        return p.is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
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
        assert_eq!(
            err_text(detect_emulator("qemu-system-aarch46".as_ref())),
            "'qemu-system-aarch46' not found on PATH; did you mean qemu-system-aarch64?"
        );
        assert_eq!(
            err_text(detect_emulator("qemu-riscv46".as_ref())),
            "'qemu-riscv46' not found on PATH; did you mean qemu-riscv64?"
        );
        assert!(err_text(detect_emulator("ls".as_ref())).starts_with(
            "'ls' is not a QEMU emulator (expected qemu-system-<arch> or qemu-<arch>)"
        ));
    }
}
