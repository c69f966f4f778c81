//! User mode: every QEMU process of a run ends with `record`, even when `record` is killed
//! with SIGKILL. The CLI makes the first QEMU die with it (`PR_SET_PDEATHSIG`), but a guest
//! `fork()` forks QEMU, and the parent-death signal is neither inherited nor tied to
//! `record` (only to the forking thread). So each process watches `record` itself: the
//! first QEMU opens a pidfd of its parent (`record`), which forked children inherit and
//! exec'd images are handed (`record_pidfd=FD`); a thread polls it and, once `record` is
//! gone, finishes (the records reach the staging directory) and ends the process.
//!
//! The descriptor is a guest-visible number: a guest that closes descriptors it did not
//! open (a daemon closing all of them) stops the watch, never the guest. Before acting on a
//! wake-up, the watcher checks the descriptor is still a pidfd.

use std::os::fd::{BorrowedFd, IntoRawFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// The pidfd of `record` (-1: none).
static PIDFD: AtomicI32 = AtomicI32::new(-1);

/// The first QEMU of a run (user mode): watches its parent, `record`.
pub fn start_first() {
    let Some(parent) = rustix::process::getppid() else {
        return;
    };
    let Ok(fd) = rustix::process::pidfd_open(parent, rustix::process::PidfdFlags::empty()) else {
        return;
    };
    // Already gone (re-parented before the pidfd was opened): the parent-death signal the
    // CLI set ends this process.
    if rustix::process::getppid() != Some(parent) {
        return;
    }
    start(fd.into_raw_fd());
}

/// An exec'd image (`record_pidfd=FD`, from the image before it).
pub fn start_inherited(fd: RawFd) {
    if watched_pid(fd).is_some() {
        start(fd);
    }
}

/// In a forked child: the watcher thread did not survive the fork, the descriptor did.
pub fn after_fork() {
    let fd = PIDFD.load(Ordering::Relaxed);
    if fd >= 0 {
        spawn(fd);
    }
}

/// The descriptor to hand to an exec'd image, made to survive the exec (it is close-on-exec
/// otherwise, so that no untraced program inherits it).
pub fn for_exec() -> Option<RawFd> {
    let fd = PIDFD.load(Ordering::Relaxed);
    if fd < 0 {
        return None;
    }
    // SAFETY: our descriptor, open for the process's life (unless the guest closed it, in
    // which case the call fails harmlessly).
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::empty()).ok()?;
    Some(fd)
}

fn start(fd: RawFd) {
    PIDFD.store(fd, Ordering::Relaxed);
    spawn(fd);
}

fn spawn(fd: RawFd) {
    let spawned = crate::state::output::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("uftrace-watch".into())
            .spawn(move || watch(fd))
    });
    if let Err(e) = spawned {
        eprintln!("qemu-uftrace plugin: cannot watch the record command: {e}");
    }
}

/// The process a pidfd refers to (`Some(-1)`: it ended and was reaped), from
/// `/proc/self/fdinfo`; `None` when `fd` is no pidfd (any more).
fn watched_pid(fd: RawFd) -> Option<i64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|p| p.trim().parse().ok())
}

fn watch(fd: RawFd) {
    loop {
        // SAFETY: as in `for_exec`.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let mut fds = [rustix::event::PollFd::new(
            &borrowed,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
    }
    // A pidfd is readable once its process ended (its `Pid:` turns -1 only once it is
    // reaped, which may come later); a descriptor that is no pidfd any more is not ours to
    // act on.
    if watched_pid(fd).is_none() {
        return;
    }
    crate::lifecycle::finish::finish();
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
}
