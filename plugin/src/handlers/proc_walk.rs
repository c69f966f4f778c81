//! System mode, Linux: the guest's processes read from its memory at a switch on.
//!
//! While tracing is off no block carries the process watch (`handlers::procmaps`), so a
//! process started then, or one that exec'd or loaded a library, would have no files to
//! name its functions by once tracing comes back on. At each switch on (not at the start:
//! then everything is watched from the first instruction) the first vCPU to take its
//! stack cookie reads every process and its code mappings (`engine::linux_walk`) and tells
//! `plugin.procs` what the watch did not follow: a `seen` line and the process's code
//! mappings, where they differ from the plugin's own copy (`Spaces::snapshot`), and the
//! threads not told yet. The other vCPUs wait for it, then each runs in its task's space as
//! the walk left it. An arm64 or riscv64 vCPU in user space cannot read kernel memory: the
//! walk is then made at its next task-pointer write (each entry into the kernel), its lines
//! timed at the switch on.
//!
//! Every vCPU's first block after the reset waits for the walk, so no guest code runs
//! beside it. One limit, with several vCPUs: a walk made while the others still run (at a
//! `--trace-on-at` function, before the reset switches them; or one deferred to a kernel
//! entry) can miss a mapping another vCPU makes in that instant (its `mmap_region` told
//! before the walk, its VMA in the tree after).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use qemu_uftrace_engine::linux_walk;

use crate::vcpu::VcpuState;

/// A walk is due (set by a switch on, taken by the first vCPU's cookie), with the time its
/// lines carry once a vCPU took it; the lock also holds the other vCPUs back until the walk
/// is done.
static DUE: Mutex<Option<Option<u64>>> = Mutex::new(None);
/// Whether [`DUE`] holds one: read at every kernel entry ([`at_kernel`]).
static PENDING: AtomicBool = AtomicBool::new(false);
/// Threads told to `plugin.procs` by a walk, with their process: a later walk tells only
/// new ones. Cleared past [`MAX_TOLD`] (then told again: lines, not memory, grow).
static TOLD: Mutex<Option<HashMap<u32, u32>>> = Mutex::new(None);
const MAX_TOLD: usize = 1 << 18;

/// Walks done, processes given a new space by one, and walks cut short (a list or tree
/// past its bound, or unreadable).
pub static WALKS: AtomicU64 = AtomicU64::new(0);
pub static SNAPSHOTS: AtomicU64 = AtomicU64::new(0);
pub static CUT: AtomicU64 = AtomicU64::new(0);
/// Host time the walks took (µs): each stops the guest while it reads.
pub static MICROS: AtomicU64 = AtomicU64::new(0);

fn config() -> Option<(u64, linux_walk::Layout)> {
    crate::state::config()?.proc_walk.as_deref().copied()
}

/// Tracing went on at `at` (the edge's time, where known): the next cookie walks, and what
/// it finds is told at that time, before any record of the window (its frames open then are
/// in the processes' sessions).
pub fn switched_on(at: Option<u64>) {
    if config().is_some() {
        *DUE.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
        PENDING.store(true, Ordering::Release);
    }
}

/// A vCPU's first block after a switch on (or its `--trace-on-at` trigger), once it learnt
/// the task running (the walk starts from it where `init_task` is not known): the walk
/// where one is due, then this vCPU's space, its task's as the walk left it.
pub fn at_switch_on(v: &mut VcpuState) {
    let Some((init_task, layout)) = config() else {
        return;
    };
    walk_due(v, init_task, &layout, false);
    if let Some((_, tgid)) = crate::handlers::procmaps::ids_of_running(v) {
        v.run_space(crate::handlers::procmaps::space_of(tgid));
    }
}

/// A kernel entry or task switch while on (`handlers::callbacks::on_task_pointer`): the
/// walk a vCPU in user space could not make at the switch on. One load when none is due.
#[inline]
pub fn at_kernel(v: &mut VcpuState) {
    if !PENDING.load(Ordering::Acquire) {
        return;
    }
    if let Some((init_task, layout)) = config() {
        walk_due(v, init_task, &layout, true);
    }
}

/// The walk, where one is due and this vCPU can read the kernel's memory (`in_kernel`: it
/// runs the kernel, where what cannot be read is a cut walk); else left due.
fn walk_due(v: &mut VcpuState, init_task: u64, layout: &linux_walk::Layout, in_kernel: bool) {
    let mut due = DUE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(at) = due.as_mut() else {
        return;
    };
    let time = *at.get_or_insert_with(|| v.now());
    if walk(v, init_task, layout, time, in_kernel) {
        *due = None;
        PENDING.store(false, Ordering::Release);
    }
}

/// Reads the processes and tells what is new, at `time`. Returns false where nothing could
/// be read and the vCPU may be in user space (`!in_kernel`): tried again in the kernel.
fn walk(
    v: &mut VcpuState,
    init_task: u64,
    layout: &linux_walk::Layout,
    time: u64,
    in_kernel: bool,
) -> bool {
    let Some((_, off)) = crate::state::config()
        .and_then(|c| c.proc_watch.as_deref())
        .copied()
    else {
        return true;
    };
    let began = std::time::Instant::now();
    let init_task = (init_task != 0).then(|| crate::state::kaslr::SHIFT.to_guest(init_task));
    let found = linux_walk::walk(&mut v.regs, layout, init_task, v.task_ptr);
    if found.unreadable && !in_kernel {
        return false;
    }
    WALKS.fetch_add(1, Ordering::Relaxed);
    // One file's path read once (libc is mapped by every process).
    let mut paths: HashMap<u64, (String, u64)> = HashMap::new();
    let mut told = TOLD.lock().unwrap_or_else(|e| e.into_inner());
    let told = told.get_or_insert_with(HashMap::new);
    if told.len() > MAX_TOLD {
        told.clear();
    }
    let mut cut = found.cut;
    for p in &found.processes {
        cut |= p.partial;
        let tgid = p.tgid;
        for c in &p.code {
            (paths.entry(c.file))
                .or_insert_with(|| crate::handlers::procmaps::file_path(&mut v.regs, c.file, &off));
        }
        let maps: Vec<(&str, u64, u64, u64, u64)> = (p.code.iter())
            .filter_map(|c| {
                let (path, fs) = paths.get(&c.file)?;
                let offset = c
                    .pgoff
                    .wrapping_mul(crate::handlers::procmaps::kernel_page());
                Some((path.as_str(), c.start, c.end - c.start, offset, *fs))
            })
            .collect();
        let mut lines = String::new();
        let plain: Vec<(&str, u64, u64, u64)> =
            maps.iter().map(|&(p, s, l, o, _)| (p, s, l, o)).collect();
        if crate::handlers::procmaps::change_space(tgid, |s| s.snapshot(tgid, &plain)).is_some() {
            SNAPSHOTS.fetch_add(1, Ordering::Relaxed);
            lines += &format!(
                "seen\ttime={time}\ttid={tgid}\ttgid={tgid}\tprogram={}\n",
                u8::from(p.program_first)
            );
            for (path, start, len, offset, fs) in maps {
                lines += &format!(
                    "mmap\ttime={time}\ttid={tgid}\ttgid={tgid}\tstart={start:x}\tlen={len:x}\
                     \toffset={offset:x}\tfs={fs:x}\tpath={path}\n"
                );
            }
        }
        for &tid in p.threads.iter().filter(|&&t| t != tgid) {
            if told.insert(tid, tgid) != Some(tgid) {
                lines += &format!("task\ttime={time}\ttid={tid}\ttgid={tgid}\tparent=0\n");
            }
        }
        if !lines.is_empty() {
            crate::handlers::procmaps::keep(lines);
        }
    }
    // Kernel modules loaded while off, at the same instant.
    cut |= !crate::handlers::modules::walk_loaded(&mut v.regs, time);
    if cut {
        CUT.fetch_add(1, Ordering::Relaxed);
    }
    MICROS.fetch_add(began.elapsed().as_micros() as u64, Ordering::Relaxed);
    true
}
