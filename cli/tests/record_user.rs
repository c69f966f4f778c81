//! `qemu-uftrace record -- qemu-aarch64 PROGRAM ARGS…`: user mode under the real QEMU 10.2.2
//! user-mode emulator, read back with real uftrace. The test guests run as static Linux
//! programs (`tests/guests/user`): uftrace's replay must equal the program's own
//! `-finstrument-functions` log, printed on its stdout in the same run, which `record` passes
//! through with the exit status; a threaded program gives one task per thread, by its id.

mod common;

use common::user::{self, check_oracle, check_threads, first_callees, only_task, text, traced};
use qemu_uftrace_tests::replay::{replay_events, report_calls};
use qemu_uftrace_tests::{user_guest_elf, user_qemu};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `qemu-uftrace record -o DIR -- qemu-aarch64 ARGS…`, its output, and DIR.
fn record(args: &[&str]) -> (tempfile::TempDir, PathBuf, Output) {
    user::record(&user_qemu(), args)
}

/// The oracle build's trace is exactly its log; the natural build traces the same calls.
fn check_program(program: &str) {
    let elf = |name: String| user_guest_elf(&name).expect("build");
    check_oracle(
        &user_qemu(),
        &elf(format!("{program}-oracle.elf")),
        &[elf(format!("{program}.elf"))],
    );
}

#[test]
fn user_nested_calls_match_the_oracle() {
    check_program("nested");
}

#[test]
fn user_recursion_matches_the_oracle() {
    check_program("recursion");
}

#[test]
fn user_calls_through_pointers_match_the_oracle() {
    check_program("fnptr");
}

/// Return addresses signed by pointer authentication (`paciasp` … `retaa`, leaves
/// included), under `-cpu max`: the same exact sequences.
#[test]
fn user_pac_builds_match_the_oracle() {
    for program in ["nested", "recursion", "fnptr"] {
        let elf = user_guest_elf(&format!("{program}-pac-oracle.elf")).expect("build");
        user::check_oracle_with(&user_qemu(), &["-cpu", "max"], &elf, &[]);
    }
}

#[test]
fn user_program_stdout_and_exit_status_pass_through() {
    let elf = user_guest_elf("exit3.elf").expect("build");
    let (_tmp, dir, out) = record(&["-cpu", "max", &elf.to_string_lossy(), "ignored-arg"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "exiting with status 3\n");
    // The trace is complete all the same, with the program's names.
    assert_eq!(
        traced(&dir),
        ["E main", "E exit_status", "X exit_status", "X main"]
    );
    let stats = std::fs::read_to_string(dir.join("plugin.stats")).expect("plugin.stats");
    assert!(stats.lines().any(|l| l == "mode=user"), "{stats}");
    assert!(stats.lines().any(|l| l == "complete=1"), "{stats}");
}

#[test]
fn user_threads_are_one_task_each_by_thread_id() {
    let elf = user_guest_elf("threads.elf").expect("build");
    check_threads(&user_qemu(), &[&elf.to_string_lossy()]);
}

/// The same program, dynamic: its threads start in libc (`start_thread`), are created through
/// the PLT, and their stacks are mmapped by a libc the CLI finds under `-L`.
#[test]
fn dynamic_user_threads_are_one_task_each_by_thread_id() {
    let elf = user_guest_elf("threads-dyn.elf").expect("build");
    check_threads(
        &user_qemu(),
        &["-L", "/usr/aarch64-linux-gnu", &elf.to_string_lossy()],
    );
}

#[test]
fn user_missing_program_is_one_line() {
    let (tmp, dir, out) = record(&["-cpu", "max", "/nonexistent/prog", "arg"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "qemu-uftrace: error: the program /nonexistent/prog does not exist; give its path \
         (qemu-aarch64 does not search PATH)\n"
    );
    assert!(!dir.exists() && std::fs::read_dir(tmp.path()).unwrap().next().is_none());
}

/// A program built now with the cross toolchain (default PIE, dynamically linked against
/// the aarch64 glibc in /usr/aarch64-linux-gnu), with `extra` gcc flags.
fn cross_program(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join("libcalls.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\
         __attribute__((noinline)) void *make(size_t n) { return malloc(n); }\n\
         __attribute__((noinline)) void fill(char *d, const char *s, size_t n) \
         { memcpy(d, s, n); }\n\
         __attribute__((noinline)) void say(const char *s) { printf(\"libcalls: %s\\n\", s); }\n\
         int main(int argc, char **argv) {\n\
           (void)argv;\n\
           char *p = make(32);\n\
           fill(p, \"hello world\", 11 + argc);\n\
           say(p);\n\
           free(p);\n\
           return 0;\n\
         }\n",
    )
    .expect("write the source");
    let out = dir.join(name);
    let status = Command::new("aarch64-linux-gnu-gcc")
        .args(["-O1", "-g"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run aarch64-linux-gnu-gcc");
    assert!(status.success(), "aarch64-linux-gnu-gcc failed");
    out
}

/// A PIE program linked with glibc: the program, the loader and libc are found where they
/// were mapped (run under `-L`, as qemu-user needs), and the library calls are named by the
/// PLT entries they go through, nested under the program's own functions.
#[test]
fn user_dynamic_pie_program_names_its_library_calls() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = cross_program(tmp.path(), "libcalls", &[]);
    let (_t, dir, out) = record(&["-L", "/usr/aarch64-linux-gnu", &elf.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "libcalls: hello world\n");
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    assert_eq!(first_callees(&events, "main"), ["make"]);
    assert_eq!(first_callees(&events, "make"), ["malloc"]);
    assert_eq!(first_callees(&events, "fill"), ["memcpy"]);
    assert_eq!(first_callees(&events, "say"), ["printf"]);
    // Inside libc and the loader, their exported names.
    assert!(events.iter().any(|e| e == "E __libc_start_main"), "libc");
    assert!(
        events.iter().any(|e| e == "E _dl_allocate_tls_init"),
        "ld.so"
    );
    let maps = std::fs::read_to_string(dir.join("plugin.maps")).expect("plugin.maps");
    assert!(maps.starts_with("aux\t"), "{maps}");
    assert!(maps.contains("path=/lib/libc.so.6"), "{maps}");
}

/// A static PIE program: loaded at a bias QEMU picks, read off the auxiliary vector.
#[test]
fn user_static_pie_program_is_named_at_its_load_bias() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = cross_program(tmp.path(), "libcalls-static-pie", &["-static-pie"]);
    let (_t, dir, out) = record(&[&elf.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let events = replay_events(&dir, only_task(&dir)).expect("uftrace replay");
    // Static glibc's aliases: malloc is `__malloc`.
    let malloc = first_callees(&events, "make");
    assert!(
        malloc.len() == 1 && malloc[0].ends_with("malloc"),
        "{malloc:?}"
    );
    assert_eq!(first_callees(&events, "say"), ["printf"]);
}

/// Ctrl-C on a running program: the terminal's SIGINT reaches QEMU (and record, which
/// leaves it to QEMU). qemu-user has no handler for it while the guest has none, so the
/// plugin takes it, writes everything, and ends QEMU with it: the trace is complete and
/// record's status says the program was interrupted.
#[test]
fn user_ctrl_c_keeps_everything_recorded() {
    use std::os::unix::process::CommandExt;
    let elf = user_guest_elf("spin.elf").expect("build");
    let user::Run {
        tmp: _tmp,
        dir,
        staging,
        mut command,
    } = user::record_command(&user_qemu(), &[&elf]);
    let mut record = command
        // Its own process group, as a shell's foreground job: Ctrl-C signals all of it.
        .process_group(0)
        .spawn()
        .expect("run qemu-uftrace");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Running, and past the point where the plugin set itself up (records on disk).
    while !std::fs::read_dir(&staging).is_ok_and(|d| {
        d.flatten().any(|e| {
            e.path().extension().is_some_and(|x| x == "dat")
                && e.metadata().is_ok_and(|m| m.len() > 0)
        })
    }) {
        assert!(std::time::Instant::now() < deadline, "nothing recorded");
        assert!(record.try_wait().expect("wait").is_none(), "record ended");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: a signal to the process group we made.
    unsafe { libc::kill(-(record.id() as i32), libc::SIGINT) };
    // A record that ignored the signal would spin with its guest for ever: a watchdog ends
    // the group after two minutes, and the status below says it was not the SIGINT.
    let group = -(record.id() as i32);
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let ended = ended.clone();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while !ended.load(std::sync::atomic::Ordering::Relaxed) {
                if std::time::Instant::now() > deadline {
                    // SAFETY: a signal to the process group this test made.
                    unsafe { libc::kill(group, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    let out = record.wait_with_output().expect("wait");
    ended.store(true, std::sync::atomic::Ordering::Relaxed);
    watchdog.join().expect("the watchdog");
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(130),
        "record did not end on SIGINT: {err}"
    );
    assert!(!err.contains("INCOMPLETE"), "{err}");
    let stats = std::fs::read_to_string(dir.join("plugin.stats")).expect("plugin.stats");
    assert!(stats.lines().any(|l| l == "complete=1"), "{stats}");
    // Every spin_tick that returned called spin_work once; at most the one running when the
    // signal came is still open.
    only_task(&dir);
    let calls = report_calls(&dir, &[]).expect("uftrace report");
    let count = |n: &str| calls.get(n).copied().unwrap_or(0);
    assert!(count("spin_tick") > 10, "{calls:?}");
    assert!(
        count("spin_work").abs_diff(count("spin_tick")) <= 1,
        "{calls:?}"
    );
}
