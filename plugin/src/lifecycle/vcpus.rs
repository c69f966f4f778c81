//! A vCPU's start and end: its engine, clock and slot made at vCPU init, and (user mode,
//! where each guest thread is a vCPU) what is kept of it once its thread exited.

use crate::state::config::{ClockChoice, ClockKind};
use crate::state::{guest, isa_or_default, system_mode, with_tasks, CONFIG, ONE_CLOCK, OUTPUT};
use crate::vcpu::{self, clock, landing};
use qemu_uftrace_engine::hot;
use qemu_uftrace_engine::stats::Stats;
use std::sync::Mutex;

/// What the end needs of a vCPU, once its records are flushed: its statistics and how many
/// frames it left open (not its engine, buffer, stack and register buffer).
pub struct Ended {
    pub index: u32,
    /// vCPUs it stands for (user mode folds exited threads' into one).
    pub vcpus: usize,
    pub stats: Stats,
    pub open_frames: usize,
    /// `-F`/`-N` functions it entered, by address.
    pub filter_reached: Vec<u64>,
    pub notrace_reached: Vec<u64>,
    /// Shared libraries' or guest files' `-F`/`-N` functions it entered, by aim index
    /// (`state::lib_aims`, `state::file_aims`).
    pub late_reached: Vec<u32>,
}

impl Ended {
    pub fn of(index: u32, state: &vcpu::VcpuState) -> Ended {
        Ended {
            index,
            vcpus: 1,
            stats: state.engine.stats(),
            open_frames: state.engine.stack().len(),
            filter_reached: (state.engine.gates())
                .map_or_else(Vec::new, |g| g.filter_reached().collect()),
            notrace_reached: (state.engine.gates())
                .map_or_else(Vec::new, |g| g.notrace_reached().collect()),
            late_reached: (state.engine.gates())
                .map_or_else(Vec::new, |g| g.late_reached().to_vec()),
        }
    }

    /// Folds `o` into this one (its counts added, its reached functions joined).
    fn absorb(&mut self, o: Ended) {
        self.vcpus += o.vcpus;
        self.stats.add(&o.stats);
        self.open_frames += o.open_frames;
        for (all, more) in [
            (&mut self.filter_reached, o.filter_reached),
            (&mut self.notrace_reached, o.notrace_reached),
        ] {
            all.extend(more);
            all.sort_unstable();
            all.dedup();
        }
        self.late_reached.extend(o.late_reached);
        self.late_reached.sort_unstable();
        self.late_reached.dedup();
    }
}

/// User mode: what the vCPUs whose guest thread exited leave, folded into one (a thread
/// loop must not grow it).
pub static RETIRED: Mutex<Vec<Ended>> = Mutex::new(Vec::new());

pub fn vcpu_init(vcpu_id: u32) {
    let (Some(cfg), Some(out)) = (CONFIG.get(), OUTPUT.get()) else {
        return;
    };
    // An untraced image's threads record nothing (until its callbacks are gone).
    if super::image::untraced() {
        return;
    }
    guest::init_registers(isa_or_default());
    vcpu::set_thread_vcpu(vcpu_id);
    crate::handlers::switch::vcpu_created(vcpu_id);
    if vcpu::is_installed(vcpu_id) {
        // QEMU initialises a vCPU index again after unplugging it: its engine, with the
        // records and stacks it holds, carries on.
        return;
    }
    // User mode runs each guest thread as a vCPU, and QEMU calls vCPU init on the new
    // vCPU's own thread when it starts running (queued work): the host thread id is the
    // guest's (linux-user threads are host threads).
    let user_thread = (!system_mode())
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
    engine.set_longjmp_test(crate::state::entries::is_longjmp);
    // Before any event, as the gates: it decides whether the fast path runs at all.
    engine.set_time_filter(cfg.time_filter);
    // A PIE's -F/-N functions are placed at its first instruction, which gives this (the
    // first) vCPU its gates then (`set_gates` once: before any call).
    if !crate::state::aims::pending() {
        let aims = crate::state::aims::now();
        // A randomised kernel's functions are asked in its symbol file's space.
        let shift = crate::state::kaslr::watched();
        engine.set_gates_shifted(aims.filter.clone(), aims.notrace.clone(), shift);
    }
    // Shared libraries' -F/-N functions (user mode), or guest files' (system mode),
    // placed as the guest maps them.
    let late = crate::state::lib_aims::late().or_else(crate::state::file_aims::late);
    if let Some((late, filtering)) = late {
        engine.add_late_gates(late, filtering);
    }
    // -A/-R/-a: values are read only where this vCPU may write frames (its gates say), and
    // a function's ENTRY waits for its arguments across a switch away before its first
    // instruction.
    if let Some(watch) = crate::handlers::args::watch(vcpu_id) {
        engine.set_watch(watch);
        engine.hold_fresh_entries(Some(crate::handlers::args::has_values));
    }
    if cfg.clock == ClockChoice::Fixed(ClockKind::Wall) {
        engine.clamp(super::image::time_floor());
    }
    let direct = ONE_CLOCK.get().copied().unwrap_or(false);
    // No `scoreboard::refresh_base` here: vCPU init runs outside QEMU's exclusive section,
    // beside other threads' translations and growths, and a base read before another
    // thread grew the scoreboards would be stored after it. A growth flushes every
    // translation, so none of this vCPU's instrumented code runs before a translation has
    // taken the base anew.
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
        off_task: 0,
        announced: Default::default(),
        vectors: Default::default(),
        fed_target: 0,
        deltas: Default::default(),
        jump_answers: Box::new([[(0, 0, 0); vcpu::JUMP_ANSWERS]; 2]),
        handed_round: 0,
        on_early: false,
        off_early: false,
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
pub fn vcpu_exit(vcpu_id: u32) {
    if system_mode() {
        return;
    }
    let Some(mut state) = vcpu::remove(vcpu_id) else {
        return;
    };
    // The thread's frames still open are written, as without `-t`.
    state.engine.release_waiting();
    state.engine.flush();
    with_tasks(|t| t.end_vcpu(vcpu_id));
    let ended = Ended::of(vcpu_id, &state);
    let mut retired = RETIRED.lock().unwrap_or_else(|e| e.into_inner());
    match retired.last_mut() {
        Some(all) => all.absorb(ended),
        None => retired.push(ended),
    }
}
