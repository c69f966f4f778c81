//! Every process of a Linux guest named (issue 24): Debian's arm64 (riscv64, amd64) kernel boots a
//! gzip-compressed initramfs whose `/init` and `/worker` are dynamic PIEs with glibc and the
//! dynamic loader (`tests/guests/procs`); `record` is given only the kernel's DWARF vmlinux
//! and the QEMU command line, and finds the programs and libraries in the `-initrd` archive.
//! The guest has two programs, one of them run twice (same code, other addresses), a child
//! forked without exec, a thread and a library loaded with `dlopen`. Checked on uftrace's
//! own output: exact call counts of the programs' functions per process and thread, libc's
//! functions named, syscalls under their user caller, threads in their process's session,
//! no unnamed address inside the programs (glibc's internal functions have no symbols in
//! the cross toolchain's copy), and each process's functions recorded at its own addresses
//! (QEMU runs one translation of a page at every address it is mapped at).
//!
//! Run: `cargo test -p qemu-uftrace --test guest_procs`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use qemu_uftrace_tests::execlog::debian_vmlinux;
use qemu_uftrace_tests::procs_guest::{
    procs_16k_boot_args_on, procs_boot_args_on, procs_count, procs_riscv64_boot_args_on,
    procs_x86_64_boot_args_on,
};
use qemu_uftrace_tests::replay::{
    parse_calls, parse_report_calls, report_calls, uftrace, uftrace_at, uftrace_versions, Call,
};
use qemu_uftrace_tests::riscv64::{riscv64_qemus, riscv64_vmlinux};
use qemu_uftrace_tests::tree;

/// One `record` run.
struct Recorded {
    /// The temp dir of a private recording; none for a shared one.
    _tmp: Option<tempfile::TempDir>,
    dir: PathBuf,
    console: String,
    stderr: String,
}

/// The arm64 guest's boot command on QEMU 10.2.2: the QEMU that reports exceptions to
/// plugins, so a syscall shows as `[svc]` with the kernel's functions beneath it.
fn arm64_boot() -> Vec<String> {
    let qemu = qemu_uftrace_tests::system_qemu("10.2.2");
    procs_boot_args_on(&qemu).expect("the process guest builds")
}

/// The x86-64 guest's boot command on QEMU 10.2.2.
fn x86_64_boot() -> Vec<String> {
    let qemu = qemu_uftrace_tests::cached("qemu-10.2.2/bin/qemu-system-x86_64");
    procs_x86_64_boot_args_on(&qemu.to_string_lossy()).expect("the x86-64 guest builds")
}

/// The riscv64 guest's boot command on QEMU 10.2.2.
fn riscv64_boot() -> Vec<String> {
    let qemu = &riscv64_qemus()[1];
    assert_eq!(qemu.label, "10.2.2");
    procs_riscv64_boot_args_on(&qemu.program).expect("the riscv64 guest builds")
}

fn record(argv: &[String], symbols: &[&Path]) -> Recorded {
    record_with(argv, symbols, &[])
}

/// `record` with more of its options.
fn record_with(argv: &[String], symbols: &[&Path], options: &[&str]) -> Recorded {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace.data");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"));
    cmd.arg("record").arg("-o").arg(&dir).args(options);
    for s in symbols {
        cmd.arg("--symbols").arg(s);
    }
    let out = qemu_uftrace_tests::passes::output(cmd.arg("--").args(argv).stdin(Stdio::null()))
        .expect("run qemu-uftrace");
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "record failed ({}):\n{stderr}\nconsole:\n{console}",
        out.status
    );
    assert!(
        console.contains("INIT: ok"),
        "the guest did not finish:\n{console}"
    );
    Recorded {
        _tmp: Some(tmp),
        dir,
        console,
        stderr,
    }
}

/// [`record`] from the shared recordings (`common::shared`): `export.rs` reads the same boot
/// with the same options. The tests only read the trace.
fn record_shared(argv: &[String], symbols: &[&Path]) -> Recorded {
    let symbols: Vec<String> = symbols
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let options: Vec<&str> = symbols.iter().flat_map(|s| ["--symbols", s]).collect();
    let r = common::shared::record(argv, &options);
    assert!(
        r.console.contains("INIT: ok"),
        "the guest did not finish:\n{}",
        r.console
    );
    Recorded {
        _tmp: None,
        dir: r.dir,
        console: r.console,
        stderr: r.stderr,
    }
}

/// The calls uftrace reports for one task: `report -f call --tid T`.
fn calls_of(dir: &Path, tid: u32) -> BTreeMap<String, u64> {
    report_calls(dir, &["--tid", &tid.to_string()]).expect("uftrace report")
}

/// The replayed calls of one task.
fn replay_of(dir: &Path, tid: u32) -> (String, Vec<Call>) {
    let d = dir.to_string_lossy();
    let text = uftrace(&["replay", "--no-pager", "-d", &d, "--tid", &tid.to_string()])
        .expect("uftrace replay");
    let calls = parse_calls(&text).expect("replay parses");
    (text, calls)
}

/// One task's replay, and its calls per function counted from it: one pass of uftrace over
/// the task's records where the test reads both (PID 1's hold the kernel's initcalls: 30 s
/// a pass under the suite's load). They are `report -f call --tid T`'s counts (one call per
/// entry read: checked equal on every task these tests read, 2026-12-04) but for two that
/// no check here asks about: a switch's `linux:schedule` event, a function to report and a
/// comment in replay, and an `execve` that never returns, whose frame report drops with the
/// old image.
fn replay_and_calls_of(dir: &Path, tid: u32) -> (String, Vec<Call>, BTreeMap<String, u64>) {
    let (text, calls) = replay_of(dir, tid);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for c in &calls {
        *counts.entry(c.name.clone()).or_default() += 1;
    }
    (text, calls, counts)
}

/// Every range the trace's maps give a file whose module name starts with `stem` (the
/// program itself and its aliases, `/worker#2`).
fn ranges_of(dir: &Path, stem: &str) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("trace dir") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("sid-") && name.ends_with(".map")) {
            continue;
        }
        for line in std::fs::read_to_string(&path).expect("map").lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(file) = words.get(5) else { continue };
            let module = file.rsplit('/').next().unwrap_or(file);
            if module == stem || module.starts_with(&format!("{stem}#")) {
                let (a, b) = words[0].split_once('-').expect("range");
                out.push((
                    u64::from_str_radix(a, 16).unwrap(),
                    u64::from_str_radix(b, 16).unwrap(),
                ));
            }
        }
    }
    out
}

/// The addresses uftrace left unnamed at entries (`<aaaab1cd0aa0>() {`).
fn unnamed_entries(replay: &str) -> Vec<u64> {
    replay
        .lines()
        .filter_map(|l| {
            let body = l.split_once('|')?.1.trim();
            let hex = body.strip_prefix('<')?.split_once('>')?;
            (hex.1 == "() {" || hex.1 == "();").then(|| u64::from_str_radix(hex.0, 16).ok())?
        })
        .collect()
}

/// The entry addresses `uftrace dump` gives function `name` in task `tid` (the raw
/// addresses recorded: `… 123: [entry] worker_step(aaaacafe1234) depth: 2`).
fn entry_addresses(dump: &str, tid: u32, name: &str) -> Vec<u64> {
    let tag = format!("{tid}: [entry] {name}(");
    dump.lines()
        .filter_map(|l| {
            let rest = l.split(tag.as_str()).nth(1)?;
            u64::from_str_radix(rest.split(')').next()?, 16).ok()
        })
        .collect()
}

/// Every entry address `uftrace dump` gives task `tid` from time `from` on (the trace's
/// clock, as `plugin.procs` has it; dump prints it as seconds).
fn all_entry_addresses(dump: &str, tid: u32, from: u64) -> Vec<u64> {
    let tag = format!("{tid}: [entry] ");
    dump.lines()
        .filter_map(|l| {
            let (time, rest) = l.split_once(tag.as_str())?;
            let (sec, ns) = time.trim().split_once('.')?;
            let time = sec.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?;
            let hex = rest.split_once(") depth")?.0.rsplit_once('(')?.1;
            (time >= from).then(|| u64::from_str_radix(hex, 16).ok())?
        })
        .collect()
}

/// When process `tgid` last exec'd (`exec time=T … tgid=N` in `plugin.procs`).
fn exec_time(procs: &str, tgid: u32) -> Option<u64> {
    procs
        .lines()
        .rev()
        .filter(|l| l.starts_with("exec\t") && l.ends_with(&format!("\ttgid={tgid}")))
        .find_map(|l| {
            l.split('\t')
                .find_map(|f| f.strip_prefix("time=")?.parse().ok())
        })
}

/// The code mappings of files whose path contains `file`, per process, from the plugin's
/// `plugin.procs` (`mmap … tgid=N start=HEX len=HEX … path=P`): `(tgid, start, end)`.
fn mappings_of(procs: &str, file: &str) -> Vec<(u32, u64, u64)> {
    procs
        .lines()
        .filter(|l| l.starts_with("mmap\t"))
        .filter_map(|l| {
            let field = |k: &str| {
                l.split('\t')
                    .find_map(|f| f.strip_prefix(k)?.strip_prefix('='))
            };
            let hex = |k: &str| u64::from_str_radix(field(k)?, 16).ok();
            let tgid = field("tgid")?.parse::<u32>().ok()?;
            field("path")?
                .contains(file)
                .then(|| Some((tgid, hex("start")?, hex("start")? + hex("len")?)))?
        })
        .collect()
}

/// Where process `tgid` mapped `file` (its last code mapping of a path containing it).
fn mapped_at(procs: &str, tgid: u32, file: &str) -> Option<(u64, u64)> {
    mappings_of(procs, file)
        .into_iter()
        .rev()
        .find(|m| m.0 == tgid)
        .map(|(_, s, e)| (s, e))
}

/// The PIDs `/init` printed for its children of one kind (`INIT: worker N status 0`,
/// `INIT: child N status 0`), in order; each must have exited with status 0.
fn child_pids(console: &str, kind: &str) -> Vec<u32> {
    let prefix = format!("INIT: {kind} ");
    console
        .lines()
        .filter_map(|l| {
            let rest = l.split(prefix.as_str()).nth(1)?;
            let (pid, status) = rest.split_once(" status ")?;
            assert_eq!(status.trim(), "0", "a {kind} failed: {l}");
            pid.parse().ok()
        })
        .collect()
}

/// A worker's thread as it printed it (`WORKER a: pid P thread T sum S`): `(P, T)`.
fn worker_threads(console: &str) -> Vec<(u32, u32)> {
    console
        .lines()
        .filter_map(|l| {
            let rest = l.split("WORKER ").nth(1)?;
            let words: Vec<&str> = rest.split_whitespace().collect();
            let at = |key: &str| -> Option<u32> {
                let i = words.iter().position(|w| *w == key)?;
                words.get(i + 1)?.parse().ok()
            };
            Some((at("pid")?, at("thread")?))
        })
        .collect()
}

/// The entries of a task's replay `text` left unnamed inside the program `stem`'s ranges.
fn unnamed_in(dir: &Path, text: &str, stem: &str) -> Vec<String> {
    let ranges = ranges_of(dir, stem);
    unnamed_entries(text)
        .into_iter()
        .filter(|a| ranges.iter().any(|(s, e)| s <= a && a < e))
        .map(|a| format!("{a:x}"))
        .collect()
}

#[test]
fn dynamic_pie_processes_are_named() {
    let r = record_shared(&arm64_boot(), &[&debian_vmlinux()]);
    check_processes(&r, "__arm64_sys_getpid");
}

/// The same guest on Debian's riscv64 kernel (argument registers a0–a4, the PID read from
/// the task structure at each switch, `jalr` calls).
#[test]
fn dynamic_pie_processes_are_named_on_riscv64() {
    let argv = riscv64_boot();
    let r = record(&argv, &[&riscv64_vmlinux()]);
    check_processes(&r, "__riscv_sys_getpid");
}

/// The same guest on Debian's amd64 kernel from SeaBIOS (`syscall`/`sysretq`, the PID read
/// from the task structure at each `__switch_to`, retpolines), with the stock bzImage alone:
/// the struct offsets from its own BTF, as a distribution's user has it.
#[test]
fn stock_image_alone_names_processes_on_x86_64() {
    let argv = x86_64_boot();
    let r = record(&argv, &[]);
    check_processes(&r, "__x64_sys_getpid");
    check_kernel_tasks(&r);
}

/// Everything the guest's processes must show, `syscall` being getpid(2)'s kernel side.
fn check_processes(r: &Recorded, syscall: &str) {
    let workers = child_pids(&r.console, "worker");
    let children = child_pids(&r.console, "child");
    let threads = worker_threads(&r.console);
    assert_eq!(workers.len(), 2, "console:\n{}", r.console);
    assert_eq!(children.len(), 1, "console:\n{}", r.console);
    assert_eq!(threads.len(), 2, "console:\n{}", r.console);
    let count = procs_count;
    let mut failed = Vec::new();
    let mut expect = |what: String, got: u64, want: u64| {
        if got != want {
            failed.push(format!("{what}: got {got}, expected {want}"));
        }
    };
    let n = |calls: &BTreeMap<String, u64>, f: &str| calls.get(f).copied().unwrap_or(0);

    // /init, PID 1: its own functions, libc's, and nothing of the others'.
    let (init_text, _, init) = replay_and_calls_of(&r.dir, 1);
    // Checked below; taken now, so that PID 1's replay (~170 MB) is not kept meanwhile.
    let init_unnamed = unnamed_in(&r.dir, &init_text, "init");
    drop(init_text);
    for (f, want) in [
        ("main", 1),
        ("init_step", count("INIT_STEPS")),
        ("do_fork", 1),
        ("run_worker", 2),
        ("getppid", count("INIT_STEPS")),
        ("fork", 3),
        ("waitpid", 3),
        ("printf", 4),
        ("puts", 1),
        ("child_step", 0),
        ("worker_step", 0),
    ] {
        expect(format!("pid 1: calls of {f}"), n(&init, f), want);
    }
    // The child forked without exec: /init's code, in a process of its own.
    for &pid in &children {
        let (text, _, c) = replay_and_calls_of(&r.dir, pid);
        for (f, want) in [
            ("child_step", count("CHILD_STEPS")),
            ("getpid", count("CHILD_STEPS")),
            ("init_step", 0),
            ("run_worker", 0),
        ] {
            expect(format!("child {pid}: calls of {f}"), n(&c, f), want);
        }
        let unnamed = unnamed_in(&r.dir, &text, "init");
        expect(
            format!("child {pid}: unnamed entries inside /init ({unnamed:?})"),
            unnamed.len() as u64,
            0,
        );
    }
    // Each worker: the same program twice, at different addresses, in its own process.
    for &pid in &workers {
        let (text, calls, w) = replay_and_calls_of(&r.dir, pid);
        for (f, want) in [
            ("main", 1),
            ("worker_step", count("WORKER_STEPS")),
            ("worker_report", 1),
            ("getpid", count("WORKER_STEPS") + 1),
            ("snprintf", 1),
            ("pthread_create", 1),
            ("dlopen", 1),
            ("plug_step", count("PLUG_STEPS")),
            ("thread_step", 0),
            ("init_step", 0),
        ] {
            expect(format!("worker {pid}: calls of {f}"), n(&w, f), want);
        }
        // The syscall beneath its user caller: getpid(2)'s kernel side under `[svc]` under
        // libc's getpid under worker_step, every time.
        let under = calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.name == syscall)
            .filter(|(i, _)| {
                let path = qemu_uftrace_tests::replay::call_path(&calls, *i);
                let at = |name| path.iter().position(|p| *p == name);
                matches!(
                    (at("worker_step"), at("getpid"), at("[svc]")),
                    (Some(a), Some(b), Some(c)) if a < b && b < c
                )
            })
            .count() as u64;
        expect(
            format!("worker {pid}: {syscall} under worker_step > getpid > [svc]"),
            under,
            count("WORKER_STEPS"),
        );
        for file in ["worker", "libplug.so"] {
            let unnamed = unnamed_in(&r.dir, &text, file);
            expect(
                format!("worker {pid}: unnamed entries inside {file} ({unnamed:?})"),
                unnamed.len() as u64,
                0,
            );
        }
    }
    // QEMU translates a physical page once and runs that translation at every address it
    // is mapped at: each worker's (and its thread's) functions and libc's are recorded at
    // that worker's own addresses, not at those of the process that ran the code first.
    let procs = std::fs::read_to_string(r.dir.join("plugin.procs")).expect("plugin.procs");
    // The workers' tasks only: the whole trace's dump is over a GB of text.
    let tids: Vec<String> = workers
        .iter()
        .chain(threads.iter().map(|(_, t)| t))
        .map(u32::to_string)
        .collect();
    let dump = uftrace(&[
        "dump",
        "-d",
        &r.dir.to_string_lossy(),
        "--tid",
        &tids.join(","),
    ])
    .expect("uftrace dump");
    let mut bases = Vec::new();
    let tid_of = |pid: u32| threads.iter().find(|&&(p, _)| p == pid).map(|&(_, t)| t);
    for &pid in &workers {
        let tid_of_thread = tid_of(pid);
        for (file, tid, f, want) in [
            ("/worker", pid, "worker_step", count("WORKER_STEPS")),
            ("/libplug.so", pid, "plug_step", count("PLUG_STEPS")),
            (
                "/worker",
                tid_of_thread.unwrap_or(0),
                "thread_step",
                count("THREAD_STEPS"),
            ),
        ] {
            let range = mapped_at(&procs, pid, file);
            let inside = entry_addresses(&dump, tid, f)
                .into_iter()
                .filter(|a| range.is_some_and(|(s, e)| s <= *a && *a < e))
                .count() as u64;
            expect(
                format!(
                    "worker {pid}: entries of {f} (task {tid}) inside its own {file} at {range:x?}"
                ),
                inside,
                want,
            );
        }
        // Every entry of the worker's tasks inside a file some process mapped is inside
        // this worker's own mapping of it (libc's functions called from libc itself: calls
        // from the program go through its PLT, in /worker). An address the worker maps
        // itself, whatever the file, is its own: ASLR may place one of its files where
        // another process has another (this worker's libplug.so inside the first one's
        // libc, one boot in a dozen).
        let own_any: Vec<(u64, u64)> = mappings_of(&procs, "")
            .into_iter()
            .filter(|m| m.0 == pid)
            .map(|(_, s, e)| (s, e))
            .collect();
        for file in ["/worker", "/libc.so.6", "/ld-linux-", "/libplug.so"] {
            let own = mapped_at(&procs, pid, file);
            let others: Vec<(u64, u64)> = mappings_of(&procs, file)
                .into_iter()
                .filter(|m| m.0 != pid)
                .map(|(_, s, e)| (s, e))
                .collect();
            let in_own = |a: u64| own.is_some_and(|(s, e)| s <= a && a < e);
            let (mut mine, mut theirs) = (0u64, Vec::new());
            // Before its exec the worker ran /init's code, forked from PID 1 at its addresses.
            let from = exec_time(&procs, pid).unwrap_or(u64::MAX);
            for tid in std::iter::once(pid).chain(tid_of(pid)) {
                for a in all_entry_addresses(&dump, tid, from) {
                    if in_own(a) {
                        mine += 1;
                    } else if others.iter().any(|&(s, e)| s <= a && a < e)
                        && !own_any.iter().any(|&(s, e)| s <= a && a < e)
                    {
                        theirs.push(format!("{a:x}"));
                    }
                }
            }
            if file != "/ld-linux-" {
                expect(
                    format!("worker {pid}: entries inside its own {file} at {own:x?} (some)"),
                    (mine > 0) as u64,
                    1,
                );
            }
            expect(
                format!("worker {pid}: entries at another process's {file} ({theirs:?})"),
                theirs.len() as u64,
                0,
            );
        }
        bases.push(mapped_at(&procs, pid, "/worker"));
    }
    // The two runs load /worker at two addresses (ASLR), or the check above proves nothing.
    expect(
        format!("the two workers' /worker mappings differ ({bases:x?})"),
        (bases.len() == 2 && bases[0] != bases[1]) as u64,
        1,
    );
    // The library each worker loaded with dlopen is placed where it loaded it.
    expect(
        "map lines of /lib/libplug.so".into(),
        ranges_of(&r.dir, "libplug.so").is_empty() as u64,
        0,
    );
    // Each worker's thread: its own task, in its process's session.
    let tasks = qemu_uftrace_tests::replay::task_list(&r.dir).expect("task.txt");
    for &(pid, tid) in &threads {
        let (text, _, t) = replay_and_calls_of(&r.dir, tid);
        for (f, want) in [
            ("thread_step", count("THREAD_STEPS")),
            ("gettid", count("THREAD_STEPS") + 1),
            ("worker_step", 0),
        ] {
            expect(format!("thread {tid}: calls of {f}"), n(&t, f), want);
        }
        let grouped = tasks.iter().any(|&(t, p)| t == tid && p == pid)
            && tasks.iter().all(|&(t, p)| t != tid || p == pid);
        expect(
            format!("thread {tid}: TASK lines with pid={pid} only ({tasks:?})"),
            grouped as u64,
            1,
        );
        let unnamed = unnamed_in(&r.dir, &text, "worker");
        expect(
            format!("thread {tid}: unnamed entries inside /worker ({unnamed:?})"),
            unnamed.len() as u64,
            0,
        );
    }
    expect(
        format!("pid 1: unnamed entries inside /init ({init_unnamed:?})"),
        init_unnamed.len() as u64,
        0,
    );
    // The child, the workers and their threads ended: their contexts were freed at their
    // last switch (`TASK_DEAD`), their records and names kept (checked above and below).
    let stats = std::fs::read_to_string(r.dir.join("plugin.stats")).expect("plugin.stats");
    let stat = |key: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('=')?.parse::<u64>().ok())
    };
    let ended = (children.len() + workers.len() + threads.len()) as u64;
    expect(
        format!("tasks_ended at least {ended} (plugin.stats:\n{stats})"),
        (stat("tasks_ended").unwrap_or(0) >= ended) as u64,
        1,
    );
    expect(
        "tasks_past_cap".into(),
        stat("tasks_past_cap").unwrap_or(1),
        0,
    );
    // A boot's processes map far fewer pieces of code than a space keeps: nothing dropped
    // (the counts are written whenever processes are watched). The munmap wrapper is
    // watched: the arm64 boot's processes unmap 10 times (the x86_64 boot's never).
    for key in ["maps_past_cap", "unmoved_past_map_cap"] {
        expect(key.into(), stat(key).unwrap_or(1), 0);
    }
    if syscall.starts_with("__arm64") {
        expect(
            format!("unmaps_seen above 0 (plugin.stats:\n{stats})"),
            (stat("unmaps_seen").unwrap_or(0) > 0) as u64,
            1,
        );
    }
    // Processes are named after their programs, threads after their process.
    let names = qemu_uftrace_tests::replay::task_names(&r.dir).expect("task names");
    let name = |tid: u32| names.get(&tid).cloned().unwrap_or_default();
    let want: Vec<(u32, &str)> = [(1, "init")]
        .into_iter()
        .chain(children.iter().map(|&p| (p, "init")))
        .chain(workers.iter().map(|&p| (p, "worker")))
        .chain(threads.iter().map(|&(_, t)| (t, "worker")))
        .collect();
    for (tid, want) in want {
        if name(tid) != want {
            failed.push(format!("task {tid} is named {:?}, not {want:?}", name(tid)));
        }
    }
    assert!(
        failed.is_empty(),
        "{} expectation(s) failed:\n- {}\nrecord said:\n{}",
        failed.len(),
        failed.join("\n- "),
        r.stderr
    );
}

/// With the stock image alone (no DWARF vmlinux, as a distribution's user has it), the
/// struct offsets come from the kernel's own BTF, found in the raw `Image`: tasks, threads
/// and processes are named exactly as with the DWARF vmlinux (the same checks), and the
/// kernel's threads by their own names.
#[test]
fn stock_image_alone_names_processes() {
    let r = record(&arm64_boot(), &[]);
    check_processes(&r, "__arm64_sys_getpid");
    check_kernel_tasks(&r);
}

/// Debian's arm64 kernel built for 16 KiB pages, its image alone: the kernel gives a
/// mapping's file offset in its own pages, which the Image header names. libplug.so's code
/// is 64 KiB into its file (`-z separate-code`): 4 pages here, which read as 4 KiB pages
/// had placed it 16 KiB in, and named none of its functions.
#[test]
fn a_16k_page_kernel_s_processes_are_named() {
    let qemu = qemu_uftrace_tests::system_qemu("10.2.2");
    let argv = procs_16k_boot_args_on(&qemu).expect("the process guest builds");
    let r = record(&argv, &[]);
    let procs = std::fs::read_to_string(r.dir.join("plugin.procs")).expect("plugin.procs");
    let plug: Vec<&str> = (procs.lines())
        .filter(|l| l.starts_with("mmap\t") && l.ends_with("\tpath=/lib/libplug.so"))
        .collect();
    assert!(
        plug.len() == 2 && plug.iter().all(|l| l.contains("\toffset=10000\t")),
        "each worker maps libplug.so's code from 64 KiB into the file: {plug:#?}"
    );
    check_processes(&r, "__arm64_sys_getpid");
    check_kernel_tasks(&r);
}

/// The same on Debian's riscv64 kernel, its `vmlinux` an `Image` with an EFI stub.
#[test]
fn stock_image_alone_names_processes_on_riscv64() {
    let argv = riscv64_boot();
    let r = record(&argv, &[]);
    check_processes(&r, "__riscv_sys_getpid");
    check_kernel_tasks(&r);
}

/// The kernel's own threads carry their `comm`, none is left `pid-N` or `task-N`.
fn check_kernel_tasks(r: &Recorded) {
    let names = qemu_uftrace_tests::replay::task_names(&r.dir).expect("task names");
    assert_eq!(
        names.get(&2).map(String::as_str),
        Some("kthreadd"),
        "{names:?}"
    );
    let unnamed: Vec<_> = names
        .values()
        .filter(|n| {
            ["pid-", "task-"].iter().any(|p| {
                n.strip_prefix(p)
                    .is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .collect();
    assert!(unnamed.is_empty(), "tasks left unnamed: {unnamed:?}");
}

/// With neither the kernel's DWARF nor its BTF (the image not read: --no-auto-symbols),
/// record says why the processes' own functions are not named, in one line, and the trace
/// is still written.
#[test]
fn without_dwarf_or_btf_record_says_why() {
    let r = record_with(&arm64_boot(), &[], &["--no-auto-symbols"]);
    assert!(
        r.stderr.contains(
            "the guest's processes' own functions are not named: no symbol source has the \
             kernel's DWARF or BTF (give the -kernel image of a kernel built with BTF, or the \
             vmlinux of its -dbg package with --symbols)"
        ),
        "record said:\n{}",
        r.stderr
    );
    assert!(!r.dir.join("plugin.procs").exists());
    assert!(r.dir.join("task.txt").exists());
}

/// A crafted `-initrd`: the guest's own archive with a second one after it (as the kernel
/// takes them) whose members climb out of any directory they are copied to
/// (`../../x/pwned`) or aim through `//` at the debug tree linked from `--sysroot`. `record`
/// publishes the trace with the processes named, says which member it refused, and writes
/// nothing outside the trace directory (the whole temporary directory compared before and
/// after), leaving no copy of the guest's files in it.
#[test]
fn crafted_archive_members_stay_inside_the_trace() {
    use std::io::Write;
    // QEMU 10.2.2, as `arm64_boot` takes it, without needing every other QEMU built.
    let qemu = qemu_uftrace_tests::cached("qemu-10.2.2/bin/qemu-system-aarch64");
    let mut argv = procs_boot_args_on(&qemu.to_string_lossy()).expect("the process guest builds");
    let at = argv.iter().position(|a| a == "-initrd").expect("-initrd") + 1;
    let tmp = tempfile::tempdir().expect("temp dir");
    let top = std::fs::canonicalize(tmp.path()).expect("canonical temp dir");
    let mut crafted = Vec::new();
    qemu_uftrace_tests::cpio::write_newc(
        &mut crafted,
        &[
            qemu_uftrace_tests::cpio::Entry::File {
                path: "../../x/pwned",
                mode: 0o755,
                data: b"pwned",
            },
            qemu_uftrace_tests::cpio::Entry::File {
                path: "usr//lib/debug/evil.debug",
                mode: 0o644,
                data: b"evil",
            },
        ],
    )
    .expect("crafted archive");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::read(&argv[at]).expect("the guest's archive"),
        flate2::Compression::fast(),
    );
    // The guest's gzip stream first, then the crafted one: `GzEncoder` over a Vec that
    // already holds the first stream appends the second.
    gz.write_all(&crafted).expect("gzip");
    let archive = top.join("initramfs.cpio.gz");
    std::fs::write(&archive, gz.finish().expect("gzip")).expect("write the archive");
    argv[at] = archive.to_string_lossy().into_owned();
    let sysroot = top.join("root");
    std::fs::create_dir_all(sysroot.join("usr/lib/debug")).expect("sysroot");
    let dir = top.join("trace.data");
    let before = tree(&top);
    let vmlinux = debian_vmlinux();
    let options = [
        "--symbols".as_ref(),
        vmlinux.as_os_str(),
        "--sysroot".as_ref(),
        sysroot.as_os_str(),
    ];
    let out = common::record_into(&dir, &options, &argv);
    let console = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && console.contains("INIT: ok"),
        "record failed ({}):\n{stderr}\nconsole:\n{console}",
        out.status
    );
    let after = tree(&top);
    let changed: Vec<_> = before
        .keys()
        .chain(after.keys())
        .filter(|p| !p.starts_with(&dir) && before.get(*p) != after.get(*p))
        .collect();
    assert!(changed.is_empty(), "changed outside the trace: {changed:?}");
    assert!(
        after
            .keys()
            .all(|p| !p.to_string_lossy().contains("guest-files")),
        "copies left in the trace"
    );
    assert!(
        stderr.contains("member ../../x/pwned of") && stderr.contains("is refused"),
        "record said:\n{stderr}"
    );
    // The guest's processes are named all the same.
    let init = calls_of(&dir, 1);
    assert_eq!(
        init.get("init_step").copied(),
        Some(procs_count("INIT_STEPS")),
        "{init:?}\nrecord said:\n{stderr}"
    );
    // Every uftrace users read with (0.13, 0.17, 0.19) reads it: exit 0, no warning, PID 1's
    // calls named and counted alike, its replay showing them.
    let d = dir.to_string_lossy();
    for u in uftrace_versions().expect("the uftrace versions") {
        let read = |args: &[&str]| {
            let mut all = args.to_vec();
            all.extend(["--no-pager", "-d", &d, "--tid", "1"]);
            uftrace_at(&u.program, &all).unwrap_or_else(|e| panic!("uftrace {}: {e:#}", u.version))
        };
        let calls = parse_report_calls(&read(&["report", "-f", "call"])).expect("report parses");
        assert_eq!(calls, init, "uftrace {} against the default", u.version);
        // PID 1's whole replay is ~170 MB: its init_step frames only.
        let replay = read(&["replay", "-F", "init_step"]);
        let shown = (replay.lines())
            .filter(|l| {
                l.split('|')
                    .nth(1)
                    .is_some_and(|f| f.trim().starts_with("init_step("))
            })
            .count() as u64;
        assert_eq!(
            shown,
            procs_count("INIT_STEPS"),
            "uftrace {} replay -F init_step, its start:\n{}",
            u.version,
            replay.chars().take(2000).collect::<String>()
        );
    }
}

/// `--start-at PATH:FUNC` and `--stop-at PATH:FUNC` with the `-initrd` archive's file (no
/// --sysroot, the stock image alone): writing begins at the first worker's `main` and ends
/// at its thread's first `thread_step`. The window holds that worker's `main` after its open
/// frames, its WORKER_STEPS `worker_step` calls and `thread_step`'s entry as its last
/// record, and nothing of the second worker (which ran later, where the same code lies
/// elsewhere).
#[test]
fn written_from_a_worker_s_main_to_its_thread_s_first_step() {
    let r = record_with(
        &arm64_boot(),
        &[],
        &[
            "--start-at",
            "/worker:main",
            "--stop-at",
            "/worker:thread_step",
        ],
    );
    for said in [
        "started writing at the first entry into /worker:main (0x",
        "stopped writing at the first entry into /worker:thread_step (0x",
    ] {
        assert!(
            r.stderr.contains(said),
            "record did not say {said:?}:\n{}",
            r.stderr
        );
    }
    let workers = child_pids(&r.console, "worker");
    assert_eq!(workers.len(), 2, "{}", r.console);
    let (text, calls, counts) = replay_and_calls_of(&r.dir, workers[0]);
    let head: Vec<&str> = (text.lines())
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(l.split_once('|')?.1.trim()))
        .take(4)
        .collect();
    // (The cross toolchain's libc names `__libc_start_call_main` by its address only.)
    assert!(
        head.len() == 4
            && head[0] == "__libc_start_main() {"
            && head[1].ends_with("() {")
            && head[2..] == ["/* qemu:opened */", "main() {"],
        "the first worker's replay:\n{text}"
    );
    assert_eq!(
        counts.get("worker_step").copied(),
        Some(procs_count("WORKER_STEPS")),
        "{counts:?}"
    );
    // Its thread: the stop is thread_step's entry.
    let (_, thread) = worker_threads(&r.console)[0];
    let thread_counts = calls_of(&r.dir, thread);
    assert_eq!(
        thread_counts.get("thread_step"),
        Some(&1),
        "{thread_counts:?}"
    );
    assert!(!calls.is_empty());
    let (second, _) = replay_of(&r.dir, workers[1]);
    assert!(
        !second
            .lines()
            .any(|l| !l.trim().is_empty() && !l.starts_with('#')),
        "the second worker ran after the window:\n{second}"
    );
}

/// Issue 37: processes that started while tracing was off are named from the switch on. The
/// recording starts off and goes on at the first `gettid`, which the first worker's thread
/// makes before its first `thread_step`: `/init` and that worker were exec'd, and the thread
/// made, while nothing was watched. The plugin reads the guest's processes at the switch
/// (`seen` in `plugin.procs`), so the thread's 13 `thread_step` calls, the worker's `dlopen`'d
/// `plug_step` and `/init`'s second `run_worker` are named, and the second worker, started
/// while on, is whole. Before, the first worker's thread showed none of its functions.
/// The stock images alone: arm64's kallsyms has no `init_task` (the walk starts from the
/// running task), amd64's has; riscv64's passes its arguments in a0–a4.
#[test]
fn processes_started_while_tracing_was_off_are_named_at_the_switch_on() {
    let r = record_with(
        &arm64_boot(),
        &[],
        &["--trace=off", "--trace-on-at", "__arm64_sys_gettid"],
    );
    check_named_from_the_switch_on(&r, true);
}

#[test]
fn processes_started_while_tracing_was_off_are_named_at_the_switch_on_x86_64() {
    let argv = x86_64_boot();
    let r = record_with(
        &argv,
        &[],
        &["--trace=off", "--trace-on-at", "__x64_sys_gettid"],
    );
    check_named_from_the_switch_on(&r, true);
}

#[test]
fn processes_started_while_tracing_was_off_are_named_at_the_switch_on_riscv64() {
    let argv = riscv64_boot();
    let r = record_with(
        &argv,
        &[],
        &["--trace=off", "--trace-on-at", "__riscv_sys_gettid"],
    );
    check_named_from_the_switch_on(&r, false);
}

/// `nested`: whether /init's calls must nest under `main`. Not on riscv64 without the
/// kernel's DWARF: a task switched in there may have no kernel frames unwound (a LOST
/// record), and the engine's guess from there can put a later call beside `main`.
fn check_named_from_the_switch_on(r: &Recorded, nested: bool) {
    let procs = std::fs::read_to_string(r.dir.join("plugin.procs")).expect("plugin.procs");
    let stats = std::fs::read_to_string(r.dir.join("plugin.stats")).expect("plugin.stats");
    assert!(stats.contains("proc_walks=1\n"), "{stats}");
    assert!(!stats.contains("error="), "{stats}");
    let workers = child_pids(&r.console, "worker");
    let threads = worker_threads(&r.console);
    assert_eq!((workers.len(), threads.len()), (2, 2), "{}", r.console);
    for (tgid, program) in [(1, 1), (workers[0], 1)] {
        assert!(
            procs.lines().any(|l| l.starts_with("seen\ttime=")
                && l.contains(&format!("\ttgid={tgid}\tprogram={program}"))),
            "no process {tgid} read at the switch on:\n{procs}"
        );
    }
    let count = |tid: u32, name: &str| calls_of(&r.dir, tid).get(name).copied();
    let first_thread = threads[0].1;
    assert_eq!(
        count(first_thread, "thread_step"),
        Some(procs_count("THREAD_STEPS")),
        "{:?}",
        calls_of(&r.dir, first_thread)
    );
    let (text, _, first) = replay_and_calls_of(&r.dir, workers[0]);
    assert_eq!(
        first.get("plug_step").copied(),
        Some(procs_count("PLUG_STEPS")),
        "{text}"
    );
    assert_eq!(first.get("worker_report"), Some(&1), "{first:?}");
    // Nothing of the first worker before the switch: its main ran its steps while off.
    assert_eq!(first.get("worker_step"), None, "{first:?}");
    // /init waited in the kernel for the first worker at the switch on: that run_worker is
    // open beneath its system call (recovered as it returned to user mode), the second
    // one called in the window.
    let (text, calls, init) = replay_and_calls_of(&r.dir, 1);
    assert_eq!(init.get("run_worker"), Some(&2), "{init:?}");
    let under_main = (calls.iter())
        .filter(|c| c.name == "run_worker")
        .filter(|c| c.parent.is_some_and(|p| calls[p].name == "main"))
        .count();
    if nested {
        assert_eq!(
            under_main, 2,
            "/init's run_worker under main:\n{text:.3000}"
        );
    }
    let second = calls_of(&r.dir, workers[1]);
    assert_eq!(
        second.get("worker_step").copied(),
        Some(procs_count("WORKER_STEPS")),
        "{second:?}"
    );
    assert_eq!(
        count(threads[1].1, "thread_step"),
        Some(procs_count("THREAD_STEPS"))
    );
}

/// Issue 37 with issue 36's `PATH:FUNC`: windows switched on and off by a guest file's
/// functions. Off from the start, on at `/worker:thread_step`, off at
/// `/worker:worker_report`: two windows, one per worker, each from its thread's first
/// `thread_step` to the worker's report. While off the processes stay followed (the
/// process watch and the task switches, for the translator only), so the file's function is
/// found in each worker, which both started while off, at their own addresses; the second
/// worker's thread may reuse the first's task structure. The window opens at the first
/// `thread_step`'s first instruction, in user space: its frames open there (`thread_main`,
/// `thread_step`) are unwound with the worker's own files (the archive's copies, their
/// CFI) and written first, so the replay nests and all 13 calls count.
#[test]
fn windows_open_and_close_at_a_guest_file_s_functions() {
    windows_at_file_functions(&arm64_boot());
}

#[test]
fn windows_open_and_close_at_a_guest_file_s_functions_on_x86_64() {
    let argv = x86_64_boot();
    windows_at_file_functions(&argv);
}

fn windows_at_file_functions(argv: &[String]) {
    let r = record_with(
        argv,
        &[],
        &[
            "--trace=off",
            "--trace-on-at",
            "/worker:thread_step",
            "--trace-off-at",
            "/worker:worker_report",
        ],
    );
    let stats = std::fs::read_to_string(r.dir.join("plugin.stats")).expect("plugin.stats");
    assert!(stats.contains("trace_windows=2\n"), "{stats}");
    assert!(!stats.contains("error="), "{stats}");
    let workers = child_pids(&r.console, "worker");
    let threads = worker_threads(&r.console);
    assert_eq!((workers.len(), threads.len()), (2, 2), "{}", r.console);
    for (&worker, &(_, thread)) in workers.iter().zip(&threads) {
        let (text, _, steps) = replay_and_calls_of(&r.dir, thread);
        assert_eq!(
            (steps.get("thread_step").copied(), steps.get("thread_main")),
            (Some(procs_count("THREAD_STEPS")), Some(&1)),
            "worker {worker}'s thread {thread}:\n{text:.3000}"
        );
        let head: Vec<&str> = (text.lines())
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| Some(l.split_once('|')?.1.trim()))
            .take(4)
            .collect();
        assert_eq!(
            head[1..],
            ["thread_main() {", "thread_step() {", "/* qemu:opened */"],
            "worker {worker}'s thread {thread}:\n{text:.3000}"
        );
        let main = calls_of(&r.dir, worker);
        assert_eq!(
            (
                main.get("worker_report"),
                main.get("plug_step").copied(),
                main.get("worker_step")
            ),
            (Some(&1), Some(procs_count("PLUG_STEPS")), None),
            "worker {worker}: {main:?}"
        );
    }
    // /init waits for each worker while the windows are open: none of its own calls.
    let init = calls_of(&r.dir, 1);
    assert_eq!(init.get("run_worker"), None, "{init:?}");
}

/// Issue 36's "aimed" with `-F`: a guest file's functions as filters (`PATH:FUNC`), in
/// every process that maps the file, at its own address there. `-F '/worker:^thread_s.ep$'`
/// (a regular expression of the file's functions) and `-F /lib/libplug.so:plug_step` (a
/// library each worker loads with `dlopen` and calls through the pointer `dlsym` gives):
/// the trace holds exactly their subtrees. The oracle is the guest's own counts: each
/// worker's thread has THREAD_STEPS `thread_step` roots, each calling `gettid` (and the
/// system call beneath), nothing else at the top; each worker's main task PLUG_STEPS
/// `plug_step` roots over `getppid`; /init and the kernel's own tasks nothing.
#[test]
fn a_guest_file_s_functions_filter_in_every_process_that_maps_it() {
    file_filters(&arm64_boot(), &[], &[]);
}

#[test]
fn a_guest_file_s_functions_filter_in_every_process_that_maps_it_on_x86_64() {
    let argv = x86_64_boot();
    file_filters(&argv, &[], &[]);
}

#[test]
fn a_guest_file_s_functions_filter_in_every_process_that_maps_it_on_riscv64() {
    let argv = riscv64_boot();
    file_filters(&argv, &[&riscv64_vmlinux()], &[]);
}

/// The same filters in a window switched on while the guest runs (`--trace=off`, on at the
/// first worker's first `worker_step`): the engine writes a window whole, and the filter is
/// applied after the run, once the window's open frames are unwound. A guest file's function
/// is then looked up where the window's process mapped the file (`plugin.procs`).
#[test]
fn a_guest_file_s_functions_filter_a_window_switched_on_while_the_guest_runs() {
    let on = ["--trace=off", "--trace-on-at", "/worker:worker_step"];
    file_filters(&arm64_boot(), &[], &on);
}

fn file_filters(argv: &[String], symbols: &[&Path], more: &[&str]) {
    let mut options = vec![
        "-F",
        "/worker:^thread_s.ep$",
        "-F",
        "/lib/libplug.so:plug_step",
    ];
    options.extend(more);
    let r = record_with(argv, symbols, &options);
    let stats = std::fs::read_to_string(r.dir.join("plugin.stats")).expect("plugin.stats");
    assert!(stats.contains("file_filter_reached=0,1\n"), "{stats}");
    let workers = child_pids(&r.console, "worker");
    let threads = worker_threads(&r.console);
    assert_eq!((workers.len(), threads.len()), (2, 2), "{}", r.console);
    let d = r.dir.to_string_lossy();
    let text = uftrace(&["replay", "--no-pager", "-d", &d]).expect("uftrace replay");
    let calls = parse_calls(&text).expect("replay parses");
    // Every call at the top is a filtered function's, each in the task that runs it.
    let mut roots: BTreeMap<(u32, &str), u64> = BTreeMap::new();
    for c in calls.iter().filter(|c| c.parent.is_none()) {
        *roots.entry((c.tid, c.name.as_str())).or_default() += 1;
    }
    let mut want = BTreeMap::new();
    for (&worker, &(_, thread)) in workers.iter().zip(&threads) {
        want.insert((thread, "thread_step"), procs_count("THREAD_STEPS"));
        want.insert((worker, "plug_step"), procs_count("PLUG_STEPS"));
    }
    assert_eq!(roots, want, "{text:.4000}");
    // Each root calls its libc function, which makes the system call. An interrupt may
    // come anywhere (the timer's, on host time): its entry is no call of the root's.
    for (root, callee) in [("thread_step", "gettid"), ("plug_step", "getppid")] {
        for c in calls
            .iter()
            .filter(|c| c.parent.is_none() && c.name == root)
        {
            let names: Vec<&str> = (c.children.iter())
                .map(|&i| calls[i].name.as_str())
                .filter(|n| !n.starts_with('['))
                .collect();
            assert_eq!(names, [callee], "{root} of task {}:\n{text:.4000}", c.tid);
        }
    }
}

/// `-N PATH:FUNC`: a guest file's functions left out, with everything beneath them, in
/// every process that maps the file; the rest of the workers stays.
#[test]
fn a_guest_file_s_functions_left_out_in_every_process_that_maps_it() {
    let options = [
        "-N",
        "/lib/libplug.so:plug_step",
        "-N",
        "/worker:thread_main",
    ];
    let r = record_with(&arm64_boot(), &[], &options);
    let stats = std::fs::read_to_string(r.dir.join("plugin.stats")).expect("plugin.stats");
    assert!(stats.contains("file_notrace_reached=0,1\n"), "{stats}");
    let workers = child_pids(&r.console, "worker");
    let threads = worker_threads(&r.console);
    assert_eq!((workers.len(), threads.len()), (2, 2), "{}", r.console);
    for (&worker, &(_, thread)) in workers.iter().zip(&threads) {
        let main = calls_of(&r.dir, worker);
        let at = |f: &str| main.get(f).copied();
        assert_eq!(
            (at("worker_step"), at("worker_report"), at("plug_step")),
            (Some(procs_count("WORKER_STEPS")), Some(1), None),
            "worker {worker}: {main:?}"
        );
        let of_thread = calls_of(&r.dir, thread);
        assert!(
            !of_thread.contains_key("thread_main") && !of_thread.contains_key("thread_step"),
            "thread {thread}: {of_thread:?}"
        );
    }
}

/// `-F PATH:FUNC` of a library function the program calls through its PLT (libc's
/// `getpid`, from /worker's `worker_step` and `worker_report`): the call goes to the PLT
/// entry, which jumps to libc; at getpid's first instruction the call is made one of getpid,
/// a filter root. Each worker's main task has WORKER_STEPS + 1 of them, the first too (its
/// PLT entry bound through the loader), each with its system call beneath. Before, the
/// filter never matched: "the guest never entered it".
#[test]
fn a_library_function_called_through_a_plt_is_filtered_in_every_process() {
    plt_filter(&arm64_boot(), &[]);
}

#[test]
fn a_library_function_called_through_a_plt_is_filtered_on_x86_64() {
    let argv = x86_64_boot();
    plt_filter(&argv, &[]);
}

#[test]
fn a_library_function_called_through_a_plt_is_filtered_on_riscv64() {
    let argv = riscv64_boot();
    plt_filter(&argv, &[&riscv64_vmlinux()]);
}

fn plt_filter(argv: &[String], symbols: &[&Path]) {
    let r = record_with(argv, symbols, &["-F", "/lib/libc.so.6:getpid"]);
    let workers = worker_threads(&r.console);
    assert_eq!(workers.len(), 2, "{}", r.console);
    let d = r.dir.to_string_lossy();
    let text = uftrace(&["replay", "--no-pager", "-d", &d]).expect("uftrace replay");
    let calls = parse_calls(&text).expect("replay parses");
    for &(pid, _) in &workers {
        let roots: Vec<&Call> = (calls.iter())
            .filter(|c| c.parent.is_none() && c.tid == pid)
            .collect();
        assert_eq!(
            roots.len() as u64,
            procs_count("WORKER_STEPS") + 1,
            "worker {pid}:\n{text:.4000}"
        );
        for c in roots {
            assert_eq!(c.name, "getpid", "worker {pid}:\n{text:.4000}");
            assert!(
                !c.children.is_empty(),
                "worker {pid}: no system call:\n{text:.4000}"
            );
        }
    }
}

/// `-A`/`-R PATH:FUNC` (issue 38): a guest file's function's arguments and return value in
/// every process that maps the file, each at its own address there (the two workers run
/// the code QEMU translated once). The oracle is the guest itself: each `worker_step` adds
/// the worker's pid to its argument and hands the sum on, each `plug_step` (dlopen'd, its
/// FUNC a regular expression) adds its parent's (/init's, 1), `worker_report` gets the
/// tag and the sum the worker prints, and libc's `getpid`, called through the worker's
/// PLT, returns the worker's pid. `plug_tail` adds 2 by a tail call: its value is read at
/// the return of the function it jumps to.
#[test]
fn a_guest_file_s_functions_arguments_and_return_values_in_every_process_that_maps_it() {
    file_values(&arm64_boot(), &[]);
}

#[test]
fn a_guest_file_s_functions_arguments_and_return_values_on_x86_64() {
    let argv = x86_64_boot();
    file_values(&argv, &[]);
}

#[test]
fn a_guest_file_s_functions_arguments_and_return_values_on_riscv64() {
    let argv = riscv64_boot();
    file_values(&argv, &[&riscv64_vmlinux()]);
}

fn file_values(argv: &[String], symbols: &[&Path]) {
    let options = [
        "-A",
        "/worker:worker_step@arg1/d",
        "-R",
        "/worker:worker_step@retval/d",
        "-A",
        "/worker:worker_report@arg1/s,arg2/d",
        "-A",
        "/lib/libplug.so:^plug_st.p$@arg1/d",
        "-R",
        "/lib/libplug.so:plug_step@retval/d",
        "-A",
        "/lib/libplug.so:plug_tail@arg1/d",
        "-R",
        "/lib/libplug.so:plug_tail@retval/d",
        "-R",
        "/lib/libc.so.6:getpid@retval/d",
    ];
    let r = record_with(argv, symbols, &options);
    let workers = worker_threads(&r.console);
    assert_eq!(workers.len(), 2, "{}", r.console);
    let d = r.dir.to_string_lossy();
    // `(name, arguments, return value)` of each call of `funcs` task `tid` made, in order,
    // each shown as a leaf (`worker_step(0) = 5;`): none of them calls another.
    let calls_of = |tid: u32, funcs: &[&str]| -> Vec<(String, String, Option<i64>)> {
        let t = tid.to_string();
        let mut shown = vec!["replay", "--no-pager", "-D", "1", "-d", &d, "--tid", &t];
        for f in funcs {
            shown.extend(["-F", f]);
        }
        let text = uftrace(&shown).expect("uftrace replay");
        (text.lines())
            .filter_map(|l| {
                let body = l.split_once("| ")?.1.trim();
                let (name, rest) = body.split_once('(')?;
                let (args, tail) = rest.rsplit_once(')')?;
                let ret = tail
                    .strip_prefix(" = ")
                    .map(|r| r.trim_end_matches(';').parse().expect(l));
                Some((name.to_string(), args.to_string(), ret))
            })
            .collect()
    };
    let line = |pid: u32| -> (String, i64) {
        let l = (r.console.lines())
            .find(|l| l.contains(&format!(": pid {pid} ")))
            .expect("the worker's line");
        let rest = l.split("WORKER ").nth(1).expect("WORKER");
        let tag = rest.split(':').next().expect("tag").to_string();
        let sum = rest
            .rsplit(' ')
            .next()
            .and_then(|s| s.trim().parse().ok())
            .expect(l);
        (tag, sum)
    };
    for &(pid, _) in &workers {
        let calls = calls_of(
            pid,
            &["worker_step", "plug_step", "plug_tail", "worker_report"],
        );
        let named = |n: &str| calls.iter().filter(|c| c.0 == n).collect::<Vec<_>>();
        let steps = named("worker_step");
        assert_eq!(
            steps.len() as u64,
            procs_count("WORKER_STEPS"),
            "{calls:#?}"
        );
        let mut acc = 0i64;
        for (_, arg, ret) in &steps {
            assert_eq!(
                arg.parse::<i64>().ok(),
                Some(acc),
                "worker {pid}: {calls:#?}"
            );
            acc += i64::from(pid);
            assert_eq!(*ret, Some(acc), "worker {pid}: {calls:#?}");
        }
        let plugs = named("plug_step");
        assert_eq!(plugs.len() as u64, procs_count("PLUG_STEPS"), "{calls:#?}");
        for (_, arg, ret) in &plugs {
            assert_eq!(
                arg.parse::<i64>().ok(),
                Some(acc),
                "worker {pid}: {calls:#?}"
            );
            acc += 1;
            assert_eq!(*ret, Some(acc), "worker {pid}: {calls:#?}");
        }
        // plug_tail leaves by a jump to plug_add (a tail call): its value is the one
        // plug_add returns, read at plug_add's return.
        let tails = named("plug_tail");
        assert_eq!(tails.len(), 1, "{calls:#?}");
        assert_eq!(tails[0].1.parse::<i64>().ok(), Some(acc), "worker {pid}");
        acc += 2;
        assert_eq!(tails[0].2, Some(acc), "worker {pid}: {calls:#?}");
        // libc's getpid, called through /worker's PLT (the call is made one of getpid's):
        // the worker's pid each time. The first call binds the PLT entry through the loader
        // (lazy binding): the PLT entry's frame (named after getpid) holds the loader's
        // calls, then getpid itself, entered by the loader's jump, with its value.
        let getpids = calls_of(pid, &["getpid"]);
        let valued: Vec<i64> = getpids.iter().filter_map(|c| c.2).collect();
        assert_eq!(
            valued.len() as u64,
            procs_count("WORKER_STEPS") + 1,
            "worker {pid}: {getpids:#?}"
        );
        assert!(
            valued.iter().all(|&p| p == i64::from(pid)),
            "worker {pid}: {getpids:#?}"
        );
        assert!(
            getpids.len() <= valued.len() + 1,
            "worker {pid}: more than the first call's PLT frame without a value: {getpids:#?}"
        );
        let (tag, sum) = line(pid);
        let report = named("worker_report");
        assert_eq!(report.len(), 1, "{calls:#?}");
        assert_eq!(report[0].1, format!("\"{tag}\", {sum}"), "worker {pid}");
        assert_eq!(report[0].2, None, "worker {pid}");
    }
}

/// Issue 37: a window switched on in the kernel (`--trace-on-at` the gettid system call,
/// which the first worker's thread makes first, in `thread_main`) opens with the calls of
/// the user-mode code beneath the kernel's too, as a full recording has them open there:
/// `thread_main() { gettid() { [svc]() {` (the user frames saved as the thread returns to
/// user mode, unwound with its process's files), then the kernel's frames down to the
/// system call, then `/* qemu:opened */`. So the thread's `thread_main` counts once and
/// its later calls nest under it. Before, the window began at the kernel's frames and
/// `thread_main` was missing.
#[test]
fn a_window_switched_on_in_a_system_call_opens_over_the_user_calls_beneath() {
    window_in_a_system_call(&arm64_boot(), &[], "__arm64_sys_gettid");
}

#[test]
fn a_window_switched_on_in_a_system_call_opens_over_the_user_calls_beneath_on_x86_64() {
    let argv = x86_64_boot();
    window_in_a_system_call(&argv, &[], "__x64_sys_gettid");
}

/// On riscv64 S-mode reads no user page: the first user block after the SRET takes them.
#[test]
fn a_window_switched_on_in_a_system_call_opens_over_the_user_calls_beneath_on_riscv64() {
    let argv = riscv64_boot();
    window_in_a_system_call(&argv, &[&riscv64_vmlinux()], "__riscv_sys_gettid");
}

fn window_in_a_system_call(argv: &[String], symbols: &[&Path], syscall: &str) {
    let r = record_with(argv, symbols, &["--trace=off", "--trace-on-at", syscall]);
    let threads = worker_threads(&r.console);
    assert_eq!(threads.len(), 2, "{}", r.console);
    let thread = threads[0].1;
    let (text, _, counts) = replay_and_calls_of(&r.dir, thread);
    assert_eq!(
        (
            counts.get("thread_main"),
            counts.get("thread_step").copied()
        ),
        (Some(&1), Some(procs_count("THREAD_STEPS"))),
        "thread {thread}:\n{text:.4000}"
    );
    // The frames open at the switch on, outermost first.
    let opened: Vec<&str> = (text.lines())
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(l.split_once('|')?.1.trim()))
        .take_while(|l| *l != "/* qemu:opened */")
        .collect();
    let at = |f: &str| opened.iter().position(|l| *l == format!("{f}() {{"));
    let (main, gettid, svc, call) = (at("thread_main"), at("gettid"), at("[svc]"), at(syscall));
    assert!(
        main.is_some()
            && gettid == main.map(|m| m + 1)
            && svc == gettid.map(|g| g + 1)
            && call > svc
            && opened.len() < text.lines().count(),
        "thread {thread}'s opened frames: {opened:?}\n{text:.4000}"
    );
}
