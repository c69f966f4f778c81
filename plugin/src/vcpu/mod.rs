//! Per-vCPU state, found by index without any global lock.
//!
//! A vCPU's callbacks always run on one thread at a time, so the hot path needs no atomic
//! read-modify-write. The one outsider is exit, which may run on another vCPU's thread (a
//! semihosting exit) while the others still execute. The two sides meet Dekker-style with an
//! asymmetric fence: the hot path marks itself busy with plain stores and checks `CLOSED`
//! behind a compiler fence; exit sets `CLOSED`, then `membarrier()` makes every thread of the
//! process execute a full barrier, after which a vCPU either sees `CLOSED` or exit sees it
//! busy and waits. Where membarrier is unavailable, the hot path takes a real lock instead.

pub mod clock;
pub mod landing;
pub mod scoreboard;
pub mod vectors;
pub mod wall;

use crate::state::guard;
use crate::state::guest::ByteBuf;
use qemu_uftrace_engine::arch::Level;
use qemu_uftrace_engine::hot::Engine;
use std::cell::UnsafeCell;
use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering,
};

/// In C order: what every event reads first, after the slot's flags, then the engine (whose
/// own hot fields come first), so that the common case reads two cache lines of the slot
/// (a test checks the offsets).
#[repr(C)]
pub struct VcpuState {
    /// The clock and pending flag as the common case reads them (`FastWords::NONE`: never).
    pub fast: scoreboard::FastWords,
    /// The wall clock's interpolation by instructions (user mode), which the hot path reads
    /// with `fast`: here, it shares the slot's first cache line (behind the engine it sat on
    /// two more of every event's).
    pub interp: qemu_uftrace_engine::tsc::Interpolated,
    pub engine: Engine,
    /// The clock and the pending flag as the general path reads them.
    pub clock: clock::VcpuClock,
    /// Set by a return instruction until its landing block (or the next event) takes it.
    pub pending: landing::Pending,
    pub regs: ByteBuf,
    /// The privilege level the vCPU runs at, once an exception or its return said.
    pub level: Option<Level>,
    /// The OS task pointer last written on this vCPU (0: none yet), so that rewriting the
    /// same one (every entry from user space) does not take the task table's lock.
    pub task_ptr: u64,
    /// While off with a guest file's `--trace-on-at` (task switches followed for the
    /// translator only): the task pointer last written, which a switch on in user space
    /// takes where no register holds the task there (arm64's `sp_el0` is the user's stack
    /// pointer at EL0).
    pub off_task: u64,
    /// An exception QEMU announced before delivering it (x86).
    pub announced: qemu_uftrace_engine::arch::Announced,
    /// Where exceptions are delivered through, where no register names them (x86).
    pub vectors: vectors::VectorTable,
    /// The value a call's feeding load read, for the call (`handlers::callbacks::on_fed_load`).
    pub fed_target: u64,
    /// The process address space the vCPU runs and the deltas into it from others
    /// (`state::spaces`); read on process code's events only.
    pub deltas: qemu_uftrace_engine::spaces::DeltaCache,
    /// What `handlers::jumps` decided of jumps through a register, per vCPU (as a
    /// thread-local, a TLS lookup per jump).
    pub jump_answers: Box<JumpAnswers>,
    /// The status round (`state::progress::round`) at which this vCPU last handed its
    /// records to the writer outside a full buffer (user mode, at a system call).
    pub handed_round: u64,
    /// Switched on by its own `--trace-on-at` block, before the reset reached the others
    /// (`handlers::switch::apply` leaves it as it is).
    pub on_early: bool,
    /// Switched off by its own `--trace-off-at` block, before the reset reached the others
    /// (`handlers::switch::apply` leaves its edge as it is).
    pub off_early: bool,
}

/// Direct-mapped tables of (jump's address, target, answer) (`handlers::jumps`): entries'
/// then landings'; a jump's address is never 0.
pub type JumpAnswers = [[(u64, u64, u8); JUMP_ANSWERS]; 2];
pub const JUMP_ANSWERS: usize = 64;

impl VcpuState {
    /// How far code at `addr`, translated in space `from`, moves in the space this vCPU
    /// runs (`state::spaces`: a process's code another process translated).
    #[inline(always)]
    pub fn moved(&mut self, from: qemu_uftrace_engine::spaces::SpaceId, addr: u64) -> u64 {
        if from == self.deltas.running() {
            0
        } else {
            self.delta_from(from, addr)
        }
    }

    /// The delta of code at `addr` translated in space `from` (cached per page).
    #[inline(never)]
    fn delta_from(&mut self, from: qemu_uftrace_engine::spaces::SpaceId, addr: u64) -> u64 {
        self.engine.stats.moved_events += 1;
        let to = self.deltas.running();
        self.deltas.delta(from, addr, || {
            crate::state::spaces::with(|s| s.delta(from, to, addr))
        })
    }

    /// A return that landed where no landing block saw it is settled before the next event.
    /// Returns whether one did.
    #[inline(always)]
    pub fn settle(&mut self, now: u64) -> bool {
        let unseen = self.take_unseen_return();
        if unseen {
            self.engine.ret_unseen(now);
        }
        unseen
    }

    /// Whether a return of the guest's is pending, whose landing no block saw (cleared then).
    /// A retpoline's own return (`Engine::take_thunk_return`) is no return of the guest's.
    pub fn take_unseen_return(&mut self) -> bool {
        self.pending.take() && !self.engine.take_thunk_return()
    }

    /// The vCPU runs address space `space` from now on.
    pub fn run_space(&mut self, space: qemu_uftrace_engine::spaces::SpaceId) {
        self.deltas.switch(space);
        // Guest files' -F/-N functions are placed per space (`state::file_aims`).
        self.engine.set_space(space);
        crate::state::spaces::note_running(space);
    }

    /// The time now, on the general path: through the hot path's words where it has them
    /// (the same clock; user mode's words through the API cost two lookups each), else
    /// through the clock.
    #[inline(always)]
    pub fn now(&mut self) -> u64 {
        let last = self.engine.last_time();
        match self.fast.now(&mut self.interp, last) {
            Some(now) => now,
            None => self.clock.now(&mut self.interp, last),
        }
    }

    /// The level the vCPU runs at now, from its status register and the security state it
    /// was in before (one register read).
    pub fn current_level(&mut self, isa: &dyn qemu_uftrace_engine::arch::Isa) -> Option<Level> {
        let status = self.regs.read_named(isa.status_register())?;
        Some(isa.running_level(status, self.level))
    }

    /// Why an exception `what`, taken to `level`, was taken: its syndrome register (none for
    /// an interrupt, nor where the architecture has no such register).
    pub fn syndrome(
        &mut self,
        isa: &dyn qemu_uftrace_engine::arch::Isa,
        what: qemu_uftrace_engine::arch::Discontinuity,
        level: Level,
    ) -> Option<u64> {
        if what != qemu_uftrace_engine::arch::Discontinuity::Exception {
            return None;
        }
        self.regs.read_named(isa.syndrome_register(level)?)
    }
}

thread_local! {
    /// The vCPU this thread runs (user mode: each guest thread is one, on a host thread of
    /// its own), for the callbacks that are not told (translation).
    static THREAD_VCPU: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// This thread runs vCPU `index` (at its init, on its own thread).
pub fn set_thread_vcpu(index: u32) {
    THREAD_VCPU.with(|v| v.set(Some(index)));
}

/// The vCPU this thread runs, once its init said.
pub fn thread_vcpu() -> Option<u32> {
    THREAD_VCPU.with(std::cell::Cell::get)
}

/// One vCPU's state behind its flags, on cache lines of its own.
#[repr(C, align(64))]
pub struct Slot {
    busy: AtomicBool,
    /// [`CLOSED`] and [`EMPTY`]: the hot path tests both with one load, where it would
    /// otherwise also test the state's `Option` (on a cache line no event needs else).
    shut: AtomicU8,
    /// `Some` whenever `shut` lacks [`EMPTY`]: both change together, holding `busy`.
    state: UnsafeCell<Option<VcpuState>>,
}

/// Exit took every vCPU's state; no callback starts again.
const CLOSED: u8 = 1;
/// The slot holds no state (before its vCPU's init, after its thread exited).
const EMPTY: u8 = 2;

// Access to `state` is serialised by the busy/shut handshake.
unsafe impl Sync for Slot {}

/// The slots, as two plain loads on the hot path (no initialisation check). Set once by
/// `init`, before any vCPU exists, and never freed.
static SLOT_PTR: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());
static SLOT_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Whether the cheap handshake is usable (membarrier registered).
static ASYMMETRIC: AtomicBool = AtomicBool::new(false);
/// Whether [`try_with`] may help: the cheap handshake is usable and a vCPU has hot-path
/// words ([`VcpuState::fast`]). Where none has (a system of several vCPUs), it gives up at
/// once instead of finding the slot twice. One flag for both: one test per event.
static FAST_PATH: AtomicBool = AtomicBool::new(false);

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn membarrier(cmd: libc::c_long) -> bool {
    // SAFETY: a plain syscall with no pointers.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        ) == 0
    }
}

pub fn init(capacity: usize) {
    if !slots().is_empty() {
        return;
    }
    ASYMMETRIC.store(
        membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED),
        Ordering::Release,
    );
    let slots: &'static [Slot] = Box::leak(
        (0..capacity.max(1))
            .map(|_| Slot {
                busy: AtomicBool::new(false),
                shut: AtomicU8::new(EMPTY),
                state: UnsafeCell::new(None),
            })
            .collect(),
    );
    SLOT_PTR.store(slots.as_ptr() as *mut Slot, Ordering::Release);
    SLOT_COUNT.store(slots.len(), Ordering::Release);
}

/// Every slot; empty before `init`.
fn slots() -> &'static [Slot] {
    let count = SLOT_COUNT.load(Ordering::Acquire);
    if count == 0 {
        return &[];
    }
    // SAFETY: published by `init` (count after pointer), leaked, never moved or shrunk.
    unsafe { std::slice::from_raw_parts(SLOT_PTR.load(Ordering::Relaxed), count) }
}

/// Slot `index`, if there is one.
#[inline(always)]
fn slot(index: u32) -> Option<&'static Slot> {
    let index = index as usize;
    if index >= SLOT_COUNT.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: a count above `index` was published after the pointer (`init`).
    Some(unsafe { &*SLOT_PTR.load(Ordering::Relaxed).add(index) })
}

/// Runs `f` on the vCPU's state, if it has one (none before init or after exit).
#[inline(always)]
pub fn with<R>(index: u32, f: impl FnOnce(&mut VcpuState) -> R) -> Option<R> {
    // `slot`, without its `Option` (whose pointer the compiler tested for null again).
    let index = index as usize;
    if index >= SLOT_COUNT.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: as in `slot`.
    let slot = unsafe { &*SLOT_PTR.load(Ordering::Relaxed).add(index) };
    if ASYMMETRIC.load(Ordering::Relaxed) {
        slot.busy.store(true, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
    } else {
        lock(&slot.busy);
    }
    if slot.shut.load(Ordering::Relaxed) != 0 {
        slot.busy.store(false, Ordering::Release);
        return None;
    }
    let busy = Busy(&slot.busy);
    // One call of `f`, which the compiler then inlines (two, one per branch, were left out
    // of line once the call was guarded).
    // SAFETY: exit waits while we are busy and we checked it has not closed the slot, or we
    // hold the slot lock; the slot is not EMPTY, so its state is there (`Slot::state`).
    let r = guard("a vCPU callback", || unsafe {
        f((*slot.state.get()).as_mut().unwrap_unchecked())
    });
    drop(busy);
    r
}

/// The hot path's [`with`]: `f` on the vCPU's state, where the slot is reached without a
/// lock (membarrier registered) and holds one; false where it does not, or where `f` says
/// so. Built for callbacks whose `f` calls nothing (`handlers::callbacks`' fast paths),
/// then the whole callback needs no stack frame: on false, they go the general way
/// (through [`with`]), which is left for `f` to have changed nothing.
#[inline(always)]
pub fn try_with(index: u32, f: impl FnOnce(&mut VcpuState) -> bool) -> bool {
    let index = index as usize;
    if index >= SLOT_COUNT.load(Ordering::Acquire) || !FAST_PATH.load(Ordering::Relaxed) {
        return false;
    }
    // SAFETY: as in `slot`.
    let slot = unsafe { &*SLOT_PTR.load(Ordering::Relaxed).add(index) };
    slot.busy.store(true, Ordering::Relaxed);
    compiler_fence(Ordering::SeqCst);
    let done = slot.shut.load(Ordering::Relaxed) == 0
        // SAFETY: as in `with`. A panic is caught as there, and the event taken as done.
        && guard("a vCPU callback", || unsafe {
            f((*slot.state.get()).as_mut().unwrap_unchecked())
        })
        .unwrap_or(true);
    slot.busy.store(false, Ordering::Release);
    done
}

/// Marks a slot free when dropped: also when its callback panicked.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn lock(flag: &AtomicBool) {
    while flag
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
}

/// Installs a vCPU's state (at vCPU init, on that vCPU's thread, before it runs code).
pub fn install(index: u32, state: VcpuState) -> bool {
    let Some(slot) = slot(index) else {
        return false;
    };
    lock(&slot.busy);
    if !state.fast.is_none() && ASYMMETRIC.load(Ordering::Relaxed) {
        FAST_PATH.store(true, Ordering::Relaxed);
    }
    // SAFETY: we hold the slot lock; only this vCPU's thread (this one) and exit use it.
    unsafe { *slot.state.get() = Some(state) };
    slot.shut.fetch_and(!EMPTY, Ordering::Relaxed);
    slot.busy.store(false, Ordering::Release);
    true
}

/// Takes vCPU `index`'s state away (its thread exited), on that vCPU's own thread: no
/// callback of it can run meanwhile; exit, on another thread, may have taken it already.
pub fn remove(index: u32) -> Option<VcpuState> {
    let slot = slot(index)?;
    lock(&slot.busy);
    slot.shut.fetch_or(EMPTY, Ordering::Relaxed);
    // SAFETY: we hold the slot lock; the vCPU's own callbacks run on this thread.
    let state = unsafe { (*slot.state.get()).take() };
    slot.busy.store(false, Ordering::Release);
    state
}

/// Whether vCPU `index` has its state already (a vCPU initialised again).
pub fn is_installed(index: u32) -> bool {
    with(index, |_| ()).is_some()
}

/// How many vCPU slots there are.
pub fn capacity() -> usize {
    SLOT_COUNT.load(Ordering::Acquire)
}

/// Takes every vCPU's state away; later callbacks find nothing and do nothing.
pub fn take_all() -> Vec<(u32, VcpuState)> {
    let slots = slots();
    for slot in slots {
        slot.shut.fetch_or(CLOSED, Ordering::Relaxed);
    }
    fence(Ordering::SeqCst);
    if ASYMMETRIC.load(Ordering::Relaxed) && !membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) {
        // Cannot happen once registered; waiting on `busy` below still covers the lock mode.
        eprintln!("qemu-uftrace plugin: membarrier failed at exit");
    }
    slots
        .iter()
        .enumerate()
        .filter_map(|(i, slot)| {
            // A vCPU in the middle of a callback finishes it; none can start another.
            lock(&slot.busy);
            slot.shut.fetch_or(EMPTY, Ordering::Relaxed);
            // SAFETY: we own `busy` and CLOSED keeps everyone else out.
            let state = unsafe { (*slot.state.get()).take() };
            slot.busy.store(false, Ordering::Release);
            state.map(|s| (i as u32, s))
        })
        .collect()
}
