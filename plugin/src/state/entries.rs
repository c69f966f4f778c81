//! Function entries from the CLI (see `qemu_uftrace_engine::entries`): which direct jumps
//! enter another function. Asked only at translation time.
//!
//! The list comes as `entries=FILE`, written before QEMU starts (user mode, bare-metal
//! guests: read at install), or as `entries_file=FILE`, written by the CLI while QEMU starts
//! (a kernel's symbols take a few hundred milliseconds to read): waited for at the first
//! translation, so that every jump is decided with it.

use qemu_uftrace_engine::entries::Functions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static FUNCTIONS: OnceLock<Functions> = OnceLock::new();
/// The file the CLI is still writing (`entries_file=`).
static PENDING: OnceLock<PathBuf> = OnceLock::new();

/// What to subtract from a guest address to compare it with the list's (user mode: a PIE
/// program's load bias); `UNKNOWN` until the program's entry point is known.
static BIAS: AtomicU64 = AtomicU64::new(UNKNOWN);
const UNKNOWN: u64 = u64::MAX;

/// A randomised kernel's address in the symbol file's space, where the list is (`kaslr`).
#[inline(always)]
fn kernel(addr: u64) -> u64 {
    super::kaslr::to_symbols(addr)
}

fn parse(path: &Path, text: &str) -> Result<Functions, String> {
    Functions::parse(text).map_err(|e| format!("{}: {e}", path.display()))
}

fn set(functions: Functions) {
    if functions.rebase.is_none() {
        BIAS.store(0, Ordering::Relaxed);
    }
    let _ = FUNCTIONS.set(functions);
    super::lib_entries::places_changed();
}

/// Reads the CLI's list; an unreadable or malformed file is one line for QEMU to print.
pub fn load(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read function entries {}: {e}", path.display()))?;
    set(parse(path, &text)?);
    Ok(())
}

/// The list will be in `path` once the CLI has written it.
pub fn load_later(path: PathBuf) {
    let _ = PENDING.set(path);
}

/// User mode: the program's entry point (`AT_ENTRY`), which places a PIE's functions.
pub fn program_entry(at_entry: u64) {
    if let Some(link) = FUNCTIONS.get().and_then(|f| f.rebase) {
        BIAS.store(at_entry.wrapping_sub(link), Ordering::Relaxed);
        super::lib_entries::places_changed();
    }
}

/// Whether the list is there to ask (a cheap test before decoding jumps). A list the CLI is
/// still writing is waited for at the first translation: the blocks translated before it
/// came (firmware, a kernel's code at its physical address) would otherwise decide their
/// jumps by how fast it was written, and the same boot would show different trees.
pub fn active() -> bool {
    if let Some(f) = FUNCTIONS.get() {
        return !f.is_empty() || super::lib_entries::any();
    }
    if let Some(path) = PENDING.get() {
        wait_for(path);
    }
    FUNCTIONS.get().is_some_and(|f| !f.is_empty()) || super::lib_entries::any()
}

/// Waits (30 s at most) for the CLI to finish writing the list.
fn wait_for(path: &Path) {
    static WAITED: OnceLock<()> = OnceLock::new();
    WAITED.get_or_init(|| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(path) {
                set_or_warn(path, &text);
                return;
            }
            if std::time::Instant::now() > deadline {
                eprintln!(
                    "qemu-uftrace plugin: {} never appeared: functions entered by a jump \
                     (tail calls) are not shown as calls",
                    path.display()
                );
                set(Functions::default());
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    });
}

fn set_or_warn(path: &Path, text: &str) {
    match parse(path, text) {
        Ok(f) => set(f),
        Err(e) => {
            eprintln!("qemu-uftrace plugin: {e}: tail calls are not shown as calls");
            set(Functions::default());
        }
    }
}

/// Whether the function starting at `func` is one uftrace's replay treats as a longjmp
/// (`hot::Engine::set_longjmp_test`). Asked for every frame a return closes beyond the
/// first, which every tail call's return does (x86_64 sqlite: about a million times): the
/// answers are kept in a small direct-mapped table shared by all threads, sparing two
/// binary searches and the libraries' lock (a thread-local table cost a TLS lookup and a
/// RefCell each time, more than the search it spared). A slot is one word, so that threads
/// racing on it see a whole entry or none: the address's low 48 bits, the libraries'
/// placement generation and the answer. An address of more bits, or a generation past
/// what fits, goes uncached.
pub fn is_longjmp(func: u64) -> bool {
    const SLOTS: usize = 256;
    const GENERATIONS: u64 = 1 << 15;
    #[allow(clippy::declare_interior_mutable_const)] // only to fill the array below
    const EMPTY: AtomicU64 = AtomicU64::new(u64::MAX);
    static KNOWN: [AtomicU64; SLOTS] = [EMPTY; SLOTS];
    let generation = super::lib_entries::generation();
    // 48-bit addresses, sign-extended: user space and canonical kernel addresses.
    let low = func & 0xffff_ffff_ffff;
    if ((low << 16) as i64 >> 16) as u64 != func || generation >= GENERATIONS - 1 {
        return is_longjmp_uncached(func);
    }
    let key = low << 16 | generation << 1;
    let slot = &KNOWN[(func as usize >> 2 ^ func as usize >> 12) % SLOTS];
    let known = slot.load(Ordering::Relaxed);
    if known & !1 == key {
        return known & 1 != 0;
    }
    let answer = is_longjmp_uncached(func);
    slot.store(key | answer as u64, Ordering::Relaxed);
    answer
}

fn is_longjmp_uncached(func: u64) -> bool {
    let bias = BIAS.load(Ordering::Relaxed);
    (match FUNCTIONS.get() {
        Some(f) if bias != UNKNOWN => f.is_longjmp(kernel(func).wrapping_sub(bias)),
        _ => false,
    }) || super::lib_entries::is_longjmp(func)
}

/// Whether a direct jump at `pc` to `target` enters another function.
pub fn enters(pc: u64, target: u64) -> bool {
    let bias = BIAS.load(Ordering::Relaxed);
    (match FUNCTIONS.get() {
        Some(f) if bias != UNKNOWN => f.enters(
            kernel(pc).wrapping_sub(bias),
            kernel(target).wrapping_sub(bias),
        ),
        _ => false,
    }) || super::lib_entries::enters(pc, target)
}

/// Whether a function starts at `addr` (a jump through a register may enter it there).
pub fn is_entry(addr: u64) -> bool {
    let bias = BIAS.load(Ordering::Relaxed);
    match FUNCTIONS.get() {
        Some(f) if bias != UNKNOWN => f.is_entry(kernel(addr).wrapping_sub(bias)),
        _ => false,
    }
}

/// Whether no function holds `pc` (a trampoline on the stack).
pub fn outside_functions(pc: u64) -> bool {
    let bias = BIAS.load(Ordering::Relaxed);
    match FUNCTIONS.get() {
        Some(f) if bias != UNKNOWN => f.outside_functions(kernel(pc).wrapping_sub(bias)),
        _ => false,
    }
}

/// Whether `pc` lies in a PLT entry, whose jump on is its call's.
pub fn in_plt(pc: u64) -> bool {
    let bias = BIAS.load(Ordering::Relaxed);
    match FUNCTIONS.get() {
        Some(f) if bias != UNKNOWN => f.in_plt(pc.wrapping_sub(bias)),
        _ => false,
    }
}

/// Whether `a` and `b` lie in one function (a switch table's jump stays in it).
pub fn same_function(a: u64, b: u64) -> bool {
    let bias = BIAS.load(Ordering::Relaxed);
    match FUNCTIONS.get() {
        Some(f) if bias != UNKNOWN => {
            f.same_function(kernel(a).wrapping_sub(bias), kernel(b).wrapping_sub(bias))
        }
        _ => false,
    }
}
