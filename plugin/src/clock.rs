//! Timestamps: guest instructions retired (deterministic) or host monotonic nanoseconds.

use qemu_plugin::sys::{qemu_plugin_scoreboard_new, qemu_plugin_u64, qemu_plugin_u64_get};
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

pub enum Clock {
    /// A per-vCPU scoreboard counter that an inline op bumps at every block start.
    Insn(qemu_plugin_u64),
    Wall,
}

// The scoreboard is QEMU's and built for concurrent per-vCPU use.
unsafe impl Send for Clock {}
unsafe impl Sync for Clock {}

static CLOCK: OnceLock<Clock> = OnceLock::new();

pub fn init(kind: ClockKind) -> &'static Clock {
    CLOCK.get_or_init(|| match kind {
        // SAFETY: plain allocation of one u64 per vCPU.
        ClockKind::Insn => Clock::Insn(qemu_plugin_u64 {
            score: unsafe { qemu_plugin_scoreboard_new(8) },
            offset: 0,
        }),
        ClockKind::Wall => Clock::Wall,
    })
}

/// The instruction counter to bump inline, when counting instructions.
pub fn insn_counter() -> Option<qemu_plugin_u64> {
    match CLOCK.get() {
        Some(Clock::Insn(entry)) => Some(*entry),
        _ => None,
    }
}

#[inline(always)]
pub fn now(vcpu_index: u32) -> u64 {
    match CLOCK.get() {
        // SAFETY: a live scoreboard entry; QEMU grows it when vCPUs appear.
        Some(Clock::Insn(entry)) => unsafe { qemu_plugin_u64_get(*entry, vcpu_index) },
        _ => wall_ns(),
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
