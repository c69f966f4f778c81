//! Jumps through a register (`setcontext`'s `br x16`, a nested function's trampoline's
//! `jmp *%r11`), seen where they land. Translation gives each such jump an inline store
//! of its own address into the vCPU's pending flag (`vcpu::landing`; a return stores 1),
//! and the blocks where one matters a callback conditional on the flag holding an address:
//! a function's first block, and a block right after a call. A jump within a function (a
//! switch table) costs that store only; the next call or callback clears it.

use crate::vcpu;
use std::ffi::{c_uint, c_void};

/// A block starting at a function's entry, entered by a jump through a register, or by a
/// return where the block follows no call (x86-64 `setcontext`'s `ret`).
///
/// # Safety
/// `data` is the block's address; registered conditional on the vCPU's pending flag
/// holding a jump's address (or not being 0, where the block follows no call).
pub unsafe extern "C" fn on_register_jump_entry(vcpu_index: c_uint, data: *mut c_void) {
    let target = data as u64;
    vcpu::with(vcpu_index, |v| {
        v.engine.stats.jump_callbacks += 1;
        let Some(pc) = take_jump(v) else {
            // A return landing here (the flag was 1, now cleared): it follows no call.
            if take_return(v) {
                let now = v.now();
                let stub = (v.engine.stack().top())
                    .is_some_and(|f| crate::state::entries::outside_functions(f.func));
                v.engine.return_to_entry(now, target, stub);
            }
            return;
        };
        let Some(from_stub) = decide(v, pc, target) else {
            return;
        };
        let now = v.now();
        v.engine.register_jump_entry(now, target, from_stub);
    });
}

/// A direct jump to a retpoline (`jmp __x86_indirect_thunk_<reg>`, an indirect tail call
/// as kernels built with retpolines make them), about to run: the thunk branches to the
/// address in its register, read here once, as a call to the thunk reads it
/// (`callbacks::on_indirect_call`). A function's entry is entered as by a jump through the
/// register itself ([`on_register_jump_entry`]); the thunk's own call and return are no
/// events (`callbacks::on_thunk_branch`), nor is its jump when the kernel patched it to
/// `jmp *%reg` (translation leaves a thunk's jump out).
///
/// # Safety
/// `data` is a call site from `sites::call_site`: the thunk's register as its target, the
/// jump's own address as its return address; registered with QEMU_PLUGIN_CB_R_REGS.
pub unsafe extern "C" fn on_thunk_jump(vcpu_index: c_uint, data: *mut c_void) {
    let site = unsafe { qemu_uftrace_engine::sites::call_site_at(data) };
    let (reg, pc) = (site.target as u8, site.ret_addr);
    vcpu::with(vcpu_index, |v| {
        let Some(target) = v.regs.read_gpr(reg) else {
            crate::handlers::callbacks::read_failed(v);
            return;
        };
        let now = v.now();
        v.settle(now);
        if let Some(from_stub) = decide(v, pc, target) {
            v.engine.register_jump_entry(now, target, from_stub);
        }
    });
}

/// A block right after a call, entered by a jump through a register from another
/// function: where an open call returns to, execution resumed in that frame (`setcontext`
/// back to `swapcontext`'s caller).
///
/// # Safety
/// As [`on_register_jump_entry`].
pub unsafe extern "C" fn on_register_jump_landing(vcpu_index: c_uint, data: *mut c_void) {
    let target = data as u64;
    vcpu::with(vcpu_index, |v| {
        v.engine.stats.jump_callbacks += 1;
        // A switch table's case right after a call (in a recursive function, an open call
        // may return there): the function's own jump.
        let Some(pc) = take_jump(v) else {
            return;
        };
        if decide_landing(v, pc, target) {
            return;
        }
        let now = v.now();
        let mut guest = crate::state::qemu_guest::QemuGuest { buf: &mut v.regs };
        v.engine.register_jump_landing(now, target, &mut guest);
    });
}

/// The pending jump's address, if one is (cleared then): through the hot path's word where
/// it has one. These callbacks run often (a switch table's case right after a call: about
/// a million times in x86_64 sqlite), and QEMU's API costs two lookups per access.
#[inline(always)]
fn take_jump(v: &mut vcpu::VcpuState) -> Option<u64> {
    v.fast.take_jump().unwrap_or_else(|| v.pending.take_jump())
}

/// Whether a return is pending (cleared then, as is anything else pending), as
/// [`take_jump`] reads it.
#[inline(always)]
fn take_return(v: &mut vcpu::VcpuState) -> bool {
    v.fast.take_return().unwrap_or_else(|| v.pending.take())
}

/// Whether the jump at `pc` to the entry `target` enters it (not a jump within one
/// function or between its parts), and if so whether it leaves code no function holds (a
/// trampoline). System mode: code no function holds is firmware's or a boot loader's
/// (QEMU's arm64 boot stub enters the Image by `br x4`): it hands over, entering nothing,
/// as before it jumped.
fn decide(v: &mut vcpu::VcpuState, pc: u64, target: u64) -> Option<bool> {
    let answer = remembered(&mut v.jump_answers[0], pc, target, || {
        if !crate::state::entries::enters(pc, target) {
            0
        } else if !crate::state::entries::outside_functions(pc) {
            1
        } else if crate::state::system_mode() {
            0
        } else {
            2
        }
    });
    (answer != 0).then_some(answer == 2)
}

/// Whether the jump at `pc` to `target`, code right after a call, stays in one function
/// (a switch table's case: an interpreter's dispatch lands there over and over).
fn decide_landing(v: &mut vcpu::VcpuState, pc: u64, target: u64) -> bool {
    remembered(&mut v.jump_answers[1], pc, target, || {
        crate::state::entries::same_function(pc, target) as u8
    }) != 0
}

/// `compute`'s answer for the jump at `pc` to `target`. The same few jumps repeat (a tail
/// call through one pointer, a switch's dispatch): the answers are kept per vCPU in a
/// small direct-mapped table (`vcpu::JumpAnswers`), sparing the function list's binary
/// searches.
fn remembered(
    table: &mut [(u64, u64, u8); vcpu::JUMP_ANSWERS],
    pc: u64,
    target: u64,
    compute: impl FnOnce() -> u8,
) -> u8 {
    let slot = &mut table[((pc ^ target.rotate_left(17)) as usize >> 2) % vcpu::JUMP_ANSWERS];
    match *slot {
        (p, g, a) if p == pc && g == target => a,
        _ => {
            let a = compute();
            *slot = (pc, target, a);
            a
        }
    }
}
