//! Tells symbol sources apart by their contents, never by their names.

use std::path::Path;

use crate::{file_data, SymbolError};

/// The kinds of symbol source [`crate::load`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An ELF file: executable, shared object, vmlinux.
    Elf,
    /// `nm`-style text: `addr type name` lines.
    SystemMap,
    /// A `/proc/kallsyms` dump: like a System.map, some lines with a `[module]` column.
    Kallsyms,
    /// Anything else: a raw kernel image whose built-in kallsyms tables are searched for
    /// (arm64 `Image`, gzip-compressed or EFI zboot `vmlinuz`).
    KernelImage,
}

/// Reads the start of `path` and tells which kind of source it is. Every file is some
/// [`Kind`]: whether a [`Kind::KernelImage`] really holds kallsyms tables only shows when
/// it is loaded.
pub fn detect_kind(path: &Path) -> Result<Kind, SymbolError> {
    Ok(detect(&file_data::map(path)?))
}

pub(crate) fn detect(data: &[u8]) -> Kind {
    if data.starts_with(b"\x7fELF") {
        Kind::Elf
    } else if looks_like_symbol_list(data) {
        if data.windows(2).any(|w| w == b"\t[") {
            Kind::Kallsyms
        } else {
            Kind::SystemMap
        }
    } else {
        Kind::KernelImage
    }
}

/// The first line must be `hex-address type-letter name`.
fn looks_like_symbol_list(data: &[u8]) -> bool {
    let head = &data[..data.len().min(4096)];
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return false;
    };
    let mut fields = line.split_ascii_whitespace();
    let (Some(addr), Some(kind), Some(_name)) = (fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    !addr.is_empty()
        && addr.len() <= 16
        && addr.bytes().all(|b| b.is_ascii_hexdigit())
        && kind.len() == 1
        && kind
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'?' || b == b'-')
}
