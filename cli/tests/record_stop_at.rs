//! `--stop-at FUNC[,exit]` and `--start-at FUNC` on the bare-metal guests: the trace is the
//! unfiltered trace's beginning up to FUNC's first entry, or its end from there after the
//! frames open then, event for event; `,exit` stops QEMU there; a FUNC never entered, and
//! a name that is no function, are said.

mod common;

use common::record_guest_on as record_on;
use common::user::text;

use qemu_uftrace_tests::replay::{parse_replay, replay_body, replay_events, uftrace};
use qemu_uftrace_tests::{system_qemus, SystemQemu, QEMU};
use std::path::PathBuf;
use std::process::Output;

/// Task `tid`'s events in `uftrace replay` of `dir`, as `replay_events` gives them, with
/// each `qemu:opened` event (the end of the frames written open where writing began) as
/// `M qemu:opened` where replay shows it.
fn marked_events(dir: &std::path::Path, tid: u32) -> Vec<String> {
    let text = uftrace(&["replay", "--no-pager", "-d", &dir.to_string_lossy()]).expect("replay");
    let mut out = Vec::new();
    for line in text.lines() {
        match replay_body(line) {
            Some((t, "/* qemu:opened */")) if t == tid => out.push("M qemu:opened".to_string()),
            _ => out.extend(parse_replay(line, tid).expect("replay line")),
        }
    }
    out
}

fn record(name: &str, extra: &[&str], program: &str) -> (tempfile::TempDir, PathBuf, Output) {
    record_on(QEMU, name, extra, program)
}

/// `nested` recorded under `qemu` unfiltered, then with `option nest_level3`: the full
/// trace's events, the index of its first `E nest_level3`, the filtered trace's events and
/// the filtered run's output (both runs succeeded).
fn full_and_filtered(qemu: &SystemQemu, option: &str) -> (Vec<String>, usize, Vec<String>, Output) {
    let (_t1, full, out) = record_on(&qemu.program, "full", &[], "nested");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let full = replay_events(&full, 1).expect("replay");
    let first = full
        .iter()
        .position(|e| e == "E nest_level3")
        .expect("nest_level3 in the full trace");
    let (_t2, dir, out) = record_on(
        &qemu.program,
        "filtered",
        &[option, "nest_level3"],
        "nested",
    );
    assert!(
        out.status.success(),
        "{}: {}",
        qemu.label,
        text(&out.stderr)
    );
    let filtered = marked_events(&dir, 1);
    (full, first, filtered, out)
}

/// Every event up to FUNC's first entry, and none after (`nest_level3` is entered inside
/// the first `nest_level1`, with `main`, `nest_level1` and `nest_level2` open).
#[test]
fn the_trace_ends_at_the_first_entry() {
    common::require(QEMU);
    for qemu in system_qemus() {
        let (full, first, stopped, out) = full_and_filtered(&qemu, "--stop-at");
        let err = text(&out.stderr);
        assert_eq!(stopped, full[..=first], "{}: {err}", qemu.label);
        assert!(
            err.contains("qemu-uftrace: stopped writing at the first entry into nest_level3 (0x"),
            "{err}"
        );
        // What the full trace has after the entry, and the entry's exit, not written.
        let outside = full.len() - (first + 1);
        assert!(
            err.contains(&format!("; 0 lost; {outside} outside the window ]")),
            "{}: {outside}: {err}",
            qemu.label
        );
        // QEMU went on: the guest's checks printed.
        assert!(text(&out.stdout).contains("nest_level1(2)"));
    }
}

/// `,exit` stops a guest that never ends, at the first entry into `spin_work` (the trace
/// ends with `main`, `spin_tick` and that entry).
#[test]
fn exit_stops_qemu_there() {
    common::require(QEMU);
    let (_t, dir, out) = record("exit", &["--stop-at", "spin_work,exit"], "spin");
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("stopped writing at the first entry into spin_work (0x")
            && err.contains("; QEMU was stopped there"),
        "{err}"
    );
    let events = replay_events(&dir, 1).expect("replay");
    let tail: Vec<&str> = events.iter().rev().take(2).map(|s| s.as_str()).collect();
    assert_eq!(tail, ["E spin_work", "E spin_tick"], "{events:?}");
    assert_eq!(events.iter().filter(|e| *e == "E spin_work").count(), 1);
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

/// Nothing before the first entry into `nest_level3`, the frames open then (`main`,
/// `nest_level1`, `nest_level2`) once, then the unfiltered trace's rest: balanced.
#[test]
fn the_trace_starts_at_the_first_entry_after_the_open_frames() {
    common::require(QEMU);
    for qemu in system_qemus() {
        let (full, first, started, out) = full_and_filtered(&qemu, "--start-at");
        let err = text(&out.stderr);
        let mut want: Vec<String> = ["E main", "E nest_level1", "E nest_level2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // The mark right after them, once: where the recording proper begins.
        want.push("M qemu:opened".to_string());
        want.extend_from_slice(&full[first..]);
        assert_eq!(started, want, "{}: {err}", qemu.label);
        let started: Vec<String> = started
            .into_iter()
            .filter(|e| !e.starts_with("M "))
            .collect();
        // Balanced but for rt_exit, which the start code enters by a jump and which never
        // returns (it stays open, as native uftrace shows it).
        let balanced = started
            .strip_suffix(&["E rt_exit".to_string()])
            .unwrap_or(&started);
        let entries = balanced.iter().filter(|e| e.starts_with("E ")).count();
        assert_eq!(entries * 2, balanced.len(), "unbalanced: {started:?}");
        assert!(
            err.contains("qemu-uftrace: started writing at the first entry into nest_level3 (0x")
                && err.contains("after the 3 frame(s) open then"),
            "{err}"
        );
    }
}

#[test]
fn a_start_never_reached_is_said() {
    common::require(QEMU);
    let (_t, dir, out) = record("nostart", &["--start-at", "rt_put_hex"], "nested");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--start-at rt_put_hex: the guest never entered it; nothing was written"),
        "{err}"
    );
    assert!(!dir.exists());
}

/// `--keep-last`: the unfiltered trace's last records, event for event, after the frames
/// open at the window's start (those of the full trace at that point, once).
#[test]
fn keep_last_keeps_the_tail_after_the_open_frames() {
    common::require(QEMU);
    let (_t1, full, out) = record("full", &[], "nested");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let full = replay_events(&full, 1).expect("replay");
    // 100 records.
    let (_t2, dir, out) = record("last", &["--keep-last", "1600"], "nested");
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let mut kept = marked_events(&dir, 1);
    let frames: usize = std::fs::read_to_string(dir.join("plugin.stats"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("keep_last_frames=")?.parse().ok())
        .expect("keep_last_frames");
    // The mark right after the open frames, once: where the window begins.
    assert!(frames > 0, "{kept:?}");
    assert_eq!(
        kept.get(frames).map(String::as_str),
        Some("M qemu:opened"),
        "{kept:?}"
    );
    kept.remove(frames);
    assert!(!kept.iter().any(|e| e.starts_with("M ")), "{kept:?}");
    assert_eq!(kept.len() - frames, 100, "{kept:?}");
    let tail = &full[full.len() - 100..];
    assert_eq!(kept[frames..], *tail, "{err}");
    // The open frames: the full trace's stack where the window starts, outermost first.
    let mut stack: Vec<&str> = Vec::new();
    for e in &full[..full.len() - 100] {
        match e.split_once(' ') {
            Some(("E", f)) => stack.push(f),
            _ => {
                stack.pop();
            }
        }
    }
    let opened: Vec<String> = stack.iter().map(|f| format!("E {f}")).collect();
    assert_eq!(kept[..frames], opened[..], "{err}");
    assert!(
        err.contains("--keep-last 1.56 KiB: kept the last records"),
        "{err}"
    );
}

/// User mode (aarch64 under qemu-aarch64 10.2.2): `--stop-at` a function of the program
/// itself, resolved from its ELF with no `--symbols`: the unfiltered trace up to its entry.
#[test]
fn user_mode_stops_at_a_function_of_the_program() {
    use common::user;
    let qemu = qemu_uftrace_tests::user_qemu();
    let elf = qemu_uftrace_tests::user_guest_elf("nested.elf").expect("build");
    let elf = elf.to_string_lossy();
    let (_t1, full, out) = user::record(&qemu, &[&elf]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let full = replay_events(&full, user::only_task(&full)).expect("replay");
    let first = full
        .iter()
        .position(|e| e == "E nest_level3")
        .expect("nest_level3 in the full trace");
    let (_t2, dir, out) = user::record_with(&qemu, &["--stop-at", "nest_level3"], &[&elf]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stopped = replay_events(&dir, user::only_task(&dir)).expect("replay");
    assert_eq!(stopped, full[..=first], "{err}");
    assert!(
        err.contains("qemu-uftrace: stopped writing at the first entry into nest_level3 (0x"),
        "{err}"
    );
}

/// `events` with libc's unnamed functions (the cross sysroot's libc has no symbol table),
/// which move between runs, under one name.
fn unnamed(events: &[String]) -> Vec<String> {
    (events.iter())
        .map(|e| match e.split_once(" <") {
            Some((kind, _)) => format!("{kind} <libc>"),
            None => e.clone(),
        })
        .collect()
}

/// User mode, a dynamic PIE (Debian gcc's default: the glibc oracle guest, at a bias known
/// only once it runs): `--stop-at` and `--start-at` one of its functions, placed by the
/// plugin at the program's entry: the unfiltered trace up to its first entry, and from
/// there after the frames open then.
#[test]
fn user_mode_stops_and_starts_at_a_function_of_a_pie() {
    use common::user;
    let qemu = qemu_uftrace_tests::user_qemu();
    let pie = user::glibc_guest("libcalls-dyn-oracle.elf");
    let run = ["-L", "/usr/aarch64-linux-gnu", &pie.to_string_lossy()];
    let (_t1, full, out) = user::record(&qemu, &run);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let full = unnamed(&replay_events(&full, user::only_task(&full)).expect("replay"));
    let first = full
        .iter()
        .position(|e| e == "E sorted_sum")
        .expect("sorted_sum in the full trace");
    let (_t2, dir, out) = user::record_with(&qemu, &["--stop-at", "sorted_sum"], &run);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stopped = unnamed(&replay_events(&dir, user::only_task(&dir)).expect("replay"));
    // The loader's work before main depends on the environment: compared from main on.
    let main = |v: &[String]| v.iter().position(|e| e == "E main").expect("main");
    assert_eq!(
        stopped[main(&stopped)..],
        full[main(&full)..=first],
        "{err}"
    );
    assert!(
        err.contains("qemu-uftrace: stopped writing at the first entry into sorted_sum (0x"),
        "{err}"
    );

    let (_t3, dir, out) = user::record_with(&qemu, &["--start-at", "sorted_sum"], &run);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let mut started = unnamed(&marked_events(&dir, user::only_task(&dir)));
    // The frames open at the start: the full trace's stack there, outermost first.
    let mut open: Vec<String> = Vec::new();
    for e in &full[..first] {
        match e.split_once(' ') {
            Some(("E", f)) => open.push(format!("E {f}")),
            _ => {
                open.pop();
            }
        }
    }
    assert!(open.contains(&"E main".to_string()), "{open:?}");
    assert_eq!(started[..open.len()], open[..], "{err}");
    // Then the mark, once: where the recording proper begins.
    assert_eq!(started[open.len()], "M qemu:opened", "{err}");
    started.remove(open.len());
    assert!(!started.iter().any(|e| e.starts_with("M ")), "{err}");
    // Up to main's return: what the program does after it (its oracle log's printing, libc's
    // exit) is compared by the test of the unfiltered trace.
    let end = |v: &[String]| v.iter().position(|e| e == "X main").expect("main returns");
    assert_eq!(
        started[open.len()..end(&started)],
        full[first..end(&full)],
        "{err}"
    );
    // Balanced: every frame written, opened ones included, closes but those main's
    // callers leave open (as in the unfiltered trace).
    let depth = |v: &[String]| -> i64 {
        v.iter()
            .map(|e| if e.starts_with("E ") { 1 } else { -1 })
            .sum()
    };
    assert_eq!(depth(&started), depth(&full), "{err}");
    assert!(
        err.contains("qemu-uftrace: started writing at the first entry into sorted_sum (0x")
            && err.contains(&format!("after the {} frame(s) open then", open.len())),
        "{err}"
    );
}
