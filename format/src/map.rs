//! `sid-<SID>.map`: `/proc/<pid>/maps` lines that place each image in the address space
//! (`read_session_map`). Addresses are 48-bit, like the records, and a `[stack]` line at the
//! very top sets uftrace's kernel_base above every 48-bit address so guest kernels resolve.

use std::fmt;
use std::io::{self, Write};

use crate::text;

/// The `[stack]` line that makes every 48-bit address a user address to uftrace.
pub const STACK_LINE: &str = "ffffffffffff-ffffffffffff rw-p 00000000 00:00 0 [stack]";

/// The longest map path: with the longest address range and fields before it, a line
/// stays within [`text::MAX_LINE`] (`read_session_map` reads lines with
/// `fgets(buf, PATH_MAX)`).
pub const MAX_PATH: usize =
    text::MAX_LINE - "ffffffffffff-1000000000000 r-xp 00000000 00:00 0 \n".len();

/// The longest module name (a map path's basename): `<name>.sym`, `<name>.dbg` and
/// uftrace's `<name>-xxxx.sym` stay within a file name's 255 bytes.
pub const MAX_MODULE_NAME: usize = 200;

/// A map path as uftrace can read it: one word (white space, control characters and
/// backslashes escaped, see [`text::escape_word`]) of at most [`MAX_PATH`] bytes whose
/// basename has at most [`MAX_MODULE_NAME`]. A longer one keeps its tail after a mark and a
/// digest of the whole, so it stays recognisable and distinct; [`MapPath::was_cut`] says so.
#[derive(Debug, Clone)]
pub struct MapPath {
    text: String,
    cut: bool,
}

impl MapPath {
    /// The map path for a path as the guest or the host gave it.
    pub fn new(raw: &str) -> MapPath {
        Self::bounded(text::escape_word(raw).into_owned())
    }

    /// A path read back from a map this crate wrote: kept as it is (its escapes already
    /// written) when it is a valid word, else bounded as a new one.
    pub fn from_written(word: &str) -> MapPath {
        let fits = word.len() <= MAX_PATH
            && word.rsplit('/').next().unwrap_or(word).len() <= MAX_MODULE_NAME;
        if fits && text::is_word(word) {
            MapPath {
                text: word.to_string(),
                cut: false,
            }
        } else {
            Self::new(word)
        }
    }

    fn bounded(word: String) -> MapPath {
        let (dir, base) = match word.rsplit_once('/') {
            Some((d, b)) => (d, b),
            None => ("", word.as_str()),
        };
        let has_dir = word.contains('/');
        let base = text::keep_tail(base, MAX_MODULE_NAME).unwrap_or_else(|| base.to_string());
        let joined = |dir: &str| {
            if has_dir {
                format!("{dir}/{base}")
            } else {
                base.clone()
            }
        };
        let mut out = joined(dir);
        if out.len() > MAX_PATH {
            // Keep the directories nearest the file, from a `/`, behind a marked digest.
            let head = format!("/{}{}", text::CUT_MARK, text::digest(&word));
            let room = MAX_PATH - head.len() - base.len() - 1;
            let from = text::ceil_boundary(dir, dir.len() - room.min(dir.len()));
            let tail = &dir[from..];
            let tail = tail.find('/').map_or("", |i| &tail[i..]);
            out = joined(&format!("{head}{tail}"));
        }
        let cut = out != word;
        MapPath { text: out, cut }
    }

    /// Whether the path was cut to fit (a warning's business).
    pub fn was_cut(&self) -> bool {
        self.cut
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl std::ops::Deref for MapPath {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for MapPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for MapPath {
    fn eq(&self, other: &MapPath) -> bool {
        self.text == other.text
    }
}

impl Eq for MapPath {}

impl PartialEq<str> for MapPath {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for MapPath {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl From<&str> for MapPath {
    fn from(raw: &str) -> MapPath {
        MapPath::new(raw)
    }
}

impl From<String> for MapPath {
    fn from(raw: String) -> MapPath {
        MapPath::new(&raw)
    }
}

/// One mapped image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// Start and end (exclusive), already in guest virtual addresses; truncated on writing.
    pub start: u64,
    pub end: u64,
    /// Map path: its basename names the `.sym`/`.dbg` files.
    pub path: MapPath,
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

/// A warning line for each entry whose path was cut to fit uftrace's readers.
pub fn cut_paths(entries: &[MapEntry]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.path.was_cut())
        .map(|e| {
            format!(
                "a file's path was cut to {} bytes for uftrace's map reader: shown as {}",
                e.path.len(),
                e.path
            )
        })
        .collect()
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
            MapError::BadPath(p) => write!(f, "map path {p:?} is empty"),
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
        if e.path.is_empty() {
            return Err(MapError::BadPath(e.path.to_string()));
        }
        let (start, end) = e.range48();
        if end <= start {
            return Err(MapError::Empty(e.path.to_string()));
        }
        if !names.insert(e.module_name().to_string()) {
            return Err(MapError::SameName(e.module_name().to_string()));
        }
    }
    // Sorted by start and all non-empty, so this is just w[1] starting before w[0] ends.
    for w in entries.windows(2) {
        if overlaps(w[0].range48(), w[1].range48()) {
            return Err(MapError::Overlap(
                w[0].path.to_string(),
                w[1].path.to_string(),
            ));
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
                path: MapPath::from_written(path),
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

    /// A guest user's executable 17 directories of 255-byte names deep.
    fn deep_path(fill: char) -> String {
        let dir: String = (0..17)
            .map(|i| format!("/{}{}", i % 10, fill.to_string().repeat(254)))
            .collect();
        format!("{dir}/prog-{fill}")
    }

    fn map_lines(entries: Vec<MapEntry>) -> String {
        let mut out = Vec::new();
        write_map(&mut out, entries).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn deep_paths_fit_uftraces_line_buffer_and_stay_distinct() {
        let (a, b) = (deep_path('a'), deep_path('b'));
        assert!(a.len() > 4096);
        let text = map_lines(vec![
            e(0x1000, 0x2000, &a),
            e(0x2000, 0x3000, &b),
            e(0xffff_ffff_f000, 0, &format!("{}x", "/y".repeat(3000))),
        ]);
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        assert_eq!(lines.len(), 4);
        for line in &lines {
            assert!(line.len() <= text::MAX_LINE, "{} bytes", line.len());
        }
        let parsed = parse_map(&text);
        assert_eq!(parsed.len(), 3);
        assert!(parsed[0].path.ends_with("/prog-a") && parsed[0].path.contains('\u{2026}'));
        assert_ne!(parsed[0].path, parsed[1].path);
        assert_eq!(parsed[0].module_name(), "prog-a");
        // Read back and written again, a cut path is the same.
        assert_eq!(map_lines(parsed), text);
        assert!(MapPath::new(&a).was_cut());
        assert!(!MapPath::new("/lib/libc.so.6").was_cut());
        assert_eq!(cut_paths(&[e(0, 1, &a), e(1, 2, "/b")]).len(), 1);
    }

    #[test]
    fn long_module_names_are_cut_to_a_file_name() {
        let long = format!("/d/{}", "n".repeat(255));
        let other = format!("/d/{}m", "n".repeat(254));
        let (p, q) = (MapPath::new(&long), MapPath::new(&other));
        let name = p.rsplit('/').next().unwrap();
        assert!(name.len() <= MAX_MODULE_NAME && name.ends_with("nnnn"));
        assert!(name.starts_with('\u{2026}'));
        assert_ne!(p, q);
        assert!(normalize(vec![e(0, 1, &long), e(1, 2, &other)]).is_ok());
    }

    #[test]
    fn paths_are_one_word_without_control_characters() {
        let text = map_lines(vec![e(0, 0x100, "/tmp/my lib\x1b[2J\r.so")]);
        assert_eq!(
            text.lines().next().unwrap(),
            "0-100 r-xp 00000000 00:00 0 /tmp/my\\x20lib\\x1b[2J\\x0d.so"
        );
        // Names differing only where a lossy or blank-replacing conversion would meet.
        assert!(normalize(vec![e(0, 1, "/a/x y"), e(1, 2, "/a/x_y")]).is_ok());
    }
}
