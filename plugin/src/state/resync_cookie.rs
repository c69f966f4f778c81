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
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
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
    let cfg = config()?;
    if NEXT.load(Ordering::Relaxed) >= MAX_RESYNC_COOKIES {
        return None;
    }
    let sp = regs.read_named(stack_register(arch_or_default()))?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    if n >= MAX_RESYNC_COOKIES {
        return None;
    }
    let (dir, index) = IMAGE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let seq = cookie::resync_first_seq(index)? + n;
    // The vCPU is not known on this path (the unwinder does not use it).
    let cookie = context(regs, tid, 0, pc, sp, time, true);
    let dir = dir.unwrap_or_else(|| cfg.out.clone());
    let name = cookie::resync_file_name(tid, seq);
    write(&dir, &name, &cookie, "that resync is guessed").then_some(seq)
}

/// Tasks whose window opened while they ran in the kernel, and the cookie whose user-mode
/// part each wants at its next return to user mode ([`want_user`]).
static USER_WANTED: Mutex<Option<HashMap<u32, u32>>> = Mutex::new(None);
/// How many there are: an exception return looks no further where none is.
static USER_WANTS: AtomicUsize = AtomicUsize::new(0);
/// Tasks waiting at most (a guest's kernel threads never return to user mode): past it a
/// window's user-mode calls are not taken (its kernel's still are).
const MAX_USER_WANTS: usize = 1 << 16;

/// Task `tid`'s window opened with cookie `seq` while it ran in the kernel: its user-mode
/// calls beneath are taken at its next return to user mode ([`take_user_want`]), the same
/// registers as at its entry to the kernel (but after a signal delivered then, whose
/// handler the return goes to).
pub fn want_user(tid: u32, seq: u32) {
    let mut wanted = USER_WANTED.lock().unwrap_or_else(|e| e.into_inner());
    let wanted = wanted.get_or_insert_with(HashMap::new);
    if wanted.len() < MAX_USER_WANTS || wanted.contains_key(&tid) {
        wanted.insert(tid, seq);
    }
    USER_WANTS.store(wanted.len(), Ordering::Release);
}

/// Task `tid` returns to user mode: the cookie whose user-mode part it owes, if any.
#[inline]
pub fn take_user_want(tid: u32) -> Option<u32> {
    if USER_WANTS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut wanted = USER_WANTED.lock().unwrap_or_else(|e| e.into_inner());
    let wanted = wanted.as_mut()?;
    let seq = wanted.remove(&tid);
    USER_WANTS.store(wanted.len(), Ordering::Release);
    seq
}

/// Saves cookie `seq`'s user-mode part for task `tid` (`cookie::resync_user_file_name`): a
/// window it entered in the kernel, now returning to user mode at `pc` with its user stack
/// at `sp` and its other user registers live. False where refused (the size cap, the file).
pub fn save_user(regs: &mut ByteBuf, tid: u32, seq: u32, pc: u64, sp: u64, time: u64) -> bool {
    let Some(cfg) = config() else {
        return false;
    };
    let dir = (IMAGE.lock().unwrap_or_else(|e| e.into_inner()).0.clone())
        .unwrap_or_else(|| cfg.out.clone());
    let cookie = context(regs, tid, 0, pc, sp, time, false);
    let name = cookie::resync_user_file_name(tid, seq);
    write(
        &dir,
        &name,
        &cookie,
        "that window's user-mode calls are not recovered",
    )
}

/// Task `tid`'s context on `vcpu` at `pc` with its stack at `sp`: the frame pointer and link
/// register read, the stack top copied, and (`beyond`) the other stacks its frame records go
/// on to (an interrupt's, `stacks::beyond`). A user-mode context at an exception return
/// takes `sp` from the caller (the kernel runs on another register), the other registers as
/// they are (the user's, restored by the kernel's exit path).
pub fn context(
    regs: &mut ByteBuf,
    tid: u32,
    vcpu: u32,
    pc: u64,
    sp: u64,
    time: u64,
    beyond: bool,
) -> StackCookie {
    let (arch, isa) = (arch_or_default(), isa_or_default());
    let fp = regs.read_gpr(isa.frame_pointer()).unwrap_or(0);
    let lr = link_register(arch)
        .and_then(|n| regs.read_named(n))
        .unwrap_or(0);
    let stack = regs.copy_from(sp, STACK_BYTES);
    let extra = match beyond {
        true => stacks::beyond(regs, arch, isa, sp, &stack, fp),
        false => Vec::new(),
    };
    StackCookie {
        machine: arch.elf_machine(),
        tid,
        vcpu,
        time,
        pc,
        sp,
        fp,
        lr,
        stack_base: sp,
        stack,
        extra,
    }
}

/// The stack pointer's register of `arch`.
pub fn stack_register(arch: Arch) -> &'static str {
    match arch {
        Arch::Aarch64 | Arch::Riscv64 => "sp",
        Arch::X86_64 => "rsp",
    }
}

/// The link register of `arch` (none on x86-64, whose calls push the return address).
pub fn link_register(arch: Arch) -> Option<&'static str> {
    match arch {
        Arch::Aarch64 => Some("x30"),
        Arch::Riscv64 => Some("ra"),
        Arch::X86_64 => None,
    }
}

/// Writes `cookie` as `name` in `dir`, counted in the size cap with the records (past it
/// the caller goes without). False where refused; a failed write is said with `lost`, what
/// the trace goes without.
pub fn write(dir: &std::path::Path, name: &str, cookie: &StackCookie, lost: &str) -> bool {
    let Some(out) = OUTPUT.get() else {
        return false;
    };
    let path = dir.join(name);
    let bytes = cookie.encode();
    if !out.reserve_side(bytes.len() as u64) {
        return false;
    }
    // A forked child's folder may not be there yet (its parent makes it at the fork's return).
    let written = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, bytes));
    match written {
        Ok(()) => true,
        Err(e) => {
            out.note_error(format!("cannot write {}: {e}; {lost}", path.display()));
            false
        }
    }
}
