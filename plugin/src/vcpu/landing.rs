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
//! A return that lands anywhere else (a new task's first instruction) leaves the flag set;
//! the next callback finds it and closes the top frame, the return's most likely owner
//! (`Engine::ret_unseen`). An interrupt taken between a return and its landing block is
//! taken at that block: the discontinuity callback sees the flag and takes the interrupted
//! pc, where it follows a call, as the return's target (`callbacks::settle_at`).

use crate::ffi::qemu_plugin_u64;
use crate::state::guest::{ByteBuf, LOOKBEHIND_MAX, MIN_PAGE};
use crate::vcpu::scoreboard::{Scoreboard, VcpuWord};
use qemu_uftrace_engine::arch::{Isa, Mode};
use qemu_uftrace_engine::guest::call_returning_to;
use std::cell::RefCell;
use std::sync::OnceLock;

static PENDING: OnceLock<Scoreboard> = OnceLock::new();

/// The flag's value while a return is pending (kept beside the word it is stored in).
pub use crate::vcpu::scoreboard::RETURN;

/// `flag`: a zeroed per-vCPU word (no return is pending at start).
pub fn init(flag: Scoreboard) {
    PENDING.get_or_init(|| flag);
}

/// The flag a return sets inline and a landing block's callback is conditional on.
pub fn entry() -> Option<qemu_plugin_u64> {
    PENDING.get().map(Scoreboard::entry)
}

/// Whether a block starting at `pc` (in code of width `mode`) is where a call returns: the
/// instruction before it is a call whose return address is `pc` (the architecture decides,
/// from the bytes before `pc`: `Isa::call_ending_at`). `haddr` is the host copy of the
/// block's first instruction, when QEMU has one.
pub fn is_landing(isa: &dyn Isa, mode: Mode, pc: u64, haddr: *const u8) -> bool {
    let len = isa.call_lookbehind().min(LOOKBEHIND_MAX);
    if pc < len as u64 {
        return false;
    }
    let mut bytes = [0u8; LOOKBEHIND_MAX];
    let n = if pc % MIN_PAGE >= len as u64 && !haddr.is_null() {
        // SAFETY: the bytes sit on the same guest page as `pc`, so they are in the same
        // contiguous host mapping, right before `haddr`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                haddr.sub(len),
                bytes.as_mut_ptr().add(LOOKBEHIND_MAX - len),
                len,
            )
        };
        len
    } else {
        // A page start (or code QEMU has no host copy of): read through the guest's MMU.
        thread_local! {
            static BUF: RefCell<Option<ByteBuf>> = const { RefCell::new(None) };
        }
        let read = BUF.with(|b| {
            let mut b = b.borrow_mut();
            b.get_or_insert_with(ByteBuf::new)
                .read_before(pc, len, &mut bytes)
        });
        match read {
            Some(n) => n,
            None => return false,
        }
    };
    call_returning_to(isa, mode, pc, &bytes[LOOKBEHIND_MAX - n..]).is_some()
}

/// One vCPU's flag, as its callbacks read and clear it.
#[derive(Clone, Copy)]
pub struct Pending(Option<VcpuWord>);

impl Pending {
    pub fn for_vcpu(vcpu_index: u32, direct: bool) -> Pending {
        Pending(PENDING.get().map(|s| s.for_vcpu(vcpu_index, direct)))
    }

    /// A return is pending (what a return's inline store does).
    pub fn set(self) {
        if let Some(word) = self.0 {
            word.set(RETURN);
        }
    }

    /// Whether a return is pending; clears it, and a jump through a register that landed
    /// where no block looked (`handlers::jumps`).
    #[inline(always)]
    pub fn take(self) -> bool {
        match self.0 {
            Some(word) => match word.get() {
                0 => false,
                flag => {
                    word.set(0);
                    flag == RETURN
                }
            },
            None => false,
        }
    }

    /// The address of the jump through a register that is pending, if one is; clears it.
    pub fn take_jump(self) -> Option<u64> {
        let word = self.0?;
        let flag = word.get();
        (flag > RETURN).then(|| {
            word.set(0);
            flag
        })
    }
}
