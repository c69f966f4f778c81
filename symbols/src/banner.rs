//! The kernel's version banner (`linux_banner`, "Linux version …"), which a running kernel
//! keeps where its image is mapped: a run from a snapshot has no boot to watch, so its
//! randomised base is found by looking for these bytes in guest memory (the CLI's
//! `record/kaslr.rs`, the plugin's `state/kaslr.rs`).

use std::path::Path;

use crate::detect::{self, Kind};
use crate::kallsyms_tables::find_bytes;
use crate::{file_data, kernel_image, SymbolError};

/// How every banner starts.
const PREFIX: &[u8] = b"Linux version ";
/// Enough to tell the banner from anything else in the image, short enough for one read.
const MAX: usize = 64;

/// Where the banner is linked, and its first bytes (to its newline, at most 64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Banner {
    pub addr: u64,
    pub bytes: Vec<u8>,
}

/// The banner of the kernel in `path`: an ELF vmlinux's `linux_banner` (else the first copy
/// in its loaded sections), or a raw image's (arm64/riscv64 `Image`, x86 bzImage, gzip or
/// EFI zboot), placed by kallsyms' `_text`, the image's first byte. `Ok(None)`: none found.
pub fn kernel_banner(path: &Path) -> Result<Option<Banner>, SymbolError> {
    let data = file_data::map(path)?;
    match detect::detect(&data) {
        Kind::Elf => Ok(elf_banner(&data)),
        Kind::KernelImage => {
            let image = kernel_image::unpack(path, &data)?;
            if image.starts_with(b"\x7fELF") {
                // A bzImage's payload: the stripped vmlinux, sections and all.
                return Ok(elf_banner(&image));
            }
            let Some(at) = find_bytes(&image, PREFIX) else {
                return Ok(None);
            };
            let [text, primary_entry] = <[Option<u64>; 2]>::try_from(
                kernel_image::symbol_addresses(path, &data, &["_text", "primary_entry"])?,
            )
            .unwrap_or_default();
            let base = text.or_else(|| arm64_text(&image, primary_entry?));
            Ok(base.and_then(|base| banner(base.wrapping_add(at as u64), &image[at..])))
        }
        _ => Ok(None),
    }
}

/// Where an arm64 `Image`'s first byte is linked, whose kallsyms lacks `_text` (it lists
/// from `_stext`, 64 KiB further): the header's branch to `primary_entry` (at byte 0, or 4
/// after an EFI stub's `MZ` instruction) says how far into the image that is.
fn arm64_text(image: &[u8], primary_entry: u64) -> Option<u64> {
    if image.get(0x38..0x3c) != Some(b"ARM\x64") {
        return None;
    }
    [0usize, 4].into_iter().find_map(|at| {
        let insn = u32::from_le_bytes(image.get(at..at + 4)?.try_into().ok()?);
        // B imm26: the target is the instruction's own place plus imm26 words, signed.
        (insn & 0xfc00_0000 == 0x1400_0000).then(|| {
            let words = i64::from(((insn & 0x03ff_ffff) << 6) as i32 >> 6);
            let target = (at as i64).wrapping_add(words * 4) as u64;
            primary_entry.wrapping_sub(target)
        })
    })
}

/// The banner's bytes at the start of `from`, if they are one.
fn banner(addr: u64, from: &[u8]) -> Option<Banner> {
    if !from.starts_with(PREFIX) {
        return None;
    }
    let end = (from.iter().take(MAX))
        .position(|&b| b == 0 || b == b'\n')
        .unwrap_or(MAX.min(from.len()));
    Some(Banner {
        addr,
        bytes: from[..end].to_vec(),
    })
}

fn elf_banner(data: &[u8]) -> Option<Banner> {
    use object::{Object, ObjectSection, ObjectSymbol, SectionFlags};
    let file = object::File::parse(data).ok()?;
    let loaded = |s: &object::Section<'_, '_>| match s.flags() {
        SectionFlags::Elf { sh_flags } => sh_flags & u64::from(object::elf::SHF_ALLOC) != 0,
        _ => false,
    };
    let sections: Vec<_> = file.sections().filter(|s| loaded(s)).collect();
    let symbol = file
        .symbols()
        .find(|s| s.name_bytes() == Ok(b"linux_banner"));
    if let Some(addr) = symbol.map(|s| s.address()) {
        let at = sections.iter().find_map(|s| {
            let into = addr.checked_sub(s.address()).filter(|&i| i < s.size())?;
            banner(addr, s.data().ok()?.get(into as usize..)?)
        });
        if at.is_some() {
            return at;
        }
    }
    sections.iter().find_map(|s| {
        let data = s.data().ok()?;
        let at = find_bytes(data, PREFIX)?;
        banner(s.address().wrapping_add(at as u64), &data[at..])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm64_images_base_comes_from_its_branch_to_primary_entry() {
        let mut image = vec![0u8; 0x40];
        image[0x38..0x3c].copy_from_slice(b"ARM\x64");
        // "MZ" as an instruction, then `b +0x1398d18` (to 0x1398d1c).
        image[0..4].copy_from_slice(&0x91005a4du32.to_le_bytes());
        image[4..8].copy_from_slice(&(0x1400_0000u32 | (0x1398d18 / 4)).to_le_bytes());
        assert_eq!(
            arm64_text(&image, 0xffff_8000_0939_8d1c),
            Some(0xffff_8000_0800_0000)
        );
        image[0x38] = 0;
        assert_eq!(arm64_text(&image, 0xffff_8000_0939_8d1c), None);
    }

    #[test]
    fn the_banner_ends_at_its_newline_or_the_cap() {
        let b = banner(0x10, b"Linux version 6.1.0 (x)\n#1 SMP").unwrap();
        assert_eq!(
            (b.addr, b.bytes),
            (0x10, b"Linux version 6.1.0 (x)".to_vec())
        );
        let long = [PREFIX, &[b'a'; 100]].concat();
        assert_eq!(banner(0, &long).unwrap().bytes.len(), MAX);
        assert_eq!(banner(0, b"Linux v").map(|b| b.addr), None);
    }
}
