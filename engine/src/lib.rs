//! The pure parts of qemu-uftrace's QEMU plugin, testable without QEMU: what each
//! architecture's instructions and registers mean (`arch`), shadow stacks (`shadow`), the
//! per-vCPU call/return engine (`hot`) with its slow paths (`resync`, `exceptions`), and the
//! whole-system model of which context runs where (`tasks`).
//!
//! Data flows one way: `tasks` drives `hot`'s engines, `hot` asks `resync` for a plan, and
//! `resync` reads the guest through `guest::GuestView`; the plugin supplies the guest.

pub mod arch;
/// One malloc arena for a user-mode QEMU, so that its threads do not move the guest.
pub mod arena;
pub mod entries;
pub mod exceptions;
pub mod gates;
pub mod guest;
pub mod hot;
pub mod jumps;
pub mod kaslr;
pub mod linux_walk;
pub mod midway;
pub mod resync;
pub mod shadow;
pub mod signals;
pub mod sites;
pub mod spaces;
pub mod stats;
pub mod switch;
pub mod tasks;
pub mod thunks;
pub mod timefilter;
pub mod tsc;
