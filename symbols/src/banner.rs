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
            let base = kernel_image::flat_base(path, &data, &image)?;
            Ok(base.and_then(|base| banner(base.wrapping_add(at as u64), &image[at..])))
        }
        _ => Ok(None),
    }
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
