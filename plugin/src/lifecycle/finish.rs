//! The end of the run (or of a process image): flush every vCPU, wait for the writer, then
//! write `plugin.maps`, `plugin.tasks` and last `plugin.stats`, which says how it went.

use super::image;
use super::vcpus::{Ended, RETIRED};
use crate::ffi;
use crate::handlers::usermap;
use crate::state::config::ClockChoice;
use crate::state::{isa_or_default, system_mode, CONFIG, OUTPUT, QEMU_API, TARGET, TASKS};
use crate::vcpu;
use qemu_uftrace_engine::stats;
use qemu_uftrace_engine::tasks::TaskTable;

/// At QEMU exit: flush every vCPU, wait for the writer, then say how it went.
pub fn finish() {
    // Once: QEMU's at-exit, an exec and a stopping signal may meet; a second caller waits
    // until the first is done, so that the process never ends in the middle of the writing.
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(finish_once);
}

fn finish_once() {
    let (Some(cfg), Some(out)) = (CONFIG.get(), OUTPUT.get()) else {
        return;
    };
    // Nothing recorded, nothing to write (its parent's writer is not this process's).
    if image::untraced() {
        return;
    }
    // Exited threads' vCPUs, flushed when they exited, then the running ones: listed in the
    // order they ran.
    let mut states = std::mem::take(&mut *RETIRED.lock().unwrap_or_else(|e| e.into_inner()));
    let mut deferred_written = false;
    for (i, mut s) in vcpu::take_all() {
        // Frames still open at the end are written, as without `-t`: the running
        // context's, then (through the first engine) those of the contexts waiting in the
        // task table, each into its own task's records.
        s.engine.release_waiting();
        if !std::mem::replace(&mut deferred_written, true) {
            crate::state::with_tasks(|t| t.write_deferred(&mut s.engine));
        }
        s.engine.flush();
        states.push(Ended::of(i, &s));
    }
    let written = out.finish();
    let table = TASKS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_else(|| TaskTable::new(false));
    let mut total = stats::Stats::default();
    for s in &states {
        total.add(&s.stats);
    }
    let mut tids: Vec<u32> = table
        .contexts()
        .iter()
        .map(|c| c.tid)
        .filter(|t| written.bytes.get(t).copied().unwrap_or(0) > 0)
        .collect();
    tids.sort_unstable();
    // Frames of ended tasks' freed contexts stay open too.
    let open: u64 = states.iter().map(|s| s.open_frames as u64).sum::<u64>()
        + table
            .contexts()
            .iter()
            .map(|c| c.waiting_frames() as u64)
            .sum::<u64>()
        + table.freed_open_frames;
    // User mode: each guest process image has its own files (`process`).
    let dir = image::files_dir(&cfg.out);
    // The maps and tasks first: `plugin.stats` tells the record command this image is done,
    // and says it is incomplete if either is lost (a user-mode trace without its maps has
    // no library symbols).
    let mut written = written;
    if !system_mode() {
        if let Err(e) = write_atomically(&dir, "plugin.maps", &usermap::lines()) {
            written.errors.push(e);
        }
    }
    if system_mode() && crate::handlers::procmaps::enabled() {
        if let Err(e) = write_atomically(&dir, "plugin.procs", &crate::handlers::procmaps::lines())
        {
            written.errors.push(e);
        }
    }
    if let Err(e) = write_atomically(&dir, "plugin.tasks", &task_lines(&table)) {
        written.errors.push(e);
    }
    if written.dropped_side > 0 {
        written.errors.push(format!(
            "{} stack cookies not written (past the size cap, or past {} in a run from a \
             snapshot): the calls open in those contexts are not recovered",
            written.dropped_side,
            crate::handlers::midway::MAX_COOKIES
        ));
    }
    if table.past_cap > 0 {
        written.errors.push(format!(
            "{} tasks started past the cap of {} contexts share one task, \"(tasks past the \
             cap)\": their records are not told apart",
            table.past_cap,
            qemu_uftrace_engine::tasks::MAX_CONTEXTS
        ));
    }
    if table.unlisted > 0 {
        written.errors.push(format!(
            "{} ended tasks past the {} kept in plugin.tasks are not listed: their names \
             are not shown",
            table.unlisted,
            qemu_uftrace_engine::tasks::MAX_ENDED
        ));
    }
    let maps_dropped = crate::handlers::usermap::dropped();
    if maps_dropped > 0 {
        written.errors.push(format!(
            "{maps_dropped} library mappings and open files not kept past {} of each: later \
             libraries' functions are not named",
            crate::handlers::usermap::MAX_KEPT
        ));
    }
    let places_dropped = crate::state::lib_entries::dropped();
    if places_dropped > 0 {
        written.errors.push(format!(
            "{places_dropped} library placements dropped past {} held at once (a program \
             mapping libraries at new addresses without unmapping them): jumps into those, \
             if still mapped, are not shown as tail calls",
            crate::state::lib_entries::MAX_PLACED
        ));
    }
    let procs_dropped = crate::handlers::procmaps::dropped();
    if procs_dropped > 0 {
        written.errors.push(format!(
            "{procs_dropped} process events (starts, execs, mappings, exits) not kept past \
             {} MiB of them: later processes' functions are not named",
            crate::handlers::procmaps::MAX_BYTES >> 20
        ));
    }
    let walks_cut = crate::handlers::proc_walk::CUT.load(std::sync::atomic::Ordering::Relaxed);
    if walks_cut > 0 {
        written.errors.push(format!(
            "{walks_cut} readings of the guest's processes at a switch on were cut short (a \
             list or tree unreadable or past its bound): processes that started while \
             tracing was off may be unnamed"
        ));
    }
    let (spaces, files_past_cap, maps_dropped_spaces, unmoved_dropped, unmaps) =
        crate::state::spaces::with(|s| {
            let freed = (s.freed, s.unmoved);
            (
                freed,
                s.files_past_cap,
                s.maps_dropped,
                s.unmoved_dropped,
                s.unmaps,
            )
        });
    if unmoved_dropped > 0 {
        written.errors.push(format!(
            "{unmoved_dropped} times code translated in one process and run in another was \
             not found in a process that mapped more than {} pieces of code (past that the \
             unmapped ones are dropped, else the oldest of its later ones): it ran at its \
             translated addresses, which may name the wrong functions",
            qemu_uftrace_engine::spaces::MAX_MAPS
        ));
    }
    if files_past_cap > 0 {
        written.errors.push(format!(
            "{files_past_cap} mappings of files first mapped past the {} guest paths kept are \
             not matched across processes: their code, where another process translated it \
             first, is kept at that process's addresses, which may name the wrong functions",
            qemu_uftrace_engine::spaces::MAX_FILES
        ));
    }
    if spaces.1 > 0 {
        written.errors.push(format!(
            "{} events in code translated in an ended process's address space (one of {} \
             freed past the latest {} kept) ran in another process at their translated \
             addresses, which may name the wrong functions",
            spaces.1,
            spaces.0,
            qemu_uftrace_engine::spaces::KEPT_ENDED
        ));
    }
    let lost: u64 = written.lost.values().map(|l| l.records).sum();
    let complete =
        written.errors.is_empty() && written.stopped.is_none() && lost == 0 && !written.capped;
    let mut text = String::new();
    let mut line = |k: &str, v: &dyn std::fmt::Display| text.push_str(&format!("{k}={v}\n"));
    line("complete", &(complete as u8));
    line("target", &TARGET.get().map_or("", |t| t.as_str()));
    line("mode", &if system_mode() { "system" } else { "user" });
    line(
        "clock",
        &match cfg.clock {
            ClockChoice::Fixed(k) => k.name(),
            ClockChoice::Auto => "auto",
        },
    );
    line("vcpus", &states.iter().map(|s| s.vcpus).sum::<usize>());
    line(
        "tids",
        &tids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    );
    line("tasks", &table.created());
    line("task_conflicts", &table.conflicts);
    line("tasks_past_cap", &table.past_cap);
    line("tasks_ended", &table.freed);
    line("tasks_unlisted", &table.unlisted);
    for (k, v) in total.lines() {
        line(k, &v);
    }
    line("open_frames", &open);
    match crate::state::kaslr::outcome() {
        Some(Ok(found)) => {
            for (k, v) in crate::state::kaslr::lines(found)
                .lines()
                .filter_map(|l| l.split_once('='))
            {
                line(k, &v);
            }
        }
        Some(Err(why)) => line("kaslr_unknown", &why),
        None => {}
    }
    // Tracing switched while the guest ran: its windows, and what ran while off.
    if crate::state::switch::SWITCHES.load(std::sync::atomic::Ordering::Relaxed) > 0
        || !crate::state::switch::active()
    {
        for (k, v) in crate::state::switch::lines()
            .lines()
            .filter_map(|l| l.split_once('='))
        {
            line(k, &v);
        }
    }
    if let Some((addr, time)) = crate::handlers::stop_at::STARTED.get() {
        line("start_at_reached", &format_args!("{addr:#x}"));
        line("start_at_time", time);
        line("start_frames", &written.start_frames);
    }
    if let Some(frames) = written.window_frames {
        line("keep_last_frames", &frames);
    }
    if let Some((addr, time)) = crate::handlers::stop_at::REACHED.get() {
        line("stop_at_reached", &format_args!("{addr:#x}"));
        line("stop_at_time", time);
    }
    // `-F`/`-N`: which of their functions the guest entered (the CLI names those never
    // entered).
    // A PIE's functions by their link addresses, as the CLI gave them (`pie_…_reached`).
    let reached = |of: fn(&Ended) -> &Vec<u64>, filter: bool| {
        let mut addrs: Vec<u64> = states.iter().flat_map(|s| of(s).iter().copied()).collect();
        addrs.sort_unstable();
        addrs.dedup();
        let hex = |v: Vec<u64>| {
            v.iter()
                .map(|a| format!("{a:#x}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let (at, pie) = crate::state::aims::given_of(&addrs, filter);
        (hex(at), hex(pie))
    };
    let pie = cfg.pie.as_ref().map(|p| &p.aims);
    if !cfg.filter.is_empty() || pie.is_some_and(|p| !p.filter.is_empty()) {
        let (at, pie) = reached(|s| &s.filter_reached, true);
        line("filter_reached", &at);
        line("pie_filter_reached", &pie);
    }
    if !cfg.notrace.is_empty() || pie.is_some_and(|p| !p.notrace.is_empty()) {
        let (at, pie) = reached(|s| &s.notrace_reached, false);
        line("notrace_reached", &at);
        line("pie_notrace_reached", &pie);
    }
    // Shared libraries' functions (user mode) or guest files' (system mode) by aim index,
    // as the CLI numbered them.
    let files = &cfg.file_aims;
    let late = if !cfg.lib_filter.is_empty() || !cfg.lib_notrace.is_empty() {
        Some((
            "lib",
            crate::state::lib_aims::split_reached as fn(&[u32]) -> _,
        ))
    } else if !files.filter.is_empty() || !files.notrace.is_empty() {
        Some((
            "file",
            crate::state::file_aims::split_reached as fn(&[u32]) -> _,
        ))
    } else {
        None
    };
    if let Some((prefix, split)) = late {
        let mut all: Vec<u32> = states.iter().flat_map(|s| s.late_reached.clone()).collect();
        all.sort_unstable();
        all.dedup();
        let (filter, notrace) = split(&all);
        let list = |v: Vec<u32>| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        line(&format!("{prefix}_filter_reached"), &list(filter));
        line(&format!("{prefix}_notrace_reached"), &list(notrace));
    }
    line("bytes", &written.bytes.values().sum::<u64>());
    line("max_depth", &cfg.max_depth);
    line("split_levels", &(cfg.split_levels as u8));
    line(
        "discontinuity_api",
        &(ffi::discontinuity_api().is_some() as u8),
    );
    line(
        "exceptions_shown",
        &(crate::state::discontinuities_registered() as u8),
    );
    let (api_min, api_cur) = QEMU_API.get().copied().unwrap_or_default();
    line("plugin_api", &ffi::API_VERSION);
    line("qemu_api", &format!("{api_min}..{api_cur}"));
    // User mode reuses vCPU indexes for later threads: per-vCPU lines would repeat keys.
    let per_vcpu = if system_mode() { &states[..] } else { &[] };
    for s in per_vcpu {
        let i = s.index;
        line(&format!("vcpu{i}.open_frames"), &s.open_frames);
        for (k, v) in s.stats.lines() {
            line(&format!("vcpu{i}.{k}"), &v);
        }
    }
    line("lost_records", &lost);
    line("dropped_cookies", &written.dropped_side);
    if !system_mode() {
        line("dropped_maps", &maps_dropped);
        line("lib_places_dropped", &places_dropped);
    }
    if system_mode() && crate::handlers::procmaps::enabled() {
        line("dropped_proc_events", &procs_dropped);
        line("spaces_freed", &spaces.0);
        line("unmoved_events", &spaces.1);
        line("files_past_cap", &files_past_cap);
        line("maps_past_cap", &maps_dropped_spaces);
        line("unmoved_past_map_cap", &unmoved_dropped);
        line("unmaps_seen", &unmaps);
        let walks = &crate::handlers::proc_walk::WALKS;
        line(
            "proc_walks",
            &walks.load(std::sync::atomic::Ordering::Relaxed),
        );
        let snapshots = &crate::handlers::proc_walk::SNAPSHOTS;
        line(
            "proc_walk_spaces",
            &snapshots.load(std::sync::atomic::Ordering::Relaxed),
        );
        let micros = &crate::handlers::proc_walk::MICROS;
        line(
            "proc_walk_us",
            &micros.load(std::sync::atomic::Ordering::Relaxed),
        );
    }
    if written.capped {
        line("size_capped", &1);
    }
    if let Some(why) = &written.stopped {
        line("stopped", why);
    }
    for e in &written.errors {
        line("error", e);
    }
    if let Err(e) = write_atomically(&dir, "plugin.stats", &text) {
        eprintln!("qemu-uftrace plugin: {e}");
    }
}

/// `plugin.tasks`: one line per context, tab-separated `key=value` fields, the name last.
fn task_lines(table: &TaskTable) -> String {
    let isa = isa_or_default();
    // User mode: every thread here is one of this process's (this image's own, after a
    // fork or exec), which uftrace writes as `pid=` (getpid, as libmcount does).
    // SAFETY: getpid cannot fail.
    let process = (!system_mode()).then(|| unsafe { libc::getpid() } as u32);
    let mut text = String::new();
    for c in table.contexts() {
        let vcpus: Vec<String> = c.vcpus.iter().map(u32::to_string).collect();
        text.push_str(&format!(
            "tid={}\tpid={}\ttgid={}\tkind={}\tlevel={}\tvcpus={}\tboot_of={}\tname={}\n",
            c.tid,
            process.or(c.pid()).unwrap_or(0),
            // System mode: the task's process, where it was read (0: not known).
            table.tgid(c).unwrap_or(0),
            if c.is_boot() { "boot" } else { "task" },
            c.key.level.map(|l| isa.level_name(l)).unwrap_or_default(),
            vcpus.join(","),
            c.was_boot_of.map(|v| v.to_string()).unwrap_or_default(),
            c.name.as_deref().unwrap_or("").replace(['\t', '\n'], " "),
        ));
    }
    text
}

/// Writes `dir/name` whole or not at all; the error names the file.
fn write_atomically(dir: &std::path::Path, name: &str, text: &str) -> Result<(), String> {
    let tmp = dir.join(format!("{name}.tmp"));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, dir.join(name)))
        .map_err(|e| format!("cannot write {}: {e}", dir.join(name).display()))
}

/// The size cap was reached with `max_size_exit=on` (called on the writer thread, which the
/// finish waits for: the stop runs on a thread of its own). A system QEMU is sent SIGTERM,
/// on which it shuts down as at a guest's power-off (the at-exit callback finishes); a user
/// QEMU finishes here and exits with status 0 (a signal would go to the guest).
pub fn stop_at_size_cap() {
    let stop = || {
        if crate::state::system_mode() {
            // SAFETY: plain signal to our own process.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        } else {
            finish();
            // SAFETY: everything is written; nothing of ours needs tearing down.
            unsafe { libc::_exit(0) };
        }
    };
    let spawned = crate::state::output::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("uftrace-cap".into())
            .spawn(stop)
    });
    if let Err(e) = spawned {
        eprintln!("qemu-uftrace plugin: cannot stop QEMU at the size cap: {e}");
    }
}
