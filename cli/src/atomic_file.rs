//! Files replaced whole: written to a temporary file beside the target, synced, then renamed
//! over it, so that a reader (uftrace, QEMU's dlopen, a later run) sees the old file or the
//! new one, never half of one.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Replaces `path` with what `fill` writes.
pub fn replace(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    replace_with(path, fill, true)
}

/// [`replace`] without the sync: for a trace's files rewritten while it is assembled, which
/// the run wrote unsynced too (a sync costs ~10 ms on this VM's disk: over 1 s for the
/// streams of a snapshot's 100 tasks). Readers still see the old file or the new one.
pub fn replace_unsynced(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    replace_with(path, fill, false)
}

fn replace_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    sync: bool,
) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}-"))
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write into {}", dir.display()))?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        fill(&mut w)
            .and_then(|()| w.flush())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if sync {
        tmp.as_file()
            .sync_all()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    tmp.persist(path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("map");
        std::fs::write(&path, "old").unwrap();
        replace(&path, |w| w.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let failed = replace(&path, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["map"]);
    }
}
