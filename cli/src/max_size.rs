//! `record --max-size SIZE[,exit]`: how much trace data the plugin may write before it
//! stops writing (and, with `exit`, stops QEMU), marking the trace incomplete.
//!
//! Sizes are read as QEMU reads `-m` on the same command line: a number, with an optional
//! fraction, and a suffix `K`, `M`, `G` or `T` in powers of 1024 (`B` or none: bytes);
//! `KiB`/`MiB`/… and `KB`/`MB`/… (powers of 1000) are taken too.

use std::path::Path;

/// What `--max-size` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaxSize {
    /// `--max-size none`: no cap at all, not even the default one.
    Off,
    Cap(Cap),
}

/// A cap on the trace's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cap {
    pub bytes: u64,
    /// Stop QEMU when it is reached (else QEMU runs on, unrecorded).
    pub exit: bool,
    /// How it came about, for messages: `--max-size 500M`, or the default's reason.
    pub origin: String,
}

/// Parses `SIZE[,exit]` or `none` (clap's value parser).
pub fn parse(text: &str) -> Result<MaxSize, String> {
    if text == "none" {
        return Ok(MaxSize::Off);
    }
    let (size, exit) = match text.split_once(',') {
        Some((size, "exit")) => (size, true),
        Some((_, other)) => {
            return Err(format!(
                "'{other}' after the size: expected SIZE or SIZE,exit (e.g. 500M,exit)"
            ))
        }
        None => (text, false),
    };
    let bytes = parse_size(size)?;
    if bytes == 0 {
        return Err("a size of 0 would record nothing: give e.g. 500M, or none".into());
    }
    Ok(MaxSize::Cap(Cap {
        bytes,
        exit,
        origin: format!("--max-size {text}"),
    }))
}

/// `500M`, `2G`, `1.5G`, `4096`, `100MB`, `1GiB`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad =
        || format!("'{text}' is not a size: give e.g. 500M or 2G (powers of 1024, as QEMU's -m)");
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KIB" => 1 << 10,
        "M" | "MIB" => 1 << 20,
        "G" | "GIB" => 1 << 30,
        "T" | "TIB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// The largest default cap: a kernel looping after its panic writes ~260 MB/s, and a
/// trace this size is already far more than uftrace's viewers are pleasant on (a whole
/// Debian boot is ~250 MB).
pub const DEFAULT_MAX: u64 = 4 << 30;

/// The cap a recording gets when the user gave none: 4 GiB, or half the free space of the
/// filesystem the trace goes to when that is less, so that a guest that never ends fills
/// neither the disk nor the user's afternoon. QEMU runs on: a user who forgot a cap gets a
/// trace marked incomplete, not a guest stopped under them. `None` when the free space
/// cannot be read.
pub fn default_cap(dir: &Path) -> Option<Cap> {
    let st = rustix::fs::statvfs(dir).ok()?;
    let free = st.f_bavail.saturating_mul(st.f_frsize.max(1));
    Some(default_for(free))
}

fn default_for(free: u64) -> Cap {
    let half = (free / 2).max(1);
    let (bytes, why) = if half < DEFAULT_MAX {
        (half, ", half the free disk space")
    } else {
        (DEFAULT_MAX, "")
    };
    Cap {
        bytes,
        exit: false,
        origin: format!("the default {}{why}", indicatif::HumanBytes(bytes)),
    }
}

/// In the staging directory, user mode: two native-endian words, the bytes the cap has
/// given out and the process images that ran untraced because it had no room for their
/// files, which every process image of the guest maps and takes from (the plugin's
/// `state::taken`). A guest forking in a loop would otherwise write the cap once per
/// process, or fill the disk with each process's small files.
pub const COUNT_FILE: &str = ".max-size";

/// Makes [`COUNT_FILE`] in `staging`, at 0.
pub fn make_count_file(staging: &Path) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let file = staging.join(COUNT_FILE);
    std::fs::write(&file, [0u8; 16]).with_context(|| format!("cannot write {}", file.display()))?;
    Ok(file)
}

/// The process images [`COUNT_FILE`] in `staging` says ran untraced (0 without it).
pub fn untraced_images(staging: &Path) -> u64 {
    std::fs::read(staging.join(COUNT_FILE))
        .ok()
        .and_then(|b| Some(u64::from_ne_bytes(b.get(8..16)?.try_into().ok()?)))
        .unwrap_or(0)
}

/// What a guest's session maps may take together, after the trace's `written` bytes of
/// records: their number is the guest's to decide (one per address space: a fork loop
/// makes thousands), so they count in the cap, and get what it leaves, and never less
/// than a sixteenth of it, so that a trace that filled its cap still names its processes.
pub fn maps_budget(cap: &Cap, written: u64) -> u64 {
    cap.bytes.saturating_sub(written).max(cap.bytes / 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(text: &str) -> (u64, bool) {
        match parse(text).unwrap() {
            MaxSize::Cap(c) => (c.bytes, c.exit),
            MaxSize::Off => panic!("{text}: off"),
        }
    }

    #[test]
    fn human_sizes_as_qemu_reads_them() {
        assert_eq!(cap("500M"), (500 << 20, false));
        assert_eq!(cap("2G,exit"), (2 << 30, true));
        assert_eq!(cap("1.5g"), (3 << 29, false));
        assert_eq!(cap("4096"), (4096, false));
        assert_eq!(cap("64k"), (64 << 10, false));
        assert_eq!(cap("100MB"), (100_000_000, false));
        assert_eq!(cap("1GiB"), (1 << 30, false));
        assert_eq!(parse("none"), Ok(MaxSize::Off));
        let MaxSize::Cap(c) = parse("500M,exit").unwrap() else {
            panic!()
        };
        assert_eq!(c.origin, "--max-size 500M,exit");
    }

    #[test]
    fn session_maps_get_what_the_cap_leaves_and_a_sixteenth_at_least() {
        let MaxSize::Cap(c) = parse("64M").unwrap() else {
            panic!()
        };
        assert_eq!(maps_budget(&c, 0), 64 << 20);
        assert_eq!(maps_budget(&c, 48 << 20), 16 << 20);
        assert_eq!(maps_budget(&c, 63 << 20), 4 << 20);
        assert_eq!(maps_budget(&c, 100 << 20), 4 << 20);
    }

    #[test]
    fn bad_sizes_say_what_is_expected() {
        for bad in ["", "M", "500X", "-1G", "1e400", "1..5G", "99999999999T"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("is not a size: give e.g. 500M"), "{bad}: {e}");
        }
        assert!(parse("500M,stop")
            .unwrap_err()
            .contains("expected SIZE or SIZE,exit"));
        assert!(parse("0").unwrap_err().contains("would record nothing"));
    }

    #[test]
    fn the_default_is_a_few_gib_or_half_the_free_space() {
        let gib = 1u64 << 30;
        let c = default_for(50 * gib);
        assert_eq!(c.bytes, 4 * gib);
        assert!(!c.exit);
        assert_eq!(c.origin, "the default 4.00 GiB");
        let c = default_for(6 * gib);
        assert_eq!(c.bytes, 3 * gib);
        assert_eq!(c.origin, "the default 3.00 GiB, half the free disk space");
        assert_eq!(default_for(100).bytes, 50);
        assert_eq!(default_for(0).bytes, 1);
        assert!(default_cap(Path::new("/")).is_some_and(|c| c.bytes > 0 && c.bytes <= 4 * gib));
    }
}
