//! A Linux kernel's struct layouts from its own BTF (`.BTF`, which pahole writes from the
//! same DWARF at build time): in a vmlinux, in the ELF inside an x86 bzImage, or in a raw
//! arm64/riscv64 `Image` between the kallsyms symbols `__start_BTF` and `__stop_BTF`. A
//! distribution's stock kernel carries it (CONFIG_DEBUG_INFO_BTF), its -dbg DWARF is a
//! download most users never make.

use std::path::Path;

use btf_rs::{Btf, Type};

use crate::kernel_image::{self, Unpacked};
use crate::MemberError;

/// Anonymous struct and union members nest (C11); a malformed file could loop them.
const MAX_NESTING: usize = 8;

/// The BTF header's size in every kernel that writes BTF (`struct btf_header`).
const HEADER_LEN: usize = 24;

/// The kernel's BTF in `data` (a vmlinux or any ELF with `.BTF`, or a raw kernel image),
/// parsed; `Ok(None)` when it has none.
pub(crate) fn read(path: &Path, data: &[u8]) -> Result<Option<Btf>, MemberError> {
    let corrupt = |reason: String| MemberError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let image = if data.starts_with(b"\x7fELF") {
        Unpacked::Borrowed(data)
    } else {
        match kernel_image::unpack(path, data) {
            Ok(image) => image,
            // Not a kernel image we can open: it has no BTF we can find.
            Err(_) => return Ok(None),
        }
    };
    let section = if image.starts_with(b"\x7fELF") {
        elf_section(&image)
    } else {
        image_section(&image).map_err(corrupt)?
    };
    let Some(section) = section else {
        return Ok(None);
    };
    let section = checked(section).map_err(|why| corrupt(format!("bad BTF: {why}")))?;
    Btf::from_bytes(section)
        .map(Some)
        .map_err(|e| corrupt(format!("bad BTF: {e}")))
}

/// An ELF's `.BTF` section (a bzImage's payload is the stripped vmlinux: it keeps it).
fn elf_section(elf: &[u8]) -> Option<&[u8]> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(elf).ok()?;
    let section = file.section_by_name(".BTF")?;
    section.data().ok().filter(|d| !d.is_empty())
}

/// A raw image's BTF. Its bounds are `__start_BTF` and `__stop_BTF` only in a kernel whose
/// kallsyms lists data symbols too (CONFIG_KALLSYMS_ALL, which Debian's arm64 cloud kernel
/// lacks), and its place in the file follows from them only where the image's first
/// symbol is listed: so the section is found by its header instead, the one of
/// `__stop_BTF - __start_BTF` bytes where kallsyms says, else the largest (the kernel's
/// own: a few MB, where the BPF skeletons built in carry a few KB of their own).
/// `Ok(None)`: no BTF header in the image.
fn image_section(image: &[u8]) -> Result<Option<&[u8]>, String> {
    let listed = kernel_image::decoded(image).and_then(|decoded| {
        let symbols = &decoded.unbased;
        let addr = |name: &[u8]| symbols.iter().find(|s| s.name == name).map(|s| s.addr);
        Some(addr(b"__stop_BTF")?.wrapping_sub(addr(b"__start_BTF")?))
    });
    let mut best: Option<&[u8]> = None;
    for at in memchr::memmem::find_iter(image, &HEADER_START) {
        let Some(section) = declared(&image[at..]) else {
            continue;
        };
        match listed {
            Some(len) if section.len() as u64 == len => return Ok(Some(section)),
            _ => {}
        }
        if best.is_none_or(|b| b.len() < section.len()) {
            best = Some(section);
        }
    }
    match (listed, best) {
        (Some(len), Some(_)) => Err(format!(
            "kallsyms has __start_BTF and __stop_BTF {len} bytes apart, and no BTF of that \
             size is in the image"
        )),
        (_, best) => Ok(best),
    }
}

/// The first 12 bytes of a little-endian BTF header as every kernel writes it: magic,
/// version 1, no flags, a 24-byte header, the types right after it.
const HEADER_START: [u8; 12] = [0x9f, 0xeb, 1, 0, 24, 0, 0, 0, 0, 0, 0, 0];

/// The BTF whose header starts `data`, as long as the header says (the strings right after
/// the types, as the kernel writes them), when it fits.
fn declared(data: &[u8]) -> Option<&[u8]> {
    let word = |at: usize| Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?));
    let (type_len, str_off, str_len) = (word(12)?, word(16)?, word(20)?);
    if str_off != type_len {
        return None;
    }
    let len = HEADER_LEN.checked_add(usize::try_from(type_len.checked_add(str_len)?).ok()?)?;
    data.get(..len)
}

/// Whether `data` starts with a BTF header (version 1, either byte order).
fn is_header(data: &[u8]) -> bool {
    matches!(data.get(..3), Some([0x9f, 0xeb, 1] | [0xeb, 0x9f, 1]))
}

/// `section` cut to what its header says it holds, once the header is checked against its
/// length (the parser trusts those sizes).
fn checked(section: &[u8]) -> Result<&[u8], String> {
    if !is_header(section) || section.len() < HEADER_LEN {
        return Err("no BTF header".into());
    }
    let little = section[0] == 0x9f;
    let word = |at: usize| {
        let b = [
            section[at],
            section[at + 1],
            section[at + 2],
            section[at + 3],
        ];
        u64::from(if little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let (hdr_len, type_off, type_len, str_off, str_len) =
        (word(4), word(8), word(12), word(16), word(20));
    let end = hdr_len + (type_off + type_len).max(str_off + str_len);
    if hdr_len < HEADER_LEN as u64 || end > section.len() as u64 {
        return Err(format!(
            "its header says {end} bytes, the section has {}",
            section.len()
        ));
    }
    Ok(&section[..end as usize])
}

/// Whether `btf` defines `struct structure` (a kernel's BTF defines `task_struct`).
pub(crate) fn defines(btf: &Btf, structure: &str) -> bool {
    definition(btf, structure).is_some()
}

fn definition(btf: &Btf, structure: &str) -> Option<btf_rs::Struct> {
    btf.resolve_types_by_name(structure)
        .ok()?
        .into_iter()
        .find_map(|t| match t {
            Type::Struct(s) => Some(s),
            _ => None,
        })
}

/// The byte offset of `member` in `struct structure`, members of anonymous structs and
/// unions counting as its own (as in C, and as the DWARF reader counts them).
pub(crate) fn member_offset(
    path: &Path,
    btf: &Btf,
    structure: &str,
    member: &str,
) -> Result<u64, MemberError> {
    let s = definition(btf, structure).ok_or_else(|| MemberError::NoStruct {
        path: path.to_path_buf(),
        structure: structure.to_string(),
    })?;
    let bits = find_member(btf, &s, member, 0).ok_or_else(|| MemberError::NoMember {
        path: path.to_path_buf(),
        structure: structure.to_string(),
        member: member.to_string(),
    })?;
    Ok(bits / 8)
}

/// The bit offset of `member` in `s` or in an anonymous struct or union inside it.
fn find_member(btf: &Btf, s: &btf_rs::Struct, member: &str, depth: usize) -> Option<u64> {
    if depth > MAX_NESTING {
        return None;
    }
    for m in &s.members {
        let name = btf.resolve_name(m).ok()?;
        let at = u64::from(m.bit_offset());
        if name == member {
            return Some(at);
        }
        if name.is_empty() {
            if let Ok(Type::Struct(inner) | Type::Union(inner)) = btf.resolve_chained_type(m) {
                if let Some(inside) = find_member(btf, &inner, member, depth + 1) {
                    return Some(at + inside);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF section: `struct outer { int a; union { int b; struct { int c; }; }; }` with `c`
    /// 8 bytes in.
    fn sample() -> Vec<u8> {
        let strings = b"\0int\0outer\0a\0b\0c\0";
        let (int, outer, a, b, c) = (1u32, 5u32, 11u32, 13u32, 15u32);
        let mut types = Vec::new();
        let mut push = |words: &[u32]| {
            for w in words {
                types.extend_from_slice(&w.to_le_bytes());
            }
        };
        // 1: int (INT, size 4, 32 bits)
        push(&[int, 1 << 24, 4, 32]);
        // 2: struct { int c; } (anonymous, size 4)
        push(&[0, (4 << 24) | 1, 4, c, 1, 0]);
        // 3: union { int b; struct 2; } (anonymous, size 4)
        push(&[0, (5 << 24) | 2, 4, b, 1, 0, 0, 2, 0]);
        // 4: struct outer { int a; union 3 at byte 8; }
        push(&[outer, (4 << 24) | 2, 12, a, 1, 0, 0, 3, 64]);
        let mut out = Vec::new();
        out.extend_from_slice(&[0x9f, 0xeb, 1, 0]);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(strings);
        out
    }

    #[test]
    fn anonymous_members_count_as_the_structs_own() {
        let data = sample();
        let btf = Btf::from_bytes(checked(&data).unwrap()).unwrap();
        let path = Path::new("sample");
        assert_eq!(member_offset(path, &btf, "outer", "a").unwrap(), 0);
        assert_eq!(member_offset(path, &btf, "outer", "b").unwrap(), 8);
        assert_eq!(member_offset(path, &btf, "outer", "c").unwrap(), 8);
        assert!(matches!(
            member_offset(path, &btf, "outer", "d"),
            Err(MemberError::NoMember { .. })
        ));
        assert!(matches!(
            member_offset(path, &btf, "inner", "a"),
            Err(MemberError::NoStruct { .. })
        ));
    }

    /// In an image without kallsyms, the largest BTF is the kernel's; a header whose sizes
    /// run past the image's end is passed over.
    #[test]
    fn the_largest_btf_of_an_image_is_the_kernels() {
        let small = sample();
        let mut large = sample();
        // The same types with a longer string section (one more name, unused).
        let extra = b"padding\0";
        large.extend_from_slice(extra);
        let str_len = u32::from_le_bytes(large[20..24].try_into().unwrap()) + extra.len() as u32;
        large[20..24].copy_from_slice(&str_len.to_le_bytes());
        let mut image = vec![0x11; 64];
        image.extend_from_slice(&small);
        image.extend_from_slice(&[0x22; 40]);
        image.extend_from_slice(&large);
        image.extend_from_slice(&[0x33; 8]);
        let mut cut = sample();
        cut[20..24].copy_from_slice(&4096u32.to_le_bytes());
        image.extend_from_slice(&cut);
        assert_eq!(image_section(&image).unwrap(), Some(&large[..]));
        assert_eq!(image_section(&[0x44; 100]).unwrap(), None);
    }

    /// Sizes in the header past the section's end are refused before the parser sees them,
    /// and any cut or damaged section is an error, never a panic.
    #[test]
    fn damaged_sections_are_errors() {
        let good = sample();
        let mut long = good.clone();
        long[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(checked(&long).unwrap_err().contains("header says"));
        for len in 0..good.len() {
            if let Ok(cut) = checked(&good[..len]) {
                let _ = Btf::from_bytes(cut);
            }
        }
        for at in 0..good.len() {
            for v in [0x00, 0xff, good[at].wrapping_add(1)] {
                let mut bytes = good.clone();
                bytes[at] = v;
                if let Ok(section) = checked(&bytes) {
                    if let Ok(btf) = Btf::from_bytes(section) {
                        let _ = member_offset(Path::new("x"), &btf, "outer", "c");
                    }
                }
            }
        }
    }
}
