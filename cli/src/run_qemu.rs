//! Running QEMU with the terminal left to it: stdin, stdout and stderr inherited (so
//! `-nographic` consoles work), Ctrl-C reaching QEMU rather than killing us, SIGTERM and
//! SIGHUP forwarded (for the run only: [`crate::signal_scope`]), QEMU's exit status kept.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::signal_scope::SignalScope;

/// How QEMU ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QemuExit {
    /// wait()-style status, for the info file.
    pub wait_status: i32,
    /// Our exit status: QEMU's code, or 128 + signal.
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub elapsed: Duration,
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
            elapsed,
        }
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

/// Runs `program` with `args` and waits for it.
pub fn run(program: &Path, args: &[OsString]) -> Result<QemuExit> {
    // Handlers, not an ignored disposition, which exec would pass on to QEMU: Ctrl-C must
    // still stop QEMU (which then runs the plugin's exit hook).
    let scope = SignalScope::qemu()?;
    let started = Instant::now();
    // SAFETY: getpid cannot fail.
    let parent = unsafe { libc::getpid() };
    let handle = duct::cmd(program, args)
        .unchecked()
        .before_spawn(move |cmd| {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl, getppid and raise are async-signal-safe, as pre_exec requires.
            unsafe {
                cmd.pre_exec(move || {
                    die_with_parent(parent);
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
    let waited = handle.wait().map(|o| o.status);
    let elapsed = started.elapsed();
    scope.child_reaped();
    // From here on our signals have their default actions.
    drop(scope);
    let status = waited.with_context(|| format!("cannot wait for {}", program.display()))?;
    Ok(QemuExit::from_status(status, elapsed))
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
    }

    #[test]
    fn runs_and_reports_status() {
        let e = run(Path::new("/bin/sh"), &["-c".into(), "exit 7".into()]).unwrap();
        assert_eq!(e.exit_code, 7);
    }
}
