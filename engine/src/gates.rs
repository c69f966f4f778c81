//! `-F/--filter` and `-N/--notrace` (uftrace's): which frames of a context are written.
//!
//! With filter functions, a context writes only the subtrees of their outermost open entry
//! (its "root"); with notrace functions, nothing from the outermost open one on. The state is
//! a context's two roots (stack depths), saved with its stack at a switch. Everything pushed
//! on the stack inside a subtree (callees, exceptions and interrupts taken there, signal
//! deliveries) is in it; what is pushed outside stays out. Depths are written relative to the
//! filter root, as uftrace's libmcount writes them (a filtered function shows at depth 0),
//! and `--depth` counts from there too.
//!
//! The engine consults this only off its fast path: with gates, its recorded depth is 0, so
//! every call and return takes the general path, which comes here (see `Engine::set_gates`).
//! Without them nothing here runs.
//!
//! User mode, a shared library's `-F`/`-N` functions have run-time addresses only once the
//! guest maps the library ([`Late`]): every context's gates share those lists, and a context
//! takes the newest at its next call (one atomic load per call, on the gated path only).
//! System mode, a guest file's (`PATH:FUNC`) have one in each process that maps the file:
//! the lists are keyed by address space too, and the gates ask in the space the vCPU runs
//! ([`Gates::set_space`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::spaces::SpaceId;

/// Which functions open a filtered subtree or a left-out one, and where the running
/// context's are open.
#[derive(Debug, Clone, Default)]
pub struct Gates {
    /// Filter functions' entry addresses, sorted (empty: no `-F`, everything is inside).
    filter: Vec<u64>,
    /// Notrace functions' entry addresses, sorted.
    notrace: Vec<u64>,
    /// Entries into each filter and notrace function (same order as the addresses).
    filter_hits: Vec<u64>,
    notrace_hits: Vec<u64>,
    /// Frames written per subtree (uftrace's depth), counted from the root.
    max_depth: usize,
    /// The lowest and highest filter or notrace address: most calls are outside.
    span: (u64, u64),
    /// The running context's roots (see [`Roots`]); changed only through
    /// [`Gates::set_roots`] or with [`Gates::told`] after, so that [`Watch`] hears of it.
    roots: Roots,
    /// Who is told whether the running context is inside a written subtree.
    watch: Option<Watch>,
    /// A randomised kernel's: functions are looked up in the symbol file's space.
    shift: Option<&'static crate::kaslr::KernelShift>,
    /// Functions placed while the guest runs, whether some of them are filter functions,
    /// the generation of them taken, and them.
    late: Option<&'static Late>,
    late_filtering: bool,
    late_seen: u64,
    late_list: Arc<LateList>,
    /// The address space the vCPU runs (system mode; 0 in user mode and where unknown),
    /// which [`Late`] functions are looked up in.
    space: SpaceId,
    /// The [`Late`] aims entered at least once (their indices, sorted: filter and notrace
    /// aims are numbered apart).
    late_hits: Vec<u32>,
}

/// Filter and notrace functions placed while the guest runs (a user-mode program's shared
/// libraries', where the guest maps them), shared by every context: replaced whole at each
/// placement or unmapping, and taken by each context's [`Gates`] at its next call.
#[derive(Debug)]
pub struct Late {
    generation: AtomicU64,
    list: RwLock<Option<Arc<LateList>>>,
}

/// Where a [`Late`] function runs: the address space (0 in user mode, which has one) and
/// its run-time address there.
pub type LateKey = (SpaceId, u64);

/// Run-time places and the index of the aim each places (the CLI's numbering, for saying
/// which were entered), sorted by place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LateList {
    pub filter: Vec<(LateKey, u32)>,
    pub notrace: Vec<(LateKey, u32)>,
}

impl Default for Late {
    fn default() -> Self {
        Self::new()
    }
}

impl Late {
    pub const fn new() -> Late {
        Late {
            generation: AtomicU64::new(0),
            list: RwLock::new(None),
        }
    }

    /// The functions placed now (sorted here).
    pub fn replace(&self, mut list: LateList) {
        list.filter.sort_unstable();
        list.filter.dedup_by_key(|e| e.0);
        list.notrace.sort_unstable();
        list.notrace.dedup_by_key(|e| e.0);
        *self.list.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(list));
        // After the list: a context that sees the new generation reads the new list.
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn current(&self) -> (u64, Arc<LateList>) {
        let generation = self.generation.load(Ordering::Acquire);
        let list = self.list.read().unwrap_or_else(|e| e.into_inner());
        (generation, list.clone().unwrap_or_default())
    }
}

/// Told whether the running context may write frames (see [`Gates::inside`]) each time
/// that changes: the plugin keeps it in a per-vCPU word on which its value reads (`-a`,
/// `-A`, `-R`) are conditional, so that calls outside `-F`'s subtrees run no callback.
#[derive(Debug, Clone, Copy)]
pub struct Watch {
    /// Called with `token` and the new state.
    pub tell: fn(u32, bool),
    pub token: u32,
    /// What it was told last.
    told: bool,
}

impl Watch {
    pub fn new(tell: fn(u32, bool), token: u32) -> Watch {
        Watch {
            tell,
            token,
            told: false,
        }
    }
}

/// Where a context's outermost open filter and notrace frames are (their stack depths).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Roots {
    pub filter: Option<usize>,
    pub notrace: Option<usize>,
    /// The context runs above frames only the CLI knows (a switch on's, unwound after the
    /// run): which of them open a subtree is not known here, so every frame is written at
    /// its stack depth, less the notrace subtrees entered since, and the CLI applies `-F`,
    /// `-N` and the depth limit to the window (`cli/src/record/window_gates.rs`).
    pub deferred: bool,
}

/// What `Gates::window` says of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Written, at this depth.
    Written(usize),
    /// Inside a written subtree but deeper than the depth limit.
    TooDeep,
    /// Outside every filtered subtree, or inside a left-out one.
    Filtered,
}

impl Gates {
    /// Gates for these filter and notrace functions, writing `max_depth` frames per subtree.
    pub fn new(mut filter: Vec<u64>, mut notrace: Vec<u64>, max_depth: usize) -> Gates {
        filter.sort_unstable();
        filter.dedup();
        notrace.sort_unstable();
        notrace.dedup();
        let all = filter.iter().chain(&notrace);
        let span = (
            all.clone().copied().min().unwrap_or(u64::MAX),
            all.copied().max().unwrap_or(0),
        );
        Gates {
            span,
            filter_hits: vec![0; filter.len()],
            notrace_hits: vec![0; notrace.len()],
            filter,
            notrace,
            max_depth,
            roots: Roots::default(),
            watch: None,
            shift: None,
            late: None,
            late_filtering: false,
            late_seen: 0,
            late_list: Arc::default(),
            space: 0,
            late_hits: Vec::new(),
        }
    }

    /// Also the functions placed while the guest runs in `late`; `filtering` when some of
    /// them are filter functions (the context then starts outside every subtree, before any
    /// is placed).
    pub fn with_late(mut self, late: &'static Late, filtering: bool) -> Gates {
        self.late_filtering = filtering;
        self.late = Some(late);
        self.refresh();
        self
    }

    /// These gates with `filter` and `notrace` given instead (the depth limit and the
    /// [`Late`] functions kept).
    pub fn with_given(&self, filter: Vec<u64>, notrace: Vec<u64>) -> Gates {
        let mut gates = Gates::new(filter, notrace, self.max_depth);
        gates.space = self.space;
        match self.late {
            Some(late) => gates.with_late(late, self.late_filtering),
            None => gates,
        }
    }

    /// Tells `watch` whether the running context may write frames, now and at each change.
    pub fn set_watch(&mut self, watch: Watch) {
        let mut watch = watch;
        watch.told = self.inside();
        (watch.tell)(watch.token, watch.told);
        self.watch = Some(watch);
    }

    /// Whether the running context may write frames: no filter function given, or one's
    /// subtree open, or its subtrees the CLI's to decide. A superset (a notrace subtree
    /// or the depth limit may still leave a frame out), kept exact as [`Watch`] says.
    #[inline(always)]
    pub fn inside(&self) -> bool {
        !self.filtering() || self.roots.filter.is_some() || self.roots.deferred
    }

    /// Tells the watch, if [`Gates::inside`] changed since it was told.
    #[inline(always)]
    fn told(&mut self) {
        let inside = self.inside();
        if let Some(w) = self.watch.as_mut().filter(|w| w.told != inside) {
            w.told = inside;
            (w.tell)(w.token, inside);
        }
    }

    /// The running context's roots, taken (a switch away from it: none are open then).
    pub(crate) fn take_roots(&mut self) -> Roots {
        let roots = std::mem::take(&mut self.roots);
        self.told();
        roots
    }

    /// Runs a context with these roots.
    pub(crate) fn set_roots(&mut self, roots: Roots) {
        self.roots = roots;
        self.told();
    }

    /// Takes the newest [`Late`] functions, if they changed since.
    #[inline(always)]
    pub fn refresh(&mut self) {
        if let Some(late) = self.late {
            if late.generation.load(Ordering::Acquire) != self.late_seen {
                (self.late_seen, self.late_list) = late.current();
            }
        }
    }

    /// The vCPU runs address space `space` now (system mode: a task of another process
    /// arrived, or its process exec'd): [`Late`] functions are looked up there.
    pub fn set_space(&mut self, space: SpaceId) {
        self.space = space;
    }

    /// The [`Late`] aim placed at `func` in the space running, of `list`.
    #[inline(always)]
    fn late_at(&self, list: &[(LateKey, u32)], func: u64) -> Option<u32> {
        let i = list
            .binary_search_by_key(&(self.space, func), |e| e.0)
            .ok()?;
        Some(list[i].1)
    }

    /// Functions are named in the symbol file's space of a kernel that may run moved
    /// (KASLR): called addresses are taken there before they are looked up.
    pub fn with_shift(mut self, shift: &'static crate::kaslr::KernelShift) -> Gates {
        self.shift = Some(shift);
        self
    }

    #[inline(always)]
    fn key(&self, func: u64) -> u64 {
        match self.shift {
            Some(s) => s.to_symbols(func),
            None => func,
        }
    }

    /// A frame of `func` is being pushed at `depth`: it may open a subtree.
    #[inline]
    pub fn enter(&mut self, depth: usize, func: u64) {
        let func = self.key(func);
        if let Ok(i) = self.notrace.binary_search(&func) {
            self.notrace_hits[i] += 1;
            self.roots.notrace.get_or_insert(depth);
        }
        if let Ok(i) = self.filter.binary_search(&func) {
            self.filter_hits[i] += 1;
            self.roots.filter.get_or_insert(depth);
        }
        if self.late.is_some() {
            if let Some(aim) = self.late_at(&self.late_list.notrace, func) {
                hit(&mut self.late_hits, aim);
                self.roots.notrace.get_or_insert(depth);
            }
            if let Some(aim) = self.late_at(&self.late_list.filter, func) {
                hit(&mut self.late_hits, aim);
                self.roots.filter.get_or_insert(depth);
            }
        }
        self.told();
    }

    /// Whether a context with filter functions is outside every subtree (and no notrace
    /// one is open): its calls and returns are only followed, until one enters `may_open`.
    #[inline(always)]
    pub fn outside(&self) -> bool {
        self.roots.filter.is_none()
            && self.roots.notrace.is_none()
            && self.filtering()
            && !self.roots.deferred
    }

    /// Whether some filter function was given (here or among the [`Late`] ones, placed or
    /// not): then only filtered subtrees are written.
    #[inline(always)]
    fn filtering(&self) -> bool {
        !self.filter.is_empty() || self.late_filtering
    }

    /// Whether a frame of `func` may open a subtree (or count as an entry of one).
    #[inline(always)]
    pub fn may_open(&self, func: u64) -> bool {
        let func = self.key(func);
        ((self.span.0..=self.span.1).contains(&func)
            && (self.filter.binary_search(&func).is_ok()
                || self.notrace.binary_search(&func).is_ok()))
            || (self.late.is_some()
                && (self.late_at(&self.late_list.filter, func).is_some()
                    || self.late_at(&self.late_list.notrace, func).is_some()))
    }

    /// The stack is down to `len` frames: subtrees rooted at or above it are closed.
    #[inline]
    pub fn left(&mut self, len: usize) {
        if self.roots.filter.is_some_and(|r| r >= len) {
            self.roots.filter = None;
        }
        if self.roots.notrace.is_some_and(|r| r >= len) {
            self.roots.notrace = None;
        }
        self.told();
    }

    /// Whether and where a frame at stack depth `depth` is written.
    #[inline]
    pub fn window(&self, depth: usize) -> Place {
        if self.roots.notrace.is_some_and(|n| depth >= n) {
            return Place::Filtered;
        }
        if self.roots.deferred {
            return Place::Written(depth);
        }
        let base = if !self.filtering() {
            0
        } else {
            match self.roots.filter {
                Some(root) if depth >= root => root,
                _ => return Place::Filtered,
            }
        };
        match depth - base {
            d if d < self.max_depth => Place::Written(d),
            _ => Place::TooDeep,
        }
    }

    /// Where a marker (LOST, a scheduler event) taken with `len` frames open is written: at
    /// the current depth when the context is inside a written subtree, else nowhere.
    pub fn marker_depth(&self, len: usize) -> Option<usize> {
        if self.roots.deferred {
            return self.roots.notrace.is_none().then_some(len);
        }
        let root = if !self.filtering() {
            0
        } else {
            self.roots.filter?
        };
        if self.roots.notrace.is_some() {
            return None;
        }
        Some((len - root).min(self.max_depth))
    }

    /// Whether a return past the bottom of the stack (`midway`) is written: only when every
    /// frame is (no filter function, no left-out subtree open).
    pub fn outer_written(&self) -> bool {
        (!self.filtering() || self.roots.deferred) && self.roots.notrace.is_none()
    }

    /// From here the running context's subtrees are the CLI's to decide (see
    /// [`Roots::deferred`]), until [`Gates::reset`].
    pub fn defer(&mut self) {
        self.set_roots(Roots {
            deferred: true,
            ..Roots::default()
        });
    }

    /// No subtree open, nothing deferred: a context whose stack is empty.
    pub fn reset(&mut self) {
        self.set_roots(Roots::default());
    }

    /// The filter functions entered at least once, by address.
    pub fn filter_reached(&self) -> impl Iterator<Item = u64> + '_ {
        reached(&self.filter, &self.filter_hits)
    }

    /// The notrace functions entered at least once, by address.
    pub fn notrace_reached(&self) -> impl Iterator<Item = u64> + '_ {
        reached(&self.notrace, &self.notrace_hits)
    }

    /// The [`Late`] aims entered at least once, by index.
    pub fn late_reached(&self) -> &[u32] {
        &self.late_hits
    }
}

/// Of [`Late`] aim indices `reached`, the filter ones and the notrace ones, each from 0:
/// the first `filters` indices are filter aims, the notrace ones follow.
pub fn split_reached(reached: &[u32], filters: usize) -> (Vec<u32>, Vec<u32>) {
    let n = filters as u32;
    let (filter, notrace): (Vec<u32>, Vec<u32>) = reached.iter().partition(|&&i| i < n);
    (filter, notrace.into_iter().map(|i| i - n).collect())
}

/// Counts aim `aim` among `hits` (sorted, each once).
fn hit(hits: &mut Vec<u32>, aim: u32) {
    if let Err(i) = hits.binary_search(&aim) {
        hits.insert(i, aim);
    }
}

fn reached<'a>(addrs: &'a [u64], hits: &'a [u64]) -> impl Iterator<Item = u64> + 'a {
    addrs
        .iter()
        .zip(hits)
        .filter(|(_, &h)| h > 0)
        .map(|(&a, _)| a)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A moved kernel's functions are looked up where the symbols have them.
    #[test]
    fn a_moved_kernels_functions_are_found_where_its_symbols_are() {
        static MOVED: crate::kaslr::KernelShift = crate::kaslr::KernelShift::new();
        MOVED.set(0x1000, 0x2000, 0x10_0000);
        let mut gates = Gates::new(vec![0x1800], Vec::new(), 8).with_shift(&MOVED);
        assert!(gates.may_open(0x10_1800) && !gates.may_open(0x10_1804));
        gates.enter(0, 0x10_1800);
        assert_eq!(gates.filter_reached().collect::<Vec<_>>(), [0x1800]);
    }

    #[test]
    fn a_filter_writes_its_subtree_from_depth_zero() {
        let mut g = Gates::new(vec![0x200], vec![], 2);
        assert_eq!(g.window(0), Place::Filtered);
        g.enter(1, 0x200);
        assert_eq!(g.window(1), Place::Written(0));
        assert_eq!(g.window(2), Place::Written(1));
        assert_eq!(g.window(3), Place::TooDeep);
        assert_eq!(g.marker_depth(2), Some(1));
        // A nested entry of the same function keeps the outer root.
        g.enter(2, 0x200);
        g.left(2);
        assert_eq!(g.window(1), Place::Written(0));
        g.left(1);
        assert_eq!(g.window(1), Place::Filtered);
        assert_eq!(g.marker_depth(1), None);
        assert_eq!(g.filter_reached().collect::<Vec<_>>(), vec![0x200]);
    }

    #[test]
    fn a_deferred_context_writes_every_frame_at_its_depth_but_notrace_subtrees() {
        let mut g = Gates::new(vec![0x200], vec![0x300], 1);
        g.defer();
        assert!(!g.outside() && g.outer_written());
        assert_eq!(g.window(3), Place::Written(3));
        assert_eq!(g.marker_depth(3), Some(3));
        g.enter(2, 0x300);
        assert_eq!(g.window(2), Place::Filtered);
        assert_eq!(g.marker_depth(3), None);
        g.left(2);
        assert_eq!(g.window(2), Place::Written(2));
        g.reset();
        assert!(g.outside());
        assert_eq!(g.window(0), Place::Filtered);
    }

    /// A library's filter function, placed after the context started and moved when the
    /// library is mapped elsewhere: outside every subtree until then, a subtree where it is
    /// placed, none where it was.
    #[test]
    fn late_functions_open_subtrees_where_they_are_placed_now() {
        static LATE: Late = Late::new();
        let mut g = Gates::new(vec![], vec![0x300], 8).with_late(&LATE, true);
        assert!(g.outside() && !g.may_open(0x7000));
        assert_eq!(g.window(0), Place::Filtered);
        LATE.replace(LateList {
            filter: vec![((0, 0x7000), 4)],
            notrace: vec![((0, 0x7100), 9)],
        });
        assert!(!g.may_open(0x7000), "taken at the next refresh");
        g.refresh();
        assert!(g.may_open(0x7000) && g.may_open(0x7100) && g.may_open(0x300));
        g.enter(2, 0x7000);
        assert_eq!(g.window(3), Place::Written(1));
        g.enter(4, 0x7100);
        assert_eq!(g.window(4), Place::Filtered);
        g.left(2);
        assert!(g.outside());
        // The library unmapped and mapped again elsewhere.
        LATE.replace(LateList {
            filter: vec![((0, 0x9000), 4)],
            notrace: Vec::new(),
        });
        g.refresh();
        assert!(!g.may_open(0x7000) && g.may_open(0x9000));
        assert_eq!(g.late_reached(), [4, 9]);
        // Given functions placed later (a PIE's) keep the late ones and the depth limit.
        let g = g.with_given(vec![0x500], vec![]);
        assert!(g.may_open(0x9000) && g.may_open(0x500) && !g.may_open(0x300));
    }

    /// System mode: a guest file's filter function, mapped at 0x7000 by process space 3
    /// and at 0x9000 by space 5. Another process's function at 0x7000 (space 4) opens
    /// nothing; the vCPU's space decides, as it changes.
    #[test]
    fn late_functions_open_subtrees_only_in_the_space_that_maps_them_there() {
        static LATE: Late = Late::new();
        let mut g = Gates::new(vec![], vec![], 8).with_late(&LATE, true);
        LATE.replace(LateList {
            filter: vec![((5, 0x9000), 0), ((3, 0x7000), 0)],
            notrace: Vec::new(),
        });
        g.refresh();
        g.set_space(4);
        assert!(!g.may_open(0x7000) && !g.may_open(0x9000));
        g.enter(1, 0x7000);
        assert!(g.outside() && g.late_reached().is_empty());
        g.set_space(3);
        assert!(g.may_open(0x7000) && !g.may_open(0x9000));
        g.enter(1, 0x7000);
        assert_eq!(g.window(2), Place::Written(1));
        g.left(1);
        g.set_space(5);
        assert!(g.may_open(0x9000) && !g.may_open(0x7000));
        // Given functions placed later keep the space.
        let g = g.with_given(vec![0x500], vec![]);
        assert!(g.may_open(0x9000) && g.may_open(0x500));
    }

    #[test]
    fn notrace_wins_inside_a_filter() {
        let mut g = Gates::new(vec![0x200], vec![0x300], 100);
        g.enter(0, 0x200);
        g.enter(3, 0x300);
        assert_eq!(g.window(2), Place::Written(2));
        assert_eq!(g.window(3), Place::Filtered);
        g.enter(4, 0x200);
        assert_eq!(g.window(4), Place::Filtered);
        g.left(3);
        assert_eq!(g.window(3), Place::Written(3));
        assert!(g.notrace_reached().eq([0x300]));
    }
}
