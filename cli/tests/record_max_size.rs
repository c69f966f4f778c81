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
/// second one after an exec of the program itself (a new QEMU, `PROG 0 STEPS`). It fails
/// (exit 1) unless every child ran to its end.
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
    int failed = 0;
    for (int i = 0; i < children; i++) {
        pid_t p = fork();
        if (p == 0) {
            if (i % 2)
                execl(argv[0], argv[0], "0", argv[2], (char *)0);
            _exit(work(steps) == 0);
        }
        int status = 1;
        waitpid(p, &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return failed;
}
"#;

/// [`FORK_LOOP`] built in `dir`, run by qemu-x86_64 with `children` children of `steps`
/// steps each: the command.
fn fork_loop(dir: &std::path::Path, children: u32, steps: u32) -> Vec<String> {
    let qemu = qemu_uftrace_tests::cached("qemu-10.2.2/bin/qemu-x86_64");
    let prog = common::user::compile("gcc", &["-O1", "-g"], dir, "forkloop", FORK_LOOP);
    let mut argv: Vec<String> = [qemu.as_path(), prog.as_path()]
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    argv.extend([children.to_string(), steps.to_string()]);
    argv
}

/// User mode: `--max-size` bounds the whole trace, not each process. A guest's forked
/// children and exec'd programs each get a process image of their own; each wrote up to the
/// cap before, so a fork loop could fill the disk under any cap. Without the cap the same
/// run writes far more (the test can fail), and the processes it stopped are one line.
#[test]
fn user_mode_processes_share_one_size_cap() {
    require("uftrace");
    require("gcc");
    let home = tempfile::tempdir().unwrap();
    let argv = fork_loop(home.path(), 6, 60_000);
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
    // The first child reached the cap, and the first process found it reached. The cap had
    // no room left for the other five children's files: they ran untraced, and so did the
    // programs they exec'd (the guest's exit status says every child ran to its end).
    assert!(
        err.contains("INCOMPLETE TRACE: the size cap (--max-size 1M) was reached"),
        "{err}"
    );
    assert!(
        err.contains(
            "INCOMPLETE TRACE: 1 other process stopped writing at the same size cap (forked \
             process "
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "INCOMPLETE TRACE: 5 more processes (forked or exec'd) started once the size cap \
             (--max-size 1M) had no room left for their files: they ran untraced"
        ),
        "{err}"
    );
    assert_eq!(err.matches("INCOMPLETE TRACE").count(), 3, "{err}");
    assert!(!dir.join(".max-size").exists());
    assert!(replay(&dir).contains("leaf();"));
}

/// User mode: a guest forking in a loop cannot fill the disk with its processes' own small
/// files either (issue 32). Each process image's files (a directory and four `plugin.*`
/// files, ~20 KiB on disk) take their room in the cap before it runs; past it the processes
/// run untraced, write nothing, and are counted in one line. 200 children of a few hundred
/// records each: 8 MB of files before (20 KiB a process), within about the cap now.
#[test]
fn a_fork_loop_s_process_files_stay_within_the_size_cap() {
    require("gcc");
    let home = tempfile::tempdir().unwrap();
    let argv = fork_loop(home.path(), 200, 100);
    let o = record(home.path(), &["--max-size", "1M"], &argv);
    let err = stderr(&o);
    // Every child ran to its end, traced or not (the guest's exit status).
    assert_eq!(o.status.code(), Some(0), "{err}");
    let dir = home.path().join("t");
    let on_disk = disk_usage(&dir);
    assert!(
        on_disk <= (1 << 20) + (768 << 10),
        "{on_disk} bytes on disk for --max-size 1M"
    );
    let line = err
        .lines()
        .find(|l| l.contains("more processes (forked or exec'd) started once the size cap"))
        .unwrap_or_else(|| panic!("no line for the untraced processes:\n{err}"));
    let untraced: u32 = line
        .split("INCOMPLETE TRACE: ")
        .nth(1)
        .and_then(|t| t.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line}"));
    let traced = std::fs::read_dir(dir.join("procs")).map_or(0, |d| d.count()) as u32;
    // The forked children (the exec'd programs of untraced ones are not counted apart).
    assert!(
        untraced > 100 && untraced + traced >= 200,
        "{untraced} untraced, {traced} traced images:\n{err}"
    );
}

/// Bytes `dir` takes on disk, its files' blocks and its directories' (as `du`).
fn disk_usage(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("a trace directory").flatten() {
            let m = e.metadata().expect("metadata");
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}
