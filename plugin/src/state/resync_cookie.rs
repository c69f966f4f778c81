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
//!
//! User mode: each process image writes its cookies beside its other files
//! (`lifecycle::image::files_dir`, given by [`set_image`]), where the CLI unwinds them with
//! that image's files at their load biases, numbered from `cookie::resync_first_seq` of its
//! image index (an exec'd image appends to its task's file, after the image before's markers).

use crate::state::guest::ByteBuf;
use crate::state::stacks::{self, STACK_BYTES};
use crate::state::{arch_or_default, config, isa_or_default, OUTPUT};
use qemu_uftrace_format::cookie::{self, StackCookie, MAX_RESYNC_COOKIES};
use qemu_uftrace_format::Arch;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Cookies numbered so far in this process (a forked child goes on from its parent's count;
/// its tasks are its own).
static NEXT: AtomicU32 = AtomicU32::new(0);

/// This process image's directory (`None`: the trace directory) and index.
static IMAGE: Mutex<(Option<PathBuf>, u32)> = Mutex::new((None, 0));

/// Which process image this is (user mode, at install and in a forked child): where its
/// cookies go, and its index (`N` of `procs/PID.N`).
pub fn set_image(dir: PathBuf, index: u32) {
    *IMAGE.lock().unwrap_or_else(|e| e.into_inner()) = (Some(dir), index);
}

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
    let stack = regs.copy_from(sp, STACK_BYTES);
    let extra = stacks::beyond(regs, arch, isa_or_default(), sp, &stack, fp);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    if n >= MAX_RESYNC_COOKIES {
        return None;
    }
    let (dir, index) = IMAGE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let seq = cookie::resync_first_seq(index)? + n;
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
        stack,
        extra,
    };
    let dir = dir.unwrap_or_else(|| cfg.out.clone());
    let path = dir.join(cookie::resync_file_name(tid, seq));
    let bytes = cookie.encode();
    // The size cap counts cookies with the records: past it, the resync is guessed.
    if !out.reserve_side(bytes.len() as u64) {
        return None;
    }
    // A forked child's folder may not be there yet (its parent makes it at the fork's return).
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, bytes));
    match written {
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
