//! Debian's arm64 cloud kernel boots under `qemu-uftrace record` to its "Unable to mount root
//! fs" panic; uftrace reads the whole trace without complaint, with kernel names from the
//! Image's own kallsyms, including the first calls made at physical addresses.

mod common;

use common::{record_argv, record_to_panic};
use qemu_uftrace_engine::tasks::BOOT_TID_BASE;
use qemu_uftrace_tests::linux_guest::{initramfs_boot_args_on, initramfs_guest, INIT_OK};
use qemu_uftrace_tests::replay::{graph_backtrace, reported_calls, uftrace};
use qemu_uftrace_tests::{cached, kernel_boot_args_on, plugin_stat, system_qemus, QEMU};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Records the boot on `cpu`, with extra `record` options; returns the temp dir (keep it
/// alive), the trace and the guest console.
fn record_boot(cpu: &str, options: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    record_boot_on(QEMU, cpu, options)
}

/// [`record_boot`] under the emulator `qemu`.
fn record_boot_on(qemu: &str, cpu: &str, options: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    record_to_panic(&kernel_boot_args_on(qemu, cpu), options)
}

/// The task id of the boot CPU's idle task (its boot context, which became `swapper/0`).
const IDLE0: u32 = BOOT_TID_BASE;

/// QEMU 10.2.2, as `system_qemus` names it.
fn qemu_10_2() -> String {
    qemu_uftrace_tests::system_qemu("10.2.2")
}

/// Each task's name as task.txt gives it to uftrace (its session's exename), by tid.
fn task_names(dir: &Path) -> BTreeMap<u32, String> {
    let text = std::fs::read_to_string(dir.join("task.txt")).expect("task.txt");
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("SESS ")?;
            let pid = rest
                .split_whitespace()
                .find_map(|w| w.strip_prefix("pid="))?;
            let name = rest.split_once("exename=\"")?.1.strip_suffix('"')?;
            Some((pid.parse().ok()?, name.to_string()))
        })
        .collect()
}

/// A guest name as uftrace shows it: a slash would make uftrace show only what follows it
/// (it takes the basename), so task.txt writes U+2215 instead.
fn shown(name: &str) -> String {
    name.replace('/', "\u{2215}")
}

fn stat(dir: &Path, key: &str) -> u64 {
    let value = plugin_stat(dir, key);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{key}={value} in plugin.stats is not a count"))
}

/// On every QEMU (plugin API 4, 5 with the discontinuity callback, and 7 only), with the
/// plugin build each one needs.
#[test]
fn debian_kernel_boots_to_its_panic_under_record() {
    for qemu in system_qemus() {
        let (_tmp, dir, _) = record_boot_on(&qemu.program, "cortex-a57", &[]);
        check_boot(&dir, qemu.label);
    }
}

fn check_boot(dir: &Path, qemu: &str) {
    let (plugin_api, discontinuity) = match qemu {
        "10.0" => ("4", "0"),
        "10.2.2" => ("4", "1"),
        _ => ("7", "1"),
    };
    assert_eq!(plugin_stat(dir, "plugin_api"), plugin_api, "on {qemu}");
    assert_eq!(
        plugin_stat(dir, "discontinuity_api"),
        discontinuity,
        "on {qemu}"
    );

    // About 8 M calls and as many returns; every one of them in the trace.
    let (calls, returns, events) = (
        stat(dir, "calls"),
        stat(dir, "returns"),
        stat(dir, "events"),
    );
    assert!(calls > 5_000_000, "only {calls} calls on {qemu}");
    assert!(
        calls.abs_diff(returns) < calls / 100,
        "{calls} calls, {returns} returns"
    );
    assert!(
        events >= calls + returns - calls / 100,
        "{events} events for {calls} calls"
    );
    let dat: u64 = std::fs::read_dir(dir)
        .expect("trace dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".dat"))
        .map(|e| e.metadata().expect("dat").len())
        .sum();
    assert_eq!(dat, events * 16, "every event is a 16-byte record");

    // One task per guest task: context switches suspend and resume stacks, so returns match
    // (a switch used to close the old task's frames and rebuild the new one's).
    assert!(stat(dir, "tasks") > 50, "tasks on {qemu}");
    assert!(stat(dir, "switches") > 500, "switches on {qemu}");
    assert!(
        stat(dir, "unmatched_returns") < 20,
        "{} unmatched returns on {qemu}",
        stat(dir, "unmatched_returns")
    );
    // Exceptions and interrupts as entries where QEMU reports them, each closed by its ERET.
    if discontinuity == "1" {
        let (taken, left) = (stat(dir, "exceptions"), stat(dir, "exception_returns"));
        assert!(taken > 100, "{taken} exceptions on {qemu}");
        assert!(
            taken - left < 5,
            "{taken} exceptions, {left} returns on {qemu}"
        );
    } else {
        assert_eq!(stat(dir, "exceptions"), 0);
    }

    let d = dir.to_string_lossy().to_string();
    let info = uftrace(&["info", "-d", &d]).expect("uftrace info");
    assert!(info.contains("vmlinuz"), "{info}");
    assert!(
        info.contains(&format!("QEMU TCG, qemu-system-aarch64 {qemu}")),
        "{info}"
    );
    assert!(
        info.contains(&format!("plugin API {plugin_api})")),
        "{info}"
    );
    // Without the kernel's DWARF the plugin is told where task names are by the image's own
    // BTF: tasks carry the kernel's names, as with the -dbg vmlinux.
    let names = task_names(dir);
    assert_eq!(
        names.get(&1).map(String::as_str),
        Some(shown("swapper/0").as_str()),
        "on {qemu}"
    );
    assert_eq!(
        names.get(&2).map(String::as_str),
        Some("kthreadd"),
        "on {qemu}"
    );
    assert_eq!(
        names.get(&IDLE0).map(String::as_str),
        Some(shown("swapper/0").as_str()),
        "on {qemu}"
    );
    let swapper = shown("swapper/0");
    assert!(
        info.contains(&format!(" 1({swapper}), 2(kthreadd), "))
            && info.contains(&format!("{IDLE0}({swapper})")),
        "task list on {qemu}: {info}"
    );
    // The first calls run with the MMU off, at the physical load address; then the kernel
    // proper. Both resolve. init_kernel_el leaves by ERET to its caller: a plain leaf call.
    let top = uftrace(&["replay", "--no-pager", "-D", "2", "-d", &d]).expect("uftrace replay");
    let head = &top[..top.len().min(4000)];
    assert!(!top.contains("| <"), "unresolved top-level calls:\n{head}");
    // The Image's header jumps to primary_entry (`b primary_entry`), which jumps to
    // __primary_switch, which enters __primary_switched by `br x8` (a jump through a
    // register, into the kernel's virtual addresses), which calls start_kernel: each entered
    // function nests in the code that jumped, as uftrace shows a tail call.
    let boot: Vec<&str> = top
        .lines()
        .filter_map(|l| l.split_once("] | ").map(|(_, f)| f.trim_end()))
        .take(6)
        .collect();
    assert_eq!(
        boot,
        [
            "primary_entry() {",
            "  preserve_boot_args();",
            "  init_kernel_el();",
            "  create_idmap();",
            "  __cpu_setup();",
            "  __primary_switch() {",
        ],
        "the boot on {qemu}:\n{head}"
    );
    // The boot CPU's graph (`--tid`: uftrace reads that task's records alone), and
    // start_kernel called once in the whole boot (report's count).
    let report = uftrace(&["report", "--no-pager", "-d", &d]).expect("uftrace report");
    assert_eq!(
        reported_calls(&report, "start_kernel"),
        Some(1),
        "start_kernel's calls on {qemu}"
    );
    let idle0 = IDLE0.to_string();
    let graph = uftrace(&[
        "graph",
        "--no-pager",
        "--tid",
        &idle0,
        "-d",
        &d,
        "start_kernel",
    ])
    .expect("uftrace graph");
    let backtrace = graph_backtrace(&graph);
    assert_eq!(
        backtrace,
        [
            "primary_entry",
            "__primary_switch",
            "__primary_switched",
            "start_kernel"
        ],
        "start_kernel's backtrace on {qemu}:\n{}",
        &graph[..graph.len().min(2000)]
    );
    // start_kernel never returns: it stays open in the boot CPU's idle task while the other
    // tasks run; PID 1's kernel stack starts at kernel_init (after ret_from_fork's
    // schedule_tail).
    // start_kernel and the interrupts, two levels each (a function with callees shown ends
    // with `} /* start_kernel */` if it returns), not the whole boot's replay: the same
    // pass of uftrace over the trace, without 800 MB of text.
    let all = uftrace(&[
        "replay",
        "--no-pager",
        "-F",
        "^start_kernel$",
        "-F",
        r"^\[irq\]$",
        "-D",
        "2",
        "-d",
        &d,
    ])
    .expect("uftrace replay -F start_kernel, [irq]");
    assert!(
        !all.contains("} /* start_kernel */"),
        "start_kernel returned on {qemu}"
    );
    let pid1 = uftrace(&["replay", "--no-pager", "-D", "1", "--tid", "1", "-d", &d])
        .expect("uftrace replay --tid 1");
    // An interrupt may be taken between those two (schedule_tail enables them, and
    // ret_from_fork runs on): its handler is a root of its own, at a moment the host's
    // timing decides (el1h_64_irq between them failed one of four suite runs on
    // 2026-12-06, on 10.0).
    let interrupt = |r: &str| {
        ["el1h_64_irq(", "el1h_64_fiq(", "[irq](", "[fiq]("]
            .iter()
            .any(|i| r.starts_with(i))
    };
    let roots: Vec<&str> = pid1
        .lines()
        .skip(1)
        .map(|l| l.split('|').nth(1).unwrap_or("").trim())
        .filter(|r| !interrupt(r))
        .collect();
    assert_eq!(
        roots.first(),
        Some(&"schedule_tail();"),
        "PID 1 on {qemu}:\n{pid1}"
    );
    assert_eq!(
        roots.get(1),
        Some(&"kernel_init() {"),
        "PID 1 on {qemu}:\n{pid1}"
    );
    if discontinuity == "1" {
        assert!(all.contains(" [irq]() {"), "no interrupt entry on {qemu}");
    }
    for f in ["kernel_init", "do_one_initcall", "mount_root"] {
        assert!(
            report.lines().any(|l| l.trim_end().ends_with(f)),
            "report lacks {f}"
        );
    }
}

/// With Debian's DWARF `vmlinux` as `--symbols`, every recorded address resolves and replay
/// shows source lines, from the first MMU-off call on.
#[test]
fn debian_kernel_with_its_debug_vmlinux_has_names_and_source_lines() {
    let vmlinux = cached("kernel-dbg/vmlinux").to_string_lossy().into_owned();
    let (_tmp, dir, _) = record_boot("cortex-a57", &["--symbols", &vmlinux]);
    let d = dir.to_string_lossy().to_string();
    let report = uftrace(&["report", "--no-pager", "-d", &d]).expect("uftrace report");
    let unresolved: Vec<&str> = report
        .lines()
        .filter(|l| l.contains(" <"))
        .take(5)
        .collect();
    assert!(
        unresolved.is_empty(),
        "unresolved functions: {unresolved:?}"
    );
    // primary_entry (entered by the Image header's jump) holds the boot; start_kernel is
    // called by __primary_switched (entered by `br x8`) beneath __primary_switch (entered by
    // primary_entry's jump).
    let top = uftrace(&["replay", "--no-pager", "--srcline", "-D", "4", "-d", &d]).expect("replay");
    let line = |f: &str| {
        top.lines()
            .find(|l| l.contains(f))
            .unwrap_or_else(|| panic!("no {f} in:\n{top}"))
    };
    for f in ["| primary_entry() {", "|   preserve_boot_args()"] {
        assert!(line(f).contains("arch/arm64/kernel/head.S:"), "{top}");
    }
    assert!(
        line("|       start_kernel() {").contains("init/main.c:"),
        "{top}"
    );
}

/// Under `-cpu max` the kernel signs its return addresses (pointer authentication): returns,
/// and the frame records a lost stack is rebuilt from, carry signed addresses. With tasks
/// followed through their switches, returns match as they do without it.
#[test]
fn debian_kernel_with_pointer_authentication() {
    let (_tmp, dir, console) = record_boot("max", &[]);
    assert!(
        console.contains("detected: Address authentication"),
        "no PAC in:\n{console}"
    );
    let (calls, unmatched) = (stat(&dir, "calls"), stat(&dir, "unmatched_returns"));
    assert!(calls > 5_000_000, "only {calls} calls");
    assert!(
        unmatched < 20,
        "{unmatched} unmatched returns for {calls} calls"
    );
}

/// With the DWARF vmlinux as a symbol source, `record` finds `task_struct.comm` and the
/// plugin reads each task's name at its switches: tasks carry the kernel's own names in
/// task.txt, `uftrace info`'s task list and the note of guest tasks.
#[test]
fn debian_kernel_tasks_carry_the_kernels_names() {
    let vmlinux = cached("kernel-dbg/vmlinux").to_string_lossy().into_owned();
    let (_tmp, dir, _) = record_boot_on(&qemu_10_2(), "cortex-a57", &["--symbols", &vmlinux]);
    let names = task_names(&dir);
    let name = |tid: u32| names.get(&tid).cloned().unwrap_or_default();
    // PID 1 runs kernel_init under the name it was forked with, init_task's; with no root
    // file system it never execs. PID 2 is kthreadd; the boot CPU's idle task swapper/0.
    assert_eq!(name(1), shown("swapper/0"), "{names:?}");
    assert_eq!(name(2), "kthreadd", "{names:?}");
    assert_eq!(name(IDLE0), shown("swapper/0"), "{names:?}");
    for (tid, expected) in [(13, "ksoftirqd/0"), (15, "migration/0"), (17, "cpuhp/0")] {
        assert_eq!(name(tid), shown(expected), "{names:?}");
    }
    let kworkers = names
        .values()
        .filter(|n| n.starts_with(&shown("kworker/")))
        .count();
    assert!(kworkers >= 5, "{kworkers} kworker tasks: {names:?}");
    // Every task was named: none fell back to pid-N or cpuN.
    let unnamed: Vec<_> = names
        .iter()
        .filter(|(_, n)| {
            let fallback = |prefix: &str| {
                n.strip_prefix(prefix)
                    .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
            };
            n.is_empty() || fallback("pid-") || fallback("cpu")
        })
        .collect();
    assert!(unnamed.is_empty(), "tasks without a name: {unnamed:?}");

    let d = dir.to_string_lossy().to_string();
    let info = uftrace(&["info", "-d", &d]).expect("uftrace info");
    let list = info
        .lines()
        .find(|l| l.contains("task list"))
        .unwrap_or_else(|| panic!("no task list in {info}"));
    for entry in [
        format!(" 1({})", shown("swapper/0")),
        " 2(kthreadd)".to_string(),
        format!(" 7({})", shown("kworker/0:0")),
        format!(" {IDLE0}({})", shown("swapper/0")),
    ] {
        assert!(list.contains(&entry), "no {entry} in {list}");
    }
    // The note keeps the names exactly, slashes included.
    for line in [
        "  1: swapper/0, pid 1, vCPU 0",
        "  2: kthreadd, pid 2, vCPU 0",
    ] {
        assert!(info.contains(line), "no {line:?} in {info}");
    }
}

/// A task that execs takes its new name: the initramfs guest's PID 1 runs as swapper/0
/// until the kernel execs `/init`, then sleeps (a switch) as `init`; its forked child is
/// `init` too.
#[test]
fn initramfs_init_is_named_after_its_exec() {
    let (_, init_elf) = initramfs_guest().expect("the guest builds");
    let argv = initramfs_boot_args_on(&qemu_10_2(), 1).expect("the guest builds");
    let vmlinux = cached("kernel-dbg/vmlinux");
    let symbols = [vmlinux.to_string_lossy(), init_elf.to_string_lossy()];
    // The boot export.rs reads too, shared.
    let common::shared::Recording { dir, console, .. } =
        common::shared::record(&argv, &["--symbols", &symbols[0], "--symbols", &symbols[1]]);
    assert!(console.contains(INIT_OK), "{console}");
    let child = qemu_uftrace_tests::linux_guest::init_child_pid(&console).expect("child PID");
    let names = task_names(&dir);
    assert_eq!(names.get(&1).map(String::as_str), Some("init"), "{names:?}");
    assert_eq!(
        names.get(&child).map(String::as_str),
        Some("init"),
        "{names:?}"
    );
    assert_eq!(
        names.get(&2).map(String::as_str),
        Some("kthreadd"),
        "{names:?}"
    );
}

/// 32 vCPUs: past the 16 that QEMU's scoreboards start with, so QEMU reallocates them while
/// creating vCPUs. Every vCPU records, nothing is left unmatched, no task is found running on
/// two vCPUs at once, and each task's records are in time order (one wall clock).
#[test]
fn debian_kernel_on_32_vcpus() {
    let mut argv = kernel_boot_args_on(&qemu_10_2(), "cortex-a57");
    argv.splice(1..1, ["-smp".to_string(), "32".to_string()]);
    let (_tmp, dir, console) = record_argv(&argv, &[]);
    assert!(console.contains("Brought up 1 node, 32 CPUs"), "{console}");
    assert_eq!(plugin_stat(&dir, "vcpus"), "32");
    assert_eq!(plugin_stat(&dir, "clock"), "wall");
    assert_eq!(plugin_stat(&dir, "complete"), "1");
    for v in 0..32 {
        assert!(
            stat(&dir, &format!("vcpu{v}.events")) > 0,
            "vCPU {v} recorded nothing"
        );
    }
    assert!(stat(&dir, "unmatched_returns") < 20);
    assert_eq!(stat(&dir, "task_conflicts"), 0);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "dat") {
            let bytes = std::fs::read(&path).unwrap();
            let times: Vec<u64> = bytes
                .chunks_exact(16)
                .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()))
                .collect();
            assert!(
                times.windows(2).all(|w| w[0] <= w[1]),
                "{} goes back in time",
                path.display()
            );
        }
    }
}
