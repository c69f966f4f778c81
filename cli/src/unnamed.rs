//! Names for the code a system-mode trace calls that no symbol source covers.
//!
//! uftrace prints such an address as the record holds it, cut to 48 bits
//! (`<ffff81a07a30>`), which matches neither System.map nor the kernel's own oops output;
//! and on x86_64 thousands of distinct SeaBIOS, option-ROM and bzImage-decompressor
//! addresses open every replay. So, after recording (and after `symbols` changes the map),
//! the entry addresses of every task file are read, those that no map line covers are
//! grouped into regions, and each region gets a map line of its own (`unnamed-<start>`,
//! listed after every real image so that those win) with a `.sym` file:
//! - in the upper half (bit 47 set: a kernel's addresses), one symbol per address, named by
//!   the whole address as the guest sees it (`<ffffffff81a07a30>`);
//! - on x86_64 below 4 GiB (firmware and boot code, which ship no symbols: Debian's SeaBIOS
//!   is built without, and a bzImage carries no symbols for its decompressor), one symbol
//!   per region, `[x86 BIOS e0000-100000]`, so that each region is one marked function;
//! - anywhere else (a bare-metal guest recorded without its ELF) addresses stay as uftrace
//!   shows them: they are whole already, and each is a different function.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use qemu_uftrace_format::map::{self, MapEntry};
use qemu_uftrace_format::symfile::{self, SymLine};
use qemu_uftrace_format::Arch;

use crate::symfiles;

/// Map paths (and `.sym` stems) of the regions this module names.
pub const PREFIX: &str = "unnamed-";

/// Addresses closer than this belong to one region.
const GAP: u64 = 0x1_0000;

/// A 48-bit record address as the guest sees it: a kernel's addresses (the upper half:
/// bit 47 set) have every bit above 47 set on x86_64 and riscv64 (whose user space stays
/// below 2^47). On aarch64 a user program's addresses reach 2^48, its libraries and stack
/// near the top: there only the kernel's ranges (image, modules, vmalloc, fixmap: below
/// 0xffff_0000_0000 once cut) are taken for the kernel's.
pub fn whole(addr48: u64, arch: Option<Arch>) -> u64 {
    let upper = addr48 & (1 << 47) != 0;
    let user_top = arch == Some(Arch::Aarch64) && addr48 >= 0xffff_0000_0000;
    if upper && !user_top {
        addr48 | !((1 << 48) - 1)
    } else {
        addr48
    }
}

/// One group of uncovered addresses, and the range its map line covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub addrs: Vec<u64>,
}

/// Groups sorted uncovered addresses into page-aligned regions that overlap no covered
/// range (`covered`: 48-bit, exclusive ends).
/// Where an x86 PC's low memory changes hands: real-mode code (SeaBIOS's low copy, the
/// kernel's setup code), VGA memory, option ROMs, the BIOS, and 1 MiB on.
const X86_BOUNDARIES: &[u64] = &[0xa_0000, 0xc_0000, 0xe_0000, 0x10_0000];

pub fn regions(addrs: &BTreeSet<u64>, covered: &[(u64, u64)], bounds: &[u64]) -> Vec<Region> {
    let mut out: Vec<Region> = Vec::new();
    for &a in addrs {
        // An image or a boundary between two addresses splits them, close or not.
        let apart = |prev: u64| {
            a - prev > GAP
                || covered.iter().any(|&(s, _)| prev < s && s <= a)
                || bounds.iter().any(|&b| prev < b && b <= a)
        };
        match out.last_mut() {
            Some(r) if !r.addrs.last().is_some_and(|&p| apart(p)) => r.addrs.push(a),
            _ => out.push(Region {
                start: a,
                end: a + 1,
                addrs: vec![a],
            }),
        }
    }
    for r in &mut out {
        let first = r.addrs[0];
        let last = *r.addrs.last().unwrap_or(&first);
        let mut start = first & !0xfff;
        let mut end = ((last + 0x1000) & !0xfff).min(1 << 48);
        // Never into an image's line: its addresses are named there.
        for (s, e) in covered
            .iter()
            .copied()
            .chain(bounds.iter().map(|&b| (b, b)))
        {
            if e <= first && e > start {
                start = e;
            }
            if s > last && s < end {
                end = s;
            }
        }
        r.start = start;
        r.end = end;
    }
    out
}

/// The symbols of one region: see the module's documentation.
fn symbols(r: &Region, arch: Option<Arch>) -> Option<Vec<SymLine>> {
    if whole(r.start, arch) != r.start {
        return Some(
            r.addrs
                .iter()
                .map(|&a| SymLine {
                    offset: a - r.start,
                    size: 1,
                    name: format!("<{:x}>", whole(a, arch)),
                    global: true,
                })
                .collect(),
        );
    }
    if arch == Some(Arch::X86_64) && r.end <= 1 << 32 {
        let what = if r.start >= 0xe_0000 && r.end <= 0x10_0000 {
            "x86 BIOS"
        } else if r.start >= 0xc_0000 && r.end <= 0xe_0000 {
            "x86 option ROM"
        } else if r.end <= 0xa_0000 {
            "x86 real-mode code"
        } else {
            "x86 code without symbols"
        };
        return Some(vec![SymLine {
            offset: 0,
            size: r.end - r.start,
            name: format!("[{what} {:x}-{:x}]", r.start, r.end),
            global: true,
        }]);
    }
    None
}

/// The distinct entry addresses of every task file in `dir` that no range of `covered`
/// holds (ranges sorted by start). Read once QEMU has exited, while `record` waits: a boot's
/// hundreds of megabytes are read in pieces by as many threads as there are cores.
fn uncovered_entries(dir: &Path, covered: &[(u64, u64)]) -> Result<BTreeSet<u64>> {
    // Every task's records: `<tid>.dat`.
    let dats = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "dat")
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|s| s.parse::<u32>().is_ok())
        });
    let mut pieces = Vec::new();
    for path in dats {
        let len = std::fs::metadata(&path)
            .with_context(|| format!("cannot open {}", path.display()))?
            .len();
        // Whole records only: a torn last record is no entry.
        let len = len / RECORD * RECORD;
        pieces.extend((0..len).step_by(PIECE as usize).map(|start| Piece {
            path: path.clone(),
            start,
            end: (start + PIECE).min(len),
        }));
    }
    let results = crate::cores::share(&pieces, |pieces| -> Result<BTreeSet<u64>> {
        let mut found = Found::new(covered);
        let mut buf = Vec::new();
        for piece in pieces {
            piece.scan(&mut buf, &mut found)?;
        }
        Ok(found.out)
    });
    let mut out = BTreeSet::new();
    for r in results {
        let r = r.unwrap_or_else(|_| Err(anyhow::anyhow!("a reader of the task files crashed")));
        out.append(&mut r?);
    }
    Ok(out)
}

/// The distinct entry addresses of every task file in `dir` inside `ranges` (48-bit, end
/// exclusive): kernel modules' code that has no symbol (`guest_procs::modules`).
pub fn entries_within(dir: &Path, ranges: &[(u64, u64)]) -> Result<BTreeSet<u64>> {
    let mut inside = ranges.to_vec();
    inside.sort_unstable();
    // Everything else is "covered".
    let mut outside = Vec::new();
    let mut from = 0;
    for &(start, end) in &inside {
        if start > from {
            outside.push((from, start));
        }
        from = from.max(end);
    }
    outside.push((from, u64::MAX));
    uncovered_entries(dir, &outside)
}

/// A task file's record size.
const RECORD: u64 = qemu_uftrace_format::record::RECORD_SIZE as u64;
/// How much of a task file one thread reads at a time.
const PIECE: u64 = 4 << 20;

/// A part of a task file, whole records.
struct Piece {
    path: std::path::PathBuf,
    start: u64,
    end: u64,
}

impl Piece {
    /// Adds the uncovered entry addresses of this part to `found`.
    fn scan(&self, buf: &mut Vec<u8>, found: &mut Found) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&self.path)
            .with_context(|| format!("cannot open {}", self.path.display()))?;
        buf.resize((self.end - self.start) as usize, 0);
        let mut filled = 0;
        while filled < buf.len() {
            let n = f
                .read_at(&mut buf[filled..], self.start + filled as u64)
                .with_context(|| format!("cannot read {}", self.path.display()))?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        for rec in buf[..filled].chunks_exact(RECORD as usize) {
            let word = u64::from_le_bytes(rec[8..16].try_into().unwrap_or_default());
            // Entries only (type 0): an exit's address is its function's too.
            if word & 3 == 0 {
                found.add(word >> 16);
            }
        }
        Ok(())
    }
}

/// The uncovered addresses one thread found.
struct Found<'a> {
    covered: &'a [(u64, u64)],
    /// The range that held the last address: most calls stay within one image.
    hit: (u64, u64),
    out: BTreeSet<u64>,
}

impl<'a> Found<'a> {
    fn new(covered: &'a [(u64, u64)]) -> Self {
        Found {
            covered,
            hit: (0, 0),
            out: BTreeSet::new(),
        }
    }

    fn add(&mut self, a: u64) {
        if self.hit.0 <= a && a < self.hit.1 {
            return;
        }
        let i = self.covered.partition_point(|&(s, _)| s <= a);
        if i > 0 && a < self.covered[i - 1].1 {
            self.hit = self.covered[i - 1];
        } else {
            self.out.insert(a);
        }
    }
}

/// The session maps (`sid-*.map`) of a trace directory, in name order.
pub fn map_files(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("sid-") && n.ends_with(".map"))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Re-derives the regions of a system-mode trace directory: drops the lines this module
/// wrote before, names what the map's images leave uncovered, and returns how many regions
/// it named.
pub fn refresh(dir: &Path, arch: Option<Arch>) -> Result<usize> {
    let maps = map_files(dir)?;
    // Several sessions are user mode's processes, whose addresses are their own.
    let [map_path] = &maps[..] else {
        return Ok(0);
    };
    let text = std::fs::read_to_string(map_path)
        .with_context(|| format!("cannot read {}", map_path.display()))?;
    let mut entries: Vec<MapEntry> = map::parse_map(&text)
        .into_iter()
        .filter(|e| e.path != "[stack]" && !e.module_name().starts_with(PREFIX))
        .collect();
    let mut covered: Vec<(u64, u64)> = entries.iter().map(MapEntry::range48).collect();
    covered.sort_unstable();
    let bounds = if arch == Some(Arch::X86_64) {
        X86_BOUNDARIES
    } else {
        &[]
    };
    let found = regions(&uncovered_entries(dir, &covered)?, &covered, bounds);
    // The files of regions named before (an image given since may cover them).
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(PREFIX) && name.ends_with(".sym") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let mut named = 0;
    for r in &found {
        let Some(syms) = symbols(r, arch) else {
            continue;
        };
        let name = format!("{PREFIX}{:x}", r.start);
        symfiles::write_with(&dir.join(format!("{name}.sym")), |w| {
            symfile::write_sym(w, &syms, r.end - r.start)
        })?;
        entries.push(MapEntry {
            start: r.start,
            end: r.end,
            path: name.into(),
        });
        named += 1;
    }
    // Unsynced, as the trace's other files: a sync here waited for the run's unsynced
    // streams (measured: 10-115 ms after an arm64 boot, in every system-mode record).
    crate::atomic_file::replace_unsynced(map_path, |mut w| map::write_map(&mut w, entries))?;
    Ok(named)
}

/// [`refresh`] for a recording or an updated one: system mode only (user mode's programs
/// have their own symbols); a failure is said among the skipped symbols, never fatal, as
/// the trace is whole without these names.
pub fn after_recording(dir: &Path, stats: Option<&crate::stats::Stats>, said: &mut Vec<String>) {
    let Some(s) = stats.filter(|s| !s.is_user_mode()) else {
        return;
    };
    let arch = s.target.as_deref().and_then(Arch::from_qemu_target);
    if let Err(e) = refresh(dir, arch) {
        said.push(format!(
            "code without symbols is shown as uftrace cuts it: {e:#}"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_half_addresses_are_whole() {
        let x86 = Some(Arch::X86_64);
        let arm = Some(Arch::Aarch64);
        assert_eq!(whole(0xffff_81a0_7a30, x86), 0xffff_ffff_81a0_7a30);
        assert_eq!(whole(0x8000_8001_0000, arm), 0xffff_8000_8001_0000);
        assert_eq!(whole(0xf_d0a2, x86), 0xf_d0a2);
        assert_eq!(whole(0xffff_b7a0_1000, arm), 0xffff_b7a0_1000);
    }

    #[test]
    fn regions_group_close_addresses_and_stay_off_images() {
        let addrs: BTreeSet<u64> = [0xf_0010, 0xf_d0a2, 0x1eff_b845, 0x1efe_cdac]
            .into_iter()
            .collect();
        let covered = [(0x1eff_0000, 0x1eff_b000)];
        let r = regions(&addrs, &covered, &[]);
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!((r[0].start, r[0].end), (0xf_0000, 0xf_e000));
        assert_eq!(r[0].addrs, [0xf_0010, 0xf_d0a2]);
        // Split by the image between them; the pages called, from the image's end.
        assert_eq!((r[1].start, r[1].end), (0x1efe_c000, 0x1efe_d000));
        assert_eq!((r[2].start, r[2].end), (0x1eff_b000, 0x1eff_c000));
        // x86: the BIOS and 1 MiB on apart, however close.
        let addrs: BTreeSet<u64> = [0xf_fff0, 0x10_0000].into_iter().collect();
        let r = regions(&addrs, &[], X86_BOUNDARIES);
        assert_eq!((r[0].start, r[0].end), (0xf_f000, 0x10_0000));
        assert_eq!((r[1].start, r[1].end), (0x10_0000, 0x10_1000));
    }
}
