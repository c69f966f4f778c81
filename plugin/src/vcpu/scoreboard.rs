//! Per-vCPU words that inline ops update (the instruction counter, the pending-return flag),
//! as callbacks read and write them. Both live in one 16-byte scoreboard element, so that
//! an event finds them on one cache line.
//!
//! A machine with one vCPU reaches its words through a pointer taken at vCPU init: QEMU
//! moves a scoreboard only when it creates a vCPU past the scoreboard's size, which one vCPU
//! never is. With several (and in user mode, where threads create vCPUs while others run),
//! a vCPU created late can make QEMU reallocate every scoreboard between two events of a
//! running vCPU, before any plugin callback could tell it: those go through the API, which
//! finds the word where it is now, or (user mode's hot path) under a base taken again at
//! every translation (`MOVING_BASE`).

use qemu_uftrace_engine::tsc::Interpolated;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::ffi::{
    qemu_plugin_scoreboard_find, qemu_plugin_scoreboard_new, qemu_plugin_u64, qemu_plugin_u64_get,
    qemu_plugin_u64_set,
};

/// One zero-initialised u64 per vCPU.
pub struct Scoreboard(qemu_plugin_u64);

/// The flag's value while a return is pending. A jump through a register stores its own
/// address (never 0 or 1) instead: conditional callbacks on blocks where such a jump
/// matters find it (`handlers::jumps`), and everything else takes it for no return.
pub const RETURN: u64 = 1;

/// The words every event reads, in one scoreboard: `[instruction counter, pending flag]`.
pub fn clock_and_pending() -> (Scoreboard, Scoreboard) {
    // SAFETY: plain allocation of two zeroed u64 per vCPU; elements are 16-byte aligned
    // (GArray's malloc), so a vCPU's two words never straddle a cache line.
    let score = unsafe { qemu_plugin_scoreboard_new(16) };
    (
        Scoreboard(qemu_plugin_u64 { score, offset: 0 }),
        Scoreboard(qemu_plugin_u64 { score, offset: 8 }),
    )
}

/// A word per vCPU of its own (a rare flag, apart from the hot ones).
pub fn one_word() -> Scoreboard {
    // SAFETY: plain allocation of one zeroed u64 per vCPU.
    let score = unsafe { qemu_plugin_scoreboard_new(8) };
    Scoreboard(qemu_plugin_u64 { score, offset: 0 })
}

// The scoreboard is QEMU's and built for concurrent per-vCPU use.
unsafe impl Send for Scoreboard {}
unsafe impl Sync for Scoreboard {}

impl Scoreboard {
    /// The entry that inline ops name.
    pub fn entry(&self) -> qemu_plugin_u64 {
        self.0
    }

    /// How vCPU `vcpu_index` reaches its word; `self` lives in a static.
    pub fn for_vcpu(&'static self, vcpu_index: u32, direct: bool) -> VcpuWord {
        if direct {
            // SAFETY: a live scoreboard, sized for this vCPU before its init; the offset is
            // within its element.
            VcpuWord::Direct(unsafe {
                (qemu_plugin_scoreboard_find(self.0.score, vcpu_index) as *mut u8)
                    .add(self.0.offset)
            } as *mut u64)
        } else {
            VcpuWord::Api(self, vcpu_index)
        }
    }
}

/// Where the `clock_and_pending` scoreboard's elements start now, for vCPUs whose words may
/// move (user mode). QEMU grows scoreboards only with every vCPU stopped (`start_exclusive`,
/// when a vCPU index reaches the allocation) and flushes every translation in that same
/// exclusive section: no instrumented code runs again before a block is translated anew.
/// So each translation takes the base again (`refresh_base`), and an
/// event's element is `base + index * 16`, read afresh by every event. Null: not known yet.
static MOVING_BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
/// The `clock_and_pending` scoreboard whose base `MOVING_BASE` holds (null: none).
static MOVING: AtomicPtr<crate::ffi::qemu_plugin_scoreboard> = AtomicPtr::new(std::ptr::null_mut());

/// Takes `pending`'s scoreboard as the one whose base user-mode events read.
pub fn track_moving(pending: &Scoreboard) {
    MOVING.store(pending.0.score, Ordering::Relaxed);
}

/// Takes the base of the tracked scoreboard again; at translation only, when a vCPU exists
/// (QEMU asserts the index is below the vCPU count). Translations never overlap a growth
/// (that waits for every vCPU to leave its execution loop, where translation runs) and are
/// serialised among themselves (QEMU's translation lock); the lock here keeps the read and
/// the store one step all the same.
pub fn refresh_base() {
    static REFRESH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let score = MOVING.load(Ordering::Relaxed);
    if score.is_null() {
        return;
    }
    let _one = REFRESH.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a live scoreboard; vCPU 0 exists once any vCPU does.
    let base = unsafe { qemu_plugin_scoreboard_find(score, 0) } as *mut u8;
    if MOVING_BASE.load(Ordering::Relaxed) != base {
        MOVING_BASE.store(base, Ordering::Relaxed);
    }
}

/// One vCPU's whole `[instruction counter, pending flag]` element and its time, as the hot
/// path reads them: a direct element with the instruction counter (one vCPU, system mode),
/// or the element under `MOVING_BASE` (user mode) with the time from [`TimeFrom`]. One
/// word, as the system-mode slot layout was laid out for: 0 is none, an element's address
/// (16-byte aligned) is direct, `index * 16 | TimeFrom` is under the moving base.
#[derive(Clone, Copy)]
pub struct FastWords(usize);

// As VcpuWord.
unsafe impl Send for FastWords {}

/// Where a moving element's time comes from (the low bits of its [`FastWords`]).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum TimeFrom {
    /// The TSC, read at every event.
    Tsc = 1,
    /// The element's instruction counter.
    Counter = 2,
    /// The TSC interpolated by the counter (`Interpolated`).
    Interpolated = 3,
}

impl FastWords {
    /// Every event takes the general path.
    pub const NONE: FastWords = FastWords(0);

    /// Whether every event takes the general path.
    pub fn is_none(self) -> bool {
        self.0 == 0
    }

    /// `counter` is the direct counter word of `clock_and_pending`, the flag right after it.
    pub fn at_counter(counter: VcpuWord) -> FastWords {
        match counter {
            VcpuWord::Direct(p) if (p as usize) & 15 == 0 => FastWords(p as usize),
            _ => FastWords::NONE,
        }
    }

    /// vCPU `vcpu_index`'s element under the moving base, its time from `time`.
    pub fn moving(vcpu_index: u32, time: TimeFrom) -> FastWords {
        FastWords((vcpu_index as usize * 16) | time as usize)
    }

    /// The element and where its time comes from (the tag: 0 for a direct element, whose
    /// counter is the time), or none (the general path decides).
    #[inline(always)]
    fn element(self) -> Option<(*mut u64, usize)> {
        let tag = self.0 & 3;
        if tag == 0 {
            // A direct element, valid as `VcpuWord::Direct`.
            return (self.0 != 0).then_some((self.0 as *mut u64, 0));
        }
        let base = MOVING_BASE.load(Ordering::Relaxed);
        if base.is_null() {
            return None;
        }
        // SAFETY: the base is the current one (`MOVING_BASE`) and the scoreboard holds this
        // vCPU (QEMU grew it before the vCPU's init).
        Some((unsafe { base.add(self.0 & !3) } as *mut u64, tag))
    }

    /// The element and the time, or none (the general path decides).
    #[inline(always)]
    fn words(self, interp: &mut Interpolated, last: u64) -> Option<(*mut u64, u64)> {
        let (p, tag) = self.element()?;
        if tag == TimeFrom::Tsc as usize {
            return Some((p, tsc_time(last)?));
        }
        // SAFETY: an element of this vCPU (`element`).
        let insns = unsafe { p.read_volatile() };
        let now = if tag == TimeFrom::Interpolated as usize {
            interp.at(insns, last, || super::wall::fast_wall_ns().unwrap_or(last))
        } else {
            insns
        };
        Some((p, now))
    }

    /// The element and the time where reading them calls nothing and changes nothing: a
    /// direct element, or a moving one with its counter or the interpolation between two
    /// reads of the TSC; `None` (the general path decides) for the TSC itself, or where
    /// the interpolation reads it again.
    #[inline(always)]
    fn words_without_calls(self, interp: &Interpolated, last: u64) -> Option<(*mut u64, u64)> {
        let (p, tag) = self.element()?;
        if tag == TimeFrom::Tsc as usize {
            return None;
        }
        // SAFETY: an element of this vCPU (`element`).
        let insns = unsafe { p.read_volatile() };
        if tag == TimeFrom::Interpolated as usize {
            return interp.at_fast(insns, last).map(|now| (p, now));
        }
        Some((p, insns))
    }

    /// A call's time where the hot path reads it without calling anything (see
    /// [`FastWords::words_without_calls`]), and no return is pending (else `None`, with
    /// nothing changed). A pending jump is cleared, as [`FastWords::read`] does (aarch64's
    /// switch tables leave one before many a call).
    #[inline(always)]
    pub fn call_time(self, interp: &Interpolated, last: u64) -> Option<u64> {
        let (w, now) = self.words_without_calls(interp, last)?;
        // SAFETY: an element of this vCPU (`words`).
        let flag = unsafe { w.add(1).read_volatile() };
        if flag == RETURN {
            return None;
        }
        if flag != 0 {
            // SAFETY: as above.
            unsafe { w.add(1).write_volatile(0) };
        }
        Some(now)
    }

    /// A landing's time where the hot path reads it without calling anything (see
    /// [`FastWords::words_without_calls`]), and the flag's word, which the landing clears
    /// once it has taken the return; `None` changes nothing.
    #[inline(always)]
    pub fn landing_time(self, interp: &Interpolated, last: u64) -> Option<(u64, *mut u64)> {
        let (w, now) = self.words_without_calls(interp, last)?;
        // SAFETY: the flag follows the counter in the element (`clock_and_pending`).
        Some((now, unsafe { w.add(1) }))
    }

    /// The time and whether a return is pending, when the hot path may read them. `last`:
    /// the engine's last time, which a wall-clock time is kept from going back before;
    /// `interp`: the vCPU's interpolation of the wall clock. A jump through a register
    /// left pending (a switch table's: it landed where no block looked) is cleared, so
    /// that the callee's entry block does not take the call for it.
    #[inline(always)]
    pub fn read(self, interp: &mut Interpolated, last: u64) -> Option<(u64, bool)> {
        let (w, now) = self.words(interp, last)?;
        // SAFETY: an element of this vCPU (`words`).
        let flag = unsafe { w.add(1).read_volatile() };
        if flag > RETURN {
            // SAFETY: as above.
            unsafe { w.add(1).write_volatile(0) };
        }
        Some((now, flag == RETURN))
    }

    /// The time alone, when the hot path may read it (the flag left as it is).
    #[inline(always)]
    pub fn now(self, interp: &mut Interpolated, last: u64) -> Option<u64> {
        self.words(interp, last).map(|(_, now)| now)
    }

    /// The pending jump's address, if one is (the flag cleared then); `None` when the hot
    /// path cannot reach the flag. For the callbacks of blocks where a jump through a
    /// register may land, which run often (a switch table's case right after a call) and
    /// need the flag only, not the time.
    #[inline(always)]
    pub fn take_jump(self) -> Option<Option<u64>> {
        let w = self.pending_word()?;
        // SAFETY: this vCPU's own flag (`pending_word`), on its own thread.
        let flag = unsafe { w.read_volatile() };
        Some((flag > RETURN).then(|| {
            // SAFETY: as above.
            unsafe { w.write_volatile(0) };
            flag
        }))
    }

    /// Whether a return is pending (the flag cleared then, whatever it held), as
    /// [`FastWords::take_jump`] reads it; `None` when the hot path cannot reach the flag.
    #[inline(always)]
    pub fn take_return(self) -> Option<bool> {
        let w = self.pending_word()?;
        // SAFETY: as in `take_jump`.
        let flag = unsafe { w.read_volatile() };
        if flag != 0 {
            // SAFETY: as above.
            unsafe { w.write_volatile(0) };
        }
        Some(flag == RETURN)
    }

    /// The pending flag's word, when the hot path may reach it (no time read).
    #[inline(always)]
    fn pending_word(self) -> Option<*mut u64> {
        // SAFETY: the flag is the element's second word (`clock_and_pending`).
        self.element().map(|(p, _)| unsafe { p.add(1) })
    }

    /// At a landing: the time, taking the pending return (the flag is cleared).
    #[inline(always)]
    pub fn land(self, interp: &mut Interpolated, last: u64) -> Option<u64> {
        let (w, now) = self.words(interp, last)?;
        // SAFETY: as in `read`.
        unsafe { w.add(1).write_volatile(0) };
        Some(now)
    }
}

/// The TSC's time, not before `last`: out of line, as user mode interpolates it (its
/// registers and branches inlined cost every event of the common case).
#[cold]
#[inline(never)]
fn tsc_time(last: u64) -> Option<u64> {
    // The TSC is synchronised across CPUs, not to the nanosecond: a thread that moved may
    // read a hair earlier than its last event.
    Some(super::wall::fast_wall_ns()?.max(last))
}

/// One vCPU's word.
#[derive(Clone, Copy)]
pub enum VcpuWord {
    /// Valid for the whole run: only used on a one-vCPU machine (module comment).
    Direct(*mut u64),
    Api(&'static Scoreboard, u32),
}

// Only used on the vCPU's own thread, where the inline ops on the word also run.
unsafe impl Send for VcpuWord {}

impl VcpuWord {
    #[inline(always)]
    pub fn get(self) -> u64 {
        match self {
            // SAFETY: see `Direct`.
            VcpuWord::Direct(p) => unsafe { p.read_volatile() },
            // SAFETY: a live scoreboard entry of this vCPU.
            VcpuWord::Api(s, i) => unsafe { qemu_plugin_u64_get(s.0, i) },
        }
    }

    #[inline(always)]
    pub fn set(self, value: u64) {
        match self {
            // SAFETY: see `Direct`.
            VcpuWord::Direct(p) => unsafe { p.write_volatile(value) },
            // SAFETY: a live scoreboard entry of this vCPU.
            VcpuWord::Api(s, i) => unsafe { qemu_plugin_u64_set(s.0, i, value) },
        }
    }
}

/// The base user-mode events read now (for tests).
#[cfg(test)]
pub fn moving_base() -> *mut u8 {
    MOVING_BASE.load(Ordering::Relaxed)
}
