//! The host's time-stamp counter as CLOCK_MONOTONIC nanoseconds: a linear map from two
//! paired samples. The CLI takes the first sample as it starts and hands it to the plugin
//! (`tsc=TICKS:NS`), which takes the second at install: the CLI's own start-up (tens of ms)
//! is the span, where the plugin used to sleep 20 ms on the guest's critical path.
//!
//! Only valid where the host kernel itself keeps time with the TSC (clocksource `tsc`:
//! invariant and synchronised across CPUs); reading the counter is the caller's business.

/// CLOCK_MONOTONIC in nanoseconds: the host time that processes share.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer; CLOCK_MONOTONIC cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `ns = base_ns + (ticks - base_tsc) * mult / 2^32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TscScale {
    pub base_tsc: u64,
    pub base_ns: u64,
    /// Nanoseconds per tick, as a 32.32 fixed-point number.
    pub mult: u64,
}

/// The shortest span between two samples that gives the scale to a few parts per million
/// (a sample pair is known to ~20 ns).
pub const MIN_SPAN_NS: u64 = 5_000_000;

impl TscScale {
    /// The map through `(tsc0, ns0)` and `(tsc1, ns1)`, when they are far enough apart.
    pub fn from_samples(tsc0: u64, ns0: u64, tsc1: u64, ns1: u64) -> Option<TscScale> {
        let (ticks, ns) = (tsc1.checked_sub(tsc0)?, ns1.checked_sub(ns0)?);
        if ticks == 0 || ns < MIN_SPAN_NS {
            return None;
        }
        Some(TscScale {
            base_tsc: tsc1,
            base_ns: ns1,
            mult: ((u128::from(ns) << 32) / u128::from(ticks)) as u64,
        })
    }

    /// Nanoseconds at counter value `ticks` (never before the base).
    #[inline(always)]
    pub fn ns(self, ticks: u64) -> u64 {
        let ticks = ticks.saturating_sub(self.base_tsc);
        self.base_ns + ((u128::from(ticks) * u128::from(self.mult)) >> 32) as u64
    }
}

/// One paired reading of the counter and CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TscSample {
    pub tsc: u64,
    pub ns: u64,
}

impl TscSample {
    /// As the plugin argument carries it: `TICKS:NS`.
    pub fn to_arg(self) -> String {
        format!("{}:{}", self.tsc, self.ns)
    }

    pub fn parse_arg(s: &str) -> Option<TscSample> {
        let (tsc, ns) = s.split_once(':')?;
        Some(TscSample {
            tsc: tsc.parse().ok()?,
            ns: ns.parse().ok()?,
        })
    }

    /// The counter and CLOCK_MONOTONIC now, read together (x86-64 hosts: the only ones
    /// with a counter we use).
    #[cfg(target_arch = "x86_64")]
    pub fn now() -> TscSample {
        // SAFETY: RDTSC exists on every x86-64 CPU.
        let tsc = unsafe { core::arch::x86_64::_rdtsc() };
        TscSample {
            tsc,
            ns: monotonic_ns(),
        }
    }

    /// The map from this sample to a later one, when they are far enough apart.
    pub fn scale_to(self, later: TscSample) -> Option<TscScale> {
        TscScale::from_samples(self.tsc, self.ns, later.tsc, later.ns)
    }
}

/// Guest instructions between two reads of the counter, at most (see [`Interpolated`]).
pub const RESYNC_INSNS: u64 = 1024;

/// Wall time between reads of the time-stamp counter, advanced by the guest instructions
/// run since the last read at the rate measured over the interval before: a read costs
/// 8 ns on the hosts measured, a large share of an event's cost, while the instruction
/// counter is already on the event's cache line. The counter is read again every
/// [`RESYNC_INSNS`] instructions (a microsecond or so of emulation) and after anything
/// that may have waited with no instruction run (a system call: [`Interpolated::invalidate`]),
/// so that every thread and process stays on the host's one timeline to about that much;
/// times never go back.
#[derive(Debug, Clone, Copy)]
pub struct Interpolated {
    sync_insns: u64,
    sync_ns: u64,
    /// Nanoseconds per instruction, 16.16 fixed point.
    rate: u64,
    /// The next time is read, not interpolated, and the interval it ends says nothing of
    /// the rate.
    stale: bool,
}

impl Default for Interpolated {
    fn default() -> Self {
        Interpolated {
            sync_insns: 0,
            sync_ns: 0,
            // 1 ns an instruction until measured.
            rate: 1 << 16,
            stale: true,
        }
    }
}

impl Interpolated {
    /// The time at instruction count `insns` (of this vCPU's counter), not before `last`;
    /// `read` gives the host's time when the counter must be read.
    #[inline(always)]
    pub fn at(&mut self, insns: u64, last: u64, read: impl FnOnce() -> u64) -> u64 {
        match self.at_fast(insns, last) {
            Some(now) => now,
            None => {
                let run = insns.wrapping_sub(self.sync_insns);
                self.resync(insns, run, read()).max(last)
            }
        }
    }

    /// [`Interpolated::at`] where it needs no read of the clock, changing nothing; `None`
    /// where it does (every [`RESYNC_INSNS`] instructions, or stale).
    #[inline(always)]
    pub fn at_fast(&self, insns: u64, last: u64) -> Option<u64> {
        let run = insns.wrapping_sub(self.sync_insns);
        (run < RESYNC_INSNS && !self.stale)
            .then(|| (self.sync_ns + ((run * self.rate) >> 16)).max(last))
    }

    #[cold]
    #[inline(never)]
    fn resync(&mut self, insns: u64, run: u64, now: u64) -> u64 {
        if !self.stale && run > 0 && now > self.sync_ns {
            // Between 1/64 ns and 64 µs an instruction: translating new code is slow.
            let elapsed = now - self.sync_ns;
            // In 64 bits where they suffice (always, but after 3 days without a read): the
            // 128-bit division is a call (`__udivti3`) costing more than the rest.
            let rate = if elapsed < 1 << 48 {
                (elapsed << 16) / run
            } else {
                ((u128::from(elapsed) << 16) / u128::from(run)) as u64
            };
            self.rate = rate.clamp(1 << 10, 64_000 << 16);
        }
        self.sync_insns = insns;
        self.sync_ns = now;
        self.stale = false;
        now
    }

    /// The next time is read: the vCPU may have waited without running an instruction (a
    /// blocking system call), which no instruction count shows.
    pub fn invalidate(&mut self) {
        self.stale = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_samples_map_ticks_to_nanoseconds() {
        // A 3 GHz counter sampled 10 ms apart.
        let s = TscScale::from_samples(1_000_000, 5_000, 31_000_000, 10_005_000).unwrap();
        assert_eq!(s.ns(31_000_000), 10_005_000);
        assert!(s.ns(61_000_000).abs_diff(20_005_000) <= 1);
        // Three seconds on: within a nanosecond per second of the true line.
        assert!(s.ns(31_000_000 + 9_000_000_000).abs_diff(3_010_005_000) <= 3);
        // Before the base: the base.
        assert_eq!(s.ns(0), 10_005_000);
    }

    #[test]
    fn samples_too_close_or_out_of_order_give_none() {
        assert_eq!(
            TscScale::from_samples(10, 0, 10 + 3_000_000, 1_000_000),
            None
        );
        assert_eq!(TscScale::from_samples(10, 0, 5, 10_000_000), None);
        assert_eq!(TscScale::from_samples(10, 10_000_000, 20, 0), None);
        assert_eq!(TscScale::from_samples(10, 0, 10, 10_000_000), None);
    }

    #[test]
    fn the_argument_round_trips() {
        let s = TscSample { tsc: 123, ns: 456 };
        assert_eq!(TscSample::parse_arg(&s.to_arg()), Some(s));
        for bad in ["", "1", "1:2:3", "a:2", "1:"] {
            assert_eq!(TscSample::parse_arg(bad), None, "{bad}");
        }
        let later = TscSample {
            tsc: 123 + 30_000_000,
            ns: 456 + 10_000_000,
        };
        assert_eq!(s.scale_to(later).map(|m| m.ns(later.tsc)), Some(later.ns));
    }

    /// A drawn timeline: (instructions so far, host ns if the counter were read now).
    #[test]
    fn interpolated_time_follows_instructions_between_reads() {
        let mut clock = Interpolated::default();
        let reads = std::cell::Cell::new(0);
        let at = |clock: &mut Interpolated, insns: u64, host: u64, last: u64| {
            clock.at(insns, last, || {
                reads.set(reads.get() + 1);
                host
            })
        };
        // First event: read.
        assert_eq!(at(&mut clock, 100, 5_000, 0), 5_000);
        // 500 instructions later: 1 ns each (the default rate), no read.
        assert_eq!(at(&mut clock, 600, 99_999, 5_000), 5_500);
        // Past RESYNC_INSNS: read; the interval measured 2 ns an instruction.
        assert_eq!(at(&mut clock, 100 + 1_024, 7_048, 5_500), 7_048);
        assert_eq!(at(&mut clock, 1_124 + 100, 0, 7_048), 7_248);
        // The host was faster than the interpolation: time waits, never goes back.
        assert_eq!(at(&mut clock, 1_124 + 1_000, 0, 7_248), 9_048);
        assert_eq!(at(&mut clock, 1_124 + 2_000, 8_000, 9_048), 9_048);
        // A blocking system call: the next event reads, and that interval sets no rate.
        clock.invalidate();
        assert_eq!(at(&mut clock, 3_130, 2_000_000, 9_048), 2_000_000);
        // The last full interval ran 2,000 instructions in 952 ns.
        let rate = (952u64 << 16) / 2_000;
        assert_eq!(
            at(&mut clock, 3_140, 0, 2_000_000),
            2_000_000 + ((10 * rate) >> 16)
        );
        assert_eq!(reads.get(), 4);
    }
}
