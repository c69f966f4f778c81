//! `-F`, `-N` and `-D` inside a window switched on while the guest ran (`qemu:opened`). The
//! frames open at the switch are only known after the run, by unwinding the window's cookie
//! (`super::resync`), so the engine cannot tell which of them open a filtered or a left-out
//! subtree: it writes the window whole at its stack depths (less the notrace subtrees it
//! entered itself; `Roots::deferred` in the engine), and here, once those frames are known,
//! the window is filtered as uftrace's libmcount writes a filtered trace: only the subtrees
//! of the outermost open filter function, less those of the outermost open notrace one,
//! depths counted from the filter root, at most `-D` deep. The window's edges stay.
//!
//! System mode, a guest file's `-F`/`-N` function (`PATH:FUNC`) is at one address in each
//! process that maps the file: a window takes the places of its task's process
//! ([`FilePlaces`]), anew where the process exec'd.

use qemu_uftrace_format::addr48;
use qemu_uftrace_format::events::{OPENED, TRACE_OFF, TRACE_ON};
use qemu_uftrace_format::record::{Record, RecordType};

/// A recording's `-F`/`-N` functions (where the guest ran them) and `-D`.
#[derive(Clone, Default)]
pub struct Gates<'a> {
    filter: Vec<u64>,
    notrace: Vec<u64>,
    max_depth: usize,
    /// System mode: the guest files' `-F`/`-N` functions, placed per process.
    files: Option<&'a dyn FilePlaces>,
    /// Whether a guest file's `-F` function was given (then only filtered subtrees are
    /// written, even in a process that maps none of them).
    file_filter: bool,
}

/// System mode: where the guest files' `-F`/`-N` functions are in a task's process.
pub trait FilePlaces: Sync {
    /// Their places in the process task `tid` runs at `time`, and until when those hold.
    fn at(&self, tid: u32, time: u64) -> Placed;
}

/// The guest files' `-F`/`-N` functions in one process, from one time `until` another (its
/// next exec, or `u64::MAX`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed {
    pub filter: Vec<u64>,
    pub notrace: Vec<u64>,
    pub until: u64,
}

fn sorted(v: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut v: Vec<u64> = v.into_iter().map(addr48).collect();
    v.sort_unstable();
    v.dedup();
    v
}

impl<'a> Gates<'a> {
    /// `None` without `-F` or `-N` (`-D` alone the engine applies itself).
    pub fn new(filter: Vec<u64>, notrace: Vec<u64>, max_depth: Option<u16>) -> Option<Gates<'a>> {
        if filter.is_empty() && notrace.is_empty() {
            return None;
        }
        Some(Gates {
            filter: sorted(filter),
            notrace: sorted(notrace),
            max_depth: max_depth.map_or(usize::MAX, usize::from),
            files: None,
            file_filter: false,
        })
    }

    /// Also guest files' functions (`filter`: some are `-F` ones), placed by `files`.
    pub fn with_files(
        gates: Option<Gates<'a>>,
        files: &'a dyn FilePlaces,
        filter: bool,
        max_depth: Option<u16>,
    ) -> Gates<'a> {
        let gates = gates.unwrap_or_else(|| Gates {
            max_depth: max_depth.map_or(usize::MAX, usize::from),
            ..Gates::default()
        });
        Gates {
            files: Some(files),
            file_filter: filter,
            ..gates
        }
    }
}

/// One window being filtered: the records of the unwound frames and of the engine, at their
/// stack depths, in; the filtered ones out.
pub struct Window<'a> {
    gates: &'a Gates<'a>,
    /// The task whose window this is.
    tid: u32,
    /// The gates' functions with the guest files' where this task's process has them, until
    /// `until`.
    filter: Vec<u64>,
    notrace: Vec<u64>,
    until: u64,
    /// Whether only filtered subtrees are written.
    filtering: bool,
    max_depth: usize,
    /// The stack depth after the last record.
    depth: usize,
    filter_root: Option<usize>,
    notrace_root: Option<usize>,
}

impl<'a> Window<'a> {
    /// Task `tid`'s window, opened at `time`.
    pub fn new(gates: &'a Gates<'a>, tid: u32, time: u64) -> Window<'a> {
        let mut w = Window {
            gates,
            tid,
            filter: Vec::new(),
            notrace: Vec::new(),
            until: 0,
            filtering: !gates.filter.is_empty() || gates.file_filter,
            max_depth: gates.max_depth,
            depth: 0,
            filter_root: None,
            notrace_root: None,
        };
        w.place(time);
        w
    }

    /// The functions where the task's process has them at `time`.
    fn place(&mut self, time: u64) {
        let placed = (self.gates.files).map(|f| f.at(self.tid, time));
        let placed = placed.unwrap_or(Placed {
            until: u64::MAX,
            ..Placed::default()
        });
        let g = self.gates;
        self.filter = sorted(g.filter.iter().copied().chain(placed.filter));
        self.notrace = sorted(g.notrace.iter().copied().chain(placed.notrace));
        self.until = placed.until;
    }

    /// Where a frame (or a marker) at stack depth `d` is written, if it is.
    fn written(&self, d: usize) -> Option<usize> {
        if self.notrace_root.is_some_and(|n| d >= n) {
            return None;
        }
        let d = if !self.filtering {
            d
        } else {
            d.checked_sub(self.filter_root.filter(|&f| d >= f)?)?
        };
        (d < self.max_depth).then_some(d)
    }

    pub fn push(&mut self, r: Record, out: &mut Vec<Record>) {
        // The process exec'd: another program's functions from here.
        if r.time >= self.until {
            self.place(r.time);
        }
        let d = r.depth as usize;
        let at = |depth: usize| Record {
            depth: depth as u16,
            ..r
        };
        match r.kind {
            RecordType::Entry => {
                if self.notrace.binary_search(&r.addr).is_ok() {
                    self.notrace_root.get_or_insert(d);
                }
                if self.filter.binary_search(&r.addr).is_ok() {
                    self.filter_root.get_or_insert(d);
                }
                if let Some(w) = self.written(d) {
                    out.push(at(w));
                }
                self.depth = d + 1;
            }
            RecordType::Exit => {
                if let Some(w) = self.written(d) {
                    out.push(at(w));
                }
                self.filter_root = self.filter_root.filter(|&f| f < d);
                self.notrace_root = self.notrace_root.filter(|&n| n < d);
                self.depth = d;
            }
            RecordType::Event if r.addr == TRACE_ON || r.addr == TRACE_OFF => out.push(at(0)),
            // The edge that ends the opened frames stays, above those written.
            RecordType::Event if r.addr == OPENED => {
                // Not written where it stands: above the frames written beneath a notrace
                // root, or at 0 outside every filtered subtree.
                let w = self.written(d).unwrap_or_else(|| {
                    let below = self.notrace_root.unwrap_or(0);
                    let root = match self.filter_root {
                        _ if !self.filtering => 0,
                        Some(f) => f,
                        None => below,
                    };
                    below.saturating_sub(root)
                });
                out.push(at(w.min(self.max_depth)));
            }
            _ => {
                if let Some(w) = self.written(d) {
                    out.push(at(w));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::beneath::testing::r;
    use RecordType::*;

    fn run(gates: &Gates, records: &[Record]) -> Vec<(RecordType, u16, u64)> {
        let mut w = Window::new(gates, 7, 0);
        let mut out = Vec::new();
        for x in records {
            w.push(*x, &mut out);
        }
        out.iter().map(|x| (x.kind, x.depth, x.addr)).collect()
    }

    /// main (0x100) > tick (0x200) > work (0x300) open at the switch on; tick returns, main
    /// calls tick again.
    fn window() -> Vec<Record> {
        vec![
            r(1, Entry, 0, 0x100),
            r(1, Entry, 1, 0x200),
            r(1, Entry, 2, 0x300),
            r(1, Event, 3, OPENED),
            r(2, Exit, 2, 0x300),
            r(3, Exit, 1, 0x200),
            r(4, Entry, 1, 0x200),
            r(5, Entry, 2, 0x300),
            r(6, Exit, 2, 0x300),
            r(7, Exit, 1, 0x200),
            r(8, Exit, 0, 0x100),
            r(8, Event, 0, TRACE_OFF),
        ]
    }

    #[test]
    fn a_filter_keeps_its_subtrees_from_depth_zero() {
        let gates = Gates::new(vec![0x200], vec![], None).unwrap();
        assert_eq!(
            run(&gates, &window()),
            [
                (Entry, 0, 0x200),
                (Entry, 1, 0x300),
                (Event, 2, OPENED),
                (Exit, 1, 0x300),
                (Exit, 0, 0x200),
                (Entry, 0, 0x200),
                (Entry, 1, 0x300),
                (Exit, 1, 0x300),
                (Exit, 0, 0x200),
                (Event, 0, TRACE_OFF),
            ]
        );
        // -D 1: the subtrees' roots only.
        let gates = Gates::new(vec![0x200], vec![], Some(1)).unwrap();
        let got = run(&gates, &window());
        assert!(got.iter().all(|x| x.2 != 0x300 && x.1 <= 1), "{got:?}");
    }

    #[test]
    fn notrace_hides_its_subtree_among_the_opened_frames_too() {
        let gates = Gates::new(vec![], vec![0x300], None).unwrap();
        assert_eq!(
            run(&gates, &window()),
            [
                (Entry, 0, 0x100),
                (Entry, 1, 0x200),
                (Event, 2, OPENED),
                (Exit, 1, 0x200),
                (Entry, 1, 0x200),
                (Exit, 1, 0x200),
                (Exit, 0, 0x100),
                (Event, 0, TRACE_OFF),
            ]
        );
    }

    #[test]
    fn a_window_opened_outside_every_filter_keeps_its_edges() {
        let gates = Gates::new(vec![0x900], vec![], None).unwrap();
        assert_eq!(
            run(&gates, &window()),
            [(Event, 0, OPENED), (Event, 0, TRACE_OFF)]
        );
    }

    /// A guest file's filter function where task 7's process maps it: at 0x200 until the
    /// process execs at time 5, at 0x300 in the program it exec'd (another task's process
    /// has none). Before the exec 0x200 opens a subtree, after it 0x300 does and 0x200 not.
    #[test]
    fn a_guest_file_s_filter_is_where_the_window_s_process_has_it_then() {
        struct Places;
        impl FilePlaces for Places {
            fn at(&self, tid: u32, time: u64) -> Placed {
                let (filter, until) = match (tid, time) {
                    (7, ..5) => (vec![0x200], 5),
                    (7, _) => (vec![0x300], u64::MAX),
                    _ => (vec![], u64::MAX),
                };
                Placed {
                    filter,
                    notrace: Vec::new(),
                    until,
                }
            }
        }
        let records = [
            r(1, Entry, 0, 0x100),
            r(2, Entry, 1, 0x200),
            r(3, Exit, 1, 0x200),
            r(6, Entry, 1, 0x200),
            r(7, Entry, 2, 0x300),
            r(8, Exit, 2, 0x300),
            r(9, Exit, 1, 0x200),
            r(10, Exit, 0, 0x100),
            r(10, Event, 0, TRACE_OFF),
        ];
        let gates = Gates::with_files(None, &Places, true, None);
        assert_eq!(
            run(&gates, &records),
            [
                (Entry, 0, 0x200),
                (Exit, 0, 0x200),
                (Entry, 0, 0x300),
                (Exit, 0, 0x300),
                (Event, 0, TRACE_OFF),
            ]
        );
        // Another task's process maps none of them: its window keeps its edges only.
        let mut w = Window::new(&gates, 8, 0);
        let mut out = Vec::new();
        for x in records {
            w.push(x, &mut out);
        }
        let got: Vec<_> = out.iter().map(|x| (x.kind, x.addr)).collect();
        assert_eq!(got, [(Event, TRACE_OFF)]);
    }
}
