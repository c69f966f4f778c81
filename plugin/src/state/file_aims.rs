//! System mode, a Linux guest: the functions of guest files that `--stop-at`, `--start-at`,
//! `--trace-on-at` and `--trace-off-at` name as `PATH:FUNC` (`file_stop_at=`,
//! `file_start_at=`, `file_trace_on_at=`, `file_trace_off_at=`: each a file's guest path,
//! hex-encoded, and the function's offset in the file). A block starts one of them where
//! the space translating it maps that file at that offset (`state::spaces`, kept from the
//! process-map watch's `mmap_region` events, which come before any of the file's code
//! runs). Translation decides, once per block: QEMU shares the translation of a file's page
//! among every process that maps it (`CF_PCREL`), so the one decision holds wherever the
//! file runs, at whatever address each process has it.

use std::sync::OnceLock;

use super::config::{FileAim, FileAims};

static AIMS: OnceLock<FileAims> = OnceLock::new();

/// At install: the guest files' functions.
pub fn install(aims: FileAims) {
    if aims != FileAims::default() {
        let _ = AIMS.set(aims);
    }
}

/// Whether a `--trace-on-at` function of a guest file was given.
pub fn triggers_on() -> bool {
    AIMS.get().is_some_and(|a| !a.trace_on_at.is_empty())
}

/// Whether the block at `pc`, translated now, starts a guest file's `--stop-at`,
/// `--start-at`, `--trace-on-at` and `--trace-off-at` function, in that order (asked at
/// translation: `state::aims_at`). User-space blocks only, in a space the process-map watch
/// knows.
pub fn marks_at(pc: u64) -> [bool; 4] {
    let Some(aims) = AIMS.get() else {
        return [false; 4];
    };
    let space = super::spaces::translating();
    if space == 0 || pc >> 63 != 0 {
        return [false; 4];
    }
    super::spaces::with(|s| {
        let Some(at) = s.file_at(space, pc) else {
            return [false; 4];
        };
        let is = |list: &[FileAim]| {
            (list.iter()).any(|(path, offset)| s.file_id(path) == Some(at.0) && *offset == at.1)
        };
        [
            is(&aims.stop_at),
            is(&aims.start_at),
            is(&aims.trace_on_at),
            is(&aims.trace_off_at),
        ]
    })
}
