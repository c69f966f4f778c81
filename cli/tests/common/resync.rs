//! What the resync tests (record_user_resync.rs, record_system_resync.rs) read of a run of
//! the coswitch guest: its own calls after main's frame closed at the resync, the entries it
//! logged after main's second `resume`, and the trace's texts; and what both assert of a
//! resync unwound by CFI and of one left guessed.

use qemu_uftrace_tests::plugin_stat;
use qemu_uftrace_tests::replay::{replay_events, uftrace, without};
use std::path::{Path, PathBuf};

use super::user::only_task;

/// A recorded run: the replay's own functions after main's frame closed at the resync (the
/// second switch into the coroutine), the log's entries after main's second `resume`, the
/// replay and dump text and record's stderr.
pub struct Run {
    pub after: Vec<String>,
    pub log_after: Vec<String>,
    pub replay: String,
    pub dump: String,
    pub stderr: String,
    pub dir: PathBuf,
    pub _tmp: tempfile::TempDir,
}

/// Reads the run of `label` recorded into `dir` (kept by `tmp`): `console` holds the guest's
/// `ENTRY name` log, `own` its own functions.
pub fn read_run(
    label: &str,
    own: &[&str],
    console: &str,
    stderr: String,
    (tmp, dir): (tempfile::TempDir, PathBuf),
) -> Run {
    let tid = only_task(&dir);
    read_task_run(label, own, console, stderr, (tmp, dir), tid)
}

/// [`read_run`] of task `tid` of a run with several.
pub fn read_task_run(
    label: &str,
    own: &[&str],
    console: &str,
    stderr: String,
    (tmp, dir): (tempfile::TempDir, PathBuf),
    tid: u32,
) -> Run {
    let log: Vec<String> = console
        .lines()
        .filter_map(|l| l.trim_end().strip_prefix("ENTRY "))
        .map(String::from)
        .collect();
    let second_resume = log
        .iter()
        .rposition(|n| n == "resume")
        .unwrap_or_else(|| panic!("{label}: no log in the console:\n{console}"));
    let log_after = log[second_resume + 1..].to_vec();
    let events = replay_events(&dir, tid).expect("uftrace replay");
    let own = without(&events, |n| !own.contains(&n), false);
    let end_of_main = own
        .iter()
        .rposition(|e| e == "X main")
        .unwrap_or_else(|| panic!("{label}: main closes at the resync: {own:?}"));
    let d = dir.to_string_lossy().to_string();
    Run {
        after: own[end_of_main + 1..].to_vec(),
        log_after,
        replay: uftrace(&["replay", "--no-pager", "-d", &d, "--tid", &tid.to_string()])
            .expect("replay"),
        dump: uftrace(&["dump", "--no-pager", "-d", &d]).expect("dump"),
        stderr,
        dir,
        _tmp: tmp,
    }
}

/// Checks a run whose resync was unwound: after it exactly `want`, whose first `unwound`
/// entries are the frames unwound (all by CFI, their mark inside the innermost, co_yield),
/// and the calls after them as the guest's log has them; no guess, no cookie left. `stats`:
/// the folder of the image that ran the coroutine (an exec'd one's is its own).
pub fn assert_unwound(r: &Run, label: &str, want: &[&str], unwound: usize, stats: &Path) {
    let frames = format!("{unwound} frames: {unwound} by CFI");
    assert_unwound_by(r, label, want, unwound, stats, &frames);
}

/// [`assert_unwound`] of frames unwound as `frames` says (record's summary in its
/// parentheses: `7 frames: 6 by CFI, 1 by signal frame`), some perhaps not shown in `want`.
pub fn assert_unwound_by(
    r: &Run,
    label: &str,
    want: &[&str],
    unwound: usize,
    stats: &Path,
    frames: &str,
) {
    assert_eq!(r.after, want, "{label}: after the resync\n{}", r.replay);
    // Against the log: what the coroutine entered after the switch, in order.
    assert_eq!(
        entries(&r.after[unwound..]),
        r.log_after,
        "{label}: entries against the log"
    );
    // The unwound frames are marked, inside the innermost one; no guess anywhere.
    assert_eq!(
        indent(&r.replay, "/* qemu:unwound */"),
        indent(&r.replay, "co_yield() {") + 2,
        "{label}\n{}",
        r.replay
    );
    assert!(
        !r.dump.contains("[lost ]"),
        "{label}: a LOST record\n{}",
        r.dump
    );
    assert_eq!(plugin_stat(stats, "resync_cookies"), "1", "{label}");
    assert_eq!(plugin_stat(stats, "lost_marks"), "0", "{label}");
    let summary = format!(
        "1 place where the call stack was lost (a return that matched no call, in code \
         without frame pointers) was unwound after the run ({frames})"
    );
    assert!(r.stderr.contains(&summary), "{label}: {}", r.stderr);
    // No cookie or marker is left in the trace.
    assert!(no_cookie_files(&r.dir), "{label}");
    let events = r.dump.lines().filter(|l| l.contains("[event]")).count();
    assert_eq!(events, 1, "{label}: only the unwound mark\n{}", r.dump);
}

/// Checks a run whose resync stayed guessed (its file has no CFI): after it only the
/// coroutine's calls, as the guest's log has them (the frames they return from unknown),
/// with a LOST record that says so and no unwound mark.
pub fn assert_guessed(r: &Run, label: &str) {
    let want = [
        "E co_leaf",
        "X co_leaf",
        "E co_leaf",
        "X co_leaf",
        "E co_done",
    ];
    assert_eq!(r.after, want, "{label}: after the resync\n{}", r.replay);
    assert_eq!(
        entries(&r.after),
        r.log_after,
        "{label}: entries against the log"
    );
    assert!(
        r.dump.contains("[lost ]"),
        "{label}: no LOST record\n{}",
        r.dump
    );
    assert!(!r.dump.contains("[event]"), "{label}\n{}", r.dump);
    assert!(
        r.stderr.contains(
            "1 place where the call stack was lost (a return that matched no call, \
                       in code without frame pointers) could not be unwound"
        ),
        "{label}: {}",
        r.stderr
    );
    assert!(no_cookie_files(&r.dir), "{label}");
}

/// The indentation of the last replay line that ends in `what`, after its `|`.
pub fn indent(replay: &str, what: &str) -> usize {
    let line = replay
        .lines()
        .rev()
        .find(|l| l.trim_end().ends_with(what))
        .unwrap_or_else(|| panic!("no {what} in\n{replay}"));
    let after_bar = &line[line.find('|').expect("a replay line") + 1..];
    after_bar.len() - after_bar.trim_start().len()
}

/// The functions entered, in order.
pub fn entries(events: &[String]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e.strip_prefix("E "))
        .map(String::from)
        .collect()
}

/// Whether no resync cookie is left beside the trace (nor in a later process image's folder).
pub fn no_cookie_files(dir: &Path) -> bool {
    let folders = std::fs::read_dir(dir.join("procs"))
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path());
    std::iter::once(dir.to_path_buf())
        .chain(folders)
        .flat_map(|d| std::fs::read_dir(d).expect("the trace"))
        .all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".stack"))
}
