//! Remembers which QEMU binaries passed the version check and loaded the plugin, so that
//! recording does not start QEMU twice every time (the probe costs a QEMU start-up, ~50 ms).
//!
//! A memo is keyed by the QEMU executable (canonical path, size, modification time) and the
//! plugin files it may load (path, size, modification time): upgrading any makes a new key.
//! It holds the version text and the probe's answer. `forget` drops it when a recording with
//! it produced nothing.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

fn stamp(path: &Path) -> Option<(PathBuf, u64, SystemTime)> {
    let real = std::fs::canonicalize(path).ok()?;
    let meta = std::fs::metadata(&real).ok()?;
    Some((real, meta.len(), meta.modified().ok()?))
}

fn memo_path(qemu: &Path, plugins: &[PathBuf]) -> Option<PathBuf> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    stamp(qemu)?.hash(&mut h);
    for p in plugins {
        stamp(p)?.hash(&mut h);
    }
    let dir = crate::plugin_cache::private_root().ok()?.join("probes");
    Some(dir.join(format!("{:016x}", h.finish())))
}

/// The version text and probe answer of a QEMU that passed both checks with these plugins.
pub fn recall(qemu: &Path, plugins: &[PathBuf]) -> Option<(String, String)> {
    let text = std::fs::read_to_string(memo_path(qemu, plugins)?).ok()?;
    let (version, probe) = text.strip_prefix("ok ")?.split_once('\n')?;
    Some((version.to_string(), probe.trim_end().to_string()))
}

/// Notes that `qemu` (version `version`) passed both checks with `plugins`, answering
/// `probe`. Best effort: a cache that cannot be written only means probing again next time.
pub fn remember(qemu: &Path, plugins: &[PathBuf], version: &str, probe: &str) {
    let Some(path) = memo_path(qemu, plugins) else {
        return;
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = crate::atomic_file::replace(&path, |w| writeln!(w, "ok {version}\n{probe}"));
}

/// Forgets a memo (the recording it allowed produced nothing).
pub fn forget(qemu: &Path, plugins: &[PathBuf]) {
    if let Some(path) = memo_path(qemu, plugins) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_follows_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let (q, p) = (dir.path().join("qemu"), dir.path().join("plugin.so"));
        let p7 = dir.path().join("plugin7.so");
        std::fs::write(&q, "qemu").unwrap();
        std::fs::write(&p, "plugin").unwrap();
        std::fs::write(&p7, "plugin 7").unwrap();
        let both = [p.clone(), p7.clone()];
        forget(&q, &both);
        assert_eq!(recall(&q, &both), None);
        remember(&q, &both, "10.0.2", "qemu-uftrace-probe target=aarch64");
        assert_eq!(
            recall(&q, &both),
            Some(("10.0.2".into(), "qemu-uftrace-probe target=aarch64".into()))
        );
        assert_eq!(recall(&q, &both[..1]), None);
        // A rebuilt plugin (other size) is a new key.
        std::fs::write(&p7, "plugin 7, rebuilt").unwrap();
        assert_eq!(recall(&q, &both), None);
        forget(&q, &both);
    }
}
