//! User mode: signal deliveries shown as entries (`[SIGALRM]` …) under the function they
//! interrupted, the handler beneath (`qemu_uftrace_engine::signals`).
//!
//! QEMU's discontinuity callback does not fire in linux-user (it lives in the system-mode
//! interrupt code), so deliveries are found from the program's side: the syscall callback
//! sees every `rt_sigaction` and keeps the handlers' addresses; a block starting at one gets
//! a callback on its first instruction, which tells a delivery from a call by the return
//! address (a call just pushed that frame; a delivery returns to the sigreturn trampoline)
//! and reads the signal number only for a delivery. `rt_sigreturn` closes the delivery.
//! A jump through a register right after a stack switch (x86-64's longjmp and unwinder,
//! which leave by `jmp *%reg`, not by a return) reads its target register, and the frames
//! it leaves close there. Nothing here runs per call or return.

use crate::ffi::{qemu_plugin_insn, qemu_plugin_register_vcpu_insn_exec_cb, CB_R_REGS};
use crate::vcpu;
use qemu_uftrace_engine::arch::LinkSlot;
use std::collections::HashSet;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Handler addresses the program installed (never SIG_DFL or SIG_IGN).
static HANDLERS: Mutex<Option<HashSet<u64>>> = Mutex::new(None);
/// Whether any handler is known: most programs install none, and their translations then
/// take no lock.
static ANY: AtomicBool = AtomicBool::new(false);

/// `SIG_DFL` and `SIG_IGN` are 0 and 1, not code.
const SIG_IGN: u64 = 1;

/// A syscall starts on vCPU `vcpu` (user mode's syscall callback).
pub fn syscall(vcpu_index: c_uint, num: i64, _a1: u64, a2: u64) {
    let abi = crate::state::isa_or_default().linux_user();
    if num == abi.rt_sigaction && a2 != 0 {
        // rt_sigaction(signum, act, oldact, sigsetsize): a new action when `act` is set.
        let handler = vcpu::with(vcpu_index, |v| {
            v.regs.read_le(a2.wrapping_add(abi.sigaction_handler), 8)
        })
        .flatten();
        if let Some(handler) = handler.filter(|&h| h > SIG_IGN) {
            let new = HANDLERS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(HashSet::new)
                .insert(handler);
            ANY.store(true, Ordering::Relaxed);
            // The handler may have run (and been translated) before it was installed: its
            // translation has no entry callback, so it is made again.
            if new {
                vcpu::with(vcpu_index, |v| v.regs.retranslate(handler));
            }
        }
    } else if num == abi.rt_sigreturn {
        vcpu::with(vcpu_index, |v| {
            let now = v.now();
            // The handler's return to the trampoline, which follows no call, is pending.
            v.settle(now);
            v.engine.signal_return(now);
        });
    }
}

/// At translation: a block starting at a handler's entry gets [`on_handler_entry`]; whether
/// it is one.
///
/// # Safety
/// `first` is the block's first instruction, during QEMU's translation callback.
pub unsafe fn instrument(first: *mut qemu_plugin_insn, start: u64) -> bool {
    if !ANY.load(Ordering::Relaxed) {
        return false;
    }
    let known = HANDLERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|h| h.contains(&start));
    if known {
        unsafe {
            qemu_plugin_register_vcpu_insn_exec_cb(
                first,
                on_handler_entry,
                CB_R_REGS,
                start as usize as *mut c_void,
            )
        };
    }
    known
}

/// A handler's first instruction runs: called, or started by a signal.
///
/// # Safety
/// `data` is the handler's address; registered with QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_handler_entry(vcpu_index: c_uint, data: *mut c_void) {
    let handler = data as u64;
    let isa = crate::state::isa_or_default();
    let abi = isa.linux_user();
    vcpu::with(vcpu_index, |v| {
        let link = match abi.link {
            LinkSlot::Register(name) => v.regs.read_named(name),
            LinkSlot::StackTop(sp) => v.regs.read_named(sp).and_then(|sp| v.regs.read_le(sp, 8)),
        };
        let now = v.now();
        v.settle(now);
        let Some(link) = link else {
            v.engine.stats.register_read_failures += 1;
            return;
        };
        if v.engine.entered_by_call(handler, link) {
            return;
        }
        let signo = v.regs.read_named(abi.first_argument).unwrap_or(0);
        v.engine.signal_entry(now, signo, handler, link);
    });
}

/// At translation: `insn` jumps through general register `reg` after a stack switch.
///
/// # Safety
/// `insn` is an instruction of the block QEMU is translating.
pub unsafe fn instrument_stack_switch_jump(insn: *mut qemu_plugin_insn, reg: u8) {
    unsafe {
        qemu_plugin_register_vcpu_insn_exec_cb(
            insn,
            on_stack_switch_jump,
            CB_R_REGS,
            reg as usize as *mut c_void,
        )
    };
}

/// A jump through a register after a stack switch is about to run (the register holds its
/// target): execution resumes in an outer frame.
///
/// # Safety
/// `data` is the register's number; registered with QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_stack_switch_jump(vcpu_index: c_uint, data: *mut c_void) {
    let reg = data as usize as u8;
    vcpu::with(vcpu_index, |v| {
        let target = v.regs.read_gpr(reg);
        let now = v.now();
        v.settle(now);
        match target {
            Some(target) => {
                let mut guest = crate::state::qemu_guest::QemuGuest { buf: &mut v.regs };
                v.engine.stack_switch_jump(now, target, &mut guest);
            }
            None => v.engine.stats.register_read_failures += 1,
        }
    });
}
