//! Progress while recording, from the plugin's `plugin.status` (rewritten by its writer
//! thread about once a second): `qemu-uftrace status [DIR]` prints it from another
//! terminal, and `record` shows it in the terminal's title when stderr is a terminal. Never
//! as lines on the terminal: under `-nographic` it is the guest's console.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;
use indicatif::{HumanBytes, HumanCount};

use crate::datadir;
use crate::errors::usage;

/// The plugin's status file (`plugin/src/state/progress.rs` writes it).
pub const STATUS_FILE: &str = "plugin.status";

/// How often a watcher reads the status again (the plugin rewrites it once a second).
const EVERY: Duration = Duration::from_secs(1);

/// One reading of the status, summed over the process images that wrote one (user mode:
/// the guest's exec'd programs have their own under `procs/`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Status {
    /// `recording`, `capped`, `stopped` or `done` (the first image's).
    pub state: String,
    pub pid: Option<u32>,
    pub elapsed_ms: u64,
    pub events: u64,
    pub bytes: u64,
    pub events_per_s: u64,
    pub tasks: u64,
    pub lost: u64,
    /// Known when records are timed by the only vCPU's instructions.
    pub guest_insns: Option<u64>,
    /// Whether tracing is on (`on`/`off`; unknown from an older plugin).
    pub trace: Option<String>,
    /// Tracing windows begun so far (one when it started on), the host time spent off (ns)
    /// and the blocks translated without calls' callbacks while off.
    pub trace_windows: u64,
    pub trace_off_ns: u64,
    pub trace_off_translations: u64,
}

impl Status {
    /// Parses one image's `plugin.status`.
    pub fn parse(text: &str) -> Status {
        let mut s = Status::default();
        for (k, v) in text.lines().filter_map(|l| l.split_once('=')) {
            let n = || v.trim().parse::<u64>().unwrap_or(0);
            match k {
                "state" => s.state = v.trim().to_string(),
                "pid" => s.pid = v.trim().parse().ok(),
                "elapsed_ms" => s.elapsed_ms = n(),
                "events" => s.events = n(),
                "bytes" => s.bytes = n(),
                "events_per_s" => s.events_per_s = n(),
                "tasks" => s.tasks = n(),
                "lost" => s.lost = n(),
                "guest_insns" => s.guest_insns = Some(n()),
                "trace" => s.trace = Some(v.trim().to_string()),
                "trace_windows" => s.trace_windows = n(),
                "trace_off_ns" => s.trace_off_ns = n(),
                "trace_off_translations" => s.trace_off_translations = n(),
                _ => {}
            }
        }
        s
    }

    /// Adds a later process image's counts.
    fn add(&mut self, o: &Status) {
        self.events += o.events;
        self.bytes += o.bytes;
        self.tasks += o.tasks;
        self.lost += o.lost;
        if o.state == "recording" {
            self.events_per_s += o.events_per_s;
        }
    }

    /// Whether the recording is over (the status says so, or its QEMU is gone).
    pub fn finished(&self) -> bool {
        self.state == "done" || !self.alive()
    }

    /// Whether the QEMU that writes it still runs (unknown: assumed so).
    fn alive(&self) -> bool {
        self.pid.is_none_or(|pid| {
            let Ok(pid) = i32::try_from(pid) else {
                return true;
            };
            // SAFETY: signal 0 only asks whether the process exists.
            let r = unsafe { libc::kill(pid, 0) };
            // EPERM: a process that exists but is not ours.
            r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        })
    }

    /// One line: `recording 12.3 s: 1,234,567 events (18.84 MiB), 301,234 events/s, …`.
    pub fn line(&self) -> String {
        let state = if self.state != "done" && !self.alive() {
            "interrupted (its QEMU is gone)"
        } else {
            self.state.as_str()
        };
        let mut line = format!(
            "{state} {:.1} s: {} events ({})",
            self.elapsed_ms as f64 / 1000.0,
            HumanCount(self.events),
            HumanBytes(self.bytes),
        );
        if self.state == "recording" {
            line.push_str(&format!(", {} events/s", HumanCount(self.events_per_s)));
        }
        if let Some(n) = self.guest_insns {
            line.push_str(&format!(", {} guest insns", HumanCount(n)));
        }
        line.push_str(&format!(
            ", {} task{}",
            HumanCount(self.tasks),
            if self.tasks == 1 { "" } else { "s" }
        ));
        if self.lost > 0 {
            line.push_str(&format!(", LOST {}", HumanCount(self.lost)));
        }
        // Only where tracing was ever off: a recording that ran on throughout says nothing.
        if self.trace.as_deref() == Some("off") || self.trace_windows > 1 {
            line.push_str(&format!(
                "; tracing {}, {} window{} so far, off for {:.1} s ({} blocks translated without \
                 calls' callbacks)",
                self.trace.as_deref().unwrap_or("on"),
                self.trace_windows,
                if self.trace_windows == 1 { "" } else { "s" },
                self.trace_off_ns as f64 / 1e9,
                HumanCount(self.trace_off_translations),
            ));
        }
        line
    }
}

/// The directory whose status tells about `dir`: its staging directory while a recording
/// runs, else the published trace (whose status is the last one written).
fn status_dir(dir: &Path) -> Option<PathBuf> {
    let staging = datadir::staging_path(dir);
    [staging, dir.to_path_buf()]
        .into_iter()
        .find(|d| d.join(STATUS_FILE).is_file())
}

/// Reads the status of the recording into `dir` (or of the one that made it).
pub fn read(dir: &Path) -> Option<Status> {
    let at = status_dir(dir)?;
    let mut status = Status::parse(&std::fs::read_to_string(at.join(STATUS_FILE)).ok()?);
    // User mode: the guest's later process images, each with a writer of its own.
    if let Ok(procs) = std::fs::read_dir(at.join("procs")) {
        for p in procs.flatten() {
            if let Ok(text) = std::fs::read_to_string(p.path().join(STATUS_FILE)) {
                status.add(&Status::parse(&text));
            }
        }
    }
    Some(status)
}

/// The last status of a recording whose QEMU is gone. The plugin writes `done` before QEMU
/// exits, but a reading taken just before that, or while `record` moves the staging
/// directory to its place (neither path holds the file for a moment), is not the last one:
/// read again for a short while before calling the recording interrupted.
fn settled(dir: &Path, mut status: Status) -> Status {
    for _ in 0..SETTLE_READS {
        if status.state == "done" {
            break;
        }
        std::thread::sleep(SETTLE_EVERY);
        status = read(dir).unwrap_or(status);
    }
    status
}

/// How long [`settled`] waits for the last status: 40 × 50 ms.
const SETTLE_READS: u32 = 40;
const SETTLE_EVERY: Duration = Duration::from_millis(50);

/// `qemu-uftrace status [DIR] [--watch]`.
pub fn run(dir: &Path, watch: bool) -> Result<i32> {
    let Some(mut status) = read(dir) else {
        return Err(usage(
            format!(
                "no recording status in {} or {} (no {STATUS_FILE})",
                datadir::staging_path(dir).display(),
                dir.display()
            ),
            "give the -o DIR of a recording that runs (or ran) with this qemu-uftrace",
        ));
    };
    let tty = std::io::stdout().is_terminal();
    let mut out = std::io::stdout().lock();
    loop {
        // Asked once per reading, before its line: QEMU may exit between the two, and a
        // watcher must not stop on a line that still says `recording`.
        let finished = status.finished();
        if finished {
            status = settled(dir, status);
        }
        // On a terminal the line is rewritten in place; in a pipe, one line per reading.
        if watch && tty {
            write!(out, "\r\x1b[K{}", status.line())?;
        } else {
            writeln!(out, "{}", status.line())?;
        }
        out.flush()?;
        if !watch || finished {
            break;
        }
        std::thread::sleep(EVERY);
        // Published meanwhile: the last status moved with the trace.
        status = read(dir).unwrap_or(status);
    }
    if watch && tty {
        writeln!(out)?;
    }
    Ok(0)
}

/// The terminal's title kept up to date while QEMU runs; restored when dropped.
pub struct Title {
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Title {
    /// Starts showing the status of the recording in `staging` in the title of the terminal
    /// on stderr; nothing when stderr is not a terminal (or under `--quiet`). The title is
    /// a control sequence the terminal takes, never text in the guest's console.
    pub fn start(staging: &Path, quiet: bool) -> Option<Title> {
        if quiet || !std::io::stderr().is_terminal() {
            return None;
        }
        let staging = staging.to_path_buf();
        let (stop, rx) = channel();
        // xterm's title stack: push the user's title now, pop it back at the end.
        set(b"\x1b[22;2t");
        let thread = std::thread::Builder::new()
            .name("status-title".into())
            .spawn(move || loop {
                if let Some(s) = std::fs::read_to_string(staging.join(STATUS_FILE))
                    .ok()
                    .map(|t| Status::parse(&t))
                {
                    let title = format!("qemu-uftrace: {}", s.line());
                    // Control characters would end the sequence early.
                    let title: String = title.chars().filter(|c| !c.is_control()).collect();
                    set(format!("\x1b]2;{title}\x07").as_bytes());
                }
                match rx.recv_timeout(EVERY) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            })
            .ok()?;
        Some(Title {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Title {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        set(b"\x1b[23;2t");
    }
}

/// Writes a control sequence to stderr in one write (so that it is never split by the
/// guest's console output on the same terminal).
fn set(seq: &[u8]) {
    let _ = std::io::stderr().lock().write_all(seq);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_as_one_line() {
        let s = Status::parse(
            "state=recording\npid=1\nelapsed_ms=12345\nevents=1234567\nbytes=19753072\n\
             events_per_s=301234\ntasks=3\nlost=0\nguest_insns=99000000\n",
        );
        assert_eq!(
            s.line(),
            "recording 12.3 s: 1,234,567 events (18.84 MiB), 301,234 events/s, \
             99,000,000 guest insns, 3 tasks"
        );
        let mut done =
            Status::parse("state=done\nelapsed_ms=2000\nevents=10\nbytes=160\ntasks=1\nlost=7\n");
        assert_eq!(done.line(), "done 2.0 s: 10 events (160 B), 1 task, LOST 7");
        assert!(done.finished());
        // A recording whose QEMU is gone is said so.
        done.state = "recording".into();
        done.pid = Some(u32::MAX >> 1);
        assert!(done.finished());
        assert!(
            done.line().starts_with("interrupted (its QEMU is gone)"),
            "{}",
            done.line()
        );
    }

    /// The race CI met: QEMU gone while its status still said `recording`, the `done`
    /// written a moment later (here: the staging directory moved to its place meanwhile).
    #[test]
    fn a_watcher_whose_qemu_is_gone_waits_for_the_last_status() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("t.data");
        let staging = datadir::staging_path(&dir);
        std::fs::create_dir_all(&staging).unwrap();
        let gone = u32::MAX >> 1;
        let text = move |state: &str| format!("state={state}\npid={gone}\nevents=10\nbytes=160\n");
        std::fs::write(staging.join(STATUS_FILE), text("recording")).unwrap();
        let first = read(&dir).expect("status");
        assert!(first.finished());
        let publish = {
            let (staging, dir) = (staging.clone(), dir.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                std::fs::write(staging.join(STATUS_FILE), text("done")).unwrap();
                std::fs::rename(&staging, &dir).unwrap();
            })
        };
        let last = settled(&dir, first);
        publish.join().unwrap();
        assert_eq!(last.state, "done", "{last:?}");
        // A recording that never wrote `done` stays interrupted.
        std::fs::write(dir.join(STATUS_FILE), text("recording")).unwrap();
        let last = settled(&dir, read(&dir).expect("status"));
        assert!(last.line().starts_with("interrupted"), "{}", last.line());
    }
}
