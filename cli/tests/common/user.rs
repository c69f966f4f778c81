//! What the user-mode tests (`record_user*.rs`, one per architecture) share: recording a
//! program under a `qemu-<arch>`, the calls of a single-threaded trace, and the oracle check.

use qemu_uftrace_tests::replay::{exactly, replay_events, report_calls, task_list, without};
use qemu_uftrace_tests::{is_runtime_function, nm_functions, oracle_names, parse_oracle};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Builds `source` into `dir/NAME` with the compiler `cc` and `flags`: a program a test
/// writes itself.
pub fn compile(cc: &str, flags: &[&str], dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write the source");
    let elf = dir.join(name);
    let status = Command::new(cc)
        .args(flags)
        .arg("-o")
        .arg(&elf)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("run {cc} (scripts/install-deps.sh installs it): {e}"));
    assert!(status.success(), "{cc} failed");
    elf
}

/// One user-mode architecture: its emulator (a path in the cache) and its cross compilers'
/// prefix.
pub struct Target {
    pub qemu: &'static str,
    pub cross: &'static str,
}

pub const AARCH64: Target = Target {
    qemu: "qemu-10.2.2/bin/qemu-aarch64",
    cross: "aarch64-linux-gnu-",
};
pub const RISCV64: Target = Target {
    qemu: "qemu-10.2.2/bin/qemu-riscv64",
    cross: "riscv64-linux-gnu-",
};
pub const X86_64: Target = Target {
    qemu: "qemu-10.2.2/bin/qemu-x86_64",
    cross: "x86_64-linux-gnu-",
};

/// `qemu-uftrace record -o DIR -- QEMU ARGS…`, its output, and DIR.
pub fn record(qemu: &Path, args: &[&str]) -> (tempfile::TempDir, PathBuf, Output) {
    let Run {
        tmp,
        dir,
        mut command,
        ..
    } = record_command(qemu, args);
    let out = command.output().expect("run qemu-uftrace");
    (tmp, dir, out)
}

/// [`record`] with `opts` given to `record` (before `--`).
pub fn record_with(
    qemu: &Path,
    opts: &[&str],
    args: &[&str],
) -> (tempfile::TempDir, PathBuf, Output) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    let out = qemu_uftrace_tests::passes::output(
        Command::new(super::BIN)
            .arg("record")
            .arg("-o")
            .arg(&dir)
            .args(opts)
            .arg("--")
            .arg(qemu)
            .args(args)
            .stdin(Stdio::null()),
    )
    .expect("run qemu-uftrace");
    (tmp, dir, out)
}

/// A run of `qemu-uftrace record -o DIR -- QEMU ARGS…` still going (stdin from /dev/null):
/// its temp dir (keep it), DIR, DIR's staging directory (`DIR.partial`, while it runs), and
/// the command to spawn (stdout and stderr piped unless the caller says otherwise).
pub struct Run {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub staging: PathBuf,
    pub command: Command,
}

pub fn record_command<S: AsRef<std::ffi::OsStr>>(qemu: &Path, args: &[S]) -> Run {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    let staging = tmp.path().join("uftrace.data.partial");
    let mut command = Command::new(super::BIN);
    command
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .arg("--")
        .arg(qemu)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    super::default_stop_signals(&mut command);
    Run {
        tmp,
        dir,
        staging,
        command,
    }
}

/// Waits until the first QEMU of a run into `staging` is done (its `plugin.stats`) and a
/// later process image has announced itself (`procs/<key>/plugin.proc`); returns that
/// image's folder. Panics after `patience`.
pub fn first_done_and_a_child(staging: &Path, patience: std::time::Duration) -> PathBuf {
    let deadline = std::time::Instant::now() + patience;
    loop {
        let child = std::fs::read_dir(staging.join("procs"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(Result::ok)
            .map(|e| e.path())
            .filter(|d| d.join("plugin.proc").exists());
        if let Some(d) = child.filter(|_| staging.join("plugin.stats").exists()) {
            return d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the program's child never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// [`record`], which must succeed; the program's stdout instead of the whole output.
pub fn record_ok(qemu: &Path, args: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    let (tmp, dir, out) = record(qemu, args);
    assert!(
        out.status.success(),
        "record {args:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    (tmp, dir, text(&out.stdout))
}

/// The one task of a single-threaded trace.
pub fn only_task(dir: &Path) -> u32 {
    let tasks = task_list(dir).expect("task.txt");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    tasks[0].0
}

/// The scenario's calls in a trace: `_start` and the runtime go (their callees with them).
pub fn traced(dir: &Path) -> Vec<String> {
    let events = replay_events(dir, only_task(dir)).expect("uftrace replay");
    let events = without(&events, |n| n == "_start", false);
    without(&events, is_runtime_function, true)
}

/// The oracle build, recorded under `qemu`: its trace is exactly the log it printed in that
/// same run; each of the `others` (builds without the oracle: no tail calls in these
/// programs) traces the same calls.
pub fn check_oracle(qemu: &Path, oracle_elf: &Path, others: &[PathBuf]) {
    check_oracle_with(qemu, &[], oracle_elf, others);
}

/// [`check_oracle`] with QEMU options (`-cpu max`) before each program.
pub fn check_oracle_with(qemu: &Path, qemu_opts: &[&str], oracle_elf: &Path, others: &[PathBuf]) {
    let args = |elf: &Path| -> Vec<String> {
        let mut a: Vec<String> = qemu_opts.iter().map(|s| s.to_string()).collect();
        a.push(elf.to_string_lossy().into_owned());
        a
    };
    let record_ok = |elf: &Path| {
        let a = args(elf);
        record_ok(qemu, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (_tmp, dir, stdout) = record_ok(oracle_elf);
    let log = parse_oracle(&stdout).expect("the program's oracle log on record's stdout");
    let oracle = oracle_names(&log, &nm_functions(oracle_elf).expect("nm"));
    assert!(oracle.len() > 4 && oracle[0] == "E main", "{oracle:?}");
    assert_eq!(traced(&dir), oracle, "{}", oracle_elf.display());
    for elf in others {
        let (_tmp, dir, stdout) = record_ok(elf);
        assert!(!stdout.contains("MISMATCH"), "{stdout}");
        assert_eq!(traced(&dir), oracle, "{}", elf.display());
    }
}

/// The first function `parent` calls, each time it is called (`E name` events).
pub fn first_callees(events: &[String], parent: &str) -> Vec<String> {
    let enter = format!("E {parent}");
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| **e == enter)
        .filter_map(|(i, _)| events.get(i + 1)?.strip_prefix("E ").map(str::to_string))
        .collect()
}

/// A threads program's trace against its own word on its threads (`main tid=T`,
/// `thread K tid=T steps=N …` on stdout): one uftrace task per thread, by that id, each with
/// exactly its `thread_step` count. Returns main's id and each thread's steps.
pub fn check_thread_tasks(dir: &Path, stdout: &str) -> (u32, BTreeMap<u32, u64>) {
    let field = |line: &str, key: &str| -> u32 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line:?}"))
    };
    let main_tid = stdout
        .lines()
        .find(|l| l.starts_with("main "))
        .map(|l| field(l, "tid="))
        .expect("main's line");
    let threads: BTreeMap<u32, u64> = stdout
        .lines()
        .filter(|l| l.starts_with("thread "))
        .map(|l| (field(l, "tid="), u64::from(field(l, "steps="))))
        .collect();
    let mut tids: Vec<u32> = task_list(dir)
        .expect("task.txt")
        .iter()
        .map(|t| t.0)
        .collect();
    tids.sort_unstable();
    let mut want: Vec<u32> = threads.keys().copied().chain([main_tid]).collect();
    want.sort_unstable();
    assert_eq!(tids, want, "one uftrace task per thread, by its thread id");
    // Threads of one process, as libmcount writes them: `pid=` the process, one session.
    let tasks = task_list(dir).expect("task.txt");
    assert!(
        tasks.iter().all(|&(_, pid)| pid == main_tid),
        "every thread's pid is the process's ({main_tid}): {tasks:?}"
    );
    let task_txt = std::fs::read_to_string(dir.join("task.txt")).expect("task.txt");
    assert_eq!(
        task_txt.lines().filter(|l| l.starts_with("SESS ")).count(),
        1,
        "one session per process:\n{task_txt}"
    );
    let step = exactly("thread_step");
    for (&tid, &steps) in &threads {
        let calls =
            report_calls(dir, &["--tid", &tid.to_string(), "-F", &step]).expect("uftrace report");
        assert_eq!(
            calls.get("thread_step"),
            Some(&steps),
            "tid {tid}: {calls:?}"
        );
    }
    (main_tid, threads)
}

/// Records the threads program (tests/guests/user/threads.c) under `qemu` (`args`: QEMU's,
/// ending with the program's path): one task per thread,
/// by the thread ids it prints, each with its exact `thread_step` count.
pub fn check_threads(qemu: &Path, args: &[&str]) {
    let (_tmp, dir, stdout) = record_ok(qemu, args);
    let (main_tid, threads) = check_thread_tasks(&dir, &stdout);
    assert_eq!(threads.len(), 3, "{stdout}");
    assert_eq!(threads.values().sum::<u64>(), 5 + 9 + 13);
    for &tid in threads.keys() {
        let calls = report_calls(
            &dir,
            &["--tid", &tid.to_string(), "-F", &exactly("thread_main")],
        )
        .expect("uftrace report");
        assert_eq!(calls.get("thread_main"), Some(&1), "tid {tid}: {calls:?}");
    }
    let calls = report_calls(&dir, &["--tid", &main_tid.to_string()]).expect("uftrace report");
    assert_eq!(
        calls.get("thread_step"),
        None,
        "main calls no thread_step: {calls:?}"
    );
    assert_eq!(calls.get("pthread_create"), Some(&3), "{calls:?}");
}

/// The glibc oracle (tests/guests/user/libcalls.c): `oracle_elf` (QEMU options `qemu_opts`
/// before it) traces exactly its own log — its functions and the libc calls they make,
/// libc's own calls below those left out — and so does each of the `others` (the same
/// calls, unlogged). Names go through the program's aliases (static glibc's `__libc_malloc`,
/// `_IO_printf`, `__libc_memcpy`: nm's names at one address); `__wrap_main`, static aarch64
/// glibc's `b main`, holds main's frame and is left out.
pub fn check_libcalls_oracle(
    qemu: &Path,
    qemu_opts: &[&str],
    oracle_elf: &Path,
    others: &[PathBuf],
) {
    use qemu_uftrace_tests::libcalls::{
        canonical_names, nm_aliases, parse_libcalls_oracle, program_and_direct_callees,
    };
    use std::collections::BTreeSet;
    let run = |elf: &Path| {
        let mut a: Vec<String> = qemu_opts.iter().map(|s| s.to_string()).collect();
        a.push(elf.to_string_lossy().into_owned());
        record_ok(qemu, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let canonical = |elf: &Path| {
        let names = canonical_names(&nm_aliases(elf).expect("nm"));
        move |n: &str| names.get(n).cloned().unwrap_or_else(|| n.to_owned())
    };
    let rename = |events: Vec<String>, name: &dyn Fn(&str) -> String| -> Vec<String> {
        events
            .iter()
            .map(|e| format!("{}{}", &e[..2], name(&e[2..])))
            .collect()
    };
    let (_tmp, dir, stdout) = run(oracle_elf);
    let aliases = nm_aliases(oracle_elf).expect("nm");
    let name = canonical(oracle_elf);
    let log = parse_libcalls_oracle(&stdout, &aliases).expect("the program's oracle log");
    let oracle: Vec<String> = log
        .iter()
        .map(|(e, _)| format!("{}{}", &e[..2], name(&e[2..])))
        .collect();
    // The program's own functions: those its log names by address.
    let own: BTreeSet<String> = oracle
        .iter()
        .zip(&log)
        .filter(|(_, (_, lib))| !lib)
        .map(|(e, _)| e[2..].to_owned())
        .collect();
    assert!(
        oracle.len() > 20 && oracle[0] == "E main" && oracle.contains(&"E memcpy".to_owned()),
        "{oracle:?}"
    );
    let traced = |dir: &Path, name: &dyn Fn(&str) -> String| -> Vec<String> {
        // Static aarch64 glibc's `__wrap_main` enters main by `b main`: main shows nested
        // in it, as native uftrace shows a tail call.
        let events = without(
            &replay_events(dir, only_task(dir)).expect("uftrace replay"),
            |n| n == "__wrap_main",
            false,
        );
        let events = rename(events, name);
        // From main's entry to its return: the start-up and the oracle's own dump go.
        let start = events
            .iter()
            .position(|e| e == "E main")
            .unwrap_or_else(|| panic!("no main in {events:?}"));
        let mut depth = 0usize;
        let mut end = events.len();
        for (i, e) in events.iter().enumerate().skip(start) {
            if e.starts_with("E ") {
                depth += 1;
            } else {
                depth -= 1;
                if depth == 0 {
                    end = i + 1;
                    break;
                }
            }
        }
        let events = without(&events[start..end], is_runtime_function, true);
        program_and_direct_callees(&events, &own)
    };
    assert_eq!(traced(&dir, &name), oracle, "{}", oracle_elf.display());
    for elf in others {
        let (_tmp, dir, stdout) = run(elf);
        assert!(!stdout.contains("ORACLE"), "{stdout}");
        assert_eq!(traced(&dir, &canonical(elf)), oracle, "{}", elf.display());
    }
}

/// `libcalls-<link>-<variant>.elf` for aarch64 (tests/guests/user's `make glibc`: the
/// glibc oracle guest, `dyn` a dynamic PIE run under `-L /usr/aarch64-linux-gnu`), built
/// once per process.
#[allow(dead_code)]
pub fn glibc_guest(name: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let args = ["glibc".to_string(), "CROSS=aarch64-linux-gnu-".to_string()];
        qemu_uftrace_tests::make_guests("user", "user-glibc-aarch64", &args)
            .expect("building the glibc guests")
    });
    dir.join(name)
}
