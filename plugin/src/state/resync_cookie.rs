//! Resync cookies (`qemu_uftrace_format::cookie::resync_file_name`): where a return matched
//! no open frame and no frame record tells the stack (code built without frame pointers),
//! the engine asks for the context's registers and stack top instead of guessing
//! (`GuestView::save_stack`), and the CLI unwinds them with the guest's tables after the
//! run: in user mode with the program's files, in system mode with the ELF files QEMU loads
//! and the symbol files (a kernel's vmlinux: its ORC tables). Only where the frame-record
//! chain gave nothing (`resync::plan`): kernels that keep frame records (arm64, riscv64)
//! still resync from them, so their later returns past the bottom rebuild from the records
//! as before. Resyncs are rare (a stack switch the plugin cannot see); each costs a few
//! register reads and a stack copy, never anything per event.

use crate::state::guest::ByteBuf;
use crate::state::{arch_or_default, config, isa_or_default, OUTPUT};
use qemu_uftrace_format::cookie::{self, StackCookie, MAX_RESYNC_COOKIES};
use qemu_uftrace_format::Arch;
use std::sync::atomic::{AtomicU32, Ordering};

/// How much of the stack top is saved (as for a snapshot's cookies: chains tens deep).
const STACK_BYTES: usize = 32 * 1024;

/// Cookies numbered so far in this process.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Saves the running context of task `tid` at `pc` (record time `time`); its number, or
/// `None` past [`MAX_RESYNC_COOKIES`] or where the stack pointer or the file is refused.
pub fn save(regs: &mut ByteBuf, tid: u32, pc: u64, time: u64) -> Option<u32> {
    let (cfg, out) = (config()?, OUTPUT.get()?);
    if NEXT.load(Ordering::Relaxed) >= MAX_RESYNC_COOKIES {
        return None;
    }
    let arch = arch_or_default();
    let (sp_name, lr_name) = match arch {
        Arch::Aarch64 => ("sp", Some("x30")),
        Arch::Riscv64 => ("sp", Some("ra")),
        Arch::X86_64 => ("rsp", None),
    };
    let sp = regs.read_named(sp_name)?;
    let fp = regs.read_gpr(isa_or_default().frame_pointer()).unwrap_or(0);
    let lr = lr_name.and_then(|n| regs.read_named(n)).unwrap_or(0);
    let seq = NEXT.fetch_add(1, Ordering::Relaxed);
    if seq >= MAX_RESYNC_COOKIES {
        return None;
    }
    let cookie = StackCookie {
        machine: arch.elf_machine(),
        tid,
        // Not known on this path (the unwinder does not use it).
        vcpu: 0,
        time,
        pc,
        sp,
        fp,
        lr,
        stack_base: sp,
        stack: regs.copy_from(sp, STACK_BYTES),
        extra: Vec::new(),
    };
    let path = cfg.out.join(cookie::resync_file_name(tid, seq));
    match std::fs::write(&path, cookie.encode()) {
        Ok(()) => Some(seq),
        Err(e) => {
            out.note_error(format!(
                "cannot write {}: {e}; that resync is guessed",
                path.display()
            ));
            None
        }
    }
}
