//! The plugin's state, set once at install and read by every layer above: the
//! configuration (`config`), the record writer (`output`), guest register and memory access
//! (`guest`), and the few process-wide facts below.

/// `-F`/`-N`/`--stop-at`/`--start-at`'s addresses, a PIE program's placed once it runs.
pub mod aims;
pub mod args;
pub mod config;
/// The guest's function entries, which a direct jump enters as a call (`entries=`).
pub mod entries;
pub mod file_aims;
pub mod flight;
pub mod guest;
/// A Linux kernel's randomised base, found where it first runs in the upper half.
pub mod kaslr;
pub mod lib_aims;
pub mod lib_entries;
pub mod open_stacks;
pub mod output;
pub mod progress;
pub mod qemu_guest;
/// Stack cookies saved where a resync has no frame record to go by.
pub mod resync_cookie;
/// A Linux guest's process address spaces, for code one process translated and another runs.
pub mod spaces;
pub mod stacks;
pub mod start_gate;
pub mod switch;
pub mod taken;

use config::Config;
use output::Output;
use qemu_uftrace_engine::arch::{isa, Arch, Isa};
use qemu_uftrace_engine::tasks::TaskTable;
use std::sync::{Mutex, OnceLock};

pub static ARCH: OnceLock<Arch> = OnceLock::new();
/// Every guest context and the stacks of those that wait; taken only at context switches
/// and privilege level changes, never per event.
pub static TASKS: Mutex<Option<TaskTable>> = Mutex::new(None);
pub static CONFIG: OnceLock<Config> = OnceLock::new();
pub static OUTPUT: OnceLock<Output> = OnceLock::new();
pub static TARGET: OnceLock<String> = OnceLock::new();
pub static SYSTEM_MODE: OnceLock<bool> = OnceLock::new();
/// The running QEMU's plugin API range, `(min, cur)`, as it told us at install.
pub static QEMU_API: OnceLock<(i32, i32)> = OnceLock::new();
/// Whether all records share one instruction counter (one vCPU): the hot path may then take
/// the counter as the time without clamping it per task.
pub static ONE_CLOCK: OnceLock<bool> = OnceLock::new();

/// The guest's architecture (set at install, before any callback runs).
pub fn arch_or_default() -> Arch {
    ARCH.get().copied().unwrap_or(Arch::Aarch64)
}

pub fn isa_or_default() -> &'static dyn Isa {
    isa(arch_or_default())
}

pub fn config() -> Option<&'static Config> {
    CONFIG.get()
}

/// Whether QEMU emulates a whole system (true until install said otherwise).
pub fn system_mode() -> bool {
    SYSTEM_MODE.get().copied().unwrap_or(true)
}

/// Whether exception entries are shown (QEMU's discontinuity callback is registered).
static DISCONTINUITIES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_discontinuities_registered() {
    DISCONTINUITIES.store(true, std::sync::atomic::Ordering::Relaxed);
}

pub fn discontinuities_registered() -> bool {
    DISCONTINUITIES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Where the OS keeps its running task in per-CPU memory (see `Config::task_slot`), for a
/// block at `pc` being translated. From a file, it is read when the guest first runs code in
/// the upper half (the kernel proper), waiting for the CLI to finish writing it: the
/// firmware and the kernel's decompressor run long before, so that wait is normally none.
pub fn task_slot(pc: u64) -> Option<u64> {
    let cfg = CONFIG.get()?;
    if cfg.task_slot.is_some() {
        return cfg.task_slot;
    }
    let file = cfg.task_slot_file.as_ref()?;
    if let Some(slot) = SLOT_FROM_FILE.get() {
        return *slot;
    }
    if !isa_or_default().is_task_pointer(pc) {
        return None;
    }
    *SLOT_FROM_FILE.get_or_init(|| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(file) {
                return text.trim().parse().ok();
            }
            if std::time::Instant::now() > deadline {
                eprintln!(
                    "qemu-uftrace plugin: {} never appeared: guest tasks are not told apart",
                    file.display()
                );
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    })
}

/// The task slot from the file, once read (see [`task_slot`]).
static SLOT_FROM_FILE: OnceLock<Option<u64>> = OnceLock::new();

/// The task slot, if known by now (never waits: a switch was seen only once it was).
pub fn task_slot_known() -> Option<u64> {
    CONFIG
        .get()?
        .task_slot
        .or_else(|| SLOT_FROM_FILE.get().copied().flatten())
}

/// Runs `f` on the task table (a poisoned lock still holds a usable table: every change to
/// it is completed before anything can panic).
pub fn with_tasks<R>(f: impl FnOnce(&mut TaskTable) -> R) -> Option<R> {
    let mut guard = TASKS.lock().unwrap_or_else(|e| e.into_inner());
    guard.as_mut().map(f)
}

/// Runs `f`, code QEMU called: a panic must not unwind into QEMU's C frames (that aborts
/// QEMU and loses the records still buffered). It is caught, the trace marked incomplete,
/// and QEMU runs on; `None` then.
#[inline(always)]
pub fn guard<R>(what: &str, f: impl FnOnce() -> R) -> Option<R> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(payload) => {
            panicked(what, payload);
            None
        }
    }
}

#[cold]
#[inline(never)]
fn panicked(what: &str, payload: Box<dyn std::any::Any + Send>) {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    let msg = format!("internal error in {what} (the trace is incomplete): {msg}");
    match OUTPUT.get() {
        Some(out) => out.note_error(msg),
        None => eprintln!("qemu-uftrace plugin: {msg}"),
    }
}

/// Which of the functions translation asks for start the block at run-time `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtBlock {
    pub stop_at: bool,
    pub start_at: bool,
    pub trace_on_at: bool,
    pub trace_off_at: bool,
    /// A guest file's `-F`/`-N` function (`handlers::stubs`).
    pub file_gate: bool,
}

/// The aims at the block at run-time `start`: those given and a PIE's as the guest runs
/// them (the CLI names functions in the symbol file's space: a randomised kernel's are
/// moved back), a shared library's where the guest mapped it (`lib_aims`), and (system
/// mode) a guest file's where the translating process maps it (`file_aims`). A PIE's and a
/// library's are placed before any of their code is translated.
pub fn aims_at(start: u64) -> AtBlock {
    let aims = aims::now();
    let at = kaslr::to_symbols(start);
    let [stop, start_lib, on, off] = lib_aims::marks_at(start);
    let [f_stop, f_start, f_on, f_off, file_gate] = file_aims::marks_at(start);
    AtBlock {
        stop_at: stop || f_stop || aims.stop_at.contains(&at),
        start_at: start_lib || f_start || aims.start_at.contains(&at),
        trace_on_at: on || f_on || aims.trace_on_at.contains(&at),
        trace_off_at: off || f_off || aims.trace_off_at.contains(&at),
        file_gate,
    }
}
