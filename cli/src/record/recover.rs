//! Between the run and the data directory's assembly, for a run that started mid-way
//! (`-loadvm`, `-incoming`): each stack cookie the plugin saved is unwound with the guest's
//! own tables (`crate::unwind`), and the calls it shows open are written at the start of
//! that task's `.dat` file, followed by a `qemu:unwound` event that marks where the
//! recovered frames end; the records after move beneath them (`super::beneath`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use qemu_uftrace_engine::arch::ExceptionKind;
use qemu_uftrace_format::cookie;
use qemu_uftrace_format::record::{Record, RecordType};
use qemu_uftrace_format::Arch;

use super::beneath::{self, rec, Beneath, Pushed, Rewriter};
use super::resync::Loaded;
use crate::unwind::{self, Image, Method};

/// What recovery did, for the summary.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Tasks whose stack was unwound.
    pub tasks: usize,
    /// Frames recovered, by how their return address was found.
    pub by_method: BTreeMap<Method, usize>,
    /// Returns past the bottom that closed a recovered frame.
    pub matched: u64,
    /// Returns past the bottom that matched no recovered frame (a LOST record marks each).
    pub unmatched: u64,
    pub elapsed: Duration,
    /// One line per cookie that could not be used.
    pub problems: Vec<String>,
}

impl Recovered {
    pub fn frames(&self) -> usize {
        self.by_method.values().sum()
    }

    /// "6 frames recovered (4 by CFI, 2 by frame records)".
    pub fn describe(&self) -> String {
        let methods: Vec<String> = self
            .by_method
            .iter()
            .map(|(m, n)| format!("{n} by {}", m.name()))
            .collect();
        let frames = self.frames();
        let mut line = format!(
            "the run started mid-way: {frames} open frame{} recovered by unwinding {} task{}",
            if frames == 1 { "" } else { "s" },
            self.tasks,
            if self.tasks == 1 { "" } else { "s" },
        );
        if !methods.is_empty() {
            line.push_str(&format!(" ({})", methods.join(", ")));
        }
        if self.unmatched > 0 {
            line.push_str(&format!(
                "; {} return{} past them matched no recovered frame (LOST marks them)",
                self.unmatched,
                if self.unmatched == 1 { "" } else { "s" }
            ));
        }
        line
    }
}

/// Unwinds every cookie in `dir` with the ELF files of `images` and rewrites the tasks'
/// files. `None` when the run left no cookie.
pub fn recover(dir: &Path, images: &Loaded) -> Result<Option<Recovered>> {
    let cookies = cookie_files(dir)?;
    if cookies.is_empty() {
        return Ok(None);
    }
    let started = Instant::now();
    let mut done = Recovered::default();
    let loaded = images.unwind_images(&mut done.problems);
    for (tid, files) in cookies {
        match recover_task(dir, tid, &files, loaded, &mut done) {
            Ok(()) => {
                for path in files.main.iter().chain(files.user.iter()) {
                    std::fs::remove_file(path)
                        .with_context(|| format!("cannot remove {}", path.display()))?;
                }
            }
            Err(e) => done.problems.push(format!("task {tid}: {e:#}")),
        }
    }
    if done.frames() > 0 {
        let path = dir.join("events.txt");
        crate::symfiles::write_with(&path, |w| {
            qemu_uftrace_format::events::write_events(w, qemu_uftrace_format::events::QEMU_EVENTS)
        })?;
    }
    done.elapsed = started.elapsed();
    Ok(Some(done))
}

/// A task's cookie files: `unwind-<tid>.stack` and, for an OS task found asleep in the
/// kernel, `unwind-<tid>.user.stack` (its user-mode calls, beneath the kernel's).
#[derive(Debug, Default)]
struct TaskCookies {
    main: Option<PathBuf>,
    user: Option<PathBuf>,
}

/// The cookie files of `dir`, by task.
fn cookie_files(dir: &Path) -> Result<BTreeMap<u32, TaskCookies>> {
    let mut out: BTreeMap<u32, TaskCookies> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(tid) = cookie::tid_of(name) {
            out.entry(tid).or_default().main = Some(entry.path());
        } else if let Some(tid) = cookie::user_tid_of(name) {
            out.entry(tid).or_default().user = Some(entry.path());
        }
    }
    Ok(out)
}

/// The exception a task's user-mode code took where it resumes at `pc`: a system call if
/// the instruction before is one (AArch64 `svc #0`, x86-64 `syscall`, RISC-V `ecall`), an
/// interrupt otherwise.
fn exception_before(pc: u64, machine: u16, images: &[Image]) -> ExceptionKind {
    const SVC0: [u8; 4] = 0xd400_0001u32.to_le_bytes();
    const SYSCALL: [u8; 2] = [0x0f, 0x05];
    const ECALL: [u8; 4] = 0x0000_0073u32.to_le_bytes();
    let call: &[u8] = match Arch::from_elf_machine(machine) {
        Some(Arch::Aarch64) => &SVC0,
        Some(Arch::X86_64) => &SYSCALL,
        Some(Arch::Riscv64) => &ECALL,
        _ => &[],
    };
    let is_svc = !call.is_empty() && unwind::code_before(images, pc, call.len()) == Some(call);
    if is_svc {
        ExceptionKind::Svc
    } else {
        ExceptionKind::Irq
    }
}

/// A task's open frames, outermost first, the time of its first capture, and its
/// architecture when a cookie could be read: its user-mode frames, the exception entry they
/// took, then its kernel frames.
fn task_frames(
    tid: u32,
    files: &TaskCookies,
    images: &[Image],
    done: &mut Recovered,
) -> (Vec<unwind::Frame>, u64, Option<Arch>) {
    let mut unwound = |path: &Option<PathBuf>| {
        let path = path.as_ref()?;
        match beneath::unwind_cookie(path, images) {
            Ok(u) => Some(u),
            Err(e) => {
                done.problems.push(format!("task {tid}: {e:#}"));
                None
            }
        }
    };
    let main = unwound(&files.main);
    let user = unwound(&files.user);
    let time = main
        .iter()
        .chain(user.iter())
        .map(|(_, c)| c.time)
        .min()
        .unwrap_or(u64::MAX);
    let arch = main
        .iter()
        .chain(user.iter())
        .find_map(|(_, c)| Arch::from_elf_machine(c.machine));
    let mut frames = Vec::new();
    if let Some((user_frames, cookie)) = user {
        frames.extend(user_frames);
        if main.is_some() {
            frames.push(unwind::Frame {
                func: exception_before(cookie.pc, cookie.machine, images).addr(),
                ret_addr: cookie.pc,
                method: Method::Exception,
            });
        }
    }
    if let Some((kernel_frames, _)) = main {
        frames.extend(kernel_frames);
    }
    (frames, time, arch)
}

fn recover_task(
    dir: &Path,
    tid: u32,
    files: &TaskCookies,
    images: &[Image],
    done: &mut Recovered,
) -> Result<()> {
    // A cookie that cannot be read recovers nothing, but the task's stream is still
    // rewritten: its returns past the bottom become LOST marks, not stray exits.
    let (frames, time, arch) = task_frames(tid, files, images, done);
    // A task whose cookie unwound to nothing open began under tracing (a task created
    // after the start, found at its first switch): its first "return" goes into its entry
    // code, after no call, and closes nothing.
    let fresh = |target: u64| {
        frames.is_empty() && arch.is_some_and(|a| !unwind::follows_call(a, images, target))
    };
    let mut pass = Start::new(&frames, time, &fresh);
    beneath::rewrite_file(&dir.join(format!("{tid}.dat")), &mut pass)?;
    done.tasks += 1;
    for f in &frames {
        *done.by_method.entry(f.method).or_default() += 1;
    }
    done.matched += pass.matched;
    done.unmatched += pass.unmatched;
    Ok(())
}

/// The records of a task whose stack began with `frames` open (outermost first): their
/// entries and the marker first, then the recorded ones with returns past the bottom
/// matched to them.
struct Start<'a> {
    frames: &'a [unwind::Frame],
    /// When the cookie was captured: the frames open at the first record or then, whichever
    /// is first.
    capture: u64,
    fresh: &'a dyn Fn(u64) -> bool,
    /// Opened at the first record.
    beneath: Option<Beneath<'a>>,
    /// After a resync marker (`super::resync`): the engine closed every frame there and its
    /// stack is mid-way again, from the resync's cookie: the recovered frames closed with it
    /// and what follows is the resync pass's to rewrite.
    resynced: bool,
    /// Returns past the bottom that closed a recovered frame, and that matched none.
    matched: u64,
    unmatched: u64,
}

impl<'a> Start<'a> {
    fn new(frames: &'a [unwind::Frame], capture: u64, fresh: &'a dyn Fn(u64) -> bool) -> Self {
        Start {
            frames,
            capture,
            fresh,
            beneath: None,
            resynced: false,
            matched: 0,
            unmatched: 0,
        }
    }
}

impl Rewriter for Start<'_> {
    fn push(&mut self, r: Record, out: &mut Vec<Record>) {
        let (frames, capture) = (self.frames, self.capture);
        let b = self
            .beneath
            .get_or_insert_with(|| Beneath::open(frames, r.time.min(capture), out));
        if self.resynced {
            out.push(r);
            return;
        }
        if r.kind == RecordType::Event && cookie::resync_seq_of_marker(r.addr).is_some() {
            b.close_all(r.time, out);
            out.push(r);
            self.resynced = true;
            return;
        }
        match b.push(r, out) {
            Pushed::Moved => {}
            Pushed::Matched => self.matched += 1,
            Pushed::Unmatched if (self.fresh)(r.addr) => {}
            Pushed::Unmatched => {
                out.push(rec(r.time, RecordType::Lost, b.depth(), 0));
                self.unmatched += 1;
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<Record>) {
        if self.beneath.is_none() {
            self.beneath = Some(Beneath::open(self.frames, self.capture, out));
        }
    }
}

/// [`Start`] over records in memory: the records, and how many returns past the bottom
/// matched and did not.
#[cfg(test)]
fn rewrite(
    records: &[Record],
    frames: &[unwind::Frame],
    capture: u64,
    fresh: &dyn Fn(u64) -> bool,
) -> (Vec<Record>, u64, u64) {
    let mut pass = Start::new(frames, capture, fresh);
    let mut out = Vec::new();
    for r in records {
        pass.push(*r, &mut out);
    }
    pass.finish(&mut out);
    (out, pass.matched, pass.unmatched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::beneath::testing::{drawn, frame, r};
    use crate::record::beneath::UNWOUND_EVENT;
    use crate::unwind::Frame;
    use qemu_uftrace_format::record;

    #[test]
    fn recovered_frames_open_the_stream_and_returns_close_them_in_order() {
        use RecordType::*;
        // main (0x100) > a (0x200) > leaf (0x300), stopped in the leaf; the leaf returns
        // into a (0x210), a calls b (0x400) and returns into main (0x110), main returns.
        let frames = [frame(0x100, 0x50), frame(0x200, 0x110), frame(0x300, 0x210)];
        let recorded = [
            r(10, Exit, 0, 0x210),
            r(20, Entry, 0, 0x400),
            r(30, Exit, 0, 0x400),
            r(40, Exit, 0, 0x110),
            r(50, Entry, 0, 0x500),
            r(60, Exit, 0, 0x500),
        ];
        let (out, matched, unmatched) = rewrite(&recorded, &frames, 5, &|_| false);
        assert_eq!((matched, unmatched), (2, 0));
        let got = drawn(&out);
        assert_eq!(
            got,
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
        use RecordType::*;
        // work (0x200) interrupted by SIGALRM, whose handler (0x300) returns into the
        // trampoline (0x600); work then calls 0x400 at its own depth and returns (0x110).
        let sig = qemu_uftrace_format::pseudo::signal_addr(14);
        let frames = [
            frame(0x200, 0x110),
            Frame {
                func: sig,
                ret_addr: 0,
                method: Method::Signal,
            },
            frame(0x300, 0x600),
        ];
        let recorded = [
            r(10, Exit, 0, 0x600),
            r(20, Entry, 0, 0x400),
            r(30, Exit, 0, 0x400),
            r(40, Exit, 0, 0x110),
        ];
        let (out, matched, unmatched) = rewrite(&recorded, &frames, 5, &|_| false);
        assert_eq!((matched, unmatched), (2, 0));
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

    #[test]
    fn a_return_to_an_outer_frame_closes_the_ones_in_between() {
        use RecordType::*;
        let frames = [frame(0x100, 0x50), frame(0x200, 0x110), frame(0x300, 0x210)];
        let (out, matched, _) = rewrite(&[r(10, Exit, 0, 0x110)], &frames, 5, &|_| false);
        assert_eq!(matched, 1);
        let exits: Vec<_> = out
            .iter()
            .filter(|x| x.kind == Exit)
            .map(|x| (x.depth, x.addr))
            .collect();
        assert_eq!(exits, [(2, 0x300), (1, 0x200)]);
    }

    #[test]
    fn a_damaged_cookie_is_one_line_and_its_returns_are_lost_marks() {
        use RecordType::*;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(cookie::file_name(7)), b"QUSTACK\x01short").unwrap();
        let dat: Vec<u8> = [r(10, Exit, 0, 0x210), r(20, Entry, 0, 0x400)]
            .iter()
            .flat_map(|x| record::encode(x.time, x.kind, x.depth as u32, x.addr))
            .collect();
        std::fs::write(dir.path().join("7.dat"), dat).unwrap();
        let done = recover(dir.path(), &Loaded::new(dir.path(), Vec::new()))
            .unwrap()
            .expect("a cookie was there");
        assert_eq!(done.problems.len(), 1, "{:?}", done.problems);
        assert!(
            done.problems[0].contains("truncated stack cookie"),
            "{:?}",
            done.problems
        );
        assert_eq!((done.frames(), done.unmatched), (0, 1));
        let back = record::decode_all(&std::fs::read(dir.path().join("7.dat")).unwrap()).unwrap();
        assert_eq!(back, [r(10, Lost, 0, 0), r(20, Entry, 0, 0x400)]);
        assert!(!dir.path().join(cookie::file_name(7)).exists());
        assert!(!dir.path().join("events.txt").exists());
    }

    #[test]
    fn a_fresh_tasks_first_return_into_its_entry_code_closes_nothing() {
        use RecordType::*;
        // A task created after the start, found at its first switch: nothing was open, and
        // its switch returns into its entry code (not after a call).
        let recorded = [r(10, Exit, 0, 0x999), r(20, Entry, 0, 0x400)];
        let (out, matched, unmatched) = rewrite(&recorded, &[], 5, &|a| a == 0x999);
        assert_eq!((matched, unmatched), (0, 0));
        assert_eq!(out, [r(20, Entry, 0, 0x400)]);
    }

    #[test]
    fn a_resync_marker_closes_the_recovered_frames_and_leaves_the_rest_to_the_resync_pass() {
        use RecordType::*;
        // After the start's frames, the engine resynced (every frame closed, a marker):
        // what follows, its exits at depth 0 included, is the resync's (`super::resync`).
        let frames = [frame(0x100, 0x50), frame(0x200, 0x110)];
        let marker = cookie::resync_marker(0);
        let recorded = [
            r(10, Entry, 0, 0x400),
            r(20, Exit, 0, 0x400),
            r(30, Event, 0, marker),
            r(40, Exit, 0, 0x610),
        ];
        let (out, matched, unmatched) = rewrite(&recorded, &frames, 5, &|_| false);
        assert_eq!((matched, unmatched), (0, 0));
        let got = drawn(&out);
        assert_eq!(
            got,
            [
                (5, Entry, 0, 0x100),
                (5, Entry, 1, 0x200),
                (5, Event, 2, UNWOUND_EVENT),
                (10, Entry, 2, 0x400),
                (20, Exit, 2, 0x400),
                (30, Exit, 1, 0x200),
                (30, Exit, 0, 0x100),
                (30, Event, 0, marker),
                (40, Exit, 0, 0x610),
            ]
        );
    }

    #[test]
    fn a_return_matching_nothing_is_a_lost_mark() {
        use RecordType::*;
        let (out, matched, unmatched) = rewrite(&[r(10, Exit, 0, 0x999)], &[], 5, &|_| false);
        assert_eq!((matched, unmatched), (0, 1));
        assert_eq!(out, [r(10, Lost, 0, 0)]);
    }
}
