//! Whether tracing is on (`record --trace=off`, `trace on|off`, a signal to `record`,
//! `--trace-on-at`/`--trace-off-at`): what is wanted, what the translated code does, and
//! what the status file and `plugin.stats` say of it (`handlers::switch` switches).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What was asked for last (true: on).
pub static WANTED: AtomicBool = AtomicBool::new(true);
/// What the translated code does: every block translated while this is false carries no
/// per-call instrumentation.
pub static ACTIVE: AtomicBool = AtomicBool::new(true);
/// Windows begun after the start (each switch on; a recording that starts on counts 1).
pub static WINDOWS: AtomicU64 = AtomicU64::new(0);
/// Switches applied (either way).
pub static SWITCHES: AtomicU64 = AtomicU64::new(0);
/// Host time spent off so far (ns), closed periods only.
pub static OFF_TOTAL: AtomicU64 = AtomicU64::new(0);
/// When the current off period began (host ns since [`since_start`]'s origin; `u64::MAX`:
/// tracing is on).
pub static OFF_SINCE: AtomicU64 = AtomicU64::new(u64::MAX);

/// Host ns since the plugin's first look at the clock (a process's own origin).
pub fn since_start() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// Host time off so far, the period under way included (ns).
pub fn off_ns() -> u64 {
    let since = OFF_SINCE.load(Ordering::Relaxed);
    let open = if since == u64::MAX {
        0
    } else {
        since_start().saturating_sub(since)
    };
    OFF_TOTAL.load(Ordering::Relaxed) + open
}
/// Blocks that ran while off were translated without calls' callbacks: how many were
/// translated so (what was skipped, in QEMU's units).
pub static OFF_TRANSLATIONS: AtomicU64 = AtomicU64::new(0);

/// Whether the translated code records calls now.
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Whether a switch is due (what was asked differs from what runs).
#[inline]
pub fn due() -> bool {
    WANTED.load(Ordering::Relaxed) != ACTIVE.load(Ordering::Relaxed)
}

/// The lines `plugin.status` and `plugin.stats` carry: `trace=on|off`, `trace_windows=N`,
/// `trace_switches=N`, `trace_off_ns=T` (host time spent off) and `trace_off_translations=N`
/// (blocks translated without calls' callbacks, where blocks are instrumented while off).
pub fn lines() -> String {
    format!(
        "trace={}\ntrace_windows={}\ntrace_switches={}\ntrace_off_ns={}\ntrace_off_translations={}\n",
        if active() { "on" } else { "off" },
        WINDOWS.load(Ordering::Relaxed),
        SWITCHES.load(Ordering::Relaxed),
        off_ns(),
        OFF_TRANSLATIONS.load(Ordering::Relaxed),
    )
}
