//! User mode: the call tree native uftrace shows for the same program built with `-pg`.
//! Functions entered by a jump — tail calls at -O2, static aarch64 glibc's
//! `__wrap_main: b main` — are calls nested in the jumper's frame, closed when the frame they
//! replaced returns. The guest (tests/guests/user/tailcalls.c, static glibc, -O2 with its
//! sibling calls) logs the functions it entered (entries only: `-finstrument-functions`'
//! exit hook would stop the sibling calls), on all three architectures. So are functions
//! entered by a jump through a register (makecontext's, by `setcontext`), and a nested
//! function called through its trampoline is that function's call.

mod common;

/// `caller`'s call into libtail.so as replay shows it: the library's tail calls nested, each
/// closed by the leaf's return.
const LIB_TAIL_CALL: [&str; 8] = [
    "E caller",
    "E lib_tail1",
    "E lib_tail2",
    "E lib_leaf",
    "X lib_leaf",
    "X lib_tail2",
    "X lib_tail1",
    "X caller",
];

use common::user::{only_task, record, record_ok, Target, AARCH64, RISCV64, X86_64};
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
const OWN: &[&str] = &[
    "main", "caller", "tail1", "tail2", "leaf", "vtail", "count", "ptrtail", "pick",
];

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
    // A tail call through a pointer, then a switch table's jumps (no entries).
    t.extend(["E ptrtail", "E leaf", "X leaf", "X ptrtail"]);
    // tinyjump (not among OWN: it cannot log itself) jumps through a register to leaf.
    t.extend(["E leaf", "X leaf"]);
    for i in 0..11 {
        t.push("E pick");
        if [0, 2, 5, 8].contains(&i) {
            t.extend(["E leaf", "X leaf"]);
        }
        t.push("X pick");
    }
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
    // A function as small as a PLT entry is no PLT entry: its jump through a register
    // enters leaf, nested in it.
    let tiny = ["E tinyjump", "E leaf", "X leaf", "X tinyjump"];
    assert!(
        without(&events, |n| n == "note", false)
            .windows(4)
            .any(|w| w == tiny),
        "{}: tinyjump > leaf: {events:?}",
        target.cross
    );
    // Tail-called frames close with the frame they replaced: no return skipped a frame.
    for key in ["deep_returns", "unmatched_returns"] {
        assert_eq!(plugin_stat(&dir, key), "0", "{}: {key}", target.cross);
    }
    // tail1 -> tail2 -> leaf twice, vtail -> leaf, ptrtail -> leaf, tinyjump -> leaf, and
    // (aarch64) __wrap_main -> main.
    let jumps: u64 = plugin_stat(&dir, "jump_entries").parse().unwrap();
    assert!(jumps >= 7, "{}: jump_entries={jumps}", target.cross);
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
    check_library_with(target, sysroot, &[]);
}

/// [`check_library`] with arguments for the program; the trace and the program's output
/// stay for more checks.
fn check_library_with(
    target: &Target,
    sysroot: Option<&str>,
    program_args: &[&str],
) -> (tempfile::TempDir, PathBuf, String) {
    let elf = guest(target, "libtail-dyn.elf");
    let elf = elf.to_string_lossy();
    let mut args: Vec<&str> = sysroot.map_or(Vec::new(), |r| vec!["-L", r]);
    args.push(&elf);
    args.extend(program_args);
    let (tmp, dir, stdout) = record_ok(&cached(target.qemu), &args);
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
    let call = LIB_TAIL_CALL;
    assert_eq!(own, [call, call].concat(), "{}: {events:?}", target.cross);
    for key in ["deep_returns", "unmatched_returns"] {
        assert_eq!(plugin_stat(&dir, key), "0", "{}: {key}", target.cross);
    }
    (tmp, dir, stdout)
}

/// Mappings made by [`library_tail_calls_survive_a_map_unmap_loop_x86_64`]'s program, past
/// the plugin's 4,096 placements of libraries (`state::lib_entries::MAX_PLACED`).
const LOOPS: u64 = 5000;
const MAX_PLACED: u64 = 4096;

/// The plugin's placements of libraries (`state::lib_entries`) as the program maps its
/// library executable at 5,000 new addresses and unmaps each: each unmap takes
/// its placement out (none dropped), and the library's tail calls, placed at start, are
/// still seen after the loop (the checks above).
#[test]
fn library_tail_calls_survive_a_map_unmap_loop_x86_64() {
    let (_tmp, dir, stdout) = check_library_with(&X86_64, None, &[&LOOPS.to_string()]);
    assert!(stdout.contains(&format!("MAPPED {LOOPS}\n")), "{stdout}");
    assert_eq!(plugin_stat(&dir, "lib_places_dropped"), "0");
    // Every mapping is still listed for naming (below its own cap), none dropped.
    assert_eq!(plugin_stat(&dir, "dropped_maps"), "0");
}

/// The same loop unmapping nothing: the list stays at its cap, what went is counted (the
/// loader, libc and the library placed at start, plus the 5,000, less the cap) and said,
/// the trace marked INCOMPLETE (record fails), and the tail calls of the library placed at
/// start (the older half, kept) are still seen.
#[test]
fn library_placements_past_the_cap_are_counted_x86_64() {
    let elf = guest(&X86_64, "libtail-dyn.elf");
    let (_tmp, dir, out) = record(
        &cached(X86_64.qemu),
        &[&elf.to_string_lossy(), &LOOPS.to_string(), "keep"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let dropped = 3 + LOOPS - MAX_PLACED;
    assert_eq!(plugin_stat(&dir, "lib_places_dropped"), dropped.to_string());
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "INCOMPLETE TRACE: {dropped} library placements dropped"
        )),
        "{stderr}"
    );
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    let lib = ["caller", "lib_tail1", "lib_tail2", "lib_leaf"];
    let own = without(&events, |n| !lib.contains(&n), false);
    let call = LIB_TAIL_CALL;
    assert_eq!(own, [call, call].concat(), "{events:?}");
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
    // The landing's single exit is setjmp's, as libmcount writes it: fail has none.
    let want = [
        "E main", "E work", "X work", "E fail", "E after", "X after", "E after", "X after",
        "X main",
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

/// A logging guest of `make shape` (ucontext.c, trampoline.c, fedcalls.c: static glibc at
/// -O2) recorded: the program's own functions in the trace, their entries against the
/// program's log, and no return that matched nothing; the trace's directory with them.
fn own_tree(
    target: &Target,
    name: &str,
    own: &[&str],
) -> (tempfile::TempDir, PathBuf, Vec<String>, Vec<String>) {
    let elf = guest(target, name);
    let (tmp, dir, stdout) = record_ok(&cached(target.qemu), &[&elf.to_string_lossy()]);
    // The log names GCC's nested function `inner`; its symbol is `inner.0`.
    let log: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ENTRY "))
        .map(|n| format!("E {}", if n == "inner" { "inner.0" } else { n }))
        .collect();
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    let tree = without(&events, |n| !own.contains(&n), false);
    let entries: Vec<String> = (tree.iter())
        .filter(|e| e.starts_with("E "))
        .cloned()
        .collect();
    assert_eq!(
        entries, log,
        "{} {name}: entries against the log",
        target.cross
    );
    for key in ["unmatched_returns", "resyncs"] {
        assert_eq!(
            plugin_stat(&dir, key),
            "0",
            "{} {name}: {key}",
            target.cross
        );
    }
    (tmp, dir, tree, events)
}

const UCONTEXT_OWN: &[&str] = &["main", "run", "ctxfunc", "leaf"];

/// As uftrace shows the `-pg` build of ucontext.c (x86_64, natively): makecontext's
/// function inside `swapcontext`, which returns when `uc_link` resumes `run`.
fn ucontext_tree() -> Vec<String> {
    [
        "E main",
        "E run",
        "E ctxfunc",
        "E leaf",
        "X leaf",
        "E leaf",
        "X leaf",
        "X ctxfunc",
        "E leaf",
        "X leaf",
        "X run",
        "E leaf",
        "X leaf",
        "X main",
    ]
    .map(String::from)
    .to_vec()
}

fn check_ucontext(target: &Target) {
    let (_tmp, _dir, tree, events) = own_tree(target, "ucontext.elf", UCONTEXT_OWN);
    assert_eq!(tree, ucontext_tree(), "{}", target.cross);
    // ctxfunc nests in swapcontext (in setcontext or __start_context where the static
    // libc's frames show), which closes before run's last call.
    let at = |e: &str| events.iter().position(|x| x == e);
    let (open, ctx, close) = (at("E swapcontext"), at("E ctxfunc"), at("X swapcontext"));
    assert!(
        open < ctx && ctx < close && close.is_some(),
        "{}: {events:?}",
        target.cross
    );
}

#[test]
fn makecontext_functions_nest_in_swapcontext_aarch64() {
    check_ucontext(&AARCH64);
}

#[test]
fn makecontext_functions_nest_in_swapcontext_riscv64() {
    check_ucontext(&RISCV64);
}

#[test]
fn makecontext_functions_nest_in_swapcontext_x86_64() {
    check_ucontext(&X86_64);
}

const TRAMPOLINE_OWN: &[&str] = &["main", "outer", "apply", "inner.0", "leaf"];

/// As uftrace shows the `-pg` build of trampoline.c (x86_64, natively): the nested
/// function called from `apply`, its trampoline on the stack not a frame of its own.
fn trampoline_tree() -> Vec<String> {
    let inner = ["E inner.0", "E leaf", "X leaf", "X inner.0"];
    let mut t = vec!["E main", "E outer", "E apply"];
    t.extend(inner);
    t.extend(inner);
    t.extend(["X apply", "X outer", "E leaf", "X leaf", "X main"]);
    t.into_iter().map(String::from).collect()
}

fn check_trampoline(target: &Target) {
    let (_tmp, _dir, tree, events) = own_tree(target, "trampoline.elf", TRAMPOLINE_OWN);
    assert_eq!(tree, trampoline_tree(), "{}", target.cross);
    // Nothing between apply and the nested function: the call through the trampoline is
    // the nested function's.
    let at = events.iter().position(|e| e == "E apply").expect("apply");
    let next = events[at + 1..].iter().find(|e| !e.contains("note"));
    assert_eq!(
        next.map(String::as_str),
        Some("E inner.0"),
        "{}: {events:?}",
        target.cross
    );
}

#[test]
fn nested_functions_called_through_trampolines_aarch64() {
    check_trampoline(&AARCH64);
}

#[test]
fn nested_functions_called_through_trampolines_riscv64() {
    check_trampoline(&RISCV64);
}

#[test]
fn nested_functions_called_through_trampolines_x86_64() {
    check_trampoline(&X86_64);
}

/// The expected trees are what uftrace itself records for the `-pg` build of the same
/// sources on the host (x86_64).
#[test]
fn expected_trees_are_native_uftraces() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/guests/user");
    for (name, own, want, extra) in [
        ("ucontext", UCONTEXT_OWN, ucontext_tree(), &[][..]),
        (
            "trampoline",
            TRAMPOLINE_OWN,
            trampoline_tree(),
            &["-z", "execstack"][..],
        ),
    ] {
        let exe = tmp.path().join(name);
        let c = src.join(format!("{name}.c"));
        let out = std::process::Command::new("gcc")
            .args(["-pg", "-g", "-O2", "-fno-inline", "-o"])
            .arg(&exe)
            .arg(&c)
            .args(extra)
            .output()
            .expect("running gcc");
        assert!(out.status.success(), "gcc -pg {name}: {out:?}");
        let data = tmp.path().join(format!("{name}.data"));
        let (data_s, exe_s) = (data.to_string_lossy(), exe.to_string_lossy());
        uftrace(&["record", "-d", &data_s, &exe_s]).expect("uftrace record");
        let text = uftrace(&["replay", "--no-pager", "-d", &data_s]).expect("uftrace replay");
        let events = qemu_uftrace_tests::replay::parse_replay(&text, first_tid(&text))
            .expect("parse replay");
        let tree = without(&events, |n| !own.contains(&n), false);
        assert_eq!(tree, want, "native {name}:\n{text}");
    }
}

/// The task of the first replay line.
fn first_tid(text: &str) -> u32 {
    text.lines()
        .find_map(|l| {
            let (_, rest) = l.split_once('[')?;
            rest.split_once(']')?.0.trim().parse().ok()
        })
        .expect("a replay line with a task")
}

/// The functions whose `uftrace report` counts [`longjmp_report_counts_are_native`] compares.
const LJREPORT_COUNTED: &[&str] = &["main", "a", "b", "c", "_setjmp", "longjmp"];

/// `uftrace report -F main` of `dir`: calls of each of [`LJREPORT_COUNTED`] (0 where absent).
/// Under main only: native libmcount does not see glibc's own `_setjmp` call before main.
fn ljreport_counts(dir: &str) -> Vec<(&'static str, u64)> {
    let text = uftrace(&["report", "--no-pager", "-F", "main", "-d", dir]).expect("report");
    LJREPORT_COUNTED
        .iter()
        .map(|&name| {
            let calls = text.lines().find_map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                match words[..] {
                    [.., calls, last] if last == name => calls.parse().ok(),
                    _ => None,
                }
            });
            (name, calls.unwrap_or(0))
        })
        .collect()
}

/// The calls of [`LJREPORT_COUNTED`] from main's entry to its exit, as uftrace's replay of
/// task `tid` in `dir` shows them (glibc calls `_setjmp` before main, unseen natively).
fn ljreport_replay(dir: &std::path::Path, tid: u32) -> Vec<String> {
    let events = replay_events(dir, tid).expect("uftrace replay");
    let own = without(&events, |n| !LJREPORT_COUNTED.contains(&n), false);
    let start = own
        .iter()
        .position(|e| e == "E main")
        .expect("main entered");
    let end = own.iter().rposition(|e| e == "X main").expect("main left");
    own[start..=end].to_vec()
}

/// a → b → c → longjmp, three times (tests/guests/user/ljreport.c, -O0): `uftrace report`
/// counts the program's functions and `_setjmp` as for the `-pg` build recorded natively,
/// where libmcount writes each landing's exit as `_setjmp`'s, and replay draws the same
/// calls. Ours: x86_64, and aarch64 and riscv64 against the same native trace.
#[test]
fn longjmp_report_counts_are_native() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/guests/user/ljreport.c");
    let build = |gcc: &str, pg: bool, exe: &std::path::Path| {
        let mut cmd = std::process::Command::new(gcc);
        if pg {
            cmd.arg("-pg");
        }
        let out = cmd
            .args(["-g", "-O0", "-o"])
            .arg(exe)
            .arg(&src)
            .output()
            .expect("running gcc");
        assert!(out.status.success(), "{gcc} (-pg: {pg}): {out:?}");
    };
    let native = tmp.path().join("ljreport-pg");
    build("gcc", true, &native);
    let data = tmp.path().join("native.data");
    let (data_s, exe_s) = (data.to_string_lossy(), native.to_string_lossy());
    let out = uftrace(&["record", "-d", &data_s, &exe_s]).expect("uftrace record");
    assert!(out.contains("rounds=4"), "{out}");
    let want = ljreport_counts(&data_s);
    assert_eq!(
        want,
        [
            ("main", 1),
            ("a", 0),
            ("b", 0),
            ("c", 0),
            ("_setjmp", 4),
            ("longjmp", 0)
        ],
        "native"
    );
    let native_tid = first_tid(&uftrace(&["replay", "--no-pager", "-d", &data_s]).expect("replay"));
    let native_calls = ljreport_replay(&data, native_tid);
    let round = ["E a", "E b", "E c", "E longjmp", "X _setjmp"];
    let mut drawn = vec!["E main", "E _setjmp", "X _setjmp"];
    drawn.extend(round.repeat(3));
    drawn.push("X main");
    assert_eq!(native_calls, drawn, "native replay");
    for (target, sysroot) in [
        (&X86_64, None),
        (&AARCH64, Some("/usr/aarch64-linux-gnu")),
        (&RISCV64, Some("/usr/riscv64-linux-gnu")),
    ] {
        let exe = tmp.path().join(format!("ljreport-{}", target.cross));
        build(&format!("{}gcc", target.cross), false, &exe);
        let elf = exe.to_string_lossy();
        let mut args: Vec<&str> = sysroot.map_or(Vec::new(), |r| vec!["-L", r]);
        args.push(&elf);
        let (_tmp, dir, stdout) = record_ok(&cached(target.qemu), &args);
        assert!(stdout.contains("rounds=4"), "{stdout}");
        let ours = ljreport_counts(&dir.to_string_lossy());
        assert_eq!(ours, want, "{}", target.cross);
        let calls = ljreport_replay(&dir, only_task(&dir));
        assert_eq!(calls, native_calls, "{}: replay", target.cross);
    }
}

/// The functions of tests/guests/user/fedcalls.c that log their entries.
const FED_OWN: &[&str] = &[
    "main", "direct", "kept", "faulting", "on_segv", "leaf", "other",
];

/// Calls through a register that a load in their block filled take their target from the
/// load's memory callback, reading no register (aarch64 and riscv64: `arch::feeding_load`;
/// x86_64's `call *(%reg)` always did): the tree is the program's own, each call exactly
/// once, also where the load between faults once and the block resumes past the pointer's
/// load (that call, alone of the program's, reads its register).
fn check_fed_calls(target: &Target) {
    let (_tmp, dir, own, _events) = own_tree(target, "fedcalls.elf", FED_OWN);
    let mut tree = vec!["E main"];
    for i in 0..40 {
        let callee = [["E leaf", "X leaf"], ["E other", "X other"]][i % 2];
        tree.push("E direct");
        tree.extend(callee);
        tree.extend(["X direct", "E kept", "E leaf", "X leaf", "X kept"]);
    }
    tree.extend([
        "E faulting",
        "E kept",
        "E on_segv",
        "X on_segv",
        "E other",
        "X other",
    ]);
    tree.extend(["X kept", "X faulting", "X main"]);
    assert_eq!(own, tree, "{}: the tree", target.cross);
    assert_eq!(plugin_stat(&dir, "signals"), "1");
    // The program makes 81 calls through registers (and glibc hundreds more); only the one
    // after the fault, and a few of glibc's, read theirs.
    let reads: u64 = plugin_stat(&dir, "register_calls")
        .parse()
        .expect("a count");
    assert!(reads <= 10, "{}: register_calls={reads}", target.cross);
}

#[test]
fn calls_fed_by_a_load_take_its_value_aarch64() {
    check_fed_calls(&AARCH64);
}

#[test]
fn calls_fed_by_a_load_take_its_value_riscv64() {
    check_fed_calls(&RISCV64);
}

#[test]
fn calls_through_memory_take_the_loaded_value_x86_64() {
    check_fed_calls(&X86_64);
}
