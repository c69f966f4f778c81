//! `qemu-uftrace record -- qemu-system-riscv64 -M virt -bios none -kernel ELF`: the test
//! guests built for riscv64 (`tests/guests/riscv64`), entered in M-mode by QEMU's reset code,
//! read back with real uftrace. The call sequence uftrace replays must equal the guest's own
//! `-finstrument-functions` log, for the natural and frame-pointer-less builds, on QEMU 10.0,
//! 10.2.2 and 11.1.3.

use qemu_uftrace_tests::replay::{longjmp_shape, replay_events, without, TAIL_VIA_PTR};
use qemu_uftrace_tests::riscv64::{
    riscv64_guest_elf, riscv64_qemu_args_on, riscv64_qemus, QEMU_RISCV64,
};
use qemu_uftrace_tests::{
    is_runtime_function, nm_functions, oracle_names, parse_oracle, plugin_stat,
    run_plain_qemu_argv, Variant, QEMU_TIMEOUT,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Records `qemu` into a fresh directory; gives QEMU's output too.
fn record(qemu: &[String]) -> (tempfile::TempDir, PathBuf, Output) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    let out = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"))
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .arg("--")
        .args(qemu)
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    (tmp, dir, out)
}

/// [`record`], which must succeed.
fn record_ok(qemu: &[String]) -> (tempfile::TempDir, PathBuf) {
    let (tmp, dir, out) = record(qemu);
    assert!(
        out.status.success(),
        "record {} failed: {}\nstdout: {}\nstderr: {}",
        qemu.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (tmp, dir)
}

/// What the oracle build logged under plain QEMU, as names.
fn oracle(program: &str) -> Vec<String> {
    let elf = riscv64_guest_elf(program, Variant::Oracle).expect("build guests");
    let (code, uart) = run_plain_qemu_argv(&riscv64_qemu_args_on(QEMU_RISCV64, &elf), QEMU_TIMEOUT)
        .expect("run oracle guest");
    assert_eq!(code, 0, "{program} oracle exited {code}: {uart}");
    let events = parse_oracle(&uart).expect("oracle log");
    oracle_names(&events, &nm_functions(&elf).expect("nm"))
}

/// The scenario's calls from a trace of `elf`: the start code goes, its callees stay; the
/// runtime (UART, exit, oracle hooks, setjmp/longjmp) goes with everything it calls.
fn traced(qemu: &str, elf: &Path) -> (Vec<String>, PathBuf, tempfile::TempDir) {
    let (tmp, dir) = record_ok(&riscv64_qemu_args_on(qemu, elf));
    let events = replay_events(&dir, 1).expect("uftrace replay");
    let events = without(&events, |n| n == "_start", false);
    // A longjmp has no exit (libmcount's shape): it goes alone, before the runtime and
    // everything it calls.
    let events = without(&events, |n| n == "longjmp", false);
    (without(&events, is_runtime_function, true), dir, tmp)
}

/// Every build of `program`, on every riscv64 QEMU, against its oracle.
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
    for qemu in riscv64_qemus() {
        let q = qemu.label;
        for (variant, want) in [
            (Variant::Oracle, &oracle),
            (Variant::Natural, &oracle),
            (Variant::NoFp, &oracle),
        ] {
            let elf = riscv64_guest_elf(program, variant).expect("build guests");
            let (events, dir, _tmp) = traced(&qemu.program, &elf);
            assert_eq!(&events, want, "{} on {q}", elf.display());
            // Every return matched its call (longjmp's does not, by design: it resyncs), and
            // nothing was left open but rt_exit, which start.S enters by `j rt_exit` and
            // which ends the guest.
            if program != "longjmp" {
                assert_eq!(
                    plugin_stat(&dir, "unmatched_returns"),
                    "0",
                    "{program} on {q}"
                );
            }
            assert_eq!(plugin_stat(&dir, "open_frames"), "1", "{program} on {q}");
        }
    }
}

#[test]
fn riscv64_system_nested_calls_match_the_oracle() {
    check_program("nested");
}

#[test]
fn riscv64_system_recursion_matches_the_oracle() {
    check_program("recursion");
}

/// `jalr ra, 0(a5)` through function pointers.
#[test]
fn riscv64_system_calls_through_pointers_match_the_oracle() {
    check_program("fnptr");
}

#[test]
fn riscv64_system_leaf_functions_match_the_oracle() {
    check_program("leaf");
}

#[test]
fn riscv64_system_tail_calls_fold_into_their_caller() {
    check_program("tailcall");
    let elf = riscv64_guest_elf("tailcall", Variant::Natural).expect("build guests");
    let (natural, _dir, _tmp) = traced(&riscv64_qemus()[0].program, &elf);
    assert!(natural.windows(6).any(|w| w == TAIL_VIA_PTR), "{natural:?}");
}

/// longjmp's `ret` goes to setjmp's return address, several frames down.
#[test]
fn riscv64_system_longjmp_closes_the_frames_it_skips() {
    check_program("longjmp");
}

#[test]
fn riscv64_system_exit_status_passes_through() {
    let elf = riscv64_guest_elf("exit3", Variant::Natural).expect("build guests");
    for qemu in riscv64_qemus() {
        let (_tmp, dir, out) = record(&riscv64_qemu_args_on(&qemu.program, &elf));
        assert_eq!(out.status.code(), Some(3), "{}: {out:?}", qemu.label);
        let events = replay_events(&dir, 1).expect("replay");
        assert!(
            events.iter().any(|e| e == "E exit_status"),
            "{}: {events:?}",
            qemu.label
        );
        let info = qemu_uftrace_tests::replay::uftrace(&["info", "-d", &dir.to_string_lossy()])
            .expect("uftrace info");
        assert!(info.contains("RISCV64"), "{info}");
    }
}
