//! The trace directory's life: a staging directory `<DIR>.partial` that the plugin records
//! into, the uftrace files written next to the plugin's `.dat` files once QEMU is gone, and
//! the final swap (`<DIR>` → `<DIR>.old`, staging → `<DIR>`). Recorded data is never
//! deleted silently: a leftover staging directory stops the next recording.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use qemu_uftrace_format::symfile::{self, SymLine};
use qemu_uftrace_format::{info, map, pseudo, record::RECORD_SIZE, task};

use crate::errors::{fail, usage};
use crate::guest_tasks;
use crate::stats::Stats;
use crate::symfiles::{self, PlacedImage};
use qemu_uftrace_engine::tasks::boot_vcpu;

/// `<path><suffix>`, next to `path`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The staging directory for `output`.
pub fn staging_path(output: &Path) -> PathBuf {
    sibling(output, ".partial")
}

/// Where the previous trace goes.
pub fn old_path(output: &Path) -> PathBuf {
    sibling(output, ".old")
}

/// Creates `<output>.partial`, refusing if it exists or cannot be made.
pub fn create_staging(output: &Path) -> Result<PathBuf> {
    let name_ok = output.file_name().is_some_and(|n| n != "." && n != "..");
    if !name_ok {
        return Err(usage(
            format!("'{}' cannot be a trace directory name", output.display()),
            "give -o a directory name such as uftrace.data",
        ));
    }
    if output.exists() && !output.is_dir() {
        return Err(usage(
            format!("{} exists and is not a directory", output.display()),
            "choose another -o DIR or move that file away",
        ));
    }
    let staging = staging_path(output);
    if staging.symlink_metadata().is_ok() {
        return Err(fail(
            format!(
                "{} already exists: an earlier recording was interrupted and its data is there",
                staging.display()
            ),
            format!(
                "look at it or move it away (mv {0} somewhere), or delete it (rm -r {0}), then \
                 record again",
                staging.display()
            ),
        ));
    }
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            fail(
                format!("cannot create {}: {e}", parent.display()),
                "choose an -o DIR in a writable place",
            )
        })?;
    }
    std::fs::create_dir(&staging).map_err(|e| {
        fail(
            format!("cannot create {}: {e}", staging.display()),
            "choose an -o DIR in a writable place",
        )
    })?;
    Ok(staging)
}

/// The task ids of the `.dat` files in `dir`, sorted, with their sizes.
pub fn dat_files(dir: &Path) -> Result<Vec<(u32, u64)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(tid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".dat"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if tid == 0 {
            continue;
        }
        out.push((tid, entry.metadata()?.len()));
    }
    out.sort_unstable();
    Ok(out)
}

/// A guest that never showed an OS task (bare metal, firmware, a kernel killed before its
/// first task) keeps the task ids vCPUs always had: vCPU n is task n+1. While QEMU runs the
/// plugin cannot know that, and numbers vCPUs' boot code apart from the guest's PIDs.
fn renumber_boot_tasks(
    dir: &Path,
    dats: &mut [(u32, u64)],
    guest: &mut [guest_tasks::GuestTask],
    stats: Option<&mut Stats>,
) -> Result<()> {
    let only_boot = dats.iter().all(|&(tid, _)| boot_vcpu(tid).is_some())
        && guest.iter().all(|t| t.boot && t.level.is_empty());
    if dats.is_empty() || !only_boot {
        return Ok(());
    }
    let new_tid = |tid: u32| boot_vcpu(tid).map_or(tid, |v| v + 1);
    for (tid, _) in dats.iter_mut() {
        let (from, to) = (dir.join(format!("{tid}.dat")), new_tid(*tid));
        std::fs::rename(&from, dir.join(format!("{to}.dat")))
            .with_context(|| format!("cannot rename {}", from.display()))?;
        *tid = to;
    }
    dats.sort_unstable();
    for t in guest.iter_mut() {
        t.tid = new_tid(t.tid);
    }
    if let Some(s) = stats {
        s.tids.iter_mut().for_each(|t| *t = new_tid(*t));
    }
    Ok(())
}

/// True when some `.dat` file holds at least one whole record.
pub fn has_records(dir: &Path) -> bool {
    dat_files(dir).is_ok_and(|d| any_record(&d))
}

/// True when one of `dats` (from [`dat_files`]) is long enough for a whole record.
fn any_record(dats: &[(u32, u64)]) -> bool {
    dats.iter().any(|&(_, len)| len >= RECORD_SIZE as u64)
}

/// Cuts a partial record off the end of each `.dat` file (QEMU killed mid-write).
fn trim_partial_records(dir: &Path, dats: &mut [(u32, u64)]) -> Result<u64> {
    let mut trimmed = 0;
    for (tid, len) in dats.iter_mut() {
        let rem = *len % RECORD_SIZE as u64;
        if rem != 0 {
            let path = dir.join(format!("{tid}.dat"));
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            f.set_len(*len - rem)
                .with_context(|| format!("cannot trim {}", path.display()))?;
            *len -= rem;
            trimmed += 1;
        }
    }
    Ok(trimmed)
}

/// Everything, beyond the staging directory's own contents, that the files describe.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The main guest image (the `-kernel` file), else the QEMU binary.
    pub exename: String,
    /// Our command line, as typed.
    pub cmdline: String,
    /// wait()-style status of QEMU.
    pub wait_status: i32,
    /// `ARM64 (QEMU TCG, qemu-system-aarch64 10.0.2)`.
    pub cpu_desc: String,
    pub memory: Option<String>,
    pub started: SystemTime,
    pub elapsed: Duration,
    /// What the plugin reported; `None` when QEMU died before it flushed.
    pub stats: Option<Stats>,
    /// User mode: the `task.txt` lines of the guest's processes after the first (FORK,
    /// and SESS and TASK for exec'd programs: `qemu::user_procs`), written after the first's.
    pub later_processes: Vec<task::Later>,
    /// The threads of those processes, which the first's session does not take.
    pub later_tids: Vec<u32>,
    /// `-A`/`-R` as typed, when records carry values (`argspec`).
    pub arg_spec: Option<qemu_uftrace_format::args::InfoSpec>,
}

/// The symbol side of a trace, written by [`write_symbols`] (while QEMU runs) and completed
/// by [`assemble`].
#[derive(Debug, Default)]
pub struct SymbolFiles {
    /// The session the map file is named after; `task.txt` refers to it.
    pub sid: String,
    pub placed: Vec<String>,
    pub skipped: Vec<String>,
    pub has_dbg: bool,
}

/// Writes the `.sym`/`.dbg` files of these images (in priority order) and the session's
/// `sid-<SID>.map` into `dir`. They depend on the images only, so `record` writes them while
/// QEMU runs rather than after.
pub fn write_symbols(dir: &Path, images: Vec<qemu_uftrace_symbols::Image>) -> Result<SymbolFiles> {
    let (placed, skipped) = symfiles::place(images, &[]);
    let mut files = SymbolFiles {
        sid: new_session_id(),
        skipped,
        ..Default::default()
    };
    for p in &placed {
        files.has_dbg |= symfiles::write_files(dir, p, false)?;
        files.placed.push(p.module_name().to_string());
    }
    write_map(dir, &files.sid, &placed)?;
    Ok(files)
}

/// What assembling found and did.
#[derive(Debug, Default)]
pub struct Assembled {
    pub tids: Vec<u32>,
    pub bytes: u64,
    pub placed: Vec<String>,
    pub skipped: Vec<String>,
    pub has_dbg: bool,
    pub trimmed_files: u64,
    /// Tids the plugin listed that have no `.dat` file.
    pub missing_tids: Vec<u32>,
    /// The guest contexts the plugin found.
    pub tasks: Vec<crate::guest_tasks::GuestTask>,
    /// `note.txt` lines listing them, when the guest has OS tasks.
    pub task_note: Vec<String>,
}

/// Why there is nothing to assemble.
#[derive(Debug)]
pub struct NoData;

impl std::fmt::Display for NoData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no call or return was recorded")
    }
}

impl std::error::Error for NoData {}

/// A session id that differs between recordings: random, from the OS (the clock and our
/// pid should the OS have no randomness to give).
pub fn new_session_id() -> String {
    let id = getrandom::u64().unwrap_or_else(|_| {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 40)
    });
    task::session_id(id)
}

/// Writes `info` and `task.txt` into `dir`, which holds the plugin's output and the symbol
/// files. Fails with [`NoData`] when no `.dat` file has a record.
pub fn assemble(dir: &Path, mut rec: Recording, syms: SymbolFiles) -> Result<Assembled> {
    let mut dats = dat_files(dir)?;
    let mut guest = guest_tasks::read(dir);
    // A user-mode trace's task ids are the guest's thread ids, never vCPU numbers, and its
    // threads are the program's.
    let user_mode = rec.stats.as_ref().is_some_and(Stats::is_user_mode);
    if user_mode {
        let program = Path::new(&rec.exename)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for t in guest.iter_mut().filter(|t| t.name.is_empty()) {
            t.name = program.clone();
        }
    } else {
        renumber_boot_tasks(dir, &mut dats, &mut guest, rec.stats.as_mut())?;
    }
    let mut done = Assembled::default();
    if rec.stats.is_none() {
        done.trimmed_files = trim_partial_records(dir, &mut dats)?;
    }
    if !any_record(&dats) {
        return Err(NoData.into());
    }
    done.tids = dats.iter().map(|&(t, _)| t).collect();
    done.bytes = dats.iter().map(|&(_, l)| l).sum();
    if let Some(s) = &rec.stats {
        done.missing_tids = s
            .tids
            .iter()
            .copied()
            .filter(|t| !done.tids.contains(t))
            .collect();
    }

    let sid = syms.sid;
    done.placed = syms.placed;
    done.skipped = syms.skipped;
    done.has_dbg = syms.has_dbg;

    // User mode: the first process's threads that wrote no record (a `-F` that only its
    // forked child reaches) still need their session: the child's FORK line names it, and
    // uftrace finds the child's symbols through it.
    let silent = guest
        .iter()
        .filter(|_| user_mode)
        .map(|t| t.tid)
        .filter(|tid| !done.tids.contains(tid));
    let task_tids: Vec<u32> = done.tids.iter().copied().chain(silent).collect();
    let tasks: Vec<task::Task> = task_tids
        .iter()
        .filter(|tid| !rec.later_tids.contains(tid))
        .map(|&tid| task::Task {
            tid,
            // User mode: a thread's process, as the plugin saw it (getpid). System mode: a
            // guest task's process where its thread group was read (as libmcount writes a
            // thread: pid= its process), else each context a process of its own.
            pid: guest
                .iter()
                .find(|t| t.tid == tid)
                .and_then(|t| match user_mode {
                    true => Some(t.pid),
                    false => t.thread_group(),
                })
                .filter(|&pid| pid > 0)
                .unwrap_or(tid),
            name: guest
                .iter()
                .find(|t| t.tid == tid)
                .map(|t| t.display_name())
                .unwrap_or_else(|| match boot_vcpu(tid) {
                    Some(vcpu) => format!("cpu{vcpu}"),
                    None => format!("task-{tid}"),
                }),
        })
        .collect();
    symfiles::write_with(&dir.join("task.txt"), |w| {
        task::write_task_txt(w, &sid, &tasks)?;
        task::write_later(w, &rec.later_processes)
    })?;
    done.task_note = guest_tasks::note_lines(&guest, &done.tids);
    if rec
        .stats
        .as_ref()
        .and_then(|s| s.other_count("exceptions_shown"))
        == Some(0)
    {
        done.task_note.push(
            "exceptions and interrupts are not shown as entries: the QEMU that recorded this \
             does not report them to plugins (10.2 and newer do)"
                .into(),
        );
    }
    done.tasks = guest;
    if !done.task_note.is_empty() {
        let text = done.task_note.join("\n");
        symfiles::write_with(&dir.join("note.txt"), |w| {
            qemu_uftrace_format::note::write_note(w, &text)
        })?;
    }

    // Where writing began (`--start-at`, `--keep-last`), each task's open frames written
    // then are followed by a `qemu:opened` event: its name.
    let opened = ["start_frames", "keep_last_frames", "trace_switches"]
        .iter()
        .any(|k| {
            rec.stats
                .as_ref()
                .is_some_and(|s| s.other_value(k).is_some())
        });
    if opened {
        symfiles::write_with(&dir.join("events.txt"), |w| {
            qemu_uftrace_format::events::write_events(w, qemu_uftrace_format::events::QEMU_EVENTS)
        })?;
    }
    let max_tid = done.tids.iter().copied().max().unwrap_or(1);
    let cpus = rec.stats.as_ref().and_then(|s| s.vcpus).unwrap_or(max_tid);
    let os = crate::host_info::os_info();
    let info = info::Info {
        exename: rec.exename.clone(),
        cmdline: rec.cmdline.clone(),
        exit_status: rec.wait_status,
        nr_cpus_online: cpus,
        nr_cpus_possible: cpus,
        cpu_desc: rec.cpu_desc.clone(),
        meminfo: rec
            .memory
            .as_ref()
            .map(|m| format!("guest -m {m}"))
            .unwrap_or_default(),
        os_kernel: os.kernel,
        os_hostname: os.hostname,
        os_distro: os.distro,
        tids: done.tids.clone(),
        record_date: crate::host_info::ctime(rec.started),
        elapsed_time: crate::host_info::elapsed(rec.elapsed),
        // uftrace prints every duration as time: the version line, which `uftrace info` and
        // exported files show, says what the times count.
        version: match rec.stats.as_ref().and_then(Stats::clock_words) {
            Some(clock) => format!("qemu-uftrace {} ({clock})", env!("CARGO_PKG_VERSION")),
            None => format!("qemu-uftrace {}", env!("CARGO_PKG_VERSION")),
        },
        extra_features: if done.has_dbg {
            info::feat::DEBUG_INFO
        } else {
            0
        } | if dir.join("events.txt").is_file() {
            // Names of user events (a run from a snapshot's `qemu:unwound`, `qemu:opened`).
            info::feat::EVENT
        } else {
            0
        },
        arg_spec: rec.arg_spec.clone(),
    };
    symfiles::write_with(&dir.join("info"), |w| info.write_to(w))?;
    crate::unnamed::after_recording(dir, rec.stats.as_ref(), &mut done.skipped);
    Ok(done)
}

/// Writes `sid-<sid>.map` for these images (the `[stack]` line included), with the
/// pseudo-functions' module (exception entries) and its `.sym` file.
pub fn write_map(dir: &Path, sid: &str, placed: &[PlacedImage]) -> Result<()> {
    let mut entries: Vec<map::MapEntry> = placed.iter().map(|p| p.map.clone()).collect();
    let pseudo_start = pseudo::BASE;
    let clashes = entries.iter().any(|e| {
        let (start, end) = e.range48();
        start < pseudo_start + pseudo::size() && pseudo_start < end
    });
    // An image reaching into the last page of the address space keeps it; exception entries
    // then show as addresses.
    if !clashes {
        entries.push(map::MapEntry {
            start: pseudo_start,
            end: pseudo_start + pseudo::size(),
            path: pseudo::MODULE.into(),
        });
        let syms: Vec<SymLine> = pseudo::symbols()
            .map(|(offset, name)| SymLine {
                offset,
                size: 0x10,
                name: name.to_string(),
                global: true,
            })
            .collect();
        symfiles::write_with(&dir.join(format!("{}.sym", pseudo::MODULE)), |w| {
            symfile::write_sym(w, &syms, pseudo::size())
        })?;
    }
    symfiles::write_with(&dir.join(format!("sid-{sid}.map")), |w| {
        map::write_map(w, entries)
    })
}

/// Leaves a `note.txt` that `uftrace info` shows, so that a trace cut short by QEMU's death
/// never passes for complete. `tail_lost`: the records end early (QEMU died, the writer
/// stopped); else what is missing is only what `why` says (tasks past a cap, names or
/// events not kept), and the note does not claim more.
pub fn mark_incomplete(dir: &Path, why: &str, tail_lost: bool) -> Result<()> {
    // What the note said already (the task list) follows the warning.
    let before = std::fs::read_to_string(dir.join("note.txt")).unwrap_or_default();
    let then = if tail_lost {
        "the last records of each task are missing."
    } else {
        "the records written are whole: what is missing is what this says."
    };
    let text = format!("INCOMPLETE TRACE: {why};\n{then}\n{before}");
    symfiles::write_with(&dir.join("note.txt"), |w| {
        qemu_uftrace_format::note::write_note(w, &text)
    })
}

/// Moves an existing `output` to `<output>.old` (replacing an older one, as uftrace does)
/// and the staging directory to `output`. Returns the `.old` path when one was made.
pub fn publish(staging: &Path, output: &Path) -> Result<Option<PathBuf>> {
    let mut moved = None;
    if output.symlink_metadata().is_ok() {
        let old = old_path(output);
        match old.symlink_metadata() {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&old),
            Ok(_) => std::fs::remove_file(&old),
            Err(_) => Ok(()),
        }
        .with_context(|| format!("cannot remove the older {}", old.display()))?;
        std::fs::rename(output, &old).with_context(|| {
            format!(
                "cannot move {} to {}; the new trace is in {}",
                output.display(),
                old.display(),
                staging.display()
            )
        })?;
        moved = Some(old);
    }
    std::fs::rename(staging, output).with_context(|| {
        format!(
            "cannot rename {} to {}; the new trace is in {}",
            staging.display(),
            output.display(),
            staging.display()
        )
    })?;
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qemu_uftrace_format::record::{encode, RecordType};
    use std::process::Command;

    const KBASE: u64 = 0xffff_8000_8001_0000;

    /// `start_kernel` calls `setup_arch`, then `rest_init` calls `leaf`, on two vCPUs.
    fn write_dat(dir: &Path, tid: u32, base_time: u64) {
        let recs = [
            (10, RecordType::Entry, 0, KBASE),
            (20, RecordType::Entry, 1, KBASE + 0x100),
            (50, RecordType::Exit, 1, KBASE + 0x100),
            (60, RecordType::Entry, 1, KBASE + 0x200),
            (70, RecordType::Entry, 2, KBASE + 0x300),
            (75, RecordType::Exit, 2, KBASE + 0x300),
            (90, RecordType::Exit, 1, KBASE + 0x200),
            (100, RecordType::Exit, 0, KBASE),
        ];
        let mut bytes = Vec::new();
        for (t, kind, depth, addr) in recs {
            bytes.extend_from_slice(&encode(base_time + t, kind, depth, addr));
        }
        std::fs::write(dir.join(format!("{tid}.dat")), bytes).unwrap();
    }

    fn kernel_image() -> qemu_uftrace_symbols::Image {
        crate::symfiles::tests::image(
            "/boot/vmlinux",
            KBASE,
            &[
                (KBASE, 0x100, "start_kernel"),
                (KBASE + 0x100, 0x40, "setup_arch"),
                (KBASE + 0x200, 0x80, "rest_init"),
                (KBASE + 0x300, 0x20, "leaf"),
            ],
        )
    }

    fn recording(stats: Option<Stats>) -> Recording {
        Recording {
            exename: "/boot/vmlinux".into(),
            cmdline: "qemu-uftrace record -- qemu-system-aarch64 -kernel \"vmlinux\"".into(),
            wait_status: 0,
            cpu_desc: "ARM64 (QEMU TCG, qemu-system-aarch64 10.0.2)".into(),
            memory: Some("512M".into()),
            started: SystemTime::now(),
            elapsed: Duration::from_millis(1500),
            stats,
            later_processes: Vec::new(),
            later_tids: Vec::new(),
            arg_spec: None,
        }
    }

    fn symbols(dir: &Path) -> SymbolFiles {
        write_symbols(dir, vec![kernel_image()]).unwrap()
    }

    /// uftrace's output; a missing uftrace fails the test, it does not skip it.
    fn uftrace(args: &[&str], dir: &Path) -> String {
        let out = Command::new("uftrace")
            .args(args)
            .arg("-d")
            .arg(dir)
            .arg("--no-pager")
            .output()
            .expect("cannot run uftrace: run scripts/install-deps.sh");
        assert!(
            out.status.success(),
            "uftrace {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn assembled_directory_replays_with_names() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("uftrace.data");
        let staging = create_staging(&output).unwrap();
        write_dat(&staging, 1, 1000);
        write_dat(&staging, 2, 5000);
        let stats = Stats::parse("complete=1\nvcpus=2\ntids=1,2\nevents=16\n");
        let done = assemble(&staging, recording(Some(stats)), symbols(&staging)).unwrap();
        assert_eq!(done.tids, [1, 2]);
        assert!(done.has_dbg);
        assert_eq!(publish(&staging, &output).unwrap(), None);

        let replay = uftrace(&["replay"], &output);
        for name in [
            "start_kernel() {",
            "setup_arch();",
            "rest_init() {",
            "leaf();",
        ] {
            assert!(replay.contains(name), "{name} missing in:\n{replay}");
        }
        assert!(
            !replay.contains("<8000"),
            "unresolved address in:\n{replay}"
        );

        let info = uftrace(&["info"], &output);
        assert!(info.contains("ARM64 (QEMU TCG"), "{info}");
        assert!(info.contains("/boot/vmlinux"), "{info}");
        assert!(info.contains("qemu-uftrace "), "{info}");
        assert!(info.contains("1.500000000 sec"), "{info}");

        let chrome = uftrace(&["dump", "--chrome"], &output);
        assert!(chrome.contains("\"name\":\"rest_init\""), "{chrome}");
        assert!(chrome.contains("\"ph\":\"B\""), "{chrome}");

        let srcline = uftrace(&["replay", "--srcline"], &output);
        assert!(srcline.contains("src/x.c:10"), "{srcline}");
    }

    /// System mode with the tasks' thread groups read: a Linux thread is a task of its
    /// process (one session per process, as libmcount writes threads), a kernel thread a
    /// process of its own, a vCPU's boot code one too; uftrace names the thread after its
    /// process and marks only the processes' main tasks.
    #[test]
    fn guest_threads_are_tasks_of_their_process() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("uftrace.data");
        let staging = create_staging(&output).unwrap();
        for tid in [1, 7, 8, 4194304] {
            write_dat(&staging, tid, 1000);
        }
        std::fs::write(
            staging.join(guest_tasks::TASKS_FILE),
            "tid=4194304\tpid=0\ttgid=0\tkind=boot\tlevel=\tvcpus=0\tboot_of=\tname=\n\
             tid=1\tpid=1\ttgid=1\tkind=task\tlevel=\tvcpus=0\tboot_of=\tname=init\n\
             tid=7\tpid=7\ttgid=1\tkind=task\tlevel=\tvcpus=0\tboot_of=\tname=helper\n\
             tid=8\tpid=8\ttgid=8\tkind=task\tlevel=\tvcpus=0\tboot_of=\tname=kworker/0:1\n",
        )
        .unwrap();
        let stats = Stats::parse("complete=1\nvcpus=1\ntids=1,7,8,4194304\nevents=32\n");
        assemble(&staging, recording(Some(stats)), symbols(&staging)).unwrap();
        publish(&staging, &output).unwrap();
        let text = std::fs::read_to_string(output.join("task.txt")).unwrap();
        let tasks: Vec<&str> = text.lines().filter(|l| l.starts_with("TASK")).collect();
        assert_eq!(
            tasks,
            [
                "TASK timestamp=0.000000000 tid=1 pid=1",
                "TASK timestamp=0.000000000 tid=7 pid=1",
                "TASK timestamp=0.000000000 tid=8 pid=8",
                "TASK timestamp=0.000000000 tid=4194304 pid=4194304",
            ]
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("SESS")).count(), 3);
        // uftrace's task list: F marks a process's main task, S the one that starts its
        // session; the thread has neither, and its process's name.
        let list = uftrace(&["info", "--task"], &output);
        let row = |tid: &str| {
            list.lines()
                .find(|l| l.contains(&format!("[{tid:>6}]")))
                .unwrap_or_else(|| panic!("no task {tid} in:\n{list}"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(row("1").ends_with("FS [ 1] init 0.000 MB"), "{list}");
        assert!(
            row("7").ends_with(".000000000 [ 7] init 0.000 MB"),
            "{list}"
        );
        assert!(row("8").contains("FS [ 8] kworker"), "{list}");
    }

    #[test]
    fn incomplete_recording_is_trimmed_and_still_readable() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("t");
        let staging = create_staging(&output).unwrap();
        write_dat(&staging, 1, 1000);
        // A half-written record at the end, as after SIGKILL.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(staging.join("1.dat"))
            .unwrap();
        std::io::Write::write_all(&mut f, &[1, 2, 3]).unwrap();
        let done = assemble(&staging, recording(None), symbols(&staging)).unwrap();
        assert_eq!(done.trimmed_files, 1);
        mark_incomplete(&staging, "QEMU was killed by signal 9", true).unwrap();
        assert_eq!(
            std::fs::metadata(staging.join("1.dat")).unwrap().len(),
            8 * RECORD_SIZE as u64
        );
        publish(&staging, &output).unwrap();
        let replay = uftrace(&["replay"], &output);
        assert!(replay.contains("rest_init"), "{replay}");
        let info = uftrace(&["info"], &output);
        assert!(info.contains("INCOMPLETE TRACE: QEMU was killed"), "{info}");
    }

    #[test]
    fn no_records_is_no_data() {
        let tmp = tempfile::tempdir().unwrap();
        let staging = create_staging(&tmp.path().join("t")).unwrap();
        std::fs::write(staging.join("1.dat"), b"").unwrap();
        let e = assemble(&staging, recording(None), symbols(&staging)).unwrap_err();
        assert!(e.downcast_ref::<NoData>().is_some());
    }

    #[test]
    fn stale_staging_is_refused_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("uftrace.data");
        let staging = create_staging(&output).unwrap();
        std::fs::write(staging.join("1.dat"), b"precious").unwrap();
        let e = create_staging(&output).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("interrupted"), "{msg}");
        assert!(msg.contains("rm -r"), "{msg}");
        assert_eq!(std::fs::read(staging.join("1.dat")).unwrap(), b"precious");
    }

    #[test]
    fn publish_rotates_old_traces() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("d");
        for generation in ["one", "two", "three"] {
            let staging = create_staging(&output).unwrap();
            std::fs::write(staging.join("gen"), generation).unwrap();
            publish(&staging, &output).unwrap();
        }
        assert_eq!(std::fs::read(output.join("gen")).unwrap(), b"three");
        assert_eq!(
            std::fs::read(old_path(&output).join("gen")).unwrap(),
            b"two"
        );
        assert!(!staging_path(&output).exists());
    }

    #[test]
    fn output_that_is_a_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("file");
        std::fs::write(&output, b"x").unwrap();
        let e = create_staging(&output).unwrap_err();
        assert!(format!("{e:#}").contains("not a directory"));
    }
}
