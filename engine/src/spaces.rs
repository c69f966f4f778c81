//! A Linux guest's process address spaces, as far as code is concerned, and where a block
//! translated in one of them runs in another.
//!
//! QEMU translates a guest physical page once and reuses that translation wherever the page
//! is mapped (aarch64, riscv64 and x86_64 system emulation translate position-independently:
//! `CF_PCREL`). Two processes running one file share its pages, so a block the first one
//! translated runs in the second at another virtual address, and every address decided at
//! translation (a direct call's target, a return address, a landing block's start) is the
//! first process's. The plugin notes which space a user-space block was translated in;
//! when it runs in another, [`Spaces::delta`] gives how far the file's code lies from where
//! it lay in the translating space (both known from the process-map watch's `mmap_region`
//! events), and [`DeltaCache`] keeps that per vCPU so that it is worked out once per page.

use std::collections::{HashMap, VecDeque};

/// An address space: its index in [`Spaces`] plus one; 0 is "unknown" (a process whose start
/// was not seen, kernel code), which nothing is ever rebased from or to.
pub type SpaceId = u32;

/// A file mapped executable in one space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapping {
    /// The file, interned by its guest path.
    file: u32,
    start: u64,
    end: u64,
    /// The file offset mapped at `start`.
    offset: u64,
    /// Unmapped by the process ([`Spaces::munmap`]) but kept: code translated from it may
    /// still run in another process that maps the file (QEMU keeps a translation while any
    /// mapping of its physical page lives). The first to go past [`MAX_MAPS`].
    unmapped: bool,
}

/// Spaces no process holds any more (it exited, exec'd or its PID was reused) that are
/// kept, the latest ones: code translated in them may still run in other processes (a
/// shared library's pages). Older ones are freed, so that a guest's fork loop does not grow
/// the plugin without bound. Debian's systemd boot to its power-off (issue 36) makes ~265
/// spaces and ran code translated in its first ones at the end (256 kept: 18 events left
/// unmoved, the trace INCOMPLETE); a space is its code mappings, ~1 KiB for a process of
/// 30 files, so 4,096 cost a few MiB at most.
pub const KEPT_ENDED: usize = 4096;

/// Guest paths interned at most (each up to 32 components of 255 bytes): a guest user
/// mapping file after file of new names must not grow the plugin without bound. Later files
/// each get an id of their own, never another mapping's, so their code is never moved as
/// another process's copy of the same file (counted in [`Spaces::files_past_cap`]).
pub const MAX_FILES: usize = 1 << 16;

/// Code mappings kept at most in one space. A process that maps and unmaps in a loop
/// (`dlopen`/`dlclose` at new addresses) would grow its list until it exits: unmapped ones
/// are kept (their translations may still run elsewhere), and where the kernel's `munmap`
/// is not watched they are not even known. Past the cap the oldest unmapped one goes, else
/// the oldest of the newer half (the older half, the program, its loader and the libraries
/// it started with, stays: those live as long as the process), counted in
/// [`Spaces::maps_dropped`]. A process of 300 libraries maps ~600 pieces of code; a mapping
/// is 32 bytes, a full space 32 KiB.
pub const MAX_MAPS: usize = 1024;

/// Code mappings kept at most in all spaces together (32 MiB): past it the oldest ended
/// spaces are freed before [`KEPT_ENDED`] would (counted in [`Spaces::freed`]), so that
/// ended spaces full of mappings cost no more than this.
pub const MAX_TOTAL_MAPS: usize = 1 << 20;

/// One address space: its code mappings, oldest first (a piece left of a mapping mapped
/// over keeps its place), and whether any was dropped past [`MAX_MAPS`].
#[derive(Debug, Clone, Default)]
struct Space {
    maps: Vec<Mapping>,
    dropped: bool,
}

/// The address spaces of live processes and the [`KEPT_ENDED`] latest ended ones, and
/// each process's current one.
#[derive(Debug)]
pub struct Spaces {
    /// Ended spaces kept at most ([`KEPT_ENDED`]; fewer in tests that run under Miri).
    kept_ended: usize,
    maps: HashMap<SpaceId, Space>,
    /// Mappings in all spaces.
    total: usize,
    /// Mappings kept at most in one space ([`MAX_MAPS`]) and in all ([`MAX_TOTAL_MAPS`];
    /// fewer in tests).
    max_maps: usize,
    max_total: usize,
    /// The last id given (ids are never reused: translations keep theirs).
    last: SpaceId,
    current: HashMap<u32, SpaceId>,
    files: HashMap<String, u32>,
    /// Paths interned at most ([`MAX_FILES`]; fewer in tests).
    max_files: usize,
    /// Ended spaces still kept, oldest first.
    ended: VecDeque<SpaceId>,
    /// Ended spaces freed.
    pub freed: u64,
    /// Events in code translated in a freed space and run in another, whose addresses
    /// could not be moved (they stay as translated).
    pub unmoved: u64,
    /// Mappings of files first seen past [`MAX_FILES`] (each its own id, from the top down).
    pub files_past_cap: u64,
    /// Mappings dropped past [`MAX_MAPS`] in a space (most already unmapped by the guest).
    pub maps_dropped: u64,
    /// Lookups that found no mapping in a space that had dropped some: the events stay at
    /// their translated addresses, which may be wrong.
    pub unmoved_dropped: u64,
    /// Unmaps seen ([`Spaces::munmap`]; where the kernel's `munmap` is watched).
    pub unmaps: u64,
}

impl Default for Spaces {
    fn default() -> Self {
        Self::keeping(KEPT_ENDED)
    }
}

impl Spaces {
    /// Spaces that keep the `kept_ended` latest ended ones (the plugin's: [`KEPT_ENDED`]).
    pub fn keeping(kept_ended: usize) -> Self {
        Self {
            kept_ended,
            maps: HashMap::new(),
            total: 0,
            max_maps: MAX_MAPS,
            max_total: MAX_TOTAL_MAPS,
            last: 0,
            current: HashMap::new(),
            files: HashMap::new(),
            max_files: MAX_FILES,
            ended: VecDeque::new(),
            freed: 0,
            unmoved: 0,
            files_past_cap: 0,
            maps_dropped: 0,
            unmoved_dropped: 0,
            unmaps: 0,
        }
    }

    /// Process `tgid`'s current space (0: unknown).
    pub fn of(&self, tgid: u32) -> SpaceId {
        self.current.get(&tgid).copied().unwrap_or(0)
    }

    /// Spaces held now, live and ended.
    pub fn kept(&self) -> usize {
        self.maps.len()
    }

    /// Code mappings held now, in all spaces.
    pub fn mappings(&self) -> usize {
        self.total
    }

    fn push(&mut self, tgid: u32, space: Space) -> SpaceId {
        let Some(id) = self.last.checked_add(1) else {
            // Ids are spent (2^32 spaces): the process is unknown from now on.
            self.end(tgid);
            return 0;
        };
        self.last = id;
        self.total += space.maps.len();
        self.maps.insert(id, space);
        if let Some(old) = self.current.insert(tgid, id) {
            self.retire(old);
        }
        self.free_ended();
        id
    }

    /// Process `tgid` holds no space any more.
    fn end(&mut self, tgid: u32) {
        if let Some(old) = self.current.remove(&tgid) {
            self.retire(old);
        }
    }

    /// `id` is no process's any more: kept among the latest ended, the oldest freed.
    fn retire(&mut self, id: SpaceId) {
        self.ended.push_back(id);
        self.free_ended();
    }

    /// Frees the oldest ended spaces past [`KEPT_ENDED`], or while all spaces together hold
    /// more than [`MAX_TOTAL_MAPS`] mappings.
    fn free_ended(&mut self) {
        while self.ended.len() > self.kept_ended || self.total > self.max_total {
            let Some(gone) = self.ended.pop_front() else {
                break;
            };
            if let Some(space) = self.maps.remove(&gone) {
                self.total -= space.maps.len();
            }
            self.freed += 1;
        }
    }

    /// A new process `tgid` forked from `parent`: a copy of the parent's mappings (a kernel
    /// thread's parent has none: unknown until it execs). A reused PID starts clean.
    pub fn fork(&mut self, tgid: u32, parent: u32) -> SpaceId {
        match self.of(parent) {
            0 => {
                self.end(tgid);
                0
            }
            p => {
                let space = self.maps.get(&p).cloned().unwrap_or_default();
                self.push(tgid, space)
            }
        }
    }

    /// Process `tgid` exec'd: a new, empty space.
    pub fn exec(&mut self, tgid: u32) -> SpaceId {
        self.push(tgid, Space::default())
    }

    /// Process `tgid` exited: its space is no one's any more (its translations may still run
    /// elsewhere, so the space stays among the [`KEPT_ENDED`] latest).
    pub fn exit(&mut self, tgid: u32) {
        self.end(tgid);
    }

    /// `path` mapped executable at `start..start + len` from file offset `offset` in
    /// `tgid`'s space (one made for it if its start was not seen). Returns the space.
    pub fn mmap(&mut self, tgid: u32, path: &str, start: u64, len: u64, offset: u64) -> SpaceId {
        let file = match self.files.get(path) {
            Some(&f) => f,
            None if self.files.len() < self.max_files => {
                let next = self.files.len() as u32;
                self.files.insert(path.to_string(), next);
                next
            }
            None => {
                self.files_past_cap += 1;
                u32::MAX - (self.files_past_cap % (u64::from(u32::MAX) - MAX_FILES as u64)) as u32
            }
        };
        let id = match self.of(tgid) {
            0 => self.push(tgid, Space::default()),
            id => id,
        };
        let (max_maps, mut dropped) = (self.max_maps, 0);
        let Some(space) = self.maps.get_mut(&id) else {
            return id;
        };
        let end = start.saturating_add(len);
        if end == start {
            // Nothing mapped (the kernel refuses a length of 0): nothing kept.
            return id;
        }
        let maps = &mut space.maps;
        let before = maps.len();
        // A mapping replaces what it overlaps (MAP_FIXED over the loader's reservation).
        cut(maps, start, end, false);
        maps.push(Mapping {
            file,
            start,
            end,
            offset,
            unmapped: false,
        });
        // Past the cap the oldest unmapped one goes, else the oldest of the newer half:
        // what a map/unmap loop left.
        while maps.len() > max_maps {
            let gone = maps.iter().position(|m| m.unmapped);
            maps.remove(gone.unwrap_or(max_maps / 2));
            dropped += 1;
        }
        space.dropped |= dropped > 0;
        self.maps_dropped += dropped;
        self.total = self.total - before + space.maps.len();
        self.free_ended();
        id
    }

    /// Process `tgid`'s code mappings as read from the guest at one instant (a switch on:
    /// `linux_walk`), each `(path, start, len, offset)`: where they differ from its current
    /// space's (it started, exec'd or mapped while nothing was watched), a new space of
    /// exactly those is its current one, and its id is returned; where they agree, `None`.
    pub fn snapshot(&mut self, tgid: u32, maps: &[(&str, u64, u64, u64)]) -> Option<SpaceId> {
        let same = self.maps.get(&self.of(tgid)).is_some_and(|space| {
            let mut live: Vec<(u32, u64, u64, u64)> = (space.maps.iter())
                .filter(|m| !m.unmapped)
                .map(|m| (m.file, m.start, m.end, m.offset))
                .collect();
            let mut read = Vec::with_capacity(maps.len());
            for &(path, start, len, offset) in maps {
                let Some(&file) = self.files.get(path) else {
                    return false;
                };
                read.push((file, start, start.saturating_add(len), offset));
            }
            live.sort_unstable();
            read.sort_unstable();
            live == read
        });
        if same {
            return None;
        }
        let id = self.exec(tgid);
        for &(path, start, len, offset) in maps {
            self.mmap(tgid, path, start, len, offset);
        }
        Some(self.of(tgid)).filter(|_| id != 0)
    }

    /// Process `tgid` unmapped `start..start + len`: what its space maps there is marked
    /// unmapped, the first to go past [`MAX_MAPS`] (a process not known yet has nothing to
    /// unmap). Its code no longer runs in this space, but translations made here may still
    /// run in another, so it is still looked up from here.
    pub fn munmap(&mut self, tgid: u32, start: u64, len: u64) {
        self.unmaps += 1;
        let Some(space) = self.maps.get_mut(&self.of(tgid)) else {
            return;
        };
        let before = space.maps.len();
        cut(&mut space.maps, start, start.saturating_add(len), true);
        self.total = self.total - before + space.maps.len();
    }

    /// The id of the file interned for guest path `path`, once some space mapped it.
    pub fn file_id(&self, path: &str) -> Option<u32> {
        self.files.get(path).copied()
    }

    /// The extent of the mapping of a file that holds `addr` in space `space` now.
    pub fn mapping_at(&self, space: SpaceId, addr: u64) -> Option<(u64, u64)> {
        let maps = &self.maps.get(&space)?.maps;
        let m = (maps.iter()).find(|m| !m.unmapped && m.start <= addr && addr < m.end)?;
        Some((m.start, m.end))
    }

    /// The file (its id) and the offset in it that space `space` maps at `addr`, where it
    /// maps one now.
    pub fn file_at(&self, space: SpaceId, addr: u64) -> Option<(u32, u64)> {
        let maps = &self.maps.get(&space)?.maps;
        let m = (maps.iter()).find(|m| !m.unmapped && m.start <= addr && addr < m.end)?;
        Some((m.file, (addr - m.start).wrapping_add(m.offset)))
    }

    /// Where space `space` maps offset `offset` of file `file` now (each mapping of it
    /// that holds the offset): a guest file's function's run-time addresses in a process.
    pub fn places(&self, space: SpaceId, file: u32, offset: u64) -> Vec<u64> {
        let Some(s) = self.maps.get(&space) else {
            return Vec::new();
        };
        (s.maps.iter())
            .filter(|m| !m.unmapped && m.file == file && m.offset <= offset)
            .filter_map(|m| {
                let at = m.start.checked_add(offset - m.offset)?;
                (at < m.end).then_some(at)
            })
            .collect()
    }

    /// How far code at `addr`, translated in space `from`, lies in space `to`: the
    /// difference of the addresses its file's page has in the two. `None` where either
    /// space does not map it, or `from` was freed (counted in [`Spaces::unmoved`]); then
    /// the addresses stay as translated.
    pub fn delta(&mut self, from: SpaceId, to: SpaceId, addr: u64) -> Option<u64> {
        if from != 0 && from <= self.last && !self.maps.contains_key(&from) {
            self.unmoved += 1;
            return None;
        }
        let (Some(a), Some(b)) = (self.maps.get(&from), self.maps.get(&to)) else {
            return None;
        };
        // Not found where mappings were dropped: perhaps one of those (said, never silent).
        let dropped = a.dropped || b.dropped;
        let found = a
            .maps
            .iter()
            .find(|m| m.start <= addr && addr < m.end)
            .and_then(|m| {
                let file_offset = (addr - m.start).wrapping_add(m.offset);
                // Code runs in `to` only where `to` maps it now.
                let there = b.maps.iter().find(|n| {
                    !n.unmapped
                        && n.file == m.file
                        && n.offset <= file_offset
                        && file_offset - n.offset < n.end - n.start
                })?;
                Some(there.start.wrapping_add(file_offset - there.offset))
            });
        if found.is_none() && dropped {
            self.unmoved_dropped += 1;
        }
        Some(found?.wrapping_sub(addr))
    }
}

/// Takes `start..end` out of `maps`, or with `unmapped` marks it so: what is left of a
/// mapping on either side stays, in its place (a piece keeps its mapping's age).
fn cut(maps: &mut Vec<Mapping>, start: u64, end: u64, unmapped: bool) {
    if !maps
        .iter()
        .any(|m| m.start < end && start < m.end && !(unmapped && m.unmapped))
    {
        return;
    }
    let mut kept = Vec::with_capacity(maps.len() + 2);
    for m in maps.drain(..) {
        if m.end <= start || end <= m.start {
            kept.push(m);
            continue;
        }
        if m.start < start {
            kept.push(Mapping { end: start, ..m });
        }
        if unmapped {
            let from = start.max(m.start);
            kept.push(Mapping {
                start: from,
                end: end.min(m.end),
                offset: m.offset.wrapping_add(from - m.start),
                unmapped: true,
                ..m
            });
        }
        if end < m.end {
            kept.push(Mapping {
                start: end,
                offset: m.offset.wrapping_add(end - m.start),
                ..m
            });
        }
    }
    *maps = kept;
}

/// Entries of [`DeltaCache`] (a power of two).
const CACHE: usize = 64;
/// Pages of this size share one delta (the smallest page: a mapping's granularity).
const PAGE_SHIFT: u32 = 12;

/// One vCPU's deltas from other spaces into the one it runs, by translating space and page.
#[derive(Debug, Clone)]
pub struct DeltaCache {
    /// The space the entries are for (the vCPU's current one).
    running: SpaceId,
    entries: [(SpaceId, u64, u64); CACHE],
}

impl Default for DeltaCache {
    fn default() -> Self {
        DeltaCache {
            running: 0,
            entries: [(0, 0, 0); CACHE],
        }
    }
}

impl DeltaCache {
    /// The space the vCPU runs.
    #[inline(always)]
    pub fn running(&self) -> SpaceId {
        self.running
    }

    /// The vCPU now runs `space`: earlier deltas were into another.
    pub fn switch(&mut self, space: SpaceId) {
        if space != self.running {
            self.running = space;
            self.entries = [(0, 0, 0); CACHE];
        }
    }

    /// The delta of code at `addr` translated in `from` (not the running space), asking
    /// `spaces` on a miss; 0 where no delta is known.
    pub fn delta(&mut self, from: SpaceId, addr: u64, spaces: impl FnOnce() -> Option<u64>) -> u64 {
        let page = addr >> PAGE_SHIFT;
        let slot = (page as usize ^ from as usize) & (CACHE - 1);
        let (s, p, d) = self.entries[slot];
        if s == from && p == page && from != 0 {
            return d;
        }
        let d = spaces().unwrap_or(0);
        self.entries[slot] = (from, page, d);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mapping `space` has at `addr`.
    fn mapping_at(s: &Spaces, space: SpaceId, addr: u64) -> Option<&Mapping> {
        (s.maps.get(&space)?.maps.iter()).find(|m| m.start <= addr && addr < m.end)
    }

    /// The guest path of the file `space` maps at `addr`.
    fn name_at(s: &Spaces, space: SpaceId, addr: u64) -> Option<&str> {
        let m = mapping_at(s, space, addr)?;
        s.files
            .iter()
            .find(|(_, &f)| f == m.file)
            .map(|(p, _)| p.as_str())
    }

    fn small(max_maps: usize, max_total: usize, kept_ended: usize) -> Spaces {
        Spaces {
            max_maps,
            max_total,
            ..Spaces::keeping(kept_ended)
        }
    }

    /// A timeline, one process: its program and libc, then a `dlopen`/`dlclose` loop whose
    /// unmaps are not seen, each library at a new address.
    ///
    /// ```text
    /// mmap /prog  mmap /libc  mmap /p0 @A0  mmap /p1 @A1  …  mmap /p{n-1} @A{n-1}
    /// ```
    /// The list stays at the cap, the first half (program, libc) stays named, the newest
    /// mappings are named, what was dropped is counted.
    #[test]
    fn a_map_unmap_loop_keeps_the_first_half_and_the_newest() {
        let mut s = small(8, 1 << 10, 4);
        let a = s.exec(1);
        s.mmap(1, "/prog", 0x1000, 0x1000, 0);
        s.mmap(1, "/libc", 0x10_0000, 0x1000, 0);
        let n: u64 = if cfg!(miri) { 40 } else { 1000 };
        for i in 0..n {
            s.mmap(
                1,
                &format!("/p{}", i % 3),
                0x100_0000 + i * 0x1000,
                0x1000,
                0,
            );
            assert!(s.maps[&a].maps.len() <= 8);
        }
        assert_eq!(s.mappings(), 8);
        assert_eq!(s.maps_dropped, 2 + n - 8);
        // The first half: the program, libc and the loop's first two.
        assert_eq!(name_at(&s, a, 0x1010), Some("/prog"));
        assert_eq!(name_at(&s, a, 0x10_0010), Some("/libc"));
        assert_eq!(name_at(&s, a, 0x100_1010), Some("/p1"));
        // The newer half: the latest four.
        let at = |i: u64| 0x100_0000 + i * 0x1000;
        for i in n - 4..n {
            let name = format!("/p{}", i % 3);
            assert_eq!(name_at(&s, a, at(i)), Some(name.as_str()));
        }
        assert_eq!(name_at(&s, a, at(n - 5)), None);
        assert_eq!(name_at(&s, a, at(2)), None);
        // Code of a dropped mapping that runs in another space mapping its file stays where
        // it was translated, counted; kept ones still move.
        let b = s.exec(2);
        s.mmap(2, "/libc", 0x20_0000, 0x1000, 0);
        s.mmap(2, &format!("/p{}", (n - 5) % 3), 0x30_0000, 0x1000, 0);
        assert_eq!(s.delta(a, b, 0x10_0010), Some(0x10_0000));
        assert_eq!(
            s.delta(a, b, at(n - 2) + 0x10),
            Some(0x30_0000u64.wrapping_sub(at(n - 2)))
        );
        assert_eq!(s.unmoved_dropped, 0);
        assert_eq!(s.delta(a, b, at(n - 5) + 0x10), None);
        assert_eq!(s.unmoved_dropped, 1);
        // A fork inherits the list and that it dropped some.
        let c = s.fork(3, 1);
        assert_eq!(name_at(&s, c, 0x1010), Some("/prog"));
        assert!(s.maps[&c].dropped);
    }

    /// A file's offset in two processes: where each maps it (two pieces in one of them,
    /// one holding the offset), nowhere once unmapped, and nowhere in a space of another
    /// file at that address.
    ///
    /// ```text
    /// 1: mmap /lib @0x1000 off 0, mmap /lib @0x8000 off 0x5000     2: mmap /lib @0x4000
    /// 3: mmap /other @0x1000
    /// ```
    #[test]
    fn a_files_offset_is_placed_in_each_space_that_maps_it() {
        let mut s = small(8, 1 << 10, 4);
        let a = s.exec(1);
        s.mmap(1, "/lib", 0x1000, 0x2000, 0);
        s.mmap(1, "/lib", 0x8000, 0x1000, 0x5000);
        let b = s.exec(2);
        s.mmap(2, "/lib", 0x4000, 0x2000, 0);
        let c = s.exec(3);
        s.mmap(3, "/other", 0x1000, 0x2000, 0);
        let lib = s.file_id("/lib").unwrap();
        assert_eq!(s.places(a, lib, 0x1040), [0x2040]);
        assert_eq!(s.places(a, lib, 0x5010), [0x8010]);
        assert_eq!(s.places(a, lib, 0x3000), [] as [u64; 0]);
        assert_eq!(s.places(b, lib, 0x1040), [0x5040]);
        assert_eq!(s.places(c, lib, 0x1040), [] as [u64; 0]);
        s.munmap(2, 0x4000, 0x2000);
        assert_eq!(s.places(b, lib, 0x1040), [] as [u64; 0]);
    }

    /// The same loop with its unmaps seen (the kernel's `munmap` watched), and a library
    /// mapped half-way that stays: the unmapped ones are kept (still looked up from here)
    /// and go first past the cap, so every live mapping stays however long the loop; an
    /// unmap in the middle of a mapping leaves both sides live, and an unmap by a process
    /// not known changes nothing.
    ///
    /// ```text
    /// mmap /prog  mmap /libc  { mmap /p @Ai  munmap Ai }×n/2  mmap /q  { … }×n/2
    /// ```
    #[test]
    fn seen_unmaps_go_first_and_live_mappings_stay() {
        let mut s = small(8, 1 << 10, 4);
        let a = s.exec(1);
        s.mmap(1, "/prog", 0x1000, 0x1000, 0);
        s.mmap(1, "/libc", 0x10_0000, 0x3000, 0);
        let n = if cfg!(miri) { 40 } else { 100_000 };
        let at = |i: u64| 0x100_0000 + i * 0x1000;
        for i in 0..n {
            if i == n / 2 {
                s.mmap(1, "/q", 0x50_0000, 0x1000, 0);
            }
            s.mmap(1, "/p", at(i), 0x1000, 0);
            assert_eq!(live_at(&s, a, at(i)), Some("/p"));
            s.munmap(1, at(i), 0x1000);
            assert_eq!(live_at(&s, a, at(i)), None);
            assert!(s.mappings() <= 8);
        }
        assert_eq!(s.unmaps, n);
        // 8 kept: the three live ones and the latest five unmapped.
        assert_eq!(s.maps_dropped, n - 5);
        assert_eq!(live_at(&s, a, 0x1010), Some("/prog"));
        assert_eq!(live_at(&s, a, 0x10_0010), Some("/libc"));
        assert_eq!(live_at(&s, a, 0x50_0010), Some("/q"));
        // Code of /p translated here runs on where another process maps /p now.
        let b = s.exec(2);
        s.mmap(2, "/p", 0x7000_0000, 0x1000, 0);
        s.mmap(2, "/libc", 0x20_0000, 0x3000, 0);
        let moved = |s: &mut Spaces, addr: u64| s.delta(a, b, addr).map(|d| addr.wrapping_add(d));
        assert_eq!(moved(&mut s, at(n - 1) + 0x10), Some(0x7000_0010));
        assert_eq!(moved(&mut s, at(n - 6) + 0x10), None);
        s.munmap(2, 0x7000_0000, 0x1000);
        assert_eq!(moved(&mut s, at(n - 1) + 0x10), None);
        // A hole in libc: both sides stay live, the one after at its own file offset.
        s.munmap(1, 0x10_1000, 0x1000);
        assert_eq!(live_at(&s, a, 0x10_0010), Some("/libc"));
        assert_eq!(live_at(&s, a, 0x10_1010), None);
        assert_eq!(live_at(&s, a, 0x10_2010), Some("/libc"));
        assert_eq!(moved(&mut s, 0x10_2010), Some(0x20_2010));
        let kept = s.mappings();
        s.munmap(99, 0x1000, 0x1000);
        s.munmap(1, 0x9000_0000, u64::MAX);
        assert_eq!(s.mappings(), kept);
    }

    /// [`name_at`] where the mapping is live (not unmapped).
    fn live_at(s: &Spaces, space: SpaceId, addr: u64) -> Option<&str> {
        let m = mapping_at(s, space, addr)?;
        (!m.unmapped).then(|| name_at(s, space, addr)).flatten()
    }

    /// Mapping again over the same range replaces (100,000 times: one mapping), and so does
    /// a mapping over several older ones; a length of 0 keeps nothing.
    #[test]
    fn a_remap_over_the_same_range_replaces() {
        let mut s = small(8, 1 << 10, 4);
        let a = s.exec(1);
        let n = if cfg!(miri) { 40 } else { 100_000 };
        for i in 0..n {
            s.mmap(1, &format!("/lib{}", i % 5), 0x40_0000, 0x2000, 0);
        }
        assert_eq!(s.mappings(), 1);
        assert_eq!(s.maps_dropped, 0);
        let last = format!("/lib{}", (n - 1) % 5);
        assert_eq!(name_at(&s, a, 0x40_1000), Some(last.as_str()));
        s.mmap(1, "/x", 0x40_0000, 0x1000, 0);
        s.mmap(1, "/y", 0x40_1000, 0x1000, 0);
        s.mmap(1, "/z", 0x3f_f000, 0x4000, 0);
        s.mmap(1, "/zero", 0x50_0000, 0, 0);
        assert_eq!(s.mappings(), 1);
        assert_eq!(name_at(&s, a, 0x40_1000), Some("/z"));
    }

    /// A snapshot that agrees with what the watch followed changes nothing; one of a process
    /// not followed, or one that exec'd or mapped while unwatched, is its new space, where
    /// code from before still moves (the old space is kept among the ended).
    #[test]
    fn a_snapshot_replaces_only_what_it_contradicts() {
        let mut s = Spaces::default();
        let a = s.exec(1);
        s.mmap(1, "/bin/a", 0x1000, 0x1000, 0);
        s.mmap(1, "/lib/c", 0x8000, 0x2000, 0x1000);
        let same = [
            ("/lib/c", 0x8000, 0x2000, 0x1000),
            ("/bin/a", 0x1000, 0x1000, 0),
        ];
        assert_eq!(s.snapshot(1, &same), None);
        assert_eq!(s.of(1), a);
        // A library loaded while unwatched.
        let more = [
            ("/bin/a", 0x1000, 0x1000, 0),
            ("/lib/c", 0x8000, 0x2000, 0x1000),
            ("/lib/d", 0x20000, 0x1000, 0),
        ];
        let b = s.snapshot(1, &more).expect("a new space");
        assert_ne!(a, b);
        assert_eq!(s.of(1), b);
        assert_eq!(name_at(&s, b, 0x20000), Some("/lib/d"));
        assert_eq!(s.delta(a, b, 0x8100), Some(0));
        // A process never seen, and one whose file is new to the spaces.
        assert!(s.snapshot(2, &[("/bin/a", 0x5000, 0x1000, 0)]).is_some());
        assert_eq!(s.delta(b, s.of(2), 0x1010), Some(0x4000));
        assert!(s.snapshot(2, &[("/bin/new", 0x5000, 0x1000, 0)]).is_some());
        // Nothing mapped: an empty space all the same (its exec'd program maps none yet).
        assert!(s.snapshot(3, &[]).is_some());
        assert_eq!(s.snapshot(3, &[]), None);
    }

    /// A fork loop whose children each fill their space: past the total the oldest ended
    /// spaces go before [`KEPT_ENDED`] would free them; live ones stay whole.
    #[test]
    fn ended_spaces_full_of_mappings_are_freed_past_the_total() {
        let mut s = small(8, 64, 100);
        s.exec(1);
        s.mmap(1, "/init", 0x1000, 0x1000, 0);
        let mut last = 0;
        for pid in 2..if cfg!(miri) { 20 } else { 200u32 } {
            s.fork(pid, 1);
            last = s.exec(pid);
            for i in 0..10u64 {
                s.mmap(pid, "/lib", 0x10_0000 + i * 0x1000, 0x1000, 0);
            }
            s.exit(pid);
            assert!(s.mappings() <= 64, "{} mappings", s.mappings());
        }
        let total: usize = s.maps.values().map(|m| m.maps.len()).sum();
        assert_eq!(s.mappings(), total);
        assert_eq!(name_at(&s, s.of(1), 0x1010), Some("/init"));
        assert_eq!(name_at(&s, last, 0x10_9010), Some("/lib"));
        assert!(s.ended.len() < 100);
        // A live space stays whole however full the rest are.
        for pid in 300..310u32 {
            s.exec(pid);
            for i in 0..8u64 {
                s.mmap(pid, "/lib", 0x10_0000 + i * 0x1000, 0x1000, 0);
            }
        }
        assert_eq!(s.mappings(), 1 + 80);
        assert!(s.ended.is_empty());
    }

    /// Past the cap a new file is interned no more: each mapping of one is a file of its
    /// own, never moved as another process's copy (not even of the same path).
    #[test]
    fn files_past_the_cap_are_never_taken_for_another() {
        let mut s = Spaces {
            max_files: 1,
            ..Spaces::default()
        };
        let a = s.exec(1);
        s.mmap(1, "/f0", 0x1000_0000, 0x1000, 0);
        s.mmap(1, "/new", 0x2000_0000, 0x1000, 0);
        let b = s.exec(2);
        s.mmap(2, "/f0", 0x3000_0000, 0x1000, 0);
        s.mmap(2, "/new", 0x4000_0000, 0x1000, 0);
        assert_eq!(s.files.len(), 1);
        assert_eq!(s.files_past_cap, 2);
        assert_eq!(s.delta(a, b, 0x1000_0010), Some(0x2000_0000));
        assert_eq!(s.delta(a, b, 0x2000_0010), None);
    }

    #[test]
    fn one_file_in_two_processes_is_rebased_by_its_bases() {
        let mut s = Spaces::default();
        let init = s.exec(1);
        s.mmap(1, "/init", 0xaaaa_0000_0000, 0x2000, 0);
        let a = s.fork(7, 1);
        let b = s.fork(8, 1);
        // The forked copies are the parent's: nothing moves.
        assert_eq!(s.delta(init, a, 0xaaaa_0000_0010), Some(0));
        assert_eq!(s.exec(7), a + 2);
        let a = s.of(7);
        s.mmap(7, "/worker", 0xaaab_1000_0000, 0x3000, 0);
        s.mmap(7, "/lib/libc.so.6", 0xffff_8000_0000, 0x10_0000, 0);
        let b2 = s.exec(8);
        assert_ne!(b, b2);
        s.mmap(8, "/lib/libc.so.6", 0xffff_9000_0000, 0x10_0000, 0);
        s.mmap(8, "/worker", 0xaaac_2000_0000, 0x3000, 0);
        assert_eq!(
            s.delta(a, b2, 0xaaab_1000_1234)
                .map(|d| 0xaaab_1000_1234u64.wrapping_add(d)),
            Some(0xaaac_2000_1234)
        );
        assert_eq!(
            s.delta(b2, a, 0xffff_9000_0040)
                .map(|d| 0xffff_9000_0040u64.wrapping_add(d)),
            Some(0xffff_8000_0040)
        );
        // A file the other space does not map, or an address no file holds: none.
        assert_eq!(s.delta(a, init, 0xaaab_1000_0000), None);
        assert_eq!(s.delta(a, b2, 0x1000), None);
        assert_eq!(s.delta(0, b2, 0xaaab_1000_0000), None);
    }

    #[test]
    fn offsets_and_overlays_are_followed() {
        let mut s = Spaces::default();
        let a = s.exec(1);
        // The loader's reservation, then the text segment mapped over it from offset 0x1000.
        s.mmap(1, "/lib/x.so", 0x10_0000, 0x8000, 0);
        s.mmap(1, "/lib/x.so", 0x10_1000, 0x2000, 0x1000);
        let b = s.exec(2);
        s.mmap(2, "/lib/x.so", 0x50_1000, 0x2000, 0x1000);
        assert_eq!(s.delta(a, b, 0x10_1800), Some(0x40_0000));
        // Before the text in `a` (the reservation's first page, file offset 0): `b` maps
        // no such part of the file.
        assert_eq!(s.delta(a, b, 0x10_0800), None);
        // After it: the reservation's rest, still at its own offset (0x4000 in the file).
        s.mmap(2, "/lib/x.so", 0x60_0000, 0x1000, 0x4000);
        assert_eq!(s.delta(a, b, 0x10_4010), Some(0x60_0000 - 0x10_4000));
        // Which file and offset an address is (what `--start-at PATH:FUNC` is placed by).
        let x = s.file_id("/lib/x.so");
        assert!(x.is_some() && s.file_id("/lib/y.so").is_none());
        assert_eq!(
            s.file_at(a, 0x10_1800).map(|(f, o)| (Some(f), o)),
            Some((x, 0x1800))
        );
        assert_eq!(
            s.file_at(b, 0x60_0010).map(|(f, o)| (Some(f), o)),
            Some((x, 0x4010))
        );
        assert_eq!(s.file_at(b, 0x10_1800), None);
        s.munmap(2, 0x60_0000, 0x1000);
        assert_eq!(s.file_at(b, 0x60_0010), None);
        // A PID reused after exit starts clean.
        s.exit(2);
        assert_eq!(s.of(2), 0);
        assert_eq!(s.fork(2, 99), 0);
    }

    #[test]
    fn the_cache_asks_once_per_page_and_forgets_at_a_switch() {
        let mut c = DeltaCache::default();
        c.switch(3);
        let mut asked = 0;
        for addr in [0x1000u64, 0x1ff8, 0x1004] {
            let d = c.delta(2, addr, || {
                asked += 1;
                Some(0x100)
            });
            assert_eq!(d, 0x100);
        }
        assert_eq!(asked, 1);
        c.switch(4);
        assert_eq!(c.delta(2, 0x1000, || Some(0x200)), 0x200);
        assert_eq!(c.delta(2, 0x1000, || None), 0x200);
        assert_eq!(c.delta(5, 0x1000, || None), 0);
    }
}
