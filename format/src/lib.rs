//! The `uftrace.data/` on-disk layout, as uftrace 0.13 through 0.19 read it.
//!
//! This crate is the only place that knows the byte and text layout of the files.
//! The rules it follows (and why) are in `shared/docs/uftrace-data-format.md`:
//! 16-byte records with magic 5, the 40-byte `info` header, `task.txt`, `/proc/maps`-style
//! session maps with a `[stack]` line, 3-column `.sym` files with gap and end markers, and
//! `.dbg` files.

pub mod arch;
pub mod args;
pub mod cookie;
pub mod events;
pub mod info;
pub mod map;
pub mod note;
pub mod pseudo;
pub mod record;
pub mod symfile;
pub mod task;
pub mod text;

pub use arch::Arch;

/// Record addresses hold 48 bits; maps and `.sym` offsets must be truncated the same way.
pub const ADDR_MASK: u64 = 0xffff_ffff_ffff;

/// Truncates an address the way uftrace records do.
pub const fn addr48(addr: u64) -> u64 {
    addr & ADDR_MASK
}

/// The stack depth we write into the header and never exceed in records; uftrace's
/// readers misbehave (graph double-frees) well before 4096, so stay near their default.
pub const MAX_STACK: u16 = 1024;
