//! The kernel-module guest (issue 34): Debian's arm64 kernel boots an initramfs whose `/init`
//! (`tests/guests/linux/modinit.c`) loads two of that kernel's own modules (`dummy.ko`, then
//! `ifb.ko` at the range `dummy.ko` left), printing where the kernel placed each section.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};

use crate::cpio::{write_newc, Entry};
use crate::linux_guest::INITRAMFS_APPEND;
use crate::{cached, cross_prefix, debian_kernel, guest_build_dir, locked, workspace_root};

/// The modules `/init` loads, in order.
pub const MODULES: [&str; 2] = ["dummy", "ifb"];

/// `<name>.ko` of the cached arm64 kernel's package (`kernel-modules/`).
pub fn debian_module(name: &str) -> PathBuf {
    cached(&format!("kernel-modules/{name}.ko"))
}

/// Builds `/init` and packs it with the modules, once per process: `(cpio, init ELF)`.
pub fn modules_guest() -> Result<(PathBuf, PathBuf)> {
    static BUILT: OnceLock<std::result::Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the module guest failed: {e}"))
}

fn build() -> Result<(PathBuf, PathBuf)> {
    let root = guest_build_dir();
    let dir = root.join("linux");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let elf = dir.join("modinit.elf");
    let output = locked(&root.join(".lock"), "make")
        .arg("-s")
        .arg("-C")
        .arg(workspace_root().join("tests/guests/linux"))
        .arg(format!("O={}", dir.display()))
        .arg(format!("CROSS={}", cross_prefix()))
        .arg(&elf)
        .stdin(Stdio::null())
        .output()
        .context("running make in tests/guests/linux (is make installed?)")?;
    if !output.status.success() {
        bail!(
            "make -C tests/guests/linux modinit.elf failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let init = std::fs::read(&elf).with_context(|| format!("reading {}", elf.display()))?;
    let kos: Vec<(String, Vec<u8>)> = MODULES
        .iter()
        .map(|m| {
            let path = debian_module(m);
            std::fs::read(&path)
                .map(|d| (format!("{m}.ko"), d))
                .with_context(|| format!("reading {}", path.display()))
        })
        .collect::<Result<_>>()?;
    let mut entries = vec![
        Entry::Dir {
            path: "dev",
            mode: 0o755,
        },
        Entry::CharDev {
            path: "dev/console",
            mode: 0o600,
            major: 5,
            minor: 1,
        },
        Entry::Dir {
            path: "sys",
            mode: 0o755,
        },
        Entry::File {
            path: "init",
            mode: 0o755,
            data: &init,
        },
    ];
    for (name, data) in &kos {
        entries.push(Entry::File {
            path: name,
            mode: 0o644,
            data,
        });
    }
    let mut cpio = Vec::new();
    write_newc(&mut cpio, &entries)?;
    // Another test process may be reading the archive: replace it whole.
    let path = dir.join("modinit.cpio");
    let tmp = dir.join(format!("modinit.cpio.{}", std::process::id()));
    std::fs::write(&tmp, &cpio).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok((path, elf))
}

/// The QEMU command (argv, emulator first) booting the module guest on `qemu`, one vCPU.
pub fn modules_boot_args_on(qemu: &str) -> Result<Vec<String>> {
    let (cpio, _) = modules_guest()?;
    let kernel = debian_kernel();
    Ok([
        qemu,
        "-M",
        "virt",
        "-cpu",
        "max",
        "-m",
        "512M",
        "-nographic",
        "-nic",
        "none",
        "-no-reboot",
        "-kernel",
        &kernel.to_string_lossy(),
        "-initrd",
        &cpio.to_string_lossy(),
        "-append",
        INITRAMFS_APPEND,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect())
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
