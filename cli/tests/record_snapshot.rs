//! Runs that start mid-way: a guest stopped in a leaf five calls deep, saved with `savevm`
//! through the QEMU monitor and recorded from that snapshot with `-loadvm`. The calls open
//! at the start are unwound after the run from the guest's own tables and opened at the
//! start of its stream: the chain exact, its returns in order, later calls at the right
//! depth — by CFI with frame pointers, by CFI alone (`-fomit-frame-pointer`), and by frame
//! records and the leaf's return address where the ELF has no CFI, by SFrame alone
//! (`as --gsframe`, CFI removed); on aarch64, x86_64 and riscv64 bare metal (SFrame has
//! no RISC-V ABI).

use qemu_uftrace_tests::replay::{replay_events, uftrace, without};
use qemu_uftrace_tests::riscv64::{riscv64_guest_elf, QEMU_RISCV64};
use qemu_uftrace_tests::snapshot::{create_disk, disk_args, save_at_marker};
use qemu_uftrace_tests::x86_64_guests::{x86_64_guest_elf, QEMU_X86_64};
use qemu_uftrace_tests::{
    cross_prefix, guest_elf, is_runtime_function, plugin_stat, Variant, QEMU, QEMU_TIMEOUT,
};

/// The guest's board: the QEMU command line (no serial or monitor: the tests choose), the
/// snap guest's builds, and the binutils that strip its CFI.
#[derive(Clone, Copy)]
enum Board {
    Aarch64,
    X86_64,
    Riscv64,
}

impl Board {
    fn qemu(self, elf: &Path) -> Vec<String> {
        let args: &[&str] = match self {
            Board::Aarch64 => &[QEMU, "-M", "virt", "-cpu", "cortex-a57", "-semihosting"],
            // isa-debug-exit: a non-zero status ends QEMU with it (0 powers off).
            Board::X86_64 => &[
                QEMU_X86_64,
                "-M",
                "pc",
                "-m",
                "128M",
                "-device",
                "isa-debug-exit",
            ],
            Board::Riscv64 => &[QEMU_RISCV64, "-M", "virt", "-bios", "none"],
        };
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.extend(["-display", "none", "-nic", "none", "-kernel"].map(String::from));
        v.push(elf.display().to_string());
        v
    }

    fn elf(self, variant: Variant) -> PathBuf {
        self.program("snap", variant)
    }

    fn program(self, name: &str, variant: Variant) -> PathBuf {
        match self {
            Board::Aarch64 => guest_elf(name, variant),
            Board::X86_64 => x86_64_guest_elf(name, variant),
            Board::Riscv64 => riscv64_guest_elf(name, variant),
        }
        .expect("build guests")
    }

    fn objcopy(self) -> String {
        match self {
            Board::Aarch64 => format!("{}objcopy", cross_prefix()),
            Board::X86_64 => "objcopy".into(),
            Board::Riscv64 => "riscv64-linux-gnu-objcopy".into(),
        }
    }

    /// `elf` without its CFI sections.
    fn without_cfi(self, elf: &Path, dir: &Path) -> PathBuf {
        let stripped = dir.join("snap-nocfi.elf");
        let status = Command::new(self.objcopy())
            .args([
                "--remove-section",
                ".debug_frame",
                "--remove-section",
                ".eh_frame",
            ])
            .arg(elf)
            .arg(&stripped)
            .status()
            .expect("run objcopy");
        assert!(status.success());
        stripped
    }
}
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The snap guest's calls seen from a run that starts in `snap_wait`.
const EXPECTED: &[&str] = &[
    "E main",
    "E snap_a",
    "E snap_b",
    "E snap_c",
    "E snap_d",
    "E snap_wait",
    "X snap_wait",
    "E snap_after",
    "X snap_after",
    "X snap_d",
    "X snap_c",
    "X snap_b",
    "X snap_a",
    "E snap_later",
    "X snap_later",
    "X main",
];

/// What a recording from a snapshot left: the trace, `record`'s stderr, the guest's serial
/// output.
struct FromSnapshot {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    stderr: String,
    uart: String,
}

/// Runs `elf` until it waits in `snap_wait`, saves it, and records the run from there,
/// with a byte for the guest to receive.
fn record_from_snapshot(board: Board, elf: &Path) -> FromSnapshot {
    let tmp = tempfile::tempdir().expect("temp dir");
    let disk = tmp.path().join("disk.qcow2");
    create_disk(&disk).expect("qemu-img");
    let mut qemu = board.qemu(elf);
    qemu.extend(disk_args(&disk));
    let seen = save_at_marker(&qemu, tmp.path(), "snap: waiting", "s1", QEMU_TIMEOUT)
        .expect("snapshot the guest in snap_wait");
    assert!(seen.contains("snap: waiting"));

    let release = tmp.path().join("release.txt");
    std::fs::write(&release, "g").expect("write release");
    let uart = tmp.path().join("uart.txt");
    let dir = tmp.path().join("uftrace.data");
    let out = Command::new(env!("CARGO_BIN_EXE_qemu-uftrace"))
        .arg("record")
        .arg("-o")
        .arg(&dir)
        .arg("--")
        .args(&qemu)
        .args(["-loadvm", "s1", "-monitor", "none", "-chardev"])
        .arg(format!(
            "file,id=uart,path={},input-path={}",
            uart.display(),
            release.display()
        ))
        .args(["-serial", "chardev:uart"])
        .stdin(Stdio::null())
        .output()
        .expect("run qemu-uftrace");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "record failed: {}\n{stderr}",
        out.status
    );
    let uart = std::fs::read_to_string(&uart).expect("the guest's serial output");
    FromSnapshot {
        _tmp: tmp,
        dir,
        stderr,
        uart,
    }
}

/// Checks the trace of a run from the snapshot, with the summary line `methods` names.
fn check(board: Board, elf: &Path, methods: &str) {
    let run = record_from_snapshot(board, elf);
    // The guest went on from where it was saved, with the byte it was given.
    assert!(
        run.uart.contains("snap_a(1) = 242") && !run.uart.contains("snap: waiting"),
        "{}",
        run.uart
    );
    let events = replay_events(&run.dir, 1).expect("uftrace replay");
    assert_eq!(without(&events, is_runtime_function, true), EXPECTED);
    // The recovered frames are marked once, inside the innermost; nothing was guessed.
    let text = uftrace(&[
        "replay",
        "--no-pager",
        "-d",
        &run.dir.to_string_lossy(),
        "-N",
        "rt_.*",
    ])
    .expect("uftrace replay");
    let lines: Vec<&str> = text.lines().collect();
    let marks = lines
        .iter()
        .filter(|l| l.contains("/*") && !l.contains("} /*"));
    assert_eq!(marks.count(), 1, "{text}");
    let wait = lines
        .iter()
        .position(|l| l.ends_with("snap_wait() {"))
        .expect("snap_wait opened");
    assert!(lines[wait + 1].ends_with("/* qemu:unwound */"), "{text}");
    assert_eq!(plugin_stat(&run.dir, "outer_returns"), "6");
    assert_eq!(plugin_stat(&run.dir, "lost_marks"), "0");
    let summary = format!("6 open frames recovered by unwinding 1 task ({methods})");
    assert!(run.stderr.contains(&summary), "{}", run.stderr);
    // The cookie was used up.
    assert!(std::fs::read_dir(&run.dir).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".stack")));
}

/// The builds on `board`: with frame pointers and CFI, CFI only, frame pointers only,
/// SFrame only.
fn check_board(board: Board, variant: &str) {
    let tmp = tempfile::tempdir().expect("temp dir");
    match variant {
        "natural" => check(board, &board.elf(Variant::Natural), "6 by CFI"),
        "nofp" => check(board, &board.elf(Variant::NoFp), "6 by CFI"),
        "nocfi" => check(
            board,
            &board.without_cfi(&board.elf(Variant::Natural), tmp.path()),
            "5 by frame records, 1 by leaf return address",
        ),
        _ => check(
            board,
            &board.without_cfi(&board.program("snap-sframe", Variant::Natural), tmp.path()),
            "6 by SFrame",
        ),
    }
}

#[test]
fn aarch64_by_cfi_with_frame_pointers() {
    check_board(Board::Aarch64, "natural");
}

#[test]
fn aarch64_by_cfi_without_frame_pointers() {
    check_board(Board::Aarch64, "nofp");
}

#[test]
fn aarch64_by_frame_records_without_cfi() {
    check_board(Board::Aarch64, "nocfi");
}

#[test]
fn aarch64_by_sframe_alone() {
    check_board(Board::Aarch64, "sframe");
}

#[test]
fn x86_64_by_sframe_alone() {
    check_board(Board::X86_64, "sframe");
}

#[test]
fn x86_64_by_cfi_with_frame_pointers() {
    check_board(Board::X86_64, "natural");
}

#[test]
fn x86_64_by_cfi_without_frame_pointers() {
    check_board(Board::X86_64, "nofp");
}

#[test]
fn x86_64_by_frame_records_without_cfi() {
    check_board(Board::X86_64, "nocfi");
}

#[test]
fn riscv64_by_cfi_with_frame_pointers() {
    check_board(Board::Riscv64, "natural");
}

#[test]
fn riscv64_by_cfi_without_frame_pointers() {
    check_board(Board::Riscv64, "nofp");
}

#[test]
fn riscv64_by_frame_records_without_cfi() {
    check_board(Board::Riscv64, "nocfi");
}
