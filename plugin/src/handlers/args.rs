//! `-A`/`-R`: the callbacks that read a function's arguments at its first instruction and
//! its return value at its return instructions (`state::args` says where, at translation),
//! and write them as carrier records (`format::args`) beside its ENTRY and EXIT records.
//! Registers and guest memory are read only here: `qemu_plugin_read_memory_vaddr` fails
//! rather than fault the guest, and a string it cannot read to its end is marked.

use crate::ffi::{
    qemu_plugin_insn, qemu_plugin_register_vcpu_insn_exec_cond_cb,
    qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu, CB_R_REGS, COND_EQ, COND_NE,
    INLINE_STORE_U64,
};
use crate::state::args::{self, Kind, Mem};
use crate::state::guest::ByteBuf;
use crate::vcpu::scoreboard::{self, Scoreboard};
use crate::vcpu::VcpuState;
use qemu_uftrace_engine::gates::Watch;
use qemu_uftrace_engine::shadow::{Frame, ShadowStack};
use qemu_uftrace_engine::sites::{value_site, value_site_at};
use qemu_uftrace_format::args::{carriers, push_int, push_str, STR_MAX};
use std::ffi::{c_uint, c_void};
use std::sync::OnceLock;

/// Per vCPU, not 0 while a function with a return value may have left by a tail call
/// (`strdup`'s `jmp memcpy`): its value is the tail callee's, read at a return instruction
/// no spec names. Set by the jump (an inline store, decided at translation), and by a task
/// switch (the task switched to may have such a call open); every return instruction's
/// [`on_tail_return`] is conditional on it, and clears it once no such call is open.
static TAIL: OnceLock<Scoreboard> = OnceLock::new();

/// Per vCPU, 1 while its running context writes no frame (outside every `-F` subtree), 0
/// while it may: the engine's gates say each change ([`watch`]). Every value read is
/// conditional on 0, so that `-a`'s tens of thousands of typed functions cost nothing
/// where `-F` leaves their calls out (a callback that only found its frame unwritten made
/// `-a -F` 3.3x plain QEMU). 0 is the zeroed word's: a user-mode vCPU's first store may
/// race a scoreboard's growth by another thread's start, and a store lost so reads values
/// for nothing (the callbacks check the frame) rather than lose them.
static OUTSIDE: OnceLock<Scoreboard> = OnceLock::new();

/// At install, with `-A`/`-R`'s functions loaded: their reads get their word, and `-R`'s
/// tail calls theirs.
pub fn install() {
    let _ = OUTSIDE.set(scoreboard::one_word());
    if args::has_retval() {
        let _ = TAIL.set(scoreboard::one_word());
    }
}

/// What the engine of vCPU `vcpu_index` is told to say of its running context (`None`:
/// no value is read, nothing to tell).
pub fn watch(vcpu_index: c_uint) -> Option<Watch> {
    fn tell(vcpu_index: u32, inside: bool) {
        if let Some(word) = OUTSIDE.get() {
            word.for_vcpu(vcpu_index, false).set(u64::from(!inside));
        }
    }
    OUTSIDE.get()?;
    Some(Watch::new(tell, vcpu_index))
}

/// Whether the function entered at `func` in the space this vCPU runs has arguments to
/// read (at a task switch: `Engine::hold_fresh_entries`).
pub fn has_values(func: u64) -> bool {
    let file = || {
        (args::file_space(func))
            .and_then(|space| args::file_entry_now(space, func))
            .and_then(args::func)
            .is_some_and(|f| !f.args.is_empty())
    };
    args::spec_at(func).is_some_and(|f| !f.args.is_empty()) || file()
}

/// Whether return instructions listen for tail calls (`-R` given): only then are jumps
/// looked at.
pub fn tails_listened() -> bool {
    TAIL.get().is_some()
}

/// A jump at `pc` (`target`: `None` through a register) that leaves a function with a
/// return value: it sets the vCPU's [`TAIL`] word.
///
/// # Safety
/// `insn` is a live instruction handle of the block being translated.
pub unsafe fn instrument_jump(insn: *mut qemu_plugin_insn, pc: u64, target: Option<u64>) {
    let Some(word) = TAIL.get() else {
        return;
    };
    if args::leaves_returning(pc, target) {
        // SAFETY: an inline store into our scoreboard, for an instruction of the block.
        unsafe {
            qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
                insn,
                INLINE_STORE_U64,
                word.entry(),
                1,
            )
        };
    }
}

/// A task switch on `vcpu_index` (system mode): the task switched to may have a tail call
/// from a function with a return value open.
pub fn task_switched(vcpu_index: c_uint) {
    if let Some(word) = TAIL.get() {
        word.for_vcpu(vcpu_index, false).set(1);
    }
}

/// Instruments return instruction `insn` at `pc`: the value of a function with a return
/// value whose code holds it, and (conditional on [`TAIL`]) of those it closes that left
/// by a tail call.
///
/// # Safety
/// `insn` is a live instruction handle of the block being translated.
pub unsafe fn instrument_return(insn: *mut qemu_plugin_insn, pc: u64) {
    // SAFETY: as the caller's.
    unsafe { instrument(insn, pc, true) }
    if let Some(word) = TAIL.get() {
        // Whether [`on_return`] reads the top frame's value here, decided as it is.
        let top_read = args::returning_entry(pc).is_some();
        // SAFETY: our callback, for an instruction of the block being translated.
        unsafe {
            qemu_plugin_register_vcpu_insn_exec_cond_cb(
                insn,
                on_tail_return,
                CB_R_REGS,
                COND_NE,
                word.entry(),
                0,
                usize::from(top_read) as *mut c_void,
            )
        };
    }
}

/// Instruments instruction `insn` at `pc`: a spec'd function's entry, or (`ret`) a return
/// instruction inside one with a return value.
///
/// # Safety
/// `insn` is a live instruction handle of the block being translated.
pub unsafe fn instrument(insn: *mut qemu_plugin_insn, pc: u64, ret: bool) {
    let Some(word) = OUTSIDE.get() else {
        return;
    };
    let read: Option<(crate::ffi::VcpuUdataCb, *mut c_void)> = if !ret {
        (args::entry_at(pc)).map(|_| (on_entry as crate::ffi::VcpuUdataCb, pc as *mut c_void))
    } else {
        (args::returning_at(pc))
            .map(|(entry, _)| (on_return as crate::ffi::VcpuUdataCb, entry as *mut c_void))
    };
    // A guest file's function, where the space translating it maps the file (user space).
    let read = read.or_else(|| {
        let space = args::file_space(pc)?;
        if !ret {
            let func = args::file_entry_at(space, pc)?;
            let code = crate::state::spaces::code_extent(space, pc);
            let site = value_site(pc, pc, func as u64, code, space);
            Some((on_file_entry as crate::ffi::VcpuUdataCb, site))
        } else {
            let (entry, func) = args::file_returning_at(space, pc)?;
            let site = value_site(pc, entry, func as u64, (0, 0), space);
            Some((on_file_return as crate::ffi::VcpuUdataCb, site))
        }
    });
    if let Some((cb, data)) = read {
        // SAFETY: our callback, for an instruction of the block being translated,
        // conditional on our scoreboard.
        unsafe {
            qemu_plugin_register_vcpu_insn_exec_cond_cb(
                insn,
                cb,
                CB_R_REGS,
                COND_EQ,
                word.entry(),
                0,
                data,
            )
        };
    }
}

/// Reads one value into `payload`; `None` where the register cannot be read (then nothing
/// is written: no value shown that was not read).
/// `at`: the value is the 8 bytes at the register's value plus `at` (a syscall wrapper's
/// `struct pt_regs`, the stack), read without faulting; unreadable, nothing is written.
fn read_value(
    regs: &mut ByteBuf,
    reg: &str,
    at: Option<u32>,
    kind: Kind,
    payload: &mut Vec<u8>,
) -> Option<()> {
    let mut value = match kind {
        Kind::Float(_) => regs.read_named_low(reg)?,
        _ => regs.read_named(reg)?,
    };
    if let Some(off) = at {
        value = regs.read_le(value.wrapping_add(u64::from(off)), 8)?;
    }
    match kind {
        Kind::Int(size) | Kind::Float(size) => push_int(payload, value, size),
        Kind::Str => {
            let read = if value == 0 {
                Vec::new()
            } else {
                regs.copy_from(value, STR_MAX + 1)
            };
            push_str(payload, value, &read);
        }
    }
    Some(())
}

/// # Safety
/// Registered by [`instrument`], its data the function's entry.
unsafe extern "C" fn on_entry(vcpu_index: c_uint, data: *mut c_void) {
    let pc = data as usize as u64;
    if super::stop_at::stopped() {
        return;
    }
    crate::state::guard("argument read", || {
        let Some(func) = args::entry_at(pc) else {
            return;
        };
        crate::vcpu::with(vcpu_index, |v| read_arguments(v, pc, func));
    });
}

/// A guest file's function's first instruction, in whichever process runs it: a call
/// through another file's PLT made one of it (`stubs::through_stub`), and its arguments, as
/// [`on_entry`]'s, at the entry the running process has it.
///
/// # Safety
/// Registered by [`instrument`], its data from `sites::value_site`.
unsafe extern "C" fn on_file_entry(vcpu_index: c_uint, data: *mut c_void) {
    // SAFETY: as the caller's.
    let site = unsafe { value_site_at(data) };
    if super::stop_at::stopped() {
        return;
    }
    crate::state::guard("argument read", || {
        let Some(func) = args::func(site.func as usize) else {
            return;
        };
        crate::vcpu::with(vcpu_index, |v| {
            let (pc, code) = super::stubs::placed(v, site);
            super::stubs::through_stub(v, pc, code);
            if !func.args.is_empty() {
                read_arguments(v, pc, func)
            }
        });
    });
}

/// Reads the arguments of `func`, entered at `pc`, into carriers after its ENTRY.
fn read_arguments(v: &mut VcpuState, pc: u64, func: &args::Func) {
    let isa = crate::state::isa_or_default();
    let (regs, _) = args::registers(isa);
    let (floats, _) = args::float_registers();
    let sp = args::stack_pointer(isa);
    // Only right after this function's ENTRY (not where it was not written: a filter, its
    // depth; not a loop back to its first instruction), or after it and an interrupt taken
    // before this instruction (`emit_carriers_after_entry`). Its frame on top and written
    // (not one a filter or the depth limit left out: `-a` has every typed function here,
    // most of them outside `-F`'s subtrees).
    let open = v.engine.stack().top().is_some_and(|f| f.func == pc) && v.engine.top_written();
    // None: the buffer was handed over since (a task switch, a full buffer), its ENTRY
    // the last record.
    let entered = v.engine.last_is_entry(pc).unwrap_or(open);
    if !entered && !open {
        return;
    }
    let mut payload = Vec::with_capacity(32);
    for &(n, kind, at) in &func.args {
        // A syscall wrapper's arguments are all read through its first, those past the
        // registers from the stack.
        let (reg, off) = match at {
            None if matches!(kind, Kind::Float(_)) => (floats.get(n as usize).copied(), None),
            None => (regs.get(n as usize).copied(), None),
            Some(Mem::FirstArg(off)) => (regs.first().copied(), Some(off)),
            Some(Mem::Stack(off)) => (Some(sp), Some(off)),
        };
        let Some(reg) = reg else {
            return;
        };
        if read_value(&mut v.regs, reg, off, kind, &mut payload).is_none() {
            return;
        }
    }
    if entered {
        v.engine.emit_carriers(carriers(false, pc, &payload));
    } else {
        let ids: Vec<u64> = carriers(false, pc, &payload).collect();
        v.engine.emit_carriers_after_entry(pc, &ids);
    }
}

/// # Safety
/// Registered by [`instrument`], its data the function's entry.
unsafe extern "C" fn on_return(vcpu_index: c_uint, data: *mut c_void) {
    let entry = data as usize as u64;
    if super::stop_at::stopped() {
        return;
    }
    crate::state::guard("return value read", || {
        let Some((_, func)) = args::returning_at(entry) else {
            return;
        };
        crate::vcpu::with(vcpu_index, |v| {
            // The frame this return closes: this function's, or one with its own return
            // value that ran into it without a call of its own (a program's PLT stub named
            // for the library function it jumps to, a tail call).
            read_return_value(v, |top| {
                if top == entry {
                    func.ret
                } else {
                    args::spec_at(top).and_then(|f| f.ret)
                }
            })
        });
    });
}

/// A return instruction of a guest file's function with a return value, in whichever
/// process runs it: its value, as [`on_return`]'s, when the frame it closes is that
/// function's at the entry the running process has it (not a frame that jumped in).
///
/// # Safety
/// Registered by [`instrument`], its data from `sites::value_site`.
unsafe extern "C" fn on_file_return(vcpu_index: c_uint, data: *mut c_void) {
    // SAFETY: as the caller's.
    let site = unsafe { value_site_at(data) };
    if super::stop_at::stopped() {
        return;
    }
    crate::state::guard("return value read", || {
        let Some(func) = args::func(site.func as usize) else {
            return;
        };
        crate::vcpu::with(vcpu_index, |v| {
            let entry = (site.entry).wrapping_add(v.moved(site.space, site.pc));
            read_return_value(v, |top| func.ret.filter(|_| top == entry))
        });
    });
}

/// Reads the return value of the top frame, of the kind `kind_of` its function gives, into
/// carriers before its EXIT. Only for a frame whose records are written (not one a filter
/// or the depth limit left out: its value would go with no record).
fn read_return_value(v: &mut VcpuState, kind_of: impl Fn(u64) -> Option<Kind>) {
    let Some(top) = v.engine.stack().top().map(|f| f.func) else {
        return;
    };
    if !v.engine.top_written() {
        return;
    }
    let Some(kind) = kind_of(top) else {
        return;
    };
    let reg = args::return_register(crate::state::isa_or_default(), kind);
    let mut payload = Vec::with_capacity(8);
    if read_value(&mut v.regs, reg, None, kind, &mut payload).is_none() {
        return;
    }
    v.engine.emit_carriers(carriers(true, top, &payload));
}

/// The frames a return closes, innermost first: the top one and those it was entered from
/// by jumps (tail calls), down to the first one entered by a call; none below an exception
/// entry, which its own return closes.
fn closed_by_return(stack: &ShadowStack) -> &[Frame] {
    let frames = stack.frames();
    if frames.is_empty() {
        return &[];
    }
    let base = stack.returning().unwrap_or(0);
    if frames[base].is_exception() {
        return &[];
    }
    &frames[base..]
}

/// Whether `func` has a return value to read.
fn has_retval(func: u64) -> bool {
    args::retval_of(func).is_some()
}

/// # Safety
/// Registered by [`instrument_return`] conditional on the vCPU's [`TAIL`] word, its data
/// whether [`on_return`] reads the top frame's value at this instruction.
unsafe extern "C" fn on_tail_return(vcpu_index: c_uint, data: *mut c_void) {
    let Some(word) = TAIL.get() else {
        return;
    };
    if super::stop_at::stopped() {
        return;
    }
    crate::state::guard("return value read", || {
        // The top frame's value is [`on_return`]'s where a spec names this instruction's
        // function; else that frame left its code by a jump that opened none (glibc's
        // strdup into a PLT entry of its own), and this return gives its value.
        let top_too = data.is_null();
        let isa = crate::state::isa_or_default();
        crate::vcpu::with(vcpu_index, |v| {
            let frames = v.engine.stack().frames();
            let closed = closed_by_return(v.engine.stack());
            // Those this return closes that left by a tail call, innermost first as their
            // EXIT records come.
            let left = &closed[..closed.len().saturating_sub(usize::from(!top_too))];
            // Each at its stack depth: only those whose records are written.
            let base = frames.len() - closed.len();
            let wanted: Vec<(u64, Kind)> = (left.iter().enumerate().rev())
                .filter(|&(i, _)| v.engine.written_at(base + i))
                .filter_map(|(_, f)| Some((f.func, args::retval_of(f.func)?)))
                .collect();
            // Another such call open deeper (a recursion's, one a signal interrupted): keep
            // listening; else every return runs at full speed again.
            let below = &frames[..frames.len() - closed.len()];
            let more = (below.windows(2)).any(|w| w[1].is_jumped() && has_retval(w[0].func));
            if !more {
                word.for_vcpu(vcpu_index, false).set(0);
            }
            for (func, kind) in wanted {
                let reg = args::return_register(isa, kind);
                let mut payload = Vec::with_capacity(8);
                if read_value(&mut v.regs, reg, None, kind, &mut payload).is_none() {
                    return;
                }
                v.engine.emit_carriers(carriers(true, func, &payload));
            }
        });
    });
}
