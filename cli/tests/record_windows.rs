//! Where writing starts and what is shown, on the bare-metal guests: `--start-at` of a
//! function outside every `-F` subtree (the start still comes at its first entry), checked
//! against uftrace's own `-F` replay of the unfiltered trace; uftrace's `-r/--time-range`
//! on a recorded trace, through `qemu-uftrace replay/report`.

mod common;

use common::record_guest_on as record_on;
use common::user::text;

use qemu_uftrace_tests::replay::{parse_replay, replay_events, report_calls, uftrace};
use qemu_uftrace_tests::{system_qemus, QEMU};
use std::path::Path;
use std::process::Command;

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

/// `qemu-uftrace replay -d DIR -- --no-pager -f time EXTRA…`: each line's timestamp (ns, as
/// the record holds it) and what follows its `|`.
fn timed_replay(dir: &Path, extra: &[&str]) -> Vec<(u64, String)> {
    let out = Command::new(common::BIN)
        .arg("replay")
        .arg("-d")
        .arg(dir)
        .args(["--", "--no-pager", "-f", "time"])
        .args(extra)
        .output()
        .expect("run qemu-uftrace replay");
    let err = text(&out.stderr);
    assert!(
        out.status.success() && !err.contains("WARN") && !err.contains("ERROR"),
        "{err}"
    );
    text(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (time, body) = l.split_once('|')?;
            let (s, ns) = time.trim().split_once('.')?;
            let ns = s.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?;
            Some((ns, body.to_string()))
        })
        .collect()
}

/// A record time as uftrace's `-r` takes a timestamp (seconds, as `-f time` shows it).
fn timestamp(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// uftrace's `-r/--time-range START~STOP` is a viewing option (uftrace's own `record` has
/// none), and it works on our traces: from the second `nest_level1` entry to the second
/// `nest_level2` exit, given as the timestamps `-f time` shows or as elapsed times with a
/// unit (counted from the first record; instructions under the instruction clock), the
/// replay is exactly the unfiltered replay's lines timed in the range, and `report -r`
/// counts their calls.
#[test]
fn uftrace_s_time_range_selects_by_the_recorded_times() {
    common::require(QEMU);
    let (_t, dir, out) = record_on(QEMU, "full", &[], "nested");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all = timed_replay(&dir, &[]);
    let nth = |line: &str, n: usize| -> u64 {
        all.iter()
            .filter(|(_, b)| b.trim() == line)
            .nth(n)
            .unwrap_or_else(|| panic!("{line} #{n} in {all:?}"))
            .0
    };
    let (start, stop) = (nth("nest_level1() {", 1), nth("} /* nest_level2 */", 1));
    let t0 = all[0].0;
    let want: Vec<(u64, String)> = all
        .iter()
        .filter(|(t, _)| (start..=stop).contains(t))
        .cloned()
        .collect();
    // nest_level1's entry, level2's subtree (8 lines) and its exit.
    assert_eq!(want.len(), 11, "{all:?}");
    let range = format!("{}~{}", timestamp(start), timestamp(stop));
    assert_eq!(timed_replay(&dir, &["-r", &range]), want);
    let elapsed = format!("{}ns~{}ns", start - t0, stop - t0);
    assert_eq!(timed_replay(&dir, &["-r", &elapsed]), want);

    let mut calls = report_calls(&dir, &["-r", &range]).expect("report -r");
    // uftrace counts the frames open at the range's start as calls of `<0>` (its own
    // traces' too).
    calls.remove("<0>");
    let mut entries = std::collections::BTreeMap::new();
    for (_, body) in &want {
        let body = body.trim();
        if let Some(name) = body.strip_suffix("() {").or(body.strip_suffix("();")) {
            *entries.entry(name.to_string()).or_insert(0u64) += 1;
        }
    }
    assert_eq!(calls, entries);
}

/// `record -r`: one line saying where uftrace's time range applies, nothing recorded.
#[test]
fn record_points_a_time_range_to_the_viewers() {
    let elf = qemu_uftrace_tests::guest_elf("nested", qemu_uftrace_tests::Variant::Natural)
        .expect("build the guests");
    let argv = qemu_uftrace_tests::qemu_args_on(QEMU, &elf);
    let (_t, dir, out) = common::record_named("ranged", &argv, &["--time-range", "1ms~2ms"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("record has no -r/--time-range (1ms~2ms)")
            && err.contains(&format!(
                "qemu-uftrace replay -d {} -- -r 1ms~2ms",
                dir.display()
            )),
        "{err}"
    );
    assert!(!dir.exists());
}
