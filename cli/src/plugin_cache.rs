//! Puts an embedded plugin where QEMU can `dlopen` it: once per plugin build, in the user's
//! cache directory, named by content hash so that different qemu-uftrace versions coexist
//! and a half-written file is never loaded (temp file + rename).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The file name for a plugin with these bytes, as `build.rs` computes it for the embedded one
/// (the tests hold the two to the same rule).
#[cfg(test)]
pub fn file_name(api: u32, bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(bytes);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("qemu-uftrace-plugin-v{api}-{hex}.so")
}

/// qemu-uftrace's cache, and whether it sits in a directory other users share.
fn root() -> (PathBuf, bool) {
    match directories::ProjectDirs::from("", "", "qemu-uftrace") {
        Some(dirs) => (dirs.cache_dir().to_path_buf(), false),
        None => {
            // SAFETY: getuid cannot fail.
            let uid = unsafe { libc::getuid() };
            let dir = std::env::temp_dir().join(format!("qemu-uftrace-{uid}"));
            (dir, true)
        }
    }
}

/// qemu-uftrace's cache, ready for use: `~/.cache/qemu-uftrace`, or, with no home directory
/// at all, a per-user directory under the shared temp dir, created mode 0700 and refused when
/// it is not ours alone (QEMU loads the plugin found there).
pub fn private_root() -> Result<PathBuf> {
    let (dir, shared) = root();
    if shared {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(e)
                    .with_context(|| format!("cannot create the cache {}", dir.display()));
            }
            _ => check_private(&dir)?,
        }
    }
    Ok(dir)
}

/// Refuses a directory that is a symlink, belongs to another user or others may write to.
fn check_private(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(dir)
        .with_context(|| format!("cannot use the cache {}", dir.display()))?;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o022 != 0 {
        anyhow::bail!(
            "the cache {} is not a private directory of yours; remove it, or set HOME to a \
             directory of your own",
            dir.display()
        );
    }
    Ok(())
}

/// Returns the path of an embedded plugin in the default cache, writing it if needed.
pub fn embedded_plugin(plugin: &crate::embedded::EmbeddedPlugin) -> Result<PathBuf> {
    ensure_named(&private_root()?.join("plugins"), plugin.name, plugin.bytes)
}

/// Writes `bytes` into `dir` under its content name unless an identical file is there.
#[cfg(test)]
pub fn ensure_in(dir: &Path, bytes: &[u8]) -> Result<PathBuf> {
    ensure_named(dir, &file_name(4, bytes), bytes)
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
        .context("cannot install the plugin in the cache")?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_cache_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(check_private(&cache).is_ok());
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_private(&cache).unwrap_err().to_string();
        assert!(err.contains("not a private directory"), "{err}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&cache, &link).unwrap();
        assert!(check_private(&link).is_err());
    }

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
        let n = file_name(4, b"");
        assert_eq!(n, "qemu-uftrace-plugin-v4-e3b0c44298fc1c14.so");
    }

    #[test]
    fn embedded_plugins_are_present() {
        // Whatever the plugin crate builds (even a stub) is a shared object, one per API.
        let apis: Vec<u32> = crate::embedded::PLUGINS.iter().map(|p| p.api).collect();
        assert_eq!(apis, [4, 7]);
        for p in crate::embedded::PLUGINS {
            assert!(p.bytes.starts_with(b"\x7fELF"), "v{}", p.api);
        }
        assert_ne!(
            crate::embedded::PLUGINS[0].bytes,
            crate::embedded::PLUGINS[1].bytes
        );
    }
}

#[cfg(test)]
mod embedded_name {
    #[test]
    fn the_build_names_the_plugins_by_their_content() {
        for p in crate::embedded::PLUGINS {
            assert_eq!(super::file_name(p.api, p.bytes), p.name);
        }
    }
}
