//! Helpers for the tests that run the real `qemu-uftrace` binary.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// A stand-in QEMU (a shell script) in `<dir>/bin`, only for what no installed QEMU can
/// show: an old version, a QEMU without plugin support that passes the version check, an
/// unsupported target. Driven by environment variables:
/// - `FAKE_VERSION`: what `--version` says (default 10.0.2);
/// - `FAKE_NO_PLUGINS`: answer the probe like a QEMU built without plugins.
///
/// Anything past the checks exits 99.
pub fn fake_qemu(dir: &Path, name: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = r#"#!/bin/sh
if [ "$1" = --version ]; then
    echo "QEMU emulator version ${FAKE_VERSION:-10.0.2} (fake)"
    exit 0
fi
for a in "$@"; do
    case "$a" in
    *probe=on*)
        if [ -n "$FAKE_NO_PLUGINS" ]; then
            echo "qemu-system-aarch64: -plugin: invalid option" >&2
            exit 1
        fi
        echo "qemu-uftrace-probe target=aarch64 api=4"
        exit 0;;
    esac
done
exit 99
"#;
    let path = bin.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// PATH with `<dir>/bin` first.
pub fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut p = std::ffi::OsString::from(dir.join("bin"));
    p.push(":");
    p.push(std::env::var_os("PATH").unwrap_or_default());
    p
}
