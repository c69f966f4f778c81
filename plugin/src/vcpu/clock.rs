//! Timestamps: guest instructions retired (deterministic) or host monotonic nanoseconds,
//! which user mode interpolates by instructions between reads of the time-stamp counter
//! (`engine::tsc::Interpolated`).

use crate::api::qemu_plugin_u64;
use crate::scoreboard::{FastWords, Scoreboard, TimeFrom, VcpuWord};
#[cfg(target_arch = "x86_64")]
use qemu_uftrace_engine::tsc::TscScale;
use qemu_uftrace_engine::tsc::{monotonic_ns, Interpolated, TscSample};
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
        TSC.get_or_init(|| calibrate(early));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = early;
    let interpolate = kind == ClockKind::Wall && interpolate && fast_wall_ns().is_some();
    INTERPOLATED.get_or_init(|| interpolate);
    COUNTER.get_or_init(|| (kind == ClockKind::Insn || interpolate).then_some(counter));
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

/// A system call returned on `vcpu`: it may have waited with no instruction run, so its
/// next time is read, not interpolated.
pub fn after_syscall(vcpu: u32) {
    if INTERPOLATED.get() == Some(&true) {
        crate::vcpu::with(vcpu, |v| v.interp.invalidate());
    }
}

/// Host nanoseconds on one clock for every vCPU thread.
#[inline(always)]
fn wall_ns() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(tsc) = TSC.get().copied().flatten() {
        return tsc_now(tsc);
    }
    monotonic_ns()
}

/// The wall clock where it is cheap to read (the TSC), for the hot path.
#[inline(always)]
pub fn fast_wall_ns() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    if let Some(tsc) = TSC.get().copied().flatten() {
        return Some(tsc_now(tsc));
    }
    None
}

/// The time-stamp counter as nanoseconds: 8-10 ns a read here against 25 for clock_gettime,
/// which several vCPUs (wall time by default) pay on every event. Used only where the host
/// kernel itself keeps time with it (clocksource `tsc`: invariant and synchronised across
/// CPUs, checked at boot); calibrated against CLOCK_MONOTONIC from the CLI's sample taken
/// as it started (`tsc=`) to one taken at install, or, without one, over 20 ms here.
#[cfg(target_arch = "x86_64")]
static TSC: OnceLock<Option<TscScale>> = OnceLock::new();

#[cfg(target_arch = "x86_64")]
fn calibrate(early: Option<TscSample>) -> Option<TscScale> {
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .ok()?;
    if source.trim() != "tsc" {
        return None;
    }
    let now = TscSample::now();
    if let Some(scale) = early.and_then(|e| e.scale_to(now)) {
        return Some(scale);
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    now.scale_to(TscSample::now())
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc_now(scale: TscScale) -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU.
    scale.ns(unsafe { core::arch::x86_64::_rdtsc() })
}
