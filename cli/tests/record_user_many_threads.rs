//! User mode with more guest threads alive at once than QEMU's first scoreboard allocation
//! (16 vCPUs): QEMU grows every scoreboard (the pending-return flag's included) while the
//! first threads run, and the hot path, which reads the flag under a base it takes again at
//! each translation, must follow. Every thread's calls are counted exactly.

mod common;

use common::user::{check_thread_tasks, record_ok};
use qemu_uftrace_tests::replay::{exactly, report_calls};
use qemu_uftrace_tests::{user_guest_elf, user_qemu};

#[test]
fn user_forty_threads_past_the_scoreboard_growth_are_counted_exactly() {
    let elf = user_guest_elf("manythreads.elf").expect("build");
    let (_tmp, dir, stdout) = record_ok(&user_qemu(), &[&elf.to_string_lossy()]);
    // Thread k prints steps = 2k + 3: k + 1 calls before the barrier, k + 2 after.
    let (_, threads) = check_thread_tasks(&dir, &stdout);
    assert_eq!(threads.len(), 40, "{stdout}");
    let mut steps: Vec<u64> = threads.values().copied().collect();
    steps.sort_unstable();
    assert_eq!(steps, (0..40).map(|k| 2 * k + 3).collect::<Vec<u64>>());
    let calls = report_calls(&dir, &["-F", &exactly("thread_step")]).expect("uftrace report");
    assert_eq!(calls.get("thread_step"), Some(&steps.iter().sum::<u64>()));
    let stats = std::fs::read_to_string(dir.join("plugin.stats")).expect("plugin.stats");
    for key in [
        "unmatched_returns=0",
        "resyncs=0",
        "lost_records=0",
        "tasks=41",
    ] {
        assert!(stats.lines().any(|l| l == key), "{key} in:\n{stats}");
    }
    // Each thread's context was freed as it exited (the main thread's runs to the end). QEMU
    // wakes a thread joining an exiting one before it unrealizes the exiting vCPU, which
    // runs the plugin's exit callback (a 2022 linux-user patch's order): main's exit_group
    // can overtake the last threads' callbacks, whose contexts then last to the end (under
    // the suite's load, 2026-12-06: 39 of 40 freed). The last few joined only.
    let ended: u32 = (stats.lines())
        .find_map(|l| l.strip_prefix("tasks_ended="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("tasks_ended in:\n{stats}"));
    assert!(
        (36..=40).contains(&ended),
        "tasks_ended={ended} in:\n{stats}"
    );
}
