//! What the unwinder needs of a guest ELF file: its CFI sections, its code (to check that a
//! return address follows a call) and its function symbols (to name each frame's function).

use std::path::Path;

use anyhow::{Context, Result};
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use qemu_uftrace_engine::arch::ExceptionKind;

/// An unwind table section as loaded: its bytes and where it sits in the guest.
pub struct Table {
    pub data: Vec<u8>,
    pub addr: u64,
    /// For CFI sections: each FDE's address range and offset, sorted by address, built at
    /// the first lookup (gimli's own lookup walks every entry: too slow for a kernel's
    /// tables, which hold tens of thousands).
    pub fde_index: std::sync::OnceLock<Vec<(u64, u64, usize)>>,
}

/// One ELF file's unwinding facts, owned (the file is not kept open). Its methods take and
/// give guest addresses: the file's link addresses moved by its load bias (a PIE, a shared
/// library); its tables (`.eh_frame`, `.debug_frame`, `.sframe`, ORC) are looked up at link
/// addresses.
pub struct Image {
    pub name: String,
    /// Where the file was loaded minus where it was linked (0: at its link addresses).
    pub bias: u64,
    /// `.eh_frame`, when the file has one.
    pub eh_frame: Option<Table>,
    /// `.debug_frame`.
    pub debug_frame: Option<Table>,
    /// `.sframe` (`as --gsframe`).
    pub sframe: Option<Table>,
    /// An x86-64 kernel's ORC tables, parsed once (hundreds of thousands of entries).
    pub orc: Option<super::orc::Orc>,
    /// Executable sections: (address, bytes).
    code: Vec<(u64, Vec<u8>)>,
    /// Function starts and sizes, sorted by address.
    functions: Vec<(u64, u64)>,
    /// A kernel's entry code for exceptions, by start ([`kernel_exception_entry`]), sorted.
    exception_entries: Vec<(u64, ExceptionKind)>,
}

/// The exception a kernel's entry code handles, named as the engine names it:
/// - arm64, entry.S's `el1h_64_<label>` (an exception taken at EL1): its frame record is
///   chained into the `struct pt_regs` it saved. A synchronous one's kind is in ESR, which
///   is not saved: `[exception]`.
/// - x86-64, `asm_<handler>` (idtentry.h): its ORC entry says where its `struct pt_regs` is.
pub fn kernel_exception_entry(name: &[u8]) -> Option<ExceptionKind> {
    use ExceptionKind as K;
    Some(match name {
        b"el1h_64_irq" => K::Irq,
        b"el1h_64_fiq" => K::Fiq,
        b"el1h_64_sync" | b"el1h_64_error" => K::Other,
        b"asm_common_interrupt" | b"asm_spurious_interrupt" => K::Irq,
        _ if name.starts_with(b"asm_sysvec_") => K::Irq,
        b"asm_exc_page_fault" => K::PageFault,
        b"asm_exc_general_protection" => K::GeneralProtection,
        b"asm_exc_invalid_op" => K::InvalidOp,
        b"asm_exc_int3" => K::Int3,
        b"asm_exc_debug" => K::Debug,
        b"asm_exc_nmi" => K::Nmi,
        b"asm_exc_divide_error" => K::DivideError,
        b"asm_exc_double_fault" => K::DoubleFault,
        b"asm_exc_machine_check" => K::MachineCheck,
        b"asm_exc_device_not_available" => K::DeviceNotAvailable,
        _ if name.starts_with(b"asm_exc_") => K::Other,
        _ => return None,
    })
}

/// Function starts and sizes as [`Image::function_at`] searches them: sorted, one per start.
fn sorted_functions(functions: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = functions.collect();
    v.sort_unstable();
    v.dedup_by_key(|f| f.0);
    v
}

/// The functions the symbols crate read from a file (a stripped file's debug file or
/// `.dynsym`, a raw kernel's kallsyms).
fn function_table(symbols: &qemu_uftrace_symbols::Image) -> Vec<(u64, u64)> {
    sorted_functions(symbols.functions.iter().map(|f| (f.addr, f.size)))
}

impl Image {
    pub fn load(path: &Path) -> Result<Image> {
        // Mapped: of a kernel's vmlinux (hundreds of MB with its DWARF), only the code,
        // symbols and unwind tables are read.
        let bytes = qemu_uftrace_symbols::map_file(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let name = path.display().to_string();
        if !bytes.starts_with(b"\x7fELF") {
            return Image::kernel(path, &name);
        }
        let mut image = Image::parse(&name, &bytes)?;
        if image.functions.is_empty() {
            // Stripped (a distribution's libc): its functions as its names come, from its
            // debug file found by build ID, else its dynamic symbols. A frame unwound there
            // then starts at its function's entry, not at its return address, and `-F`/`-N`
            // of such a function apply in a window switched on inside it
            // (`cli/src/record/window_gates.rs` compares entries).
            let opts = qemu_uftrace_symbols::LoadOptions::default();
            if let Ok(symbols) = qemu_uftrace_symbols::load_elf(path, &opts) {
                image.functions = function_table(&symbols);
            }
        }
        Ok(image)
    }

    /// A raw kernel image (no vmlinux given): an x86 bzImage's payload is an ELF with its
    /// code and ORC tables (stripped of symbols); a flat arm64/riscv64 `Image` is code for
    /// frame records. Its functions come from its kallsyms either way.
    fn kernel(path: &Path, name: &str) -> Result<Image> {
        use qemu_uftrace_symbols::KernelContents;
        let contents = qemu_uftrace_symbols::kernel_image_contents(path)
            .with_context(|| format!("cannot read {name}"))?;
        let mut image = match contents {
            Some(KernelContents::Elf(bytes)) => Image::parse(name, &bytes)?,
            Some(KernelContents::Flat { base, bytes }) => Image {
                name: name.to_string(),
                bias: 0,
                eh_frame: None,
                debug_frame: None,
                sframe: None,
                orc: None,
                code: vec![(base, bytes)],
                functions: Vec::new(),
                exception_entries: Vec::new(),
            },
            None => anyhow::bail!("{name} is neither an ELF file nor a kernel image"),
        };
        if image.functions.is_empty() {
            let opts = qemu_uftrace_symbols::LoadOptions::default();
            let symbols = qemu_uftrace_symbols::load_kernel_image(path, &opts)
                .with_context(|| format!("{name}'s kallsyms"))?;
            image.functions = function_table(&symbols);
            image.exception_entries = (symbols.functions.iter())
                .filter_map(|f| Some((f.addr, kernel_exception_entry(f.name.as_bytes())?)))
                .collect();
        }
        Ok(image)
    }

    /// The file loaded `bias` above its link addresses.
    pub fn load_at(path: &Path, bias: u64) -> Result<Image> {
        Ok(Image {
            bias,
            ..Image::load(path)?
        })
    }

    /// The link address of guest address `addr`.
    pub fn link(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.bias)
    }

    pub fn parse(name: &str, bytes: &[u8]) -> Result<Image> {
        let file =
            object::File::parse(bytes).with_context(|| format!("{name} is not an ELF file"))?;
        let table = |name: &str| {
            let s = file.section_by_name(name)?;
            Some(Table {
                data: s.uncompressed_data().ok()?.into_owned(),
                addr: s.address(),
                fde_index: Default::default(),
            })
        };
        let code = file
            .sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .filter_map(|s| Some((s.address(), s.data().ok()?.to_vec())))
            .collect();
        let functions = sorted_functions(
            (file.symbols())
                .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
                .map(|s| (s.address(), s.size())),
        );
        let mut exception_entries: Vec<(u64, ExceptionKind)> = (file.symbols())
            .filter_map(|s| Some((s.address(), kernel_exception_entry(s.name_bytes().ok()?)?)))
            .collect();
        exception_entries.sort_unstable_by_key(|e| e.0);
        let orc = match (
            file.section_by_name(".orc_unwind_ip"),
            file.section_by_name(".orc_unwind"),
        ) {
            (Some(ip), Some(unwind)) => Some(
                super::orc::Orc::parse(
                    ip.data().context(".orc_unwind_ip")?,
                    ip.address(),
                    unwind.data().context(".orc_unwind")?,
                )
                .with_context(|| format!("{name}'s ORC tables"))?,
            ),
            _ => None,
        };
        Ok(Image {
            name: name.to_string(),
            bias: 0,
            orc,
            eh_frame: table(".eh_frame"),
            debug_frame: table(".debug_frame"),
            sframe: table(".sframe"),
            code,
            functions,
            exception_entries,
        })
    }

    /// Whether `addr` is in this file's code.
    pub fn has_code(&self, addr: u64) -> bool {
        let addr = self.link(addr);
        self.code
            .iter()
            .any(|(start, b)| addr.checked_sub(*start).is_some_and(|o| o < b.len() as u64))
    }

    /// Up to `len` bytes of code that end at `addr` (fewer at a section's start).
    pub fn code_before(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let addr = self.link(addr);
        let (start, bytes) = self.code.iter().find(|(start, b)| {
            addr.checked_sub(*start)
                .is_some_and(|o| o > 0 && o <= b.len() as u64)
        })?;
        let end = (addr - start) as usize;
        Some(&bytes[end.saturating_sub(len)..end])
    }

    /// The exception whose kernel entry code holds `addr` ([`kernel_exception_entry`]).
    /// Its symbols are code labels, not functions (a vmlinux's are untyped): the nearest
    /// one at or below `addr`, unless a function starts between them.
    pub fn exception_entry_at(&self, addr: u64) -> Option<ExceptionKind> {
        let at = self.link(addr);
        let i = (self.exception_entries).partition_point(|e| e.0 <= at);
        let (start, kind) = *self.exception_entries.get(i.checked_sub(1)?)?;
        let function = self.function_at(addr).map(|f| self.link(f));
        (at - start < 0x1000 && function.is_none_or(|f| f <= start)).then_some(kind)
    }

    /// The start of the function that holds `addr`: the nearest symbol at or below it,
    /// within its size when it has one.
    pub fn function_at(&self, addr: u64) -> Option<u64> {
        let addr = self.link(addr);
        let i = self.functions.partition_point(|&(a, _)| a <= addr);
        let &(start, size) = self.functions.get(i.checked_sub(1)?)?;
        (size == 0 || addr - start < size).then_some(start.wrapping_add(self.bias))
    }
}
