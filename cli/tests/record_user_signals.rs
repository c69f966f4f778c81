//! User mode: signal handlers, `siglongjmp` out of a handler and C++ exceptions, recorded
//! under the real QEMU 10.2.2 user-mode emulators and read back with real uftrace. The
//! guests (`tests/guests/user`: sigalrm.c, siglongjmp.c, throw.cc, static glibc and
//! libstdc++) print what they did; the replay must show each delivery as `[SIGxxx]` under
//! the function it interrupted with the handler beneath, close the frames a longjmp or an
//! exception skipped where execution resumed, and keep every exit paired with its entry
//! (but a longjmp's skipped frames, written as libmcount writes them).
//! C++ and Rust names show demangled, as uftrace demangles them.

mod common;

use common::user::{only_task, record_ok, Target, AARCH64, RISCV64, X86_64};
use qemu_uftrace_tests::replay::{parse_replay, replay_events, uftrace};
use qemu_uftrace_tests::{
    cached, make_guests, nm_functions, oracle_names, parse_oracle, plugin_stat,
};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `tests/guests/user`'s signal programs for `target`, built once per process.
fn guest(target: &Target, name: &str) -> PathBuf {
    built(target, "signals").join(name)
}

/// The directory where `make GOAL` built `tests/guests/user`'s programs for `target`
/// (once per process and goal).
fn built(target: &Target, goal: &str) -> PathBuf {
    type Built = std::sync::Mutex<Vec<(String, PathBuf)>>;
    static BUILT: OnceLock<Built> = OnceLock::new();
    let key = format!("{}{goal}", target.cross);
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((_, dir)) = built.iter().find(|(k, _)| *k == key) {
        return dir.clone();
    }
    let sub = format!("signals-{}", target.cross.trim_end_matches('-'));
    let args = [format!("CROSS={}", target.cross), goal.to_string()];
    let dir = make_guests("user", &sub, &args)
        .unwrap_or_else(|e| panic!("make {goal} CROSS={}: {e:#}", target.cross));
    built.push((key, dir.clone()));
    dir
}

/// Records `name` for `target`; its stdout, the trace's events and the trace directory.
fn record(target: &Target, name: &str) -> (tempfile::TempDir, PathBuf, String, Vec<String>) {
    let elf = guest(target, name);
    let (tmp, dir, stdout) = record_ok(&cached(target.qemu), &[&elf.to_string_lossy()]);
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    let text = uftrace(&["replay", "--no-pager", "-d", &dir.to_string_lossy()]).expect("replay");
    assert!(!text.contains("LOST"), "{text}");
    assert_eq!(plugin_stat(&dir, "lost_marks"), "0");
    assert_eq!(plugin_stat(&dir, "complete"), "1");
    (tmp, dir, stdout, events)
}

/// Walks `E`/`X` events as a stack: every exit closes the innermost open entry of the same
/// name. Calls `at_entry` with the stack (outermost first) at each entry; returns the
/// frames still open at the end (those the program was in when it exited).
fn walk(events: &[String], mut at_entry: impl FnMut(&[&str])) -> Vec<String> {
    let mut stack: Vec<&str> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(name) = e.strip_prefix("E ") {
            stack.push(name);
            at_entry(&stack);
        } else if let Some(name) = e.strip_prefix("X ") {
            assert_eq!(
                stack.pop(),
                Some(name),
                "event {i} ({e}) closes another frame; before it: {:?}",
                &events[i.saturating_sub(12)..i]
            );
        }
    }
    stack.iter().map(|s| s.to_string()).collect()
}

/// The events of the functions in `keep` only (their order and pairing kept).
fn only(events: &[String], keep: &[&str]) -> Vec<String> {
    events
        .iter()
        .filter(|e| keep.contains(&&e[2..]))
        .cloned()
        .collect()
}

fn check_sigalrm(target: &Target) {
    let (_tmp, dir, stdout, events) = record(target, "sigalrm.elf");
    assert!(stdout.starts_with("alarms=3 steps="), "{stdout}");
    let mut deliveries = 0;
    let open = walk(&events, |stack| {
        let top = stack[stack.len() - 1];
        if top == "[SIGALRM]" {
            deliveries += 1;
            // Under the function it interrupted: the busy loop or what it called, or (the
            // first alarm, on a host that stalled the guest for its 2 ms) arm()'s setitimer.
            let at = stack.iter().position(|&f| f == "spin").expect("under spin");
            let above = &stack[at + 1..stack.len() - 1];
            assert!(
                above.iter().all(|&f| f == "spin_step") || above.first() == Some(&"arm"),
                "{stack:?}"
            );
        }
        if top == "handler" {
            assert_eq!(stack[stack.len() - 2], "[SIGALRM]", "{stack:?}");
        }
    });
    assert_eq!(deliveries, 3);
    assert!(
        !open.iter().any(|f| f.starts_with("[SIG") || f == "handler"),
        "{open:?}"
    );
    let handled = only(&events, &["[SIGALRM]", "handler", "on_alarm"]);
    let one = [
        "E [SIGALRM]",
        "E handler",
        "E on_alarm",
        "X on_alarm",
        "X handler",
        "X [SIGALRM]",
    ];
    assert_eq!(handled, one.repeat(3));
    assert_eq!(plugin_stat(&dir, "signals"), "3");
    assert_eq!(plugin_stat(&dir, "signal_returns"), "3");
}

/// The functions of siglongjmp.c, and the delivery.
const LONGJMP_FUNCTIONS: [&str; 8] = [
    "attempt",
    "deep1",
    "deep2",
    "deep3",
    "[SIGUSR1]",
    "handler",
    "on_signal",
    "recovered",
];

/// The functions of throw.cc, and the runtime's that show where the exception goes.
const THROW_FUNCTIONS: [&str; 11] = [
    "demo::run",
    "demo::level1",
    "demo::level2",
    "demo::level3",
    "demo::thrower",
    "__cxa_throw",
    "demo::Guard::~Guard",
    "demo::guard_released",
    "_Unwind_Resume",
    "__cxa_begin_catch",
    "demo::caught",
];

fn check_siglongjmp(target: &Target) {
    let (_tmp, dir, stdout, events) = record(target, "siglongjmp.elf");
    assert_eq!(stdout, "rounds=2 recovered=2\n");
    // As libmcount writes a longjmp (uftrace's replay expects it: it puts the display back
    // at sigsetjmp's depth at the longjmp's entry): the frames siglongjmp skips get a
    // single exit, at sigsetjmp's depth where it lands, and it is sigsetjmp's (the call
    // before the landing), as libmcount writes it: `report` counts as for a native trace.
    let round = [
        "E attempt",
        "E __sigsetjmp",
        "X __sigsetjmp",
        "E deep1",
        "E deep2",
        "E deep3",
        "E [SIGUSR1]",
        "E handler",
        "E on_signal",
        "X on_signal",
        "X __sigsetjmp",
        "E recovered",
        "X recovered",
        "X attempt",
    ];
    let own = [&LONGJMP_FUNCTIONS[..], &["__sigsetjmp"]].concat();
    assert_eq!(only(&events, &own), round.repeat(2));
    // Execution resumed in attempt, and replay draws it there: recovered at deep1's depth.
    let text = uftrace(&["replay", "--no-pager", "-d", &dir.to_string_lossy()]).expect("replay");
    let indent = |call: &str| {
        let line = (text.lines())
            .find(|l| l.trim_end().ends_with(call))
            .unwrap_or_else(|| panic!("no {call} in\n{text}"));
        let after_bar = &line[line.find('|').expect("a replay line") + 1..];
        after_bar.len() - after_bar.trim_start().len()
    };
    assert_eq!(indent("deep1() {"), indent("recovered();"), "{text}");
    assert_eq!(plugin_stat(&dir, "signals"), "2");
    // The handler never returned: no rt_sigreturn.
    assert_eq!(plugin_stat(&dir, "signal_returns"), "0");
}

/// A handler that ran as a plain function before `sigaction` installed it: QEMU had
/// translated it without the handler's entry callback, so the plugin has it translated again.
fn check_sigearly(target: &Target) {
    let (_tmp, dir, stdout, events) = record(target, "sigearly.elf");
    assert_eq!(stdout, "direct=1 delivered=2\n");
    let open = walk(&events, |_| {});
    assert!(!open.iter().any(|f| f.starts_with("[SIG")), "{open:?}");
    let direct = ["E handler", "E on_signal", "X on_signal", "X handler"];
    let delivery = [
        "E poke",
        "E [SIGUSR1]",
        "E handler",
        "E on_signal",
        "X on_signal",
        "X handler",
        "X [SIGUSR1]",
        "X poke",
    ];
    let expected: Vec<&str> = direct
        .iter()
        .chain(&delivery)
        .chain(&delivery)
        .copied()
        .collect();
    assert_eq!(
        only(&events, &["poke", "[SIGUSR1]", "handler", "on_signal"]),
        expected
    );
    assert_eq!(plugin_stat(&dir, "signals"), "2");
    assert_eq!(plugin_stat(&dir, "signal_returns"), "2");
}

fn check_throw(target: &Target) {
    let (_tmp, dir, stdout, events) = record(target, "throw.elf");
    assert_eq!(stdout, "rounds=2 caught=21 released=2\n");
    let open = walk(&events, |stack| {
        let top = stack[stack.len() - 1];
        // The catch runs in run, the destructor in level2: the frames the exception left
        // are closed by then.
        if top == "__cxa_begin_catch" || top == "demo::caught" {
            assert_eq!(stack[stack.len() - 2], "demo::run", "{stack:?}");
        }
        if top == "demo::Guard::~Guard" {
            assert_eq!(stack[stack.len() - 2], "demo::level2", "{stack:?}");
        }
    });
    assert!(!open.iter().any(|f| f.starts_with("demo::")), "{open:?}");
    // uftrace demangles the C++ names of our symbol files itself.
    let round = [
        "E demo::run",
        "E demo::level1",
        "E demo::level2",
        "E demo::level3",
        "E demo::thrower",
        "E __cxa_throw",
        // The unwinder lands in level2's cleanup, which calls the destructor.
        "X __cxa_throw",
        "X demo::thrower",
        "X demo::level3",
        "E demo::Guard::~Guard",
        "E demo::guard_released",
        "X demo::guard_released",
        "X demo::Guard::~Guard",
        // _Unwind_Resume carries on to run's handler.
        "E _Unwind_Resume",
        "X _Unwind_Resume",
        "X demo::level2",
        "X demo::level1",
        "E __cxa_begin_catch",
        "X __cxa_begin_catch",
        "E demo::caught",
        "X demo::caught",
        "X demo::run",
    ];
    assert_eq!(only(&events, &THROW_FUNCTIONS), round.repeat(2));
    assert_eq!(plugin_stat(&dir, "unwinds"), "4");
    assert_demangled(&dir);
}

/// The `-finstrument-functions` build logs its own entries and exits (GCC runs the exit
/// hooks as cleanups while the exception passes): the trace of the program's functions is
/// exactly that log, in order (main aside: static glibc enters it by a branch).
fn check_throw_oracle(target: &Target) {
    let elf = guest(target, "throw-oracle.elf");
    let (_tmp, dir, stdout) = record_ok(&cached(target.qemu), &[&elf.to_string_lossy()]);
    let log = parse_oracle(&stdout).expect("the oracle log on record's stdout");
    let names = nm_functions(&elf).expect("nm");
    let oracle: Vec<String> = oracle_names(&log, &names)
        .into_iter()
        .filter(|e| &e[2..] != "main")
        .collect();
    assert!(oracle.len() > 30, "{oracle:?}");
    let functions: HashSet<&str> = oracle.iter().map(|e| &e[2..]).collect();
    let d = dir.to_string_lossy();
    let text = uftrace(&["replay", "--no-pager", "--demangle=no", "-d", &d]).expect("replay");
    let traced: Vec<String> = parse_replay(&text, only_task(&dir))
        .expect("replay text")
        .into_iter()
        .filter(|e| functions.contains(&e[2..]))
        .collect();
    assert_eq!(traced, oracle);
}

/// The symbol files keep the names as the ELF has them; uftrace's `--demangle` decides.
fn assert_demangled(dir: &Path) {
    let sym = std::fs::read_to_string(dir.join("throw.elf.sym")).expect("throw.elf.sym");
    assert!(
        sym.contains(" _ZN4demo3runEi\n"),
        "mangled in the .sym file"
    );
    let d = dir.to_string_lossy();
    let replay = |demangle: &str| {
        uftrace(&[
            "replay",
            "--no-pager",
            "-d",
            &d,
            &format!("--demangle={demangle}"),
            "-D",
            "6",
        ])
        .expect("uftrace replay")
    };
    assert!(
        replay("full").contains("demo::run(int)"),
        "{}",
        replay("full")
    );
    assert!(
        replay("no").contains("_ZN4demo3runEi()"),
        "{}",
        replay("no")
    );
}

#[test]
fn aarch64_sigalrm_handler_nests_under_the_interrupted_function() {
    check_sigalrm(&AARCH64);
}

#[test]
fn aarch64_handler_that_ran_before_sigaction_still_shows_deliveries() {
    check_sigearly(&AARCH64);
}

#[test]
fn aarch64_siglongjmp_out_of_a_handler_closes_the_skipped_frames() {
    check_siglongjmp(&AARCH64);
}

#[test]
fn aarch64_cxx_exception_closes_frames_where_it_is_caught() {
    check_throw(&AARCH64);
}

#[test]
fn aarch64_cxx_exception_matches_the_oracle() {
    check_throw_oracle(&AARCH64);
}

#[test]
fn riscv64_sigalrm_handler_nests_under_the_interrupted_function() {
    check_sigalrm(&RISCV64);
}

#[test]
fn riscv64_handler_that_ran_before_sigaction_still_shows_deliveries() {
    check_sigearly(&RISCV64);
}

#[test]
fn riscv64_siglongjmp_out_of_a_handler_closes_the_skipped_frames() {
    check_siglongjmp(&RISCV64);
}

#[test]
fn riscv64_cxx_exception_closes_frames_where_it_is_caught() {
    check_throw(&RISCV64);
}

#[test]
fn riscv64_cxx_exception_matches_the_oracle() {
    check_throw_oracle(&RISCV64);
}

#[test]
fn x86_64_sigalrm_handler_nests_under_the_interrupted_function() {
    check_sigalrm(&X86_64);
}

#[test]
fn x86_64_handler_that_ran_before_sigaction_still_shows_deliveries() {
    check_sigearly(&X86_64);
}

#[test]
fn x86_64_siglongjmp_out_of_a_handler_closes_the_skipped_frames() {
    check_siglongjmp(&X86_64);
}

#[test]
fn x86_64_cxx_exception_closes_frames_where_it_is_caught() {
    check_throw(&X86_64);
}

#[test]
fn x86_64_cxx_exception_matches_the_oracle() {
    check_throw_oracle(&X86_64);
}

/// Rust's legacy mangling (`_ZN6shapes5total17h<hash>E`) is demangled by uftrace itself,
/// hash dropped.
#[test]
fn x86_64_rust_names_are_demangled() {
    let elf = built(&X86_64, "rust").join("shapes-rust.elf");
    let (_tmp, dir, stdout) = record_ok(&cached(X86_64.qemu), &[&elf.to_string_lossy()]);
    assert_eq!(stdout, "total=25\n");
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    let area = "shapes::geometry::Square::area";
    assert_eq!(
        only(&events, &["shapes::total", area]),
        [
            "E shapes::total",
            &format!("E {area}"),
            &format!("X {area}"),
            &format!("E {area}"),
            &format!("X {area}"),
            "X shapes::total"
        ]
    );
    let sym = std::fs::read_to_string(dir.join("shapes-rust.elf.sym")).expect(".sym");
    assert!(
        sym.contains(" _ZN6shapes5total17h"),
        "mangled in the .sym file"
    );
}
