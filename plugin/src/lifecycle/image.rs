//! Which process image this is (user mode): the first, whose files are at the top of the
//! trace directory, or a later one (`<pid>.<n>`, see `process`) with its own folder.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// This image's key (`None`: the first process, whose files are at the top).
static KEY: Mutex<Option<String>> = Mutex::new(None);

pub fn key() -> Option<String> {
    KEY.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

pub fn set_key(key: Option<String>) {
    *KEY.lock().unwrap_or_else(|e| e.into_inner()) = key;
}

/// Where this image's `plugin.*` files go.
pub fn files_dir(out: &Path) -> PathBuf {
    match key() {
        None => out.to_path_buf(),
        Some(k) => out.join("procs").join(k),
    }
}
