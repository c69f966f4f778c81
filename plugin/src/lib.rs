//! qemu-uftrace's QEMU TCG plugin: follows every guest call and return and writes uftrace
//! records, one task per guest context (a vCPU's boot code, an OS task, a privilege level).
//!
//! Layers, each using only those above it here (read them in this order):

/// QEMU's C API as declared for this build's ABI, and `dlsym` lookups.
pub mod ffi;

/// What install sets once: configuration, the record writer (`output`), guest register and
/// memory access (`guest`).
mod state;

/// Per-vCPU data: the slots, scoreboard words, clocks, pending returns, vector tables.
mod vcpu;

/// The callbacks that run with the guest and drive the engine (`qemu_uftrace_engine`:
/// per-vCPU `hot` engines, the `tasks` table).
mod handlers;

/// vCPU init and exit, user-mode fork and exec, stopping signals, `finish`.
mod lifecycle;

/// QEMU's entry points: install, the ABI trampolines, translation.
mod entry;
