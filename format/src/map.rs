//! `sid-<SID>.map`: `/proc/<pid>/maps` lines that place each image in the address space
//! (`read_session_map`). Addresses are 48-bit, like the records, and a `[stack]` line at the
//! very top sets uftrace's kernel_base above every 48-bit address so guest kernels resolve.

use std::fmt;
use std::io::{self, Write};

/// The `[stack]` line that makes every 48-bit address a user address to uftrace.
pub const STACK_LINE: &str = "ffffffffffff-ffffffffffff rw-p 00000000 00:00 0 [stack]";

/// One mapped image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// Start and end (exclusive), already in guest virtual addresses; truncated on writing.
    pub start: u64,
    pub end: u64,
    /// Map path: its basename names the `.sym`/`.dbg` files; it cannot contain spaces.
    pub path: String,
}

/// The 48-bit start and exclusive end a map line gives the range `start..end`, as uftrace
/// compares them with record addresses.
pub fn range48(start: u64, end: u64) -> (u64, u64) {
    let start = crate::addr48(start);
    // An end of exactly 2^48 (top of the space) must not wrap to 0.
    let end = crate::addr48(end.wrapping_sub(1)) + 1;
    (start, end.max(start))
}

/// Whether two 48-bit ranges share an address.
pub fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl MapEntry {
    pub fn range48(&self) -> (u64, u64) {
        range48(self.start, self.end)
    }
    /// The `.sym`/`.dbg` file stem uftrace derives from this line.
    pub fn module_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// Why a set of map entries cannot be written as one valid map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapError {
    Overlap(String, String),
    SameName(String),
    BadPath(String),
    Empty(String),
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::Overlap(a, b) => {
                write!(f, "images {a} and {b} overlap in the guest address space")
            }
            MapError::SameName(n) => write!(
                f,
                "two images are both named {n}; uftrace would mix their symbols"
            ),
            MapError::BadPath(p) => write!(f, "map path {p:?} contains white space"),
            MapError::Empty(p) => write!(f, "image {p} covers no addresses"),
        }
    }
}

impl std::error::Error for MapError {}

/// Sorts and checks entries: non-empty, non-overlapping (in 48 bits), unique module names.
pub fn normalize(mut entries: Vec<MapEntry>) -> Result<Vec<MapEntry>, MapError> {
    entries.retain(|e| e.path != "[stack]");
    entries.sort_by_key(|e| e.range48().0);
    let mut names = std::collections::HashSet::new();
    for e in &entries {
        if e.path.is_empty() || e.path.chars().any(char::is_whitespace) {
            return Err(MapError::BadPath(e.path.clone()));
        }
        let (start, end) = e.range48();
        if end <= start {
            return Err(MapError::Empty(e.path.clone()));
        }
        if !names.insert(e.module_name().to_string()) {
            return Err(MapError::SameName(e.module_name().to_string()));
        }
    }
    // Sorted by start and all non-empty, so this is just w[1] starting before w[0] ends.
    for w in entries.windows(2) {
        if overlaps(w[0].range48(), w[1].range48()) {
            return Err(MapError::Overlap(w[0].path.clone(), w[1].path.clone()));
        }
    }
    Ok(entries)
}

/// Writes a complete map: the images in address order, then the `[stack]` line.
pub fn write_map(w: &mut impl Write, entries: Vec<MapEntry>) -> io::Result<()> {
    let entries = normalize(entries)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    for e in &entries {
        let (start, end) = e.range48();
        writeln!(w, "{start:x}-{end:x} r-xp 00000000 00:00 0 {}", e.path)?;
    }
    writeln!(w, "{STACK_LINE}")
}

/// Reads back the image lines of a map (the `[stack]` line and anything malformed are left
/// out, as uftrace skips them too).
pub fn parse_map(text: &str) -> Vec<MapEntry> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let range = f.next()?;
            let (_perms, _off, _dev, _inode) = (f.next()?, f.next()?, f.next()?, f.next()?);
            let path = f.next()?;
            if path.starts_with('[') {
                return None;
            }
            let (s, e) = range.split_once('-')?;
            Some(MapEntry {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                path: path.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(start: u64, end: u64, path: &str) -> MapEntry {
        MapEntry {
            start,
            end,
            path: path.into(),
        }
    }

    #[test]
    fn writes_sorted_truncated_with_stack() {
        let mut out = Vec::new();
        write_map(
            &mut out,
            vec![
                e(0xffff_8000_8000_0000, 0xffff_8000_8100_0000, "/k/vmlinux"),
                e(0x4000_0000, 0x4001_0000, "/g/fw.elf"),
            ],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "40000000-40010000 r-xp 00000000 00:00 0 /g/fw.elf\n\
             800080000000-800081000000 r-xp 00000000 00:00 0 /k/vmlinux\n\
             ffffffffffff-ffffffffffff rw-p 00000000 00:00 0 [stack]\n"
        );
    }

    #[test]
    fn end_at_top_of_space_does_not_wrap() {
        let m = e(0xffff_ffff_ffff_0000, 0, "/top");
        assert_eq!(m.range48().1, 0x1_0000_0000_0000);
    }

    #[test]
    fn rejects_overlap_and_name_clash() {
        assert!(matches!(
            normalize(vec![e(0, 0x100, "/a"), e(0x80, 0x200, "/b")]),
            Err(MapError::Overlap(..))
        ));
        assert!(matches!(
            normalize(vec![e(0, 0x100, "/x/a"), e(0x100, 0x200, "/y/a")]),
            Err(MapError::SameName(_))
        ));
    }

    #[test]
    fn parse_round_trip() {
        let mut out = Vec::new();
        write_map(&mut out, vec![e(0x1000, 0x2000, "/a.elf")]).unwrap();
        assert_eq!(
            parse_map(std::str::from_utf8(&out).unwrap()),
            vec![e(0x1000, 0x2000, "/a.elf")]
        );
    }
}
