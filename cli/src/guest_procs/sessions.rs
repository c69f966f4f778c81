//! One uftrace session per guest address space: its map is the kernel's (the trace's first
//! session) plus the process's files where that process mapped them, so that uftrace names
//! a process's own functions, its libraries' and the kernel's beneath its syscalls. Threads
//! are grouped by process (uftrace's pid is the guest's thread group).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use qemu_uftrace_format::map::{self, MapEntry};
use qemu_uftrace_format::task::{session_id, Later};
use qemu_uftrace_symbols::{Arch, Image, LoadOptions};

use super::events::{Mapping, Procs, Space, MAX_MAPPINGS};
use super::initrd;
use crate::contained;
use crate::guest_tasks::GuestTask;
use crate::qemu::user::Elf;
use crate::symfiles;

/// Where the guest's files are found.
pub struct GuestFiles {
    /// The `-initrd` archive's files, when it was given and read.
    pub initrd: Option<initrd::Files>,
    /// `--sysroot`: the guest's root file system.
    pub sysroot: Option<PathBuf>,
    /// `--symbols` files, found by their file name.
    pub symbols: Vec<PathBuf>,
}

/// What naming the processes gave.
#[derive(Debug, Default)]
pub struct Named {
    /// `task.txt` lines for the processes' threads (written after the first session's).
    pub lines: Vec<Later>,
    /// The threads those lines cover (the first session leaves them out).
    pub tids: Vec<u32>,
    /// Processes named, address spaces written, and files placed in them (aliases too).
    pub processes: usize,
    pub spaces: usize,
    pub files: usize,
    /// What was not named, and why (one line each).
    pub problems: Vec<String>,
    /// Files placed whose functions are named by their address in the file (no symbol
    /// table, or only the exported symbols): said together ([`Named::by_address_lines`]).
    pub by_address: Vec<ByAddress>,
}

/// A file named by address: its guest path, whether it had its exported symbols, and one of
/// the names it got (`bash+0x2f000`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByAddress {
    pub exports_only: bool,
    pub path: String,
    pub example: Option<String>,
}

impl Named {
    /// One line for the files with no symbol table and one for those with only their
    /// exported symbols, each naming every such file: a Debian root has dozens, and a
    /// line each buried the rest of the summary.
    pub fn by_address_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for exports_only in [false, true] {
            let mut files: Vec<&ByAddress> = (self.by_address.iter())
                .filter(|f| f.exports_only == exports_only)
                .collect();
            files.sort();
            files.dedup_by(|a, b| a.path == b.path);
            if files.is_empty() {
                continue;
            }
            let (n, one) = (files.len(), files.len() == 1);
            let what = match (exports_only, one) {
                (false, true) => "has no symbol table",
                (false, false) => "have no symbol table",
                (true, true) => "has only its exported symbols",
                (true, false) => "have only their exported symbols",
            };
            let example = (files.iter().find_map(|f| f.example.as_deref()))
                .map_or(String::new(), |e| format!(", as {e}"));
            let (s, its, copies) = match one {
                true => ("", "its", "a copy"),
                false => ("s", "their", "copies"),
            };
            let which = if exports_only {
                "internal functions"
            } else {
                "functions"
            };
            lines.push(format!(
                "{n} file{s} {what}: {its} {which} are named by their address in the file{example} \
                 (give {its} debug file{s} under --sysroot's {DEBUG_TREE}, or {copies} with {its} \
                 symbol table{s} with --symbols): {}",
                grouped_paths(files.iter().map(|f| f.path.as_str()))
            ));
        }
        lines
    }
}

/// Guest paths listed by directory: `/usr/bin/{bash, dash}, /usr/lib/x.so`.
fn grouped_paths<'a>(paths: impl Iterator<Item = &'a str>) -> String {
    let mut dirs: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for p in paths {
        let (dir, name) = p.rsplit_once('/').unwrap_or(("", p));
        dirs.entry(dir).or_default().push(name);
    }
    (dirs.iter())
        .map(|(dir, names)| match names[..] {
            [one] => format!("{dir}/{one}"),
            _ => format!("{dir}/{{{}}}", names.join(", ")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The subdirectory of the staging directory where the guest's files taken from the archive
/// are read from (removed once their symbols are written).
pub const FILES_DIR: &str = "guest-files";

/// The directory of an archive member's copy, under its own `guest-files/N/`.
const COPY_DIR: &str = "file";

/// Where a root file system keeps separate debug files (by build ID under `.build-id/`, by
/// `.gnu_debuglink` name under the file's own directory).
const DEBUG_TREE: &str = "/usr/lib/debug";

/// Writes a session for each address space of `procs` into `dir`, next to the first
/// session `base_sid` (whose map holds the kernel), for the threads `tids` (uftrace's tids,
/// the guest's PIDs) that have records; their maps together within `maps_budget` bytes
/// (`max_size::maps_budget`; `None`: no cap).
#[allow(clippy::too_many_arguments)]
pub fn write(
    dir: &Path,
    base_sid: &str,
    procs: &Procs,
    files: &GuestFiles,
    arch: Arch,
    tasks: &[GuestTask],
    tids: &[u32],
    maps_budget: Option<u64>,
) -> Result<Named> {
    let named = write_sessions(dir, base_sid, procs, files, arch, tasks, tids, maps_budget);
    // The map lines name the guest's files; the copies were only read for their symbols,
    // and go whatever happened (`remove_dir_all` follows no link: the sysroot's debug tree
    // linked from them stays).
    let copies = dir.join(FILES_DIR);
    if copies.symlink_metadata().is_ok() {
        std::fs::remove_dir_all(&copies)
            .with_context(|| format!("cannot remove {}", copies.display()))?;
    }
    named
}

#[allow(clippy::too_many_arguments)]
fn write_sessions(
    dir: &Path,
    base_sid: &str,
    procs: &Procs,
    files: &GuestFiles,
    arch: Arch,
    tasks: &[GuestTask],
    tids: &[u32],
    maps_budget: Option<u64>,
) -> Result<Named> {
    let mut named = Named::default();
    if procs.dropped > 0 {
        named.problems.push(format!(
            "{} code mappings past {MAX_MAPPINGS} in one process were left out: files mapped \
             only there are not named in it",
            procs.dropped
        ));
    }
    let base_map = dir.join(format!("sid-{base_sid}.map"));
    // Each process's map holds the kernel's (its system calls run there), not the kernel's
    // physical-address copy (`kernel_alias::without_physical_copy`).
    let base = map::parse_map(
        &std::fs::read_to_string(&base_map)
            .with_context(|| format!("cannot read {}", base_map.display()))?,
    );
    let mut finder = Finder::new(dir, files, initramfs_fs(procs, files), arch);
    finder.reserved = base.iter().map(|e| e.module_name().to_string()).collect();
    let keep = crate::kernel_alias::without_physical_copy(base);
    // The maps' bytes left (`None`: no cap), and the smallest a map can be (the kernel's
    // lines alone): how many maps there are is the guest's to decide (a fork loop).
    let mut left = maps_budget;
    let smallest = rendered(keep.clone())?.len() as u64;
    let mut over = 0usize;
    // The guest's PID of each recorded thread, and its process.
    let pid_of = |tid: u32| {
        tasks
            .iter()
            .find(|t| t.tid == tid && t.pid > 0)
            .map_or(tid, |t| t.pid)
    };
    // Its process: as the watch saw it created, else as read at its switches (the same
    // grouping `task.txt` gives the threads that stay in the first session).
    let tgid_of = |tid: u32| {
        procs.tgid_of.get(&pid_of(tid)).copied().or_else(|| {
            tasks
                .iter()
                .find(|t| t.tid == tid && t.thread_group().is_some())
                .and_then(GuestTask::thread_group)
        })
    };
    let mut threads: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &tid in tids {
        if let Some(tgid) = tgid_of(tid) {
            if procs.spaces.iter().any(|s| s.tgid == tgid) {
                threads.entry(tgid).or_default().push(tid);
            }
        }
    }
    let name_of = |tgid: u32| {
        tasks
            .iter()
            .find(|t| t.pid == tgid)
            .map(GuestTask::display_name)
            .unwrap_or_else(|| format!("pid-{tgid}"))
    };
    let mut seq = 0u64;
    for (&tgid, members) in &threads {
        named.processes += 1;
        // Before its first address space (a kernel thread until it execs): the kernel's
        // session, named after the process.
        named.lines.push(Later::Session {
            ns: 0,
            pid: tgid,
            sid: base_sid.to_string(),
            name: name_of(tgid),
        });
        named.lines.extend(members.iter().map(|&tid| Later::Task {
            ns: 0,
            tid,
            pid: tgid,
        }));
        named.tids.extend(members);
        let mut previous: Option<&Space> = None;
        for space in procs.spaces.iter().filter(|s| s.tgid == tgid) {
            seq += 1;
            let sid = session_id(
                u64::from_str_radix(base_sid, 16).unwrap_or(0) ^ (seq << 32 | u64::from(tgid)),
            );
            let name = match space.program().filter(|_| space.exec) {
                Some(p) => p.rsplit('/').next().unwrap_or(p).to_string(),
                None => name_of(tgid),
            };
            let text = match left {
                Some(l) if l < smallest => None,
                _ => {
                    let entries = finder.place(space, previous, &keep, &mut named)?;
                    previous = Some(space);
                    let placed = entries.len();
                    let mut all = keep.clone();
                    all.extend(entries);
                    let text = rendered(all)?;
                    (left.is_none_or(|l| text.len() as u64 <= l)).then_some((text, placed))
                }
            };
            // Past the budget: the space runs under the kernel's session, its own
            // functions unnamed (its threads' records are kept whole).
            let sid = match text {
                Some((text, placed)) => {
                    if let Some(l) = left.as_mut() {
                        *l -= text.len() as u64;
                    }
                    named.files += placed;
                    named.spaces += 1;
                    symfiles::write_with(&dir.join(format!("sid-{sid}.map")), |w| {
                        w.write_all(&text)
                    })?;
                    sid
                }
                None => {
                    over += 1;
                    base_sid.to_string()
                }
            };
            named.lines.push(Later::Session {
                ns: space.from,
                pid: tgid,
                sid,
                name,
            });
            named.lines.extend(members.iter().map(|&tid| Later::Task {
                ns: space.from,
                tid,
                pid: tgid,
            }));
        }
    }
    if over > 0 {
        named.problems.push(format!(
            "{over} address spaces past the session maps' share of the size cap ({}) show \
             the kernel's functions alone: their own are unnamed (a larger --max-size leaves \
             more)",
            indicatif::HumanBytes(maps_budget.unwrap_or(0))
        ));
    }
    if let Err(e) = finder.name_entered() {
        named.problems.push(format!(
            "functions entered outside the unwind tables are not named: {e:#}"
        ));
    }
    named.problems.append(&mut finder.by_name);
    named.problems.sort();
    named.problems.dedup();
    Ok(named)
}

/// A session map's text.
fn rendered(entries: Vec<MapEntry>) -> Result<Vec<u8>> {
    let mut text = Vec::new();
    map::write_map(&mut text, entries).context("cannot write a session map")?;
    Ok(text)
}

/// The file system the `-initrd` archive became (the guest's first mapped file's, when the
/// archive has that file), for a guest that leaves it for a root disk: only files mapped
/// from it are taken from the archive. `None`: every file may be (no archive, a plugin that
/// says no file system, or a first file the archive lacks).
fn initramfs_fs(procs: &Procs, files: &GuestFiles) -> Option<u64> {
    let first = procs.first.as_ref().filter(|m| m.fs != 0)?;
    files
        .initrd
        .as_ref()?
        .contains_key(&first.path)
        .then_some(first.fs)
}

/// The address space process `tgid` ran in at `time` (its latest from then on), as an
/// index into `procs.spaces`; `None` where no space of it is known then.
pub fn space_at(procs: &Procs, tgid: u32, time: u64) -> Option<usize> {
    (procs.spaces.iter()).rposition(|s| s.tgid == tgid && s.from <= time)
}

/// The host files of address space `index` ([`space_at`]), each at the load bias its first
/// code mapping gives: for unwinding a stack cookie saved in its code (a window switched
/// on in user space, `record::resync`). Archive members are copied under `scratch/<index>`,
/// which the caller removes.
pub fn space_files(
    scratch: &Path,
    procs: &Procs,
    files: &GuestFiles,
    arch: Arch,
    index: usize,
) -> Vec<(PathBuf, u64)> {
    let Some(space) = procs.spaces.get(index) else {
        return Vec::new();
    };
    let dir = scratch.join(index.to_string());
    let mut finder = Finder::new(&dir, files, initramfs_fs(procs, files), arch);
    let mut out: Vec<(PathBuf, u64)> = Vec::new();
    for m in space.maps.iter() {
        if let Ok(Ok((host, bias))) = finder.bias(m) {
            if !out.iter().any(|(h, _)| *h == host) {
                out.push((host, bias));
            }
        }
    }
    out
}

/// Finds, reads and writes the symbols of guest files, each once.
struct Finder<'a> {
    dir: &'a Path,
    files: &'a GuestFiles,
    /// The initramfs's file system ([`initramfs_fs`]): a file mapped from another (Debian's
    /// root disk after initramfs-tools' `run-init`) is never the archive's member of the same
    /// path (klibc's `/usr/bin/mount` there, util-linux's on the disk).
    initramfs: Option<u64>,
    /// (Guest path, whether the archive may have it) → the file on the host, or why there
    /// is none.
    found: HashMap<(String, bool), std::result::Result<PathBuf, String>>,
    /// Archive members copied so far (each under `guest-files/<its number>/`).
    copies: usize,
    /// Host file → its symbols at offset 0 (`None`: it has none).
    images: HashMap<PathBuf, Option<Image>>,
    arch: Arch,
    /// Module name → the host file whose `.sym` file it is (written once): two different
    /// files of one name (`/bin/tool`, `/usr/bin/tool`) get two (`tool`, `tool#2`).
    modules: HashMap<String, PathBuf>,
    /// The module names of the first session's map (the kernel's, its physical-address
    /// copy's, which no process's map holds): their `.sym` files are written, never a guest
    /// file's.
    reserved: HashSet<String>,
    /// One line for each guest path given a `--symbols` file by its file name alone (from
    /// whatever directory): the user is told which file names which path.
    by_name: Vec<String>,
    /// Where files without a symbol table were placed: `(start, end)` of the map line, the
    /// module, and how far from the file's own addresses.
    by_address: Vec<((u64, u64), String, u64)>,
}

impl<'a> Finder<'a> {
    fn new(dir: &'a Path, files: &'a GuestFiles, initramfs: Option<u64>, arch: Arch) -> Self {
        Finder {
            dir,
            files,
            initramfs,
            found: HashMap::new(),
            copies: 0,
            images: HashMap::new(),
            arch,
            modules: HashMap::new(),
            reserved: HashSet::new(),
            by_name: Vec::new(),
            by_address: Vec::new(),
        }
    }

    /// The host file for a guest path: the archive's copy (written under the trace while
    /// its symbols are read), else the file under `--sysroot` (looked up inside it), else a
    /// `--symbols` file of the same name; or why there is none.
    #[cfg(test)]
    fn host_file(&mut self, guest: &str) -> std::result::Result<PathBuf, String> {
        self.host_file_in(guest, true)
    }

    /// [`Self::host_file`] of a mapping: from the archive only if it is on the initramfs.
    fn host_file_of(&mut self, m: &Mapping) -> std::result::Result<PathBuf, String> {
        let archive = m.fs == 0 || self.initramfs.is_none_or(|fs| fs == m.fs);
        self.host_file_in(&m.path, archive)
    }

    fn host_file_in(&mut self, guest: &str, archive: bool) -> std::result::Result<PathBuf, String> {
        let key = (guest.to_string(), archive);
        if let Some(f) = self.found.get(&key) {
            return f.clone();
        }
        let found = self.find(guest, archive);
        self.found.insert(key, found.clone());
        found
    }

    fn find(&mut self, guest: &str, archive: bool) -> std::result::Result<PathBuf, String> {
        // A kernel makes no such path: only a forged dentry chain does.
        let Some(rel) = contained::plain_relative(guest) else {
            return Err(format!(
                "{} is no plain guest path (an empty, `.` or `..` component): refused",
                guest.escape_debug()
            ));
        };
        let archived = (self.files.initrd.as_ref())
            .filter(|_| archive)
            .and_then(|f| f.get(guest));
        if let Some(data) = archived {
            return self.copy(rel, data).map_err(|e| {
                format!(
                    "{}: its copy from the -initrd archive cannot be written: {e:#}",
                    guest.escape_debug()
                )
            });
        }
        if let Some(root) = &self.files.sysroot {
            if let Ok(file) = contained::file(root, guest.as_bytes()) {
                return Ok(file);
            }
        }
        let name = guest.rsplit('/').next().unwrap_or(guest);
        let by_name = self
            .files
            .symbols
            .iter()
            .find(|p| p.file_name().is_some_and(|n| n == name))
            .cloned();
        if let Some(file) = &by_name {
            self.by_name.push(format!(
                "{} is named from {} (a --symbols file of the same name: neither the -initrd \
                 archive nor --sysroot has it)",
                guest.escape_debug(),
                file.display()
            ));
        }
        by_name.ok_or_else(|| {
            format!(
                "no file found for {} (not in the -initrd archive nor under --sysroot; \
                     give it with --symbols)",
                guest.escape_debug()
            )
        })
    }

    /// Writes an archive member's contents under a directory of its own, named by us:
    /// `guest-files/N/file/NAME`, NAME the guest path's last component (a plain name, which
    /// names its `FILE+0xADDR` functions); none of the guest's directories is made on the
    /// host. Its debug file is found as one under the sysroot is ([`Self::link_debug_trees`]).
    fn copy(&mut self, rel: &Path, data: &[u8]) -> Result<PathBuf> {
        self.copies += 1;
        let base = self.dir.join(FILES_DIR).join(self.copies.to_string());
        let file_dir = base.join(COPY_DIR);
        std::fs::create_dir_all(&file_dir)
            .with_context(|| format!("cannot create {}", file_dir.display()))?;
        self.link_debug_trees(&base, rel)?;
        let name = rel
            .file_name()
            .context("a guest path without a file name")?;
        let path = file_dir.join(name);
        // A new file, never one a link leads to.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, data))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// Links the sysroot's debug tree (`usr/lib/debug`, found inside it) from a copy's
    /// directories, so that a stripped file taken from the `-initrd` archive at guest path
    /// `rel` finds its debug file in the sysroot as it would there (the symbol loader looks
    /// in every `usr/lib/debug` above a file): `base/usr/lib/debug` is the tree, for its
    /// build ID; `base/file/usr/lib/debug` is the tree's directory of `rel`'s directory,
    /// where its `.gnu_debuglink` name is looked for.
    fn link_debug_trees(&self, base: &Path, rel: &Path) -> Result<()> {
        let Some(root) = self.files.sysroot.as_ref() else {
            return Ok(());
        };
        let mut in_tree = DEBUG_TREE.as_bytes().to_vec();
        for c in rel.parent().into_iter().flat_map(Path::components) {
            in_tree.push(b'/');
            in_tree.extend_from_slice(c.as_os_str().as_encoded_bytes());
        }
        // (A file named `usr` keeps that name: its debuglink is not looked for.)
        let beside = (rel.file_name() != Some("usr".as_ref())).then(|| base.join(COPY_DIR));
        let trees = [
            (DEBUG_TREE.as_bytes(), Some(base.to_path_buf())),
            (&in_tree[..], beside),
        ];
        for (guest, at) in trees.into_iter().filter_map(|(g, at)| Some((g, at?))) {
            let Some(tree) = contained::path(root, guest).ok().filter(|t| t.is_dir()) else {
                continue;
            };
            let link = at.join(&DEBUG_TREE[1..]);
            if let Some(parent) = link.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::os::unix::fs::symlink(&tree, &link)
                .with_context(|| format!("cannot link {} to {}", link.display(), tree.display()))?;
        }
        Ok(())
    }

    /// Where a host file came from, as the user is told: the `-initrd` archive's copies
    /// are gone once the trace is written.
    fn shown(&self, host: &Path) -> String {
        if host.starts_with(self.dir.join(FILES_DIR)) {
            "the -initrd archive's copy".to_string()
        } else {
            host.display().to_string()
        }
    }

    /// A mapping's file on the host and the load bias the mapping gives it, or why not.
    fn bias(&mut self, m: &Mapping) -> Result<std::result::Result<(PathBuf, u64), String>> {
        let host = match self.host_file_of(m) {
            Ok(host) => host,
            Err(why) => return Ok(Err(why)),
        };
        let Some(elf) = Elf::read(&host) else {
            return Ok(Err(format!(
                "{} ({}) is not an ELF file",
                m.path,
                self.shown(&host)
            )));
        };
        Ok(Ok((host, elf.bias_of_mapping(m.start, m.offset))))
    }

    /// A host file's symbols at offset 0, read once. A file with nothing but its entry point
    /// (klibc's, in Debian's initramfs) is named by it, so that it is placed and what the
    /// trace enters in it is named by [`Finder::name_entered`].
    fn image(&mut self, host: &Path) -> Option<Image> {
        let arch = self.arch;
        self.images
            .entry(host.to_path_buf())
            .or_insert_with(|| {
                let opts = LoadOptions {
                    offset: 0,
                    demangle: false,
                    source_lines: true,
                    expected_arch: Some(arch),
                    name_entry: true,
                };
                qemu_uftrace_symbols::load(host, &opts).ok()
            })
            .clone()
    }

    /// The map lines of one address space's files (their `.sym` files written), each file
    /// at the load bias its first code mapping gives; then the files of the process's
    /// `previous` space, where nothing of this one is: the frames an exec leaves open
    /// (`execve` never returns) close after it, in this space. Each process's code is
    /// recorded at its own addresses (the plugin moves those of code another process
    /// translated: `engine/src/spaces.rs`), so no other process's mappings are needed.
    fn place(
        &mut self,
        space: &Space,
        previous: Option<&Space>,
        keep: &[MapEntry],
        named: &mut Named,
    ) -> Result<Vec<MapEntry>> {
        let own = self.images_of(space, Some(&mut *named))?;
        let before = match previous {
            Some(p) => self.images_of(p, None)?,
            None => Vec::new(),
        };
        // Host file → its guest path, for the map lines.
        let guest_of: HashMap<PathBuf, String> = own
            .iter()
            .chain(&before)
            .map(|(g, img)| (img.path.clone(), g.clone()))
            .collect();
        let (mut placed, skipped) =
            symfiles::place(own.into_iter().map(|(_, i)| i).collect(), keep);
        // A file that overlaps the first session's images is named there already (given
        // with --symbols at its link address: a static program).
        named.problems.extend(
            skipped
                .into_iter()
                .filter(|why| !why.contains(" overlaps ")),
        );
        let mut taken: Vec<MapEntry> = keep.to_vec();
        taken.extend(placed.iter().map(|p| p.map.clone()));
        // The previous space's files where they meet this one's are left out: there the
        // address is this space's.
        placed.extend(symfiles::place(before.into_iter().map(|(_, i)| i).collect(), &taken).0);
        let mut used: HashSet<String> = keep.iter().map(|e| e.module_name().to_string()).collect();
        let mut out = Vec::new();
        for mut p in placed {
            let host = p.image.path.clone();
            let name = self.module_name(&host, guest_of.get(&host), &mut used);
            // The map line names the guest's file (`/lib/libc.so.6`) under a module name
            // its `.sym` file has.
            let dir = guest_of
                .get(&host)
                .and_then(|g| g.rsplit_once('/'))
                .map_or("", |(d, _)| d);
            p.map.path = format!("{dir}/{name}").into();
            if p.map.path.was_cut() {
                named
                    .problems
                    .extend(map::cut_paths(std::slice::from_ref(&p.map)));
            }
            if !p.image.by_address.is_empty() {
                let at = self.image(&host).map_or(p.image.start, |i| i.start);
                self.by_address.push((
                    (p.map.start, p.map.end),
                    name.clone(),
                    p.image.start.wrapping_sub(at),
                ));
            }
            // The first session to use a name writes its file (`module_name` gives a name
            // only to one host file); one that cannot be written costs that file alone.
            if !self.modules.contains_key(&name) {
                if let Err(e) = symfiles::write_files(self.dir, &p, false) {
                    named.problems.push(format!(
                        "{} is not named: {e:#}",
                        guest_of
                            .get(&host)
                            .map_or(p.map.path.as_str(), String::as_str)
                            .escape_debug()
                    ));
                    continue;
                }
                self.modules.insert(name, host);
            }
            out.push(p.map);
        }
        Ok(out)
    }

    /// The functions of files without a symbol table that the trace enters where their
    /// unwind tables and dynamic sections know none (crtstuff's `deregister_tm_clones`, code
    /// without CFI), named by address as the others (`FILE+0xADDR`): each placement's entries
    /// taken back to the file's addresses, and its `.sym` file written again. An address
    /// of another process that only lies in the range gives a name nothing there enters.
    fn name_entered(&mut self) -> Result<()> {
        if self.by_address.is_empty() {
            return Ok(());
        }
        let ranges: Vec<(u64, u64)> = self.by_address.iter().map(|(r, ..)| *r).collect();
        let entered = crate::unnamed::entries_within(self.dir, &ranges)?;
        let mut extra: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for ((start, end), module, bias) in &self.by_address {
            let link = entered.range(start..end).map(|a| a.wrapping_sub(*bias));
            extra.entry(module.clone()).or_default().extend(link);
        }
        for (module, addrs) in extra {
            let Some(host) = self.modules.get(&module).cloned() else {
                continue;
            };
            let Some(mut image) = self.image(&host) else {
                continue;
            };
            let found: Vec<(u64, u64)> = (addrs.into_iter())
                .filter(|a| (image.start..image.end).contains(a))
                .map(|a| (a, 1))
                .collect();
            if image.name_by_address(&found) == 0 {
                continue;
            }
            let placed = symfiles::PlacedImage {
                map: MapEntry {
                    start: image.start,
                    end: image.end,
                    path: module.as_str().into(),
                },
                image,
            };
            symfiles::write_files(self.dir, &placed, false)?;
        }
        Ok(())
    }

    /// The module name of host file `host` (the guest's `guest`) in a session whose names
    /// so far are `used`: the guest's file name (the host file's is a link's target in the
    /// sysroot, `libz.so.1.2.13` for `libz.so.1`), or the first `#N` form no other file has
    /// and the session does not use.
    fn module_name(
        &self,
        host: &Path,
        guest: Option<&String>,
        used: &mut HashSet<String>,
    ) -> String {
        let stem = guest
            .and_then(|g| g.rsplit('/').next())
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .or_else(|| host.file_name().map(symfiles::word))
            .map(|n| n.replace(char::is_whitespace, "_"))
            .unwrap_or_else(|| "image".into());
        let mut name = stem.clone();
        let mut n = 2;
        while used.contains(&name)
            || self.reserved.contains(&name)
            || self.modules.get(&name).is_some_and(|h| h != host)
        {
            name = format!("{stem}#{n}");
            n += 1;
        }
        used.insert(name.clone());
        name
    }

    /// The symbols of a space's files, each at the load bias its first code mapping gives,
    /// with their guest paths; what could not be named goes to `named`, when given.
    fn images_of(
        &mut self,
        space: &Space,
        mut named: Option<&mut Named>,
    ) -> Result<Vec<(String, Image)>> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut problem = |why: String| {
            if let Some(n) = named.as_deref_mut() {
                n.problems.push(why);
            }
        };
        let mut by_address = Vec::new();
        for m in space.maps.iter() {
            if !seen.insert(m.path.as_str()) {
                continue;
            }
            let (host, bias) = match self.bias(m)? {
                Ok(found) => found,
                Err(why) => {
                    problem(why);
                    continue;
                }
            };
            let Some(img) = self.image(&host) else {
                problem(format!(
                    "{} ({}) has no symbols (give an unstripped copy with --symbols)",
                    m.path,
                    self.shown(&host)
                ));
                continue;
            };
            // Named by address only, or only its exports by name: the file's (or its debug
            // file's) symbol table was not there.
            if !img.by_address.is_empty() || img.functions.iter().all(|f| f.global) {
                by_address.push(ByAddress {
                    exports_only: !img.functions.is_empty(),
                    path: m.path.clone(),
                    example: img.by_address.first().map(|f| f.name.clone()),
                });
            }
            out.push((m.path.clone(), img.shifted(bias)));
        }
        if let Some(n) = named {
            n.by_address.append(&mut by_address);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finder<'a>(dir: &'a Path, files: &'a GuestFiles) -> Finder<'a> {
        Finder::new(dir, files, None, Arch::Aarch64)
    }

    /// The archive first, then the sysroot, then a `--symbols` file of the same name.
    /// One process (tgid 10) that mapped each of `paths`, a page each, 1 MiB apart.
    fn one_process<S: AsRef<str>>(paths: &[S]) -> Procs {
        Procs {
            spaces: vec![Space {
                tgid: 10,
                from: 1,
                maps: paths
                    .iter()
                    .enumerate()
                    .map(|(i, path)| Mapping {
                        path: path.as_ref().to_string(),
                        start: 0x10_0000 * (i as u64 + 1),
                        len: 0x1000,
                        offset: 0,
                        fs: 0,
                    })
                    .collect(),
                exec: true,
            }],
            tgid_of: HashMap::from([(10, 10)]),
            ..Procs::default()
        }
    }

    #[test]
    fn files_are_found_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("bin/sh"), b"from the sysroot").unwrap();
        std::fs::write(root.join("bin/init"), b"from the sysroot").unwrap();
        let extra = tmp.path().join("tool");
        std::fs::write(&extra, b"given").unwrap();
        let files = GuestFiles {
            initrd: Some(HashMap::from([(
                "/bin/init".to_string(),
                b"archive".to_vec(),
            )])),
            sysroot: Some(root.clone()),
            symbols: vec![extra.clone()],
        };
        let staging = tmp.path().join("staging");
        let mut f = finder(&staging, &files);
        let init = f.host_file("/bin/init").unwrap();
        assert_eq!(std::fs::read(&init).unwrap(), b"archive");
        assert_eq!(
            f.host_file("/bin/sh"),
            Ok(std::fs::canonicalize(&root).unwrap().join("bin/sh"))
        );
        assert_eq!(f.host_file("/usr/bin/tool"), Ok(extra.clone()));
        assert!(f.host_file("/usr/bin/none").is_err());
        // The file found by its name alone is said, once.
        assert_eq!(f.host_file("/usr/bin/tool"), Ok(extra.clone()));
        assert_eq!(f.by_name.len(), 1, "{:?}", f.by_name);
        assert!(
            f.by_name[0].starts_with(&format!("/usr/bin/tool is named from {}", extra.display())),
            "{}",
            f.by_name[0]
        );
        let m = Mapping {
            path: "/usr/bin/none".into(),
            start: 0x1000,
            len: 0x1000,
            offset: 0,
            fs: 0,
        };
        let why = f.bias(&m).unwrap().unwrap_err();
        assert!(why.starts_with("no file found for /usr/bin/none"), "{why}");
    }

    /// A guest that boots from its initramfs into a root disk (Debian's initramfs-tools):
    /// the archive's `/usr/bin/mount` (klibc's) names only the file mapped from the
    /// initramfs's file system (that of the first file mapped, which the archive has); the
    /// one mapped from the disk is the sysroot's. A plugin that says no file system keeps
    /// the archive first.
    #[test]
    fn the_archive_names_only_files_of_the_initramfs() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::write(root.join("usr/bin/mount"), b"util-linux").unwrap();
        let files = GuestFiles {
            initrd: Some(HashMap::from([
                ("/usr/bin/sh".to_string(), b"klibc sh".to_vec()),
                ("/usr/bin/mount".to_string(), b"klibc mount".to_vec()),
            ])),
            sysroot: Some(root.clone()),
            symbols: Vec::new(),
        };
        let map = |path: &str, fs: u64| Mapping {
            path: path.into(),
            start: 0x1000,
            len: 0x1000,
            offset: 0,
            fs,
        };
        let mut procs = one_process(&["/usr/bin/sh"]);
        procs.first = Some(map("/usr/bin/sh", 0xaa));
        assert_eq!(initramfs_fs(&procs, &files), Some(0xaa));
        // A first file the archive lacks: the guest never ran from it.
        procs.first = Some(map("/sbin/init", 0xaa));
        assert_eq!(initramfs_fs(&procs, &files), None);
        let staging = tmp.path().join("staging");
        let mut f = finder(&staging, &files);
        f.initramfs = Some(0xaa);
        let early = f.host_file_of(&map("/usr/bin/mount", 0xaa)).unwrap();
        assert_eq!(std::fs::read(&early).unwrap(), b"klibc mount");
        let late = f.host_file_of(&map("/usr/bin/mount", 0xbb)).unwrap();
        assert_eq!(std::fs::read(&late).unwrap(), b"util-linux");
        let unknown = f.host_file_of(&map("/usr/bin/mount", 0)).unwrap();
        assert_eq!(std::fs::read(&unknown).unwrap(), b"klibc mount");
    }

    /// Builds a shared object at `path` whose one function is `name` (the host's compiler:
    /// only its symbols are read).
    fn shared_object(path: &Path, name: &str) {
        let src = path.with_extension("c");
        std::fs::write(&src, format!("int {name}(int x) {{ return x + 1; }}\n")).unwrap();
        let out = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(path)
            .arg(&src)
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// [`write`] of an x86_64 guest's `procs` beside the first session `aa`.
    fn written(
        staging: &Path,
        procs: &Procs,
        files: &GuestFiles,
        tids: &[u32],
        budget: Option<u64>,
    ) -> Named {
        let sid = "00000000000000aa";
        write(staging, sid, procs, files, Arch::X86_64, &[], tids, budget).unwrap()
    }

    /// A guest decides how many address spaces there are (a fork loop): past the maps'
    /// budget a space gets the kernel's session, whole records and no map of its own, and
    /// the user is told how many did.
    #[test]
    fn spaces_past_the_maps_budget_run_under_the_kernels_session() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        shared_object(&root.join("bin/tool"), "in_tool");
        let staging = tmp.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("sid-00000000000000aa.map"), "").unwrap();
        let tgids = 10..30u32;
        let procs = Procs {
            spaces: (tgids.clone())
                .map(|tgid| Space {
                    tgid,
                    from: u64::from(tgid),
                    maps: [Mapping {
                        path: "/bin/tool".into(),
                        start: 0x10_0000,
                        len: 0x1000,
                        offset: 0,
                        fs: 0,
                    }]
                    .into_iter()
                    .collect(),
                    exec: true,
                })
                .collect(),
            tgid_of: tgids.clone().map(|t| (t, t)).collect(),
            ..Procs::default()
        };
        let files = GuestFiles {
            initrd: None,
            sysroot: Some(root),
            symbols: Vec::new(),
        };
        let tids: Vec<u32> = tgids.collect();
        let write_with = |budget| {
            let named = written(&staging, &procs, &files, &tids, budget);
            let maps = std::fs::read_dir(&staging)
                .unwrap()
                .filter_map(|e| {
                    let name = e.unwrap().file_name().into_string().unwrap();
                    (name.starts_with("sid-") && name != "sid-00000000000000aa.map")
                        .then(|| std::fs::metadata(staging.join(name)).unwrap().len())
                })
                .collect::<Vec<_>>();
            (named, maps)
        };
        let (all, maps) = write_with(None);
        assert_eq!((all.spaces, maps.len()), (20, 20), "{:?}", all.problems);
        let one = maps[0];
        for e in std::fs::read_dir(&staging).unwrap() {
            let e = e.unwrap();
            if e.file_name() != "sid-00000000000000aa.map" && e.file_name() != "tool.sym" {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        // Room for five maps and a half.
        let (some, maps) = write_with(Some(one * 11 / 2));
        assert_eq!((some.spaces, maps.len()), (5, 5), "{:?}", some.problems);
        assert!(maps.iter().sum::<u64>() <= one * 11 / 2);
        let kernels = (some.lines.iter())
            .filter(|l| matches!(l, Later::Session { sid, ns, .. } if ns > &0 && sid == "00000000000000aa"))
            .count();
        assert_eq!(kernels, 15);
        assert!(
            some.problems
                .iter()
                .any(|p| p.starts_with("15 address spaces past the session maps' share")),
            "{:?}",
            some.problems
        );
    }

    /// Two different files of one name in two processes get a `.sym` file each; the same
    /// file in two processes shares one.
    #[test]
    fn one_name_two_files_two_sym_files() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        for d in ["bin", "usr/bin", "lib"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        shared_object(&root.join("bin/tool"), "from_bin");
        shared_object(&root.join("usr/bin/tool"), "from_usr_bin");
        shared_object(&root.join("lib/libz.so"), "in_libz");
        let staging = tmp.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("sid-00000000000000aa.map"), "").unwrap();
        let map = |path: &str, start: u64| Mapping {
            path: path.into(),
            start,
            len: 0x1000,
            offset: 0,
            fs: 0,
        };
        let space = |tgid: u32, maps: Vec<Mapping>| Space {
            tgid,
            from: tgid as u64,
            maps: maps.into_iter().collect(),
            exec: true,
        };
        let procs = Procs {
            spaces: vec![
                space(
                    10,
                    vec![map("/bin/tool", 0x10_0000), map("/lib/libz.so", 0x40_0000)],
                ),
                space(
                    11,
                    vec![
                        map("/usr/bin/tool", 0x20_0000),
                        map("/lib/libz.so", 0x50_0000),
                    ],
                ),
            ],
            tgid_of: HashMap::from([(10, 10), (11, 11)]),
            ..Procs::default()
        };
        let files = GuestFiles {
            initrd: None,
            sysroot: Some(root),
            symbols: Vec::new(),
        };
        let named = written(&staging, &procs, &files, &[10, 11], None);
        assert_eq!(named.spaces, 2, "{:?}", named.problems);
        let modules = |tgid: u32| -> Vec<String> {
            let sid = named
                .lines
                .iter()
                .find_map(|l| match l {
                    Later::Session { pid, sid, ns, .. } if *pid == tgid && *ns > 0 => {
                        Some(sid.clone())
                    }
                    _ => None,
                })
                .expect("a session");
            let text = std::fs::read_to_string(staging.join(format!("sid-{sid}.map"))).unwrap();
            map::parse_map(&text)
                .iter()
                .map(|e| e.path.to_string())
                .collect()
        };
        assert_eq!(modules(10), ["/bin/tool", "/lib/libz.so"]);
        assert_eq!(modules(11), ["/usr/bin/tool#2", "/lib/libz.so"]);
        let sym =
            |name: &str| std::fs::read_to_string(staging.join(format!("{name}.sym"))).unwrap();
        assert!(sym("tool").contains("from_bin") && !sym("tool").contains("from_usr_bin"));
        assert!(sym("tool#2").contains("from_usr_bin"));
        assert!(sym("libz.so").contains("in_libz"));
    }

    /// A crafted `-initrd` archive and `--sysroot` against forged guest paths: members that
    /// climb out (`../../x/pwned`), one aimed through the linked debug tree into the sysroot
    /// (`usr//lib/debug/…`), `/a` beside `/a/b`, a lossy name over 255 bytes; a sysroot whose
    /// absolute link leads to a host file of the same path and whose relative link climbs
    /// out of it. Every file that can be named is, from inside the root; each one that
    /// cannot is said, alone; nothing is written outside the trace and nothing is left in it.
    #[test]
    fn forged_paths_stay_inside_the_trace_and_the_sysroot() {
        let tmp = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(tmp.path()).unwrap();
        let build = top.join("build");
        let root = top.join("root");
        let host = top.join("host");
        for d in [&build, &root.join("usr/lib/debug"), &host] {
            std::fs::create_dir_all(d).unwrap();
        }
        let elf = |name: &str, function: &str| {
            let path = build.join(name);
            shared_object(&path, function);
            std::fs::read(path).unwrap()
        };
        // The root: `/lib` an absolute link to `/usr/lib` (as the guest sees it), a library
        // there, one whose absolute link names a host path that exists (other contents)
        // and exists inside the root too, one whose relative link climbs out.
        std::os::unix::fs::symlink("/usr/lib", root.join("lib")).unwrap();
        std::fs::write(root.join("usr/lib/libin.so"), elf("libin.so", "in_root")).unwrap();
        let abs_target = host.join("libabs.so");
        std::fs::write(&abs_target, elf("libabs.so", "abs_on_host")).unwrap();
        let abs_inside = root.join(abs_target.strip_prefix("/").unwrap());
        std::fs::create_dir_all(abs_inside.parent().unwrap()).unwrap();
        std::fs::write(&abs_inside, elf("libabs.so", "abs_in_root")).unwrap();
        std::os::unix::fs::symlink(&abs_target, root.join("usr/lib/libabs.so")).unwrap();
        // A versioned library behind its soname's link: named by the soname, as mapped.
        std::fs::write(root.join("usr/lib/libv.so.1.2.3"), elf("libv.so", "in_v")).unwrap();
        std::os::unix::fs::symlink("libv.so.1.2.3", root.join("usr/lib/libv.so.1")).unwrap();
        std::fs::write(host.join("libup.so"), elf("libup.so", "up_on_host")).unwrap();
        std::os::unix::fs::symlink("../../../host/libup.so", root.join("usr/lib/libup.so"))
            .unwrap();
        // The archive.
        let long_name = [0xffu8; 300];
        let mut cpio = Vec::new();
        let mut guests = Vec::new();
        for (name, function) in [
            (b"../../x/pwned".as_slice(), "pwned"),
            (b"usr//lib/debug/evil.debug", "evil"),
            (b"a", "in_a"),
            (b"a/b", "in_a_b"),
            (&long_name, "long_named"),
            (b"bin/good", "good"),
        ] {
            cpio.extend(initrd::tests::member(
                name,
                0o100755,
                &elf(function, function),
            ));
            guests.push(format!("/{}", String::from_utf8_lossy(name)));
        }
        cpio.extend(initrd::tests::member("TRAILER!!!", 0, b""));
        let archive = initrd::parse_archive(&cpio).unwrap();
        assert_eq!(archive.refused, ["../../x/pwned"]);
        guests.extend(
            [
                "/lib/libin.so",
                "/usr/lib/libabs.so",
                "/usr/lib/libup.so",
                "/lib/libv.so.1",
            ]
            .map(String::from),
        );
        // `/bin/../a` as a forged dentry chain gives it.
        guests.push("/bin/../a".into());
        let staging = top.join("trace");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("sid-00000000000000aa.map"), "").unwrap();
        let procs = one_process(&guests);
        let files = GuestFiles {
            initrd: Some(archive.files),
            sysroot: Some(root.clone()),
            symbols: Vec::new(),
        };
        let before = qemu_uftrace_tests::tree(&top);
        let named = written(&staging, &procs, &files, &[10], None);
        assert_eq!(named.spaces, 1);
        // Nothing changed outside the trace, nothing of the copies is left in it.
        let after = qemu_uftrace_tests::tree(&top);
        let changed: Vec<_> = before
            .keys()
            .chain(after.keys())
            .filter(|p| !p.starts_with(&staging) && before.get(*p) != after.get(*p))
            .collect();
        assert!(changed.is_empty(), "changed outside the trace: {changed:?}");
        assert!(!staging.join(FILES_DIR).exists());
        let sym = |name: &str| std::fs::read_to_string(staging.join(format!("{name}.sym")));
        for (name, function) in [
            ("a", "in_a"),
            ("b", "in_a_b"),
            ("good", "good"),
            ("libin.so", "in_root"),
            ("libabs.so", "abs_in_root"),
            ("libv.so.1", "in_v"),
        ] {
            let text = sym(name).unwrap_or_else(|e| panic!("{name}.sym: {e}"));
            assert!(text.contains(function), "{name}.sym:\n{text}");
        }
        assert!(!sym("libabs.so").unwrap().contains("abs_on_host"));
        let sid = named
            .lines
            .iter()
            .find_map(|l| match l {
                Later::Session { sid, ns, .. } if *ns > 0 => Some(sid.clone()),
                _ => None,
            })
            .expect("a session");
        let map = std::fs::read_to_string(staging.join(format!("sid-{sid}.map"))).unwrap();
        assert!(map.contains("/lib/libv.so.1\n"), "{map}");
        assert!(sym("libup.so").is_err());
        // One line for each file not named, naming it.
        let said = named.problems.join("\n");
        for guest in [
            "/../../x/pwned is no plain guest path",
            "/usr//lib/debug/evil.debug is no plain guest path",
            "/bin/../a is no plain guest path",
            "no file found for /usr/lib/libup.so",
            "\u{fffd}\u{fffd}",
        ] {
            assert!(said.contains(guest), "{guest} in:\n{said}");
        }
        assert_eq!(named.problems.len(), 5, "{said}");
    }

    /// Files named by address are said in one line a kind, each file once, by directory.
    #[test]
    fn files_named_by_address_are_said_together() {
        let file = |exports_only, path: &str, example: Option<&str>| ByAddress {
            exports_only,
            path: path.to_string(),
            example: example.map(str::to_string),
        };
        let named = Named {
            by_address: vec![
                file(true, "/usr/bin/dash", Some("dash+0x4000")),
                file(true, "/usr/bin/bash", Some("bash+0x2f000")),
                file(false, "/usr/bin/cat", None),
                file(true, "/usr/lib/libz.so.1", None),
                // The same file again (another space, or the archive's copy).
                file(true, "/usr/bin/bash", Some("bash+0x2f000")),
            ],
            ..Named::default()
        };
        assert_eq!(
            named.by_address_lines(),
            [
                "1 file has no symbol table: its functions are named by their address in the \
                 file (give its debug file under --sysroot's /usr/lib/debug, or a copy with its \
                 symbol table with --symbols): /usr/bin/cat",
                "3 files have only their exported symbols: their internal functions are named \
                 by their address in the file, as bash+0x2f000 (give their debug files under \
                 --sysroot's /usr/lib/debug, or copies with their symbol tables with \
                 --symbols): /usr/bin/{bash, dash}, /usr/lib/libz.so.1",
            ]
        );
        assert!(Named::default().by_address_lines().is_empty());
    }

    /// Runs a cross tool, which must succeed.
    fn run(cmd: &mut std::process::Command) {
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `dir/name`, an arm64 shared object with DWARF whose static function is `hidden`,
    /// then split as distributions do: its debug file `dir/name.debug` (objcopy
    /// --only-keep-debug), the object stripped of everything, with a debuglink to it.
    /// Returns the object's build ID.
    fn stripped_with_debug_file(dir: &Path, name: &str, hidden: &str) -> Vec<u8> {
        use object::Object;
        let src = dir.join(format!("{name}.c"));
        std::fs::write(
            &src,
            format!(
                "static __attribute__((noinline)) int {hidden}(int x) {{ return x * 3; }}\n\
                 int entry_{hidden}(int x) {{ return {hidden}(x) + 1; }}\n"
            ),
        )
        .unwrap();
        let lib = dir.join(name);
        run(std::process::Command::new("aarch64-linux-gnu-gcc")
            .current_dir(dir)
            .args(["-O1", "-g", "-shared", "-fPIC", "-Wl,--build-id=sha1", "-o"])
            .arg(&lib)
            .arg(&src));
        let debug = dir.join(format!("{name}.debug"));
        let objcopy = "aarch64-linux-gnu-objcopy";
        run(std::process::Command::new(objcopy)
            .arg("--only-keep-debug")
            .arg(&lib)
            .arg(&debug));
        run(std::process::Command::new(objcopy)
            .arg("--strip-all")
            .arg(&lib));
        run(std::process::Command::new(objcopy)
            .current_dir(dir)
            .arg(format!("--add-gnu-debuglink={name}.debug"))
            .arg(&lib));
        let data = std::fs::read(&lib).unwrap();
        let id = object::File::parse(&data[..]).unwrap().build_id().unwrap();
        id.expect("a build ID").to_vec()
    }

    /// Stripped guest files are named from their debug files in the sysroot's debug tree:
    /// by build ID (a file under --sysroot, and one from the -initrd archive) and by
    /// .gnu_debuglink (under `usr/lib/debug/<its directory>/`), with their source lines.
    #[test]
    fn stripped_files_take_their_debug_files_from_the_sysroot() {
        let tmp = tempfile::tempdir().unwrap();
        let build = tmp.path().join("build");
        let root = tmp.path().join("root");
        for d in [&build, &root.join("bin")] {
            std::fs::create_dir_all(d).unwrap();
        }
        let debug = root.join("usr/lib/debug");
        let by_id = |id: &[u8]| {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            debug
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]))
        };
        let place = |from: PathBuf, to: PathBuf| {
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::rename(from, to).unwrap();
        };
        let id = stripped_with_debug_file(&build, "byid", "hidden_byid");
        place(build.join("byid"), root.join("bin/byid"));
        place(build.join("byid.debug"), by_id(&id));
        stripped_with_debug_file(&build, "linked", "hidden_linked");
        place(build.join("linked"), root.join("bin/linked"));
        place(build.join("linked.debug"), debug.join("bin/linked.debug"));
        let id = stripped_with_debug_file(&build, "packed", "hidden_packed");
        place(build.join("packed.debug"), by_id(&id));
        // An archive member whose debug file is named by its debuglink alone.
        stripped_with_debug_file(&build, "packlink", "hidden_packlink");
        place(
            build.join("packlink.debug"),
            debug.join("usr/sbin/packlink.debug"),
        );
        let staging = tmp.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("sid-00000000000000aa.map"), "").unwrap();
        let procs = one_process(&[
            "/bin/byid",
            "/bin/linked",
            "/bin/packed",
            "/usr/sbin/packlink",
        ]);
        let files = GuestFiles {
            initrd: Some(HashMap::from([
                (
                    "/bin/packed".to_string(),
                    std::fs::read(build.join("packed")).unwrap(),
                ),
                (
                    "/usr/sbin/packlink".to_string(),
                    std::fs::read(build.join("packlink")).unwrap(),
                ),
            ])),
            sysroot: Some(root.clone()),
            symbols: Vec::new(),
        };
        let named = write(
            &staging,
            "00000000000000aa",
            &procs,
            &files,
            Arch::Aarch64,
            &[],
            &[10],
            None,
        )
        .unwrap();
        assert!(named.problems.is_empty(), "{:?}", named.problems);
        for name in ["byid", "linked", "packed", "packlink"] {
            let sym = std::fs::read_to_string(staging.join(format!("{name}.sym"))).unwrap();
            assert!(
                sym.contains(&format!("hidden_{name}")),
                "{name}.sym:\n{sym}"
            );
            let dbg = std::fs::read_to_string(staging.join(format!("{name}.dbg"))).unwrap();
            assert!(dbg.contains(&format!("{name}.c")), "{name}.dbg:\n{dbg}");
        }
        // The archive's copies are gone, the sysroot's debug tree with them untouched.
        assert!(!staging.join(FILES_DIR).exists());
        assert!(by_id(&id).is_file());
    }

    /// An archive member's copy is named by us: its own numbered directory, the guest
    /// path's last component, none of its directories made on the host.
    #[test]
    fn archive_copies_take_no_guest_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let staging = tmp.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        let deep = format!("/{}/tool", ["a"; 40].join("/"));
        let files = GuestFiles {
            initrd: Some(HashMap::from([
                (deep.clone(), b"first".to_vec()),
                ("/usr".to_string(), b"second".to_vec()),
            ])),
            sysroot: None,
            symbols: Vec::new(),
        };
        let mut finder = Finder::new(&staging, &files, None, Arch::Aarch64);
        let copies = staging.join(FILES_DIR);
        for (guest, n, name, bytes) in [
            (&deep[..], 1, "tool", "first"),
            ("/usr", 2, "usr", "second"),
        ] {
            let host = finder.host_file(guest).unwrap();
            assert_eq!(host, copies.join(format!("{n}/file/{name}")), "{guest}");
            assert_eq!(std::fs::read_to_string(&host).unwrap(), bytes);
        }
        assert!(!copies.join("1/a").exists() && !copies.join("1/file/a").exists());
    }
}
