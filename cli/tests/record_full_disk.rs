//! A trace recorded onto a filesystem that fills up: the plugin stops writing while room
//! for assembly remains, every task's file ends in a LOST record saying how much was lost,
//! `record` publishes the trace marked INCOMPLETE, says so, and exits non-zero; uftrace
//! replays it up to the point of loss.
//!
//! The filesystem is a real one: a small tmpfs mounted for the test (in a private mount
//! namespace, so nothing outlives it).

mod common;

use common::*;
use qemu_uftrace_tests::{kernel_boot_args, replay::uftrace};
use std::path::Path;
use std::process::Command;

/// Runs `record` on the Debian boot with its output on a fresh tmpfs of `size`, in a mount
/// namespace of its own; the tmpfs is left mounted inside that namespace only, so the test
/// copies what it needs out before the namespace ends.
fn record_on_small_tmpfs(home: &Path, size: &str) -> (std::process::Output, String) {
    let mnt = home.join("small");
    std::fs::create_dir_all(&mnt).unwrap();
    let copy = home.join("copy");
    // In the namespace: mount, record, keep the exit status, copy the trace out (uftrace
    // runs outside), unmount with the namespace.
    // No cap: the default one (half the free space) would stop writing before the disk
    // is full, and this is the full disk's path.
    let record: Vec<String> = [BIN, "record", "--max-size", "none", "-o"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            mnt.join("trace").to_string_lossy().into_owned(),
            "--".into(),
        ])
        .chain(kernel_boot_args("cortex-a57"))
        .collect();
    let script = format!(
        "mount -t tmpfs -o size={size} qemu-uftrace-test {mnt} || exit 90; \
         \"$@\"; code=$?; df -k {mnt} | tail -n1 >&2; \
         cp -r {mnt}/. {copy}/ || exit 91; exit $code",
        mnt = mnt.display(),
        copy = copy.display(),
    );
    std::fs::create_dir_all(&copy).unwrap();
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .args(&record)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("HOME", home)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("unshare (util-linux) runs");
    (out, copy.to_string_lossy().into_owned())
}

#[test]
fn a_full_disk_gives_an_incomplete_trace_that_replays_to_the_point_of_loss() {
    require("unshare");
    require("uftrace");
    let home = tempfile::tempdir().unwrap();
    // The boot writes about 250 MB of records; 96 MB fill up a third of the way in.
    let (out, copy) = record_on_small_tmpfs(home.path(), "96m");
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(90), "cannot mount a tmpfs:\n{err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("warning: INCOMPLETE TRACE: recording stopped with "),
        "{err}"
    );
    assert!(
        err.contains("records after that point were not written"),
        "{err}"
    );
    assert!(!err.contains("cannot assemble"), "{err}");

    let trace = Path::new(&copy).join("trace");
    assert!(trace.join("info").is_file(), "no published trace:\n{err}");
    assert!(!Path::new(&copy).join("trace.partial").exists());
    let stats = std::fs::read_to_string(trace.join("plugin.stats")).unwrap();
    assert!(stats.contains("complete=0"), "{stats}");
    let lost: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("lost_records="))
        .and_then(|v| v.parse().ok())
        .expect("lost_records");
    assert!(lost > 1_000_000, "{stats}");

    // Every file is whole records; the boot CPU's ends with the LOST record.
    let d = trace.to_string_lossy().into_owned();
    for entry in std::fs::read_dir(&trace).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "dat") {
            assert_eq!(
                std::fs::metadata(&p).unwrap().len() % 16,
                0,
                "{}",
                p.display()
            );
        }
    }
    let info = uftrace(&["info", "-d", &d]).expect("uftrace info");
    assert!(
        info.contains("INCOMPLETE TRACE: recording stopped"),
        "{info}"
    );
    let replay = uftrace(&["replay", "--no-pager", "-d", &d]).expect("uftrace replay");
    assert!(replay.contains("start_kernel() {"), "replay lacks the boot");
    assert!(
        replay.contains("LOST ") && replay.contains(" records!!"),
        "replay shows no LOST record"
    );
}
