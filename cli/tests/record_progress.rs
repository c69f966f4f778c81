//! Progress while recording, in a real terminal (tmux): the plugin's `plugin.status` read by
//! `qemu-uftrace status` from outside, the terminal title that `record` keeps (never a
//! byte of it in the guest's console), `--quiet`, and the final status against the trace.

mod common;

use qemu_uftrace_format::record::{decode_all, RECORD_SIZE};
use qemu_uftrace_tests::{guest_elf, qemu_args, Variant, QEMU};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(180);

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_qemu-uftrace")
}

/// A tmux server of our own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `command` in a fresh 200x50 terminal.
    fn start(command: &str) -> Tmux {
        let socket = format!("qu-progress-{}-{:?}", std::process::id(), Instant::now());
        let socket = socket.replace(|c: char| !c.is_ascii_alphanumeric(), "-");
        let t = Tmux { socket };
        let ok = t
            .cmd()
            .args(["new-session", "-d", "-x", "200", "-y", "50", command])
            .status()
            .expect("run tmux");
        assert!(ok.success(), "tmux new-session failed");
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    fn title(&self) -> String {
        self.output(&["display-message", "-p", "#{pane_title}"])
    }

    /// The terminal's text, with its scrollback.
    fn screen(&self) -> String {
        self.screen_of("0")
    }

    /// The text of window `window`.
    fn screen_of(&self, window: &str) -> String {
        let target = format!(":{window}");
        self.output(&["capture-pane", "-p", "-J", "-S", "-10000", "-t", &target])
    }

    /// Runs `command` in a second terminal (window 1) beside the first.
    fn second(&self, command: &str) {
        let ok = self
            .cmd()
            .args(["new-window", "-d", command])
            .status()
            .expect("run tmux");
        assert!(ok.success(), "tmux new-window failed");
    }

    fn output(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().expect("run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The record command line for the spinning guest, into `dir`, then its status and a wait.
fn record_line(dir: &Path, extra: &[&str]) -> String {
    let elf = guest_elf("spin", Variant::Natural).expect("build the guests");
    let mut words: Vec<String> = vec![bin().into(), "record".into(), "-o".into()];
    words.push(dir.display().to_string());
    words.extend(extra.iter().map(|s| s.to_string()));
    words.push("--".into());
    words.extend(qemu_args(&elf));
    let line: Vec<String> = words.iter().map(|w| quote(w)).collect();
    // The shell stays, so that the terminal's text can be read after the end.
    format!("{} ; echo record-exit=$? ; exec cat", line.join(" "))
}

/// `qemu-uftrace status DIR`'s output and status.
fn status(dir: &Path) -> (bool, String) {
    let out = Command::new(bin())
        .arg("status")
        .arg(dir)
        .output()
        .expect("run status");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn wait_for(what: &str, mut cond: impl FnMut() -> Option<String>) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn key(text: &str, k: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
}

/// The plugin's status file while it records.
fn live_status(dir: &Path) -> String {
    let staging = PathBuf::from(format!("{}.partial", dir.display()));
    std::fs::read_to_string(staging.join("plugin.status")).unwrap_or_default()
}

/// Stops the recording's QEMU (its pid is in the status) as a user's `kill` would.
fn stop_qemu(dir: &Path) {
    let pid = key(&live_status(dir), "pid").expect("a pid in the status") as i32;
    // SAFETY: a signal to the QEMU this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

#[test]
fn the_status_shows_from_outside_and_in_the_title_never_in_the_console() {
    common::require(QEMU);
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("spin.data");
    let tmux = Tmux::start(&record_line(&dir, &[]));
    // From another terminal: a line that counts what the writer wrote so far.
    let line = wait_for("status shows recorded events", || {
        let (ok, out) = status(&dir);
        (ok && out.starts_with("recording ") && !out.contains(": 0 events")).then_some(out)
    });
    assert!(line.contains(" events/s, "), "{line}");
    assert!(line.contains(" guest insns, 1 task"), "{line}");
    let title = wait_for("the title shows the status", || {
        let t = tmux.title();
        t.starts_with("qemu-uftrace: recording ").then_some(t)
    });
    assert!(title.contains(" events ("), "{title}");
    // `status -w` in another terminal: one line rewritten in place, until the end.
    tmux.second(&format!(
        "{} status -w {} ; echo status-exit=$? ; exec cat",
        quote(bin()),
        quote(&dir.display().to_string())
    ));
    wait_for("status -w shows the recording", || {
        let s = tmux.screen_of("1");
        s.contains("recording ").then_some(s)
    });
    stop_qemu(&dir);
    let screen = wait_for("record ends", || {
        let s = tmux.screen();
        s.contains("record-exit=").then_some(s)
    });
    assert!(screen.contains("record-exit=0"), "{screen}");
    assert!(screen.contains("spinning until stopped"), "{screen}");
    // The title's text never reached the console's.
    assert!(!screen.contains("qemu-uftrace: recording"), "{screen}");
    assert!(!screen.contains("guest insns"), "{screen}");
    let written = screen
        .lines()
        .find(|l| l.starts_with("qemu-uftrace: [ record: wrote "))
        .unwrap_or_else(|| panic!("no written line: {screen}"));

    // The last status moved with the trace, and it counts exactly what was written.
    let last = std::fs::read_to_string(dir.join("plugin.status")).expect("plugin.status");
    assert!(last.starts_with("state=done\n"), "{last}");
    let mut bytes = 0;
    let mut tasks = 0;
    let mut last_time = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "dat") {
            let data = std::fs::read(e.path()).unwrap();
            let recs = decode_all(&data).expect("records");
            bytes += data.len() as u64;
            tasks += 1;
            last_time = recs
                .iter()
                .map(|r| r.time)
                .max()
                .unwrap_or(0)
                .max(last_time);
        }
    }
    assert_eq!(key(&last, "bytes"), Some(bytes), "{last}");
    assert_eq!(
        key(&last, "events"),
        Some(bytes / RECORD_SIZE as u64),
        "{last}"
    );
    assert_eq!(key(&last, "tasks"), Some(tasks), "{last}");
    assert_eq!(key(&last, "lost"), Some(0), "{last}");
    // One vCPU on the instruction clock: the last record's time is how far it ran.
    assert_eq!(key(&last, "guest_insns"), Some(last_time), "{last}");
    let records = format!("{} records", (bytes / RECORD_SIZE as u64));
    let grouped = indicatif::HumanCount(bytes / RECORD_SIZE as u64).to_string();
    assert!(
        written.contains(&format!("{grouped} records; 0 lost ]")),
        "{written} ({records})"
    );
    let (ok, out) = status(&dir);
    assert!(ok && out.starts_with("done "), "{out}");
    let watched = wait_for("status -w ends", || {
        let s = tmux.screen_of("1");
        s.contains("status-exit=").then_some(s)
    });
    // The last reading replaced the earlier ones on the same line.
    let lines: Vec<&str> = watched.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{watched}");
    assert!(lines[0].starts_with("done "), "{watched}");
    assert_eq!(lines[1], "status-exit=0", "{watched}");
}

#[test]
fn quiet_leaves_the_title_alone() {
    common::require(QEMU);
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("quiet.data");
    let tmux = Tmux::start(&record_line(&dir, &["--quiet"]));
    // Long enough for the title to have been set twice over.
    wait_for("the plugin has written for 3 s", || {
        (key(&live_status(&dir), "elapsed_ms")? >= 3000).then_some(String::new())
    });
    let title = tmux.title();
    assert!(!title.contains("qemu-uftrace"), "{title}");
    stop_qemu(&dir);
    let screen = wait_for("record ends", || {
        let s = tmux.screen();
        s.contains("record-exit=").then_some(s)
    });
    assert!(screen.contains("record-exit=0"), "{screen}");
    assert!(!tmux.title().contains("qemu-uftrace"));
}

#[test]
fn status_without_a_recording_says_so() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = Command::new(bin())
        .arg("status")
        .arg(tmp.path().join("none.data"))
        .output()
        .expect("run status");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no recording status in"), "{err}");
}
