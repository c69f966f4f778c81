//! The KASLR warning comes before QEMU starts (issue 21, item 4): a Linux kernel booted
//! without `nokaslr` randomises its base, and then none of its symbols match; a user must
//! read that before watching a whole boot, not after. The warning is told from the kernel
//! file (arm64 Image, x86 bzImage, ELF vmlinux) and from the command line per architecture
//! (arm64 also turns KASLR off with `-M virt,dtb-randomness=off`, its older name
//! `dtb-kaslr-seed=off`; x86_64 and riscv64 only with `nokaslr`).
//!
//! Our stderr and the guest's console (stdout) go into one pipe, so that their order is the
//! order they were written in.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use common::*;
use qemu_uftrace_tests::{cached, debian_kernel, kernel_boot_args, QEMU};

const WARNING: &str = "qemu-uftrace: warning: the guest kernel picks a random base address \
                       (KASLR) unless booted with nokaslr";

/// Runs `record -- argv` in `home` with stdout and stderr in one pipe; returns its status
/// code and everything it and QEMU wrote, in order.
fn record_merged(home: &Path, argv: &[String]) -> (Option<i32>, String) {
    let (mut reader, writer) = std::io::pipe().expect("pipe");
    let mut cmd = qemu_uftrace(home);
    cmd.current_dir(home)
        .arg("record")
        .arg("-o")
        .arg(home.join("t"))
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

/// A whole boot: the warning is the first thing written, before the kernel's first line,
/// and said again at the end, where the console has not scrolled it away.
#[test]
fn arm64_boot_warns_before_the_kernel_prints() {
    require(QEMU);
    let home = tempfile::tempdir().unwrap();
    let args = without_nokaslr(kernel_boot_args("cortex-a57"));
    assert!(!args.iter().any(|a| a.contains("nokaslr")));
    let (code, out) = record_merged(home.path(), &args);
    let warning = out
        .find(WARNING)
        .unwrap_or_else(|| panic!("no KASLR warning in:\n{out}"));
    let boot = out
        .find("Booting Linux")
        .unwrap_or_else(|| panic!("the kernel did not boot (status {code:?}):\n{out}"));
    assert!(
        warning < boot,
        "the warning came after the boot began:\n{out}"
    );
    assert_eq!(out.matches(WARNING).count(), 2, "{out}");
    let again = out.rfind(WARNING).unwrap();
    let written = out
        .find("qemu-uftrace: [ record: wrote ")
        .unwrap_or_else(|| panic!("no summary:\n{out}"));
    assert!(written < again, "not repeated in the summary:\n{out}");
    assert_eq!(
        out[warning..].lines().next(),
        out[again..].lines().next(),
        "{out}"
    );
    assert!(
        out[warning..].lines().next().unwrap().ends_with(
            "add nokaslr to -append (or -M virt,dtb-randomness=off, which gives the kernel no \
             seed)"
        ),
        "{out}"
    );
}

/// A QEMU that fails at once (a drive it cannot open) says so after our warning: the
/// warning is given before QEMU runs, not from what the run left.
fn warned_before_qemu_fails(argv: Vec<String>) -> String {
    let home = tempfile::tempdir().unwrap();
    let mut argv = argv;
    argv.extend(["-drive".into(), "file=/nonexistent/disk.img,if=none".into()]);
    let (code, out) = record_merged(home.path(), &argv);
    assert_ne!(code, Some(0), "{out}");
    let complaint = out
        .find("Could not open '/nonexistent/disk.img'")
        .unwrap_or_else(|| panic!("QEMU did not fail as expected:\n{out}"));
    let warning = out
        .find(WARNING)
        .unwrap_or_else(|| panic!("no KASLR warning in:\n{out}"));
    assert!(warning < complaint, "{out}");
    out
}

#[test]
fn x86_64_bzimage_warns_before_qemu_runs() {
    require("qemu-system-x86_64");
    let kernel = cached("kernel-amd64/vmlinuz").display().to_string();
    let out = warned_before_qemu_fails(
        [
            "qemu-system-x86_64",
            "-M",
            "pc",
            "-nographic",
            "-kernel",
            &kernel,
            "-append",
            "console=ttyS0",
        ]
        .map(String::from)
        .to_vec(),
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
    warned_before_qemu_fails(
        [
            QEMU,
            "-M",
            "virt",
            "-cpu",
            "max",
            "-nographic",
            "-kernel",
            &vmlinux,
        ]
        .map(String::from)
        .to_vec(),
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
