//! The whole `record` path with a stand-in QEMU (a shell script that writes what the plugin
//! would): directory assembly and rotation, exit statuses, signals, incomplete traces.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

struct Env {
    home: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let home = tempfile::tempdir().unwrap();
        fake_qemu(home.path(), "qemu-system-aarch64");
        std::fs::write(home.path().join("fake.dat"), dat_bytes()).unwrap();
        std::fs::write(home.path().join("System.map"), system_map()).unwrap();
        Env { home }
    }

    fn dir(&self) -> &Path {
        self.home.path()
    }

    fn cmd(&self) -> Command {
        let mut c = qemu_uftrace(self.dir());
        c.current_dir(self.dir())
            .env("PATH", path_with(self.dir()))
            .env("FAKE_DAT", self.dir().join("fake.dat"));
        c
    }

    /// `record --plugin <any file> [extra] -- qemu-system-aarch64 -M virt -kernel Image`
    fn record(&self, extra: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.cmd();
        c.args(["record", "--plugin", BIN]).args(extra).args([
            "--",
            "qemu-system-aarch64",
            "-M",
            "virt",
            "-nographic",
            "-kernel",
            "Image",
        ]);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    fn uftrace(&self, args: &[&str]) -> Option<String> {
        if !have("uftrace") {
            return None;
        }
        let o = Command::new("uftrace")
            .args(args)
            .arg("--no-pager")
            .current_dir(self.dir())
            .output()
            .unwrap();
        assert!(o.status.success(), "uftrace {args:?}: {}", stderr(&o));
        Some(stdout(&o))
    }
}

#[test]
fn records_assembles_and_names_functions() {
    let env = Env::new();
    let o = env.record(&["--symbols", "System.map", "--max-depth", "64"], &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    // The plugin option goes first, with the staging directory and the options.
    let argv = std::fs::read_to_string(env.dir().join("argv")).unwrap();
    let lines: Vec<&str> = argv.lines().collect();
    assert_eq!(lines[0], "-plugin");
    assert!(lines[1].starts_with(BIN), "{argv}");
    assert!(
        lines[1].ends_with("/uftrace.data.partial,clock=insn,max_depth=64"),
        "{argv}"
    );
    assert_eq!(&lines[2..4], ["-M", "virt"]);

    let data = env.dir().join("uftrace.data");
    for f in [
        "info",
        "task.txt",
        "1.dat",
        "System.map.sym",
        "plugin.stats",
    ] {
        assert!(data.join(f).exists(), "{f} missing");
    }
    assert!(!env.dir().join("uftrace.data.partial").exists());
    assert!(
        err.contains("recorded 8 events (4 calls, 4 returns) on 1 vCPU"),
        "{err}"
    );
    assert!(err.contains("resyncs: 2"), "{err}");
    assert!(err.contains("future_key: 5"), "{err}");
    // Image does not exist: named, with the way out, and the trace is still written.
    assert!(
        err.contains("warning: no symbols from Image (-kernel)"),
        "{err}"
    );

    if let Some(replay) = env.uftrace(&["replay"]) {
        for f in [
            "start_kernel() {",
            "setup_arch();",
            "leaf();",
            "} /* rest_init */",
        ] {
            assert!(replay.contains(f), "{f} not in\n{replay}");
        }
    }
    if let Some(info) = env.uftrace(&["info"]) {
        assert!(
            info.contains("ARM64 (QEMU TCG, qemu-system-aarch64 10.0.2)"),
            "{info}"
        );
        assert!(info.contains("qemu-uftrace record --plugin"), "{info}");
        assert!(info.contains("/Image"), "{info}");
    }
}

#[test]
fn previous_trace_moves_to_old() {
    let env = Env::new();
    let data = env.dir().join("uftrace.data");
    let old = env.dir().join("uftrace.data.old");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("marker"), b"first").unwrap();
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("marker"), b"older").unwrap();

    let o = env.record(&[], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(old.join("marker")).unwrap(), b"first");
    assert!(!data.join("marker").exists());
    assert!(data.join("info").exists());
    let err = stderr(&o);
    assert!(err.contains("the previous one is now"), "{err}");
    // No source at all: warned, with the way out.
    let o = env
        .cmd()
        .args([
            "record",
            "--plugin",
            BIN,
            "--",
            "qemu-system-aarch64",
            "-M",
            "virt",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(stderr(&o).contains("no symbol source"), "{}", stderr(&o));
    assert!(stderr(&o).contains("--symbols FILE[:OFFSET]"));
}

#[test]
fn qemu_exit_status_becomes_ours() {
    let env = Env::new();
    let o = env.record(&["-o", "t/"], &[("FAKE_EXIT", "3")]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(env.dir().join("t/info").exists());
}

#[test]
fn missing_stats_means_incomplete() {
    let env = Env::new();
    // Half a record at the end, as if QEMU died while writing.
    let mut bytes = dat_bytes();
    bytes.truncate(bytes.len() - 5);
    std::fs::write(env.dir().join("fake.dat"), bytes).unwrap();
    let o = env.record(
        &["-o", "inc"],
        &[("FAKE_NO_STATS", "1"), ("FAKE_EXIT", "1")],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("warning: INCOMPLETE TRACE"), "{err}");
    let data = env.dir().join("inc");
    assert_eq!(std::fs::metadata(data.join("1.dat")).unwrap().len(), 7 * 16);
    if let Some(info) = env.uftrace(&["info", "-d", "inc"]) {
        assert!(info.contains("INCOMPLETE TRACE"), "{info}");
    }
}

#[test]
fn nothing_recorded_leaves_nothing_behind() {
    let env = Env::new();
    let o = env.record(&[], &[("FAKE_DAT", ""), ("FAKE_EXIT", "1")]);
    assert_eq!(o.status.code(), Some(1));
    let line = single_error(&o);
    assert!(
        line.contains("no call or return was recorded: QEMU exited with code 1"),
        "{line}"
    );
    assert!(!env.dir().join("uftrace.data.partial").exists());
    assert!(!env.dir().join("uftrace.data").exists());
}

fn spawn_in_own_group(mut c: Command) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    c.process_group(0);
    c.spawn().unwrap()
}

fn wait_for(path: &Path) {
    for _ in 0..200 {
        if path.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("{} never appeared", path.display());
}

/// Ctrl-C goes to the whole foreground group: QEMU stops (and flushes), we survive it and
/// assemble the trace.
#[test]
fn ctrl_c_stops_qemu_but_not_us() {
    let env = Env::new();
    let mut c = env.cmd();
    c.args([
        "record",
        "--plugin",
        BIN,
        "-o",
        "int",
        "--",
        "qemu-system-aarch64",
    ])
    .env("FAKE_SLEEP", "30")
    .stderr(std::process::Stdio::piped());
    let child = spawn_in_own_group(c);
    wait_for(&env.dir().join("int.partial/1.dat"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: signalling the process group we created.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(env.dir().join("int/info").exists());
    assert!(stderr(&o).contains("recorded 8 events"));
}

/// SIGTERM sent to us alone reaches QEMU.
#[test]
fn sigterm_is_forwarded() {
    let env = Env::new();
    let mut c = env.cmd();
    c.args([
        "record",
        "--plugin",
        BIN,
        "-o",
        "term",
        "--",
        "qemu-system-aarch64",
    ])
    .env("FAKE_SLEEP", "30")
    .stderr(std::process::Stdio::piped());
    let child = spawn_in_own_group(c);
    wait_for(&env.dir().join("term.partial/1.dat"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(env.dir().join("term/info").exists());
}

#[test]
fn then_runs_uftrace() {
    if !have("uftrace") {
        return;
    }
    let env = Env::new();
    let o = env.record(&["--symbols", "System.map", "--then", "report"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("start_kernel"), "{out}");
}

#[test]
fn symbols_subcommand_updates_the_map() {
    let env = Env::new();
    let o = env.record(&["-o", "s"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = env
        .cmd()
        .args(["symbols", "-d", "s", "--prefix", "System.map"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let maps: Vec<_> = std::fs::read_dir(env.dir().join("s"))
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.starts_with("sid-").then_some(n)
        })
        .collect();
    assert_eq!(maps.len(), 1);
    let map = std::fs::read_to_string(env.dir().join("s").join(&maps[0])).unwrap();
    assert!(map.contains("800080010000-"), "{map}");
    assert!(map.ends_with("[stack]\n"), "{map}");
    // Again: the line is replaced, not duplicated.
    let o = env
        .cmd()
        .args(["symbols", "-d", "s", "--prefix", "System.map"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let map2 = std::fs::read_to_string(env.dir().join("s").join(&maps[0])).unwrap();
    assert_eq!(map2.lines().count(), 2, "{map2}");
    if let Some(replay) = env.uftrace(&["replay", "-d", "s"]) {
        assert!(replay.contains("System.map:start_kernel() {"), "{replay}");
    }
}
