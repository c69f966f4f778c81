//! The functions QEMU calls on every executed call, on every return's landing block, on
//! exception entries and returns and on writes of the OS's task register: find the vCPU,
//! take the time, read a register only when the value is not known otherwise, and hand over
//! to the engine (its `hot` engine, or the task table at a switch). What each call site
//! needs comes from `sites`.

use crate::ffi;
use crate::state::guest;
use crate::state::qemu_guest::QemuGuest;
use crate::vcpu::{self, VcpuState};
use qemu_uftrace_engine::arch::{Discontinuity, ExceptionKind, ExceptionReturnTo, Isa, Level};
use qemu_uftrace_engine::exceptions::EretOutcome;
use qemu_uftrace_engine::sites::{
    call_site_at, memory_call_target, memory_call_width, unpack, user_site_at, UserSite,
};
use std::ffi::{c_int, c_uint, c_void};

/// A call whose target is known. Each callback wraps this in its own closure, which the
/// compiler then inlines (one shared closure was left out of line). The common case is a
/// leaf with no call in it: anything unusual goes to `call_general` before changing state.
#[inline(always)]
fn direct_call(v: &mut VcpuState, target: u64, ret_addr: u64) {
    if let Some((now, false)) = v.fast.read(&mut v.interp, v.engine.last_time()) {
        if v.engine.try_call(now, target, ret_addr) {
            return;
        }
    }
    call_general(v, target, ret_addr)
}

/// A register QEMU would not give: the event it was for is not recorded; counted, and a
/// LOST record marks the place.
#[cold]
#[inline(never)]
pub fn read_failed(v: &mut VcpuState) {
    let now = v.now();
    v.settle(now);
    v.engine.stats.register_read_failures += 1;
    v.engine.mark_lost(now);
}

#[cold]
#[inline(never)]
fn call_general(v: &mut VcpuState, target: u64, ret_addr: u64) {
    let now = v.now();
    // User mode: a return that landed unseen right before a call is most often an
    // unwinder's into a C++ landing pad; the call says which function resumed.
    if v.settle(now) && !crate::state::system_mode() {
        v.engine.realign_for_call(now, ret_addr);
    }
    v.engine.call(now, target, ret_addr)
}

/// With `-F` (translation chose it): a call outside every filtered subtree that opens none
/// is only followed, on the fast path; anything else goes the general way (`try_call` never
/// takes a gated call).
#[inline(always)]
fn gated_call(v: &mut VcpuState, target: u64, ret_addr: u64) {
    if let Some((now, false)) = v.fast.read(&mut v.interp, v.engine.last_time()) {
        if v.engine.try_follow_call(now, target, ret_addr) {
            return;
        }
    }
    call_general(v, target, ret_addr)
}

/// [`on_packed_call`] with `-F`.
pub extern "C" fn on_packed_call_gated(vcpu_index: c_uint, data: *mut c_void) {
    let (target, ret_addr) = unpack(data as u64);
    vcpu::with(vcpu_index, |v| gated_call(v, target, ret_addr));
}

/// [`on_direct_call`] with `-F`.
///
/// # Safety
/// As [`on_direct_call`].
pub unsafe extern "C" fn on_direct_call_gated(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    vcpu::with(vcpu_index, |v| gated_call(v, site.target, site.ret_addr));
}

/// [`on_landing`] with `-F`: a return outside every filtered subtree is only followed.
///
/// # Safety
/// As [`on_landing`].
pub unsafe extern "C" fn on_landing_gated(vcpu_index: c_uint, data: *mut c_void) {
    let target = data as u64;
    vcpu::with(vcpu_index, |v| {
        if v.engine.awaits_thunk_return() && thunk_landing(v, target) {
            return;
        }
        if let Some(now) = v.fast.land(&mut v.interp, v.engine.last_time()) {
            if v.engine.try_follow_ret(now, target) {
                return;
            }
        }
        landing_general(v, target)
    });
}

/// A direct call whose addresses `sites::pack` fitted into `data` (most of them). The
/// common case calls nothing (`call_without_calls`), so the callback needs no stack frame
/// of its own (it saved six registers and spilled two); anything else goes the general way.
pub extern "C" fn on_packed_call(vcpu_index: c_uint, data: *mut c_void) {
    let (target, ret_addr) = unpack(data as u64);
    if !vcpu::try_with(vcpu_index, |v| call_without_calls(v, target, ret_addr)) {
        packed_call(vcpu_index, target, ret_addr)
    }
}

/// The general way of a call whose target is known ([`on_packed_call`]'s, a memory call's).
#[inline(never)]
fn packed_call(vcpu_index: c_uint, target: u64, ret_addr: u64) {
    vcpu::with(vcpu_index, |v| direct_call(v, target, ret_addr));
}

/// [`direct_call`]'s common case where it calls nothing: the time where the interpolation
/// need not read the TSC, nothing pending, and a call the engine's fast path takes. False
/// (nothing changed) for the general way.
#[inline(always)]
fn call_without_calls(v: &mut VcpuState, target: u64, ret_addr: u64) -> bool {
    match v.fast.call_time(&v.interp, v.engine.last_time()) {
        Some(now) => v.engine.try_call(now, target, ret_addr),
        None => false,
    }
}

/// # Safety
/// `data` is a call site from `sites::call_site`.
pub unsafe extern "C" fn on_direct_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    vcpu::with(vcpu_index, |v| direct_call(v, site.target, site.ret_addr));
}

/// # Safety
/// As [`on_direct_call`], the target field holding the register number; registered with
/// QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_indirect_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    vcpu::with(vcpu_index, |v| {
        match read_call_register(v, site.target as u8) {
            Some(target) => direct_call(v, target, site.ret_addr),
            None => read_failed(v),
        }
    });
}

/// A call's target register: the one register read a call pays (24–49 ns), counted
/// (`register_calls`, for finding what a run's time goes to).
#[inline(always)]
fn read_call_register(v: &mut VcpuState, reg: u8) -> Option<u64> {
    v.engine.stats.register_calls += 1;
    v.regs.read_gpr(reg)
}

/// The register and offset of a register-plus-offset call's target field (see
/// `translate::offset_call_word`).
#[inline(always)]
pub fn offset_call_parts(word: u64) -> (u8, i64) {
    (word as u8, (word >> 8) as u32 as i32 as i64)
}

/// # Safety
/// As [`on_indirect_call`], the target field holding the register and an offset to add
/// (RISC-V's JALR, whose target's low bit is cleared).
pub unsafe extern "C" fn on_offset_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    let (reg, offset) = offset_call_parts(site.target);
    vcpu::with(vcpu_index, |v| match read_call_register(v, reg) {
        Some(base) => direct_call(v, base.wrapping_add(offset as u64) & !1, site.ret_addr),
        None => read_failed(v),
    });
}

/// A call that reads its target from memory (x86 `call *m`), or through a register that a
/// load in its block has just filled (`arch::feeding_load`: aarch64 `ldr x16, [x0, #8];
/// blr x16`), told by the load itself: a memory callback on the load hands over the value
/// it read, so no register is read (24–49 ns; reading the pointer again through the API
/// took a lock in user mode and several register reads for `disp(%base,%index,scale)`).
/// User mode reads the value from the host's copy of guest memory (`guest::just_loaded`),
/// system mode through the API. A load that faults calls nothing: the call did not happen.
///
/// # Safety
/// `data` is a call site from `sites::call_site` whose target field is
/// `sites::memory_call_word`'s; registered as a read callback of that load alone.
pub unsafe extern "C" fn on_memory_call(
    vcpu_index: c_uint,
    info: ffi::MemInfo,
    vaddr: u64,
    data: *mut c_void,
) {
    let site = unsafe { call_site_at(data) };
    // SAFETY: inside the memory callback of the load of `vaddr` (the contract).
    let loaded = unsafe { loaded_value(info, vaddr, memory_call_width(site.target)) };
    let target = memory_call_target(site.target, loaded);
    if !vcpu::try_with(vcpu_index, |v| call_without_calls(v, target, site.ret_addr)) {
        packed_call(vcpu_index, target, site.ret_addr)
    }
}

/// The load that fills the register a call in its block goes through, where something
/// between them may fault (`arch::Feed::direct` false): it keeps the value it read for the
/// call's own callback ([`on_fed_call`]). An exception between leaves the block before the
/// call runs, and the block QEMU resumes in starts past this load, so its call reads the
/// register instead: a kept value is only ever taken by the call of the same run.
///
/// # Safety
/// Registered as a read callback of that load alone (8 bytes).
pub unsafe extern "C" fn on_fed_load(
    vcpu_index: c_uint,
    info: ffi::MemInfo,
    vaddr: u64,
    _data: *mut c_void,
) {
    // SAFETY: inside the memory callback of the load of `vaddr` (the contract).
    let loaded = unsafe { loaded_value(info, vaddr, 8) };
    vcpu::with(vcpu_index, |v| v.fed_target = loaded);
}

/// The value of `size` bytes that the load `info` describes has just read at `vaddr`: from
/// the host's copy of guest memory in user mode (`guest::just_loaded`), else through the API.
///
/// # Safety
/// Called from the memory callback of that load.
#[inline(always)]
unsafe fn loaded_value(info: ffi::MemInfo, vaddr: u64, size: usize) -> u64 {
    // SAFETY: the caller's contract.
    match unsafe { guest::just_loaded(vaddr, size) } {
        Some(value) => value,
        // SAFETY: as above.
        None => unsafe { ffi::qemu_plugin_mem_get_value(info) }.data[0],
    }
}

/// A call through a register that [`on_fed_load`] kept the value of.
///
/// # Safety
/// `data` is a call site from `sites::call_site`; registered on a call whose block's
/// feeding load has [`on_fed_load`].
pub unsafe extern "C" fn on_fed_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    let fast = |v: &mut VcpuState| call_without_calls(v, v.fed_target, site.ret_addr);
    if !vcpu::try_with(vcpu_index, fast) {
        vcpu::with(vcpu_index, |v| direct_call(v, v.fed_target, site.ret_addr));
    }
}

/// [`on_fed_call`] in a process's code (system mode, processes watched).
///
/// # Safety
/// `data` is a site from `sites::user_site`; registered as [`on_fed_call`].
pub unsafe extern "C" fn on_user_fed_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { user_site_at(data) };
    vcpu::with(vcpu_index, |v| {
        let d = moved(v, site);
        direct_call(v, v.fed_target, site.ret_addr.wrapping_add(d))
    });
}

/// A direct jump into another function's entry (a tail call; translation decided it from
/// the CLI's function list): a call nested in the jumper's frame, closed with it.
pub extern "C" fn on_jump_entry(vcpu_index: c_uint, data: *mut c_void) {
    let target = data as u64;
    // As in `on_packed_call`: the common case calls nothing.
    let common = |v: &mut VcpuState| match v.fast.call_time(&v.interp, v.engine.last_time()) {
        Some(now) => v.engine.try_jump_entry(now, target),
        None => false,
    };
    if !vcpu::try_with(vcpu_index, common) {
        jump_entry_at(vcpu_index, target)
    }
}

/// [`on_jump_entry`]'s general way.
#[inline(never)]
fn jump_entry_at(vcpu_index: c_uint, target: u64) {
    vcpu::with(vcpu_index, |v| {
        // A tail call runs about a million times in sqlite: the hot path's words where it
        // has them (a jump's address left pending is cleared there; a return is settled).
        let now = match v.fast.read(&mut v.interp, v.engine.last_time()) {
            Some((now, false)) => now,
            _ => {
                let now = v.now();
                v.settle(now);
                now
            }
        };
        v.engine.jump_entry(now, target);
    });
}

/// A far return in 64-bit code (`lretq`, at `data`): into a function's entry that no open
/// frame returns to, a jump into that function (`Engine::far_return_entry`); else a return,
/// pending until its landing as any other.
///
/// # Safety
/// Registered with QEMU_PLUGIN_CB_R_REGS; runs before the instruction, whose return address
/// is then at the stack pointer.
pub unsafe extern "C" fn on_far_return(vcpu_index: c_uint, data: *mut c_void) {
    let pc = data as u64;
    let isa = crate::state::isa_or_default();
    vcpu::with(vcpu_index, |v| {
        let sp = isa.linux_user().stack_pointer;
        let target = (v.regs.read_named(sp)).and_then(|sp| v.regs.read_le(sp, 8));
        if let Some(t) = target.filter(|&t| crate::state::entries::enters(pc, t)) {
            let now = v.now();
            v.settle(now);
            if v.engine.far_return_entry(now, t) {
                return;
            }
        }
        v.pending.set();
    });
}

/// A block that starts just after a call, entered while a return is pending: that return
/// went here.
///
/// # Safety
/// `data` is the block's address; registered with QEMU_PLUGIN_CB_R_REGS, conditional on the
/// vCPU's pending flag.
pub unsafe extern "C" fn on_landing(vcpu_index: c_uint, data: *mut c_void) {
    let target = data as u64;
    // As in `on_packed_call`.
    if !vcpu::try_with(vcpu_index, |v| landing_without_calls(v, target)) {
        landing_at(vcpu_index, target)
    }
}

/// [`on_landing`]'s general way.
#[inline(never)]
fn landing_at(vcpu_index: c_uint, target: u64) {
    vcpu::with(vcpu_index, |v| landing(v, target));
}

/// [`on_packed_call`] with `-t` (translation chose it): the common call's entry waits in
/// the time filter, on the fast path (`Engine::try_call_timed`).
pub extern "C" fn on_packed_call_timed(vcpu_index: c_uint, data: *mut c_void) {
    let (target, ret_addr) = unpack(data as u64);
    let fast = vcpu::try_with(vcpu_index, |v| {
        match v.fast.call_time(&v.interp, v.engine.last_time()) {
            Some(now) => v.engine.try_call_timed(now, target, ret_addr),
            None => false,
        }
    });
    if !fast {
        packed_call(vcpu_index, target, ret_addr)
    }
}

/// [`on_landing`] with `-t`: the return of a call shorter than the threshold drops it, on
/// the fast path (`Engine::try_ret_timed`).
///
/// # Safety
/// As [`on_landing`].
pub unsafe extern "C" fn on_landing_timed(vcpu_index: c_uint, data: *mut c_void) {
    let target = data as u64;
    let fast = vcpu::try_with(vcpu_index, |v| {
        if v.engine.awaits_thunk_return() {
            return false;
        }
        let Some((now, flag)) = v.fast.landing_time(&v.interp, v.engine.last_time()) else {
            return false;
        };
        if !v.engine.try_ret_timed(now, target) {
            return false;
        }
        // SAFETY: as in `landing_without_calls`.
        unsafe { flag.write_volatile(0) };
        true
    });
    if !fast {
        landing_at(vcpu_index, target)
    }
}

/// [`landing`]'s common case where it calls nothing (as [`call_without_calls`]): the top
/// frame's return, its flag cleared once taken. False (nothing changed) for the general
/// way, which clears the flag in any case.
#[inline(always)]
fn landing_without_calls(v: &mut VcpuState, target: u64) -> bool {
    if v.engine.awaits_thunk_return() {
        return false;
    }
    let Some((now, flag)) = v.fast.landing_time(&v.interp, v.engine.last_time()) else {
        return false;
    };
    if !v.engine.try_ret_top(now, target) {
        return false;
    }
    // SAFETY: this vCPU's own flag (`landing_time`), on its own thread.
    unsafe { flag.write_volatile(0) };
    true
}

/// A return landed at `target`.
#[inline(always)]
fn landing(v: &mut VcpuState, target: u64) {
    if v.engine.awaits_thunk_return() && thunk_landing(v, target) {
        return;
    }
    if let Some(now) = v.fast.land(&mut v.interp, v.engine.last_time()) {
        if v.engine.try_ret(now, target) {
            return;
        }
    }
    landing_general(v, target)
}

// A process's code (system mode, processes watched): the same events, from a `UserSite`
// that says which address space translated the code. Run in another space (a second
// process running the same file, or a library every process maps), its addresses are the
// translating process's: moved by the distance between the two processes' mappings of the
// file. In the space that translated it, one comparison more than the callbacks above.

/// How far the addresses of `site` move in the space the vCPU runs.
#[inline(always)]
fn moved(v: &mut VcpuState, site: &UserSite) -> u64 {
    v.moved(site.space, site.ret_addr)
}

/// A direct call in a process's code.
///
/// # Safety
/// `data` is a site from `sites::user_site`.
pub unsafe extern "C" fn on_user_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { user_site_at(data) };
    vcpu::with(vcpu_index, |v| {
        let d = moved(v, site);
        direct_call(
            v,
            site.target.wrapping_add(d),
            site.ret_addr.wrapping_add(d),
        )
    });
}

/// A call through a register in a process's code: its target is read, so only the return
/// address moves.
///
/// # Safety
/// As [`on_user_call`], the target field as [`on_indirect_call`]'s; R_REGS.
pub unsafe extern "C" fn on_user_indirect_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { user_site_at(data) };
    vcpu::with(vcpu_index, |v| {
        match read_call_register(v, site.target as u8) {
            Some(target) => {
                let d = moved(v, site);
                direct_call(v, target, site.ret_addr.wrapping_add(d))
            }
            None => read_failed(v),
        }
    });
}

/// As [`on_offset_call`], in a process's code.
///
/// # Safety
/// As [`on_user_call`], the target field as [`on_offset_call`]'s; R_REGS.
pub unsafe extern "C" fn on_user_offset_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { user_site_at(data) };
    let (reg, offset) = offset_call_parts(site.target);
    vcpu::with(vcpu_index, |v| match read_call_register(v, reg) {
        Some(base) => {
            let d = moved(v, site);
            direct_call(
                v,
                base.wrapping_add(offset as u64) & !1,
                site.ret_addr.wrapping_add(d),
            )
        }
        None => read_failed(v),
    });
}

/// As [`on_memory_call`], in a process's code.
///
/// # Safety
/// As [`on_memory_call`], `data` from `sites::user_site`.
pub unsafe extern "C" fn on_user_memory_call(
    vcpu_index: c_uint,
    info: ffi::MemInfo,
    _vaddr: u64,
    data: *mut c_void,
) {
    let site = unsafe { user_site_at(data) };
    // SAFETY: inside the memory callback of the access `info` describes.
    let loaded = unsafe { ffi::qemu_plugin_mem_get_value(info) }.data[0];
    let target = memory_call_target(site.target, loaded);
    vcpu::with(vcpu_index, |v| {
        let d = moved(v, site);
        direct_call(v, target, site.ret_addr.wrapping_add(d))
    });
}

/// A landing block in a process's code.
///
/// # Safety
/// `data` is a site from `sites::user_site` whose target is the block's address; registered
/// as [`on_landing`].
pub unsafe extern "C" fn on_user_landing(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { user_site_at(data) };
    vcpu::with(vcpu_index, |v| {
        let d = moved(v, site);
        landing(v, site.target.wrapping_add(d))
    });
}

/// A landing while a retpoline's return is pending. At the callee's own return address the
/// callee returned too, before any other event: the landing is its return. Anywhere else
/// the landing is in the callee (its entry, or a block it jumped to that happens to follow
/// a call) and the pending return was the retpoline's, no return at all. A callee entered
/// by a jump to the retpoline (a tail call) returns where the frame it replaced does.
/// A landing elsewhere than where the thunk's call ran (a return inside an interrupt taken
/// before the thunk's `ret`, or in another task) is the guest's own: the thunk's return is
/// still awaited.
#[cold]
#[inline(never)]
fn thunk_landing(v: &mut VcpuState, target: u64) -> bool {
    if !v.engine.take_thunk_return() {
        return false;
    }
    let stack = v.engine.stack();
    let returns_to = stack.returning().map(|i| &stack.frames()[i]);
    if returns_to.is_some_and(|f| f.ret_addr == target) {
        return false;
    }
    v.pending.take();
    true
}

/// A retpoline's own call (`call 1f` in `__x86_indirect_thunk_<reg>`, reaching
/// [`Thunk::BranchByReturn`]): no frame; the return it makes next is not one.
///
/// [`Thunk::BranchByReturn`]: qemu_uftrace_engine::arch::Thunk::BranchByReturn
pub extern "C" fn on_thunk_branch(vcpu_index: c_uint, _data: *mut c_void) {
    vcpu::with(vcpu_index, |v| {
        let now = v.now();
        v.settle(now);
        v.engine.arm_thunk_return();
    });
}

#[cold]
#[inline(never)]
fn landing_general(v: &mut VcpuState, target: u64) {
    v.pending.take();
    let now = v.now();
    let mut guest = QemuGuest { buf: &mut v.regs };
    v.engine.ret(now, target, &mut guest);
}

/// QEMU's discontinuity callback (10.2 on): an interrupt or exception was just taken (the
/// vCPU's registers are the handler's), or QEMU handled one itself (a host call).
pub fn on_discontinuity(vcpu_index: c_uint, kind: c_int, from_pc: u64, to_pc: u64) {
    // Tracing off with no block instrumented: an interrupt is a moment to switch.
    crate::handlers::switch::poke();
    let what = match kind {
        ffi::DISCON_INTERRUPT => Discontinuity::Interrupt,
        ffi::DISCON_EXCEPTION => Discontinuity::Exception,
        // No handler runs and no exception return comes: nothing to show as an entry.
        _ => return,
    };
    let isa = crate::state::isa_or_default();
    let split = crate::state::config().is_some_and(|c| c.split_levels);
    let active = crate::state::switch::active();
    vcpu::with(vcpu_index, |v| {
        let Some(what) = v.announced.see(what, from_pc, to_pc) else {
            // Raised, not yet delivered (x86): the delivery comes next.
            return;
        };
        // Tracing off: nothing is written, and no exception return is seen to close an
        // entry (the blocks carry no callback). An idle vCPU's timer interrupts were
        // written, nested ever deeper, from the first one to the switch on, seconds before
        // its edge; a vCPU its trigger switched on already records (`on_early`), one its
        // trigger switched off no longer does (`off_early`).
        if (!active && !v.on_early) || v.off_early {
            return;
        }
        let now = v.now();
        settle_at(v, now, isa, from_pc);
        // Interrupts need no register unless levels are kept apart; exceptions need the
        // syndrome of the level they were taken to.
        let level = if split || what == Discontinuity::Exception {
            v.current_level(isa)
        } else {
            None
        };
        let syndrome = level.and_then(|l| v.syndrome(isa, what, l));
        // Without a syndrome register (x86): from the trapping instruction or the IDT.
        let syndrome = match what {
            Discontinuity::Exception if syndrome.is_none() => {
                v.vectors.syndrome(&mut v.regs, isa, from_pc, to_pc)
            }
            _ => syndrome,
        };
        let previous = v.level;
        if let Some(level) = level {
            enter_level(v, vcpu_index, now, level, split);
        }
        let kind = isa.exception_kind(what, syndrome);
        // Code that faults into its own twin does so at its own level (a kernel turning its
        // MMU on); a fault from a lower level that happens to share the vector's page offset
        // is a real one.
        if level.is_some() && level == previous && v.engine.continues_remapped(kind, from_pc, to_pc)
        {
            return;
        }
        let resume = isa.exception_resume_pc(what, syndrome, from_pc);
        // A call that faulted before it ran (x86: its push of the return address) runs
        // again after the handler: the entry its callback wrote goes.
        if what == Discontinuity::Exception {
            v.engine.unmake_faulted_call(resume);
        }
        // A system call whose entry its instruction opened already
        // (`on_unreported_system_call`), should a QEMU report it too.
        let opened = v.engine.stack().top().is_some_and(|f| {
            kind == ExceptionKind::Svc && f.func == kind.addr() && f.ret_addr == resume
        });
        if !opened {
            v.engine.exception_entry(now, kind, resume);
            // Where its IRET will pop its return frame, in code that also uses IRET as a
            // far jump (x86 16-bit code; the handler's address says where it can be).
            let regs = &mut v.regs;
            if let Some(frame) = isa.exception_frame(to_pc, &mut |name| regs.read_named(name)) {
                v.engine.exception_frame(frame);
            }
        }
    });
}

/// The vCPU now runs at `level`, which `--split-levels` (`split`) records as a task switch.
fn enter_level(v: &mut VcpuState, vcpu_index: c_uint, now: u64, level: Level, split: bool) {
    if split {
        crate::state::with_tasks(|t| t.level(&mut v.engine, vcpu_index, now, level));
    }
    v.level = Some(level);
}

/// A return pending when an exception or interrupt is taken at `at`, settled
/// (`Engine::ret_interrupted`): to `at` where it follows a call. Rare (a register or two,
/// and the bytes before `at`).
fn settle_at(v: &mut VcpuState, now: u64, isa: &dyn Isa, at: u64) {
    if !v.take_unseen_return() {
        return;
    }
    let mode = crate::state::guest::current_mode(isa, &mut v.regs);
    let landed = crate::vcpu::landing::is_landing(isa, mode, at, std::ptr::null()).then_some(at);
    let mut guest = QemuGuest { buf: &mut v.regs };
    v.engine.ret_interrupted(now, landed, &mut guest);
}

/// A system call instruction that QEMU takes without a discontinuity report (x86-64
/// SYSCALL: `Isa::unreported_system_call`), about to run: its `[svc]` entry opens here, as
/// an SVC's does where QEMU reports it, and its SYSRET closes it.
///
/// # Safety
/// `data` is a site from `sites::call_site`: the level entered as its target, the
/// instruction's end as its return address.
pub unsafe extern "C" fn on_unreported_system_call(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { call_site_at(data) };
    let (level, resume) = (Level(site.target as u8), site.ret_addr);
    let split = crate::state::config().is_some_and(|c| c.split_levels);
    vcpu::with(vcpu_index, |v| {
        let now = v.now();
        v.settle(now);
        enter_level(v, vcpu_index, now, level, split);
        v.engine.exception_entry(now, ExceptionKind::Svc, resume);
    });
}

/// An exception return whose target the architecture reads from memory or general
/// registers (x86 IRET, SYSRET; chosen at translation by [`Isa::exception_return_to`]).
///
/// # Safety
/// `data` is the instruction's own address; registered with QEMU_PLUGIN_CB_R_REGS.
/// Exception returns are rare: a few register and memory reads are fine here.
pub unsafe extern "C" fn on_exception_return_from_memory(vcpu_index: c_uint, data: *mut c_void) {
    let eret_pc = data as u64;
    let isa = crate::state::isa_or_default();
    let split = crate::state::config().is_some_and(|c| c.split_levels);
    vcpu::with(vcpu_index, |v| {
        let now = v.now();
        v.settle(now);
        // As in [`on_exception_return`].
        crate::state::spaces::note_running(v.deltas.running());
        match exception_return_from_memory(v, isa, eret_pc).flatten() {
            Some(to) => {
                // In the context of the level left, as ERET's (`on_exception_return`).
                let from = v.current_level(isa);
                let down = from
                    .and_then(|from| return_down(v, isa, now, from, to.level, to.target, eret_pc));
                let outcome = match (down, to.frame) {
                    (Some(outcome), _) => outcome,
                    (None, Some(frame)) => {
                        v.engine.exception_return_16(now, to.target, eret_pc, frame)
                    }
                    (None, None) => v.engine.exception_return(now, to.target, eret_pc),
                };
                exec_returned_if(v, outcome);
                enter_level(v, vcpu_index, now, to.level, split);
                // A run from a snapshot: a task found asleep in the kernel has its user-mode
                // registers back here (as at ERET, `on_exception_return`).
                if to.level.0 == 3 && from.is_some_and(|f| f.0 == 0) {
                    if crate::handlers::midway::resuming() {
                        crate::handlers::midway::at_return_to_user(v, vcpu_index, to.target, |v| {
                            crate::handlers::midway::x86_64_user_sp(v, eret_pc)
                        });
                    }
                    // A window opened while this task ran in the kernel: its user calls.
                    crate::handlers::switch::at_return_to_user(v, vcpu_index, to.target, |v| {
                        crate::handlers::midway::x86_64_user_sp(v, eret_pc)
                    });
                }
            }
            None => v.engine.stats.register_read_failures += 1,
        }
    });
}

/// An exception return through the architecture's link and saved-status registers (ERET,
/// MRET, SRET).
///
/// # Safety
/// `data` is the ERET's own address; registered with QEMU_PLUGIN_CB_R_REGS. Exception returns
/// are rare: a few register reads are fine here.
pub unsafe extern "C" fn on_exception_return(vcpu_index: c_uint, data: *mut c_void) {
    let eret_pc = data as u64;
    let isa = crate::state::isa_or_default();
    let split = crate::state::config().is_some_and(|c| c.split_levels);
    vcpu::with(vcpu_index, |v| {
        let now = v.now();
        v.settle(now);
        // Back to user space, maybe after another vCPU ran on this thread: what the
        // translator attributes this vCPU's next blocks to.
        crate::state::spaces::note_running(v.deltas.running());
        let Some(level) = v.current_level(isa) else {
            v.engine.stats.register_read_failures += 1;
            return;
        };
        // Where the return goes: SPSR's level, and (leaving EL3) SCR's security state.
        let saved = isa
            .saved_status_register(level)
            .and_then(|name| v.regs.read_named(name));
        let to = saved.map(|saved| {
            let security = isa
                .security_register(level)
                .and_then(|name| v.regs.read_named(name));
            isa.return_level(level, saved, security)
        });
        let link = isa.exception_link_register(level);
        let target = link.and_then(|name| v.regs.read_named(name));
        let outcome = match target {
            Some(target) => {
                let down = to.and_then(|to| return_down(v, isa, now, level, to, target, eret_pc));
                Some(down.unwrap_or_else(|| v.engine.exception_return(now, target, eret_pc)))
            }
            None => {
                v.engine.stats.register_read_failures += 1;
                None
            }
        };
        if let Some(outcome) = outcome {
            exec_returned_if(v, outcome);
        }
        if let Some(to) = to {
            if split {
                crate::state::with_tasks(|t| {
                    // The level left is known now, if it was not (a boot context).
                    t.level(&mut v.engine, vcpu_index, now, level);
                    t.level(&mut v.engine, vcpu_index, now, to)
                });
            }
            v.level = Some(to);
            // A run from a snapshot: a task found asleep in the kernel has its user-mode
            // registers back here.
            if let (0, 1.., Some(target)) = (to.0 & 3, level.0 & 3, target) {
                if crate::handlers::midway::resuming() {
                    crate::handlers::midway::at_return_to_user(v, vcpu_index, target, |v| {
                        v.regs.read_named("SP_EL0")
                    });
                }
                // A window opened while this task ran in the kernel: its user calls.
                crate::handlers::switch::at_return_to_user(v, vcpu_index, target, |v| {
                    v.regs.read_named("SP_EL0")
                });
            }
        }
    });
}

/// After an exception return: where it was an exec's (`EretOutcome::ClosedExec`), the process
/// watch is told when the old program's frames closed (`procmaps::exec_returned`).
fn exec_returned_if(v: &mut VcpuState, outcome: EretOutcome) {
    if outcome == EretOutcome::ClosedExec {
        let at = v.engine.last_time();
        crate::handlers::procmaps::exec_returned(v, at);
    }
}

/// An exception return from `from` to `to`, to `target`, taken by the engine where it drops
/// privilege (None where it does not). Where exception entries are seen, one that closes
/// nothing hands the vCPU over (`Engine::exception_return_down`). Without them a handler's
/// return to a lower level closes no entry either, and the frames below are the interrupted
/// code's: only an exec's return closes them (`Engine::exception_return_unseen_down`).
fn return_down(
    v: &mut VcpuState,
    isa: &dyn Isa,
    now: u64,
    from: Level,
    to: Level,
    target: u64,
    eret_pc: u64,
) -> Option<EretOutcome> {
    if !isa.drops_privilege(from, to) {
        return None;
    }
    Some(if crate::state::discontinuities_registered() {
        v.engine.exception_return_down(now, target, eret_pc)
    } else {
        v.engine.exception_return_unseen_down(now, target, eret_pc)
    })
}

/// Where the exception return at `pc` goes, on architectures that read it from memory or
/// general registers (x86 IRET, SYSRET): its bytes are read again here (exception returns are
/// rare), as is the code width.
fn exception_return_from_memory(
    v: &mut VcpuState,
    isa: &dyn Isa,
    pc: u64,
) -> Option<Option<ExceptionReturnTo>> {
    let mode = crate::state::guest::current_mode(isa, &mut v.regs);
    let len = (isa.fetch_len() as u64)
        .min(crate::state::guest::MIN_PAGE - pc % crate::state::guest::MIN_PAGE);
    let mut insn = [0u8; 16];
    let n = match v.regs.read_memory(pc, len as usize) {
        Some(b) => {
            insn[..b.len()].copy_from_slice(b);
            b.len()
        }
        None => 0,
    };
    let regs = std::cell::RefCell::new(&mut v.regs);
    isa.exception_return_to(
        mode,
        &insn[..n],
        &mut |name| regs.borrow_mut().read_named(name),
        &mut |addr, size| regs.borrow_mut().read_le(addr, size),
    )
}

/// # Safety
/// `data` is the source register's number; registered with QEMU_PLUGIN_CB_R_REGS. Runs
/// before the instruction, when the register holds the value about to be written.
pub unsafe extern "C" fn on_task_pointer(vcpu_index: c_uint, data: *mut c_void) {
    let (src, pc) = task_pointer_site(data as u64);
    let isa = crate::state::isa_or_default();
    vcpu::with(vcpu_index, |v| {
        // A switch on in user space left the processes to read here, in the kernel.
        crate::handlers::proc_walk::at_kernel(v);
        let Some(ptr) = v.regs.read_gpr(src) else {
            // A task switch may go unseen: counted (the next unmatched return resyncs).
            v.engine.stats.register_read_failures += 1;
            return;
        };
        // Entries from user space write the running task again, and returns to it the
        // user's stack pointer: neither is a switch.
        if ptr == v.task_ptr || !isa.is_task_pointer(ptr) {
            return;
        }
        let arrived_new = crate::handlers::running_task::task_arrives(v, vcpu_index, isa, ptr);
        // A run from a snapshot: a task seen for the first time was open mid-way.
        if arrived_new && crate::handlers::midway::resuming() {
            crate::handlers::midway::at_first_switch_in(v, vcpu_index, pc);
        }
        // Tracing switched on while the guest ran: the arriving task's open frames.
        crate::handlers::switch::at_switch_in(v, pc);
    });
}

/// Tracing off with a guest file's `--trace-on-at` function: a task switch tells only which
/// process runs (`running_task::arrives_while_off`).
///
/// # Safety
/// As [`on_task_pointer`]'s.
pub unsafe extern "C" fn on_task_pointer_while_off(vcpu_index: c_uint, data: *mut c_void) {
    let (src, _) = task_pointer_site(data as u64);
    let isa = crate::state::isa_or_default();
    vcpu::with(vcpu_index, |v| {
        if let Some(ptr) = v.regs.read_gpr(src).filter(|&p| isa.is_task_pointer(p)) {
            crate::handlers::running_task::arrives_while_off(v, ptr);
        }
    });
}

/// A task switch callback's data: the source register and the instruction's address
/// (`entry::translate::task_pointer_data`).
fn task_pointer_site(data: u64) -> (u8, u64) {
    (data as u8, ((data as i64) >> 8) as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn task_switch_sites_keep_the_register_and_a_canonical_address() {
        for pc in [0xffff_8000_0801_2345u64, 0x4008_0000, 0xffff_ffff_8100_0000] {
            let data = (pc << 8) | 7;
            assert_eq!(super::task_pointer_site(data), (7, pc));
        }
    }
}
