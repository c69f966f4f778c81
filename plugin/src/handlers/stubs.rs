//! System mode, a Linux guest: a call into another file's PLT entry, which jumps on to a
//! guest file's function that `-F`/`-N` or `-A`/`-R` name (`PATH:FUNC`). The call was
//! decided by its target, the PLT entry; at the function's first instruction it is made
//! again as a call of the function ([`through_stub`]), so that the function is a filter's
//! root and its values go with its own record, as a call through the program's PLT is in
//! user mode (where the PLT entries are known before the run).

use crate::ffi::{qemu_plugin_insn, qemu_plugin_register_vcpu_insn_exec_cb, CB_NO_REGS};
use crate::vcpu::VcpuState;
use qemu_uftrace_engine::sites::{value_site, value_site_at, ValueSite};
use qemu_uftrace_engine::spaces::SpaceId;
use std::ffi::{c_uint, c_void};

/// Instruments `insn`, the first of a guest file's `-F`/`-N` function at `pc`, translated
/// in space `space`.
///
/// # Safety
/// `insn` is a live instruction handle of the block being translated.
pub unsafe fn instrument(insn: *mut qemu_plugin_insn, pc: u64, space: SpaceId) {
    let code = crate::state::spaces::code_extent(space, pc);
    let site = value_site(pc, pc, 0, code, space);
    // SAFETY: our callback, for an instruction of the block being translated.
    unsafe { qemu_plugin_register_vcpu_insn_exec_cb(insn, on_gated_entry, CB_NO_REGS, site) };
}

/// # Safety
/// Registered by [`instrument`], its data from `sites::value_site`.
unsafe extern "C" fn on_gated_entry(vcpu_index: c_uint, data: *mut c_void) {
    // SAFETY: as the caller's.
    let site = unsafe { value_site_at(data) };
    if super::stop_at::stopped() {
        return;
    }
    crate::state::guard("a call through a PLT", || {
        crate::vcpu::with(vcpu_index, |v| {
            let (pc, code) = placed(v, site);
            through_stub(v, pc, code);
        });
    });
}

/// Where `site`'s instruction and its file's mapping are in the space the vCPU runs.
pub fn placed(v: &mut VcpuState, site: &ValueSite) -> (u64, (u64, u64)) {
    let d = v.moved(site.space, site.pc);
    let code = (site.code.0.wrapping_add(d), site.code.1.wrapping_add(d));
    (site.pc.wrapping_add(d), code)
}

/// At the first instruction `pc` of a guest file's function, whose file is mapped at `code`
/// there: where the top frame is a call's into code outside it (another file's) that
/// jumped here, that code was a PLT entry (no other code crosses files without a call), or
/// another file's function that ends in a jump through its PLT (a tail call).
/// - Nothing recorded since its entry (no call of its own): the call is made one of this
///   function (`Engine::call_through_stub`). A frame the gates left unwritten has no record
///   to tell: crossing files is the whole test there, and it was not written anyway.
/// - Records since (the loader binding a lazy PLT entry on its first call, a page fault on
///   this function's first instruction, the tail-calling function's own calls), or none at
///   hand (the buffer handed over since): its entry is beyond taking back, and this
///   function is entered by a jump, nested in that frame as the engine nests tail calls
///   (`Engine::jump_entry`), so that it has its own record for its values and its filter.
///
/// Not in the same file: a function that tail-calls another without a call of its own
/// stays itself. No lock: the mapping's extent came from translation, moved as `pc` is.
pub fn through_stub(v: &mut VcpuState, pc: u64, code: (u64, u64)) {
    let Some(top) = v.engine.stack().top().copied() else {
        return;
    };
    if top.func == pc || top.is_jumped() || top.is_exception() {
        return;
    }
    if (code.0..code.1).contains(&top.func) {
        return;
    }
    if !v.engine.top_written() || v.engine.last_is_entry(top.func) == Some(true) {
        v.engine.call_through_stub(pc);
    } else {
        let now = v.now();
        v.engine.jump_entry(now, pc);
    }
}
