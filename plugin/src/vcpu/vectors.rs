//! Which exception was taken, where no register says (x86): from the bytes of the
//! instruction that raised it (`INT n`, `INT3`, `SYSCALL`), or else from the vector table
//! (the IDT, or real mode's vectors) whose entry leads to the handler. The table's place is
//! taken from the loads of the instruction that sets it (`lidt`), the table itself read
//! when an exception needs it, and what a handler's vector is kept until the table moves.

use crate::state::guest::{ByteBuf, MIN_PAGE};
use qemu_uftrace_engine::arch::Isa;
use std::collections::HashMap;

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

impl VectorTable {
    /// The syndrome of the exception raised at `from_pc` and delivered to `handler`, on
    /// architectures without a syndrome register (`Isa::vector_entry_size`); read right after
    /// delivery, the vCPU running the handler's code (`regs`: its buffer).
    pub fn syndrome(
        &mut self,
        regs: &mut ByteBuf,
        isa: &dyn Isa,
        from_pc: u64,
        handler: u64,
    ) -> Option<u64> {
        let mode = crate::state::guest::current_mode(isa, regs);
        let size = isa.vector_entry_size(mode)?;
        let len = (isa.fetch_len() as u64).min(MIN_PAGE - from_pc % MIN_PAGE) as usize;
        if let Some(s) = regs
            .read_memory(from_pc, len)
            .and_then(|insn| isa.trap_syndrome(mode, insn))
        {
            return Some(s);
        }
        let table = self;
        if let Some(&s) = table.syndromes.get(&handler) {
            return Some(s);
        }
        let bytes = (usize::from(table.limit) + 1).min(256 * size);
        let s = regs
            .read_memory(table.base, bytes)
            .and_then(|t| isa.vector_syndrome(mode, t, handler))?;
        // Misses are not kept: the guest may fill its table in later.
        table.syndromes.insert(handler, s);
        Some(s)
    }

    /// The place an instruction loading it (x86 `lidt`) gives: its 2-byte load is the limit,
    /// the other the base, masked by `mask` (the instruction's base mask).
    pub fn load(&mut self, is_limit: bool, value: u64, mask: u64) {
        if is_limit {
            self.limit = value as u16;
        } else {
            self.base = value & mask;
        }
        self.syndromes.clear();
    }
}
