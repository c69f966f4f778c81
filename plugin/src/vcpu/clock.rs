//! Timestamps: guest instructions retired (deterministic) or host monotonic nanoseconds,
//! which user mode interpolates by instructions between reads of the time-stamp counter
//! (`engine::tsc::Interpolated`).

use super::wall::{fast_wall_ns, wall_ns};
use crate::ffi::qemu_plugin_u64;
pub use crate::state::config::ClockKind;
use crate::vcpu::scoreboard::{FastWords, Scoreboard, TimeFrom, VcpuWord};
use qemu_uftrace_engine::tsc::{Interpolated, TscSample};
use std::sync::OnceLock;

/// The per-vCPU counter an inline op bumps at every block start (`None`: the wall clock,
/// read at every event).
static COUNTER: OnceLock<Option<Scoreboard>> = OnceLock::new();
/// The wall clock is interpolated by that counter between reads of the TSC.
static INTERPOLATED: OnceLock<bool> = OnceLock::new();

/// `counter`: a zeroed per-vCPU word, used when counting instructions; `early`: the CLI's
/// sample of the time-stamp counter, to calibrate it against; `interpolate`: wall time may
/// be interpolated by instructions (user mode, where the counter is on the event's cache
/// line; a system's halted vCPUs would need a read at every wake-up).
pub fn init(kind: ClockKind, counter: Scoreboard, early: Option<TscSample>, interpolate: bool) {
    #[cfg(target_arch = "x86_64")]
    if kind == ClockKind::Wall {
        super::wall::calibrate_once(early);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = early;
    let interpolate = kind == ClockKind::Wall && interpolate && fast_wall_ns().is_some();
    INTERPOLATED.get_or_init(|| interpolate);
    COUNTER.get_or_init(|| (kind == ClockKind::Insn || interpolate).then_some(counter));
}

/// Whether the wall clock is interpolated by instructions (user mode).
pub fn interpolated() -> bool {
    INTERPOLATED.get() == Some(&true)
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
    /// The wall clock, interpolated by its instruction counter.
    Interpolated(VcpuWord),
}

impl VcpuClock {
    pub fn for_vcpu(vcpu_index: u32, direct: bool) -> VcpuClock {
        match counter() {
            Some(c) if INTERPOLATED.get() == Some(&true) => {
                VcpuClock::Interpolated(c.for_vcpu(vcpu_index, direct))
            }
            Some(c) => VcpuClock::Insn(c.for_vcpu(vcpu_index, direct)),
            None => VcpuClock::Wall,
        }
    }

    /// The counter with the pending flag beside it, for the hot path (none where words go
    /// through the API): the direct element (one vCPU, system mode), or vCPU
    /// `vcpu_index`'s element under the moving base where scoreboards may move (`moving`:
    /// user mode), with its counter, the TSC, or the two interpolated.
    pub fn fast_words(self, vcpu_index: u32, moving: bool) -> FastWords {
        match self {
            VcpuClock::Insn(_) if moving => FastWords::moving(vcpu_index, TimeFrom::Counter),
            VcpuClock::Insn(word) => FastWords::at_counter(word),
            VcpuClock::Interpolated(_) if moving => {
                FastWords::moving(vcpu_index, TimeFrom::Interpolated)
            }
            VcpuClock::Wall if moving && fast_wall_ns().is_some() => {
                FastWords::moving(vcpu_index, TimeFrom::Tsc)
            }
            VcpuClock::Interpolated(_) | VcpuClock::Wall => FastWords::NONE,
        }
    }

    /// The time now; `interp`: this vCPU's interpolation, `last`: its last time.
    #[inline(always)]
    pub fn now(self, interp: &mut Interpolated, last: u64) -> u64 {
        match self {
            VcpuClock::Insn(word) => word.get(),
            VcpuClock::Wall => wall_ns(),
            VcpuClock::Interpolated(word) => interp.at(word.get(), last, wall_ns),
        }
    }
}
