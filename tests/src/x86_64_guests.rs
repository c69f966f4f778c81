//! The x86_64 bare-metal test guests (`tests/guests/x86_64`): the programs of
//! [`crate::TEST_PROGRAMS`] built with the host gcc as Multiboot images that switch to long
//! mode, run by `qemu-system-x86_64 -M pc` after SeaBIOS.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};

use crate::{cached, guest_build_dir, locked, workspace_root, SystemQemu, Variant};

/// The x86_64 system emulator, as a command line's first word.
pub const QEMU_X86_64: &str = "qemu-system-x86_64";

/// Every x86_64 system QEMU the recording tests run on, as [`crate::system_qemus`] lists the
/// aarch64 ones: 10.0 on PATH, 10.2.2 and 11.1.3 from the cache.
pub fn system_qemus_x86_64() -> Vec<SystemQemu> {
    let cached = |dir: &str| {
        cached(&format!("{dir}/bin/{QEMU_X86_64}"))
            .display()
            .to_string()
    };
    vec![
        SystemQemu {
            label: "10.0",
            program: QEMU_X86_64.to_string(),
        },
        SystemQemu {
            label: "10.2.2",
            program: cached("qemu-10.2.2"),
        },
        SystemQemu {
            label: "11.1.3",
            program: cached("qemu-11.1.3"),
        },
    ]
}

/// A program of `tests/guests/x86_64` in `variant` (natural, `-nofp`, `-oracle`), built once
/// per process with make into `<guest_build_dir>/x86_64`.
pub fn x86_64_guest_elf(program: &str, variant: Variant) -> Result<PathBuf> {
    static BUILT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let dir = BUILT
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the x86_64 guests failed: {e}"))?;
    let path = dir.join(format!("{program}{}.elf", variant.suffix()));
    if !path.is_file() {
        bail!("no x86_64 guest {}", path.display());
    }
    Ok(path)
}

fn build() -> Result<PathBuf> {
    let dir = guest_build_dir().join("x86_64");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let output = locked(&dir.join(".lock"), "make")
        .arg("-s")
        .arg("-C")
        .arg(workspace_root().join("tests/guests/x86_64"))
        .arg(format!("O={}", dir.display()))
        .stdin(Stdio::null())
        .output()
        .context("running make in tests/guests/x86_64 (is make installed?)")?;
    if !output.status.success() {
        bail!(
            "make -C tests/guests/x86_64 failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(dir)
}

/// The QEMU command line that runs an x86_64 guest on `qemu` (program first): the PC
/// machine, its serial console on stdout, no NIC (no option ROM to find), and
/// `isa-debug-exit` for a non-zero exit status (status 0 powers off through ACPI).
pub fn x86_64_qemu_args_on(qemu: &str, elf: &Path) -> Vec<String> {
    [
        qemu,
        "-M",
        "pc",
        "-m",
        "128M",
        "-nographic",
        "-nic",
        "none",
        "-device",
        "isa-debug-exit",
        "-kernel",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(std::iter::once(elf.display().to_string()))
    .collect()
}

/// The events from `main`'s first entry to its exit: what SeaBIOS ran before and the
/// runtime after go.
pub fn from_main(events: &[String]) -> Vec<String> {
    let Some(start) = events.iter().position(|e| e == "E main") else {
        return Vec::new();
    };
    let mut depth = 0usize;
    let mut out = Vec::new();
    for e in &events[start..] {
        out.push(e.clone());
        if e.starts_with("E ") {
            depth += 1;
        } else {
            depth -= 1;
            if depth == 0 {
                break;
            }
        }
    }
    out
}
