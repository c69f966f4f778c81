//! User mode: a resync with no frame record to go by (code built without frame pointers) is
//! unwound after the run with the program's own tables. The guest
//! (tests/guests/user/coswitch.c, static glibc at -O2, -fomit-frame-pointer) switches to a
//! coroutine's stack and lands three calls deep there, where nothing the tracer saw is open:
//! the plugin saves a stack cookie, and `record` puts the frames it unwinds (by CFI) at that
//! point, marked `qemu:unwound`, so the calls after it nest at their real depth. The same
//! program with its `.eh_frame` removed still shows the guess (a LOST record). Checked
//! against the guest's own log of the functions it entered, on aarch64, riscv64 and x86_64.
//! The same guest as a dynamic PIE (loaded at a bias), and reaching the yield through a
//! frame of its own shared library (co_via in libcoswitch.so, also without frame pointers):
//! each file's CFI is looked up at its own load bias. And that program exec'd by another:
//! unwound with the exec'd image's files. And the yield made from a signal handler whose
//! return address is the vDSO's sigreturn trampoline (aarch64: glibc gives no restorer):
//! unwound through the plugin's copy of the vDSO into the code the signal interrupted. And
//! the program through its library run by a forked child: unwound with its parent's files.

mod common;

use common::resync::Run;
use common::user::{record, text, Target, AARCH64, RISCV64, X86_64};
use qemu_uftrace_tests::{cached, make_guests, plugin_stat};
use std::path::PathBuf;

/// `make resync` of tests/guests/user for `target`.
fn guest(target: &Target, name: &str) -> PathBuf {
    let sub = format!("resync-{}", target.cross.trim_end_matches('-'));
    let args = [format!("CROSS={}", target.cross), "resync".to_string()];
    make_guests("user", &sub, &args)
        .unwrap_or_else(|e| panic!("make resync CROSS={}: {e:#}", target.cross))
        .join(name)
}

/// The program's own functions (and its library's).
const OWN: &[&str] = &[
    "main",
    "resume",
    "m_leaf",
    "switch_to",
    "co_outer",
    "co_via",
    "co_inner",
    "co_leaf",
    "co_yield",
    "co_done",
    "co_wait",
    "co_handler",
    "[signal]",
];

fn run(target: &Target, name: &str) -> Run {
    run_guests(target, &[name])
}

/// `names` (guests of `make resync`) as the program and its arguments.
fn run_guests(target: &Target, names: &[&str]) -> Run {
    let elfs: Vec<String> = names
        .iter()
        .map(|n| guest(target, n).to_string_lossy().into_owned())
        .collect();
    // The dynamic builds find their loader and libc under the target's sysroot.
    let mut args: Vec<&str> = sysroot(target).map_or(Vec::new(), |r| vec!["-L", r]);
    args.extend(elfs.iter().map(String::as_str));
    let (tmp, dir, out) = record(&cached(target.qemu), &args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let label = names.join(" ");
    assert!(out.status.success(), "{label}: {stdout}\n{stderr}");
    common::resync::read_run(&label, OWN, &stdout, stderr, (tmp, dir))
}

/// The sysroot of `target`'s dynamic builds (x86_64's: the host's own).
fn sysroot(target: &Target) -> Option<&'static str> {
    match target.cross {
        "aarch64-linux-gnu-" => Some("/usr/aarch64-linux-gnu"),
        "riscv64-linux-gnu-" => Some("/usr/riscv64-linux-gnu"),
        _ => None,
    }
}

/// `names` recorded (the program, then its arguments): after the resync, exactly `want`,
/// whose first `unwound` entries are the frames unwound (all by CFI), and the calls after
/// them as the guest's log has them.
fn check_unwound(target: &Target, names: &[&str], want: &[&str], unwound: usize) {
    let label = format!("{} {}", target.cross, names.join(" "));
    let r = run_guests(target, names);
    // The statistics of the image that ran the coroutine: an exec'd one's in its folder.
    let stats = match names {
        [_] => r.dir.clone(),
        _ => {
            let procs: Vec<_> = std::fs::read_dir(r.dir.join("procs"))
                .expect("the exec'd image's folder")
                .map(|e| e.unwrap().path())
                .collect();
            assert_eq!(procs.len(), 1, "{label}: {procs:?}");
            assert_eq!(plugin_stat(&r.dir, "resync_cookies"), "0", "{label}");
            procs[0].clone()
        }
    };
    common::resync::assert_unwound(&r, &label, want, unwound, &stats);
}

/// The coroutine's stack at the switch (co_entry > co_outer > co_inner > co_yield, as its
/// log entered them; co_entry, entered by the switch, returns nowhere), then its calls at
/// their depth: co_leaf inside co_inner, the next inside co_outer, co_done at the bottom.
const IN_THE_PROGRAM: &[&str] = &[
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

fn check(target: &Target) {
    let label = target.cross;
    check_unwound(target, &["coswitch.elf"], IN_THE_PROGRAM, 3);

    // Without .eh_frame nothing unwinds: the guess stays, and says so.
    let r = run(target, "coswitch-noeh.elf");
    common::resync::assert_guessed(&r, &format!("{label} without .eh_frame"));
}

/// The dynamic PIE: the same frames, at the program's load bias.
fn check_pie(target: &Target) {
    check_unwound(target, &["coswitch-pie.elf"], IN_THE_PROGRAM, 3);
}

/// Through the shared library: co_via's frame (its CFI at the library's bias) between
/// co_outer's and co_inner's.
const THROUGH_THE_LIBRARY: &[&str] = &[
    "E co_outer",
    "E co_via",
    "E co_inner",
    "E co_yield",
    "X co_yield",
    "E co_leaf",
    "X co_leaf",
    "X co_inner",
    "X co_via",
    "E co_leaf",
    "X co_leaf",
    "X co_outer",
    "E co_done",
];

fn check_library(target: &Target) {
    check_unwound(target, &["coswitch-lib.elf"], THROUGH_THE_LIBRARY, 4);
}

/// The same program exec'd by a static one: unwound with the exec'd image's files (its
/// cookie numbered after the first image's, in its own folder).
fn check_exec(target: &Target) {
    check_unwound(
        target,
        &["coswitch-exec.elf", "coswitch-lib.elf"],
        THROUGH_THE_LIBRARY,
        4,
    );
}

#[test]
fn a_stack_switch_without_frame_pointers_is_unwound_aarch64() {
    check(&AARCH64);
}

#[test]
fn a_stack_switch_without_frame_pointers_is_unwound_x86_64() {
    check(&X86_64);
}

#[test]
fn a_stack_switch_in_a_pie_is_unwound_at_its_load_bias_aarch64() {
    check_pie(&AARCH64);
}

#[test]
fn a_stack_switch_in_a_pie_is_unwound_at_its_load_bias_x86_64() {
    check_pie(&X86_64);
}

#[test]
fn a_stack_through_a_shared_library_is_unwound_with_its_tables_aarch64() {
    check_library(&AARCH64);
}

#[test]
fn a_stack_through_a_shared_library_is_unwound_with_its_tables_x86_64() {
    check_library(&X86_64);
}

#[test]
fn a_stack_switch_in_an_execd_program_is_unwound_with_its_files_aarch64() {
    check_exec(&AARCH64);
}

#[test]
fn a_stack_switch_in_an_execd_program_is_unwound_with_its_files_x86_64() {
    check_exec(&X86_64);
}

/// The yield from a SIGUSR1 handler (coswitch-sig.elf): the landing's stack runs from
/// co_yield through the handler, the signal frame (the handler returns into the vDSO's
/// `__kernel_rt_sigreturn`, which QEMU's vDSO gives no CFI: known by its code) and libc's
/// kill into co_wait, and all of it is unwound (kill's frame too: libc's, not shown here).
fn check_signal(target: &Target) {
    let label = format!("{} coswitch-sig.elf", target.cross);
    let label = label.as_str();
    let r = run(target, "coswitch-sig.elf");
    let want = [
        "E co_outer",
        "E co_inner",
        "E co_wait",
        "E [signal]",
        "E co_handler",
        "E co_yield",
        "X co_yield",
        "X co_handler",
        "X [signal]",
        "X co_wait",
        "E co_leaf",
        "X co_leaf",
        "X co_inner",
        "E co_leaf",
        "X co_leaf",
        "X co_outer",
        "E co_done",
    ];
    let frames = "7 frames: 6 by CFI, 1 by signal frame";
    common::resync::assert_unwound_by(&r, label, &want, 6, &r.dir, frames);
    assert!(
        r.dir.join("plugin.vdso").is_file(),
        "{label}: the vDSO's copy"
    );
    // Its functions are named (QEMU's aarch64 vDSO: from its .dynsym, at the address it
    // mapped it): libc's clock_gettime calls the vDSO's.
    let clock = match target.cross {
        "aarch64-linux-gnu-" => "__kernel_clock_gettime();",
        "riscv64-linux-gnu-" => "__vdso_clock_gettime();",
        _ => "clock_gettime();",
    };
    let lines: Vec<&str> = r.replay.lines().collect();
    let called = lines
        .windows(2)
        .any(|w| w[0].ends_with("clock_gettime() {") && w[1].ends_with(clock));
    assert!(called, "{label}: the vDSO's call unnamed\n{}", r.replay);
}

/// The PIE through the library run by a forked child (coswitch-fork.elf): the child's
/// cookie, in its own folder, is unwound with the files it inherited from its parent (the
/// program and the library at their load biases, from the maps the child wrote).
fn check_fork(target: &Target) {
    let label = format!("{} coswitch-fork.elf", target.cross);
    let label = label.as_str();
    let elf = guest(target, "coswitch-fork.elf");
    let mut args: Vec<&str> = sysroot(target).map_or(Vec::new(), |r| vec!["-L", r]);
    let elf = elf.to_string_lossy();
    args.push(&elf);
    let (tmp, dir, out) = record(&cached(target.qemu), &args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{label}: {stdout}\n{stderr}");
    let child: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CHILD ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{label}: no CHILD line in {stdout}"));
    let r = common::resync::read_task_run(label, OWN, &stdout, stderr, (tmp, dir), child);
    // The cookie was the child's, written into its folder; the parent resynced nowhere.
    let folder = r.dir.join("procs").join(format!("{child}.0"));
    common::resync::assert_unwound(&r, label, THROUGH_THE_LIBRARY, 4, &folder);
    assert_eq!(plugin_stat(&r.dir, "resync_cookies"), "0", "{label}");
}

#[test]
fn a_stack_switch_in_a_forked_child_is_unwound_with_its_parents_files_aarch64() {
    check_fork(&AARCH64);
}

#[test]
fn a_stack_switch_in_a_forked_child_is_unwound_with_its_parents_files_x86_64() {
    check_fork(&X86_64);
}

#[test]
fn a_stack_switch_in_a_signal_handler_is_unwound_through_the_vdso_aarch64() {
    check_signal(&AARCH64);
}

/// x86_64's glibc gives its handlers a restorer of its own (`__restore_rt`, with CFI).
#[test]
fn a_stack_switch_in_a_signal_handler_is_unwound_through_the_signal_frame_x86_64() {
    check_signal(&X86_64);
}

/// riscv64's vDSO trampoline has CFI (a signal frame's): only its file was missing.
#[test]
fn a_stack_switch_in_a_signal_handler_is_unwound_through_the_vdso_riscv64() {
    check_signal(&RISCV64);
}

#[test]
fn a_stack_switch_without_frame_pointers_is_unwound_riscv64() {
    check(&RISCV64);
}

#[test]
fn a_stack_switch_in_a_pie_is_unwound_at_its_load_bias_riscv64() {
    check_pie(&RISCV64);
}

#[test]
fn a_stack_through_a_shared_library_is_unwound_with_its_tables_riscv64() {
    check_library(&RISCV64);
}

#[test]
fn a_stack_switch_in_an_execd_program_is_unwound_with_its_files_riscv64() {
    check_exec(&RISCV64);
}

#[test]
fn a_stack_switch_in_a_forked_child_is_unwound_with_its_parents_files_riscv64() {
    check_fork(&RISCV64);
}
