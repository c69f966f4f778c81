//! Symbol sources for qemu-uftrace traces: ELF (kernel, firmware, user; with DWARF source
//! lines), `System.map`, `/proc/kallsyms` dumps and raw kernel images with built-in kallsyms.
//!
//! The result of every loader is an [`Image`]: absolute guest addresses, functions sorted by
//! address. Writing uftrace files from it is the `format` crate's business.

use std::path::{Path, PathBuf};

mod banner;
mod btf;
mod debug_file;
mod demangle;
mod detect;
mod dwarf_args;
mod dwarf_lines;
mod dwarf_types;
mod elf;
mod fde;
mod file_data;
mod functions;
mod kallsyms_tables;
mod kernel_image;
mod module_debug;
mod source_arg;
mod start_main;
mod system_map;

pub use banner::{kernel_banner, Banner};
pub use detect::{detect_kind, Kind};
pub use dwarf_args::AutoSpec;
pub use fde::fde_index;
pub use kernel_image::{boot_format, BootFormat, BOOT_HEAD_BYTES};
pub use module_debug::{is_relocatable, module_functions, ModuleFunction};
pub use source_arg::parse_source_arg;

/// Guest architectures, shared with the CLI and the plugin.
pub use qemu_uftrace_format::Arch;

/// A function's source location (from DWARF line tables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLine {
    pub file: String,
    pub line: u32,
}

/// One function of an image, at its absolute guest address (load offset applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    pub addr: u64,
    /// 0 when the source does not say (System.map, kallsyms).
    pub size: u64,
    pub name: String,
    pub global: bool,
    pub line: Option<SourceLine>,
}

/// Everything one symbol source contributes to a trace.
#[derive(Debug, Clone)]
pub struct Image {
    /// The file the symbols came from.
    pub path: PathBuf,
    /// Lowest address covered (load offset applied).
    pub start: u64,
    /// One past the highest address covered.
    pub end: u64,
    /// Sorted by address; aliases collapsed.
    pub functions: Vec<Function>,
    /// Architecture, when the source says (ELF header, raw image header).
    pub arch: Option<Arch>,
    /// Kernel module symbols found in a kallsyms dump, kept apart from the kernel's: one
    /// [`Image`] per module, whose `path` is just the module name (`PathBuf::from("ext4")`),
    /// with no `arch` and no nested modules.
    pub modules: Vec<Image>,
    /// Functions no symbol names, known from the file's `.eh_frame` (a stripped file's
    /// static functions) and the functions its dynamic section has the loader call
    /// (`DT_INIT`, `DT_FINI`, the init and fini arrays), or added by
    /// [`Image::name_by_address`] (a guest process's entries), each named `FILE+0xADDR` by
    /// its address in the file, as `addr2line -e FILE` takes it; sorted. For naming only:
    /// kept apart from `functions` because a compiler's cold part has an FDE of its own, and
    /// a jump into it must not count as entering a function.
    pub by_address: Vec<Function>,
}

impl Image {
    /// The same symbols loaded `by` bytes further (a library whose place is known only once
    /// the program ran was read at offset 0).
    pub fn shifted(mut self, by: u64) -> Image {
        self.start = self.start.wrapping_add(by);
        self.end = self.end.wrapping_add(by);
        for f in self.functions.iter_mut().chain(&mut self.by_address) {
            f.addr = f.addr.wrapping_add(by);
        }
        self.modules = self.modules.into_iter().map(|m| m.shifted(by)).collect();
        self
    }

    /// Names each of `found` (`(address, size)` at this image's addresses, sorted) that no
    /// function starts at or spans, by its address in the file as [`Image::by_address`]
    /// names the others; returns how many it named.
    pub fn name_by_address(&mut self, found: &[(u64, u64)]) -> usize {
        let new = functions::by_address(&self.path, &self.functions, &self.by_address, found);
        let n = new.len();
        if n > 0 {
            self.by_address.extend(new);
            self.by_address.sort_by_key(|f| f.addr);
        }
        n
    }
}

/// How to read one source.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Added to every address (firmware loaded at an offset, PIE, relocated kernel).
    pub offset: u64,
    /// Demangle C++ and Rust names.
    pub demangle: bool,
    /// Look up DWARF source lines for every function entry.
    pub source_lines: bool,
    /// Refuse an image built for another architecture.
    pub expected_arch: Option<Arch>,
    /// Name a file that has no symbols and no unwind tables by its header's entry point
    /// (`FILE+0xADDR`) rather than refuse it: a guest process's file (klibc's, in Debian's
    /// initramfs), whose entered functions [`Image::name_by_address`] names once the trace
    /// is read. Off, such a file is [`SymbolError::Stripped`], as one given with `--symbols`
    /// must be: one name would hide that the user gave the wrong file.
    pub name_entry: bool,
}

/// Why a source gave no symbols.
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an ELF file, System.map, kallsyms dump or kernel image")]
    Unrecognized { path: PathBuf },
    #[error("{path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path} has no function symbols (stripped?): {hint}")]
    Stripped { path: PathBuf, hint: String },
    #[error(
        "{path} is a relocatable object (a kernel module or a .o file): its functions have no \
         address until it is loaded"
    )]
    Relocatable { path: PathBuf },
    #[error("{path} is built for {found}, not {expected}")]
    WrongArch {
        path: PathBuf,
        found: String,
        expected: Arch,
    },
}

/// Why a struct member's offset could not be read from a file's DWARF.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an ELF file")]
    NotElf { path: PathBuf },
    #[error("{path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path} has no DWARF debug information")]
    NoDwarf { path: PathBuf },
    #[error("{path} has no BTF (a kernel built without CONFIG_DEBUG_INFO_BTF?)")]
    NoBtf { path: PathBuf },
    #[error("{path}: its DWARF does not define struct {structure}")]
    NoStruct { path: PathBuf, structure: String },
    #[error("{path}: struct {structure} has no member {member}")]
    NoMember {
        path: PathBuf,
        structure: String,
        member: String,
    },
}

/// The byte offset of `member` in `struct structure` (C), from an ELF file's DWARF: the
/// first complete definition found decides (a Linux vmlinux: `task_struct`, `comm`, in a
/// few milliseconds). Members of anonymous structs and unions count as the struct's own.
/// Only definitions at a unit's top level are found (not types local to a function).
pub fn struct_member_offset(
    path: &Path,
    structure: &str,
    member: &str,
) -> Result<u64, MemberError> {
    let data = map_for_members(path)?;
    elf::member_offset(path, &data, structure, member)
}

/// Where [`KernelTypes`] reads a kernel's struct layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeSource {
    /// A vmlinux's DWARF (its -dbg package).
    Dwarf,
    /// The kernel's own BTF, in a vmlinux or a raw image.
    Btf,
}

enum Layouts {
    Dwarf(memmap2::Mmap),
    Btf(::btf_rs::Btf),
}

/// A Linux kernel's struct layouts, read from one file: the offsets the recording needs
/// (`task_struct.comm`, `file.f_path`, …) from the kernel the user gave, with or without
/// its debug package.
pub struct KernelTypes {
    path: PathBuf,
    layouts: Layouts,
}

impl KernelTypes {
    /// The first of `paths` whose DWARF defines `task_struct` (a -dbg vmlinux), else the
    /// first with the kernel's BTF (a vmlinux's `.BTF`, or a raw image's: arm64 `Image`,
    /// `vmlinuz`, x86 `bzImage`). `Ok(None)`: none has either. `Err`: a file has BTF that
    /// cannot be read, and no other answered.
    pub fn find(paths: &[&Path]) -> Result<Option<KernelTypes>, MemberError> {
        for path in paths {
            if let Ok(types) = KernelTypes::dwarf(path) {
                return Ok(Some(types));
            }
        }
        let mut failed = None;
        for path in paths {
            match KernelTypes::btf(path) {
                Ok(types) => return Ok(Some(types)),
                Err(e @ MemberError::Corrupt { .. }) => {
                    failed.get_or_insert(e);
                }
                Err(_) => {}
            }
        }
        failed.map_or(Ok(None), Err)
    }

    /// `path`'s DWARF, when it defines `task_struct`.
    pub fn dwarf(path: &Path) -> Result<KernelTypes, MemberError> {
        let data = map_for_members(path)?;
        elf::member_offset(path, &data, "task_struct", "pid")?;
        Ok(KernelTypes {
            path: path.to_path_buf(),
            layouts: Layouts::Dwarf(data),
        })
    }

    /// `path`'s BTF (even where it has DWARF too), when it defines `task_struct`.
    pub fn btf(path: &Path) -> Result<KernelTypes, MemberError> {
        let data = map_for_members(path)?;
        let btf = btf::read(path, &data)?.ok_or_else(|| MemberError::NoBtf {
            path: path.to_path_buf(),
        })?;
        if !btf::defines(&btf, "task_struct") {
            return Err(MemberError::NoStruct {
                path: path.to_path_buf(),
                structure: "task_struct".into(),
            });
        }
        Ok(KernelTypes {
            path: path.to_path_buf(),
            layouts: Layouts::Btf(btf),
        })
    }

    /// The file the layouts come from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn source(&self) -> TypeSource {
        match self.layouts {
            Layouts::Dwarf(_) => TypeSource::Dwarf,
            Layouts::Btf(_) => TypeSource::Btf,
        }
    }

    /// The byte offset of `member` in `struct structure`, as [`struct_member_offset`]
    /// counts it.
    pub fn member_offset(&self, structure: &str, member: &str) -> Result<u64, MemberError> {
        match &self.layouts {
            Layouts::Dwarf(data) => elf::member_offset(&self.path, data, structure, member),
            Layouts::Btf(b) => btf::member_offset(&self.path, b, structure, member),
        }
    }
}

fn map_for_members(path: &Path) -> Result<memmap2::Mmap, MemberError> {
    file_data::map(path).map_err(|e| match e {
        SymbolError::Io { path, source } => MemberError::Io { path, source },
        other => MemberError::Corrupt {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    })
}

/// Drops the decompressed kernel image kept for the next reader of the same file: the BTF
/// ([`KernelTypes`]), the kallsyms addresses and symbols of a compressed image (bzImage,
/// gzip, EFI zboot) each reuse the last one decompressed, which stays until this is called.
pub fn release_unpacked_kernel() {
    kernel_image::release_unpacked();
}

/// The addresses of the kernel symbols `names` (`None` for one it lacks), from an ELF's
/// symbol table ([`elf_symbol_addresses`]) or a raw kernel image's kallsyms, the image
/// unpacked once for all of them.
pub fn kernel_symbol_addresses(
    path: &Path,
    names: &[&str],
) -> Result<Vec<Option<u64>>, SymbolError> {
    let data = file_data::map(path)?;
    match detect::detect(&data) {
        Kind::Elf => elf_symbol_addresses(path, names),
        Kind::KernelImage => kernel_image::symbol_addresses(path, &data, names),
        _ => Ok(vec![None; names.len()]),
    }
}

/// The address of the kernel symbol `name`, of any kind (per-CPU variables included, at
/// their offset in the per-CPU area), from a raw kernel image's kallsyms (an x86 bzImage:
/// `current_task`). `Ok(None)`: the file is not a kernel image, or has no such symbol.
pub fn kernel_symbol_address(path: &Path, name: &str) -> Result<Option<u64>, SymbolError> {
    let data = file_data::map(path)?;
    if detect::detect(&data) != Kind::KernelImage {
        return Ok(None);
    }
    kernel_image::symbol_address(path, &data, name)
}

/// A raw kernel image's own contents, for readers of its code and tables (the CLI's
/// unwinder, where no vmlinux is given).
pub enum KernelContents {
    /// An x86 bzImage's payload: the stripped vmlinux, an ELF with its sections (ORC's too).
    Elf(Vec<u8>),
    /// A flat image (arm64/riscv64 `Image`) and where its first byte is linked.
    Flat { base: u64, bytes: Vec<u8> },
}

/// [`KernelContents`] of the kernel image in `path`; `Ok(None)`: not a raw kernel image, or
/// a flat one whose place is not known.
pub fn kernel_image_contents(path: &Path) -> Result<Option<KernelContents>, SymbolError> {
    let data = file_data::map(path)?;
    if detect::detect(&data) != Kind::KernelImage {
        return Ok(None);
    }
    let image = kernel_image::unpack(path, &data)?;
    if image.starts_with(b"\x7fELF") {
        return Ok(Some(KernelContents::Elf(image.to_vec())));
    }
    let base = kernel_image::flat_base(path, &data, &image)?;
    Ok(base.map(|base| KernelContents::Flat {
        base,
        bytes: image.to_vec(),
    }))
}

/// The addresses of the symbols `names` in an ELF file's symbol table (`None` for one it
/// lacks; the first of a name counts), read through a mapping of the file: a Linux vmlinux's
/// ~150 K symbols in milliseconds, where buffered reads of its 273 MB took half a second.
pub fn elf_symbol_addresses(path: &Path, names: &[&str]) -> Result<Vec<Option<u64>>, SymbolError> {
    use object::{Object, ObjectSymbol};
    let data = file_data::map(path)?;
    let file = object::File::parse(&*data).map_err(|e| SymbolError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut found = vec![None; names.len()];
    for sym in file.symbols() {
        let Ok(name) = sym.name_bytes() else { continue };
        if let Some(i) = names.iter().position(|n| n.as_bytes() == name) {
            found[i].get_or_insert(sym.address());
        }
    }
    Ok(found)
}

/// `path` mapped read-only (never read into memory: a 300 MB vmlinux costs only the pages
/// a parser touches), for other readers of guest files (the CLI's unwinder).
pub fn map_file(path: &Path) -> Result<impl std::ops::Deref<Target = [u8]>, SymbolError> {
    file_data::map(path)
}

/// Reads any supported symbol source, detecting its kind from its contents (see [`Kind`]).
/// A source that yields no function at all is an error ([`SymbolError::Stripped`] or
/// [`SymbolError::Corrupt`]), never an empty image.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Image, SymbolError> {
    let data = file_data::map(path)?;
    load_detected(path, &data, opts)
}

/// Sets the DWARF source lines of `image`, loaded from its file `offset` above its link
/// addresses without [`LoadOptions::source_lines`], as that option would have: for a reader
/// that needed the functions first and their lines only later. Sources other than ELF
/// files have no lines (nothing changes).
pub fn add_source_lines(image: &mut Image, offset: u64) -> Result<(), SymbolError> {
    let data = file_data::map(&image.path)?;
    match detect::detect(&data) {
        Kind::Elf => elf::add_lines(&data, image, offset),
        Kind::SystemMap | Kind::Kallsyms | Kind::KernelImage => Ok(()),
    }
}

/// Dispatches on the detected kind; shared with `fuzzing::any`.
fn load_detected(path: &Path, data: &[u8], opts: &LoadOptions) -> Result<Image, SymbolError> {
    match detect::detect(data) {
        Kind::Elf => elf::load(path, data, opts),
        Kind::SystemMap | Kind::Kallsyms => system_map::load(path, data, opts),
        Kind::KernelImage => kernel_image::load(path, data, opts),
    }
}

/// Reads an ELF file (executable, shared object, vmlinux), with DWARF source lines when
/// `opts.source_lines` is set.
pub fn load_elf(path: &Path, opts: &LoadOptions) -> Result<Image, SymbolError> {
    let data = file_data::map(path)?;
    elf::load(path, &data, opts)
}

/// Reads a `System.map` (`nm` output: `addr type name`), keeping text symbols only.
pub fn load_system_map(path: &Path, opts: &LoadOptions) -> Result<Image, SymbolError> {
    let data = file_data::map(path)?;
    system_map::load(path, &data, opts)
}

/// Reads a `/proc/kallsyms` dump (`addr type name [module]`); module symbols go to
/// [`Image::modules`].
pub fn load_kallsyms(path: &Path, opts: &LoadOptions) -> Result<Image, SymbolError> {
    load_system_map(path, opts)
}

/// Recovers the symbols of a raw kernel image (arm64 `Image`, possibly gzip-compressed or
/// an EFI zboot `vmlinuz`) from the kallsyms tables built into it.
pub fn load_kernel_image(path: &Path, opts: &LoadOptions) -> Result<Image, SymbolError> {
    let data = file_data::map(path)?;
    kernel_image::load(path, &data, opts)
}

/// The libraries a dynamic ELF file names (`DT_NEEDED`), in order; none for a static one or
/// a file that is not ELF.
pub fn needed_libraries(path: &Path) -> Vec<String> {
    file_data::map(path)
        .map(|data| elf::needed_libraries(&data))
        .unwrap_or_default()
}

/// `DT_RUNPATH` and `DT_RPATH` directories of a dynamic ELF file (64-bit), as written.
pub fn run_paths(path: &Path) -> Vec<String> {
    file_data::map(path)
        .map(|data| elf::run_paths(&data))
        .unwrap_or_default()
}

/// The architecture of an ELF file, or `None` when `path` is not ELF (a raw image).
pub fn elf_arch(path: &Path) -> Result<Option<Arch>, SymbolError> {
    let data = file_data::map(path)?;
    if detect::detect(&data) != Kind::Elf {
        return Ok(None);
    }
    elf::arch(path, &data).map(|(arch, _)| arch)
}

/// Parsers over in-memory bytes, for the fuzz targets: same code paths as the loaders, no
/// file access. Not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    pub fn elf(data: &[u8], source_lines: bool) -> Result<Image, SymbolError> {
        let opts = LoadOptions {
            source_lines,
            demangle: true,
            ..Default::default()
        };
        elf::load(Path::new("fuzz"), data, &opts)
    }

    pub fn system_map(data: &[u8]) -> Result<Image, SymbolError> {
        system_map::load(Path::new("fuzz"), data, &LoadOptions::default())
    }

    pub fn kernel_image(data: &[u8]) -> Result<Image, SymbolError> {
        kernel_image::load(Path::new("fuzz"), data, &LoadOptions::default())
    }

    pub fn module(data: &[u8]) -> Result<usize, SymbolError> {
        module_debug::functions_in(Path::new("fuzz"), data).map(|f| f.len())
    }

    pub fn member_offset(data: &[u8]) -> Result<u64, MemberError> {
        elf::member_offset(Path::new("fuzz"), data, "task_struct", "comm")
    }

    pub fn any(data: &[u8]) -> Result<Image, SymbolError> {
        let opts = LoadOptions {
            source_lines: true,
            demangle: true,
            ..Default::default()
        };
        load_detected(Path::new("fuzz"), data, &opts)
    }
}

/// `-a/--auto-args`: each function of the ELF file `path` with DWARF types, its arguments'
/// and return value's formats (`dwarf_args`); a stripped file's from its separate debug
/// file (a distribution's libc and its `-dbg` package); empty without DWARF. One line on
/// error. Its units are read on every core.
pub fn auto_specs(path: &Path) -> Result<Vec<AutoSpec>, String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    auto_specs_on(path, cores)
}

/// [`auto_specs`] on `threads` threads: the same list however many.
pub fn auto_specs_on(path: &Path, threads: usize) -> Result<Vec<AutoSpec>, String> {
    let data = file_data::map(path).map_err(|e| e.to_string())?;
    let own = elf::auto_specs(&data, threads).map_err(|e| format!("{}: {e}", path.display()));
    if own.as_ref().is_ok_and(|specs| !specs.is_empty()) {
        return own;
    }
    match elf::debug_file_of(path, &data) {
        Some((debug_path, debug)) => {
            elf::auto_specs(&debug, threads).map_err(|e| format!("{}: {e}", debug_path.display()))
        }
        None => own,
    }
}

/// The kernel's syscall wrappers in the 64-bit ELF file `path` (each `(entry address,
/// syscall name)`): each syscall's own argument formats from the DWARF of its
/// `__do_sys_NAME`, at its wrapper's address (`dwarf_args::syscall_specs`); a syscall
/// whose types the file does not hold is left out. One line on error.
pub fn syscall_specs(path: &Path, wrappers: &[(u64, String)]) -> Result<Vec<AutoSpec>, String> {
    let data = file_data::map(path).map_err(|e| e.to_string())?;
    elf::syscall_specs(&data, wrappers).map_err(|e| format!("{}: {e}", path.display()))
}
