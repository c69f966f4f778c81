//! What a stack cookie copies beyond its stack top (`StackCookie::extra`): the stacks its
//! chain goes on to. A kernel's interrupt handler runs on an interrupt stack and returns
//! into the task it interrupted, whose frames are on the task's stack. Both cookie writers
//! take them: a snapshot's start (`handlers::midway`) and a resync's or a switch on's
//! (`resync_cookie`).

use super::guest::ByteBuf;
use qemu_uftrace_engine::arch::Isa;
use qemu_uftrace_engine::guest::read_frame_record;
use qemu_uftrace_format::Arch;

/// How much of the stack top is saved: the frames of a call chain tens deep (kernel
/// stacks are 16 KiB on arm64 and x86-64), read once.
pub const STACK_BYTES: usize = 32 * 1024;

/// The other stacks of the context at `sp` (`stack`, its copy) and `fp`: kernels with frame
/// records (arm64, riscv64) by the records' chain; x86-64 kernels keep none (rbp is any
/// value), by the interrupt stack's saved pointer.
pub fn beyond(
    regs: &mut ByteBuf,
    arch: Arch,
    isa: &dyn Isa,
    sp: u64,
    stack: &[u8],
    fp: u64,
) -> Vec<(u64, Vec<u8>)> {
    if !isa.is_task_pointer(sp) {
        return Vec::new();
    }
    match arch {
        Arch::Aarch64 | Arch::Riscv64 => frame_record_stacks(regs, isa, sp, stack.len(), fp),
        Arch::X86_64 => interrupted_stack(regs, isa, sp, stack),
    }
}

/// Most stacks besides the first that a cookie copies.
const OTHER_STACKS: usize = 2;

/// Copies of the stacks the frame-record chain from `fp` goes on to beyond the first copy
/// (`sp`, `copied` bytes): an interrupt handler on its own stack returns into the task it
/// interrupted, whose frames are on the task's stack. Once per captured task.
fn frame_record_stacks(
    regs: &mut ByteBuf,
    isa: &dyn Isa,
    sp: u64,
    copied: usize,
    fp: u64,
) -> Vec<(u64, Vec<u8>)> {
    let mut covered = vec![(sp, sp.saturating_add(copied as u64))];
    let mut out = Vec::new();
    let mut fp = fp;
    for _ in 0..64 {
        if fp == 0 || !fp.is_multiple_of(8) || !isa.is_task_pointer(fp) {
            break;
        }
        // The record may sit below the frame pointer (RISC-V: at fp - 16).
        let base = fp.saturating_sub(16);
        if !covered.iter().any(|&(lo, hi)| (lo..hi).contains(&base)) {
            if out.len() == OTHER_STACKS {
                break;
            }
            let copy = regs.copy_from(base, STACK_BYTES);
            if copy.is_empty() {
                break;
            }
            covered.push((base, base.saturating_add(copy.len() as u64)));
            out.push((base, copy));
        }
        let record = read_frame_record(isa, fp, |addr, buf| {
            buf.copy_from_slice(regs.read_memory(addr, buf.len())?);
            Some(())
        });
        match record {
            Some((next, _)) => fp = next,
            None => break,
        }
    }
    out
}

/// x86-64 Linux: on an interrupt stack, the stack it interrupted. `call_on_irqstack` keeps
/// the interrupted stack pointer in the interrupt stack's top slot, and the copy of a stack
/// ends at its top (the guard page above it): so the last word copied, where it points to
/// another kernel stack. (A task stack's last word is its user `ss`, no pointer.)
fn interrupted_stack(
    regs: &mut ByteBuf,
    isa: &dyn Isa,
    sp: u64,
    stack: &[u8],
) -> Vec<(u64, Vec<u8>)> {
    let copied = stack.len() as u64;
    let top = (stack.len() < STACK_BYTES)
        .then(|| stack.len().checked_sub(8))
        .flatten()
        .and_then(|at| Some(u64::from_le_bytes(stack.get(at..)?.try_into().ok()?)));
    let Some(top) = top.filter(|&t| isa.is_task_pointer(t) && !(sp..sp + copied).contains(&t))
    else {
        return Vec::new();
    };
    let copy = regs.copy_from(top, STACK_BYTES);
    if copy.is_empty() {
        return Vec::new();
    }
    vec![(top, copy)]
}
