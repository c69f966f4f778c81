//! Function symbols of ELF files (executables, shared objects, vmlinux, firmware).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{
    ElfFile, FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym, SymbolTable,
};
use object::{Endian, Endianness, FileKind, SymbolIndex};

use crate::debug_file::{self, DebugRefs};
use crate::dwarf_types::{self, Missing};
use crate::functions::{collapse, is_mapping_symbol, Candidate};
use crate::{dwarf_lines, Arch, Image, LoadOptions, MemberError, SymbolError};

const STRIPPED_HINT: &str =
    "install the -dbg package for vmlinux, or pass System.map; rebuild user programs without -s";

fn corrupt(path: &Path, e: impl std::fmt::Display) -> SymbolError {
    SymbolError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("bad ELF: {e}"),
    }
}

/// The architecture of an ELF file (`None` for machines qemu-uftrace does not know) and the
/// machine's name for error messages.
pub(crate) fn arch(path: &Path, data: &[u8]) -> Result<(Option<Arch>, String), SymbolError> {
    match FileKind::parse(data).map_err(|e| corrupt(path, e))? {
        FileKind::Elf32 => arch_of::<elf::FileHeader32<Endianness>>(path, data),
        FileKind::Elf64 => arch_of::<elf::FileHeader64<Endianness>>(path, data),
        _ => Err(corrupt(path, "unknown ELF class")),
    }
}

fn arch_of<Elf: FileHeader<Endian = Endianness>>(
    path: &Path,
    data: &[u8],
) -> Result<(Option<Arch>, String), SymbolError> {
    let header = Elf::parse(data).map_err(|e| corrupt(path, e))?;
    let endian = header.endian().map_err(|e| corrupt(path, e))?;
    Ok(machine(header.e_machine(endian), header.is_class_64()))
}

fn machine(e_machine: u16, is_64: bool) -> (Option<Arch>, String) {
    if let Some(arch) = Arch::from_elf_machine(e_machine).filter(|_| is_64) {
        return (Some(arch), arch.to_string());
    }
    match (e_machine, is_64) {
        (elf::EM_RISCV, false) => (None, "riscv32".into()),
        (elf::EM_ARM, _) => (None, "arm".into()),
        (elf::EM_386, _) => (None, "i386".into()),
        (m, _) => (None, format!("ELF machine {m}")),
    }
}

pub(crate) fn load(path: &Path, data: &[u8], opts: &LoadOptions) -> Result<Image, SymbolError> {
    match FileKind::parse(data).map_err(|e| corrupt(path, e))? {
        FileKind::Elf32 => load_as::<elf::FileHeader32<Endianness>>(path, data, opts),
        FileKind::Elf64 => load_as::<elf::FileHeader64<Endianness>>(path, data, opts),
        _ => Err(corrupt(path, "unknown ELF class")),
    }
}

/// `DT_NEEDED` names of a dynamic ELF file (64-bit: the emulators' guests), in order.
pub(crate) fn needed_libraries(data: &[u8]) -> Vec<String> {
    dynamic_strings::<elf::FileHeader64<Endianness>>(data, &[elf::DT_NEEDED]).unwrap_or_default()
}

/// `DT_RUNPATH` and `DT_RPATH` directories of a dynamic ELF file, as written (`$ORIGIN`
/// unexpanded).
pub(crate) fn run_paths(data: &[u8]) -> Vec<String> {
    let tags = [elf::DT_RUNPATH, elf::DT_RPATH];
    let paths = dynamic_strings::<elf::FileHeader64<Endianness>>(data, &tags).unwrap_or_default();
    (paths.iter())
        .flat_map(|p| p.split(':'))
        .filter(|d| !d.is_empty())
        .map(String::from)
        .collect()
}

/// The dynamic entries' strings of the given tags, in order.
fn dynamic_strings<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    tags: &[u32],
) -> Option<Vec<String>> {
    use object::read::elf::Dyn;
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, data).ok()?;
    // The dynamic entries and their string table's index.
    let (entries, strtab) = sections.dynamic(endian, data).ok()??;
    let strings = sections.strings(endian, data, strtab).ok()?;
    Some(
        tagged::<Elf>(entries, endian, tags)
            .filter_map(|d| d.string(endian, strings).ok())
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect(),
    )
}

/// The dynamic entries before `DT_NULL` (the loader stops there) whose tag is one of `tags`.
fn tagged<'a, Elf: FileHeader<Endian = Endianness>>(
    entries: &'a [Elf::Dyn],
    endian: Endianness,
    tags: &'a [u32],
) -> impl Iterator<Item = &'a Elf::Dyn> + 'a {
    use object::read::elf::Dyn;
    entries
        .iter()
        .take_while(move |d| d.d_tag(endian).into() != u64::from(elf::DT_NULL))
        .filter(move |d| tags.iter().any(|&t| d.d_tag(endian).into() == u64::from(t)))
}

fn load_as<Elf: FileHeader<Endian = Endianness>>(
    path: &Path,
    data: &[u8],
    opts: &LoadOptions,
) -> Result<Image, SymbolError> {
    let file = ElfFile::<Elf, &[u8]>::parse(data).map_err(|e| corrupt(path, e))?;
    let endian = file.endian();
    let header = file.elf_header();
    // Its sections all start at 0 until a loader places them: no function has an address.
    if header.e_type(endian) == elf::ET_REL {
        return Err(SymbolError::Relocatable {
            path: path.to_path_buf(),
        });
    }
    let (arch, found) = machine(header.e_machine(endian), header.is_class_64());
    if let Some(expected) = opts.expected_arch {
        if arch != Some(expected) {
            return Err(SymbolError::WrongArch {
                path: path.to_path_buf(),
                found,
                expected,
            });
        }
    }

    let sections = file.elf_section_table();
    // A stripped file's .symtab and DWARF may be in a separate debug file (a -dbg or
    // -dbgsym package, `objcopy --only-keep-debug`): looked for only when missing here.
    let has_symtab = !file.elf_symbol_table().is_empty();
    let has_lines = has_lines(&file);
    let debug_map = if !has_symtab || (opts.source_lines && !has_lines) {
        debug_file::find(path, &DebugRefs::of(&file)).map(|(_, map)| map)
    } else {
        None
    };
    let debug = debug_of(&file, debug_map.as_deref());

    // .symtab has everything; a stripped shared library still exports its .dynsym.
    let mut cands = candidates(path, sections, file.elf_symbol_table(), endian)?;
    if cands.is_empty() {
        if let Some(d) = &debug {
            // A debug file that does not parse loses its symbols only.
            cands = candidates(path, d.elf_section_table(), d.elf_symbol_table(), endian)
                .unwrap_or_default();
        }
    }
    // A .symtab none of whose functions lies in a code section is not at the addresses
    // the sections say: QEMU moves its vDSO's headers and .dynsym to where it maps it,
    // not its .symtab.
    if !cands.is_empty() && !cands.iter().any(|c| in_code(sections, endian, c.addr)) {
        cands.clear();
    }
    // A symbol table names every function; without one, .eh_frame still knows them all.
    let has_table = !cands.is_empty();
    if cands.is_empty() {
        cands = candidates(path, sections, file.elf_dynamic_symbol_table(), endian)?;
    }
    let unwound = if has_table {
        Vec::new()
    } else {
        let is_64 = header.is_class_64();
        let mut known = crate::fde::eh_frame_functions(sections, endian, data, is_64);
        let entry = opts.name_entry.then(|| header.e_entry(endian).into());
        known.extend(
            (loader_calls(sections, endian, data, is_64, entry).into_iter()).map(|a| (a, 0)),
        );
        // Where an FDE and a pointer agree, the FDE's length wins (the first of an address
        // counts).
        known.sort_unstable_by_key(|&(a, len)| (a, std::cmp::Reverse(len)));
        known
    };
    // A stripped program's `main`, from its `_start` (unless a symbol names it already),
    // sized by its FDE.
    if !has_table && !cands.iter().any(|c| c.name == b"main") {
        let entry: u64 = header.e_entry(endian).into();
        let fde_at = |a: u64| unwound.iter().any(|&(start, len)| start == a && len > 0);
        if let Some(main) = main_of(&file, data, entry, fde_at) {
            let size = unwound
                .iter()
                .find(|&&(a, _)| a == main)
                .map_or(0, |&(_, n)| n);
            cands.push(Candidate {
                addr: main,
                size,
                name: b"main",
                global: true,
                typed: true,
            });
        }
    }
    // A program with no symbols at all still calls through its PLT, whose entries are named
    // after the functions they reach.
    let some = !cands.is_empty() || !unwound.is_empty();
    if some && header.is_class_64() && endian.is_little_endian() {
        match header.e_machine(endian) {
            elf::EM_AARCH64 | elf::EM_RISCV => {
                cands.extend(plt_entries(&file, data, debug.as_ref()))
            }
            elf::EM_X86_64 => cands.extend(x86_64_plt_entries(&file, data, debug.as_ref())),
            _ => {}
        }
    }
    if cands.is_empty() && unwound.is_empty() {
        return Err(SymbolError::Stripped {
            path: path.to_path_buf(),
            hint: STRIPPED_HINT.into(),
        });
    }
    let mut functions = collapse(cands, opts.demangle);
    let mut by_address = crate::functions::by_address(path, &functions, &[], &unwound);

    if opts.source_lines {
        set_lines(&file, debug.as_ref(), &mut functions, 0);
    }

    // The executable segments are what the guest runs; functions alone would miss the
    // tail of the last one.
    let mut range: Option<(u64, u64)> = None;
    for ph in file.elf_program_headers() {
        if ph.p_type(endian) == elf::PT_LOAD && ph.p_flags(endian) & elf::PF_X != 0 {
            let lo = ph.p_vaddr(endian).into();
            let hi = lo.saturating_add(ph.p_memsz(endian).into());
            range = Some(range.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        }
    }
    let (start, end) = range.unwrap_or_else(|| {
        let lo = (functions.iter().chain(&by_address))
            .map(|f| f.addr)
            .min()
            .unwrap_or(0);
        let hi = (functions.iter().chain(&by_address))
            .map(|f| f.addr.saturating_add(f.size.max(1)))
            .max()
            .unwrap_or(0);
        (lo, hi)
    });

    for f in functions.iter_mut().chain(&mut by_address) {
        f.addr = f.addr.wrapping_add(opts.offset);
    }
    Ok(Image {
        path: path.to_path_buf(),
        start: start.wrapping_add(opts.offset),
        end: end.wrapping_add(opts.offset),
        functions,
        arch,
        modules: Vec::new(),
        by_address,
    })
}

/// The functions the dynamic loader calls through the dynamic section (`DT_INIT`, `DT_FINI`)
/// and the `.init_array`/`.fini_array` pointers, in code: crtstuff's `_init`, `frame_dummy`
/// and `__do_global_dtors_aux` have no FDE. The arrays hold their pointers in place (the
/// relative relocations' addends); one that does not point into code is left out. Also the
/// header's `entry` where asked ([`crate::LoadOptions::name_entry`]), where the kernel or the
/// loader starts the file: the one function a file with no symbols, no `.eh_frame` and no
/// dynamic section still shows.
fn loader_calls<'data, Elf: FileHeader<Endian = Endianness>>(
    sections: &SectionTable<'data, Elf, &'data [u8]>,
    endian: Endianness,
    data: &'data [u8],
    is_64: bool,
    entry: Option<u64>,
) -> Vec<u64> {
    use object::read::elf::Dyn;
    let mut out: Vec<u64> = entry.into_iter().collect();
    if let Ok(Some((entries, _))) = sections.dynamic(endian, data) {
        out.extend(
            tagged::<Elf>(entries, endian, &[elf::DT_INIT, elf::DT_FINI])
                .map(|d| d.d_val(endian).into()),
        );
    }
    let word = if is_64 { 8 } else { 4 };
    for name in [&b".init_array"[..], b".fini_array"] {
        let Some((_, section)) = sections.section_by_name(endian, name) else {
            continue;
        };
        let Ok(bytes) = section.data(endian, data) else {
            continue;
        };
        out.extend(
            bytes
                .chunks_exact(word)
                .map(|w| match <[u8; 8]>::try_from(w) {
                    Ok(w) => endian.read_u64_bytes(w),
                    Err(_) => u64::from(endian.read_u32_bytes(w.try_into().unwrap_or_default())),
                }),
        );
    }
    out.retain(|&a| in_code(sections, endian, a));
    out
}

/// A 64-bit little-endian program's `main`, where its entry point is glibc's `_start`
/// (`start_main`): the address it loads, or the GOT slot's (its `R_*_RELATIVE` addend, else
/// what the slot holds). Only an address in code, other than the entry point, counts.
/// `fde_at`: whether an FDE starts at an address (a function of its own, never `_start`'s
/// `__wrap_main` label).
fn main_of<'d, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
    data: &'d [u8],
    entry: u64,
    fde_at: impl Fn(u64) -> bool,
) -> Option<u64> {
    use crate::start_main::{self, MainAt};
    let endian = file.endian();
    let header = file.elf_header();
    if !header.is_class_64() || !endian.is_little_endian() || entry == 0 {
        return None;
    }
    let sections = file.elf_section_table();
    // A program: fixed, or position-independent without a soname (a shared library's entry
    // point, as libc.so.6's that prints its version, is no `_start`).
    let soname = || {
        sections
            .dynamic(endian, data)
            .ok()
            .flatten()
            .is_some_and(|(entries, _)| {
                tagged::<Elf>(entries, endian, &[elf::DT_SONAME])
                    .next()
                    .is_some()
            })
    };
    match header.e_type(endian) {
        elf::ET_EXEC => {}
        elf::ET_DYN if !soname() => {}
        _ => return None,
    }
    // The bytes of the section holding `addr`, from `addr` on.
    let bytes_at = |addr: u64| -> Option<&'d [u8]> {
        sections.iter().find_map(|s| {
            let start: u64 = s.sh_addr(endian).into();
            let size: u64 = s.sh_size(endian).into();
            if s.sh_type(endian) != elf::SHT_PROGBITS || addr < start || addr - start >= size {
                return None;
            }
            s.data(endian, data)
                .ok()?
                .get(usize::try_from(addr - start).ok()?..)
        })
    };
    let code = bytes_at(entry)?;
    let (found, relative) = match header.e_machine(endian) {
        elf::EM_X86_64 => (start_main::x86_64(code, entry)?, elf::R_X86_64_RELATIVE),
        elf::EM_AARCH64 => (start_main::aarch64(code, entry)?, elf::R_AARCH64_RELATIVE),
        elf::EM_RISCV => (start_main::riscv64(code, entry)?, elf::R_RISCV_RELATIVE),
        _ => return None,
    };
    let main = match found {
        MainAt::Addr(a) => a,
        MainAt::Slot(slot) => {
            let rela = (sections.iter())
                .filter(|s| s.sh_type(endian) == elf::SHT_RELA)
                .filter_map(|s| s.data(endian, data).ok())
                .flat_map(rela64)
                .find_map(|(offset, info, addend)| {
                    (offset == slot && info & 0xffff_ffff == u64::from(relative)).then_some(addend)
                });
            match rela {
                Some(addend) => addend,
                None => u64::from_le_bytes(bytes_at(slot)?.get(..8)?.try_into().ok()?),
            }
        }
    };
    // glibc's `__wrap_main` (`b main`) where `_start` loads that: a label inside
    // `_start`'s FDE. A `main` that is a tail call only (an FDE of its own) stays.
    let main = (bytes_at(main))
        .filter(|_| !fde_at(main))
        .and_then(|code| start_main::trampoline(header.e_machine(endian), code, main))
        .unwrap_or(main);
    (main != entry && in_code(sections, endian, main)).then_some(main)
}

/// The little-endian `Elf64_Rela` entries of a relocation section: `(r_offset, r_info,
/// r_addend)`; `r_info` holds the symbol index in its high half and the type in its low.
fn rela64(relocs: &[u8]) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
    relocs.chunks_exact(24).map(|r| {
        let word = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().unwrap_or_default());
        (word(0), word(8), word(16))
    })
}

/// Whether `file` has DWARF lines of its own. By its header: decompressing a kernel's
/// .debug_line just to see it is there costs.
fn has_lines<'d, Elf: FileHeader<Endian = Endianness>>(file: &ElfFile<'d, Elf, &'d [u8]>) -> bool {
    let endian = file.endian();
    (file.elf_section_table())
        .section_by_name(endian, b".debug_line")
        .is_some_and(|(_, s)| s.sh_type(endian) != elf::SHT_NOBITS && s.sh_size(endian).into() > 0)
}

/// `file`'s separate debug file `map`, parsed. It describes the same layout (NOBITS where the
/// code was), so its symbols and sections read as the file's own.
fn debug_of<'d, 'm, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
    map: Option<&'m [u8]>,
) -> Option<ElfFile<'m, Elf, &'m [u8]>> {
    let endian = file.endian();
    map.and_then(|m| ElfFile::<Elf, &[u8]>::parse(m).ok())
        .filter(|d| d.elf_header().e_machine(endian) == file.elf_header().e_machine(endian))
}

/// Sets each of `functions`' source line, at its address less `offset` (where `file` was
/// loaded above its link addresses), from `file`'s own DWARF lines, else from its separate
/// debug file's.
fn set_lines<'d, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'d, Elf, &'d [u8]>,
    debug: Option<&ElfFile<'d, Elf, &'d [u8]>>,
    functions: &mut [crate::Function],
    offset: u64,
) {
    let source = match debug {
        Some(d) if !has_lines(file) => d,
        _ => file,
    };
    let endian = file.endian();
    let entries: Vec<u64> = functions
        .iter()
        .map(|f| f.addr.wrapping_sub(offset))
        .collect();
    let sizes: Vec<u64> = functions.iter().map(|f| f.size).collect();
    let load = |name: &str| section_data(source.elf_section_table(), endian, source.data(), name);
    let lines = dwarf_lines::lines_for(&load, endian.is_little_endian(), &entries, &sizes);
    for (f, line) in functions.iter_mut().zip(lines) {
        f.line = line;
    }
}

/// Sets the source lines of `image`'s functions, read from `data` (its ELF file, loaded
/// `offset` above its link addresses, without `source_lines`) or its debug file.
pub(crate) fn add_lines(data: &[u8], image: &mut Image, offset: u64) -> Result<(), SymbolError> {
    match FileKind::parse(data).map_err(|e| corrupt(&image.path, e))? {
        FileKind::Elf32 => add_lines_as::<elf::FileHeader32<Endianness>>(data, image, offset),
        FileKind::Elf64 => add_lines_as::<elf::FileHeader64<Endianness>>(data, image, offset),
        _ => Err(corrupt(&image.path, "unknown ELF class")),
    }
}

fn add_lines_as<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    image: &mut Image,
    offset: u64,
) -> Result<(), SymbolError> {
    let file = ElfFile::<Elf, &[u8]>::parse(data).map_err(|e| corrupt(&image.path, e))?;
    let has_lines = has_lines(&file);
    let debug_map = if has_lines {
        None
    } else {
        debug_file::find(&image.path, &DebugRefs::of(&file)).map(|(_, map)| map)
    };
    let debug = debug_of(&file, debug_map.as_deref());
    set_lines(&file, debug.as_ref(), &mut image.functions, offset);
    Ok(())
}

/// The byte offset of `member` in `struct structure`, from the file's DWARF.
pub(crate) fn member_offset(
    path: &Path,
    data: &[u8],
    structure: &str,
    member: &str,
) -> Result<u64, MemberError> {
    match FileKind::parse(data) {
        Ok(FileKind::Elf32) => {
            member_offset_as::<elf::FileHeader32<Endianness>>(path, data, structure, member)
        }
        Ok(FileKind::Elf64) => {
            member_offset_as::<elf::FileHeader64<Endianness>>(path, data, structure, member)
        }
        _ => Err(MemberError::NotElf {
            path: path.to_path_buf(),
        }),
    }
}

fn member_offset_as<Elf: FileHeader<Endian = Endianness>>(
    path: &Path,
    data: &[u8],
    structure: &str,
    member: &str,
) -> Result<u64, MemberError> {
    let file = ElfFile::<Elf, &[u8]>::parse(data).map_err(|e| MemberError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("bad ELF: {e}"),
    })?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let load = |name: &str| section_data(sections, endian, data, name);
    dwarf_types::member_offset(&load, endian.is_little_endian(), structure, member).map_err(|m| {
        let path = path.to_path_buf();
        match m {
            Missing::NoDwarf => MemberError::NoDwarf { path },
            Missing::NoStruct => MemberError::NoStruct {
                path,
                structure: structure.to_string(),
            },
            Missing::NoMember => MemberError::NoMember {
                path,
                structure: structure.to_string(),
                member: member.to_string(),
            },
            Missing::Corrupt(reason) => MemberError::Corrupt {
                path,
                reason: format!("bad DWARF: {reason}"),
            },
        }
    })
}

/// AArch64 and RISC-V (LP64) lazy-binding PLT entries (the same layout), named after the
/// function each jumps to (`malloc`, not `malloc@plt`): a call through the PLT branches on
/// into the function without a call of its own, so the entry's frame is the whole call.
/// `.plt` is a 32-byte header then one 16-byte entry per `.rela.plt` relocation, in order;
/// a static program's `.plt` (its iplt) has no header, and each of its entries is named
/// after the IFUNC symbol its `IRELATIVE` relocation resolves (`memcpy`, where the nearest
/// symbol would say `_init`). Anything unexpected gives none.
fn plt_entries<'data, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'data, Elf, &'data [u8]>,
    data: &'data [u8],
    debug: Option<&ElfFile<'data, Elf, &'data [u8]>>,
) -> Vec<Candidate<'data>> {
    let endian = file.endian();
    let sections = file.elf_section_table();
    let (Some((_, plt)), Some((_, rela))) = (
        sections.section_by_name(endian, b".plt"),
        sections.section_by_name(endian, b".rela.plt"),
    ) else {
        return Vec::new();
    };
    let Ok(relocs) = rela.data(endian, data) else {
        return Vec::new();
    };
    let dynsym = file.elf_dynamic_symbol_table();
    let plt_addr: u64 = plt.sh_addr(endian).into();
    let plt_size: u64 = plt.sh_size(endian).into();
    let irelative = match file.elf_header().e_machine(endian) {
        elf::EM_AARCH64 => elf::R_AARCH64_IRELATIVE,
        _ => elf::R_RISCV_IRELATIVE,
    };
    let header = if plt_size == 16 * (relocs.len() / 24) as u64 {
        0
    } else {
        32
    };
    let ifuncs = ifunc_names(file, debug);
    let mut out = Vec::new();
    for (i, (_, info, addend)) in rela64(relocs).enumerate() {
        let addr = plt_addr + header + 16 * i as u64;
        if addr + 16 > plt_addr + plt_size {
            break;
        }
        let name = if info & 0xffff_ffff == u64::from(irelative) {
            ifuncs.get(&addend).copied()
        } else {
            dynsym
                .symbol(SymbolIndex((info >> 32) as usize))
                .ok()
                .and_then(|sym| dynsym.symbol_name(endian, sym).ok())
        };
        match name {
            Some(name) if !name.is_empty() => out.push(Candidate {
                addr,
                size: 16,
                name,
                global: true,
                typed: true,
            }),
            _ => {}
        }
    }
    out
}

/// x86_64 PLT entries, named after the function each jumps to (`malloc`, not `malloc@plt`).
/// Every entry a program calls is `[endbr64] [bnd] jmp *GOT(%rip)`: in `.plt.sec` when the
/// PLT is IBT-enabled (`.plt` then holds only the lazy-binding stubs), else in `.plt` after
/// the 16-byte PLT0, and in `.plt.got` for functions whose address is also taken. The GOT
/// slot the jump reads names the entry: an `R_X86_64_JUMP_SLOT` in `.rela.plt` or an
/// `R_X86_64_GLOB_DAT` in `.rela.dyn`. Entries that decode otherwise are left out.
fn x86_64_plt_entries<'data, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'data, Elf, &'data [u8]>,
    data: &'data [u8],
    debug: Option<&ElfFile<'data, Elf, &'data [u8]>>,
) -> Vec<Candidate<'data>> {
    let endian = file.endian();
    let sections = file.elf_section_table();
    let dynsym = file.elf_dynamic_symbol_table();
    // GOT slot address -> the name of the symbol it holds the address of.
    let mut slots = std::collections::HashMap::new();
    for (section, kind) in [
        (&b".rela.plt"[..], elf::R_X86_64_JUMP_SLOT),
        (&b".rela.dyn"[..], elf::R_X86_64_GLOB_DAT),
    ] {
        let Some(relocs) = sections
            .section_by_name(endian, section)
            .and_then(|(_, s)| s.data(endian, data).ok())
        else {
            continue;
        };
        for (offset, info, _) in rela64(relocs) {
            if info & 0xffff_ffff != u64::from(kind) {
                continue;
            }
            let Ok(sym) = dynsym.symbol(SymbolIndex((info >> 32) as usize)) else {
                continue;
            };
            match dynsym.symbol_name(endian, sym) {
                Ok(name) if !name.is_empty() => {
                    slots.insert(offset, name);
                }
                _ => {}
            }
        }
    }
    // `R_X86_64_IRELATIVE` slots (a static program's iplt; a shared library's calls to its
    // own IFUNCs, as libc's `getenv` calls `strlen`), named after the IFUNC symbol whose
    // resolver the addend is (`memcpy`, where the nearest symbol would say `_init`).
    let ifuncs = ifunc_names(file, debug);
    if let Some(relocs) = sections
        .section_by_name(endian, b".rela.plt")
        .and_then(|(_, s)| s.data(endian, data).ok())
    {
        for (offset, info, addend) in rela64(relocs) {
            if info & 0xffff_ffff == u64::from(elf::R_X86_64_IRELATIVE) {
                if let Some(&name) = ifuncs.get(&addend) {
                    slots.insert(offset, name);
                }
            }
        }
    }
    if slots.is_empty() {
        return Vec::new();
    }

    let mut out = Vec::new();
    // PLT0 (`push`, `jmp *GOT+16`) never reads like an entry, and a static program's `.plt`
    // has none: every 16 bytes are tried.
    let (calls, skip) = match sections.section_by_name(endian, b".plt.sec") {
        Some((_, sec)) => (sec, 0),
        None => match sections.section_by_name(endian, b".plt") {
            Some((_, plt)) => (plt, 0),
            None => return out,
        },
    };
    let got = sections
        .section_by_name(endian, b".plt.got")
        .map(|(_, s)| s);
    for (section, skip) in std::iter::once((calls, skip)).chain(got.map(|s| (s, 0))) {
        let Ok(bytes) = section.data(endian, data) else {
            continue;
        };
        let base: u64 = section.sh_addr(endian).into();
        let entsize: u64 = section.sh_entsize(endian).into();
        let size: u64 = section.sh_size(endian).into();
        // .plt and .plt.sec entries are 16 bytes; .plt.got's 8, or 16 with endbr64; a
        // static program's .plt (its iplt, no entry size given) 8 each, one per slot.
        let entsize = if matches!(entsize, 8 | 16) {
            entsize
        } else if size == 8 * slots.len() as u64 {
            8
        } else {
            16
        };
        let Some(bytes) = bytes.get(skip..) else {
            continue;
        };
        for (i, entry) in bytes.chunks_exact(entsize as usize).enumerate() {
            let addr = base + skip as u64 + entsize * i as u64;
            let Some(slot) = jmp_rip_slot(addr, entry) else {
                continue;
            };
            if let Some(&name) = slots.get(&slot) {
                out.push(Candidate {
                    addr,
                    size: entsize,
                    name,
                    global: true,
                    typed: true,
                });
            }
        }
    }
    out
}

/// IFUNC symbols by value (their resolver's address), each named by its best alias as
/// [`collapse`](crate::functions) chooses among a function's names: global (or weak) over
/// local, then the shortest, then the lexicographically first. glibc gives one IFUNC several
/// names (`memcpy`, `__libc_memcpy` on aarch64; weak `memcpy`, `__new_memcpy` on x86_64):
/// the choice must be the name users write, not whichever the symbol table lists last.
/// Read from the file's `.symtab`, its `.dynsym` (a stripped library: Debian's libc.so.6
/// exports 35 of the 36 IFUNCs its PLT calls) and its debug file's `.symtab` (the rest,
/// e.g. `__x86_cacheinfo`).
fn ifunc_names<'data, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'data, Elf, &'data [u8]>,
    debug: Option<&ElfFile<'data, Elf, &'data [u8]>>,
) -> std::collections::HashMap<u64, &'data [u8]> {
    let endian = file.endian();
    let mut out: std::collections::HashMap<u64, (bool, &'data [u8])> =
        std::collections::HashMap::new();
    let tables = [
        Some(file.elf_symbol_table()),
        Some(file.elf_dynamic_symbol_table()),
        debug.map(|d| d.elf_symbol_table()),
    ];
    for symbols in tables.into_iter().flatten() {
        for sym in symbols.iter() {
            if sym.st_type() != elf::STT_GNU_IFUNC {
                continue;
            }
            let Ok(name) = symbols.symbol_name(endian, sym) else {
                continue;
            };
            let local = sym.st_bind() == elf::STB_LOCAL;
            let value: u64 = sym.st_value(endian).into();
            let rank = |(local, name): (bool, &[u8])| (local, name.len(), name.to_vec());
            match out.get(&value) {
                Some(&best) if rank(best) <= rank((local, name)) => {}
                _ => {
                    out.insert(value, (local, name));
                }
            }
        }
    }
    out.into_iter().map(|(v, (_, name))| (v, name)).collect()
}

/// The address `jmp *disp32(%rip)` at `addr` reads its target from, if `code` starts with
/// one (after an optional `endbr64` and an optional `bnd` prefix).
fn jmp_rip_slot(addr: u64, code: &[u8]) -> Option<u64> {
    let mut at = 0;
    if code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        at += 4;
    }
    if code.get(at) == Some(&0xf2) {
        at += 1;
    }
    if code.get(at..at + 2)? != [0xff, 0x25] {
        return None;
    }
    let disp = i32::from_le_bytes(code.get(at + 2..at + 6)?.try_into().ok()?);
    Some((addr + at as u64 + 6).wrapping_add_signed(disp.into()))
}

/// STT_FUNC/STT_GNU_IFUNC symbols, plus untyped labels inside executable sections (hand
/// written assembly often leaves its entry points untyped).
/// Whether `addr` is inside one of the file's executable sections.
fn in_code<'data, Elf: FileHeader<Endian = Endianness>>(
    sections: &SectionTable<'data, Elf, &'data [u8]>,
    endian: Endianness,
    addr: u64,
) -> bool {
    sections.iter().any(|s| {
        let (start, size): (u64, u64) = (s.sh_addr(endian).into(), s.sh_size(endian).into());
        let flags: u64 = s.sh_flags(endian).into();
        flags & u64::from(elf::SHF_EXECINSTR) != 0
            && (start..start.saturating_add(size)).contains(&addr)
    })
}

fn candidates<'data, Elf: FileHeader<Endian = Endianness>>(
    path: &Path,
    sections: &SectionTable<'data, Elf, &'data [u8]>,
    symbols: &SymbolTable<'data, Elf, &'data [u8]>,
    endian: Endianness,
) -> Result<Vec<Candidate<'data>>, SymbolError> {
    let mut out = Vec::new();
    for (i, sym) in symbols.iter().enumerate() {
        let typed = match sym.st_type() {
            elf::STT_FUNC | elf::STT_GNU_IFUNC => true,
            elf::STT_NOTYPE => false,
            _ => continue,
        };
        let executable = match symbols
            .symbol_section(endian, sym, SymbolIndex(i))
            .map_err(|e| corrupt(path, e))?
        {
            Some(index) => {
                let section = sections.section(index).map_err(|e| corrupt(path, e))?;
                let flags: u64 = section.sh_flags(endian).into();
                flags & u64::from(elf::SHF_EXECINSTR) != 0
            }
            // Undefined, or absolute/common: only an explicitly typed absolute function.
            None => {
                if sym.st_shndx(endian) != elf::SHN_ABS || !typed {
                    continue;
                }
                true
            }
        };
        // An untyped label is a function only in code; a typed function counts anywhere.
        if !executable && !typed {
            continue;
        }
        let name = symbols
            .symbol_name(endian, sym)
            .map_err(|e| corrupt(path, e))?;
        if name.is_empty() || is_mapping_symbol(name) {
            continue;
        }
        // glibc's .symtab (in its debug file) spells versioned symbols `memcpy@@GLIBC_2.14`:
        // the name is what comes before the version, as .dynsym has it.
        let name = match memchr::memchr(b'@', name) {
            Some(at) if at > 0 => &name[..at],
            _ => name,
        };
        let global = matches!(
            sym.st_bind(),
            elf::STB_GLOBAL | elf::STB_WEAK | elf::STB_GNU_UNIQUE
        );
        out.push(Candidate {
            addr: sym.st_value(endian).into(),
            size: sym.st_size(endian).into(),
            name,
            global,
            typed,
        });
    }
    Ok(out)
}

/// Upper bound on a decompressed debug section: far above any real one, low enough that a
/// forged compression header cannot make us allocate without limit.
const MAX_DECOMPRESSED: u64 = 1 << 30;

/// The contents of section `name`, decompressed when SHF_COMPRESSED (zlib). Missing,
/// unreadable or oddly compressed sections read as empty: source lines are best effort.
pub(crate) fn section_data<'data, Elf: FileHeader<Endian = Endianness>>(
    sections: &SectionTable<'data, Elf, &'data [u8]>,
    endian: Endianness,
    data: &'data [u8],
    name: &str,
) -> Cow<'data, [u8]> {
    let Some((_, section)) = sections.section_by_name(endian, name.as_bytes()) else {
        return Cow::Borrowed(&[]);
    };
    if section.sh_type(endian) == elf::SHT_NOBITS {
        return Cow::Borrowed(&[]);
    }
    match section.compression(endian, data) {
        Ok(None) => Cow::Borrowed(section.data(endian, data).unwrap_or(&[])),
        Ok(Some((chdr, offset, size))) => {
            use object::read::elf::CompressionHeader;
            let out_size: u64 = chdr.ch_size(endian).into();
            if chdr.ch_type(endian) != elf::ELFCOMPRESS_ZLIB
                || out_size > MAX_DECOMPRESSED
                || out_size > size.saturating_mul(1032)
            {
                return Cow::Borrowed(&[]);
            }
            let Some(input) = usize::try_from(offset)
                .ok()
                .and_then(|o| data.get(o..o.checked_add(usize::try_from(size).ok()?)?))
            else {
                return Cow::Borrowed(&[]);
            };
            let mut out = Vec::with_capacity(out_size as usize);
            let mut z = flate2::read::ZlibDecoder::new(input);
            use std::io::Read;
            match (&mut z).take(out_size).read_to_end(&mut out) {
                Ok(_) => Cow::Owned(out),
                Err(_) => Cow::Borrowed(&[]),
            }
        }
        Err(_) => Cow::Borrowed(&[]),
    }
}

/// The functions' value formats from the DWARF of the ELF file `data` (`dwarf_args`).
pub(crate) fn auto_specs(data: &[u8], threads: usize) -> Result<Vec<crate::AutoSpec>, String> {
    match FileKind::parse(data) {
        Ok(FileKind::Elf64) => auto_specs_as::<elf::FileHeader64<Endianness>>(data, threads),
        Ok(FileKind::Elf32) => auto_specs_as::<elf::FileHeader32<Endianness>>(data, threads),
        _ => Err("not an ELF file".into()),
    }
}

/// The syscalls' own argument formats for the kernel's wrappers (`dwarf_args::syscall_specs`).
pub(crate) fn syscall_specs(
    data: &[u8],
    wrappers: &[(u64, String)],
) -> Result<Vec<crate::AutoSpec>, String> {
    let file = ElfFile::<elf::FileHeader64<Endianness>, &[u8]>::parse(data)
        .map_err(|e| format!("bad ELF: {e}"))?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let load = |name: &str| section_data(sections, endian, data, name);
    crate::dwarf_args::syscall_specs(&load, endian.is_little_endian(), wrappers)
        .map_err(|e| format!("bad DWARF: {e}"))
}

/// The separate debug file of ELF file `path` (`data`), where one is found.
pub(crate) fn debug_file_of(path: &Path, data: &[u8]) -> Option<(PathBuf, memmap2::Mmap)> {
    let file = object::File::parse(data).ok()?;
    debug_file::find(path, &DebugRefs::of(&file))
}

fn auto_specs_as<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    threads: usize,
) -> Result<Vec<crate::AutoSpec>, String> {
    let file = ElfFile::<Elf, &[u8]>::parse(data).map_err(|e| format!("bad ELF: {e}"))?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let load = |name: &str| section_data(sections, endian, data, name);
    crate::dwarf_args::auto_specs(&load, endian.is_little_endian(), threads)
        .map_err(|e| format!("bad DWARF: {e}"))
}
