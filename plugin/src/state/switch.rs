//! Whether tracing is on (`record --trace=off`, `trace on|off`, a signal to `record`,
//! `--trace-on-at`/`--trace-off-at`): what is wanted, what the translated code does, and
//! what the status file and `plugin.stats` say of it (`handlers::switch` switches).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What was asked for last (true: on).
pub static WANTED: AtomicBool = AtomicBool::new(true);
/// What the translated code does (bit 0: every block translated while it is clear carries
/// no per-call instrumentation) and the windows begun after the start (the other bits: each
/// switch on; a recording that starts on counts 1). One word, so that the status never
/// shows one switch's state beside another's count: read as two, it once said `off` with
/// the window just opened counted, and a watcher took that window for closed.
static STATE: AtomicU64 = AtomicU64::new(1);
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
    STATE.load(Ordering::Relaxed) & 1 != 0
}

/// Windows begun so far.
pub fn windows() -> u64 {
    STATE.load(Ordering::Acquire) >> 1
}

/// Whether tracing is on and how many windows have begun, both at once (a switch's reset,
/// with every vCPU stopped, and the install are the only writers).
pub fn set(active: bool, windows: u64) {
    STATE.store(windows << 1 | u64::from(active), Ordering::Release);
}

/// Whether a switch is due (what was asked differs from what runs).
#[inline]
pub fn due() -> bool {
    WANTED.load(Ordering::Relaxed) != active()
}

/// The lines `plugin.status` and `plugin.stats` carry: `trace=on|off`, `trace_windows=N`,
/// `trace_switches=N`, `trace_off_ns=T` (host time spent off) and `trace_off_translations=N`
/// (blocks translated without calls' callbacks, where blocks are instrumented while off).
pub fn lines() -> String {
    let state = STATE.load(Ordering::Acquire);
    format!(
        "trace={}\ntrace_windows={}\ntrace_switches={}\ntrace_off_ns={}\ntrace_off_translations={}\n",
        if state & 1 != 0 { "on" } else { "off" },
        state >> 1,
        SWITCHES.load(Ordering::Relaxed),
        off_ns(),
        OFF_TRANSLATIONS.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader of the status while windows open and close never sees `off` beside a count
    /// that includes a window still open (the count of windows closed is raised before each
    /// switch off is said, so a reading of `off` and N windows finds N closed after it).
    /// A race, so a chance: `lines` loading the state and the count apart failed it in
    /// about one run of three here; the one-word state cannot.
    #[test]
    fn the_status_says_a_switch_s_state_with_its_own_window_count() {
        static CLOSED: AtomicU64 = AtomicU64::new(0);
        set(false, 0);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut n = 0;
                while !done.load(Ordering::Acquire) {
                    n += 1;
                    set(true, n);
                    // Windows, and the time between them, last a while, as a guest's do.
                    let a_while = || (0..20).for_each(|_| std::hint::spin_loop());
                    a_while();
                    CLOSED.store(n, Ordering::Release);
                    set(false, n);
                    a_while();
                }
            });
            // Long enough for many readings to fall between two of the writer's stores.
            let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
            while std::time::Instant::now() < until {
                let text = lines();
                let field = |k: &str| {
                    (text.lines())
                        .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                        .expect("a field of the status")
                };
                let windows: u64 = field("trace_windows").parse().expect("a count");
                if field("trace") == "off" {
                    let closed = CLOSED.load(Ordering::Acquire);
                    if closed < windows {
                        done.store(true, Ordering::Release);
                        panic!("off with {windows} windows, {closed} closed");
                    }
                }
            }
            done.store(true, Ordering::Release);
        });
    }
}
