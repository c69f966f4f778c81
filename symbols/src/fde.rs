//! The functions a file's call frame information describes: one FDE per function compiled
//! with unwind tables, static ones included. A stripped file's `.dynsym` names only its
//! exports; its `.eh_frame` (which stays: C++ exceptions and backtraces need it) still says
//! where every other function starts and ends.

use gimli::{BaseAddresses, CieOrFde, EhFrame, EndianSlice, RunTimeEndian, UnwindSection};
use object::elf;
use object::read::elf::{FileHeader, SectionHeader, SectionTable};
use object::{Endian, Endianness};

/// The address ranges of `section`'s FDEs and their offsets in it, sorted by address. A
/// damaged entry ends the walk: the entries before it still serve.
pub fn fde_index<'a, S, R>(section: &S, bases: &BaseAddresses) -> Vec<(u64, u64, usize)>
where
    R: gimli::Reader<Offset = usize> + 'a,
    S: UnwindSection<R>,
{
    let mut out = Vec::new();
    let mut entries = section.entries(bases);
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

/// `(start, length)` of each function `.eh_frame` describes, at the file's own addresses,
/// sorted; empty when the file has none or it does not parse.
pub(crate) fn eh_frame_functions<'data, Elf: FileHeader<Endian = Endianness>>(
    sections: &SectionTable<'data, Elf, &'data [u8]>,
    endian: Endianness,
    data: &'data [u8],
    is_64: bool,
) -> Vec<(u64, u64)> {
    let Some((_, section)) = sections.section_by_name(endian, b".eh_frame") else {
        return Vec::new();
    };
    if section.sh_type(endian) == elf::SHT_NOBITS {
        return Vec::new();
    }
    let Ok(bytes) = section.data(endian, data) else {
        return Vec::new();
    };
    let gimli_endian = if endian.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let mut eh = EhFrame::new(bytes, gimli_endian);
    eh.set_address_size(if is_64 { 8 } else { 4 });
    let bases = BaseAddresses::default().set_eh_frame(section.sh_addr(endian).into());
    fde_index::<_, EndianSlice<'_, RunTimeEndian>>(&eh, &bases)
        .into_iter()
        .filter(|&(start, end, _)| end > start && start != 0)
        .map(|(start, end, _)| (start, end - start))
        .collect()
}
