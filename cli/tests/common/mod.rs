//! Helpers for the tests that run the real `qemu-uftrace` binary.

#![allow(dead_code)]

pub mod resync;
pub mod shared;
pub mod user;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_qemu-uftrace");

/// The binary, with its plugin cache kept inside `home` (`$QEMU_UFTRACE_CACHE`, which a
/// run of the suite from empty caches sets, would move it out and the tests that look for
/// the plugin under `home` would not find it).
pub fn qemu_uftrace(home: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("QEMU_UFTRACE_CACHE")
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("HOME", home)
        .stdin(std::process::Stdio::null());
    c
}

/// What a panic said (its payload: a formatted message or a literal), for a test that
/// catches one.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// `qemu-uftrace export -d DIR extra…` (stdin from /dev/null), timed into the passes log
/// (the summary's "other" column).
pub fn export(dir: &Path, extra: &[&str]) -> Output {
    qemu_uftrace_tests::passes::output(
        Command::new(BIN)
            .arg("export")
            .arg("-d")
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null()),
    )
    .expect("run qemu-uftrace export")
}

/// A Perfetto trace decoded by `perfetto_check.py` with Perfetto's own protos: the JSON it
/// prints (its fields are described there). scripts/install-deps.sh makes its venv.
pub fn perfetto_decoded(trace: &Path) -> serde_json::Value {
    let out = perfetto_check(trace);
    assert!(
        out.status.success(),
        "decoding {} failed: {}",
        trace.display(),
        stderr(&out)
    );
    serde_json::from_slice(&out.stdout).expect("perfetto_check.py prints JSON")
}

/// `perfetto_check.py TRACE`'s run, which may fail.
pub fn perfetto_check(trace: &Path) -> Output {
    let py = qemu_uftrace_tests::cache_dir().join("venv/bin/python");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/perfetto_check.py");
    // Timed (the summary's "other" column): a kernel boot's trace is millions of packets,
    // decoded in Python.
    qemu_uftrace_tests::passes::output(Command::new(&py).arg(script).arg(trace)).unwrap_or_else(
        |e| {
            panic!(
                "cannot run {} ({e}): run scripts/install-deps.sh",
                py.display()
            )
        },
    )
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The error lines of a run: exactly one, in our format.
pub fn single_error(o: &Output) -> String {
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "expected one error line, got:\n{err}");
    assert!(
        lines[0].starts_with("qemu-uftrace: error: "),
        "not our error format: {err}"
    );
    lines[0].to_string()
}

/// The pids of the processes whose command line contains `needle`.
pub fn pids_with_arg(needle: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(needle)
                .then_some(pid)
        })
        .collect()
}

/// Panics, saying how to install it, unless `cmd` is on PATH: a missing tool fails a test,
/// it never skips it.
pub fn require(cmd: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd} >/dev/null"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "{cmd} is not installed: run scripts/install-deps.sh");
}

/// `qemu-uftrace record [options] -- argv` into a fresh directory: the temp dir (keep it
/// alive), the trace's path and record's output.
pub fn record_output(argv: &[String], options: &[&str]) -> (tempfile::TempDir, PathBuf, Output) {
    record_named("kernel.data", argv, options)
}

/// [`record_output`] into `<fresh temp dir>/NAME`.
pub fn record_named(
    name: &str,
    argv: &[String],
    options: &[&str],
) -> (tempfile::TempDir, PathBuf, Output) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join(name);
    let out = record_into(&dir, options, argv);
    (tmp, dir, out)
}

/// `qemu-uftrace record -o DIR OPTIONS -- ARGV`, stdin from /dev/null: record's output.
pub fn record_into<S: AsRef<std::ffi::OsStr>>(
    dir: &Path,
    options: &[S],
    argv: &[String],
) -> Output {
    qemu_uftrace_tests::passes::output(
        Command::new(BIN)
            .arg("record")
            .arg("-o")
            .arg(dir)
            .args(options)
            .arg("--")
            .args(argv)
            .stdin(Stdio::null()),
    )
    .expect("run qemu-uftrace")
}

/// `qemu-uftrace record -o TMP/uftrace.data OPTIONS -- ARGV`, which must succeed: the
/// trace's path and record's stderr.
pub fn record_ok_in<S: AsRef<std::ffi::OsStr>>(
    tmp: &Path,
    options: &[S],
    argv: &[String],
) -> (PathBuf, String) {
    let dir = tmp.join("uftrace.data");
    let out = record_into(&dir, options, argv);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "record failed: {}\n{stderr}",
        out.status
    );
    (dir, stderr)
}

/// The bare-metal guest `program` (its natural build) recorded under the emulator `qemu`
/// into `<fresh temp dir>/NAME` with `options`, as [`record_named`].
pub fn record_guest_on(
    qemu: &str,
    name: &str,
    options: &[&str],
    program: &str,
) -> (tempfile::TempDir, PathBuf, Output) {
    let elf = qemu_uftrace_tests::guest_elf(program, qemu_uftrace_tests::Variant::Natural)
        .expect("build the guests");
    record_named(name, &qemu_uftrace_tests::qemu_args_on(qemu, &elf), options)
}

/// [`record_output`], which must succeed; returns the temp dir (keep it alive), the trace
/// and the guest console.
pub fn record_argv(argv: &[String], options: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    let (tmp, dir, out) = record_output(argv, options);
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "record {options:?} -- {argv:?} failed ({}):\n{}\nconsole:\n{console}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (tmp, dir, console)
}

/// [`record_argv`] of a Linux boot, which must reach its "Unable to mount root fs" panic.
pub fn record_to_panic(argv: &[String], options: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    let (tmp, dir, console) = record_argv(argv, options);
    assert!(
        console.contains("Kernel panic - not syncing: VFS: Unable to mount root fs"),
        "the guest did not reach its panic:\n{console}"
    );
    (tmp, dir, console)
}

/// [`record_to_panic`] from the shared recordings ([`shared::record`]): the trace is read only.
pub fn shared_to_panic(argv: &[String], options: &[&str]) -> shared::Recording {
    let r = shared::record(argv, options);
    assert!(
        r.console
            .contains("Kernel panic - not syncing: VFS: Unable to mount root fs"),
        "the guest did not reach its panic:\n{}",
        r.console
    );
    r
}

/// A kernel boot recorded on two vCPUs (`dir`): both record, on one wall-clock timeline, and
/// the secondary CPU's first traced function `started` runs in a context of its own after the
/// boot CPU's call `wake` (which wakes it) began: inside it where `wake` waits for the
/// secondary (`inside`); tasks move between the vCPUs. `in_tasks`: where `wake` and `started`
/// run, when that is certain (uftrace then reads those tasks' records alone, a third of a
/// pass over the whole boot), else every task is read.
pub fn check_secondary_start(
    dir: &Path,
    wake: &str,
    started: &str,
    inside: bool,
    in_tasks: Option<&str>,
    label: &str,
) {
    let stat = |key: &str| -> u64 {
        let v = qemu_uftrace_tests::plugin_stat(dir, key);
        v.parse().unwrap_or_else(|_| panic!("{key}={v} on {label}"))
    };
    assert_eq!(stat("vcpus"), 2, "on {label}");
    assert_eq!(
        qemu_uftrace_tests::plugin_stat(dir, "clock"),
        "wall",
        "on {label}"
    );
    for vcpu in 0..2 {
        let events = stat(&format!("vcpu{vcpu}.events"));
        assert!(events > 10_000, "vCPU {vcpu}: {events} events on {label}");
    }
    let (calls, returns) = (stat("calls"), stat("returns"));
    assert!(
        calls.abs_diff(returns) < calls / 100,
        "{calls} calls, {returns} returns on {label}"
    );
    assert!(stat("unmatched_returns") < 1_000, "on {label}");

    let d = dir.to_string_lossy().to_string();
    let (wake_filter, started_filter) = (format!("^{wake}$"), format!("^{started}$"));
    let replay_in = |tasks: Option<&str>| {
        let mut args = vec!["replay", "--no-pager", "-f", "time,tid", "-D", "1"];
        if let Some(tids) = tasks {
            args.extend(["--tid", tids]);
        }
        args.extend(["-d", &d, "-F", &wake_filter, "-F", &started_filter]);
        qemu_uftrace_tests::replay::uftrace(&args).expect("uftrace replay")
    };
    let replay = replay_in(in_tasks);
    // `[tid]  seconds.nanoseconds | function`, a short tid padded inside the brackets
    // (`[     1]`: PIDs, where the kernel's BTF or DWARF says where they are).
    let event = |what: &str| -> Option<(u32, f64)> {
        let line = replay.lines().find(|l| l.contains(what))?;
        let (tid, rest) = line.trim_start().strip_prefix('[')?.split_once(']')?;
        Some((
            tid.trim().parse().ok()?,
            rest.split_whitespace().next()?.parse().ok()?,
        ))
    };
    // A failure read in the given tasks shows the whole boot's answer too.
    let missing = || match in_tasks {
        Some(tids) => format!(
            "on {label}, in tasks {tids}:\n{replay}\nin every task:\n{}",
            replay_in(None)
        ),
        None => format!("on {label}:\n{replay}"),
    };
    let (wake_tid, woken) =
        event(&format!("| {wake}()")).unwrap_or_else(|| panic!("{}", missing()));
    let (start_tid, start) =
        event(&format!("| {started}()")).unwrap_or_else(|| panic!("{}", missing()));
    assert!(start > woken, "{started} before {wake} {}", missing());
    if inside {
        let (_, done) =
            event(&format!("}} /* {wake} */")).unwrap_or_else(|| panic!("{}", missing()));
        assert!(
            start < done,
            "{started} after {wake} returned {}",
            missing()
        );
    }
    assert_ne!(
        start_tid,
        wake_tid,
        "{started} in {wake}'s task {}",
        missing()
    );
    let note = std::fs::read_to_string(dir.join("note.txt")).expect("note.txt");
    assert!(
        note.lines().any(|l| l.trim_end().ends_with("vCPU 0,1")),
        "no task ran on both vCPUs on {label}:\n{note}"
    );
}

/// Gives `command` the default action for the stopping signals, whatever this test process
/// inherited: a suite started in the background of a script (SIGINT and SIGQUIT ignored) or
/// under `nohup` (SIGHUP ignored) passes those on to `record`, which then rightly keeps
/// ignoring them, and a test of what a signal does would fail for its runner's sake.
/// Called before any `pre_exec` of the test's own (which may ignore one again).
pub fn default_stop_signals(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal() is async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        })
    };
}

/// `n` with thousands separated by commas, as `record`'s closing line writes counts.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The records in a trace directory's `.dat` files (each record 16 bytes).
pub fn dat_records(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "dat"))
        .map(|e| e.metadata().unwrap().len() / 16)
        .sum()
}

/// The count `key` in each process image's `plugin.stats`: the trace's own first, then its
/// other images' (`procs/PID.N/`, user mode's forked and exec'd processes).
pub fn stat_per_image(dir: &Path, key: &str) -> Vec<u64> {
    let mut dirs = vec![dir.to_path_buf()];
    if let Ok(procs) = std::fs::read_dir(dir.join("procs")) {
        dirs.extend(procs.flatten().map(|e| e.path()));
    }
    dirs.iter()
        .map(|d| {
            let n = qemu_uftrace_tests::plugin_stat(d, key);
            n.parse()
                .unwrap_or_else(|_| panic!("{key}={n} in {}", d.display()))
        })
        .collect()
}
