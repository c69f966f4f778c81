//! Tracing switched on and off while the guest runs (issue 37): the spinning guest
//! (`tests/guests/spin.c`: main calls spin_tick forever, spin_tick calls the leaves spin_work
//! and spin_leaf),
//! recorded with the instruction clock, switched by `qemu-uftrace trace on|off`, by signals
//! to `record` and by `--trace-on-at`/`--trace-off-at`, on every QEMU, on aarch64, x86_64
//! (after SeaBIOS, under `-icount`) and riscv64 bare metal. The guest is
//! deterministic under the instruction clock, so a second, full recording is the oracle: each
//! window's `qemu:opened` frames are the full trace's open stack at that instant, and its
//! records are the full trace's in the same span; every window closes what it opened.

mod common;

use common::{default_stop_signals, stderr, BIN};
use qemu_uftrace_format::events::{OPENED, TRACE_OFF, TRACE_ON};
use qemu_uftrace_format::record::{decode_all, Record, RecordType};
use qemu_uftrace_tests::riscv64::{riscv64_guest_elf, riscv64_qemu_args_on, riscv64_qemus};
use qemu_uftrace_tests::x86_64_guests::{
    system_qemus_x86_64, x86_64_guest_elf, x86_64_qemu_args_on,
};
use qemu_uftrace_tests::{
    guest_elf, nm_functions, qemu_args_on, system_qemus, SystemQemu, Variant,
};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Generous: on a loaded 2-core machine a guest's start and a buffer's worth of records take
/// seconds.
const PATIENCE: Duration = Duration::from_secs(240);

fn wait_for<T>(what: &str, mut cond: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn staging(dir: &Path) -> PathBuf {
    PathBuf::from(format!("{}.partial", dir.display()))
}

/// The plugin's status while it records (empty before it exists).
fn live(dir: &Path) -> String {
    std::fs::read_to_string(staging(dir).join("plugin.status")).unwrap_or_default()
}

fn value<'a>(text: &'a str, k: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
}

fn number(text: &str, k: &str) -> Option<u64> {
    value(text, k)?.parse().ok()
}

/// A recording of the spinning guest on `qemu` into `dir` (its console into `dir`.console).
struct Recording {
    child: Child,
    dir: PathBuf,
    console: PathBuf,
}

impl Recording {
    /// `board`'s spinning guest on `qemu`, with the instruction clock.
    fn start(board: &Board, qemu: &SystemQemu, dir: &Path, options: &[&str]) -> Recording {
        let mut opts = vec!["--clock", "insn"];
        opts.extend_from_slice(options);
        Self::start_argv(&(board.argv)(&qemu.program, &board.elf), dir, &opts)
    }

    fn start_argv(argv: &[String], dir: &Path, options: &[&str]) -> Recording {
        let console = dir.with_extension("console");
        let mut cmd = Command::new(BIN);
        cmd.args(["record", "-q", "-o"])
            .arg(dir)
            .args(options)
            .arg("--")
            .args(argv)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&console).expect("console file"))
            .stderr(std::fs::File::create(dir.with_extension("err")).expect("stderr file"));
        default_stop_signals(&mut cmd);
        let child = cmd.spawn().expect("run record");
        Recording {
            child,
            dir: dir.to_path_buf(),
            console,
        }
    }

    /// Waits until the guest is in its loop (it says so once, then spins in main).
    fn wait_spinning(&self) {
        wait_for("the guest spins", || {
            let text = std::fs::read_to_string(&self.console).unwrap_or_default();
            let status = live(&self.dir);
            (text.contains("spinning until stopped") && value(&status, "pid").is_some())
                .then_some(())
        });
    }

    /// Waits until the status says tracing is `state` and `cond` holds for it.
    fn wait_status(&self, what: &str, state: &str, cond: impl Fn(&str) -> bool) -> String {
        wait_for(what, || {
            let s = live(&self.dir);
            (value(&s, "trace") == Some(state) && cond(&s)).then_some(s)
        })
    }

    /// Waits until a buffer's worth of records (64 Ki) more than now are written while
    /// tracing is on, in window `n` where given.
    fn wait_records(&self, what: &str, window: Option<u64>) {
        let at_on = number(&live(&self.dir), "events").unwrap_or(0);
        self.wait_status(what, "on", |s| {
            window.is_none_or(|n| number(s, "trace_windows") == Some(n))
                && number(s, "events").is_some_and(|e| e >= at_on + 65_536)
        });
    }

    /// Waits for a guest that ends by itself, and for `record` to publish the trace.
    fn finish(mut self) -> PathBuf {
        let status = self.child.wait().expect("record ends");
        let err = std::fs::read_to_string(self.dir.with_extension("err")).unwrap_or_default();
        assert!(status.success(), "record failed: {err}");
        self.dir.clone()
    }

    /// Stops QEMU as a user's `kill` would, and waits for `record` to publish the trace.
    fn stop(mut self) -> PathBuf {
        let pid = number(&live(&self.dir), "pid").expect("a pid in the status") as i32;
        // SAFETY: a signal to the QEMU this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = self.child.wait().expect("record ends");
        let dir = self.dir.clone();
        let err = std::fs::read_to_string(self.dir.with_extension("err")).unwrap_or_default();
        // A system QEMU ends with 0 at SIGTERM; a user-mode program with its signal's status,
        // which record passes on.
        assert!(
            status.success() || err.contains("qemu-uftrace: wrote "),
            "record failed: {err}"
        );
        dir
    }
}

/// A test that failed while its guest spins: QEMU and `record` stopped, not left spinning on
/// a core for the rest of the suite.
impl Drop for Recording {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        if let Some(pid) = number(&live(&self.dir), "pid") {
            // SAFETY: a signal to the QEMU this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// [`trace`] `-d DIR`, which must succeed (its output said where it fails).
fn trace_ok(dir: &Path, state: &str, cwd: &Path) {
    let out = trace(Some(dir), state, cwd);
    assert!(
        out.status.success(),
        "trace {state}: {}{}",
        common::stdout(&out),
        stderr(&out)
    );
}

/// `qemu-uftrace trace on|off -d DIR`.
fn trace(dir: Option<&Path>, state: &str, cwd: &Path) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(cwd).args(["trace", state]);
    if let Some(d) = dir {
        cmd.arg("-d").arg(d);
    }
    cmd.output().expect("run trace")
}

fn records(dir: &Path) -> Vec<Record> {
    decode_all(&std::fs::read(dir.join("1.dat")).expect("1.dat")).expect("records")
}

/// One window of a switched recording, as written.
#[derive(Debug)]
struct Window {
    /// The `qemu:trace_on` edge's time.
    on: u64,
    /// The functions open where it began (outermost first), written before `qemu:opened`.
    opened: Vec<u64>,
    /// When the frames were taken (the vCPU's first block after the switch).
    taken: u64,
    /// What was recorded from there, less the exits that closed the frames at the off edge.
    body: Vec<Record>,
    /// The off edge's time.
    off: u64,
    /// Opened where nothing unwinds: a LOST record stands for its open frames.
    lost: bool,
}

/// The complete windows of `recs` (one still open at the end is left out), each checked to
/// nest and balance: the opened frames at depths 0.., every record at the depth its stack
/// says, and every frame closed at the off edge.
fn windows(recs: &[Record]) -> Vec<Window> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < recs.len() {
        let r = recs[i];
        i += 1;
        if !(r.kind == RecordType::Event && r.addr == TRACE_ON) {
            continue;
        }
        let on = r.time;
        // The open frames, then qemu:opened at their depth.
        let mut opened = Vec::new();
        while i < recs.len() && recs[i].kind == RecordType::Entry {
            assert_eq!(recs[i].depth as usize, opened.len(), "{:?}", recs[i]);
            opened.push(recs[i].addr);
            i += 1;
        }
        let Some(marker) = recs.get(i) else { break };
        // Switched on where nothing unwinds (a program still in its start-up code, which
        // has no unwind tables): the LOST record that says so stands for the open frames.
        let lost = opened.is_empty() && marker.kind == RecordType::Lost;
        if !lost {
            assert!(
                marker.kind == RecordType::Event && marker.addr == OPENED,
                "no qemu:opened after the open frames: {marker:?}"
            );
            assert_eq!(marker.depth as usize, opened.len());
        }
        i += 1;
        let taken = marker.time;
        let mut depth = opened.len();
        let mut body = Vec::new();
        let mut off = None;
        while let Some(&r) = recs.get(i) {
            i += 1;
            if r.kind == RecordType::Event && r.addr == TRACE_OFF {
                assert_eq!(r.depth, 0, "{r:?}");
                off = Some(r.time);
                break;
            }
            match r.kind {
                RecordType::Entry => {
                    assert_eq!(r.depth as usize, depth, "{r:?}");
                    depth += 1;
                }
                RecordType::Exit => {
                    depth = depth.checked_sub(1).expect("an exit below the bottom");
                    assert_eq!(r.depth as usize, depth, "{r:?}");
                }
                _ => panic!("unexpected record in a window: {r:?}"),
            }
            body.push(r);
        }
        let Some(off) = off else { break };
        assert_eq!(depth, 0, "the window ends with frames open");
        out.push(Window {
            on,
            opened,
            taken,
            body: strip_closing(body, off),
            off,
            lost,
        });
    }
    out
}

/// `body` without the exits at `off` that end it (the off edge's closing ones; a full
/// trace's at that time are left out alike).
fn strip_closing(mut body: Vec<Record>, off: u64) -> Vec<Record> {
    while body
        .last()
        .is_some_and(|r| r.kind == RecordType::Exit && r.time == off)
    {
        body.pop();
    }
    body
}

/// The full trace's open functions at `at` (outermost first): what ran before it, and the
/// returns landing in the block at `at`; the calls made at `at` too where `calls_at` (a
/// call's entry has the count of the branch that ended the block before: the switch came
/// after it when the window opened that function).
fn open_at(full: &[Record], at: u64, calls_at: bool) -> Vec<u64> {
    let mut stack = Vec::new();
    for r in full {
        if r.time > at || (r.time == at && r.kind != RecordType::Exit && !calls_at) {
            break;
        }
        match r.kind {
            RecordType::Entry => stack.push(r.addr),
            RecordType::Exit => {
                stack.pop();
            }
            _ => {}
        }
    }
    stack
}

/// The full trace's records in a window's span (the calls made at its start only where
/// they came after it: not `calls_before`).
fn span(full: &[Record], w: &Window, calls_before: bool) -> Vec<Record> {
    let body: Vec<Record> = full
        .iter()
        .filter(|r| {
            (r.time > w.taken || (r.time == w.taken && r.kind != RecordType::Exit && !calls_before))
                && r.time <= w.off
        })
        .copied()
        .collect();
    strip_closing(body, w.off)
}

fn check_against(
    label: &str,
    what: &str,
    ws: &[Window],
    full: &[Record],
    names: &dyn Fn(u64) -> String,
) {
    for (n, w) in ws.iter().enumerate() {
        let named = |v: &[u64]| v.iter().map(|&a| names(a)).collect::<Vec<_>>();
        // From main on: on x86_64 SeaBIOS's frames stay open beneath it in the full trace
        // (the guest's start code switched stacks), where no unwinder reaches them; the
        // full trace's depths count them.
        let from_main = |mut v: Vec<String>| {
            let beneath = v.iter().position(|f| f == "main").unwrap_or(0);
            v.drain(..beneath);
            (v, beneath)
        };
        // The instruction clock stands still from the switch to the cookie: the frames
        // are taken at the start of the vCPU's first block after it, timed before that
        // block as a return landing there is (timed after it, the marker of a block that
        // ends in a return came at that return's count, a frame too late).
        assert_eq!(
            w.taken, w.on,
            "{label} {what}: window {n}'s frames are not taken at its switch's count"
        );
        let (want, beneath) = from_main(named(&open_at(full, w.taken, false)));
        // A call made at the switch's very count (the branch ended the block before it,
        // the switch came at the next block's start): open in the window, not in its body;
        // every record is still counted once, below.
        let (with_calls, _) = from_main(named(&open_at(full, w.taken, true)));
        let calls_before = named(&w.opened) != want && named(&w.opened) == with_calls;
        let want = if calls_before { with_calls } else { want };
        assert_eq!(
            named(&w.opened),
            want,
            "{label} {what}: window {n}'s open frames at {}",
            w.taken
        );
        let want: Vec<Record> = (span(full, w, calls_before).iter())
            .map(|b| Record {
                depth: b.depth.saturating_sub(beneath as u16),
                ..*b
            })
            .collect();
        assert!(!want.is_empty(), "{label} {what}: window {n} is empty");
        // Record for record; where they part, the records around it from both.
        let first = (0..w.body.len().max(want.len())).find(|&i| w.body.get(i) != want.get(i));
        if let Some(i) = first {
            let around = |v: &[Record]| {
                (v.iter().enumerate().skip(i.saturating_sub(4)).take(9))
                    .map(|(j, r)| {
                        format!(
                            "{j}: {:?} {} @{} d{}",
                            r.kind,
                            names(r.addr),
                            r.time,
                            r.depth
                        )
                    })
                    .collect::<Vec<_>>()
            };
            panic!(
                "{label} {what}: window {n} ({}..{}): {} records, the full trace {} in its \
                 span; they part at record {i}:\nwindow: {:#?}\nfull:   {:#?}",
                w.taken,
                w.off,
                w.body.len(),
                want.len(),
                around(&w.body),
                around(&want)
            );
        }
    }
}

/// uftrace's replay of the recording whose windows are `ws` shows each window's edges and
/// the frames it opened, and nothing lost but the LOST record of each window opened where
/// nothing unwinds; `spin_work` among them (a filter may keep it out:
/// [`check_replay_filtered`]).
fn check_replay(dir: &Path, label: &str, ws: &[Window]) {
    check_replay_of(dir, label, &["spin_work"], ws);
}

/// [`check_replay`] of a filtered recording.
fn check_replay_filtered(dir: &Path, what: &str, ws: &[Window]) {
    check_replay_of(dir, what, &[], ws);
}

fn check_replay_of(dir: &Path, label: &str, also: &[&str], ws: &[Window]) {
    let out = Command::new("uftrace")
        .args(["replay", "--event-full", "-d"])
        .arg(dir)
        .output()
        .expect("run uftrace");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{label}: {}", stderr(&out));
    let edges = [
        "/* qemu:trace_on */",
        "/* qemu:opened */",
        "/* qemu:trace_off */",
    ];
    for want in edges.iter().chain(also) {
        assert!(text.contains(want), "{label}: no {want} in\n{text:.3000}");
    }
    // A user-mode switch on in the program's start-up code (it came before main once under
    // the suite's load) is the one LOST record a window may show.
    let lost = text.lines().filter(|l| l.contains("/* LOST ")).count();
    let opened_lost = ws.iter().filter(|w| w.lost).count();
    assert_eq!(lost, opened_lost, "{label}: {text:.3000}");
}

/// A bare-metal board's spinning guest (`tests/guests/spin.c` built for it) and how QEMU
/// runs it.
struct Board {
    arch: &'static str,
    qemus: Vec<SystemQemu>,
    elf: PathBuf,
    argv: fn(&str, &Path) -> Vec<String>,
}

impl Board {
    fn aarch64() -> Board {
        Board {
            arch: "aarch64",
            qemus: system_qemus(),
            elf: guest_elf("spin", Variant::Natural).expect("build the guests"),
            argv: qemu_args_on,
        }
    }

    /// SeaBIOS, then the guest: under `-icount` its waits count instructions, so the
    /// guest reaches `main` after the same count in every run (without it SeaBIOS's
    /// timing loops made it vary by ~20,000 instructions, and windows could not be
    /// compared with a second recording).
    fn x86_64() -> Board {
        Board {
            arch: "x86_64",
            qemus: system_qemus_x86_64(),
            elf: x86_64_guest_elf("spin", Variant::Natural).expect("build the x86_64 guests"),
            argv: |qemu, elf| {
                let mut argv = x86_64_qemu_args_on(qemu, elf);
                let kernel = argv.len() - 2;
                argv.splice(
                    kernel..kernel,
                    ["-icount", "shift=0,sleep=off"].map(String::from),
                );
                argv
            },
        }
    }

    fn riscv64() -> Board {
        Board {
            arch: "riscv64",
            qemus: riscv64_qemus(),
            elf: riscv64_guest_elf("spin", Variant::Natural).expect("build the riscv64 guests"),
            argv: riscv64_qemu_args_on,
        }
    }
}

#[test]
fn windows_switched_by_command_signal_and_trigger_equal_the_full_trace() {
    check_board(&Board::aarch64());
}

/// As on aarch64, after SeaBIOS: x86_64's long-mode guest.
#[test]
fn x86_64_windows_switched_by_command_signal_and_trigger_equal_the_full_trace() {
    check_board(&Board::x86_64());
}

/// As on aarch64: riscv64's M-mode guest.
#[test]
fn riscv64_windows_switched_by_command_signal_and_trigger_equal_the_full_trace() {
    check_board(&Board::riscv64());
}

/// The wall clock, no trigger, on QEMU 10.0: it reports no interrupts to plugins, so while
/// off every block listens to the bell (from 10.2 the next interrupt, halt or system call
/// switches, with no translation callback while off). The guest spins without halting or
/// taking an interrupt: `trace on` had waited for a halt that never came (as Debian's arm64
/// boot, busy for 57% of its instructions).
#[test]
fn a_busy_guest_is_switched_on_the_wall_clock_by_a_qemu_without_interrupt_reports() {
    common::require("uftrace");
    let board = Board::aarch64();
    // Found, never skipped: without 10.0 the test would pass on nothing.
    let qemu = (board.qemus.iter())
        .find(|q| q.label == "10.0")
        .expect("QEMU 10.0 among the recording tests' QEMUs");
    common::require(&qemu.program);
    let label = &format!("wall clock on {}", qemu.label);
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("wall.data");
    let argv = (board.argv)(&qemu.program, &board.elf);
    let rec = Recording::start_argv(&argv, &dir, &["--trace=off"]);
    rec.wait_spinning();
    let out = trace(Some(&dir), "on", tmp.path());
    // Said once the plugin's status shows it (not "asked …; not switched yet").
    assert!(
        out.status.success() && common::stdout(&out).starts_with("tracing on in "),
        "{label}: {}{}\nstatus: {}",
        common::stdout(&out),
        stderr(&out),
        live(&dir)
    );
    rec.wait_records("records in the window", Some(1));
    let out = trace(Some(&dir), "off", tmp.path());
    assert!(
        common::stdout(&out).starts_with("tracing off in "),
        "{label}: {}{}",
        common::stdout(&out),
        stderr(&out)
    );
    let dir = rec.stop();
    let ws = windows(&records(&dir));
    assert_eq!(ws.len(), 1, "{label}: {ws:?}");
    check_replay(&dir, label, &ws);
}

/// `board`'s spinning guest on each of its QEMUs, switched by command (two windows), by
/// signals (one) and by triggers (three or more), each recording's windows checked against
/// a full recording of the same run.
fn check_board(board: &Board) {
    common::require("uftrace");
    let syms = nm_functions(&board.elf).expect("nm");
    let names = |a: u64| syms.get(&a).cloned().unwrap_or_else(|| format!("{a:#x}"));
    for qemu in &board.qemus {
        common::require(&qemu.program);
        let label = &format!("{} on {}", board.arch, qemu.label);
        let tmp = tempfile::tempdir().expect("temp dir");
        check_board_on(board, qemu, label, &names, tmp.path());
    }
}

/// One of `board`'s QEMUs (its windows by command, by signals and by triggers, and the
/// full recording they are checked against), recorded into `tmp`.
fn check_board_on(
    board: &Board,
    qemu: &SystemQemu,
    label: &str,
    names: &dyn Fn(u64) -> String,
    tmp: &Path,
) {
    // By command, from another terminal: two windows.
    let dir = tmp.join("cmd.data");
    let rec = Recording::start(board, qemu, &dir, &["--trace=off"]);
    rec.wait_spinning();
    for n in 1..=2u64 {
        let out = trace(Some(&dir), "on", tmp);
        assert!(
            out.status.success(),
            "{label}: window {n}: {}{}\nstatus: {}",
            common::stdout(&out),
            stderr(&out),
            live(&dir)
        );
        // A second `on`: one line, nothing changed.
        let again = trace(Some(&dir), "on", tmp);
        assert!(!again.status.success());
        let err = common::single_error(&again);
        assert!(err.contains("already on"), "{err}");
        // A buffer's worth of records written in this window (64 Ki records).
        rec.wait_records("records in the window", Some(n));
        let out = trace(Some(&dir), "off", tmp);
        assert!(out.status.success(), "{label}: {}", stderr(&out));
        assert!(common::stdout(&out).starts_with("tracing off in "));
    }
    let status = Command::new(BIN).arg("status").arg(&dir).output().unwrap();
    let line = common::stdout(&status);
    assert!(
        line.contains("; tracing off, 2 windows so far, off for "),
        "{line}"
    );
    let cmd_dir = rec.stop();

    // By signals to record: one window.
    let dir = tmp.join("sig.data");
    let rec = Recording::start(
        board,
        qemu,
        &dir,
        &[
            "--trace=off",
            "--signal",
            "SIGUSR1@trace_on",
            "--signal",
            "SIGUSR2@trace_off",
        ],
    );
    rec.wait_spinning();
    // SAFETY: signals to the record this test started.
    assert_eq!(
        unsafe { libc::kill(rec.child.id() as i32, libc::SIGUSR1) },
        0
    );
    rec.wait_status("records after SIGUSR1", "on", |s| {
        number(s, "events").is_some_and(|e| e >= 65_536)
    });
    assert_eq!(
        unsafe { libc::kill(rec.child.id() as i32, libc::SIGUSR2) },
        0
    );
    rec.wait_status("off after SIGUSR2", "off", |_| true);
    let sig_dir = rec.stop();

    // By triggers: a window from each entry into spin_leaf to the next into spin_tick.
    // spin_leaf's one block returns: the switch comes at its first instruction, so it is
    // in its own window (uftrace's `trace_on` trigger), as its caller's frames are.
    // spin_tick's first block calls spin_work: the switch off comes at its first
    // instruction too, so its entry is the window's last record, as --stop-at's.
    let dir = tmp.join("trig.data");
    let rec = Recording::start(
        board,
        qemu,
        &dir,
        &[
            "--trace=off",
            "--trace-on-at",
            "spin_leaf",
            "--trace-off-at",
            "spin_tick",
        ],
    );
    rec.wait_status("three windows", "off", |s| {
        number(s, "trace_windows") >= Some(3)
    });
    let trig_dir = rec.stop();

    let cmd = windows(&records(&cmd_dir));
    let sig = windows(&records(&sig_dir));
    let trig = windows(&records(&trig_dir));
    assert_eq!(cmd.len(), 2, "{label}: {cmd:?}");
    assert_eq!(sig.len(), 1, "{label}");
    assert!(trig.len() >= 3, "{label}: {}", trig.len());
    for w in &trig {
        let opened: Vec<String> = w.opened.iter().map(|&a| names(a)).collect();
        assert_eq!(
            &opened[opened.len().saturating_sub(2)..],
            ["spin_tick", "spin_leaf"],
            "{label}: a trigger's window opens at its function's entry"
        );
        assert_eq!(
            w.body.last().map(|r| (r.kind, names(r.addr))),
            Some((RecordType::Entry, "spin_tick".to_string())),
            "{label}: a trigger's window ends at its function's entry"
        );
    }

    // The oracle: the same guest recorded whole, past the last window's end.
    let until = [&cmd, &sig, &trig]
        .iter()
        .flat_map(|ws| ws.iter().map(|w| w.off))
        .max()
        .unwrap_or(0);
    let dir = tmp.join("full.data");
    let rec = Recording::start(board, qemu, &dir, &[]);
    rec.wait_status("the full trace passes the last window", "on", |s| {
        number(s, "guest_insns") > Some(until)
    });
    let full_dir = rec.stop();
    let full = records(&full_dir);
    let sizes = |ws: &[Window]| {
        ws.iter()
            .map(|w| (w.opened.len(), w.body.len()))
            .collect::<Vec<_>>()
    };
    eprintln!(
            "{label}: windows (open frames, records): command {:?}, signal {:?}, trigger {:?}; full trace {} records",
            sizes(&cmd),
            sizes(&sig),
            &sizes(&trig)[..3],
            full.len()
        );
    check_against(label, "trace on|off", &cmd, &full, names);
    check_against(label, "--signal", &sig, &full, names);
    check_against(label, "--trace-on-at/--trace-off-at", &trig, &full, names);
    check_replay(&cmd_dir, label, &cmd);
    check_replay(&sig_dir, label, &sig);
    // The triggers' windows run from spin_leaf to spin_tick's entry: spin_work is never in.
    check_replay_of(&trig_dir, label, &["spin_leaf"], &trig);
    check_export(&cmd_dir, &cmd, label);
}

/// The Perfetto export shows each window's edges as instants at their times (decoded with
/// Perfetto's own schema by perfetto_check.py).
fn check_export(dir: &Path, ws: &[Window], label: &str) {
    let pb = dir.with_extension("pb");
    let out = common::export(dir, &["-o", &pb.to_string_lossy()]);
    assert!(out.status.success(), "{label}: {}", stderr(&out));
    let v = common::perfetto_decoded(&pb);
    let instants: Vec<(String, u64)> = v["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .flat_map(|t| t["instants"].as_array().cloned().unwrap_or_default())
        .map(|i| {
            (
                i["name"].as_str().unwrap_or_default().to_string(),
                i["ts"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    for w in ws {
        assert!(
            instants.contains(&("qemu:opened".to_string(), w.taken)),
            "{label}: no qemu:opened instant at {}: {instants:?}",
            w.taken
        );
        assert!(
            instants.contains(&("qemu:trace_off".to_string(), w.off)),
            "{label}: no qemu:trace_off instant at {}: {instants:?}",
            w.off
        );
    }
    let ons = instants
        .iter()
        .filter(|(n, _)| n == "qemu:trace_on")
        .count();
    assert_eq!(ons, ws.len(), "{label}: {instants:?}");
}

/// User mode (qemu-aarch64, wall clock): the spinning program makes no system call, so the
/// bell is what switches it; each window opens the program's frames and balances.
#[test]
fn a_user_mode_program_is_switched_by_its_bell() {
    let qemu = qemu_uftrace_tests::user_qemu();
    common::require(&qemu.display().to_string());
    let elf = qemu_uftrace_tests::user_guest_elf("spin.elf").expect("build the user guests");
    let syms = nm_functions(&elf).expect("nm");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("user.data");
    let argv = vec![qemu.display().to_string(), elf.display().to_string()];
    let rec = Recording::start_argv(&argv, &dir, &["--trace=off"]);
    // Its console is written at its end: the plugin's status says it runs.
    wait_for("the program runs", || value(&live(&dir), "pid").map(|_| ()));
    for n in 1..=2u64 {
        trace_ok(&dir, "on", tmp.path());
        rec.wait_records("records in the window", Some(n));
        trace_ok(&dir, "off", tmp.path());
    }
    let dir = rec.stop();
    let dat = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "dat"))
        .expect("a task file");
    let recs = decode_all(&std::fs::read(dat).unwrap()).unwrap();
    let ws = windows(&recs);
    assert_eq!(ws.len(), 2, "{ws:?}");
    for w in &ws {
        let opened: Vec<&str> = w
            .opened
            .iter()
            .filter_map(|a| syms.get(a).map(String::as_str))
            .collect();
        // Open in main, or (switched on before it) entering it.
        let main = syms
            .iter()
            .find(|(_, n)| n.as_str() == "main")
            .map(|(&a, _)| a);
        let enters_main = w
            .body
            .iter()
            .any(|r| r.kind == RecordType::Entry && Some(r.addr) == main);
        assert!(opened.contains(&"main") || enters_main, "{opened:?}");
        assert!(w.body.len() > 65_000, "{}", w.body.len());
    }
    check_replay(&dir, "user mode", &ws);
}

/// User mode, `-F` of a shared library's function (libc's `qsort_r`, placed where the guest
/// maps libc: `Filters::lib_ran_at`) in a window the command switches on while the program is
/// inside it (`libsort.c` waits in its comparator, on Debian's arm64 libc with its debug
/// files, run as `-L`): the window opens at qsort_r, not at main, and writes its subtree, the
/// comparator's calls included, and nothing of main's own calls once the sort returned.
/// libc is stripped: the unwound qsort_r frame must start at its entry (its debug file's
/// symbols), or the window's filter never matches it and writes nothing. (qsort itself
/// ends in a jump to qsort_r: no frame of it is left to unwind.)
#[test]
fn a_library_filter_applies_in_a_window_switched_on_inside_it() {
    let qemu = qemu_uftrace_tests::user_qemu();
    common::require(&qemu.display().to_string());
    let elf = common::user::glibc_guest("libsort-dyn.elf");
    let loader = qemu_uftrace_tests::cached("arm64-libc/lib/ld-linux-aarch64.so.1");
    let sysroot = (loader.parent().and_then(Path::parent)).expect("the arm64 libc's sysroot");
    let tmp = tempfile::tempdir().expect("temp dir");
    let go = tmp.path().join("go");
    let dir = tmp.path().join("sort.data");
    let argv = [&*qemu, Path::new("-L"), sysroot, &elf, &go].map(|p| p.display().to_string());
    let rec = Recording::start_argv(&argv, &dir, &["--trace=off", "-F", "qsort_r"]);
    wait_for("the program waits inside qsort", || {
        let text = std::fs::read_to_string(&rec.console).unwrap_or_default();
        text.contains("sorting").then_some(())
    });
    trace_ok(&dir, "on", tmp.path());
    rec.wait_status("tracing on", "on", |s| {
        number(s, "trace_windows") == Some(1)
    });
    std::fs::write(&go, b"").expect("the file the program waits for");
    let console = rec.console.clone();
    let err_file = dir.with_extension("err");
    let dir = rec.finish();
    // Entered while tracing was off: the plugin saw no entry, and says so without "never".
    let err = std::fs::read_to_string(err_file).unwrap_or_default();
    assert!(
        err.contains("-F qsort_r: the guest did not enter it while tracing was on; only a call open when tracing was switched on can be in the trace"),
        "{err}"
    );
    let printed = std::fs::read_to_string(console).unwrap_or_default();
    assert!(printed.contains("sorted: "), "{printed}");
    let out = Command::new("uftrace")
        .args(["replay", "--event-full", "-f", "none", "-d"])
        .arg(&dir)
        .output()
        .expect("run uftrace");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<&str> = text.lines().collect();
    // The window's edge, then qsort_r opened at depth 0: the filter's root, not main.
    let on = (lines.iter())
        .position(|l| l.contains("/* qemu:trace_on */"))
        .unwrap_or_else(|| panic!("no switch-on in\n{text}"));
    let first = lines.get(on + 1).map(|l| l.trim_end());
    assert_eq!(first, Some("qsort_r() {"), "{text}");
    assert!(text.contains("/* qemu:opened */"), "{text}");
    // 64 integers merge-sorted: a few hundred comparisons, all inside qsort_r.
    let cmps = lines.iter().filter(|l| l.trim() == "cmp();").count();
    assert!(cmps > 100, "{cmps} calls of cmp in\n{text}");
    for outside in ["main", "after", "printf"] {
        assert!(
            !lines
                .iter()
                .any(|l| l.trim_start().starts_with(&format!("{outside}("))),
            "{outside} is outside qsort_r's subtree:\n{text}"
        );
    }
}

/// What `-F filter -N notrace` leave of a whole trace, as uftrace's libmcount writes them:
/// the subtrees of each outermost open filter function (all of it without `-F`), less those
/// of the outermost open notrace one; depths counted from the filter root. Events stay at
/// depth 0 (the switching edges) or where their frames put them.
fn gated(recs: &[Record], filter: &[u64], notrace: &[u64]) -> Vec<Record> {
    let mut out = Vec::new();
    let (mut depth, mut froot, mut nroot) = (0usize, None::<usize>, None::<usize>);
    let written = |d: usize, froot: Option<usize>, nroot: Option<usize>| {
        if nroot.is_some_and(|n| d >= n) {
            return None;
        }
        match froot {
            _ if filter.is_empty() => Some(d),
            Some(f) if d >= f => Some(d - f),
            _ => None,
        }
    };
    for r in recs {
        match r.kind {
            RecordType::Entry => {
                let d = r.depth as usize;
                if notrace.contains(&r.addr) {
                    nroot.get_or_insert(d);
                }
                if filter.contains(&r.addr) {
                    froot.get_or_insert(d);
                }
                if let Some(d) = written(d, froot, nroot) {
                    out.push(Record {
                        depth: d as u16,
                        ..*r
                    });
                }
                depth = d + 1;
            }
            RecordType::Exit => {
                let d = r.depth as usize;
                if let Some(d) = written(d, froot, nroot) {
                    out.push(Record {
                        depth: d as u16,
                        ..*r
                    });
                }
                froot = froot.filter(|&f| f < d);
                nroot = nroot.filter(|&n| n < d);
                depth = d;
            }
            _ if r.addr == TRACE_ON || r.addr == TRACE_OFF => out.push(*r),
            _ => {
                if let Some(d) = written(depth, froot, nroot) {
                    out.push(Record {
                        depth: d as u16,
                        ..*r
                    });
                }
            }
        }
    }
    out
}

/// `-F` and `-N` inside windows (aarch64 on QEMU 10.0, the cheapest board), two windows
/// switched by `trace on|off` (most of the guest's time is spent in spin_work). With `-F
/// spin_tick` a window holds only spin_tick's subtree (spin_work, spin_leaf), its opened
/// frames too (`spin_tick > spin_work`, from depth 0, main left out); with `-N spin_work` spin_work shows nowhere,
/// not among the opened frames either. Each equals a full recording of the same run with
/// the same filter applied to it (`gated`).
#[test]
fn filters_apply_inside_windows() {
    common::require("uftrace");
    let board = Board::aarch64();
    let qemu = &board.qemus[0];
    let syms = nm_functions(&board.elf).expect("nm");
    let addr = |name: &str| {
        syms.iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(&a, _)| a)
            .unwrap_or_else(|| panic!("no {name} in the guest"))
    };
    let names = |a: u64| syms.get(&a).cloned().unwrap_or_else(|| format!("{a:#x}"));
    let (tick, work, leaf) = (addr("spin_tick"), addr("spin_work"), addr("spin_leaf"));
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut last_off = 0;
    let mut switched = Vec::new();
    for (what, opts, filter, notrace) in [
        ("-F spin_tick", ["-F", "spin_tick"], vec![tick], vec![]),
        ("-N spin_work", ["-N", "spin_work"], vec![], vec![work]),
    ] {
        let dir = tmp.path().join(format!("{}.data", &opts[0][1..]));
        let mut options = vec!["--trace=off"];
        options.extend_from_slice(&opts);
        let rec = Recording::start(&board, qemu, &dir, &options);
        rec.wait_spinning();
        for n in 1..=2u64 {
            let out = trace(Some(&dir), "on", tmp.path());
            assert!(out.status.success(), "{what}: {}", stderr(&out));
            rec.wait_records("records in the window", Some(n));
            let out = trace(Some(&dir), "off", tmp.path());
            assert!(out.status.success(), "{what}: {}", stderr(&out));
        }
        let dir = rec.stop();
        let ws = windows(&records(&dir));
        assert_eq!(ws.len(), 2, "{what}: {ws:?}");
        for w in &ws {
            let all = w.opened.iter().chain(w.body.iter().map(|r| &r.addr));
            for a in all {
                assert!(
                    !(notrace.contains(a) || !filter.is_empty() && ![tick, work, leaf].contains(a)),
                    "{what}: {} in a window",
                    names(*a)
                );
            }
            last_off = last_off.max(w.off);
        }
        check_replay_filtered(&dir, what, &ws);
        switched.push((what, ws, filter, notrace));
    }
    let dir = tmp.path().join("full.data");
    let rec = Recording::start(&board, qemu, &dir, &[]);
    rec.wait_status("the full trace passes the last window", "on", |s| {
        number(s, "guest_insns") > Some(last_off)
    });
    let full = records(&rec.stop());
    for (what, ws, filter, notrace) in switched {
        let want = gated(&full, &filter, &notrace);
        check_against("aarch64 on 10.0", what, &ws, &want, &names);
    }
}

/// `trace off` beside `--trace-on-at`: each request is one edge. The trigger opens a window
/// at spin_work, `trace off` closes it, the trigger opens the next at once; a second `trace
/// off` is taken though the last request was `off` too. (Before, the plugin re-read `off`
/// every 20 ms and undid each trigger: hundreds of windows a second; and `trace off` said
/// "already off".)
#[test]
fn a_trigger_and_the_command_take_turns() {
    let board = Board::aarch64();
    let qemu = &board.qemus[0];
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("turns.data");
    let rec = Recording::start(
        &board,
        qemu,
        &dir,
        &["--trace=off", "--trace-on-at", "spin_work"],
    );
    for n in 1..=2u64 {
        rec.wait_status("a window by the trigger", "on", |s| {
            number(s, "trace_windows") == Some(n)
        });
        rec.wait_records("records in the window", None);
        let out = trace(Some(&dir), "off", tmp.path());
        assert!(out.status.success(), "window {n}: {}", stderr(&out));
    }
    let status = live(&dir);
    let dir = rec.stop();
    // The trigger may have opened a third before the stop.
    let opened = number(&status, "trace_windows");
    assert!(matches!(opened, Some(2..=3)), "{status}");
    let ws = windows(&records(&dir));
    assert_eq!(
        ws.len(),
        2,
        "{:?}",
        ws.iter().map(|w| w.body.len()).collect::<Vec<_>>()
    );
    assert!(ws.iter().all(|w| w.body.len() > 65_000));
}

#[test]
fn bad_switches_say_one_line_and_change_nothing() {
    let tmp = tempfile::tempdir().expect("temp dir");
    // No recording running here, or in the directory named.
    for dir in [None, Some(tmp.path().join("none.data"))] {
        let out = trace(dir.as_deref(), "on", tmp.path());
        assert!(!out.status.success());
        let err = common::single_error(&out);
        assert!(err.contains("running"), "{err}");
    }
    // An unknown trigger: refused before QEMU starts, nothing written.
    let elf = guest_elf("spin", Variant::Natural).expect("build the guests");
    let out = Command::new(BIN)
        .current_dir(tmp.path())
        .args(["record", "-o", "t.data", "--trace-on-at", "spin_wrok", "--"])
        .args(qemu_args_on(qemu_uftrace_tests::QEMU, &elf))
        .stdin(Stdio::null())
        .output()
        .expect("run record");
    assert!(!out.status.success());
    let err = common::single_error(&out);
    assert!(
        err.contains("--trace-on-at spin_wrok") && err.contains("spin_work"),
        "{err}"
    );
    assert!(!tmp.path().join("t.data").exists());
    assert!(!tmp.path().join("t.data.partial").exists());
    // A signal action uftrace does not have.
    let out = Command::new(BIN)
        .args(["record", "--signal", "SIGUSR1@finish", "--", "true"])
        .output()
        .expect("run record");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("trace_on"), "{}", stderr(&out));
}

/// A recording whose tracing was never switched on wrote nothing, and says why; that is no
/// reason to doubt QEMU: the next `record` with it trusts the probe it remembered, and
/// starts QEMU once, not three times (its version, the plugin probe, the run).
#[test]
fn a_recording_never_switched_on_keeps_qemus_probe() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let elf = guest_elf("nested", Variant::Natural).expect("build the guests");
    // A QEMU of its own (the probe memo is keyed by its path), counting its starts.
    let log = tmp.path().join("starts");
    let qemu = tmp.path().join("qemu-system-aarch64");
    std::fs::write(
        &qemu,
        format!(
            "#!/bin/sh\necho start >> '{}'\nexec {} \"$@\"\n",
            log.display(),
            qemu_uftrace_tests::QEMU
        ),
    )
    .expect("write the wrapper");
    std::fs::set_permissions(&qemu, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("make the wrapper executable");
    let starts = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let mut counts = Vec::new();
    for _ in 0..2 {
        let before = starts();
        let out = Command::new(BIN)
            .current_dir(tmp.path())
            .args(["record", "-o", "t.data", "--trace=off", "--"])
            .args(qemu_args_on(&qemu.to_string_lossy(), &elf))
            .stdin(Stdio::null())
            .output()
            .expect("run record");
        assert!(!out.status.success());
        let err = common::single_error(&out);
        assert!(err.contains("never switched on"), "{err}");
        counts.push(starts() - before);
    }
    assert_eq!(counts, [3, 1], "QEMU's starts in each run");
}

/// Each task file of a Linux recording (`<tid>.dat`), decoded, by tid.
fn task_records(dir: &Path) -> std::collections::BTreeMap<u32, Vec<Record>> {
    std::fs::read_dir(dir)
        .expect("trace dir")
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let tid = p.file_stem()?.to_str()?.parse().ok()?;
            (p.extension()? == "dat").then_some(())?;
            Some((tid, decode_all(&std::fs::read(&p).ok()?).expect("records")))
        })
        .collect()
}

/// Every task's windows balance: each `qemu:trace_off` stands at depth 0 after its frames
/// closed, each `qemu:trace_on` at depth 0. Gives the windows opened (trace_on events).
fn check_task_windows(tasks: &std::collections::BTreeMap<u32, Vec<Record>>, label: &str) -> usize {
    let mut ons = 0;
    for (tid, recs) in tasks {
        for (i, r) in recs.iter().enumerate() {
            if r.kind != RecordType::Event || !(r.addr == TRACE_ON || r.addr == TRACE_OFF) {
                continue;
            }
            assert_eq!(r.depth, 0, "{label}: task {tid}: {r:?}");
            ons += usize::from(r.addr == TRACE_ON);
            if r.addr == TRACE_OFF {
                let before = recs[..i].iter().rev().find(|b| b.kind != RecordType::Event);
                assert!(
                    before.is_none_or(|b| b.kind != RecordType::Entry && b.depth == 0),
                    "{label}: task {tid}: frames open at the off edge: {before:?}"
                );
            }
        }
    }
    ons
}

/// uftrace's replay of a Linux recording: every edge is shown, and the frames opened at a
/// switch on carry kernel names (no bare address before a `qemu:opened`).
fn check_linux_replay(dir: &Path, label: &str) -> String {
    let out = Command::new("uftrace")
        .args(["replay", "--event-full", "-d"])
        .arg(dir)
        .output()
        .expect("run uftrace");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{label}: {}", stderr(&out));
    for want in [
        "/* qemu:trace_on */",
        "/* qemu:opened */",
        "/* qemu:trace_off */",
    ] {
        assert!(text.contains(want), "{label}: no {want}");
    }
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if !l.contains("/* qemu:opened */") {
            continue;
        }
        let above = lines[..i].last().copied().unwrap_or_default();
        assert!(
            above.contains("/* qemu:trace_on */") || !above.contains("| 0x"),
            "{label}: an unnamed frame opened: {above}"
        );
    }
    text
}

/// A Linux boot (Debian's arm64 kernel, `--clock insn`) switched by triggers: off at
/// `rest_init` (the boot task), on at `workqueue_init`, which PID 1 runs after task switches
/// the tracer did not follow, off at `sched_init_smp`, stopped at `padata_init`. The window's
/// records and its `qemu:opened` frames (`kernel_init > kernel_init_freeable >
/// workqueue_init`) are PID 1's, none the boot task's: the running task is read at the
/// switch on. Then the same boot switched by `trace on|off` and by signals (their instants
/// are the host's: what is checked is that every task's windows balance, their edges show,
/// and their opened frames are named).
#[test]
fn a_linux_boot_is_switched_and_its_windows_go_to_the_running_task() {
    common::require("uftrace");
    let vmlinux = qemu_uftrace_tests::cached("kernel-dbg/vmlinux")
        .to_string_lossy()
        .into_owned();
    let argv = qemu_uftrace_tests::kernel_boot_args_on(qemu_uftrace_tests::QEMU, "cortex-a57");
    let (_tmp, dir, _) = common::record_argv(
        &argv,
        &[
            "--symbols",
            &vmlinux,
            "--clock",
            "insn",
            "--trace-off-at",
            "rest_init",
            "--trace-on-at",
            "workqueue_init",
            "--trace-off-at",
            "sched_init_smp",
            "--stop-at",
            "padata_init,exit",
        ],
    );
    let syms = nm_functions(Path::new(&vmlinux)).expect("nm");
    let name = |a: u64| {
        syms.get(&(a | 0xffff_0000_0000_0000))
            .cloned()
            .unwrap_or_else(|| format!("{a:#x}"))
    };
    let tasks = task_records(&dir);
    assert!(
        check_task_windows(&tasks, "triggers") >= 2,
        "{:?}",
        tasks.keys()
    );
    // PID 1's window: the edge, the frames open at the first block after it, the marker.
    let init = tasks.get(&1).expect("PID 1 recorded");
    let on = init
        .iter()
        .position(|r| r.kind == RecordType::Event && r.addr == TRACE_ON)
        .expect("PID 1's window opens");
    let opened: Vec<String> = init[on + 1..]
        .iter()
        .take_while(|r| r.kind == RecordType::Entry)
        .map(|r| name(r.addr))
        .collect();
    assert!(
        opened.starts_with(&[
            "kernel_init".to_string(),
            "kernel_init_freeable".to_string(),
            "workqueue_init".to_string()
        ]),
        "PID 1's opened frames: {opened:?}"
    );
    let marker = init[on + 1 + opened.len()];
    assert!(
        marker.kind == RecordType::Event && marker.addr == OPENED,
        "{marker:?}"
    );
    // The boot task (the idle task swapper/0) ran rest_init when tracing went off: from the
    // switch on nothing of the window is its own.
    let boot = tasks
        .get(&qemu_uftrace_engine::tasks::BOOT_TID_BASE)
        .expect("the boot task recorded");
    let after_on = boot
        .iter()
        .skip_while(|r| !(r.kind == RecordType::Event && r.addr == TRACE_ON))
        .filter(|r| r.kind == RecordType::Entry)
        .map(|r| name(r.addr))
        .collect::<Vec<_>>();
    assert!(
        after_on.is_empty(),
        "the boot task's window: {:?}…",
        &after_on[..after_on.len().min(8)]
    );
    check_linux_replay(&dir, "triggers");

    // By command and by signals, in one boot that hangs at its panic (`panic=0`) until
    // stopped. With the instruction clock: its panic loop (interrupts masked, every block
    // translated, no idle) picks a switch up only by the per-block bell.
    let tmp = tempfile::tempdir().expect("temp dir");
    let argv: Vec<String> = argv
        .iter()
        .map(|a| a.replace("panic=-1", "panic=0"))
        .collect();
    let dir = tmp.path().join("linux.data");
    let rec = Recording::start_argv(
        &argv,
        &dir,
        &[
            "--symbols",
            &vmlinux,
            "--clock",
            "insn",
            "--trace=off",
            "--signal",
            "SIGUSR1@trace_on",
            "--signal",
            "SIGUSR2@trace_off",
        ],
    );
    wait_for("the guest runs", || value(&live(&dir), "pid").map(|_| ()));
    trace_ok(&dir, "on", tmp.path());
    rec.wait_records("records in the window", None);
    trace_ok(&dir, "off", tmp.path());
    rec.wait_status("off", "off", |_| true);
    // SAFETY: signals to the record this test started.
    assert_eq!(
        unsafe { libc::kill(rec.child.id() as i32, libc::SIGUSR1) },
        0
    );
    rec.wait_status("on after SIGUSR1", "on", |s| {
        number(s, "trace_windows") == Some(2)
    });
    rec.wait_records("records after SIGUSR1", None);
    assert_eq!(
        unsafe { libc::kill(rec.child.id() as i32, libc::SIGUSR2) },
        0
    );
    rec.wait_status("off after SIGUSR2", "off", |_| true);
    let dir = rec.stop();
    let tasks = task_records(&dir);
    let ons = check_task_windows(&tasks, "command and signals");
    assert!(ons >= 2, "{ons} windows opened");
    check_linux_replay(&dir, "command and signals");
}

/// A Linux boot on two vCPUs (Debian's arm64 kernel on QEMU 10.2.2, which reports
/// interrupts to plugins), off until its `panic`: nothing of the boot before is written,
/// each task's records start with its `qemu:trace_on` edge (an idle vCPU's timer interrupts
/// were written while off, nested ever deeper, seconds before it), and PID 1's window opens
/// at panic's entry with the calls that led there.
#[test]
fn a_linux_boot_switched_on_by_a_trigger_writes_nothing_before_it() {
    let qemu = qemu_uftrace_tests::system_qemu("10.2.2");
    let mut argv = qemu_uftrace_tests::kernel_boot_args_on(&qemu, "cortex-a57");
    argv.extend(["-smp".to_string(), "2".to_string()]);
    let vmlinux = qemu_uftrace_tests::execlog::debian_vmlinux();
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("panic.data");
    let out = common::record_into(
        &dir,
        &[
            "--trace=off".as_ref(),
            "--trace-on-at".as_ref(),
            "panic".as_ref(),
            "--symbols".as_ref(),
            vmlinux.as_os_str(),
        ],
        &argv,
    );
    assert!(out.status.success(), "record: {}", stderr(&out));
    let mut tasks = 0;
    for entry in std::fs::read_dir(&dir).expect("the trace") {
        let path = entry.expect("a file").path();
        if path.extension().is_none_or(|x| x != "dat") {
            continue;
        }
        let recs = decode_all(&std::fs::read(&path).expect("a task file")).expect("records");
        let Some(first) = recs.first() else { continue };
        assert!(
            first.kind == RecordType::Event && first.addr == TRACE_ON,
            "{}: its first record is not qemu:trace_on but {first:?} ({} records)",
            path.display(),
            recs.len()
        );
        tasks += 1;
    }
    assert!(tasks >= 2, "{tasks} tasks recorded");
    // The window is still open when QEMU exits (the panic reboots): PID 1's frames are the
    // entries between its edge and `qemu:opened`.
    // Records keep a kernel address's low 48 bits (uftrace's).
    let syms: std::collections::BTreeMap<u64, String> = (nm_functions(&vmlinux).expect("nm"))
        .into_iter()
        .map(|(a, n)| (a & 0xffff_ffff_ffff, n))
        .collect();
    let recs = records(&dir);
    let opened: Vec<String> = (recs.iter().skip(1))
        .take_while(|r| r.kind == RecordType::Entry)
        .map(|r| syms.get(&r.addr).cloned().unwrap_or_default())
        .collect();
    let marker = recs.get(opened.len() + 1);
    assert!(
        marker.is_some_and(|m| m.kind == RecordType::Event && m.addr == OPENED),
        "no qemu:opened after PID 1's frames: {marker:?}"
    );
    assert!(
        opened.first().map(String::as_str) == Some("kernel_init")
            && opened.last().map(String::as_str) == Some("panic"),
        "PID 1's window opens with {opened:?}"
    );
}

/// Windows switched on at each `hrtimer_interrupt` (and off at the next `do_idle`) of a Linux
/// boot, on arm64 and x86_64 (Debian's kernels, QEMU 10.2.2): each opens inside the timer's
/// interrupt, which the kernel took in its own code on an interrupt stack. The opened frames
/// go on beneath the interrupt's entry: the handlers down to `[irq]`, then the calls it
/// interrupted, named, on the task's stack (the cookie copies it: arm64 by the frame
/// records, x86_64 by the interrupt stack's saved pointer, which ORC reads indirectly). The
/// ERET/IRET that ends the interrupt closes that `[irq]`, at its depth, with no LOST mark.
#[test]
fn a_window_switched_on_inside_a_kernel_interrupt_opens_the_calls_it_interrupted() {
    let qemu = qemu_uftrace_tests::system_qemu("10.2.2");
    let arm64 = qemu_uftrace_tests::kernel_boot_args_on(&qemu, "cortex-a57");
    let qemu_x86 = (system_qemus_x86_64().into_iter())
        .find(|q| q.label == "10.2.2")
        .expect("QEMU 10.2.2 in system_qemus_x86_64")
        .program;
    let x86_64 = qemu_uftrace_tests::amd64_kernel_boot_args_on(
        &qemu_x86,
        "console=ttyS0 panic=-1 nokaslr no_timer_check",
    );
    let boots = [
        (
            "arm64",
            arm64,
            qemu_uftrace_tests::execlog::debian_vmlinux(),
            "el1h_64_irq_handler",
        ),
        (
            "x86_64",
            x86_64,
            qemu_uftrace_tests::cached("kernel-amd64-dbg/vmlinux"),
            "sysvec_apic_timer_interrupt",
        ),
    ];
    let irq = qemu_uftrace_format::pseudo::addr(0);
    for (label, argv, vmlinux, handler) in boots {
        let (_tmp, dir, _) = common::record_argv(
            &argv,
            &[
                "--symbols",
                &vmlinux.to_string_lossy(),
                "--trace=off",
                "--trace-on-at",
                "hrtimer_interrupt",
                "--trace-off-at",
                "do_idle",
            ],
        );
        let syms: std::collections::BTreeMap<u64, String> = (nm_functions(&vmlinux).expect("nm"))
            .into_iter()
            .map(|(a, n)| (a & 0xffff_ffff_ffff, n))
            .collect();
        let name = |a: u64| match a {
            _ if a == irq => "[irq]".to_string(),
            _ => syms.get(&a).cloned().unwrap_or_else(|| format!("{a:#x}")),
        };
        let mut beneath = 0;
        for (tid, recs) in task_records(&dir) {
            let ons = (recs.iter().enumerate())
                .filter(|(_, r)| r.kind == RecordType::Event && r.addr == TRACE_ON)
                .map(|(i, _)| i);
            for on in ons {
                let opened: Vec<&Record> = (recs[on + 1..].iter())
                    .take_while(|r| r.kind == RecordType::Entry)
                    .collect();
                let names: Vec<String> = opened.iter().map(|r| name(r.addr)).collect();
                let Some(k) = names.iter().position(|n| n == "[irq]") else {
                    continue;
                };
                let what = format!("{label}, task {tid}: {names:?}");
                assert_eq!(
                    names.get(k + 1).map(String::as_str),
                    Some(handler),
                    "{what}"
                );
                assert_eq!(names.last().map(String::as_str), Some("hrtimer_interrupt"));
                assert!(
                    names[..k].iter().all(|n| !n.starts_with("0x")),
                    "unnamed beneath [irq]: {what}"
                );
                if k == 0 {
                    continue; // The idle task's first interrupt: nothing beneath.
                }
                beneath += 1;
                // The interrupt's end closes the recovered [irq] at its depth, before any
                // LOST mark or the window's end.
                let after = &recs[on + 1 + opened.len()..];
                let end = after.iter().position(|r| {
                    r.kind == RecordType::Lost
                        || (r.kind == RecordType::Event && r.addr == TRACE_OFF)
                        || (r.kind == RecordType::Exit && r.addr == irq && r.depth as usize == k)
                });
                assert!(
                    end.is_some_and(|i| after[i].kind == RecordType::Exit),
                    "{what}: [irq] not closed by its return, first {:?}",
                    end.map(|i| after[i])
                );
            }
        }
        assert!(
            beneath > 0,
            "{label}: no window opened above interrupted calls"
        );
    }
}

/// A randomised kernel (KASLR) recorded with tracing off and switched on by the command
/// once it waits for its root device (Debian's amd64 kernel, `rootwait` on a disk it does
/// not have: PID 1 sleeps in `prepare_namespace` for ever, the timer ticking). Nothing is
/// translated while off, so the boot's first upper-half block, where the offset is found on
/// a traced boot, is never seen: the offset is found by the kernel's version banner in guest
/// memory (as for a snapshot), at the first block after the switch. Before, that block was
/// taken for the boot's entry and every kernel function was named by a wrong offset.
#[test]
fn a_randomised_kernel_switched_on_by_command_is_named_by_its_banner() {
    common::require("uftrace");
    let qemu = qemu_uftrace_tests::cached("qemu-10.2.2/bin/qemu-system-x86_64")
        .to_string_lossy()
        .into_owned();
    let argv = qemu_uftrace_tests::amd64_kernel_boot_args_on(
        &qemu,
        "console=ttyS0 panic=0 cryptomgr.notests root=/dev/vdz rootwait",
    );
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("kaslr.data");
    let rec = Recording::start_argv(&argv, &dir, &["--trace=off"]);
    wait_for("the kernel waits for its root", || {
        let text = std::fs::read_to_string(&rec.console).unwrap_or_default();
        (text.contains("Waiting for root device") && value(&live(&dir), "pid").is_some())
            .then_some(())
    });
    trace_ok(&dir, "on", tmp.path());
    rec.wait_records("records in the window", None);
    let dir = rec.stop();
    let stats = std::fs::read_to_string(dir.join("plugin.stats")).expect("plugin.stats");
    assert!(stats.contains("kaslr_anchor=linux_banner\n"), "{stats}");
    let offset = stats
        .lines()
        .find_map(|l| l.strip_prefix("kaslr_offset=0x"))
        .and_then(|o| u64::from_str_radix(o, 16).ok())
        .expect("an offset found");
    assert!(offset != 0 && offset % (2 << 20) == 0, "{stats}");
    let d = dir.to_string_lossy();
    let text = qemu_uftrace_tests::replay::uftrace(&["replay", "--no-pager", "-d", &d])
        .expect("uftrace replay");
    // PID 1's frames, taken at its first switch in: it sleeps where the root is awaited.
    assert!(
        text.contains("prepare_namespace() {") && text.contains("msleep() {"),
        "PID 1 is not seen waiting for its root:\n{text:.4000}"
    );
    let bare = text.lines().filter(|l| l.contains("<ffffffff")).count();
    assert_eq!(bare, 0, "kernel code left unnamed:\n{text:.4000}");
}
