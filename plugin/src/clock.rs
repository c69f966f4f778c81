//! Timestamps: guest instructions retired (deterministic) or host monotonic nanoseconds.

use crate::api::qemu_plugin_u64;
use crate::scoreboard::{FastWords, Scoreboard, VcpuWord};
use qemu_uftrace_engine::tsc::TscSample;
#[cfg(target_arch = "x86_64")]
use qemu_uftrace_engine::tsc::TscScale;
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

/// `counter`: a zeroed per-vCPU word, used when counting instructions; `early`: the CLI's
/// sample of the time-stamp counter, to calibrate it against.
pub fn init(kind: ClockKind, counter: Scoreboard, early: Option<TscSample>) {
    #[cfg(target_arch = "x86_64")]
    if kind == ClockKind::Wall {
        TSC.get_or_init(|| calibrate(early));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = early;
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

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_MONOTONIC cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
