//! Stage 4 of `record`: the data directory. The plugin's statistics (with the guest's other
//! processes, in user mode), the uftrace files around the recorded data, the incomplete
//! mark when the trace is not all the guest did, and the swap into place.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use qemu_uftrace_symbols::Arch;

use crate::datadir::{self, Assembled, Recording};
use crate::errors::{fail, warn};
use crate::qemu::{self, GuestImage};
use crate::qemu_checks::Qemu;
use crate::stats::Stats;
use crate::symbol_source::{self, Loaded};

use super::invocation::Invocation;
use super::prepare::Prepared;
use super::run::Ran;
use super::symbols;

/// The published trace.
pub struct Published {
    /// What the plugin(s) reported (`None`: QEMU died before the plugin flushed).
    pub stats: Option<Stats>,
    pub assembled: Assembled,
    /// Where the previous trace went.
    pub old: Option<PathBuf>,
    /// Why the trace is not complete.
    pub incomplete: Option<String>,
    /// A run from a snapshot: the calls open at its start that were unwound.
    pub recovered: Option<super::recover::Recovered>,
    /// Resyncs without frame records, unwound after the run.
    pub resyncs: Option<super::resync::Resyncs>,
    /// A Linux kernel's randomised base: the offset found (`Ok`), or why none was (`Err`).
    pub kaslr: Option<Result<String, String>>,
}

pub fn assemble(
    output: &Path,
    typed: &[OsString],
    inv: &Invocation,
    prep: &Prepared,
    ran: Ran,
    staging: &Path,
    no_auto_symbols: bool,
) -> Result<Published> {
    let Ran {
        exit,
        started,
        procs,
        symbols,
        untraced,
        ..
    } = ran;
    let cap = prep.cap.as_ref().map(|c| c.origin.as_str());
    let mut user = user_processes(&procs, staging, inv, prep.arch, no_auto_symbols, cap);
    if let (Some(cap), true) = (cap, untraced > 0) {
        user.problems.push(format!(
            "{untraced} more process{} (forked or exec'd) started once the size cap ({cap}) had \
             no room left for their files: {} ran untraced, and so did the processes {} \
             started",
            if untraced == 1 { "" } else { "es" },
            if untraced == 1 { "it" } else { "they" },
            if untraced == 1 { "it" } else { "they" },
        ));
    }
    for line in &user.failures {
        warn(line);
    }
    let stats = Stats::read(staging).map_err(|e| {
        fail(
            format!(
                "cannot read the plugin's statistics in {}: {e}",
                staging.display()
            ),
            "the recorded data is still there",
        )
    })?;
    let stats = stats.map(|s| {
        let mut s = with_other_processes(s, &user.stats);
        // Processes the cap had no room for: the cap was reached, as the user asked.
        s.size_capped |= untraced > 0;
        s
    });
    // One line for those at the size cap; the first image's reason, said on its own,
    // not again.
    if let Some((what, why)) = user.capped.take() {
        user.problems
            .push(if stats.as_ref().is_some_and(|s| s.size_capped) {
                format!(
                    "{} other process{} stopped writing at the same size cap ({})",
                    what.len(),
                    if what.len() == 1 { "" } else { "es" },
                    named(&what)
                )
            } else {
                format!("{}: {why}", several(&what))
            });
    }
    let spinner = spinner(output);
    for line in &symbols.failures {
        warn(line);
    }
    if let Some(line) = &symbols.unnamed {
        crate::errors::note(line);
    }
    // The frames the engine could not see (a snapshot's start, resyncs, switches on),
    // unwound and spliced into the tasks' files before the assembly renumbers them.
    // The ELF files among the images QEMU loads and the symbol sources (a vmlinux), and a
    // raw kernel image where no ELF kernel is among them (its code, kallsyms and ORC).
    let mut image_paths: Vec<&Path> = prep
        .images
        .iter()
        .map(|i| i.path.as_path())
        .filter(|p| qemu::file_is_elf(p))
        .collect();
    for s in prep.sources.iter().filter(|s| s.offset == 0) {
        if !image_paths.contains(&s.path.as_path()) && qemu::file_is_elf(&s.path) {
            image_paths.push(&s.path);
        }
    }
    let raw_kernel = |p: &Path| !qemu::file_is_elf(p) && super::kaslr::is_linux_kernel(p);
    if !image_paths.iter().any(|p| super::kaslr::is_kernel_elf(p)) {
        let raw = (prep.images.iter().map(|i| i.path.as_path())).find(|p| raw_kernel(p));
        image_paths.extend(raw);
    }
    // A kernel that ran at a random base: its vmlinux (or image) unwinds where it ran.
    let moved_by = (stats.as_ref())
        .and_then(super::kaslr::offset)
        .filter(|&o| o != 0);
    let at_link = (image_paths.iter())
        .map(|p| {
            let bias = moved_by.filter(|_| super::kaslr::is_kernel_elf(p) || raw_kernel(p));
            (p.to_path_buf(), bias.unwrap_or(0))
        })
        .collect();
    // Read once for both: in system mode the resyncs unwind with the same files.
    let system = super::resync::Loaded::new(staging, at_link);
    let starts = super::recover::unwind_starts(staging, &system)?;
    // User mode: each process image's cookies with its own files at their load biases (and
    // the first's with the ELF files `--symbols` names, moved by their offsets).
    let user_images = match prep.images.first() {
        Some(program) if inv.is_user_mode() => {
            let mut images =
                super::resync::user_images(staging, &program.path, inv.sysroot.as_deref(), &procs);
            for s in &prep.sources {
                let first = &mut images[0].files;
                if !first.iter().any(|(p, _)| *p == s.path) && qemu::file_is_elf(&s.path) {
                    first.push((s.path.clone(), s.offset));
                }
            }
            Some(images)
        }
        _ => None,
    };
    let resync_images = user_images
        .as_deref()
        .unwrap_or(std::slice::from_ref(&system));
    // -F/-N where the guest ran them: a moved kernel's moved, a PIE's at its load bias.
    let program_bias = (prep.images.first()).and_then(|p| {
        let files = &resync_images.first()?.files;
        files.iter().find(|(f, _)| *f == p.path).map(|(_, b)| *b)
    });
    let ran_at = |option: &str| -> Vec<u64> {
        (prep.filters.addrs(option).into_iter())
            .filter_map(|a| match a {
                crate::stop_at::Addr::At(a) => Some(a.wrapping_add(moved_by.unwrap_or(0))),
                crate::stop_at::Addr::Pie(a) => Some(a.wrapping_add(program_bias?)),
                crate::stop_at::Addr::Lib(i, a) => {
                    prep.filters.lib_ran_at(i, a, &resync_images.first()?.files)
                }
                // A guest file's `PATH:FUNC`: where each process has it (below).
                crate::stop_at::Addr::File(..) => None,
            })
            .collect()
    };
    let gates = super::window_gates::Gates::new(ran_at("-F"), ran_at("-N"), prep.max_depth);
    // System mode, a Linux guest: a cookie saved in user space (a window switched on there)
    // unwinds with its process's files, found as the sessions find them.
    // The same processes and files name the processes' functions below.
    let procs = (!inv.is_user_mode())
        .then(|| crate::guest_procs::events::read(staging))
        .flatten()
        .map(|procs| (guest_files(inv, prep), procs));
    // And a guest file's -F/-N function is where the window's process maps the file.
    let file_functions = FileFunctions {
        procs: procs.as_ref().map(|(_, procs)| procs),
        filter: prep.filters.file_functions("-F"),
        notrace: prep.filters.file_functions("-N"),
    };
    let gates = if file_functions.filter.is_empty() && file_functions.notrace.is_empty() {
        gates
    } else {
        let (f, filter) = (&file_functions, !file_functions.filter.is_empty());
        Some(super::window_gates::Gates::with_files(
            gates,
            f,
            filter,
            prep.max_depth,
        ))
    };
    let scratch = staging.join(".unwind-files");
    let in_process = procs.as_ref().map(|(files, procs)| InProcess {
        scratch: &scratch,
        procs,
        files,
        arch: prep.arch,
    });
    let processes = (in_process.as_ref()).map(|p| p as &dyn super::resync::ProcessFiles);
    let resyncs = super::resync::unwind_resyncs(resync_images, processes)?;
    if scratch.symlink_metadata().is_ok() {
        std::fs::remove_dir_all(&scratch)
            .map_err(|e| anyhow::anyhow!("cannot remove {}: {e}", scratch.display()))?;
    }
    let (recovered, resyncs) = super::splice::splice(staging, starts, resyncs, gates.as_ref())?;
    for line in recovered.iter().flat_map(|r| &r.problems) {
        warn(format!("stack not unwound: {line}"));
    }
    for line in resyncs.iter().flat_map(|r| &r.problems) {
        warn(format!("resync not unwound: {line}"));
    }
    // A kernel that ran at a random base: its symbols moved to where it ran.
    let kaslr = stats
        .as_ref()
        .and_then(|s| super::kaslr::outcome_line(s, inv.kaslr_off, inv.kaslr_advice()));
    let mut symbols = symbols;
    let images = symbols.images.take();
    let moves = (stats.as_ref()).zip(images.as_deref());
    let moves = moves.and_then(|(s, i)| super::kaslr::moves(s, i));
    // Unless the symbol job wrote them there already.
    if let Some(moves) = moves.filter(|&m| Some(m) != symbols.moved) {
        if let Ok(old) = &symbols.files {
            let _ = std::fs::remove_file(staging.join(format!("sid-{}.map", old.sid)));
        }
        let images = images.unwrap_or_default();
        symbols.files = datadir::write_symbols(staging, super::kaslr::moved_images(images, moves));
    }
    // The plugin's early word, said again in plugin.stats.
    let _ = std::fs::remove_file(staging.join(super::kaslr::FOUND_FILE));
    let arg_spec = (!prep.arg_specs.is_empty()).then(|| prep.arg_specs.info.clone());
    let procs = match (&procs, &symbols.files) {
        (Some((files, procs)), Ok(symbols)) => {
            guest_processes(staging, procs, files, prep, symbols)
        }
        _ => Default::default(),
    };
    let rec = Recording {
        exename: exename(&prep.images, &prep.qemu.path),
        cmdline: super::common::shell_join(typed),
        wait_status: exit.wait_status,
        cpu_desc: cpu_desc(&prep.qemu, prep.arch),
        memory: inv.memory.clone(),
        started,
        elapsed: exit.elapsed,
        stats: stats.clone(),
        later_processes: user.task_lines.into_iter().chain(procs.lines).collect(),
        later_tids: user.tids.into_iter().chain(procs.tids).collect(),
        arg_spec,
    };
    let assembled = symbols
        .files
        .and_then(|files| datadir::assemble(staging, rec, files));
    if let Some(s) = &spinner {
        s.finish_and_clear();
    }
    let assembled = assembled.map_err(|e| {
        e.context(format!(
            "cannot assemble the trace (the raw data stays in {})",
            staging.display()
        ))
    })?;
    guest_modules(staging, &prep.module_debug);
    // -A/-R: the carrier records folded into their records, once nothing walks the task
    // files in 16-byte steps any more (the assembly's scan for code without symbols).
    if !prep.arg_specs.is_empty() {
        let folded = crate::argspec::fold_all(staging)?;
        if folded.dropped > 0 {
            crate::errors::note(format!(
                "{} argument or return value reads had no record to go with (not written: \
                 a filter, the depth limit, the size cap)",
                folded.dropped
            ));
        }
    }
    for why in &user.problems {
        warn(format!("INCOMPLETE TRACE: {why}"));
    }
    // The records end early (rather than only what the reason names being missing).
    let tail_lost = !user.problems.is_empty()
        || stats
            .as_ref()
            .is_some_and(|s| s.size_capped || s.lost_records > 0 || s.stopped.is_some());
    let incomplete = stats
        .as_ref()
        .and_then(|s| s.incomplete_reason(cap))
        .into_iter()
        .chain(user.problems)
        .reduce(|a, b| format!("{a}; {b}"));
    if stats.is_none() {
        datadir::mark_incomplete(
            staging,
            &format!(
                "QEMU {} before the qemu-uftrace plugin flushed its buffers",
                exit.describe()
            ),
            true,
        )?;
    } else if let Some(why) = &incomplete {
        datadir::mark_incomplete(staging, why, tail_lost)?;
    }
    let old = datadir::publish(staging, output)?;
    if let Some(hint) = symbols.kaslr {
        warn(hint);
    }
    Ok(Published {
        stats,
        assembled,
        old,
        incomplete,
        recovered,
        resyncs,
        kaslr,
    })
}

/// System mode, a Linux guest: a user-space stack cookie's files, found as the sessions
/// find them (`guest_procs::sessions`); archive members copied under `scratch`.
struct InProcess<'a> {
    scratch: &'a Path,
    procs: &'a crate::guest_procs::events::Procs,
    files: &'a crate::guest_procs::sessions::GuestFiles,
    arch: Arch,
}

impl super::resync::ProcessFiles for InProcess<'_> {
    fn space_of(&self, tid: u32, time: u64) -> Option<usize> {
        let tgid = self.procs.tgid_of.get(&tid).copied().unwrap_or(tid);
        crate::guest_procs::sessions::space_at(self.procs, tgid, time)
    }

    fn files_of(&self, space: usize) -> Vec<(PathBuf, u64)> {
        let (scratch, procs, files) = (self.scratch, self.procs, self.files);
        crate::guest_procs::sessions::space_files(scratch, procs, files, self.arch, space)
    }
}

/// System mode, a Linux guest: where the guest files' `-F`/`-N` functions are in each
/// process (`plugin.procs`' mappings), for a window's filter (`window_gates`).
struct FileFunctions<'a> {
    /// None where the plugin saw no process: no process has them then.
    procs: Option<&'a crate::guest_procs::events::Procs>,
    /// Each a file's guest path and the function's offset in it.
    filter: Vec<(&'a str, u64)>,
    notrace: Vec<(&'a str, u64)>,
}

impl super::window_gates::FilePlaces for FileFunctions<'_> {
    fn at(&self, tid: u32, time: u64) -> super::window_gates::Placed {
        let Some(procs) = self.procs else {
            return super::window_gates::Placed {
                until: u64::MAX,
                ..Default::default()
            };
        };
        let tgid = procs.tgid_of.get(&tid).copied().unwrap_or(tid);
        // The process's next space (it exec'd) starts another program.
        let until = (procs.spaces.iter())
            .filter(|s| s.tgid == tgid && s.from > time)
            .map(|s| s.from)
            .min()
            .unwrap_or(u64::MAX);
        let space = crate::guest_procs::sessions::space_at(procs, tgid, time);
        let maps: Vec<_> = space.map_or_else(Vec::new, |i| procs.spaces[i].maps.iter().collect());
        let places = |aims: &[(&str, u64)]| -> Vec<u64> {
            let mut out = Vec::new();
            for &(path, offset) in aims {
                for m in maps.iter().filter(|m| m.path == path && m.offset <= offset) {
                    if offset - m.offset < m.len {
                        out.push(m.start.wrapping_add(offset - m.offset));
                    }
                }
            }
            out
        };
        super::window_gates::Placed {
            filter: places(&self.filter),
            notrace: places(&self.notrace),
            until,
        }
    }
}

/// System mode, Linux guest: the files its processes ran, found in the `-initrd` archive,
/// `--sysroot` and `--symbols` (the archive read once: its refused members and a failure to
/// read it said here).
fn guest_files(inv: &Invocation, prep: &Prepared) -> crate::guest_procs::sessions::GuestFiles {
    let archive = inv
        .initrd()
        .and_then(|p| match crate::guest_procs::initrd::read(&p) {
            Ok(a) => {
                for name in &a.refused {
                    warn(format!(
                        "guest processes: member {name} of {} is refused (a `..` in its name)",
                        p.display()
                    ));
                }
                Some(a.files)
            }
            Err(e) => {
                warn(format!(
                    "the guest's files in {} cannot be read: {e:#}",
                    p.display()
                ));
                None
            }
        });
    crate::guest_procs::sessions::GuestFiles {
        initrd: archive,
        sysroot: inv.sysroot.clone(),
        symbols: prep.sources.iter().map(|s| s.path.clone()).collect(),
    }
}

/// System mode, Linux guest: a session per address space of each guest process, from what
/// the plugin saw (`plugin.procs`) and the guest's files ([`guest_files`]); what was not
/// named is said, one line each.
fn guest_processes(
    staging: &Path,
    procs: &crate::guest_procs::events::Procs,
    guest_files: &crate::guest_procs::sessions::GuestFiles,
    prep: &Prepared,
    files: &datadir::SymbolFiles,
) -> crate::guest_procs::sessions::Named {
    use crate::guest_procs::sessions;
    let dats = datadir::dat_files(staging).unwrap_or_default();
    let tids: Vec<u32> = dats.iter().map(|&(t, _)| t).collect();
    // The maps count in the size cap, beside the records written.
    let written = dats.iter().map(|&(_, bytes)| bytes).sum();
    let budget = (prep.cap.as_ref()).map(|c| crate::max_size::maps_budget(c, written));
    let tasks = crate::guest_tasks::read(staging);
    match sessions::write(
        staging,
        &files.sid,
        procs,
        guest_files,
        prep.arch,
        &tasks,
        &tids,
        budget,
    ) {
        Ok(named) => {
            if named.spaces > 0 {
                crate::errors::note(format!(
                    "guest processes: {} named, in {} address spaces ({} files placed)",
                    named.processes, named.spaces, named.files
                ));
            }
            for why in named.problems.iter().chain(&named.by_address_lines()) {
                warn(format!("guest processes: {why}"));
            }
            named
        }
        Err(e) => {
            warn(format!(
                "the guest's processes' own functions are not named: {e:#}"
            ));
            Default::default()
        }
    }
}

/// System mode, Linux guest: the kernel modules the plugin saw loaded, named in the
/// assembled trace (`guest_procs::modules`), with source lines from the debug files given;
/// what failed is said.
fn guest_modules(staging: &Path, debug: &crate::guest_procs::module_debug::ModuleDebug) {
    let loaded: Vec<String> = match crate::guest_procs::modules::write(staging, debug) {
        Ok(Some(named)) => {
            let lines = match named.with_lines.is_empty() {
                true => String::new(),
                false => format!("; source lines of {}", named.with_lines.join(", ")),
            };
            crate::errors::note(format!(
                "kernel modules: {} loads ({} unloads), {} functions named{lines}",
                named.loads, named.unloads, named.functions
            ));
            for name in &named.by_offset {
                warn(format!(
                    "kernel module {name}: no symbol read from guest memory: its functions \
                     are named [{name}]+offset"
                ));
            }
            // Each names its file, which --symbols or --sysroot's debug tree gave.
            for why in &named.problems {
                warn(why.clone());
            }
            named.loaded
        }
        Ok(None) => Vec::new(),
        Err(e) => {
            warn(format!("kernel modules are not named: {e:#}"));
            return;
        }
    };
    for line in debug.never_loaded(&loaded) {
        warn(format!("--symbols {line}"));
    }
}

/// The guest's other processes count in what was recorded (their own completeness is in
/// [`UserProcesses::problems`]).
fn with_other_processes(mut s: Stats, others: &[Stats]) -> Stats {
    let threads = s.tids.len();
    for p in others {
        s.events += p.events;
        s.calls += p.calls;
        s.returns += p.returns;
        s.bytes += p.bytes;
        s.tids.extend(&p.tids);
    }
    // -F/-N's and -t's counts: each process counts what it left out (a forked child from
    // zero).
    for key in ["filtered", "time_filtered"] {
        let theirs: u64 = others.iter().filter_map(|p| p.other_count(key)).sum();
        if theirs > 0 {
            let mine = s.other_count(key).unwrap_or(0);
            s.other.retain(|(k, _)| k != key);
            s.other.push((key.to_string(), (mine + theirs).to_string()));
        }
    }
    // -F/-N's FUNCs entered: by any process (a function only the forked child calls).
    const REACHED: [&str; 4] = [
        "filter_reached",
        "notrace_reached",
        "pie_filter_reached",
        "pie_notrace_reached",
    ];
    for p in others {
        let reached =
            (p.other.iter()).filter(|(k, v)| REACHED.contains(&k.as_str()) && !v.is_empty());
        s.other.extend(reached.cloned());
    }
    // A thread that exec'd is one thread in two images.
    s.tids.sort_unstable();
    s.tids.dedup();
    let more = s.tids.len().saturating_sub(threads) as u32;
    s.vcpus = s.vcpus.map(|v| v + more);
    s
}

/// What the guest's processes after the first add to a user-mode trace.
#[derive(Default)]
struct UserProcesses {
    /// Their `task.txt` lines (FORK, and SESS and TASK for an exec'd program).
    task_lines: Vec<qemu_uftrace_format::task::Later>,
    /// The threads they recorded, which the first process's session does not hold.
    tids: Vec<u32>,
    /// Why their part of the trace is not complete.
    problems: Vec<String>,
    /// The processes that stopped at the size cap and for nothing else, and the reason
    /// (the same for each).
    capped: Option<(Vec<String>, String)>,
    /// What their plugins reported.
    stats: Vec<Stats>,
    failures: Vec<String>,
}

/// Each exec'd program gets its session's map and symbols (its own image, loader and
/// libraries, where it mapped them); each process image tells whether it wrote all.
fn user_processes(
    procs: &[qemu::user_procs::Proc],
    staging: &Path,
    inv: &Invocation,
    arch: Arch,
    no_auto_symbols: bool,
    cap: Option<&str>,
) -> UserProcesses {
    use qemu::user_procs::Kind;
    let mut out = UserProcesses::default();
    let root = inv.sysroot.as_deref();
    let mut sids = std::collections::HashMap::new();
    // Those that stopped at the size cap and for nothing else, said in one line: the cap
    // is one for all of them, and a guest forking in a loop has thousands.
    let mut capped: Vec<String> = Vec::new();
    let mut capped_why = None;
    for p in procs {
        let what = match &p.kind {
            Kind::Fork { .. } => format!("forked process {}", p.pid),
            Kind::Exec { exe } => format!("process {} ({})", p.pid, exe.display()),
        };
        match Stats::read(&p.dir) {
            Ok(Some(s)) => {
                if let Some(why) = s.incomplete_reason(cap) {
                    if s.size_capped && s.errors.is_empty() && s.lost_records == 0 {
                        capped_why.get_or_insert(why);
                        capped.push(what.clone());
                    } else {
                        out.problems.push(format!("{what}: {why}"));
                    }
                }
                out.stats.push(s);
            }
            _ => out.problems.push(format!(
                "{what} ended before the qemu-uftrace plugin flushed its buffers"
            )),
        }
        if let Kind::Exec { exe } = &p.kind {
            let sources = if no_auto_symbols {
                Vec::new()
            } else {
                let maps = qemu::user_maps::read(&p.dir).unwrap_or_default();
                qemu::user_maps::sources(exe, root, &maps)
            };
            let mut images = Vec::new();
            for l in symbol_source::load_all(&sources, Some(arch), false) {
                match l {
                    Loaded::Ok(_, img) => images.push(img),
                    Loaded::Failed(src, why) => {
                        out.failures.push(symbols::failure_line(&src, &why))
                    }
                }
            }
            match datadir::write_symbols(staging, images) {
                Ok(files) => {
                    sids.insert(p.dir.clone(), files.sid);
                }
                Err(e) => out.failures.push(format!("{what}: no symbols: {e:#}")),
            }
        }
    }
    out.capped = capped_why.map(|why| (capped, why));
    let tids_of = |p: &qemu::user_procs::Proc| -> Vec<u32> {
        crate::guest_tasks::read(&p.dir)
            .iter()
            .map(|t| t.tid)
            .collect()
    };
    out.task_lines = qemu::user_procs::task_lines(procs, |p| sids.get(&p.dir).cloned(), tids_of);
    // A process's first thread is the process (a child killed before it wrote its task
    // list still has it).
    out.tids = procs
        .iter()
        .flat_map(|p| tids_of(p).into_iter().chain([p.pid]))
        .collect();
    out
}

/// `what` (one or more processes), the first three named.
fn several(what: &[String]) -> String {
    match what {
        [one] => one.clone(),
        _ => format!("{} processes ({})", what.len(), named(what)),
    }
}

/// The first three of `what`, and how many more.
fn named(what: &[String]) -> String {
    match what.len() {
        0..=3 => what.join(", "),
        n => format!("{} and {} more", what[..3].join(", "), n - 3),
    }
}

fn exename(images: &[GuestImage], qemu: &Path) -> String {
    let p = images.first().map(|i| i.path.as_path()).unwrap_or(qemu);
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// uftrace picks the architecture from the description's first word.
fn cpu_desc(q: &Qemu, arch: Arch) -> String {
    format!(
        "{} (QEMU TCG, {}, plugin API {})",
        arch.uftrace_cpu_desc(),
        q.describe(),
        q.probe.plugin_api
    )
}

fn spinner(output: &Path) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_message(format!("assembling {}", output.display()));
    pb.enable_steady_tick(Duration::from_millis(100));
    Some(pb)
}
