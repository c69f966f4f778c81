//! Tracing switched on and off while the guest runs (`state::switch` holds the flags).
//!
//! While off, blocks are translated with no call, return or landing instrumentation: only
//! the instruction clock's add (the insn clock keeps counting, so windows line up with a
//! full recording of the same run), a conditional callback on this vCPU's bell word (an
//! inline compare a block: the callback itself runs only when rung) and the
//! `--trace-on-at` functions' callbacks. A switch is `qemu_plugin_reset` called on a vCPU
//! thread: QEMU then, in one exclusive section with every vCPU stopped, flushes every
//! translation, drops our callbacks and calls us back (`entry::register`), where each
//! vCPU's engine writes its edge ([`apply`]) and the callbacks are registered again; the
//! blocks translated from then on carry the new state's instrumentation. So the switch
//! reaches every vCPU (user mode: every thread of the process) at one instant of guest
//! time, and costs one flush and the re-translation of the working set.
//!
//! What asks for a switch: `record` writes `on`/`off` into the switch file (its own
//! `trace on|off` command or a signal); a thread here reads each new write of it (checked
//! every [`POLL`]: a request is an edge, which a trigger may overtake) and, while a
//! switch is due, rings every vCPU's bell word. QEMU moves every scoreboard when it creates a
//! vCPU past their size (user mode: a new thread, on that thread, just before our vCPU init
//! callback), so the poller never writes while a thread is being created: a `clone` with
//! `CLONE_VM` counts as creating from its entry until a vCPU init (or its failed return), and
//! the count and the ring share a lock. The next translation or system call of any thread
//! switches too. A `--trace-on-at`/`--trace-off-at` function's block asks by itself.
//!
//! At a switch on, each vCPU's first block after the flush saves a resync cookie (its
//! registers and stack top) and its engine writes the marker naming it
//! ([`on_capture`]); the CLI unwinds it into the frames open there (`qemu:opened`).

use crate::ffi::{
    qemu_plugin_register_vcpu_tb_exec_cb, qemu_plugin_register_vcpu_tb_exec_cond_cb,
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu, qemu_plugin_tb, CB_NO_REGS, CB_R_REGS,
    COND_NE, INLINE_ADD_U64,
};
use crate::state::config::Config;
use crate::state::switch::{self, OFF_SINCE, OFF_TOTAL, OFF_TRANSLATIONS, SWITCHES, WANTED};
use crate::state::AtBlock;
use crate::vcpu::scoreboard::{self, Scoreboard};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_uint, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// How often the switch file is read.
pub const POLL: Duration = Duration::from_millis(20);

/// Blocks translated after a switch on before giving up on capturing vCPUs that never run.
const CAPTURE_TRANSLATIONS: u64 = 1 << 16;

/// Per vCPU, rung (non-zero) when a switch is due.
static BELL: OnceLock<Scoreboard> = OnceLock::new();
/// A reset was asked of QEMU and its callback has not run yet.
static RESETTING: AtomicBool = AtomicBool::new(false);
/// How a reset is asked for (`entry::register`, which owns the callback).
static RESET: OnceLock<fn()> = OnceLock::new();
/// vCPUs whose first block after a switch on still has to save its cookie.
static CAPTURE_DUE: Mutex<Vec<bool>> = Mutex::new(Vec::new());
static CAPTURING: AtomicBool = AtomicBool::new(false);
static CAPTURE_BUDGET: AtomicU64 = AtomicU64::new(0);
/// vCPUs created so far (system mode: the bell rings those).
static VCPUS: AtomicU64 = AtomicU64::new(0);
/// Tasks switched in since the last switch on (their frames taken then, or by
/// [`on_capture`]); `None` before the first.
static SWITCHED_IN: Mutex<Option<HashSet<u32>>> = Mutex::new(None);
/// Contexts that wrote the last switch on's `qemu:trace_on` edge: those running or waiting
/// then ([`apply`]); one created while off writes it at its first switch-in ([`edge_once`]).
static EDGED: Mutex<Option<HashSet<u32>>> = Mutex::new(None);
/// The switch file (`switch=`), for the poller of a forked child.
static FILE: OnceLock<PathBuf> = OnceLock::new();

/// At install: the state to start in (`trace=off`, or what the switch file says already,
/// for an exec'd image), the bell, the poller. `reset` asks QEMU for a reset.
pub fn install(cfg: &Config, reset: fn()) {
    let _ = RESET.set(reset);
    // Taken before the file is read: a write in between is the poller's to see.
    if let Some(path) = &cfg.switch_file {
        *SEEN.lock().unwrap_or_else(|e| e.into_inner()) = identity(path);
    }
    let on = cfg
        .switch_file
        .as_deref()
        .and_then(read_file)
        .unwrap_or(!cfg.trace_off);
    WANTED.store(on, Ordering::Relaxed);
    switch::set(on, u64::from(on));
    if !on {
        OFF_SINCE.store(switch::since_start(), Ordering::Relaxed);
    }
    let _ = BELL.set(scoreboard::one_word());
    if let Some(path) = &cfg.switch_file {
        let _ = FILE.set(path.clone());
        start_poller(path.clone());
    }
}

/// A vCPU was created (its index; QEMU has grown the scoreboards for it already).
pub fn vcpu_created(index: u32) {
    VCPUS.fetch_max(u64::from(index) + 1, Ordering::AcqRel);
    let mut creating = CREATING.lock().unwrap_or_else(|e| e.into_inner());
    *creating = creating.saturating_sub(1);
}

/// In a forked child (user mode): the poller thread did not survive the fork.
pub fn after_fork() {
    RESETTING.store(false, Ordering::Relaxed);
    // The parent's threads are not here; what the forking thread was creating is not either.
    *CREATING.lock().unwrap_or_else(|e| e.into_inner()) = 0;
    if let Some(path) = FILE.get() {
        start_poller(path.clone());
    }
}

/// The switch file as last read (`identity`): each write replaces it whole (a new inode),
/// so a new identity is a new request. A fork's child keeps its parent's.
static SEEN: Mutex<Option<(u64, i64, i64)>> = Mutex::new(None);

/// Which write of the switch file is there now (inode, modification time), if any.
fn identity(path: &std::path::Path) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.mtime(), m.mtime_nsec()))
}

/// What the switch file asks for: `on` or `off` (anything else: nothing).
fn read_file(path: &std::path::Path) -> Option<bool> {
    match std::fs::read_to_string(path).ok()?.trim() {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

fn start_poller(path: PathBuf) {
    let spawned = crate::state::output::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("uftrace-switch".into())
            .spawn(move || loop {
                std::thread::sleep(POLL);
                // Each request once (an edge): read again at every poll, an old `off` undid
                // every `--trace-on-at` that followed it.
                let now = identity(&path);
                let new = {
                    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
                    std::mem::replace(&mut *seen, now) != now
                };
                if let Some(on) = new.then(|| read_file(&path)).flatten() {
                    WANTED.store(on, Ordering::Release);
                }
                // Again at each poll while due: a ring skipped during a thread's creation.
                if switch::due() {
                    ring();
                }
            })
    });
    if let Err(e) = spawned {
        if let Some(out) = crate::state::OUTPUT.get() {
            out.note_error(format!("switch thread: {e}: tracing cannot be switched"));
        }
    }
}

/// Rings every vCPU's bell, so that the next block any of them runs switches; not while a
/// thread is being created (its vCPU may move the scoreboard).
fn ring() {
    let Some(bell) = BELL.get() else {
        return;
    };
    let creating = CREATING.lock().unwrap_or_else(|e| e.into_inner());
    if *creating > 0 {
        return;
    }
    let n = VCPUS.load(Ordering::Acquire) as u32;
    for i in 0..n {
        bell.for_vcpu(i, false).set(1);
    }
    drop(creating);
}

/// User mode: threads being created (a `clone` with `CLONE_VM` entered, its vCPU not yet
/// initialised), during which QEMU may move the scoreboards.
static CREATING: Mutex<u32> = Mutex::new(0);

thread_local! {
    /// This thread's `clone` that creates a vCPU is under way (until it returns).
    static CLONING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The `clone` and `clone3` numbers of this guest's Linux.
fn clone_numbers() -> (i64, i64) {
    match crate::state::arch_or_default() {
        qemu_uftrace_format::Arch::X86_64 => (56, 435),
        _ => (220, 435),
    }
}

const CLONE_VM: u64 = 0x100;

/// A system call starts (user mode, `a1` its first argument): a thread's creation counts
/// from here; and a switch asked for while this thread ran without translating.
pub fn at_syscall(num: i64, a1: u64) {
    let (clone, clone3) = clone_numbers();
    let flags = if num == clone {
        Some(a1)
    } else if num == clone3 {
        // `struct clone_args` starts with the flags; unreadable: taken as a thread.
        Some(crate::handlers::usermap::with_buf(|b| b.read_le(a1, 8)).unwrap_or(CLONE_VM))
    } else {
        None
    };
    if flags.is_some_and(|f| f & CLONE_VM != 0) {
        *CREATING.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        CLONING.with(|c| c.set(true));
    }
    poke();
}

/// A system call returned `ret` (user mode): a failed thread creation ends here.
pub fn at_syscall_ret(ret: i64) {
    if CLONING.with(|c| c.replace(false)) && ret < 0 {
        let mut creating = CREATING.lock().unwrap_or_else(|e| e.into_inner());
        *creating = creating.saturating_sub(1);
    }
}

/// Whether blocks are translated with our callback: while tracing is on, and while off only
/// to count instructions (`--clock insn`: windows keep the times of a full recording), to
/// find `--trace-on-at` functions, or for the bell where nothing else comes often: a
/// system guest on a QEMU without the discontinuity callback (before 10.2), whose busy
/// vCPU neither idles nor tells us of its interrupts (Debian's arm64 boot computes for 57%
/// of its instructions without a halt: `trace on` waited for its end).
pub fn translates() -> bool {
    switch::active()
        || crate::vcpu::clock::insn_counter().is_some()
        || crate::state::aims::triggers_on()
        || crate::state::lib_aims::triggers_on()
        || crate::state::file_aims::triggers_on()
        || (crate::state::system_mode() && crate::ffi::discontinuity_api().is_none())
}

/// On a vCPU thread (a callback, the translation): asks QEMU for the reset that switches,
/// where one is due and none is under way.
#[inline]
pub fn poke() {
    if !switch::due() || RESETTING.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Some(reset) = RESET.get() {
        reset();
    }
}

/// A block ran while this vCPU's bell was rung.
///
/// # Safety
/// Registered by [`instrument`].
unsafe extern "C" fn on_bell(_vcpu_index: c_uint, _data: *mut c_void) {
    crate::state::guard("a switch", poke);
}

/// A `--trace-on-at` function is entered (R_REGS; `data` is its address, its block's
/// start). The reset that switches every vCPU comes when this block ends, so this vCPU
/// switches itself on here, at the function's first instruction: the block was translated
/// with the instrumentation of tracing on ([`instrument`]), and the stack cookie saved now
/// unwinds into the function and its callers. The function is in its own window then, as
/// uftrace's `trace_on` trigger has it, even where its first block returns (a leaf: the
/// window opened after it, in its caller, before).
///
/// # Safety
/// Registered by [`instrument`] with QEMU_PLUGIN_CB_R_REGS.
unsafe extern "C" fn on_trace_on_at(vcpu_index: c_uint, data: *mut c_void) {
    crate::state::guard("a switch", || {
        if !switch::active() {
            crate::vcpu::with(vcpu_index, |v| switch_on_early(v, vcpu_index, data as u64));
        }
        WANTED.store(true, Ordering::Release);
        poke();
    });
}

/// Contexts whose edge a trigger wrote before the reset ([`switch_on_early`]): its vCPU's,
/// and every one waiting then. The reset's [`apply`] writes none of theirs again.
static EARLY_EDGED: Mutex<Option<HashSet<u32>>> = Mutex::new(None);

/// This vCPU's own switch on, at `pc` ([`on_trace_on_at`]), as the reset's [`apply`] and
/// then a vCPU's first block after it ([`on_capture`]) take it: the edge of the context it
/// ran when tracing went off and of every waiting one, then the task running now (task
/// switches were not followed while off: its switch comes after the edges, as there),
/// then the marker naming the cookie.
fn switch_on_early(v: &mut crate::vcpu::VcpuState, vcpu_index: u32, pc: u64) {
    if std::mem::replace(&mut v.on_early, true) {
        return;
    }
    let now = v.now();
    // Nothing of the off state's blocks: they register no call or return.
    let _ = v.pending.take_jump();
    let _ = v.pending.take();
    let mut early = EARLY_EDGED.lock().unwrap_or_else(|e| e.into_inner());
    let edged = early.get_or_insert_with(HashSet::new);
    v.engine.switch_on(now);
    edged.insert(v.engine.tid());
    crate::state::with_tasks(|t| {
        let waiting = t.switch_on_waiting(&mut v.engine, now, &|tid| edged.contains(&tid));
        edged.extend(waiting);
    });
    if crate::state::system_mode() {
        crate::handlers::running_task::learn_running_task(v, vcpu_index);
    }
    // Processes that started or changed while off, read from the task running now.
    crate::handlers::proc_walk::switched_on(Some(now));
    crate::handlers::proc_walk::at_switch_on(v);
    let tid = v.engine.tid();
    if edged.insert(tid) {
        // A task first seen now.
        v.engine.switch_on(now);
    }
    drop(early);
    open_window(v, tid, pc, now);
}

/// Whether the block (`aims` what starts it) begins a `--trace-off-at` function while
/// tracing is on: translation then takes its landing as any block's, registers
/// [`on_trace_off_at`] and instruments nothing else of it.
pub fn off_trigger_at(aims: AtBlock) -> bool {
    switch::active() && aims.trace_off_at
}

/// Registers [`on_trace_off_at`] on the block at `start`: the caller does so after its
/// landing's callbacks (an entry by a jump into the function is written) and before the
/// clock's add (the switch is timed at the function's first instruction).
///
/// # Safety
/// `tb` is the live handle of the block being translated.
pub unsafe fn register_off_trigger(tb: *mut qemu_plugin_tb, start: u64) {
    unsafe {
        qemu_plugin_register_vcpu_tb_exec_cb(
            tb,
            on_trace_off_at,
            CB_NO_REGS,
            start as usize as *mut c_void,
        )
    };
}

/// A `--trace-off-at` function is entered (its block's first callback after its landing's).
/// Its vCPU switches off here, at the function's first instruction: the entry its call
/// wrote is the window's last record, as `--stop-at`'s is, and nothing of its block is
/// (the block has no other callback). The reset switches the others where their blocks
/// end.
///
/// # Safety
/// Registered by [`register_off_trigger`].
unsafe extern "C" fn on_trace_off_at(vcpu_index: c_uint, _data: *mut c_void) {
    crate::state::guard("a switch", || {
        if switch::active() {
            crate::vcpu::with(vcpu_index, switch_off_early);
        }
        if WANTED.swap(false, Ordering::AcqRel) {
            poke();
        }
    });
}

/// Whether a trigger's early switch off closed the waiting contexts' windows already (the
/// reset's [`apply`] then leaves them).
static EARLY_OFF_WAITING: AtomicBool = AtomicBool::new(false);

/// This vCPU's own switch off at its `--trace-off-at` function ([`on_trace_off_at`]), as
/// the reset's [`apply`] takes it: its frames close and its edge is written, then those of
/// the contexts waiting on no vCPU.
fn switch_off_early(v: &mut crate::vcpu::VcpuState) {
    if std::mem::replace(&mut v.off_early, true) {
        return;
    }
    let now = v.now();
    v.engine.switch_off(now);
    if !EARLY_OFF_WAITING.swap(true, Ordering::AcqRel) {
        crate::state::with_tasks(|t| t.switch_off_waiting(&mut v.engine, now));
    }
    v.engine.flush();
}

/// Inside QEMU's exclusive section of a reset (every vCPU stopped, every translation
/// flushed, our callbacks unregistered): each vCPU's engine writes the edge; the caller
/// registers the callbacks again.
pub fn apply() {
    let want = WANTED.load(Ordering::Acquire);
    let was = switch::active();
    let n = crate::vcpu::capacity() as u32;
    // vCPUs a trigger switched on already (`switch_on_early`): their edge and frames are
    // written, and what their last block left pending is theirs to take.
    let early: Vec<bool> = (0..n)
        .map(|i| crate::vcpu::with(i, |v| std::mem::take(&mut v.on_early)).unwrap_or(false))
        .collect();
    let early_edged = (EARLY_EDGED.lock().unwrap_or_else(|e| e.into_inner()))
        .take()
        .unwrap_or_default();
    // vCPUs a trigger switched off already (`switch_off_early`): their edge is written. Such
    // a reset switches off even where a `trace on` came since (`want` again): that one is
    // due after it, and the next translation asks for it.
    let off_early: Vec<bool> = (0..n)
        .map(|i| crate::vcpu::with(i, |v| std::mem::take(&mut v.off_early)).unwrap_or(false))
        .collect();
    let waiting_off = EARLY_OFF_WAITING.swap(false, Ordering::AcqRel);
    let want = want && !off_early.contains(&true);
    if !want && !was && early.contains(&true) {
        // Switched off again before the reset: a window of one block, closed where the
        // trigger opened it.
        SWITCHES.fetch_add(2, Ordering::AcqRel);
        switch::set(false, switch::windows() + 1);
        let mut waiting_closed = false;
        for i in (0..n).filter(|&i| early[i as usize]) {
            crate::vcpu::with(i, |v| {
                let now = v.now();
                v.engine.switch_off(now);
                if !std::mem::replace(&mut waiting_closed, true) {
                    crate::state::with_tasks(|t| t.switch_off_waiting(&mut v.engine, now));
                }
                v.engine.flush();
            });
        }
    }
    if want != was {
        // Said first: the edges' buffers wake the writer, which rewrites the status at once
        // when it sees a new switch.
        switch::set(want, switch::windows() + u64::from(want));
        SWITCHES.fetch_add(1, Ordering::AcqRel);
        let mut at = None;
        let mut due = Vec::new();
        let mut edged = HashSet::new();
        let mut early_tids = Vec::new();
        for i in 0..n {
            let early = early[i as usize];
            let done = crate::vcpu::with(i, |v| {
                let now = v.now();
                if want && early {
                    edged.insert(v.engine.tid());
                    early_tids.push(v.engine.tid());
                    v.engine.flush();
                    return now;
                }
                if !want && off_early[i as usize] {
                    v.engine.flush();
                    return now;
                }
                // A return's flag or a jump's address left by code of the other state.
                let _ = v.pending.take_jump();
                let _ = v.pending.take();
                if want {
                    v.engine.switch_on(now);
                    edged.insert(v.engine.tid());
                } else {
                    v.engine.switch_off(now);
                }
                v.engine.flush();
                now
            });
            if let Some(now) = done {
                // An OS's tasks waiting on no vCPU close theirs too, or open their window
                // (once, with this one's engine).
                if at.is_none() {
                    crate::vcpu::with(i, |v| {
                        crate::state::with_tasks(|t| {
                            if want {
                                let already = |tid| early_edged.contains(&tid);
                                edged.extend(t.switch_on_waiting(&mut v.engine, now, &already));
                            } else if !waiting_off {
                                t.switch_off_waiting(&mut v.engine, now);
                            }
                        })
                    });
                }
                at.get_or_insert(now);
            }
            // An early vCPU saved its cookie at the trigger.
            due.push(done.is_some() && !early);
        }
        let host = switch::since_start();
        if want {
            let since = OFF_SINCE.swap(u64::MAX, Ordering::AcqRel);
            if since != u64::MAX {
                OFF_TOTAL.fetch_add(host.saturating_sub(since), Ordering::AcqRel);
            }
            *CAPTURE_DUE.lock().unwrap_or_else(|e| e.into_inner()) = due;
            // A trigger's vCPU read the processes already.
            if !early.contains(&true) {
                crate::handlers::proc_walk::switched_on(at);
            }
            edged.extend(early_edged);
            *EDGED.lock().unwrap_or_else(|e| e.into_inner()) = Some(edged);
            {
                let mut seen = SWITCHED_IN.lock().unwrap_or_else(|e| e.into_inner());
                let seen = seen.get_or_insert_with(HashSet::new);
                seen.clear();
                seen.extend(early_tids);
            }
            CAPTURE_BUDGET.store(CAPTURE_TRANSLATIONS, Ordering::Release);
            CAPTURING.store(true, Ordering::Release);
        } else {
            OFF_SINCE.store(host, Ordering::Release);
            CAPTURING.store(false, Ordering::Release);
        }
    }
    if let Some(bell) = BELL.get() {
        for i in 0..VCPUS.load(Ordering::Acquire) as u32 {
            bell.for_vcpu(i, false).set(0);
        }
    }
    RESETTING.store(false, Ordering::Release);
}

/// Whether blocks being translated get [`on_capture`]: after a switch on, until every vCPU
/// saved its cookie (or the budget of translations ran out).
fn capturing() -> bool {
    if !CAPTURING.load(Ordering::Relaxed) {
        return false;
    }
    if CAPTURE_BUDGET.fetch_sub(1, Ordering::Relaxed) <= 1 {
        CAPTURING.store(false, Ordering::Relaxed);
        return false;
    }
    true
}

/// A vCPU's first block after a switch on (R_REGS; `data` is the block's address): the
/// stack cookie of what is open there, and the marker that names it.
///
/// # Safety
/// Registered by [`instrument`] with QEMU_PLUGIN_CB_R_REGS.
unsafe extern "C" fn on_capture(vcpu_index: c_uint, data: *mut c_void) {
    crate::state::guard("a switch on", || {
        {
            let mut due = CAPTURE_DUE.lock().unwrap_or_else(|e| e.into_inner());
            match due.get_mut(vcpu_index as usize) {
                Some(d) if *d => *d = false,
                _ => return,
            }
            if due.iter().all(|d| !d) {
                CAPTURING.store(false, Ordering::Relaxed);
            }
        }
        let pc = data as u64;
        crate::vcpu::with(vcpu_index, |v| {
            // Task switches were not followed while off: the records go to the task
            // running now (the cookie too).
            if crate::state::system_mode() {
                crate::handlers::running_task::learn_running_task(v, vcpu_index);
            }
            // Processes that started or changed while off, read from the task running now.
            crate::handlers::proc_walk::at_switch_on(v);
            let now = v.now();
            let tid = v.engine.tid();
            edge_once(v, tid, now);
            open_window(v, tid, pc, now);
            if let Some(seen) = SWITCHED_IN
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
            {
                seen.insert(tid);
            }
        });
    });
}

/// An OS task was switched in on `vcpu` by the instruction at `pc` (its registers are the
/// arriving task's there, as its switch code restored them): the first time since tracing
/// went on, the frames it has open are taken as a running vCPU's are.
pub fn at_switch_in(v: &mut crate::vcpu::VcpuState, pc: u64) {
    if !switch::active() {
        return;
    }
    let tid = v.engine.tid();
    {
        let mut seen = SWITCHED_IN.lock().unwrap_or_else(|e| e.into_inner());
        // Never switched: the tasks' stacks were followed from the start.
        let Some(seen) = seen.as_mut() else {
            return;
        };
        if !seen.insert(tid) {
            return;
        }
    }
    let now = v.now();
    edge_once(v, tid, now);
    open_window(v, tid, pc, now);
}

/// Task `tid`'s window opens at `pc` with the calls it has open there: its stack cookie,
/// unwound after the run (without one the engine rebuilds the stack as any resync does, at
/// its first return that matches nothing). In the kernel of a Linux guest whose processes
/// are followed, the user-mode calls beneath are taken at its next return to user mode
/// ([`at_return_to_user`]), unwound with its process's files: only for a task whose
/// process's space is known (a kernel thread has none, and never returns to user mode).
fn open_window(v: &mut crate::vcpu::VcpuState, tid: u32, pc: u64, now: u64) {
    let Some(seq) = crate::state::resync_cookie::save(&mut v.regs, tid, pc, now) else {
        return;
    };
    v.engine.opened_by_cookie(now, seq);
    if crate::state::system_mode()
        && crate::handlers::procmaps::enabled()
        && crate::state::isa_or_default().is_task_pointer(pc)
        && v.deltas.running() != 0
    {
        crate::state::resync_cookie::want_user(tid, seq);
    }
}

/// riscv64: vCPU → the task whose SRET made its user-mode part due at the first user block
/// ([`at_user_resume`]), and that part's cookie number.
static USER_DUE: Mutex<Option<HashMap<u32, (u32, u32)>>> = Mutex::new(None);

/// A task returns to user mode at `target` on `vcpu` (the user registers restored but for
/// the stack pointer, which `user_sp` reads): where a window opened while it ran in the
/// kernel, its user-mode calls are saved now, beneath that window's. On riscv64, whose SRET
/// reads no user page, at the first user block there ([`at_user_resume`]).
pub fn at_return_to_user(
    v: &mut crate::vcpu::VcpuState,
    vcpu: u32,
    target: u64,
    user_sp: impl FnOnce(&mut crate::vcpu::VcpuState) -> Option<u64>,
) {
    let tid = v.engine.tid();
    let Some(seq) = crate::state::resync_cookie::take_user_want(tid) else {
        return;
    };
    if crate::handlers::user_resume::due_at(vcpu, target) {
        let mut due = USER_DUE.lock().unwrap_or_else(|e| e.into_inner());
        let displaced = due
            .get_or_insert_with(HashMap::new)
            .insert(vcpu, (tid, seq));
        // Another task due there and preempted before its first user block: its next SRET
        // restores the same user registers.
        if let Some((other, seq)) = displaced.filter(|&(other, _)| other != tid) {
            crate::state::resync_cookie::want_user(other, seq);
        }
        return;
    }
    if let Some(sp) = user_sp(v) {
        let now = v.now();
        crate::state::resync_cookie::save_user(&mut v.regs, tid, seq, target, sp, now);
    }
}

/// riscv64: the first user block at `pc` after an SRET on `vcpu` (`midway::on_user_resume`):
/// the user-mode part due there, if it is this task's (else that task wants it again).
pub fn at_user_resume(v: &mut crate::vcpu::VcpuState, vcpu: u32, pc: u64) {
    let due = (USER_DUE.lock().unwrap_or_else(|e| e.into_inner()).as_mut())
        .and_then(|due| due.remove(&vcpu));
    let Some((tid, seq)) = due else {
        return;
    };
    if tid != v.engine.tid() {
        crate::state::resync_cookie::want_user(tid, seq);
        return;
    }
    if let Some(sp) = v.regs.read_named("sp") {
        let now = v.now();
        crate::state::resync_cookie::save_user(&mut v.regs, tid, seq, pc, sp, now);
    }
}

/// Context `tid`, running on `v`, writes the switch on's `qemu:trace_on` edge where it has
/// not yet (an OS task created while tracing was off), so that each task's window opens
/// with it and its unwound frames are told as `qemu:opened`.
fn edge_once(v: &mut crate::vcpu::VcpuState, tid: u32, now: u64) {
    let mut edged = EDGED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(edged) = edged.as_mut() {
        if edged.insert(tid) {
            v.engine.switch_on(now);
        }
    }
}

/// The block being translated (at `start`, `n` instructions, `aims` what starts it): its
/// switch's instrumentation. Returns true where tracing is off and the block needs nothing
/// else (the caller registers no call's callback).
///
/// # Safety
/// `tb` is the live handle of the block being translated.
pub unsafe fn instrument(tb: *mut qemu_plugin_tb, start: u64, n: usize, aims: AtBlock) -> bool {
    // A thread that translates looks too (user mode: a bell not rung while threads start).
    poke();
    let active = switch::active();
    // While on, a function's entry is rung often enough and costs the other blocks nothing
    // (where the entries are known); while off every block listens.
    let listens =
        !active || !crate::state::entries::active() || crate::state::entries::is_entry(start);
    if let Some(bell) = BELL.get().filter(|_| listens) {
        unsafe {
            qemu_plugin_register_vcpu_tb_exec_cond_cb(
                tb,
                on_bell,
                CB_NO_REGS,
                COND_NE,
                bell.entry(),
                0,
                std::ptr::null_mut(),
            )
        };
    }
    // (`--trace-off-at`'s block is the caller's: [`off_trigger_at`].)
    if !active && aims.trace_on_at {
        // A block's callback, before the clock's add (as [`on_capture`]'s): the switch is
        // timed at the function's entry. The block gets the instrumentation of tracing on,
        // which runs after it: the caller registers it.
        unsafe {
            qemu_plugin_register_vcpu_tb_exec_cb(
                tb,
                on_trace_on_at,
                CB_R_REGS,
                start as usize as *mut c_void,
            )
        };
        OFF_TRANSLATIONS.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    if active {
        if capturing() {
            // A block's callback, registered before the clock's add (the caller registers
            // that after us): the marker is timed before this block, at the count where
            // the registers the cookie saves hold. Timed after it (an instruction's
            // callback runs after every block callback), a block ending in a return put
            // the marker at the return's own count, where a full recording has that frame
            // closed already: the window opened one frame more than it (issue 37).
            unsafe {
                qemu_plugin_register_vcpu_tb_exec_cb(
                    tb,
                    on_capture,
                    CB_R_REGS,
                    start as usize as *mut c_void,
                )
            };
        }
        return false;
    }
    OFF_TRANSLATIONS.fetch_add(1, Ordering::Relaxed);
    if let Some(counter) = crate::vcpu::clock::insn_counter() {
        unsafe {
            qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, INLINE_ADD_U64, counter, n as u64)
        };
    }
    true
}
