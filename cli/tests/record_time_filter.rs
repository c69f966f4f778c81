//! `-t/--time-filter` on the bare-metal guests (one vCPU: the instruction clock, so two runs
//! are identical), under every aarch64 QEMU (10.0; 10.2.2 and 11.1.3 with exception entries),
//! every riscv64 one and every x86_64 one (from `main`), with arguments and return values
//! too: the trace recorded with it replays,
//! line for line and time for time, as uftrace's own `replay -t` shows the unfiltered trace
//! (uftrace's filter is the oracle); what it left out is counted; bad TIMEs are one line
//! before QEMU starts. In user
//! mode (qemu-aarch64 10.2.2, `--clock insn`: each thread's instructions, the same in every
//! run) the same holds task by task, for one thread and for a fork whose child starts inside
//! the parent's waiting frames, then execs; threads (whose runs differ) that end with frames
//! open give a trace uftrace's `replay -t` leaves as it is.

mod common;

use common::user::text;
use common::{group, qemu_uftrace, record_named, record_to_panic, single_error, stat_per_image};

use common::user::record_with;
use qemu_uftrace_tests::replay::uftrace;
use qemu_uftrace_tests::riscv64::{riscv64_guest_elf, riscv64_qemu_args_on, riscv64_qemus};
use qemu_uftrace_tests::x86_64_guests::{
    system_qemus_x86_64, x86_64_guest_elf, x86_64_qemu_args_on,
};
use qemu_uftrace_tests::{
    el3_qemu_args_on, guest_elf, kernel_boot_args, qemu_args_on, system_qemus, user_guest_elf,
    user_qemu, Variant, QEMU,
};
use std::path::Path;

/// `uftrace replay` of `dir` with `options`, its lines as printed (durations, task, calls).
fn replay(dir: &Path, options: &[&str]) -> Vec<String> {
    let d = dir.to_string_lossy();
    let mut args = vec!["replay", "--no-pager", "-d", &d];
    args.extend_from_slice(options);
    let text = uftrace(&args).expect("replay");
    text.lines().map(str::to_string).collect()
}

/// Entries among replay lines: `name() {` and a leaf's `name();`.
fn entries(lines: &[String]) -> u64 {
    lines
        .iter()
        .filter(|l| l.ends_with("() {") || l.ends_with("();"))
        .count() as u64
}

/// Records `program` unfiltered and with `-t time` on every aarch64, riscv64 and x86_64
/// QEMU; the second's replay must be the first's `replay -t uftrace_time`. Returns, per
/// machine, the lines of the full replay and of the filtered one. x86_64's two recordings
/// start at `main` (`--start-at`): SeaBIOS before it waits on QEMU's timers, which run on
/// host time, so two runs of a PC differ there by a few hundred calls; from `main` on the
/// guest is its own.
fn same_as_uftrace(
    program: &str,
    time: &str,
    uftrace_time: &str,
) -> Vec<(String, usize, Vec<String>)> {
    same_as_uftrace_with(&[], program, time, uftrace_time)
}

/// [`same_as_uftrace`] with `both` options given to both recordings.
fn same_as_uftrace_with(
    both: &[&str],
    program: &str,
    time: &str,
    uftrace_time: &str,
) -> Vec<(String, usize, Vec<String>)> {
    let elf = guest_elf(program, Variant::Natural).expect("guests");
    let mut machines: Vec<(String, Vec<String>, Vec<&str>)> = system_qemus()
        .into_iter()
        .map(|q| {
            (
                q.label.to_string(),
                qemu_args_on(&q.program, &elf),
                both.to_vec(),
            )
        })
        .collect();
    let rv = riscv64_guest_elf(program, Variant::Natural).expect("riscv64 guests");
    machines.extend(riscv64_qemus().into_iter().map(|q| {
        (
            format!("riscv64 {}", q.label),
            riscv64_qemu_args_on(&q.program, &rv),
            both.to_vec(),
        )
    }));
    // A window of its own already starts inside the guest. Switched windows (`--trace=off`)
    // not on x86_64: SeaBIOS takes its timer interrupts where the host's time puts them, so
    // the exception entries open beneath a window differ between the two runs.
    if !both.contains(&"--start-at") && !both.contains(&"--trace=off") {
        let pc = x86_64_guest_elf(program, Variant::Natural).expect("x86_64 guests");
        machines.extend(system_qemus_x86_64().into_iter().map(|q| {
            (
                format!("x86_64 {}", q.label),
                x86_64_qemu_args_on(&q.program, &pc),
                [both, &["--start-at", "main"]].concat(),
            )
        }));
    }
    machines
        .iter()
        .map(|(label, argv, options)| {
            let (all, got) = same_on(label, argv, options, time, uftrace_time);
            (label.clone(), all, got)
        })
        .collect()
}

/// Records `argv` unfiltered and with `-t time` (`both` given to both); the second's replay
/// must be the first's `replay -t uftrace_time`, its left-out calls counted. Returns the
/// number of lines of the full replay and the filtered replay's lines.
fn same_on(
    qemu: &str,
    argv: &[String],
    both: &[&str],
    time: &str,
    uftrace_time: &str,
) -> (usize, Vec<String>) {
    common::require(&argv[0]);
    let (_t1, full, out) = record_named("full", argv, both);
    assert!(out.status.success(), "{qemu}: {}", text(&out.stderr));
    let short = [both, &["-t", time]].concat();
    let (_t2, dir, out) = record_named("short", argv, &short);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{qemu}: {err}");
    let all = replay(&full, &[]);
    let want = replay(&full, &["-t", uftrace_time]);
    assert!(entries(&want) > 0, "{qemu}: uftrace shows nothing");
    let got = replay(&dir, &[]);
    assert_eq!(got, want, "{qemu} {both:?} -t {time}: {err}");
    // Every call uftrace's filter hides is counted as left out, in plugin.stats and in
    // the closing line (the plugin's count covers the whole run: with a window, the
    // calls it dropped outside the window too).
    let dropped = entries(&all) - entries(&got);
    assert!(dropped > 0, "{qemu} -t {time}: nothing filtered");
    let counted = stat_per_image(&dir, "time_filtered")[0];
    assert!(
        counted == dropped || (!both.is_empty() && counted > dropped),
        "{qemu} {both:?}: {dropped} hidden by uftrace, {counted} counted"
    );
    assert!(
        err.contains(&format!("; {} calls shorter than -t ]", group(counted))),
        "{qemu}: {counted}: {err}"
    );
    (all.len(), got)
}

/// A threshold that drops the leaves (3 and 9 instructions) and keeps the UART's calls
/// (11): most of the tree stays. (x86_64's code takes other counts: there the equality with
/// uftrace's filter is the whole check.)
#[test]
fn a_short_threshold_drops_only_the_shortest_calls() {
    for (label, all, got) in same_as_uftrace("nested", "10", "10") {
        if label.starts_with("x86_64") {
            continue;
        }
        let got = got.len();
        assert!(got * 2 > all, "{label}: {got} of {all} lines");
    }
}

/// A call exactly as long as the threshold is kept (uftrace drops only shorter ones).
#[test]
fn a_call_as_long_as_the_threshold_is_kept() {
    same_as_uftrace("nested", "9", "9");
}

/// A threshold that drops most records, given with a unit as uftrace reads it: 0.1us is
/// 100 of its ns, which under the instruction clock are instructions.
#[test]
fn a_long_threshold_keeps_only_the_long_calls_and_their_ancestors() {
    for (label, all, got) in same_as_uftrace("nested", "0.1us", "0.1us") {
        let got = got.len();
        assert!(got * 4 < all, "{label}: {got} of {all} lines");
    }
}

/// Recursion: each level's frame is written before the deep calls that make it long.
#[test]
fn recursion_writes_each_long_frames_ancestors_first() {
    same_as_uftrace("recursion", "200", "200");
}

/// With `--start-at` and `--stop-at` the window is cut as without `-t`: the frames open at
/// the start are written first (`qemu:opened`), those open at the stop closed there. So are
/// the windows of a recording switched on and off while the guest runs (two here:
/// `nest_level2` switches on, `rt_check` off, each called twice; aarch64 and riscv64),
/// their opened frames and their edges kept.
#[test]
fn a_window_is_cut_as_without_the_filter() {
    same_as_uftrace_with(&["--start-at", "rt_check"], "nested", "10", "10");
    same_as_uftrace_with(&["--stop-at", "rt_put_dec"], "nested", "10", "10");
    let switched = [
        "--clock",
        "insn",
        "--trace=off",
        "--trace-on-at",
        "nest_level2",
        "--trace-off-at",
        "rt_check",
    ];
    for (label, _, lines) in same_as_uftrace_with(&switched, "nested", "10", "10") {
        // Each window's frames open at its switch (`qemu:opened`), main's included.
        let marks = |m: &str| lines.iter().filter(|l| l.contains(m)).count();
        assert_eq!(marks("qemu:opened"), 2, "{label}: {lines:#?}");
        assert_eq!(marks("| main() {"), 2, "{label}: {lines:#?}");
    }
}

/// `-A`/`-R` beside `-t` (`tests/guests/sysargs.c`): a kept call keeps its arguments and
/// return value, a dropped one leaves none behind; line for line as uftrace's `replay -t`
/// shows the unfiltered trace with its values.
#[test]
fn arguments_and_return_values_go_with_their_calls() {
    let specs = [
        "-A",
        "add@arg1/i32,arg2/i32",
        "-R",
        "^add$@retval/i32",
        "-A",
        "greet@arg1/s,arg2/i32",
        "-R",
        "greet@retval/i32",
        "-A",
        "six@arg1/i,arg2/i,arg3/i,arg4/i,arg5/i,arg6/i",
        "-R",
        "six@retval/i",
    ];
    for (label, _, lines) in same_as_uftrace_with(&specs, "sysargs", "20", "20") {
        let shown = |text: &str| lines.iter().any(|l| l.contains(text));
        // greet of a 159-letter string (hundreds of instructions) stays, with its values;
        // add (a few instructions) goes.
        assert!(
            shown("greet(\"abcdefghij") && shown(", 0) = 159;"),
            "{label}: {lines:#?}"
        );
        assert!(!shown("add("), "{label}: {lines:#?}");
    }
}

/// The EL3 guest's exceptions (`[svc]`, `[irq]`, `[smc]` entries on 10.2.2 and 11.1.3, the
/// handlers nested as calls on 10.0) are filtered as uftrace's `replay -t` filters them: an
/// exception entry is a frame like a call's, dropped when shorter, written before a long
/// handler. Thresholds from below the leaves to above the handlers.
#[test]
fn exception_entries_are_filtered_as_uftrace_filters_them() {
    let elf = guest_elf("el3", Variant::Natural).expect("guests");
    for q in system_qemus() {
        let argv = el3_qemu_args_on(&q.program, &elf);
        for time in ["10", "150"] {
            same_on(q.label, &argv, &[], time, time);
        }
        // 40 instructions: `[svc]` (39) goes with its handler, `[irq]` (55) and `[smc]`
        // (45) stay, their handlers (under 40) gone.
        let (_, got) = same_on(q.label, &argv, &[], "40", "40");
        let shown = |name: &str| got.iter().any(|l| l.contains(name));
        assert!(!shown("handler"), "{}: {got:#?}", q.label);
        if q.label != "10.0" {
            assert!(!shown("[svc]"), "{}: {got:#?}", q.label);
            assert!(
                shown("[irq]();") && shown("[smc]();"),
                "{}: {got:#?}",
                q.label
            );
        }
    }
}

/// Each task's replay lines, tasks in the order `task.txt` first names them (the first
/// process's threads, then later tasks as they were created), the tid column and the task
/// lines without the tid (which differs from run to run). Not in tid order: a user-mode
/// task's tid is a host thread's, and a host whose pids wrap around (CI's did) gives a
/// forked child a smaller one than its parent's.
fn replay_tasks(dir: &Path, options: &[&str]) -> Vec<Vec<String>> {
    // The TASK lines' threads and the FORK lines' children.
    let task_txt = std::fs::read_to_string(dir.join("task.txt")).expect("task.txt");
    let named: Vec<u32> = task_txt
        .lines()
        .filter_map(|l| {
            let key = match l.split(' ').next() {
                Some("TASK") => "tid=",
                Some("FORK") => "pid=",
                _ => return None,
            };
            l.split(' ').find_map(|w| w.strip_prefix(key)?.parse().ok())
        })
        .collect();
    // An exec'd program's session has the thread that exec'd: each tid once, where first named.
    let mut tids = Vec::new();
    for tid in named {
        if !tids.contains(&tid) {
            tids.push(tid);
        }
    }
    tids.iter()
        .map(|tid| {
            let t = tid.to_string();
            let with_tid = [options, &["--tid", &t]].concat();
            replay(dir, &with_tid)
                .into_iter()
                .map(|l| {
                    let l = l.replace(&format!("task: {tid}"), "task: T");
                    match (l.find('['), l.find(']')) {
                        (Some(a), Some(b)) if a < b && l[a + 1..b].trim() == t => {
                            format!("{}[T]{}", &l[..a], &l[b + 1..])
                        }
                        _ => l,
                    }
                })
                .collect()
        })
        .collect()
}

/// Records the user-mode guest `program` under qemu-aarch64 with `--clock insn`, unfiltered
/// and with `-t time`: each task of the second replays as uftrace's `replay -t time` shows
/// that task in the first; the calls it hides are counted, by every process image, and in
/// the closing line. Returns the filtered tasks' lines.
fn user_same_as_uftrace(program: &str, args: &[&str], time: &str) -> Vec<Vec<String>> {
    let qemu = user_qemu();
    let elf = user_guest_elf(program).expect("user guests");
    let elf = elf.to_string_lossy();
    let argv = [&[elf.as_ref()], args].concat();
    let (_t1, full, out) = record_with(&qemu, &["--clock", "insn"], &argv);
    assert!(out.status.success(), "{program}: {}", text(&out.stderr));
    let (_t2, dir, out) = record_with(&qemu, &["--clock", "insn", "-t", time], &argv);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{program} -t {time}: {err}");
    let want = replay_tasks(&full, &["-t", time]);
    let got = replay_tasks(&dir, &[]);
    assert_eq!(got.len(), want.len(), "{program}: tasks");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(entries(w) > 0, "{program}: task {i}: uftrace shows nothing");
        assert_eq!(
            g, w,
            "{program} -t {time}: task {i} (creation order): {err}"
        );
    }
    let dropped = entries(&replay(&full, &[])) - entries(&replay(&dir, &[]));
    assert!(dropped > 0, "{program} -t {time}: nothing filtered");
    let counted = stat_per_image(&dir, "time_filtered").iter().sum::<u64>();
    assert_eq!(counted, dropped, "{program}: hidden by uftrace, counted");
    assert!(
        err.contains(&format!("; {} calls shorter than -t ]", group(counted))),
        "{program}: {counted}: {err}"
    );
    got
}

#[test]
fn user_mode_one_thread_is_filtered_as_uftrace_filters_it() {
    let got = user_same_as_uftrace("nested.elf", &[], "10");
    assert_eq!(got.len(), 1);
}

/// Three threads end (in `exit`, with `start_thread` and what it called open): each one's
/// waiting entries are written at its exit. Threads' runs differ (a join waits on a futex
/// or not, a `printf` finds stdout's lock taken or not), so no second run is the oracle:
/// the trace is one uftrace's `replay -t` leaves as it is, task by task.
#[test]
fn user_mode_threads_ending_with_frames_open_keep_them() {
    let qemu = user_qemu();
    let elf = user_guest_elf("threads.elf").expect("user guests");
    let elf = elf.to_string_lossy();
    let (_t, dir, out) = record_with(&qemu, &["--clock", "insn", "-t", "50"], &[&elf]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let got = replay_tasks(&dir, &[]);
    assert_eq!(replay_tasks(&dir, &["-t", "50"]), got);
    assert_eq!(got.len(), 4);
    for task in &got[1..] {
        // Written at the thread's exit, though never closed.
        assert!(
            task.iter().any(|l| l.ends_with("start_thread() {")),
            "{task:#?}"
        );
        assert!(
            task.iter().any(|l| l.ends_with("] start_thread")),
            "{task:#?}"
        );
        // thread_step (a few instructions) dropped, thread_main kept.
        assert!(task.iter().any(|l| l.contains("thread_main")), "{task:#?}");
        assert!(!task.iter().any(|l| l.contains("thread_step")), "{task:#?}");
    }
    let counted = stat_per_image(&dir, "time_filtered").iter().sum::<u64>();
    assert!(counted > 3 * 5, "{counted}");
    assert!(
        err.contains(&format!("; {} calls shorter than -t ]", group(counted))),
        "{counted}: {err}"
    );
}

/// A fork inside frames still waiting (`fork`, `_Fork`): the child starts past them (their
/// exits are its first records), the parent writes `fork` (97 instructions) without its
/// short callees; the child execs `execd.elf`, whose session goes on in the child's task;
/// each process image counts the calls it dropped.
#[test]
fn user_mode_a_fork_inside_waiting_frames_is_filtered_as_uftrace_filters_it() {
    let execd = user_guest_elf("execd.elf").expect("user guests");
    let got = user_same_as_uftrace("forkexec.elf", &[&execd.to_string_lossy()], "50");
    assert_eq!(got.len(), 2);
    // The exec'd image's session is there (its names under --clock insn are the older
    // session's: each image counts from 0, see DEVELOPERS.md; both replays read it alike).
    assert!(
        got[1].iter().any(|l| l.ends_with("| execve() {")),
        "{:#?}",
        got[1]
    );
    assert!(
        got[1].iter().any(|l| l.ends_with("} /* fork */")),
        "{:#?}",
        got[1]
    );
    assert!(
        got[0]
            .iter()
            .any(|l| l.split('|').nth(1).map(str::trim) == Some("fork();")),
        "{:#?}",
        got[0]
    );
}

/// A Linux boot (79 tasks switching, scheduler events, frames open in every task at the end)
/// is not deterministic, so no second run is its oracle; but a trace filtered by `-t` must
/// be one uftrace's `replay -t` leaves as it is (no call shorter than TIME written, nothing
/// a kept call needs missing), with every task's open frames at the end.
#[test]
fn a_linux_boot_filtered_is_left_as_it_is_by_uftraces_filter() {
    common::require(QEMU);
    let (_tmp, dir, _console) = record_to_panic(&kernel_boot_args("cortex-a57"), &["-t", "10us"]);
    let got = replay(&dir, &[]);
    let refiltered = replay(&dir, &["-t", "10us"]);
    assert_eq!(got.len(), refiltered.len());
    assert!(
        got == refiltered,
        "uftrace's -t 10us changes the -t 10us trace"
    );
    // Tasks switched: their scheduler events inside long calls are kept.
    assert!(got.iter().any(|l| l.ends_with("/* linux:sched-out */")));
    // Frames open at the end, of tasks switched away then too.
    let open = got
        .iter()
        .skip_while(|l| !l.contains("remaining functions"))
        .filter(|l| l.starts_with("task: "))
        .count();
    assert!(
        open > 50,
        "{open} tasks with frames open at the end (the boot has 79)"
    );
    // Most of the boot's calls are shorter.
    let stats = std::fs::read_to_string(dir.join("plugin.stats")).unwrap();
    let count = |key: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {stats}"))
    };
    assert!(count("time_filtered") * 10 > count("calls") * 9, "{stats}");
}

#[test]
fn a_time_that_cannot_be_read_is_one_line_before_qemu_starts() {
    let home = tempfile::tempdir().unwrap();
    for (time, says) in [
        ("10kg", "time filter unit 'kg' is none of ns, us, ms, s, m"),
        ("-5", "time filter '-5' is negative"),
        ("1.us", "time filter '1.us' is not a number"),
        ("", "time filter '' is not a number"),
    ] {
        // QEMU would fail to start (no machine): the refusal comes first.
        let o = qemu_uftrace(home.path())
            .args(["record", "-t", time, "-o"])
            .arg(home.path().join("uftrace.data"))
            .args(["--", QEMU])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{time}: {}", text(&o.stderr));
        let line = single_error(&o);
        assert!(line.contains(says), "{time}: {line}");
        assert!(!text(&o.stderr).contains("QEMU"), "{time}: QEMU ran");
        assert!(!home.path().join("uftrace.data").exists());
    }
}
