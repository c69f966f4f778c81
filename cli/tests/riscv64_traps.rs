//! A riscv64 guest at every privilege level (`tests/guests/riscv64/trap.c`, `trap_start.S`,
//! under `-M virt -bios none`): C code at M, S and U level, dropping from M to S with MRET and
//! from S to U with SRET; an ECALL from M, a machine timer interrupt and an ECALL from S served
//! by the M-mode handler, an ECALL from U delegated to the S-mode handler, each handler calling
//! a known function and returning with MRET/SRET.
//!
//! The exact call sequence `uftrace replay` shows:
//! - on QEMU 10.2.2 and 11.1.3 (the discontinuity callback), with the entries `[smc]` (ECALL
//!   from M or S), `[irq]` and `[svc]` (ECALL from U) around the handlers, each closed by its
//!   MRET/SRET, in one task, and with `--split-levels` in three, `cpu0 M`, `cpu0 S` and
//!   `cpu0 U`, each entry in the task of the level that serves it;
//! - on QEMU 10.0, without exception entries: the handlers nest where they ran.

mod common;

use qemu_uftrace_tests::replay::{replay_events, task_names, tree, uftrace, without};
use qemu_uftrace_tests::riscv64::{riscv64_guest_elf, riscv64_qemu_args_on, riscv64_qemus};
use qemu_uftrace_tests::{is_runtime_function, plugin_stat, SystemQemu, Variant};
use std::path::PathBuf;

/// Each line a call, indented two spaces per level of nesting.
const WITH_EXCEPTIONS: &str = "
m_main
  m_work
    m_leaf
    m_leaf
  m_ecall
    [smc]
      m_trap_handler
        ecall_work
  irq_window
    [irq]
      m_trap_handler
        irq_work
s_main
  s_work
    s_leaf
  s_ecall
    [smc]
      m_trap_handler
        ecall_work
u_main
  u_work
  u_ecall
    [svc]
      s_trap_handler
        svc_work
";

/// `--split-levels`, task `cpu0 M`: its own code, and the S-mode ECALL it serves, on its
/// own stack.
const SPLIT_M: &str = "
m_main
  m_work
    m_leaf
    m_leaf
  m_ecall
    [smc]
      m_trap_handler
        ecall_work
  irq_window
    [irq]
      m_trap_handler
        irq_work
[smc]
  m_trap_handler
    ecall_work
";

/// Task `cpu0 S`: `s_ecall` stays open while M serves it; then the ECALL from U.
const SPLIT_S: &str = "
s_main
  s_work
    s_leaf
  s_ecall
[svc]
  s_trap_handler
    svc_work
";

/// Task `cpu0 U`.
const SPLIT_U: &str = "
u_main
  u_work
  u_ecall
";

struct Recorded {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    what: String,
}

/// Records trap.elf on `qemu`; fails unless QEMU exits 0 with every check of the guest
/// passing and every call and exception entry closed by its own return.
fn record(qemu: &SystemQemu, split: bool) -> Recorded {
    let elf = riscv64_guest_elf("trap", Variant::Natural).expect("build guests");
    let what = format!(
        "trap.elf on {}{}",
        qemu.label,
        if split { " --split-levels" } else { "" }
    );
    let options: &[&str] = if split { &["--split-levels"] } else { &[] };
    let (tmp, dir, console) =
        common::record_argv(&riscv64_qemu_args_on(&qemu.program, &elf), options);
    for line in [
        "m_work(2) = 17",
        "m_ecall(5) = 36",
        "irq_window() = 1",
        "irq_cause = 7",
        "s_work(1) = 202",
        "s_ecall(3) = 23",
        "u_work(9) = 8",
        "u_ecall(4) = 1007",
    ] {
        assert!(
            console.lines().any(|l| l.trim_end() == line),
            "{what}: no {line:?} in the guest's output:\n{console}"
        );
    }
    for key in [
        "deep_returns",
        "unmatched_returns",
        "resyncs",
        "eret_redirects",
    ] {
        assert_eq!(plugin_stat(&dir, key), "0", "{what}: plugin.stats {key}");
    }
    // rt_exit, which the start code enters by `j rt_exit` and which ends the guest, stays
    // open.
    assert_eq!(plugin_stat(&dir, "open_frames"), "1", "{what}: open_frames");
    // QEMU's reset code enters the ELF with `jr t0`, a return by the RISC-V hints.
    assert_eq!(plugin_stat(&dir, "returns_unseen"), "1", "{what}");
    Recorded {
        _tmp: tmp,
        dir,
        what,
    }
}

fn scenario(rec: &Recorded, tid: u32) -> Vec<String> {
    let events = replay_events(&rec.dir, tid).expect("uftrace replay");
    without(&events, is_runtime_function, true)
}

fn qemus_with_exceptions() -> Vec<SystemQemu> {
    let qemus: Vec<SystemQemu> = riscv64_qemus()
        .into_iter()
        .filter(|q| q.label != "10.0")
        .collect();
    assert_eq!(qemus.len(), 2, "expected QEMU 10.2.2 and 11.1.3");
    qemus
}

#[test]
fn riscv64_traps_show_where_they_were_taken() {
    for qemu in qemus_with_exceptions() {
        let rec = record(&qemu, false);
        let what = &rec.what;
        let tasks = task_names(&rec.dir).expect("task.txt");
        assert_eq!(
            tasks.into_iter().collect::<Vec<_>>(),
            [(1, "cpu0".to_string())],
            "{what}: tasks"
        );
        assert_eq!(scenario(&rec, 1), tree(WITH_EXCEPTIONS), "{what}");
        // Three ECALLs and the timer interrupt, each closed by its MRET/SRET; the MRET to S
        // and the SRET to U close nothing.
        assert_eq!(plugin_stat(&rec.dir, "exceptions"), "4", "{what}");
        assert_eq!(plugin_stat(&rec.dir, "exception_returns"), "4", "{what}");
    }
}

#[test]
fn riscv64_split_levels_keep_m_s_and_u_apart() {
    for qemu in qemus_with_exceptions() {
        let rec = record(&qemu, true);
        let what = &rec.what;
        let tasks = task_names(&rec.dir).expect("task.txt");
        let tid_of = |name: &str| {
            tasks
                .iter()
                .find_map(|(tid, n)| (n == name).then_some(*tid))
                .unwrap_or_else(|| panic!("{what}: no task {name:?} in {tasks:?}"))
        };
        assert_eq!(tasks.len(), 3, "{what}: tasks {tasks:?}");
        let (m, s, u) = (tid_of("cpu0 M"), tid_of("cpu0 S"), tid_of("cpu0 U"));
        let d = rec.dir.to_string_lossy().into_owned();
        let info = uftrace(&["info", "-d", &d]).expect("uftrace info");
        let list = format!("{m}(cpu0 M), {s}(cpu0 S), {u}(cpu0 U)");
        assert!(
            info.lines()
                .any(|l| l.starts_with("# task list") && l.ends_with(&list)),
            "{what}: no task list {list:?} in:\n{info}"
        );
        assert_eq!(scenario(&rec, m), tree(SPLIT_M), "{what}: task cpu0 M");
        assert_eq!(scenario(&rec, s), tree(SPLIT_S), "{what}: task cpu0 S");
        assert_eq!(scenario(&rec, u), tree(SPLIT_U), "{what}: task cpu0 U");
        assert_eq!(plugin_stat(&rec.dir, "exceptions"), "4", "{what}");
        assert_eq!(plugin_stat(&rec.dir, "exception_returns"), "4", "{what}");
    }
}

#[test]
fn riscv64_traps_without_the_discontinuity_callback_nest_where_they_ran() {
    let qemu = riscv64_qemus()
        .into_iter()
        .find(|q| q.label == "10.0")
        .expect("QEMU 10.0");
    let rec = record(&qemu, false);
    let no_entries = without(&tree(WITH_EXCEPTIONS), |n| n.starts_with('['), false);
    assert_eq!(scenario(&rec, 1), no_entries, "{}", rec.what);
    assert_eq!(plugin_stat(&rec.dir, "exceptions"), "0", "{}", rec.what);
}
