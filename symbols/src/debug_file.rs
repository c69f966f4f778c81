//! Separate debug files, found where GDB looks for them: by build ID under
//! `usr/lib/debug/.build-id/xx/rest.debug`, then by `.gnu_debuglink` name beside the file, in
//! its `.debug/` directory and under `usr/lib/debug/<the file's directory>/`.
//!
//! Every `usr/lib/debug` is looked for under the host's root and under each directory above
//! the file that has one: a guest sysroot (`/usr/aarch64-linux-gnu`, a Yocto or Buildroot
//! staging tree) carries its own debug tree, and the file's place inside it is what names
//! it, so nobody has to tell us where the sysroot is. A candidate counts only when it is the
//! one the file names: the same build ID, or the debuglink's CRC-32 of its contents.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use object::Object;

use crate::file_data;

/// What a file says about its debug file (`.note.gnu.build-id`, `.gnu_debuglink`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct DebugRefs<'a> {
    pub build_id: Option<&'a [u8]>,
    /// The debug file's name and the CRC-32 of its contents.
    pub debuglink: Option<(&'a [u8], u32)>,
}

impl<'a> DebugRefs<'a> {
    pub fn of(file: &impl Object<'a>) -> Self {
        DebugRefs {
            build_id: file.build_id().ok().flatten().filter(|id| !id.is_empty()),
            debuglink: file.gnu_debuglink().ok().flatten(),
        }
    }

    fn is_empty(&self) -> bool {
        self.build_id.is_none() && self.debuglink.is_none()
    }
}

/// The debug file of `path`, mapped, when one is found that matches `refs`.
pub(crate) fn find(path: &Path, refs: &DebugRefs) -> Option<(PathBuf, Mmap)> {
    if refs.is_empty() {
        return None;
    }
    let real = std::fs::canonicalize(path).ok()?;
    let dir = real.parent()?;
    let roots = debug_roots(dir);
    if let Some(id) = refs.build_id {
        for root in &roots {
            let candidate = build_id_path(root, id);
            if let Some(found) = matching(&candidate, &tree_of(root), &real, |m| {
                Some(object::File::parse(&m[..]).ok()?.build_id().ok()? == Some(id))
            }) {
                return Some(found);
            }
        }
    }
    let (name, crc) = refs.debuglink?;
    let name = Path::new(std::ffi::OsStr::from_bytes(name));
    // A debuglink is a file name, not a path: anything else is not followed.
    if name.components().count() != 1 || name.file_name().is_none() {
        return None;
    }
    let mut candidates = vec![
        (dir.join(name), dir.to_path_buf()),
        (dir.join(".debug").join(name), dir.to_path_buf()),
    ];
    for root in &roots {
        if let Ok(inside) = dir.strip_prefix(root) {
            candidates.push((
                root.join("usr/lib/debug").join(inside).join(name),
                tree_of(root),
            ));
        }
    }
    candidates.into_iter().find_map(|(candidate, within)| {
        matching(&candidate, &within, &real, |m| {
            Some(crc32fast::hash(&m[..]) == crc)
        })
    })
}

/// Where `root`'s debug tree really is: a candidate found through it must lie there (a
/// link in a guest's sysroot does not lead to the host's files).
fn tree_of(root: &Path) -> PathBuf {
    let tree = root.join("usr/lib/debug");
    std::fs::canonicalize(&tree).unwrap_or(tree)
}

/// The roots whose `usr/lib/debug` may hold a debug file for a file in `dir`: each directory
/// above it (nearest first) that has one, then `/`.
fn debug_roots(dir: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = dir
        .ancestors()
        .filter(|a| a.parent().is_some() && a.join("usr/lib/debug").is_dir())
        .map(Path::to_path_buf)
        .collect();
    roots.push(PathBuf::from("/"));
    roots
}

/// `ROOT/usr/lib/debug/.build-id/xx/rest.debug` for build ID `xxrest…` (in hex).
fn build_id_path(root: &Path, id: &[u8]) -> PathBuf {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let (head, rest) = hex.split_at(2.min(hex.len()));
    root.join("usr/lib/debug/.build-id")
        .join(head)
        .join(format!("{rest}.debug"))
}

/// `candidate`, mapped, when it is a regular file inside `within` (a real path: whatever
/// links lead to it), other than `original`, and `matches`.
fn matching(
    candidate: &Path,
    within: &Path,
    original: &Path,
    matches: impl Fn(&Mmap) -> Option<bool>,
) -> Option<(PathBuf, Mmap)> {
    if !std::fs::metadata(candidate).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let real = std::fs::canonicalize(candidate).ok()?;
    if real == original || !real.starts_with(within) {
        return None;
    }
    let map = file_data::map(candidate).ok()?;
    matches(&map)
        .unwrap_or(false)
        .then(|| (candidate.to_path_buf(), map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_paths_split_the_first_byte() {
        assert_eq!(
            build_id_path(Path::new("/sys"), &[0xab, 0xcd, 0x01]),
            PathBuf::from("/sys/usr/lib/debug/.build-id/ab/cd01.debug")
        );
    }

    /// A debug file is taken only from inside the tree it was looked up in: a link in a
    /// sysroot's debug tree to a file outside it (one that matches) is not followed.
    #[test]
    fn links_out_of_a_debug_tree_are_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(tmp.path()).unwrap();
        let root = top.join("sysroot");
        std::fs::create_dir_all(root.join("lib")).unwrap();
        let file = root.join("lib/libx.so");
        std::fs::write(&file, b"the file").unwrap();
        let outside = top.join("outside.debug");
        std::fs::write(&outside, b"debug").unwrap();
        let crc = crc32fast::hash(b"debug");
        let refs = DebugRefs {
            build_id: None,
            debuglink: Some((b"libx.debug", crc)),
        };
        let linked = root.join("usr/lib/debug/lib/libx.debug");
        std::fs::create_dir_all(linked.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&outside, &linked).unwrap();
        assert!(find(&file, &refs).is_none());
        // The same file inside the tree is found.
        std::fs::remove_file(&linked).unwrap();
        std::fs::write(&linked, b"debug").unwrap();
        assert_eq!(find(&file, &refs).map(|(p, _)| p), Some(linked));
    }

    #[test]
    fn roots_are_the_directories_with_a_debug_tree_then_slash() {
        let tmp = tempfile::tempdir().unwrap();
        let sysroot = tmp.path().join("sysroot");
        std::fs::create_dir_all(sysroot.join("usr/lib/debug")).unwrap();
        std::fs::create_dir_all(sysroot.join("lib")).unwrap();
        let roots = debug_roots(&sysroot.join("lib"));
        assert_eq!(roots.first(), Some(&sysroot));
        assert_eq!(roots.last(), Some(&PathBuf::from("/")));
    }
}
