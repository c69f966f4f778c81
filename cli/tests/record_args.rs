//! `record -A/--argument` and `-R/--retval` (issue 38): arguments and return values read
//! from the guest's registers and memory, replayed by uftrace 0.13, 0.17 and 0.19 as
//! uftrace shows its own. User mode: `tests/guests/user/args.c` logs each call as replay
//! shows it; on x86_64 its `-pg` build recorded by native uftrace with the same specs is
//! the other oracle; `tests/guests/user/libargs.c`, a dynamic PIE's calls into libc, the
//! same on all three (native uftrace on x86_64). System mode: `tests/guests/sysargs.c` on bare metal, its own log, on
//! aarch64, riscv64 and x86_64 under QEMU 10.0, 10.2.2 and 11.1.3.

mod common;

use qemu_uftrace_tests::replay::{replay_body, uftrace, uftrace_at, uftrace_versions};
use qemu_uftrace_tests::riscv64::{riscv64_guest_elf, riscv64_qemu_args_on, riscv64_qemus};
use qemu_uftrace_tests::x86_64_guests::{
    system_qemus_x86_64, x86_64_guest_elf, x86_64_qemu_args_on,
};
use qemu_uftrace_tests::{cached, guest_elf, qemu_args_on, system_qemus, Variant};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The specs, as uftrace takes them: every size and sign, strings, chars, hex.
const ARGS: &[&str] = &[
    "add@arg1/i32,arg2/i32",
    "neg@arg1/i",
    "greet@arg1/s,arg2/i32",
    "pick@arg1/i32",
    "ptr@arg1/x",
    "paint@arg1/i32",
    "up@arg1/c",
    "bad@arg1/s",
    "narrow@arg1/u8,arg2/i16,arg3/u32",
    "six@arg1/i,arg2/i,arg3/i,arg4/i,arg5/i,arg6/i",
];
/// Floating-point values, counted apart from the integers (`arg2/f` is fparg2): user mode
/// (bare-metal guests leave the FPU off).
const ARGS_FLOAT: [&str; 2] = ["scale@fparg1,arg2/f32,arg1/i32", "half@fparg1/f32"];
const RETVALS_FLOAT: [&str; 2] = ["scale@retval/f", "half@retval/f32"];
/// Past x86_64's six argument registers (its arg7 and arg8 on the stack), and past every
/// convention's (ten's arg9 and arg10).
const ARGS_EIGHT: &str = "eight@arg1/i,arg2/i,arg3/i,arg4/i,arg5/i,arg6/i,arg7/i,arg8/i";
const ARGS_TEN: &str =
    "ten@arg1/i,arg2/i,arg3/i,arg4/i,arg5/i,arg6/i,arg7/i,arg8/i,arg9/i,arg10/i32";
/// Every function's return value (`^` a regular expression, as `-F` takes it).
const RETVALS: &[&str] = &[
    "^add$@retval/i32",
    "neg@retval/i",
    "greet@retval/i32",
    "pick@retval/s",
    "ptr@retval/x",
    "paint@retval/i32",
    "up@retval/c",
    "bad@retval/i32",
    "narrow@retval/u16",
    "six@retval/i",
];
const RETVAL_EIGHT: &str = "eight@retval/i";
const RETVAL_TEN: &str = "ten@retval/i";
const FUNCS: &[&str] = &[
    "add", "neg", "greet", "pick", "ptr", "paint", "up", "bad", "narrow", "six", "scale", "half",
    "eight", "ten",
];

fn source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/guests/user/args.c")
}

/// Builds args.c with `gcc` and `extra` flags into `out`.
fn build(gcc: &str, extra: &[&str], out: &Path) {
    let status = Command::new(gcc)
        .args([
            "-O1",
            "-g",
            "-fno-optimize-sibling-calls",
            "-fno-inline",
            "-Wall",
            "-Werror",
        ])
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(source())
        .status()
        .expect("run gcc");
    assert!(status.success(), "{gcc} {extra:?} args.c");
}

/// `-A …`/`-R …` for `record` (ours and uftrace's alike); `stack`: the user program's, the
/// arguments past the registers and the floating-point values too.
fn spec_options(stack: bool) -> Vec<String> {
    let mut v = Vec::new();
    let more = [ARGS_EIGHT, ARGS_TEN, ARGS_FLOAT[0], ARGS_FLOAT[1]];
    for a in ARGS.iter().chain(more.iter().filter(|_| stack)) {
        v.extend(["-A".to_string(), a.to_string()]);
    }
    let more = [RETVAL_EIGHT, RETVAL_TEN, RETVALS_FLOAT[0], RETVALS_FLOAT[1]];
    for r in RETVALS.iter().chain(more.iter().filter(|_| stack)) {
        v.extend(["-R".to_string(), r.to_string()]);
    }
    v
}

/// The replay lines of `funcs` (what follows `|`, trimmed), in order.
fn lines_of(replay: &str, funcs: &[&str]) -> Vec<String> {
    replay
        .lines()
        .filter_map(replay_body)
        .map(|(_, body)| body.trim().to_string())
        .filter(|b| {
            let name = b.split(['(', ' ', ';']).next().unwrap_or("");
            funcs.contains(&name)
        })
        .collect()
}

/// The program's own log: each call as replay must show it (a console line may begin with
/// the firmware's last words).
fn logged(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once("log: "))
        .map(|(_, l)| l.trim_end().to_string())
        .collect()
}

/// Records `program` under `qemu` with the specs: its log and our trace's lines of the
/// spec'd functions as each uftrace version replays them (all alike).
fn record_ours(qemu: &Path, program: &Path, stack: bool) -> (Vec<String>, Vec<String>) {
    let argv = [qemu.display().to_string(), program.display().to_string()];
    let (log, lines) = record_argv(&argv, stack);
    assert_eq!(log.len(), 16, "{log:?}");
    (log, lines)
}

/// [`record_ours`] of the QEMU command line `argv`.
fn record_argv(argv: &[String], stack: bool) -> (Vec<String>, Vec<String>) {
    let (_tmp, dir, log) = record_logged(&spec_options(stack), argv, &[]);
    (log, replayed_alike(&dir, &[], FUNCS))
}

/// Records QEMU command line `argv` with `options` (and `env` for the guest): the temp dir
/// (keep it alive), the trace, and the guest's log. Every read went with its record.
fn record_logged<S: AsRef<std::ffi::OsStr>>(
    options: &[S],
    argv: &[S],
    env: &[(&str, &str)],
) -> (tempfile::TempDir, PathBuf, Vec<String>) {
    let (tmp, dir, log, _) = record_logged_said(options, argv, env);
    (tmp, dir, log)
}

/// [`record_logged`], and what `record` said on its standard error.
fn record_logged_said<S: AsRef<std::ffi::OsStr>>(
    options: &[S],
    argv: &[S],
    env: &[(&str, &str)],
) -> (tempfile::TempDir, PathBuf, Vec<String>, String) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    let out = Command::new(common::BIN)
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .args(options)
        .arg("--")
        .args(argv)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown: Vec<_> = argv.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    assert!(out.status.success(), "record {shown:?} failed: {stderr}");
    assert!(!stderr.contains("no record to go with"), "{stderr}");
    let log = logged(&String::from_utf8_lossy(&out.stdout));
    (tmp, dir, log, stderr.into_owned())
}

/// The lines of `funcs` in main's calls as uftrace 0.13, 0.17 and 0.19 replay trace `dir`
/// with `extra` options, all alike.
fn replayed_alike(dir: &Path, extra: &[&str], funcs: &[&str]) -> Vec<String> {
    let d = dir.to_string_lossy();
    let mut lines: Option<Vec<String>> = None;
    for u in uftrace_versions().expect("uftrace versions") {
        let mut args = vec!["replay", "--no-pager", "-F", "main"];
        args.extend(extra);
        args.extend(["-d", &d]);
        let text = uftrace_at(&u.program, &args).expect("uftrace replay");
        let these = lines_of(&text, funcs);
        match &lines {
            None => lines = Some(these),
            Some(first) => assert_eq!(&these, first, "uftrace {} differs", u.version),
        }
    }
    lines.unwrap_or_default()
}

/// Each logged call is in the trace as logged, and the trace has no other line of them.
fn assert_as_logged(log: &[String], lines: &[String]) {
    assert_eq!(lines, log, "trace against the program's own log");
}

#[test]
fn x86_64_user_arguments_and_return_values_match_native_uftrace() {
    let tmp = tempfile::tempdir().expect("temp dir");
    // A dynamic PIE under QEMU (its functions placed by its load bias), and the -pg build
    // uftrace records natively.
    let plain = tmp.path().join("args");
    let pg = tmp.path().join("args-pg");
    build("gcc", &["-fpie", "-pie"], &plain);
    build("gcc", &["-pg"], &pg);
    let (log, ours) = record_ours(&cached("qemu-10.2.2/bin/qemu-x86_64"), &plain, true);
    assert_as_logged(&log, &ours);

    let data = tmp.path().join("native.data");
    let d = data.to_string_lossy().into_owned();
    // No schedule events: a pre-emption of the native run (a loaded machine) would split a
    // call's line in two around it.
    let mut native = vec![
        "record".to_string(),
        "--no-sched".into(),
        "-d".into(),
        d.clone(),
    ];
    native.extend(spec_options(true));
    native.push(pg.to_string_lossy().into_owned());
    let native: Vec<&str> = native.iter().map(String::as_str).collect();
    uftrace(&native).expect("native uftrace record");
    let text = uftrace(&["replay", "--no-pager", "-F", "main", "-d", &d]).expect("replay");
    // The same lines, but for the pointers (each run's own load address) and scale's
    // double return value: native uftrace (0.13 to 0.19) shows it as 1.500000, scale's
    // first argument (libmcount's mcount_arch_get_retval reads the live xmm0 from inside
    // mcount_exit's C code, not the value mcount_return saved), where the program's log
    // above says -6.750000, as ours.
    let no_ptr = |v: &[String]| -> Vec<String> {
        v.iter()
            .filter(|l| !l.starts_with("ptr("))
            .map(|l| match l.strip_prefix("scale(") {
                Some(_) => l.split(" = ").next().unwrap_or(l).to_string(),
                None => l.clone(),
            })
            .collect()
    };
    assert_eq!(
        no_ptr(&ours),
        no_ptr(&lines_of(&text, FUNCS)),
        "ours against native:\n{text}"
    );
}

#[test]
fn aarch64_user_arguments_and_return_values_match_the_log() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = tmp.path().join("args");
    build("aarch64-linux-gnu-gcc", &["-static"], &elf);
    let (log, ours) = record_ours(&cached("qemu-10.2.2/bin/qemu-aarch64"), &elf, true);
    assert_as_logged(&log, &ours);
}

#[test]
fn riscv64_user_arguments_and_return_values_match_the_log() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = tmp.path().join("args");
    build("riscv64-linux-gnu-gcc", &["-static"], &elf);
    let (log, ours) = record_ours(&cached("qemu-10.2.2/bin/qemu-riscv64"), &elf, true);
    assert_as_logged(&log, &ours);
}

/// A shared library's functions (`tests/guests/user/libargs.c`): their specs, their names.
const LIB_SPECS: &[&str] = &[
    "-A",
    "getenv@arg1/s",
    "-R",
    "getenv@retval/s",
    "-R",
    "getpid@retval/d",
    "-A",
    "strtol@arg1/s",
    "-R",
    "strtol@retval/d",
    "-A",
    "strdup@arg1/s",
    "-R",
    "strdup@retval/s",
];
const LIB_FUNCS: &[&str] = &["getenv", "getpid", "strtol", "strdup"];

/// Records dynamic PIE `program` (built from libargs.c) under `qemu` with [`LIB_SPECS`]:
/// its log, and main's calls of [`LIB_FUNCS`] as replay shows them (`-D 2`: their own
/// callees, the loader's lazy binding among them, hidden, as native uftrace's PLT hooks
/// hide them). uftrace 0.13, 0.17 and 0.19 alike.
fn record_library_calls(qemu: &[&str], program: &Path) -> (Vec<String>, Vec<String>) {
    let program = program.to_string_lossy();
    let argv: Vec<&str> = qemu.iter().copied().chain([program.as_ref()]).collect();
    let (_tmp, dir, log) = record_logged(LIB_SPECS, &argv, &[("QU_ARGS", "yes")]);
    assert_eq!(log.len(), 4, "{log:?}");
    (log, replayed_alike(&dir, &["-D", "2"], LIB_FUNCS))
}

fn build_libargs(gcc: &str, extra: &[&str], out: &Path) {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/guests/user/libargs.c");
    let status = Command::new(gcc)
        .args(["-O1", "-g", "-Wall", "-Werror"])
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(source)
        .status()
        .expect("run gcc");
    assert!(status.success(), "{gcc} {extra:?} libargs.c");
}

/// Native `uftrace record OPTIONS` of `pg` (libargs.c built with -pg): main's calls as its
/// replay shows them, two deep.
fn native_library_calls(pg: &Path, options: &[&str]) -> String {
    let tmp = tempfile::tempdir().expect("temp dir");
    let d = tmp
        .path()
        .join("native.data")
        .to_string_lossy()
        .into_owned();
    // No schedule events: a pre-emption of the native run (a loaded machine) would split a
    // call's line in two around it.
    let status = Command::new("uftrace")
        .args(["record", "--no-sched", "-d", &d])
        .args(options)
        .arg(pg)
        .env("QU_ARGS", "yes")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("native uftrace record");
    assert!(status.success(), "native uftrace record {options:?}");
    uftrace(&["replay", "--no-pager", "-F", "main", "-D", "2", "-d", &d]).expect("replay")
}

#[test]
fn x86_64_library_arguments_and_return_values_match_native_uftrace() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (plain, pg) = (tmp.path().join("libargs"), tmp.path().join("libargs-pg"));
    build_libargs("gcc", &["-fpie", "-pie"], &plain);
    build_libargs("gcc", &["-pg"], &pg);
    let qemu = cached("qemu-10.2.2/bin/qemu-x86_64");
    let (log, ours) = record_library_calls(&[&qemu.to_string_lossy()], &plain);
    assert_as_logged(&log, &ours);

    // Native uftrace's own: its PLT hooks read the same values.
    let text = native_library_calls(&pg, LIB_SPECS);
    // The same lines, but for the pid (each run's own).
    let no_pid = |v: &[String]| -> Vec<String> {
        v.iter()
            .filter(|l| !l.starts_with("getpid("))
            .cloned()
            .collect()
    };
    let theirs = lines_of(&text, LIB_FUNCS);
    assert_eq!(theirs.len(), 4, "native:\n{text}");
    assert_eq!(
        no_pid(&ours),
        no_pid(&theirs),
        "ours against native:\n{text}"
    );
}

/// `-a` over a program's calls into libc: each call's values from libc's own DWARF (its
/// detached debug file, found by build ID: the host's libc6-dbg, and Debian's arm64 libc
/// with its libc6-dbg as `-L`), read at the program's PLT entries. The oracle is native
/// `uftrace record -a` of the -pg build, whose PLT hooks take them from uftrace's list of
/// libc prototypes: the same lines for x86_64 and aarch64, but for a heap pointer's value
/// and getpid's return value (an assembly syscall wrapper, without DWARF: none here, the
/// list gives one).
#[test]
fn auto_args_of_library_calls_match_native_uftrace() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let funcs = ["getenv", "getpid", "strtol", "strdup", "printf", "free"];
    let comparable = |lines: &[String]| -> Vec<String> {
        (lines.iter())
            .map(|l| match l {
                l if l.starts_with("getpid(") => "getpid(…".to_string(),
                l if l.starts_with("free(0x") => "free(POINTER);".to_string(),
                l => l.clone(),
            })
            .collect()
    };
    let pg = tmp.path().join("libargs-pg");
    build_libargs("gcc", &["-pg"], &pg);
    let text = native_library_calls(&pg, &["-a"]);
    let theirs = lines_of(&text, &funcs);
    assert_eq!(theirs.len(), 9, "native:\n{text}");
    assert!(
        theirs.contains(&r#"strtol("-42", 0, 10) = -42;"#.to_string()),
        "native:\n{text}"
    );

    let loader = cached("arm64-libc/lib/ld-linux-aarch64.so.1");
    let arm64_libc = loader.parent().and_then(Path::parent).expect("sysroot");
    let runs = [
        ("x86_64", "gcc", "qemu-x86_64", None),
        (
            "aarch64",
            "aarch64-linux-gnu-gcc",
            "qemu-aarch64",
            Some(arm64_libc),
        ),
    ];
    for (arch, gcc, qemu, root) in runs {
        let program = tmp.path().join(format!("libargs-{arch}"));
        build_libargs(gcc, &["-fpie", "-pie"], &program);
        let qemu = cached(&format!("qemu-10.2.2/bin/{qemu}"));
        let mut argv = vec![qemu.to_string_lossy().into_owned()];
        if let Some(root) = root {
            argv.extend(["-L".to_string(), root.to_string_lossy().into_owned()]);
        }
        argv.push(program.to_string_lossy().into_owned());
        let (_tmp, dir, log, stderr) =
            record_logged_said(&["-a".to_string()], &argv, &[("QU_ARGS", "yes")]);
        assert_eq!(log.len(), 4, "{arch}: {log:?}");
        assert!(!stderr.contains("no DWARF types"), "{arch}: {stderr}");
        let ours = replayed_alike(&dir, &["-D", "2"], &funcs);
        assert_eq!(
            comparable(&ours),
            comparable(&theirs),
            "{arch}: ours against native:\n{text}"
        );
    }
    // The cross toolchain's libc has no debug file: one line says so, and its calls get
    // no value (none guessed).
    let program = tmp.path().join("libargs-aarch64");
    let qemu = cached("qemu-10.2.2/bin/qemu-aarch64");
    let argv = [
        qemu.to_string_lossy().into_owned(),
        "-L".into(),
        "/usr/aarch64-linux-gnu".into(),
        program.to_string_lossy().into_owned(),
    ];
    let (_tmp, dir, _, stderr) =
        record_logged_said(&["-a".to_string()], &argv, &[("QU_ARGS", "yes")]);
    let said: Vec<&str> = (stderr.lines())
        .filter(|l| l.contains("no DWARF types"))
        .collect();
    assert_eq!(said.len(), 2, "one line, said again at the end:\n{stderr}");
    assert!(said[0].contains("libc.so.6"), "{stderr}");
    let ours = replayed_alike(&dir, &["-D", "2"], &funcs);
    assert!(ours.contains(&"getenv();".to_string()), "{ours:?}");
    assert!(ours.iter().all(|l| !l.contains('=')), "{ours:?}");
}

#[test]
fn aarch64_and_riscv64_library_arguments_and_return_values_match_the_log() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for (arch, qemu) in [("aarch64", "qemu-aarch64"), ("riscv64", "qemu-riscv64")] {
        let program = tmp.path().join(format!("libargs-{arch}"));
        build_libargs(
            &format!("{arch}-linux-gnu-gcc"),
            &["-fpie", "-pie"],
            &program,
        );
        let qemu = cached(&format!("qemu-10.2.2/bin/{qemu}"));
        let root = format!("/usr/{arch}-linux-gnu");
        let (log, ours) = record_library_calls(&[&qemu.to_string_lossy(), "-L", &root], &program);
        assert_eq!(ours, log, "{arch}: trace against the program's own log");
    }
}

/// Bare metal (`tests/guests/sysargs.c`): the same specs on every architecture and QEMU
/// (plugin API 4, 5 and 7), exactly the guest's own log.
fn check_system(label: &str, runs: Vec<(String, Vec<String>)>) {
    for (q, argv) in runs {
        let (log, ours) = record_argv(&argv, false);
        assert_eq!(log.len(), 12, "{label} on {q}: {log:?}");
        assert_eq!(ours, log, "{label} on {q}: trace against the guest's log");
    }
}

#[test]
fn aarch64_bare_metal_arguments_match_the_guest_log() {
    let elf = guest_elf("sysargs", Variant::Natural).expect("build guests");
    let runs = (system_qemus().into_iter())
        .map(|q| (q.label.to_string(), qemu_args_on(&q.program, &elf)))
        .collect();
    check_system("aarch64", runs);
}

#[test]
fn riscv64_bare_metal_arguments_match_the_guest_log() {
    let elf = riscv64_guest_elf("sysargs", Variant::Natural).expect("build guests");
    let runs = (riscv64_qemus().into_iter())
        .map(|q| (q.label.to_string(), riscv64_qemu_args_on(&q.program, &elf)))
        .collect();
    check_system("riscv64", runs);
}

#[test]
fn x86_64_bare_metal_arguments_match_the_guest_log() {
    let elf = x86_64_guest_elf("sysargs", Variant::Natural).expect("build guests");
    let runs = (system_qemus_x86_64().into_iter())
        .map(|q| (q.label.to_string(), x86_64_qemu_args_on(&q.program, &elf)))
        .collect();
    check_system("x86_64", runs);
}

/// The export beside trace `dir`, decoded by Perfetto's own reader
/// (`tests/perfetto_check.py`), which found no problem in it.
fn decoded_export(dir: &Path) -> serde_json::Value {
    let v = common::perfetto_decoded(&dir.with_extension("data.pftrace"));
    assert_eq!(v["problems"], serde_json::json!([]), "{v}");
    v
}

/// `export`: each spec'd call's slice carries its values as `args` and `retval`, which
/// written back as replay shows a leaf are the program's log (`as_shown` mends the log
/// where replay shows a value otherwise: an enum by name).
fn check_export(options: &[String], argv: &[String], as_shown: fn(&mut String)) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    let out = Command::new(common::BIN)
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .args(options)
        .arg("--then")
        .arg("export")
        .arg("--")
        .args(argv)
        .output()
        .expect("run qemu-uftrace");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut log = logged(&String::from_utf8_lossy(&out.stdout));
    log.iter_mut().for_each(as_shown);
    let v = decoded_export(&dir);
    let slices: Vec<String> = v["threads"][0]["values"]
        .as_array()
        .expect("values")
        .iter()
        // The logged functions' (`-a` gives main its values too).
        .filter(|s| s["name"].as_str().is_some_and(|n| FUNCS.contains(&n)))
        .map(|s| {
            let text = |k: &str| s[k].as_str().map(str::to_string);
            let ret = text("retval").map_or_else(String::new, |r| format!(" = {r}"));
            format!(
                "{}({}){ret};",
                text("name").unwrap_or_default(),
                text("args").unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(slices, log, "export against the program's log");
}

#[test]
fn export_shows_arguments_as_slice_args() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = tmp.path().join("args");
    build("aarch64-linux-gnu-gcc", &["-static"], &elf);
    let argv = [
        cached("qemu-10.2.2/bin/qemu-aarch64").display().to_string(),
        elf.display().to_string(),
    ];
    check_export(&spec_options(true), &argv, |_| ());
    // `-a`: the enum by its name, as replay shows it (info's `enumauto:`).
    check_export(&["-a".to_string()], &argv, paint_by_name);
}

/// `paint`'s log line as `-a` shows it: its enum argument by name.
fn paint_by_name(line: &mut String) {
    if line.starts_with("paint(") {
        *line = "paint(BLUE) = 12;".into();
    }
}

/// `-a`: every function of the program with DWARF, by its types (as uftrace's -a: the
/// enum by name; the arguments past the registers from the stack).
#[test]
fn auto_args_follow_dwarf_types() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for (arch, gcc, extra) in [
        ("x86_64", "gcc", &["-fpie", "-pie"][..]),
        ("aarch64", "aarch64-linux-gnu-gcc", &["-static"][..]),
    ] {
        let elf = tmp.path().join(format!("args-{arch}"));
        build(gcc, extra, &elf);
        // Aimed with -F, -a gives the callees it records their values too, as uftrace's.
        for aim in [&[][..], &["-F", "main"][..]] {
            let dir = tmp.path().join(format!("{arch}{}.data", aim.len()));
            let out = Command::new(common::BIN)
                .arg("record")
                .arg("-o")
                .arg(&dir)
                .arg("-a")
                .args(aim)
                .arg("--")
                .arg(cached(&format!("qemu-10.2.2/bin/qemu-{arch}")))
                .arg(&elf)
                .output()
                .expect("run qemu-uftrace");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{arch} {aim:?}: {stderr}");
            assert!(!stderr.contains("no record to go with"), "{stderr}");
            let mut want = logged(&String::from_utf8_lossy(&out.stdout));
            want.iter_mut().for_each(paint_by_name);
            let d = dir.to_string_lossy();
            for u in uftrace_versions().expect("uftrace versions") {
                let text = uftrace_at(
                    &u.program,
                    &["replay", "--no-pager", "-F", "main", "-d", &d],
                )
                .expect("uftrace replay");
                assert_eq!(
                    lines_of(&text, FUNCS),
                    want,
                    "{arch} {aim:?}, uftrace {}:\n{text}",
                    u.version
                );
            }
        }
    }
}

/// Bad specs are one line each, before QEMU starts.
#[test]
fn bad_specs_are_one_line() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = tmp.path().join("args");
    build("gcc", &["-static"], &elf);
    for (opts, want) in [
        (&["-A", "ad@arg1"][..], "did you mean add"),
        (&["-A", "add@arg33"][..], "at most arg32"),
        (&["-A", "add@arg1/f80"][..], "long double"),
        (&["-A", "add@fparg9"][..], "8th floating-point"),
        (&["-R", "add@retval/q"][..], "unknown format"),
    ] {
        let out = Command::new(common::BIN)
            .arg("record")
            .arg("-o")
            .arg(tmp.path().join("x.data"))
            .args(opts)
            .arg("--")
            .arg(cached("qemu-10.2.2/bin/qemu-x86_64"))
            .arg(&elf)
            .output()
            .expect("run qemu-uftrace");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{opts:?} accepted");
        let first = stderr.lines().next().unwrap_or("");
        assert!(first.contains(want), "{opts:?}: {stderr}");
        assert!(stderr.lines().count() <= 2, "{opts:?}: {stderr}");
    }
}

/// Debian's arm64 kernel booting the Linux guest (`tests/guests/linux/init.c`, QEMU 10.2.2,
/// one vCPU), stopped once `/init` has said what its two opens got: `do_sys_openat2`'s path
/// and returned fd (`-A`/`-R`), the syscall wrapper's own arguments and return value (`-a`
/// aimed by `-F` at the wrapper: the syscall's arguments, read from the `struct pt_regs` it
/// takes, typed by `__do_sys_openat`'s DWARF), and the write of that line (a bare `-A` of
/// its wrapper, `-a` adding the return value), exactly `/init`'s log under uftrace 0.13,
/// 0.17 and 0.19.
#[test]
fn linux_openat_paths_and_fds_equal_inits_log() {
    use qemu_uftrace_tests::linux_guest::{initramfs_boot_args_on, initramfs_guest};
    let qemu = (system_qemus().into_iter())
        .find(|q| q.label == "10.2.2")
        .expect("QEMU 10.2.2")
        .program;
    let (_, init_elf) = initramfs_guest().expect("the guest builds");
    let argv = initramfs_boot_args_on(&qemu, 1).expect("the guest builds");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("uftrace.data");
    // Without the kernel's DWARF the syscall's types are not known: one line, before QEMU.
    let out = Command::new(common::BIN)
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .args(["-A", "__arm64_sys_openat", "--"])
        .args(&argv)
        .output()
        .expect("run qemu-uftrace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {stderr}");
    assert!(
        stderr
            .lines()
            .next()
            .is_some_and(|l| l.contains("no DWARF types of __do_sys_openat")),
        "{stderr}"
    );
    assert!(stderr.lines().count() <= 2, "{stderr}");
    let out = Command::new(common::BIN)
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .arg("--symbols")
        .arg(&init_elf)
        // The kernel's DWARF: the syscall's types.
        .arg("--symbols")
        .arg(qemu_uftrace_tests::execlog::debian_vmlinux())
        // Past /init's log line: nothing after it is looked at; only the syscall's calls
        // written (a whole boot is 250 MB that each replay would read).
        .args(["--stop-at", "do_getpid_loop"])
        // -a: the kernel's typed functions (37 k), of which -F's subtrees are written: the
        // wrappers with their syscalls' arguments, and their callees.
        .args(["-a", "-F", "__arm64_sys_openat", "-F", "__arm64_sys_write"])
        .args(["-A", "__arm64_sys_write"])
        .args(["-A", "do_sys_openat2@arg1/d32,arg2/s"])
        .args(["-R", "do_sys_openat2@retval/d"])
        .arg("--")
        .args(&argv)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record failed: {stderr}");
    assert!(!stderr.contains("no record to go with"), "{stderr}");
    // `INIT: start open /init = 3, open /no/such/file = -2`.
    let console = String::from_utf8_lossy(&out.stdout);
    let line = (console.lines())
        .find_map(|l| {
            l.split_once("INIT: start open ")
                .map(|(_, r)| r.to_string())
        })
        .unwrap_or_else(|| panic!("no open line from /init:\n{console}"));
    let opened: Vec<(String, i64)> = (line.split(", open "))
        .map(|o| {
            let (path, fd) = o.split_once(" = ").expect("PATH = FD");
            (path.to_string(), fd.trim().parse().expect("an fd"))
        })
        .collect();
    assert_eq!(opened.len(), 2, "{line}");
    let mut want = Vec::new();
    for (path, fd) in &opened {
        // glibc's open(PATH, O_RDONLY): openat(AT_FDCWD, PATH, O_RDONLY, 0).
        want.push(format!("__arm64_sys_openat(-100, \"{path}\", 0, 0) {{"));
        want.push(format!("do_sys_openat2(-100, \"{path}\") {{"));
        want.push(format!("}} = {fd}; /* do_sys_openat2 */"));
        want.push(format!("}} = {fd}; /* __arm64_sys_openat */"));
    }
    // write(1, LINE, its length), its string as replay escapes it.
    let written = format!("INIT: start open {}\n", line.trim_end());
    want.push(format!(
        "__arm64_sys_write(1, \"{}\", {}) {{",
        written.replace('\n', "\\n"),
        written.len()
    ));
    want.push(format!("}} = {}; /* __arm64_sys_write */", written.len()));
    let d = dir.to_string_lossy();
    for u in uftrace_versions().expect("uftrace versions") {
        let text = uftrace_at(
            &u.program,
            &[
                "replay",
                "--no-pager",
                "-F",
                "^__arm64_sys_(openat|write)$",
                "-d",
                &d,
            ],
        )
        .expect("uftrace replay");
        let lines: Vec<String> = (text.lines().filter_map(replay_body))
            .map(|(_, body)| body.trim().to_string())
            .filter(|b| {
                ["__arm64_sys_openat", "do_sys_openat2", "__arm64_sys_write"]
                    .iter()
                    .any(|f| b.starts_with(&format!("{f}(")) || b.ends_with(&format!("/* {f} */")))
            })
            .collect();
        assert_eq!(lines, want, "uftrace {}:\n{text}", u.version);
        // -a reaches the callees -F records (as uftrace's -a): the user's path copied in,
        // its length returned (the destination buffer's stale bytes are not compared).
        let copies: Vec<String> = (text.lines().filter_map(replay_body))
            .map(|(_, body)| body.trim().to_string())
            .filter(|b| b.starts_with("strncpy_from_user(") || b.ends_with("strncpy_from_user */"))
            .map(|b| match b.strip_prefix("strncpy_from_user(") {
                // Its last two arguments.
                Some(args) => {
                    let mut last: Vec<&str> = args.rsplitn(3, ", ").take(2).collect();
                    last.reverse();
                    last.join(", ")
                }
                None => b,
            })
            .collect();
        let want: Vec<String> = (opened.iter())
            .flat_map(|(path, _)| {
                [
                    format!("\"{path}\", 4064) {{"),
                    format!("}} = {}; /* strncpy_from_user */", path.len()),
                ]
            })
            .collect();
        assert_eq!(copies, want, "uftrace {}:\n{text}", u.version);
    }
}

/// `/p` as replay shows it, in replay and in the export alike: a pointer into a function as
/// `&name`, a null one as `0`, any other in hex (x86_64 user mode, the host's gcc).
#[test]
fn a_pointer_shows_the_function_it_points_into() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let src = tmp.path().join("fnptr.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n\
         __attribute__((noinline)) int twice(int x) { return 2 * x; }\n\
         __attribute__((noinline)) int apply(int (*f)(int), void *p, int v)\n\
         { return p ? f(v) : -f(v); }\n\
         int main(void) { int r = apply(twice, 0, 3);\n\
         r += apply(twice, (void *)0x1234, 4); printf(\"%d\\n\", r); return 0; }\n",
    )
    .expect("write the program");
    let elf = tmp.path().join("fnptr");
    let status = Command::new("gcc")
        .args(["-O1", "-g", "-fno-inline", "-o"])
        .arg(&elf)
        .arg(&src)
        .status()
        .expect("run gcc");
    assert!(status.success());
    let dir = tmp.path().join("uftrace.data");
    let out = Command::new(common::BIN)
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .args([
            "-A",
            "apply@arg1/p,arg2/p,arg3/i32",
            "--then",
            "export",
            "--",
        ])
        .arg(cached("qemu-10.2.2/bin/qemu-x86_64"))
        .arg(&elf)
        .output()
        .expect("run qemu-uftrace");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = ["apply(&twice, 0, 3)", "apply(&twice, 0x1234, 4)"];
    let d = dir.to_string_lossy();
    for u in uftrace_versions().expect("uftrace versions") {
        let text = uftrace_at(&u.program, &["replay", "--no-pager", "-d", &d]).expect("replay");
        let shown: Vec<&str> = (text.lines())
            .filter_map(|l| Some(l.split_once('|')?.1.trim()))
            .filter(|b| b.starts_with("apply("))
            .map(|b| b.trim_end_matches(" {").trim_end_matches(';'))
            .collect();
        assert_eq!(shown, want, "uftrace {}:\n{text}", u.version);
    }
    let v = decoded_export(&dir);
    let values = &v["threads"][0]["values"];
    let slices: Vec<String> = (values.as_array().expect("values").iter())
        .filter(|s| s["name"] == "apply")
        .map(|s| format!("apply({})", s["args"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(slices, want, "{values}");
}
