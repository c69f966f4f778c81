//! Which exception was taken, where no register says (x86): from the bytes of the
//! instruction that raised it (`INT n`, `INT3`, `SYSCALL`), or else from the vector table
//! (the IDT, or real mode's vectors) whose entry leads to the handler. The table's place is
//! taken from the loads of the instruction that sets it (`lidt`), the table itself read
//! when an exception needs it, and what a handler's vector is kept until the table moves.

use crate::api;
use crate::guest::MIN_PAGE;
use crate::vcpu::{self, VcpuState};
use qemu_uftrace_engine::arch::Isa;
use std::collections::HashMap;
use std::ffi::{c_uint, c_void};

/// One vCPU's vector table: where it is, and the syndromes of the handlers seen so far.
pub struct VectorTable {
    base: u64,
    limit: u16,
    syndromes: HashMap<u64, u64>,
}

impl Default for VectorTable {
    /// Real mode's vectors after reset: 256 far pointers at address 0.
    fn default() -> Self {
        VectorTable {
            base: 0,
            limit: 0x3ff,
            syndromes: HashMap::new(),
        }
    }
}

/// The syndrome of the exception raised at `from_pc` and delivered to `handler`, on
/// architectures without a syndrome register (`Isa::vector_entry_size`); read right after
/// delivery, the vCPU running the handler's code.
pub fn syndrome(v: &mut VcpuState, isa: &dyn Isa, from_pc: u64, handler: u64) -> Option<u64> {
    let mode = crate::guest::current_mode(isa, &mut v.regs);
    let size = isa.vector_entry_size(mode)?;
    let len = (isa.fetch_len() as u64).min(MIN_PAGE - from_pc % MIN_PAGE) as usize;
    if let Some(s) = v
        .regs
        .read_memory(from_pc, len)
        .and_then(|insn| isa.trap_syndrome(mode, insn))
    {
        return Some(s);
    }
    let table = &mut v.vectors;
    if let Some(&s) = table.syndromes.get(&handler) {
        return Some(s);
    }
    let bytes = (usize::from(table.limit) + 1).min(256 * size);
    let s = v
        .regs
        .read_memory(table.base, bytes)
        .and_then(|t| isa.vector_syndrome(mode, t, handler))?;
    // Misses are not kept: the guest may fill its table in later.
    table.syndromes.insert(handler, s);
    Some(s)
}

/// The memory callback of an instruction loading the vector table's place (x86 `lidt`):
/// its 2-byte load is the limit, the other the base, masked by `data` (the instruction's
/// base mask, from `Isa::loads_vector_table`).
///
/// # Safety
/// Registered as a read callback of that instruction alone.
pub unsafe extern "C" fn on_vector_table_load(
    vcpu_index: c_uint,
    info: api::MemInfo,
    _vaddr: u64,
    data: *mut c_void,
) {
    // SAFETY: inside the memory callback of the access `info` describes.
    let value = unsafe { api::qemu_plugin_mem_get_value(info) };
    vcpu::with(vcpu_index, |v| {
        let table = &mut v.vectors;
        if value.kind == api::MEM_VALUE_U16 {
            table.limit = value.data[0] as u16;
        } else {
            table.base = value.data[0] & data as u64;
        }
        table.syndromes.clear();
    });
}
