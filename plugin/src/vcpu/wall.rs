//! The host's wall clock as the plugin reads it: the time-stamp counter where the host
//! keeps time with it, else CLOCK_MONOTONIC.

use qemu_uftrace_engine::tsc::monotonic_ns;
#[cfg(target_arch = "x86_64")]
use qemu_uftrace_engine::tsc::{TscSample, TscScale};
#[cfg(target_arch = "x86_64")]
use std::sync::OnceLock;

/// Host nanoseconds on one clock for every vCPU thread.
#[inline(always)]
pub fn wall_ns() -> u64 {
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

/// Calibrates the TSC once (wall clock, x86-64 hosts).
#[cfg(target_arch = "x86_64")]
pub fn calibrate_once(early: Option<TscSample>) {
    TSC.get_or_init(|| calibrate(early));
}

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
