//! ACCEPTANCE TESTS OF THE WHOLE-SYSTEM MODEL (issue "whole-system call graphs"): one uftrace
//! task per guest task (its tid the guest PID where known), exceptions and syscalls shown as
//! entries (`[svc]`, `[irq]`, `[data-abort]`, `[insn-abort]`, `[brk]`, `[hvc]`, `[smc]`,
//! `[exception]`) with their handlers' calls beneath, one timeline across vCPUs.
//!
//! They are written against the behaviour the engine WILL have, and fail with the per-vCPU
//! engine of today (one task per vCPU, exceptions unmarked, a clock per vCPU): that is
//! expected until the engine is rewritten. Each test gathers every expectation that fails and
//! reports them all at once, with what the trace showed instead.
//!
//! Everything is read from uftrace's own output (report, replay, info) and `task.txt`, and
//! checked against what the guest is known to do: the initramfs guest's `/init`
//! (`tests/guests/linux`, call counts in `counts.h`) and, in the same QEMU run, QEMU's own
//! `execlog` plugin counting executions of the functions' first instructions
//! (`qemu_uftrace_tests::execlog`). All on QEMU 10.2.2, the QEMU execlog was built for.
//!
//! Run: `cargo test -p qemu-uftrace --test whole_system` (one test: add its name).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use qemu_uftrace_tests::execlog::{
    branches_to, debian_system_map, debian_vmlinux, execlog_plugin, system_map_addresses,
    system_map_names, Execlog, KERNEL_ENTRY_FUNCTIONS,
};
use qemu_uftrace_tests::linux_guest::{
    init_child_pid, init_count, init_expected_calls, initramfs_boot_args_on, initramfs_guest,
    InitTask, INIT_OK,
};
use qemu_uftrace_tests::replay::{
    call_path, descendants, exactly, parse_calls, report_calls, task_list, uftrace, Call,
};
use qemu_uftrace_tests::{kernel_boot_args_on, nm_functions};

/// The QEMU these tests run on: 10.2.2, whose execlog plugin the install script builds.
fn qemu_10_2() -> String {
    qemu_uftrace_tests::system_qemu("10.2.2")
}

/// Every expectation of a test, failed ones kept for one report at the end.
#[derive(Default)]
struct Expect {
    failed: Vec<String>,
}

impl Expect {
    fn that(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.failed.push(what());
        }
    }

    fn eq<T: PartialEq + Debug>(&mut self, what: &str, actual: T, expected: T) {
        if actual != expected {
            self.failed
                .push(format!("{what}: got {actual:?}, expected {expected:?}"));
        }
    }

    fn done(self, test: &str) {
        assert!(
            self.failed.is_empty(),
            "{test}: {} expectation(s) of the whole-system model failed:\n- {}",
            self.failed.len(),
            self.failed.join("\n- ")
        );
    }
}

/// One `qemu-uftrace record` run.
struct Recorded {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    console: String,
    execlog: Execlog,
}

impl Recorded {
    fn d(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }
}

/// Records `argv` with execlog watching `functions` in the same run, `--symbols` for each of
/// `symbols`; fails unless QEMU exits 0.
fn record(argv: Vec<String>, symbols: &[&Path], functions: BTreeMap<String, u64>) -> Recorded {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace.data");
    let execlog = Execlog {
        functions,
        log: tmp.path().join("execlog.log"),
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"));
    cmd.arg("record").arg("-o").arg(&dir);
    for s in symbols {
        cmd.arg("--symbols").arg(s);
    }
    let out = qemu_uftrace_tests::passes::output(
        cmd.arg("--")
            .args(&argv)
            .args(execlog.qemu_args(&execlog_plugin()))
            .stdin(Stdio::null()),
    )
    .expect("run qemu-uftrace");
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "record failed ({}):\n{}\nconsole:\n{console}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Recorded {
        _tmp: tmp,
        dir,
        console,
        execlog,
    }
}

/// The initramfs guest's functions (from `init.elf`) and the compared kernel functions,
/// name → entry address, for execlog.
fn init_and_kernel_functions(init_elf: &Path) -> BTreeMap<String, u64> {
    let user = nm_functions(init_elf).expect("nm init.elf");
    let mut functions =
        system_map_addresses(&debian_system_map(), KERNEL_ENTRY_FUNCTIONS).expect("System.map");
    for (name, _, _) in init_expected_calls() {
        let addr = user
            .iter()
            .find_map(|(a, n)| (n == name).then_some(*a))
            .unwrap_or_else(|| panic!("no {name} in init.elf"));
        functions.insert(name.to_string(), addr);
    }
    functions
}

/// The functions of `functions` that nothing enters without a call (no `b`/`cbz`/… to their
/// first instruction in the kernel's or `init_elf`'s code): execlog's count of their first
/// instruction is their number of calls. The others only bound it from above.
fn entered_only_by_calls(
    functions: &BTreeMap<String, u64>,
    init_elf: Option<&Path>,
) -> BTreeSet<String> {
    let is_user = |a: u64| a < 0x4020_0000;
    let mut exact = BTreeSet::new();
    let sources = [(debian_vmlinux(), false)]
        .into_iter()
        .chain(init_elf.map(|p| (p.to_path_buf(), true)));
    for (elf, user) in sources {
        let addrs: Vec<u64> = functions
            .values()
            .copied()
            .filter(|a| is_user(*a) == user)
            .collect();
        let branches = branches_to(&elf, &addrs).expect("objdump");
        for (name, addr) in functions {
            if is_user(*addr) == user && branches[addr].unlinked == 0 {
                exact.insert(name.clone());
            }
        }
    }
    exact
}

/// The names of `init.elf`'s functions that no kernel function shares (a replay shows names
/// only; glibc and the kernel both have a `memcpy`, say).
fn user_only_names(init_elf: &Path) -> BTreeSet<String> {
    let kernel = system_map_names(&debian_system_map()).expect("System.map");
    nm_functions(init_elf)
        .expect("nm init.elf")
        .into_values()
        .filter(|n| !kernel.contains(n))
        .collect()
}

/// `uftrace replay` of the trace with `args`, parsed into calls.
fn replay_calls(rec: &Recorded, args: &[&str]) -> Vec<Call> {
    let d = rec.d();
    let mut all = vec!["replay", "--no-pager", "-d", &d];
    all.extend_from_slice(args);
    let text = uftrace(&all).unwrap_or_else(|e| panic!("uftrace {}: {e:#}", all.join(" ")));
    parse_calls(&text).unwrap_or_else(|e| panic!("uftrace {}: {e:#}", all.join(" ")))
}

/// Compares the trace's call counts with execlog's entry counts: equal for every function
/// in `exact`, never above for any.
///
/// With several vCPUs execlog itself loses lines: two vCPUs logging at once leave a blank
/// line where one of them was (measured: a trace's 114,899 calls of `__cond_resched` against
/// execlog's 114,866 lines and 33 blank ones). Each blank line may then be any function's, so
/// the trace may exceed execlog by the blank lines in all, never more.
fn compare_with_execlog(rec: &Recorded, exact: &BTreeSet<String>, e: &mut Expect) {
    let seen = rec.execlog.entry_counts().expect("the execlog log");
    let lost = rec.execlog.lost_lines().expect("the execlog log");
    let traced = report_calls(&rec.dir, &[]).expect("uftrace report");
    let mut excess = 0;
    for (name, executed) in &seen {
        let calls = traced.get(name).copied().unwrap_or(0);
        excess += calls.saturating_sub(*executed);
        if exact.contains(name) {
            e.that(calls >= *executed && calls <= executed + lost, || {
                format!(
                    "{name}: {calls} calls in the trace against execlog's {executed} entries \
                     ({lost} execlog lines lost)"
                )
            });
        } else {
            e.that(calls <= executed + lost, || {
                format!("{name}: {calls} calls in the trace, more than the {executed} executions of its entry execlog saw ({lost} lines lost)")
            });
        }
    }
    e.that(excess <= lost, || {
        format!(
            "the trace exceeds execlog by {excess} calls in all, more than its {lost} lost lines"
        )
    });
}

/// The path from the call `top` down to `calls[i]`, names only (`top` first).
fn path_below(calls: &[Call], top: usize, i: usize) -> Vec<String> {
    let full = call_path(calls, i);
    let skip = call_path(calls, top).len() - 1;
    full[skip..].iter().map(|s| s.to_string()).collect()
}

/// The syscall chain of Debian's 6.1 arm64 kernel below an `svc` from EL0, as a trace of the
/// vector's calls shows it (el0t_64_sync is the vector's asm, which `bl`s the handler).
fn svc_chain(syscall: &str) -> Vec<String> {
    [
        "[svc]",
        "el0t_64_sync_handler",
        "el0_svc",
        "do_el0_svc",
        "el0_svc_common.constprop.0",
        "invoke_syscall",
        syscall,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Each call of `function` (in the replay `calls`) makes exactly one syscall, shown as one
/// `[svc]` entry under it (possibly through user functions such as glibc's wrapper: no
/// kernel function between them; glibc's names are not all `init.elf`'s symbol names), with
/// exactly the handler chain `svc_chain(syscall)` down to the syscall's function.
fn check_syscalls_under(
    calls: &[Call],
    function: &str,
    syscall: &str,
    kernel: &BTreeSet<String>,
    e: &mut Expect,
) {
    let tops: Vec<usize> = (0..calls.len())
        .filter(|&i| calls[i].name == function)
        .collect();
    let mut shown = 0;
    for &top in &tops {
        let below = descendants(calls, top);
        let svcs: Vec<usize> = below
            .iter()
            .copied()
            .filter(|&i| calls[i].name == "[svc]")
            .collect();
        let handlers: Vec<usize> = below
            .iter()
            .copied()
            .filter(|&i| calls[i].name == syscall)
            .collect();
        let ok = svcs.len() == 1
            && handlers.len() == 1
            && path_below(calls, svcs[0], handlers[0]) == svc_chain(syscall)
            && path_below(calls, top, svcs[0])[1..]
                .iter()
                .all(|n| n == "[svc]" || !kernel.contains(n));
        if !ok && shown < 2 {
            shown += 1;
            let tree: Vec<String> = below
                .iter()
                .take(8)
                .map(|&i| path_below(calls, top, i).join(" > "))
                .collect();
            e.that(false, || {
                format!(
                    "{function} (tid {}) should make one [svc] with {} beneath; it shows {} [svc] and {} {syscall}; its first calls:\n    {}",
                    calls[top].tid,
                    svc_chain(syscall).join(" > "),
                    svcs.len(),
                    handlers.len(),
                    tree.join("\n    ")
                )
            });
        }
    }
}

/// (a) The initramfs guest on one vCPU, `--symbols init.elf`: /init's functions with their
/// exact call counts, in PID 1's task and its child's; each syscall an `[svc]` entry with the
/// kernel's handler chain beneath; page faults as `[data-abort]`; timer interrupts as `[irq]`;
/// `start_kernel` never returns; `kernel_init` is PID 1's outermost kernel function.
#[test]
fn initramfs_boot_one_task_per_process_with_exception_entries() {
    let (_, init_elf) = initramfs_guest().expect("the guest builds");
    let argv = initramfs_boot_args_on(&qemu_10_2(), 1).expect("the guest builds");
    let rec = record(argv, &[&init_elf], init_and_kernel_functions(&init_elf));
    let d = rec.d();
    let mut e = Expect::default();
    assert!(
        rec.console.contains(INIT_OK),
        "/init failed:\n{}",
        rec.console
    );
    let child = init_child_pid(&rec.console).expect("/init prints its child's PID");
    let user = user_only_names(&init_elf);
    let kernel = system_map_names(&debian_system_map()).expect("System.map");

    // The counts, over the whole trace and per task; execlog agrees in the same run.
    let everywhere = report_calls(&rec.dir, &[]).expect("report");
    let in_init = report_calls(&rec.dir, &["--tid", "1"]).expect("report --tid 1");
    let in_child = report_calls(&rec.dir, &["--tid", &child.to_string()]).expect("report");
    for (f, task, n) in init_expected_calls() {
        let get = |m: &BTreeMap<String, u64>| m.get(f).copied().unwrap_or(0);
        e.eq(&format!("calls of {f} in the trace"), get(&everywhere), n);
        let (own, other, own_tid, other_tid) = match task {
            InitTask::Init => (&in_init, &in_child, 1, child),
            InitTask::Child => (&in_child, &in_init, child, 1),
        };
        e.eq(&format!("calls of {f} in task {own_tid}"), get(own), n);
        e.eq(&format!("calls of {f} in task {other_tid}"), get(other), 0);
    }
    let exact = entered_only_by_calls(&rec.execlog.functions, Some(&init_elf));
    compare_with_execlog(&rec, &exact, &mut e);

    // One task per process: PID 1 and the child, each its own tid = PID.
    let tasks = task_list(&rec.dir).expect("task.txt");
    for tid in [1, child] {
        e.that(tasks.contains(&(tid, tid)), || {
            format!("task.txt has no TASK tid={tid} pid={tid}: {tasks:?}")
        });
    }
    // No other task's code in PID 1's: not the idle loop, not kernel threads, not the child.
    for f in [
        "do_idle",
        "cpu_startup_entry",
        "kthread",
        "worker_thread",
        "child_work",
    ] {
        e.eq(
            &format!("calls of {f} in task 1"),
            in_init.get(f).copied(),
            None,
        );
    }
    for f in ["kernel_init", "main", "one_getpid", "do_idle"] {
        e.eq(
            &format!("calls of {f} in the child's task {child}"),
            in_child.get(f).copied(),
            None,
        );
    }

    // Syscalls as [svc] entries with the handler chain beneath, under the function that made
    // them, in the task that made them.
    let getpids = replay_calls(&rec, &["--tid", "1", "-F", &exactly("one_getpid")]);
    check_syscalls_under(
        &getpids,
        "one_getpid",
        "__arm64_sys_getpid",
        &kernel,
        &mut e,
    );
    let steps = replay_calls(
        &rec,
        &["--tid", &child.to_string(), "-F", &exactly("child_step")],
    );
    check_syscalls_under(&steps, "child_step", "__arm64_sys_getppid", &kernel, &mut e);

    // Sleeping: the nanosleep syscall schedules PID 1 out; its schedule() stays in task 1,
    // and the idle task that runs meanwhile does not appear inside it.
    let sleeps = replay_calls(&rec, &["--tid", "1", "-F", &exactly("do_sleep")]);
    let sleep_tops: Vec<usize> = (0..sleeps.len())
        .filter(|&i| sleeps[i].name == "do_sleep")
        .collect();
    e.eq(
        "do_sleep calls in task 1's replay",
        sleep_tops.len() as u64,
        init_count("SLEEP_CALLS"),
    );
    for &top in &sleep_tops {
        let names: Vec<&str> = descendants(&sleeps, top)
            .into_iter()
            .map(|i| sleeps[i].name.as_str())
            .collect();
        e.that(
            names.contains(&"[svc]")
                && names.contains(&"__arm64_sys_clock_nanosleep")
                && names.contains(&"schedule")
                && !names.contains(&"do_idle"),
            || {
                format!(
                    "do_sleep should show [svc] > … __arm64_sys_clock_nanosleep > … schedule, without the idle task's do_idle; it shows {} calls: {:?}…",
                    names.len(),
                    &names[..names.len().min(12)]
                )
            },
        );
    }

    // Page faults: each touch_page takes exactly one, as a [data-abort] entry right under it.
    let touches = replay_calls(&rec, &["--tid", "1", "-F", &exactly("touch_page")]);
    let fault_chain = [
        "[data-abort]",
        "el0t_64_sync_handler",
        "el0_da",
        "do_mem_abort",
    ];
    let (mut good, mut bad) = (0u64, Vec::new());
    for top in (0..touches.len()).filter(|&i| touches[i].name == "touch_page") {
        let aborts: Vec<usize> = touches[top]
            .children
            .iter()
            .copied()
            .filter(|&c| touches[c].name == "[data-abort]")
            .collect();
        let ok = aborts.len() == 1
            && descendants(&touches, aborts[0])
                .iter()
                .any(|&i| path_below(&touches, aborts[0], i) == fault_chain);
        if ok {
            good += 1;
        } else {
            bad.push(top);
        }
    }
    e.that(good == init_count("FAULT_PAGES") && bad.is_empty(), || {
        let first: Vec<String> = bad
            .first()
            .map(|&top| {
                descendants(&touches, top)
                    .iter()
                    .take(6)
                    .map(|&i| path_below(&touches, top, i).join(" > "))
                    .collect()
            })
            .unwrap_or_default();
        format!(
            "{good} touch_page calls hold one {}, expected {}; {} do not, the first shows {first:?}",
            fault_chain.join(" > "),
            init_count("FAULT_PAGES"),
            bad.len()
        )
    });

    // Interrupts: [irq] entries, the vector's handler called beneath each.
    let irqs = replay_calls(&rec, &["-F", &exactly("[irq]"), "-D", "2"]);
    let irq_tops: Vec<usize> = (0..irqs.len())
        .filter(|&i| irqs[i].name == "[irq]")
        .collect();
    e.that(irq_tops.len() >= 50, || {
        format!(
            "{} [irq] entries; the timer alone interrupts the boot hundreds of times (today's trace shows {} el1h_64_irq_handler calls)",
            irq_tops.len(),
            everywhere.get("el1h_64_irq_handler").copied().unwrap_or(0)
        )
    });
    let handlers = ["el1h_64_irq_handler", "el0t_64_irq_handler"];
    let bare = irq_tops
        .iter()
        .filter(|&&i| {
            !irqs[i]
                .children
                .iter()
                .any(|&c| handlers.contains(&irqs[c].name.as_str()))
        })
        .count();
    e.eq(
        "[irq] entries without el1h_64_irq_handler or el0t_64_irq_handler beneath",
        bare,
        0,
    );

    // The first user instruction PID 1 runs faults its page in: an [insn-abort].
    e.that(in_init.contains_key("[insn-abort]"), || {
        "no [insn-abort] in task 1 (the first instruction of /init faults its page in)".into()
    });

    // start_kernel never returns (the boot CPU ends in the idle loop), in any task.
    let sk_text = uftrace(&[
        "replay",
        "--no-pager",
        "-d",
        &d,
        "-F",
        &exactly("start_kernel"),
        "-D",
        "1",
    ])
    .expect("replay");
    let sk = parse_calls(&sk_text).expect("replay parses");
    e.that(
        sk.len() == 1 && !sk[0].returned && !sk_text.contains("} /* start_kernel */"),
        || format!("start_kernel should be entered once and never return; replay -F start_kernel -D 1 shows:\n{}", sk_text.lines().take(8).collect::<Vec<_>>().join("\n")),
    );

    // PID 1's kernel part: exactly ret_from_fork's calls at its top level (schedule_tail,
    // kernel_init, asm_exit_to_user_mode) and its jump to ret_to_user, whose ERET to EL0 with
    // no exception entry open hands over (closes it), all before its user part; from then on
    // every top-level entry is a user function or an exception entry.
    let top = replay_calls(&rec, &["--tid", "1", "-D", "1"]);
    let top: Vec<&Call> = top.iter().filter(|c| c.parent.is_none()).collect();
    let first_user = top.iter().position(|c| user.contains(&c.name));
    e.that(first_user.is_some(), || {
        "no user function at task 1's top level".into()
    });
    let first_user = first_user.unwrap_or(top.len());
    let before: Vec<&str> = top[..first_user]
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| !n.starts_with('['))
        .collect();
    e.eq(
        "task 1's top level before /init's code (ret_from_fork's calls, then its jump)",
        before,
        vec![
            "schedule_tail",
            "kernel_init",
            "asm_exit_to_user_mode",
            "ret_to_user",
        ],
    );
    let stray: Vec<&str> = top[first_user..]
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| !n.starts_with('[') && !user.contains(*n))
        .take(10)
        .collect();
    e.eq(
        "kernel functions at task 1's top level after /init started (they belong under [svc], [irq], …)",
        stray,
        vec![],
    );

    e.done("initramfs boot, -smp 1");
}

/// (b) The initramfs guest on four vCPUs: every vCPU records; each secondary CPU's first
/// kernel function, `secondary_start_kernel`, runs after the boot CPU's PSCI CPU_ON call for
/// it (`__cpu_up` > `cpu_psci_cpu_boot` > `psci_0_2_cpu_on` > `__invoke_psci_fn_hvc`), on the
/// one timeline of all vCPUs, each in its own task (the secondary's idle task); /init's counts
/// stay exact across vCPUs.
#[test]
fn smp4_secondaries_start_after_their_cpu_on_on_one_timeline() {
    let (_, init_elf) = initramfs_guest().expect("the guest builds");
    let argv = initramfs_boot_args_on(&qemu_10_2(), 4).expect("the guest builds");
    let mut functions = init_and_kernel_functions(&init_elf);
    functions.extend(
        system_map_addresses(
            &debian_system_map(),
            &["secondary_start_kernel", "psci_0_2_cpu_on"],
        )
        .expect("System.map"),
    );
    let rec = record(argv, &[&init_elf], functions);
    let d = rec.d();
    let mut e = Expect::default();
    assert!(
        rec.console.contains(INIT_OK),
        "/init failed:\n{}",
        rec.console
    );

    let info = uftrace(&["info", "-d", &d]).expect("uftrace info");
    e.that(info.contains("number of cpus      : 4"), || {
        format!("uftrace info should count 4 CPUs:\n{info}")
    });
    let stats = std::fs::read_to_string(rec.dir.join("plugin.stats")).unwrap_or_default();
    for vcpu in 0..4 {
        let key = format!("vcpu{vcpu}.events=");
        let events: u64 = stats
            .lines()
            .find_map(|l| l.strip_prefix(&key)?.parse().ok())
            .unwrap_or(0);
        e.that(events > 0, || {
            format!("vCPU {vcpu} recorded no events (plugin.stats:\n{stats})")
        });
    }

    let exact = entered_only_by_calls(&rec.execlog.functions, Some(&init_elf));
    compare_with_execlog(&rec, &exact, &mut e);
    let everywhere = report_calls(&rec.dir, &[]).expect("report");
    for (f, _, n) in init_expected_calls() {
        e.eq(
            &format!("calls of {f} on 4 vCPUs"),
            everywhere.get(f).copied().unwrap_or(0),
            n,
        );
    }

    let times = |f: &str| -> Vec<(u64, u32)> {
        let calls = replay_calls(&rec, &["-f", "tid,time", "-F", &exactly(f), "-D", "1"]);
        let mut t: Vec<(u64, u32)> = calls
            .iter()
            .filter(|c| c.name == f)
            .map(|c| (c.time.expect("replay -f time shows timestamps"), c.tid))
            .collect();
        t.sort();
        t
    };
    let cpu_on = times("psci_0_2_cpu_on");
    let starts = times("secondary_start_kernel");
    e.eq(
        "psci_0_2_cpu_on calls (CPU_ON for CPUs 1-3)",
        cpu_on.len(),
        3,
    );
    e.eq("secondary_start_kernel calls", starts.len(), 3);
    for (i, ((on, on_tid), (start, start_tid))) in cpu_on.iter().zip(&starts).enumerate() {
        e.that(start > on, || {
            format!("secondary_start_kernel #{} at {start} (tid {start_tid}) is not after CPU_ON #{} at {on} (tid {on_tid}): the vCPUs do not share one timeline", i + 1, i + 1)
        });
        e.that(start_tid != on_tid, || {
            format!(
                "secondary_start_kernel #{} runs in the task that called CPU_ON (tid {on_tid})",
                i + 1
            )
        });
    }
    let start_tids: BTreeSet<u32> = starts.iter().map(|(_, t)| *t).collect();
    e.eq(
        "tasks running secondary_start_kernel (one idle task per secondary CPU)",
        start_tids.len(),
        3,
    );

    e.done("initramfs boot, -smp 4");
}

/// (c) Debian's boot to its root-fs panic (`kernel_boot_args_on`, one vCPU): the calls of
/// often-called kernel functions, entered only by `bl`, equal execlog's count of executions
/// of their first instruction in the same run; no function has more calls than that.
#[test]
fn kernel_boot_call_counts_equal_execlog_entries() {
    let functions =
        system_map_addresses(&debian_system_map(), KERNEL_ENTRY_FUNCTIONS).expect("System.map");
    let exact = entered_only_by_calls(&functions, None);
    assert_eq!(
        exact.len(),
        functions.len(),
        "some are entered without a call"
    );
    let rec = record(
        kernel_boot_args_on(&qemu_10_2(), "cortex-a57"),
        &[],
        functions,
    );
    assert!(
        rec.console.contains("VFS: Unable to mount root fs"),
        "the boot did not reach its panic:\n{}",
        rec.console
    );
    let mut e = Expect::default();
    compare_with_execlog(&rec, &exact, &mut e);
    e.done("Debian boot against execlog");
}
