//! `--stop-at FUNC` and `--start-at FUNC`: the CLI resolves FUNC to its addresses
//! (`stop_at=`, `start_at=`); a block that starts at one of them gets a callback at
//! translation (no other block pays anything). The first run of a stop ends the trace
//! there: the writer keeps only what was recorded before (`Output::stop_at`), and with
//! `stop_at_exit=on` QEMU stops as at the size cap. The first run of a start begins it
//! (`Output::start_at`: the writer adds the frames open then).

use crate::ffi::{qemu_plugin_insn, qemu_plugin_register_vcpu_insn_exec_cb, CB_NO_REGS};
use crate::state::config::{ClockChoice, ClockKind};
use crate::state::{config, AtBlock, OUTPUT};
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Where and when the trace stopped: the address entered and the time of the stop.
pub static REACHED: OnceLock<(u64, u64)> = OnceLock::new();
static HIT: AtomicBool = AtomicBool::new(false);
/// Where and when the trace started.
pub static STARTED: OnceLock<(u64, u64)> = OnceLock::new();
static START_HIT: AtomicBool = AtomicBool::new(false);
/// How QEMU is stopped with `stop_at_exit=on` (set at install, from the layer that can).
pub static ON_STOP: OnceLock<fn()> = OnceLock::new();

/// Attaches the stop to a block starting at a stop address (`first` is its first
/// instruction, at run-time `start`, `aims` what starts there; the callbacks are given its
/// address in the symbol file's space).
///
/// # Safety
/// `first` is a live instruction handle of the block being translated.
pub unsafe fn instrument(first: *mut qemu_plugin_insn, start: u64, aims: AtBlock) {
    let start = crate::state::kaslr::to_symbols(start);
    if aims.start_at && !START_HIT.load(Ordering::Relaxed) {
        // SAFETY: our callback, for an instruction of the block being translated.
        unsafe {
            qemu_plugin_register_vcpu_insn_exec_cb(
                first,
                on_start_at,
                CB_NO_REGS,
                start as usize as *mut c_void,
            )
        };
    }
    if !aims.stop_at || HIT.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: our callback, for an instruction of the block being translated.
    unsafe {
        qemu_plugin_register_vcpu_insn_exec_cb(
            first,
            on_stop_at,
            CB_NO_REGS,
            start as usize as *mut c_void,
        )
    };
}

/// Whether `--stop-at` was reached: nothing recorded after it is kept, so nothing is read
/// for it either (`handlers::args`).
pub fn stopped() -> bool {
    HIT.load(Ordering::Relaxed)
}

/// # Safety
/// Registered by [`instrument`], its data the address.
unsafe extern "C" fn on_stop_at(vcpu_index: c_uint, data: *mut c_void) {
    if HIT.swap(true, Ordering::SeqCst) {
        return;
    }
    // Records of this vCPU so far are queued now, before the stop is set (`Msg::Data`'s
    // `early`): all kept. Later ones, and other vCPUs', are cut by time. Counting guest
    // instructions, the clock has counted this block: everything before it, the entry
    // into FUNC included, is earlier. Any other clock can give many records one time and
    // its reading here can be milliseconds off the records' times: the stop is then at the
    // last record written, the entry into FUNC.
    let insn = config().is_some_and(|c| c.clock == ClockChoice::Fixed(ClockKind::Insn));
    let time = crate::vcpu::with(vcpu_index, |v| {
        v.engine.flush();
        if insn {
            v.now()
        } else {
            v.engine.last_time()
        }
    })
    .unwrap_or(0);
    let _ = REACHED.set((data as usize as u64, time));
    if let Some(out) = OUTPUT.get() {
        out.stop_at(time);
    }
    if config().is_some_and(|c| c.stop_at_exit) {
        if let Some(stop) = ON_STOP.get() {
            stop();
        }
    }
}

/// # Safety
/// Registered by [`instrument`], its data the address.
unsafe extern "C" fn on_start_at(vcpu_index: c_uint, data: *mut c_void) {
    if START_HIT.swap(true, Ordering::SeqCst) {
        return;
    }
    // The entry into FUNC was timed before this block: it is the first record written
    // (or, where the kernel ran in between, the writer finds it on top of the task's
    // stack: `StartGate`).
    let (time, tid) =
        crate::vcpu::with(vcpu_index, |v| (v.engine.last_time(), v.engine.tid())).unwrap_or((0, 0));
    let addr = data as usize as u64;
    let _ = STARTED.set((addr, time));
    if let Some(out) = OUTPUT.get() {
        out.start_at(time, addr, tid);
    }
}
