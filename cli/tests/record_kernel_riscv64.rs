//! Debian's riscv64 kernel (`linux-image-*-riscv64`, 7.x from forky where trixie's riscv64
//! lists fail) boots under `qemu-uftrace record` from OpenSBI's first instruction (M-mode,
//! `-bios default`) to its "Unable to mount root fs" panic, on QEMU 10.0, 10.2.2 and 11.1.3:
//! kernel names from the Image's own kallsyms (the first calls at physical addresses too),
//! one task per kernel task (found where `__switch_to` writes tp), calls and returns in step,
//! ECALLs and interrupts as entries where QEMU reports them; with the -dbg package's DWARF
//! vmlinux, every kernel address named, tasks by PID and name, source lines. Under an
//! OpenSBI ELF with symbols as `-bios`, the M-mode firmware is named too.

mod common;

use common::{check_secondary_start, record_to_panic};
use qemu_uftrace_engine::tasks::BOOT_TID_BASE;
use qemu_uftrace_tests::plugin_stat;
use qemu_uftrace_tests::replay::{reported_calls, stack_at_entry, task_names, uftrace};
use qemu_uftrace_tests::riscv64::{
    riscv64_kernel_boot_args_on, riscv64_kernel_boot_args_with, riscv64_opensbi, riscv64_qemus,
    riscv64_vmlinux,
};
use std::path::{Path, PathBuf};

/// Records the boot on `qemu` with extra `record` options; returns the temp dir (keep it
/// alive) and the trace.
fn record_boot(qemu: &str, options: &[&str]) -> (tempfile::TempDir, PathBuf) {
    record_boot_cmd(&riscv64_kernel_boot_args_on(qemu), options).0
}

/// Records `boot` (QEMU's command line) with `options` for `record`; returns the temp dir
/// (keep it alive) with the trace, and the guest's console.
fn record_boot_cmd(boot: &[String], options: &[&str]) -> ((tempfile::TempDir, PathBuf), String) {
    let (tmp, dir, console) = record_to_panic(boot, options);
    ((tmp, dir), console)
}

fn stat(dir: &Path, key: &str) -> u64 {
    let value = plugin_stat(dir, key);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{key}={value} in plugin.stats is not a count"))
}

/// The calls of task `tid` down to `depth` (`replay -D`), indented, in order: leaf calls
/// below the top level and closing braces left out.
fn calls_to_depth(d: &str, tid: u32, depth: u32) -> Vec<String> {
    let text = uftrace(&[
        "replay",
        "--no-pager",
        "-D",
        &depth.to_string(),
        "--tid",
        &tid.to_string(),
        "-d",
        d,
    ])
    .expect("uftrace replay");
    text.lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once("] | ").map(|(_, f)| f.trim_end().to_string()))
        .filter(|f| !f.trim_start().starts_with('}') && (!f.starts_with(' ') || f.ends_with('{')))
        .collect()
}

/// The top-level calls of task `tid` (`replay -D 1`), in order.
fn roots(d: &str, tid: u32) -> Vec<String> {
    let text = uftrace(&[
        "replay",
        "--no-pager",
        "-D",
        "1",
        "--tid",
        &tid.to_string(),
        "-d",
        d,
    ])
    .expect("uftrace replay");
    text.lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split('|').nth(1).unwrap_or("").trim().to_string())
        .collect()
}

#[test]
fn riscv64_kernel_boots_to_its_panic_under_record() {
    for qemu in riscv64_qemus() {
        let q = qemu.label;
        let (_tmp, dir) = record_boot(&qemu.program, &[]);
        // About 6 M calls and as many returns, every one of them in the trace.
        let (calls, returns, events) = (
            stat(&dir, "calls"),
            stat(&dir, "returns"),
            stat(&dir, "events"),
        );
        assert!(calls > 3_000_000, "only {calls} calls on {q}");
        assert!(
            calls.abs_diff(returns) < calls / 1000,
            "{calls} calls, {returns} returns on {q}"
        );
        let dat: u64 = std::fs::read_dir(&dir)
            .expect("trace dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".dat"))
            .map(|e| e.metadata().expect("dat").len())
            .sum();
        assert_eq!(dat, events * 16, "every event is a 16-byte record on {q}");
        // One task per kernel task, switched where __switch_to writes tp.
        assert!(stat(&dir, "tasks") >= 10, "tasks on {q}");
        assert!(stat(&dir, "switches") > 500, "switches on {q}");
        // relocate_enable_mmu returns to its caller's virtual address, not the physical one
        // it was called from: where QEMU reports the fetch fault that enters virtual
        // addresses (10.2 on), the stack moves with it; without, that one return is unmatched.
        // 10.0 reports no exceptions either, so a timer interrupt's return can land as a
        // stray one (2 in 1 run of 24 under a load of 20, 1 in the others).
        let unmatched = stat(&dir, "unmatched_returns");
        if q == "10.0" {
            assert!(
                (1..=3).contains(&unmatched),
                "{unmatched} unmatched returns on {q}"
            );
        } else {
            assert_eq!(unmatched, 0, "unmatched returns on {q}");
        }
        assert_eq!(stat(&dir, "deep_returns"), 0, "deep returns on {q}");
        if q == "10.0" {
            assert_eq!(stat(&dir, "exceptions"), 0, "on {q}");
        } else {
            // OpenSBI's probing traps, the SBI calls and interrupts, each closed by its
            // MRET/SRET but those still open at the end (counted below from the trace).
            let taken = stat(&dir, "exceptions");
            assert!(taken > 50, "{taken} exceptions on {q}");
        }

        let d = dir.to_string_lossy().into_owned();
        let info = uftrace(&["info", "-d", &d]).expect("uftrace info");
        assert!(info.contains("RISCV64 (QEMU TCG"), "{info}");
        assert!(info.contains("vmlinuz"), "{info}");
        // The boot hart's first kernel calls run at physical addresses (MMU off), named by
        // the Image's symbols shifted there; then the kernel proper.
        let boot = uftrace(&["replay", "--no-pager", "--tid", "4194304", "-d", &d])
            .expect("uftrace replay");
        // relocate_enable_mmu enters virtual addresses by a fetch fault and returns there: a
        // leaf call. Where QEMU reports the fault the stack moves with it; on 10.0 its
        // unmatched return lands after the call in _start_kernel, which is open (entered by
        // _start's jump), so it closes relocate_enable_mmu alone.
        assert!(boot.contains("relocate_enable_mmu();"), "on {q}");
        assert!(!boot.contains("relocate_enable_mmu() {"), "on {q}");
        for f in ["setup_vm() {", "setup_arch() {", "sched_init() {"] {
            assert!(boot.contains(f), "no {f} on {q}");
        }
        // start_kernel is entered by _start_kernel's `tail start_kernel` (_start_kernel by
        // _start's jump, at the physical address): a call nested in it, once (in the whole
        // boot: report's count), its backtrace read off the boot hart's replay (`graph
        // start_kernel` would be another pass over the whole boot).
        let report = uftrace(&["report", "--no-pager", "-d", &d]).expect("uftrace report");
        assert_eq!(
            reported_calls(&report, "start_kernel"),
            Some(1),
            "start_kernel's calls on {q}"
        );
        let backtrace = stack_at_entry(&boot, 4194304, "start_kernel")
            .unwrap_or_else(|| panic!("start_kernel not in the boot hart's task on {q}"));
        // Without exception entries (10.0) OpenSBI's mret is no hand-over: the kernel nests
        // in the firmware's three open frames (no symbols for them here).
        let firmware = if q == "10.0" { 3 } else { 0 };
        assert!(
            backtrace.len() == firmware + 2
                && backtrace.ends_with(&["_start_kernel", "start_kernel"])
                && backtrace[..firmware].iter().all(|f| f.starts_with('<')),
            "start_kernel's backtrace on {q}: {backtrace:?}"
        );
        // Every other task starts in schedule_tail (after ret_from_fork's switch); the first
        // one forked is PID 1 (its tid: the image's BTF says where task_struct.pid is), which
        // runs kernel_init to the panic: called by ret_from_fork itself up to 6.x, by its C
        // half ret_from_fork_kernel from 6.18 on.
        let tasks: Vec<u32> = info
            .lines()
            .find_map(|l| l.strip_prefix("# task list           : "))
            .expect("task list")
            .split(", ")
            .filter_map(|t| t.split('(').next()?.parse().ok())
            .collect();
        assert!(tasks.contains(&4194304) && tasks.contains(&1), "{info}");
        let pid1 = calls_to_depth(&d, 1, 2);
        let direct = ["schedule_tail() {", "kernel_init() {"];
        let via_c = [
            "schedule_tail() {",
            "ret_from_fork_kernel() {",
            "  kernel_init() {",
        ];
        assert!(
            pid1.starts_with(&direct.map(String::from))
                || pid1.starts_with(&via_c.map(String::from)),
            "PID 1 on {q}: {pid1:?}"
        );
        for f in [
            "kernel_init",
            "do_one_initcall",
            "mount_root",
            "__switch_to",
            "schedule",
        ] {
            assert!(
                report.lines().any(|l| l.trim_end().ends_with(f)),
                "report lacks {f} on {q}"
            );
        }
        // Nothing in kernel text is left unnamed (OpenSBI's M-mode code has no symbols here).
        let unnamed: Vec<&str> = report
            .lines()
            .filter(|l| l.contains("<ffff") || l.contains("<802") || l.contains("<803"))
            .take(5)
            .collect();
        assert!(
            unnamed.is_empty(),
            "unnamed kernel functions on {q}: {unnamed:?}"
        );
        if q != "10.0" {
            // The exception entries, two levels each, and the stacks left open (which
            // replay lists whatever its filters), not the whole boot's replay.
            let all = uftrace(&[
                "replay",
                "--no-pager",
                "-F",
                r"^\[irq\]$",
                "-F",
                r"^\[smc\]$",
                "-D",
                "2",
                "-d",
                &d,
            ])
            .expect("uftrace replay -F [irq], [smc]");
            assert!(all.contains(" [irq]() {"), "no interrupt entry on {q}");
            assert!(all.contains(" [smc]() {"), "no SBI call entry on {q}");
            // Every exception returns but the panic's SBI reset call and the interrupts of
            // tasks the preemptible kernel switched away from in them and never resumed.
            let (irqs, smcs) = open_exceptions(&all);
            assert_eq!(smcs, 1, "open SBI calls on {q}");
            let (taken, left) = (stat(&dir, "exceptions"), stat(&dir, "exception_returns"));
            assert_eq!(
                taken - left,
                irqs + smcs,
                "{taken} exceptions, {left} returns on {q}"
            );
        }
    }
}

/// With the kernel's DWARF vmlinux: every address in kernel text named, tids that are the
/// guest's PIDs and tasks named after the kernel's own names (read at switches through the
/// task_struct's `pid` and `comm`), source lines.
/// Two harts (`-smp 2`): both record on one timeline; the secondary hart, started through
/// OpenSBI's HSM extension by the boot hart's `sbi_cpu_start`, runs `smp_callin` in its own
/// boot context after that call; tasks move between the harts.
#[test]
fn two_harts_share_one_timeline() {
    for qemu in riscv64_qemus() {
        let mut args = riscv64_kernel_boot_args_on(&qemu.program);
        args.extend(["-smp", "2"].map(String::from));
        let ((_tmp, dir), _) = record_boot_cmd(&args, &[]);
        // Every task read: on 10.0 smp_callin, hart 1's first C code, is at times recorded
        // in hart 0's boot context (4194304) rather than hart 1's (2 runs in 4 here; a bug
        // not found yet), which the check's "a context of its own" allows.
        check_secondary_start(&dir, "sbi_cpu_start", "smp_callin", false, None, qemu.label);
    }
}

#[test]
fn riscv64_kernel_with_its_vmlinux_names_tasks_and_lines() {
    let vmlinux = riscv64_vmlinux().display().to_string();
    let qemu = &riscv64_qemus()[1];
    let (_tmp, dir) = record_boot(&qemu.program, &["--symbols", &vmlinux]);
    let d = dir.to_string_lossy().into_owned();
    // PID 1 runs kernel_init under init_task's name (no root file system: it never
    // execs), PID 2 is kthreadd; the boot context became the boot CPU's idle task.
    let names = task_names(&dir).expect("task names");
    let name = |tid: u32| names.get(&tid).cloned().unwrap_or_default();
    let shown = |n: &str| n.replace('/', "\u{2215}");
    assert_eq!(name(1), shown("swapper/0"), "{names:?}");
    assert_eq!(name(2), "kthreadd", "{names:?}");
    assert_eq!(name(BOOT_TID_BASE), shown("swapper/0"), "{names:?}");
    for expected in ["ksoftirqd/0", "migration/0", "cpuhp/0", "kswapd0"] {
        assert!(
            names.values().any(|n| *n == shown(expected)),
            "no {expected}: {names:?}"
        );
    }
    // Every tid but the boot context's is a PID, none is named after its id.
    let synthetic: Vec<_> = names
        .iter()
        .filter(|(&tid, n)| tid > BOOT_TID_BASE || n.starts_with("task-"))
        .collect();
    assert!(synthetic.is_empty(), "{synthetic:?}");
    assert!(names.len() > 30, "{} tasks", names.len());

    let lines = uftrace(&["replay", "--no-pager", "--srcline", "-D", "2", "-d", &d])
        .expect("uftrace replay --srcline");
    assert!(
        lines.lines().any(|l| l.contains("[     1] | ")
            && l.contains("kernel_init() {")
            && l.contains("init/main.c:")),
        "no kernel_init in PID 1 with its source line:\n{}",
        &lines[..lines.len().min(3000)]
    );
    // The vmlinux covers the kernel's text, its early physical-address calls included:
    // nothing there is left unnamed (OpenSBI's M-mode code has no symbols here).
    let report = uftrace(&["report", "--no-pager", "-d", &d]).expect("uftrace report");
    let unnamed: Vec<&str> = report
        .lines()
        .filter(|l| l.contains("<ffff") || l.contains("<802") || l.contains("<803"))
        .take(5)
        .collect();
    assert!(unnamed.is_empty(), "unnamed kernel functions: {unnamed:?}");
}

/// The exception entries still open when the trace ends, from the stacks uftrace replay
/// lists after "remaining functions": (interrupts, SBI calls). Each open interrupt must be
/// one its task was preempted in (`preempt_schedule_irq` above it): nothing else may be
/// left without its SRET.
fn open_exceptions(replay: &str) -> (u64, u64) {
    let rest = replay
        .split_once("remaining functions")
        .map_or("", |(_, r)| r);
    let (mut irqs, mut smcs) = (0, 0);
    for stack in rest.split("task: ").skip(1) {
        // Listed from the innermost frame out: "[depth] name".
        let frames: Vec<&str> = stack
            .lines()
            .filter_map(|l| l.trim().split_once("] ").map(|(_, f)| f))
            .collect();
        for (i, f) in frames.iter().enumerate() {
            match *f {
                "[irq]" => {
                    assert!(
                        frames[..i].contains(&"preempt_schedule_irq"),
                        "an interrupt left open outside preemption: {frames:?}"
                    );
                    irqs += 1;
                }
                "[smc]" => smcs += 1,
                f if f.starts_with('[') => panic!("exception {f} left open: {frames:?}"),
                _ => {}
            }
        }
    }
    (irqs, smcs)
}

/// The functions of `uftrace report --tid TID`, unnamed ones (`<addr>`) included.
fn reported(d: &str, tid: u32) -> Vec<String> {
    uftrace(&["report", "--no-pager", "--tid", &tid.to_string(), "-d", d])
        .expect("uftrace report")
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

/// Under OpenSBI built with its symbols (`-bios fw_dynamic.elf`, which the CLI reads as a
/// symbol source beside the Image), the M-mode firmware is named from its first instruction:
/// its boot path in `cpu0 M`, and with `--split-levels` each SBI call the kernel makes as an
/// `[smc]` entry into `sbi_trap_handler` and `sbi_ecall_handler`, at M level, apart from the
/// kernel's own `sbi_init` at S level; OpenSBI's DWARF gives its source lines.
#[test]
fn riscv64_kernel_under_opensbi_elf_names_the_firmware_in_m_mode() {
    let bios = riscv64_opensbi().display().to_string();
    for qemu in riscv64_qemus() {
        let q = qemu.label;
        // 10.0 reports no exceptions to plugins: no levels apart, no entries.
        let levels = q != "10.0";
        let options: &[&str] = if levels { &["--split-levels"] } else { &[] };
        let ((_tmp, dir), console) = record_boot_cmd(
            &riscv64_kernel_boot_args_with(&qemu.program, &bios),
            options,
        );
        assert!(console.contains("OpenSBI v1.6"), "not our OpenSBI on {q}");
        let (calls, returns) = (stat(&dir, "calls"), stat(&dir, "returns"));
        assert!(
            calls.abs_diff(returns) < calls / 1000,
            "{calls} calls, {returns} returns on {q}"
        );
        let unmatched = if levels { 0 } else { 1 };
        assert_eq!(stat(&dir, "unmatched_returns"), unmatched, "on {q}");
        assert_eq!(stat(&dir, "deep_returns"), 0, "on {q}");

        let d = dir.to_string_lossy().into_owned();
        let info = uftrace(&["info", "-d", &d]).expect("uftrace info");
        // Without levels the boot context is the one that becomes the idle task, named from
        // the image's BTF; with them, its M-level part stays the vCPU's.
        let cpu0 = if levels {
            "4194304(cpu0 M)"
        } else {
            "4194304(swapper\u{2215}0)"
        };
        assert!(info.contains(cpu0), "no {cpu0} on {q}:\n{info}");
        // fw_dynamic's boot path, call for call, up to sbi_init (which never returns: it
        // leaves for S-mode by MRET in sbi_hart_switch_mode, where its frames close).
        let boot = roots(&d, 4194304);
        // Then `j _start_warm`, which calls _reset_regs and sbi_init: closed where
        // sbi_hart_switch_mode hands the hart to the kernel by MRET (a hand-over, not a
        // return: the kernel starts at depth 0), where exceptions are seen.
        let start_warm = if q == "10.0" {
            "_start_warm() {"
        } else {
            "_start_warm();"
        };
        assert_eq!(
            boot.get(..10),
            Some(
                &[
                    "fw_boot_hart();",
                    "_reset_regs();",
                    "fw_save_info();",
                    "fw_platform_init();",
                    "fw_next_arg1();",
                    "fw_next_addr();",
                    "fw_next_mode();",
                    "fw_options();",
                    "fw_next_arg1();",
                    start_warm,
                ]
                .map(String::from)[..]
            ),
            "cpu0's first calls on {q}: {boot:?}"
        );
        let lines = uftrace(&[
            "replay",
            "--no-pager",
            "--srcline",
            "-D",
            "1",
            "--tid",
            "4194304",
            "-d",
            &d,
        ])
        .expect("uftrace replay --srcline");
        assert!(
            lines.contains("fw_platform_init(); /* platform/generic/platform.c:"),
            "no OpenSBI source lines on {q}:\n{lines}"
        );
        let report = uftrace(&["report", "--no-pager", "-d", &d]).expect("uftrace report");
        for f in [
            "sbi_hart_switch_mode",
            "sbi_trap_handler",
            "sbi_ecall_handler",
            // The panic reboots through the SBI's system reset (QEMU exits: -no-reboot).
            "sbi_ecall_srst_handler",
            "__sbi_base_ecall",
        ] {
            assert!(
                report.lines().any(|l| l.trim_end().ends_with(f)),
                "report lacks {f} on {q}"
            );
        }
        if !levels {
            continue;
        }
        // Every M-level task is named through and through: the firmware's text is covered.
        // Found by the plugin's level, not by uftrace's task list: it cuts a name (`comm`,
        // read from the image's BTF) to 15 bytes, and the level after it with it.
        let m_tasks: Vec<u32> = qemu_uftrace::guest_tasks::read(&dir)
            .iter()
            .filter(|t| t.level == "M")
            .map(|t| t.tid)
            .collect();
        assert!(m_tasks.len() >= 2, "M tasks on {q}: {info}");
        for &tid in &m_tasks {
            let unnamed: Vec<String> = reported(&d, tid)
                .into_iter()
                .filter(|f| f.starts_with('<'))
                .collect();
            assert!(
                unnamed.is_empty(),
                "unnamed in task {tid} on {q}: {unnamed:?}"
            );
        }
        // The kernel's first SBI calls (from `cpu0 S`, before its first switch) enter the
        // firmware at M level in `cpu0 M`, named from the -bios ELF.
        let m = uftrace(&["replay", "--no-pager", "--tid", "4194304", "-d", &d])
            .expect("uftrace replay");
        let m: Vec<&str> = m
            .lines()
            .map(|l| l.split('|').nth(1).unwrap_or("").trim())
            .collect();
        let entries = m
            .windows(3)
            .filter(|w| w == &["[smc]() {", "sbi_trap_handler() {", "sbi_ecall_handler() {"])
            .count();
        assert!(entries >= 5, "{entries} SBI calls named in cpu0 M on {q}");
        // The kernel's own sbi_init (arch/riscv/kernel/sbi.c) at S level, making those calls,
        // at whatever depth the kernel's early calls put it (start_kernel is entered by a
        // jump, and nests in the code that jumped).
        let s = uftrace(&[
            "replay",
            "--no-pager",
            "-F",
            "sbi_init",
            "-D",
            "2",
            "--tid",
            "4259840",
            "-d",
            &d,
        ])
        .expect("uftrace replay");
        let calls: Vec<&str> = s
            .lines()
            .map(|l| l.split('|').nth(1).unwrap_or("").trim())
            .collect();
        assert!(
            calls.contains(&"sbi_init() {")
                && calls.iter().any(|c| c.starts_with("__sbi_base_ecall(")),
            "no kernel sbi_init in cpu0 S on {q}:\n{s}"
        );
    }
}
