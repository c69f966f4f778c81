//! `record --max-size SIZE[,exit]` with the real qemu-system-aarch64, the embedded plugin and
//! uftrace: the plugin stops writing at the cap (and with `,exit` stops QEMU, so a guest that
//! never ends still ends the recording), the trace is published, marked incomplete, says
//! which cap stopped it and where to go next, and uftrace reads what it holds. A cap the
//! user asked for is no failure: our status stays QEMU's.
//!
//! Needs the plugin's `max_size`/`max_size_exit` options (plugin branch).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;
use qemu_uftrace_tests::{calldense_elf, guest_elf, qemu_args, Variant, QEMU};

fn require_tools() {
    require(QEMU);
    require("uftrace");
}

/// `qemu-uftrace record -o DIR [extra] -- argv`, in a fresh home.
fn record(home: &Path, extra: &[&str], argv: &[String]) -> Output {
    qemu_uftrace(home)
        .current_dir(home)
        .arg("record")
        .arg("-o")
        .arg(home.join("t"))
        .args(extra)
        .arg("--")
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-uftrace")
}

/// The bytes of the trace's `.dat` files.
fn dat_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "dat"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

fn replay(dir: &Path) -> String {
    let o = Command::new("uftrace")
        .args(["replay", "--no-pager", "-d"])
        .arg(dir)
        .output()
        .expect("run uftrace");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The cap stops the writing, not QEMU: the guest (which calls far more than 64 KiB of
/// records' worth) runs to its end, and the trace holds its start.
#[test]
fn the_cap_stops_writing_and_marks_the_trace_incomplete() {
    require_tools();
    let elf: PathBuf = calldense_elf().expect("build the guests (run scripts/install-deps.sh)");
    let home = tempfile::tempdir().unwrap();
    let o = record(home.path(), &["--max-size", "64K"], &qemu_args(&elf));
    let err = stderr(&o);
    // The trace is not all the guest did, but it ends where the user asked: QEMU's status
    // (the guest ran to its end), not a failure.
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "INCOMPLETE TRACE: the size cap (--max-size 64K) was reached: the trace holds the \
             run up to that point"
        ),
        "{err}"
    );
    assert!(
        err.contains("record again with a larger --max-size (or none)"),
        "{err}"
    );
    let dir = home.path().join("t");
    let bytes = dat_bytes(&dir);
    assert!(bytes > 0 && bytes <= 64 << 10, "{bytes} bytes of records");
    let note = std::fs::read_to_string(dir.join("note.txt")).unwrap_or_default();
    assert!(
        note.contains("the size cap (--max-size 64K) was reached"),
        "{note}"
    );
    assert!(replay(&dir).contains("main() {"));
}

/// With `,exit` a guest that never ends still ends the recording.
#[test]
fn exit_stops_qemu_at_the_cap() {
    require_tools();
    let elf = guest_elf("spin", Variant::Natural).expect("build the guests");
    let home = tempfile::tempdir().unwrap();
    let o = record(home.path(), &["--max-size", "256K,exit"], &qemu_args(&elf));
    let err = stderr(&o);
    // QEMU stopped as asked (it exits 0 on the plugin's SIGTERM): no failure either.
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("INCOMPLETE TRACE: the size cap (--max-size 256K,exit) was reached"),
        "{err}"
    );
    let dir = home.path().join("t");
    let bytes = dat_bytes(&dir);
    assert!(bytes > 0 && bytes <= 256 << 10, "{bytes} bytes of records");
    assert!(!replay(&dir).is_empty());
}

/// A size that is none is one line naming it, before anything runs.
#[test]
fn a_bad_size_is_one_line() {
    let home = tempfile::tempdir().unwrap();
    let o = record(
        home.path(),
        &["--max-size", "500X"],
        &["qemu-system-aarch64".to_string()],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("'500X' is not a size: give e.g. 500M or 2G"),
        "{err}"
    );
    assert!(!home.path().join("t.partial").exists());
}

/// A guest that forks in a loop: each child writes 120,000 records (1.8 MiB) alone, every
/// second one after an exec of the program itself (a new QEMU, `PROG 0 STEPS`).
const FORK_LOOP: &str = r#"
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noipa)) long leaf(long i) { return i * 3 + 1; }
static long work(long steps) { long s = 0; for (long i = 0; i < steps; i++) s += leaf(i); return s; }
int main(int argc, char **argv) {
    int children = atoi(argv[1]);
    long steps = atol(argv[2]);
    if (children == 0)
        return work(steps) == 0;
    for (int i = 0; i < children; i++) {
        pid_t p = fork();
        if (p == 0) {
            if (i % 2)
                execl(argv[0], argv[0], "0", argv[2], (char *)0);
            _exit(work(steps) == 0);
        }
        waitpid(p, 0, 0);
    }
    return 0;
}
"#;

/// User mode: `--max-size` bounds the whole trace, not each process. A guest's forked
/// children and exec'd programs each get a process image of their own; each wrote up to the
/// cap before, so a fork loop could fill the disk under any cap. Without the cap the same
/// run writes far more (the test can fail), and the processes it stopped are one line.
#[test]
fn user_mode_processes_share_one_size_cap() {
    require("uftrace");
    require("gcc");
    let qemu = qemu_uftrace_tests::cached("qemu-10.2.2/bin/qemu-x86_64");
    let home = tempfile::tempdir().unwrap();
    let prog = common::user::compile("gcc", &["-O1", "-g"], home.path(), "forkloop", FORK_LOOP);
    let argv: Vec<String> = [qemu.as_path(), prog.as_path()]
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .chain(["6".into(), "60000".into()])
        .collect();
    let o = record(home.path(), &["--max-size", "64M"], &argv);
    assert!(o.status.success(), "{}", stderr(&o));
    let dir = home.path().join("t");
    let whole = dat_bytes(&dir);
    assert!(whole > 6 * (1 << 20), "{whole} bytes uncapped");
    let _ = std::fs::remove_dir_all(&dir);

    let o = record(home.path(), &["--max-size", "1M"], &argv);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let bytes = dat_bytes(&dir);
    assert!(bytes > 0 && bytes <= 1 << 20, "{bytes} bytes of records");
    // The first child reached the cap; the first process, the other five children and the
    // three programs they exec'd (`process PID (PROG)`) found it reached.
    assert!(
        err.contains("INCOMPLETE TRACE: the size cap (--max-size 1M) was reached"),
        "{err}"
    );
    assert!(
        err.contains(
            "INCOMPLETE TRACE: 9 other processes stopped writing at the same size cap (forked \
             process "
        ),
        "{err}"
    );
    assert_eq!(err.matches("INCOMPLETE TRACE").count(), 2, "{err}");
    assert!(!dir.join(".max-size").exists());
    assert!(replay(&dir).contains("leaf();"));
}
