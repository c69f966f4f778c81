//! The x86_64 bare-metal test guests (`tests/guests/x86_64`): the programs of
//! [`crate::TEST_PROGRAMS`] built with the host gcc as Multiboot images that switch to long
//! mode, run by `qemu-system-x86_64 -M pc` after SeaBIOS.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Result;

use crate::{built_guest, make_guests, system_qemus_of, SystemQemu, Variant};

/// The x86_64 system emulator, as a command line's first word.
pub const QEMU_X86_64: &str = "qemu-system-x86_64";

/// Every x86_64 system QEMU the recording tests run on, as [`crate::system_qemus`] lists the
/// aarch64 ones: 10.0 on PATH, 10.2.2 and 11.1.3 from the cache.
pub fn system_qemus_x86_64() -> Vec<SystemQemu> {
    system_qemus_of(QEMU_X86_64)
}

/// A program of `tests/guests/x86_64` in `variant` (natural, `-nofp`, `-oracle`), built once
/// per process with make into `<guest_build_dir>/x86_64`.
pub fn x86_64_guest_elf(program: &str, variant: Variant) -> Result<PathBuf> {
    static BUILT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let file = format!("{program}{}.elf", variant.suffix());
    built_guest(
        &BUILT,
        || make_guests("x86_64", "x86_64", &[]),
        "x86_64 guests",
        &file,
    )
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
