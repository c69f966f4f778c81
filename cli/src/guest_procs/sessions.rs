//! One uftrace session per guest address space: its map is the kernel's (the trace's first
//! session) plus the process's files where that process mapped them, so that uftrace names
//! a process's own functions, its libraries' and the kernel's beneath its syscalls. Threads
//! are grouped by process (uftrace's pid is the guest's thread group).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use qemu_uftrace_format::map::{self, MapEntry};
use qemu_uftrace_format::task::{session_id, Later};
use qemu_uftrace_symbols::{Arch, Image, LoadOptions};

use super::events::{Mapping, Procs, Space};
use super::initrd;
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
}

/// The subdirectory of the staging directory where the guest's files taken from the archive
/// are read from (removed once their symbols are written).
pub const FILES_DIR: &str = "guest-files";

/// Writes a session for each address space of `procs` into `dir`, next to the first
/// session `base_sid` (whose map holds the kernel), for the threads `tids` (uftrace's tids,
/// the guest's PIDs) that have records.
pub fn write(
    dir: &Path,
    base_sid: &str,
    procs: &Procs,
    files: &GuestFiles,
    arch: Arch,
    tasks: &[GuestTask],
    tids: &[u32],
) -> Result<Named> {
    let mut named = Named::default();
    let base_map = dir.join(format!("sid-{base_sid}.map"));
    let keep = map::parse_map(
        &std::fs::read_to_string(&base_map)
            .with_context(|| format!("cannot read {}", base_map.display()))?,
    );
    let mut finder = Finder {
        dir,
        files,
        found: HashMap::new(),
        images: HashMap::new(),
        arch,
        written: HashSet::new(),
        biases: BTreeMap::new(),
    };
    finder.learn_biases(&procs.spaces)?;
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
                .find(|t| t.tid == tid && t.tgid > 0 && !t.boot)
                .map(|t| t.tgid)
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
        for space in procs.spaces.iter().filter(|s| s.tgid == tgid) {
            seq += 1;
            let sid = session_id(
                u64::from_str_radix(base_sid, 16).unwrap_or(0) ^ (seq << 32 | u64::from(tgid)),
            );
            let entries = finder.place(space, &keep, &mut named)?;
            named.files += entries.len();
            named.spaces += 1;
            let mut all = keep.clone();
            all.extend(entries);
            symfiles::write_with(&dir.join(format!("sid-{sid}.map")), |w| {
                map::write_map(w, all)
            })?;
            let name = match space.program().filter(|_| space.exec) {
                Some(p) => p.rsplit('/').next().unwrap_or(p).to_string(),
                None => name_of(tgid),
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
    named.problems.sort();
    named.problems.dedup();
    // The map lines name the guest's files; the copies were only read for their symbols.
    let copies = dir.join(FILES_DIR);
    if copies.exists() {
        std::fs::remove_dir_all(&copies)
            .with_context(|| format!("cannot remove {}", copies.display()))?;
    }
    Ok(named)
}

/// Finds, reads and writes the symbols of guest files, each once.
struct Finder<'a> {
    dir: &'a Path,
    files: &'a GuestFiles,
    /// Guest path → the file on the host (`None`: not found).
    found: HashMap<String, Option<PathBuf>>,
    /// Host file → its symbols at offset 0 (`None`: it has none).
    images: HashMap<PathBuf, Option<Image>>,
    arch: Arch,
    /// Module names whose `.sym` files are written.
    written: HashSet<String>,
    /// Guest path → its host file and every load bias any process gave it.
    biases: BTreeMap<String, (PathBuf, Vec<u64>)>,
}

impl Finder<'_> {
    /// The host file for a guest path: the archive's copy (written under the trace while
    /// its symbols are read), else the file under `--sysroot`, else a `--symbols` file of
    /// the same name.
    fn host_file(&mut self, guest: &str) -> Result<Option<PathBuf>> {
        if let Some(f) = self.found.get(guest) {
            return Ok(f.clone());
        }
        let mut host = None;
        if let Some(data) = self.files.initrd.as_ref().and_then(|f| f.get(guest)) {
            let rel = guest
                .trim_start_matches('/')
                .replace(char::is_whitespace, "_");
            let path = self.dir.join(FILES_DIR).join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::fs::write(&path, data)
                .with_context(|| format!("cannot write {}", path.display()))?;
            host = Some(path);
        } else if let Some(file) = self
            .files
            .sysroot
            .as_ref()
            .map(|root| root.join(guest.trim_start_matches('/')))
            .filter(|p| p.is_file())
        {
            host = Some(file);
        } else {
            let name = guest.rsplit('/').next().unwrap_or(guest);
            host = self
                .files
                .symbols
                .iter()
                .find(|p| p.file_name().is_some_and(|n| n == name))
                .cloned()
                .or(host);
        }
        self.found.insert(guest.to_string(), host.clone());
        Ok(host)
    }

    /// A mapping's file on the host and the load bias the mapping gives it, or why not.
    fn bias(&mut self, m: &Mapping) -> Result<std::result::Result<(PathBuf, u64), String>> {
        let Some(host) = self.host_file(&m.path)? else {
            return Ok(Err(format!(
                "no file found for {} (not in the -initrd archive nor under --sysroot; \
                 give it with --symbols)",
                m.path
            )));
        };
        let Some(elf) = Elf::read(&host) else {
            return Ok(Err(format!(
                "{} ({}) is not an ELF file",
                m.path,
                host.display()
            )));
        };
        Ok(Ok((host, elf.bias_of_mapping(m.start, m.offset))))
    }

    /// Notes every load bias of every file (see [`Finder::place`]).
    fn learn_biases(&mut self, spaces: &[Space]) -> Result<()> {
        for space in spaces {
            for m in &space.maps {
                if let Ok((host, bias)) = self.bias(m)? {
                    let all = &mut self
                        .biases
                        .entry(m.path.clone())
                        .or_insert_with(|| (host, Vec::new()))
                        .1;
                    if !all.contains(&bias) {
                        all.push(bias);
                    }
                }
            }
        }
        Ok(())
    }

    /// A host file's symbols at offset 0, read once.
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
                };
                qemu_uftrace_symbols::load(host, &opts).ok()
            })
            .clone()
    }

    /// The map lines of one address space's files (their `.sym` files written), each file
    /// at the load bias its first code mapping gives; then every file any process mapped,
    /// at every bias it had, where nothing of this space is. Two reasons: QEMU translates
    /// code once per physical page on arm64 (its translations are position-independent,
    /// and the plugin's addresses are those of the translation), so a call into a file
    /// another process ran first is seen at that process's addresses; and the frames an
    /// exec leaves open (`execve` never returns) close in the space after it.
    fn place(
        &mut self,
        space: &Space,
        keep: &[MapEntry],
        named: &mut Named,
    ) -> Result<Vec<MapEntry>> {
        let mut own = Vec::new();
        let mut aliases = Vec::new();
        let mut guest_dirs = HashMap::new();
        let mut seen = HashSet::new();
        let mut seen_bias = HashSet::new();
        for m in &space.maps {
            if !seen.insert(m.path.as_str()) {
                continue;
            }
            let (host, bias) = match self.bias(m)? {
                Ok(found) => found,
                Err(why) => {
                    named.problems.push(why);
                    continue;
                }
            };
            let Some(img) = self.image(&host) else {
                named.problems.push(format!(
                    "{} ({}) has no symbols (give an unstripped copy with --symbols)",
                    m.path,
                    host.display()
                ));
                continue;
            };
            if let Some(name) = host.file_name() {
                let dir = m.path.rsplit_once('/').map_or("", |(d, _)| d);
                guest_dirs.insert(name.to_string_lossy().into_owned(), dir.to_string());
            }
            // Only global functions: the file's (or its debug file's) symbol table was not
            // there, only the exported ones.
            if img.functions.iter().all(|f| f.global) {
                named.problems.push(format!(
                    "{} has only its exported symbols: its internal functions show as \
                     addresses (give a copy with its symbol table or debug file with --symbols)",
                    m.path
                ));
            }
            own.push(img.shifted(bias));
            seen_bias.insert((m.path.clone(), bias));
        }
        let all: Vec<(String, PathBuf, Vec<u64>)> = self
            .biases
            .iter()
            .map(|(g, (h, b))| (g.clone(), h.clone(), b.clone()))
            .collect();
        for (guest, host, biases) in all {
            let Some(img) = self.image(&host) else {
                continue;
            };
            if let Some(name) = host.file_name() {
                let dir = guest.rsplit_once('/').map_or("", |(d, _)| d);
                guest_dirs.insert(name.to_string_lossy().into_owned(), dir.to_string());
            }
            for b in biases {
                if !seen_bias.contains(&(guest.clone(), b)) {
                    aliases.push(img.clone().shifted(b));
                }
            }
        }
        let (mut placed, skipped) = symfiles::place(own, keep);
        // A file that overlaps the first session's images is named there already (given
        // with --symbols at its link address: a static program).
        named.problems.extend(
            skipped
                .into_iter()
                .filter(|why| !why.contains(" overlaps ")),
        );
        let mut taken: Vec<MapEntry> = keep.to_vec();
        taken.extend(placed.iter().map(|p| p.map.clone()));
        // An alias that meets this process's own files is left out: there the address is
        // this process's.
        placed.extend(symfiles::place(aliases, &taken).0);
        let mut out = Vec::new();
        for mut p in placed {
            // The map line names the guest's file (`/lib/libc.so.6`), whose module name the
            // `.sym` file has.
            let module = p.module_name().to_string();
            let stem = module.split('#').next().unwrap_or(&module);
            if let Some(dir) = guest_dirs.get(stem) {
                p.map.path = format!("{dir}/{module}").replace(char::is_whitespace, "_");
            }
            if self.written.insert(p.module_name().to_string()) {
                symfiles::write_files(self.dir, &p, false)?;
            }
            out.push(p.map);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finder<'a>(dir: &'a Path, files: &'a GuestFiles) -> Finder<'a> {
        Finder {
            dir,
            files,
            found: HashMap::new(),
            images: HashMap::new(),
            arch: Arch::Aarch64,
            written: HashSet::new(),
            biases: BTreeMap::new(),
        }
    }

    /// The archive first, then the sysroot, then a `--symbols` file of the same name.
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
        let init = f.host_file("/bin/init").unwrap().unwrap();
        assert_eq!(std::fs::read(&init).unwrap(), b"archive");
        assert_eq!(f.host_file("/bin/sh").unwrap(), Some(root.join("bin/sh")));
        assert_eq!(f.host_file("/usr/bin/tool").unwrap(), Some(extra));
        assert_eq!(f.host_file("/usr/bin/none").unwrap(), None);
        let m = Mapping {
            path: "/usr/bin/none".into(),
            start: 0x1000,
            len: 0x1000,
            offset: 0,
        };
        let why = f.bias(&m).unwrap().unwrap_err();
        assert!(why.starts_with("no file found for /usr/bin/none"), "{why}");
    }
}
