//! Between the run and the data directory's assembly: the frames the engine could not see,
//! spliced into each task's stream in one pass per task file. Two kinds of place have them:
//!
//! - **the task's start**, in a run from a snapshot (`super::recover`): the calls open when the
//!   run began, written first and ended by a `qemu:unwound` event;
//! - **each resync marker** (`super::resync`): where a return matched no open frame in code
//!   without frame records, or where tracing was switched on, the engine closed every frame and
//!   wrote a marker naming a cookie; the marker is replaced by the frames the cookie unwound
//!   to, ended by `qemu:unwound` (`qemu:opened` at a switch on), or by a LOST record where
//!   nothing unwound.
//!
//! Between those places the records move beneath the frames still open, and returns past the
//! bottom close them (`super::beneath`). A switch off closes them all. A window switched on
//! under `-F`/`-N` is filtered here once its open frames are known (`super::window_gates`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use qemu_uftrace_format::cookie;
use qemu_uftrace_format::events::{OPENED, TRACE_OFF, TRACE_ON};
use qemu_uftrace_format::record::{Record, RecordType};

use super::beneath::{self, rec, Beneath, Pushed, Rewriter, UNWOUND_EVENT};
use super::recover::{Recovered, Start, Starts};
use super::resync::{ResyncFrames, Resyncs};
use super::window_gates::{Gates, Window};
use crate::unwind::{self, Frame, Image, Method};

/// Splices the frames of `starts` and `resyncs` into the task files of `dir`, each file in
/// one pass (as many at once as there are cores), then removes their cookie files. What each
/// kind came to, for the summary (`None`: the run saved no cookie of that kind).
pub fn splice(
    dir: &Path,
    mut starts: Option<Starts>,
    mut resyncs: Option<ResyncFrames>,
    gates: Option<&Gates<'_>>,
) -> Result<(Option<Recovered>, Option<Resyncs>)> {
    if starts.is_none() && resyncs.is_none() {
        return Ok((None, None));
    }
    let began = Instant::now();
    let no_resyncs = BTreeMap::new();
    let none_of_task = BTreeMap::new();
    let resync_frames = resyncs.as_ref().map_or(&no_resyncs, |r| &r.by_task);
    let mut tids: Vec<u32> = (starts.iter().flat_map(|s| s.by_task.keys()))
        .chain(resync_frames.keys())
        .copied()
        .collect();
    tids.sort_unstable();
    tids.dedup();
    // The largest files first: the last one taken is then a small one.
    let size = |tid: &u32| std::fs::metadata(dat(dir, *tid)).map_or(0, |m| m.len());
    tids.sort_by_key(|t| std::cmp::Reverse(size(t)));
    let no_images: &[Image] = &[];
    let start_images = starts.as_ref().map_or(no_images, |s| s.images);
    let task = |tid: u32| -> (u32, Result<Counts>) {
        let mut pass = Splice::new(
            tid,
            starts.as_ref().and_then(|s| s.by_task.get(&tid)),
            start_images,
            resync_frames.get(&tid).unwrap_or(&none_of_task),
            gates,
        );
        let done = beneath::rewrite_file(&dat(dir, tid), &mut pass).map(|()| pass.counts);
        (tid, done)
    };
    let mut done: Vec<(u32, Result<Counts>)> =
        crate::cores::share(&tids, |tids| tids.map(|&tid| task(tid)).collect::<Vec<_>>())
            .into_iter()
            .flat_map(|r| r.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect();
    done.sort_by_key(|(tid, _)| *tid);

    let mut recovered = starts.as_mut().map(|s| std::mem::take(&mut s.recovered));
    let mut resynced = resyncs.as_mut().map(|r| std::mem::take(&mut r.resyncs));
    for (tid, counts) in done {
        let had_start = starts
            .as_ref()
            .is_some_and(|s| s.by_task.contains_key(&tid));
        match counts {
            Ok(c) => {
                if let (Some(r), true) = (&mut recovered, had_start) {
                    r.tasks += 1;
                    r.matched += c.matched;
                    r.unmatched += c.unmatched;
                }
                if let Some(r) = &mut resynced {
                    r.unwound += c.unwound;
                    r.guessed += c.guessed;
                    r.switched |= c.switched;
                    for (m, n) in c.by_method {
                        *r.by_method.entry(m).or_default() += n;
                    }
                }
            }
            Err(e) => {
                // A task is here for its start or for its resyncs.
                let problems = match had_start {
                    true => recovered.as_mut().map(|r| &mut r.problems),
                    false => resynced.as_mut().map(|r| &mut r.problems),
                };
                problems
                    .into_iter()
                    .for_each(|p| p.push(format!("task {tid}: {e:#}")));
            }
        }
    }
    let cookies: Vec<&PathBuf> = (starts.iter().flat_map(|s| &s.cookies))
        .chain(resyncs.iter().flat_map(|r| &r.cookies))
        .collect();
    for path in cookies {
        std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    let unwound = |by: &BTreeMap<Method, usize>| by.values().sum::<usize>() > 0;
    if recovered.as_ref().is_some_and(|r| unwound(&r.by_method))
        || resynced
            .as_ref()
            .is_some_and(|r| unwound(&r.by_method) || r.switched)
    {
        // Every name: a switch's window edges may be here too.
        crate::symfiles::write_with(&dir.join("events.txt"), |w| {
            qemu_uftrace_format::events::write_events(w, qemu_uftrace_format::events::QEMU_EVENTS)
        })?;
    }
    if let Some(r) = &mut recovered {
        r.elapsed += began.elapsed();
    }
    Ok((recovered, resynced))
}

fn dat(dir: &Path, tid: u32) -> PathBuf {
    dir.join(format!("{tid}.dat"))
}

/// What one task's pass did.
#[derive(Debug, Default)]
struct Counts {
    /// Returns past the start's frames that closed one, and that matched none.
    matched: u64,
    unmatched: u64,
    /// Returns past the bottom left out where no marker came before them in the stream.
    dangling: u64,
    /// Resync markers whose cookie unwound to open frames, and to nothing.
    unwound: usize,
    guessed: usize,
    /// The resyncs' frames, by how their return address was found.
    by_method: BTreeMap<Method, usize>,
    /// Tracing was switched on or off in this task's stream.
    switched: bool,
}

/// Which frames are beneath the engine's records now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The start's: a return past them that matches none is a LOST record, unless the task
    /// began under tracing (its first return goes into its entry code).
    Start,
    /// A resync's: where nothing unwound, the LOST record at the marker said so already.
    Resync,
}

/// One task's records, record by record: the start's frames opened at the first, each
/// marker replaced by its cookie's frames.
struct Splice<'a> {
    start: Option<&'a Start>,
    /// The images the start's frames were unwound with (is a return the first of a fresh
    /// task?).
    start_images: &'a [Image],
    cookies: &'a BTreeMap<u32, Vec<Frame>>,
    /// Whether the first record was seen (the start's frames open before it).
    begun: bool,
    beneath: Option<(Beneath<'a>, Place)>,
    /// Tracing was switched on just before (`qemu:trace_on`): the next marker's frames are
    /// the ones open at the switch (`qemu:opened`).
    switched_on: bool,
    /// `-F`/`-N`, and the window they filter now (from a switch on's marker to the off
    /// edge).
    gates: Option<&'a Gates<'a>>,
    window: Option<Window<'a>>,
    /// The task these records are of.
    tid: u32,
    /// A record's output before the window filters it.
    raw: Vec<Record>,
    /// Frames the engine's records hold open where nothing is beneath them.
    open: u16,
    counts: Counts,
}

impl<'a> Splice<'a> {
    fn new(
        tid: u32,
        start: Option<&'a Start>,
        start_images: &'a [Image],
        cookies: &'a BTreeMap<u32, Vec<Frame>>,
        gates: Option<&'a Gates<'a>>,
    ) -> Self {
        Splice {
            tid,
            start,
            start_images,
            cookies,
            begun: false,
            beneath: None,
            switched_on: false,
            gates,
            window: None,
            raw: Vec::new(),
            open: 0,
            counts: Counts::default(),
        }
    }

    /// The start's frames, opened at `time` (the first record's, or the capture's if
    /// earlier).
    fn begin(&mut self, time: u64, out: &mut Vec<Record>) {
        self.begun = true;
        if let Some(s) = self.start {
            let b = Beneath::open(&s.frames, time.min(s.capture), out);
            self.beneath = Some((b, Place::Start));
        }
    }

    /// One record in, the frames put in place.
    fn splice(&mut self, r: Record, out: &mut Vec<Record>) {
        if !self.begun {
            self.begin(r.time, out);
        }
        let event = |addr| r.kind == RecordType::Event && r.addr == addr;
        // Tracing switched off: the engine closed its frames just before; the ones beneath
        // close here too, and the event stands at the bottom.
        if event(TRACE_OFF) {
            if let Some((b, _)) = &mut self.beneath {
                b.close_all(r.time, out);
            }
            self.beneath = None;
            self.open = 0;
            self.switched_on = false;
            self.counts.switched = true;
            out.push(rec(r.time, r.kind, 0, r.addr));
            return;
        }
        if event(TRACE_ON) {
            self.switched_on = true;
            self.counts.switched = true;
        }
        let marker = (r.kind == RecordType::Event)
            .then(|| cookie::resync_seq_of_marker(r.addr))
            .flatten();
        if let Some(seq) = marker {
            // The engine closed its frames here: the frames beneath still open close too,
            // and this marker's open.
            if let Some((b, _)) = &mut self.beneath {
                b.close_all(r.time, out);
            }
            let frames = self.cookies.get(&seq).map_or(&[][..], Vec::as_slice);
            for f in frames {
                *self.counts.by_method.entry(f.method).or_default() += 1;
            }
            if frames.is_empty() {
                self.counts.guessed += 1;
                out.push(rec(r.time, RecordType::Lost, 0, 0));
            } else {
                self.counts.unwound += 1;
            }
            let label = if std::mem::take(&mut self.switched_on) {
                self.window = self.gates.map(|g| Window::new(g, self.tid, r.time));
                OPENED
            } else {
                UNWOUND_EVENT
            };
            let b = Beneath::open_marked(frames, r.time, out, label);
            self.beneath = Some((b, Place::Resync));
            return;
        }
        let Some((b, place)) = &mut self.beneath else {
            match r.kind {
                RecordType::Entry => self.open = r.depth.saturating_add(1),
                // A return past the bottom whose marker is not in the stream: a
                // `--keep-last` or `--start-at` window began after it (the engine writes
                // such returns only after a marker). It closes nothing here, as a return
                // past everything a marker's cookie showed closes nothing (below).
                RecordType::Exit if self.open == 0 => {
                    self.counts.dangling += 1;
                    return;
                }
                RecordType::Exit => self.open = r.depth,
                _ => {}
            }
            out.push(r);
            return;
        };
        match (b.push(r, out), *place) {
            (Pushed::Moved, _) => {}
            (Pushed::Matched, Place::Start) => self.counts.matched += 1,
            (Pushed::Matched, Place::Resync) => {}
            (Pushed::Unmatched, Place::Start) if fresh(self.start, self.start_images, r.addr) => {}
            (Pushed::Unmatched, Place::Start) => {
                out.push(rec(r.time, RecordType::Lost, b.depth(), 0));
                self.counts.unmatched += 1;
            }
            // A return past everything the cookie showed: what it closes is not known.
            (Pushed::Unmatched, Place::Resync) if b.any() => {
                out.push(rec(r.time, RecordType::Lost, b.depth(), 0));
            }
            (Pushed::Unmatched, Place::Resync) => {}
        }
    }
}

/// Whether a return past the bottom to `target` is a fresh task's first: one whose `start`
/// unwound to nothing open began under tracing (created after the start, found at its first
/// switch), and its first "return" goes into its entry code, after no call, closing nothing.
/// Asked only of such returns: it reads the code before `target`.
fn fresh(start: Option<&Start>, images: &[Image], target: u64) -> bool {
    start.is_some_and(|s| {
        s.frames.is_empty() && (s.arch).is_some_and(|a| !unwind::follows_call(a, images, target))
    })
}

impl Rewriter for Splice<'_> {
    fn push(&mut self, r: Record, out: &mut Vec<Record>) {
        let off = r.kind == RecordType::Event && r.addr == TRACE_OFF;
        // Straight out, but what comes while a filtered window is open (opened by this
        // record's marker too) goes through it.
        let start = out.len();
        self.splice(r, out);
        if let Some(w) = &mut self.window {
            self.raw.extend(out.drain(start..));
            self.raw.drain(..).for_each(|x| w.push(x, out));
        }
        if off {
            self.window = None;
        }
    }

    fn finish(&mut self, out: &mut Vec<Record>) {
        // A task that recorded nothing after the start still had its frames open.
        if !self.begun {
            if let Some(s) = self.start {
                self.begin(s.capture, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::beneath::testing::{drawn, frame, r};
    use qemu_uftrace_format::{record, Arch};
    use RecordType::*;

    /// One task's pass over records in memory: the records out, and what it counted.
    fn run(
        records: &[Record],
        start: Option<&Start>,
        cookies: &BTreeMap<u32, Vec<Frame>>,
    ) -> (Vec<Record>, Counts) {
        let mut pass = Splice::new(1, start, &[], cookies, None);
        let mut out = Vec::new();
        for x in records {
            pass.push(*x, &mut out);
        }
        pass.finish(&mut out);
        (out, pass.counts)
    }

    fn start(frames: Vec<Frame>, capture: u64) -> Start {
        Start {
            frames,
            capture,
            arch: None,
        }
    }

    #[test]
    fn the_starts_frames_open_the_stream_and_returns_close_them_in_order() {
        // main (0x100) > a (0x200) > leaf (0x300), stopped in the leaf; the leaf returns
        // into a (0x210), a calls b (0x400) and returns into main (0x110), main returns.
        let s = start(
            vec![frame(0x100, 0x50), frame(0x200, 0x110), frame(0x300, 0x210)],
            5,
        );
        let recorded = [
            r(10, Exit, 0, 0x210),
            r(20, Entry, 0, 0x400),
            r(30, Exit, 0, 0x400),
            r(40, Exit, 0, 0x110),
            r(50, Entry, 0, 0x500),
            r(60, Exit, 0, 0x500),
        ];
        let (out, c) = run(&recorded, Some(&s), &BTreeMap::new());
        assert_eq!((c.matched, c.unmatched), (2, 0));
        assert_eq!(
            drawn(&out),
            [
                (5, Entry, 0, 0x100),
                (5, Entry, 1, 0x200),
                (5, Entry, 2, 0x300),
                (5, Event, 3, UNWOUND_EVENT),
                (10, Exit, 2, 0x300),
                (20, Entry, 2, 0x400),
                (30, Exit, 2, 0x400),
                (40, Exit, 1, 0x200),
                (50, Entry, 1, 0x500),
                (60, Exit, 1, 0x500),
            ]
        );
    }

    #[test]
    fn a_handlers_return_into_its_trampoline_ends_the_recovered_delivery() {
        // work (0x200) interrupted by SIGALRM, whose handler (0x300) returns into the
        // trampoline (0x600); work then calls 0x400 at its own depth and returns (0x110).
        let sig = qemu_uftrace_format::pseudo::signal_addr(14);
        let s = start(
            vec![
                frame(0x200, 0x110),
                Frame {
                    func: sig,
                    ret_addr: 0,
                    method: Method::Signal,
                },
                frame(0x300, 0x600),
            ],
            5,
        );
        let recorded = [
            r(10, Exit, 0, 0x600),
            r(20, Entry, 0, 0x400),
            r(30, Exit, 0, 0x400),
            r(40, Exit, 0, 0x110),
        ];
        let (out, c) = run(&recorded, Some(&s), &BTreeMap::new());
        assert_eq!((c.matched, c.unmatched), (2, 0));
        let got: Vec<_> = out.iter().map(|x| (x.time, x.kind, x.depth)).collect();
        assert_eq!(
            got,
            [
                (5, Entry, 0),
                (5, Entry, 1),
                (5, Entry, 2),
                (5, Event, 3),
                (10, Exit, 2),
                (10, Exit, 1),
                (20, Entry, 1),
                (30, Exit, 1),
                (40, Exit, 0),
            ]
        );
        assert_eq!(out[5].addr, qemu_uftrace_format::addr48(sig));
    }

    /// A `--keep-last` window that began after a resync's marker (PID 1 switched out on its
    /// way back from its first exec): the frames open at the window's start, closed, then the
    /// engine's return past the bottom to the new program, which closes nothing here (it
    /// was left to the marker's frames, outside the window): left out, as a return past
    /// every frame a marker showed is.
    #[test]
    fn a_return_past_the_bottom_without_its_marker_is_left_out() {
        let opened = qemu_uftrace_format::events::OPENED;
        let recorded = [
            r(1, Entry, 0, 0x800),
            r(2, Entry, 1, 0x810),
            r(3, Event, 2, opened),
            r(4, Exit, 1, 0x810),
            r(5, Exit, 0, 0x800),
            r(6, Entry, 0, 0x820),
            r(7, Exit, 0, 0x820),
            r(7, Exit, 0, 0x40_06c0),
            r(8, Entry, 0, 0x40_0700),
            r(9, Exit, 0, 0x40_0700),
        ];
        let (out, c) = run(&recorded, None, &BTreeMap::new());
        let mut want = recorded.to_vec();
        want.remove(7);
        assert_eq!(out, want);
        assert_eq!((c.dangling, c.matched, c.unmatched), (1, 0, 0));
    }

    #[test]
    fn a_fresh_tasks_first_return_into_its_entry_code_closes_nothing() {
        // A task created after the start, found at its first switch: nothing was open, and
        // its switch returns into its entry code (not after a call; no image holds code
        // there, so none follows a call).
        let s = Start {
            frames: Vec::new(),
            capture: 5,
            arch: Some(Arch::Aarch64),
        };
        let recorded = [r(10, Exit, 0, 0x999), r(20, Entry, 0, 0x400)];
        let (out, c) = run(&recorded, Some(&s), &BTreeMap::new());
        assert_eq!((c.matched, c.unmatched), (0, 0));
        assert_eq!(out, [r(20, Entry, 0, 0x400)]);
    }

    #[test]
    fn a_starts_return_matching_nothing_is_a_lost_mark() {
        let s = start(Vec::new(), 5);
        let (out, c) = run(&[r(10, Exit, 0, 0x999)], Some(&s), &BTreeMap::new());
        assert_eq!((c.matched, c.unmatched), (0, 1));
        assert_eq!(out, [r(10, Lost, 0, 0)]);
    }

    #[test]
    fn a_task_that_recorded_nothing_still_has_its_starts_frames() {
        let s = start(vec![frame(0x100, 0x50)], 5);
        let (out, _) = run(&[], Some(&s), &BTreeMap::new());
        assert_eq!(
            drawn(&out),
            [(5, Entry, 0, 0x100), (5, Event, 1, UNWOUND_EVENT)]
        );
    }

    #[test]
    fn a_resync_after_the_start_closes_its_frames_and_opens_its_own_in_the_same_pass() {
        // The start's frames, then a resync (every frame closed, a marker): the marker's
        // frames open and the return past them closes them.
        let s = start(vec![frame(0x100, 0x50), frame(0x200, 0x110)], 5);
        let cookies = BTreeMap::from([(0, vec![frame(0x600, 0x5f0)])]);
        let recorded = [
            r(10, Entry, 0, 0x400),
            r(20, Exit, 0, 0x400),
            r(30, Event, 0, cookie::resync_marker(0)),
            r(40, Exit, 0, 0x5f0),
        ];
        let (out, c) = run(&recorded, Some(&s), &cookies);
        assert_eq!((c.matched, c.unmatched, c.unwound), (0, 0, 1));
        assert_eq!(
            drawn(&out),
            [
                (5, Entry, 0, 0x100),
                (5, Entry, 1, 0x200),
                (5, Event, 2, UNWOUND_EVENT),
                (10, Entry, 2, 0x400),
                (20, Exit, 2, 0x400),
                (30, Exit, 1, 0x200),
                (30, Exit, 0, 0x100),
                (30, Entry, 0, 0x600),
                (30, Event, 1, UNWOUND_EVENT),
                (40, Exit, 0, 0x600),
            ]
        );
    }

    #[test]
    fn a_switch_off_closes_the_starts_frames_and_a_switch_on_opens_what_was_open_then() {
        // From a snapshot, tracing on: the start's frames close at the switch off (as the
        // engine's own do), and the switch on's cookie opens the frames open then.
        let s = start(vec![frame(0x100, 0x50)], 5);
        let cookies = BTreeMap::from([(3, vec![frame(0x700, 0x6f0)])]);
        let recorded = [
            r(10, Entry, 0, 0x400),
            r(11, Exit, 0, 0x400),
            r(12, Event, 0, TRACE_OFF),
            r(50, Event, 0, TRACE_ON),
            r(50, Event, 0, cookie::resync_marker(3)),
            r(60, Exit, 0, 0x6f0),
        ];
        let (out, c) = run(&recorded, Some(&s), &cookies);
        assert!(c.switched);
        assert_eq!(
            drawn(&out),
            [
                (5, Entry, 0, 0x100),
                (5, Event, 1, UNWOUND_EVENT),
                (10, Entry, 1, 0x400),
                (11, Exit, 1, 0x400),
                (12, Exit, 0, 0x100),
                (12, Event, 0, TRACE_OFF),
                (50, Event, 0, TRACE_ON),
                (50, Entry, 0, 0x700),
                (50, Event, 1, OPENED),
                (60, Exit, 0, 0x700),
            ]
        );
    }

    #[test]
    fn a_marker_opens_the_unwound_frames_and_returns_close_them() {
        // main (0x100) > resume (0x200) switch stacks; the landing is three calls deep on
        // the other stack: outer (0x500) > inner (0x600) > yield (0x700).
        let cookies = BTreeMap::from([(
            0,
            vec![
                frame(0x500, 0x4f0),
                frame(0x600, 0x510),
                frame(0x700, 0x610),
            ],
        )]);
        let m = cookie::resync_marker(0);
        let recorded = [
            r(1, Entry, 0, 0x100),
            r(2, Entry, 1, 0x200),
            r(3, Exit, 1, 0x200),
            r(3, Exit, 0, 0x100),
            r(3, Event, 0, m),
            r(4, Exit, 0, 0x610),
            r(5, Entry, 0, 0x800),
            r(6, Exit, 0, 0x800),
            r(7, Exit, 0, 0x510),
            r(8, Exit, 0, 0x4f0),
            r(9, Entry, 0, 0x900),
        ];
        let (out, c) = run(&recorded, None, &cookies);
        assert_eq!((c.unwound, c.guessed), (1, 0));
        assert_eq!(
            drawn(&out),
            [
                (1, Entry, 0, 0x100),
                (2, Entry, 1, 0x200),
                (3, Exit, 1, 0x200),
                (3, Exit, 0, 0x100),
                (3, Entry, 0, 0x500),
                (3, Entry, 1, 0x600),
                (3, Entry, 2, 0x700),
                (3, Event, 3, UNWOUND_EVENT),
                (4, Exit, 2, 0x700),
                (5, Entry, 2, 0x800),
                (6, Exit, 2, 0x800),
                (7, Exit, 1, 0x600),
                (8, Exit, 0, 0x500),
                (9, Entry, 0, 0x900),
            ]
        );
    }

    #[test]
    fn a_second_marker_closes_what_the_first_left_open() {
        let cookies = BTreeMap::from([
            (0, vec![frame(0x500, 0x4f0), frame(0x600, 0x510)]),
            (1, vec![frame(0x100, 0x50)]),
        ]);
        let recorded = [
            r(1, Event, 0, cookie::resync_marker(0)),
            r(2, Entry, 0, 0x800),
            r(3, Exit, 0, 0x800),
            r(4, Event, 0, cookie::resync_marker(1)),
            r(5, Exit, 0, 0x50),
        ];
        let (out, c) = run(&recorded, None, &cookies);
        assert_eq!(c.unwound, 2);
        assert_eq!(
            drawn(&out),
            [
                (1, Entry, 0, 0x500),
                (1, Entry, 1, 0x600),
                (1, Event, 2, UNWOUND_EVENT),
                (2, Entry, 2, 0x800),
                (3, Exit, 2, 0x800),
                (4, Exit, 1, 0x600),
                (4, Exit, 0, 0x500),
                (4, Entry, 0, 0x100),
                (4, Event, 1, UNWOUND_EVENT),
                (5, Exit, 0, 0x100),
            ]
        );
    }

    #[test]
    fn nothing_unwound_at_a_marker_is_the_guess_a_lost_record_marks() {
        // No tables (or no cookie): the LOST record the engine writes without a cookie, and
        // the returns past the bottom vanish as they do there.
        let recorded = [
            r(1, Entry, 0, 0x100),
            r(2, Exit, 0, 0x100),
            r(3, Event, 0, cookie::resync_marker(5)),
            r(4, Exit, 0, 0x610),
            r(5, Entry, 0, 0x800),
        ];
        let (out, c) = run(&recorded, None, &BTreeMap::new());
        assert_eq!((c.unwound, c.guessed), (0, 1));
        assert_eq!(
            out,
            [
                r(1, Entry, 0, 0x100),
                r(2, Exit, 0, 0x100),
                r(3, Lost, 0, 0),
                r(5, Entry, 0, 0x800),
            ]
        );
    }

    fn write_records(path: &Path, records: &[Record]) {
        let bytes: Vec<u8> = records
            .iter()
            .flat_map(|x| record::encode(x.time, x.kind, x.depth as u32, x.addr))
            .collect();
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn every_task_file_is_rewritten_once_and_the_cookies_go() {
        // Task 7 has a start and a resync, task 8 only a start, task 9 only a resync; a
        // torn last record is kept as it was.
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_records(
            &d.join("7.dat"),
            &[
                r(10, Exit, 0, 0x110),
                r(20, Event, 0, cookie::resync_marker(0)),
                r(30, Exit, 0, 0x5f0),
            ],
        );
        write_records(&d.join("8.dat"), &[r(10, Entry, 0, 0x400)]);
        let mut torn = std::fs::read(d.join("8.dat")).unwrap();
        torn.extend_from_slice(&[1, 2, 3]);
        std::fs::write(d.join("8.dat"), torn).unwrap();
        write_records(
            &d.join("9.dat"),
            &[
                r(1, Event, 0, cookie::resync_marker(2)),
                r(2, Exit, 0, 0x4f0),
            ],
        );
        let cookie_file = d.join("cookie");
        std::fs::write(&cookie_file, b"").unwrap();
        let starts = Starts {
            by_task: BTreeMap::from([
                (7, start(vec![frame(0x100, 0x50), frame(0x200, 0x110)], 5)),
                (8, start(vec![frame(0x300, 0x50)], 5)),
            ]),
            images: &[],
            recovered: Recovered::default(),
            cookies: vec![cookie_file.clone()],
        };
        let resyncs = ResyncFrames {
            by_task: BTreeMap::from([
                (7, BTreeMap::from([(0, vec![frame(0x600, 0x5f0)])])),
                (9, BTreeMap::from([(2, vec![frame(0x500, 0x4f0)])])),
            ]),
            resyncs: Resyncs::default(),
            cookies: Vec::new(),
        };
        let (recovered, resynced) = splice(d, Some(starts), Some(resyncs), None).unwrap();
        let (recovered, resynced) = (recovered.unwrap(), resynced.unwrap());
        assert_eq!((recovered.tasks, recovered.matched), (2, 1));
        assert_eq!((resynced.unwound, resynced.by_method[&Method::Cfi]), (2, 2));
        let back = |tid: u32| {
            let bytes = std::fs::read(d.join(format!("{tid}.dat"))).unwrap();
            let whole = bytes.len() - bytes.len() % record::RECORD_SIZE;
            (
                record::decode_all(&bytes[..whole]).unwrap(),
                bytes[whole..].to_vec(),
            )
        };
        assert_eq!(
            drawn(&back(7).0),
            [
                (5, Entry, 0, 0x100),
                (5, Entry, 1, 0x200),
                (5, Event, 2, UNWOUND_EVENT),
                (10, Exit, 1, 0x200),
                (20, Exit, 0, 0x100),
                (20, Entry, 0, 0x600),
                (20, Event, 1, UNWOUND_EVENT),
                (30, Exit, 0, 0x600),
            ]
        );
        let (eight, tail) = back(8);
        assert_eq!(
            drawn(&eight),
            [
                (5, Entry, 0, 0x300),
                (5, Event, 1, UNWOUND_EVENT),
                (10, Entry, 1, 0x400),
            ]
        );
        assert_eq!(tail, [1, 2, 3]);
        assert_eq!(
            drawn(&back(9).0),
            [
                (1, Entry, 0, 0x500),
                (1, Event, 1, UNWOUND_EVENT),
                (2, Exit, 0, 0x500),
            ]
        );
        assert!(!cookie_file.exists());
        assert!(d.join("events.txt").exists());
    }

    #[test]
    fn a_damaged_start_cookie_is_one_line_and_its_returns_are_lost_marks() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join(cookie::file_name(7)), b"QUSTACK\x01short").unwrap();
        write_records(
            &d.join("7.dat"),
            &[r(10, Exit, 0, 0x210), r(20, Entry, 0, 0x400)],
        );
        let images = crate::record::resync::Loaded::new(d, Vec::new());
        let starts = crate::record::recover::unwind_starts(d, &images).unwrap();
        let (recovered, resynced) = splice(d, starts, None, None).unwrap();
        let done = recovered.expect("a cookie was there");
        assert!(resynced.is_none());
        assert_eq!(done.problems.len(), 1, "{:?}", done.problems);
        assert!(
            done.problems[0].contains("truncated stack cookie"),
            "{:?}",
            done.problems
        );
        assert_eq!((done.frames(), done.unmatched), (0, 1));
        let back = record::decode_all(&std::fs::read(d.join("7.dat")).unwrap()).unwrap();
        assert_eq!(back, [r(10, Lost, 0, 0), r(20, Entry, 0, 0x400)]);
        assert!(!d.join(cookie::file_name(7)).exists());
        assert!(!d.join("events.txt").exists());
    }

    #[test]
    fn a_file_larger_than_the_read_buffer_is_rewritten_whole() {
        // 100,000 leaf calls (3 MiB, three reads), a marker half-way, a return past it.
        let dir = tempfile::tempdir().unwrap();
        let mut recorded = Vec::new();
        for i in 0..50_000u64 {
            recorded.push(r(2 * i, Entry, 0, 0x800));
            recorded.push(r(2 * i + 1, Exit, 0, 0x800));
        }
        recorded.push(r(100_000, Event, 0, cookie::resync_marker(0)));
        for i in 0..50_000u64 {
            recorded.push(r(100_001 + 2 * i, Entry, 0, 0x900));
            recorded.push(r(100_002 + 2 * i, Exit, 0, 0x900));
        }
        recorded.push(r(300_000, Exit, 0, 0x510));
        write_records(&dir.path().join("7.dat"), &recorded);
        let cookies = BTreeMap::from([(0, vec![frame(0x500, 0x4f0), frame(0x600, 0x510)])]);
        let resyncs = ResyncFrames {
            by_task: BTreeMap::from([(7, cookies.clone())]),
            resyncs: Resyncs::default(),
            cookies: Vec::new(),
        };
        splice(dir.path(), None, Some(resyncs), None).unwrap();
        let back = record::decode_all(&std::fs::read(dir.path().join("7.dat")).unwrap()).unwrap();
        let (want, _) = run(&recorded, None, &cookies);
        assert_eq!(back.len(), 200_000 + 4);
        assert_eq!(back, want);
        assert!(back[100_003..200_003]
            .iter()
            .all(|x| x.depth == 2 && x.addr == 0x900));
    }
}
