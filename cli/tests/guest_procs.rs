//! Every process of a Linux guest named (issue 24): Debian's arm64 kernel boots a
//! gzip-compressed initramfs whose `/init` and `/worker` are dynamic PIEs with glibc and the
//! dynamic loader (`tests/guests/procs`); `record` is given only the kernel's DWARF vmlinux
//! and the QEMU command line, and finds the programs and libraries in the `-initrd` archive.
//! The guest has two programs, one of them run twice (same code, other addresses), a child
//! forked without exec, a thread and a library loaded with `dlopen`. Checked on uftrace's own output: exact call counts of
//! the programs' functions per process and thread, libc's functions named, syscalls under
//! their user caller, threads in their process's session, and no unnamed address inside the
//! programs (glibc's internal functions have no symbols in the cross toolchain's copy).
//!
//! Run: `cargo test -p qemu-uftrace --test guest_procs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use qemu_uftrace_tests::execlog::debian_vmlinux;
use qemu_uftrace_tests::procs_guest::{procs_boot_args_on, procs_count};
use qemu_uftrace_tests::replay::{parse_calls, report_calls, uftrace, Call};
use qemu_uftrace_tests::system_qemus;

/// One `record` run.
struct Recorded {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    console: String,
    stderr: String,
}

fn record(symbols: &[&Path]) -> Recorded {
    // 10.2.2: the QEMU that reports exceptions to plugins, so a syscall shows as `[svc]`
    // with the kernel's functions beneath it.
    let qemu = system_qemus()
        .into_iter()
        .find(|q| q.label == "10.2.2")
        .expect("QEMU 10.2.2 in system_qemus")
        .program;
    let argv = procs_boot_args_on(&qemu).expect("the process guest builds");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace.data");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"));
    cmd.arg("record").arg("-o").arg(&dir);
    for s in symbols {
        cmd.arg("--symbols").arg(s);
    }
    let out = cmd
        .arg("--")
        .args(&argv)
        .stdin(Stdio::null())
        .output()
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
        _tmp: tmp,
        dir,
        console,
        stderr,
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

/// Asserts no entry of `tid` left unnamed inside the program `stem`'s ranges.
fn unnamed_in(dir: &Path, tid: u32, stem: &str) -> Vec<String> {
    let (text, _) = replay_of(dir, tid);
    let ranges = ranges_of(dir, stem);
    unnamed_entries(&text)
        .into_iter()
        .filter(|a| ranges.iter().any(|(s, e)| s <= a && a < e))
        .map(|a| format!("{a:x}"))
        .collect()
}

#[test]
fn dynamic_pie_processes_are_named() {
    let vmlinux = debian_vmlinux();
    let r = record(&[&vmlinux]);
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
    let init = calls_of(&r.dir, 1);
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
        let c = calls_of(&r.dir, pid);
        for (f, want) in [
            ("child_step", count("CHILD_STEPS")),
            ("getpid", count("CHILD_STEPS")),
            ("init_step", 0),
            ("run_worker", 0),
        ] {
            expect(format!("child {pid}: calls of {f}"), n(&c, f), want);
        }
        let unnamed = unnamed_in(&r.dir, pid, "init");
        expect(
            format!("child {pid}: unnamed entries inside /init ({unnamed:?})"),
            unnamed.len() as u64,
            0,
        );
    }
    // Each worker: the same program twice, at different addresses, in its own process.
    for (run, &pid) in workers.iter().enumerate() {
        // The first run loads a library with dlopen (see worker.c for why only the first).
        let first = (run == 0) as u64;
        let w = calls_of(&r.dir, pid);
        for (f, want) in [
            ("main", 1),
            ("worker_step", count("WORKER_STEPS")),
            ("worker_report", 1),
            ("getpid", count("WORKER_STEPS") + 1),
            ("snprintf", 1),
            ("pthread_create", 1),
            ("dlopen", first),
            ("plug_step", first * count("PLUG_STEPS")),
            ("thread_step", 0),
            ("init_step", 0),
        ] {
            expect(format!("worker {pid}: calls of {f}"), n(&w, f), want);
        }
        // The syscall beneath its user caller: getpid(2)'s kernel side under `[svc]` under
        // libc's getpid under worker_step, every time.
        let (_, calls) = replay_of(&r.dir, pid);
        let under = calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.name == "__arm64_sys_getpid")
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
            format!("worker {pid}: __arm64_sys_getpid under worker_step > getpid > [svc]"),
            under,
            count("WORKER_STEPS"),
        );
        for file in ["worker", "libplug.so"] {
            let unnamed = unnamed_in(&r.dir, pid, file);
            expect(
                format!("worker {pid}: unnamed entries inside {file} ({unnamed:?})"),
                unnamed.len() as u64,
                0,
            );
        }
    }
    // The library the first worker loaded with dlopen is placed where it loaded it.
    expect(
        "map lines of /lib/libplug.so".into(),
        ranges_of(&r.dir, "libplug.so").is_empty() as u64,
        0,
    );
    // Each worker's thread: its own task, in its process's session.
    let tasks = qemu_uftrace_tests::replay::task_list(&r.dir).expect("task.txt");
    for &(pid, tid) in &threads {
        let t = calls_of(&r.dir, tid);
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
        let unnamed = unnamed_in(&r.dir, tid, "worker");
        expect(
            format!("thread {tid}: unnamed entries inside /worker ({unnamed:?})"),
            unnamed.len() as u64,
            0,
        );
    }
    let unnamed = unnamed_in(&r.dir, 1, "init");
    expect(
        format!("pid 1: unnamed entries inside /init ({unnamed:?})"),
        unnamed.len() as u64,
        0,
    );
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

/// Without the kernel's DWARF, record says why the processes' own functions are not named,
/// in one line, and the trace is still written.
#[test]
fn without_dwarf_record_says_why() {
    let r = record(&[]);
    assert!(
        r.stderr.contains(
            "the guest's processes' own functions are not named: no symbol source has the \
             kernel's DWARF (give the vmlinux of its -dbg package with --symbols)"
        ),
        "record said:\n{}",
        r.stderr
    );
    assert!(!r.dir.join("plugin.procs").exists());
    assert!(r.dir.join("task.txt").exists());
}
