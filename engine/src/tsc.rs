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
/// run since the last read: a read costs 8 ns on the hosts measured, a large share of an
/// event's cost, while the instruction counter is already on the event's cache line.
///
/// The counter is read every [`RESYNC_INSNS`] instructions, and after anything that may
/// have taken time with no instruction run ([`Interpolated::invalidate`]: a system call,
/// translating new code, which costs tens of µs a block where running it costs ns). Only
/// intervals without such a gap measure the emulation's rate, and the next interval runs at
/// the slower of the last two measured: a rate measured over a translation (or the host
/// descheduling QEMU) once ran the next interval hundreds of µs ahead of the host, and
/// every event after it stood still at that time until the host caught up.
///
/// Times never go back and never stand still while instructions run: where a read finds
/// the host behind the time already given, time carries on from there, slower (down to a
/// quarter of the rate), until it meets the host's line again. A time is then within two
/// intervals' instructions at the slowest rate the code ran at (a few µs: QEMU ran the
/// tests' code at 0.5–5 ns an instruction) of the host's, beyond any time QEMU spent where
/// nothing tells (descheduled): engine/tests/interpolation.rs draws runs to that bound. So
/// every thread and process stays on the host's one timeline to about that much.
#[derive(Debug, Clone, Copy)]
pub struct Interpolated {
    /// The line times follow: the time at instruction count `sync_insns`, where the
    /// counter was last read. [`STALE`] set: the next time is read, not interpolated, and
    /// the interval it ends says nothing of the rate (set there, `at_fast` needs no test
    /// of its own: the run is out of range).
    sync_insns: u64,
    sync_ns: u64,
    /// The line's slope: nanoseconds per instruction, 16.16 fixed point.
    rate: u32,
    /// How far `sync_ns` was ahead of the host's time at that read (ns, saturating).
    ahead: u32,
    /// The last two rates measured (16.16), the last first.
    measured: [u32; 2],
}

/// The bit of [`Interpolated::sync_insns`] that says the next time is read (no count of
/// instructions reaches it).
const STALE: u64 = 1 << 63;

/// Rates in 16.16 nanoseconds per instruction: between 1/64 ns and 64 µs (translating new
/// code is slow).
const MIN_RATE: u64 = 1 << 10;
const MAX_RATE: u64 = 64_000 << 16;

impl Default for Interpolated {
    fn default() -> Self {
        Interpolated {
            sync_insns: STALE,
            sync_ns: 0,
            // 1 ns an instruction until measured.
            rate: 1 << 16,
            ahead: 0,
            measured: [1 << 16; 2],
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
            None => self.resync(insns, read(), last),
        }
    }

    /// [`Interpolated::at`] where it needs no read of the clock, changing nothing; `None`
    /// where it does (every [`RESYNC_INSNS`] instructions, or stale).
    #[inline(always)]
    pub fn at_fast(&self, insns: u64, last: u64) -> Option<u64> {
        let run = insns.wrapping_sub(self.sync_insns);
        (run < RESYNC_INSNS)
            .then(|| (self.sync_ns + ((run * u64::from(self.rate)) >> 16)).max(last))
    }

    /// The host's time `now` read at instruction count `insns`: the time there, and the
    /// line on from it.
    #[cold]
    #[inline(never)]
    fn resync(&mut self, insns: u64, now: u64, last: u64) -> u64 {
        let stale = self.sync_insns & STALE != 0;
        let run = insns.wrapping_sub(self.sync_insns & !STALE);
        let read_ns = self.sync_ns - u64::from(self.ahead);
        if !stale && run > 0 && run < 1 << 40 && now > read_ns {
            let elapsed = now - read_ns;
            let rate = if elapsed < 1 << 48 {
                (elapsed << 16) / run
            } else {
                wide_rate(elapsed, run)
            };
            self.measured = [rate.clamp(MIN_RATE, MAX_RATE) as u32, self.measured[0]];
        }
        // What was given already stands, and the line carries on to here (to one interval
        // past its end at most: a long run between events says little of the rate): from
        // the later of those and the host, so that this event too is later than the one
        // before.
        let line = self.sync_ns + ((run.min(2 * RESYNC_INSNS) * u64::from(self.rate)) >> 16);
        let at = now.max(last).max(line);
        // The slower of the last two rates: one interval the host spent elsewhere (QEMU
        // descheduled, a lock) does not set the next; a rate too slow costs a step forward
        // at the next read, one too fast a stretch of slowed time.
        let rate = u64::from(self.measured[0].min(self.measured[1]));
        // Ahead of the host: meet its line by the end of the next interval, not slower
        // than a quarter of the rate.
        let ahead = at - now;
        let catch_up = ahead.saturating_mul((1 << 16) / RESYNC_INSNS);
        self.rate = rate.saturating_sub(catch_up).max(rate / 4).max(MIN_RATE) as u32;
        self.ahead = ahead.min(u64::from(u32::MAX)) as u32;
        self.sync_insns = insns & !STALE;
        self.sync_ns = at;
        at
    }

    /// The next time is read: the vCPU may have spent time without running an instruction
    /// (a blocking system call, a translation), which no instruction count shows.
    pub fn invalidate(&mut self) {
        self.sync_insns |= STALE;
    }
}

/// `elapsed` ns over `run` (nonzero) instructions in 16.16, where `elapsed << 16` overflows
/// 64 bits (3 days without a read), at most [`MAX_RATE`]: in 64-bit halves, as a 128-bit
/// division is a call (`__udivti3`), and a call anywhere in `resync` made every resync save
/// and restore six registers.
#[inline(always)]
fn wide_rate(elapsed: u64, run: u64) -> u64 {
    let whole = elapsed / run;
    if whole >= MAX_RATE >> 16 {
        return MAX_RATE;
    }
    // `whole` < 2^16 and the remainder < `run` < 2^40 (resync's test): nothing overflows.
    (whole << 16) + (((elapsed % run) << 16) / run)
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

    /// The hot path reads it with the slot's clock words, on the slot's first cache line
    /// (`vcpu::VcpuState` in the plugin): it must stay as small as it was.
    #[test]
    fn interpolation_fits_in_four_words() {
        assert_eq!(std::mem::size_of::<Interpolated>(), 32);
    }

    /// The rate past 64 bits' reach is the 128-bit quotient, clamped.
    #[test]
    fn a_wide_rate_is_the_exact_quotient() {
        for (elapsed, run) in [
            (1 << 48, 1),
            (1 << 48, 1 << 39),
            (u64::MAX, (1 << 40) - 1),
            (u64::MAX, 1 << 30),
            ((1 << 50) + 12_345, 300_000_000_007),
            (3 << 60, 1 << 39),
            ((1 << 52) + 7, (1 << 40) - 3),
        ] {
            let exact = ((u128::from(elapsed) << 16) / u128::from(run)).min(u128::from(MAX_RATE));
            assert_eq!(
                u128::from(wide_rate(elapsed, run)),
                exact,
                "{elapsed} / {run}"
            );
        }
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
        // Past RESYNC_INSNS: read; the interval measured 2 ns an instruction, but the one
        // before (the default) was slower: the next runs at 1 ns.
        assert_eq!(at(&mut clock, 100 + 1_024, 7_048, 5_500), 7_048);
        assert_eq!(at(&mut clock, 1_124 + 100, 0, 7_048), 7_148);
        // 2 ns twice: 2 ns.
        assert_eq!(at(&mut clock, 2_148, 9_096, 7_148), 9_096);
        assert_eq!(at(&mut clock, 2_248, 0, 9_096), 9_296);
        // The host was faster than the interpolation (404 ns for 1,024 instructions): time
        // carries on along the line, then at a quarter of the new rate until it meets
        // the host; it never stands still.
        assert_eq!(at(&mut clock, 3_172, 9_500, 9_296), 9_096 + 2_048);
        let slow = (404u64 << 16) / 1_024 / 4;
        assert_eq!(
            at(&mut clock, 3_272, 0, 11_144),
            11_144 + ((100 * slow) >> 16)
        );
        // A blocking system call: the next event reads, and that interval sets no rate.
        clock.invalidate();
        assert_eq!(at(&mut clock, 3_300, 2_000_000, 11_153), 2_000_000);
        let rate = (404u64 << 16) / 1_024;
        assert_eq!(
            at(&mut clock, 3_400, 0, 2_000_000),
            2_000_000 + ((100 * rate) >> 16)
        );
        assert_eq!(reads.get(), 5);
    }
}
