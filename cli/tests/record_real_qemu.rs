//! One real recording: the bare-metal hello example under qemu-system-aarch64 with the
//! embedded plugin, replayed by uftrace with names and source lines. Skipped when the cross
//! compiler, QEMU or uftrace is missing (scripts/install-deps.sh installs them).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

#[test]
fn records_the_hello_example() {
    for tool in [
        "aarch64-linux-gnu-gcc",
        "qemu-system-aarch64",
        "uftrace",
        "make",
    ] {
        if !have(tool) {
            eprintln!("{tool} not installed: skipped");
            return;
        }
    }
    let home = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    let build = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&example)
        .arg(format!("O={}", home.path().join("build").display()))
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", stderr(&build));
    let elf = home.path().join("build/hello.elf");

    let o = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args(["record", "-o", "hello.data", "--"])
        .args([
            "qemu-system-aarch64",
            "-M",
            "virt",
            "-cpu",
            "cortex-a57",
            "-nographic",
            "-semihosting",
            "-nic",
            "none",
            "-kernel",
        ])
        .arg(&elf)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        stdout(&o).contains("Hello from qemu-uftrace!"),
        "{}",
        stdout(&o)
    );
    assert!(err.contains("recorded "), "{err}");
    assert!(!err.contains("warning"), "{err}");

    let replay = Command::new("uftrace")
        .args(["replay", "--srcline", "--no-pager", "-d"])
        .arg(home.path().join("hello.data"))
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", stderr(&replay));
    let text = stdout(&replay);
    for f in ["main() {", "factorial() {", "square();", "op_mul();"] {
        assert!(text.contains(f), "{f} missing in\n{text}");
    }
    assert!(text.contains("main.c:"), "no source lines in\n{text}");

    let info = qemu_uftrace(home.path())
        .current_dir(home.path())
        .args(["info", "-d", "hello.data"])
        .output()
        .unwrap();
    let info = stdout(&info);
    assert!(info.contains("hello.elf"), "{info}");
    assert!(
        info.contains("ARM64 (QEMU TCG, qemu-system-aarch64"),
        "{info}"
    );
}
