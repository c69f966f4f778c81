//! `--stop-at FUNC[,exit]` on the bare-metal guests: the trace is the unfiltered trace's
//! beginning up to FUNC's first entry, event for event; `,exit` stops QEMU there; a FUNC
//! never entered, and a name that is no function, are said.

mod common;

use qemu_uftrace_tests::replay::replay_events;
use qemu_uftrace_tests::{guest_elf, qemu_args, Variant, QEMU};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn record(name: &str, extra: &[&str], program: &str) -> (tempfile::TempDir, PathBuf, Output) {
    let elf = guest_elf(program, Variant::Natural).expect("build the guests");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join(name);
    let out = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"))
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .args(extra)
        .arg("--")
        .args(qemu_args(&elf))
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    (tmp, dir, out)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every event up to FUNC's first entry, and none after (`nest_level3` is entered inside
/// the first `nest_level1`, with `main`, `nest_level1` and `nest_level2` open).
#[test]
fn the_trace_ends_at_the_first_entry() {
    common::require(QEMU);
    let (_t1, full, out) = record("full", &[], "nested");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let full = replay_events(&full, 1).expect("replay");
    let first = full
        .iter()
        .position(|e| e == "E nest_level3")
        .expect("nest_level3 in the full trace");
    for exit in [false, true] {
        let arg = if exit {
            "nest_level3,exit"
        } else {
            "nest_level3"
        };
        let (_t2, dir, out) = record("stop", &["--stop-at", arg], "nested");
        let err = text(&out.stderr);
        assert!(out.status.success(), "{err}");
        let stopped = replay_events(&dir, 1).expect("replay");
        assert_eq!(stopped, full[..=first], "{arg}: {err}");
        assert!(
            err.contains("qemu-uftrace: stopped writing at the first entry into nest_level3 (0x"),
            "{err}"
        );
        // The guest's checks print after the first nest_level1: only a run that went on
        // printed them.
        let stdout = text(&out.stdout);
        assert_eq!(stdout.contains("nest_level1(2)"), !exit, "{arg}: {stdout}");
    }
}

#[test]
fn a_function_never_entered_is_said() {
    common::require(QEMU);
    // In the guest's runtime, never called by `nested`.
    let (_t, dir, out) = record("never", &["--stop-at", "rt_put_hex"], "nested");
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "qemu-uftrace: warning: --stop-at rt_put_hex: the guest never entered it; the \
             trace holds the whole run"
        ),
        "{err}"
    );
    let events = replay_events(&dir, 1).expect("replay");
    assert!(
        events.iter().filter(|e| *e == "E nest_level1").count() == 2,
        "{events:?}"
    );
}

#[test]
fn an_unknown_name_offers_close_ones() {
    common::require(QEMU);
    let (_t, dir, out) = record("unknown", &["--stop-at", "nest_levl3"], "nested");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--stop-at nest_levl3: no such function in the symbols (1 source)"),
        "{err}"
    );
    assert!(err.contains("did you mean nest_level3"), "{err}");
    assert!(!dir.exists() && !PathBuf::from(format!("{}.partial", dir.display())).exists());
}
