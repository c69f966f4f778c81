//! A firmware-style guest that starts at EL3 (`tests/guests/el3.c`, `start_el3.S`, under
//! `-M virt,secure=on,virtualization=on`): it runs C at EL3, drops to Non-secure EL1 with
//! ERET, and at EL1 takes an SVC, an interrupt (a GICv2 SGI) and an SMC back to EL3, each
//! served by a C handler that calls a known function, then ends QEMU by semihosting.
//!
//! The exact call sequence `uftrace replay` shows is compared with what the guest logs itself
//! (its `-finstrument-functions` oracle, where each handler nests in the function that was
//! running when its exception was taken):
//! - on QEMU 10.2.2 and 11.1.3 (the discontinuity callback), with the exception entries
//!   `[svc]`, `[irq]`, `[smc]` around the handlers, in one task, and with `--split-levels` in
//!   two tasks, `cpu0 EL3` and `cpu0 EL1`, the `[smc]` in EL3's;
//! - on QEMU 10.0, without exception entries (plain calls must still be right), and
//!   `--split-levels` is refused with one line.
//!
//! Run: `cargo test --release -p qemu-uftrace --test el3_guest`.

mod common;

use qemu_uftrace_tests::replay::{parse_calls, replay_events, task_names, tree, uftrace, without};
use qemu_uftrace_tests::{
    el3_qemu_args_on, guest_elf, is_runtime_function, nm_functions, oracle_names, parse_oracle,
    plugin_stat, run_plain_qemu_argv, system_qemus, SystemQemu, Variant, QEMU_TIMEOUT,
};
use std::path::PathBuf;

/// The scenario as the oracle logs it (and as QEMU 10.0's trace must show it): each line a
/// call, indented two spaces per level of nesting. Handlers nest in the function that took
/// the exception: `do_syscall` executes the `svc`, the SGI is taken in `irq_window` right
/// after it unmasks IRQs, `firmware_call` executes the `smc`.
const ORACLE: &str = "
el3_main
  el3_gic_init
  el3_sum
    el3_leaf
    el3_leaf
    el3_leaf
main
  el1_work
    el1_leaf
    el1_leaf
  do_syscall
    el1_svc_handler
      svc_work
  irq_setup
  irq_window
    el1_irq_handler
      irq_work
  firmware_call
    el3_smc_handler
      el3_smc_work
";

/// What a trace with exception entries shows, in one task: each handler inside the entry of
/// the exception that ran it, at the depth where the exception was taken.
const WITH_EXCEPTIONS: &str = "
el3_main
  el3_gic_init
  el3_sum
    el3_leaf
    el3_leaf
    el3_leaf
main
  el1_work
    el1_leaf
    el1_leaf
  do_syscall
    [svc]
      el1_svc_handler
        svc_work
  irq_setup
  irq_window
    [irq]
      el1_irq_handler
        irq_work
  firmware_call
    [smc]
      el3_smc_handler
        el3_smc_work
";

/// With `--split-levels`, task `cpu0 EL3`: the boot code at EL3, then the SMC, whose entry
/// opens in the task of the level it is taken to, on that task's own (empty) stack.
const SPLIT_EL3: &str = "
el3_main
  el3_gic_init
  el3_sum
    el3_leaf
    el3_leaf
    el3_leaf
[smc]
  el3_smc_handler
    el3_smc_work
";

/// With `--split-levels`, task `cpu0 EL1`: the SVC and the IRQ are taken to EL1 itself.
/// `firmware_call` stays open while EL3 serves its SMC.
const SPLIT_EL1: &str = "
main
  el1_work
    el1_leaf
    el1_leaf
  do_syscall
    [svc]
      el1_svc_handler
        svc_work
  irq_setup
  irq_window
    [irq]
      el1_irq_handler
        irq_work
  firmware_call
";

/// Functions the guest runs at EL3 (el3.c names them so); all others run at EL1.
fn runs_at_el3(name: &str) -> bool {
    name.starts_with("el3_")
}

/// The guest's console must show every check passing.
fn assert_guest_ok(console: &str, what: &str) {
    for line in [
        "EL3 CurrentEL = 3",
        "el3_sum(3) = 21",
        "EL1 CurrentEL = 1",
        "el1_work(2) = 103",
        "do_syscall(5) = 16",
        "irq_window() = 1",
        "irq_last = 3",
        "firmware_call(4) = 45",
    ] {
        assert!(
            console.lines().any(|l| l.trim_end() == line),
            "{what}: no {line:?} in the guest's output:\n{console}"
        );
    }
}

fn el3_elf(variant: Variant) -> PathBuf {
    guest_elf("el3", variant).expect("build guests")
}

/// The oracle of `el3-oracle.elf` (from `console`, that build's output), as names.
fn oracle_of(console: &str) -> Vec<String> {
    let elf = el3_elf(Variant::Oracle);
    let events = parse_oracle(console).expect("oracle log");
    qemu_uftrace_tests::check_balanced(&events).expect("balanced oracle log");
    oracle_names(&events, &nm_functions(&elf).expect("nm"))
}

/// One `qemu-uftrace record` of the guest.
struct Recorded {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    what: String,
}

/// Records the guest's `variant` on `qemu`; fails unless QEMU exits 0 with every check of
/// the guest passing.
fn record(qemu: &SystemQemu, variant: Variant, split: bool) -> Recorded {
    let elf = el3_elf(variant);
    let what = format!(
        "{} on {}{}",
        elf.file_name().unwrap_or_default().to_string_lossy(),
        qemu.label,
        if split { " --split-levels" } else { "" }
    );
    let options: &[&str] = if split { &["--split-levels"] } else { &[] };
    let (tmp, dir, console) = common::record_argv(&el3_qemu_args_on(&qemu.program, &elf), options);
    assert_guest_ok(&console, &what);
    if variant == Variant::Oracle {
        // The traced run logged the same as the plain one.
        assert_eq!(
            oracle_of(&console),
            tree(ORACLE),
            "{what}: the guest's oracle"
        );
    }
    // Every call returned, every exception entry was closed by its own ERET.
    for key in [
        "deep_returns",
        "unmatched_returns",
        "returns_unseen",
        "resyncs",
        "eret_redirects",
    ] {
        assert_eq!(plugin_stat(&dir, key), "0", "{what}: plugin.stats {key}");
    }
    // But rt_exit, which the start code enters by `b rt_exit` and which ends the guest.
    assert_eq!(plugin_stat(&dir, "open_frames"), "1", "{what}: open_frames");
    Recorded {
        _tmp: tmp,
        dir,
        what,
    }
}

/// The scenario's events in task `tid`: the runtime (UART, checks, the oracle's hooks and
/// dump) goes with everything it calls.
fn scenario(rec: &Recorded, tid: u32) -> Vec<String> {
    let events = replay_events(&rec.dir, tid).expect("uftrace replay");
    without(&events, is_runtime_function, true)
}

/// The QEMUs with the discontinuity callback (exception entries, `--split-levels`).
fn qemus_with_exceptions() -> Vec<SystemQemu> {
    let qemus: Vec<SystemQemu> = system_qemus()
        .into_iter()
        .filter(|q| q.label != "10.0")
        .collect();
    assert_eq!(qemus.len(), 2, "expected QEMU 10.2.2 and 11.1.3");
    qemus
}

fn qemu_10_0() -> SystemQemu {
    system_qemus()
        .into_iter()
        .find(|q| q.label == "10.0")
        .expect("QEMU 10.0 in system_qemus")
}

#[test]
fn the_guest_logs_its_scenario() {
    // Under plain QEMU (no plugin), on every QEMU: the checks pass and the oracle is the
    // scenario.
    for qemu in system_qemus() {
        let args = el3_qemu_args_on(&qemu.program, &el3_elf(Variant::Oracle));
        let (code, console) = run_plain_qemu_argv(&args, QEMU_TIMEOUT).expect("run el3-oracle");
        assert_eq!(code, 0, "el3-oracle.elf on {}:\n{console}", qemu.label);
        assert_guest_ok(&console, qemu.label);
        assert_eq!(oracle_of(&console), tree(ORACLE), "on {}", qemu.label);
        let args = el3_qemu_args_on(&qemu.program, &el3_elf(Variant::Natural));
        let (code, console) = run_plain_qemu_argv(&args, QEMU_TIMEOUT).expect("run el3");
        assert_eq!(code, 0, "el3.elf on {}:\n{console}", qemu.label);
        assert_guest_ok(&console, qemu.label);
    }
    // The expected traces are the oracle with exception entries: removing them (and, split,
    // taking each level's functions) gives the oracle back.
    let no_entries = |events: &[String]| without(events, |n| n.starts_with('['), false);
    assert_eq!(no_entries(&tree(WITH_EXCEPTIONS)), tree(ORACLE));
    let el3: Vec<String> = tree(ORACLE)
        .into_iter()
        .filter(|e| runs_at_el3(&e[2..]))
        .collect();
    assert_eq!(no_entries(&tree(SPLIT_EL3)), el3);
    assert_eq!(
        no_entries(&tree(SPLIT_EL1)),
        without(&tree(ORACLE), runs_at_el3, true)
    );
}

#[test]
fn exceptions_show_where_they_were_taken() {
    for qemu in qemus_with_exceptions() {
        for variant in [Variant::Natural, Variant::Oracle] {
            let rec = record(&qemu, variant, false);
            let what = &rec.what;
            // One task: the vCPU's code at every level.
            let tasks = task_names(&rec.dir).expect("task.txt");
            assert_eq!(
                tasks.into_iter().collect::<Vec<_>>(),
                [(1, "cpu0".to_string())],
                "{what}: tasks"
            );
            assert_eq!(scenario(&rec, 1), tree(WITH_EXCEPTIONS), "{what}");
            // The SVC, the IRQ and the SMC; the semihosting call is QEMU's, not the guest's.
            assert_eq!(plugin_stat(&rec.dir, "exceptions"), "3", "{what}");
            assert_eq!(plugin_stat(&rec.dir, "exception_returns"), "3", "{what}");
        }
    }
}

#[test]
fn split_levels_keep_el3_and_el1_apart() {
    for qemu in qemus_with_exceptions() {
        for variant in [Variant::Natural, Variant::Oracle] {
            let rec = record(&qemu, variant, true);
            let what = &rec.what;
            let tasks = task_names(&rec.dir).expect("task.txt");
            let tid_of = |name: &str| {
                tasks
                    .iter()
                    .find_map(|(tid, n)| (n == name).then_some(*tid))
                    .unwrap_or_else(|| panic!("{what}: no task {name:?} in {tasks:?}"))
            };
            assert_eq!(tasks.len(), 2, "{what}: tasks {tasks:?}");
            let (el3, el1) = (tid_of("cpu0 EL3"), tid_of("cpu0 EL1"));
            // uftrace itself names them so.
            let d = rec.dir.to_string_lossy().into_owned();
            let info = uftrace(&["info", "-d", &d]).expect("uftrace info");
            let list = format!("{el3}(cpu0 EL3), {el1}(cpu0 EL1)");
            assert!(
                info.lines()
                    .any(|l| l.starts_with("# task list") && l.ends_with(&list)),
                "{what}: no task list {list:?} in:\n{info}"
            );

            let el3_events = scenario(&rec, el3);
            let el1_events = scenario(&rec, el1);
            assert_eq!(el3_events, tree(SPLIT_EL3), "{what}: task cpu0 EL3");
            assert_eq!(el1_events, tree(SPLIT_EL1), "{what}: task cpu0 EL1");
            // No function of one level in the other's task, the runtime included (rt_check
            // runs at both levels and is left out above).
            let all = |tid| replay_events(&rec.dir, tid).expect("uftrace replay");
            for ev in all(el3) {
                let name = &ev[2..];
                assert!(
                    runs_at_el3(name) || name == "[smc]" || is_runtime_function(name),
                    "{what}: {name} in task cpu0 EL3"
                );
            }
            for ev in all(el1) {
                let name = &ev[2..];
                assert!(
                    !runs_at_el3(name) && name != "[smc]",
                    "{what}: {name} in task cpu0 EL1"
                );
            }

            // One timeline: EL3's boot code before EL1's main, and the SMC while
            // firmware_call waits for it, before EL1 calls anything else.
            let text = uftrace(&["replay", "--no-pager", "-f", "tid,time", "-d", &d])
                .expect("uftrace replay");
            let calls = parse_calls(&text).expect("replay");
            let find = |name: &str| {
                calls
                    .iter()
                    .position(|c| c.name == name)
                    .unwrap_or_else(|| panic!("{what}: no {name} in:\n{text}"))
            };
            let time = |i: usize| calls[i].time.expect("timestamps");
            let (el3_main, main) = (find("el3_main"), find("main"));
            assert!(time(el3_main) < time(main), "{what}:\n{text}");
            let (call, smc) = (find("firmware_call"), find("[smc]"));
            assert_eq!(calls[smc].tid, el3, "{what}: [smc]");
            let end = |i: usize| calls[i].end_time.expect("a return line");
            assert!(
                time(call) < time(smc) && end(smc) < end(call),
                "{what}: [smc] outside firmware_call:\n{text}"
            );
            assert_eq!(plugin_stat(&rec.dir, "exceptions"), "3", "{what}");
            assert_eq!(plugin_stat(&rec.dir, "exception_returns"), "3", "{what}");
        }
    }
}

#[test]
fn without_the_discontinuity_callback_plain_calls_stay_right() {
    let qemu = qemu_10_0();
    for variant in [Variant::Natural, Variant::Oracle] {
        // No exception entries: the handlers' calls nest where the vectors made them, in the
        // function that took the exception, exactly as the oracle logs them.
        let rec = record(&qemu, variant, false);
        assert_eq!(scenario(&rec, 1), tree(ORACLE), "{}", rec.what);
        assert_eq!(plugin_stat(&rec.dir, "exceptions"), "0", "{}", rec.what);
    }
    // --split-levels needs the exception entries: refused, with one line, and no trace.
    let (_tmp, dir, out) = common::record_output(
        &el3_qemu_args_on(&qemu.program, &el3_elf(Variant::Natural)),
        &["--split-levels"],
    );
    assert!(!out.status.success(), "--split-levels on 10.0 succeeded");
    let line = common::single_error(&out);
    assert!(
        line.contains("--split-levels") && line.contains("10.2"),
        "unclear refusal: {line}"
    );
    assert!(
        common::stderr(&out).lines().count() == 1,
        "more than one line:\n{}",
        common::stderr(&out)
    );
    assert!(!dir.exists(), "a trace was left in {}", dir.display());
}
