//! `-A`/`-R`: the callbacks that read a function's arguments at its first instruction and
//! its return value at its return instructions (`state::args` says where, at translation),
//! and write them as carrier records (`format::args`) beside its ENTRY and EXIT records.
//! Registers and guest memory are read only here: `qemu_plugin_read_memory_vaddr` fails
//! rather than fault the guest, and a string it cannot read to its end is marked.

use crate::ffi::{qemu_plugin_insn, qemu_plugin_register_vcpu_insn_exec_cb, CB_R_REGS};
use crate::state::args::{self, Kind, Mem};
use crate::state::guest::ByteBuf;
use qemu_uftrace_format::args::{carriers, push_int, push_str, STR_MAX};
use qemu_uftrace_format::record::RecordType;
use std::ffi::{c_uint, c_void};

/// Instruments return instruction `insn` at `pc` inside a function with a return value.
///
/// # Safety
/// `insn` is a live instruction handle of the block being translated.
pub unsafe fn instrument_return(insn: *mut qemu_plugin_insn, pc: u64) {
    // SAFETY: as the caller's.
    unsafe { instrument(insn, pc, true) }
}

/// Instruments instruction `insn` at `pc`: a spec'd function's entry, or (`ret`) a return
/// instruction inside one with a return value.
///
/// # Safety
/// `insn` is a live instruction handle of the block being translated.
pub unsafe fn instrument(insn: *mut qemu_plugin_insn, pc: u64, ret: bool) {
    if !ret && args::entry_at(pc).is_some() {
        // SAFETY: our callback, for an instruction of the block being translated.
        unsafe {
            qemu_plugin_register_vcpu_insn_exec_cb(
                insn,
                on_entry,
                CB_R_REGS,
                pc as usize as *mut c_void,
            )
        };
    }
    if ret {
        if let Some((entry, _)) = args::returning_at(pc) {
            // SAFETY: as above.
            unsafe {
                qemu_plugin_register_vcpu_insn_exec_cb(
                    insn,
                    on_return,
                    CB_R_REGS,
                    entry as usize as *mut c_void,
                )
            };
        }
    }
}

/// Reads one value into `payload`; `None` where the register cannot be read (then nothing
/// is written: no value shown that was not read).
/// `at`: the value is the 8 bytes at the register's value plus `at` (a syscall wrapper's
/// `struct pt_regs`, the stack), read without faulting; unreadable, nothing is written.
fn read_value(
    regs: &mut ByteBuf,
    reg: &str,
    at: Option<u32>,
    kind: Kind,
    payload: &mut Vec<u8>,
) -> Option<()> {
    let mut value = regs.read_named(reg)?;
    if let Some(off) = at {
        value = regs.read_le(value.wrapping_add(u64::from(off)), 8)?;
    }
    match kind {
        Kind::Int(size) => push_int(payload, value, size),
        Kind::Str => {
            let read = if value == 0 {
                Vec::new()
            } else {
                regs.copy_from(value, STR_MAX + 1)
            };
            push_str(payload, value, &read);
        }
    }
    Some(())
}

/// # Safety
/// Registered by [`instrument`], its data the function's entry.
unsafe extern "C" fn on_entry(vcpu_index: c_uint, data: *mut c_void) {
    let pc = data as usize as u64;
    crate::state::guard("argument read", || {
        let Some(func) = args::entry_at(pc) else {
            return;
        };
        let isa = crate::state::isa_or_default();
        let (regs, _) = args::registers(isa);
        let sp = args::stack_pointer(isa);
        crate::vcpu::with(vcpu_index, |v| {
            // Only right after this function's ENTRY (not where it was not written: a
            // filter, its depth; not a loop back to its first instruction), or after it and
            // an interrupt taken before this instruction (`emit_carriers_after_entry`).
            let entered = v.engine.last_record().is_none_or(|(_, word)| {
                word & 3 == RecordType::Entry as u64
                    && word >> 16 == qemu_uftrace_format::addr48(pc)
            });
            let open = v.engine.stack().top().is_some_and(|f| f.func == pc);
            if !entered && !open {
                return;
            }
            let mut payload = Vec::with_capacity(32);
            for &(n, kind, at) in &func.args {
                // A syscall wrapper's arguments are all read through its first, those past
                // the registers from the stack.
                let (reg, off) = match at {
                    None => (regs.get(n as usize).copied(), None),
                    Some(Mem::FirstArg(off)) => (regs.first().copied(), Some(off)),
                    Some(Mem::Stack(off)) => (Some(sp), Some(off)),
                };
                let Some(reg) = reg else {
                    return;
                };
                if read_value(&mut v.regs, reg, off, kind, &mut payload).is_none() {
                    return;
                }
            }
            if entered {
                v.engine.emit_carriers(carriers(false, pc, &payload));
            } else {
                let ids: Vec<u64> = carriers(false, pc, &payload).collect();
                v.engine.emit_carriers_after_entry(pc, &ids);
            }
        });
    });
}

/// # Safety
/// Registered by [`instrument`], its data the function's entry.
unsafe extern "C" fn on_return(vcpu_index: c_uint, data: *mut c_void) {
    let entry = data as usize as u64;
    crate::state::guard("return value read", || {
        let Some((_, func)) = args::returning_at(entry) else {
            return;
        };
        let (_, reg) = args::registers(crate::state::isa_or_default());
        crate::vcpu::with(vcpu_index, |v| {
            // The frame this return closes: this function's, or one with its own return
            // value that ran into it without a call of its own (a program's PLT stub named
            // for the library function it jumps to, a tail call).
            let Some(top) = v.engine.stack().top().map(|f| f.func) else {
                return;
            };
            let kind = if top == entry {
                func.ret
            } else {
                args::spec_at(top).and_then(|f| f.ret)
            };
            let Some(kind) = kind else {
                return;
            };
            let mut payload = Vec::with_capacity(8);
            if read_value(&mut v.regs, reg, None, kind, &mut payload).is_none() {
                return;
            }
            v.engine.emit_carriers(carriers(true, top, &payload));
        });
    });
}
