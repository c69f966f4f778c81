//! Runs that start mid-way: a guest stopped in a leaf five calls deep, saved with `savevm`
//! through the QEMU monitor and recorded from that snapshot with `-loadvm`. The calls open
//! at the start are unwound after the run from the guest's own tables and opened at the
//! start of its stream: the chain exact, its returns in order, later calls at the right
//! depth — by CFI with frame pointers, by CFI alone (`-fomit-frame-pointer`), and by frame
//! records and the leaf's return address where the ELF has no CFI, by SFrame alone
//! (`as --gsframe`, CFI removed); on aarch64, x86_64 and riscv64 bare metal (SFrame has
//! no RISC-V ABI).

mod common;

use qemu_uftrace_tests::replay::{replay_events, uftrace, without};
use qemu_uftrace_tests::riscv64::{riscv64_guest_elf, QEMU_RISCV64};
use qemu_uftrace_tests::snapshot::{
    create_disk, disk_args, migrate_at_marker, save_at_marker, wait_until_running,
};
use qemu_uftrace_tests::x86_64_guests::{x86_64_guest_elf, QEMU_X86_64};
use qemu_uftrace_tests::{
    cross_prefix, guest_elf, is_runtime_function, plugin_stat, Variant, QEMU, QEMU_TIMEOUT,
};
use std::io::Write;
use std::os::unix::net::UnixListener;

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
use std::process::Command;

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
    let (run, status) = record_from_snapshot_with(board, elf, &[]);
    assert!(status.success(), "record failed: {status}\n{}", run.stderr);
    run
}

/// [`record_from_snapshot`] with `opts` given to `record`, and `record`'s exit status.
fn record_from_snapshot_with(
    board: Board,
    elf: &Path,
    opts: &[&str],
) -> (FromSnapshot, std::process::ExitStatus) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let disk = tmp.path().join("disk.qcow2");
    create_disk(&disk).expect("qemu-img");
    let mut qemu = board.qemu(elf);
    qemu.extend(disk_args(&disk));
    let seen = save_at_marker(&qemu, tmp.path(), "snap: waiting", "s1", QEMU_TIMEOUT)
        .expect("snapshot the guest in snap_wait");
    assert!(seen.contains("snap: waiting"));

    // The byte to receive is there from the start: -loadvm loads before any input arrives.
    let release = tmp.path().join("release.txt");
    std::fs::write(&release, "g").expect("write release");
    let uart = tmp.path().join("uart.txt");
    let mut args = qemu;
    args.extend(["-loadvm", "s1", "-monitor", "none", "-chardev"].map(String::from));
    args.push(format!(
        "file,id=uart,path={},input-path={}",
        uart.display(),
        release.display()
    ));
    args.extend(["-serial", "chardev:uart"].map(String::from));
    let dir = tmp.path().join("uftrace.data");
    let out = common::record_into(&dir, opts, &args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let uart = std::fs::read_to_string(&uart).expect("the guest's serial output");
    let run = FromSnapshot {
        _tmp: tmp,
        dir,
        stderr,
        uart,
    };
    (run, out.status)
}

/// Records `qemu` into `<tmp>/uftrace.data`; gives the directory and `record`'s stderr.
fn record(tmp: &Path, qemu: &[String]) -> (PathBuf, String) {
    common::record_ok_in::<&str>(tmp, &[], qemu)
}

/// [`record_from_snapshot`] from a migration stream (`-incoming file:`): the byte is sent
/// once the VM runs (input that arrives while the stream loads is lost to the migrated
/// UART state).
fn record_from_migration(board: Board, elf: &Path) -> FromSnapshot {
    let tmp = tempfile::tempdir().expect("temp dir");
    let qemu = board.qemu(elf);
    let stream = tmp.path().join("vm.mig");
    let seen = migrate_at_marker(&qemu, tmp.path(), "snap: waiting", &stream, QEMU_TIMEOUT)
        .expect("migrate the guest in snap_wait to a file");
    assert!(seen.contains("snap: waiting"));

    let serial_path = tmp.path().join("uart.sock");
    let qmp_path = tmp.path().join("qmp.sock");
    let serial = UnixListener::bind(&serial_path).expect("serial socket");
    let qmp = UnixListener::bind(&qmp_path).expect("QMP socket");
    let mut args = qemu;
    args.push("-incoming".into());
    args.push(format!("file:{}", stream.display()));
    args.extend(["-monitor", "none", "-serial"].map(String::from));
    args.push(format!("unix:{}", serial_path.display()));
    args.push("-qmp".into());
    args.push(format!("unix:{}", qmp_path.display()));
    let root = tmp.path().to_path_buf();
    let run = std::thread::spawn(move || record(&root, &args));
    // QEMU connects to both sockets as it starts.
    let (mut uart, _) = serial.accept().expect("QEMU's serial connection");
    wait_until_running(&qmp, QEMU_TIMEOUT).expect("the VM runs");
    uart.write_all(b"g").expect("send the byte");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut uart, &mut text).expect("the guest's serial output");
    let (dir, stderr) = run.join().expect("record");
    FromSnapshot {
        _tmp: tmp,
        dir,
        stderr,
        uart: text,
    }
}

/// Checks the trace of a run from the snapshot, with the summary line `methods` names.
fn check(board: Board, elf: &Path, methods: &str) {
    check_run(record_from_snapshot(board, elf), methods)
}

fn check_run(run: FromSnapshot, methods: &str) {
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

/// The stack cookie counts towards `--max-size` with the records: one that does not fit is
/// not written, and the drop is counted and said (the calls open at the start stay open).
#[test]
fn aarch64_a_cookie_past_the_size_cap_is_dropped_and_said() {
    let board = Board::Aarch64;
    let (run, status) =
        record_from_snapshot_with(board, &board.elf(Variant::Natural), &["--max-size", "4K"]);
    // An incomplete trace is published, and `record` fails.
    assert!(!status.success(), "{}", run.stderr);
    assert!(run.uart.contains("snap_a(1) = 242"), "{}", run.uart);
    assert_eq!(plugin_stat(&run.dir, "dropped_cookies"), "1");
    assert_eq!(plugin_stat(&run.dir, "complete"), "0");
    assert!(
        run.stderr.contains("INCOMPLETE TRACE")
            && run.stderr.contains("1 stack cookies not written"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("dropped_cookies 1:"), "{}", run.stderr);
    let stacks = std::fs::read_dir(&run.dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".stack")
        })
        .count();
    assert_eq!(stacks, 0);
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

#[test]
fn aarch64_from_a_migration_stream() {
    let board = Board::Aarch64;
    check_run(
        record_from_migration(board, &board.elf(Variant::NoFp)),
        "6 by CFI",
    );
}

/// A plain run whose first instruction is no function's entry (`-device loader,addr=…,
/// cpu-num=0` sets the pc inside `_start`, past its FP/SIMD setup, which the guest does not
/// need to have run) takes the same path: its first block saves a cookie, which unwinds to
/// nothing open (no frame yet), and the trace is the one from `_start`'s entry.
#[test]
fn aarch64_plain_run_started_inside_a_function() {
    let elf = guest_elf("nested", Variant::Natural).expect("build guests");
    let start = qemu_uftrace_tests::nm_functions(&elf)
        .expect("nm")
        .into_iter()
        .find_map(|(a, n)| (n == "_start").then_some(a))
        .expect("_start");
    let tmp = tempfile::tempdir().expect("temp dir");
    let qemu = Board::Aarch64.qemu(&elf);
    // mov x0, #…; msr cpacr_el1, x0; isb: three instructions.
    let mut mid = qemu.clone();
    mid.extend([
        "-device".to_string(),
        format!("loader,addr={:#x},cpu-num=0", start + 12),
    ]);
    for d in ["plain", "mid"] {
        std::fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
    }
    let (plain, _) = record(&tmp.path().join("plain"), &qemu);
    let (from_mid, stderr) = record(&tmp.path().join("mid"), &mid);
    assert!(
        stderr.contains("the run started mid-way: 0 open frames recovered by unwinding 1 task"),
        "{stderr}"
    );
    let events = |dir: &Path| replay_events(dir, 1).expect("uftrace replay");
    let want = events(&plain);
    assert!(want.iter().any(|e| e == "E nest_level4"), "{want:?}");
    assert_eq!(events(&from_mid), want);
}
