//! Helpers for the tests that run the real `qemu-uftrace` binary.

#![allow(dead_code)]

pub mod user;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_qemu-uftrace");

/// The binary, with its plugin cache kept inside `home`.
pub fn qemu_uftrace(home: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env("XDG_CACHE_HOME", home.join("cache"))
        .env("HOME", home)
        .stdin(std::process::Stdio::null());
    c
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

/// `qemu-uftrace record [options] -- argv` into a fresh directory, which must succeed;
/// returns the temp dir (keep it alive), the trace and the guest console.
pub fn record_argv(argv: &[String], options: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("kernel.data");
    let out = Command::new(BIN)
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .args(options)
        .arg("--")
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{}",
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
