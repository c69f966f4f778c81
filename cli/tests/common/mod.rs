//! Helpers for the tests that run the real `qemu-uftrace` binary.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use qemu_uftrace_format::record::{encode, RecordType};

pub const BIN: &str = env!("CARGO_BIN_EXE_qemu-uftrace");

/// Kernel-looking addresses for the fake trace.
pub const KBASE: u64 = 0xffff_8000_8001_0000;

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

/// `start_kernel` → `setup_arch` (leaf), `rest_init` → `leaf`.
pub fn dat_bytes() -> Vec<u8> {
    let recs = [
        (10, RecordType::Entry, 0, KBASE),
        (20, RecordType::Entry, 1, KBASE + 0x100),
        (50, RecordType::Exit, 1, KBASE + 0x100),
        (60, RecordType::Entry, 1, KBASE + 0x200),
        (70, RecordType::Entry, 2, KBASE + 0x300),
        (75, RecordType::Exit, 2, KBASE + 0x300),
        (90, RecordType::Exit, 1, KBASE + 0x200),
        (100, RecordType::Exit, 0, KBASE),
    ];
    recs.iter()
        .flat_map(|&(t, k, d, a)| encode(t, k, d, a))
        .collect()
}

/// A System.map for the fake trace's functions.
pub fn system_map() -> String {
    format!(
        "{:016x} T start_kernel\n{:016x} T setup_arch\n{:016x} T rest_init\n{:016x} T leaf\n\
         {:016x} T _etext\n",
        KBASE,
        KBASE + 0x100,
        KBASE + 0x200,
        KBASE + 0x300,
        KBASE + 0x400
    )
}

/// A stand-in `qemu-system-aarch64` (a shell script) in `<dir>/bin`, driven by environment
/// variables:
/// - `FAKE_VERSION`: what `--version` says (default 10.0.2);
/// - `FAKE_NO_PLUGINS`: answer the probe like a QEMU built without plugins;
/// - `FAKE_DAT`: a file copied to `<out>/1.dat` (and `2.dat` with `FAKE_TWO=1`);
/// - `FAKE_NO_STATS`: die without `plugin.stats`, like a killed QEMU;
/// - `FAKE_SLEEP`: wait this long (interruptible: SIGINT/SIGTERM write stats and exit 0);
/// - `FAKE_EXIT`: exit status (default 0).
///
/// It writes the command line it got to `<dir>/argv`.
pub fn fake_qemu(dir: &Path, name: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        r#"#!/bin/sh
if [ "$1" = --version ]; then
    echo "QEMU emulator version ${{FAKE_VERSION:-10.0.2}} (fake)"
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
printf '%s\n' "$@" > "{argv}"
[ "$1" = -plugin ] || exit 99
out=$(printf '%s' "$2" | sed -n 's/^[^,]*,out=\(.*\),clock=.*/\1/p')
stats() {{
    printf 'complete=1\ntarget=aarch64\nclock=insn\nvcpus=1\ntids=1\nevents=8\ncalls=4\nreturns=4\nresyncs=2\nunmatched_returns=0\ndepth_cap_hits=0\nbytes=128\nfuture_key=5\n' > "$out/plugin.stats.tmp"
    mv "$out/plugin.stats.tmp" "$out/plugin.stats"
}}
[ -n "$FAKE_DAT" ] && cp "$FAKE_DAT" "$out/1.dat"
[ -n "$FAKE_TWO" ] && cp "$FAKE_DAT" "$out/2.dat"
if [ -n "$FAKE_SLEEP" ]; then
    sleep "$FAKE_SLEEP" &
    pid=$!
    trap 'kill $pid 2>/dev/null; stats; exit 0' INT TERM
    wait $pid
fi
[ -z "$FAKE_NO_STATS" ] && stats
exit ${{FAKE_EXIT:-0}}
"#,
        argv = dir.join("argv").display()
    );
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

pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd} >/dev/null"))
        .status()
        .is_ok_and(|s| s.success())
}
