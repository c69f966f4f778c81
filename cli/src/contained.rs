//! Guest paths looked up inside a host directory (`--sysroot`, qemu-user's `-L`) as the
//! guest would see them with that directory as its `/`: an absolute symlink resolves inside
//! it and `..` stops at it, so no guest path (chosen by the guest, or by a Debian root's
//! absolute library symlinks) reaches a host file outside it.
//!
//! The kernel does the containment where it can (`openat2` with `RESOLVE_IN_ROOT`, Linux
//! 5.6); where it cannot (`ENOSYS` or `EPERM`: an older kernel, a seccomp filter), the same
//! walk is done here, one component and one symlink at a time.

use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Symlinks followed in one lookup before giving up, as the kernel's `MAXSYMLINKS`.
const MAX_LINKS: usize = 40;

/// How a lookup is contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`, else [`Method::Walk`] where the
    /// kernel has none.
    Kernel,
    /// The walk done here (what the kernel lacking `openat2` gets).
    Walk,
}

/// The host path of the regular file `guest` names inside `root`: `root`'s real path
/// followed by components none of which is a symlink (so opening it again by that path
/// reaches the same file).
pub fn file(root: &Path, guest: &[u8]) -> io::Result<PathBuf> {
    file_with(root, guest, Method::Kernel)
}

/// As [`file`], for anything `guest` names (a directory too).
pub fn path(root: &Path, guest: &[u8]) -> io::Result<PathBuf> {
    path_with(root, guest, Method::Kernel)
}

/// As [`path`], but by the guest's own file name where that reaches the same file from the
/// same (real) directory: a library behind its soname's relative link (`libz.so.1` →
/// `libz.so.1.2.13`) keeps the name it was mapped by.
pub fn path_by_its_name(root: &Path, guest: &[u8]) -> io::Result<PathBuf> {
    let real = path(root, guest)?;
    let named = guest
        .iter()
        .rposition(|&b| b == b'/')
        .and_then(|slash| {
            let (dir, name) = (&guest[..slash.max(1)], &guest[slash + 1..]);
            let dir = path(root, dir).ok()?;
            Some(dir.join(OsStr::from_bytes(name)))
        })
        .filter(|named| std::fs::canonicalize(named).is_ok_and(|c| c == real));
    Ok(named.unwrap_or(real))
}

/// [`file`] by `method`.
pub fn file_with(root: &Path, guest: &[u8], method: Method) -> io::Result<PathBuf> {
    let found = path_with(root, guest, method)?;
    if std::fs::symlink_metadata(&found)?.is_file() {
        Ok(found)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ))
    }
}

/// [`path`] by `method`.
pub fn path_with(root: &Path, guest: &[u8], method: Method) -> io::Result<PathBuf> {
    if guest.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in the path",
        ));
    }
    let root = std::fs::canonicalize(root)?;
    if method == Method::Kernel {
        match by_kernel(&root, guest) {
            // A seccomp filter that does not know `openat2` may say EPERM instead; the walk
            // meets a real EPERM again.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {}
            found => return found,
        }
    }
    walk(&root, guest)
}

/// `openat2` inside `root` (a real path), then the opened file's real path from
/// `/proc/self/fd`, which the kernel keeps inside `root`; checked all the same.
fn by_kernel(root: &Path, guest: &[u8]) -> io::Result<PathBuf> {
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // Relative to the root either way; a relative one is what the kernel documents.
    let rel = match guest.iter().position(|&b| b != b'/') {
        Some(i) => &guest[i..],
        None => b".".as_slice(),
    };
    let fd = rustix::fs::openat2(
        dir.as_fd(),
        OsStr::from_bytes(rel),
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )?;
    let real = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        rustix::fd::AsRawFd::as_raw_fd(&fd)
    ));
    match real {
        Ok(real) if real.starts_with(root) => Ok(real),
        Ok(real) => Err(io::Error::other(format!(
            "{} resolved outside {}",
            real.display(),
            root.display()
        ))),
        // No /proc: the walk gives the path (the kernel has shown the file is inside).
        Err(_) => walk(root, guest),
    }
}

/// The lookup done here: `root` (a real path) is `/`; each component is looked at without
/// following it, a symlink's target is walked in its place (from `root` when absolute), and
/// `..` never goes above `root`.
fn walk(root: &Path, guest: &[u8]) -> io::Result<PathBuf> {
    // Still to walk, last component first.
    let mut todo: Vec<Vec<u8>> = Vec::new();
    push_components(&mut todo, guest);
    let mut at = root.to_path_buf();
    let mut depth = 0usize;
    let mut links = 0usize;
    while let Some(name) = todo.pop() {
        match name.as_slice() {
            b"" | b"." => continue,
            b".." => {
                if depth > 0 {
                    at.pop();
                    depth -= 1;
                }
                continue;
            }
            _ => {}
        }
        let next = at.join(OsStr::from_bytes(&name));
        let meta = std::fs::symlink_metadata(&next)?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            let target = std::fs::read_link(&next)?;
            let target = target.as_os_str().as_bytes();
            if target.starts_with(b"/") {
                at = root.to_path_buf();
                depth = 0;
            }
            push_components(&mut todo, target);
            continue;
        }
        if !todo.is_empty() && !meta.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        at = next;
        depth += 1;
    }
    Ok(at)
}

/// Pushes `path`'s components onto `todo` so that its first is popped first.
fn push_components(todo: &mut Vec<Vec<u8>>, path: &[u8]) {
    todo.extend(path.split(|&b| b == b'/').rev().map(<[u8]>::to_vec));
}

/// Whether a guest path is absolute and plain: no empty, `.` or `..` component (a kernel
/// never makes one; a forged dentry chain or archive member name does).
pub fn is_plain(guest: &str) -> bool {
    guest.strip_prefix('/').is_some_and(|rest| {
        rest.split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
    })
}

/// `path` relative to `/` when it is plain ([`is_plain`]), as a relative host path.
pub fn plain_relative(guest: &str) -> Option<&Path> {
    let rel = Path::new(guest.strip_prefix('/')?);
    (is_plain(guest) && rel.components().all(|c| matches!(c, Component::Normal(_)))).then_some(rel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A root whose library links are absolute (as Debian's), one of them to a file that
    /// also exists, with other contents, outside the root; a `..` chain; a link loop.
    fn crafted() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        for d in ["lib", "usr/lib", "etc"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("usr/lib/libc.so.6"), b"inside").unwrap();
        std::fs::write(outside.join("libc.so.6"), b"outside").unwrap();
        std::fs::write(outside.join("secret"), b"outside").unwrap();
        // The path the absolute link names exists on the host too (outside the root).
        let host_target = outside.join("libc.so.6");
        symlink("/usr/lib/libc.so.6", root.join("lib/libc.so.6")).unwrap();
        symlink(&host_target, root.join("lib/host.so")).unwrap();
        symlink("../../../../../../../..", root.join("etc/up")).unwrap();
        symlink("loop", root.join("etc/loop")).unwrap();
        let outside = std::fs::canonicalize(&outside).unwrap();
        (tmp, std::fs::canonicalize(&root).unwrap(), outside)
    }

    fn both(check: impl Fn(Method)) {
        check(Method::Kernel);
        check(Method::Walk);
    }

    #[test]
    fn absolute_links_resolve_inside_the_root() {
        let (_tmp, root, _) = crafted();
        both(|m| {
            let found = file_with(&root, b"/lib/libc.so.6", m).unwrap();
            assert_eq!(found, root.join("usr/lib/libc.so.6"), "{m:?}");
            assert_eq!(std::fs::read(&found).unwrap(), b"inside");
        });
    }

    #[test]
    fn nothing_outside_the_root_is_reached() {
        let (_tmp, root, outside) = crafted();
        let rel_outside = outside.strip_prefix("/").unwrap().to_str().unwrap();
        both(|m| {
            // An absolute link to a host path: that path inside the root, not there.
            assert!(file_with(&root, b"/lib/host.so", m).is_err(), "{m:?}");
            // `..` chains, direct and through a link, stop at the root.
            for guest in [
                format!("/../../../../../../../../{rel_outside}/secret"),
                format!("/etc/up/{rel_outside}/secret"),
                format!("../{rel_outside}/secret"),
            ] {
                let got = file_with(&root, guest.as_bytes(), m);
                assert!(got.is_err(), "{m:?} {guest}: {got:?}");
            }
            assert_eq!(
                file_with(&root, b"/etc/up/../usr/lib/libc.so.6", m).unwrap(),
                root.join("usr/lib/libc.so.6"),
                "{m:?}"
            );
            assert_eq!(path_with(&root, b"/etc/up", m).unwrap(), root, "{m:?}");
            let looped = file_with(&root, b"/etc/loop", m).unwrap_err();
            assert_eq!(looped.raw_os_error(), Some(libc::ELOOP), "{m:?}");
            assert!(file_with(&root, b"/usr/lib", m).is_err(), "{m:?}");
            assert!(
                file_with(&root, b"/usr/lib/libc.so.6/x", m).is_err(),
                "{m:?}"
            );
            assert!(file_with(&root, b"/lib/\0x", m).is_err(), "{m:?}");
            assert!(file_with(&root, b"/proc/self/root/etc/passwd", m).is_err());
        });
    }

    #[test]
    fn a_relative_link_keeps_its_name() {
        let (_tmp, root, _) = crafted();
        std::os::unix::fs::symlink("libc.so.6", root.join("usr/lib/libc.so")).unwrap();
        assert_eq!(
            path_by_its_name(&root, b"/usr/lib/libc.so").unwrap(),
            root.join("usr/lib/libc.so")
        );
        // An absolute link would leave the root when followed by name: its target it is.
        assert_eq!(
            path_by_its_name(&root, b"/lib/libc.so.6").unwrap(),
            root.join("usr/lib/libc.so.6")
        );
    }

    #[test]
    fn plain_paths() {
        assert!(is_plain("/lib/libc.so.6"));
        for bad in ["lib/x", "/", "/a//b", "/a/./b", "/a/../b", "/..", "/a/"] {
            assert!(!is_plain(bad), "{bad}");
            assert!(plain_relative(bad).is_none(), "{bad}");
        }
        assert_eq!(plain_relative("/a/b"), Some(Path::new("a/b")));
    }
}
