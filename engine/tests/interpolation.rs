//! User mode's wall clock (`tsc::Interpolated`) on drawn runs: a host clock that runs at
//! given rates per guest instruction, stops the guest for system calls and translations
//! (which the plugin reports) or for nothing the plugin sees (QEMU descheduled), and events
//! every few instructions. Times must never go back, must move whenever instructions run,
//! and must stay within an interval's run of the host's time.
//!
//! Not under Miri: each run has hundreds of thousands of events (minutes a test there), and
//! the interpolation is safe arithmetic; the engine's unsafe paths are Miri's in `engine.rs`.
#![cfg(not(miri))]

use qemu_uftrace_engine::tsc::{Interpolated, RESYNC_INSNS};

/// One stretch of a drawn run.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// `insns` instructions at `ps` picoseconds each, an event every `every`.
    Run { insns: u64, ps: u64, every: u64 },
    /// `ns` of host time with no instruction run, which the plugin reports (a system call,
    /// a translation): the clock is invalidated.
    Gap { ns: u64 },
    /// `ns` of host time with no instruction run that nothing reports (QEMU descheduled).
    Stall { ns: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Event {
    insns: u64,
    host: u64,
    time: u64,
    /// The slowest instruction's host time (ns) of the run so far, and the host time QEMU
    /// spent without the plugin knowing over the last few intervals: what an error is
    /// measured against.
    slowest: u64,
    stalled: u64,
}

#[derive(Default)]
struct Sim {
    clock: Interpolated,
    insns: u64,
    host_ps: u64,
    last: u64,
    slowest_ps: u64,
    /// Unreported stalls: (instruction count, ns).
    stalls: Vec<(u64, u64)>,
    reads: usize,
    events: Vec<Event>,
}

impl Sim {
    fn new(start_ns: u64) -> Sim {
        Sim {
            host_ps: start_ns * 1000,
            ..Default::default()
        }
    }

    fn run(&mut self, steps: &[Step]) -> &mut Sim {
        for &step in steps {
            match step {
                Step::Run { insns, ps, every } => {
                    self.slowest_ps = self.slowest_ps.max(ps);
                    for _ in 0..insns / every {
                        self.insns += every;
                        self.host_ps += every * ps;
                        self.event();
                    }
                }
                Step::Gap { ns } => {
                    self.host_ps += ns * 1000;
                    self.clock.invalidate();
                }
                Step::Stall { ns } => {
                    self.host_ps += ns * 1000;
                    self.stalls.push((self.insns, ns));
                }
            }
        }
        self
    }

    fn event(&mut self) {
        let host = self.host_ps / 1000;
        let reads = &mut self.reads;
        let time = self.clock.at(self.insns, self.last, || {
            *reads += 1;
            host
        });
        assert!(time >= self.last, "time went back at {}", self.insns);
        self.last = time;
        self.events.push(Event {
            insns: self.insns,
            host,
            time,
            slowest: self.slowest_ps.div_ceil(1000),
            stalled: (self.stalls.iter().rev())
                .take_while(|&&(at, _)| at + 4 * RESYNC_INSNS >= self.insns)
                .map(|&(_, ns)| ns)
                .sum(),
        });
    }

    /// Consecutive events `min_insns` or more instructions apart that share a time.
    fn frozen(&self, min_insns: u64) -> Vec<(u64, u64)> {
        self.events
            .windows(2)
            .filter(|w| w[1].insns - w[0].insns >= min_insns && w[1].time == w[0].time)
            .map(|w| (w[1].insns, w[1].time))
            .collect()
    }

    /// The largest error of any event against the host, ahead and behind (beyond what QEMU
    /// stalled lately).
    fn worst_errors(&self) -> (u64, u64) {
        let (mut ahead, mut behind) = (0, 0);
        for e in &self.events {
            if e.time > e.host {
                ahead = ahead.max((e.time - e.host).saturating_sub(e.stalled));
            } else {
                behind = behind.max((e.host - e.time).saturating_sub(e.stalled));
            }
        }
        (ahead, behind)
    }
}

/// An interval's instructions at `ps` picoseconds each, in ns.
fn interval_ns(ps: u64) -> u64 {
    RESYNC_INSNS * ps / 1000
}

/// The freeze: one interval that took long for nothing the instructions show (a
/// translation, QEMU descheduled) set the next interval's rate; that interval ran far
/// ahead of the host and every event after it stood at one time until the host caught up.
#[test]
fn a_slow_interval_does_not_stop_time_after_it() {
    let mut sim = Sim::new(1_000_000);
    sim.run(&[
        Step::Run {
            insns: 8_192,
            ps: 2_000,
            every: 8,
        },
        Step::Stall { ns: 1_000_000 },
        Step::Run {
            insns: 200_000,
            ps: 2_000,
            every: 8,
        },
    ]);
    let frozen = sim.frozen(1);
    assert!(
        frozen.is_empty(),
        "{} frozen: {:?}",
        frozen.len(),
        &frozen[..frozen.len().min(5)]
    );
    // The stall shows where it was, and nothing after it runs ahead of the host by more
    // than an interval.
    let (ahead, _) = sim.worst_errors();
    assert!(ahead <= interval_ns(2_000), "ahead by {ahead} ns");
    // One read per interval, not per event.
    assert!(
        sim.reads <= 1 + 208_192 / RESYNC_INSNS as usize + 2,
        "{}",
        sim.reads
    );
}

/// Code that ran slowly for two intervals (so its rate was real), then fast: times run
/// ahead of the host, and then slower than it, never standing still, until they meet.
#[test]
fn after_a_slow_stretch_time_slows_down_instead_of_stopping() {
    let mut sim = Sim::new(5_000);
    sim.run(&[
        Step::Run {
            insns: 4_096,
            ps: 2_000,
            every: 8,
        },
        Step::Run {
            insns: 3_000,
            ps: 100_000,
            every: 8,
        },
        Step::Run {
            insns: 300_000,
            ps: 2_000,
            every: 8,
        },
    ]);
    assert_eq!(sim.frozen(1), []);
    let (ahead, behind) = sim.worst_errors();
    // At most one interval at the slow rate ahead, one behind.
    assert!(ahead <= interval_ns(100_000), "ahead by {ahead} ns");
    assert!(behind <= interval_ns(100_000), "behind by {behind} ns");
    // Back on the host's line: within an interval at the fast rate by the end.
    let end = sim.events.last().unwrap();
    assert!(end.time.abs_diff(end.host) <= interval_ns(2_000), "{end:?}");
    // Durations stay proportional while catching up: never below a quarter of the rate
    // (2 ns an instruction here), as a function of 800 instructions shows.
    for w in sim.events.windows(100) {
        let (a, b) = (w[0], w[99]);
        if a.insns > 4_096 + 3_000 + 2 * RESYNC_INSNS {
            assert!(
                b.time - a.time >= (b.insns - a.insns) / 2 - 2,
                "{a:?} {b:?}"
            );
        }
    }
}

/// A system call or translation (reported) moves time by what it took, at the next event,
/// and its interval measures no rate; times at a read are the host's.
#[test]
fn reported_gaps_show_at_the_next_event() {
    let mut sim = Sim::new(0);
    sim.run(&[
        Step::Run {
            insns: 10_240,
            ps: 4_000,
            every: 16,
        },
        Step::Gap { ns: 205_000 },
        Step::Run {
            insns: 16,
            ps: 4_000,
            every: 16,
        },
    ]);
    let n = sim.events.len();
    let (before, after) = (sim.events[n - 2], sim.events[n - 1]);
    assert_eq!(after.time, after.host, "{after:?}");
    assert!(after.time - before.time >= 205_000, "{before:?} {after:?}");
    // The rate after it is still the code's (4 ns an instruction): 16 instructions on.
    sim.run(&[Step::Run {
        insns: 16,
        ps: 4_000,
        every: 16,
    }]);
    let last = sim.events.last().unwrap();
    assert_eq!(last.time - after.time, 64, "{last:?}");
}

/// Drawn runs of every kind of step: the properties hold throughout.
#[test]
fn drawn_runs_keep_time_moving_and_near_the_host() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut draw = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    const RATES: [u64; 7] = [500, 1_000, 2_000, 3_000, 5_000, 20_000, 100_000];
    for run in 0..50 {
        let mut sim = Sim::new(draw(1 << 40));
        let mut steps = Vec::new();
        for _ in 0..60 {
            steps.push(match draw(10) {
                0 => Step::Gap { ns: draw(300_000) },
                1 => Step::Stall {
                    ns: draw(2_000_000),
                },
                _ => Step::Run {
                    insns: 32 + draw(20_000),
                    ps: RATES[draw(RATES.len() as u64) as usize],
                    every: 3 + draw(40),
                },
            });
        }
        sim.run(&steps);
        // 32 instructions at a quarter of the fastest rate are 4 ns.
        let frozen = sim.frozen(32);
        assert!(frozen.is_empty(), "run {run}: {frozen:?}\n{steps:?}");
        for e in &sim.events {
            let bound = 2 * interval_ns(e.slowest * 1000);
            assert!(
                e.time <= e.host + bound + e.stalled && e.host <= e.time + bound + e.stalled,
                "run {run}: {e:?}"
            );
        }
    }
}
