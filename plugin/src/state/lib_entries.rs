//! User mode: the function entries of the program's shared libraries and dynamic loader
//! (`lib_entries=FILE`, see `qemu_uftrace_engine::entries::Library`), placed where the guest
//! maps each file, so that their tail calls are decided at translation time as the
//! program's are (`state::entries`).
//!
//! The CLI writes the list while QEMU starts (it reads the libraries' symbols); a dynamic
//! program waits for it at its first instruction, in the loader, before any library is
//! mapped: then every jump is decided with it, however fast it was written. A library is
//! placed when its executable mapping returns, before any of its code can be translated.

use qemu_uftrace_engine::entries::Library;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

static LIBS: OnceLock<Vec<Library>> = OnceLock::new();
static PENDING: OnceLock<PathBuf> = OnceLock::new();

/// A library where the guest mapped it: its functions' span in the guest, its bias.
struct Placed {
    lo: u64,
    hi: u64,
    bias: u64,
    lib: usize,
}

static PLACED: RwLock<Vec<Placed>> = RwLock::new(Vec::new());

/// Bumped whenever functions are placed (a library here, the program's list or its load
/// bias in `state::entries`), so that answers kept per thread (`entries::is_longjmp`) are
/// asked again.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Says that functions were placed ([`GENERATION`]).
pub fn places_changed() {
    GENERATION.fetch_add(1, Ordering::Release);
}

/// The placements' count so far ([`GENERATION`]).
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The list will be in `path` once the CLI has written it.
pub fn load_later(path: PathBuf) {
    let _ = PENDING.set(path);
}

/// Waits (30 s at most) for the CLI's list; none when it was not asked for.
fn libs() -> &'static [Library] {
    LIBS.get_or_init(|| {
        let Some(path) = PENDING.get() else {
            return Vec::new();
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(path) {
                return Library::parse_all(&text).unwrap_or_else(|e| {
                    eprintln!(
                        "qemu-uftrace plugin: {}: {e}: the libraries' tail calls are not shown",
                        path.display()
                    );
                    Vec::new()
                });
            }
            if std::time::Instant::now() > deadline {
                eprintln!(
                    "qemu-uftrace plugin: {} never appeared: the libraries' tail calls are \
                     not shown",
                    path.display()
                );
                return Vec::new();
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    })
}

fn place(lib: usize, bias: u64) {
    let Some((lo, hi)) = libs()[lib].functions.span() else {
        return;
    };
    let (lo, hi) = (lo.wrapping_add(bias), hi.wrapping_add(bias));
    let mut placed = PLACED.write().unwrap_or_else(|e| e.into_inner());
    if placed.iter().any(|p| p.lib == lib && p.bias == bias) {
        return;
    }
    // A file mapped over another's place (after a dlclose) replaces it.
    placed.retain(|p| p.hi <= lo || hi <= p.lo);
    placed.push(Placed { lo, hi, bias, lib });
    places_changed();
}

/// The program's first instruction, in the dynamic loader QEMU placed at `base`
/// (`AT_BASE`, 0 for a static program): waits for the list, places the loader.
pub fn startup(base: u64) {
    if base == 0 {
        return;
    }
    if let Some(i) = libs().iter().position(|l| l.interp) {
        place(i, libs()[i].bias_of_base(base));
    }
}

/// The guest mapped descriptor `fd` executable at `start` from `offset`. The descriptor is
/// the host's own in user mode: its file is the one the CLI named by device and inode.
pub fn mapped(fd: i64, start: u64, offset: u64) {
    if LIBS.get().is_none_or(|l| l.is_empty()) {
        return;
    }
    let Ok(meta) = std::fs::metadata(format!("/proc/self/fd/{fd}")) else {
        return;
    };
    let libs = libs();
    if let Some(i) = (libs.iter()).position(|l| (l.dev, l.ino) == (meta.dev(), meta.ino())) {
        place(i, libs[i].bias_of_mapping(start, offset));
    }
}

/// Whether any library is placed (jumps are decoded at all).
pub fn any() -> bool {
    !PLACED.read().unwrap_or_else(|e| e.into_inner()).is_empty()
}

/// The library placed around `addr`: its functions and bias.
fn around<R>(
    addr: u64,
    f: impl FnOnce(&qemu_uftrace_engine::entries::Functions, u64, (u64, u64)) -> R,
) -> Option<R> {
    let placed = PLACED.read().unwrap_or_else(|e| e.into_inner());
    let p = placed.iter().find(|p| p.lo <= addr && addr < p.hi)?;
    Some(f(&LIBS.get()?[p.lib].functions, p.bias, (p.lo, p.hi)))
}

/// Whether a direct jump at `pc` to `target` enters a library's function (from inside the
/// library as `Functions::enters` decides, from elsewhere when `target` is an entry).
pub fn enters(pc: u64, target: u64) -> bool {
    around(target, |f, bias, (lo, hi)| {
        if lo <= pc && pc < hi {
            f.enters(pc.wrapping_sub(bias), target.wrapping_sub(bias))
        } else {
            f.entered_from_outside(target.wrapping_sub(bias))
        }
    })
    .unwrap_or(false)
}

/// Whether the library function starting at `func` is one uftrace's replay treats as a
/// longjmp (libc's `longjmp`).
pub fn is_longjmp(func: u64) -> bool {
    around(func, |f, bias, _| f.is_longjmp(func.wrapping_sub(bias))).unwrap_or(false)
}
