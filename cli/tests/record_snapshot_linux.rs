//! A Linux guest recorded from a snapshot: Debian's arm64 kernel (and amd64, riscv64)
//! booted into an initramfs whose `/init` (`tests/guests/linux/snapinit.c`) sleeps in
//! `read(2)` five calls deep, saved with `savevm` through the monitor (the test waits on the
//! serial marker and the snapshot list), then recorded with `-loadvm` and given a line.
//! Every task was open mid-way: each gets its stack cookie as it first runs after the start,
//! unwound after the run — PID 1's kernel frames by the kernel's frame records, its user
//! frames from `/init`'s own tables, kernel threads' chains down to `schedule`.

mod common;

use qemu_uftrace_tests::execlog::debian_vmlinux;
use qemu_uftrace_tests::linux_guest::{
    sigsnap_initramfs_guest, sigsnap_initramfs_guest_x86_64, snap_initramfs_guest,
    snap_initramfs_guest_riscv64, snap_initramfs_guest_x86_64, INITRAMFS_APPEND, INITRAMFS_TIMEOUT,
};
use qemu_uftrace_tests::replay::{parse_replay, replay_body, task_list, uftrace};
use qemu_uftrace_tests::riscv64::{riscv64_kernel, riscv64_qemus, riscv64_vmlinux};
use qemu_uftrace_tests::snapshot::{create_disk, disk_args, save_at_breakpoint, save_at_marker};
use qemu_uftrace_tests::{cached, debian_kernel, disassemble_by, plugin_stat, system_qemus};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// What a recording from the snapshot left.
struct Run {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    stderr: String,
    console: String,
}

/// A Linux machine to boot: its QEMU, machine options, kernel, command line and the
/// kernel's symbols.
struct Machine {
    qemu: PathBuf,
    options: &'static [&'static str],
    kernel: PathBuf,
    append: &'static str,
    vmlinux: PathBuf,
}

/// Debian's arm64 kernel on `-M virt`.
fn arm64() -> Machine {
    Machine {
        // QEMU 10.2.2: the discontinuity callback shows the system call entries.
        qemu: cached("qemu-10.2.2/bin/qemu-system-aarch64"),
        options: &["-M", "virt", "-cpu", "max"],
        kernel: debian_kernel(),
        append: INITRAMFS_APPEND,
        vmlinux: debian_vmlinux(),
    }
}

/// Debian's amd64 kernel on `-M pc`.
fn amd64() -> Machine {
    Machine {
        qemu: cached("qemu-10.2.2/bin/qemu-system-x86_64"),
        options: &["-M", "pc"],
        kernel: cached("kernel-amd64/vmlinuz"),
        append: "console=ttyS0 panic=-1 nokaslr no_timer_check cryptomgr.notests rdinit=/init",
        vmlinux: cached("kernel-amd64-dbg/vmlinux"),
    }
}

/// Debian's riscv64 kernel on `-M virt` under QEMU's own OpenSBI, on `qemu`.
fn riscv64(qemu: &str) -> Machine {
    Machine {
        qemu: PathBuf::from(qemu),
        options: &["-M", "virt", "-bios", "default"],
        kernel: riscv64_kernel(),
        append: "console=ttyS0 panic=-1 nokaslr cryptomgr.notests rdinit=/init",
        vmlinux: riscv64_vmlinux(),
    }
}

/// Boots `guest` (its initramfs and `/init`) on `machine` until PID 1 sleeps in `read(2)`,
/// saves it, and records the run from the snapshot with a line for `/init` to read,
/// `--symbols` its ELF.
fn record_linux_from_snapshot(machine: Machine, guest: anyhow::Result<(PathBuf, PathBuf)>) -> Run {
    let (cpio, init_elf) = guest.expect("the guest builds");
    let tmp = tempfile::tempdir().expect("temp dir");
    let disk = tmp.path().join("disk.qcow2");
    create_disk(&disk).expect("qemu-img");
    let mut args: Vec<String> = vec![machine.qemu.to_str().expect("a UTF-8 path").to_string()];
    args.extend(machine.options.iter().map(|s| s.to_string()));
    args.extend(
        [
            "-m",
            "512M",
            "-display",
            "none",
            "-nic",
            "none",
            "-no-reboot",
            "-smp",
            "1",
            "-kernel",
            &machine.kernel.to_string_lossy(),
            "-initrd",
            &cpio.to_string_lossy(),
            "-append",
            machine.append,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args.extend(disk_args(&disk));
    let seen = save_at_marker(&args, tmp.path(), "SNAP: waiting", "s1", INITRAMFS_TIMEOUT)
        .expect("snapshot the guest with /init asleep in read");
    assert!(seen.contains("SNAP: waiting"), "{seen}");

    // The line to read is there from the start: -loadvm loads before any input arrives.
    let input = tmp.path().join("input.txt");
    std::fs::write(&input, "g\n").expect("write the input");
    let console = tmp.path().join("console.txt");
    args.extend(["-loadvm", "s1", "-monitor", "none", "-chardev"].map(String::from));
    args.push(format!(
        "file,id=uart,path={},input-path={}",
        console.display(),
        input.display()
    ));
    args.extend(["-serial", "chardev:uart"].map(String::from));
    let vmlinux = machine.vmlinux;
    let options = [
        OsStr::new("--symbols"),
        init_elf.as_os_str(),
        OsStr::new("--symbols"),
        vmlinux.as_os_str(),
    ];
    let (dir, stderr) = common::record_ok_in(tmp.path(), &options, &args);
    let console = std::fs::read_to_string(&console).expect("the guest's console");
    Run {
        _tmp: tmp,
        dir,
        stderr,
        console,
    }
}

/// The calls a task's stream opens before the `qemu:unwound` mark: its recovered chain
/// (empty when the task's stream does not begin so).
fn recovered_chain(text: &str, tid: u32) -> Vec<String> {
    let mut chain = Vec::new();
    for (t, body) in text.lines().filter_map(replay_body) {
        if t != tid {
            continue;
        }
        if body.starts_with("/* qemu:unwound */") {
            return chain;
        }
        match body.strip_suffix("() {") {
            Some(name) => chain.push(name.to_string()),
            None => return Vec::new(),
        }
    }
    Vec::new()
}

/// The functions `func` in `elf` calls or jumps to directly, by its disassembly (objdump
/// names a target `<name>`, `<name+0x…>` inside a function).
fn direct_callees(elf: &Path, func: &str) -> Vec<String> {
    let funcs = disassemble_by("objdump", elf, Some(func)).expect("objdump (binutils)");
    let callees: Vec<String> = funcs
        .iter()
        .filter(|f| f.name == func)
        .flat_map(|f| &f.insns)
        .filter_map(|(_, insn)| {
            let (op, target) = insn.split_once(' ')?;
            if !["call", "jmp"].contains(&op) {
                return None;
            }
            let name = target.split_once('<')?.1.strip_suffix('>')?;
            (!name.contains('+')).then(|| name.to_string())
        })
        .collect();
    assert!(
        !callees.is_empty(),
        "no calls in {func}'s disassembly: {funcs:?}"
    );
    callees
}

fn replay(dir: &Path) -> String {
    uftrace(&["replay", "--no-pager", "-d", &dir.to_string_lossy()]).expect("uftrace replay")
}

/// PID 1's open calls when it first runs after the start: its user-mode calls (from
/// `/init`'s CFI, with glibc's start code), the system call it sleeps in, and its kernel
/// calls down to the switch (by frame records, `cpu_switch_to` by its return address).
const PID1_CHAIN: &[&str] = &[
    "__libc_start_main",
    "__libc_start_call_main",
    "main",
    "snap_a",
    "snap_b",
    "snap_c",
    "snap_wait",
    "read",
    "[svc]",
    "el0t_64_sync_handler",
    "el0_svc",
    "do_el0_svc",
    "el0_svc_common.constprop.0",
    "invoke_syscall",
    "__arm64_sys_read",
    "ksys_read",
    "vfs_read",
    "tty_read",
    "n_tty_read",
    "wait_woken",
    "schedule_timeout",
    "schedule",
    "__schedule",
    "__switch_to",
    "cpu_switch_to",
];

/// A workqueue worker asleep waiting for work.
const WORKER_CHAIN: &[&str] = &[
    "kthread",
    "worker_thread",
    "schedule",
    "__schedule",
    "__switch_to",
    "cpu_switch_to",
];

/// Replays `events` (`"E f"` / `"X f"`) on a stack: each exit closes the innermost open
/// call, of the same name. Gives, for each entry, its caller (`None` at depth 0).
fn callers(events: &[String]) -> Result<Vec<(String, Option<String>)>, String> {
    let mut stack: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(name) = e.strip_prefix("E ") {
            out.push((name.to_string(), stack.last().map(|s| s.to_string())));
            stack.push(name);
        } else if let Some(name) = e.strip_prefix("X ") {
            match stack.pop() {
                Some(open) if open == name => {}
                other => return Err(format!("event {i} {e:?} closes {other:?}")),
            }
        }
    }
    Ok(out)
}

#[test]
fn aarch64_linux_tasks_unwound_at_their_first_switch_in() {
    let run = record_linux_from_snapshot(arm64(), snap_initramfs_guest());
    assert!(run.console.contains("SNAP: done"), "{}", run.console);
    let text = replay(&run.dir);
    let context = || format!("{}\n{text}", run.stderr);

    // PID 1: the chain exact, each recovered call closed in order (the stream nests), and
    // main's later call made at main's depth.
    assert_eq!(recovered_chain(&text, 1), PID1_CHAIN, "{}", context());
    let events = parse_replay(&text, 1).expect("replay");
    let pid1 = callers(&events).unwrap_or_else(|e| panic!("PID 1: {e}\n{}", context()));
    let user_exits: Vec<&str> = events
        .iter()
        .map(String::as_str)
        .filter(|e| {
            [
                "read",
                "snap_wait",
                "snap_c",
                "snap_b",
                "snap_a",
                "snap_later",
            ]
            .iter()
            .any(|f| e[2..] == **f)
        })
        .collect();
    assert_eq!(
        user_exits,
        [
            "E snap_a",
            "E snap_b",
            "E snap_c",
            "E snap_wait",
            "E read",
            "X read",
            "X snap_wait",
            "X snap_c",
            "X snap_b",
            "X snap_a",
            "E snap_later",
            "X snap_later",
        ],
        "{}",
        context()
    );
    assert!(
        pid1.contains(&("snap_later".to_string(), Some("main".to_string()))),
        "{}",
        context()
    );
    // The system call's exit closes the [svc] entry recovered with the chain.
    let svc_exit = events.iter().position(|e| e == "X [svc]").expect("X [svc]");
    // (An interrupt may come in between, and nest.)
    let mut depth = 0usize;
    let next_exit = events[svc_exit + 1..].iter().find(|e| {
        if e.starts_with("E ") {
            depth += 1;
            false
        } else if depth == 0 {
            true
        } else {
            depth -= 1;
            false
        }
    });
    assert_eq!(
        next_exit.map(String::as_str),
        Some("X read"),
        "{}",
        context()
    );

    // Kernel threads: each first seen at its switch, its chain down to schedule; a worker
    // that woke for work runs it from worker_thread, at that depth.
    let tasks = task_list(&run.dir).expect("task.txt");
    let workers: Vec<u32> = tasks
        .iter()
        .map(|&(tid, _)| tid)
        .filter(|&tid| recovered_chain(&text, tid) == WORKER_CHAIN)
        .collect();
    assert!(!workers.is_empty(), "no worker chain: {}", context());
    let mut worked = false;
    for &tid in &workers {
        let events = parse_replay(&text, tid).expect("replay");
        let calls = callers(&events).unwrap_or_else(|e| panic!("task {tid}: {e}\n{}", context()));
        worked |= calls.iter().any(|(f, caller)| {
            f == "process_one_work" && caller.as_deref() == Some("worker_thread")
        });
    }
    assert!(worked, "no worker ran work: {}", context());
    for tid in std::iter::once(1).chain(workers) {
        let lost = text
            .lines()
            .filter_map(replay_body)
            .any(|(t, body)| t == tid && body.contains("LOST"));
        assert!(!lost, "task {tid} has a LOST mark: {}", context());
    }

    // The summary: frames by CFI (the user part), frame records (the kernel's), and the
    // exception entry between them. (The vCPU itself may have been stopped anywhere, its
    // own task is not checked here.)
    let summary = run
        .stderr
        .lines()
        .find(|l| l.contains("the run started mid-way"))
        .unwrap_or_else(|| panic!("no summary: {}", run.stderr));
    for method in ["by CFI", "by frame records", "by exception entry"] {
        assert!(summary.contains(method), "{summary}");
    }

    assert!(std::fs::read_dir(&run.dir).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".stack")));
}

/// PID 1's user-mode calls when it first runs after the start, in `sigsnapinit.c`: the
/// handler's chain, the delivery (its number unknown: the kernel writes the frame's
/// siginfo only for SA_SIGINFO handlers), and the code the signal interrupted beneath.
const SIG_USER_CHAIN: &[&str] = &[
    "__libc_start_main",
    "__libc_start_call_main",
    "main",
    "snap_spin",
    "[signal]",
    "sig_handler",
    "sig_a",
    "sig_wait",
    "read",
    "[svc]",
];

/// PID 1 asleep in a signal handler (`tests/guests/linux/sigsnapinit.c`): its user chain is
/// unwound through the handler's sigreturn trampoline (CFI with 'S', the registers read
/// from the sigcontext) into the code the signal interrupted, and the run closes it in
/// order: the handler's return ends the delivery, the interrupted function returns to main.
#[test]
fn aarch64_linux_task_in_a_signal_handler_unwound_through_the_signal_frame() {
    let run = record_linux_from_snapshot(arm64(), sigsnap_initramfs_guest());
    assert_unwound_through_the_signal_frame(&run, "cpu_switch_to");
}

/// The same on Debian's amd64 kernel, through glibc's own `__restore_rt`.
#[test]
fn x86_64_linux_task_in_a_signal_handler_unwound_through_glibcs_restore_rt() {
    let run = record_linux_from_snapshot(amd64(), sigsnap_initramfs_guest_x86_64());
    assert_unwound_through_the_signal_frame(&run, "__switch_to");
}

/// `sigsnapinit.c`'s PID 1 recovered down to the kernel's `innermost` frame, and closed in
/// order.
fn assert_unwound_through_the_signal_frame(run: &Run, innermost: &str) {
    assert!(run.console.contains("SNAP: done"), "{}", run.console);
    let text = replay(&run.dir);
    let context = || format!("{}\n{text}", run.stderr);
    let chain = recovered_chain(&text, 1);
    assert!(
        chain.len() > SIG_USER_CHAIN.len()
            && chain[..SIG_USER_CHAIN.len()] == *SIG_USER_CHAIN
            && chain.last().map(String::as_str) == Some(innermost),
        "{chain:?}\n{}",
        context()
    );
    let events = parse_replay(&text, 1).expect("replay");
    let pid1 = callers(&events).unwrap_or_else(|e| panic!("PID 1: {e}\n{}", context()));
    let user = [
        "snap_spin",
        "[signal]",
        "sig_handler",
        "sig_a",
        "sig_wait",
        "read",
        "snap_later",
    ];
    let user_events: Vec<&str> = events
        .iter()
        .map(String::as_str)
        .filter(|e| user.contains(&&e[2..]))
        .collect();
    assert_eq!(
        user_events,
        [
            "E snap_spin",
            "E [signal]",
            "E sig_handler",
            "E sig_a",
            "E sig_wait",
            "E read",
            "X read",
            "X sig_wait",
            "X sig_a",
            "X sig_handler",
            "X [signal]",
            "X snap_spin",
            "E snap_later",
            "X snap_later",
        ],
        "{}",
        context()
    );
    assert!(
        pid1.contains(&("snap_later".to_string(), Some("main".to_string()))),
        "{}",
        context()
    );
    let summary = run
        .stderr
        .lines()
        .find(|l| l.contains("the run started mid-way"))
        .unwrap_or_else(|| panic!("no summary: {}", run.stderr));
    assert!(summary.contains("1 by signal frame"), "{summary}");
}

/// PID 1's open calls on x86-64 when it first runs after the start: its user-mode calls
/// (from `/init`'s CFI, with the user registers its first return to user mode restored,
/// SYSRET or IRET), the system call, and its kernel calls (by ORC; `x64_sys_call` and
/// `__x64_sys_read` left by tail calls, so no return address names them).
const X86_64_PID1_CHAIN: &[&str] = &[
    "__libc_start_main",
    "__libc_start_call_main",
    "main",
    "snap_a",
    "snap_b",
    "snap_c",
    "snap_wait",
    "read",
    "[svc]",
    "do_syscall_64",
    "ksys_read",
    "vfs_read",
    "tty_read",
    "n_tty_read",
    "wait_woken",
    "schedule_timeout",
    "schedule",
    "__schedule",
    "__switch_to",
];

/// `snapinit.c` on Debian's amd64 kernel: PID 1's user chain recovered from its second
/// cookie, taken at its first return to user mode, and closed in order by the run.
#[test]
fn x86_64_linux_pid1_user_frames_unwound_at_its_return_to_user_mode() {
    let run = record_linux_from_snapshot(amd64(), snap_initramfs_guest_x86_64());
    assert_pid1_user_frames_unwound(&run, X86_64_PID1_CHAIN);
    let text = replay(&run.dir);
    let context = || format!("{}\n{text}", run.stderr);
    let events = parse_replay(&text, 1).expect("replay");
    let pid1 = callers(&events).unwrap_or_else(|e| panic!("PID 1: {e}\n{}", context()));
    let called = |f: &str, caller: &str| pid1.contains(&(f.to_string(), Some(caller.to_string())));
    // Each system call made in the run (QEMU reports no SYSCALL: its instruction opens the
    // entry) as on arm64: `[svc]` under the libc wrapper, the kernel's entry beneath it,
    // closed by its SYSRET.
    for wrapper in ["write", "sync", "reboot"] {
        assert!(
            called("[svc]", wrapper),
            "no [svc] under {wrapper}: {}",
            context()
        );
    }
    let entries: Vec<&Option<String>> = pid1
        .iter()
        .filter(|(f, _)| f == "do_syscall_64")
        .map(|(_, caller)| caller)
        .collect();
    assert!(
        entries.len() >= 3 && entries.iter().all(|c| c.as_deref() == Some("[svc]")),
        "do_syscall_64's callers {entries:?}: {}",
        context()
    );
    // Timer interrupts taken in user mode (snap_spin runs long enough for some, whatever
    // the host's speed) nest in the function they interrupted, and their IRETQ leaves it
    // open: it returns to main, which goes on at its depth.
    assert!(
        called("[irq]", "snap_spin"),
        "no [irq] in snap_spin: {}",
        context()
    );
    assert!(
        called("snap_spin", "main") && called("sync", "main"),
        "{}",
        context()
    );
    // Every return of PID 1 matched a frame, whenever an interrupt came (one between a
    // return and the block it lands on once lost the return of the recovered snap_a).
    let lost = text
        .lines()
        .filter_map(replay_body)
        .any(|(t, body)| t == 1 && body.contains("LOST"));
    assert!(!lost, "PID 1 has a LOST mark: {}", context());
}

/// PID 1's whole chain on Debian's riscv64 kernel, asleep in `read(2)`: its user frames
/// from `/init`'s CFI, the system call's entry, the kernel's frames down to the switch.
const RISCV64_PID1_CHAIN: &[&str] = &[
    "__libc_start_main",
    "__libc_start_call_main",
    "main",
    "snap_a",
    "snap_b",
    "snap_c",
    "snap_wait",
    "read",
    "[svc]",
    "do_trap_ecall_u",
    "__riscv_sys_read",
    "ksys_read",
    "vfs_read",
    "tty_read",
    "n_tty_read",
    "wait_woken",
    "schedule_timeout",
    "schedule",
    "__schedule",
    "__switch_to",
];

/// `snapinit.c` on Debian's riscv64 kernel: PID 1's user chain recovered from its second
/// cookie, taken at the first block it runs in user mode after its first SRET (S-mode
/// cannot read the user stack at the SRET itself), and closed in order by the run; on
/// every QEMU (the first user block's conditional callback is plugin API 3).
#[test]
fn riscv64_linux_pid1_user_frames_unwound_at_its_return_to_user_mode() {
    for qemu in riscv64_qemus() {
        eprintln!("QEMU {}", qemu.label);
        let run =
            record_linux_from_snapshot(riscv64(&qemu.program), snap_initramfs_guest_riscv64());
        assert_pid1_user_frames_unwound(&run, RISCV64_PID1_CHAIN);
    }
}

/// PID 1 of `snapinit.c` recovered as `chain`, its user frames closed in order by the run
/// and `snap_later` called from `main` after them.
fn assert_pid1_user_frames_unwound(run: &Run, chain: &[&str]) {
    assert!(run.console.contains("SNAP: done"), "{}", run.console);
    let text = replay(&run.dir);
    let context = || format!("{}\n{text}", run.stderr);
    assert_eq!(recovered_chain(&text, 1), chain, "{}", context());
    let events = parse_replay(&text, 1).expect("replay");
    let pid1 = callers(&events).unwrap_or_else(|e| panic!("PID 1: {e}\n{}", context()));
    let user = [
        "read",
        "snap_wait",
        "snap_c",
        "snap_b",
        "snap_a",
        "snap_later",
    ];
    let user_events: Vec<&str> = events
        .iter()
        .map(String::as_str)
        .filter(|e| user.contains(&&e[2..]))
        .collect();
    assert_eq!(
        user_events,
        [
            "E snap_a",
            "E snap_b",
            "E snap_c",
            "E snap_wait",
            "E read",
            "X read",
            "X snap_wait",
            "X snap_c",
            "X snap_b",
            "X snap_a",
            "E snap_later",
            "X snap_later",
        ],
        "{}",
        context()
    );
    assert!(
        pid1.contains(&("snap_later".to_string(), Some("main".to_string()))),
        "{}",
        context()
    );
    let summary = run
        .stderr
        .lines()
        .find(|l| l.contains("the run started mid-way"))
        .unwrap_or_else(|| panic!("no summary: {}", run.stderr));
    for method in ["by CFI", "by exception entry"] {
        assert!(summary.contains(method), "{summary}");
    }
}

/// Debian's amd64 kernel (no frame pointers: its unwinder is ORC) booted to its "Unable to
/// mount root fs" panic, where it loops with interrupts off, saved there, and recorded from
/// the snapshot until the loop's next `__const_udelay` call (`--stop-at …,exit`): the open
/// chain unwound by the kernel's ORC tables (the -dbg vmlinux given with `--symbols`).
#[test]
fn x86_64_kernel_panic_loop_unwound_by_orc() {
    let run = x86_64_panic_loop_from_snapshot("console=ttyS0 nokaslr no_timer_check", true);
    assert_eq!(
        plugin_stat(&run.dir, "kaslr_offset"),
        "0x0",
        "{}",
        run.stderr
    );
}

/// The same with KASLR on, as the kernel boots by default, and with the stock bzImage alone
/// (no vmlinux: kallsyms' names, the ORC tables of its payload): the run from the snapshot
/// finds the kernel's base by its version banner in guest memory (there is no boot to
/// watch), so the chain, the stop and the unwinding by ORC are as with `nokaslr` and the
/// -dbg vmlinux, and the summary says the offset. The base is random (0 in about one boot of 500: then `plugin.stats` says
/// 0x0 and the summary nothing).
#[test]
fn x86_64_randomised_kernel_from_a_snapshot_found_by_its_banner() {
    let run = x86_64_panic_loop_from_snapshot("console=ttyS0 no_timer_check", false);
    assert_eq!(plugin_stat(&run.dir, "kaslr_anchor"), "linux_banner");
    let stated = plugin_stat(&run.dir, "kaslr_offset");
    let said = run
        .stderr
        .lines()
        .find(|l| l.contains("ran at a random base"))
        .map(|l| l.to_string());
    match said {
        Some(line) => {
            assert!(
                line.contains(&format!("base (KASLR), {stated} above"))
                    && line.contains("found by its version banner in guest memory"),
                "{line}\n{}",
                run.stderr
            );
            let offset = u64::from_str_radix(stated.trim_start_matches("0x"), 16).expect("hex");
            assert_eq!(offset % (2 << 20), 0, "{stated}");
        }
        None => assert_eq!(stated, "0x0", "{}", run.stderr),
    }
    assert!(!run.stderr.contains("KASLR) unless"), "{}", run.stderr);
}

/// Boots `kernel` on `qemu` (`machine`'s options) with `append`, no initramfs and no
/// `panic=`, to its "Unable to mount root fs" panic, where it loops for ever; saves it after
/// the panic's last line, where the loop follows; returns the command line that resumes it
/// (`-loadvm`), in `work`.
fn saved_in_panic_loop(
    work: &Path,
    qemu: &Path,
    machine: &[&str],
    kernel: &Path,
    append: &str,
) -> Vec<String> {
    saved_in_panic_loop_by(work, qemu, machine, kernel, append, |args| {
        save_at_marker(args, work, PANIC_END, "s1", INITRAMFS_TIMEOUT)
    })
}

/// The last line of a panic's message.
const PANIC_END: &str = "---[ end Kernel panic";

/// [`saved_in_panic_loop`], saved by `save` (given the command line; gives the serial
/// output seen).
fn saved_in_panic_loop_by(
    work: &Path,
    qemu: &Path,
    machine: &[&str],
    kernel: &Path,
    append: &str,
    save: impl FnOnce(&[String]) -> anyhow::Result<String>,
) -> Vec<String> {
    let disk = work.join("disk.qcow2");
    create_disk(&disk).expect("qemu-img");
    let mut args = vec![qemu.to_str().expect("a UTF-8 path").to_string()];
    args.extend(machine.iter().map(|s| s.to_string()));
    let kernel = kernel.to_string_lossy();
    let rest = [
        "-m", "512M", "-display", "none", "-nic", "none", "-kernel", &kernel,
    ];
    args.extend(rest.map(String::from));
    args.extend(["-append".to_string(), append.to_string()]);
    args.extend(disk_args(&disk));
    let seen = save(&args).expect("snapshot the kernel in its panic loop");
    assert!(seen.contains("Unable to mount root fs"), "{seen}");
    args.extend(["-loadvm", "s1", "-monitor", "none", "-serial", "null"].map(String::from));
    args
}

/// Boots Debian's amd64 kernel with `append` to its panic loop, saves it there, records the
/// run from the snapshot to the loop's next delay (with the -dbg vmlinux or the bzImage
/// alone), and checks the open chain unwound by ORC.
fn x86_64_panic_loop_from_snapshot(append: &str, with_vmlinux: bool) -> Run {
    let tmp = tempfile::tempdir().expect("temp dir");
    let qemu = cached("qemu-10.2.2/bin/qemu-system-x86_64");
    let kernel = cached("kernel-amd64/vmlinuz");
    let vmlinux = cached("kernel-amd64-dbg/vmlinux");
    let args = saved_in_panic_loop(tmp.path(), &qemu, &["-M", "pc"], &kernel, append);
    let mut options = vec![OsStr::new("--stop-at"), OsStr::new("__const_udelay,exit")];
    if with_vmlinux {
        options.extend([OsStr::new("--symbols"), vmlinux.as_os_str()]);
    }
    let (dir, stderr) = common::record_ok_in(tmp.path(), &options, &args);
    let text = replay(&dir);
    // PID 1, a kernel thread here, in panic's delay loop (in delay_tsc, entered by tail
    // calls from __const_udelay; in panic itself if the stop came between two calls). On a
    // loaded host the monitor can stop the guest before it reaches the loop: still in the
    // printk that wrote the marker's line (the serial write of its newline, then restoring
    // the UART's interrupts), or in a call panic makes before the loop. The chain then goes
    // on below panic, through _printk or that call. The outer chain is what shows the
    // unwinding right: each frame's caller is found from the frame below it, so one wrong
    // frame would derail every frame above it.
    let chain = recovered_chain(&text, 1);
    let outer = [
        "kernel_init",
        "kernel_init_freeable",
        "prepare_namespace",
        "mount_block_root",
        "panic",
    ];
    assert!(
        chain.len() >= outer.len() && chain[..outer.len()] == outer,
        "{chain:?}\n{stderr}\n{text}"
    );
    // What was open below panic returns, and panic's next call is made at its depth.
    let events = parse_replay(&text, 1).expect("replay");
    let calls = callers(&events).unwrap_or_else(|e| panic!("{e}\n{text}"));
    // Where a chain below panic may start: a function panic calls, directly (its code,
    // disassembled) or through a pointer (as recorded after the unwound calls), or
    // delay_tsc (entered by __const_udelay's tail call). The loop's `panic_blink(state)`
    // is a pointer call that the recording never repeats (it stops at the next delay):
    // its targets are the kernel's no_blink or, once the LED panic trigger set it (Debian's
    // kernel has it built in), led_panic_blink, where CI's snapshot was once taken.
    let mut panics_calls = direct_callees(&vmlinux, "panic");
    panics_calls.extend(["no_blink", "led_panic_blink"].map(String::from));
    panics_calls.extend(
        calls
            .iter()
            .skip(chain.len())
            .filter(|(_, caller)| caller.as_deref() == Some("panic"))
            .map(|(f, _)| f.clone()),
    );
    let below = &chain[outer.len()..];
    let starts_right = below
        .first()
        .is_none_or(|f| f == "delay_tsc" || panics_calls.contains(f));
    assert!(
        starts_right && below.iter().all(|f| !f.starts_with('<') && f != "panic"),
        "{chain:?}\n{text}"
    );
    assert_eq!(
        calls.last(),
        Some(&("__const_udelay".to_string(), Some("panic".to_string()))),
        "{text}"
    );
    let summary = stderr
        .lines()
        .find(|l| l.contains("the run started mid-way"))
        .unwrap_or_else(|| panic!("no summary: {stderr}"));
    assert!(
        summary.contains(&format!("{} open frames", chain.len()))
            && summary.contains(&format!("({} by ORC)", chain.len())),
        "{summary}"
    );
    Run {
        _tmp: tmp,
        dir,
        stderr,
        console: String::new(),
    }
}

/// Debian's arm64 kernel as it boots by default, at a random base (QEMU's device tree gives
/// it a seed; never its link address), to its "Unable to mount root fs" panic loop, saved
/// there and recorded from the snapshot to the loop's next `__const_udelay` call, twice:
/// with the -dbg vmlinux, and with the stock image alone (kallsyms' names, the banner from
/// the `Image`). Each run finds the base by the kernel's version banner in guest memory,
/// the same in both, and names every call; the open chain is unwound by frame records as
/// the kernel's own panic would show it, the same from the stock image's code as from the
/// vmlinux.
#[test]
fn arm64_randomised_kernel_from_a_snapshot_found_by_its_banner() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let qemu = cached("qemu-10.2.2/bin/qemu-system-aarch64");
    let machine = ["-M", "virt", "-cpu", "cortex-a57"];
    let kernel = debian_kernel();
    let args = saved_in_panic_loop(tmp.path(), &qemu, &machine, &kernel, "console=ttyAMA0");
    let vmlinux = debian_vmlinux();
    let stop = ["--stop-at", "__const_udelay,exit"];
    let record = |name: &str, symbols: Option<&Path>| {
        let dir = tmp.path().join(name);
        let mut options: Vec<&OsStr> = stop.iter().map(OsStr::new).collect();
        if let Some(file) = symbols {
            options.extend([OsStr::new("--symbols"), file.as_os_str()]);
        }
        let out = common::record_into(&dir, &options, &args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{name}: {}\n{stderr}", out.status);
        (dir, stderr)
    };
    let runs = [
        ("vmlinux", record("vmlinux.data", Some(&vmlinux))),
        ("stock image", record("image.data", None)),
    ];
    let mut offsets = Vec::new();
    for (what, (dir, stderr)) in &runs {
        assert_eq!(plugin_stat(dir, "kaslr_anchor"), "linux_banner", "{what}");
        let stated = plugin_stat(dir, "kaslr_offset");
        assert_ne!(stated, "0x0", "{what}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "ran at a random base (KASLR), {stated} above its link address (found by its \
                 version banner in guest memory)"
            )),
            "{what}: {stderr}"
        );
        offsets.push(stated);
        let text = replay(dir);
        let unnamed: Vec<&str> = (text.lines())
            .filter(|l| l.contains("<ffff") || l.contains("<0x"))
            .collect();
        assert!(unnamed.is_empty(), "{what}: {unnamed:?}\n{text}");
        let events = parse_replay(&text, 1).expect("replay");
        callers(&events).unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
        // The stop, at the moved address of panic's delay (where the snapshot may have
        // been taken: then at once).
        assert!(
            stderr.contains("stopped writing at the first entry into __const_udelay"),
            "{what}: {stderr}"
        );
    }
    assert_eq!(
        offsets[0], offsets[1],
        "the vmlinux's banner against the image's"
    );
    // PID 1, a kernel thread here: panic's caller chain from kernel_init. The loop runs
    // with interrupts on: a snapshot taken inside the timer's interrupt has its handler's
    // calls innermost, then the interrupt's entry (`[irq]`, from the registers it saved),
    // then the interrupted calls. Every return past them closes one.
    let chains = runs
        .each_ref()
        .map(|(_, (dir, _))| recovered_chain(&replay(dir), 1));
    // 6.1's gic_handle_irq shares its address with `_stext`, the name kallsyms gives it.
    let as_vmlinux = |f: &String| match f.as_str() {
        "_stext" => "gic_handle_irq".to_string(),
        _ => f.clone(),
    };
    let from_image: Vec<String> = chains[1].iter().map(as_vmlinux).collect();
    assert_eq!(
        chains[0], from_image,
        "the vmlinux's chain against the image's"
    );
    let (dir, stderr) = &runs[0].1;
    let text = replay(dir);
    let chain = &chains[0];
    let outer = ["kernel_init", "kernel_init_freeable", "prepare_namespace"].map(String::from);
    assert!(
        chain.starts_with(&outer) && chain.iter().any(|f| f == "panic"),
        "{chain:?}\n{stderr}\n{text}"
    );
    if let Some(irq) = chain.iter().position(|f| f == "[irq]") {
        assert_eq!(
            chain.get(irq + 1).map(String::as_str),
            Some("el1h_64_irq_handler"),
            "{chain:?}"
        );
    }
    // A snapshot that caught the exception at its vector, before its entry code saved
    // anything, starts from ELR_EL1 (the test below saves one there every time).
    assert!(!chain.iter().any(|f| f == "vectors"), "{chain:?}");
    for (what, (dir, stderr)) in &runs {
        assert!(
            !stderr.contains("matched no recovered frame"),
            "{what}: {stderr}\n{}",
            replay(dir)
        );
    }
}

/// Debian's arm64 kernel in its panic loop, saved as its timer interrupt was taken: at the
/// first instruction of its IRQ vector (`vectors` + 0x280, EL1h), where the interrupted pc
/// is in ELR_EL1 alone. A stop from the monitor lands there about one time in two (QEMU
/// delivers the interrupt, then sees the stop request); a breakpoint through the gdbstub
/// lands there every time. The run from that snapshot opens what the interrupt interrupted
/// (panic's chain, unwound by frame records from ELR_EL1 and the registers the vector has
/// not touched), then the `[irq]` entry, which the ERET closes; every return after it
/// closes a recovered frame. On 10.2.2 and 11.1.3, which report exceptions. On 10.0 (which
/// lists VBAR_EL1 as `VBAR`) the chain comes out right as well, but the interrupt's return,
/// which 10.0 does not report, leaves a LOST mark, as its unreported interrupts do elsewhere.
#[test]
fn arm64_snapshot_at_an_interrupts_vector_opens_the_calls_it_interrupted() {
    let vmlinux = debian_vmlinux();
    let image = qemu_uftrace_symbols::load(&vmlinux, &Default::default()).expect("the vmlinux");
    let vectors = (image.functions.iter())
        .find(|f| f.name == "vectors")
        .expect("the vmlinux's `vectors`")
        .addr;
    for qemu in system_qemus().into_iter().filter(|q| q.label != "10.0") {
        let q = qemu.label;
        let tmp = tempfile::tempdir().expect("temp dir");
        let work = tmp.path();
        let machine = ["-M", "virt", "-cpu", "cortex-a57"];
        let args = saved_in_panic_loop_by(
            work,
            Path::new(&qemu.program),
            &machine,
            &debian_kernel(),
            "console=ttyAMA0 nokaslr",
            |args| {
                save_at_breakpoint(
                    args,
                    work,
                    PANIC_END,
                    vectors + 0x280,
                    "s1",
                    INITRAMFS_TIMEOUT,
                )
            },
        );
        let options = ["--stop-at", "__const_udelay,exit", "--symbols"]
            .map(OsStr::new)
            .into_iter()
            .chain([vmlinux.as_os_str()])
            .collect::<Vec<_>>();
        let (dir, stderr) = common::record_ok_in(work, &options, &args);
        let text = replay(&dir);
        let chain = recovered_chain(&text, 1);
        let outer = ["kernel_init", "kernel_init_freeable", "prepare_namespace"].map(String::from);
        assert!(
            chain.starts_with(&outer)
                && chain.iter().any(|f| f == "panic")
                && !chain.iter().any(|f| f == "vectors"),
            "{q}: {chain:?}\n{stderr}\n{text}"
        );
        // The breakpoint may stop an interrupt nested in an earlier one's softirqs (a
        // loaded host makes them longer): that one is crossed from the registers its entry
        // saved, as in the KASLR test above.
        for at in chain
            .iter()
            .enumerate()
            .filter(|(_, f)| *f == "[irq]")
            .map(|(i, _)| i)
        {
            assert_eq!(
                chain.get(at + 1).map(String::as_str),
                Some("el1h_64_irq_handler"),
                "{q}: {chain:?}"
            );
        }
        // The interrupt's entry, right after the recovered frames, then its handler's.
        let after: Vec<&str> = (text.lines().filter_map(replay_body))
            .filter(|(t, _)| *t == 1)
            .map(|(_, body)| body)
            .skip_while(|b| !b.starts_with("/* qemu:unwound */"))
            .skip(1)
            .take(2)
            .collect();
        assert_eq!(
            after,
            ["[irq]() {", "el1h_64_irq_handler() {"],
            "{q}: {chain:?}\n{text}"
        );
        assert!(
            !stderr.contains("matched no recovered frame"),
            "{q}: {stderr}\n{text}"
        );
        let events = parse_replay(&text, 1).expect("replay");
        let calls = callers(&events).unwrap_or_else(|e| panic!("{q}: {e}\n{text}"));
        assert_eq!(
            calls.last(),
            Some(&("__const_udelay".to_string(), Some("panic".to_string()))),
            "{q}: {text}"
        );
    }
}
