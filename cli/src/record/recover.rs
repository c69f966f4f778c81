//! Between the run and the data directory's assembly, for a run that started mid-way
//! (`-loadvm`, `-incoming`): each stack cookie the plugin saved is unwound with the guest's
//! own tables (`crate::unwind`) into the calls open at that task's start, which
//! `super::splice` writes first in the task's `.dat` file, followed by a `qemu:unwound`
//! event that marks where the recovered frames end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use qemu_uftrace_format::cookie;
use qemu_uftrace_format::Arch;

use super::beneath;
use super::resync::Loaded;
use crate::unwind::{Frame, Image, Method};
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

/// A task's start, unwound.
#[derive(Debug)]
pub struct Start {
    /// The calls open at the task's first record, outermost first.
    pub frames: Vec<Frame>,
    /// When the cookie was captured: the frames open at the first record or then, whichever
    /// is first.
    pub capture: u64,
    /// The task's architecture, when a cookie could be read.
    pub arch: Option<Arch>,
}

/// Every task's start, for `super::splice`.
pub struct Starts<'a> {
    pub by_task: BTreeMap<u32, Start>,
    /// The files they were unwound with.
    pub images: &'a [Image],
    /// Frames counted by method; the splice counts the rest.
    pub recovered: Recovered,
    /// The cookie files, removed once spliced.
    pub cookies: Vec<PathBuf>,
}

/// Unwinds every start cookie in `dir` with the ELF files of `images`. `None` when the run
/// left no cookie.
pub fn unwind_starts<'a>(dir: &Path, images: &'a Loaded) -> Result<Option<Starts<'a>>> {
    let files = cookie_files(dir)?;
    if files.is_empty() {
        return Ok(None);
    }
    let began = Instant::now();
    let mut recovered = Recovered::default();
    let loaded = images.unwind_images(&mut recovered.problems);
    let mut by_task = BTreeMap::new();
    let mut cookies = Vec::new();
    for (tid, files) in files {
        // A cookie that cannot be read recovers nothing, but the task's stream is still
        // rewritten: its returns past the bottom become LOST marks, not stray exits.
        let start = task_frames(tid, &files, loaded, &mut recovered);
        for f in &start.frames {
            *recovered.by_method.entry(f.method).or_default() += 1;
        }
        by_task.insert(tid, start);
        cookies.extend(files.main.into_iter().chain(files.user));
    }
    recovered.elapsed = began.elapsed();
    Ok(Some(Starts {
        by_task,
        images: loaded,
        recovered,
        cookies,
    }))
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

/// A task's start: its user-mode frames, the exception entry they took, then its kernel
/// frames; the time of its first capture.
fn task_frames(tid: u32, files: &TaskCookies, images: &[Image], done: &mut Recovered) -> Start {
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
    let frames = match (main, user) {
        (Some((kernel, _)), Some((user, cookie))) => {
            beneath::under_user(user, &cookie, images, kernel)
        }
        (Some((frames, _)), None) | (None, Some((frames, _))) => frames,
        (None, None) => Vec::new(),
    };
    Start {
        frames,
        capture: time,
        arch,
    }
}
