//! ORC (`.orc_unwind`, `.orc_unwind_ip`): the unwind tables objtool writes into an x86-64
//! Linux kernel, which Debian's amd64 kernels unwind by instead of frame pointers.
//!
//! `.orc_unwind_ip` holds one signed 32-bit offset per entry, relative to its own address,
//! sorted by the address it gives; `.orc_unwind` the parallel 6-byte entries
//! (`arch/x86/include/asm/orc_types.h`): the CFA's offset (s16) from `sp_reg`, the caller's
//! rbp offset (s16) from `bp_reg` (`PREV_SP`: the CFA), then `sp_reg:4`, `bp_reg:4` and the
//! type. Linux 6.4 renumbered the types (`type:3`: UNDEFINED 0, END_OF_STACK 1, CALL 2,
//! REGS 3, REGS_PARTIAL 4; then `signal:1`); before (Debian bookworm's 6.1) they were
//! `type:2` (CALL 0, REGS 1, REGS_PARTIAL 2) and `end:1`. The tables say which: a kernel's
//! entries are mostly calls.

/// ORC's register numbers.
pub const REG_UNDEFINED: u8 = 0;
pub const REG_PREV_SP: u8 = 1;
pub const REG_BP: u8 = 4;
pub const REG_SP: u8 = 5;
pub const REG_SP_INDIRECT: u8 = 9;

/// What an entry describes, in either numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Undefined,
    EndOfStack,
    Call,
    /// An exception frame (all registers saved).
    Regs,
    /// An exception frame's partial registers.
    RegsPartial,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub sp_offset: i16,
    pub bp_offset: i16,
    pub sp_reg: u8,
    pub bp_reg: u8,
    pub kind: Kind,
    /// Linux 6.3 on: a signal or exception frame (its pc is not a return address).
    pub signal: bool,
}

/// The bits after the registers as Linux 6.4 and later number them (`new`), or before.
fn kind_of(bits: u16, new: bool) -> (Kind, bool) {
    if new {
        let kind = match (bits >> 8) & 7 {
            1 => Kind::EndOfStack,
            2 => Kind::Call,
            3 => Kind::Regs,
            4 => Kind::RegsPartial,
            _ => Kind::Undefined,
        };
        (kind, bits & (1 << 11) != 0)
    } else if bits & (1 << 10) != 0 {
        (Kind::EndOfStack, false)
    } else {
        let kind = match (bits >> 8) & 3 {
            0 => Kind::Call,
            1 => Kind::Regs,
            2 => Kind::RegsPartial,
            _ => Kind::Undefined,
        };
        (kind, false)
    }
}

impl Entry {
    fn decode(b: &[u8], new: bool) -> Entry {
        let bits = u16::from_le_bytes([b[4], b[5]]);
        let (kind, signal) = kind_of(bits, new);
        Entry {
            sp_offset: i16::from_le_bytes([b[0], b[1]]),
            bp_offset: i16::from_le_bytes([b[2], b[3]]),
            sp_reg: (bits & 0xf) as u8,
            bp_reg: ((bits >> 4) & 0xf) as u8,
            kind,
            signal,
        }
    }
}

/// A kernel's ORC tables.
pub struct Orc {
    /// Entry addresses, sorted (as the kernel's sort left them).
    ips: Vec<u64>,
    entries: Vec<Entry>,
}

/// Why sections are not ORC tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrcError {
    /// The two sections do not describe the same number of entries.
    Mismatch {
        ips: usize,
        entries: usize,
    },
    Unsorted,
}

impl std::fmt::Display for OrcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrcError::Mismatch { ips, entries } => write!(
                f,
                ".orc_unwind_ip has {ips} entries and .orc_unwind {entries}: not ORC tables"
            ),
            OrcError::Unsorted => write!(f, ".orc_unwind_ip is not sorted"),
        }
    }
}

impl std::error::Error for OrcError {}

impl Orc {
    /// Reads `.orc_unwind_ip` (its bytes and address) and `.orc_unwind`.
    pub fn parse(ip_data: &[u8], ip_addr: u64, unwind: &[u8]) -> Result<Orc, OrcError> {
        let n = ip_data.len() / 4;
        if unwind.len() / 6 != n
            || !ip_data.len().is_multiple_of(4)
            || !unwind.len().is_multiple_of(6)
        {
            return Err(OrcError::Mismatch {
                ips: n,
                entries: unwind.len() / 6,
            });
        }
        let ips: Vec<u64> = ip_data
            .chunks_exact(4)
            .enumerate()
            .map(|(i, c)| {
                let rel = i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64;
                ip_addr.wrapping_add(4 * i as u64).wrapping_add_signed(rel)
            })
            .collect();
        if ips.windows(2).any(|w| w[0] > w[1]) {
            return Err(OrcError::Unsorted);
        }
        // Most entries are calls: 2 in the new numbering, 0 in the old one.
        let type_is = |t: u16| {
            unwind
                .chunks_exact(6)
                .filter(|c| (u16::from_le_bytes([c[4], c[5]]) >> 8) & 7 == t)
                .count()
        };
        let new = type_is(2) > type_is(0);
        let entries = unwind
            .chunks_exact(6)
            .map(|c| Entry::decode(c, new))
            .collect();
        Ok(Orc { ips, entries })
    }

    pub fn entry_count(&self) -> usize {
        self.ips.len()
    }

    /// The entry in effect at `ip`: the last one at or below it.
    pub fn find(&self, ip: u64) -> Option<Entry> {
        let i = self.ips.partition_point(|&a| a <= ip).checked_sub(1)?;
        Some(self.entries[i])
    }
}

/// The caller's registers by one ORC entry of a call frame, from the callee's `sp` and
/// `bp`; `read` gives a stack word. Gives (return address, caller's sp, caller's bp), or
/// `None` where the entry ends the stack or describes something this unwinder does not
/// follow (an exception frame's saved registers, an undefined entry).
pub fn step(
    e: &Entry,
    sp: Option<u64>,
    bp: Option<u64>,
    read: impl Fn(u64) -> Option<u64>,
) -> Option<(u64, u64, Option<u64>)> {
    if e.kind != Kind::Call || e.signal {
        return None;
    }
    let off = e.sp_offset as i64;
    let cfa = match e.sp_reg {
        REG_SP => sp?.checked_add_signed(off)?,
        REG_BP => bp?.checked_add_signed(off)?,
        // The stack pointer saved where sp points, then the offset (Linux's unwind_orc.c:
        // `call_on_irqstack` keeps the interrupted stack's pointer at the interrupt stack's
        // top).
        REG_SP_INDIRECT => read(sp?)?.checked_add_signed(off)?,
        _ => return None,
    };
    let ra = read(cfa.checked_sub(8)?)?;
    let bp = match e.bp_reg {
        REG_UNDEFINED => bp,
        REG_PREV_SP => Some(read(cfa.checked_add_signed(e.bp_offset as i64)?)?),
        REG_BP => Some(read(bp?.checked_add_signed(e.bp_offset as i64)?)?),
        _ => return None,
    };
    Some((ra, cfa, bp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

    fn entry(sp_offset: i16, sp_reg: u8, bp_offset: i16, bp_reg: u8, kind: Kind) -> Entry {
        Entry {
            sp_offset,
            bp_offset,
            sp_reg,
            bp_reg,
            kind,
            signal: false,
        }
    }

    #[test]
    fn entries_decode_their_bit_fields_in_both_numberings() {
        use Kind::*;
        // sp+8 (SP = 5), bp undefined, a call: the entry at every function's start.
        let new = [8, 0, 0, 0, 0x05, 0x02];
        assert_eq!(
            Entry::decode(&new, true),
            entry(8, REG_SP, 0, REG_UNDEFINED, Call)
        );
        let old = [8, 0, 0, 0, 0x05, 0x00];
        assert_eq!(
            Entry::decode(&old, false),
            entry(8, REG_SP, 0, REG_UNDEFINED, Call)
        );
        // bp+16, bp at prev_sp-16, a signal frame (6.3 on).
        let bytes = [16, 0, 0xf0, 0xff, 0x14, 0x0a];
        let e = Entry::decode(&bytes, true);
        assert_eq!(
            (e.sp_reg, e.sp_offset, e.bp_reg, e.bp_offset),
            (REG_BP, 16, REG_PREV_SP, -16)
        );
        assert!(e.signal && e.kind == Call);
        // The old end-of-stack bit, and the new type.
        assert_eq!(
            Entry::decode(&[0, 0, 0, 0, 0, 0x04], false).kind,
            EndOfStack
        );
        assert_eq!(Entry::decode(&[0, 0, 0, 0, 0, 0x01], true).kind, EndOfStack);
        assert_eq!(Entry::decode(&[0, 0, 0, 0, 0x05, 0x01], false).kind, Regs);
    }

    #[test]
    fn a_cfa_below_the_return_address_slot_ends_the_unwind() {
        let stack = |a: u64| (a < 0x100).then_some(0x1234);
        // CFA = sp + 0 = 4: its return address would sit at 4 - 8.
        let e = entry(0, REG_SP, 0, REG_UNDEFINED, Kind::Call);
        assert_eq!(step(&e, Some(4), None, stack), None);
        assert_eq!(step(&e, Some(16), None, stack), Some((0x1234, 16, None)));
    }

    #[test]
    fn the_numbering_follows_the_majority_of_entries() {
        let ips: Vec<u8> = (0..3i32).flat_map(|i| (i * 4).to_le_bytes()).collect();
        let new = [
            [8, 0, 0, 0, 0x05, 0x02],
            [16, 0, 0, 0, 0x05, 0x02],
            [0, 0, 0, 0, 0, 0x01],
        ];
        let orc = Orc::parse(&ips, 0x1000, &new.concat()).unwrap();
        assert_eq!(orc.find(0x1000).unwrap().kind, Kind::Call);
        assert_eq!(orc.find(0x1010).unwrap().kind, Kind::EndOfStack);
        let old = [
            [8, 0, 0, 0, 0x05, 0x00],
            [16, 0, 0, 0, 0x05, 0x00],
            [0, 0, 0, 0, 0, 0x04],
        ];
        let orc = Orc::parse(&ips, 0x1000, &old.concat()).unwrap();
        assert_eq!(orc.find(0x1008).unwrap().kind, Kind::Call);
        assert_eq!(orc.find(0x1010).unwrap().kind, Kind::EndOfStack);
    }

    #[test]
    fn a_call_frame_steps_to_its_caller() {
        const RA: u64 = 0xffff_ffff_8100_0123;
        // The call pushed RA at 0x0ff8, the callee pushed the caller's rbp (0x2000) at
        // 0x0ff0 and set rbp there.
        let stack = |a: u64| match a {
            0x0ff8 => Some(RA),
            0x0ff0 => Some(0x2000),
            _ => None,
        };
        // After `push %rbp; mov %rsp,%rbp`: CFA = rbp + 16, rbp saved at CFA - 16.
        let e = entry(16, REG_BP, -16, REG_PREV_SP, Kind::Call);
        assert_eq!(
            step(&e, Some(0x0fe0), Some(0x0ff0), stack),
            Some((RA, 0x1000, Some(0x2000)))
        );
        // At the first instruction: CFA = rsp + 8, rbp untouched.
        let e = entry(8, REG_SP, 0, REG_UNDEFINED, Kind::Call);
        assert_eq!(
            step(&e, Some(0x0ff8), Some(0x5000), stack),
            Some((RA, 0x1000, Some(0x5000)))
        );
        // On an interrupt stack: its top slot (0x0ff8 here) holds the interrupted stack's
        // pointer, and the offset applies to that pointer (the return address below it).
        let irq_stack = |a: u64| match a {
            0x0ff8 => Some(0x2000),
            0x2000 => Some(RA),
            _ => None,
        };
        let e = entry(8, REG_SP_INDIRECT, 0, REG_UNDEFINED, Kind::Call);
        assert_eq!(
            step(&e, Some(0x0ff8), Some(0x5000), irq_stack),
            Some((RA, 0x2008, Some(0x5000)))
        );
        // The end of the stack, and exception frames, stop here.
        let end = entry(0, REG_UNDEFINED, 0, 0, Kind::EndOfStack);
        assert_eq!(step(&end, Some(0), None, stack), None);
        let regs = entry(0, REG_SP, 0, 0, Kind::Regs);
        assert_eq!(step(&regs, Some(0x0ff8), None, stack), None);
    }

    /// Debian's amd64 kernel with its debug symbols (scripts/install-deps.sh caches it).
    fn vmlinux() -> Vec<u8> {
        let path = std::env::var_os("HOME")
            .map(std::path::PathBuf::from)
            .unwrap_or_default()
            .join(".cache/qemu-uftrace/kernel-amd64-dbg/vmlinux");
        std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run scripts/install-deps.sh)", path.display()))
    }

    #[test]
    fn debian_amd64_kernel_functions_start_with_call_entries() {
        let bytes = vmlinux();
        let file = object::File::parse(&*bytes).unwrap();
        let ip = file
            .section_by_name(".orc_unwind_ip")
            .expect(".orc_unwind_ip");
        let unwind = file.section_by_name(".orc_unwind").expect(".orc_unwind");
        let orc = Orc::parse(ip.data().unwrap(), ip.address(), unwind.data().unwrap()).unwrap();
        assert!(orc.entry_count() > 100_000, "{}", orc.entry_count());
        // At a C function's first instruction the return address is the stack top:
        // CFA = rsp + 8, rbp not saved. (Assembly entry points and the like differ.)
        let text = file.section_by_name(".text").unwrap();
        let range = text.address()..text.address() + text.size();
        let funcs: Vec<u64> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && range.contains(&s.address()))
            .filter(|s| s.size() > 0)
            .map(|s| s.address())
            .collect();
        assert!(funcs.len() > 10_000);
        let at_entry = entry(8, REG_SP, 0, REG_UNDEFINED, Kind::Call);
        let calls = funcs
            .iter()
            .filter(|&&f| orc.find(f) == Some(at_entry))
            .count();
        assert!(
            calls * 100 > funcs.len() * 90,
            "{calls} of {} functions start with sp+8",
            funcs.len()
        );
        // schedule() in particular, and its body below its pushes.
        let schedule = file
            .symbols()
            .find(|s| s.name() == Ok("schedule"))
            .expect("schedule");
        assert_eq!(orc.find(schedule.address()), Some(at_entry));
        let deeper = (schedule.address()..schedule.address() + schedule.size())
            .filter_map(|a| orc.find(a))
            .any(|e| e.kind == Kind::Call && e.sp_reg == REG_SP && e.sp_offset > 8);
        assert!(deeper, "no entry of schedule's body has pushed anything");
        // Below the first entry there is none.
        assert_eq!(orc.find(0), None);
    }

    #[test]
    fn bad_tables_are_errors() {
        assert!(matches!(
            Orc::parse(&[0; 8], 0, &[0; 6]),
            Err(OrcError::Mismatch { ips: 2, entries: 1 })
        ));
        // Two entries, the second 8 bytes before the first.
        let ips = [8i32.to_le_bytes(), (-4i32).to_le_bytes()].concat();
        assert_eq!(
            Orc::parse(&ips, 0x1000, &[0; 12]).err(),
            Some(OrcError::Unsorted)
        );
    }
}
