//! What the engine's slow paths may ask of the guest, and the one decoding question they
//! share: is the instruction before a return address a call that returns there?

use crate::arch::{Isa, Mode};

pub use crate::arch::CallSite;

/// Read access to the guest that the slow paths need (the plugin reads QEMU; tests lay
/// memory out by hand).
pub trait GuestView {
    /// The frame-pointer register.
    fn frame_pointer(&mut self) -> Option<u64>;
    /// The frame record that frame-pointer value `fp` points at: (caller's frame pointer,
    /// return address), wherever the architecture keeps them around `fp`
    /// ([`Isa::frame_slots`]).
    fn frame_record(&mut self, fp: u64) -> Option<(u64, u64)>;
    /// The call instruction that `ret_addr` returns from, if the instruction before it is one.
    fn call_before(&mut self, ret_addr: u64) -> Option<CallSite>;
    /// The function the call before `ret_addr` called, where known: as
    /// [`GuestView::call_before`]'s direct target, or (a guest that can tell) a call through a
    /// register the instruction before it set (RISC-V's far `call`: `auipc ra; jalr ra`).
    /// Read for a longjmp's landing only, to name setjmp.
    fn callee_before(&mut self, ret_addr: u64) -> Option<u64> {
        self.call_before(ret_addr)?.target
    }
    /// Saves what an unwinder needs of the running context (its registers and the top of
    /// its stack) for the CLI to unwind after the run, where the frame records say nothing:
    /// task `tid`, running at `pc`, at record time `time`. Gives the cookie's number (the
    /// marker written in the task's stream names it), or `None` where none was saved (the
    /// default: the engine guesses then, as without).
    fn save_stack(&mut self, _tid: u32, _pc: u64, _time: u64) -> Option<u32> {
        None
    }
}

/// The call that ends at `ret_addr` and returns there, given the bytes before it (up to
/// [`Isa::call_lookbehind`] of them, ending at `ret_addr`).
pub fn call_returning_to(
    isa: &dyn Isa,
    mode: Mode,
    ret_addr: u64,
    before: &[u8],
) -> Option<CallSite> {
    isa.call_ending_at(mode, ret_addr, before)
}

/// A frame record read through `read(addr, buf)` (fills `buf` from guest memory at `addr`,
/// little-endian words), at the slots the architecture keeps it in: (caller's frame
/// pointer, return address).
pub fn read_frame_record(
    isa: &dyn Isa,
    fp: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> Option<()>,
) -> Option<(u64, u64)> {
    let slots = isa.frame_slots(fp);
    let mut b = [0u8; 16];
    if slots.ret_addr == slots.caller_fp.wrapping_add(8) {
        // One read for both (every architecture so far).
        read(slots.caller_fp, &mut b)?;
    } else {
        read(slots.caller_fp, &mut b[..8])?;
        read(slots.ret_addr, &mut b[8..])?;
    }
    let (fp_word, ra_word) = b.split_at(8);
    Some((
        u64::from_le_bytes(fp_word.try_into().ok()?),
        u64::from_le_bytes(ra_word.try_into().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{isa, Arch};
    use std::collections::HashMap;

    fn memory(words: &[(u64, u64)]) -> HashMap<u64, u8> {
        let mut m = HashMap::new();
        for &(addr, value) in words {
            for (i, b) in value.to_le_bytes().into_iter().enumerate() {
                m.insert(addr + i as u64, b);
            }
        }
        m
    }

    fn reader(m: &HashMap<u64, u8>) -> impl FnMut(u64, &mut [u8]) -> Option<()> + '_ {
        |addr, out| {
            for (i, b) in out.iter_mut().enumerate() {
                *b = *m.get(&(addr + i as u64))?;
            }
            Some(())
        }
    }

    #[test]
    fn aarch64_frame_records_sit_at_the_frame_pointer() {
        let m = memory(&[(0x8000, 0x8100), (0x8008, 0x4000_1234)]);
        let isa = isa(Arch::Aarch64);
        assert_eq!(
            read_frame_record(isa, 0x8000, reader(&m)),
            Some((0x8100, 0x4000_1234))
        );
        assert_eq!(read_frame_record(isa, 0x9000, reader(&m)), None);
    }
}
