//! `events.txt`: names for user events (ids 1000000 and up), read when the `info` header's
//! EVENT feature is set (`info::feat::EVENT`); replay shows `/* provider:name */`.

use std::io::{self, Write};

/// The first id of user events.
pub const USER_BASE: u64 = 1_000_000;

/// Marks the end of the frames a run from a snapshot recovered by unwinding.
pub const UNWOUND: u64 = USER_BASE;
/// Marks, in each task, the end of the frames written as entries where writing began
/// (`--start-at`, `--keep-last`'s window): the frames above were open there, what follows
/// was recorded.
pub const OPENED: u64 = USER_BASE + 1;
/// Where tracing was switched on while the guest ran (`trace on`, `--trace-on-at`): each
/// task's recovered open frames follow it, ended by `qemu:opened`.
pub const TRACE_ON: u64 = USER_BASE + 2;
/// Where tracing was switched off: each task's open frames closed just before.
pub const TRACE_OFF: u64 = USER_BASE + 3;
/// Every user event qemu-uftrace writes, for `events.txt` (an unused one costs nothing).
pub const QEMU_EVENTS: &[(u64, &str)] = &[
    (UNWOUND, "qemu:unwound"),
    (OPENED, "qemu:opened"),
    (TRACE_ON, "qemu:trace_on"),
    (TRACE_OFF, "qemu:trace_off"),
];

/// One `EVENT: <id> <provider>:<name>` line per event.
pub fn write_events(w: &mut impl Write, events: &[(u64, &str)]) -> io::Result<()> {
    for (id, name) in events {
        writeln!(w, "EVENT: {id} {name}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_as_uftrace_reads_them() {
        let mut out = Vec::new();
        super::write_events(&mut out, &[(1_000_000, "qemu:unwound")]).unwrap();
        assert_eq!(out, b"EVENT: 1000000 qemu:unwound\n");
    }
}
