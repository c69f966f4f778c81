//! User mode with more guest threads alive at once than QEMU's first scoreboard allocation
//! (16 vCPUs): QEMU grows every scoreboard (the pending-return flag's included) while the
//! first threads run, and the hot path, which reads the flag under a base it takes again at
//! each translation, must follow. Every thread's calls are counted exactly.

mod common;

use common::user::record_ok;
use qemu_uftrace_tests::replay::{exactly, report_calls, task_list};
use qemu_uftrace_tests::{user_guest_elf, user_qemu};
use std::collections::BTreeMap;

#[test]
fn user_forty_threads_past_the_scoreboard_growth_are_counted_exactly() {
    let elf = user_guest_elf("manythreads.elf").expect("build");
    let (_tmp, dir, stdout) = record_ok(&user_qemu(), &[&elf.to_string_lossy()]);
    let field = |line: &str, key: &str| -> u32 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line:?}"))
    };
    let main_tid = stdout
        .lines()
        .find(|l| l.starts_with("main "))
        .map(|l| field(l, "tid="))
        .expect("main's line");
    // Thread k prints steps = 2k + 3: k + 1 calls before the barrier, k + 2 after.
    let threads: BTreeMap<u32, u64> = stdout
        .lines()
        .filter(|l| l.starts_with("thread "))
        .map(|l| (field(l, "tid="), u64::from(field(l, "steps="))))
        .collect();
    assert_eq!(threads.len(), 40, "{stdout}");
    let mut steps: Vec<u64> = threads.values().copied().collect();
    steps.sort_unstable();
    assert_eq!(steps, (0..40).map(|k| 2 * k + 3).collect::<Vec<u64>>());
    let mut tids: Vec<u32> = task_list(&dir)
        .expect("task.txt")
        .iter()
        .map(|t| t.0)
        .collect();
    tids.sort_unstable();
    let mut want: Vec<u32> = threads.keys().copied().chain([main_tid]).collect();
    want.sort_unstable();
    assert_eq!(tids, want, "one uftrace task per thread, by its thread id");
    let calls = report_calls(&dir, &["-F", &exactly("thread_step")]).expect("uftrace report");
    assert_eq!(calls.get("thread_step"), Some(&steps.iter().sum::<u64>()));
    for (&tid, &steps) in &threads {
        let calls = report_calls(
            &dir,
            &["--tid", &tid.to_string(), "-F", &exactly("thread_step")],
        )
        .expect("uftrace report");
        assert_eq!(
            calls.get("thread_step"),
            Some(&steps),
            "tid {tid}: {calls:?}"
        );
    }
    let stats = std::fs::read_to_string(dir.join("plugin.stats")).expect("plugin.stats");
    for key in ["unmatched_returns=0", "resyncs=0", "lost_records=0"] {
        assert!(stats.lines().any(|l| l == key), "{key} in:\n{stats}");
    }
}
