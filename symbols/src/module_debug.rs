//! Source lines of a Linux kernel module's functions, from its debug file (the `.ko` a
//! distribution's `-dbg` package keeps under `/usr/lib/debug/lib/modules/`, or the module
//! itself when it kept its DWARF). A module is a relocatable object: its DWARF refers to its
//! strings, line programs and code through relocations, applied here to copies of the debug
//! sections. Code addresses become `section index << 32 | offset` (a module's `.text`,
//! `.init.text` and `.exit.text` all start at 0), and its functions, from its symbol table,
//! take the same form; the lines are then found as for any ELF file
//! ([`dwarf_lines::lines_for`]), and returned by name: the module's symbols in guest memory,
//! which name its functions, carry no section.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use object::elf;
use object::read::elf::{ElfFile64, FileHeader, SectionHeader, Sym};
use object::Endianness;

use crate::elf::section_data;
use crate::{dwarf_lines, SourceLine, SymbolError};

/// The debug sections a line lookup reads (`dwarf_lines::lines_for`'s).
const SECTIONS: [&str; 7] = [
    ".debug_abbrev",
    ".debug_addr",
    ".debug_info",
    ".debug_line",
    ".debug_line_str",
    ".debug_str",
    ".debug_str_offsets",
];

/// Whether `path` is a relocatable ELF file (a kernel module or a `.o`), by its header.
pub fn is_relocatable(path: &Path) -> bool {
    fn e_type<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Option<u16> {
        let header = Elf::parse(data).ok()?;
        Some(header.e_type(header.endian().ok()?))
    }
    let Ok(data) = crate::file_data::map(path) else {
        return false;
    };
    let kind = match object::FileKind::parse(&data[..]) {
        Ok(object::FileKind::Elf64) => e_type::<elf::FileHeader64<Endianness>>(&data),
        Ok(object::FileKind::Elf32) => e_type::<elf::FileHeader32<Endianness>>(&data),
        _ => None,
    };
    kind == Some(elf::ET_REL)
}

/// One function of a module's debug file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFunction {
    /// Its size in bytes (its symbol's): the same in the module loaded, if this file is its.
    pub size: u64,
    /// The DWARF line at its entry, where the line tables have one.
    pub line: Option<SourceLine>,
}

/// Each function of the module at `path`, by symbol name. Names given twice (two `static`
/// functions of one name) are left out: the name alone cannot tell which is which.
pub fn module_functions(path: &Path) -> Result<HashMap<String, ModuleFunction>, SymbolError> {
    functions_in(path, &crate::file_data::map(path)?)
}

/// [`module_functions`] of the file `path`'s contents `data`.
pub(crate) fn functions_in(
    path: &Path,
    data: &[u8],
) -> Result<HashMap<String, ModuleFunction>, SymbolError> {
    let corrupt = |reason: String| SymbolError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let file = ElfFile64::<Endianness, &[u8]>::parse(data)
        .map_err(|e| corrupt(format!("not a 64-bit ELF module: {e}")))?;
    let endian = file.endian();
    let header = file.elf_header();
    if header.e_type(endian) != elf::ET_REL {
        return Err(corrupt(
            "not a kernel module (a relocatable ELF file)".into(),
        ));
    }
    let machine = header.e_machine(endian);
    let sections = file.elf_section_table();
    let code = |index: usize| {
        (sections.section(object::SectionIndex(index)))
            .is_ok_and(|s| s.sh_flags(endian) & u64::from(elf::SHF_EXECINSTR) != 0)
    };
    let symbols = file.elf_symbol_table();
    // Where a symbol's value points: `index << 32 | value` in code, the value elsewhere (an
    // offset into a debug section).
    let place = |sym: &elf::Sym64<Endianness>| {
        let index = sym.st_shndx(endian) as usize;
        let value = sym.st_value(endian);
        match code(index) {
            true => (index as u64) << 32 | value,
            false => value,
        }
    };
    let mut debug: HashMap<&str, Vec<u8>> = HashMap::new();
    for name in SECTIONS {
        let bytes = section_data(sections, endian, data, name).into_owned();
        if !bytes.is_empty() {
            debug.insert(name, bytes);
        }
    }
    if !debug.contains_key(".debug_line") {
        return Err(SymbolError::Stripped {
            path: path.to_path_buf(),
            hint: "no .debug_line: give the module's debug file (its -dbg package's)".into(),
        });
    }
    // Each relocation section's target, when it is one of the debug sections kept.
    for rel in sections.iter() {
        if rel.sh_type(endian) != elf::SHT_RELA {
            continue;
        }
        let target = sections
            .section(object::SectionIndex(rel.sh_info(endian) as usize))
            .ok()
            .and_then(|t| sections.section_name(endian, t).ok())
            .and_then(|n| std::str::from_utf8(n).ok());
        let Some(bytes) = target.and_then(|t| debug.get_mut(t)) else {
            continue;
        };
        let relocs = rel.data(endian, data).unwrap_or(&[]);
        for r in relocs.chunks_exact(24) {
            let word = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().unwrap_or_default());
            let (offset, info, addend) = (word(0), word(8), word(16));
            let Some(width) = width(machine, info as u32) else {
                continue;
            };
            let value = match symbols.symbol(object::SymbolIndex((info >> 32) as usize)) {
                Ok(sym) => place(sym).wrapping_add(addend),
                Err(_) => continue,
            };
            let at = usize::try_from(offset).unwrap_or(usize::MAX);
            if let Some(field) = bytes.get_mut(at..at.saturating_add(width)) {
                field.copy_from_slice(&value.to_le_bytes()[..width]);
            }
        }
    }
    // The functions, by their place; a name seen twice is dropped.
    let mut funcs: Vec<(u64, u64, &[u8])> = Vec::new();
    let mut seen: HashMap<&[u8], usize> = HashMap::new();
    for sym in symbols.symbols() {
        if sym.st_type() != elf::STT_FUNC || !code(sym.st_shndx(endian) as usize) {
            continue;
        }
        let Ok(name) = symbols.symbol_name(endian, sym) else {
            continue;
        };
        *seen.entry(name).or_default() += 1;
        funcs.push((place(sym), sym.st_size(endian), name));
    }
    funcs.retain(|f| seen.get(f.2) == Some(&1));
    funcs.sort_unstable();
    // One entry an address (aliases: `init_module` of `dummy_init_module`).
    let mut entries: Vec<u64> = funcs.iter().map(|f| f.0).collect();
    entries.dedup();
    let sizes: Vec<u64> = (entries.iter())
        .map(|&a| funcs.iter().find(|f| f.0 == a).map_or(0, |f| f.1))
        .collect();
    let load = |name: &str| Cow::Borrowed(debug.get(name).map_or(&[][..], Vec::as_slice));
    let lines = dwarf_lines::lines_for(&load, true, &entries, &sizes);
    let at: HashMap<u64, Option<SourceLine>> = entries.into_iter().zip(lines).collect();
    Ok((funcs.iter())
        .map(|&(place, size, name)| {
            let line = at.get(&place).cloned().flatten();
            (
                String::from_utf8_lossy(name).into_owned(),
                ModuleFunction { size, line },
            )
        })
        .collect())
}

/// The width of the field a debug section's relocation of type `kind` writes (its absolute
/// 64- and 32-bit kinds: all a module's DWARF has), `None` for any other.
fn width(machine: u16, kind: u32) -> Option<usize> {
    match (machine, kind) {
        (elf::EM_X86_64, elf::R_X86_64_64) | (elf::EM_AARCH64, elf::R_AARCH64_ABS64) => Some(8),
        (elf::EM_X86_64, elf::R_X86_64_32 | elf::R_X86_64_32S)
        | (elf::EM_AARCH64, elf::R_AARCH64_ABS32) => Some(4),
        _ => None,
    }
}
