//! Which task runs on a vCPU: at a task switch the hook sees (`callbacks::on_task_pointer`)
//! and at a switch-on, where switches went unseen while off (`switch`). The task's PID,
//! thread group and name are read here, and the task table switches the vCPU's engine to it.

use crate::vcpu::VcpuState;
use qemu_uftrace_engine::arch::Isa;
use qemu_uftrace_engine::tasks::{Switch, TASK_NAME_BYTES};

/// Tracing went on (a vCPU's first block after the switch, `handlers::switch`): task
/// switches were not followed while off, so the task running now is read where the OS
/// keeps it (one read or two, once a vCPU a switch) and, where it is not the one this
/// vCPU ran when tracing went off, the records from here on go to it. Where nothing
/// readable names it (aarch64 at EL0, whose SP_EL0 is the user's stack pointer), the
/// kernel's next entry writes it (`msr sp_el0`), which `callbacks::on_task_pointer` sees.
pub fn learn_running_task(v: &mut VcpuState, vcpu_index: u32) {
    let isa = crate::state::isa_or_default();
    // In user space on arm64 no register holds the task: the last one written while off,
    // where task switches were followed then.
    let off_task = (v.off_task != 0).then_some(v.off_task);
    let Some(ptr) = running_now(&mut v.regs, isa).or(off_task) else {
        return;
    };
    // The same structure may be another task by now: one that ended while tracing was off
    // freed it for the next (worker b's thread where worker a ran). Its PID tells, where it
    // can be read.
    let pid = task_pid(&mut v.regs, isa, ptr);
    if ptr == v.task_ptr && (pid == 0 || pid == v.engine.tid()) {
        return;
    }
    // A vCPU's first task named is taken as what its boot code became, Linux's idle task;
    // one read here may have started while off (x86_64 sees no switch before `rest_init`):
    // a task with a PID is never the boot code's.
    if pid != 0 {
        crate::state::with_tasks(|t| t.keep_boot(vcpu_index));
    }
    task_arrives(v, vcpu_index, isa, ptr);
}

/// Task `ptr`'s PID: from the ISA's register where the OS keeps one (aarch64
/// CONTEXTIDR_EL1), else from its structure when the kernel's DWARF said where (one 4-byte
/// read), else unknown (0: a synthetic id).
fn task_pid(regs: &mut crate::state::guest::ByteBuf, isa: &dyn Isa, ptr: u64) -> u32 {
    match isa.task_id_register() {
        Some(name) => regs.read_named(name).map_or(0, |id| id as u32),
        None => pid_in_task(regs, ptr),
    }
}

/// The task running on a vCPU now, at any privilege level: the task register where it
/// holds a task (RISC-V in U mode keeps the kernel's tp in `sscratch`), or the per-CPU slot
/// at the kernel's per-CPU base (x86_64: GS's base in the kernel, the saved `k_gs_base`
/// in user mode or before the entry's `swapgs`). None where no value read is a task.
fn running_now(regs: &mut crate::state::guest::ByteBuf, isa: &dyn Isa) -> Option<u64> {
    let task = |value: Option<u64>| value.filter(|&t| isa.is_task_pointer(t));
    if let Some(name) = isa.task_pointer_register() {
        let saved = match crate::state::arch_or_default() {
            qemu_uftrace_format::Arch::Riscv64 => Some("sscratch"),
            _ => None,
        };
        return task(regs.read_named(name))
            .or_else(|| saved.and_then(|saved| task(regs.read_named(saved))));
    }
    let slot = crate::state::task_slot_known()?;
    let base = isa.per_cpu_base_register()?;
    let base = task(regs.read_named(base)).or_else(|| task(regs.read_named("k_gs_base")))?;
    task(regs.read_le(base.wrapping_add(slot), 8))
}

/// Task `ptr` runs on `vcpu_index` from now (a switch seen, or learnt at a switch on):
/// its PID, thread group and name are read and the task table switches the engine to its
/// context. Returns whether the task was new to the table.
pub fn task_arrives(v: &mut VcpuState, vcpu_index: u32, isa: &dyn Isa, ptr: u64) -> bool {
    crate::handlers::args::task_switched(vcpu_index);
    let pid = task_pid(&mut v.regs, isa, ptr);
    // Names (Linux `comm`) are read at switches only: the task leaving has its latest
    // name (set after it started: kthreads, exec), and the one arriving its name so
    // far, which a task still running when the guest stops (the CPU that powers off or
    // panics, an idle task never preempted) would otherwise never get. The last read
    // wins. A task that execs and never switches again keeps its name from before.
    let comm = crate::state::config().and_then(|c| c.task_comm);
    let name_at = |regs: &mut crate::state::guest::ByteBuf, task: u64| {
        let offset = comm?;
        (task != 0)
            .then(|| regs.read_memory(task.wrapping_add(offset), TASK_NAME_BYTES))
            .flatten()
            .map(task_name)
    };
    // The first write a vCPU shows: the register or slot still holds the task running
    // so far, which the OS set up in a way not instrumented; that task is what the boot
    // code became.
    let before = (v.task_ptr == 0)
        .then(|| running_before(&mut v.regs, isa))
        .flatten()
        .filter(|&old| old != ptr && isa.is_task_pointer(old));
    let before = before.map(|old| {
        let pid = match isa.task_id_register() {
            Some(_) => 0,
            None => pid_in_task(&mut v.regs, old),
        };
        let tgid = tgid_of_task(&mut v.regs, old, pid).filter(|_| pid > 0);
        (old, pid, tgid.unwrap_or(0))
    });
    let leaving_ptr = before.map_or(v.task_ptr, |(old, ..)| old);
    let leaving = name_at(&mut v.regs, leaving_ptr);
    // Its last switch (Linux `do_task_dead`): its context is freed at this switch.
    let leaving_ended = crate::state::config()
        .and_then(|c| c.task_state)
        .filter(|_| leaving_ptr != 0)
        .and_then(|offset| v.regs.read_le(leaving_ptr.wrapping_add(offset), 4))
        .is_some_and(|state| state as u32 == qemu_uftrace_engine::tasks::LINUX_TASK_DEAD);
    let arriving = name_at(&mut v.regs, ptr);
    // Its process (one 4-byte read per switch, with the kernel's DWARF only), which
    // also gives the address space it runs in (processes watched only).
    let read = tgid_of_task(&mut v.regs, ptr, pid);
    let tgid = read.filter(|_| pid > 0).unwrap_or(0);
    let space = read.map_or(0, crate::handlers::procmaps::space_of);
    let now = v.now();
    v.settle(now);
    v.task_ptr = ptr;
    // The space changes after the switch: the context switched away decides in its own
    // what it keeps back (`Engine::hold_fresh_entries`).
    let created = crate::state::with_tasks(|t| {
        if let Some((old, pid, tgid)) = before {
            t.task_pointer(&mut v.engine, vcpu_index, now, old, pid);
            t.thread_group(pid, tgid);
        }
        if let Some(name) = leaving {
            t.name_running(vcpu_index, name);
        }
        if leaving_ended {
            t.running_ends(vcpu_index);
        }
        let known = t.created();
        let switch = t.task_pointer(&mut v.engine, vcpu_index, now, ptr, pid);
        t.thread_group(pid, tgid);
        if let Some(name) = arriving {
            t.name_running(vcpu_index, name);
        }
        switch == Switch::Switched && t.created() > known
    })
    .unwrap_or(false);
    v.run_space(space);
    created
}

/// The task a vCPU ran before the first switch it shows, where the OS set it up without an
/// instrumented write: in the task register (RISC-V Linux's boot: `la tp, init_task`), or
/// in the per-CPU slot (x86_64 Linux's `current_task`, `&init_task` from the start).
fn running_before(regs: &mut crate::state::guest::ByteBuf, isa: &dyn Isa) -> Option<u64> {
    if let Some(name) = isa.task_pointer_register() {
        return regs.read_named(name);
    }
    let base = regs.read_named(isa.per_cpu_base_register()?)?;
    let at = base.wrapping_add(crate::state::task_slot_known()?);
    regs.read_le(at, 8)
}

/// Tracing off, a guest file's `--trace-on-at` function given (`entry::translate`): task
/// `ptr` runs on `v` from now. Only the translator is told which process runs (the space
/// its blocks belong to, `state::spaces`): no context switch is made while off (the switch
/// on learns the running task as always).
pub fn arrives_while_off(v: &mut VcpuState, ptr: u64) {
    v.off_task = ptr;
    let isa = crate::state::isa_or_default();
    let pid = task_pid(&mut v.regs, isa, ptr);
    if let Some(tgid) = tgid_of_task(&mut v.regs, ptr, pid) {
        crate::state::spaces::note_running(crate::handlers::procmaps::space_of(tgid));
    }
}

/// A task's PID read from its structure, where the kernel's DWARF said it is (`task_pid=`);
/// 0 (unknown: a synthetic id) otherwise.
fn pid_in_task(regs: &mut crate::state::guest::ByteBuf, task: u64) -> u32 {
    crate::state::config()
        .and_then(|c| c.task_pid)
        .filter(|_| task != 0)
        .and_then(|offset| regs.read_le(task.wrapping_add(offset), 4))
        .map_or(0, |pid| pid as u32)
}

/// The thread group (process) of the task with PID `pid` at `task`, where the kernel's
/// DWARF said where it is (`task_tgid=`, or the process watch's own offset, the same
/// field): read only where something uses it, for grouping a task with a PID known (a
/// task without one nothing could group) or for the address space of watched processes.
fn tgid_of_task(regs: &mut crate::state::guest::ByteBuf, task: u64, pid: u32) -> Option<u32> {
    let watched = crate::handlers::procmaps::tgid_offset();
    let offset = crate::state::config()
        .and_then(|c| c.task_tgid)
        .filter(|_| pid > 0)
        .or(watched)?;
    (task != 0)
        .then(|| regs.read_le(task.wrapping_add(offset), 4))
        .flatten()
        .map(|tgid| tgid as u32)
}

/// A NUL-padded name field as text.
fn task_name(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
