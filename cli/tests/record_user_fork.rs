//! `qemu-uftrace record -- qemu-aarch64 PROGRAM` where the program forks and its child
//! execs another program (`tests/guests/user/forkexec.c`, `execd.c`), read back with real
//! uftrace: the trace is laid out as `uftrace record` lays out a native fork and exec (the
//! parent's session, a FORK line for the child, which carries on in it, and a session of
//! its own for the exec'd program, with that program's names).

mod common;

use common::user::record_ok;
use qemu_uftrace_tests::replay::{exactly, replay_events, report_calls};
use qemu_uftrace_tests::{cached, guest_build_dir, make_guests};
use qemu_uftrace_tests::{user_guest_elf, user_guest_elf_riscv64, user_qemu, user_qemu_riscv64};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The number after `key` in a line of the program's output.
fn field(stdout: &str, prefix: &str, key: &str) -> u32 {
    stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix(key)))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix}…{key} in {stdout:?}"))
}

/// `task.txt` without its timestamps and session ids, which differ from run to run.
fn task_lines(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("task.txt")).expect("task.txt");
    text.lines()
        .map(|l| {
            l.split(' ')
                .filter(|w| !w.starts_with("timestamp=") && !w.starts_with("sid="))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn sids(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("task.txt")).expect("task.txt");
    text.lines()
        .filter_map(|l| l.split(' ').find_map(|w| w.strip_prefix("sid=")))
        .map(str::to_string)
        .collect()
}

/// `uftrace report` call counts of the functions `names` in task `tid`.
fn calls(dir: &Path, tid: u32, names: &[&str]) -> Vec<(String, u64)> {
    let tid = tid.to_string();
    let mut args = vec!["--tid", &tid];
    let filters: Vec<String> = names.iter().map(|n| exactly(n)).collect();
    for f in &filters {
        args.extend(["-F", f.as_str()]);
    }
    let found = report_calls(dir, &args).expect("uftrace report");
    names
        .iter()
        .map(|n| (n.to_string(), found.get(*n).copied().unwrap_or(0)))
        .collect()
}

fn counts(list: &[(&str, u64)]) -> Vec<(String, u64)> {
    list.iter().map(|(n, c)| (n.to_string(), *c)).collect()
}

#[test]
fn user_fork_exec_wait_gives_each_process_its_session_and_names() {
    let elf = |n: &str| user_guest_elf(n).expect("build");
    fork_exec_wait(&user_qemu(), &elf("forkexec.elf"), &elf("execd.elf"));
}

#[test]
fn user_riscv64_fork_exec_wait_gives_each_process_its_session_and_names() {
    let elf = |n: &str| user_guest_elf_riscv64(n, false).expect("build");
    fork_exec_wait(
        &user_qemu_riscv64(),
        &elf("forkexec.elf"),
        &elf("execd.elf"),
    );
}

#[test]
fn user_x86_64_fork_exec_wait_gives_each_process_its_session_and_names() {
    fork_exec_wait(
        &cached("qemu-10.2.2/bin/qemu-x86_64"),
        &x86_64_guest("forkexec.elf"),
        &x86_64_guest("execd.elf"),
    );
}

/// `tests/guests/user`'s glibc programs built with the host gcc, once per process.
fn x86_64_guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let dir = guest_build_dir().join("user-x86_64-glibc");
        let target = |f: &str| dir.join(f).display().to_string();
        let args = [
            "CROSS=".to_string(),
            target("forkexec.elf"),
            target("execd.elf"),
        ];
        make_guests("user", "user-x86_64-glibc", &args).expect("building the x86_64 guests")
    });
    dir.join(name)
}

fn fork_exec_wait(qemu: &Path, parent: &Path, execd: &Path) {
    let (_tmp, dir, stdout) =
        record_ok(qemu, &[&parent.to_string_lossy(), &execd.to_string_lossy()]);
    // The exec'd program ran (no binfmt_misc needed: the plugin ran QEMU for it) with the
    // arguments it was given, and the parent saw its exit status.
    let p = field(&stdout, "parent ", "pid=");
    let c = field(&stdout, "parent ", "child=");
    assert_eq!(field(&stdout, "parent ", "status="), 2, "{stdout}");
    assert_eq!(field(&stdout, "execd ", "pid="), c, "{stdout}");
    assert!(
        stdout.contains("argv0=execd argv1=from-child acc=168"),
        "{stdout}"
    );
    // As `uftrace record` writes a native fork and exec.
    assert_eq!(
        task_lines(&dir),
        [
            format!("SESS pid={p} exename=\"forkexec.elf\""),
            format!("TASK tid={p} pid={p}"),
            format!("FORK pid={c} ppid={p}"),
            format!("SESS pid={c} exename=\"execd.elf\""),
            format!("TASK tid={c} pid={c}"),
        ],
        "{}\n{:?}",
        std::fs::read_to_string(dir.join("task.txt")).unwrap_or_default(),
        std::fs::read_dir(dir.join("procs")).map(|d| d
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("plugin.proc")).ok())
            .collect::<Vec<_>>())
    );
    let sids = sids(&dir);
    assert_ne!(
        sids[0], sids[1],
        "the exec'd program has a session of its own"
    );
    for sid in &sids {
        assert!(
            dir.join(format!("sid-{sid}.map")).is_file(),
            "sid-{sid}.map"
        );
    }
    let info = common::stdout(
        &std::process::Command::new("uftrace")
            .args(["info", "-d"])
            .arg(&dir)
            .output()
            .expect("uftrace info"),
    );
    assert!(
        info.lines().any(|l| l.starts_with("# task list")
            && l.ends_with(&format!(": {p}(forkexec.elf), {c}(execd.elf)"))),
        "{info}"
    );
    // (`report` counts calls that returned: neither program's main does, both exit.)
    let names = ["parent_step", "child_step", "execd_step", "waitpid"];
    assert_eq!(
        calls(&dir, p, &names),
        counts(&[
            ("parent_step", 4),
            ("child_step", 0),
            ("execd_step", 0),
            ("waitpid", 1),
        ])
    );
    // The child: its part of forkexec.elf, then execd.elf's main, by their own names.
    assert_eq!(
        calls(&dir, c, &names),
        counts(&[
            ("parent_step", 0),
            ("child_step", 6),
            ("execd_step", 7),
            ("waitpid", 0),
        ])
    );
    let events = replay_events(&dir, c).expect("uftrace replay");
    let at = |e: &str| {
        events
            .iter()
            .position(|x| x == e)
            .unwrap_or_else(|| panic!("no {e:?} in {events:?}"))
    };
    // The child carries on its parent's stack: it first leaves fork().
    assert!(at("X fork") < at("E child"), "{events:?}");
    assert!(at("E child") < at("E execl"), "{events:?}");
    // The new image starts from its entry, at depth 0 (the exec'd frames stay open).
    assert!(at("E execve") < at("E __libc_start_main"), "{events:?}");
    assert!(at("E __libc_start_main") < at("E execd_step"), "{events:?}");
    // Each later image said it wrote everything.
    let stats: Vec<String> = std::fs::read_dir(dir.join("procs"))
        .expect("procs")
        .map(|e| std::fs::read_to_string(e.unwrap().path().join("plugin.stats")).unwrap())
        .collect();
    assert_eq!(stats.len(), 2, "the forked image and the exec'd one");
    assert!(stats.iter().all(|s| s.lines().any(|l| l == "complete=1")));
}

#[test]
fn user_forked_child_that_exits_at_once_loses_nothing() {
    let parent = user_guest_elf("forkexec.elf").expect("build");
    let (_tmp, dir, stdout) = record_ok(&user_qemu(), &[&parent.to_string_lossy()]);
    let p = field(&stdout, "parent ", "pid=");
    let c = field(&stdout, "parent ", "child=");
    assert_eq!(field(&stdout, "parent ", "status="), 5, "{stdout}");
    assert_eq!(
        task_lines(&dir),
        [
            format!("SESS pid={p} exename=\"forkexec.elf\""),
            format!("TASK tid={p} pid={p}"),
            format!("FORK pid={c} ppid={p}"),
        ]
    );
    // Every call the child made before _exit, in its parent's session's names.
    let events = replay_events(&dir, c).expect("uftrace replay");
    let steps = events.iter().filter(|e| *e == "E child_step").count();
    let returns = events.iter().filter(|e| *e == "X child_step").count();
    assert_eq!((steps, returns), (6, 6), "{events:?}");
    // glibc's _exit, by the name its symbol table gives first.
    assert!(
        matches!(
            events.last().map(String::as_str),
            Some("E _exit" | "E _Exit")
        ),
        "{events:?}"
    );
    assert_eq!(
        calls(&dir, p, &["parent_step", "child_step"]),
        counts(&[("parent_step", 4), ("child_step", 0)])
    );
    let stats = std::fs::read_to_string(dir.join(format!("procs/{c}.0/plugin.stats")))
        .unwrap_or_else(|e| panic!("the child's statistics: {e}"));
    assert!(stats.lines().any(|l| l == "complete=1"), "{stats}");
}

#[test]
fn user_record_waits_for_a_child_that_outlives_the_program() {
    let parent = user_guest_elf("forkexec.elf").expect("build");
    let started = std::time::Instant::now();
    let (_tmp, dir, stdout) = record_ok(&user_qemu(), &[&parent.to_string_lossy(), "-orphan", "2"]);
    assert!(started.elapsed() >= std::time::Duration::from_secs(2));
    let p = field(&stdout, "parent ", "pid=");
    let c = field(&stdout, "parent ", "child=");
    assert_eq!(field(&stdout, "child ", "pid="), c, "{stdout}");
    // The parent as it was at the fork, although it was gone (the child's getppid() then
    // says 1, as after daemon()): uftrace ties the child to the parent's session by it.
    let lines = task_lines(&dir);
    assert!(
        lines.contains(&format!("FORK pid={c} ppid={p}")),
        "{lines:?}"
    );
    assert_eq!(
        calls(&dir, c, &["child_step", "sleep"]),
        counts(&[("child_step", 6), ("sleep", 1)])
    );
}

#[test]
fn user_sigterm_while_waiting_for_a_child_stops_it_and_keeps_its_trace() {
    let parent = user_guest_elf("forkexec.elf").expect("build");
    let common::user::Run {
        tmp: _tmp,
        dir,
        staging,
        mut command,
    } = common::user::record_command(
        &user_qemu(),
        &[parent.as_os_str(), "-orphan".as_ref(), "60".as_ref()],
    );
    let record = command.spawn().expect("run qemu-uftrace");
    // The program (the first QEMU) is done and its child sleeps: record waits for it.
    let child_dir =
        common::user::first_done_and_a_child(&staging, std::time::Duration::from_secs(30));
    let c = child_dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('.').next())
        .expect("PID.N")
        .to_string();
    // The child is in `sleep`: its guest thread (the process's first) waits in the host's
    // clock_nanosleep.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let nanosleep = libc::SYS_clock_nanosleep.to_string();
    while !std::fs::read_to_string(format!("/proc/{c}/syscall"))
        .is_ok_and(|s| s.split(' ').next() == Some(nanosleep.as_str()))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never slept"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: a signal to the process we started.
    unsafe { libc::kill(record.id() as i32, libc::SIGTERM) };
    let started = std::time::Instant::now();
    let out = record.wait_with_output().expect("wait");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // The child, stopped by the SIGTERM record passed on, still wrote everything it
    // recorded (the plugin takes a stopping signal that QEMU leaves at its default, writes,
    // and ends the process with it): a complete trace.
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(
        !common::stderr(&out).contains("INCOMPLETE"),
        "{}",
        common::stderr(&out)
    );
    let lines = task_lines(&dir);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[2].starts_with(&format!("FORK pid={c} ppid=")),
        "{lines:?}"
    );
    let stats = std::fs::read_to_string(dir.join(format!("procs/{c}.0/plugin.stats")))
        .unwrap_or_else(|e| panic!("the child's statistics: {e}"));
    assert!(stats.lines().any(|l| l == "complete=1"), "{stats}");
    // The child was in `sleep`, called from `orphan`, when the signal came.
    assert_eq!(
        calls(&dir, c.parse().expect("pid"), &["orphan", "sleep"]),
        counts(&[("orphan", 1), ("sleep", 1)])
    );
}

#[test]
fn user_exec_past_the_argument_limit_fails_in_the_guest_and_is_said() {
    let elf = user_guest_elf("bigexec.elf").expect("build");
    let (_tmp, dir, out) = common::user::record(&user_qemu(), &[&elf.to_string_lossy()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The guest's execve failed as it does natively, and the guest went on.
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("bigexec errno=E2BIG"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("runs untraced: its arguments and environment are not readable within"),
        "{stderr}"
    );
    // One process, one program: no exec was announced.
    let pid = task_lines(&dir);
    assert_eq!(pid.len(), 2, "{pid:?}");
    assert!(pid[0].ends_with("exename=\"bigexec.elf\""), "{pid:?}");
    assert!(
        report_calls(&dir, &[])
            .expect("uftrace report")
            .contains_key("execve"),
        "the failed execve is in the trace"
    );
}
