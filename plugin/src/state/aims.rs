//! The addresses `-F`/`-N`/`--stop-at`/`--start-at`/`--trace-on-at`/`--trace-off-at` aim
//! at, as the guest runs them.
//!
//! User mode: the functions of a position-independent program come at their link addresses
//! (`pie_filter=`…, with `pie_entry=` its link entry point) and are moved by its load bias
//! once its entry point (`AT_ENTRY`) is read, at its first instruction: before any of its
//! code runs, so every translation of it and every call into it sees them placed. Nothing
//! here runs per event: the engine's gates get the placed lists once, and translation asks
//! for the stop and start addresses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// One set of aims.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aims {
    pub filter: Vec<u64>,
    pub notrace: Vec<u64>,
    pub stop_at: Vec<u64>,
    pub start_at: Vec<u64>,
    pub trace_on_at: Vec<u64>,
    pub trace_off_at: Vec<u64>,
}

impl Aims {
    pub fn is_empty(&self) -> bool {
        self.filter.is_empty()
            && self.notrace.is_empty()
            && self.stop_at.is_empty()
            && self.start_at.is_empty()
            && self.trace_on_at.is_empty()
            && self.trace_off_at.is_empty()
    }

    /// These and `other`'s moved by `bias`.
    fn with_moved(&self, other: &Aims, bias: u64) -> Aims {
        let join = |a: &[u64], b: &[u64]| -> Vec<u64> {
            let mut v: Vec<u64> = a
                .iter()
                .copied()
                .chain(b.iter().map(|x| x.wrapping_add(bias)))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        Aims {
            filter: join(&self.filter, &other.filter),
            notrace: join(&self.notrace, &other.notrace),
            stop_at: join(&self.stop_at, &other.stop_at),
            start_at: join(&self.start_at, &other.start_at),
            trace_on_at: join(&self.trace_on_at, &other.trace_on_at),
            trace_off_at: join(&self.trace_off_at, &other.trace_off_at),
        }
    }
}

/// The program's functions at link addresses, and its link entry point.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pie {
    pub entry: u64,
    pub aims: Aims,
}

/// The addresses given as the guest runs them.
static GIVEN: OnceLock<Aims> = OnceLock::new();
static PIE: OnceLock<Pie> = OnceLock::new();
/// The bias the program was moved by, and `GIVEN` with `PIE`'s moved.
static PLACED: OnceLock<(u64, Aims)> = OnceLock::new();
static NONE: Aims = Aims {
    filter: Vec::new(),
    notrace: Vec::new(),
    stop_at: Vec::new(),
    start_at: Vec::new(),
    trace_on_at: Vec::new(),
    trace_off_at: Vec::new(),
};

/// Other functions of a PIE wait for its bias (`-A`/`-R`'s, `state::args`): placed even
/// with no aims of these. Set before [`install`].
static PLACE_ANYWAY: AtomicBool = AtomicBool::new(false);

pub fn place_anyway() {
    PLACE_ANYWAY.store(true, Ordering::Relaxed);
}

/// At install: the aims given at run-time addresses, and a PIE program's (none in an
/// exec'd image: they are the first program's).
pub fn install(given: Aims, pie: Option<Pie>) {
    let _ = GIVEN.set(given);
    if let Some(pie) = pie.filter(|p| !p.aims.is_empty() || PLACE_ANYWAY.load(Ordering::Relaxed)) {
        let _ = PIE.set(pie);
    }
}

/// Whether some aims wait for the program's entry point.
pub fn pending() -> bool {
    PIE.get().is_some() && PLACED.get().is_none()
}

/// The aims as the guest runs them now: before the program's entry point is known, only
/// those given at run-time addresses.
pub fn now() -> &'static Aims {
    match PLACED.get() {
        Some((_, a)) => a,
        None => GIVEN.get().unwrap_or(&NONE),
    }
}

/// Whether a `--trace-on-at` function was given (placed or not): translation looks for it
/// while tracing is off.
pub fn triggers_on() -> bool {
    !now().trace_on_at.is_empty() || PIE.get().is_some_and(|p| !p.aims.trace_on_at.is_empty())
}

/// Whether `-F` was given at all (placed or not): translation chooses the gated forms.
pub fn filtering() -> bool {
    !now().filter.is_empty() || PIE.get().is_some_and(|p| !p.aims.filter.is_empty())
}

/// User mode, at the program's first instruction: its entry point places a PIE's aims.
/// The placed aims when there were some to place.
pub fn place(at_entry: u64) -> Option<&'static Aims> {
    let pie = PIE.get()?;
    let bias = at_entry.wrapping_sub(pie.entry);
    let given = GIVEN.get().unwrap_or(&NONE);
    let _ = PLACED.set((bias, given.with_moved(&pie.aims, bias)));
    PLACED.get().map(|(_, a)| a)
}

/// The bias a PIE program was moved by, once placed (`state::args` places its functions
/// by it).
pub fn bias() -> Option<u64> {
    PLACED.get().map(|&(b, _)| b)
}

/// For `plugin.stats`: of the run-time addresses `reached` (of `-F` when `filter`, else of
/// `-N`), those given at run-time addresses and the PIE's link addresses.
pub fn given_of(reached: &[u64], filter: bool) -> (Vec<u64>, Vec<u64>) {
    let pick = |a: &Aims| {
        if filter {
            a.filter.clone()
        } else {
            a.notrace.clone()
        }
    };
    let given = GIVEN.get().map(pick).unwrap_or_default();
    let at: Vec<u64> = (reached.iter())
        .filter(|r| given.contains(r))
        .copied()
        .collect();
    let pie: Vec<u64> = match (PIE.get(), PLACED.get()) {
        (Some(p), Some(&(bias, _))) => {
            let links = pick(&p.aims);
            (reached.iter())
                .map(|r| r.wrapping_sub(bias))
                .filter(|l| links.contains(l))
                .collect()
        }
        _ => Vec::new(),
    };
    (at, pie)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pie_s_aims_are_moved_by_its_bias() {
        let given = Aims {
            filter: vec![0x50],
            ..Default::default()
        };
        let pie = Aims {
            filter: vec![0x20],
            start_at: vec![0x30],
            trace_on_at: vec![0x40],
            ..Default::default()
        };
        let placed = given.with_moved(&pie, 0x1000);
        assert_eq!(placed.filter, [0x50, 0x1020]);
        assert_eq!(placed.start_at, [0x1030]);
        assert_eq!(placed.trace_on_at, [0x1040]);
        assert!(placed.notrace.is_empty() && placed.stop_at.is_empty());
    }
}
