//! Returns, seen where they land.
//!
//! A return's target is in a register, and reading one costs about 18 ns: most of what a
//! return would cost. But a return nearly always lands just after a call, and whether a
//! block starts just after a call is known when the block is translated. So a return
//! instruction only sets a per-vCPU "return pending" flag (an inline store, no callback),
//! and every block that starts just after a call carries a callback conditional on that
//! flag: it fires only when the block is entered by a return, and the block's own address
//! is the return's target. No register is read.
//!
//! A return that lands anywhere else (a new task's first instruction, an exception taken
//! between a return and its landing block) leaves the flag set; the next callback finds it
//! and closes the top frame, the return's most likely owner (`Engine::ret_unseen`).

use crate::guest::ByteBuf;
use crate::isa::{InsnKind, Isa};
use qemu_plugin::sys::{
    qemu_plugin_scoreboard_find, qemu_plugin_scoreboard_new, qemu_plugin_u64, qemu_plugin_u64_get,
    qemu_plugin_u64_set,
};
use std::cell::RefCell;
use std::sync::OnceLock;

/// The smallest guest page QEMU may use (Arm's 1 KiB): within it, the host copy of guest
/// memory is contiguous.
const MIN_PAGE: u64 = 1024;

struct Flag(qemu_plugin_u64);

// The scoreboard is QEMU's and built for concurrent per-vCPU use.
unsafe impl Send for Flag {}
unsafe impl Sync for Flag {}

static PENDING: OnceLock<Flag> = OnceLock::new();

pub fn init() {
    // SAFETY: plain allocation of one zeroed u64 per vCPU: no return is pending at start.
    PENDING.get_or_init(|| {
        Flag(qemu_plugin_u64 {
            score: unsafe { qemu_plugin_scoreboard_new(8) },
            offset: 0,
        })
    });
}

/// The flag a return sets inline and a landing block's callback is conditional on.
pub fn entry() -> Option<qemu_plugin_u64> {
    PENDING.get().map(|f| f.0)
}

/// Whether a block starting at `pc` is where a call returns: the instruction before it is a
/// call whose return address is `pc`. `haddr` is the host copy of the block's first
/// instruction, when QEMU has one.
pub fn is_landing(isa: &dyn Isa, pc: u64, haddr: *const u8) -> bool {
    let len = isa.call_len();
    let Some(before) = pc.checked_sub(len) else {
        return false;
    };
    let mut bytes = [0u8; 16];
    let n = (isa.fetch_len()).min(bytes.len());
    if pc % MIN_PAGE >= len && !haddr.is_null() {
        // SAFETY: the call sits on the same guest page as `pc`, so its bytes are in the same
        // contiguous host mapping, right before `haddr`.
        unsafe { std::ptr::copy_nonoverlapping(haddr.sub(len as usize), bytes.as_mut_ptr(), n) };
    } else {
        // A page start (or code QEMU has no host copy of): read through the guest's MMU.
        thread_local! {
            static BUF: RefCell<Option<ByteBuf>> = const { RefCell::new(None) };
        }
        let read = BUF.with(|b| {
            let mut b = b.borrow_mut();
            let buf = b.get_or_insert_with(ByteBuf::new);
            buf.read_memory(before, n)
                .map(|m| bytes[..n].copy_from_slice(m))
                .is_some()
        });
        if !read {
            return false;
        }
    }
    matches!(isa.classify(before, &bytes[..n]), InsnKind::Call { ret_addr, .. } if ret_addr == pc)
}

/// One vCPU's flag, as its callbacks read and clear it.
#[derive(Debug, Clone, Copy)]
pub enum Pending {
    /// Straight through the scoreboard entry: only in system mode, where QEMU never grows
    /// scoreboards while the guest runs (see `clock::VcpuClock::Direct`).
    Direct(*mut u64),
    /// Through the API, for user mode, where new guest threads grow the scoreboards.
    Api(u32),
    None,
}

// Only used on the vCPU's own thread.
unsafe impl Send for Pending {}

impl Pending {
    pub fn for_vcpu(vcpu_index: u32, system_mode: bool) -> Pending {
        match entry() {
            // SAFETY: a live scoreboard, sized for this vCPU before its init.
            Some(e) if system_mode => Pending::Direct(unsafe {
                qemu_plugin_scoreboard_find(e.score, vcpu_index) as *mut u64
            }),
            Some(_) => Pending::Api(vcpu_index),
            None => Pending::None,
        }
    }

    /// Whether a return is pending; clears it.
    #[inline(always)]
    pub fn take(self) -> bool {
        match self {
            // SAFETY: see `Direct`; the inline store setting it runs on this same thread.
            Pending::Direct(p) => unsafe {
                let set = p.read_volatile() != 0;
                if set {
                    p.write_volatile(0);
                }
                set
            },
            // SAFETY: a live scoreboard entry of this vCPU.
            Pending::Api(i) => entry().is_some_and(|e| unsafe {
                let set = qemu_plugin_u64_get(e, i) != 0;
                if set {
                    qemu_plugin_u64_set(e, i, 0);
                }
                set
            }),
            Pending::None => false,
        }
    }
}
