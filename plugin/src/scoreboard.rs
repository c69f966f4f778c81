//! Per-vCPU words that inline ops update (the instruction counter, the pending-return flag),
//! as callbacks read and write them. Both live in one 16-byte scoreboard element, so that
//! an event finds them on one cache line.
//!
//! A machine with one vCPU reaches its words through a pointer taken at vCPU init: QEMU
//! moves a scoreboard only when it creates a vCPU past the scoreboard's size, which one vCPU
//! never is. With several (and in user mode, where threads create vCPUs while others run),
//! a vCPU created late can make QEMU reallocate every scoreboard between two events of a
//! running vCPU, before any plugin callback could tell it: those go through the API, which
//! finds the word where it is now.

use crate::api::{
    qemu_plugin_scoreboard_find, qemu_plugin_scoreboard_new, qemu_plugin_u64, qemu_plugin_u64_get,
    qemu_plugin_u64_set,
};

/// One zero-initialised u64 per vCPU.
pub struct Scoreboard(qemu_plugin_u64);

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

/// One vCPU's whole `[instruction counter, pending flag]` element, as the hot path reads it:
/// only where words are reached directly (system mode) and instructions are counted.
#[derive(Clone, Copy)]
pub struct FastWords(*mut [u64; 2]);

// As VcpuWord.
unsafe impl Send for FastWords {}

impl FastWords {
    /// Every event takes the general path.
    pub const NONE: FastWords = FastWords(std::ptr::null_mut());

    /// `counter` is the direct counter word of `clock_and_pending`, the flag right after it.
    pub fn at_counter(counter: VcpuWord) -> FastWords {
        match counter {
            VcpuWord::Direct(p) => FastWords(p as *mut [u64; 2]),
            VcpuWord::Api(..) => FastWords::NONE,
        }
    }

    /// The time and whether a return is pending, when the hot path may read them.
    #[inline(always)]
    pub fn read(self) -> Option<(u64, bool)> {
        if self.0.is_null() {
            return None;
        }
        // SAFETY: a direct element, valid as `VcpuWord::Direct`.
        unsafe {
            let w = self.0 as *const u64;
            Some((w.read_volatile(), w.add(1).read_volatile() != 0))
        }
    }

    /// At a landing: the time, taking the pending return (the flag is cleared).
    #[inline(always)]
    pub fn land(self) -> Option<u64> {
        if self.0.is_null() {
            return None;
        }
        // SAFETY: as in `read`.
        unsafe {
            let w = self.0 as *mut u64;
            w.add(1).write_volatile(0);
            Some(w.read_volatile())
        }
    }
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
