//! Translation-time instrumentation: classify every instruction of a new block from its bytes,
//! attach a callback to calls, exception returns and writes of the OS's task register, a flag
//! store to returns, and a conditional callback to blocks where returns land (`landing`).

use crate::ffi::{
    qemu_plugin_insn, qemu_plugin_insn_data, qemu_plugin_insn_haddr, qemu_plugin_insn_vaddr,
    qemu_plugin_register_vcpu_insn_exec_cb, qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu,
    qemu_plugin_register_vcpu_mem_cb, qemu_plugin_register_vcpu_tb_exec_cond_cb,
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu, qemu_plugin_tb, qemu_plugin_tb_get_insn,
    qemu_plugin_tb_n_insns, CbFlags, VcpuUdataCb, CB_NO_REGS, CB_R_REGS, COND_EQ, COND_GT, COND_NE,
    INLINE_ADD_U64, INLINE_STORE_U64, MEM_R,
};
use crate::handlers::callbacks::{
    on_direct_call, on_direct_call_gated, on_exception_return, on_exception_return_from_memory,
    on_far_return, on_fed_call, on_fed_load, on_indirect_call, on_jump_entry, on_landing,
    on_landing_gated, on_landing_timed, on_memory_call, on_offset_call, on_packed_call,
    on_packed_call_gated, on_packed_call_timed, on_task_pointer, on_thunk_branch,
    on_unreported_system_call, on_user_call, on_user_fed_call, on_user_indirect_call,
    on_user_landing, on_user_memory_call, on_user_offset_call,
};
use crate::state::guest::{ByteBuf, MIN_PAGE};
use qemu_uftrace_engine::arch::{
    classify_after, feeding_load, jump_target_after, InsnKind, Isa, Mode, Target, Thunk,
};
use qemu_uftrace_engine::sites::{call_site, memory_call_word, pack, user_site};
use qemu_uftrace_engine::spaces::SpaceId;
use std::cell::RefCell;
use std::ffi::c_void;

/// The width of the code a block being translated runs (the vCPU is at the block's start).
/// Fixed-width architectures read no register.
fn code_mode(isa: &dyn Isa) -> Mode {
    with_buf(|b| isa.current_mode(&mut |name| b.read_named(name)))
}

/// The translating thread's buffer for register and guest-memory reads.
fn with_buf<R>(f: impl FnOnce(&mut ByteBuf) -> R) -> R {
    thread_local! {
        static BUF: RefCell<Option<ByteBuf>> = const { RefCell::new(None) };
    }
    BUF.with(|b| f(b.borrow_mut().get_or_insert_with(ByteBuf::new)))
}

/// The base of the code segment a block runs in, which a 16-bit call's target offset is
/// relative to (real mode: the selector times 16); 0 in 32- and 64-bit code (flat). Read
/// once at translation, where the vCPU is at the block's start.
fn code_base(isa: &dyn Isa, mode: Mode) -> Option<u64> {
    if mode != Mode::Bits16 {
        return Some(0);
    }
    with_buf(|b| isa.segment_base("cs", &mut |name| b.read_named(name)))
}

/// Whether x86-64 SYSCALL is enabled (EFER.SCE), as the translating vCPU has it (an OS
/// sets it once, on every CPU, before any process runs). Unreadable: taken as enabled.
fn syscall_enabled() -> bool {
    const EFER_SCE: u64 = 1;
    with_buf(|b| b.read_named("efer")).is_none_or(|efer| efer & EFER_SCE != 0)
}

/// # Safety
/// `tb` is a live translation block handle (QEMU's translation callback).
pub unsafe fn on_tb_translate(tb: *mut qemu_plugin_tb) {
    let isa = crate::state::isa_or_default();
    let n = unsafe { qemu_plugin_tb_n_insns(tb) };
    if n == 0 {
        return;
    }
    // User mode: a new thread may have moved the scoreboards since the last translation.
    crate::vcpu::scoreboard::refresh_base();
    crate::handlers::after_translation();
    let pending = crate::vcpu::landing::entry();
    let mode = code_mode(isa);
    let first = unsafe { qemu_plugin_tb_get_insn(tb, 0) };
    let start = unsafe { qemu_plugin_insn_vaddr(first) };
    // A kernel's first block in the upper half finds its randomised base, before anything
    // below compares an address with the CLI's named functions.
    crate::state::kaslr::learn(start);
    if !crate::state::system_mode() {
        crate::state::guest::learn_user_base(start, unsafe { qemu_plugin_insn_haddr(first) }
            as *const u8);
    }
    // User mode: the first block is the program's (or its loader's) entry, run once; its
    // first instruction reads the auxiliary vector off the initial stack.
    if !crate::state::system_mode() && crate::handlers::usermap::arm_startup() {
        unsafe {
            qemu_plugin_register_vcpu_insn_exec_cb(
                first,
                crate::entry::startup::on_startup,
                CB_R_REGS,
                std::ptr::null_mut(),
            )
        };
    }
    // Which named functions (`--stop-at`, `--start-at`, `--trace-on-at`, `--trace-off-at`)
    // start this block: looked up once, for the handlers below.
    let aims = crate::state::aims_at(start);
    // Tracing switched off: the clock and the switch's own callbacks only (`handlers::switch`).
    if unsafe { crate::handlers::switch::instrument(tb, start, n, aims) } {
        unsafe { crate::handlers::stop_at::instrument(first, start, aims) };
        // A guest file's `--trace-on-at` function is told by the process translating it:
        // the processes stay followed while off.
        if crate::state::system_mode()
            && crate::state::file_aims::triggers_on()
            && isa.is_task_pointer(start)
        {
            unsafe { follow_processes_while_off(tb, n, isa, mode, start) };
        }
        return;
    }
    // `--trace-off-at`'s block: its landing is taken, then its vCPU switches off at its first
    // instruction; nothing else of it is instrumented (below).
    let off_trigger = crate::handlers::switch::off_trigger_at(aims);
    // A run from a snapshot: the first block each vCPU runs saves its stack cookie.
    if crate::handlers::midway::armed() && !off_trigger {
        unsafe {
            qemu_plugin_register_vcpu_insn_exec_cb(
                first,
                crate::handlers::midway::on_first_insn,
                CB_R_REGS,
                start as usize as *mut c_void,
            )
        };
    }
    let user = !crate::state::system_mode();
    let system = !user;
    // A Linux guest's process code, with processes watched: the address space translating
    // it, which another process running the same physical page moves the addresses from
    // (`state::spaces`). Kernel code is at one address in every process.
    let space: Option<SpaceId> =
        (system && crate::handlers::procmaps::enabled() && !isa.is_task_pointer(start))
            .then(crate::state::spaces::translating)
            .filter(|&s| s != 0);
    // A signal handler's entry is told by its own callback (a return may be pending when a
    // signal is delivered: not a jump into the handler).
    let handler =
        user && !off_trigger && unsafe { crate::handlers::signals::instrument(first, start) };
    if !off_trigger {
        unsafe { crate::handlers::stop_at::instrument(first, start, aims) };
    }
    // A guest file's `-F`/`-N` function: a call through another file's PLT is made one of it
    // (before its first instruction's own callbacks).
    if let Some(space) = space.filter(|_| aims.file_gate && !off_trigger) {
        unsafe { crate::handlers::stubs::instrument(first, start, space) };
    }
    // Jumps through a register store their address in the pending flag, read where one may
    // enter a function or (user mode) resume a frame (`handlers::jumps`). A Linux guest's
    // process code is left alone: the list holds the kernel's functions only.
    let jumps = crate::state::entries::active();
    let register_jumps = pending.filter(|_| jumps && space.is_none());
    let register_jump_target = register_jumps.is_some() && !handler;
    // Whether a jump through a register at `pc` passes a call on, which already shows the
    // function it lands in: a PLT entry's (user mode; the frame keeps the PLT's name).
    // System mode has no PLT; its counterpart is a thunk whose calls are taken as calls
    // through its register (x86 `__x86_indirect_thunk_<reg>` patched to `jmp *%reg`,
    // `Isa::thunk`). Its calls land at its start, where the block starts.
    let mut in_thunk = None;
    let mut passes_call_on = |pc: u64| {
        if user {
            return crate::state::entries::in_plt(pc);
        }
        *in_thunk.get_or_insert_with(|| {
            isa.thunk_fetch_len() > 0
                && crate::state::entries::is_entry(start)
                && matches!(
                    thunk_at(isa, mode, start),
                    Some(Thunk::IndirectBranch { .. })
                )
        })
    };
    // riscv64 (a run from a snapshot, or a window opened in the kernel): the block a system
    // call returns to takes the user cookie its task's SRET left due (only where the vCPU's
    // word is this block's address).
    if system {
        let haddr = || unsafe { qemu_plugin_insn_haddr(first) } as *const u8;
        if let Some(word) = crate::handlers::midway::user_resume_word(isa, start, haddr) {
            unsafe {
                qemu_plugin_register_vcpu_tb_exec_cond_cb(
                    tb,
                    crate::handlers::midway::on_user_resume,
                    CB_R_REGS,
                    COND_EQ,
                    word,
                    start,
                    start as usize as *mut c_void,
                )
            };
        }
    }
    if let Some(flag) = pending {
        let haddr = unsafe { qemu_plugin_insn_haddr(first) } as *const u8;
        let landing = crate::vcpu::landing::is_landing(isa, mode, start, haddr);
        if register_jump_target {
            // System mode: entries only. A kernel's blocks after calls are the most run of
            // all; a jump back into a frame (setcontext) is a process's, not a kernel's.
            unsafe { instrument_register_jump_targets(tb, flag, start, landing, user) };
        }
        if landing {
            // Registered before the clock's add, so the return is timed before this block.
            // R_REGS: a return that matches no frame reads frame records to resynchronise.
            let (cb, data): (VcpuUdataCb, _) = match space {
                Some(space) => (on_user_landing, user_site(start, start, start, space)),
                // With -F, the form that only follows returns outside the filtered subtrees.
                None if gated() => (on_landing_gated, start as usize as *mut c_void),
                // With -t, the form whose fast path drops a short call.
                None if timed() => (on_landing_timed, start as usize as *mut c_void),
                None => (on_landing, start as usize as *mut c_void),
            };
            unsafe {
                qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb, CB_R_REGS, COND_EQ, flag, 1, data)
            };
        }
    }
    if off_trigger {
        unsafe { crate::handlers::switch::register_off_trigger(tb, start) };
    }
    if let Some(counter) = crate::vcpu::clock::insn_counter() {
        // Counted once per block at its start: calls and returns end blocks, so the count
        // at a callback already includes the calling or returning instruction.
        unsafe {
            qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, INLINE_ADD_U64, counter, n as u64)
        };
    }
    if off_trigger {
        return;
    }
    let task_slot = crate::state::task_slot(start);
    let mut bytes = [0u8; 16];
    let mut switched = false;
    // The previous instruction of this block (address, bytes, length): a call through a
    // register it set may have a known target (RISC-V's auipc + jalr).
    let mut prev: Option<(u64, [u8; 16], usize)> = None;
    // The one before it (a switch's table jump is told by the two instructions before it).
    let mut prev2: Option<([u8; 16], usize)> = None;
    // The block's instructions so far: a call through a register may take its target from
    // a load among them (`arch::feeding_load`).
    let mut earlier: Vec<(*mut qemu_plugin_insn, [u8; 16], usize)> = Vec::new();
    let mut current = None;
    let args_on = crate::state::args::active();
    if args_on {
        crate::state::args::new_block();
    }
    let tails = crate::handlers::args::tails_listened();
    for i in 0..n {
        earlier.extend(current.take());
        let insn = unsafe { qemu_plugin_tb_get_insn(tb, i) };
        let len = unsafe {
            qemu_plugin_insn_data(insn, bytes.as_mut_ptr() as *mut c_void, isa.fetch_len())
        };
        current = Some((insn, bytes, len));
        let pc = unsafe { qemu_plugin_insn_vaddr(insn) };
        // -A/-R: a spec'd function's first instruction reads its arguments (before any
        // other callback of that instruction: a call there comes after).
        if args_on {
            unsafe { crate::handlers::args::instrument(insn, pc, false) };
        }
        if !user {
            // A Linux guest's process mappings and its modules' loads and unloads: a few
            // kernel functions' first instructions.
            let named = crate::state::kaslr::to_symbols(pc);
            unsafe { crate::handlers::procmaps::instrument(insn, named) };
            unsafe { crate::handlers::modules::instrument(insn, named) };
        }
        let before2 = prev2;
        let before = prev.replace((pc, bytes, len));
        prev2 = before.map(|(_, b, l)| (b, l));
        // User mode: a jump through a register after a stack switch in the same block
        // (x86-64's longjmp, an unwinder installing a handler) resumes an outer frame.
        if user {
            if isa.switches_stack(mode, &bytes[..len]) {
                switched = true;
            } else if let Some(reg) = isa.register_jump(mode, &bytes[..len]).filter(|_| switched) {
                unsafe { crate::handlers::signals::instrument_stack_switch_jump(insn, reg) };
                continue;
            }
        }
        // x86 `lidt`: where exceptions are delivered through (`vectors`).
        if let Some(mask) = isa.loads_vector_table(mode, &bytes[..len]) {
            unsafe {
                qemu_plugin_register_vcpu_mem_cb(
                    insn,
                    crate::handlers::vector_table::on_vector_table_load,
                    CB_NO_REGS,
                    MEM_R,
                    mask as usize as *mut c_void,
                )
            };
            continue;
        }
        let before = before.as_ref().map(|(p, b, l)| (*p, &b[..*l]));
        let kind = classify_after(isa, mode, before, pc, &bytes[..len]);
        // -R: a jump out of a function with a return value (a tail call) leaves its value
        // to the callee's return instruction.
        if tails && kind == InsnKind::Other {
            let target = jump_target_after(isa, mode, before, pc, &bytes[..len]);
            if target.is_some() || isa.indirect_jump(mode, &bytes[..len]) {
                unsafe { crate::handlers::args::instrument_jump(insn, pc, target) };
            }
        }
        if let (Some(flag), InsnKind::Other) = (register_jumps, kind) {
            if pc > crate::vcpu::landing::RETURN
                && isa.indirect_jump(mode, &bytes[..len])
                && !passes_call_on(pc)
            {
                // A switch's jump through its table of offsets stays in its function: it
                // clears the flag (as the callbacks its address would wake would), and wakes
                // none (x86_64 sqlite: a million landing callbacks).
                let before = [
                    before2.as_ref().map_or(&[][..], |(b, l)| &b[..*l]),
                    before.as_ref().map_or(&[][..], |(_, b)| b),
                ];
                let value = if isa.relative_table_jump(mode, before, &bytes[..len]) {
                    0
                } else {
                    pc
                };
                unsafe {
                    qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
                        insn,
                        INLINE_STORE_U64,
                        flag,
                        value,
                    )
                };
                continue;
            }
        }
        // A direct jump into another function's entry: that function is entered (a tail
        // call, `b main`), shown as a call nested in the jumper's frame.
        if jumps && kind == InsnKind::Other {
            let target = jump_target_after(isa, mode, before, pc, &bytes[..len])
                .filter(|&t| crate::state::entries::enters(pc, t));
            // A jump to a retpoline (`jmp __x86_indirect_thunk_<reg>`, an indirect tail
            // call): the thunk's register, read where the jump runs (as a call's to it is),
            // says which function it enters; the thunk's own call and return are no events.
            if let Some(reg) = target.and_then(|t| indirect_thunk_reg(isa, mode, t)) {
                unsafe {
                    qemu_plugin_register_vcpu_insn_exec_cb(
                        insn,
                        crate::handlers::jumps::on_thunk_jump,
                        CB_R_REGS,
                        call_site(pc, reg as u64, pc),
                    )
                };
                continue;
            }
            let entered = target.filter(|&t| !stub_at(isa, mode, t));
            if let Some(target) = entered {
                unsafe {
                    qemu_plugin_register_vcpu_insn_exec_cb(
                        insn,
                        on_jump_entry,
                        CB_NO_REGS,
                        target as usize as *mut c_void,
                    )
                };
                continue;
            }
        }
        let (cb, flags, data): (VcpuUdataCb, _, _) = match kind {
            // Calls to a kernel's thunks stand for other branches (x86 retpolines).
            InsnKind::Call {
                target: Target::Direct(t),
                ret_addr,
            } if isa.thunk_fetch_len() > 0 => match thunk_at(isa, mode, t) {
                Some(Thunk::IndirectBranch { reg }) => (
                    on_indirect_call,
                    CB_R_REGS,
                    call_site(pc, reg as u64 | 1 << 63, ret_addr),
                ),
                Some(Thunk::BranchByReturn) => (on_thunk_branch, CB_NO_REGS, std::ptr::null_mut()),
                // Its return is the caller's.
                Some(Thunk::ReturnForCaller) => continue,
                None => direct_call_site(t, ret_addr, pc, space),
            },
            InsnKind::Call {
                target: Target::Direct(t),
                ret_addr,
            } => direct_call_site(t, ret_addr, pc, space),
            InsnKind::Call {
                target: Target::Register(r),
                ret_addr,
            } => {
                // Filled by a load in this block: its value is the target, handed over by
                // the load's memory callback (no register read).
                if let Some((load, direct)) = fed_by(isa, mode, &earlier, &bytes[..len], r) {
                    let word = memory_call_word(8, 0);
                    let data = match space {
                        Some(s) => user_site(pc, word, ret_addr, s),
                        None => call_site(pc, word, ret_addr),
                    };
                    if direct {
                        // Nothing between can fault: the load's callback is the call.
                        let cb = match space {
                            Some(_) => on_user_memory_call,
                            None => on_memory_call,
                        };
                        unsafe {
                            qemu_plugin_register_vcpu_mem_cb(load, cb, CB_NO_REGS, MEM_R, data)
                        };
                    } else {
                        // The load's callback keeps the value; the call's takes it.
                        let cb = match space {
                            Some(_) => on_user_fed_call,
                            None => on_fed_call,
                        };
                        unsafe {
                            qemu_plugin_register_vcpu_mem_cb(
                                load,
                                on_fed_load,
                                CB_NO_REGS,
                                MEM_R,
                                std::ptr::null_mut(),
                            );
                            qemu_plugin_register_vcpu_insn_exec_cb(insn, cb, CB_NO_REGS, data);
                        }
                    }
                    continue;
                }
                // The register number, marked so it never meets a direct target.
                let word = r as u64 | 1 << 63;
                match space {
                    Some(s) => (
                        on_user_indirect_call,
                        CB_R_REGS,
                        user_site(pc, word, ret_addr, s),
                    ),
                    None => (on_indirect_call, CB_R_REGS, call_site(pc, word, ret_addr)),
                }
            }
            // RISC-V's JALR: the register plus a 32-bit offset (always fits: 12 bits).
            InsnKind::Call {
                target: Target::RegisterOffset { reg, offset },
                ret_addr,
            } if i32::try_from(offset).is_ok() => {
                let word = offset_call_word(reg, offset);
                match space {
                    Some(s) => (
                        on_user_offset_call,
                        CB_R_REGS,
                        user_site(pc, word, ret_addr, s),
                    ),
                    None => (on_offset_call, CB_R_REGS, call_site(pc, word, ret_addr)),
                }
            }
            // x86 `call *m`: the target is the value its own load reads, handed to a memory
            // callback; a far call is not followed.
            InsnKind::Call {
                target: Target::Memory(op),
                ret_addr,
            } if !op.far => {
                let Some(code_base) = code_base(isa, mode) else {
                    continue;
                };
                let word = memory_call_word(op.size, code_base);
                let (cb, data): (crate::ffi::VcpuMemCb, _) = match space {
                    Some(s) => (on_user_memory_call, user_site(pc, word, ret_addr, s)),
                    None => (on_memory_call, call_site(pc, word, ret_addr)),
                };
                unsafe { qemu_plugin_register_vcpu_mem_cb(insn, cb, CB_NO_REGS, MEM_R, data) };
                continue;
            }
            InsnKind::Call {
                target: Target::RegisterOffset { .. } | Target::Memory(_),
                ..
            } => continue,
            // `lretq` into a function's entry: a jump (Linux's head code into
            // x86_64_start_kernel), told from a return where it runs (it is rare).
            InsnKind::Return if jumps && isa.is_far_return64(mode, &bytes[..len]) => {
                (on_far_return, CB_R_REGS, pc as usize as *mut c_void)
            }
            InsnKind::Return => {
                // -R: a return instruction of a function whose return value is read.
                if args_on {
                    unsafe { crate::handlers::args::instrument_return(insn, pc) };
                }
                if let Some(flag) = pending {
                    unsafe {
                        qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
                            insn,
                            INLINE_STORE_U64,
                            flag,
                            1,
                        )
                    };
                }
                continue;
            }
            InsnKind::ExceptionReturn => {
                // Whether the target comes from memory or general registers (x86), asked
                // here where the bytes are at hand, so that other architectures' ERETs read
                // no guest memory when they run.
                let from_memory = isa
                    .exception_return_to(mode, &bytes[..len], &mut |_| None, &mut |_, _| None)
                    .is_some();
                let cb = if from_memory {
                    on_exception_return_from_memory
                } else {
                    on_exception_return
                };
                (cb, CB_R_REGS, pc as usize as *mut c_void)
            }
            InsnKind::SetTaskPointer { .. } | InsnKind::Other => {
                match task_pointer_write(isa, mode, pc, &bytes[..len], kind, task_slot) {
                    Some(src) => (on_task_pointer, CB_R_REGS, task_pointer_data(src, pc)),
                    None => continue,
                }
            }
            // A system call QEMU takes without reporting it (x86-64 SYSCALL): its `[svc]`
            // opens where it runs, where the other exception entries are seen. Only with
            // SYSCALL enabled (EFER.SCE, read once here): otherwise it raises #UD, reported.
            InsnKind::Trap if system && crate::state::discontinuities_registered() => {
                match isa.unreported_system_call(mode, &bytes[..len]) {
                    Some((n, level)) if syscall_enabled() => (
                        on_unreported_system_call,
                        CB_NO_REGS,
                        call_site(pc, u64::from(level.0), pc.wrapping_add(n as u64)),
                    ),
                    _ => continue,
                }
            }
            // Exceptions are seen when taken (the discontinuity callback), traps included.
            InsnKind::Trap => continue,
        };
        unsafe { qemu_plugin_register_vcpu_insn_exec_cb(insn, cb, flags, data) };
    }
}

/// The callbacks of a block where a jump through a register may land: a function's entry,
/// and (`resumes`) code right after a call (`handlers::jumps`); conditional on the
/// pending flag holding a jump's address, so that calls and returns pay one comparison.
///
/// # Safety
/// `tb` is the translation block being translated, starting at `start`.
unsafe fn instrument_register_jump_targets(
    tb: *mut qemu_plugin_tb,
    flag: crate::ffi::qemu_plugin_u64,
    start: u64,
    landing: bool,
    resumes: bool,
) {
    // User mode: an entry that follows no call also takes returns (the landing callback
    // takes them where it does): a return there is a jump too (x86-64 `setcontext`). Not in
    // system mode, where a return landing unseen is settled as before (`ret_unseen`).
    let (cb, cond): (VcpuUdataCb, _) = match (crate::state::entries::is_entry(start), landing) {
        (true, false) if resumes => (crate::handlers::jumps::on_register_jump_entry, COND_NE),
        (true, false) => (crate::handlers::jumps::on_register_jump_entry, COND_GT),
        (true, true) => (crate::handlers::jumps::on_register_jump_entry, COND_GT),
        (false, true) if resumes => (crate::handlers::jumps::on_register_jump_landing, COND_GT),
        (false, _) => return,
    };
    let (data, imm) = match cond {
        COND_NE => (start as usize as *mut c_void, 0),
        _ => (start as usize as *mut c_void, crate::vcpu::landing::RETURN),
    };
    unsafe { qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb, CB_NO_REGS, cond, flag, imm, data) };
}

/// The load among a block's `earlier` instructions whose value the call `call` through
/// register `reg` branches to, and whether its callback can stand for the call
/// (`arch::feeding_load`).
fn fed_by(
    isa: &dyn Isa,
    mode: Mode,
    earlier: &[(*mut qemu_plugin_insn, [u8; 16], usize)],
    call: &[u8],
    reg: u8,
) -> Option<(*mut qemu_plugin_insn, bool)> {
    let bytes: Vec<&[u8]> = earlier.iter().map(|(_, b, l)| &b[..*l]).collect();
    feeding_load(isa, mode, &bytes, call, reg).map(|f| (earlier[f.load].0, f.direct))
}

/// Tracing off, a kernel block: the process watch's functions (`procmaps`) and the task
/// switches (which process runs, for the translator only), nothing else.
///
/// # Safety
/// `tb` is the live handle of the block being translated, of `n` instructions.
unsafe fn follow_processes_while_off(
    tb: *mut qemu_plugin_tb,
    n: usize,
    isa: &dyn qemu_uftrace_engine::arch::Isa,
    mode: qemu_uftrace_engine::arch::Mode,
    start: u64,
) {
    let task_slot = crate::state::task_slot(start);
    let mut bytes = [0u8; 16];
    for i in 0..n {
        let insn = unsafe { qemu_plugin_tb_get_insn(tb, i) };
        let len = unsafe {
            qemu_plugin_insn_data(insn, bytes.as_mut_ptr() as *mut c_void, isa.fetch_len())
        };
        let pc = unsafe { qemu_plugin_insn_vaddr(insn) };
        unsafe { crate::handlers::procmaps::instrument(insn, crate::state::kaslr::to_symbols(pc)) };
        let kind = classify_after(isa, mode, None, pc, &bytes[..len]);
        if let Some(src) = task_pointer_write(isa, mode, pc, &bytes[..len], kind, task_slot) {
            unsafe {
                qemu_plugin_register_vcpu_insn_exec_cb(
                    insn,
                    crate::handlers::callbacks::on_task_pointer_while_off,
                    CB_R_REGS,
                    task_pointer_data(src, pc),
                )
            };
        }
    }
}

/// Whether the instruction `bytes` at `pc` (of `kind`) writes the running task's pointer (a
/// task switch), and from which register: an instruction of its own kind (arm64's
/// `msr sp_el0`, RISC-V's `mv tp`) or a store to the per-CPU variable that holds it
/// (x86_64's `current_task`, at `task_slot`).
fn task_pointer_write(
    isa: &dyn Isa,
    mode: Mode,
    pc: u64,
    bytes: &[u8],
    kind: InsnKind,
    task_slot: Option<u64>,
) -> Option<u8> {
    match kind {
        InsnKind::SetTaskPointer { src } => Some(src),
        InsnKind::Other => {
            let slot = task_slot?;
            (isa.per_cpu_store(mode, pc, bytes))
                .filter(|&(_, at)| at == slot)
                .map(|(src, _)| src)
        }
        _ => None,
    }
}

/// A task switch's callback data: the source register in the low byte, the instruction's
/// address above it (a run from a snapshot saves it in the arriving task's cookie). Kernel
/// addresses are canonical (the top bits copy bit 55), so the 8 bits shifted out come back
/// by sign extension (`handlers::callbacks::task_pointer_site`).
fn task_pointer_data(src: u8, pc: u64) -> *mut c_void {
    ((pc << 8) | src as u64) as usize as *mut c_void
}

/// The callback of a direct call to `target`: the packed form when its addresses fit; a
/// process's code translated in a known address space: the form that says which (its
/// general path applies -F/-N); with `-F`, the forms that only follow calls outside the
/// filtered subtrees.
fn direct_call_site(
    target: u64,
    ret_addr: u64,
    pc: u64,
    space: Option<SpaceId>,
) -> (VcpuUdataCb, CbFlags, *mut c_void) {
    if let Some(s) = space {
        return (on_user_call, CB_NO_REGS, user_site(pc, target, ret_addr, s));
    }
    let (packed, general): (VcpuUdataCb, VcpuUdataCb) = if gated() {
        (on_packed_call_gated, on_direct_call_gated)
    } else if timed() {
        (on_packed_call_timed, on_direct_call)
    } else {
        (on_packed_call, on_direct_call)
    };
    match pack(target, ret_addr) {
        Some(word) => (packed, CB_NO_REGS, word as usize as *mut c_void),
        None => (general, CB_NO_REGS, call_site(pc, target, ret_addr)),
    }
}

/// Whether `-F` was given (a shared library's or a guest file's function included): its
/// calls and landings outside the filtered subtrees take callbacks of their own, so that
/// other runs pay nothing for them.
fn gated() -> bool {
    crate::state::aims::filtering()
        || crate::state::lib_aims::filtering()
        || crate::state::file_aims::filtering()
}

/// Whether `-t` was given: its common calls and returns take callbacks of their own (with
/// `-F` too, the gated ones go first: gates leave the engine no recorded depth, so the
/// timed fast path would never be taken).
fn timed() -> bool {
    crate::state::CONFIG
        .get()
        .is_some_and(|c| c.time_filter > 0)
}

/// The thunk a call's target starts with, from guest memory (read at translation; the
/// target's page may not be mapped yet: no thunk then).
fn thunk_at(isa: &dyn Isa, mode: Mode, target: u64) -> Option<Thunk> {
    let len = (isa.thunk_fetch_len() as u64).min(MIN_PAGE - target % MIN_PAGE) as usize;
    with_buf(|b| isa.thunk(mode, b.read_memory(target, len)?))
}

/// The register a thunk at `target` branches through (`Thunk::IndirectBranch`), on
/// architectures that have such thunks.
fn indirect_thunk_reg(isa: &dyn Isa, mode: Mode, target: u64) -> Option<u8> {
    if isa.thunk_fetch_len() == 0 {
        return None;
    }
    match thunk_at(isa, mode, target) {
        Some(Thunk::IndirectBranch { reg }) => Some(reg),
        _ => None,
    }
}

/// Whether a jump's target is no function of the program's own: a kernel thunk (a jump to
/// `__x86_indirect_thunk_<reg>` is an indirect tail call, not into the thunk), or code that
/// returns at once (`__x86_return_thunk`, which kernels jump to in place of `ret`).
fn stub_at(isa: &dyn Isa, mode: Mode, target: u64) -> bool {
    if isa.thunk_fetch_len() > 0 && thunk_at(isa, mode, target).is_some() {
        return true;
    }
    let len = (isa.fetch_len() as u64).min(MIN_PAGE - target % MIN_PAGE) as usize;
    with_buf(|b| {
        b.read_memory(target, len)
            .is_some_and(|bytes| isa.classify(mode, target, bytes) == InsnKind::Return)
    })
}

/// A register-plus-offset call's target field: marked as [`on_indirect_call`]'s, the
/// register in bits 0..8 and the offset's 32 bits in bits 8..40.
fn offset_call_word(reg: u8, offset: i64) -> u64 {
    1 << 63 | (offset as i32 as u32 as u64) << 8 | reg as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::callbacks::offset_call_parts;

    #[test]
    fn offset_calls_keep_register_and_signed_offset() {
        for (reg, offset) in [(1u8, 0i64), (5, -2048), (31, 2047), (10, i32::MIN as i64)] {
            assert_eq!(
                offset_call_parts(offset_call_word(reg, offset)),
                (reg, offset)
            );
        }
    }
}
