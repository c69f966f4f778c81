//! A user-mode recording of a program that never ends and calls little
//! (`tests/guests/user/ticker.c`: one call every 20 ms, far fewer records than a buffer
//! holds): `qemu-uftrace status` shows what it recorded while it runs, and a SIGINT sent to
//! `record` alone (`kill -INT`, `timeout -s INT`) stops it as SIGTERM does, the trace
//! complete.

mod common;

use common::user::{only_task, text, Run};
use qemu_uftrace_tests::replay::report_calls;
use qemu_uftrace_tests::{user_guest_elf, user_qemu};
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Generous: the machine may be loaded.
const PATIENCE: Duration = Duration::from_secs(60);

/// `record` of ticker.elf, started, with its stdout (the program's) in a file of the temp
/// dir, and the run.
fn start_ticker() -> (Run, Child) {
    let elf = user_guest_elf("ticker.elf").expect("build");
    let mut run = common::user::record_command(&user_qemu(), &[&elf]);
    let out = File::create(run.tmp.path().join("stdout")).expect("stdout file");
    let child = run.command.stdout(out).spawn().expect("run qemu-uftrace");
    (run, child)
}

/// Waits until `what` gives a value, while `record` runs.
fn wait_for<T>(record: &mut Child, what: &str, mut cond: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        if let Some(status) = record.try_wait().expect("wait") {
            panic!("record ended ({status}) before {what}");
        }
        if Instant::now() > deadline {
            let _ = record.kill();
            let _ = record.wait();
            panic!("never: {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the program printed its first line: it runs, the plugin's signal handler in
/// place (installed at its first instruction).
fn wait_ticking(run: &Run, record: &mut Child) {
    let stdout = run.tmp.path().join("stdout");
    wait_for(record, "the program printed", || {
        std::fs::read_to_string(&stdout)
            .is_ok_and(|s| s.contains("ticking"))
            .then_some(())
    });
}

/// `qemu-uftrace status DIR`'s line.
fn status(dir: &Path) -> String {
    let out = Command::new(common::BIN)
        .arg("status")
        .arg(dir)
        .output()
        .expect("run status");
    text(&out.stdout)
}

/// The number before ` events` in a status line.
fn events(line: &str) -> Option<u64> {
    let (_, rest) = line.split_once(": ")?;
    rest.split_once(" events")?.0.replace(',', "").parse().ok()
}

#[test]
fn status_shows_what_a_user_program_recorded_while_it_runs() {
    let (run, mut record) = start_ticker();
    wait_ticking(&run, &mut record);
    // A few dozen calls a second: no buffer fills for minutes, but the status counts them.
    let line = wait_for(&mut record, "status shows recorded events", || {
        let line = status(&run.dir);
        (line.starts_with("recording ") && events(&line).is_some_and(|n| n > 0)).then_some(line)
    });
    assert!(line.contains(", 1 task"), "{line}");
    let seen = events(&line).unwrap();
    // SAFETY: a signal to the process this test started.
    unsafe { libc::kill(record.id() as i32, libc::SIGTERM) };
    let out = record.wait_with_output().expect("wait");
    let err = text(&out.stderr);
    assert!(!err.contains("INCOMPLETE"), "{err}");
    // What the status counted was written, and more came after it.
    let last = status(&run.dir);
    assert!(last.starts_with("done "), "{last}");
    assert!(
        events(&last).is_some_and(|n| n >= seen),
        "{last} after {line}"
    );
    only_task(&run.dir);
}

#[test]
fn sigint_sent_to_record_alone_stops_a_user_program() {
    let (run, mut record) = start_ticker();
    wait_ticking(&run, &mut record);
    // To `record` only, not its process group (as Ctrl-C would): it passes it on.
    // SAFETY: a signal to the process this test started.
    unsafe { libc::kill(record.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = record.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = record.kill();
            let _ = record.wait();
            panic!("record did not stop on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = record.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut err).expect("stderr");
    }
    // The program ended by SIGINT, as it would have by Ctrl-C: so do we.
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(!err.contains("INCOMPLETE"), "{err}");
    let stats = std::fs::read_to_string(run.dir.join("plugin.stats")).expect("plugin.stats");
    assert!(stats.lines().any(|l| l == "complete=1"), "{stats}");
    let calls = report_calls(&run.dir, &[]).expect("uftrace report");
    assert!(calls.get("tick").is_some_and(|&n| n >= 1), "{calls:?}");
}
