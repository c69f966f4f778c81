//! `--start-at`, `--keep-last` and `-N` on a Linux boot (Debian's arm64 kernel, QEMU 10.2.2,
//! one vCPU: the instruction clock) into the initramfs guest, against one unfiltered boot.
//!
//! Two boots are not the same event for event (timer interrupts land elsewhere, the kernel's
//! background work differs), so what is compared is what is deterministic: the calls of
//! /init's own functions (`init.c`, whose counts `counts.h` fixes), PID 1's open frames
//! at a given entry of /init and at the power-off that ends the run, and the kernel
//! functions only /init's syscalls reach. What holds of each trace alone is checked
//! exactly: its records' times against the start or stop (`plugin.stats`), each task's
//! frames nesting (the open frames first, at depths 0, 1, …; every exit closing the
//! innermost entry) and the size of the `.dat` files.

mod common;

use common::user::text;

use qemu_uftrace_format::addr48;
use qemu_uftrace_format::events;
use qemu_uftrace_format::pseudo;
use qemu_uftrace_format::record::{decode_all, Record, RecordType};
use qemu_uftrace_tests::execlog::{debian_system_map, system_map_addresses};
use qemu_uftrace_tests::linux_guest::{
    init_expected_calls, initramfs_boot_args_on, initramfs_guest, INIT_OK,
};
use qemu_uftrace_tests::replay::replay_events;
use qemu_uftrace_tests::{nm_functions, plugin_stat};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The kernel functions of nanosleep(2), which only /init's `do_sleep` makes.
const NANOSLEEP: [&str; 3] = [
    "__arm64_sys_clock_nanosleep",
    "hrtimer_nanosleep",
    "do_nanosleep",
];

/// The boot's command line, and /init's ELF (its symbols).
fn boot() -> (Vec<String>, PathBuf) {
    let qemu = qemu_uftrace_tests::system_qemu("10.2.2");
    let (_, init_elf) = initramfs_guest().expect("the guest builds");
    let argv = initramfs_boot_args_on(&qemu, 1).expect("the guest builds");
    (argv, init_elf)
}

/// The boot recorded with `extra` into `<temp>/NAME`; /init must have said it is fine.
fn record(name: &str, extra: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    let (argv, init_elf) = boot();
    let symbols = init_elf.to_string_lossy().into_owned();
    let mut options = vec!["--symbols", symbols.as_str()];
    options.extend_from_slice(extra);
    let (tmp, dir, out) = common::record_named(name, &argv, &options);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{extra:?}: {err}");
    assert!(
        text(&out.stdout).contains(INIT_OK),
        "{extra:?}: {}",
        text(&out.stdout)
    );
    (tmp, dir, err)
}

/// Every task's records, by task id.
fn read_tasks(dir: &Path) -> BTreeMap<u32, Vec<Record>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("the trace") {
        let path = entry.expect("the trace").path();
        let Some(tid) = path
            .file_name()
            .and_then(|n| n.to_str()?.strip_suffix(".dat")?.parse::<u32>().ok())
        else {
            continue;
        };
        let data = std::fs::read(&path).expect("a .dat file");
        out.insert(tid, decode_all(&data).expect("records"));
    }
    out
}

/// Checks that a task's frames nest, starting from none (frames open when writing began are
/// its first records, as entries at depths 0, 1, …): every entry one deeper than the frames
/// open, every exit closing the innermost. Returns the frames still open at the end,
/// outermost first.
fn nested(tid: u32, records: &[Record]) -> Vec<u64> {
    let mut stack = Vec::new();
    for (i, r) in records.iter().enumerate() {
        match r.kind {
            RecordType::Entry => {
                assert_eq!(
                    r.depth as usize,
                    stack.len(),
                    "task {tid}, record {i}: {r:?}"
                );
                stack.push(r.addr);
            }
            RecordType::Exit => {
                assert_eq!(
                    (r.depth as usize + 1, stack.last()),
                    (stack.len(), Some(&r.addr)),
                    "task {tid}, record {i}: {r:?} closes no open frame"
                );
                stack.pop();
            }
            _ => {}
        }
    }
    stack
}

/// PID 1's frames open at its last entry, outermost first: at the end of a run that ends
/// with the power-off, whose call may return before the vCPU stops (see [`last_call`]).
fn open_at_last_entry(records: &[Record]) -> Vec<u64> {
    let last = records.iter().rposition(|r| r.kind == RecordType::Entry);
    nested(1, &records[..last.map_or(0, |i| i + 1)])
}

/// Where a task's `qemu:opened` mark sits (the record after the frames open when writing
/// began: `open` of them), if it has one; never two.
fn opened_mark(tid: u32, records: &[Record], open: usize) -> Option<usize> {
    let marks: Vec<usize> = (records.iter().enumerate())
        .filter(|(_, r)| r.kind == RecordType::Event && r.addr == events::OPENED)
        .map(|(i, _)| i)
        .collect();
    assert!(marks.len() <= 1, "task {tid}: marks at {marks:?}");
    if open > 0 {
        assert_eq!(
            marks,
            [open],
            "task {tid}: the mark after its {open} open frames"
        );
    }
    marks.first().copied()
}

/// The marks in all tasks.
fn marks(tasks: &BTreeMap<u32, Vec<Record>>) -> u64 {
    let is_mark = |r: &&Record| r.kind == RecordType::Event && r.addr == events::OPENED;
    tasks.values().flatten().filter(is_mark).count() as u64
}

/// The window's last call: the last entry of a function in any task (an exception's
/// pseudo-function aside). Only an exception nested in it may follow, in its task: an
/// interrupt taken at the function's first instruction, after the call wrote its entry and
/// before that instruction ran (where `--stop-at` fires), as the host's timing places it.
/// Or its return, and its callers': PSCI's SYSTEM_OFF (the power-off's `hvc` in
/// `__arm_smccc_hvc`) stops the vCPU asynchronously, and one run under load went on for
/// the 21 instructions to that function's `ret` first.
fn last_call(tasks: &BTreeMap<u32, Vec<Record>>) -> Record {
    let (tid, at, last) = (tasks.iter())
        .flat_map(|(&t, rs)| rs.iter().enumerate().map(move |(i, r)| (t, i, *r)))
        .filter(|(_, _, r)| r.kind == RecordType::Entry && r.addr < pseudo::BASE)
        .max_by_key(|&(_, i, r)| (r.time, i))
        .expect("an entry");
    for (&t, rs) in tasks {
        for (i, r) in rs.iter().enumerate() {
            let after = if t == tid { i > at } else { r.time > last.time };
            if after && r.kind != RecordType::Event {
                let nested = t == tid && r.depth > last.depth;
                let exception = r.depth > last.depth + 1 || r.addr >= pseudo::BASE;
                let returned = t == tid && r.kind == RecordType::Exit && r.depth <= last.depth;
                assert!(
                    (nested && exception) || returned,
                    "{r:?} in task {t} after the last entry, {last:?} in task {tid}"
                );
            }
        }
    }
    last
}

/// Entries per function of `names` (address → name), in all tasks, from `from` on.
fn entries(
    tasks: &BTreeMap<u32, Vec<Record>>,
    names: &BTreeMap<u64, String>,
    from: u64,
) -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for r in tasks.values().flatten() {
        if r.kind == RecordType::Entry && r.time >= from {
            if let Some(name) = names.get(&r.addr) {
                *calls.entry(name.clone()).or_default() += 1;
            }
        }
    }
    calls
}

/// /init's own functions (`init.c`) and the kernel functions of [`NANOSLEEP`] and getpid(2),
/// as records hold their addresses.
fn watched(init_elf: &Path) -> BTreeMap<u64, String> {
    let init = nm_functions(init_elf).expect("nm init.elf");
    let mut names: BTreeMap<u64, String> = init
        .into_iter()
        .filter(|(_, n)| init_expected_calls().iter().any(|(f, _, _)| f == n))
        .collect();
    let mut kernel = NANOSLEEP.to_vec();
    kernel.push("__arm64_sys_getpid");
    for (name, addr) in system_map_addresses(&debian_system_map(), &kernel).expect("System.map") {
        names.insert(addr48(addr), name);
    }
    names
}

/// PID 1's open frames (addresses, outermost first) just before its first entry into `addr`.
fn stack_at(records: &[Record], addr: u64) -> Vec<u64> {
    let mut stack = Vec::new();
    for r in records {
        match r.kind {
            RecordType::Entry if r.addr == addr => return stack,
            RecordType::Entry => {
                stack.truncate(r.depth as usize);
                stack.push(r.addr);
            }
            RecordType::Exit => stack.truncate(r.depth as usize),
            _ => {}
        }
    }
    panic!("PID 1 never entered {addr:#x}");
}

/// What the unfiltered boot says, recorded once for every test here.
struct Full {
    names: BTreeMap<u64, String>,
    /// Entries of [`watched`] functions, in all.
    calls: BTreeMap<String, u64>,
    /// Those from `do_getpid_loop`'s first entry on.
    calls_from_start: BTreeMap<String, u64>,
    /// PID 1's open frames at its first entry into `do_getpid_loop`, and into `do_fork`.
    start_stack: Vec<u64>,
    fork_stack: Vec<u64>,
    /// PID 1's frames open at its last entry (the power-off's call).
    end_stack: Vec<u64>,
}

fn full() -> &'static Full {
    static FULL: OnceLock<Full> = OnceLock::new();
    FULL.get_or_init(|| {
        let (argv, init_elf) = boot();
        let names = watched(&init_elf);
        let addr = |n: &str| -> u64 {
            *names
                .iter()
                .find(|(_, name)| *name == n)
                .unwrap_or_else(|| panic!("{n} in init.elf"))
                .0
        };
        // The unfiltered boot is record_filter.rs's too: shared, as `record("full", &[])`
        // would record it.
        let symbols = init_elf.to_string_lossy().into_owned();
        let shared = common::shared::record(&argv, &["--symbols", &symbols]);
        assert!(shared.console.contains(INIT_OK), "{}", shared.console);
        let dir = shared.dir;
        let tasks = read_tasks(&dir);
        for (tid, records) in &tasks {
            nested(*tid, records);
        }
        let pid1 = &tasks[&1];
        let start = pid1
            .iter()
            .find(|r| r.kind == RecordType::Entry && r.addr == addr("do_getpid_loop"))
            .expect("do_getpid_loop entered")
            .time;
        Full {
            calls: entries(&tasks, &names, 0),
            calls_from_start: entries(&tasks, &names, start),
            start_stack: stack_at(pid1, addr("do_getpid_loop")),
            fork_stack: stack_at(pid1, addr("do_fork")),
            end_stack: open_at_last_entry(pid1),
            names,
        }
    })
}

fn stat(dir: &Path, key: &str) -> u64 {
    let v = plugin_stat(dir, key);
    v.parse()
        .unwrap_or_else(|_| panic!("plugin.stats {key}={v}"))
}

fn addr_of(full: &Full, name: &str) -> u64 {
    *full
        .names
        .iter()
        .find(|(_, n)| *n == name)
        .expect("a watched function")
        .0
}

/// `--start-at do_getpid_loop` (/init's second step): no record before its first entry but
/// each task's frames open then, once, first in its file; PID 1's are the unfiltered boot's
/// at that entry, and uftrace's replay of it opens with them. /init's calls are the
/// unfiltered boot's from there on (the first `do_write` is before).
#[test]
fn start_at_writes_each_task_s_open_frames_then_everything_after() {
    let full = full();
    let (_t, dir, err) = record("started", &["--start-at", "do_getpid_loop"]);
    let start = stat(&dir, "start_at_time");
    let frames = stat(&dir, "start_frames");
    let tasks = read_tasks(&dir);
    let mut opened = 0;
    for (tid, records) in &tasks {
        let open = records.iter().take_while(|r| r.time < start).count();
        assert!(
            records[open..].iter().all(|r| r.time >= start),
            "task {tid}: a record before the start after its open frames"
        );
        assert!(
            records[..open].iter().all(|r| r.kind == RecordType::Entry),
            "task {tid}: {:?}",
            &records[..open]
        );
        nested(*tid, records);
        opened_mark(*tid, records, open);
        opened += open as u64;
    }
    assert_eq!(opened, frames, "{err}");
    assert!(
        err.contains("started writing at the first entry into do_getpid_loop (0x")
            && err.contains(&format!("after the {frames} frame(s) open then")),
        "{err}"
    );
    let pid1 = &tasks[&1];
    let open: Vec<u64> = pid1
        .iter()
        .take_while(|r| r.time < start)
        .map(|r| r.addr)
        .collect();
    assert_eq!(open, full.start_stack, "PID 1's open frames");
    // The mark where writing began, then FUNC's entry.
    assert_eq!(opened_mark(1, pid1, open.len()), Some(open.len()));
    let first = pid1[open.len() + 1];
    assert_eq!(
        (first.kind, first.addr, first.time),
        (RecordType::Entry, addr_of(full, "do_getpid_loop"), start)
    );
    assert_eq!(entries(&tasks, &full.names, start), full.calls_from_start);
    assert!(full.calls_from_start["do_write"] < full.calls["do_write"]);
    // uftrace nests it: PID 1's replay opens with those frames and the entry.
    let events = replay_events(&dir, 1).expect("replay");
    let names: Vec<&str> = events[..open.len() + 1]
        .iter()
        .map(|e| e.strip_prefix("E ").unwrap_or(e))
        .collect();
    assert_eq!(names.last(), Some(&"do_getpid_loop"), "{events:?}");
    assert!(names[..open.len()].contains(&"main"), "{names:?}");
}

/// The .dat files' records: `--keep-last`'s window and the open frames before it.
fn window_size(dir: &Path, tasks: &BTreeMap<u32, Vec<Record>>, size: u64, err: &str) {
    let frames = stat(dir, "keep_last_frames");
    // Each task's open frames are followed by one mark (outside the window's size).
    let marked = marks(tasks);
    assert!(marked <= tasks.len() as u64, "{marked} marks: {err}");
    let records: u64 = tasks.values().map(|r| r.len() as u64).sum::<u64>() - marked;
    let bytes: u64 = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "dat"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert_eq!(bytes, (records + marked) * 16);
    // The window is full (the boot writes 250 MB), and the frames are a few per task.
    assert!(
        (records - frames) * 16 <= size && (records - frames) * 16 > size - 4096,
        "{records} records, {frames} frames: {err}"
    );
    assert!(frames < 16 * tasks.len() as u64, "{frames} frames: {err}");
}

/// `--keep-last 1M`: 1 MiB of records and the frames open at the window's start, nesting;
/// the window ends where the run does (PID 1 in the power-off call, with the unfiltered
/// boot's frames open). With `--stop-at do_fork` it ends at that entry instead.
#[test]
fn keep_last_keeps_the_size_and_ends_with_the_run_or_the_stop() {
    let full = full();
    const SIZE: u64 = 1 << 20;
    let (_t, dir, err) = record("last", &["--keep-last", "1M"]);
    let tasks = read_tasks(&dir);
    window_size(&dir, &tasks, SIZE, &err);
    for (tid, records) in &tasks {
        nested(*tid, records);
    }
    assert_eq!(open_at_last_entry(&tasks[&1]), full.end_stack, "{err}");
    let last = last_call(&tasks);
    assert_eq!(
        (last.kind, Some(&last.addr)),
        (RecordType::Entry, full.end_stack.last())
    );
    assert!(!replay_events(&dir, 1).expect("replay").is_empty());

    let (_t, dir, err) = record("stopped", &["--keep-last", "1M", "--stop-at", "do_fork"]);
    assert!(
        err.contains("stopped writing at the first entry into do_fork (0x"),
        "{err}"
    );
    let stop = stat(&dir, "stop_at_time");
    let tasks = read_tasks(&dir);
    window_size(&dir, &tasks, SIZE, &err);
    let last = last_call(&tasks);
    assert!(last.time < stop, "{last:?} at or after the stop ({stop})");
    assert_eq!(
        (last.kind, last.addr),
        (RecordType::Entry, addr_of(full, "do_fork"))
    );
    for (tid, records) in &tasks {
        nested(*tid, records);
    }
    let mut want = full.fork_stack.clone();
    want.push(addr_of(full, "do_fork"));
    assert_eq!(nested(1, &tasks[&1]), want, "{err}");
    assert_eq!(
        replay_events(&dir, 1)
            .expect("replay")
            .last()
            .map(String::as_str),
        Some("E do_fork")
    );
}

/// `-N do_sleep`: neither it nor the nanosleep(2) beneath it is written; every other call
/// of /init, and getpid(2)'s, as in the unfiltered boot.
#[test]
fn notrace_leaves_out_its_subtree_and_nothing_else_of_init() {
    let full = full();
    let (_t, dir, err) = record("notrace", &["-N", "do_sleep"]);
    assert!(err.contains(" filtered out (-F/-N) ]"), "{err}");
    assert!(!err.contains("never entered"), "{err}");
    let tasks = read_tasks(&dir);
    for (tid, records) in &tasks {
        nested(*tid, records);
    }
    let mut want = full.calls.clone();
    assert!(want.remove("do_sleep").is_some_and(|n| n >= 2), "{want:?}");
    for name in NANOSLEEP {
        assert!(
            want.remove(name).is_some_and(|n| n >= 2),
            "{name}: {want:?}"
        );
    }
    assert!(want["__arm64_sys_getpid"] > 100, "{want:?}");
    assert_eq!(entries(&tasks, &full.names, 0), want, "{err}");
}
