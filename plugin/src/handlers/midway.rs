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
//!
//! An OS's other tasks were open mid-way too: each gets its cookie when it first runs after
//! the start, at the switch that makes it current ([`at_first_switch_in`]: the registers
//! are the arriving task's there, as its switch code restored them), and, if it was asleep
//! in the kernel, a second one of its user-mode registers when it first returns to user
//! mode ([`at_return_to_user`]). Both run once per task, at events that are rare already.
//!
//! On riscv64 the plugin's reads at SRET run in S-mode, which cannot read user pages
//! without SSTATUS.SUM (the stack copy comes out empty): there the SRET only notes its
//! target in a per-vCPU word, and the user cookie is taken at the first block of user
//! code, whose registers are still exactly the ones SRET restored and whose pages are
//! readable. Only blocks that follow an `ecall` get that conditional callback (decided at
//! translation): a task asleep in a system call returns there. (A task preempted in user
//! mode returns to any instruction and gets no user cookie.)

use crate::ffi::qemu_plugin_u64;
use crate::state::guest::{ByteBuf, LOOKBEHIND_MAX, MIN_PAGE};
use crate::state::{arch_or_default, config, isa_or_default, system_mode, OUTPUT};
use crate::vcpu::{self, VcpuState};
use qemu_uftrace_engine::arch::{ExceptionKind, Isa};
use qemu_uftrace_format::cookie::{self, StackCookie};
use qemu_uftrace_format::Arch;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Blocks translated after the first capture before giving up on vCPUs not seen yet.
const TRANSLATIONS_AFTER_FIRST: u64 = 1 << 16;

/// Which vCPUs have been captured (by index).
static CAPTURED: Mutex<Vec<bool>> = Mutex::new(Vec::new());
/// Whether some vCPU still waits for its capture.
static WAITING: AtomicBool = AtomicBool::new(true);
/// Translations left before the arming stops (counted down once a capture happened).
static BUDGET: AtomicU64 = AtomicU64::new(TRANSLATIONS_AFTER_FIRST);
static ANY_CAPTURED: AtomicBool = AtomicBool::new(false);
/// Which tasks still want their user-mode cookie, and (riscv64) whose is due where.
static USER_COOKIES: Mutex<UserCookies> = Mutex::new(UserCookies::new());

fn user_cookies() -> std::sync::MutexGuard<'static, UserCookies> {
    USER_COOKIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bookkeeping of user-mode cookies, apart from the registers and the files: tasks
/// captured in kernel mode want one at their next return to user mode. On riscv64 that
/// return only makes the cookie due on its vCPU (one `user_resume` word each), taken at
/// the first user block; a task preempted between its SRET and that block may find the
/// word taken by another task's SRET meanwhile, and then wants its cookie again at its own
/// next SRET, which restores the same user registers. (A suite run lost PID 1's user frames,
/// most likely so: its forked child, still in a write at the snapshot, returned to user mode
/// about when PID 1 did.)
#[derive(Debug, Default)]
struct UserCookies {
    want: Option<HashSet<u32>>,
    /// vCPU → the task whose SRET set its word.
    due: Option<HashMap<u32, u32>>,
}

impl UserCookies {
    const fn new() -> Self {
        UserCookies {
            want: None,
            due: None,
        }
    }

    fn want(&mut self, tid: u32) {
        self.want.get_or_insert_with(HashSet::new).insert(tid);
    }

    /// Task `tid` returns to user mode: whether it wanted its cookie (no longer, then).
    fn take_want(&mut self, tid: u32) -> bool {
        self.want.as_mut().is_some_and(|w| w.remove(&tid))
    }

    /// `tid`'s cookie is due at the first user block `vcpu` runs at its SRET's target; a
    /// task whose cookie was due there and not taken yet wants it again.
    fn make_due(&mut self, vcpu: u32, tid: u32) {
        let displaced = self.due.get_or_insert_with(HashMap::new).insert(vcpu, tid);
        if let Some(other) = displaced.filter(|&other| other != tid) {
            self.want(other);
        }
    }

    /// `tid` runs the block at `vcpu`'s due target: whether the cookie is its to take. If
    /// another task was due (preempted before its first user instruction, and this one
    /// reached the same address first), that one wants its cookie again.
    fn resumed(&mut self, vcpu: u32, tid: u32) -> bool {
        match self.due.as_mut().and_then(|d| d.remove(&vcpu)) {
            Some(due) if due == tid => true,
            Some(due) => {
                self.want(due);
                false
            }
            None => false,
        }
    }
}

/// At install, with the configuration known: a riscv64 run from a snapshot gets its user
/// words (`user_resume`), and so does one of a Linux guest whose processes are followed (a
/// window switched on in its kernel takes the user-mode calls beneath at the same block:
/// `switch::at_user_resume`).
pub fn install() {
    let windows = system_mode() && config().is_some_and(|c| c.proc_watch.is_some());
    let on = (resuming() || windows) && arch_or_default() == Arch::Riscv64;
    crate::handlers::user_resume::install(on);
}

/// The word a block at `start` (a block of user code, `haddr` its host bytes) checks
/// against its own address for [`on_user_resume`]: only on riscv64 (a run from a snapshot,
/// or one whose processes are followed, [`install`]), and only for a block right after an
/// `ecall` (where a system call returns).
pub fn user_resume_word(
    isa: &dyn Isa,
    start: u64,
    haddr: impl FnOnce() -> *const u8,
) -> Option<qemu_plugin_u64> {
    let word = crate::handlers::user_resume::words()?;
    if isa.is_task_pointer(start) || !follows_ecall(start, haddr()) {
        return None;
    }
    Some(word.entry())
}

/// Whether the 4 bytes before `pc` are RISC-V's `ecall` (which has no compressed form).
fn follows_ecall(pc: u64, haddr: *const u8) -> bool {
    const ECALL: [u8; 4] = 0x0000_0073u32.to_le_bytes();
    if pc < 4 {
        return false;
    }
    if pc % MIN_PAGE >= 4 && !haddr.is_null() {
        let mut bytes = [0u8; 4];
        // SAFETY: the bytes sit on the same guest page as `pc`, so in the same contiguous
        // host mapping, right before `haddr`.
        unsafe { std::ptr::copy_nonoverlapping(haddr.sub(4), bytes.as_mut_ptr(), 4) };
        return bytes == ECALL;
    }
    // A page start: read through the guest's MMU (the vCPU is at this block, in user mode).
    let mut bytes = [0u8; LOOKBEHIND_MAX];
    let n = ByteBuf::new().read_before(pc, 4, &mut bytes);
    n == Some(4) && bytes[LOOKBEHIND_MAX - 4..] == ECALL
}

/// The first block of user code after an SRET whose task wants its user cookie (a
/// conditional callback: the vCPU's `user_resume` word is this block's address, `data`).
///
/// # Safety
/// Registered by translation with QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_user_resume(vcpu_index: c_uint, data: *mut c_void) {
    let Some(word) = crate::handlers::user_resume::words() else {
        return;
    };
    word.for_vcpu(vcpu_index, false).set(0);
    let pc = data as u64;
    vcpu::with(vcpu_index, |v| {
        // A window switched on while this task ran in the kernel: its user-mode calls.
        crate::handlers::switch::at_user_resume(v, vcpu_index, pc);
        if !user_cookies().resumed(vcpu_index, v.engine.tid()) {
            return;
        }
        if let Some(sp) = v.regs.read_named("sp") {
            user_cookie(v, vcpu_index, pc, sp);
        }
    });
}

/// Whether this run started mid-way (system mode, `resume=on`).
pub fn resuming() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| system_mode() && config().is_some_and(|c| c.resume))
}

/// Whether a block being translated gets [`on_first_insn`]: only in a run that starts
/// mid-way, while some vCPU has not been captured.
pub fn armed() -> bool {
    if !resuming() {
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
    vcpu::with(vcpu_index, |v| {
        // A vCPU resumed from a wait (WFI) runs an interrupt handler first: the engine has
        // opened its exception entry, and the calls open are those of the code it
        // interrupted, which resumes at the entry's return address (same stack: an
        // interrupt of kernel code; x86-64 pushed its IRET frame onto it).
        let frames = v.engine.stack().frames();
        let (pc, sp) = match frames {
            [only] if only.is_exception() && isa_or_default().is_task_pointer(only.ret_addr) => {
                let irq = only.func == ExceptionKind::Irq.addr();
                (only.ret_addr, irq.then(|| interrupted_sp(v)).flatten())
            }
            [] => (taken_before_the_start(v, pc).unwrap_or(pc), None),
            _ => (pc, None),
        };
        capture(v, vcpu_index, pc, sp)
    });
}

/// A vCPU saved as it took an exception from its own level (arm64: its first block is a
/// vector of VBAR_EL1's table, at the vector's first instruction, which no QEMU reports
/// as taken after the start): the calls open are those of the code interrupted, which
/// resumes where the exception link register says (ELR_EL1), with every other register
/// still its own. Where exception entries are shown, the entry opens there, as if taken
/// now, so that its return closes it. Three register reads, once per vCPU.
fn taken_before_the_start(v: &mut VcpuState, pc: u64) -> Option<u64> {
    let isa = isa_or_default();
    let level = v.current_level(isa)?;
    let base = (isa.vector_base_register(level).iter()).find_map(|name| v.regs.read_named(name))?;
    let what = isa.same_level_vector(pc.checked_sub(base)?)?;
    let resume = v.regs.read_named(isa.exception_link_register(level)?)?;
    if crate::state::discontinuities_registered() {
        let syndrome = v.syndrome(isa, what, level);
        let now = v.now();
        v.engine
            .exception_entry(now, isa.exception_kind(what, syndrome), resume);
    }
    Some(resume)
}

/// At an interrupt handler's first instruction, the stack pointer of the kernel code it
/// interrupted, where the CPU pushed onto that stack: x86-64 pushes an IRET frame (rip, cs,
/// rflags, rsp, ss; no error code for an interrupt), after aligning RSP, so the interrupted
/// RSP is the frame's. Elsewhere (arm64, riscv64) the handler's first instruction still has
/// the interrupted code's: `None`.
fn interrupted_sp(v: &mut VcpuState) -> Option<u64> {
    if arch_or_default() != Arch::X86_64 {
        return None;
    }
    let rsp = v.regs.read_named("rsp")?;
    v.regs.read_le(rsp.wrapping_add(24), 8)
}

/// A task the OS made current on `vcpu` for the first time since the start (the switch
/// instruction at `pc`, whose registers are the arriving task's): its kernel stack was
/// open mid-way, as its switch code left it.
pub fn at_first_switch_in(v: &mut VcpuState, vcpu: u32, pc: u64) {
    capture(v, vcpu, pc, None);
}

/// An exception return to user mode at `target` (the user registers restored but for the
/// stack pointer, which `user_sp` reads: SP_EL0 on arm64, the IRET frame's or RSP at SYSRET
/// on x86-64): the task's user-mode cookie, if it still wants one.
pub fn at_return_to_user(
    v: &mut VcpuState,
    vcpu: u32,
    target: u64,
    user_sp: impl FnOnce(&mut VcpuState) -> Option<u64>,
) {
    let tid = v.engine.tid();
    if !user_cookies().take_want(tid) {
        return;
    }
    // User pages are not readable here (riscv64): the cookie is the first user block's.
    if crate::handlers::user_resume::due_at(vcpu, target) {
        user_cookies().make_due(vcpu, tid);
        return;
    }
    let Some(sp) = user_sp(v) else {
        return;
    };
    user_cookie(v, vcpu, target, sp);
}

/// A task's user-mode cookie: at `pc` with the user stack at `sp`, the other registers
/// as they are (the user's).
fn user_cookie(v: &mut VcpuState, vcpu: u32, pc: u64, sp: u64) {
    let (tid, now) = (v.engine.tid(), v.now());
    let cookie = crate::state::resync_cookie::context(&mut v.regs, tid, vcpu, pc, sp, now, false);
    write(&cookie, cookie::user_file_name(tid));
}

/// The user stack pointer an x86-64 return to user mode at `pc` restores: the IRET frame's
/// (rip, cs, rflags, rsp, ss in 8-byte slots at RSP), or RSP itself at SYSRET (Linux puts it
/// back just before). Other forms (32-bit code, SYSEXIT): unknown.
pub fn x86_64_user_sp(v: &mut VcpuState, pc: u64) -> Option<u64> {
    let rsp = v.regs.read_named("rsp")?;
    let insn: [u8; 3] = v.regs.read_memory(pc, 3)?.try_into().ok()?;
    match insn {
        [0x48, 0xcf, _] => v.regs.read_le(rsp.wrapping_add(24), 8),
        [0x48, 0x0f, 0x07] => Some(rsp),
        _ => None,
    }
}

/// Cookies a run from a snapshot writes at most (each up to 96 KiB: the stack top and two
/// more stacks): one per task open at the start, and one more for its user mode. Tasks the
/// guest starts later get theirs too (nothing tells them apart at their first switch), so
/// a guest's fork loop would write one per child without this cap.
pub const MAX_COOKIES: u32 = 4096;

/// Cookies written (or refused) so far.
static COOKIES: AtomicU32 = AtomicU32::new(0);

fn write(cookie: &StackCookie, name: String) {
    let (Some(cfg), Some(out)) = (config(), OUTPUT.get()) else {
        return;
    };
    if COOKIES.fetch_add(1, Ordering::Relaxed) >= MAX_COOKIES {
        out.drop_side();
        return;
    }
    let lost = "the calls open at the start are not recovered";
    crate::state::resync_cookie::write(&cfg.out, &name, cookie, lost);
}

/// `sp`: the stack pointer at `pc`, where the registers' is not (the vCPU is at an
/// interrupt handler's first instruction, `interrupted_sp`).
fn capture(v: &mut VcpuState, vcpu: u32, pc: u64, sp: Option<u64>) {
    let Some(out) = OUTPUT.get() else {
        return;
    };
    let isa = isa_or_default();
    let sp_name = crate::state::resync_cookie::stack_register(arch_or_default());
    let Some(sp) = sp.or_else(|| v.regs.read_named(sp_name)) else {
        out.note_error(format!(
            "vCPU {vcpu} started mid-way but its stack pointer ({sp_name}) could not be read: \
             the calls open at the start are not recovered"
        ));
        return;
    };
    let time = v.now();
    v.engine.start_midway();
    let tid = v.engine.tid();
    let cookie = crate::state::resync_cookie::context(&mut v.regs, tid, vcpu, pc, sp, time, true);
    // In an OS's kernel (a kernel stack), the task's user-mode calls may be open beneath.
    if isa.is_task_pointer(sp) {
        user_cookies().want(tid);
    }
    write(&cookie, cookie::file_name(tid));
}

#[cfg(test)]
mod tests {
    use super::UserCookies;

    /// PID 1 (woken by its line) returns from `read`, an interrupt comes before its first
    /// user instruction, and its forked child, which was finishing a `write` at the
    /// snapshot, returns to user mode on the same vCPU meanwhile: each gets its cookie.
    #[test]
    fn a_task_whose_due_word_another_sret_took_wants_its_cookie_again() {
        let mut c = UserCookies::new();
        c.want(1);
        c.want(52);
        assert!(c.take_want(1));
        c.make_due(0, 1); // PID 1's SRET to read's return
        assert!(c.take_want(52));
        c.make_due(0, 52); // the child's SRET to write's return, before PID 1's block ran
        assert!(c.resumed(0, 52)); // the child's first user block: its cookie
        assert!(c.take_want(1)); // PID 1's next SRET, to the same registers
        c.make_due(0, 1);
        assert!(c.resumed(0, 1));
        assert!(!c.take_want(1) && !c.take_want(52));
    }

    /// Another task runs the block at the due address first: the one due tries again at its
    /// next SRET; a task not captured in kernel mode never wants one.
    #[test]
    fn a_block_run_by_another_task_leaves_the_due_one_wanting() {
        let mut c = UserCookies::new();
        assert!(!c.take_want(7));
        c.want(1);
        assert!(c.take_want(1));
        c.make_due(0, 1);
        assert!(!c.resumed(0, 9));
        assert!(!c.resumed(0, 1), "nothing is due on vCPU 0 any more");
        assert!(c.take_want(1));
        c.make_due(1, 1); // on another vCPU this time
        assert!(!c.resumed(0, 1));
        assert!(c.resumed(1, 1));
    }
}
