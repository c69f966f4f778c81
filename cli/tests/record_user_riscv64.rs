//! `qemu-uftrace record -- qemu-riscv64 PROGRAM`: riscv64 Linux user programs under QEMU
//! 10.2.2, read back with real uftrace. The test guests of `tests/guests/user`, built with
//! riscv64-linux-gnu-gcc (with and without frame pointers), must trace exactly their own
//! `-finstrument-functions` log; a dynamic glibc program run under `-L` shows its names.

mod common;

use common::user::{self, check_oracle, first_callees, only_task, record_ok, text, traced};
use qemu_uftrace_tests::replay::replay_events;
use qemu_uftrace_tests::{user_guest_elf_riscv64, user_qemu_riscv64};
use std::path::PathBuf;
use std::process::{Command, Output};

/// The oracle build's trace is exactly the log it printed in the same run; the natural
/// build (with frame pointers, or without: `omit_fp`) traces the same calls. The oracle
/// itself needs frame pointers.
fn check_program(program: &str, omit_fp: bool) {
    let elf = |name: String, omit_fp| user_guest_elf_riscv64(&name, omit_fp).expect("build");
    check_oracle(
        &user_qemu_riscv64(),
        &elf(format!("{program}-oracle.elf"), false),
        &[elf(format!("{program}.elf"), omit_fp)],
    );
}

/// `qemu-uftrace record -o DIR -- qemu-riscv64 ARGS…`, its output, and DIR.
fn record(args: &[&str]) -> (tempfile::TempDir, PathBuf, Output) {
    user::record(&user_qemu_riscv64(), args)
}

#[test]
fn riscv64_user_nested_calls_match_the_oracle() {
    check_program("nested", false);
}

#[test]
fn riscv64_user_recursion_matches_the_oracle() {
    check_program("recursion", false);
}

/// JALR through a function pointer: the register-plus-offset callback.
#[test]
fn riscv64_user_calls_through_pointers_match_the_oracle() {
    check_program("fnptr", false);
}

#[test]
fn riscv64_user_without_frame_pointers_matches_the_oracle() {
    for program in ["nested", "recursion", "fnptr"] {
        check_program(program, true);
    }
}

#[test]
fn riscv64_user_exit_status_passes_through() {
    let elf = user_guest_elf_riscv64("exit3.elf", false).expect("build");
    let (_tmp, dir, out) = record(&[&elf.to_string_lossy(), "ignored-arg"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "exiting with status 3\n");
    assert_eq!(
        traced(&dir),
        ["E main", "E exit_status", "X exit_status", "X main"]
    );
    let info = std::fs::read(dir.join("info")).expect("info");
    assert!(
        info.windows(7).any(|w| w == b"RISCV64"),
        "the info's cpu description"
    );
}

/// Three pthreads, static and dynamic: one task each by thread id, exact call counts.
#[test]
fn riscv64_user_threads_are_one_task_each() {
    let elf = user_guest_elf_riscv64("threads.elf", false).expect("build");
    user::check_threads(&user_qemu_riscv64(), &[&elf.to_string_lossy()]);
    let elf = user_guest_elf_riscv64("threads-dyn.elf", false).expect("build");
    user::check_threads(
        &user_qemu_riscv64(),
        &["-L", "/usr/riscv64-linux-gnu", &elf.to_string_lossy()],
    );
}

/// A PIE program linked with riscv64 glibc, run under `-L`: the program's functions by
/// name, its library calls named by the PLT entries they go through.
#[test]
fn riscv64_user_dynamic_program_names_its_library_calls() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let src = tmp.path().join("libcalls.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\
         __attribute__((noinline)) void *make(size_t n) { return malloc(n); }\n\
         __attribute__((noinline)) void say(const char *s) { printf(\"libcalls: %s\\n\", s); }\n\
         int main(int argc, char **argv) {\n\
           (void)argv;\n\
           char *p = make(32);\n\
           strcpy(p, argc > 5 ? \"?\" : \"hello world\");\n\
           say(p);\n\
           free(p);\n\
           return 0;\n\
         }\n",
    )
    .expect("write the source");
    let elf = tmp.path().join("libcalls");
    let status = Command::new("riscv64-linux-gnu-gcc")
        .args(["-O1", "-g", "-o"])
        .arg(&elf)
        .arg(&src)
        .status()
        .expect("run riscv64-linux-gnu-gcc (scripts/install-deps.sh)");
    assert!(status.success(), "riscv64-linux-gnu-gcc failed");
    let (_t, dir, stdout) = record_ok(
        &user_qemu_riscv64(),
        &["-L", "/usr/riscv64-linux-gnu", &elf.to_string_lossy()],
    );
    assert_eq!(stdout, "libcalls: hello world\n");
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    assert_eq!(first_callees(&events, "main"), ["make"]);
    assert_eq!(first_callees(&events, "make"), ["malloc"]);
    assert_eq!(first_callees(&events, "say"), ["printf"]);
    assert!(events.iter().any(|e| e == "E __libc_start_main"), "libc");
    let maps = std::fs::read_to_string(dir.join("plugin.maps")).expect("plugin.maps");
    assert!(maps.starts_with("aux\t"), "{maps}");
    assert!(maps.contains("libc.so.6"), "{maps}");
}
