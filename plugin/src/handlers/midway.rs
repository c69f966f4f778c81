//! A run that starts mid-way (`-loadvm`, `-incoming`: the CLI passes `resume=on`): each
//! vCPU's first instruction finds calls already open. There, once per vCPU, the plugin saves
//! a stack cookie (`qemu_uftrace_format::cookie`) — the registers an unwinder starts from
//! and a bounded copy of the stack top — and tells the engine that its stack starts
//! mid-way. The CLI unwinds the cookie after QEMU exits, off the hot path; nothing here runs
//! per event.
//!
//! The first instruction a vCPU runs is not known at translation (another vCPU may have
//! translated the block), so while some vCPU has not been captured, every block translated
//! gets an R_REGS callback on its first instruction that checks and claims its vCPU. Those
//! blocks keep the callback (a lock and a flag check per run); a vCPU that never runs (a
//! secondary powered off in the snapshot) would keep that going forever, so the arming stops
//! after [`TRANSLATIONS_AFTER_FIRST`] more translations.

use crate::state::guest::MIN_PAGE;
use crate::state::{arch_or_default, config, isa_or_default, system_mode, OUTPUT};
use crate::vcpu::{self, VcpuState};
use qemu_uftrace_format::cookie::{self, StackCookie};
use qemu_uftrace_format::Arch;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// How much of the stack top is saved: the frames of a call chain tens deep (kernel
/// stacks are 16 KiB on arm64 and x86-64), read once.
pub const STACK_BYTES: usize = 32 * 1024;

/// Blocks translated after the first capture before giving up on vCPUs not seen yet.
const TRANSLATIONS_AFTER_FIRST: u64 = 1 << 16;

/// Which vCPUs have been captured (by index).
static CAPTURED: Mutex<Vec<bool>> = Mutex::new(Vec::new());
/// Whether some vCPU still waits for its capture.
static WAITING: AtomicBool = AtomicBool::new(true);
/// Translations left before the arming stops (counted down once a capture happened).
static BUDGET: AtomicU64 = AtomicU64::new(TRANSLATIONS_AFTER_FIRST);
static ANY_CAPTURED: AtomicBool = AtomicBool::new(false);

/// Whether a block being translated gets [`on_first_insn`]: only in a run that starts
/// mid-way, while some vCPU has not been captured.
pub fn armed() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    if !*ON.get_or_init(|| system_mode() && config().is_some_and(|c| c.resume)) {
        return false;
    }
    if !WAITING.load(Ordering::Relaxed) {
        return false;
    }
    if ANY_CAPTURED.load(Ordering::Relaxed) && BUDGET.fetch_sub(1, Ordering::Relaxed) <= 1 {
        WAITING.store(false, Ordering::Relaxed);
        return false;
    }
    true
}

/// Claims vCPU `index`'s capture: true the first time only.
fn claim(index: u32) -> bool {
    let mut captured = CAPTURED.lock().unwrap_or_else(|e| e.into_inner());
    if captured.is_empty() {
        captured.resize(vcpu::capacity().max(1), false);
    }
    let Some(slot) = captured.get_mut(index as usize) else {
        return false;
    };
    if *slot {
        return false;
    }
    *slot = true;
    ANY_CAPTURED.store(true, Ordering::Relaxed);
    if captured.iter().all(|&c| c) {
        WAITING.store(false, Ordering::Relaxed);
    }
    true
}

/// A block's first instruction, while some vCPU waits for its capture (R_REGS; `data` is
/// the block's address, which is the pc: no register read for it).
///
/// # Safety
/// Registered by translation with QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_first_insn(vcpu_index: c_uint, data: *mut c_void) {
    if !WAITING.load(Ordering::Relaxed) || !claim(vcpu_index) {
        return;
    }
    let pc = data as u64;
    vcpu::with(vcpu_index, |v| capture(v, vcpu_index, pc));
}

/// QEMU's names of the stack pointer and link register (none on x86-64, whose return
/// address is on the stack).
fn register_names(arch: Arch) -> (&'static str, Option<&'static str>) {
    match arch {
        Arch::Aarch64 => ("sp", Some("x30")),
        Arch::Riscv64 => ("sp", Some("ra")),
        Arch::X86_64 => ("rsp", None),
    }
}

fn capture(v: &mut VcpuState, vcpu: u32, pc: u64) {
    let (Some(cfg), Some(out)) = (config(), OUTPUT.get()) else {
        return;
    };
    let arch = arch_or_default();
    let isa = isa_or_default();
    let (sp_name, lr_name) = register_names(arch);
    let Some(sp) = v.regs.read_named(sp_name) else {
        out.note_error(format!(
            "vCPU {vcpu} started mid-way but its stack pointer ({sp_name}) could not be read: \
             the calls open at the start are not recovered"
        ));
        return;
    };
    let fp = v.regs.read_gpr(isa.frame_pointer()).unwrap_or(0);
    let lr = lr_name.and_then(|n| v.regs.read_named(n)).unwrap_or(0);
    // Page by page (QEMU's smallest), up to the first that cannot be read: the end of RAM
    // or of the stack's mapping.
    let mut stack = Vec::with_capacity(STACK_BYTES);
    let mut addr = sp;
    while stack.len() < STACK_BYTES {
        let n = ((MIN_PAGE - addr % MIN_PAGE) as usize).min(STACK_BYTES - stack.len());
        match v.regs.read_memory(addr, n) {
            Some(bytes) => stack.extend_from_slice(bytes),
            None => break,
        }
        addr = addr.wrapping_add(n as u64);
    }
    let time = v.now();
    v.engine.start_midway();
    let cookie = StackCookie {
        machine: arch.elf_machine(),
        tid: v.engine.tid(),
        vcpu,
        time,
        pc,
        sp,
        fp,
        lr,
        stack_base: sp,
        stack,
    };
    let path = cfg.out.join(cookie::file_name(cookie.tid));
    if let Err(e) = std::fs::write(&path, cookie.encode()) {
        out.note_error(format!(
            "cannot write {}: {e}; the calls open at the start are not recovered",
            path.display()
        ));
    }
}
