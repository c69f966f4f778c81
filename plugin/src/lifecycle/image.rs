//! Which process image this is (user mode): the first, whose files are at the top of the
//! trace directory, or a later one (`<pid>.<n>`, see `process`) with its own folder.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// This image's key (`None`: the first process, whose files are at the top).
static KEY: Mutex<Option<String>> = Mutex::new(None);

pub fn key() -> Option<String> {
    KEY.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

pub fn set_key(key: Option<String>) {
    *KEY.lock().unwrap_or_else(|e| e.into_inner()) = key;
}

/// This image's index: `N` of its key `PID.N` (0 for the first image and forked ones).
pub fn index() -> u32 {
    key()
        .and_then(|k| k.rsplit_once('.').and_then(|(_, n)| n.parse().ok()))
        .unwrap_or(0)
}

/// Where this image's `plugin.*` files go.
pub fn files_dir(out: &Path) -> PathBuf {
    match key() {
        None => out.to_path_buf(),
        Some(k) => out.join("procs").join(k),
    }
}

/// This image records nothing and writes no file (`state::taken::IMAGE_BYTES`: the size
/// cap had no room left for its files): a forked child that found so, or an exec'd image
/// started `untraced=on`.
static UNTRACED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn untraced() -> bool {
    UNTRACED.load(Ordering::Relaxed)
}

pub fn set_untraced() {
    UNTRACED.store(true, Ordering::Relaxed);
}

/// The time an exec'd image's clock starts from (0: none): the exec's, as the image before
/// wrote it into this image's `plugin.proc` (`process`).
static TIME_FLOOR: AtomicU64 = AtomicU64::new(0);

pub fn set_time_floor(ns: u64) {
    TIME_FLOOR.store(ns, Ordering::Relaxed);
}

/// No time of an exec'd image may be before its exec: uftrace gives a record the session of
/// its process's latest SESS line at or before its time, and the exec's SESS line has the
/// exec's time on the clock of the image before, which may have run ahead of the host
/// (`tsc::Interpolated`). For wall clocks only: an instruction count starts from 0 in each
/// image, and clamping it would flatten the whole image into one instant.
pub fn time_floor() -> u64 {
    TIME_FLOOR.load(Ordering::Relaxed)
}
