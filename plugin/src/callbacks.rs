//! The functions QEMU calls on every executed call and return instruction: find the vCPU,
//! take the time, read a register only when the target is not known otherwise, and hand over
//! to the engine (`hot.rs`). What each site needs comes from `sites`.

use crate::guest::QemuGuest;
use crate::sites::{call_site_at, ReturnSite};
use crate::vcpu;
use std::ffi::{c_uint, c_void};

/// # Safety
/// `data` is a call site from `sites::call_site`.
pub unsafe extern "C" fn on_direct_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    vcpu::with(vcpu_index, |v| {
        let now = v.clock.now(vcpu_index);
        v.note_call(site.ret_addr);
        v.engine.call(now, site.target, site.ret_addr)
    });
}

/// # Safety
/// As [`on_direct_call`], the target field holding the register number; registered with
/// QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_indirect_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    vcpu::with(vcpu_index, |v| {
        let now = v.clock.now(vcpu_index);
        if let Some(target) = v.regs.read_gpr(site.target as u8) {
            v.note_call(site.ret_addr);
            v.engine.call(now, target, site.ret_addr);
        }
    });
}

/// # Safety
/// `data` is a packed [`ReturnSite`]; registered with QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_return(vcpu_index: c_uint, data: *mut c_void) {
    let site = ReturnSite::unpack(data);
    let isa = crate::isa_or_default();
    vcpu::with(vcpu_index, |v| {
        let now = v.clock.now(vcpu_index);
        let target = if site.via_link && v.link.is_clean() {
            v.engine.stats.returns_link_known += 1;
            Some(v.last_call_ret)
        } else {
            let read = v.regs.read_gpr(site.reg);
            read.map(|t| {
                if site.signed {
                    isa.strip_authentication(t)
                } else {
                    t
                }
            })
        };
        if let Some(target) = target {
            let mut guest = QemuGuest {
                buf: &mut v.regs,
                isa,
            };
            v.engine.ret(now, target, &mut guest);
        }
    });
}

/// # Safety
/// `data` is the ERET's own address; registered with QEMU_PLUGIN_CB_R_REGS. Exception returns
/// are rare: two register reads are fine here.
pub unsafe extern "C" fn on_exception_return(vcpu_index: c_uint, data: *mut c_void) {
    let eret_pc = data as u64;
    let isa = crate::isa_or_default();
    vcpu::with(vcpu_index, |v| {
        let now = v.clock.now(vcpu_index);
        let level = v
            .regs
            .read_named(isa.status_register())
            .map(|s| isa.exception_level(s));
        let link = level.and_then(|l| isa.exception_link_register(l));
        if let Some(target) = link.and_then(|name| v.regs.read_named(name)) {
            v.engine.exception_return(now, target, eret_pc);
        }
        // Whatever the handler did, the link register is not known any more.
        v.link.set_unknown();
    });
}
