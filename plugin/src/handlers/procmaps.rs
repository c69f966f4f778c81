//! System mode, Linux guest: which file each guest process maps where, for the CLI to name
//! its user-space functions (`plugin.procs`). Three kernel functions are watched, each at its
//! first instruction only (decided at translation), where their arguments are in registers:
//! `mmap_region(file, addr, len, vm_flags, pgoff, …)` (every file mapping: the program and
//! its loader at exec, libraries, `dlopen`), `begin_new_exec(bprm)` (the old mappings are
//! gone), `wake_up_new_task(p)` (a new process or thread: its PID, thread group, and the
//! process it was forked from, whose mappings a forked child starts with) and `do_exit`
//! (a thread ends; the process with its leader). Guest structures are read at those points
//! only, with the offsets the kernel's DWARF gave the CLI. The same events keep the
//! plugin's own copy of each process's mappings (`state::spaces`).

use std::ffi::{c_uint, c_void};
use std::sync::Mutex;

use crate::state::config::{Offsets, Watch};
use crate::state::guest::{ByteBuf, MIN_PAGE};
use crate::state::spaces;

/// What a watched instruction is, for the translator: `None` for every other one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    Mmap = 1,
    Exec = 2,
    NewTask = 3,
    Exit = 4,
}

fn watch() -> Option<(Watch, Offsets)> {
    crate::state::config()?.proc_watch.as_deref().copied()
}

/// Called by the translator for each instruction: registers the callback on a watched one.
///
/// # Safety
/// `insn` is a live instruction handle of the block being translated.
pub unsafe fn instrument(insn: *mut crate::ffi::qemu_plugin_insn, pc: u64) {
    let Some((w, _)) = watch() else {
        return;
    };
    let point = if pc == w.mmap_region {
        Point::Mmap
    } else if pc == w.begin_new_exec {
        Point::Exec
    } else if pc == w.wake_up_new_task {
        Point::NewTask
    } else if pc == w.do_exit {
        Point::Exit
    } else {
        return;
    };
    unsafe {
        crate::ffi::qemu_plugin_register_vcpu_insn_exec_cb(
            insn,
            on_watched,
            crate::ffi::CB_R_REGS,
            point as usize as *mut c_void,
        )
    };
}

/// The lines of `plugin.procs`, in the order the guest did things.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// `plugin.procs`: one event per line, tab-separated `key=value` fields (numbers in
/// decimal, addresses in hex), the path last:
/// `task time=T tid=N tgid=N parent=N`, `exec time=T tid=N tgid=N`,
/// `mmap time=T tid=N tgid=N start=HEX len=HEX offset=HEX path=P`, `exit time=T tid=N tgid=N`.
pub fn lines() -> String {
    LINES.lock().unwrap_or_else(|e| e.into_inner()).concat()
}

/// Whether anything was watched (the file is written only then).
pub fn enabled() -> bool {
    watch().is_some()
}

/// Where `task_struct.tgid` is, when processes are watched.
pub fn tgid_offset() -> Option<u64> {
    watch().map(|(_, off)| off.tgid)
}

/// The address space of thread group `tgid`, which a vCPU switches to; 0 when processes are
/// not watched or the group is not known.
pub fn space_of(tgid: u32) -> qemu_uftrace_engine::spaces::SpaceId {
    if enabled() {
        spaces::with(|s| s.of(tgid))
    } else {
        0
    }
}

/// The argument registers of the kernel's calling convention, first to fifth.
fn arg_register(n: usize) -> Option<&'static str> {
    use qemu_uftrace_engine::arch::Arch;
    const AARCH64: [&str; 5] = ["x0", "x1", "x2", "x3", "x4"];
    const RISCV64: [&str; 5] = ["a0", "a1", "a2", "a3", "a4"];
    const X86_64: [&str; 5] = ["rdi", "rsi", "rdx", "rcx", "r8"];
    let regs = match crate::state::arch_or_default() {
        Arch::Aarch64 => AARCH64,
        Arch::Riscv64 => RISCV64,
        Arch::X86_64 => X86_64,
    };
    regs.get(n).copied()
}

/// `VM_EXEC`: only code mappings name functions.
const VM_EXEC: u64 = 0x4;
/// Path components read at most, and bytes of each.
const MAX_DEPTH: usize = 32;
const MAX_NAME: usize = 255;

/// # Safety
/// Registered with R_REGS by [`instrument`]; `data` is the [`Point`].
unsafe extern "C" fn on_watched(vcpu_index: c_uint, data: *mut c_void) {
    let point = data as usize;
    crate::state::guard("the process-map watch", || {
        let Some((_, off)) = watch() else {
            return;
        };
        crate::vcpu::with(vcpu_index, |v| {
            let task = v.task_ptr;
            let time = v.now();
            let Some((tid, tgid)) = ids(&mut v.regs, task, &off) else {
                return;
            };
            let arg = |regs: &mut ByteBuf, n: usize| regs.read_named(arg_register(n)?);
            let regs = &mut v.regs;
            let line = match point {
                p if p == Point::Mmap as usize => {
                    let (Some(file), Some(start), Some(len), Some(flags), Some(pgoff)) = (
                        arg(regs, 0),
                        arg(regs, 1),
                        arg(regs, 2),
                        arg(regs, 3),
                        arg(regs, 4),
                    ) else {
                        return;
                    };
                    if file == 0 || flags & VM_EXEC == 0 {
                        return;
                    }
                    let path = file_path(regs, file, &off).unwrap_or_default();
                    let offset = pgoff.wrapping_mul(MIN_PAGE);
                    let space = spaces::with(|s| s.mmap(tgid, &path, start, len, offset));
                    v.run_space(space);
                    format!(
                        "mmap\ttime={time}\ttid={tid}\ttgid={tgid}\tstart={start:x}\tlen={len:x}\
                         \toffset={offset:x}\tpath={path}\n"
                    )
                }
                p if p == Point::Exec as usize => {
                    let space = spaces::with(|s| s.exec(tgid));
                    v.run_space(space);
                    format!("exec\ttime={time}\ttid={tid}\ttgid={tgid}\n")
                }
                p if p == Point::Exit as usize => {
                    // The leader's exit ends the process (a leader that leaves early is
                    // rare: its threads then run on in a space no longer listed).
                    if tid == tgid {
                        spaces::with(|s| s.exit(tgid));
                    }
                    format!("exit\ttime={time}\ttid={tid}\ttgid={tgid}\n")
                }
                _ => {
                    let Some(child) = arg(regs, 0) else {
                        return;
                    };
                    let Some((pid, child_tgid)) = ids(regs, child, &off) else {
                        return;
                    };
                    if pid == child_tgid {
                        spaces::with(|s| s.fork(child_tgid, tgid));
                    }
                    format!("task\ttime={time}\ttid={pid}\ttgid={child_tgid}\tparent={tgid}\n")
                }
            };
            LINES.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        });
    });
}

/// A task's PID and thread group, from its structure.
fn ids(regs: &mut ByteBuf, task: u64, off: &Offsets) -> Option<(u32, u32)> {
    let pid_offset = crate::state::config()?.task_pid?;
    if task == 0 {
        return None;
    }
    let pid = regs.read_le(task.wrapping_add(pid_offset), 4)? as u32;
    let tgid = regs.read_le(task.wrapping_add(off.tgid), 4)? as u32;
    Some((pid, tgid))
}

/// The path of an open file, from its dentry up to the root of its file system (an
/// initramfs has one; a file under another mount point gives its path from that mount).
/// Characters that would break the line (tab, newline) become `?`.
fn file_path(regs: &mut ByteBuf, file: u64, off: &Offsets) -> Option<String> {
    let mut dentry = regs.read_le(file.wrapping_add(off.file_dentry), 8)?;
    let mut parts = Vec::new();
    for _ in 0..MAX_DEPTH {
        let parent = regs.read_le(dentry.wrapping_add(off.d_parent), 8)?;
        if parent == dentry || parent == 0 {
            break;
        }
        let name = regs.read_le(dentry.wrapping_add(off.d_name), 8)?;
        parts.push(c_string(regs, name)?);
        dentry = parent;
    }
    parts.reverse();
    let path: String = parts.iter().map(|p| format!("/{p}")).collect();
    Some(path.replace(['\t', '\n'], "?"))
}

/// A NUL-terminated string of guest memory, read a page at a time (the next page may not be
/// mapped).
fn c_string(regs: &mut ByteBuf, at: u64) -> Option<String> {
    let mut out = Vec::new();
    let mut addr = at;
    while out.len() < MAX_NAME {
        let room = (MIN_PAGE - addr % MIN_PAGE) as usize;
        let len = room.min(MAX_NAME - out.len()).min(64);
        let bytes = regs.read_memory(addr, len)?;
        if let Some(end) = bytes.iter().position(|&b| b == 0) {
            out.extend_from_slice(&bytes[..end]);
            return Some(String::from_utf8_lossy(&out).into_owned());
        }
        out.extend_from_slice(bytes);
        addr += len as u64;
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}
