//! What SIGINT, SIGTERM and SIGHUP do to us while a child shares our terminal, and only
//! then. While QEMU runs, Ctrl-C (which the terminal sends to QEMU as well) must stop QEMU,
//! not us, or nobody would assemble the trace; SIGTERM, SIGHUP and a SIGINT that did not
//! come from the terminal (`kill -INT`, `timeout -s INT`) are passed on to QEMU, which then
//! stops as on Ctrl-C. While a viewer (uftrace) runs, Ctrl-C is its own. Once the run has
//! seen its child end (reaped it), each signal does what it does by default again (ends
//! us), so that symbol loading, assembly and `--then` stop like any other program; one
//! that comes between the child's end and then was sent with the child's own, and is
//! dropped.
//!
//! Whose a signal is gets decided in the handler, when the signal arrives: a thread reading
//! the signals later could find the child gone and take the user's Ctrl-C for ours.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::low_level::{self, emulate_default_handler};
use signal_hook::SigId;

/// Which of a scope's signals go on to its child.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Forward {
    Never,
    Always,
    /// Unless the terminal sent it (Ctrl-C: `SI_KERNEL`), which sent it to the child too.
    /// One sent by `kill` to our process group reaches the child twice, which stops it
    /// all the same.
    NotFromTerminal,
}

impl Forward {
    fn passes(self, info: &libc::siginfo_t) -> bool {
        match self {
            Forward::Never => false,
            Forward::Always => true,
            Forward::NotFromTerminal => info.si_code != libc::SI_KERNEL,
        }
    }
}

/// The signals a child's run takes over: each ends us by default.
const TAKEN: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// What QEMU's run passes on to QEMU: every stopping signal but Ctrl-C, which the terminal
/// sends QEMU itself.
const QEMU_FORWARDS: [(i32, Forward); 3] = [
    (SIGTERM, Forward::Always),
    (SIGHUP, Forward::Always),
    (SIGINT, Forward::NotFromTerminal),
];

/// Each signal of [`TAKEN`] we handle at all, with the switch of its default action: true
/// while no child's run takes the signal over.
type Defaults = Vec<(i32, Arc<AtomicBool>)>;

static DEFAULTS: Mutex<Option<Defaults>> = Mutex::new(None);

/// How many live scopes take each signal of [`TAKEN`] (user mode waits on the guest's other
/// processes in a scope around QEMU's run): the default action comes back with the last.
/// Atomics: the handlers read them.
static TAKERS: [AtomicUsize; TAKEN.len()] = [const { AtomicUsize::new(0) }; TAKEN.len()];

/// Counts a scope taking (`+1`) or leaving (`-1`) `sig`; true when none takes it any more.
fn count_taker(sig: i32, delta: isize) -> bool {
    let Some(i) = TAKEN.iter().position(|&s| s == sig) else {
        return true;
    };
    let step = |n: usize| Some(n.saturating_add_signed(delta));
    let before = TAKERS[i]
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, step)
        .unwrap_or(0);
    before.saturating_add_signed(delta) == 0
}

/// Whether a scope other than the one asking takes `sig`. Async-signal-safe.
fn taken_elsewhere(sig: i32) -> bool {
    TAKEN
        .iter()
        .position(|&s| s == sig)
        .is_some_and(|i| TAKERS[i].load(Ordering::SeqCst) > 1)
}

/// Sets up, once, the default action of each signal we take over. signal-hook never puts
/// back the disposition it replaced: once the last action of a signal is unregistered, its
/// handler stays installed and swallows the signal. So the default action is an action too
/// (`register_conditional_default`, which resets the disposition and re-raises), armed
/// whenever no child's run takes the signal. It is registered first, so it runs first. A
/// signal ignored when we started (`nohup` ignores SIGHUP) is left alone: it stays ignored.
fn defaults() -> Result<Defaults> {
    let mut slot = DEFAULTS.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        let mut defaults = Vec::new();
        for sig in TAKEN.into_iter().filter(|&s| !ignored(s)) {
            let armed = Arc::new(AtomicBool::new(true));
            signal_hook::flag::register_conditional_default(sig, Arc::clone(&armed))
                .with_context(|| format!("cannot install the handler of signal {sig}"))?;
            defaults.push((sig, armed));
        }
        *slot = Some(defaults);
    }
    Ok(slot.clone().unwrap_or_default())
}

/// True when `sig` is ignored (SIG_IGN).
fn ignored(sig: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// True when our child `pid` has exited, reaped or not (a zombie, which no signal reaches).
/// A plain syscall, so a signal handler may call it.
fn exited(pid: i32) -> bool {
    // SAFETY: waitid writes into `info` only; WNOWAIT leaves the child to its waiter.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        // An error is ECHILD: reaped already.
        r != 0 || info.si_pid() != 0
    }
}

/// The child of a run, as the signal handlers see it.
struct Child {
    /// Its pid; 0 until it is spawned.
    pid: AtomicI32,
    /// Set once it has been waited for.
    reaped: AtomicBool,
    /// Not our child (a process a guest program forked, whose QEMU was not started by
    /// us): waitid cannot see it, so it counts as running while a signal reaches it.
    foreign: bool,
    /// Foreign children: the signal passed on so far, for each process waited on later.
    pending: AtomicI32,
    /// The last signal passed on to the child (0: none), for what is said of its end.
    forwarded: AtomicI32,
}

/// The handling of our signals during one child's run; dropping it (once the child has
/// been waited for) gives each signal its default action back.
pub struct SignalScope {
    child: Arc<Child>,
    /// The default-action switches of the signals this run takes over.
    armed: Vec<(i32, Arc<AtomicBool>)>,
    /// The run's own actions, unregistered when it ends.
    actions: Vec<SigId>,
}

impl SignalScope {
    /// For QEMU's run: Ctrl-C is left to QEMU; SIGTERM, SIGHUP and a SIGINT from elsewhere
    /// are passed on to it.
    pub fn qemu() -> Result<SignalScope> {
        SignalScope::new(&TAKEN, &QEMU_FORWARDS, false)
    }

    /// For a viewer's run (uftrace, its pager or tui): Ctrl-C is its own; SIGTERM and SIGHUP
    /// still end us.
    pub fn viewer() -> Result<SignalScope> {
        SignalScope::new(&[SIGINT], &[], false)
    }

    /// Around QEMU's run and the wait on processes that are not our children (user mode:
    /// the guest's other processes, each in its own QEMU, which may outlive the first).
    /// Ctrl-C is theirs (the terminal sends it to them too); SIGTERM, SIGHUP and a SIGINT
    /// from elsewhere are passed on to each process named by [`SignalScope::child_started`],
    /// even if they came before. Nothing here ends us: QEMU's own scope, inside, does what
    /// it does.
    pub fn others() -> Result<SignalScope> {
        SignalScope::new(&TAKEN, &QEMU_FORWARDS, true)
    }

    /// Takes over the signals `taken`, passing those in `forwarded` on to the child as it
    /// says. Until the child is started, and once it has exited, a signal does what it does
    /// by default.
    fn new(taken: &[i32], forwarded: &[(i32, Forward)], foreign: bool) -> Result<SignalScope> {
        let child = Arc::new(Child {
            pid: AtomicI32::new(0),
            reaped: AtomicBool::new(false),
            foreign,
            pending: AtomicI32::new(0),
            forwarded: AtomicI32::new(0),
        });
        let mut scope = SignalScope {
            child: Arc::clone(&child),
            armed: Vec::new(),
            actions: Vec::new(),
        };
        for (sig, armed) in defaults()?.into_iter().filter(|(s, _)| taken.contains(s)) {
            let forward = forwarded
                .iter()
                .find(|(s, _)| *s == sig)
                .map_or(Forward::Never, |&(_, f)| f);
            let child = Arc::clone(&child);
            let action = move |info: &libc::siginfo_t| {
                let forward = forward.passes(info);
                let pid = child.pid.load(Ordering::SeqCst);
                if child.foreign {
                    if forward {
                        child.pending.store(sig, Ordering::SeqCst);
                        if pid != 0 {
                            // SAFETY: kill has no memory effects.
                            unsafe { libc::kill(pid, sig) };
                        }
                    }
                } else if pid == 0 {
                    let _ = emulate_default_handler(sig);
                } else if child.reaped.load(Ordering::SeqCst) {
                    // The run has ended. In user mode the scope around this one waits on
                    // the guest's other processes and passes the signal on to them: it
                    // decides (a SIGTERM here, between the first QEMU's end and the wait,
                    // ended us and left the other processes' traces unassembled).
                    if !taken_elsewhere(sig) {
                        let _ = emulate_default_handler(sig);
                    }
                } else if exited(pid) {
                    // The child ended as this signal came, and the run has not seen it yet
                    // (it may have reaped it: no pid to pass a signal on to). A Ctrl-C or
                    // `kill -INT -PGID` reaches QEMU and us together; QEMU may stop, and be
                    // reaped, before this handler runs. The signal was the run's: the
                    // default action here ended us under load, and lost the trace.
                } else if forward {
                    child.forwarded.store(sig, Ordering::SeqCst);
                    // SAFETY: kill has no memory effects.
                    unsafe {
                        libc::kill(pid, sig);
                    }
                }
            };
            // SAFETY: the action only reads atomics and makes async-signal-safe syscalls
            // (waitid, kill, and sigaction and raise in emulate_default_handler).
            let id = unsafe { signal_hook_registry::register_sigaction(sig, action) }
                .with_context(|| format!("cannot install the handler of signal {sig}"))?;
            scope.actions.push(id);
            // The run's action now stands in for the default one.
            count_taker(sig, 1);
            armed.store(false, Ordering::SeqCst);
            scope.armed.push((sig, armed));
        }
        Ok(scope)
    }

    /// The child runs as process `pid`.
    pub fn child_started(&self, pid: u32) {
        self.child.pid.store(pid as i32, Ordering::SeqCst);
        let pending = self.child.pending.load(Ordering::SeqCst);
        if self.child.foreign && pending != 0 {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(pid as i32, pending) };
        }
    }

    /// The last signal passed on to the child, if any.
    pub fn forwarded(&self) -> Option<i32> {
        Some(self.child.forwarded.load(Ordering::SeqCst)).filter(|&s| s != 0)
    }

    /// The child has been waited for: signals from now on are ours.
    pub fn child_reaped(&self) {
        self.child.reaped.store(true, Ordering::SeqCst);
    }
}

impl Drop for SignalScope {
    fn drop(&mut self) {
        self.child_reaped();
        // A signal no other live scope takes gets its default first, then the run's actions
        // go: no signal falls in between. One another scope takes stays counted as ours
        // until our action is gone, so that the action leaves it to that scope to the end.
        let mut still_taken = Vec::new();
        for (sig, a) in &self.armed {
            if taken_elsewhere(*sig) {
                still_taken.push(*sig);
            } else if count_taker(*sig, -1) {
                a.store(true, Ordering::SeqCst);
            }
        }
        for id in self.actions.drain(..) {
            low_level::unregister(id);
        }
        for sig in still_taken {
            count_taker(sig, -1);
        }
    }
}
