//! Timestamps: guest instructions retired (deterministic) or host monotonic nanoseconds.

use qemu_plugin::sys::{
    qemu_plugin_scoreboard_find, qemu_plugin_scoreboard_new, qemu_plugin_u64, qemu_plugin_u64_get,
};
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

/// A per-vCPU scoreboard counter that an inline op bumps at every block start.
struct Counter(qemu_plugin_u64);

// The scoreboard is QEMU's and built for concurrent per-vCPU use.
unsafe impl Send for Counter {}
unsafe impl Sync for Counter {}

static COUNTER: OnceLock<Option<Counter>> = OnceLock::new();

pub fn init(kind: ClockKind) {
    COUNTER.get_or_init(|| match kind {
        // SAFETY: plain allocation of one u64 per vCPU.
        ClockKind::Insn => Some(Counter(qemu_plugin_u64 {
            score: unsafe { qemu_plugin_scoreboard_new(8) },
            offset: 0,
        })),
        ClockKind::Wall => None,
    });
}

/// The instruction counter to bump inline, when counting instructions.
pub fn insn_counter() -> Option<qemu_plugin_u64> {
    COUNTER.get().and_then(|c| c.as_ref()).map(|c| c.0)
}

/// How one vCPU reads the time.
#[derive(Debug, Clone, Copy)]
pub enum VcpuClock {
    /// Straight from its scoreboard entry. Only valid while QEMU does not grow the scoreboard,
    /// which it does only when a vCPU is created: in system mode all exist before the guest
    /// runs, and every vCPU init refreshes the pointers (`refresh`).
    Direct(*const u64),
    /// Through the API, for user mode, where guest threads create vCPUs while others run.
    Api,
    Wall,
}

// The pointer is only read on the vCPU's own thread.
unsafe impl Send for VcpuClock {}

impl VcpuClock {
    pub fn for_vcpu(vcpu_index: u32, system_mode: bool) -> VcpuClock {
        match insn_counter() {
            None => VcpuClock::Wall,
            // SAFETY: a live scoreboard; QEMU has sized it for this vCPU before its init.
            Some(entry) if system_mode => VcpuClock::Direct(unsafe {
                qemu_plugin_scoreboard_find(entry.score, vcpu_index) as *const u64
            }),
            Some(_) => VcpuClock::Api,
        }
    }

    #[inline(always)]
    pub fn now(self, vcpu_index: u32) -> u64 {
        match self {
            // SAFETY: see `Direct`; the inline op writing it runs on this same thread.
            VcpuClock::Direct(p) => unsafe { p.read_volatile() },
            VcpuClock::Api => match insn_counter() {
                // SAFETY: a live scoreboard entry.
                Some(entry) => unsafe { qemu_plugin_u64_get(entry, vcpu_index) },
                None => wall_ns(),
            },
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
