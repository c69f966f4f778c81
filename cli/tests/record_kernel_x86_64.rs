//! Debian's amd64 cloud kernel (a bzImage) boots under `qemu-uftrace record --
//! qemu-system-x86_64 -M pc -kernel bzImage` to its "Unable to mount root fs" panic, traced
//! from SeaBIOS's first calls (real mode, then 32-bit) through the kernel's decompressor into
//! the kernel (64-bit), with names from the bzImage alone (its kallsyms, also at the physical
//! address the kernel starts at). The kernel calls indirectly through retpolines
//! (`__x86_indirect_thunk_<reg>`): those calls show as calls of their targets. With the
//! kernel's DWARF vmlinux (Debian's -dbg package) as `--symbols`, every kernel address has
//! its name and source line, and tasks carry the kernel's names and PIDs.

mod common;

use common::{check_secondary_start, record_to_panic};
use qemu_uftrace_engine::tasks::BOOT_TID_BASE;
use qemu_uftrace_symbols::LoadOptions;
use qemu_uftrace_tests::replay::{graph_backtrace, reported_calls, task_names, uftrace};
use qemu_uftrace_tests::x86_64_guests::{system_qemus_x86_64, QEMU_X86_64};
use qemu_uftrace_tests::{cached, plugin_stat};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The QEMU command that boots Debian's amd64 kernel to its panic on `qemu`.
fn boot_args(qemu: &str) -> Vec<String> {
    qemu_uftrace_tests::amd64_kernel_boot_args_on(qemu, qemu_uftrace_tests::AMD64_PANIC_APPEND)
}

/// Records the boot with `extra` options for `record`; returns the temp dir (keep it alive)
/// and the trace.
fn record_boot(qemu: &str, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let (tmp, dir, _) = record_to_panic(&boot_args(qemu), extra);
    (tmp, dir)
}

fn stat(dir: &Path, key: &str) -> u64 {
    let value = plugin_stat(dir, key);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{key}={value} in plugin.stats is not a count"))
}

#[test]
fn debian_amd64_kernel_boots_to_its_panic_under_record() {
    for qemu in system_qemus_x86_64() {
        if qemu.program == QEMU_X86_64 {
            // The boot on the emulator on PATH, which new_user.rs reads too: shared.
            let r = common::shared_to_panic(&boot_args(&qemu.program), &[]);
            check_boot(&r.dir, qemu.label);
        } else {
            let (_tmp, dir) = record_boot(&qemu.program, &[]);
            check_boot(&dir, qemu.label);
        }
    }
}

/// Two vCPUs (`-smp 2`): both record, on one wall-clock timeline; the secondary CPU, woken by
/// the boot CPU's INIT/SIPI in `native_cpu_up`, runs its first C code (`cpu_init_secondary`)
/// in its own boot context while that call is still open; tasks move between the vCPUs.
#[test]
fn two_vcpus_share_one_timeline() {
    for qemu in system_qemus_x86_64() {
        let mut args = boot_args(&qemu.program);
        args.extend(["-smp", "2"].map(String::from));
        let (_tmp, dir, _) = record_to_panic(&args, &[]);
        // PID 1 brings the CPU up (smp_init, from kernel_init); cpu_init_secondary is its
        // first C code, before any switch on it: in vCPU 1's boot context.
        let tasks = format!("1,{}", BOOT_TID_BASE + 1);
        check_secondary_start(
            &dir,
            "native_cpu_up",
            "cpu_init_secondary",
            true,
            Some(&tasks),
            qemu.label,
        );
    }
}

/// Each exception named by its vector, which QEMU does not give plugins: SeaBIOS's BIOS
/// calls (`INT 10h` …, vectors below 32 though they are software interrupts) as `[int]`, read
/// off the instruction; the early boot's page fault (`early_idt_handler_array`) and text
/// patching's breakpoint as `[page-fault]` and `[int3]`, found in the IDT that `lidt` loaded.
/// QEMU reports each x86 exception twice (raised, then delivered as an interrupt): one entry
/// each, never an `[irq]` in it.
fn check_exception_kinds(d: &str, qemu: &str) {
    let report = uftrace(&["report", "--no-pager", "-d", d]).expect("uftrace report");
    let calls_of = |name: &str| reported_calls(&report, name).unwrap_or(0);
    assert!(calls_of("[int]") > 100, "[int] on {qemu}:\n{report}");
    assert!(calls_of("[irq]") > 100, "[irq] on {qemu}");
    assert_eq!(calls_of("[exception]"), 0, "unnamed exceptions on {qemu}");
    // The entries looked into and two levels beneath (the lines `under` reads), not the
    // whole boot's replay (850 MB of text, twice the time).
    let replay = uftrace(&[
        "replay",
        "--no-pager",
        "-F",
        r"^\[page-fault\]$",
        "-F",
        r"^\[int3\]$",
        "-F",
        r"^\[int\]$",
        "-D",
        "3",
        "-d",
        d,
    ])
    .expect("uftrace replay -F the exceptions");
    let lines: Vec<&str> = replay
        .lines()
        .map(|l| l.split('|').nth(1).unwrap_or("").trim())
        .collect();
    let under = |entry: &str, handler: &str| {
        lines
            .windows(3)
            .any(|w| w[0] == entry && w[1..].iter().any(|l| l.starts_with(handler)))
    };
    assert!(
        under("[page-fault]() {", "do_early_exception"),
        "no [page-fault] on {qemu}"
    );
    assert!(under("[int3]() {", "exc_int3"), "no [int3] on {qemu}");
    assert!(
        !under("[int]() {", "[irq]"),
        "an [irq] inside an [int] on {qemu}"
    );
}

fn check_boot(dir: &Path, qemu: &str) {
    assert_eq!(plugin_stat(dir, "target"), "x86_64");
    // The task variable's address went to the plugin through a file that is not the trace's.
    assert!(!dir.join(".task_slot").exists(), "on {qemu}");
    let discontinuity = qemu != "10.0";

    // About 9.5 M calls and as many returns. A return with no frame to close is rare: the
    // firmware's and the boot code's far jumps and far returns, each new task's first
    // return (to ret_from_fork),
    // well under 0.1 %. Retpolines, which made 0.9 M calls each followed by a return to the
    // callee's entry, leave no unseen return behind; the 32 calls that refill the return
    // stack buffer at each context switch are no calls, so no return closes them all at
    // once.
    let (calls, returns) = (stat(dir, "calls"), stat(dir, "returns"));
    assert!(calls > 5_000_000, "only {calls} calls on {qemu}");
    assert!(
        calls.abs_diff(returns) < calls / 100,
        "{calls} calls, {returns} returns on {qemu}"
    );
    // SeaBIOS's waits make one unmatched return per turn (its 32-bit code calls 16-bit code
    // to let interrupts in, and comes back through its mode-switching trampoline), and how
    // many turns a wait takes depends on the host's speed: 33 to over 1,000 under load. Deep
    // returns grow with the host's load too: ~56 on a quiet host, 678 once at load 9.
    for (key, bound) in [
        ("unmatched_returns", calls / 1_000),
        ("returns_unseen", 1_000),
        ("deep_returns", calls / 1_000),
    ] {
        let n = stat(dir, key);
        assert!(n < bound, "{n} {key} on {qemu} (bound {bound})");
    }
    // Linux's sync_core() on QEMU's CPU, which lacks SERIALIZE: an IRETQ to its own next
    // instruction (`iret_to_self`), ~100 k times a boot (patching alternatives, jump labels),
    // inside system calls and interrupts too. Each closes nothing.
    let to_next = stat(dir, "eret_to_next");
    assert!(to_next > 10_000, "{to_next} eret_to_next on {qemu}");
    // One task per guest task, found by the stores to the per-CPU `current_task` (its
    // address from the bzImage's kallsyms): switches suspend and resume stacks.
    assert!(stat(dir, "tasks") > 30, "tasks on {qemu}");
    assert!(stat(dir, "switches") > 300, "switches on {qemu}");
    // Interrupts and exceptions as entries where QEMU reports them, each closed by its IRET.
    if discontinuity {
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
    if discontinuity {
        check_exception_kinds(&d, qemu);
    }
    // SeaBIOS first (no symbols: its region below 1 MiB is one marked function), in real
    // and 32-bit mode.
    // The boot context's roots and PID 1's (the image's BTF gives PIDs): a pass over those
    // two tasks, not the whole boot.
    let roots_args = [
        "replay",
        "--no-pager",
        "-D",
        "1",
        "--tid",
        "4194304,1",
        "-d",
        &d,
    ];
    let head = uftrace(&roots_args).expect("uftrace replay");
    let first = head
        .lines()
        .nth(1)
        .and_then(|l| l.split("| [x86 BIOS ").nth(1))
        .and_then(|a| u64::from_str_radix(a.split('-').next()?, 16).ok());
    assert!(
        first.is_some_and(|a| (0xe_0000..0x10_0000).contains(&a)),
        "the trace does not start in SeaBIOS on {qemu}:\n{}",
        &head[..head.len().min(2000)]
    );
    // PID 1's kernel stack starts at ret_from_fork: schedule_tail, then kernel_init (called
    // through a retpoline).
    let roots = uftrace(&roots_args).expect("uftrace replay");
    assert!(
        roots
            .lines()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w[0].ends_with("| schedule_tail();")
                && w[1].contains("| kernel_init()")
                && w[0].split('|').next().map(|c| c.split('[').nth(1))
                    == w[1].split('|').next().map(|c| c.split('[').nth(1))),
        "no task starting with schedule_tail, kernel_init on {qemu}"
    );
    // The boot context became the boot CPU's idle task (`current_task` held init_task before
    // anything stored to it), not the first task switched to: kthreadd runs in a task of
    // its own (the idle task, its stack open down to rest_init's schedule, never runs
    // again before the panic: PID 1 and the kthreads always have work).
    // One replay of the three functions looked into below (kthreadd, start_kernel and
    // do_one_initcall, two levels each), in the tasks that run them (PID 2, the boot
    // context, PID 1): a pass over the boot's trace takes uftrace ~12 s, over those ~9.
    let aimed = uftrace(&[
        "replay",
        "--no-pager",
        "-F",
        "^kthreadd$",
        "-F",
        "^start_kernel$",
        "-F",
        "^do_one_initcall$",
        "-D",
        "2",
        "--tid",
        "4194304,1,2",
        "-d",
        &d,
    ])
    .expect("uftrace replay -F kthreadd, start_kernel, do_one_initcall");
    let runs = aimed
        .lines()
        .find(|l| l.contains("| kthreadd() {"))
        .unwrap_or_else(|| panic!("no kthreadd on {qemu}:\n{aimed}"));
    assert!(
        !runs.contains("[4194304]"),
        "kthreadd took the boot stack on {qemu}"
    );
    // start_kernel is entered by x86_64_start_reservations' tail call (`jmp start_kernel`):
    // a call nested in it, as uftrace shows a tail call, once, with setup_arch beneath.
    // Once in the whole boot by report's count; its graph is the boot context's (`--tid`:
    // uftrace reads that task's records alone, half a pass over the boot).
    let report = uftrace(&["report", "--no-pager", "-d", &d]).expect("uftrace report");
    for f in ["start_kernel", "x86_64_start_kernel"] {
        assert_eq!(reported_calls(&report, f), Some(1), "{f}'s calls on {qemu}");
    }
    let boot_graph = |f: &str| {
        uftrace(&["graph", "--no-pager", "--tid", "4194304", "-d", &d, f])
            .unwrap_or_else(|e| panic!("uftrace graph {f}: {e}"))
    };
    let graph = boot_graph("start_kernel");
    let backtrace = graph_backtrace(&graph);
    assert!(
        graph.contains("backtrace #0: hit 1,") && !graph.contains("backtrace #1:"),
        "start_kernel entered more than once on {qemu}:\n{}",
        &graph[..graph.len().min(2000)]
    );
    // The firmware's frames stay open beneath it, never returned to (no symbols: SeaBIOS's,
    // its `INT 19h` that boots, the real-mode code's): which ones depends on where timer
    // interrupts land in SeaBIOS's mode switches, 4 to 11 in the runs seen. None closes
    // early: IRETs that pop no exception's frame are SeaBIOS's far jumps into its 16-bit
    // trampolines (`eret_jumps`); taken for the innermost exception's return, one in a
    // timer interrupt just before an `INT` closed the whole boot stack in most runs.
    // Without exception entries (10.0), timer interrupts' IRETs show as stray returns.
    let boot_frames = backtrace.len().saturating_sub(3);
    if discontinuity {
        assert!(stat(dir, "eret_jumps") > 100, "eret_jumps on {qemu}");
    }
    assert!(
        (1..=16).contains(&boot_frames)
            && backtrace.ends_with(&[
                "x86_64_start_kernel",
                "x86_64_start_reservations",
                "start_kernel",
            ])
            && backtrace[..boot_frames]
                .iter()
                .all(|f| f.starts_with("[x86 ") || *f == "[int]"),
        "start_kernel's backtrace on {qemu}: {backtrace:?}"
    );
    // x86_64_start_kernel is entered by the head code's `lretq` (a far return used as a
    // jump that loads the kernel's code segment): a call nested in the frame it ran in, its
    // callees beneath it, not at depth 0.
    let xsk = boot_graph("x86_64_start_kernel");
    assert!(
        xsk.contains("backtrace #0: hit 1,")
            && ["copy_bootdata", "x86_64_start_reservations"]
                .iter()
                .all(|f| xsk.contains(&format!(") {f}"))),
        "x86_64_start_kernel's callees on {qemu}:\n{}",
        &xsk[..xsk.len().min(3000)]
    );
    let indent = |f: &str| {
        aimed
            .lines()
            .filter_map(|l| l.split_once("] | ").map(|(_, c)| c))
            .find(|c| c.trim_start().starts_with(f))
            .map(|c| c.len() - c.trim_start().len())
    };
    let (sk_at, setup_at) = (indent("start_kernel() {"), indent("setup_arch("));
    assert!(
        sk_at.is_some() && setup_at == sk_at.map(|i| i + 2),
        "setup_arch should be called by start_kernel on {qemu}:\n{}",
        &aimed[..aimed.len().min(2000)]
    );
    let has = |f: &str| {
        report
            .lines()
            .any(|l| l.trim_end().ends_with(&format!("  {f}")))
    };
    // The kernel's first calls run at its physical address (0x1000000), named all the same;
    // then the kernel at its link address, to the panic.
    for f in [
        "startup_64_setup_env",
        "__startup_64",
        "early_setup_idt",
        "setup_arch",
        "rest_init",
        "kernel_init",
        "mount_root",
        "panic",
    ] {
        assert!(has(f), "report lacks {f} on {qemu}");
    }
    // Calls through retpolines show as calls of their targets, never of the thunk.
    assert!(
        !report.contains("__x86_indirect_thunk_"),
        "a retpoline shows as a function on {qemu}"
    );
    // Indirect calls made through them: initcalls, the cgroup callbacks.
    assert!(
        has("do_one_initcall") && has("cpuset_css_online"),
        "on {qemu}"
    );
    assert!(
        aimed.contains("init_per_zone_wmark_min"),
        "no initcall under do_one_initcall on {qemu}"
    );
}

/// With the kernel's DWARF vmlinux as `--symbols`: no address of the kernel's text is left
/// unnamed (at its link address or at the physical one its first calls run at), replay
/// shows source lines, and `record` finds `task_struct.comm` and `task_struct.pid` there:
/// tasks carry the kernel's names, and their tids are the guest's PIDs.
#[test]
fn debian_amd64_kernel_with_its_debug_vmlinux() {
    let vmlinux = cached("kernel-amd64-dbg/vmlinux");
    let image = qemu_uftrace_symbols::load(&vmlinux, &LoadOptions::default())
        .expect("load the -dbg vmlinux");
    // Where the kernel runs: its link addresses, and the copy at its physical address
    // (0x1000000, the setup header's pref_address) its first calls run at.
    let physical = 0x100_0000u64.wrapping_sub(image.start);
    let in_kernel = |a: u64| {
        (image.start..image.end).contains(&a)
            || (image.start..image.end).contains(&a.wrapping_sub(physical))
    };
    let vmlinux = vmlinux.to_string_lossy().into_owned();
    for qemu in system_qemus_x86_64() {
        let label = qemu.label;
        let (_tmp, dir) = record_boot(&qemu.program, &["--symbols", &vmlinux]);
        let d = dir.to_string_lossy().to_string();

        // Unnamed functions are SeaBIOS's, the kernel's real-mode setup code's and its
        // decompressor's (none has symbols here), never the kernel's.
        let report = uftrace(&["report", "--no-pager", "-d", &d]).expect("uftrace report");
        let unnamed: Vec<u64> = report
            .lines()
            .filter_map(|l| l.trim_end().strip_suffix('>')?.rsplit_once(" <"))
            .filter_map(|(_, a)| u64::from_str_radix(a, 16).ok())
            .collect();
        // Code without symbols is one marked function per region, never in the kernel.
        let regions: Vec<(u64, u64)> = report
            .lines()
            .filter_map(|l| l.trim_end().strip_suffix(']')?.rsplit_once(' '))
            .filter_map(|(_, r)| {
                let (s, e) = r.split_once('-')?;
                Some((
                    u64::from_str_radix(s, 16).ok()?,
                    u64::from_str_radix(e, 16).ok()?,
                ))
            })
            .collect();
        assert!(
            report.contains("[x86 BIOS "),
            "SeaBIOS not marked on {label}?\n{report}"
        );
        let kernel_regions: Vec<_> = regions
            .iter()
            .filter(|&&(s, e)| (s..e).step_by(0x1000).any(in_kernel))
            .collect();
        assert!(
            kernel_regions.is_empty(),
            "kernel code folded as unnamed on {label}: {kernel_regions:x?}"
        );
        let in_text: Vec<String> = unnamed
            .iter()
            .filter(|&&a| in_kernel(a))
            .map(|a| format!("{a:#x}"))
            .collect();
        assert!(
            in_text.is_empty(),
            "kernel addresses left unnamed on {label}: {in_text:?}"
        );

        // Source lines, at the physical address (the first C call) and the link address;
        // each function's outermost calls.
        let functions = [
            ("startup_64_setup_env", "arch/x86/kernel/head64.c:"),
            ("arch_call_rest_init", "init/main.c:"),
            ("kernel_init", "init/main.c:"),
            ("kthreadd", "kernel/kthread.c:"),
        ];
        // In the tasks that run them (the boot context, PID 1, PID 2): uftrace reads those
        // tasks' records alone.
        let mut args = vec![
            "replay",
            "--no-pager",
            "--srcline",
            "-D",
            "1",
            "--tid",
            "4194304,1,2",
            "-d",
            &d,
        ];
        let patterns: Vec<String> = functions.iter().map(|(f, _)| format!("^{f}$")).collect();
        for p in &patterns {
            args.extend(["-F", p]);
        }
        let top = uftrace(&args).expect("uftrace replay --srcline");
        for (f, file) in functions {
            // At whatever depth: the real-mode setup code's frame, whose jump to protected
            // mode never returns, may still hold the kernel's first C call.
            let call = format!("{f}()");
            let line = top
                .lines()
                .find(|l| {
                    l.split('|')
                        .nth(1)
                        .is_some_and(|c| c.trim_start().starts_with(&call))
                })
                .unwrap_or_else(|| panic!("no {call} on {label} in:\n{top}"));
            assert!(line.contains(file), "{line} without {file} on {label}");
        }

        // Tasks: the kernel's names, and tids that are the guest's PIDs. PID 1 runs
        // kernel_init under init_task's name (no root file system: it never execs), PID 2
        // is kthreadd; the boot context became the boot CPU's idle task, swapper/0 (PID 0:
        // a boot id).
        let names = task_names(&dir).expect("task names");
        let name = |tid: u32| names.get(&tid).cloned().unwrap_or_default();
        let shown = |n: &str| n.replace('/', "\u{2215}");
        assert_eq!(name(1), shown("swapper/0"), "on {label}: {names:?}");
        assert_eq!(name(2), "kthreadd", "on {label}: {names:?}");
        assert_eq!(
            name(BOOT_TID_BASE),
            shown("swapper/0"),
            "on {label}: {names:?}"
        );
        for expected in ["ksoftirqd/0", "migration/0", "cpuhp/0", "kworker/0:0"] {
            assert!(
                names.values().any(|n| *n == shown(expected)),
                "no {expected} on {label}: {names:?}"
            );
        }
        let kworkers = names
            .values()
            .filter(|n| n.starts_with(&shown("kworker/")))
            .count();
        assert!(kworkers >= 5, "{kworkers} kworkers on {label}: {names:?}");
        // Every tid but the boot context's is a PID (below Linux's PID_MAX_LIMIT), none is
        // named after its id.
        let synthetic: Vec<_> = names
            .iter()
            .filter(|(&tid, n)| tid > BOOT_TID_BASE || n.starts_with("task-"))
            .collect();
        assert!(synthetic.is_empty(), "on {label}: {synthetic:?}");
        assert!(names.len() > 30, "{} tasks on {label}", names.len());
        // The PID is the task's own: kernel_init runs in PID 1, kthreadd in PID 2.
        // At any depth: a frame left open above it (the interrupts a boot takes depend on
        // the host's load) indents it.
        let in_task = |f: &str, tid: u32| {
            top.lines().any(|l| {
                l.split_once(&format!("[{tid:>6}] |"))
                    .is_some_and(|(_, call)| call.trim_start().starts_with(&format!("{f}() {{")))
            })
        };
        assert!(
            in_task("kernel_init", 1),
            "kernel_init not in PID 1 on {label}:\n{top}"
        );
        assert!(
            in_task("kthreadd", 2),
            "kthreadd not in PID 2 on {label}:\n{top}"
        );
        let note = std::fs::read_to_string(dir.join("note.txt")).expect("note.txt");
        for l in [
            "  1: swapper/0, pid 1, vCPU 0",
            "  2: kthreadd, pid 2, vCPU 0",
        ] {
            assert!(note.contains(l), "no {l:?} on {label} in {note}");
        }
    }
}

/// `qemu-uftrace symbols` takes the bzImage too: its kallsyms, as uftrace's symbol file.
#[test]
fn symbols_subcommand_reads_a_bzimage() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("syms.data");
    let out = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"))
        .arg("symbols")
        .arg("--syms-only")
        .arg("-d")
        .arg(&dir)
        .arg(cached("kernel-amd64/vmlinuz"))
        .output()
        .expect("run qemu-uftrace symbols");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sym = std::fs::read_to_string(dir.join("vmlinuz.sym")).expect("vmlinuz.sym");
    let names: Vec<&str> = sym.lines().filter_map(|l| l.split(' ').nth(2)).collect();
    assert!(names.len() > 40_000, "{} functions", names.len());
    for f in [
        "start_kernel",
        "__switch_to",
        "x86_64_start_kernel",
        "do_one_initcall",
    ] {
        assert!(names.contains(&f), "no {f}");
    }
}
