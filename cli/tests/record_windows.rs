//! Where writing starts and what it keeps, combined with the filters, on the bare-metal
//! guests: `--start-at` of a function outside every `-F` subtree (the start still comes at
//! its first entry), checked against uftrace's own `-F` replay of the unfiltered trace.

mod common;

use common::record_guest_on as record_on;
use common::user::text;

use qemu_uftrace_tests::replay::{parse_replay, replay_events, uftrace};
use qemu_uftrace_tests::{system_qemus, QEMU};
use std::path::Path;

/// uftrace's replay of `dir` with `options`, as `E name` / `X name` of the only task.
fn replay_with(dir: &Path, options: &[&str]) -> Vec<String> {
    let d = dir.to_string_lossy();
    let mut args = vec!["replay", "--no-pager", "-d", &d];
    args.extend_from_slice(options);
    parse_replay(&uftrace(&args).expect("replay"), 1).expect("replay text")
}

/// `-F nest_level2 --start-at rt_check`: `rt_check` runs in `main`, outside the filtered
/// subtrees, between the two calls of `nest_level1`; its entry is never written, yet the
/// trace starts there: it holds the second `nest_level2` subtree whole, and nothing of the
/// first, with no frame open at the start.
#[test]
fn a_start_outside_the_filtered_subtrees_still_starts() {
    common::require(QEMU);
    for qemu in system_qemus() {
        let (_t1, full, out) = record_on(&qemu.program, "full", &[], "nested");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let filtered = replay_with(&full, &["-F", "^nest_level2$"]);
        let second = filtered
            .iter()
            .rposition(|e| e == "E nest_level2")
            .expect("nest_level2 in the full trace");
        assert!(second > 0, "{filtered:?}");
        let want = &filtered[second..];
        let (_t2, dir, out) = record_on(
            &qemu.program,
            "started",
            &["-F", "nest_level2", "--start-at", "rt_check"],
            "nested",
        );
        let err = text(&out.stderr);
        assert!(out.status.success(), "{}: {err}", qemu.label);
        assert_eq!(
            replay_events(&dir, 1).unwrap(),
            want,
            "{}: {err}",
            qemu.label
        );
        assert!(
            err.contains("qemu-uftrace: started writing at the first entry into rt_check (0x")
                && err.contains("after the 0 frame(s) open then"),
            "{}: {err}",
            qemu.label
        );
    }
}
