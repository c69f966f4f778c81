//! Knowing the link register without reading it.
//!
//! Reading a register costs ~18 ns, most of a return's cost. But when nothing has written the
//! link register since the last call, it still holds that call's return address, which the
//! plugin saw. Every instruction that may write it (`Isa::may_write_link_register`, which errs
//! on the side of yes) clears a per-vCPU "clean" flag with an inline store, no callback; a call
//! sets it; an exception return clears it. A return through the link register with the flag
//! set takes the last call's return address: in practice, every leaf function's return.

use qemu_plugin::sys::{qemu_plugin_scoreboard_find, qemu_plugin_scoreboard_new, qemu_plugin_u64};
use std::sync::OnceLock;

struct Flag(qemu_plugin_u64);

// The scoreboard is QEMU's and built for concurrent per-vCPU use.
unsafe impl Send for Flag {}
unsafe impl Sync for Flag {}

static CLEAN: OnceLock<Flag> = OnceLock::new();

pub fn init() {
    // SAFETY: plain allocation of one zeroed u64 per vCPU: every vCPU starts "not clean".
    CLEAN.get_or_init(|| {
        Flag(qemu_plugin_u64 {
            score: unsafe { qemu_plugin_scoreboard_new(8) },
            offset: 0,
        })
    });
}

/// The flag to clear inline on instructions that may write the link register.
pub fn entry() -> Option<qemu_plugin_u64> {
    CLEAN.get().map(|f| f.0)
}

/// One vCPU's flag, read and written directly. Only in system mode, where QEMU never grows
/// scoreboards while the guest runs (see `clock::VcpuClock::Direct`); user mode always reads
/// the register.
#[derive(Debug, Clone, Copy)]
pub struct LinkFlag(Option<*mut u64>);

// Only used on the vCPU's own thread.
unsafe impl Send for LinkFlag {}

impl LinkFlag {
    pub fn for_vcpu(vcpu_index: u32, system_mode: bool) -> LinkFlag {
        // SAFETY: a live scoreboard, sized for this vCPU before its init.
        LinkFlag(
            entry()
                .filter(|_| system_mode)
                .map(|e| unsafe { qemu_plugin_scoreboard_find(e.score, vcpu_index) as *mut u64 }),
        )
    }

    /// A call just wrote the link register.
    #[inline(always)]
    pub fn set_clean(self) {
        if let Some(p) = self.0 {
            // SAFETY: see `for_vcpu`; inline ops writing it run on this same thread.
            unsafe { p.write_volatile(1) };
        }
    }

    #[inline(always)]
    pub fn set_unknown(self) {
        if let Some(p) = self.0 {
            // SAFETY: as above.
            unsafe { p.write_volatile(0) };
        }
    }

    #[inline(always)]
    pub fn is_clean(self) -> bool {
        // SAFETY: as above.
        self.0.is_some_and(|p| unsafe { p.read_volatile() } == 1)
    }
}
