//! What the engine's slow paths may ask of the guest, and the one decoding question they
//! share: is the instruction before a return address a call that returns there?

use crate::arch::{InsnKind, Isa, Target};

/// The call instruction found just before a return address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSite {
    pub pc: u64,
    /// Known for direct calls.
    pub target: Option<u64>,
}

/// Read access to the guest that the slow paths need (the plugin reads QEMU; tests lay
/// memory out by hand).
pub trait GuestView {
    /// The frame-pointer register.
    fn frame_pointer(&mut self) -> Option<u64>;
    /// A frame record at `addr`: (caller's frame pointer, return address).
    fn frame_record(&mut self, addr: u64) -> Option<(u64, u64)>;
    /// The call instruction that `ret_addr` returns from, if the instruction before it is one.
    fn call_before(&mut self, ret_addr: u64) -> Option<CallSite>;
}

/// The call whose bytes `insn` are (at `ret_addr` minus the architecture's call length),
/// if it returns to `ret_addr`.
pub fn call_returning_to(isa: &dyn Isa, ret_addr: u64, insn: &[u8]) -> Option<CallSite> {
    let pc = ret_addr.checked_sub(isa.call_len())?;
    match isa.classify(pc, insn) {
        InsnKind::Call {
            target,
            ret_addr: r,
        } if r == ret_addr => Some(CallSite {
            pc,
            target: match target {
                Target::Direct(t) => Some(t),
                Target::Register(_) => None,
            },
        }),
        _ => None,
    }
}
