//! User mode: a guest killed by SIGINT, SIGTERM or SIGHUP keeps its trace.
//!
//! qemu-user leaves those signals at their default action while the guest does (no host
//! handler), so Ctrl-C or a `kill` ended QEMU at once, without the at-exit callback: the
//! records still in the buffers were lost and the trace marked incomplete. Native uftrace
//! keeps everything up to the signal. Here, where QEMU left a signal at its default, a
//! handler takes it: it only writes the signal number to a pipe (async-signal-safe); a
//! watcher thread then does what the at-exit callback does (`finish`, safe while the vCPUs
//! run on) and ends the process with the same signal at its default action, so that the
//! guest dies as it would have and the exit status says so.
//!
//! The handlers are installed at the program's first instruction, after QEMU's own signal
//! set-up, which reads the host's dispositions. A guest that sets its own handler or
//! disposition gets QEMU's, which replaces ours: the guest's semantics never change.

use nix::sys::signal::{kill, sigaction, signal, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::Pid;
use std::sync::atomic::{AtomicI32, Ordering};

const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// The pipe's write end for the handler (-1: none).
static PIPE_W: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_W.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; the byte lives on this stack.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// At the program's first instruction: takes the signals QEMU left at their default.
pub fn install() {
    if start_watcher().is_err() {
        return;
    }
    let ours = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in SIGNALS {
        // Only where QEMU left the default. Asked with libc: nix's `sigaction` always sets
        // one, and setting ours to read QEMU's, then putting QEMU's back, would let a signal
        // meant for the guest reach ours in between.
        // SAFETY: sigaction reading into a struct on this stack.
        let default = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig as libc::c_int, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_DFL
        };
        if default {
            // SAFETY: the handler is async-signal-safe (one write(2)).
            let _ = unsafe { sigaction(sig, &ours) };
        }
    }
}

/// In a forked child: the watcher thread did not survive the fork, and the pipe is shared
/// with the parent. A pipe and a watcher of its own; the handlers were inherited.
pub fn after_fork() {
    let old = PIPE_W.swap(-1, Ordering::Relaxed);
    if old >= 0 {
        // SAFETY: our own descriptor; the parent keeps its copy.
        unsafe { libc::close(old) };
    }
    let _ = start_watcher();
}

fn start_watcher() -> std::io::Result<()> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [r, w] = fds;
    crate::state::output::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("uftrace-signals".into())
            .spawn(move || watch(r))
    })
    .inspect_err(|_| {
        // SAFETY: our own descriptors, never handed out.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
    })?;
    PIPE_W.store(w, Ordering::Relaxed);
    Ok(())
}

fn watch(r: libc::c_int) {
    let mut b = 0u8;
    // SAFETY: reads one byte into a local.
    let n = loop {
        let n = unsafe { libc::read(r, (&mut b as *mut u8).cast(), 1) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n != 1 {
        return;
    }
    let Ok(sig) = Signal::try_from(libc::c_int::from(b)) else {
        return;
    };
    crate::lifecycle::finish::finish();
    // Restores the default action and sends the signal to the whole process; this thread
    // blocks it, so another thread takes it and the process ends as it would have.
    // SAFETY: setting a default action.
    let _ = unsafe { signal(sig, SigHandler::SigDfl) };
    let _ = kill(Pid::this(), sig);
}
