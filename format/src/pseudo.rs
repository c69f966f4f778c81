//! Pseudo-functions: what the engine shows as a function that is not one, such as an
//! exception entry (`[irq]`, `[svc]` …) or a user-mode signal delivery (`[SIGALRM]` …)
//! under which the handler's calls nest.
//!
//! They live at fixed addresses in the last page of the 48-bit record address space, which
//! no guest runs code in (for a kernel it is the top page of the virtual address space, for
//! a user program the page above its stack), and are named by a module of their own: a map
//! line covering the page and a `.sym` file listing the names.

/// Where the pseudo-functions start (48-bit, as records hold addresses).
pub const BASE: u64 = 0xffff_ffff_f000;
/// The module name their map line and `.sym` file carry (a map path cannot have brackets).
pub const MODULE: &str = "qemu-uftrace-exceptions";
/// Bytes between two pseudo-functions.
const STRIDE: u64 = 0x10;

/// The exception entries' pseudo-functions, by index (the first indexes).
pub const NAMES: &[&str] = &[
    "[irq]",
    "[fiq]",
    "[svc]",
    "[hvc]",
    "[smc]",
    "[data-abort]",
    "[insn-abort]",
    "[brk]",
    "[serror]",
    "[exception]",
    // x86's exceptions, named as Linux names their handlers (`exc_page_fault` …); software
    // interrupts other than a system call's are `[int]`.
    "[page-fault]",
    "[general-protection]",
    "[invalid-op]",
    "[int3]",
    "[debug]",
    "[nmi]",
    "[divide-error]",
    "[double-fault]",
    "[machine-check]",
    "[device-not-available]",
    "[int]",
];

/// Index of the first signal's pseudo-function: signal `n` (1 to [`MAX_SIGNAL`]) is shown
/// as pseudo-function `SIGNAL_BASE + n`.
pub const SIGNAL_BASE: u8 = 32;
/// Linux's highest signal number (`_NSIG`).
pub const MAX_SIGNAL: u8 = 64;

/// Linux's names of signals 1 to 31 (the same numbers on aarch64, riscv64 and x86_64);
/// 32 and up are real-time signals, shown by number.
const SIGNAL_NAMES: [&str; 31] = [
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];

/// The address of pseudo-function `index` (an index into [`NAMES`], or a signal's).
pub const fn addr(index: u8) -> u64 {
    BASE + index as u64 * STRIDE
}

/// The pseudo-function of a delivery of signal `signo` (out-of-range numbers share one).
pub const fn signal_addr(signo: u64) -> u64 {
    let n = if signo >= 1 && signo <= MAX_SIGNAL as u64 {
        signo as u8
    } else {
        0
    };
    addr(SIGNAL_BASE + n)
}

/// Whether a record address is a signal delivery's pseudo-function.
pub const fn is_signal(addr: u64) -> bool {
    let a = crate::addr48(addr);
    a >= signal_addr(0) && a <= signal_addr(MAX_SIGNAL as u64)
}

/// `[SIGALRM]`, `[SIG34]`, `[signal]` (a number out of range).
fn signal_name(signo: u8) -> String {
    match signo {
        1..=31 => format!("[{}]", SIGNAL_NAMES[signo as usize - 1]),
        32..=MAX_SIGNAL => format!("[SIG{signo}]"),
        _ => "[signal]".to_string(),
    }
}

/// The bytes the pseudo module's map line covers.
pub const fn size() -> u64 {
    0x1000
}

/// Whether a record address is a pseudo-function's.
pub const fn is_pseudo(addr: u64) -> bool {
    crate::addr48(addr) >= BASE
}

/// `(offset, name)` of each pseudo-function, for the module's `.sym` file, by offset.
pub fn symbols() -> impl Iterator<Item = (u64, String)> {
    let exceptions = NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| (addr(i as u8) - BASE, name.to_string()));
    let signals = (0..=MAX_SIGNAL).map(|n| (signal_addr(n as u64) - BASE, signal_name(n)));
    exceptions.chain(signals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_page() {
        assert!(addr(NAMES.len() as u8) - BASE <= size());
        assert!(is_pseudo(addr(0)) && !is_pseudo(BASE - 1));
        assert!(is_pseudo(0xffff_ffff_ffff_f000));
        assert!((NAMES.len() as u8) < SIGNAL_BASE);
        assert!(signal_addr(MAX_SIGNAL as u64) + STRIDE - BASE <= size());
    }

    #[test]
    fn signals_have_their_linux_names() {
        let names: std::collections::HashMap<u64, String> = symbols().collect();
        let name = |signo| names[&(signal_addr(signo) - BASE)].as_str();
        assert_eq!(name(14), "[SIGALRM]");
        assert_eq!(name(10), "[SIGUSR1]");
        assert_eq!(name(31), "[SIGSYS]");
        assert_eq!(name(34), "[SIG34]");
        assert_eq!(name(0), "[signal]");
        assert_eq!(signal_addr(99), signal_addr(0));
        assert!(is_signal(signal_addr(14)) && !is_signal(addr(0)) && is_pseudo(signal_addr(64)));
        let mut offsets: Vec<u64> = symbols().map(|(o, _)| o).collect();
        let n = offsets.len();
        offsets.dedup();
        assert_eq!(offsets.len(), n, "one name per pseudo-function");
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "sorted for the .sym file"
        );
    }
}
