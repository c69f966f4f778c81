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

/// The variable that names qemu-uftrace's cache, as `scripts/install-deps.sh` reads it.
pub const CACHE_VAR: &str = "QEMU_UFTRACE_CACHE";

/// What to do when the cache cannot be used (an unwritable or missing `HOME`).
const CACHE_WAY_OUT: &str = "set QEMU_UFTRACE_CACHE (or XDG_CACHE_HOME) to a directory you can \
                             write";

/// qemu-uftrace's cache, and whether it sits in a directory other users share:
/// `$QEMU_UFTRACE_CACHE`, else `$XDG_CACHE_HOME/qemu-uftrace`, else `~/.cache/qemu-uftrace`.
fn root() -> (PathBuf, bool) {
    if let Some(dir) = std::env::var_os(CACHE_VAR).filter(|d| !d.is_empty()) {
        // Absolute: QEMU is given the plugin's path, and may run elsewhere.
        let dir = PathBuf::from(dir);
        return (std::path::absolute(&dir).unwrap_or(dir), false);
    }
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

/// qemu-uftrace's cache (where scripts/install-deps.sh also puts what it installs), which
/// may not exist.
pub fn cache_root() -> PathBuf {
    root().0
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
                return Err(crate::errors::fail(
                    format!("cannot create the cache {}: {e}", dir.display()),
                    CACHE_WAY_OUT,
                ));
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
            "the cache {} is not a private directory of yours; remove it, or {CACHE_WAY_OUT}",
            dir.display()
        );
    }
    Ok(())
}

/// Returns the path of an embedded plugin in the default cache, writing it if needed; the
/// copies other builds of qemu-uftrace left there and nobody used for a while go.
pub fn embedded_plugin(plugin: &crate::embedded::EmbeddedPlugin) -> Result<PathBuf> {
    let dir = private_root()?.join("plugins");
    let path = ensure_named(&dir, plugin.name, plugin.bytes)?;
    static PRUNED: std::sync::Once = std::sync::Once::new();
    PRUNED.call_once(|| {
        let ours: Vec<&str> = crate::embedded::PLUGINS.iter().map(|p| p.name).collect();
        prune(&dir, &ours, std::time::SystemTime::now());
    });
    Ok(path)
}

/// The plugins of other builds kept however long unused: the most recently used ones.
const KEEP_RECENT: usize = 8;
/// Beyond those, a plugin unused for this long goes. A running recording's QEMU has loaded
/// its plugin, but a user-mode guest's exec loads it again: a day leaves long runs theirs.
const UNUSED_FOR: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Removes from `dir` the plugins (content-named, so one per build of qemu-uftrace) not in
/// `keep`, beyond the [`KEEP_RECENT`] last used, unused for [`UNUSED_FOR`]. Best effort: a
/// file that cannot be removed stays, and recording goes on.
fn prune(dir: &Path, keep: &[&str], now: std::time::SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut others: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("qemu-uftrace-plugin-v")
                && name.ends_with(".so")
                && !keep.contains(&name.as_ref())
        })
        .filter_map(|e| Some((last_used(&e.metadata().ok()?), e.path())))
        .collect();
    others.sort_by_key(|o| std::cmp::Reverse(o.0));
    for (used, path) in others.into_iter().skip(KEEP_RECENT) {
        if now.duration_since(used).is_ok_and(|d| d > UNUSED_FOR) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// When a plugin was last used: its access time, which [`mark_used`] sets (whatever the
/// file system's atime updates); never its modification time, which the probe memo keys on.
fn last_used(meta: &std::fs::Metadata) -> std::time::SystemTime {
    meta.accessed()
        .or_else(|_| meta.modified())
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// Notes that the plugin at `path` is used now (best effort).
fn mark_used(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        let now = std::time::SystemTime::now();
        let _ = f.set_times(std::fs::FileTimes::new().set_accessed(now));
    }
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
        mark_used(&path);
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        crate::errors::fail(
            format!("cannot create the plugin cache {}: {e}", dir.display()),
            CACHE_WAY_OUT,
        )
    })?;
    // A concurrent run may have renamed the same bytes in first: same content, no harm.
    crate::atomic_file::replace(&path, |w| w.write_all(bytes)).map_err(|e| {
        crate::errors::fail(
            format!("cannot install the plugin in {}: {e:#}", dir.display()),
            CACHE_WAY_OUT,
        )
    })?;
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

    /// The plugins of other builds go once unused for a day, beyond the last used few;
    /// ours and the recently used stay, whatever their number.
    #[test]
    fn old_plugins_of_other_builds_are_pruned() {
        use std::time::{Duration, SystemTime};
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let day = Duration::from_secs(24 * 3600);
        let make = |name: &str, age: Duration| {
            let p = dir.path().join(name);
            std::fs::write(&p, b"so").unwrap();
            let f = std::fs::File::open(&p).unwrap();
            f.set_times(std::fs::FileTimes::new().set_accessed(now - age))
                .unwrap();
        };
        // 12 builds used an hour apart, the newest a minute ago; ours is older than all.
        for i in 0..12u64 {
            make(
                &format!("qemu-uftrace-plugin-v4-{i:016x}.so"),
                Duration::from_secs(60) + day / 24 * (i as u32) + day * (i / 6) as u32,
            );
        }
        make("qemu-uftrace-plugin-v7-ours.so", day * 30);
        make("notes.txt", day * 30);
        prune(dir.path(), &["qemu-uftrace-plugin-v7-ours.so"], now);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // The 8 last used stay; of the 4 after them, those unused for over a day go.
        let mut want: Vec<String> = (0..8u64)
            .map(|i| format!("qemu-uftrace-plugin-v4-{i:016x}.so"))
            .collect();
        want.extend(["notes.txt".into(), "qemu-uftrace-plugin-v7-ours.so".into()]);
        want.sort();
        assert_eq!(left, want);
    }

    /// Using a cached plugin marks it used without changing its modification time (the
    /// probe memo's key).
    #[test]
    fn a_used_plugin_is_marked_as_such() {
        use std::time::{Duration, SystemTime};
        let dir = tempfile::tempdir().unwrap();
        let p = ensure_in(dir.path(), b"plugin").unwrap();
        let old = SystemTime::now() - Duration::from_secs(3 * 24 * 3600);
        std::fs::File::open(&p)
            .unwrap()
            .set_times(
                std::fs::FileTimes::new()
                    .set_accessed(old)
                    .set_modified(old),
            )
            .unwrap();
        ensure_in(dir.path(), b"plugin").unwrap();
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.modified().unwrap(), old);
        assert!(last_used(&meta) > old + Duration::from_secs(24 * 3600));
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
