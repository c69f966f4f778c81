//! The functions QEMU calls on every executed call and return instruction: find the vCPU,
//! take the time, read a register only when the target is not known at translation, and hand
//! over to the engine (`hot.rs`).

use crate::guest::QemuGuest;
use crate::vcpu;
use std::ffi::{c_uint, c_void};

/// What translation learned about one call or return instruction.
pub struct Site {
    /// Direct call target, or the register that holds the target / return address.
    pub target: u64,
    pub reg: u8,
    pub ret_addr: u64,
    /// A return through the link register, which `link` may know without a read.
    pub via_link: bool,
    /// A return that authenticates its (signed) target, which must be stripped to compare.
    pub signed: bool,
}

/// # Safety
/// `site` is a `&'static Site` registered at translation.
pub unsafe extern "C" fn on_direct_call(vcpu_index: c_uint, site: *mut c_void) {
    let site = unsafe { &*(site as *const Site) };
    vcpu::with(vcpu_index, |v| {
        let now = v.clock.now(vcpu_index);
        v.note_call(site.ret_addr);
        v.engine.call(now, site.target, site.ret_addr)
    });
}

/// # Safety
/// As [`on_direct_call`]; registered with QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_indirect_call(vcpu_index: c_uint, site: *mut c_void) {
    let site = unsafe { &*(site as *const Site) };
    vcpu::with(vcpu_index, |v| {
        let now = v.clock.now(vcpu_index);
        if let Some(target) = v.regs.read_gpr(site.reg) {
            v.note_call(site.ret_addr);
            v.engine.call(now, target, site.ret_addr);
        }
    });
}

/// # Safety
/// As [`on_direct_call`]; registered with QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_return(vcpu_index: c_uint, site: *mut c_void) {
    let site = unsafe { &*(site as *const Site) };
    vcpu::with(vcpu_index, |v| {
        let now = v.clock.now(vcpu_index);
        let known = site.via_link && v.link.is_clean();
        let target = if known {
            v.engine.stats.returns_link_known += 1;
            Some(v.last_call_ret)
        } else {
            let read = v.regs.read_gpr(site.reg);
            read.map(|t| {
                if site.signed {
                    crate::isa_or_default().strip_authentication(t)
                } else {
                    t
                }
            })
        };
        if let Some(target) = target {
            let isa = crate::isa_or_default();
            let mut guest = QemuGuest {
                buf: &mut v.regs,
                isa,
            };
            v.engine.ret(now, target, &mut guest);
        }
    });
}

/// # Safety
/// As [`on_direct_call`], with the ERET's own address in `target`; registered with
/// QEMU_PLUGIN_CB_R_REGS. Exception returns are rare: two register reads are fine here.
pub unsafe extern "C" fn on_exception_return(vcpu_index: c_uint, site: *mut c_void) {
    let site = unsafe { &*(site as *const Site) };
    let isa = crate::isa_or_default();
    vcpu::with(vcpu_index, |v| {
        let now = v.clock.now(vcpu_index);
        let level = v
            .regs
            .read_named(isa.status_register())
            .map(|s| isa.exception_level(s));
        let link = level.and_then(|l| isa.exception_link_register(l));
        if let Some(target) = link.and_then(|name| v.regs.read_named(name)) {
            v.engine.exception_return(now, target, site.target);
        }
        // Whatever the handler did, the link register is not known any more.
        v.link.set_unknown();
    });
}
