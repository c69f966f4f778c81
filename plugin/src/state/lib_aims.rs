//! User mode: the functions of the program's shared libraries that `-F`/`-N`, `--stop-at`,
//! `--start-at`, `--trace-on-at` and `--trace-off-at` name (`lib_filter=`, `lib_notrace=`,
//! `lib_stop_at=`, `lib_start_at=`, `lib_trace_on_at=`, `lib_trace_off_at=`: each a file's
//! device and inode and a link address), placed where the guest maps their files.
//! `state::lib_entries` places the libraries; at each placement or unmapping the run-time
//! addresses are worked out anew here: `-F`/`-N`'s handed to every vCPU's gates through one
//! [`Late`] (the engine's), which each takes at its next call; the others asked by
//! translation (`handlers::stop_at`, `handlers::switch`), which a library's code meets only
//! after its placement.
//!
//! A `-F`/`-N` aim's index (filters first, then notraces, in the CLI's order) is how
//! `plugin.stats` says which were entered (`lib_filter_reached=`).

use qemu_uftrace_engine::gates::{Late, LateKey, LateList};
use std::sync::{OnceLock, RwLock};

use super::config::LibAim;

/// A library where the guest mapped it (`state::lib_entries`): its file's device and inode,
/// its bias, and its functions' span (lo, hi).
pub type Placement = (u64, u64, u64, u64, u64);

/// The libraries' functions, by what names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LibAims {
    pub filter: Vec<LibAim>,
    pub notrace: Vec<LibAim>,
    pub stop_at: Vec<LibAim>,
    pub start_at: Vec<LibAim>,
    pub trace_on_at: Vec<LibAim>,
    pub trace_off_at: Vec<LibAim>,
}

impl LibAims {
    /// Whether any of the functions translation asks for were given.
    fn marks_any(&self) -> bool {
        !(self.stop_at.is_empty()
            && self.start_at.is_empty()
            && self.trace_on_at.is_empty()
            && self.trace_off_at.is_empty())
    }
}

/// The run-time addresses translation asks for, each list sorted.
struct Marks {
    stop_at: Vec<u64>,
    start_at: Vec<u64>,
    trace_on_at: Vec<u64>,
    trace_off_at: Vec<u64>,
}

static AIMS: OnceLock<LibAims> = OnceLock::new();
static LATE: Late = Late::new();
/// The stops', starts' and switches' run-time addresses now.
static MARKS: RwLock<Marks> = RwLock::new(Marks {
    stop_at: Vec::new(),
    start_at: Vec::new(),
    trace_on_at: Vec::new(),
    trace_off_at: Vec::new(),
});

/// At install: the libraries' functions.
pub fn install(aims: LibAims) {
    if aims != LibAims::default() {
        let _ = AIMS.set(aims);
    }
}

/// The shared lists for a vCPU's gates, and whether some are filter functions; none
/// without `-F`/`-N` functions of libraries.
pub fn late() -> Option<(&'static Late, bool)> {
    AIMS.get()
        .filter(|a| !(a.filter.is_empty() && a.notrace.is_empty()))
        .map(|a| (&LATE, !a.filter.is_empty()))
}

/// Whether a library's filter function was given (translation then chooses the gated
/// forms, before any library is placed).
pub fn filtering() -> bool {
    AIMS.get().is_some_and(|a| !a.filter.is_empty())
}

/// Whether a library's `--trace-on-at` function was given (placed or not).
pub fn triggers_on() -> bool {
    AIMS.get().is_some_and(|a| !a.trace_on_at.is_empty())
}

/// Whether the block at run-time `pc` starts a library's `--stop-at`, `--start-at`,
/// `--trace-on-at` and `--trace-off-at` function, in that order (asked at translation:
/// `state::aims_at`).
pub fn marks_at(pc: u64) -> [bool; 4] {
    if AIMS.get().is_none_or(|a| !a.marks_any()) {
        return [false; 4];
    }
    let m = MARKS.read().unwrap_or_else(|e| e.into_inner());
    [&m.stop_at, &m.start_at, &m.trace_on_at, &m.trace_off_at].map(|l| l.binary_search(&pc).is_ok())
}

/// The libraries placed changed: the aims' run-time places in those `placements` gives
/// (asked only when there are aims), for every vCPU.
pub fn placed(placements: fn() -> Vec<Placement>) {
    let Some(aims) = AIMS.get() else {
        return;
    };
    let placements = &placements();
    if !(aims.filter.is_empty() && aims.notrace.is_empty()) {
        LATE.replace(LateList {
            filter: place(&aims.filter, placements, 0),
            notrace: place(&aims.notrace, placements, aims.filter.len()),
        });
    }
    if aims.marks_any() {
        let addrs = |list: &[LibAim]| -> Vec<u64> {
            let mut v: Vec<u64> = place(list, placements, 0)
                .into_iter()
                .map(|((_, at), _)| at)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        *MARKS.write().unwrap_or_else(|e| e.into_inner()) = Marks {
            stop_at: addrs(&aims.stop_at),
            start_at: addrs(&aims.start_at),
            trace_on_at: addrs(&aims.trace_on_at),
            trace_off_at: addrs(&aims.trace_off_at),
        };
    }
}

/// Each of `aims` (numbered from `first`) at its run-time address in every placement of
/// its file whose span holds it (in space 0: user mode has one).
fn place(aims: &[LibAim], placements: &[Placement], first: usize) -> Vec<(LateKey, u32)> {
    let mut out = Vec::new();
    for (i, &(dev, ino, link)) in aims.iter().enumerate() {
        for &(pdev, pino, bias, lo, hi) in placements {
            let at = link.wrapping_add(bias);
            if (pdev, pino) == (dev, ino) && lo <= at && at < hi {
                out.push(((0, at), (first + i) as u32));
            }
        }
    }
    out
}

/// Of aim indices `reached`, the filter ones and the notrace ones (each from 0).
pub fn split_reached(reached: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let filters = AIMS.get().map_or(0, |a| a.filter.len());
    qemu_uftrace_engine::gates::split_reached(reached, filters)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An aim is placed in each mapping of its file that holds it, nowhere else.
    #[test]
    fn aims_are_placed_in_their_files_mappings() {
        let aims = [(1, 7, 0x1040), (1, 8, 0x2000)];
        let placements = [
            (1, 7, 0x7000_0000, 0x7000_1000, 0x7000_5000),
            (1, 7, 0x7100_0000, 0x7100_1000, 0x7100_5000),
            (1, 9, 0x7200_0000, 0x7200_1000, 0x7200_5000),
        ];
        assert_eq!(
            place(&aims, &placements, 3),
            [((0, 0x7000_1040), 3), ((0, 0x7100_1040), 3)]
        );
    }
}
