//! `qemu-uftrace record` on real guests under real QEMU, read back with real uftrace: the call
//! sequence uftrace replays must equal what the guest itself logged (`-finstrument-functions`
//! oracle), and every uftrace view must work on the result.

use qemu_uftrace_tests::replay::{longjmp_shape, replay_events, uftrace, without, TAIL_VIA_PTR};
use qemu_uftrace_tests::{
    guest_elf, hello_elf, is_runtime_function, nm_functions, oracle_names, parse_oracle,
    plugin_stat, qemu_args, qemu_args_on, run_plain_qemu, system_qemus, SystemQemu, Variant,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn qemu_uftrace() -> Command {
    Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"))
}

/// Records `elf` into a fresh directory; panics with QEMU's and our output on failure.
fn record(elf: &Path, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
    record_with(&qemu_args(elf), elf, extra)
}

/// [`record`] with the QEMU command line `qemu`.
fn record_with(qemu: &[String], elf: &Path, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    let out = qemu_uftrace()
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .args(extra)
        .arg("--")
        .args(qemu)
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    assert!(
        out.status.success(),
        "record {} failed: {}\nstdout: {}\nstderr: {}",
        elf.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (tmp, dir)
}

/// What the guest's own instrumentation logged, as names.
fn oracle(program: &str) -> Vec<String> {
    let elf = guest_elf(program, Variant::Oracle).expect("build guests");
    let (code, uart) = run_plain_qemu(&elf).expect("run oracle guest");
    assert_eq!(code, 0, "{program} oracle exited {code}: {uart}");
    let events = parse_oracle(&uart).expect("oracle log");
    oracle_names(&events, &nm_functions(&elf).expect("nm"))
}

/// The scenario's calls from a trace: the start code goes, its callees stay; the runtime
/// (UART, semihosting, oracle hooks, setjmp/longjmp) goes with everything it calls.
fn traced(program: &str, variant: Variant) -> Vec<String> {
    traced_on(&system_qemus()[0], program, variant)
}

/// [`traced`] under the QEMU `qemu`.
fn traced_on(qemu: &SystemQemu, program: &str, variant: Variant) -> Vec<String> {
    let elf = guest_elf(program, variant).expect("build guests");
    let (_tmp, dir) = record_with(&qemu_args_on(&qemu.program, &elf), &elf, &[]);
    let events = replay_events(&dir, 1).expect("uftrace replay");
    let events = without(&events, |n| n == "_start", false);
    // A longjmp has no exit (libmcount's shape): it goes alone, before the runtime and
    // everything it calls.
    let events = without(&events, |n| n == "longjmp", false);
    without(&events, is_runtime_function, true)
}

/// Every build of `program`, on every QEMU (plugin API 4, 5 and 7), against its oracle.
fn check_program(program: &str) {
    let oracle = oracle(program);
    // A longjmp's frames close with one exit, setjmp's, as libmcount writes it.
    let oracle = match program {
        "longjmp" => longjmp_shape(&oracle, "lj_after"),
        _ => oracle,
    };
    // The natural and frame-pointer-less builds: the same calls. A tail call, direct (`b f`,
    // `jmp f`, `j f`) or through a register (`br x16`, `jmp *%rax`, `jr a5`), enters f nested
    // in its caller as uftrace shows it for the oracle's real call.
    for qemu in system_qemus() {
        let on = |variant| traced_on(&qemu, program, variant);
        let q = qemu.label;
        // The instrumented build itself, traced: exactly its own log.
        assert_eq!(on(Variant::Oracle), oracle, "{program}-oracle.elf on {q}");
        assert_eq!(on(Variant::Natural), oracle, "{program}.elf on {q}");
        assert_eq!(on(Variant::NoFp), oracle, "{program}-nofp.elf on {q}");
        // Signed return addresses (paciasp … retaa, under -cpu max): the same again.
        assert_eq!(on(Variant::Pac), oracle, "{program}-pac.elf on {q}");
    }
}

#[test]
fn nested_calls_match_the_oracle() {
    check_program("nested");
}

#[test]
fn recursion_matches_the_oracle() {
    check_program("recursion");
}

#[test]
fn calls_through_pointers_match_the_oracle() {
    check_program("fnptr");
}

#[test]
fn leaf_functions_without_frame_records_match_the_oracle() {
    check_program("leaf");
}

#[test]
fn tail_calls_fold_into_their_caller() {
    check_program("tailcall");
    // State the shape outright, not only through the transformation: the chain of tail
    // calls tail_a -> tail_b -> tail_c nests, each in the function that jumped to it.
    let natural = traced("tailcall", Variant::Natural);
    let chain = ["E tail_a", "E tail_b", "E tail_c", "E tail_leaf"];
    assert!(natural.windows(4).any(|w| w == chain), "{natural:?}");
    assert!(natural.windows(6).any(|w| w == TAIL_VIA_PTR), "{natural:?}");
}

#[test]
fn longjmp_closes_the_frames_it_skips() {
    check_program("longjmp");
}

#[test]
fn returns_that_land_on_a_page_start_are_seen() {
    // The call before such a landing is on the previous page: the plugin reads it from guest
    // memory. Missed, each return would only be settled by the caller's own return, as a
    // return that skips a frame.
    let elf = guest_elf("pageedge", Variant::Natural).expect("build guests");
    let (_tmp, dir) = record(&elf, &[]);
    let events = without(
        &replay_events(&dir, 1).expect("replay"),
        |n| n == "_start",
        false,
    );
    let events = without(&events, is_runtime_function, true);
    let once = [
        "E edge_caller",
        "E edge_callee",
        "X edge_callee",
        "X edge_caller",
        "E edge_indirect",
        "E edge_callee",
        "X edge_callee",
        "X edge_indirect",
    ];
    let mut expected = vec!["E main".to_string()];
    for _ in 0..3 {
        expected.extend(once.iter().map(|e| e.to_string()));
    }
    expected.push("X main".to_string());
    assert_eq!(events, expected);
    for key in ["deep_returns", "unmatched_returns", "returns_unseen"] {
        assert_eq!(plugin_stat(&dir, key), "0", "{key}");
    }
}

#[test]
fn example_replays_with_names_and_nesting() {
    let (_tmp, dir) = record(&hello_elf().expect("build example"), &[]);
    let d = dir.to_string_lossy().to_string();
    let text = uftrace(&["replay", "--no-pager", "-d", &d]).expect("replay");
    assert!(!text.contains(" <"), "unresolved addresses in:\n{text}");
    // Leaves merge onto one line and nest under their callers.
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once("| ").map(|(_, f)| f))
        .collect();
    let find = |s: &str| {
        lines
            .iter()
            .position(|l| *l == s)
            .unwrap_or_else(|| panic!("no {s:?} in:\n{text}"))
    };
    // `_start` is entered by a jump, not a call: `bl main` is the first call, so main is
    // the root.
    assert_eq!(lines[0], "main() {", "{text}");
    let run_demo = find("  run_demo() {");
    let compute = find("    compute_report() {");
    let sum = find("      sum_squares() {");
    let square = find("        square();");
    assert!(
        run_demo < compute && compute < sum && sum < square,
        "{text}"
    );
    find("    op_mul();");
    // factorial(10) recurses: nine open frames, then the leaf call factorial(1).
    let opened = lines
        .iter()
        .filter(|l| l.trim_start() == "factorial() {")
        .count();
    assert_eq!(opened, 9, "{text}");
    find(&format!("{}factorial();", "  ".repeat(10)));
}

#[test]
fn example_works_in_every_uftrace_view() {
    let (_tmp, dir) = record(&hello_elf().expect("build example"), &[]);
    let d = dir.to_string_lossy().to_string();
    let report = uftrace(&["report", "--no-pager", "-d", &d]).expect("report");
    for f in ["main", "factorial", "uart_putc", "op_mul"] {
        assert!(
            report.lines().any(|l| l.trim_end().ends_with(f)),
            "report lacks {f}:\n{report}"
        );
    }
    let graph = uftrace(&["graph", "--no-pager", "-d", &d]).expect("graph");
    assert!(graph.contains("compute_report"), "{graph}");
    let info = uftrace(&["info", "-d", &d]).expect("info");
    assert!(info.contains("hello.elf"), "{info}");
    assert!(info.contains("ARM64"), "{info}");
    let chrome = uftrace(&["dump", "--chrome", "-d", &d]).expect("dump --chrome");
    assert!(
        chrome.trim_start().starts_with('{') && chrome.contains("\"name\":\"factorial\""),
        "{chrome}"
    );
    let srcline =
        uftrace(&["replay", "--no-pager", "--srcline", "-d", &d]).expect("replay --srcline");
    assert!(
        srcline
            .lines()
            .any(|l| l.contains("square();") && l.contains("main.c:")),
        "no source lines:\n{srcline}"
    );
}
