//! SIGKILL of `record` during a user-mode run whose program forked: every QEMU process of
//! the run ends with it. The first QEMU has the CLI's parent-death signal; a forked child
//! has neither that nor `record` as its parent, and is ended by the plugin's watch of
//! `record`'s pidfd (`plugin/src/lifecycle/record_watch.rs`).

mod common;

use qemu_uftrace_tests::{user_guest_elf, user_qemu};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Generous: the machine may be loaded.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn killing_record_ends_every_qemu_of_a_user_run() {
    let program = user_guest_elf("forkexec.elf").expect("build");
    // The program ends at once; its child sleeps ten minutes (a QEMU of its own).
    let common::user::Run {
        tmp: _tmp,
        staging,
        mut command,
        ..
    } = common::user::record_command(
        &user_qemu(),
        &[program.as_os_str(), "-orphan".as_ref(), "600".as_ref()],
    );
    let mut record = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run qemu-uftrace");
    common::user::first_done_and_a_child(&staging, PATIENCE);
    let needle = format!("out={}", staging.display());
    assert!(
        !common::pids_with_arg(&needle).is_empty(),
        "the child's QEMU is not running"
    );
    record.kill().expect("SIGKILL record");
    record.wait().expect("wait");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = common::pids_with_arg(&needle);
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
