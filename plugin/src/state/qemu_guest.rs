//! The guest as the engine's slow paths read it (`GuestView`): frame records, the call
//! before a return address, a stack cookie at a resync. Apart from `guest` (raw register and
//! memory access), which the cookie's copy uses too.

use crate::state::guest::{current_mode, ByteBuf, LOOKBEHIND_MAX, MIN_PAGE};
use qemu_uftrace_engine::arch::{classify_after, InsnKind, Isa, Target, Thunk};
use qemu_uftrace_engine::guest::{call_returning_to, read_frame_record, CallSite, GuestView};

/// The current vCPU as the slow paths see it.
pub struct QemuGuest<'a> {
    pub buf: &'a mut ByteBuf,
}

impl QemuGuest<'_> {
    /// Looked up here, on the slow paths, rather than by every return.
    fn isa(&self) -> &'static dyn Isa {
        crate::state::isa_or_default()
    }
}

impl GuestView for QemuGuest<'_> {
    fn frame_pointer(&mut self) -> Option<u64> {
        self.buf.read_gpr(self.isa().frame_pointer())
    }

    fn frame_record(&mut self, fp: u64) -> Option<(u64, u64)> {
        let isa = self.isa();
        let (caller_fp, lr) = read_frame_record(isa, fp, |addr, out| {
            out.copy_from_slice(self.buf.read_memory(addr, out.len())?);
            Some(())
        })?;
        // With pointer authentication on, saved return addresses are signed.
        Some((caller_fp, isa.strip_authentication(lr)))
    }

    fn call_before(&mut self, ret_addr: u64) -> Option<CallSite> {
        let isa = self.isa();
        let mode = current_mode(isa, self.buf);
        let mut bytes = [0u8; LOOKBEHIND_MAX];
        let n = self
            .buf
            .read_before(ret_addr, isa.call_lookbehind(), &mut bytes)?;
        let mut site = call_returning_to(isa, mode, ret_addr, &bytes[LOOKBEHIND_MAX - n..])?;
        // A call to a thunk that branches through a register went elsewhere (x86 retpolines).
        if let Some(t) = site.target.filter(|_| isa.thunk_fetch_len() > 0) {
            let len = (isa.thunk_fetch_len() as u64).min(MIN_PAGE - t % MIN_PAGE) as usize;
            let entry = self.buf.read_memory(t, len);
            if matches!(
                entry.and_then(|e| isa.thunk(mode, e)),
                Some(Thunk::IndirectBranch { .. })
            ) {
                site.target = None;
            }
        }
        Some(site)
    }

    fn callee_before(&mut self, ret_addr: u64) -> Option<u64> {
        let site = self.call_before(ret_addr)?;
        if site.target.is_some() {
            return site.target;
        }
        // A call through a register: the instruction before it may have set that register
        // (`auipc ra, hi; jalr lo(ra)`), as translation reads such a pair (`classify_after`).
        let isa = self.isa();
        let mode = current_mode(isa, self.buf);
        let call = self
            .buf
            .read_memory(site.pc, (ret_addr - site.pc) as usize)?
            .to_vec();
        let mut prev = [0u8; LOOKBEHIND_MAX];
        let n = self.buf.read_before(site.pc, isa.fetch_len(), &mut prev)?;
        let prev = &prev[LOOKBEHIND_MAX - n..];
        let prev_pc = site.pc - n as u64;
        match classify_after(isa, mode, Some((prev_pc, prev)), site.pc, &call) {
            InsnKind::Call {
                target: Target::Direct(target),
                ..
            } => Some(target),
            _ => None,
        }
    }

    fn save_stack(&mut self, tid: u32, pc: u64, time: u64) -> Option<u32> {
        crate::state::resync_cookie::save(self.buf, tid, pc, time)
    }
}
