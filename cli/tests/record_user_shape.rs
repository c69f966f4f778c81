//! User mode: the call tree native uftrace shows for the same program built with `-pg`.
//! Functions entered by a jump — tail calls at -O2, static aarch64 glibc's
//! `__wrap_main: b main` — are calls nested in the jumper's frame, closed when the frame they
//! replaced returns. The guest (tests/guests/user/tailcalls.c, static glibc, -O2 with its
//! sibling calls) logs the functions it entered (entries only: `-finstrument-functions`'
//! exit hook would stop the sibling calls), on all three architectures.

mod common;

use common::user::{only_task, record_ok, Target, AARCH64, RISCV64, X86_64};
use qemu_uftrace_tests::replay::{replay_events, uftrace, without};
use qemu_uftrace_tests::{cached, make_guests, plugin_stat};
use std::path::PathBuf;

/// `make shape` of tests/guests/user for `target`.
fn guest(target: &Target, name: &str) -> PathBuf {
    let sub = format!("shape-{}", target.cross.trim_end_matches('-'));
    let args = [format!("CROSS={}", target.cross), "shape".to_string()];
    make_guests("user", &sub, &args)
        .unwrap_or_else(|e| panic!("make shape CROSS={}: {e:#}", target.cross))
        .join(name)
}

/// The program's own functions (its log names them).
const OWN: &[&str] = &["main", "caller", "tail1", "tail2", "leaf", "vtail", "count"];

/// The tree the program's calls make, as uftrace shows it for the `-pg` build: each
/// tail-called function inside the function that jumped to it.
fn expected_tree() -> Vec<String> {
    let caller = [
        "E caller", "E tail1", "E tail2", "E leaf", "X leaf", "X tail2", "X tail1", "X caller",
    ];
    let mut t = vec!["E main"];
    t.extend(caller);
    t.extend(["E vtail", "E leaf", "X leaf", "X vtail"]);
    t.extend(["E count", "E leaf", "X leaf", "E leaf", "X leaf", "X count"]);
    t.extend(caller);
    t.push("X main");
    t.into_iter().map(String::from).collect()
}

fn check(target: &Target) {
    let elf = guest(target, "tailcalls.elf");
    let (_tmp, dir, stdout) = record_ok(&cached(target.qemu), &[&elf.to_string_lossy()]);
    let log: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ENTRY "))
        .map(|n| format!("E {n}"))
        .collect();
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    let own = without(&events, |n| !OWN.contains(&n), false);
    let entries: Vec<String> = own
        .iter()
        .filter(|e| e.starts_with("E "))
        .cloned()
        .collect();
    assert_eq!(entries, log, "{}: entries against the log", target.cross);
    assert_eq!(own, expected_tree(), "{}: the tree", target.cross);
    // Tail-called frames close with the frame they replaced: no return skipped a frame.
    for key in ["deep_returns", "unmatched_returns"] {
        assert_eq!(plugin_stat(&dir, key), "0", "{}: {key}", target.cross);
    }
    // tail1 -> tail2 -> leaf twice, vtail -> leaf, and (aarch64) __wrap_main -> main.
    let jumps: u64 = plugin_stat(&dir, "jump_entries").parse().unwrap();
    assert!(jumps >= 5, "{}: jump_entries={jumps}", target.cross);
    if target.cross.starts_with("aarch64") {
        // Static aarch64 glibc enters main by `b main` from `__wrap_main`.
        let at = events.iter().position(|e| e == "E __wrap_main");
        assert!(
            at.is_some_and(|i| events[i + 1] == "E main"),
            "main nested in __wrap_main: {events:?}"
        );
    }
}

#[test]
fn tail_calls_nest_in_their_caller_aarch64() {
    check(&AARCH64);
}

#[test]
fn tail_calls_nest_in_their_caller_riscv64() {
    check(&RISCV64);
}

#[test]
fn tail_calls_nest_in_their_caller_x86_64() {
    check(&X86_64);
}

/// A shared library's tail calls (tests/guests/user/libtail.c, a dynamic PIE using it): the
/// library's functions are entered by jumps as the program's are, the library placed where
/// the guest's loader mapped it.
fn check_library(target: &Target, sysroot: Option<&str>) {
    let elf = guest(target, "libtail-dyn.elf");
    let elf = elf.to_string_lossy();
    let mut args: Vec<&str> = sysroot.map_or(Vec::new(), |r| vec!["-L", r]);
    args.push(&elf);
    let (_tmp, dir, stdout) = record_ok(&cached(target.qemu), &args);
    let log: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ENTRY "))
        .map(|n| format!("E {n}"))
        .collect();
    assert_eq!(log.len(), 6, "{stdout}");
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    let lib = ["lib_tail1", "lib_tail2", "lib_leaf"];
    let entries: Vec<String> = without(&events, |n| !lib.contains(&n), false)
        .into_iter()
        .filter(|e| e.starts_with("E "))
        .collect();
    assert_eq!(entries, log, "{}: entries against the log", target.cross);
    let own = without(&events, |n| !lib.contains(&n) && n != "caller", false);
    let call = [
        "E caller",
        "E lib_tail1",
        "E lib_tail2",
        "E lib_leaf",
        "X lib_leaf",
        "X lib_tail2",
        "X lib_tail1",
        "X caller",
    ];
    assert_eq!(own, [call, call].concat(), "{}: {events:?}", target.cross);
    for key in ["deep_returns", "unmatched_returns"] {
        assert_eq!(plugin_stat(&dir, key), "0", "{}: {key}", target.cross);
    }
}

#[test]
fn library_tail_calls_nest_in_their_caller_aarch64() {
    check_library(&AARCH64, Some("/usr/aarch64-linux-gnu"));
}

#[test]
fn library_tail_calls_nest_in_their_caller_x86_64() {
    check_library(&X86_64, None);
}

/// longjmp out of a noreturn function at -O2 (tests/guests/user/ljnoreturn.c): the frames it
/// skipped close where it lands, and main goes on at its own depth.
fn check_longjmp_from_noreturn(target: &Target) {
    for name in ["ljnoreturn.elf", "ljnoreturn-nofp.elf"] {
        check_longjmp_from_noreturn_in(target, name);
    }
}

/// [`check_longjmp_from_noreturn`] for one build: with frame records, or without (the landing
/// is then placed by the function holding the call before it: main, whose frame its own
/// even though `__wrap_main` enters it by a jump on aarch64).
fn check_longjmp_from_noreturn_in(target: &Target, name: &str) {
    let elf = guest(target, name);
    let (_tmp, dir, stdout) = record_ok(&cached(target.qemu), &[&elf.to_string_lossy()]);
    assert!(stdout.contains("r=7"), "{stdout}");
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    let own = without(
        &events,
        |n| !["main", "work", "fail", "after"].contains(&n),
        false,
    );
    let want = [
        "E main", "E work", "X work", "E fail", "X fail", "E after", "X after", "E after",
        "X after", "X main",
    ];
    assert_eq!(own, want, "{} {name}: {events:?}", target.cross);
    assert_eq!(
        plugin_stat(&dir, "deep_returns"),
        "0",
        "{} {name}",
        target.cross
    );
    // As uftrace's replay draws it: it puts the display back at setjmp's depth at a
    // longjmp's entry, so what follows the landing is drawn at main's callees' depth only
    // when the trace has what libmcount writes there (one exit, at setjmp's depth).
    let text = uftrace(&["replay", "--no-pager", "-d", &dir.to_string_lossy()]).expect("replay");
    let indent = |call: &str| {
        let line = (text.lines())
            .find(|l| l.ends_with(&format!("| {call}")) || l.contains(&format!("|{call}")))
            .or_else(|| text.lines().find(|l| l.trim_end().ends_with(call)))
            .unwrap_or_else(|| panic!("no {call} in\n{text}"));
        let after_bar = &line[line.find('|').expect("a replay line") + 1..];
        after_bar.len() - after_bar.trim_start().len()
    };
    assert_eq!(
        indent("work();"),
        indent("after();"),
        "{}:\n{text}",
        target.cross
    );
}

#[test]
fn longjmp_from_a_noreturn_function_aarch64() {
    check_longjmp_from_noreturn(&AARCH64);
}

#[test]
fn longjmp_from_a_noreturn_function_riscv64() {
    check_longjmp_from_noreturn(&RISCV64);
}

#[test]
fn longjmp_from_a_noreturn_function_x86_64() {
    check_longjmp_from_noreturn(&X86_64);
}
