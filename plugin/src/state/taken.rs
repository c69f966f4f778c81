//! What the size cap (`max_size=`) has given out: the bytes of records written and of the
//! files beside them (stack cookies), counted together.
//!
//! User mode: every process image of the guest takes from one count, kept in a file of the
//! staging directory (`max_size_file=`, made by `record`) that each maps shared. A forked
//! child inherits the mapping, and an exec'd image maps the file again, so that a guest
//! forking in a loop cannot write the cap once per process: `--max-size` bounds the whole
//! trace. Without the file (system mode: one process), the count is this image's own.
//!
//! Each process image after the first takes [`IMAGE_BYTES`] for its files (`procs/<key>/`)
//! before it runs; one the cap has no room for runs untraced, writes nothing, and is
//! counted in the file's second word, which `record` reads at the end: a guest forking in a
//! loop cannot fill the disk with small files either.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The count, shared with clones of it (and, when mapped, with the other images).
#[derive(Clone)]
pub struct Taken(Arc<Cell>);

enum Cell {
    /// Bytes, untraced images.
    Own(AtomicU64, AtomicU64),
    /// The file's first 16 bytes mapped shared (bytes, untraced images); page-aligned, so a
    /// `u64` may sit there.
    Shared(memmap2::MmapRaw),
}

/// What a process image's own files take on disk, counted against the cap: its directory
/// and its four `plugin.*` files, a 4 KiB block each on a usual file system.
pub const IMAGE_BYTES: u64 = 20 << 10;

/// The count file's length: the bytes given out, then the images that ran untraced.
pub const FILE_BYTES: u64 = 16;

impl Taken {
    /// A count of this image's own, from 0.
    pub fn own() -> Taken {
        Taken(Arc::new(Cell::Own(AtomicU64::new(0), AtomicU64::new(0))))
    }

    /// The count every image of the guest shares, in `file` (made by `record`,
    /// [`FILE_BYTES`] long, all 0 at the start).
    pub fn shared(file: &Path) -> std::io::Result<Taken> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(file)?;
        // Mapped past the file's end, the count would fault when touched.
        if f.metadata()?.len() < FILE_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("shorter than {FILE_BYTES} bytes"),
            ));
        }
        let map = memmap2::MmapOptions::new()
            .len(FILE_BYTES as usize)
            .map_raw(&f)?;
        Ok(Taken(Arc::new(Cell::Shared(map))))
    }

    fn count(&self) -> &AtomicU64 {
        self.word(0)
    }

    /// Word `i` (0: bytes, 1: untraced images).
    fn word(&self, i: usize) -> &AtomicU64 {
        match &*self.0 {
            Cell::Own(c, _) if i == 0 => c,
            Cell::Own(_, u) => u,
            // SAFETY: the mapping is page-aligned (so aligned for a u64), FILE_BYTES long,
            // and lives as long as `self`; every process touches it only through atomics.
            Cell::Shared(m) => unsafe {
                AtomicU64::from_ptr(m.as_mut_ptr().cast::<u64>().add(i.min(1)))
            },
        }
    }

    /// A process image about to start takes [`IMAGE_BYTES`] for its files within `max`;
    /// false, counted as an image that runs untraced, where they do not fit.
    pub fn take_image(&self, max: Option<u64>) -> bool {
        let Some(max) = max else {
            return true;
        };
        let fits = self.take_whole(max, IMAGE_BYTES);
        if !fits {
            self.word(1).fetch_add(1, Ordering::SeqCst);
        }
        fits
    }

    /// The bytes given out so far.
    #[cfg(test)]
    fn now(&self) -> u64 {
        self.count().load(Ordering::SeqCst)
    }

    /// Takes room for up to `want` bytes of `unit`-byte records within `max`: the whole
    /// records that fit, and whether `want` reached the cap (then nothing more fits).
    pub fn take_records(&self, max: u64, want: usize, unit: usize) -> (usize, bool) {
        let mut got = (0, false);
        let _ = self
            .count()
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                let room = max.saturating_sub(used) as usize / unit * unit;
                got = (want.min(room), want >= room);
                Some(used.saturating_add(got.0 as u64))
            });
        got
    }

    /// Takes `bytes` within `max` where they fit whole; false, nothing taken, where not.
    pub fn take_whole(&self, max: u64, bytes: u64) -> bool {
        self.count()
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                (used.saturating_add(bytes) <= max).then_some(used.saturating_add(bytes))
            })
            .is_ok()
    }

    /// Gives back `bytes` taken but not written (an error stopped the writer).
    pub fn give_back(&self, bytes: u64) {
        let _ = self
            .count()
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_taken_whole_up_to_the_cap() {
        let t = Taken::own();
        assert_eq!(t.take_records(100, 48, 16), (48, false));
        assert_eq!(t.take_records(100, 64, 16), (48, true));
        assert_eq!(t.take_records(100, 16, 16), (0, true));
        assert_eq!(t.now(), 96);
        assert!(t.take_whole(100, 4));
        assert!(!t.take_whole(100, 1));
    }

    /// Two mappings of one file, as a forked child's and an exec'd image's: one count.
    #[test]
    fn images_mapping_one_file_share_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("taken");
        std::fs::write(&file, [0u8; 16]).unwrap();
        let (a, b) = (Taken::shared(&file).unwrap(), Taken::shared(&file).unwrap());
        assert_eq!(a.take_records(64, 48, 16), (48, false));
        assert_eq!(b.take_records(64, 48, 16), (16, true));
        assert!(!a.take_whole(64, 1));
        b.give_back(16);
        assert_eq!(a.now(), 48);
        // An image's files where they fit; one that does not fit is counted.
        assert!(!b.take_image(Some(64)));
        assert!(a.take_image(Some(48 + IMAGE_BYTES)));
        assert!(a.take_image(None));
        let words = std::fs::read(&file).unwrap();
        assert_eq!(words[..8], (48 + IMAGE_BYTES).to_ne_bytes());
        assert_eq!(words[8..], 1u64.to_ne_bytes());
        assert!(Taken::shared(&dir.path().join("absent")).is_err());
        std::fs::write(&file, [0u8; 8]).unwrap();
        assert!(Taken::shared(&file).is_err());
    }
}
