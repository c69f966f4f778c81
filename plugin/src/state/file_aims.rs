//! System mode, a Linux guest: the functions of guest files that `-F`, `-N`, `--stop-at`,
//! `--start-at`, `--trace-on-at` and `--trace-off-at` name as `PATH:FUNC` (`file_filter=`,
//! `file_notrace=`, `file_stop_at=`, `file_start_at=`, `file_trace_on_at=`,
//! `file_trace_off_at=`: each a file's guest path, hex-encoded, and the function's offset in
//! the file), found where a process maps that file at that offset (`state::spaces`, kept
//! from the process-map watch's `mmap_region` events, which come before any of the file's
//! code runs).
//!
//! - The triggers: a block starts one where the space translating it maps the file there.
//!   Translation decides, once per block: QEMU shares the translation of a file's page
//!   among every process that maps it (`CF_PCREL`), so the one decision holds wherever the
//!   file runs, at whatever address each process has it.
//! - `-F`/`-N`: a call decides, by its target in the space the vCPU runs. Each time a
//!   space's mappings change, its places of them are worked out anew, and every vCPU's
//!   gates get the lists keyed by space through one [`Late`] (as a user-mode library's,
//!   `state::lib_aims`). An aim's index (filters first, then notraces, in the CLI's order)
//!   is how `plugin.stats` says which were entered (`file_filter_reached=`).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use qemu_uftrace_engine::gates::{Late, LateList};
use qemu_uftrace_engine::spaces::{SpaceId, Spaces};

use super::config::{FileAim, FileAims};

static AIMS: OnceLock<FileAims> = OnceLock::new();
static LATE: Late = Late::new();
/// Each live space's places of the `-F`/`-N` aims: (address, aim index), as worked out at
/// its last change.
static PLACED: Mutex<BTreeMap<SpaceId, Vec<(u64, u32)>>> = Mutex::new(BTreeMap::new());

/// At install: the guest files' functions.
pub fn install(aims: FileAims) {
    if aims != FileAims::default() {
        let _ = AIMS.set(aims);
    }
}

/// The shared lists for a vCPU's gates, and whether some are filter functions; none
/// without `-F`/`-N` functions of guest files.
pub fn late() -> Option<(&'static Late, bool)> {
    AIMS.get()
        .filter(|a| gates_any(a))
        .map(|a| (&LATE, !a.filter.is_empty()))
}

/// Whether a guest file's filter function was given (translation then chooses the gated
/// forms).
pub fn filtering() -> bool {
    AIMS.get().is_some_and(|a| !a.filter.is_empty())
}

fn gates_any(a: &FileAims) -> bool {
    !(a.filter.is_empty() && a.notrace.is_empty())
}

/// Whether any of the functions translation asks for were given.
fn marks_any(a: &FileAims) -> bool {
    !(a.stop_at.is_empty()
        && a.start_at.is_empty()
        && a.trace_on_at.is_empty()
        && a.trace_off_at.is_empty())
}

/// Whether a `--trace-on-at` function of a guest file was given.
pub fn triggers_on() -> bool {
    AIMS.get().is_some_and(|a| !a.trace_on_at.is_empty())
}

/// Whether the block at `pc`, translated now, starts a guest file's `--stop-at`,
/// `--start-at`, `--trace-on-at`, `--trace-off-at` and `-F`/`-N` function, in that order
/// (asked at translation: `state::aims_at`; the last for a call through another file's
/// PLT, `handlers::stubs`). User-space blocks only, in a space the process-map watch knows.
pub fn marks_at(pc: u64) -> [bool; 5] {
    let Some(aims) = AIMS.get().filter(|a| marks_any(a) || gates_any(a)) else {
        return [false; 5];
    };
    let space = super::spaces::translating();
    if space == 0 || pc >> 63 != 0 {
        return [false; 5];
    }
    super::spaces::with(|s| {
        let Some(at) = s.file_at(space, pc) else {
            return [false; 5];
        };
        let is = |list: &[FileAim]| {
            (list.iter()).any(|(path, offset)| s.file_id(path) == Some(at.0) && *offset == at.1)
        };
        [
            is(&aims.stop_at),
            is(&aims.start_at),
            is(&aims.trace_on_at),
            is(&aims.trace_off_at),
            is(&aims.filter) || is(&aims.notrace),
        ]
    })
}

/// Whether spaces' changes are to be told ([`space_changed`]): `-F`/`-N` functions of guest
/// files were given.
pub fn places_any() -> bool {
    AIMS.get().is_some_and(gates_any)
}

/// Space `space` of `s` changed (a mapping, an unmapping, a fork's copy), or ended
/// (`!live`: its process exited or exec'd, and it never runs again): its places of the
/// `-F`/`-N` functions worked out anew, and every vCPU's gates given the new lists where
/// they changed. A space maps at most `spaces::MAX_MAPS` pieces of code: this costs that
/// many comparisons per aim, at the process-map watch's events only.
pub fn space_changed(s: &Spaces, space: SpaceId, live: bool) {
    let Some(aims) = AIMS.get().filter(|a| gates_any(a)) else {
        return;
    };
    let mut places = Vec::new();
    if live {
        let all = aims.filter.iter().chain(&aims.notrace);
        for (i, (path, offset)) in all.enumerate() {
            let Some(file) = s.file_id(path) else {
                continue;
            };
            places.extend(
                s.places(space, file, *offset)
                    .into_iter()
                    .map(|at| (at, i as u32)),
            );
        }
    }
    let mut placed = PLACED.lock().unwrap_or_else(|e| e.into_inner());
    let before = placed.get(&space).map_or(&[][..], Vec::as_slice);
    if before == places.as_slice() {
        return;
    }
    if places.is_empty() {
        placed.remove(&space);
    } else {
        placed.insert(space, places);
    }
    let n = aims.filter.len() as u32;
    let mut list = LateList::default();
    for (&space, places) in placed.iter() {
        for &(at, aim) in places {
            match aim.checked_sub(n) {
                None => list.filter.push(((space, at), aim)),
                Some(_) => list.notrace.push(((space, at), aim)),
            }
        }
    }
    LATE.replace(list);
}

/// Of aim indices `reached`, the filter ones and the notrace ones (each from 0).
pub fn split_reached(reached: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let filters = AIMS.get().map_or(0, |a| a.filter.len());
    qemu_uftrace_engine::gates::split_reached(reached, filters)
}
