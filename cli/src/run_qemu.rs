//! Running QEMU with the terminal left to it: stdin and stdout inherited (so `-nographic`
//! consoles work), its messages (stderr) passed on to ours as they come, the first lines
//! kept to name QEMU's complaint should it fail; Ctrl-C reaching QEMU rather than killing us,
//! SIGTERM, SIGHUP and a SIGINT from elsewhere than the terminal forwarded (for the run
//! only: [`crate::signal_scope`]), QEMU's exit status kept, and the signal it was stopped by.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::signal_scope::SignalScope;

/// How QEMU ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QemuExit {
    /// wait()-style status, for the info file.
    pub wait_status: i32,
    /// Our exit status: QEMU's code, or 128 + signal.
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// The signal QEMU was told to stop by, when it then exited by itself (as QEMU does on
    /// SIGINT, SIGTERM and SIGHUP): one we passed on, or one QEMU names
    /// ("terminating on signal 15").
    pub stopped_by: Option<i32>,
    pub elapsed: Duration,
    /// The first lines QEMU wrote to stderr.
    pub said: Vec<String>,
}

/// A child's status as a shell would pass it on: its code, or 128 + the signal that killed it.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

impl QemuExit {
    pub fn from_status(status: ExitStatus, elapsed: Duration) -> Self {
        let (wait_status, signal) = match (status.code(), status.signal()) {
            (Some(code), _) => ((code & 0xff) << 8, None),
            (None, Some(sig)) => (sig, Some(sig)),
            (None, None) => (0, None),
        };
        QemuExit {
            wait_status,
            exit_code: exit_code(status),
            signal,
            stopped_by: None,
            elapsed,
            said: Vec::new(),
        }
    }

    /// True when QEMU ended with an error (a status other than 0, or a signal).
    pub fn failed(&self) -> bool {
        self.exit_code != 0
    }

    /// What QEMU said was wrong: its first message that is not a warning (QEMU prints
    /// `qemu-system-aarch64: unsupported machine type: "x"`, then a hint).
    pub fn complaint(&self) -> Option<&str> {
        let said = || self.said.iter().map(|l| l.trim()).filter(|l| !l.is_empty());
        said()
            .find(|l| !l.contains("warning:"))
            .or_else(|| said().next())
    }

    /// The signal that ended QEMU, whether it killed QEMU or QEMU stopped on it.
    pub fn ended_by_signal(&self) -> Option<i32> {
        self.signal.or(self.stopped_by).or_else(|| {
            self.said.iter().find_map(|l| {
                let (_, rest) = l.split_once("terminating on signal ")?;
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
        })
    }

    /// `exited with code 3`, `killed by signal 9`.
    pub fn describe(&self) -> String {
        match self.signal {
            Some(sig) => format!("killed by signal {sig}"),
            None => format!("exited with code {}", self.exit_code),
        }
    }
}

/// In the child, before exec: QEMU gets SIGTERM when we die, even by SIGKILL, so that it
/// stops (its plugin flushing into the staging directory, which the next `record` into the
/// same directory reports) instead of running on unwatched. The signal goes with the thread
/// that spawned QEMU, which is the one that waits for it. A parent already gone before the
/// setting took effect is caught by comparing the parent's pid.
fn die_with_parent(parent: libc::pid_t) {
    // SAFETY: plain syscalls with no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        if libc::getppid() != parent {
            libc::raise(libc::SIGTERM);
        }
    }
}

/// Whether QEMU can be run with the host's address randomisation off (user mode: the same
/// guest layout, hence the same instruction counts, in every run). Tried here, in the parent
/// and undone at once, because a container's seccomp profile may refuse the flag and the
/// child could not say so; refused, it warns once.
pub fn can_fix_layout() -> bool {
    const QUERY: libc::c_ulong = 0xffff_ffff;
    // SAFETY: personality takes and returns plain integers.
    let old = unsafe { libc::personality(QUERY) };
    let flag = libc::ADDR_NO_RANDOMIZE as libc::c_int;
    // SAFETY: as above.
    let set = old != -1 && unsafe { libc::personality((old | flag) as libc::c_ulong) } != -1;
    if set {
        // SAFETY: as above; the persona we had.
        unsafe { libc::personality(old as libc::c_ulong) };
    } else {
        crate::errors::warn_early(format!(
            "cannot turn the host's address randomisation off for QEMU ({}): the guest's \
             addresses, and --clock insn's counts, may differ from run to run (--aslr says \
             that is wanted)",
            std::io::Error::last_os_error()
        ));
    }
    set
}

/// In the child, before exec: no address randomisation for what it execs (QEMU), whose
/// guest mappings then land where they landed last time. A refusal was reported by
/// [`can_fix_layout`].
fn fix_layout() {
    // SAFETY: plain syscalls with integer arguments.
    unsafe {
        let old = libc::personality(0xffff_ffff);
        if old != -1 {
            libc::personality((old | libc::ADDR_NO_RANDOMIZE as libc::c_int) as libc::c_ulong);
        }
    }
}

/// Runs `program` with `args` and waits for it; `fixed_layout`: with the host's address
/// randomisation off ([`can_fix_layout`]); `tunables`: QEMU's `GLIBC_TUNABLES`
/// (`qemu_uftrace_engine::arena`).
pub fn run(
    program: &Path,
    args: &[OsString],
    fixed_layout: bool,
    tunables: Option<&std::ffi::OsStr>,
) -> Result<QemuExit> {
    // Handlers, not an ignored disposition, which exec would pass on to QEMU: Ctrl-C must
    // still stop QEMU (which then runs the plugin's exit hook).
    let scope = SignalScope::qemu()?;
    let started = Instant::now();
    // SAFETY: getpid cannot fail.
    let parent = unsafe { libc::getpid() };
    let (stderr_in, stderr_out) =
        std::io::pipe().context("cannot make a pipe for QEMU's stderr")?;
    let mut cmd = duct::cmd(program, args);
    if let Some(t) = tunables {
        cmd = cmd.env(qemu_uftrace_engine::arena::NAME, t);
    }
    let handle = cmd
        .unchecked()
        .stderr_file(stderr_out)
        .before_spawn(move |cmd| {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl, getppid, raise and personality are async-signal-safe, as
            // pre_exec requires.
            unsafe {
                cmd.pre_exec(move || {
                    die_with_parent(parent);
                    if fixed_layout {
                        fix_layout();
                    }
                    Ok(())
                })
            };
            Ok(())
        })
        .start()
        .with_context(|| format!("cannot start {}", program.display()))?;
    if let Some(&pid) = handle.pids().first() {
        scope.child_started(pid);
    }
    let relay = Relay::start(stderr_in);
    let waited = handle.wait().map(|o| o.status);
    let elapsed = started.elapsed();
    scope.child_reaped();
    let forwarded = scope.forwarded();
    // From here on our signals have their default actions.
    drop(scope);
    let status = waited.with_context(|| format!("cannot wait for {}", program.display()))?;
    let mut exit = QemuExit::from_status(status, elapsed);
    exit.said = relay.finish();
    exit.stopped_by = forwarded;
    Ok(exit)
}

/// How many of QEMU's first stderr lines are kept, and how long each may be.
const KEPT_LINES: usize = 16;
const KEPT_LINE_BYTES: usize = 1024;

/// A thread that copies QEMU's stderr to ours as it comes and keeps its first lines.
struct Relay {
    kept: Arc<Mutex<Vec<String>>>,
    done: mpsc::Receiver<()>,
}

impl Relay {
    fn start(mut from: std::io::PipeReader) -> Relay {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let (tx, done) = mpsc::channel();
        let lines = Arc::clone(&kept);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            let mut line = Vec::new();
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                // Our stderr gone (a closed terminal) must not stop QEMU: keep draining.
                let _ = std::io::stderr().write_all(&buf[..n]);
                let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
                for &b in &buf[..n] {
                    if lines.len() >= KEPT_LINES {
                        break;
                    }
                    if b == b'\n' {
                        lines.push(String::from_utf8_lossy(&line).into_owned());
                        line.clear();
                    } else if line.len() < KEPT_LINE_BYTES {
                        line.push(b);
                    }
                }
            }
            if !line.is_empty() {
                let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
                if lines.len() < KEPT_LINES {
                    lines.push(String::from_utf8_lossy(&line).into_owned());
                }
            }
            let _ = tx.send(());
        });
        Relay { kept, done }
    }

    /// The lines kept, once QEMU's stderr is closed. A process QEMU started may hold it
    /// open past QEMU's exit: then the thread keeps copying, and we take what came so far.
    fn finish(self) -> Vec<String> {
        let _ = self.done.recv_timeout(Duration::from_secs(1));
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_signals_map_like_a_shell() {
        let e = QemuExit::from_status(ExitStatus::from_raw(3 << 8), Duration::ZERO);
        assert_eq!((e.exit_code, e.wait_status), (3, 3 << 8));
        let e = QemuExit::from_status(ExitStatus::from_raw(9), Duration::ZERO);
        assert_eq!((e.exit_code, e.wait_status, e.signal), (137, 9, Some(9)));
        assert_eq!(e.describe(), "killed by signal 9");
        assert_eq!(e.ended_by_signal(), Some(9));
        // QEMU stops on SIGTERM by itself, with status 0, and says so.
        let mut e = QemuExit::from_status(ExitStatus::from_raw(0), Duration::ZERO);
        assert_eq!(e.ended_by_signal(), None);
        e.said = vec!["qemu-system-aarch64: terminating on signal 15 from pid 7 (x)".into()];
        assert_eq!(e.ended_by_signal(), Some(15));
        e.stopped_by = Some(2);
        assert_eq!(e.ended_by_signal(), Some(2));
    }

    #[test]
    fn runs_and_reports_status() {
        let e = run(
            Path::new("/bin/sh"),
            &["-c".into(), "exit 7".into()],
            false,
            None,
        )
        .unwrap();
        assert_eq!(e.exit_code, 7);
        assert!(e.failed() && e.said.is_empty() && e.complaint().is_none());
    }

    #[test]
    fn names_the_first_complaint_that_is_no_warning() {
        let script = "echo 'q: warning: old option' >&2; echo >&2; \
                      printf 'q: unsupported machine type: \"x\"\\nUse -machine help\\n' >&2; \
                      exit 1";
        let e = run(
            Path::new("/bin/sh"),
            &["-c".into(), script.into()],
            false,
            None,
        )
        .unwrap();
        assert_eq!(e.said.len(), 4, "{:?}", e.said);
        assert_eq!(e.complaint(), Some(r#"q: unsupported machine type: "x""#));
        let e = run(
            Path::new("/bin/sh"),
            &["-c".into(), "echo 'q: warning: w' >&2".into()],
            false,
            None,
        )
        .unwrap();
        assert!(!e.failed());
        assert_eq!(e.complaint(), Some("q: warning: w"));
    }
}
