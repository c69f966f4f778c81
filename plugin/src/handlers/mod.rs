//! The callbacks that run while the guest does: calls, returns, exceptions and task switches
//! (`callbacks`), user-mode signal deliveries (`signals`), file mappings (`usermap`; in a
//! Linux guest's processes: `procmaps`, and `proc_walk` at a switch on), x86 vector tables
//! (`vector_table`), the stack cookie of a run that starts mid-way (`midway`) and the
//! riscv64 words where user-mode cookies wait for their first user block (`user_resume`).

pub mod args;
pub mod callbacks;
pub mod jumps;
pub mod midway;
pub mod modules;
pub mod proc_walk;
pub mod procmaps;
pub mod running_task;
pub mod signals;
pub mod stop_at;
pub mod stubs;
pub mod switch;
pub mod user_resume;
pub mod usermap;
pub mod vector_table;

/// A system call returned on `vcpu`: it may have waited with no instruction run, so its
/// next time is read, not interpolated. And the records it holds go to the writer once a
/// status round (`state::progress::round`): else `qemu-uftrace status` showed 0 events for
/// a program that makes few calls (a buffer holds 64 Ki records), until it ended.
pub fn after_syscall(vcpu: u32) {
    let interpolated = crate::vcpu::clock::interpolated();
    let round = crate::state::progress::round();
    crate::vcpu::with(vcpu, |v| {
        if interpolated {
            v.interp.invalidate();
        }
        if v.handed_round != round {
            v.handed_round = round;
            v.engine.flush();
        }
    });
}

/// The thread's vCPU translated a block: tens of µs with no instruction run (running a
/// block costs ns), so its next time is read, not interpolated, and that interval sets no
/// rate. Once a block: the blocks of fresh code (a program's start-up, its first calls of
/// anything) each cost that much, and a rate measured over them ran the time that
/// followed up to a ms ahead of the host, where it stood still until the host caught up.
pub fn after_translation() {
    if crate::vcpu::clock::interpolated() {
        if let Some(vcpu) = crate::vcpu::thread_vcpu() {
            crate::vcpu::with(vcpu, |v| v.interp.invalidate());
        }
    }
}
