//! qemu-uftrace's QEMU TCG plugin: follows every guest call and return and writes uftrace
//! records, one task per guest context (a vCPU's boot code, an OS task, a privilege level).
//!
//! Layout: `translate` instruments calls, returns, exception returns and task-register
//! writes found by the engine's `arch`; `callbacks` run when they execute and drive the
//! engine (`qemu_uftrace_engine`: per-vCPU `hot` engines, the `tasks` table); `guest` reads
//! registers and memory for the engine's slow paths; `output` writes records off the vCPU
//! threads; `finish` runs at exit.

pub mod api;
mod callbacks;
mod clock;
mod config;
mod entries;
mod guest;
mod landing;
mod output;
mod process;
mod scoreboard;
mod signals;
mod stop_signals;
mod translate;
mod usermap;
mod vcpu;
mod vectors;

use config::{ClockChoice, Config, Mode};
use output::Output;
use qemu_uftrace_engine::arch::{isa, Arch, Isa};
use qemu_uftrace_engine::tasks::TaskTable;
use qemu_uftrace_engine::{hot, stats};
use std::ffi::{c_char, c_int, CStr, OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, OnceLock};

static ARCH: OnceLock<Arch> = OnceLock::new();
/// Every guest context and the stacks of those that wait; taken only at context switches
/// and privilege level changes, never per event.
static TASKS: Mutex<Option<TaskTable>> = Mutex::new(None);
static CONFIG: OnceLock<Config> = OnceLock::new();
static OUTPUT: OnceLock<Output> = OnceLock::new();
static TARGET: OnceLock<String> = OnceLock::new();
static SYSTEM_MODE: OnceLock<bool> = OnceLock::new();
/// The running QEMU's plugin API range, `(min, cur)`, as it told us at install.
static QEMU_API: OnceLock<(i32, i32)> = OnceLock::new();
/// Whether all records share one instruction counter (one vCPU): the hot path may then take
/// the counter as the time without clamping it per task.
static ONE_CLOCK: OnceLock<bool> = OnceLock::new();
/// User mode: the states of vCPUs whose guest thread exited, flushed, for the statistics.
static RETIRED: Mutex<Vec<(u32, vcpu::VcpuState)>> = Mutex::new(Vec::new());

/// The guest's architecture (set at install, before any callback runs).
pub(crate) fn arch_or_default() -> Arch {
    ARCH.get().copied().unwrap_or(Arch::Aarch64)
}

pub(crate) fn isa_or_default() -> &'static dyn Isa {
    isa(arch_or_default())
}

pub(crate) fn config() -> Option<&'static Config> {
    CONFIG.get()
}

/// Where the OS keeps its running task in per-CPU memory (see `Config::task_slot`), for a
/// block at `pc` being translated. From a file, it is read when the guest first runs code in
/// the upper half (the kernel proper), waiting for the CLI to finish writing it: the
/// firmware and the kernel's decompressor run long before, so that wait is normally none.
pub(crate) fn task_slot(pc: u64) -> Option<u64> {
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
pub(crate) fn task_slot_known() -> Option<u64> {
    CONFIG
        .get()?
        .task_slot
        .or_else(|| SLOT_FROM_FILE.get().copied().flatten())
}

/// Runs `f` on the task table (a poisoned lock still holds a usable table: every change to
/// it is completed before anything can panic).
pub(crate) fn with_tasks<R>(f: impl FnOnce(&mut TaskTable) -> R) -> Option<R> {
    let mut guard = TASKS.lock().unwrap_or_else(|e| e.into_inner());
    guard.as_mut().map(f)
}

/// The API version QEMU reads before it calls `qemu_plugin_install`.
#[no_mangle]
pub static qemu_plugin_version: c_int = api::API_VERSION;

/// Refuses to load: says what is wrong in one line and ends QEMU before it starts the guest.
fn fail(msg: &str) -> ! {
    eprintln!("qemu-uftrace plugin: {msg}");
    // SAFETY: nothing of ours needs tearing down yet.
    unsafe { libc::_exit(1) }
}

/// QEMU's entry point.
///
/// # Safety
/// Called once by QEMU with a live `info` and `argc` NUL-terminated arguments.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: api::qemu_plugin_id_t,
    info: *const api::qemu_info_t,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    // SAFETY: QEMU passes valid pointers (the function's contract).
    let (info, args) = unsafe {
        // Bytes, not text: a directory name need not be UTF-8.
        let args: Vec<OsString> = (0..argc.max(0) as usize)
            .map(|i| OsStr::from_bytes(CStr::from_ptr(*argv.add(i)).to_bytes()).to_owned())
            .collect();
        (&*info, args)
    };
    // A panic must not unwind into QEMU's C frames.
    match std::panic::catch_unwind(|| install(id, info, &args)) {
        Ok(()) => 0,
        Err(_) => fail("internal error while loading (see the message above)"),
    }
}

fn install(id: api::qemu_plugin_id_t, info: &api::qemu_info_t, args: &[OsString]) {
    // SAFETY: QEMU's target name is a NUL-terminated string, live during install.
    let target_name = unsafe { CStr::from_ptr(info.target_name) }
        .to_string_lossy()
        .into_owned();
    let _ = QEMU_API.set((info.version_min, info.version_cur));
    let mode = config::parse(args).unwrap_or_else(|msg| fail(&msg));
    let arch = Arch::from_qemu_target(&target_name);
    if let Mode::Probe = mode {
        println!(
            "qemu-uftrace-probe target={target_name} api={} api_min={} plugin_api={} \
             system={} supported={} discontinuity={}",
            info.version_cur,
            info.version_min,
            api::API_VERSION,
            info.system_emulation as u8,
            arch.is_some() as u8,
            api::discontinuity_api().is_some() as u8,
        );
        let _ = std::io::stdout().flush();
        // SAFETY: ends the probe QEMU before it builds a machine.
        unsafe { libc::_exit(0) };
    }
    let Mode::Record(mut cfg) = mode else {
        unreachable!()
    };
    let Some(arch) = arch else {
        fail(&format!("target {target_name} is not supported yet"))
    };
    let _ = ARCH.set(arch);
    let _ = TARGET.set(target_name);
    let system = info.system_emulation;
    let _ = SYSTEM_MODE.set(system);
    let vcpus = if system {
        info.max_vcpus.max(info.smp_vcpus).max(1) as usize
    } else {
        4096 // user mode: one vCPU per guest thread
    };
    // Instruction counts are one clock only on one vCPU: with several, each vCPU counts its
    // own, and a task moving between them would see time jump.
    let one_vcpu = system && vcpus == 1;
    let clock = match cfg.clock {
        ClockChoice::Auto if one_vcpu => clock::ClockKind::Insn,
        ClockChoice::Auto => clock::ClockKind::Wall,
        ClockChoice::Fixed(kind) => kind,
    };
    cfg.clock = ClockChoice::Fixed(clock);
    let _ = ONE_CLOCK.set(one_vcpu);
    *TASKS.lock().unwrap_or_else(|e| e.into_inner()) = Some(TaskTable::new(cfg.split_levels));
    vcpu::init(vcpus);
    let output =
        Output::start(cfg.out.clone()).unwrap_or_else(|e| fail(&format!("writer thread: {e}")));
    let _ = OUTPUT.set(output);
    let (counter, pending) = scoreboard::clock_and_pending();
    if !system {
        scoreboard::track_moving(&pending);
    }
    match &cfg.entries {
        Some(path) if cfg.entries_later => entries::load_later(path.clone()),
        Some(path) => entries::load(path).unwrap_or_else(|msg| fail(&msg)),
        None => {}
    }
    clock::init(clock, counter, cfg.tsc, !system);
    landing::init(pending);
    if !system {
        process::install(cfg.proc_key.clone());
    }
    let _ = CONFIG.set(cfg);
    // SAFETY: registering our callbacks for our own plugin id, during install.
    unsafe {
        api::register_callbacks(id, !system);
        if api::register_discontinuities(id) {
            callbacks::set_discontinuities_registered();
        }
    }
}

pub(crate) fn vcpu_init(vcpu_id: u32) {
    let (Some(cfg), Some(out)) = (CONFIG.get(), OUTPUT.get()) else {
        return;
    };
    guest::init_registers(isa_or_default());
    if vcpu::is_installed(vcpu_id) {
        // QEMU initialises a vCPU index again after unplugging it: its engine, with the
        // records and stacks it holds, carries on.
        return;
    }
    // User mode runs each guest thread as a vCPU, and QEMU calls vCPU init on the new
    // vCPU's own thread when it starts running (queued work): the host thread id is the
    // guest's (linux-user threads are host threads).
    let user_thread = (!SYSTEM_MODE.get().copied().unwrap_or(true))
        // SAFETY: gettid has no preconditions.
        .then(|| unsafe { libc::gettid() } as u32);
    let Some(tid) = with_tasks(|t| match user_thread {
        Some(thread) => t.start_thread(vcpu_id, thread),
        None => t.start_vcpu(vcpu_id),
    }) else {
        return;
    };
    let spill = Box::new(move |tid: u32, full: Vec<u8>| {
        out.send(tid, full);
        out.fresh()
    });
    let mut engine = hot::Engine::new(out.fresh(), spill, cfg.max_depth, tid);
    engine.set_longjmp_test(entries::is_longjmp);
    let direct = ONE_CLOCK.get().copied().unwrap_or(false);
    // This vCPU may have just grown the scoreboards (`scoreboard::refresh_base`).
    scoreboard::refresh_base();
    let clock = clock::VcpuClock::for_vcpu(vcpu_id, direct);
    let pending = landing::Pending::for_vcpu(vcpu_id, direct);
    // A user-mode vCPU index is reused by a later thread: a return left pending by the
    // thread that had it is not this one's.
    pending.take();
    let state = vcpu::VcpuState {
        fast: clock.fast_words(vcpu_id, user_thread.is_some()),
        clock,
        interp: Default::default(),
        pending,
        engine,
        regs: guest::ByteBuf::new(),
        level: None,
        task_ptr: 0,
        announced: Default::default(),
        vectors: Default::default(),
        thunk_ret: false,
    };
    if !vcpu::install(vcpu_id, state) {
        out.note_error(format!(
            "vCPU {vcpu_id} has no slot (QEMU said at most {} vCPUs): its events are not recorded",
            vcpu::capacity()
        ));
    }
}

/// User mode: a guest thread exited (on its own thread). Its records go to the writer now
/// and its vCPU slot is emptied, ready for the thread QEMU gives the index to next.
pub(crate) fn vcpu_exit(vcpu_id: u32) {
    if SYSTEM_MODE.get().copied().unwrap_or(true) {
        return;
    }
    let Some(mut state) = vcpu::remove(vcpu_id) else {
        return;
    };
    state.engine.flush();
    with_tasks(|t| t.end_vcpu(vcpu_id));
    RETIRED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((vcpu_id, state));
}

/// At QEMU exit: flush every vCPU, wait for the writer, then say how it went.
pub(crate) fn finish() {
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
    line(
        "mode",
        &if SYSTEM_MODE.get().copied().unwrap_or(true) {
            "system"
        } else {
            "user"
        },
    );
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
        &(api::discontinuity_api().is_some() as u8),
    );
    line(
        "exceptions_shown",
        &(callbacks::discontinuities_registered() as u8),
    );
    let (api_min, api_cur) = QEMU_API.get().copied().unwrap_or_default();
    line("plugin_api", &api::API_VERSION);
    line("qemu_api", &format!("{api_min}..{api_cur}"));
    // User mode reuses vCPU indexes for later threads: per-vCPU lines would repeat keys.
    let per_vcpu = if SYSTEM_MODE.get().copied().unwrap_or(true) {
        &states[..]
    } else {
        &[]
    };
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
    let dir = process::files_dir(&cfg.out);
    // The maps and tasks first: `plugin.stats` tells the record command this image is done.
    if !SYSTEM_MODE.get().copied().unwrap_or(true) {
        write_atomically(&dir, "plugin.maps", &usermap::lines());
    }
    write_atomically(&dir, "plugin.tasks", &task_lines(&table));
    write_atomically(&dir, "plugin.stats", &text);
}

/// `plugin.tasks`: one line per context, tab-separated `key=value` fields, the name last.
fn task_lines(table: &TaskTable) -> String {
    let isa = isa_or_default();
    // User mode: every thread here is one of this process's (this image's own, after a
    // fork or exec), which uftrace writes as `pid=` (getpid, as libmcount does).
    // SAFETY: getpid cannot fail.
    let process =
        (!SYSTEM_MODE.get().copied().unwrap_or(true)).then(|| unsafe { libc::getpid() } as u32);
    let mut text = String::new();
    for c in table.contexts() {
        let vcpus: Vec<String> = c.vcpus.iter().map(u32::to_string).collect();
        text.push_str(&format!(
            "tid={}\tpid={}\tkind={}\tlevel={}\tvcpus={}\tboot_of={}\tname={}\n",
            c.tid,
            process.or(c.pid()).unwrap_or(0),
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
