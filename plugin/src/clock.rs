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
    #[cfg(target_arch = "x86_64")]
    if kind == ClockKind::Wall {
        TSC.get_or_init(Tsc::calibrate);
    }
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

    /// The counter with the pending flag beside it, for the hot path (none where words go
    /// through the API). With the wall clock: the TSC and vCPU `vcpu_index`'s element under
    /// the moving base where scoreboards may move (`moving`: user mode); none elsewhere.
    pub fn fast_words(self, vcpu_index: u32, moving: bool) -> FastWords {
        match self {
            VcpuClock::Insn(word) => FastWords::at_counter(word),
            VcpuClock::Wall if moving && fast_wall_ns().is_some() => FastWords::wall(vcpu_index),
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

/// Host nanoseconds on one clock for every vCPU thread.
#[inline(always)]
fn wall_ns() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(tsc) = TSC.get().copied().flatten() {
        return tsc.now();
    }
    monotonic_ns()
}

/// The wall clock where it is cheap to read (the TSC), for the hot path.
#[inline(always)]
pub fn fast_wall_ns() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    if let Some(tsc) = TSC.get().copied().flatten() {
        return Some(tsc.now());
    }
    None
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_MONOTONIC cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The time-stamp counter as nanoseconds: 10 ns a read here against 25 for clock_gettime,
/// which several vCPUs (wall time by default) pay on every event. Used only where the host
/// kernel itself keeps time with it (clocksource `tsc`: invariant and synchronised across
/// CPUs, checked at boot); calibrated against CLOCK_MONOTONIC at install.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
struct Tsc {
    base_tsc: u64,
    base_ns: u64,
    /// Nanoseconds per tick, as a 32.32 fixed-point number.
    mult: u64,
}

#[cfg(target_arch = "x86_64")]
static TSC: OnceLock<Option<Tsc>> = OnceLock::new();

#[cfg(target_arch = "x86_64")]
impl Tsc {
    fn calibrate() -> Option<Tsc> {
        let source = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .ok()?;
        if source.trim() != "tsc" {
            return None;
        }
        // SAFETY: RDTSC exists on every x86-64 CPU.
        let read = || unsafe { core::arch::x86_64::_rdtsc() };
        let (t0, n0) = (read(), monotonic_ns());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (t1, n1) = (read(), monotonic_ns());
        let (ticks, ns) = (t1.checked_sub(t0)?, n1.checked_sub(n0)?);
        if ticks == 0 || ns == 0 {
            return None;
        }
        Some(Tsc {
            base_tsc: t1,
            base_ns: n1,
            mult: ((u128::from(ns) << 32) / u128::from(ticks)) as u64,
        })
    }

    #[inline(always)]
    fn now(self) -> u64 {
        // SAFETY: as in `calibrate`.
        let t = unsafe { core::arch::x86_64::_rdtsc() };
        let ticks = t.saturating_sub(self.base_tsc);
        self.base_ns + ((u128::from(ticks) * u128::from(self.mult)) >> 32) as u64
    }
}
