//! Remembers which QEMU binaries passed the version check and loaded the plugin, so that
//! recording does not start QEMU twice every time (the probe costs a QEMU start-up, ~50 ms).
//!
//! A memo is keyed by the QEMU executable (canonical path, size, modification time) and the
//! plugin file (path, size, modification time): upgrading either makes a new key. It holds
//! the version text. `forget` drops it when a recording with it produced nothing.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

fn stamp(path: &Path) -> Option<(PathBuf, u64, SystemTime)> {
    let real = std::fs::canonicalize(path).ok()?;
    let meta = std::fs::metadata(&real).ok()?;
    Some((real, meta.len(), meta.modified().ok()?))
}

fn memo_path(qemu: &Path, plugin: &Path) -> Option<PathBuf> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (stamp(qemu)?, stamp(plugin)?).hash(&mut h);
    let dir = crate::plugin_cache::private_root().ok()?.join("probes");
    Some(dir.join(format!("{:016x}", h.finish())))
}

/// The version text of a QEMU that passed both checks with this plugin before.
pub fn recall(qemu: &Path, plugin: &Path) -> Option<String> {
    let text = std::fs::read_to_string(memo_path(qemu, plugin)?).ok()?;
    text.strip_prefix("ok ").map(|v| v.trim_end().to_string())
}

/// Notes that `qemu` (version `version`) passed both checks with `plugin`. Best effort: a
/// cache that cannot be written only means probing again next time.
pub fn remember(qemu: &Path, plugin: &Path, version: &str) {
    let Some(path) = memo_path(qemu, plugin) else {
        return;
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = crate::atomic_file::replace(&path, |w| writeln!(w, "ok {version}"));
}

/// Forgets a memo (the recording it allowed produced nothing).
pub fn forget(qemu: &Path, plugin: &Path) {
    if let Some(path) = memo_path(qemu, plugin) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_follows_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let (q, p) = (dir.path().join("qemu"), dir.path().join("plugin.so"));
        std::fs::write(&q, "qemu").unwrap();
        std::fs::write(&p, "plugin").unwrap();
        forget(&q, &p);
        assert_eq!(recall(&q, &p), None);
        remember(&q, &p, "10.0.2");
        assert_eq!(recall(&q, &p).as_deref(), Some("10.0.2"));
        // A rebuilt plugin (other size) is a new key.
        std::fs::write(&p, "plugin, rebuilt").unwrap();
        assert_eq!(recall(&q, &p), None);
        std::fs::write(&p, "plugin").unwrap();
        forget(&q, &p);
    }
}
