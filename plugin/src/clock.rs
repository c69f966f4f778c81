//! Timestamps: guest instructions retired (deterministic) or host monotonic nanoseconds.

use crate::api::qemu_plugin_u64;
use crate::scoreboard::{FastWords, Scoreboard, VcpuWord};
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    Insn,
    Wall,
}

impl ClockKind {
    pub fn name(self) -> &'static str {
        match self {
            ClockKind::Insn => "insn",
            ClockKind::Wall => "wall",
        }
    }
}

/// The per-vCPU counter an inline op bumps at every block start (`None`: wall clock).
static COUNTER: OnceLock<Option<Scoreboard>> = OnceLock::new();

/// `counter`: a zeroed per-vCPU word, used when counting instructions.
pub fn init(kind: ClockKind, counter: Scoreboard) {
    COUNTER.get_or_init(|| match kind {
        ClockKind::Insn => Some(counter),
        ClockKind::Wall => None,
    });
}

fn counter() -> Option<&'static Scoreboard> {
    COUNTER.get().and_then(Option::as_ref)
}

/// The instruction counter to bump inline, when counting instructions.
pub fn insn_counter() -> Option<qemu_plugin_u64> {
    counter().map(Scoreboard::entry)
}

/// How one vCPU reads the time.
#[derive(Clone, Copy)]
pub enum VcpuClock {
    /// Its instruction counter.
    Insn(VcpuWord),
    Wall,
}

impl VcpuClock {
    pub fn for_vcpu(vcpu_index: u32, direct: bool) -> VcpuClock {
        match counter() {
            Some(counter) => VcpuClock::Insn(counter.for_vcpu(vcpu_index, direct)),
            None => VcpuClock::Wall,
        }
    }

    /// The counter with the pending flag beside it, for the hot path (none with the wall
    /// clock, or where words go through the API).
    pub fn fast_words(self) -> FastWords {
        match self {
            VcpuClock::Insn(word) => FastWords::at_counter(word),
            VcpuClock::Wall => FastWords::NONE,
        }
    }

    #[inline(always)]
    pub fn now(self) -> u64 {
        match self {
            VcpuClock::Insn(word) => word.get(),
            VcpuClock::Wall => wall_ns(),
        }
    }
}

#[inline(always)]
fn wall_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_MONOTONIC cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
