//! The callbacks that run while the guest does: calls, returns, exceptions and task switches
//! (`callbacks`), user-mode signal deliveries (`signals`), file mappings (`usermap`; in a
//! Linux guest's processes: `procmaps`), x86 vector tables (`vector_table`) and the stack
//! cookie of a run that starts mid-way (`midway`).

pub mod callbacks;
pub mod jumps;
pub mod midway;
pub mod procmaps;
pub mod signals;
pub mod stop_at;
pub mod usermap;
pub mod vector_table;

/// A system call returned on `vcpu`: it may have waited with no instruction run, so its
/// next time is read, not interpolated.
pub fn after_syscall(vcpu: u32) {
    if crate::vcpu::clock::interpolated() {
        crate::vcpu::with(vcpu, |v| v.interp.invalidate());
    }
}
