//! DWARF call frame information (`.eh_frame`, `.debug_frame`) read with gimli: the rules
//! that give a frame's caller's registers at one address.

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, EndianSlice, LittleEndian, Register,
    RegisterRule, UnwindContext, UnwindSection,
};

use super::image::{Image, Table};

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// How to find one register of the caller: the rules this unwinder follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Not mentioned: a callee-saved register the function left alone, or the return
    /// address still in the link register (a leaf).
    Unchanged,
    /// Saved at CFA + offset.
    At(i64),
    /// Is CFA + offset.
    Value(i64),
    /// Is another register's value.
    Register(u16),
    /// A rule this unwinder does not follow (DWARF expressions).
    Unsupported,
}

/// The rules at one address: the CFA as register + offset, the return address, the frame
/// pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub cfa: Option<(u16, i64)>,
    pub ra: Rule,
    pub fp: Rule,
    /// The return-address column of the entry's CIE.
    pub ra_column: u16,
}

fn rule(r: RegisterRule<usize>) -> Rule {
    match r {
        RegisterRule::Undefined | RegisterRule::SameValue => Rule::Unchanged,
        RegisterRule::Offset(o) => Rule::At(o),
        RegisterRule::ValOffset(o) => Rule::Value(o),
        RegisterRule::Register(Register(n)) => Rule::Register(n),
        _ => Rule::Unsupported,
    }
}

/// The address ranges of `section`'s FDEs and their offsets, sorted by address.
fn fde_index<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    bases: &BaseAddresses,
) -> Vec<(u64, u64, usize)> {
    let mut out = Vec::new();
    let mut entries = section.entries(bases);
    // A damaged entry ends the walk: the entries before it still serve.
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(S::cie_from_offset) {
                out.push((fde.initial_address(), fde.end_address(), fde.offset()));
            }
        }
    }
    out.sort_unstable();
    out
}

fn rules_in<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    table: &Table,
    bases: &BaseAddresses,
    addr: u64,
    fp: u16,
) -> Option<Rules> {
    let index = table.fde_index.get_or_init(|| fde_index(section, bases));
    let i = index.partition_point(|&(start, _, _)| start <= addr);
    let &(start, end, offset) = index.get(i.checked_sub(1)?)?;
    if !(start..end).contains(&addr) {
        return None;
    }
    let mut ctx = UnwindContext::new();
    let fde = section
        .fde_from_offset(bases, S::Offset::from(offset), S::cie_from_offset)
        .ok()?;
    let ra_column = fde.cie().return_address_register().0;
    let row = fde
        .unwind_info_for_address(section, bases, &mut ctx, addr)
        .ok()?;
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => Some((register.0, *offset)),
        CfaRule::Expression(_) => None,
    };
    Some(Rules {
        cfa,
        ra: rule(row.register(Register(ra_column))),
        fp: rule(row.register(Register(fp))),
        ra_column,
    })
}

/// The rules for `addr` in `image`'s tables (`.eh_frame` first, then `.debug_frame`);
/// `None` where no entry covers it. `fp` is the DWARF number of the frame pointer.
pub fn rules(image: &Image, addr: u64, fp: u16) -> Option<Rules> {
    if let Some(t) = &image.eh_frame {
        let mut section = EhFrame::new(&t.data, LittleEndian);
        section.set_address_size(8);
        let bases = BaseAddresses::default().set_eh_frame(t.addr);
        if let Some(r) = rules_in(&section, t, &bases, addr, fp) {
            return Some(r);
        }
    }
    if let Some(t) = &image.debug_frame {
        let mut section = DebugFrame::new(&t.data, LittleEndian);
        section.set_address_size(8);
        if let Some(r) = rules_in(&section, t, &BaseAddresses::default(), addr, fp) {
            return Some(r);
        }
    }
    None
}
