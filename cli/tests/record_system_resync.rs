//! System mode: a resync with no frame record to go by (bare-metal code built without frame
//! pointers) is unwound after the run with the ELF's own tables, as in user mode
//! (record_user_resync.rs). The guest (tests/guests/coswitch.c, -O2 -fomit-frame-pointer)
//! switches back to a coroutine's stack and lands four calls deep there, where nothing the
//! tracer has open returns: the plugin saves a stack cookie, and `record` puts the frames it
//! unwinds (by CFI: the ELF's `.debug_frame`) at that point, marked `qemu:unwound`, so the
//! calls after it nest at their real depth. The same ELF with its CFI removed still shows
//! the guess (a LOST record). Checked against the guest's own log of the functions it
//! entered, on aarch64 bare metal. (Not on x86_64 yet: SeaBIOS's frames stay open below a
//! `-kernel` program, and a landing after a call is taken for a longjmp into the innermost
//! open function whose entry lies below it, a firmware frame there, so that resync keeps
//! them and is no guess the engine knows of.)

mod common;

use common::resync::Run;
use qemu_uftrace_tests::{cross_prefix, guest_elf, qemu_args, Variant};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The guest's -nofp build.
fn elf() -> PathBuf {
    guest_elf("coswitch", Variant::NoFp).expect("build guests")
}

/// `elf` without its CFI sections (in `dir`).
fn without_cfi(elf: &Path, dir: &Path) -> PathBuf {
    let stripped = dir.join("coswitch-nocfi.elf");
    let status = Command::new(format!("{}objcopy", cross_prefix()))
        .args([
            "--remove-section",
            ".debug_frame",
            "--remove-section",
            ".eh_frame",
        ])
        .arg(elf)
        .arg(&stripped)
        .status()
        .expect("run objcopy");
    assert!(status.success(), "objcopy {}", elf.display());
    stripped
}

/// The program's own functions.
const OWN: &[&str] = &[
    "main",
    "co_entry",
    "resume",
    "m_leaf",
    "switch_to",
    "co_outer",
    "co_inner",
    "co_leaf",
    "co_yield",
    "co_done",
];

fn run(elf: &Path) -> Run {
    let (tmp, dir, out) = common::record_output(&qemu_args(elf), &[]);
    let (console, stderr) = (common::stdout(&out), common::stderr(&out));
    assert!(
        out.status.success(),
        "{}: {console}\n{stderr}",
        elf.display()
    );
    common::resync::read_run(
        &elf.display().to_string(),
        OWN,
        &console,
        stderr,
        (tmp, dir),
    )
}

#[test]
fn a_bare_metal_stack_switch_without_frame_pointers_is_unwound_aarch64() {
    let elf = elf();
    let label = elf.display().to_string();
    let r = run(&elf);
    // The coroutine's stack at the switch (co_entry > co_outer > co_inner > co_yield, as
    // its log entered them; co_entry's caller, co_start, has no CFI), then its calls at
    // their depth: co_leaf inside co_inner, the next inside co_outer, co_done in co_entry.
    let want = [
        "E co_entry",
        "E co_outer",
        "E co_inner",
        "E co_yield",
        "X co_yield",
        "E co_leaf",
        "X co_leaf",
        "X co_inner",
        "E co_leaf",
        "X co_leaf",
        "X co_outer",
        "E co_done",
    ];
    common::resync::assert_unwound(&r, &label, &want, 4, &r.dir);

    // Without CFI nothing unwinds: the guess stays, and says so.
    let tmp = tempfile::tempdir().expect("temp dir");
    let r = run(&without_cfi(&elf, tmp.path()));
    common::resync::assert_guessed(&r, &format!("{label} without CFI"));
}
