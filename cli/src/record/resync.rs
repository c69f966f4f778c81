//! Between the run and the data directory's assembly: the resyncs the plugin deferred.
//! Where a return matched no open frame and no frame record told the stack (code without
//! frame pointers), the plugin saved a stack cookie (`cookie::resync_file_name`) and the
//! engine closed every frame and wrote a marker naming the cookie
//! (`cookie::resync_marker`), then wrote returns past the bottom as exits to their targets
//! (`Engine::outer_return`). Here each cookie is unwound with the guest's own tables and its
//! marker replaced by the entries of the frames it shows open, followed by the
//! `qemu:unwound` event; the returns past the bottom close them, and every record after
//! moves down by the frames still open. Where nothing unwinds (no tables), a LOST record
//! takes the marker's place: the guess, as the engine writes it without a cookie.
//!
//! One streaming pass per task file that has cookies (`super::beneath`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result};
use qemu_uftrace_format::cookie;
use qemu_uftrace_format::record::{Record, RecordType};

use super::beneath::{self, rec, Beneath, Pushed, Rewriter, UNWOUND_EVENT};
use super::window_gates::{Gates, Window};
use crate::qemu::user_maps;
use crate::qemu::user_procs::{Kind, Proc};
use crate::unwind::{self, Image, Method};

/// What the resyncs came to, for the summary.
#[derive(Debug, Default)]
pub struct Resyncs {
    /// Resyncs whose cookie unwound to open frames.
    pub unwound: usize,
    /// Resyncs whose cookie unwound to nothing (no tables for the code): a LOST record each.
    pub guessed: usize,
    /// Frames recovered, by how their return address was found.
    pub by_method: BTreeMap<Method, usize>,
    /// One line per cookie or file that could not be used.
    pub problems: Vec<String>,
    /// Whether tracing was switched on while the guest ran (its edges are user events).
    pub switched: bool,
}

impl Resyncs {
    /// "2 places where the call stack was lost (…) were unwound after the run (5 frames: 5 by
    /// CFI); 1 could not be unwound (…)": what happened, in words a user reads without
    /// knowing what a resync is.
    pub fn describe(&self) -> String {
        let frames: usize = self.by_method.values().sum();
        let methods: Vec<String> = self
            .by_method
            .iter()
            .map(|(m, n)| format!("{n} by {}", m.name()))
            .collect();
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let were = |n: usize| if n == 1 { "was" } else { "were" };
        let places = |n: usize| {
            format!(
                "{n} place{} where the call stack was lost (a return that matched no call, in \
                 code without frame pointers)",
                plural(n)
            )
        };
        let mut parts = Vec::new();
        if self.unwound > 0 {
            parts.push(format!(
                "{} {} unwound after the run ({frames} frame{}: {})",
                places(self.unwound),
                were(self.unwound),
                plural(frames),
                methods.join(", ")
            ));
        }
        if self.guessed > 0 {
            let what = if self.unwound > 0 {
                self.guessed.to_string()
            } else {
                places(self.guessed)
            };
            parts.push(format!(
                "{what} could not be unwound, as no unwind table covers the code there: a LOST \
                 record in the replay marks each"
            ));
        }
        parts.join("; ")
    }
}

/// The files of one process image (user mode: the first program, or one a process exec'd
/// or forked) at their load biases, and the directory its plugin wrote its cookies into.
pub struct Loaded {
    pub dir: PathBuf,
    /// ELF files and their load biases (0: at their link addresses).
    pub files: Vec<(PathBuf, u64)>,
    /// `files` read for unwinding, by the first cookie that needs them (a resync's, or in
    /// system mode a run from a snapshot's), and one line for each that could not be.
    read: OnceLock<(Vec<Image>, Vec<String>)>,
}

impl Loaded {
    pub fn new(dir: &Path, files: Vec<(PathBuf, u64)>) -> Loaded {
        Loaded {
            dir: dir.to_path_buf(),
            files,
            read: OnceLock::new(),
        }
    }

    /// The files read for unwinding (the first call reads them); one line in `problems` for
    /// each that cannot be.
    pub fn unwind_images(&self, problems: &mut Vec<String>) -> &[Image] {
        let (images, failed) = self.read.get_or_init(|| {
            let mut failed = Vec::new();
            let mut images = Vec::new();
            for (path, bias) in &self.files {
                match Image::load_at(path, *bias) {
                    Ok(i) => images.push(i),
                    Err(e) => failed.push(format!("{e:#}: its frames are not unwound")),
                }
            }
            (images, failed)
        });
        problems.extend(failed.iter().cloned());
        images
    }
}

/// User mode: each process image's files where it loaded them (`plugin.maps`): the program
/// at its load bias, its dynamic loader, its shared libraries, its vDSO; a forked child's
/// program and vDSO are its parent's (its maps hold what it inherited). `program` is the
/// first one.
pub fn user_images(
    staging: &Path,
    program: &Path,
    sysroot: Option<&Path>,
    procs: &[Proc],
) -> Vec<Loaded> {
    let files = |dir: &Path, program: &Path, origin: &Path| {
        let maps = user_maps::read(dir)
            .unwrap_or_default()
            .with_vdso_from(origin);
        user_maps::sources(program, sysroot, &maps)
            .into_iter()
            .map(|s| (s.path, s.offset))
            .collect()
    };
    let mut out = vec![Loaded::new(staging, files(staging, program, staging))];
    for (i, p) in procs.iter().enumerate() {
        let origin = origin_of(procs, i).map(|j| &procs[j]);
        let exe = match origin.map(|o| &o.kind) {
            Some(Kind::Exec { exe }) => exe.as_path(),
            _ => program,
        };
        let from = origin.map_or(staging, |o| o.dir.as_path());
        out.push(Loaded::new(&p.dir, files(&p.dir, exe, from)));
    }
    out
}

/// The exec'd image whose program (and vDSO) `procs[i]` runs: itself, else its parent's
/// as it was at the fork (`None`: the first program's).
fn origin_of(procs: &[Proc], i: usize) -> Option<usize> {
    let mut i = i;
    // Each step goes to an earlier image: `procs` is in the order they began.
    loop {
        let p = &procs[i];
        match &p.kind {
            Kind::Exec { .. } => return Some(i),
            Kind::Fork { ppid } => {
                i = procs[..i]
                    .iter()
                    .rposition(|q| q.pid == *ppid && q.time <= p.time)?;
            }
        }
    }
}

/// Unwinds every resync cookie of `images` (each unwound with its own image's files) and
/// rewrites the tasks' files in `dir`. `None` when the run saved no resync cookie.
///
/// `gates` (`-F`/`-N`): each window switched on is filtered once its opened frames are
/// known (`super::window_gates`).
pub fn unwind_resyncs(
    dir: &Path,
    images: &[Loaded],
    gates: Option<&Gates>,
) -> Result<Option<Resyncs>> {
    // Cookie numbers are unique per task across process images (an exec'd image numbers
    // its own from its image index up: it appends to the same task file).
    let mut cookies: BTreeMap<u32, BTreeMap<u32, (PathBuf, usize)>> = BTreeMap::new();
    for (i, image) in images.iter().enumerate() {
        for (tid, files) in cookie_files(&image.dir)? {
            for (seq, path) in files {
                cookies.entry(tid).or_default().insert(seq, (path, i));
            }
        }
    }
    if cookies.is_empty() {
        return Ok(None);
    }
    let mut done = Resyncs::default();
    // Each image's files taken once, at its first cookie.
    let mut loaded: Vec<Option<&[Image]>> = images.iter().map(|_| None).collect();
    for (tid, files) in cookies {
        let mut frames = BTreeMap::new();
        for (seq, (path, i)) in &files {
            let files =
                *loaded[*i].get_or_insert_with(|| images[*i].unwind_images(&mut done.problems));
            match beneath::unwind_cookie(path, files).map(|(f, _)| f) {
                Ok(f) => {
                    frames.insert(*seq, f);
                }
                Err(e) => done.problems.push(format!("task {tid}: {e:#}")),
            }
        }
        let dat = dir.join(format!("{tid}.dat"));
        match rewrite_file(&dat, &frames, &mut done, gates) {
            Ok(()) => {}
            Err(e) => done.problems.push(format!("task {tid}: {e:#}")),
        }
        for (path, _) in files.values() {
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    if done.by_method.values().sum::<usize>() > 0 || done.switched {
        let path = dir.join("events.txt");
        crate::symfiles::write_with(&path, |w| {
            // Every name: a switch's window edges may be here too.
            qemu_uftrace_format::events::write_events(w, qemu_uftrace_format::events::QEMU_EVENTS)
        })?;
    }
    Ok(Some(done))
}

/// The resync cookie files of `dir`, by task and number.
fn cookie_files(dir: &Path) -> Result<BTreeMap<u32, BTreeMap<u32, PathBuf>>> {
    let mut out: BTreeMap<u32, BTreeMap<u32, PathBuf>> = BTreeMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // A process image that ended before it wrote anything.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name();
        if let Some((tid, seq)) = name.to_str().and_then(cookie::resync_of) {
            out.entry(tid).or_default().insert(seq, entry.path());
        }
    }
    Ok(out)
}

/// Rewrites task file `dat` in one pass: each marker replaced by its cookie's frames.
fn rewrite_file(
    dat: &Path,
    frames: &BTreeMap<u32, Vec<unwind::Frame>>,
    done: &mut Resyncs,
    gates: Option<&Gates>,
) -> Result<()> {
    let mut state = Rewrite::new(frames);
    state.gates = gates;
    beneath::rewrite_file(dat, &mut state)?;
    done.unwound += state.unwound;
    done.guessed += state.guessed;
    done.switched |= state.switched;
    for (m, n) in state.by_method {
        *done.by_method.entry(m).or_default() += n;
    }
    Ok(())
}

/// The rewriting of one task's records, record by record.
struct Rewrite<'a> {
    cookies: &'a BTreeMap<u32, Vec<unwind::Frame>>,
    /// The frames the last marker opened (none before the first marker: records pass
    /// unchanged).
    beneath: Option<Beneath<'a>>,
    unwound: usize,
    guessed: usize,
    by_method: BTreeMap<Method, usize>,
    /// Tracing was switched on just before (`qemu:trace_on`): the next marker's frames are
    /// the ones open at the switch (`qemu:opened`).
    switched_on: bool,
    switched: bool,
    /// `-F`/`-N`, and the window they filter now (from a switch on's marker to the off
    /// edge).
    gates: Option<&'a Gates>,
    window: Option<Window<'a>>,
    /// A record's output before the window filters it.
    raw: Vec<Record>,
}

impl<'a> Rewrite<'a> {
    fn new(cookies: &'a BTreeMap<u32, Vec<unwind::Frame>>) -> Self {
        Rewrite {
            cookies,
            beneath: None,
            unwound: 0,
            guessed: 0,
            by_method: BTreeMap::new(),
            switched_on: false,
            switched: false,
            gates: None,
            window: None,
            raw: Vec::new(),
        }
    }
}

impl Rewriter for Rewrite<'_> {
    fn push(&mut self, r: Record, out: &mut Vec<Record>) {
        let off = r.kind == RecordType::Event && r.addr == qemu_uftrace_format::events::TRACE_OFF;
        // Straight out, but what comes while a filtered window is open (opened by this
        // record's marker too) goes through it.
        let start = out.len();
        self.unwind(r, out);
        if let Some(w) = &mut self.window {
            self.raw.extend(out.drain(start..));
            self.raw.drain(..).for_each(|x| w.push(x, out));
        }
        if off {
            self.window = None;
        }
    }
}

impl Rewrite<'_> {
    /// One record in, the frames unwound at its marker put in place.
    fn unwind(&mut self, r: Record, out: &mut Vec<Record>) {
        // Tracing switched off: the engine closed its frames just before; the unwound ones
        // beneath close here too, and the event stands at the bottom.
        if r.kind == RecordType::Event && r.addr == qemu_uftrace_format::events::TRACE_OFF {
            if let Some(b) = &mut self.beneath {
                b.close_all(r.time, out);
            }
            self.beneath = None;
            self.switched_on = false;
            self.switched = true;
            out.push(rec(r.time, r.kind, 0, r.addr));
            return;
        }
        if r.kind == RecordType::Event && r.addr == qemu_uftrace_format::events::TRACE_ON {
            self.switched_on = true;
            self.switched = true;
        }
        let marker = (r.kind == RecordType::Event)
            .then(|| cookie::resync_seq_of_marker(r.addr))
            .flatten();
        if let Some(seq) = marker {
            // The engine closed its frames here: the unwound frames of an earlier resync
            // still open close too, and this one's open.
            if let Some(b) = &mut self.beneath {
                b.close_all(r.time, out);
            }
            let frames = self.cookies.get(&seq).map_or(&[][..], Vec::as_slice);
            for f in frames {
                *self.by_method.entry(f.method).or_default() += 1;
            }
            if frames.is_empty() {
                self.guessed += 1;
                out.push(rec(r.time, RecordType::Lost, 0, 0));
            } else {
                self.unwound += 1;
            }
            let label = if std::mem::take(&mut self.switched_on) {
                self.window = self.gates.map(Window::new);
                qemu_uftrace_format::events::OPENED
            } else {
                UNWOUND_EVENT
            };
            self.beneath = Some(Beneath::open_marked(frames, r.time, out, label));
            return;
        }
        let Some(b) = &mut self.beneath else {
            out.push(r);
            return;
        };
        // A return past everything the cookie showed: what it closes is not known. (Nothing
        // unwound: the LOST record at the marker said so already.)
        if b.push(r, out) == Pushed::Unmatched && b.any() {
            out.push(rec(r.time, RecordType::Lost, b.depth(), 0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::beneath::testing::{drawn, frame, r};
    use crate::unwind::Frame;
    use qemu_uftrace_format::record;
    use RecordType::*;

    fn run(records: &[Record], cookies: &BTreeMap<u32, Vec<Frame>>) -> (Vec<Record>, usize, usize) {
        let mut w = Rewrite::new(cookies);
        let mut out = Vec::new();
        for x in records {
            w.push(*x, &mut out);
        }
        (out, w.unwound, w.guessed)
    }

    #[test]
    fn an_image_runs_what_it_execd_or_what_its_parent_ran() {
        let proc = |pid: u32, n: u32, time: u64, kind: Kind| Proc {
            dir: PathBuf::from(format!("procs/{pid}.{n}")),
            pid,
            time,
            kind,
        };
        let exec = |exe: &str| Kind::Exec {
            exe: PathBuf::from(exe),
        };
        // The first program (pid 10) forks 11, which execs /b and forks 12; 12 forks 13;
        // 10 execs /c after, then forks 14.
        let procs = [
            proc(11, 0, 1, Kind::Fork { ppid: 10 }),
            proc(11, 1, 2, exec("/b")),
            proc(12, 0, 3, Kind::Fork { ppid: 11 }),
            proc(13, 0, 4, Kind::Fork { ppid: 12 }),
            proc(10, 1, 5, exec("/c")),
            proc(14, 0, 6, Kind::Fork { ppid: 10 }),
        ];
        let of = |i| {
            origin_of(&procs, i).map(|j| match &procs[j].kind {
                Kind::Exec { exe } => exe.to_string_lossy().into_owned(),
                Kind::Fork { .. } => unreachable!("an origin is exec'd"),
            })
        };
        assert_eq!(of(0), None);
        assert_eq!(of(1).as_deref(), Some("/b"));
        assert_eq!(of(2).as_deref(), Some("/b"));
        assert_eq!(of(3).as_deref(), Some("/b"));
        assert_eq!(of(4).as_deref(), Some("/c"));
        assert_eq!(of(5).as_deref(), Some("/c"));
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
        let (out, unwound, guessed) = run(&recorded, &cookies);
        assert_eq!((unwound, guessed), (1, 0));
        let got = drawn(&out);
        assert_eq!(
            got,
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
        let (out, unwound, _) = run(&recorded, &cookies);
        assert_eq!(unwound, 2);
        let got = drawn(&out);
        assert_eq!(
            got,
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
    fn nothing_unwound_is_the_guess_a_lost_record_marks() {
        // No tables (or no cookie): the LOST record the engine writes without a cookie, and
        // the returns past the bottom vanish as they do there.
        let recorded = [
            r(1, Entry, 0, 0x100),
            r(2, Exit, 0, 0x100),
            r(3, Event, 0, cookie::resync_marker(5)),
            r(4, Exit, 0, 0x610),
            r(5, Entry, 0, 0x800),
        ];
        let (out, unwound, guessed) = run(&recorded, &BTreeMap::new());
        assert_eq!((unwound, guessed), (0, 1));
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

    #[test]
    fn the_file_is_rewritten_in_place_and_its_torn_tail_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dat = dir.path().join("7.dat");
        let mut bytes: Vec<u8> = [
            r(1, Event, 0, cookie::resync_marker(0)),
            r(2, Exit, 0, 0x510),
        ]
        .iter()
        .flat_map(|x| record::encode(x.time, x.kind, x.depth as u32, x.addr))
        .collect();
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&dat, &bytes).unwrap();
        let cookies = BTreeMap::from([(0, vec![frame(0x500, 0x4f0), frame(0x600, 0x510)])]);
        let mut done = Resyncs::default();
        rewrite_file(&dat, &cookies, &mut done, None).unwrap();
        let back = std::fs::read(&dat).unwrap();
        assert_eq!(&back[back.len() - 3..], [1, 2, 3]);
        let records = record::decode_all(&back[..back.len() - 3]).unwrap();
        let got: Vec<_> = records.iter().map(|x| (x.kind, x.depth, x.addr)).collect();
        assert_eq!(
            got,
            [
                (Entry, 0, 0x500),
                (Entry, 1, 0x600),
                (Event, 2, UNWOUND_EVENT),
                (Exit, 1, 0x600),
            ]
        );
        assert_eq!((done.unwound, done.by_method[&Method::Cfi]), (1, 2));
        assert_eq!(
            done.describe(),
            "1 place where the call stack was lost (a return that matched no call, in code \
             without frame pointers) was unwound after the run (2 frames: 2 by CFI)"
        );
    }

    #[test]
    fn a_file_larger_than_the_read_buffer_is_rewritten_whole() {
        // 100,000 leaf calls (3 MiB, three reads), a marker half-way, a return past it.
        let dir = tempfile::tempdir().unwrap();
        let dat = dir.path().join("7.dat");
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
        let bytes: Vec<u8> = recorded
            .iter()
            .flat_map(|x| record::encode(x.time, x.kind, x.depth as u32, x.addr))
            .collect();
        std::fs::write(&dat, bytes).unwrap();
        let cookies = BTreeMap::from([(0, vec![frame(0x500, 0x4f0), frame(0x600, 0x510)])]);
        rewrite_file(&dat, &cookies, &mut Resyncs::default(), None).unwrap();
        let back = record::decode_all(&std::fs::read(&dat).unwrap()).unwrap();
        let (want, _, _) = run(&recorded, &cookies);
        assert_eq!(back.len(), 200_000 + 4);
        assert_eq!(back, want);
        assert!(back[100_003..200_003]
            .iter()
            .all(|x| x.depth == 2 && x.addr == 0x900));
    }
}
