//! User mode: the function entries of the program's shared libraries and dynamic loader
//! (`lib_entries=FILE`, see `qemu_uftrace_engine::entries::Library`), placed where the guest
//! maps each file, so that their tail calls are decided at translation time as the
//! program's are (`state::entries`).
//!
//! The CLI writes the list while QEMU starts (it reads the libraries' symbols); a dynamic
//! program waits for it at its first instruction, in the loader, before any library is
//! mapped: then every jump is decided with it, however fast it was written. A library is
//! placed when its executable mapping returns, before any of its code can be translated.

use qemu_uftrace_engine::entries::Library;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

static LIBS: OnceLock<Vec<Library>> = OnceLock::new();
static PENDING: OnceLock<PathBuf> = OnceLock::new();

/// A library where the guest mapped it: its functions' span in the guest, its bias.
struct Placed {
    lo: u64,
    hi: u64,
    bias: u64,
    lib: usize,
}

/// Placements, oldest first.
static PLACED: RwLock<Vec<Placed>> = RwLock::new(Vec::new());

/// Placements kept at most. A guest `munmap` takes its placements out ([`unmapped`]), but a
/// program may map a library at new addresses without unmapping (or move it with `mremap`,
/// not followed): past the cap the oldest of the newer half goes (the older half, the
/// loader and the libraries the program started with, stays: they live as long as the
/// program), counted in [`DROPPED`]. Each is 32 bytes (128 KiB in all), and each lookup at
/// translation scans them.
pub const MAX_PLACED: usize = 4096;

/// Placements dropped past [`MAX_PLACED`].
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The placements dropped past [`MAX_PLACED`]: jumps into a library placed there are
/// decided as if no library were (its tail calls not shown, if it is still mapped).
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Bumped whenever functions are placed (a library here, the program's list or its load
/// bias in `state::entries`), so that answers kept per thread (`entries::is_longjmp`) are
/// asked again.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Says that functions were placed ([`GENERATION`]).
pub fn places_changed() {
    GENERATION.fetch_add(1, Ordering::Release);
}

/// The placements' count so far ([`GENERATION`]).
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The list will be in `path` once the CLI has written it.
pub fn load_later(path: PathBuf) {
    let _ = PENDING.set(path);
}

/// Waits (30 s at most) for the CLI's list; none when it was not asked for.
fn libs() -> &'static [Library] {
    LIBS.get_or_init(|| {
        let Some(path) = PENDING.get() else {
            return Vec::new();
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(path) {
                return Library::parse_all(&text).unwrap_or_else(|e| {
                    eprintln!(
                        "qemu-uftrace plugin: {}: {e}: the libraries' tail calls are not shown",
                        path.display()
                    );
                    Vec::new()
                });
            }
            if std::time::Instant::now() > deadline {
                eprintln!(
                    "qemu-uftrace plugin: {} never appeared: the libraries' tail calls are \
                     not shown",
                    path.display()
                );
                return Vec::new();
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    })
}

fn place(lib: usize, bias: u64) {
    let Some((lo, hi)) = libs()[lib].functions.span() else {
        return;
    };
    let (lo, hi) = (lo.wrapping_add(bias), hi.wrapping_add(bias));
    let mut placed = PLACED.write().unwrap_or_else(|e| e.into_inner());
    if put(
        &mut placed,
        Placed { lo, hi, bias, lib },
        MAX_PLACED,
        &DROPPED,
    ) {
        changed(placed);
    }
}

/// Functions were placed or taken away: answers kept per thread are asked again, and the
/// libraries' functions named by `-F`/`-N`, `--stop-at`/`--start-at` are placed anew.
fn changed(placed: std::sync::RwLockWriteGuard<'_, Vec<Placed>>) {
    places_changed();
    drop(placed);
    crate::state::lib_aims::placed(placements);
}

/// The libraries placed now.
fn placements() -> Vec<crate::state::lib_aims::Placement> {
    let Some(libs) = LIBS.get() else {
        return Vec::new();
    };
    let placed = PLACED.read().unwrap_or_else(|e| e.into_inner());
    (placed.iter())
        .filter_map(|p| {
            let l = libs.get(p.lib)?;
            Some((l.dev, l.ino, p.bias, p.lo, p.hi))
        })
        .collect()
}

/// Adds `new` to `placed` (holding `max` at most: past it the oldest of the newer half
/// goes, counted in `dropped`); false when it was there already.
fn put(placed: &mut Vec<Placed>, new: Placed, max: usize, dropped: &AtomicU64) -> bool {
    if placed
        .iter()
        .any(|p| p.lib == new.lib && p.bias == new.bias)
    {
        return false;
    }
    // A file mapped over another's place (after a dlclose) replaces it.
    take_out(placed, new.lo, new.hi);
    placed.push(new);
    if placed.len() > max {
        let n = placed.len() - max;
        placed.drain(max / 2..max / 2 + n);
        dropped.fetch_add(n as u64, Ordering::Relaxed);
    }
    true
}

/// The program's first instruction, in the dynamic loader QEMU placed at `base`
/// (`AT_BASE`, 0 for a static program): waits for the list, places the loader.
pub fn startup(base: u64) {
    if base == 0 {
        return;
    }
    if let Some(i) = libs().iter().position(|l| l.interp) {
        place(i, libs()[i].bias_of_base(base));
    }
}

/// The guest mapped descriptor `fd` executable at `start` from `offset`. The descriptor is
/// the host's own in user mode: its file is the one the CLI named by device and inode.
pub fn mapped(fd: i64, start: u64, offset: u64) {
    if LIBS.get().is_none_or(|l| l.is_empty()) {
        return;
    }
    let Ok(meta) = std::fs::metadata(format!("/proc/self/fd/{fd}")) else {
        return;
    };
    let libs = libs();
    if let Some(i) = (libs.iter()).position(|l| (l.dev, l.ino) == (meta.dev(), meta.ino())) {
        place(i, libs[i].bias_of_mapping(start, offset));
    }
}

/// The guest unmapped `start..start + len`: a library placed there is gone (its code may
/// be translated no more; a jump into the range is no library's).
pub fn unmapped(start: u64, len: u64) {
    if LIBS.get().is_none_or(|l| l.is_empty()) {
        return;
    }
    let mut placed = PLACED.write().unwrap_or_else(|e| e.into_inner());
    if take_out(&mut placed, start, start.saturating_add(len)) {
        changed(placed);
    }
}

/// Removes the placements overlapping `lo..hi`; whether there were any.
fn take_out(placed: &mut Vec<Placed>, lo: u64, hi: u64) -> bool {
    let before = placed.len();
    placed.retain(|p| p.hi <= lo || hi <= p.lo);
    placed.len() != before
}

/// Whether any library is placed (jumps are decoded at all).
pub fn any() -> bool {
    !PLACED.read().unwrap_or_else(|e| e.into_inner()).is_empty()
}

/// The library placed around `addr`: its functions and bias.
fn around<R>(
    addr: u64,
    f: impl FnOnce(&qemu_uftrace_engine::entries::Functions, u64, (u64, u64)) -> R,
) -> Option<R> {
    let placed = PLACED.read().unwrap_or_else(|e| e.into_inner());
    let p = placed.iter().find(|p| p.lo <= addr && addr < p.hi)?;
    Some(f(&LIBS.get()?[p.lib].functions, p.bias, (p.lo, p.hi)))
}

/// The library placed around run-time `pc`: its file's device and inode, and `pc` at its
/// link address (`-A`/`-R` of a library's function, `state::args`).
pub fn link_of(pc: u64) -> Option<(u64, u64, u64)> {
    let placed = PLACED.read().unwrap_or_else(|e| e.into_inner());
    let p = placed.iter().find(|p| p.lo <= pc && pc < p.hi)?;
    let lib = LIBS.get()?.get(p.lib)?;
    Some((lib.dev, lib.ino, pc.wrapping_sub(p.bias)))
}

/// Whether a direct jump at `pc` to `target` enters a library's function (from inside the
/// library as `Functions::enters` decides, from elsewhere when `target` is an entry).
pub fn enters(pc: u64, target: u64) -> bool {
    around(target, |f, bias, (lo, hi)| {
        if lo <= pc && pc < hi {
            f.enters(pc.wrapping_sub(bias), target.wrapping_sub(bias))
        } else {
            f.entered_from_outside(target.wrapping_sub(bias))
        }
    })
    .unwrap_or(false)
}

/// Whether the library function starting at `func` is one uftrace's replay treats as a
/// longjmp (libc's `longjmp`).
pub fn is_longjmp(func: u64) -> bool {
    around(func, |f, bias, _| f.is_longjmp(func.wrapping_sub(bias))).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`put`] of library `lib` placed at `lo` (2 KiB of code, its bias `lo`).
    fn put_at(
        placed: &mut Vec<Placed>,
        lib: usize,
        lo: u64,
        max: usize,
        dropped: &AtomicU64,
    ) -> bool {
        let new = Placed {
            lo,
            hi: lo + 0x800,
            bias: lo,
            lib,
        };
        put(placed, new, max, dropped)
    }

    /// A placement timeline: the loader and two libraries at start, then a library placed
    /// at a new address 100,000 times (its unmaps unseen). The list stays at the cap, the
    /// first half stays, the newest are there, what went is counted; a place taken again
    /// replaces what was there.
    #[test]
    fn a_map_unmap_loop_keeps_the_first_half_and_the_newest() {
        let (max, n) = (16, if cfg!(miri) { 1000 } else { 100_000 });
        let dropped = AtomicU64::new(0);
        let mut placed = Vec::new();
        let place = |placed: &mut Vec<Placed>, lib, lo| put_at(placed, lib, lo, max, &dropped);
        for (lib, lo) in [(0, 0x7f00_0000), (1, 0x7e00_0000), (2, 0x7d00_0000)] {
            place(&mut placed, lib, lo);
        }
        let at = |i: u64| 0x1_0000_0000 + i * 0x1000;
        for i in 0..n {
            place(&mut placed, 3, at(i));
            assert!(placed.len() <= max);
        }
        assert_eq!(placed.len(), max);
        assert_eq!(dropped.load(Ordering::Relaxed), 3 + n - max as u64);
        let los: Vec<u64> = placed.iter().map(|p| p.lo).collect();
        let first: Vec<u64> = [0x7f00_0000, 0x7e00_0000, 0x7d00_0000]
            .into_iter()
            .chain((0..5).map(at))
            .collect();
        let newest: Vec<u64> = (n - 8..n).map(at).collect();
        assert_eq!(los, [first, newest].concat());
        // The same library at the same place again: nothing changes.
        assert!(!place(&mut placed, 3, at(n - 1)));
        // Another mapped over the newest place: replaced, not added.
        assert!(place(&mut placed, 2, at(n - 1)));
        assert_eq!(placed.len(), max);
        assert_eq!(placed.last().map(|p| (p.lib, p.lo)), Some((2, at(n - 1))));
        assert_eq!(dropped.load(Ordering::Relaxed), 3 + n - max as u64);
    }

    /// The same loop with its unmaps seen (user mode's `munmap`): nothing piles up, nothing
    /// is dropped, and an unmap elsewhere takes nothing out.
    #[test]
    fn unmaps_take_placements_out() {
        let dropped = AtomicU64::new(0);
        let mut placed = Vec::new();
        let place = |placed: &mut Vec<Placed>, lib, lo| put_at(placed, lib, lo, 16, &dropped);
        place(&mut placed, 0, 0x7f00_0000);
        for i in 0..10_000u64 {
            let lo = 0x1_0000_0000 + i * 0x1000;
            place(&mut placed, 1, lo);
            assert!(!take_out(&mut placed, lo + 0x1000, lo + 0x2000));
            assert!(take_out(&mut placed, lo, lo + 0x1000));
            assert_eq!(placed.len(), 1);
        }
        assert_eq!(dropped.load(Ordering::Relaxed), 0);
        // A length reaching past the top of the address space.
        assert!(take_out(&mut placed, 0x7f00_0400, u64::MAX));
        assert!(placed.is_empty());
    }
}
