//! Read-only file access: everything is mapped, never read into memory, so a 300 MB vmlinux
//! costs only the pages the parsers touch.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::SymbolError;

/// Maps `path` read-only. An empty file maps to an empty slice.
pub(crate) fn map(path: &Path) -> Result<Mmap, SymbolError> {
    let io = |source| SymbolError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the mapping is private and read-only; a file truncated underneath us by
    // another process could fault, which is the accepted risk of every mmap-based reader
    // (binutils, gdb, addr2line all do the same).
    unsafe { Mmap::map(&file) }.map_err(io)
}
