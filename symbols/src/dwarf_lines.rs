//! Source lines of function entries from DWARF line tables (DWARF 2 to 5).
//!
//! Kernel scale (tens of thousands of functions, tens of millions of line-table rows) rules
//! out per-address lookups: instead every line program is run once, and each sequence is
//! merged against the sorted function entries, so the cost is one pass over the rows.
//! The row chosen for an entry, in order of preference:
//! 1. the first `is_stmt` row (else the first row) at exactly the entry address: the
//!    function's opening line (`addr2line` would take the last such row, often the first
//!    statement's line instead);
//! 2. the first row inside the function, after its entry: kernels built for ftrace start
//!    every function with NOPs that have no row of their own (`-fpatchable-function-entry`);
//! 3. the row covering the entry (the previous row of its sequence), as `addr2line` does.

use std::borrow::Cow;
use std::collections::HashMap;

use gimli::{EndianSlice, RunTimeEndian, SectionId};

use crate::SourceLine;

type R<'a> = EndianSlice<'a, RunTimeEndian>;

#[derive(Clone, Copy)]
struct Hit {
    file: u32,
    line: u32,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    exact: Option<Hit>,
    exact_is_stmt: bool,
    inside: Option<Hit>,
    cover: Option<Hit>,
}

/// The source line of each function in `entries` (address and size; sorted by address,
/// addresses unique), `None` where the line tables say nothing. `section` returns a
/// section's contents by name, empty when absent.
pub(crate) fn lines_for<'d>(
    section: &dyn Fn(&str) -> Cow<'d, [u8]>,
    little_endian: bool,
    entries: &[u64],
    sizes: &[u64],
) -> Vec<Option<SourceLine>> {
    let endian = if little_endian {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    // Only what the units' root entries and line programs refer to: the location and range
    // lists (a fifth of glibc's compressed DWARF, inflated at every load) are never read.
    let needed = |id: SectionId| {
        matches!(
            id,
            SectionId::DebugAbbrev
                | SectionId::DebugAddr
                | SectionId::DebugInfo
                | SectionId::DebugLine
                | SectionId::DebugLineStr
                | SectionId::DebugStr
                | SectionId::DebugStrOffsets
        )
    };
    let load = |id: SectionId| {
        if needed(id) {
            section(id.name())
        } else {
            Cow::Borrowed(&[][..])
        }
    };
    let sections: gimli::DwarfSections<Cow<'d, [u8]>> =
        match gimli::DwarfSections::load(|id| Ok::<_, gimli::Error>(load(id))) {
            Ok(s) => s,
            Err(_) => return vec![None; entries.len()],
        };
    let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));

    let mut state = State {
        entries,
        sizes,
        slots: vec![Slot::default(); entries.len()],
        files: Files::default(),
    };
    let mut units = dwarf.units();
    // A unit header that does not parse ends the walk: the next unit's offset is unknown.
    while let Ok(Some(header)) = units.next() {
        // A bad unit loses its own lines only.
        let _ = state.unit(&dwarf, header);
    }

    let State { slots, files, .. } = state;
    slots
        .into_iter()
        .map(|s| {
            s.exact.or(s.inside).or(s.cover).map(|h| SourceLine {
                file: files.names[h.file as usize].clone(),
                line: h.line,
            })
        })
        .collect()
}

/// Interned file names: a kernel has ~45,000 functions but only a few thousand files.
#[derive(Default)]
struct Files {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Files {
    fn intern(&mut self, name: String) -> u32 {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.clone());
        self.ids.insert(name, id);
        id
    }
}

struct State<'e> {
    entries: &'e [u64],
    sizes: &'e [u64],
    slots: Vec<Slot>,
    files: Files,
}

/// A row's place in the program, its file still unresolved (most rows are never used).
#[derive(Clone, Copy)]
struct RawRow {
    addr: u64,
    file: u64,
    line: u32,
    is_stmt: bool,
}

impl State<'_> {
    fn unit(
        &mut self,
        dwarf: &gimli::Dwarf<R<'_>>,
        header: gimli::UnitHeader<R<'_>>,
    ) -> gimli::Result<()> {
        let unit = dwarf.unit(header)?;
        let Some(program) = unit.line_program.clone() else {
            return Ok(());
        };
        let comp_dir = unit.comp_dir.map(|d| d.to_string_lossy().into_owned());
        // Unit file index -> interned name; None = not yet resolved. Bounded by the header's
        // own file table (plus slack for DWARF 4's 1-based numbering).
        let mut file_ids: Vec<Option<u32>> = vec![None; program.header().file_names().len() + 1];
        let mut resolve =
            |files: &mut Files, header: &gimli::LineProgramHeader<R<'_>>, index: u64| -> u32 {
                let slot = usize::try_from(index)
                    .ok()
                    .and_then(|i| file_ids.get_mut(i));
                if let Some(Some(id)) = slot.as_deref() {
                    return *id;
                }
                let name = file_name(dwarf, &unit, header, index, comp_dir.as_deref())
                    .unwrap_or_else(|| "??".into());
                let id = files.intern(name);
                if let Some(slot) = usize::try_from(index)
                    .ok()
                    .and_then(|i| file_ids.get_mut(i))
                {
                    *slot = Some(id);
                }
                id
            };

        let n = self.entries.len();
        let mut rows = program.rows();
        let mut prev: Option<RawRow> = None;
        let mut idx = 0usize;
        while let Some((header, row)) = rows.next_row()? {
            let addr = row.address();
            if row.end_sequence() {
                if let Some(p) = prev {
                    while idx < n && self.entries[idx] < addr {
                        if self.slots[idx].cover.is_none() {
                            let file = resolve(&mut self.files, header, p.file);
                            self.slots[idx].cover = Some(Hit { file, line: p.line });
                        }
                        idx += 1;
                    }
                }
                prev = None;
                continue;
            }
            let cur = RawRow {
                addr,
                file: row.file_index(),
                line: row
                    .line()
                    .map_or(0, |l| l.get().min(u64::from(u32::MAX)) as u32),
                is_stmt: row.is_stmt(),
            };
            match prev {
                // Rows of a sequence never go backwards; if they do, start over as if new.
                Some(p) if addr >= p.addr => {
                    while idx < n && self.entries[idx] < addr {
                        if self.slots[idx].cover.is_none() {
                            let file = resolve(&mut self.files, header, p.file);
                            self.slots[idx].cover = Some(Hit { file, line: p.line });
                        }
                        idx += 1;
                    }
                }
                _ => idx = self.entries.partition_point(|&e| e < addr),
            }
            if idx < n && self.entries[idx] == addr {
                let slot = &self.slots[idx];
                if slot.exact.is_none() || (cur.is_stmt && !slot.exact_is_stmt) {
                    let file = resolve(&mut self.files, header, cur.file);
                    let slot = &mut self.slots[idx];
                    slot.exact = Some(Hit {
                        file,
                        line: cur.line,
                    });
                    slot.exact_is_stmt = cur.is_stmt;
                }
            }
            // The function this row lies inside of (past its entry) gets its first row.
            if let Some(i) = idx.checked_sub(1) {
                let (entry, size) = (self.entries[i], self.sizes.get(i).copied().unwrap_or(0));
                if addr > entry && addr - entry < size && self.slots[i].inside.is_none() {
                    let file = resolve(&mut self.files, header, cur.file);
                    self.slots[i].inside = Some(Hit {
                        file,
                        line: cur.line,
                    });
                }
            }
            prev = Some(cur);
        }
        Ok(())
    }
}

/// The file's path as uftrace shows it: directory + name, relative to the unit's
/// compilation directory when inside it.
fn file_name(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    header: &gimli::LineProgramHeader<R<'_>>,
    index: u64,
    comp_dir: Option<&str>,
) -> Option<String> {
    let file = header.file(index)?;
    let name = dwarf
        .attr_string(unit, file.path_name())
        .ok()?
        .to_string_lossy()
        .into_owned();
    let mut path = String::new();
    if !name.starts_with('/') {
        let dir = file
            .directory(header)
            .and_then(|d| dwarf.attr_string(unit, d).ok())
            .map(|d| d.to_string_lossy().into_owned());
        match dir {
            Some(dir) if dir.starts_with('/') => path = dir,
            dir => {
                if let Some(cd) = comp_dir {
                    path.push_str(cd);
                }
                if let Some(dir) = dir.filter(|d| !d.is_empty()) {
                    push_component(&mut path, &dir);
                }
            }
        }
    }
    push_component(&mut path, &name);
    if let Some(cd) = comp_dir
        .map(|c| c.trim_end_matches('/'))
        .filter(|c| !c.is_empty())
    {
        if let Some(rest) = path.strip_prefix(cd).and_then(|r| r.strip_prefix('/')) {
            path = rest.to_string();
        }
    }
    while let Some(rest) = path.strip_prefix("./") {
        path = rest.to_string();
    }
    Some(path)
}

fn push_component(path: &mut String, part: &str) {
    if !path.is_empty() && !path.ends_with('/') {
        path.push('/');
    }
    path.push_str(part);
}
