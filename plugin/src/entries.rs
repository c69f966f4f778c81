//! Function entries from the CLI (`entries=FILE`, see `qemu_uftrace_engine::entries`):
//! which direct jumps enter another function. Read once at install; asked only at
//! translation time.

use qemu_uftrace_engine::entries::Functions;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static FUNCTIONS: OnceLock<Functions> = OnceLock::new();

/// What to subtract from a guest address to compare it with the list's (user mode: a PIE
/// program's load bias); `UNKNOWN` until the program's entry point is known.
static BIAS: AtomicU64 = AtomicU64::new(UNKNOWN);
const UNKNOWN: u64 = u64::MAX;

/// Reads the CLI's list; an unreadable or malformed file is one line for QEMU to print.
pub fn load(path: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read function entries {}: {e}", path.display()))?;
    let functions = Functions::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if functions.rebase.is_none() {
        BIAS.store(0, Ordering::Relaxed);
    }
    let _ = FUNCTIONS.set(functions);
    Ok(())
}

/// User mode: the program's entry point (`AT_ENTRY`), which places a PIE's functions.
pub fn program_entry(at_entry: u64) {
    if let Some(link) = FUNCTIONS.get().and_then(|f| f.rebase) {
        BIAS.store(at_entry.wrapping_sub(link), Ordering::Relaxed);
    }
}

/// Whether the list is there to ask (a cheap test before decoding jumps).
pub fn active() -> bool {
    FUNCTIONS.get().is_some_and(|f| !f.is_empty())
}

/// Whether a direct jump at `pc` to `target` enters another function.
pub fn enters(pc: u64, target: u64) -> bool {
    let bias = BIAS.load(Ordering::Relaxed);
    match FUNCTIONS.get() {
        Some(f) if bias != UNKNOWN => f.enters(pc.wrapping_sub(bias), target.wrapping_sub(bias)),
        _ => false,
    }
}
