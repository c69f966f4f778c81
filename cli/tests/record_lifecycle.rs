//! The whole life of `qemu-uftrace record` with the real qemu-system-aarch64, the embedded
//! plugin and uftrace: what the trace directory holds and what we print, the rotation of
//! an earlier trace, exit statuses, QEMU dying (SIGKILL), stopped (Ctrl-C) or told to stop
//! (SIGTERM) mid-run, `--then`, and `symbols` on an existing trace.
//!
//! Guests: `examples/hello`, and from `tests/guests` `exit3` (ends QEMU with status 3) and
//! `spin` (never ends); Debian's arm64 kernel for QEMU killed mid-boot.

mod common;

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use qemu_uftrace_tests::{
    guest_elf, hello_elf, kernel_boot_args, plugin_stat, qemu_args, Variant, QEMU,
};

/// How long a signal test waits for the trace to grow, or for us to exit.
const PATIENCE: Duration = Duration::from_secs(60);
/// The task id the plugin gives vCPU 0's boot code while QEMU runs (see `tasks::BOOT_TID_BASE`).
const BOOT_TID: u32 = qemu_uftrace_engine::tasks::BOOT_TID_BASE;

/// A temporary home: the working directory, plugin cache and output of one test.
struct Env {
    home: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            home: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn dir(&self) -> &Path {
        self.home.path()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir().join(rel)
    }

    /// `qemu-uftrace` run in the home directory.
    fn cmd(&self) -> Command {
        let mut c = qemu_uftrace(self.dir());
        c.current_dir(self.dir());
        c
    }

    /// `qemu-uftrace record [extra] -- <qemu argv>`, without waiting.
    fn record_cmd(&self, extra: &[&str], qemu: &[String]) -> Command {
        let mut c = self.cmd();
        c.arg("record").args(extra).arg("--").args(qemu);
        default_stop_signals(&mut c);
        c
    }

    /// `qemu-uftrace record [extra] -- qemu-system-aarch64 … -kernel <elf>`.
    fn record(&self, extra: &[&str], elf: &Path) -> Output {
        self.record_cmd(extra, &qemu_args(elf))
            .output()
            .expect("run qemu-uftrace record")
    }

    /// `uftrace ARGS -d <home>/<data>`; fails on a warning or error from uftrace.
    fn uftrace(&self, args: &[&str], data: &str) -> String {
        let d = self.path(data).to_string_lossy().into_owned();
        let mut all = args.to_vec();
        all.extend(["-d", &d]);
        qemu_uftrace_tests::replay::uftrace(&all)
            .unwrap_or_else(|e| panic!("uftrace {args:?} -d {data}: {e:#}"))
    }

    /// Starts `record` in a process group of its own (as a shell runs a foreground job),
    /// with stdout and stderr going to files: a pipe nobody reads would stop QEMU.
    fn spawn_record(&self, extra: &[&str], qemu: &[String]) -> Running {
        self.spawn(self.record_cmd(extra, qemu))
    }

    /// [`Env::spawn_record`] of a command made by [`Env::record_cmd`].
    fn spawn(&self, mut c: Command) -> Running {
        let out = self.path("record.stdout");
        let err = self.path("record.stderr");
        c.stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .process_group(0);
        Running {
            child: c.spawn().expect("start qemu-uftrace record"),
            out,
            err,
        }
    }
}

/// A `record` started by [`Env::spawn_record`].
struct Running {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Running {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits until `path` holds at least `min_bytes` (the plugin writes in 1 MiB buffers).
    fn wait_for_data(&mut self, path: &Path, min_bytes: u64) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if std::fs::metadata(path).is_ok_and(|m| m.len() >= min_bytes) {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "record ended ({status}) before {} held {min_bytes} bytes:\n{}",
                    path.display(),
                    self.stderr()
                );
            }
            if Instant::now() > deadline {
                self.kill_group();
                panic!(
                    "{} never held {min_bytes} bytes:\n{}",
                    path.display(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for `record` to exit.
    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                self.kill_group();
                panic!("record did not exit:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill_group(&mut self) {
        signal(-self.pid(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    /// A failed assertion must not leave QEMU running.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.kill_group();
        }
    }
}

/// kill(2); a negative pid is a process group.
fn signal(pid: i32, sig: i32) {
    // SAFETY: kill has no memory effects; the targets are processes this test started.
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        r,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// The QEMU that `parent` runs with the plugin (not one of its probes), from /proc: its
/// pid and command line.
fn qemu_child_of(parent: i32) -> Option<(i32, Vec<String>)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // "pid (comm) state ppid …": comm may hold spaces, so split after its ')'.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<String> = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if argv.get(1).is_some_and(|a| a == "-plugin") {
            return Some((pid, argv));
        }
    }
    None
}

fn hello() -> PathBuf {
    require(QEMU);
    require("uftrace");
    hello_elf().expect("build the guests (run scripts/install-deps.sh)")
}

/// A `tests/guests` program (natural build).
fn guest(name: &str) -> PathBuf {
    require(QEMU);
    require("uftrace");
    guest_elf(name, Variant::Natural).expect("build the guests (run scripts/install-deps.sh)")
}

/// The numbers of the summary's `the guest made 617 calls and 617 returns on 1 vCPU …` and
/// of its `[ record: wrote 19.28 KiB, 1,234 records; 0 lost ]`: calls, returns, records.
fn summary_counts(stderr: &str) -> (u64, u64, u64) {
    let numbers = |prefix: &str, n: usize| -> Vec<u64> {
        let line = stderr
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in:\n{stderr}"));
        line.split_whitespace()
            .map(|w| w.trim_end_matches([',', ';']).replace(',', ""))
            .filter_map(|w| w.parse().ok())
            .take(n)
            .collect()
    };
    let made = numbers("qemu-uftrace: the guest made ", 2);
    // After the size (`19.28 KiB,`), which is no whole number.
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("qemu-uftrace: [ record: wrote "))
        .unwrap_or_else(|| panic!("no written line in:\n{stderr}"));
    let records = line
        .split_once(", ")
        .and_then(|(_, rest)| rest.split_once(" records"))
        .map(|(n, _)| n.replace(',', "").parse().unwrap())
        .unwrap_or_else(|| panic!("no records in {line}"));
    (made[0], made[1], records)
}

/// The one `sid-*.map` of a trace directory: its path and text.
fn the_map(dir: &Path) -> (PathBuf, String) {
    let maps: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("sid-") && n.ends_with(".map")
        })
        .collect();
    assert_eq!(maps.len(), 1, "{maps:?}");
    let text = std::fs::read_to_string(&maps[0]).unwrap();
    (maps[0].clone(), text)
}

/// A `.dat` file of whole 16-byte records, not empty.
fn assert_records(dat: &Path) -> u64 {
    let len = std::fs::metadata(dat)
        .unwrap_or_else(|e| panic!("{}: {e}", dat.display()))
        .len();
    assert!(
        len > 0 && len.is_multiple_of(16),
        "{}: {len} bytes",
        dat.display()
    );
    len
}

#[test]
fn records_assembles_and_names_functions() {
    let elf = hello();
    let env = Env::new();
    let o = env.record(&["-o", "hello.data"], &elf);
    let err = stderr(&o);
    assert!(o.status.success(), "{}\n{err}", o.status);
    // The guest's console is ours.
    let out = stdout(&o);
    assert!(out.contains("Hello from qemu-uftrace!"), "{out}");
    assert!(out.contains("Goodbye."), "{out}");

    // The summary: counts, where it went, the clock; nothing to warn about.
    let (calls, returns, records) = summary_counts(&err);
    assert!(calls > 100 && calls == returns, "{err}");
    // Every call and return written, and said once: the first line gives no other count
    // of records (nor their size) to stand against the written line's.
    assert_eq!(records, calls + returns, "{err}");
    assert_eq!(
        assert_records(&env.path("hello.data").join("1.dat")),
        records * 16
    );
    let first = err
        .lines()
        .find(|l| l.starts_with("qemu-uftrace: the guest made "))
        .unwrap();
    assert!(first.contains(" on 1 vCPU in "), "{first}");
    assert!(
        !first.contains("events") && !first.contains("iB"),
        "{first}"
    );
    assert!(
        err.contains(
            "qemu-uftrace: wrote hello.data; look at it with: qemu-uftrace replay -d hello.data"
        ),
        "{err}"
    );
    assert!(
        err.contains("clock=insn: uftrace's time columns count guest instructions"),
        "{err}"
    );
    assert!(!err.contains("warning"), "{err}");
    // QEMU 10.0 (the one on PATH) reports no exceptions, and this guest takes none: nothing
    // to say of them.
    assert!(!err.contains("exceptions and interrupts"), "{err}");

    let data = env.path("hello.data");
    assert!(!env.path("hello.data.partial").exists());
    assert_eq!(plugin_stat(&data, "complete"), "1");
    assert_eq!(plugin_stat(&data, "events"), records.to_string());
    for f in ["info", "task.txt", "hello.elf.sym", "hello.elf.dbg"] {
        assert!(data.join(f).is_file(), "{f} missing");
    }

    // The map names the ELF at its link address, then the exception entries' module in the
    // last page, then uftrace's [stack] line; its session is task.txt's.
    let (map_path, map) = the_map(&data);
    let lines: Vec<&str> = map.lines().collect();
    assert_eq!(lines.len(), 3, "{map}");
    assert!(lines[0].starts_with("40080000-"), "{map}");
    assert!(lines[0].ends_with(&format!(" {}", elf.display())), "{map}");
    assert!(
        lines[1].starts_with("fffffffff000-") && lines[1].ends_with(" qemu-uftrace-exceptions"),
        "{map}"
    );
    assert!(lines[2].ends_with(" [stack]"), "{map}");
    let sid = map_path.file_name().unwrap().to_string_lossy()[4..20].to_string();
    let tasks = std::fs::read_to_string(data.join("task.txt")).unwrap();
    assert!(tasks.contains(&format!("sid={sid}")), "{tasks}");
    assert!(tasks.contains("tid=1"), "{tasks}");

    // The .sym file: `<hex offset> <type> <name>`, sorted, closed by `__sym_end`.
    let sym = std::fs::read_to_string(data.join("hello.elf.sym")).unwrap();
    let mut last = 0;
    for line in sym.lines() {
        let cols: Vec<&str> = line.split(' ').collect();
        assert_eq!(cols.len(), 3, "{line:?} in\n{sym}");
        let addr = u64::from_str_radix(cols[0], 16).unwrap();
        assert!(addr >= last, "not sorted at {line:?}:\n{sym}");
        last = addr;
    }
    assert!(sym.lines().any(|l| l.ends_with(" T main")), "{sym}");
    assert!(sym.lines().any(|l| l.ends_with(" T factorial")), "{sym}");
    assert!(
        sym.lines().last().unwrap().ends_with(" ? __sym_end"),
        "{sym}"
    );
    let dbg = std::fs::read_to_string(data.join("hello.elf.dbg")).unwrap();
    assert!(dbg.contains("F: ") && dbg.contains("main.c"), "{dbg}");

    // What uftrace makes of it: names, source lines, and who recorded it how.
    let replay = env.uftrace(&["replay", "--no-pager", "--srcline"], "hello.data");
    for f in ["main() {", "factorial() {", "op_mul();"] {
        assert!(replay.contains(f), "{f} missing in\n{replay}");
    }
    assert!(
        replay
            .lines()
            .any(|l| l.contains("square();") && l.contains("main.c:")),
        "no source lines in\n{replay}"
    );
    // Through our own `info` subcommand.
    let info = env
        .cmd()
        .args(["info", "-d", "hello.data"])
        .output()
        .unwrap();
    assert!(info.status.success(), "{}", stderr(&info));
    let info = stdout(&info);
    assert!(
        info.contains("ARM64 (QEMU TCG, qemu-system-aarch64 "),
        "{info}"
    );
    assert!(
        info.contains("qemu-uftrace record -o hello.data -- qemu-system-aarch64 -M virt"),
        "{info}"
    );
    assert!(info.contains(&elf.display().to_string()), "{info}");
    assert!(info.contains("exited with code: 0"), "{info}");
}

/// A trace directory whose name is not UTF-8 and holds `,` and `=` (which QEMU's option
/// parser treats specially), with the plugin cached under such a name too: both reach QEMU
/// and the plugin byte for byte, and the trace replays with names.
#[test]
fn output_directory_of_any_bytes() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let elf = hello();
    let env = Env::new();
    let name = OsStr::from_bytes(b"t=r\xffce,a,,b");
    let o = env
        .cmd()
        .env("XDG_CACHE_HOME", env.path("ca=c,he"))
        .arg("record")
        .arg("-o")
        .arg(name)
        .arg("--")
        .args(qemu_args(&elf))
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(r"look at it with: qemu-uftrace replay -d $'t=r\xFFce,a,,b'"),
        "{err}"
    );
    let data = env.dir().join(name);
    assert_eq!(plugin_stat(&data, "complete"), "1");
    let mut partial = name.to_os_string();
    partial.push(".partial");
    assert!(!env.dir().join(partial).exists());
    let replay = env
        .cmd()
        .arg("replay")
        .arg("-d")
        .arg(name)
        .arg("--no-pager")
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", stderr(&replay));
    let replay = stdout(&replay);
    assert!(replay.contains("factorial() {"), "{replay}");
}

#[test]
fn previous_trace_moves_to_old() {
    let elf = hello();
    let env = Env::new();
    let data = env.path("uftrace.data");
    let old = env.path("uftrace.data.old");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("marker"), b"first").unwrap();
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("marker"), b"older").unwrap();

    let o = env.record(&[], &elf);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(std::fs::read(old.join("marker")).unwrap(), b"first");
    assert!(!data.join("marker").exists());
    assert!(data.join("info").exists());
    assert!(
        err.contains("wrote uftrace.data (the previous one is now uftrace.data.old); look at it with: qemu-uftrace replay\n"),
        "{err}"
    );

    // Again, without any symbol source: warned, with the way out; the trace just made is
    // now the old one.
    let first_map = the_map(&data).0.file_name().unwrap().to_owned();
    let o = env.record(&["--no-auto-symbols"], &elf);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(old.join(&first_map).is_file());
    assert!(!old.join("marker").exists());
    assert!(err.contains("warning: no symbol source"), "{err}");
    assert!(err.contains("--symbols FILE[:OFFSET]"), "{err}");
    assert!(!data.join("hello.elf.sym").exists());

    // A source that gives nothing is named, and the trace is still written (with the
    // names from the ELF).
    std::fs::write(env.path("notes.txt"), "not a symbol table\n").unwrap();
    let o = env.record(&["--symbols", "notes.txt"], &elf);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning: no symbols from notes.txt (--symbols)"),
        "{err}"
    );
    let replay = env.uftrace(&["replay", "--no-pager"], "uftrace.data");
    assert!(replay.contains("main() {"), "{replay}");
}

#[test]
fn guest_exit_status_becomes_ours() {
    let elf = guest("exit3");
    let env = Env::new();
    // `-o t/` names `t`: its staging directory is `t.partial`.
    let o = env.record(&["-o", "t/"], &elf);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("exiting with status 3"),
        "{}",
        stdout(&o)
    );
    assert!(env.path("t/info").exists());
    assert!(!env.path("t.partial").exists());
    assert!(!env.path("t/.partial").exists());
    let info = env.uftrace(&["info"], "t");
    assert!(info.contains("exited with code: 3"), "{info}");
    let replay = env.uftrace(&["replay", "--no-pager"], "t");
    assert!(replay.contains("exit_status();"), "{replay}");
}

#[test]
fn qemu_that_fails_to_start_leaves_nothing() {
    require(QEMU);
    let env = Env::new();
    // An earlier trace must survive the failed run untouched.
    let data = env.path("uftrace.data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("marker"), b"earlier").unwrap();
    let mut qemu = qemu_args(&hello());
    let cpu = qemu.iter().position(|a| a == "-cpu").unwrap() + 1;
    qemu[cpu] = "nosuchcpu".into();
    let plain = Command::new(&qemu[0])
        .args(&qemu[1..])
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-system-aarch64");
    assert!(!plain.status.success(), "QEMU started with an unknown CPU?");

    let o = env.record_cmd(&[], &qemu).output().unwrap();
    assert_eq!(o.status.code(), plain.status.code(), "{}", stderr(&o));
    // QEMU's own complaint reaches the user, then one line of ours.
    let qemu_says = stderr(&plain);
    let qemu_says = qemu_says.lines().next().unwrap_or_default();
    assert!(stderr(&o).contains(qemu_says), "{}", stderr(&o));
    let line = single_error(&o);
    assert!(
        line.contains(&format!(
            "QEMU exited with code {} before recording anything: {qemu_says}; fix the QEMU \
             command line",
            plain.status.code().unwrap()
        )),
        "{line}"
    );
    assert!(!env.path("uftrace.data.partial").exists());
    assert!(!env.path("uftrace.data.old").exists());
    assert_eq!(std::fs::read(data.join("marker")).unwrap(), b"earlier");
}

/// QEMU killed (SIGKILL) halfway through a kernel boot: no plugin.stats, the last buffers
/// lost. We say so, keep what reached the disk, assemble it, and leave a note that
/// `uftrace info` shows; uftrace still reads the trace.
#[test]
fn qemu_killed_mid_boot_leaves_an_incomplete_trace() {
    require(QEMU);
    require("uftrace");
    let env = Env::new();
    let qemu = kernel_boot_args("cortex-a57");
    let mut run = env.spawn_record(&["-o", "k", "--max-depth", "64"], &qemu);
    // A few buffers in: start_kernel has been entered, and the boot is far from over.
    run.wait_for_data(&env.path(&format!("k.partial/{BOOT_TID}.dat")), 8 << 20);
    let (qemu_pid, argv) =
        qemu_child_of(run.pid()).unwrap_or_else(|| panic!("no QEMU child:\n{}", run.stderr()));
    // The plugin option comes first, naming the staging directory and our options; then
    // the command as typed.
    let staging = env.dir().canonicalize().unwrap().join("k.partial");
    assert!(argv[0].ends_with("/qemu-system-aarch64"), "{argv:?}");
    assert!(
        argv[2].starts_with(&format!(
            "file={}",
            env.path("cache/qemu-uftrace/plugins/").display()
        )),
        "{argv:?}"
    );
    // Then the recording's own options, after the plugin file and the staging directory:
    // the CLI's sample of the host's time-stamp counter (`tsc=TICKS:NS`, x86-64), the default
    // size cap (`max_size=BYTES`), the kernel's function entries (`entries_file=`) and the
    // anchor its randomised base is found by (`kaslr_file=`).
    let head = format!(".so,out={},clock=auto,max_depth=64", staging.display());
    let at = argv[2].find(&head).unwrap_or_else(|| panic!("{argv:?}"));
    let rest = &argv[2][at + head.len()..];
    let mut keys = Vec::new();
    for opt in rest.split(',').filter(|o| !o.is_empty()) {
        let (key, value) = opt
            .split_once('=')
            .unwrap_or_else(|| panic!("{opt}: {argv:?}"));
        match key {
            "tsc" => assert!(
                value.split(':').count() == 2 && value.split(':').all(|n| n.parse::<u64>().is_ok()),
                "{argv:?}"
            ),
            "max_size" => assert!(value.parse::<u64>().is_ok_and(|n| n > 0), "{argv:?}"),
            // The task layout, from the stock image's own BTF (no --symbols vmlinux given);
            // `task_state`: where a task's end (TASK_DEAD) shows, to free its context.
            "task_comm" | "task_pid" | "task_tgid" | "task_state" => {
                assert!(value.parse::<u64>().is_ok(), "{argv:?}")
            }
            // Where the guest's processes map their files, and where its kernel modules load
            // and go, watched by the same layout.
            "proc_watch" | "proc_offsets" | "mod_watch" | "mod_offsets" => {
                assert!(!value.is_empty(), "{argv:?}")
            }
            // `init_task` (0: arm64's kallsyms has no data symbols) and the 16 offsets the
            // walk at a switch on reads processes by.
            "proc_walk" => assert!(
                value.split(':').count() == 17
                    && value.split(':').all(|n| n.parse::<u64>().is_ok()),
                "{argv:?}"
            ),
            // The munmap wrapper and its pt_regs offsets: ADDR:START:LEN.
            "munmap_watch" => assert!(
                value.split(':').count() == 3 && value.split(':').all(|n| n.parse::<u64>().is_ok()),
                "{argv:?}"
            ),
            "entries_file" | "task_slot_file" | "kaslr_file" | "switch" => {
                assert!(
                    value.starts_with(&staging.display().to_string()),
                    "{argv:?}"
                )
            }
            _ => panic!("unexpected plugin option {opt}: {argv:?}"),
        }
        keys.push(key);
    }
    for key in [
        "task_comm",
        "task_pid",
        "task_tgid",
        "task_state",
        "proc_watch",
        "mod_watch",
        "entries_file",
        "kaslr_file",
    ] {
        assert!(
            keys.contains(&key),
            "no {key} from the image's BTF: {argv:?}"
        );
    }
    assert_eq!(argv[3..], qemu[1..], "{argv:?}");
    signal(qemu_pid, libc::SIGKILL);

    let status = run.wait();
    let err = run.stderr();
    assert_eq!(status.code(), Some(128 + 9), "{err}");
    assert!(
        err.contains(
            "warning: INCOMPLETE TRACE: QEMU killed by signal 9 before the plugin flushed its \
             buffers (no plugin.stats); kept "
        ),
        "{err}"
    );
    assert!(err.contains("wrote k; look at it with"), "{err}");
    assert!(!err.contains("the guest made "), "{err}");

    let data = env.path("k");
    assert!(!env.path("k.partial").exists());
    assert!(!data.join("plugin.stats").exists());
    // vCPU 0's boot code, under its own id when the kernel had started tasks by then.
    let boot = [data.join("1.dat"), data.join(format!("{BOOT_TID}.dat"))]
        .into_iter()
        .find(|p| p.exists())
        .expect("vCPU 0's boot records");
    assert!(assert_records(&boot) >= 8 << 20);
    for f in ["info", "task.txt", "note.txt", "vmlinuz.sym"] {
        assert!(data.join(f).is_file(), "{f} missing");
    }
    let info = env.uftrace(&["info"], "k");
    assert!(
        info.contains("INCOMPLETE TRACE: QEMU killed by signal 9"),
        "{info}"
    );
    assert!(info.contains("vmlinuz"), "{info}");
    // The Image header's `b primary_entry`, its `b __primary_switch` and that one's `br x8`
    // are jumps into function entries: start_kernel sits three levels under them.
    let replay = env.uftrace(&["replay", "--no-pager", "-D", "4"], "k");
    assert!(replay.contains("|   __primary_switch() {"), "{replay}");
    assert!(replay.contains("|     __primary_switched() {"), "{replay}");
    assert!(replay.contains("|       start_kernel() {"), "{replay}");
    assert!(
        !run.stdout().contains("Kernel panic"),
        "the boot ended before the kill"
    );
}

/// Ctrl-C in a terminal signals the whole foreground process group: QEMU stops (and its
/// plugin flushes), we survive it and assemble a complete trace.
#[test]
fn ctrl_c_stops_qemu_but_not_us() {
    let elf = guest("spin");
    let env = Env::new();
    let mut run = env.spawn_record(&["-o", "int"], &qemu_args(&elf));
    run.wait_for_data(&env.path(&format!("int.partial/{BOOT_TID}.dat")), 1);
    signal(-run.pid(), libc::SIGINT);
    let status = run.wait();
    let err = run.stderr();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("terminating on signal 2"), "{err}");
    assert!(run.stdout().contains("spinning until stopped"));
    check_stopped_trace(&env, "int", &err);
}

/// The same race, in process: a signal sent to the process group reaches QEMU and us
/// together, and QEMU may stop, and be reaped, before our handler runs (the test above once
/// saw `record` end by SIGINT under the full suite's load). Until the run has seen its child
/// end, such a signal is dropped: this test process survives it, the child a zombie and
/// then reaped.
#[test]
fn a_signal_that_comes_as_qemu_ends_does_not_end_us() {
    use qemu_uftrace::signal_scope::SignalScope;
    let scope = SignalScope::qemu().expect("the run's signal handling");
    let mut child = Command::new("true").spawn().expect("run true");
    scope.child_started(child.id());
    // SAFETY: waitid writes into `info` only; WNOWAIT leaves the child a zombie.
    let exited = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_PID,
            child.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        )
    };
    assert_eq!(exited, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: raise runs the handler on this thread before it returns.
    assert_eq!(unsafe { libc::raise(libc::SIGINT) }, 0);
    child.wait().expect("reap true");
    assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
    assert_eq!(
        scope.forwarded(),
        None,
        "nothing passed on to a child that is gone"
    );
    scope.child_reaped();
    drop(scope);
}

/// SIGKILL of `record` itself (no handler can run) must not leave QEMU running unwatched:
/// QEMU gets SIGTERM from the kernel when we die, stops, and its plugin flushes into the
/// staging directory; the next `record` into the same directory says what is there.
#[test]
fn killing_record_stops_qemu_and_the_next_record_explains() {
    let elf = guest("spin");
    let env = Env::new();
    let mut run = env.spawn_record(&["-o", "killed"], &qemu_args(&elf));
    let staging = env.path("killed.partial");
    run.wait_for_data(&staging.join(format!("{BOOT_TID}.dat")), 1);
    let needle = format!("out={}", staging.display());
    assert_eq!(pids_with_arg(&needle).len(), 1, "QEMU is not running");
    signal(run.pid(), libc::SIGKILL);
    run.wait();
    let deadline = Instant::now() + PATIENCE;
    while !pids_with_arg(&needle).is_empty() {
        assert!(
            Instant::now() < deadline,
            "QEMU still runs after record was killed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // QEMU stopped properly: its plugin wrote its statistics.
    assert_eq!(plugin_stat(&staging, "complete"), "1");
    let again = env.record(&["-o", "killed"], &elf);
    assert_eq!(again.status.code(), Some(1));
    let line = single_error(&again);
    assert!(
        line.contains("killed.partial already exists: an earlier recording was interrupted"),
        "{line}"
    );
}

/// SIGTERM sent to us alone reaches QEMU, which stops as on Ctrl-C.
#[test]
fn sigterm_is_forwarded_to_qemu() {
    let elf = guest("spin");
    let env = Env::new();
    let mut run = env.spawn_record(&["-o", "term"], &qemu_args(&elf));
    run.wait_for_data(&env.path(&format!("term.partial/{BOOT_TID}.dat")), 1);
    signal(run.pid(), libc::SIGTERM);
    let status = run.wait();
    let err = run.stderr();
    assert_eq!(status.code(), Some(0), "{err}");
    // QEMU names the sender: us.
    assert!(
        err.contains(&format!("terminating on signal 15 from pid {}", run.pid())),
        "{err}"
    );
    check_stopped_trace(&env, "term", &err);
}

/// The pid of a child of `parent` running `program` (by the file name of its argv[0]).
fn child_running(parent: i32, program: &str) -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let ppid: i32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let argv0 = cmdline.split(|&b| b == 0).next()?;
            let name =
                Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(argv0))
                    .file_name()?;
            (ppid == parent && name == program).then_some(pid)
        })
}

/// The state letter and parent pid in a `/proc/…/stat` text ("pid (comm) state ppid …").
fn state_and_ppid(stat: &str) -> (Option<&str>, Option<i32>) {
    let mut rest = stat
        .rsplit_once(')')
        .map_or("", |(_, r)| r)
        .split_whitespace();
    let state = rest.next();
    (state, rest.next().and_then(|p| p.parse::<i32>().ok()))
}

/// How many children of `parent` have not exited yet (zombies do not count). A process is a
/// zombie, one its parent can reap (and so knows to have exited), only once every thread is
/// gone: QEMU's main thread shows `Z` while its other threads still tear down, so every
/// thread in `/proc/PID/task` is looked at.
fn live_children(parent: i32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|entry| {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                return false;
            };
            if state_and_ppid(&stat).1 != Some(parent) {
                return false;
            }
            let Ok(tasks) = std::fs::read_dir(entry.path().join("task")) else {
                return false;
            };
            tasks.flatten().any(|t| {
                std::fs::read_to_string(t.path().join("stat"))
                    .is_ok_and(|s| !matches!(state_and_ppid(&s).0, Some("Z" | "X")))
            })
        })
        .count()
}

/// Waits for `record` to exit after a signal that must end it: promptly, by that signal.
fn ended_by(run: &mut Running, sig: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = run.child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            run.kill_group();
            panic!("record ignored signal {sig}:\n{}", run.stderr());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(sig), "{status}:\n{}", run.stderr());
}

/// Once QEMU has exited, SIGTERM, SIGHUP and Ctrl-C end `record` as they end any program,
/// here while it waits for a symbol source that never comes (a FIFO nobody writes to). The
/// recorded data stays in DIR.partial, and the next `record` into DIR says what it is.
/// Under `nohup` (SIGHUP ignored from the start) SIGHUP stays ignored.
#[test]
fn signals_after_qemu_exits_end_record() {
    let elf = hello();
    let env = Env::new();
    let fifo = env.path("never.fifo");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // `record` into `name`, stalled on the FIFO once QEMU is done.
    let stalled = |name: &str, nohup: bool| {
        let mut c = env.record_cmd(&["-o", name, "--symbols", "never.fifo"], &qemu_args(&elf));
        if nohup {
            // SAFETY: signal() is async-signal-safe, as pre_exec requires.
            unsafe {
                c.pre_exec(|| {
                    libc::signal(libc::SIGHUP, libc::SIG_IGN);
                    Ok(())
                })
            };
        }
        let mut run = env.spawn(c);
        let staging = env.path(&format!("{name}.partial"));
        // QEMU is done: the plugin has written its statistics, and QEMU has exited (a zombie
        // at most; an exiting process already has no command line, so its state is read).
        let deadline = Instant::now() + PATIENCE;
        while !staging.join("plugin.stats").exists() || live_children(run.pid()) > 0 {
            assert!(
                Instant::now() < deadline,
                "QEMU did not end:\n{}",
                run.stderr()
            );
            assert!(run.child.try_wait().unwrap().is_none(), "{}", run.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
        run
    };
    // Ctrl-C: SIGINT to the whole foreground process group, as a terminal sends it.
    for (sig, group) in [
        (libc::SIGTERM, false),
        (libc::SIGHUP, false),
        (libc::SIGINT, true),
    ] {
        let name = format!("sig{sig}");
        let mut run = stalled(&name, false);
        signal(if group { -run.pid() } else { run.pid() }, sig);
        ended_by(&mut run, sig);
        assert!(run.stdout().contains("Goodbye."), "{}", run.stdout());
        assert!(!env.path(&name).exists());
        let staging = env.path(&format!("{name}.partial"));
        assert_eq!(plugin_stat(&staging, "complete"), "1");
        assert!(assert_records(&staging.join(format!("{BOOT_TID}.dat"))) > 0);
    }
    let mut run = stalled("nohup", true);
    signal(run.pid(), libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        run.child.try_wait().unwrap().is_none(),
        "SIGHUP ended record under nohup"
    );
    signal(run.pid(), libc::SIGTERM);
    ended_by(&mut run, libc::SIGTERM);

    let again = env.record(&["-o", "sig15"], &elf);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    let line = single_error(&again);
    assert!(
        line.contains("sig15.partial already exists: an earlier recording was interrupted"),
        "{line}"
    );
}

/// SIGTERM during `--then` ends `record` at once, with the trace already in place: here
/// `uftrace replay` blocks on a full pipe, as a long replay would.
#[test]
fn sigterm_during_then_ends_record() {
    let elf = guest("spin");
    let env = Env::new();
    let err = env.path("record.stderr");
    let mut c = env.record_cmd(&["-o", "then", "--then", "replay"], &qemu_args(&elf));
    // A pipe this test never reads: replay fills it and waits.
    c.stdout(Stdio::piped())
        .stderr(File::create(&err).unwrap())
        .process_group(0);
    let mut run = Running {
        child: c.spawn().expect("start qemu-uftrace record"),
        out: env.path("no.stdout"),
        err,
    };
    run.wait_for_data(&env.path(&format!("then.partial/{BOOT_TID}.dat")), 1);
    let qemu = child_running(run.pid(), QEMU).expect("QEMU runs");
    signal(qemu, libc::SIGTERM);
    let deadline = Instant::now() + PATIENCE;
    let uftrace = loop {
        if let Some(pid) = child_running(run.pid(), "uftrace") {
            break pid;
        }
        assert!(Instant::now() < deadline, "no uftrace:\n{}", run.stderr());
        assert!(run.child.try_wait().unwrap().is_none(), "{}", run.stderr());
        std::thread::sleep(Duration::from_millis(20));
    };
    signal(run.pid(), libc::SIGTERM);
    ended_by(&mut run, libc::SIGTERM);
    // uftrace, left waiting on the pipe, goes with the test.
    // SAFETY: kill has no memory effects; uftrace is a process this test started.
    unsafe { libc::kill(uftrace, libc::SIGKILL) };
    assert!(
        run.stderr().contains("wrote then; look at it with"),
        "{}",
        run.stderr()
    );
    assert!(!env.path("then.partial").exists());
    assert_eq!(plugin_stat(&env.path("then"), "complete"), "1");
}

/// A trace of `spin` that QEMU ended properly: complete, assembled, readable.
fn check_stopped_trace(env: &Env, name: &str, err: &str) {
    let data = env.path(name);
    assert!(!env.path(&format!("{name}.partial")).exists());
    assert_eq!(plugin_stat(&data, "complete"), "1");
    let (.., records) = summary_counts(err);
    assert_eq!(assert_records(&data.join("1.dat")), records * 16);
    assert!(!err.contains("INCOMPLETE"), "{err}");
    assert!(data.join("info").is_file() && data.join("spin.elf.sym").is_file());
    let replay = env.uftrace(&["replay", "--no-pager", "-D", "3"], name);
    assert!(replay.contains("spin_tick() {"), "{replay}");
    assert!(replay.contains("spin_work();"), "{replay}");
}

#[test]
fn then_runs_uftrace_report() {
    let elf = hello();
    let env = Env::new();
    let o = env.record(&["--then", "report"], &elf);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("Total time"), "{out}");
    for f in ["main", "factorial", "op_mul"] {
        assert!(
            out.lines().any(|l| l.trim_end().ends_with(f)),
            "report lacks {f}:\n{out}"
        );
    }
}

/// `symbols` on a trace recorded without names: an offset places the ELF's map line, a
/// second run replaces that line (not a second one), and replay shows the names.
#[test]
fn symbols_subcommand_updates_the_map() {
    let elf = hello();
    let env = Env::new();
    let o = env.record(&["-o", "s", "--no-auto-symbols"], &elf);
    assert!(o.status.success(), "{}", stderr(&o));
    let (map_path, map) = the_map(&env.path("s"));
    assert_eq!(map.lines().count(), 2, "{map}"); // exception entries, [stack]
    let replay = env.uftrace(&["replay", "--no-pager"], "s");
    assert!(!replay.contains("main() {"), "{replay}");
    assert!(replay.contains("| <4008"), "{replay}");

    let symbols = |source: String, prefix: bool| {
        let mut c = env.cmd();
        c.args(["symbols", "-d", "s"]);
        if prefix {
            c.arg("--prefix");
        }
        let o = c.arg(source).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let map = std::fs::read_to_string(&map_path).unwrap();
        (stderr(&o), map)
    };
    // Loaded 0x1000 higher than linked: the line moves with it.
    let (_, map) = symbols(format!("{}:0x1000", elf.display()), false);
    let lines: Vec<&str> = map.lines().collect();
    assert_eq!(lines.len(), 3, "{map}");
    assert!(lines[0].starts_with("40081000-"), "{map}");
    assert!(lines[0].ends_with(&format!(" {}", elf.display())), "{map}");
    assert!(map.ends_with("[stack]\n"), "{map}");
    let replay = env.uftrace(&["replay", "--no-pager"], "s");
    assert!(!replay.contains("main() {"), "{replay}");

    // At its link address, with image-prefixed names: the line is replaced.
    let (err, map) = symbols(elf.display().to_string(), true);
    assert!(err.contains("replacing "), "{err}");
    let lines: Vec<&str> = map.lines().collect();
    assert_eq!(lines.len(), 3, "{map}");
    assert!(lines[0].starts_with("40080000-"), "{map}");
    assert!(map.ends_with("[stack]\n"), "{map}");
    let replay = env.uftrace(&["replay", "--no-pager"], "s");
    assert!(replay.contains("hello.elf:main() {"), "{replay}");
    assert!(replay.contains("hello.elf:factorial() {"), "{replay}");
    assert!(!replay.contains("| <"), "{replay}");
}

/// Without --max-size the plugin stops writing at 4 GiB, or at half the free space of the
/// trace's filesystem when that is less: a guest that never ends (a kernel looping after
/// its panic) must not fill the disk.
#[test]
fn the_default_cap_is_a_few_gib_at_most() {
    let elf = guest("spin");
    let env = Env::new();
    let mut run = env.spawn_record(&["-o", "cap"], &qemu_args(&elf));
    run.wait_for_data(&env.path(&format!("cap.partial/{BOOT_TID}.dat")), 1);
    let (_, argv) =
        qemu_child_of(run.pid()).unwrap_or_else(|| panic!("no QEMU child:\n{}", run.stderr()));
    let cap: u64 = argv[2]
        .split(',')
        .find_map(|o| o.strip_prefix("max_size="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no max_size= in {argv:?}"));
    let st = rustix::fs::statvfs(env.dir()).expect("statvfs");
    let half_free = st.f_bavail * st.f_frsize / 2;
    assert!(cap > 0 && cap <= 4 << 30, "{cap}");
    // Other processes write meanwhile: the half of what is free now is close to the cap's.
    if half_free > (5 << 30) {
        assert_eq!(cap, 4 << 30, "{argv:?}");
    } else {
        assert!(
            cap.abs_diff(half_free) < 1 << 30,
            "{cap} against {half_free}"
        );
    }
    signal(run.pid(), libc::SIGTERM);
    assert_eq!(run.wait().code(), Some(0), "{}", run.stderr());
    // Not reached: the summary names no cap.
    assert!(!run.stderr().contains("size cap"), "{}", run.stderr());
}

/// A Linux kernel whose panic would not end QEMU (no `panic=` with a timeout, no
/// `-no-reboot`) would be recorded until the size cap: said before QEMU starts, with the
/// way out. Here QEMU fails at once (a drive it cannot open), after the warning.
#[test]
fn a_kernel_whose_panic_never_ends_qemu_is_warned_about() {
    require(QEMU);
    let warning = |drop_panic: bool, drop_no_reboot: bool, extra: &[&str]| {
        let env = Env::new();
        let mut argv: Vec<String> = kernel_boot_args("cortex-a57")
            .into_iter()
            .filter(|a| !(drop_no_reboot && a == "-no-reboot"))
            .map(|a| {
                if drop_panic {
                    a.replace(" panic=-1", "")
                } else {
                    a
                }
            })
            .collect();
        argv.extend(["-drive".into(), "file=/nonexistent/disk.img,if=none".into()]);
        let mut opts = vec!["-o", "p"];
        opts.extend(extra);
        let o = env.record_cmd(&opts, &argv).output().unwrap();
        let err = stderr(&o);
        assert_ne!(o.status.code(), Some(0), "{err}");
        let complaint = err
            .find("Could not open '/nonexistent/disk.img'")
            .unwrap_or_else(|| panic!("QEMU did not fail as expected:\n{err}"));
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("a kernel that panics"))
            .collect();
        if let Some(l) = lines.first() {
            assert!(err.find(l).unwrap() < complaint, "{err}");
        }
        assert!(lines.len() <= 1, "{err}");
        lines.first().map(|l| l.to_string())
    };
    let both = warning(true, true, &[]).expect("a warning without panic= and -no-reboot");
    assert_eq!(
        both,
        "qemu-uftrace: warning: without panic=-1 in -append and without -no-reboot, a kernel \
         that panics waits (or reboots) for ever and the recording runs on to the size cap; \
         add both"
    );
    let reboots = warning(false, true, &[]).expect("a warning without -no-reboot");
    assert!(reboots.ends_with("; add -no-reboot"), "{reboots}");
    let waits = warning(true, false, &[]).expect("a warning without panic=");
    assert!(waits.ends_with("; add panic=-1 to -append"), "{waits}");
    assert_eq!(warning(false, false, &[]), None);
    // A cap that stops QEMU ends the recording anyway.
    assert_eq!(warning(true, true, &["--max-size", "1G,exit"]), None);
}

/// `kill -INT` (or `timeout -s INT`) sent to us alone stops QEMU as SIGTERM does: the
/// terminal's Ctrl-C reaches QEMU by itself, but this SIGINT would reach nobody else.
#[test]
fn sigint_sent_to_record_alone_stops_qemu() {
    let elf = guest("spin");
    let env = Env::new();
    let mut run = env.spawn_record(&["-o", "intr"], &qemu_args(&elf));
    run.wait_for_data(&env.path(&format!("intr.partial/{BOOT_TID}.dat")), 1);
    signal(run.pid(), libc::SIGINT);
    let status = run.wait();
    let err = run.stderr();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("terminating on signal 2 from pid {}", run.pid())),
        "{err}"
    );
    check_stopped_trace(&env, "intr", &err);
}

/// A guest that runs but never calls (here raw code that branches to itself, which QEMU
/// loads as is), stopped from outside: the error says that QEMU was stopped by a signal,
/// not that it exited by itself.
#[test]
fn a_guest_stopped_before_any_call_is_said_so() {
    require(QEMU);
    let env = Env::new();
    let blob = env.path("loop.bin");
    std::fs::write(&blob, [0u8, 0, 0, 0x14]).unwrap(); // b .
    let argv: Vec<String> = [
        QEMU,
        "-M",
        "virt",
        "-cpu",
        "cortex-a57",
        "-display",
        "none",
        "-nic",
        "none",
    ]
    .map(String::from)
    .into_iter()
    .chain(["-kernel".into(), blob.display().to_string()])
    .collect();
    let mut run = env.spawn_record(&["-o", "never"], &argv);
    // The plugin is installed and its writer runs (its first status is written), and QEMU
    // has its own SIGTERM handler (before, SIGTERM simply kills it).
    run.wait_for_data(&env.path("never.partial/plugin.status"), 1);
    let deadline = Instant::now() + PATIENCE;
    while !qemu_child_of(run.pid()).is_some_and(|(pid, _)| catches(pid, libc::SIGTERM)) {
        assert!(Instant::now() < deadline, "QEMU never took SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(run.pid(), libc::SIGTERM);
    let status = run.wait();
    let err = run.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("qemu-uftrace: error: "))
        .unwrap_or_else(|| panic!("no error line:\n{err}"));
    assert!(
        line.starts_with(
            "qemu-uftrace: error: no call or return was recorded before QEMU was stopped by \
             signal 15 (SIGTERM); "
        ),
        "{line}"
    );
    assert!(!line.contains("exited with code 0"), "{line}");
    assert!(!env.path("never").exists() && !env.path("never.partial").exists());
}

/// Whether process `pid` has a handler for `sig` (`SigCgt` in /proc/PID/status).
fn catches(pid: i32, sig: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let mask = s
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&mask, 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (sig - 1)) != 0)
}

/// The shared recordings (`common::shared`, issue 35): callers asking at once for the same
/// recording, each through its own lock file description as separate test binaries would,
/// wait for one recording and all read the same directory, console and stderr; a different
/// option is another recording.
#[test]
fn shared_recordings_are_recorded_once_for_concurrent_callers() {
    use common::shared::record_in;
    require(QEMU);
    let root = tempfile::tempdir().expect("temp dir");
    let argv = qemu_args(&hello());
    let recorded = || {
        std::fs::read_to_string(root.path().join("recorded.log"))
            .expect("recorded.log")
            .lines()
            .count()
    };
    let got: Vec<common::shared::Recording> = std::thread::scope(|s| {
        let callers: Vec<_> = (0..4)
            .map(|_| s.spawn(|| record_in(root.path(), &argv, &[])))
            .collect();
        callers.into_iter().map(|c| c.join().unwrap()).collect()
    });
    assert_eq!(recorded(), 1);
    for r in &got {
        assert_eq!(r.dir, got[0].dir);
        assert!(
            r.console.contains("Hello from qemu-uftrace!"),
            "{}",
            r.console
        );
        assert_eq!(r.stderr, got[0].stderr);
    }
    assert!(got[0].dir.join("1.dat").is_file());
    // Nothing half-written is left beside it.
    let partial: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
        .collect();
    assert!(partial.is_empty(), "{partial:?}");
    // Later callers read it without recording; other options are another recording.
    let again = record_in(root.path(), &argv, &[]);
    assert_eq!(again.dir, got[0].dir);
    assert_eq!(recorded(), 1);
    let other = record_in(root.path(), &argv, &["--clock", "insn"]);
    assert_ne!(other.dir, got[0].dir);
    assert_eq!(recorded(), 2);
    // A copy to write into is the trace's bytes, apart from the shared one.
    let (_tmp, copy) = got[0].private_copy();
    assert_eq!(
        std::fs::read(copy.join("1.dat")).unwrap(),
        std::fs::read(got[0].dir.join("1.dat")).unwrap()
    );
}

/// A shared recording that fails fails each caller with record's own message, and is not
/// kept: every caller tries again, and nothing is left but the lock and the log.
#[test]
fn a_failed_shared_recording_fails_each_caller_and_is_not_kept() {
    use common::shared::record_in;
    require(QEMU);
    let root = tempfile::tempdir().expect("temp dir");
    let mut argv = qemu_args(&hello());
    let cpu = argv.iter().position(|a| a == "-cpu").unwrap() + 1;
    argv[cpu] = "nosuchcpu".into();
    let messages: Vec<String> = std::thread::scope(|s| {
        let callers: Vec<_> = (0..2)
            .map(|_| s.spawn(|| record_in(root.path(), &argv, &[])))
            .collect();
        callers
            .into_iter()
            .map(|c| {
                let payload = c.join().expect_err("a failed recording fails its caller");
                common::panic_message(&*payload)
            })
            .collect()
    });
    for m in &messages {
        assert!(
            m.starts_with("record [] -- [") && m.contains("nosuchcpu"),
            "{m}"
        );
        assert!(m.contains(" failed (exit status: "), "{m}");
    }
    let mut left: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert!(
        left.len() == 2 && left[0].ends_with(".lock") && left[1] == "recorded.log",
        "{left:?}"
    );
    let log = std::fs::read_to_string(root.path().join("recorded.log")).unwrap();
    assert_eq!(log.lines().count(), 2, "each caller records again:\n{log}");
}
