//! User mode: the `-F`/`-N` functions of the program's shared libraries (`lib_filter=`,
//! `lib_notrace=`: each a file's device and inode and a link address), placed where the
//! guest maps their files. `state::lib_entries` places the libraries; at each placement or
//! unmapping the run-time addresses are worked out anew here and handed to every vCPU's
//! gates through one [`Late`] (the engine's), which each takes at its next call.
//!
//! An aim's index (filters first, then notraces, in the CLI's order) is how `plugin.stats`
//! says which were entered (`lib_filter_reached=`).

use qemu_uftrace_engine::gates::{Late, LateList};
use std::sync::OnceLock;

use super::config::LibAim;

static AIMS: OnceLock<(Vec<LibAim>, Vec<LibAim>)> = OnceLock::new();
static LATE: Late = Late::new();

/// At install: the libraries' filter and notrace functions.
pub fn install(filter: &[LibAim], notrace: &[LibAim]) {
    if !filter.is_empty() || !notrace.is_empty() {
        let _ = AIMS.set((filter.to_vec(), notrace.to_vec()));
    }
}

/// The shared lists for a vCPU's gates, and whether some are filter functions; none
/// without library functions.
pub fn late() -> Option<(&'static Late, bool)> {
    AIMS.get().map(|(filter, _)| (&LATE, !filter.is_empty()))
}

/// Whether a library's filter function was given (translation then chooses the gated
/// forms, before any library is placed).
pub fn filtering() -> bool {
    AIMS.get().is_some_and(|(filter, _)| !filter.is_empty())
}

/// The libraries placed now, each as (device, inode, bias, lo, hi): the run-time places
/// of the aims in them, for every vCPU.
pub fn placed(placements: &[(u64, u64, u64, u64, u64)]) {
    let Some((filter, notrace)) = AIMS.get() else {
        return;
    };
    LATE.replace(LateList {
        filter: place(filter, placements, 0),
        notrace: place(notrace, placements, filter.len()),
    });
}

/// Each of `aims` (numbered from `first`) at its run-time address in every placement of
/// its file whose span holds it.
fn place(
    aims: &[LibAim],
    placements: &[(u64, u64, u64, u64, u64)],
    first: usize,
) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    for (i, &(dev, ino, link)) in aims.iter().enumerate() {
        for &(pdev, pino, bias, lo, hi) in placements {
            let at = link.wrapping_add(bias);
            if (pdev, pino) == (dev, ino) && lo <= at && at < hi {
                out.push((at, (first + i) as u32));
            }
        }
    }
    out
}

/// Of aim indices `reached`, the filter ones and the notrace ones (each from 0).
pub fn split_reached(reached: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let n = AIMS.get().map_or(0, |(f, _)| f.len()) as u32;
    let (filter, notrace): (Vec<u32>, Vec<u32>) = reached.iter().partition(|&&i| i < n);
    (filter, notrace.into_iter().map(|i| i - n).collect())
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
            [(0x7000_1040, 3), (0x7100_1040, 3)]
        );
    }
}
