//! Symbol sources (`FILE[:OFFSET]`) and loading them, in a background thread while QEMU
//! runs, with a warning line per source that gives nothing.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use anyhow::Result;
use qemu_uftrace_symbols::{self as symbols, Arch, Image, LoadOptions, MemberError, SymbolError};

use crate::errors::usage;

/// One source and the offset its addresses are moved by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceArg {
    pub path: PathBuf,
    pub offset: u64,
    /// Where the user named it, for messages (`--symbols`, `-kernel`, …).
    pub origin: &'static str,
}

/// Parses `FILE[:OFFSET]` with the symbols crate's rule (the suffix is an offset only when
/// it looks like a number, so file names containing `:` work), refusing a suffix that was
/// plainly meant as an offset but is malformed (`vmlinux:0xzz`).
pub fn parse_source_arg(arg: &OsStr, origin: &'static str) -> Result<SourceArg> {
    let text = arg.to_string_lossy();
    if text.is_empty() {
        return Err(usage("empty symbol source", "write FILE or FILE:OFFSET"));
    }
    let Some((path, offset)) = symbols::parse_source_arg(&text) else {
        return Err(usage(
            format!("bad symbol source '{text}'"),
            "write FILE or FILE:OFFSET, with OFFSET in hex (0x…) or decimal",
        ));
    };
    if path.as_os_str() != text.as_ref() {
        return Ok(SourceArg {
            path,
            offset,
            origin,
        });
    }
    // Not split: keep the exact bytes (non-UTF-8 paths).
    Ok(SourceArg {
        path: PathBuf::from(arg),
        offset: 0,
        origin,
    })
}

/// A Linux kernel's struct layouts and the source they were read from.
pub struct KernelLayouts {
    pub source: SourceArg,
    pub types: symbols::KernelTypes,
}

impl KernelLayouts {
    /// Each field's offset, `(what, [(struct, member)…])`: the sum of its members' offsets
    /// along the path; or the first one missing, said.
    pub fn field_offsets(&self, fields: &[(&str, &[(&str, &str)])]) -> Result<Vec<u64>, String> {
        let mut offsets = Vec::new();
        for (what, path) in fields {
            let mut sum = 0;
            for (structure, member) in path.iter() {
                sum += self
                    .types
                    .member_offset(structure, member)
                    .map_err(|e| format!("{} has no {what} ({e})", self.source.path.display()))?;
            }
            offsets.push(sum);
        }
        Ok(offsets)
    }
}

/// The kernel's struct layouts, for the plugin to read the guest's tasks and processes:
/// from the first source whose DWARF defines `task_struct` (a -dbg vmlinux), else from the
/// kernel's own BTF in the first source that has it (the `-kernel` image itself, or a
/// vmlinux). `Ok(None)`: no source has either (tasks are then named `pid-N`). Only regular
/// files are read: this runs before QEMU starts, and reading a FIFO or a device (which the
/// symbol loader reads later, while QEMU runs) could block it for good. DWARF: ~2 ms with
/// Debian's 273 MB vmlinux; BTF: the image unpacked and its BTF parsed (see DEVELOPERS.md).
pub fn kernel_layouts(
    sources: &[SourceArg],
) -> std::result::Result<Option<KernelLayouts>, MemberError> {
    let files: Vec<&SourceArg> = sources
        .iter()
        .filter(|s| std::fs::metadata(&s.path).is_ok_and(|m| m.is_file()))
        .collect();
    let paths: Vec<&Path> = files.iter().map(|s| s.path.as_path()).collect();
    let Some(types) = symbols::KernelTypes::find(&paths)? else {
        return Ok(None);
    };
    Ok(files
        .into_iter()
        .find(|s| s.path == types.path())
        .map(|source| KernelLayouts {
            source: source.clone(),
            types,
        }))
}

/// Where Linux's `task_struct.comm` sits, for the plugin to name the guest's tasks.
pub fn task_comm_offset(kernel: &KernelLayouts) -> Option<u64> {
    task_struct_member(kernel, "comm")
}

/// Where `task_struct.pid` sits: on a guest with no PID register (x86_64), the plugin reads
/// a task's PID there at each switch to it.
pub fn task_pid_offset(kernel: &KernelLayouts) -> Option<u64> {
    task_struct_member(kernel, "pid")
}

/// Where `task_struct.tgid` sits: the plugin reads a task's process there at each switch
/// to it, for `plugin.tasks` to group threads by process.
pub fn task_tgid_offset(kernel: &KernelLayouts) -> Option<u64> {
    task_struct_member(kernel, "tgid")
}

/// Where `task_struct.__state` sits (`state` before Linux 5.14): the plugin reads the
/// leaving task's at each switch, and `TASK_DEAD` there frees its context.
pub fn task_state_offset(kernel: &KernelLayouts) -> Option<u64> {
    task_struct_member(kernel, "__state").or_else(|| task_struct_member(kernel, "state"))
}

fn task_struct_member(kernel: &KernelLayouts, member: &str) -> Option<u64> {
    kernel
        .types
        .member_offset("task_struct", member)
        .ok()
        .filter(|&o| o < qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET)
}

/// Where a Linux kernel keeps its running task when no register holds it, from a kernel
/// image's kallsyms: the first of `names` (the architecture's [`Isa::task_slot_symbols`]) it
/// has. The plugin sees task switches as stores there. Like [`kernel_layouts`], this runs
/// while QEMU starts (decompressing a bzImage's kallsyms: ~0.1 s).
///
/// [`Isa::task_slot_symbols`]: qemu_uftrace_engine::arch::Isa::task_slot_symbols
pub fn task_slot(kernel: &std::path::Path, names: &[&str]) -> Option<u64> {
    if !std::fs::metadata(kernel).is_ok_and(|m| m.is_file()) {
        return None;
    }
    names
        .iter()
        .find_map(|name| symbols::kernel_symbol_address(kernel, name).ok().flatten())
}

/// A source that loaded, or the one line saying why it did not.
#[derive(Clone)]
pub enum Loaded {
    Ok(SourceArg, Image),
    Failed(SourceArg, String),
}

/// Loads every source, in order.
pub fn load_all(sources: &[SourceArg], arch: Option<Arch>, demangle: bool) -> Vec<Loaded> {
    load_all_with(sources, arch, demangle, &mut Preloaded::new())
}

/// Images read at offset 0 before the place they were loaded at was known (user mode: the
/// program's files, read while it runs), by path; [`load_all_with`] moves each to its
/// source's offset instead of reading it again.
pub type Preloaded = HashMap<PathBuf, Image>;

/// How a source is read: with its DWARF source lines unless said otherwise; a file with
/// no symbols refused, as the user gave it to name functions.
fn options(offset: u64, demangle: bool, arch: Option<Arch>) -> LoadOptions {
    LoadOptions {
        offset,
        demangle,
        source_lines: true,
        expected_arch: arch,
        name_entry: false,
    }
}

fn load_one(s: &SourceArg, opts: &LoadOptions) -> Loaded {
    match symbols::load(&s.path, opts) {
        Ok(img) => Loaded::Ok(s.clone(), img),
        Err(e) => Loaded::Failed(s.clone(), failure_line(&e)),
    }
}

/// Loads every source, in order, taking those already read from `preloaded`.
pub fn load_all_with(
    sources: &[SourceArg],
    arch: Option<Arch>,
    demangle: bool,
    preloaded: &mut Preloaded,
) -> Vec<Loaded> {
    sources
        .iter()
        .map(|s| {
            if let Some(img) = preloaded.remove(&same_file(&s.path)).filter(|_| !demangle) {
                return Loaded::Ok(s.clone(), img.shifted(s.offset));
            }
            load_one(s, &options(s.offset, demangle, arch))
        })
        .collect()
}

/// The symbol sources known before QEMU starts, read once, without their DWARF source lines,
/// by the first of `record`'s stages to need them: the names FUNCs resolve in (before QEMU
/// starts), the function entries (as it starts), the symbol job (while it runs, adding the
/// lines); the others wait for that read and share it.
#[derive(Clone)]
pub struct ReadOnce(Arc<Sources>);

struct Sources {
    sources: Vec<SourceArg>,
    arch: Option<Arch>,
    loaded: OnceLock<Vec<Loaded>>,
}

impl ReadOnce {
    pub fn new(sources: &[SourceArg], arch: Option<Arch>) -> ReadOnce {
        ReadOnce(Arc::new(Sources {
            sources: sources.to_vec(),
            arch,
            loaded: OnceLock::new(),
        }))
    }

    /// The sources, not read.
    pub fn sources(&self) -> &[SourceArg] {
        &self.0.sources
    }

    /// Whether a stage has read the sources already.
    pub fn is_read(&self) -> bool {
        self.0.loaded.get().is_some()
    }

    /// Every source, in order, read at the first call.
    pub fn get(&self) -> &[Loaded] {
        let Sources {
            sources,
            arch,
            loaded,
        } = &*self.0;
        loaded.get_or_init(|| {
            let without_lines = |s: &SourceArg| LoadOptions {
                source_lines: false,
                ..options(s.offset, false, *arch)
            };
            (sources.iter())
                .map(|s| load_one(s, &without_lines(s)))
                .collect()
        })
    }

    /// The sources that loaded.
    pub fn images(&self) -> impl Iterator<Item = &Image> {
        self.get().iter().filter_map(|l| match l {
            Loaded::Ok(_, img) => Some(img),
            Loaded::Failed(..) => None,
        })
    }

    /// Every source with its DWARF source lines (a copy: the other stages may still read
    /// theirs), as [`load_all`] reads them.
    fn with_lines(&self) -> Vec<Loaded> {
        let mut loaded = self.get().to_vec();
        for l in &mut loaded {
            if let Loaded::Ok(src, img) = l {
                // A file that cannot be read again keeps its functions, without lines.
                let _ = symbols::add_source_lines(img, src.offset);
            }
        }
        loaded
    }
}

/// What the symbol job reads: `sources` (the files read before, by path, moved to their
/// offsets: [`load_all_with`]), or the sources read once before it.
pub enum ToRead {
    Sources(Vec<SourceArg>, Option<Arch>, Preloaded),
    Once(ReadOnce),
    /// The sources read once before it (user mode's `--symbols` files, read for the names
    /// FUNCs resolve in), then `Sources`' (the files the program mapped).
    OnceThen(ReadOnce, Vec<SourceArg>, Option<Arch>, Preloaded),
}

/// One name per file (the loader's `/lib/…` and the sysroot's `/usr/lib/…` may be one).
fn same_file(path: &std::path::Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Reads the files `paths` lists at offset 0 in a low-priority thread (listing them reads
/// files too: QEMU need not wait for it), keeping what loads (a file that does not is read
/// again, for its warning, if it turns out to be a source).
pub fn preload(
    paths: impl FnOnce() -> Vec<PathBuf> + Send + 'static,
    arch: Option<Arch>,
) -> BackgroundLoad<Preloaded> {
    BackgroundLoad::spawn(move |priority| {
        let _lowered = priority.lower();
        paths()
            .into_iter()
            .filter_map(|p| {
                let img = symbols::load(&p, &options(0, false, arch)).ok()?;
                Some((same_file(&p), img))
            })
            .collect()
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The warning for a source that gave nothing: the problem, then the way out.
fn failure_line(e: &SymbolError) -> String {
    let fix = match e {
        SymbolError::Io { .. } => "check the path",
        SymbolError::Unrecognized { .. } => {
            // Said for `record --symbols`, `-kernel` and the `symbols` subcommand alike.
            "give an ELF with symbols, a System.map, a kallsyms dump or a kernel image in its place"
        }
        SymbolError::Corrupt { .. } => "give another copy of the file, or its System.map",
        // The library's message already says where to get the symbols.
        SymbolError::Stripped { .. } => return e.to_string(),
        SymbolError::WrongArch { .. } => "give the image built for the guest's architecture",
        SymbolError::Relocatable { .. } => {
            "a kernel module's functions are named from guest memory; its debug file, named \
             NAME.ko, gives them source lines (record --symbols, or symbols -d DIR after the \
             run)"
        }
    };
    format!("{e}; {fix}")
}

/// A thread that reads symbols, at a lowered priority while QEMU runs ([`Priority`]):
/// [`preload`]'s, or [`BackgroundLoad::start`]'s, which hands what it loaded to `then`, still
/// in that thread; `join` returns the thread's result.
pub struct BackgroundLoad<T> {
    job: JoinHandle<T>,
    priority: Priority,
}

impl<T: Send + 'static> BackgroundLoad<T> {
    /// Runs `f` in a thread of its own, with the priority it may lower.
    fn spawn(f: impl FnOnce(&Priority) -> T + Send + 'static) -> Self {
        let priority = Priority::default();
        let lowered = priority.clone();
        let job = std::thread::spawn(move || f(&lowered));
        BackgroundLoad { job, priority }
    }

    pub fn start(read: ToRead, then: impl FnOnce(Vec<Loaded>) -> T + Send + 'static) -> Self {
        BackgroundLoad::spawn(move |lowered| match read {
            // The read without lines at the priority it had: the entries may wait for it.
            ToRead::Once(once) => {
                once.get();
                let _lowered = lowered.lower();
                then(once.with_lines())
            }
            // Read once QEMU has exited (user mode): nothing to leave the cores to.
            ToRead::Sources(sources, arch, mut preloaded) => {
                then(load_all_with(&sources, arch, false, &mut preloaded))
            }
            // The same, after the shared read of the --symbols files (user mode with -F).
            ToRead::OnceThen(once, sources, arch, mut preloaded) => {
                let mut loaded = once.with_lines();
                loaded.extend(load_all_with(&sources, arch, false, &mut preloaded));
                then(loaded)
            }
        })
    }

    /// `None` when the thread panicked. Called once QEMU has exited: the thread gets its
    /// priority back where the system allows it, rather than be starved while we wait.
    pub fn join(self) -> Option<T> {
        self.priority.restore();
        self.job.join().ok()
    }
}

/// The priority of a thread that reads symbols while QEMU runs: lowered, so that on a small
/// machine it takes what QEMU leaves rather than slow the guest down, and raised again once
/// QEMU has exited and `record` waits for it. Not SCHED_IDLE: on a machine busy with other
/// work that would starve the thread.
#[derive(Clone, Default)]
struct Priority(Arc<Mutex<Niceness>>);

#[derive(Default)]
enum Niceness {
    #[default]
    Normal,
    /// Lowered, on the thread of this id (alive while this holds: it says when it ends).
    Lowered(libc::id_t),
    /// QEMU has exited: no lowering any more.
    Restored,
}

/// Held by a thread while it may be lowered: its end takes its id out of [`Priority`].
struct Lowered(Priority);

impl Drop for Lowered {
    fn drop(&mut self) {
        *lock(&self.0 .0) = Niceness::Restored;
    }
}

/// The nice value of a thread that reads while QEMU runs.
const NICE: libc::c_int = 10;

impl Priority {
    /// Lowers the calling thread's priority, unless QEMU has exited already, until the
    /// guard is dropped: the thread ends (its id may then be reused), or it panicked.
    fn lower(&self) -> Lowered {
        let mut state = lock(&self.0);
        if matches!(*state, Niceness::Normal) {
            let tid = gettid();
            if set_nice(tid, NICE) {
                *state = Niceness::Lowered(tid);
            }
        }
        Lowered(self.clone())
    }

    /// QEMU has exited: the thread's priority back to normal, where the system allows it
    /// (an unprivileged process may not raise a thread's priority unless RLIMIT_NICE allows
    /// it; the thread then stays lowered).
    fn restore(&self) {
        let mut state = lock(&self.0);
        let restored = match *state {
            // The lock keeps the thread from ending, and its id from being reused, meanwhile.
            Niceness::Lowered(tid) => set_nice(tid, 0),
            Niceness::Normal | Niceness::Restored => true,
        };
        if restored {
            *state = Niceness::Restored;
        }
    }
}

fn gettid() -> libc::id_t {
    // SAFETY: a plain syscall without arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

/// Sets thread `tid`'s nice value (Linux nice values are per thread); whether it was set.
fn set_nice(tid: libc::id_t, nice: libc::c_int) -> bool {
    // SAFETY: a plain syscall on a thread of this process (`Priority` keeps it alive).
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0 }
}

/// A user-mode program's shared library as the plugin knows its file (by the host file's
/// device and inode: user mode maps host files), and its symbols.
pub struct LibraryFile {
    pub dev: u64,
    pub ino: u64,
    pub image: qemu_uftrace_symbols::Image,
}

/// Reads library `path` of `arch` (`None`: it cannot be read).
pub fn library(path: &Path, arch: qemu_uftrace_symbols::Arch) -> Option<LibraryFile> {
    use std::os::unix::fs::MetadataExt;
    let opts = qemu_uftrace_symbols::LoadOptions {
        expected_arch: Some(arch),
        ..Default::default()
    };
    let meta = std::fs::metadata(path).ok()?;
    let image = qemu_uftrace_symbols::load(path, &opts).ok()?;
    Some(LibraryFile {
        dev: meta.dev(),
        ino: meta.ino(),
        image,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<(PathBuf, u64)> {
        parse_source_arg(OsStr::new(s), "--symbols").map(|a| (a.path, a.offset))
    }

    #[test]
    fn parses_file_and_offset() {
        assert_eq!(p("vmlinux").unwrap(), ("vmlinux".into(), 0));
        assert_eq!(
            p("fw.elf:0x40000000").unwrap(),
            ("fw.elf".into(), 0x4000_0000)
        );
        assert_eq!(p("fw.elf:4096").unwrap(), ("fw.elf".into(), 4096));
        assert_eq!(p("/a:b/c.elf").unwrap(), ("/a:b/c.elf".into(), 0));
        assert_eq!(p("c:weird").unwrap(), ("c:weird".into(), 0));
        assert_eq!(p("a:b:0x10").unwrap(), ("a:b".into(), 0x10));
    }

    #[test]
    fn no_task_names_without_dwarf() {
        let dir = tempfile::tempdir().unwrap();
        let map = dir.path().join("System.map");
        std::fs::write(&map, "ffff800008000000 T _text\n").unwrap();
        let src = |path: PathBuf| SourceArg {
            path,
            offset: 0,
            origin: "--symbols",
        };
        let sources = [src(map), src(dir.path().join("absent"))];
        assert!(kernel_layouts(&sources).unwrap().is_none());
    }

    #[test]
    fn rejects_bad_offsets() {
        for bad in [
            "fw.elf:0xzz",
            "fw.elf:0x",
            ":0x10",
            "",
            "x:99999999999999999999999",
        ] {
            let e = p(bad).unwrap_err();
            assert_eq!(crate::errors::exit_code(&e), 2, "{bad}");
        }
    }
}
