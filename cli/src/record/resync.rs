//! Between the run and the data directory's assembly: the resyncs the plugin deferred.
//! Where a return matched no open frame and no frame record told the stack (code without
//! frame pointers), or where tracing was switched on, the plugin saved a stack cookie
//! (`cookie::resync_file_name`) and the engine closed every frame and wrote a marker naming
//! the cookie (`cookie::resync_marker`), then wrote returns past the bottom as exits to their
//! targets (`Engine::outer_return`). Here each cookie is unwound with its own process
//! image's files (the guest's own tables); `super::splice` puts the frames in the marker's
//! place. Also the process images themselves, as both kinds of cookie are unwound with them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result};
use qemu_uftrace_format::cookie;

use super::beneath;
use crate::qemu::user_maps;
use crate::qemu::user_procs::{Kind, Proc};
use crate::unwind::{Frame, Image, Method};

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

/// Every task's resync cookies, unwound, for `super::splice`.
pub struct ResyncFrames {
    /// By task, then by cookie number: the frames open there, outermost first (none: nothing
    /// unwound).
    pub by_task: BTreeMap<u32, BTreeMap<u32, Vec<Frame>>>,
    /// One line per cookie or file that could not be used; the splice counts the rest.
    pub resyncs: Resyncs,
    /// The cookie files, removed once spliced.
    pub cookies: Vec<PathBuf>,
}

/// System mode, a Linux guest: the processes' address spaces and their files.
pub trait ProcessFiles {
    /// The address space task `tid` ran in at `time`, a number that tells it from the
    /// others; `None` where it is not known.
    fn space_of(&self, tid: u32, time: u64) -> Option<usize>;
    /// The files of address space `space`, each at its load bias (asked once per space).
    fn files_of(&self, space: usize) -> Vec<(PathBuf, u64)>;
}

/// Unwinds every resync cookie of `images`, each with its own image's files; in system mode
/// one saved in user space (a window switched on there) with its process's (`processes`).
/// `None` when the run saved no resync cookie.
pub fn unwind_resyncs(
    images: &[Loaded],
    processes: Option<&dyn ProcessFiles>,
) -> Result<Option<ResyncFrames>> {
    // Cookie numbers are unique per task across process images (an exec'd image numbers
    // its own from its image index up: it appends to the same task file).
    let mut files: BTreeMap<u32, BTreeMap<u32, (PathBuf, usize)>> = BTreeMap::new();
    // A window's user-mode parts (system mode: it opened in the kernel), by task and number.
    let mut user_parts: BTreeMap<(u32, u32), PathBuf> = BTreeMap::new();
    for (i, image) in images.iter().enumerate() {
        let found = cookie_files(&image.dir)?;
        for (tid, of_task) in found.kernel {
            for (seq, path) in of_task {
                files.entry(tid).or_default().insert(seq, (path, i));
            }
        }
        user_parts.extend(found.user);
    }
    if files.is_empty() && user_parts.is_empty() {
        return Ok(None);
    }
    let mut resyncs = Resyncs::default();
    let mut by_task = BTreeMap::new();
    let mut cookies = Vec::new();
    // Each image's files taken once, at its first cookie; a process's, once per space.
    let mut loaded: Vec<Option<&[Image]>> = images.iter().map(|_| None).collect();
    let mut spaces: BTreeMap<usize, Loaded> = BTreeMap::new();
    for (tid, of_task) in files {
        let mut frames = BTreeMap::new();
        for (seq, (path, i)) in of_task {
            cookies.push(path.clone());
            let cookie = match beneath::read_cookie(&path) {
                Ok(c) => c,
                Err(e) => {
                    resyncs.problems.push(format!("task {tid}: {e:#}"));
                    continue;
                }
            };
            let process = (processes.filter(|_| cookie.pc >> 63 == 0))
                .and_then(|p| Some((p, p.space_of(tid, cookie.time)?)));
            let files = match process {
                Some((p, space)) => spaces
                    .entry(space)
                    .or_insert_with(|| Loaded::new(&images[i].dir, p.files_of(space)))
                    .unwind_images(&mut resyncs.problems),
                None => {
                    *loaded[i].get_or_insert_with(|| images[i].unwind_images(&mut resyncs.problems))
                }
            };
            match beneath::unwind_read(&path, &cookie, files) {
                Ok(f) => {
                    // Opened in the kernel: the user-mode calls beneath, where they were
                    // saved (at the task's next return to user mode).
                    let user = (user_parts.get(&(tid, seq)))
                        .zip(processes)
                        .and_then(|(path, p)| {
                            let user = user_part(path, tid, p, &mut spaces, &images[i].dir);
                            user.map_err(|e| resyncs.problems.push(format!("task {tid}: {e:#}")))
                                .ok()
                        })
                        .flatten();
                    let f = match user {
                        Some((user, cookie, images)) => {
                            beneath::under_user(user, &cookie, images, f)
                        }
                        None => f,
                    };
                    frames.insert(seq, f);
                }
                Err(e) => resyncs.problems.push(format!("task {tid}: {e:#}")),
            }
        }
        by_task.insert(tid, frames);
    }
    cookies.extend(user_parts.into_values());
    Ok(Some(ResyncFrames {
        by_task,
        resyncs,
        cookies,
    }))
}

/// A window's user-mode frames, its cookie, and the images they were unwound with.
type UserPart<'a> = (Vec<Frame>, cookie::StackCookie, &'a [Image]);

/// A window's user-mode part (`path`, task `tid`'s): unwound with the files of its
/// process's space then, each space's files loaded once (in `spaces`); its frames, the
/// cookie and the images. `None` where no space of the process is known then.
fn user_part<'a>(
    path: &Path,
    tid: u32,
    processes: &dyn ProcessFiles,
    spaces: &'a mut BTreeMap<usize, Loaded>,
    dir: &Path,
) -> Result<Option<UserPart<'a>>> {
    let cookie = beneath::read_cookie(path)?;
    let Some(space) = processes.space_of(tid, cookie.time) else {
        return Ok(None);
    };
    let mut problems = Vec::new();
    let loaded = spaces
        .entry(space)
        .or_insert_with(|| Loaded::new(dir, processes.files_of(space)));
    let images = loaded.unwind_images(&mut problems);
    if let Some(first) = problems.first() {
        anyhow::bail!("{first}");
    }
    let frames = beneath::unwind_read(path, &cookie, images)?;
    Ok(Some((frames, cookie, images)))
}

/// A directory's resync cookie files: by task and number, the kernel's (or the only) part,
/// and by (task, number) a window's user-mode part.
#[derive(Debug, Default)]
struct CookieFiles {
    kernel: BTreeMap<u32, BTreeMap<u32, PathBuf>>,
    user: BTreeMap<(u32, u32), PathBuf>,
}

/// The resync cookie files of `dir`.
fn cookie_files(dir: &Path) -> Result<CookieFiles> {
    let mut out = CookieFiles::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // A process image that ended before it wrote anything.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some((tid, seq)) = cookie::resync_of(name) {
            out.kernel.entry(tid).or_default().insert(seq, entry.path());
        } else if let Some(key) = cookie::resync_user_of(name) {
            out.user.insert(key, entry.path());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
