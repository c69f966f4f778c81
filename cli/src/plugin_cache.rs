//! Puts the embedded plugin where QEMU can `dlopen` it: once per plugin build, in the user's
//! cache directory, named by content hash so that different qemu-uftrace versions coexist
//! and a half-written file is never loaded (temp file + rename).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The file name for a plugin with these bytes, as `build.rs` computes it for the embedded one
/// (the tests hold the two to the same rule).
#[cfg(test)]
pub fn file_name(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(bytes);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("qemu-uftrace-plugin-{hex}.so")
}

/// qemu-uftrace's cache: `~/.cache/qemu-uftrace`, or a per-user directory under the temp
/// dir when there is no home.
pub fn cache_root() -> PathBuf {
    match directories::ProjectDirs::from("", "", "qemu-uftrace") {
        Some(dirs) => dirs.cache_dir().to_path_buf(),
        None => {
            // SAFETY: getuid cannot fail.
            let uid = unsafe { libc::getuid() };
            std::env::temp_dir().join(format!("qemu-uftrace-{uid}"))
        }
    }
}

/// Where cached plugins live.
pub fn cache_dir() -> PathBuf {
    cache_root().join("plugins")
}

/// Returns the path of the embedded plugin in the default cache, writing it if needed.
pub fn embedded_plugin() -> Result<PathBuf> {
    ensure_named(
        &cache_dir(),
        crate::embedded::PLUGIN_NAME,
        crate::embedded::PLUGIN_SO,
    )
}

/// Writes `bytes` into `dir` under its content name unless an identical file is there.
#[cfg(test)]
pub fn ensure_in(dir: &Path, bytes: &[u8]) -> Result<PathBuf> {
    ensure_named(dir, &file_name(bytes), bytes)
}

/// Writes `bytes` into `dir` as `name` (which names that content) unless it is there.
fn ensure_named(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    let path = dir.join(name);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the plugin cache {}", dir.display()))?;
    // A concurrent run may have renamed the same bytes in first: same content, no harm.
    crate::atomic_file::replace(&path, |w| w.write_all(bytes))
        .with_context(|| format!("cannot install the plugin in the cache {}", dir.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_once_and_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let p1 = ensure_in(dir.path(), b"plugin v1").unwrap();
        assert_eq!(std::fs::read(&p1).unwrap(), b"plugin v1");
        let mtime = std::fs::metadata(&p1).unwrap().modified().unwrap();
        let again = ensure_in(dir.path(), b"plugin v1").unwrap();
        assert_eq!(again, p1);
        assert_eq!(std::fs::metadata(&p1).unwrap().modified().unwrap(), mtime);
        let p2 = ensure_in(dir.path(), b"plugin v2").unwrap();
        assert_ne!(p1, p2);
        // No temp files left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn name_is_a_hash_prefix() {
        let n = file_name(b"");
        assert_eq!(n, "qemu-uftrace-plugin-e3b0c44298fc1c14.so");
    }

    #[test]
    fn embedded_plugin_is_present() {
        // Whatever the plugin crate builds (even a stub) is a shared object.
        assert!(crate::embedded::PLUGIN_SO.starts_with(b"\x7fELF"));
    }
}

#[cfg(test)]
mod embedded_name {
    #[test]
    fn the_build_names_the_plugin_by_its_content() {
        assert_eq!(
            super::file_name(crate::embedded::PLUGIN_SO),
            crate::embedded::PLUGIN_NAME
        );
    }
}
