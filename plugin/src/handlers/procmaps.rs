//! System mode, Linux guest: which file each guest process maps where, for the CLI to name
//! its user-space functions (`plugin.procs`). Three kernel functions are watched, each at its
//! first instruction only (decided at translation), where their arguments are in registers:
//! `mmap_region(file, addr, len, vm_flags, pgoff, …)` (every file mapping: the program and
//! its loader at exec, libraries, `dlopen`), `begin_new_exec(bprm)` (the old mappings are
//! gone), `wake_up_new_task(p)` (a new process or thread: its PID, thread group, and the
//! process it was forked from, whose mappings a forked child starts with) and `do_exit`
//! (a thread ends; the process with its leader). Guest structures are read at those points
//! only, with the offsets the kernel's DWARF gave the CLI. The same events keep the
//! plugin's own copy of each process's mappings (`state::spaces`), and so does the
//! `munmap` syscall's wrapper where the CLI found it (`munmap_watch=`: a process mapping
//! and unmapping in a loop would otherwise grow its copy to its cap).

use std::ffi::{c_uint, c_void};
use std::sync::Mutex;

use crate::state::config::{Offsets, Watch};
use crate::state::guest::ByteBuf;
use crate::state::spaces;

/// What a watched instruction is, for the translator: `None` for every other one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    Mmap = 1,
    Exec = 2,
    NewTask = 3,
    Exit = 4,
    Munmap = 5,
}

fn watch() -> Option<(Watch, Offsets)> {
    crate::state::config()?.proc_watch.as_deref().copied()
}

fn munmap_watch() -> Option<[u64; 3]> {
    crate::state::config()?.munmap_watch
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
    } else if munmap_watch().is_some_and(|m| m[0] == pc) {
        Point::Munmap
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

/// Runs `f`, a change to process `tgid`'s space (a mapping, an unmapping, an exec, a fork
/// into `tgid`, an exit, a snapshot), and tells `file_aims` which spaces it changed and
/// which it ended, where guest files' `-F`/`-N` functions are placed per space.
pub fn change_space<R>(
    tgid: u32,
    f: impl FnOnce(&mut qemu_uftrace_engine::spaces::Spaces) -> R,
) -> R {
    spaces::with(|s| {
        let before = s.of(tgid);
        let out = f(s);
        if crate::state::file_aims::places_any() {
            let after = s.of(tgid);
            if before != after && before != 0 {
                crate::state::file_aims::space_changed(s, before, false);
            }
            if after != 0 {
                crate::state::file_aims::space_changed(s, after, true);
            }
        }
        out
    })
}

/// The lines of `plugin.procs`, in the order the guest did things, and their bytes.
static LINES: Mutex<(Vec<String>, usize)> = Mutex::new((Vec::new(), 0));

/// Bytes of `plugin.procs` kept at most (a few hundred a process: some 100,000 processes):
/// a guest starting process after process must not grow QEMU without bound. Later events
/// are counted in [`DROPPED`].
pub const MAX_BYTES: usize = 32 << 20;

/// Events past [`MAX_BYTES`], not written.
static DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The events dropped past [`MAX_BYTES`].
pub fn dropped() -> u64 {
    DROPPED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Keeps `line` unless the kept ones reached [`MAX_BYTES`].
pub(super) fn keep(line: String) {
    let mut lines = LINES.lock().unwrap_or_else(|e| e.into_inner());
    if lines.1.saturating_add(line.len()) > MAX_BYTES {
        DROPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    lines.1 += line.len();
    lines.0.push(line);
}

/// `plugin.procs`: one event per line, tab-separated `key=value` fields (numbers in
/// decimal, addresses in hex), the path last:
/// `task time=T tid=N tgid=N parent=N`, `exec time=T tid=N tgid=N`, `execret time=T tid=N
/// tgid=N` ([`exec_returned`]),
/// `mmap time=T tid=N tgid=N start=HEX len=HEX offset=HEX fs=HEX path=P` (`fs`: the root
/// dentry of the file's file system, 0 where the path was cut or unreadable: an initramfs's
/// `/usr/bin/mount` and the root disk's are two files), `exit time=T tid=N tgid=N`; and
/// from a switch on's walk (`proc_walk`), `seen time=T tid=N tgid=N program=0|1` (a new
/// space from then, its `mmap` lines next).
pub fn lines() -> String {
    LINES.lock().unwrap_or_else(|e| e.into_inner()).0.concat()
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

/// The first argument of a kernel function, at its first instruction.
pub(super) fn first_argument(regs: &mut ByteBuf) -> Option<u64> {
    regs.read_named(arg_register(0)?)
}

/// The kernel's `PAGE_SIZE`, the unit of `mmap_region`'s `pgoff`: 4 KiB on every x86-64 and
/// riscv64 Linux and on most arm64 kernels, 16 or 64 KiB on an arm64 kernel built so (the
/// CLI reads it from the Image header: `kernel_page=`). Not QEMU's smallest page
/// (`state::guest::MIN_PAGE`, 1 KiB): x86-64's binutils put code at file offset 0x1000
/// (`-z separate-code`), placed at 0x400 with it.
pub(super) fn kernel_page() -> u64 {
    crate::state::config().map_or(4096, |c| c.kernel_page)
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
            // While off (a guest file's `--trace-on-at` keeps the watch) `task_ptr` is the
            // task of the switch off: the task switches seen since tell `off_task`.
            let on = crate::state::switch::active();
            let task = if on { v.task_ptr } else { v.off_task };
            let time = v.now();
            let Some((tid, tgid)) = ids(&mut v.regs, task, &off) else {
                return;
            };
            let arg = |regs: &mut ByteBuf, n: usize| regs.read_named(arg_register(n)?);
            let regs = &mut v.regs;
            if point == Point::Munmap as usize {
                // The syscall's own arguments, in the `struct pt_regs` its wrapper takes.
                // Only the plugin's copy of the space changes: the CLI names from mappings
                // as they were when code ran.
                let Some([_, start_at, len_at]) = munmap_watch() else {
                    return;
                };
                let Some(pt) = arg(regs, 0) else {
                    return;
                };
                let start = regs.read_le(pt.wrapping_add(start_at), 8);
                let len = regs.read_le(pt.wrapping_add(len_at), 8);
                if let (Some(start), Some(len)) = (start, len) {
                    change_space(tgid, |s| s.munmap(tgid, start, len));
                }
                return;
            }
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
                    let (path, fs) = file_path(regs, file, &off);
                    let offset = pgoff.wrapping_mul(kernel_page());
                    let space = change_space(tgid, |s| s.mmap(tgid, &path, start, len, offset));
                    v.run_space(space);
                    format!(
                        "mmap\ttime={time}\ttid={tid}\ttgid={tgid}\tstart={start:x}\tlen={len:x}\
                         \toffset={offset:x}\tfs={fs:x}\tpath={path}\n"
                    )
                }
                p if p == Point::Exec as usize => {
                    let space = change_space(tgid, |s| s.exec(tgid));
                    // The return to user mode goes to another program: the calls a window
                    // found open in this system call are not beneath it.
                    let _ = crate::state::resync_cookie::take_user_want(tid);
                    v.run_space(space);
                    // The old program's frames end at the system call's return (with
                    // split levels they are another context's, left as they were; while
                    // off there are none).
                    if on && !crate::state::config().is_some_and(|c| c.split_levels) {
                        v.engine.exec();
                    }
                    format!("exec\ttime={time}\ttid={tid}\ttgid={tgid}\n")
                }
                p if p == Point::Exit as usize => {
                    // The leader's exit ends the process (a leader that leaves early is
                    // rare: its threads then run on in a space no longer listed).
                    if tid == tgid {
                        change_space(tgid, |s| s.exit(tgid));
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
                        change_space(child_tgid, |s| s.fork(child_tgid, tgid));
                    }
                    format!("task\ttime={time}\ttid={pid}\ttgid={child_tgid}\tparent={tgid}\n")
                }
            };
            keep(line);
        });
    });
}

/// The running task's return from the system call it exec'd in (`EretOutcome::ClosedExec`),
/// with the old program's frames closed at `time`: `execret time=T tid=N tgid=N`. Its new
/// program's session starts after it, so that those frames' exits are named by the old
/// program's files.
pub fn exec_returned(v: &mut crate::vcpu::VcpuState, time: u64) {
    let Some((_, off)) = watch() else {
        return;
    };
    if let Some((tid, tgid)) = ids(&mut v.regs, v.task_ptr, &off) {
        keep(format!("execret\ttime={time}\ttid={tid}\ttgid={tgid}\n"));
    }
}

/// The PID and thread group of the task running on `v`, as last learnt.
pub(super) fn ids_of_running(v: &mut crate::vcpu::VcpuState) -> Option<(u32, u32)> {
    let (_, off) = watch()?;
    ids(&mut v.regs, v.task_ptr, &off)
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
/// Names are escaped so that every two names stay apart
/// (`format::text::escape_bytes`: a lossy conversion made two names one, and a tab or
/// newline would break the line). A path deeper than [`MAX_DEPTH`] keeps its last
/// components behind `/…<dentry>`, and one that cannot be read is
/// `[unreadable <dentry>]`: never one name that different files share. With it, the root
/// dentry the walk reached (which file system the path is inside), 0 when it reached none.
pub(super) fn file_path(regs: &mut ByteBuf, file: u64, off: &Offsets) -> (String, u64) {
    // Named by the file's dentry (one per file, whoever maps it) when that can be read.
    let unreadable = |id: u64| (format!("[unreadable {id:x}]"), 0);
    let Some(mut dentry) = regs.read_le(file.wrapping_add(off.file_dentry), 8) else {
        return unreadable(file);
    };
    let own = dentry;
    let mut parts = Vec::new();
    let mut whole = false;
    for _ in 0..MAX_DEPTH {
        let Some(parent) = regs.read_le(dentry.wrapping_add(off.d_parent), 8) else {
            return unreadable(own);
        };
        if parent == dentry || parent == 0 {
            whole = true;
            break;
        }
        let name = regs
            .read_le(dentry.wrapping_add(off.d_name), 8)
            .and_then(|name| regs.read_c_string(name, MAX_NAME));
        let Some(name) = name else {
            return unreadable(own);
        };
        parts.push(name);
        dentry = parent;
    }
    let fs = if whole { dentry } else { 0 };
    (render_path(&parts, (!whole).then_some(dentry)), fs)
}

/// The path of dentry names read from the file up (`parts`, innermost first); `cut_at`
/// the dentry where reading stopped short of the root, which then starts the path, so
/// that paths with the same last components stay apart.
fn render_path(parts: &[Vec<u8>], cut_at: Option<u64>) -> String {
    let mut path = match cut_at {
        Some(dentry) => format!("/{}{dentry:x}", qemu_uftrace_format::text::CUT_MARK),
        None => String::new(),
    };
    for p in parts.iter().rev() {
        path.push('/');
        path.push_str(&qemu_uftrace_format::text::escape_bytes(p));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_apart_and_say_when_cut() {
        let parts = |names: &[&[u8]]| names.iter().rev().map(|n| n.to_vec()).collect::<Vec<_>>();
        assert_eq!(
            render_path(&parts(&[b"lib", b"libc.so.6"]), None),
            "/lib/libc.so.6"
        );
        // Two names a lossy conversion made one; a tab or newline would end the field.
        let a = render_path(&parts(&[b"t\xff"]), None);
        let b = render_path(&parts(&[b"t\xfe"]), None);
        assert_ne!(a, b);
        assert_eq!(
            render_path(&parts(&[b"a\tb\nc\x1b"]), None),
            "/a\\x09b\\x0ac\\x1b"
        );
        // Past the depth read: marked, and told apart by where reading stopped.
        let deep = parts(&[b"x", b"prog"]);
        let one = render_path(&deep, Some(0xffff_0001));
        assert_eq!(one, "/\u{2026}ffff0001/x/prog");
        assert_ne!(one, render_path(&deep, Some(0xffff_0002)));
    }

    #[test]
    fn events_past_the_cap_are_counted_not_kept() {
        let line = "x".repeat(1 << 20);
        for _ in 0..MAX_BYTES / line.len() + 3 {
            keep(line.clone());
        }
        assert_eq!(lines().len(), MAX_BYTES);
        assert_eq!(dropped(), 3);
    }
}
