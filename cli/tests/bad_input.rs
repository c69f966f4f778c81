//! Bad input gives one line `qemu-uftrace: error: <problem>; <way out>` and a non-zero
//! status, and leaves nothing behind. The QEMU checks run against real QEMUs: the installed
//! ones, and Debian's 7.2 and plugin-less user-mode builds that install-deps unpacks.

mod common;

use common::*;

#[test]
fn not_a_qemu_command() {
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args(["record", "--", "ls", "-l"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let line = single_error(&o);
    assert!(
        line.contains("'ls' is not a QEMU emulator (expected qemu-system-<arch> or qemu-<arch>); "),
        "{line}"
    );
    // Nothing is left behind.
    assert!(!home.path().join("uftrace.data.partial").exists());
}

#[test]
fn missing_double_dash() {
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .args(["record", "qemu-system-aarch64", "-M", "virt"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let line = single_error(&o);
    assert!(line.contains("must come after --"), "{line}");
    assert!(
        line.contains("record [OPTIONS] -- qemu-system-aarch64"),
        "{line}"
    );
}

#[test]
fn missing_command() {
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["record"][..],
        &["record", "--"][..],
        &["record", "-o", "x", "--"][..],
    ] {
        let o = qemu_uftrace(home.path()).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let line = single_error(&o);
        assert!(
            line.contains("no QEMU command given; put it after --"),
            "{line}"
        );
    }
}

#[test]
fn bad_symbols_offset() {
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .args([
            "record",
            "--symbols",
            "vmlinux:0xzz",
            "--",
            "qemu-system-aarch64",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(single_error(&o).contains("bad symbol source 'vmlinux:0xzz'"));
}

/// `--symbols` given a directory without a kernel module's debug file in it (the only
/// directory it takes): one line, before QEMU starts.
#[test]
fn symbols_directory_without_modules() {
    let home = tempfile::tempdir().unwrap();
    let empty = home.path().join("debug");
    std::fs::create_dir_all(empty.join("lib/modules")).unwrap();
    std::fs::write(empty.join("lib/modules/readme.txt"), "no module here").unwrap();
    let qemu = qemu_uftrace_tests::system_qemu("10.2.2");
    let o = qemu_uftrace(home.path())
        .arg("record")
        .arg("--symbols")
        .arg(&empty)
        .args(["-o", &home.path().join("t.data").to_string_lossy(), "--"])
        .arg(&qemu)
        .args(["-M", "virt", "-nographic", "-kernel"])
        .arg(qemu_uftrace_tests::cached("kernel/vmlinuz"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let line = single_error(&o);
    assert!(
        line.contains(&format!(
            "--symbols {}: a directory, and no kernel module's debug file (NAME.ko) is in it",
            empty.display()
        )),
        "{line}"
    );
    assert!(!home.path().join("t.data").exists());
}

#[test]
fn unwritable_output_directory() {
    // Root ignores permission bits: /proc refuses new entries to everyone, and a file in
    // place of the parent directory cannot be worked around either.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("afile"), b"").unwrap();
    let in_file = home.path().join("afile/trace");
    for out in [std::path::Path::new("/proc/qemu-uftrace-test"), &in_file] {
        let o = qemu_uftrace(home.path())
            .arg("record")
            .arg("-o")
            .arg(out)
            .args(["--", "qemu-system-aarch64", "-M", "virt"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let line = single_error(&o);
        assert!(line.contains("cannot create"), "{line}");
        assert!(
            line.contains("choose an -o DIR in a writable place"),
            "{line}"
        );
    }
}

#[test]
fn qemu_not_on_path() {
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .env("PATH", "/nonexistent")
        .args(["record", "--", "qemu-system-aarch64", "-M", "virt"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let line = single_error(&o);
    assert!(
        line.contains("'qemu-system-aarch64' not found on PATH; install QEMU"),
        "{line}"
    );
    // The staging directory made before the check is removed again: it holds nothing.
    assert!(!home.path().join("uftrace.data.partial").exists());
}

/// Records `/bin/true` under a real QEMU that must be refused; returns the one error line.
fn refused(qemu: &std::path::Path) -> String {
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args(["record", "--"])
        .arg(qemu)
        .arg("/bin/true")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!home.path().join("uftrace.data.partial").exists());
    single_error(&o)
}

/// Bookworm's own QEMU (7.2) is too old.
#[test]
fn qemu_too_old() {
    let line = refused(&qemu_uftrace_tests::cached("qemu-7.2/qemu-aarch64-static"));
    assert!(line.contains("is QEMU 7.2"), "{line}");
    assert!(
        line.contains("but qemu-uftrace needs 9.2 or newer"),
        "{line}"
    );
    assert!(line.contains("bookworm-backports"), "{line}");
}

/// Debian builds its user-mode QEMU static, without plugin support: new enough, but it
/// cannot load the plugin, and the check says so before anything else about user mode.
#[test]
fn qemu_without_plugin_support() {
    let line = refused(&qemu_uftrace_tests::cached("qemu-user-10.0/qemu-aarch64"));
    assert!(
        line.contains("was built without TCG plugin support; install"),
        "{line}"
    );
}

/// A real emulator for a target the plugin does not decode yet.
#[test]
fn unsupported_target() {
    require("qemu-system-s390x");
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args(["record", "--", "qemu-system-s390x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let line = single_error(&o);
    assert!(
        line.contains("system-mode s390x guests are not supported yet"),
        "{line}"
    );
    assert!(!home.path().join("uftrace.data.partial").exists());
}

/// The real qemu-system-aarch64 passes the version and plugin checks; a hardware
/// accelerator on its command line is refused before it runs.
#[test]
fn hardware_accelerators_are_refused() {
    require("qemu-system-aarch64");
    let home = tempfile::tempdir().unwrap();
    for kvm in [
        &["-enable-kvm"][..],
        &["-accel", "kvm"][..],
        &["-M", "virt,accel=hvf"][..],
    ] {
        let o = qemu_uftrace(home.path())
            .current_dir(home.path())
            .args(["record", "--", "qemu-system-aarch64"])
            .args(kvm)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{kvm:?}: {}", stderr(&o));
        let line = single_error(&o);
        assert!(line.contains("qemu-uftrace needs TCG; remove it"), "{line}");
    }
    assert!(!home.path().join("uftrace.data.partial").exists());
}

/// `-daemonize` would have QEMU return at once and run on while we assemble the trace.
#[test]
fn daemonize_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args([
            "record",
            "--",
            "qemu-system-aarch64",
            "-M",
            "virt",
            "-daemonize",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let line = single_error(&o);
    assert!(
        line.contains("-daemonize makes QEMU return at once")
            && line.contains("; remove -daemonize"),
        "{line}"
    );
    assert!(!home.path().join("uftrace.data.partial").exists());
}

/// `record -- qemu-system-aarch64 <qemu>` in a fresh directory: its output, after checking
/// that nothing was left behind (no staging directory, no trace). A command that would
/// keep QEMU waiting fails the test after a minute instead of hanging it.
fn record_with(qemu: &[&str]) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    require("qemu-system-aarch64");
    let home = tempfile::tempdir().unwrap();
    let mut child = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args(["record", "--", "qemu-system-aarch64"])
        .args(qemu)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            // SAFETY: kill has no memory effects; the group is the record this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            panic!("record {qemu:?} did not end");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert!(
        !home.path().join("uftrace.data.partial").exists(),
        "{qemu:?}"
    );
    assert!(!home.path().join("uftrace.data").exists(), "{qemu:?}");
    o
}

/// A `-kernel` that is no file is refused before QEMU runs, naming the file.
#[test]
fn kernel_that_is_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let dir_text = dir.path().to_str().unwrap();
    for (kernel, problem) in [
        (
            "/nonexistent/Image",
            "-kernel /nonexistent/Image: no such file; ".to_string(),
        ),
        (
            dir_text,
            format!("-kernel {dir_text} is a directory; give the kernel image file"),
        ),
    ] {
        let o = record_with(&["-M", "virt", "-nographic", "-kernel", kernel]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let line = single_error(&o);
        assert!(line.contains(&problem), "{line}");
        // QEMU never ran: its own complaint is not there.
        assert!(
            !stderr(&o).contains("could not load kernel"),
            "{}",
            stderr(&o)
        );
    }
}

/// A `-kernel` file this QEMU cannot boot (text, another machine's kernel Image or ELF) is
/// refused before QEMU runs, saying what it is: the virt board loads what it does not
/// recognise as raw code, and QEMU spun without a word.
#[test]
fn kernel_this_qemu_cannot_boot() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "console=ttyAMA0 nokaslr\n").unwrap();
    // The header of a riscv64 Image: its magic at 0x38.
    let riscv = dir.path().join("Image");
    let mut header = vec![0u8; 64];
    header[0x38..0x3c].copy_from_slice(b"RSC\x05");
    std::fs::write(&riscv, header).unwrap();
    let give = "give qemu-system-aarch64 a kernel built for aarch64 (vmlinux, Image) or an ELF \
                program for it";
    for (kernel, problem) in [
        (
            text.display().to_string(),
            format!(
                "-kernel {} is a text file, not a kernel or program qemu-system-aarch64 can \
                 boot; {give}",
                text.display()
            ),
        ),
        (
            riscv.display().to_string(),
            format!(
                "-kernel {} is a kernel Image for riscv64, which qemu-system-aarch64 cannot \
                 boot; {give}, or boot this one with qemu-system-riscv64",
                riscv.display()
            ),
        ),
        (
            // This host's own shell.
            "/bin/sh".to_string(),
            "-kernel /bin/sh is an ELF file for x86_64, which qemu-system-aarch64 cannot run; "
                .to_string(),
        ),
    ] {
        let o = record_with(&["-M", "virt", "-nographic", "-kernel", &kernel]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let line = single_error(&o);
        assert!(line.contains(&problem), "{line}");
    }
}

/// qemu-uftrace adds its own -plugin: a second copy of ours on the command line is refused
/// (other plugins, such as QEMU's execlog, run beside it: `whole_system.rs` does that).
#[test]
fn plugin_already_on_the_command_line() {
    let o = record_with(&[
        "-M",
        "virt",
        "-plugin",
        "/opt/libqemu_uftrace_plugin.so,out=/tmp/x",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let line = single_error(&o);
    assert!(
        line.contains(
            "the QEMU command already loads qemu-uftrace's plugin (-plugin \
             /opt/libqemu_uftrace_plugin.so,out=/tmp/x), and record adds its own; remove that \
             -plugin"
        ),
        "{line}"
    );
}

/// `-S` with nothing that could continue the guest would have QEMU wait forever.
#[test]
fn paused_start_that_nothing_continues() {
    let o = record_with(&["-M", "virt", "-display", "none", "-S"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let line = single_error(&o);
    assert!(
        line.contains(
            "-S starts the guest paused, and nothing on this command line can continue it"
        ),
        "{line}"
    );
    assert!(line.contains("; remove -S, or add -s"), "{line}");
}

/// A machine QEMU does not know: QEMU fails at once, and our one line names its complaint.
#[test]
fn unknown_machine() {
    let o = record_with(&["-M", "nosuchboard", "-nographic"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let line = single_error(&o);
    assert!(
        line.contains(
            r#"QEMU exited with code 1 before recording anything: qemu-system-aarch64: unsupported machine type: "nosuchboard"; fix the QEMU command line"#
        ),
        "{line}"
    );
    // QEMU's own lines come first, as QEMU wrote them.
    assert!(stderr(&o).contains("Use -machine help"), "{}", stderr(&o));
}

#[test]
fn missing_plugin_file() {
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args([
            "record",
            "--plugin",
            "/nonexistent.so",
            "--",
            "qemu-system-aarch64",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(single_error(&o).contains("--plugin /nonexistent.so: no such file"));
}

#[test]
fn plugin_that_does_not_load() {
    require("qemu-system-aarch64");
    let home = tempfile::tempdir().unwrap();
    let not_a_plugin = home.path().join("bad.so");
    std::fs::write(&not_a_plugin, b"not an ELF").unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .arg("record")
        .arg("--plugin")
        .arg(&not_a_plugin)
        .args(["--", "qemu-system-aarch64", "-M", "virt"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let line = single_error(&o);
    assert!(line.contains("could not load the plugin"), "{line}");
    assert!(
        line.contains("check the file given with --plugin"),
        "{line}"
    );
}

#[test]
fn stale_partial_directory_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let partial = home.path().join("uftrace.data.partial");
    std::fs::create_dir(&partial).unwrap();
    std::fs::write(partial.join("1.dat"), b"recorded").unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args(["record", "--", "qemu-system-aarch64"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let line = single_error(&o);
    assert!(
        line.contains("an earlier recording was interrupted"),
        "{line}"
    );
    assert_eq!(std::fs::read(partial.join("1.dat")).unwrap(), b"recorded");
}

#[test]
fn viewer_without_trace_or_uftrace() {
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args(["replay", "-d", "nope"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(single_error(&o).contains("no trace directory at nope"));

    std::fs::create_dir(home.path().join("d")).unwrap();
    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .env("PATH", "/nonexistent")
        .args(["report", "-d", "d"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(single_error(&o).contains("apt-get install uftrace"));
}

#[test]
fn completions_print_a_script() {
    let home = tempfile::tempdir().unwrap();
    let o = qemu_uftrace(home.path())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(stdout(&o).contains("qemu-uftrace"));
}

/// `symbols` on images that give nothing: one error line each, naming the problem. In a
/// trace of an aarch64 guest, an x86-64 binary is refused as the wrong architecture.
#[test]
fn symbols_refuses_stripped_truncated_and_foreign_images() {
    let home = tempfile::tempdir().unwrap();
    let elf = qemu_uftrace_tests::guest_elf("nested", qemu_uftrace_tests::Variant::Natural)
        .expect("build guests");
    let stripped = home.path().join("stripped.elf");
    let strip = format!("{}strip", qemu_uftrace_tests::cross_prefix());
    let ok = std::process::Command::new(&strip)
        .arg("-o")
        .arg(&stripped)
        .arg(&elf)
        .status()
        .unwrap_or_else(|e| panic!("{strip}: {e} (run scripts/install-deps.sh)"));
    assert!(ok.success());
    let truncated = home.path().join("truncated.elf");
    std::fs::write(&truncated, &std::fs::read(&elf).unwrap()[..1000]).unwrap();

    let run = |dir: &str, file: &std::path::Path| {
        qemu_uftrace(home.path())
            .current_dir(home.path())
            .args(["symbols", "-d", dir])
            .args((dir == "t.data").then_some("--syms-only"))
            .arg(file)
            .output()
            .unwrap()
    };
    let o = run("t.data", &stripped);
    assert_eq!(o.status.code(), Some(1));
    let line = single_error(&o);
    assert!(line.contains("has no function symbols"), "{line}");
    assert!(
        line.contains("-dbg package") || line.contains("System.map"),
        "{line}"
    );
    let line = single_error(&run("t.data", &truncated));
    assert!(
        line.contains("truncated.elf") && line.contains("bad ELF"),
        "{line}"
    );

    // A trace of an aarch64 guest knows its architecture.
    let rec = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args(["record", "-o", "rec", "--"])
        .args(qemu_uftrace_tests::qemu_args(&elf))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(rec.status.success(), "{}", stderr(&rec));
    let line = single_error(&run("rec", std::path::Path::new("/bin/true")));
    assert!(line.contains("is built for x86_64, not aarch64"), "{line}");
    // A kernel module's debug file gives lines to the modules a recording named, and this
    // one named none; --syms-only names none either.
    let module = qemu_uftrace_tests::cached("kernel-dbg/dummy.ko");
    let line = single_error(&run("rec", &module));
    assert!(
        line.contains("recording saw no kernel module loaded") && line.contains("record --symbols"),
        "{line}"
    );
    let line = single_error(&run("t.data", &module));
    assert!(
        line.contains("--syms-only writes symbol files alone"),
        "{line}"
    );
    // Any other relocatable file (every section at 0) places no function.
    let object = home.path().join("dummy.o");
    std::fs::copy(&module, &object).unwrap();
    let line = single_error(&run("rec", &object));
    assert!(
        line.contains("dummy.o is a relocatable object") && line.contains("record --symbols"),
        "{line}"
    );
}

/// `symbols` where no trace is: refused in one line before anything is written (the next
/// `replay` would meet uftrace's bare "cannot open record data"), unless `--syms-only` asks
/// for symbol files alone (for `uftrace --with-syms`).
#[test]
fn symbols_outside_a_trace_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let map = home.path().join("System.map");
    std::fs::write(
        &map,
        "ffff800080010000 T _text\nffff800080010040 T start_kernel\n",
    )
    .unwrap();
    let symbols = |extra: &[&str]| {
        qemu_uftrace(home.path())
            .current_dir(home.path())
            .arg("symbols")
            .args(extra)
            .arg(&map)
            .output()
            .unwrap()
    };
    let o = symbols(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let line = single_error(&o);
    assert!(
        line.contains("uftrace.data holds no trace; give the directory record wrote with -d DIR"),
        "{line}"
    );
    assert!(line.contains("add --syms-only"), "{line}");
    assert!(!home.path().join("uftrace.data").exists());

    // An empty directory is no trace either.
    std::fs::create_dir(home.path().join("empty")).unwrap();
    let o = symbols(&["-d", "empty"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(single_error(&o).contains("empty holds no trace"));
    assert_eq!(
        std::fs::read_dir(home.path().join("empty"))
            .unwrap()
            .count(),
        0
    );

    let o = symbols(&["--syms-only", "-d", "syms"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(home.path().join("syms/System.map.sym").is_file());
    assert!(
        stderr(&o).contains("syms holds symbol files only: use it with uftrace --with-syms syms"),
        "{}",
        stderr(&o)
    );
}
