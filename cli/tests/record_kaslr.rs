//! A Linux kernel booted without `nokaslr` picks a random base (KASLR), and then none of
//! its symbols match where it runs (issue 34). `record` finds the offset as it boots, where
//! the kernel first runs in the upper half, and moves the kernel's symbols by it: the same
//! deterministic boot, randomised or not, replays alike by name, and `-F`, `--start-at`
//! and `--stop-at` name the same functions. The boots stop at the kernel's first
//! `parse_early_param` (QEMU stopped there): interrupts are still off, so what runs before
//! it is the same on every boot but for what KASLR itself does.
//!
//! The warning stays where no offset can be found: said before QEMU starts when there are
//! no symbols to find it with (told from the kernel file: arm64 Image, x86 bzImage, ELF
//! vmlinux, and from the command line per architecture: arm64 also turns KASLR off with
//! `-M virt,dtb-randomness=off`, its older name `dtb-kaslr-seed=off`, unless its CPU has
//! RNDR; x86_64 and riscv64 only with `nokaslr`), else at the end, saying why.
//!
//! Our stderr and the guest's console (stdout) go into one pipe, so that their order is the
//! order they were written in.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;
use qemu_uftrace_tests::replay::uftrace;
use qemu_uftrace_tests::x86_64_guests::system_qemus_x86_64;
use qemu_uftrace_tests::{
    cached, debian_kernel, kernel_boot_args, kernel_boot_args_on, plugin_stat, QEMU,
};

const WARNING: &str = "qemu-uftrace: warning: the guest kernel picks a random base address \
                       (KASLR) unless booted with nokaslr";

/// Runs `record -- argv` in `home` with stdout and stderr in one pipe; returns its status
/// code and everything it and QEMU wrote, in order.
fn record_merged(home: &Path, argv: &[String]) -> (Option<i32>, String) {
    record_merged_with(home, &[], argv)
}

/// [`record_merged`] with `record`'s `options`.
fn record_merged_with(home: &Path, options: &[&str], argv: &[String]) -> (Option<i32>, String) {
    let (mut reader, writer) = std::io::pipe().expect("pipe");
    let mut cmd = qemu_uftrace(home);
    cmd.current_dir(home)
        .arg("record")
        .arg("-o")
        .arg(home.join("t"))
        .args(options)
        .arg("--")
        .args(argv)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("pipe"))
        .stderr(writer);
    let mut child = cmd.spawn().expect("run qemu-uftrace");
    // Our copies of the pipe's write end go with `cmd`: the read ends with the child.
    drop(cmd);
    let mut out = String::new();
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes).expect("read the pipe");
    out.push_str(&String::from_utf8_lossy(&bytes));
    let status = child.wait().expect("wait");
    (status.code(), out)
}

/// `args` with the kernel command line's `nokaslr` taken out.
fn without_nokaslr(args: Vec<String>) -> Vec<String> {
    args.into_iter()
        .map(|a| {
            if a.contains("nokaslr") {
                a.replace(" nokaslr", "")
            } else {
                a
            }
        })
        .collect()
}

/// `record OPTIONS -- argv` up to the kernel's first `parse_early_param`, QEMU stopped
/// there: the temp dir (keep it), the trace and record's stderr.
fn record_early(argv: &[String], options: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    let mut options = options.to_vec();
    options.extend(["--stop-at", "parse_early_param,exit"]);
    let (tmp, dir, out) = record_output(argv, &options);
    let err = stderr(&out);
    assert!(out.status.success(), "record {options:?} failed:\n{err}");
    assert!(
        err.contains("stopped writing at the first entry into parse_early_param"),
        "{options:?}:\n{err}"
    );
    assert!(!err.contains("warning"), "{options:?}:\n{err}");
    (tmp, dir, err)
}

/// The offset the summary says the kernel ran at, `None` when it says none.
fn offset_said(stderr: &str) -> Option<u64> {
    let line = stderr
        .lines()
        .find(|l| l.contains("the guest kernel ran at a random base (KASLR), 0x"))?;
    let hex = line.split("(KASLR), 0x").nth(1)?.split(' ').next()?;
    u64::from_str_radix(hex, 16).ok()
}

/// `func`'s calls by name, as `uftrace replay -F func` shows them (without the frames still
/// open at the stop, nor the marks of frames written open at a `--start-at`).
fn subtree(dir: &Path, func: &str) -> Vec<String> {
    let d = dir.to_string_lossy();
    let text = uftrace(&["replay", "-d", &d, "-f", "none", "--no-pager", "-F", func])
        .unwrap_or_else(|e| panic!("uftrace replay -F {func}: {e:#}"));
    let lines: Vec<String> = text
        .lines()
        .take_while(|l| !l.starts_with("uftrace stopped tracing"))
        .filter(|l| !l.trim().is_empty() && l.trim() != "/* qemu:opened */")
        .map(String::from)
        .collect();
    assert!(
        lines.len() > 1000 && lines[0] == format!("{func}() {{"),
        "{func} in {d}: {:?}",
        &lines[..lines.len().min(5)]
    );
    lines
}

fn same_tree(expected: &[String], got: &[String], what: &str) {
    if expected != got {
        let at = expected.iter().zip(got).take_while(|(a, b)| a == b).count();
        panic!(
            "{what}: the trees differ at line {at} of {} / {}: {:?} against {:?}",
            expected.len(),
            got.len(),
            expected.get(at.saturating_sub(3)..(at + 3).min(expected.len())),
            got.get(at.saturating_sub(3)..(at + 3).min(got.len())),
        );
    }
}

/// `args` with `-M virt` made `machine`.
fn on_machine(args: Vec<String>, machine: &str) -> Vec<String> {
    args.into_iter()
        .map(|a| if a == "virt" { machine.to_string() } else { a })
        .collect()
}

/// arm64 on QEMU 10.2.2 (exceptions reported), `-cpu max`: without `nokaslr` the kernel
/// takes its seed from the device tree (`-M virt`: QEMU gives one) or, with none there
/// (`dtb-randomness=off`), from the CPU's RNDR. Each boot finds its own offset at
/// `__primary_switched`, and `jump_label_init`'s calls (setup_arch's, before
/// `parse_early_param`: 300,000 lines) replay as the `nokaslr` boot's, recorded whole
/// there, with `-F` in the device-tree seeded boot and from `--start-at` in the other. The
/// DWARF vmlinux given later to `symbols` lands where the kernel ran (source lines).
#[test]
fn arm64_randomised_boots_replay_as_nokaslr() {
    let qemu = qemu_uftrace_tests::system_qemu("10.2.2");
    let fixed = kernel_boot_args_on(&qemu, "max");
    let (_t0, base, err) = record_early(&fixed, &[]);
    assert_eq!(offset_said(&err), None, "{err}");
    assert_eq!(plugin_stat(&base, "kaslr_offset"), "0x0");
    let expected = subtree(&base, "jump_label_init");
    let dt_seed = without_nokaslr(fixed.clone());
    let (_t1, filtered, err1) = record_early(&dt_seed, &["-F", "jump_label_init"]);
    let rndr = on_machine(without_nokaslr(fixed), "virt,dtb-randomness=off");
    let (_t2, started, err2) = record_early(&rndr, &["--start-at", "jump_label_init"]);
    let mut offsets = Vec::new();
    for (err, dir, what) in [
        (&err1, &filtered, "device-tree seed, -F"),
        (&err2, &started, "RNDR, --start-at"),
    ] {
        let offset = offset_said(err).unwrap_or_else(|| panic!("{what}: no offset:\n{err}"));
        // arm64 places its image in the middle of the vmalloc area: never at its link address.
        assert_ne!(offset, 0, "{what}");
        assert!(
            err.contains("(found where it entered __primary_switched)"),
            "{what}:\n{err}"
        );
        assert_eq!(plugin_stat(dir, "kaslr_offset"), format!("{offset:#x}"));
        same_tree(&expected, &subtree(dir, "jump_label_init"), what);
        offsets.push(offset);
    }
    assert_ne!(offsets[0], offsets[1], "two boots drew one offset");
    // The kernel's DWARF vmlinux given after the fact (`symbols`) is moved by the offset
    // the recording found, as record moves the symbols it has: jump_label_init's subtree
    // still replays as the nokaslr boot's, now with its source lines.
    let vmlinux = cached("kernel-dbg/vmlinux");
    let out = qemu_uftrace_tests::passes::output(
        std::process::Command::new(BIN)
            .arg("symbols")
            .arg("-d")
            .arg(&started)
            .arg(&vmlinux)
            .stdin(Stdio::null()),
    )
    .expect("run qemu-uftrace symbols");
    let said = stderr(&out);
    assert!(out.status.success(), "symbols failed:\n{said}");
    assert!(
        said.contains(&format!(
            "ran {:#x} above its link address (KASLR",
            offsets[1]
        )),
        "symbols did not move the vmlinux by the recorded offset:\n{said}"
    );
    same_tree(
        &expected,
        &subtree(&started, "jump_label_init"),
        "after symbols",
    );
    // The boot's shape, named: the physical-address head, then the kernel where it ran (the
    // frames open at the start are written there).
    let d = started.to_string_lossy();
    let lines = uftrace(&[
        "replay",
        "-d",
        &d,
        "--no-pager",
        "--srcline",
        "-D",
        "1",
        "-F",
        "^jump_label_init$",
    ])
    .expect("replay --srcline");
    assert!(
        lines
            .lines()
            .any(|l| l.contains("jump_label_init()") && l.contains("kernel/jump_label.c:")),
        "no source line for jump_label_init where the kernel ran:\n{}",
        &lines[..lines.len().min(2000)]
    );
    let graph = uftrace(&["graph", "-d", &d, "--no-pager", "jump_label_init"]).expect("graph");
    assert_eq!(
        qemu_uftrace_tests::replay::graph_backtrace(&graph),
        [
            "primary_entry",
            "__primary_switch",
            "__primary_switched",
            "start_kernel",
            "setup_arch",
            "jump_label_init"
        ],
        "{graph}"
    );
}

/// One x86_64 boot recorded to `parse_early_param`: what the x86_64 test compares.
struct Early {
    /// record's stderr.
    err: String,
    /// `plugin.stats`'s `kaslr_offset`.
    stated: String,
    /// `x86_64_start_kernel`'s calls by name.
    tree: Vec<String>,
    /// The physical-address startup code's calls by name, before `x86_64_start_kernel`.
    startup: Vec<String>,
}

fn x86_64_early(argv: &[String]) -> Early {
    let (_tmp, dir, err) = record_early(argv, &[]);
    let d = dir.to_string_lossy();
    let text = uftrace(&["replay", "-d", &d, "-f", "none", "--no-pager"]).expect("replay");
    let upto = text
        .find("x86_64_start_kernel() {")
        .expect("x86_64_start_kernel");
    let startup = text[..upto]
        .lines()
        .map(str::trim)
        .filter(|l| {
            ["startup_64", "sme_enable", "verify_cpu"]
                .iter()
                .any(|n| l.contains(n))
        })
        .map(String::from)
        .collect();
    Early {
        stated: plugin_stat(&dir, "kaslr_offset"),
        tree: subtree(&dir, "x86_64_start_kernel"),
        startup,
        err,
    }
}

/// x86_64 (QEMU 11.1.3, API 7): the decompressor picks the base from a hash of its boot
/// parameters, RDTSC and RDRAND (none on QEMU's default CPU), and the physical base apart.
/// Three randomised boots, recorded in parallel with the `nokaslr` one:
/// - one as a user boots it: another base every boot, 0 in about one of 500 (then the
///   summary says nothing and `plugin.stats` says 0);
/// - two with the seed fixed: under `-icount shift=0,sleep=off` the TSC counts guest
///   instructions, so the base is the same every boot, and differs with the instructions
///   the decompressor runs before drawing it (its command-line parsing): the two command
///   lines below (an unused word, left to init) give two non-zero offsets, which must differ.
///
/// In each, the kernel proper (`x86_64_start_kernel`, entered by `lretq` from the startup
/// code) replays as the `nokaslr` boot's, and the startup code run at its physical address
/// is named as there (QEMU tells the anchor's physical address); the offset found is a
/// multiple of 2 MiB.
#[test]
fn x86_64_randomised_boots_replay_as_nokaslr() {
    let qemu = system_qemus_x86_64()
        .into_iter()
        .find(|q| q.label == "11.1.3")
        .expect("QEMU 11.1.3 in system_qemus_x86_64")
        .program;
    let boot = |append: &str, fixed_seed: bool| {
        let mut argv = qemu_uftrace_tests::amd64_kernel_boot_args_on(&qemu, append);
        if fixed_seed {
            argv.extend(["-icount".into(), "shift=0,sleep=off".into()]);
        }
        argv
    };
    let boots = [
        boot("console=ttyS0 panic=-1 nokaslr cryptomgr.notests", false),
        boot("console=ttyS0 panic=-1 cryptomgr.notests", false),
        boot("console=ttyS0 panic=-1 cryptomgr.notests seed=22", true),
        boot("console=ttyS0 panic=-1 cryptomgr.notests seed=333", true),
    ];
    let runs: Vec<Early> = std::thread::scope(|s| {
        let running: Vec<_> = boots
            .iter()
            .map(|argv| s.spawn(move || x86_64_early(argv)))
            .collect();
        running
            .into_iter()
            .map(|r| r.join().expect("a boot's thread"))
            .collect()
    });
    let (base, randomised) = runs.split_first().expect("four boots");
    assert_eq!(offset_said(&base.err), None, "{}", base.err);
    assert_eq!(base.stated, "0x0");
    assert!(
        base.startup.iter().any(|l| l == "__startup_64() {"),
        "{:?}",
        base.startup
    );
    let mut fixed = Vec::new();
    for (run, what) in randomised.iter().zip(["random", "seed=22", "seed=333"]) {
        let err = &run.err;
        match offset_said(err) {
            Some(offset) => {
                assert_eq!(run.stated, format!("{offset:#x}"), "{what}");
                assert_eq!(offset % (2 << 20), 0, "{what}: {err}");
                assert!(
                    err.contains("(found where it entered secondary_startup_64)"),
                    "{what}: {err}"
                );
                if what != "random" {
                    fixed.push(offset);
                }
            }
            None if what == "random" => assert_eq!(run.stated, "0x0", "{err}"),
            None => panic!(
                "{what}: the fixed seed put the kernel at its link address (another word \
                 is needed for this kernel and QEMU):\n{err}"
            ),
        }
        same_tree(&base.tree, &run.tree, &format!("x86_64, {what}"));
        assert_eq!(run.startup, base.startup, "{what}");
    }
    assert_ne!(
        fixed[0], fixed[1],
        "the two fixed seeds drew one offset (another word is needed for this kernel and QEMU)"
    );
}

/// A kernel whose symbols lack the place it first runs in the upper half (here a System.map
/// with `start_kernel` only): the offset cannot be found, and the end of the run says so
/// and why. Nothing is said before QEMU starts (the symbols are read as it starts).
#[test]
fn no_offset_found_is_said_with_why() {
    let home = tempfile::tempdir().unwrap();
    let map = home.path().join("System.map");
    std::fs::write(
        &map,
        "ffff800008000000 T _text\nffff800008010000 T _stext\nffff8000093908d0 T start_kernel\n\
         ffff800009ab0000 B _end\n",
    )
    .unwrap();
    let argv = without_nokaslr(kernel_boot_args("max"));
    let (code, out) = record_merged_with(
        home.path(),
        &[
            "--no-auto-symbols",
            "--symbols",
            &map.to_string_lossy(),
            "--max-size",
            "2M,exit",
        ],
        &argv,
    );
    assert!(!out.contains(WARNING), "{out}");
    let warning = "qemu-uftrace: warning: the guest kernel's base address was not found (the \
                   kernel's symbols have no __primary_switched): if it picked a random one \
                   (KASLR), its symbols do not match; add nokaslr to -append";
    assert_eq!(out.matches(warning).count(), 1, "status {code:?}:\n{out}");
}

/// `record OPTIONS -- argv` of a QEMU that fails at once (a drive it cannot open): all that
/// was written, QEMU's complaint included.
fn before_qemu_fails(argv: &[String], options: &[&str]) -> String {
    let home = tempfile::tempdir().unwrap();
    let mut argv = argv.to_vec();
    argv.extend(["-drive".into(), "file=/nonexistent/disk.img,if=none".into()]);
    let (code, out) = record_merged_with(home.path(), options, &argv);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains("Could not open '/nonexistent/disk.img'"),
        "QEMU did not fail as expected:\n{out}"
    );
    out
}

/// Without symbols to find the offset with (`--no-auto-symbols`), the warning comes before
/// QEMU runs, not from what the run left; with them (the kernel's own kallsyms, or an ELF
/// vmlinux's symbols) nothing is said before the run.
fn warned_only_without_symbols(argv: &[String]) -> String {
    let out = before_qemu_fails(argv, &["--no-auto-symbols"]);
    let complaint = out.find("Could not open").unwrap();
    let warning = out
        .find(WARNING)
        .unwrap_or_else(|| panic!("no KASLR warning in:\n{out}"));
    assert!(warning < complaint, "{out}");
    let found = before_qemu_fails(argv, &[]);
    assert!(!found.contains("KASLR"), "{found}");
    out
}

#[test]
fn x86_64_bzimage_warns_before_qemu_runs() {
    require("qemu-system-x86_64");
    let kernel = cached("kernel-amd64/vmlinuz").display().to_string();
    let out = warned_only_without_symbols(
        &[
            "qemu-system-x86_64",
            "-M",
            "pc",
            "-nographic",
            "-kernel",
            &kernel,
            "-append",
            "console=ttyS0",
        ]
        .map(String::from),
    );
    // x86_64 has no device-tree seed to turn off.
    assert!(
        out.contains("its symbols do not match; add nokaslr to -append\n"),
        "{out}"
    );
}

#[test]
fn arm64_elf_vmlinux_warns_before_qemu_runs() {
    require(QEMU);
    let vmlinux = cached("kernel-dbg/vmlinux").display().to_string();
    let out = warned_only_without_symbols(
        &[
            QEMU,
            "-M",
            "virt",
            "-cpu",
            "max",
            "-nographic",
            "-kernel",
            &vmlinux,
        ]
        .map(String::from),
    );
    assert!(
        out.contains(
            "add nokaslr to -append (or -M virt,dtb-randomness=off, which gives the kernel no \
             seed, on a CPU without RNDR: not -cpu max)"
        ),
        "{out}"
    );
}

/// `nokaslr`, or on arm64 a device tree without a seed, and no warning at all.
#[test]
fn no_warning_when_kaslr_is_off() {
    require(QEMU);
    let kernel = debian_kernel().display().to_string();
    for argv in [
        [QEMU, "-M", "virt", "-append", "console=ttyAMA0 nokaslr"],
        [
            QEMU,
            "-M",
            "virt,dtb-randomness=off",
            "-append",
            "console=ttyAMA0",
        ],
        [
            QEMU,
            "-M",
            "virt,dtb-kaslr-seed=off",
            "-append",
            "console=ttyAMA0",
        ],
    ] {
        let home = tempfile::tempdir().unwrap();
        let mut argv: Vec<String> = argv.map(String::from).to_vec();
        argv.extend(["-nographic".into(), "-kernel".into(), kernel.clone()]);
        argv.extend(["-drive".into(), "file=/nonexistent/disk.img,if=none".into()]);
        let (_, out) = record_merged(home.path(), &argv);
        assert!(
            out.contains("Could not open '/nonexistent/disk.img'"),
            "{out}"
        );
        assert!(!out.contains("KASLR"), "{argv:?}:\n{out}");
    }
}
