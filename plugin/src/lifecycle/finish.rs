//! The end of the run (or of a process image): flush every vCPU, wait for the writer, then
//! write `plugin.maps`, `plugin.tasks` and last `plugin.stats`, which says how it went.

use super::image;
use super::vcpus::RETIRED;
use crate::ffi;
use crate::handlers::{callbacks, usermap};
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
    let mut states = vcpu::take_all();
    for (_, s) in &mut states {
        s.engine.flush();
    }
    // Exited threads' vCPUs, flushed when they exited; listed in the order they ran.
    let retired = std::mem::take(&mut *RETIRED.lock().unwrap_or_else(|e| e.into_inner()));
    states.splice(0..0, retired);
    let written = out.finish();
    let table = TASKS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_else(|| TaskTable::new(false));
    let mut total = stats::Stats::default();
    for (_, s) in &states {
        total.add(&s.engine.stats());
    }
    let mut tids: Vec<u32> = table
        .contexts()
        .iter()
        .map(|c| c.tid)
        .filter(|t| written.bytes.get(t).copied().unwrap_or(0) > 0)
        .collect();
    tids.sort_unstable();
    let open: usize = states
        .iter()
        .map(|(_, s)| s.engine.stack().len())
        .sum::<usize>()
        + table
            .contexts()
            .iter()
            .map(|c| c.waiting_frames())
            .sum::<usize>();
    let lost: u64 = written.lost.values().map(|l| l.records).sum();
    let complete = written.errors.is_empty() && written.stopped.is_none() && lost == 0;
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
    line("vcpus", &states.len());
    line(
        "tids",
        &tids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    );
    line("tasks", &table.contexts().len());
    line("task_conflicts", &table.conflicts);
    for (k, v) in total.lines() {
        line(k, &v);
    }
    line("open_frames", &open);
    line("bytes", &written.bytes.values().sum::<u64>());
    line("max_depth", &cfg.max_depth);
    line("split_levels", &(cfg.split_levels as u8));
    line(
        "discontinuity_api",
        &(ffi::discontinuity_api().is_some() as u8),
    );
    line(
        "exceptions_shown",
        &(callbacks::discontinuities_registered() as u8),
    );
    let (api_min, api_cur) = QEMU_API.get().copied().unwrap_or_default();
    line("plugin_api", &ffi::API_VERSION);
    line("qemu_api", &format!("{api_min}..{api_cur}"));
    // User mode reuses vCPU indexes for later threads: per-vCPU lines would repeat keys.
    let per_vcpu = if system_mode() { &states[..] } else { &[] };
    for (i, s) in per_vcpu {
        line(&format!("vcpu{i}.open_frames"), &s.engine.stack().len());
        for (k, v) in s.engine.stats().lines() {
            line(&format!("vcpu{i}.{k}"), &v);
        }
    }
    line("lost_records", &lost);
    if let Some(why) = &written.stopped {
        line("stopped", why);
    }
    for e in &written.errors {
        line("error", e);
    }
    // User mode: each guest process image has its own files (`process`).
    let dir = image::files_dir(&cfg.out);
    // The maps and tasks first: `plugin.stats` tells the record command this image is done.
    if !system_mode() {
        write_atomically(&dir, "plugin.maps", &usermap::lines());
    }
    write_atomically(&dir, "plugin.tasks", &task_lines(&table));
    write_atomically(&dir, "plugin.stats", &text);
}

/// `plugin.tasks`: one line per context, tab-separated `key=value` fields, the name last.
fn task_lines(table: &TaskTable) -> String {
    let isa = isa_or_default();
    let mut text = String::new();
    for c in table.contexts() {
        let vcpus: Vec<String> = c.vcpus.iter().map(u32::to_string).collect();
        text.push_str(&format!(
            "tid={}\tpid={}\tkind={}\tlevel={}\tvcpus={}\tboot_of={}\tname={}\n",
            c.tid,
            c.pid().unwrap_or(0),
            if c.is_boot() { "boot" } else { "task" },
            c.key.level.map(|l| isa.level_name(l)).unwrap_or_default(),
            vcpus.join(","),
            c.was_boot_of.map(|v| v.to_string()).unwrap_or_default(),
            c.name.as_deref().unwrap_or("").replace(['\t', '\n'], " "),
        ));
    }
    text
}

fn write_atomically(dir: &std::path::Path, name: &str, text: &str) {
    let tmp = dir.join(format!("{name}.tmp"));
    let result = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, dir.join(name)));
    if let Err(e) = result {
        eprintln!(
            "qemu-uftrace plugin: cannot write {}: {e}",
            dir.join(name).display()
        );
    }
}
