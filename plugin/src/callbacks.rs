//! The functions QEMU calls on every executed call, on every return's landing block and on
//! exception returns: find the vCPU, take the time, read a register only when the target is
//! not known otherwise, and hand over to the engine (`hot.rs`). What each site needs comes
//! from `sites`.

use crate::guest::QemuGuest;
use crate::sites::{call_site_at, unpack};
use crate::vcpu::{self, VcpuState};
use std::ffi::{c_uint, c_void};

/// A return that landed where no landing block saw it is settled before the next event.
#[inline(always)]
fn settle(v: &mut VcpuState, now: u64) {
    if v.pending.take() {
        v.engine.ret_unseen(now);
    }
}

/// A call whose target is known. Each callback wraps this in its own closure, which the
/// compiler then inlines (one shared closure was left out of line). The common case is a
/// leaf with no call in it: anything unusual goes to `call_general` before changing state.
#[inline(always)]
fn direct_call(v: &mut VcpuState, target: u64, ret_addr: u64) {
    if let Some((now, false)) = v.fast.read() {
        if v.engine.try_call(now, target, ret_addr) {
            return;
        }
    }
    call_general(v, target, ret_addr)
}

#[cold]
#[inline(never)]
fn call_general(v: &mut VcpuState, target: u64, ret_addr: u64) {
    let now = v.clock.now();
    settle(v, now);
    v.engine.call(now, target, ret_addr)
}

/// A direct call whose addresses `sites::pack` fitted into `data` (most of them).
pub extern "C" fn on_packed_call(vcpu_index: c_uint, data: *mut c_void) {
    let (target, ret_addr) = unpack(data as u64);
    vcpu::with(vcpu_index, |v| direct_call(v, target, ret_addr));
}

/// # Safety
/// `data` is a call site from `sites::call_site`.
pub unsafe extern "C" fn on_direct_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    vcpu::with(vcpu_index, |v| direct_call(v, site.target, site.ret_addr));
}

/// # Safety
/// As [`on_direct_call`], the target field holding the register number; registered with
/// QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_indirect_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    vcpu::with(vcpu_index, |v| match v.regs.read_gpr(site.target as u8) {
        Some(target) => direct_call(v, target, site.ret_addr),
        None => {
            let now = v.clock.now();
            settle(v, now);
        }
    });
}

/// A block that starts just after a call, entered while a return is pending: that return
/// went here.
///
/// # Safety
/// `data` is the block's address; registered with QEMU_PLUGIN_CB_R_REGS, conditional on the
/// vCPU's pending flag.
pub unsafe extern "C" fn on_landing(vcpu_index: c_uint, data: *mut c_void) {
    let target = data as u64;
    vcpu::with(vcpu_index, |v| {
        if let Some(now) = v.fast.land() {
            if v.engine.try_ret(now, target) {
                return;
            }
        }
        landing_general(v, target)
    });
}

#[cold]
#[inline(never)]
fn landing_general(v: &mut VcpuState, target: u64) {
    v.pending.take();
    let now = v.clock.now();
    let mut guest = QemuGuest { buf: &mut v.regs };
    v.engine.ret(now, target, &mut guest);
}

/// # Safety
/// `data` is the ERET's own address; registered with QEMU_PLUGIN_CB_R_REGS. Exception returns
/// are rare: two register reads are fine here.
pub unsafe extern "C" fn on_exception_return(vcpu_index: c_uint, data: *mut c_void) {
    let eret_pc = data as u64;
    let isa = crate::isa_or_default();
    vcpu::with(vcpu_index, |v| {
        let now = v.clock.now();
        settle(v, now);
        let level = v
            .regs
            .read_named(isa.status_register())
            .map(|s| isa.exception_level(s));
        let link = level.and_then(|l| isa.exception_link_register(l));
        if let Some(target) = link.and_then(|name| v.regs.read_named(name)) {
            v.engine.exception_return(now, target, eret_pc);
        }
    });
}
