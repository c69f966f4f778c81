//! `qemu-uftrace record -- qemu-x86_64 PROGRAM`: x86_64 Linux programs under the real QEMU
//! 10.2.2 user-mode emulator, read back with real uftrace. The test guests
//! (`tests/guests/user-x86_64`, built with the host gcc) must replay exactly as their own
//! `-finstrument-functions` log says, with and without frame pointers; a PIE glibc program
//! shows its own functions around its library calls.

mod common;

use common::user::{check_oracle, check_threads, first_callees, only_task, record_ok};
use qemu_uftrace_tests::replay::replay_events;
use qemu_uftrace_tests::{cached, make_guests};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

fn qemu_x86_64() -> PathBuf {
    cached("qemu-10.2.2/bin/qemu-x86_64")
}

/// A program of `tests/guests/user-x86_64`, built once per process.
fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        make_guests("user-x86_64", "user-x86_64", &[]).expect("building the x86_64 guests")
    });
    dir.join(name)
}

/// The oracle build's trace is exactly its log; the natural and frame-pointer-less builds
/// trace the same calls.
fn check_program(program: &str) {
    check_oracle(
        &qemu_x86_64(),
        &guest(&format!("{program}-oracle.elf")),
        &[
            guest(&format!("{program}.elf")),
            guest(&format!("{program}-nofp.elf")),
        ],
    );
}

#[test]
fn x86_64_user_nested_calls_match_the_oracle() {
    check_program("nested");
}

#[test]
fn x86_64_user_recursion_matches_the_oracle() {
    check_program("recursion");
}

#[test]
fn x86_64_user_calls_through_pointers_match_the_oracle() {
    check_program("fnptr");
}

/// The functions `parent`'s entries call first, in order.
#[test]
fn x86_64_user_dynamic_pie_program_names_its_functions() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let src = tmp.path().join("libcalls.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\
         __attribute__((noinline)) int leaf(int x) { return x * 3; }\n\
         struct ops { int (*f)(int); };\n\
         struct ops *volatile table;\n\
         __attribute__((noinline)) void *make(size_t n) { return malloc(n); }\n\
         __attribute__((noinline)) void fill(char *d, const char *s, size_t n) \
         { memcpy(d, s, n); }\n\
         __attribute__((noinline)) void say(const char *s) { printf(\"libcalls: %s\\n\", s); }\n\
         int main(int argc, char **argv) {\n\
           (void)argv;\n\
           static struct ops o = { leaf };\n\
           table = &o;\n\
           int r = table->f(argc);\n\
           char *p = make(32);\n\
           fill(p, \"hello world\", 11 + argc);\n\
           say(p);\n\
           free(p);\n\
           return r != 3;\n\
         }\n",
    )
    .expect("write the source");
    let elf = tmp.path().join("libcalls");
    let status = Command::new("gcc")
        .args(["-O1", "-g", "-fpie", "-pie", "-o"])
        .arg(&elf)
        .arg(&src)
        .status()
        .expect("run gcc");
    assert!(status.success());
    let (_t, dir, stdout) = record_ok(&qemu_x86_64(), &[&elf.to_string_lossy()]);
    assert_eq!(stdout, "libcalls: hello world\n");
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    let main = events.iter().position(|e| e == "E main").expect("main");
    let own: Vec<&String> = events[main..]
        .iter()
        .filter(|e| ["leaf", "make", "fill", "say"].contains(&&e[2..]))
        .collect();
    assert_eq!(
        own,
        ["E leaf", "X leaf", "E make", "X make", "E fill", "X fill", "E say", "X say"]
    );
    assert_eq!(first_callees(&events, "make"), ["malloc"]);
    assert_eq!(first_callees(&events, "fill"), ["memcpy"]);
    assert_eq!(first_callees(&events, "say"), ["printf"]);
    // Inside libc, its exported names.
    assert!(events.iter().any(|e| e == "E __libc_start_main"), "libc");
    assert!(events.iter().any(|e| e == "E memcpy"), "libc's memcpy");
    let maps = std::fs::read_to_string(dir.join("plugin.maps")).expect("plugin.maps");
    assert!(maps.starts_with("aux\t"), "{maps}");
    assert!(maps.contains("libc.so.6"), "{maps}");
}

/// Three pthreads, static and dynamic (the host's glibc): one task each by thread id, exact
/// call counts.
#[test]
fn x86_64_user_threads_are_one_task_each() {
    check_threads(&qemu_x86_64(), &[&guest("threads.elf").to_string_lossy()]);
    check_threads(
        &qemu_x86_64(),
        &[&guest("threads-dyn.elf").to_string_lossy()],
    );
}
