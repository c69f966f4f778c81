//! SIGKILL of `record` during a user-mode run whose program forked: every QEMU process of
//! the run ends with it. The first QEMU has the CLI's parent-death signal; a forked child
//! has neither that nor `record` as its parent, and is ended by the plugin's watch of
//! `record`'s pidfd (`plugin/src/lifecycle/record_watch.rs`).

mod common;

use qemu_uftrace_tests::{user_guest_elf, user_qemu};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous: the machine may be loaded.
const PATIENCE: Duration = Duration::from_secs(60);

/// Processes whose command line contains `needle`.
fn pids_with_arg(needle: &str) -> Vec<i32> {
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

#[test]
fn killing_record_ends_every_qemu_of_a_user_run() {
    let program = user_guest_elf("forkexec.elf").expect("build");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    let staging = tmp.path().join("uftrace.data.partial");
    // The program ends at once; its child sleeps ten minutes (a QEMU of its own).
    let mut record = Command::new(common::BIN)
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .arg("--")
        .arg(user_qemu())
        .arg(&program)
        .args(["-orphan", "600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run qemu-uftrace");
    let deadline = Instant::now() + PATIENCE;
    // The first QEMU is done (its statistics) and the child announced itself.
    while !(staging.join("plugin.stats").exists()
        && std::fs::read_dir(staging.join("procs"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(Result::ok)
            .is_some_and(|e| e.path().join("plugin.proc").exists()))
    {
        assert!(
            Instant::now() < deadline,
            "the program's child never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let needle = format!("out={}", staging.display());
    assert!(
        !pids_with_arg(&needle).is_empty(),
        "the child's QEMU is not running"
    );
    record.kill().expect("SIGKILL record");
    record.wait().expect("wait");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = pids_with_arg(&needle);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "QEMU processes {left:?} still run after record was killed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
