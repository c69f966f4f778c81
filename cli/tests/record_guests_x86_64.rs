//! `qemu-uftrace record -- qemu-system-x86_64 …` on the x86_64 bare-metal guests
//! (`tests/guests/x86_64`): SeaBIOS in real and 32-bit protected mode, then the guest's own
//! 32-bit entry, then its 64-bit code. The calls uftrace replays from `main` on must equal
//! what the guest itself logged (`-finstrument-functions` oracle), on every QEMU, with and
//! without frame pointers.

use qemu_uftrace_tests::replay::{longjmp_shape, replay_events, without, TAIL_VIA_PTR};
use qemu_uftrace_tests::x86_64_guests::{
    from_main, system_qemus_x86_64, x86_64_guest_elf, x86_64_qemu_args_on,
};
use qemu_uftrace_tests::{
    is_runtime_function, nm_functions, oracle_names, parse_oracle, plugin_stat,
    run_plain_qemu_argv, SystemQemu, Variant, QEMU_TIMEOUT,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Records `qemu` into a fresh directory; panics with QEMU's and our output on failure.
fn record(qemu: &[String], extra: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    let out = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"))
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
        "record {qemu:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (tmp, dir, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What the oracle build logged under plain QEMU 10.0, as names.
fn oracle(program: &str) -> Vec<String> {
    let elf = x86_64_guest_elf(program, Variant::Oracle).expect("build guests");
    let (code, uart) = run_plain_qemu_argv(
        &x86_64_qemu_args_on("qemu-system-x86_64", &elf),
        QEMU_TIMEOUT,
    )
    .expect("run oracle guest");
    assert_eq!(code, 0, "{program} oracle exited {code}: {uart}");
    let events = parse_oracle(&uart).expect("oracle log");
    oracle_names(&events, &nm_functions(&elf).expect("nm"))
}

/// The scenario's calls in a trace: from `main` on, without the runtime and its callees.
fn scenario(dir: &Path) -> Vec<String> {
    let events = replay_events(dir, 1).expect("uftrace replay");
    // A longjmp has no exit (libmcount's shape): it goes alone, before the runtime and
    // everything it calls.
    let events = without(&from_main(&events), |n| n == "longjmp", false);
    without(&events, is_runtime_function, true)
}

fn traced_on(qemu: &SystemQemu, program: &str, variant: Variant) -> Vec<String> {
    let elf = x86_64_guest_elf(program, variant).expect("build guests");
    let (_tmp, dir, stdout) = record(&x86_64_qemu_args_on(&qemu.program, &elf), &[]);
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
    assert_eq!(plugin_stat(&dir, "target"), "x86_64");
    scenario(&dir)
}

/// Every build of `program`, on every QEMU (plugin API 4, 5 and 7), against its oracle.
fn check_program(program: &str) {
    let oracle = oracle(program);
    assert!(oracle.len() > 4 && oracle[0] == "E main", "{oracle:?}");
    // A longjmp's frames close with one exit, setjmp's, as libmcount writes it.
    let oracle = match program {
        "longjmp" => longjmp_shape(&oracle, "lj_after"),
        _ => oracle,
    };
    // The natural and frame-pointer-less builds: the same calls. A tail call, direct (`b f`,
    // `jmp f`, `j f`) or through a register (`br x16`, `jmp *%rax`, `jr a5`), enters f nested
    // in its caller as uftrace shows it for the oracle's real call.
    for qemu in system_qemus_x86_64() {
        let on = |variant| traced_on(&qemu, program, variant);
        let q = qemu.label;
        assert_eq!(on(Variant::Oracle), oracle, "{program}-oracle.elf on {q}");
        assert_eq!(on(Variant::Natural), oracle, "{program}.elf on {q}");
        assert_eq!(on(Variant::NoFp), oracle, "{program}-nofp.elf on {q}");
    }
}

#[test]
fn x86_64_nested_calls_match_the_oracle() {
    check_program("nested");
}

#[test]
fn x86_64_recursion_matches_the_oracle() {
    check_program("recursion");
}

#[test]
fn x86_64_calls_through_pointers_match_the_oracle() {
    check_program("fnptr");
}

#[test]
fn x86_64_leaf_functions_match_the_oracle() {
    check_program("leaf");
}

#[test]
fn x86_64_tail_calls_fold_into_their_caller() {
    check_program("tailcall");
    let natural = traced_on(&system_qemus_x86_64()[0], "tailcall", Variant::Natural);
    assert!(natural.windows(6).any(|w| w == TAIL_VIA_PTR), "{natural:?}");
}

#[test]
fn x86_64_longjmp_closes_the_frames_it_skips() {
    check_program("longjmp");
}

/// Calls and tail calls through retpolines, as an x86_64 kernel built with them makes
/// (tests/guests/x86_64/thunktail.c, with the kernel's thunks): `call
/// __x86_indirect_thunk_<reg>` is a call of the function the register holds, and `jmp
/// __x86_indirect_thunk_<reg>` (an indirect tail call) enters it nested in the jumper's
/// frame, closed with the frame it replaced. Checked against the guest's own log of the
/// functions it entered (entries only: `-finstrument-functions` would keep the sibling
/// calls from being made), and against the nesting uftrace shows for such calls.
#[test]
fn x86_64_tail_calls_through_a_retpoline_enter_the_function_it_branches_to() {
    let want = [
        "E main",
        "E tt_driver",
        "E tt_via_thunk",
        "E tt_callee",
        "E tt_leaf",
        "X tt_leaf",
        "X tt_callee",
        "X tt_via_thunk",
        "E tt_via_thunk",
        "E tt_leaf",
        "X tt_leaf",
        "X tt_via_thunk",
        "E tt_chain",
        "E tt_via_thunk",
        "E tt_leaf",
        "X tt_leaf",
        "X tt_via_thunk",
        "X tt_chain",
        "E tt_leaf",
        "X tt_leaf",
        "X tt_driver",
        "X main",
    ];
    for qemu in system_qemus_x86_64() {
        for variant in [Variant::Natural, Variant::NoFp] {
            let elf = x86_64_guest_elf("thunktail", variant).expect("build guests");
            let label = format!("{} on {}", elf.display(), qemu.label);
            let (_tmp, dir, stdout) = record(&x86_64_qemu_args_on(&qemu.program, &elf), &[]);
            let log: Vec<String> = (stdout.lines())
                .filter_map(|l| l.trim_end().strip_prefix("ENTRY "))
                .map(|name| format!("E {name}"))
                .collect();
            let events = scenario(&dir);
            let entered: Vec<&String> = events.iter().filter(|e| e.starts_with("E ")).collect();
            assert_eq!(entered, log.iter().collect::<Vec<_>>(), "{label}: {stdout}");
            assert_eq!(events, want, "{label}");
        }
    }
}
