//! A minimal writer of "newc" cpio archives (`070701`), the format the Linux kernel unpacks
//! as an initramfs.
//!
//! Written here rather than run through cpio(1): the archive needs a `/dev/console` character
//! device, which cpio(1) can only copy from a real device node (mknod needs root), and the
//! format is a few lines — no new tool for `scripts/install-deps.sh`, no new dependency.
//! Entries get fixed owners and times, so one input always makes the same bytes.

use std::io::{self, Write};

/// One archive member.
#[derive(Debug, Clone)]
pub enum Entry<'a> {
    /// A directory, `mode` its permission bits (e.g. `0o755`).
    Dir { path: &'a str, mode: u32 },
    /// A regular file with its contents.
    File {
        path: &'a str,
        mode: u32,
        data: &'a [u8],
    },
    /// A character device node `major:minor`.
    CharDev {
        path: &'a str,
        mode: u32,
        major: u32,
        minor: u32,
    },
}

/// What every initramfs here starts with: `/dev` and `/dev/console` (5:1), where the
/// kernel opens `/init`'s standard streams.
pub fn console_entries() -> [Entry<'static>; 2] {
    [
        Entry::Dir {
            path: "dev",
            mode: 0o755,
        },
        Entry::CharDev {
            path: "dev/console",
            mode: 0o600,
            major: 5,
            minor: 1,
        },
    ]
}

/// Writes `bytes` as `dir/name`, replaced whole (a temporary file renamed over it), never
/// rewritten in place: another test process may be reading the archive.
pub fn replace_whole(
    dir: &std::path::Path,
    name: &str,
    bytes: &[u8],
) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.{}", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(path)
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;

/// Writes `entries` and the `TRAILER!!!` that ends the archive. Paths are relative to the
/// archive's root (`init`, `dev/console`); parents must come before their children.
pub fn write_newc(out: &mut impl Write, entries: &[Entry]) -> io::Result<()> {
    let mut written = 0usize;
    for (i, entry) in entries.iter().enumerate() {
        let ino = i as u32 + 1;
        let (path, mode, data, rdev, nlink): (&str, u32, &[u8], (u32, u32), u32) = match *entry {
            Entry::Dir { path, mode } => (path, S_IFDIR | mode, &[], (0, 0), 2),
            Entry::File { path, mode, data } => (path, S_IFREG | mode, data, (0, 0), 1),
            Entry::CharDev {
                path,
                mode,
                major,
                minor,
            } => (path, S_IFCHR | mode, &[], (major, minor), 1),
        };
        written += member(out, ino, mode, nlink, rdev, path, data)?;
    }
    written += member(out, 0, 0, 1, (0, 0), "TRAILER!!!", &[])?;
    // The kernel reads the archive in whole blocks; pad like cpio(1) does, to 512 bytes.
    out.write_all(&vec![0u8; (512 - written % 512) % 512])
}

/// One header, name and body, each padded to 4 bytes; returns the bytes written.
fn member(
    out: &mut impl Write,
    ino: u32,
    mode: u32,
    nlink: u32,
    rdev: (u32, u32),
    path: &str,
    data: &[u8],
) -> io::Result<usize> {
    let size = u32::try_from(data.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "newc members are < 4 GiB"))?;
    let name_size = path.len() as u32 + 1; // with its NUL
    let fields = [
        ino, mode, 0, /* uid */
        0, /* gid */
        nlink, 0, /* mtime */
        size, 0, 0, /* dev major, minor */
        rdev.0, rdev.1, name_size, 0, /* check: only for the "070702" format */
    ];
    let mut header = String::from("070701");
    for f in fields {
        header.push_str(&format!("{f:08x}"));
    }
    out.write_all(header.as_bytes())?;
    out.write_all(path.as_bytes())?;
    out.write_all(&[0])?;
    let name_end = header.len() + name_size as usize;
    let name_pad = pad4(name_end);
    out.write_all(&[0u8; 3][..name_pad])?;
    out.write_all(data)?;
    let data_pad = pad4(data.len());
    out.write_all(&[0u8; 3][..data_pad])?;
    Ok(name_end + name_pad + data.len() + data_pad)
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The member layout, checked field by field against the format (the header is 110
    /// bytes, name and data each padded to a multiple of 4).
    #[test]
    fn writes_newc_members() {
        let mut out = Vec::new();
        write_newc(
            &mut out,
            &[
                Entry::Dir {
                    path: "dev",
                    mode: 0o755,
                },
                Entry::CharDev {
                    path: "dev/console",
                    mode: 0o600,
                    major: 5,
                    minor: 1,
                },
                Entry::File {
                    path: "init",
                    mode: 0o755,
                    data: b"hello",
                },
            ],
        )
        .unwrap();
        assert_eq!(out.len() % 512, 0);
        let text = String::from_utf8_lossy(&out);
        let field = |member: &str, i: usize| {
            let at = text.find(member).unwrap();
            let header = &text[at - 110..at];
            assert!(header.starts_with("070701"), "{header}");
            u32::from_str_radix(&header[6 + 8 * i..14 + 8 * i], 16).unwrap()
        };
        assert_eq!(field("dev\0", 1), 0o040755);
        assert_eq!(field("dev/console\0", 1), 0o020600);
        assert_eq!(
            (field("dev/console\0", 9), field("dev/console\0", 10)),
            (5, 1)
        );
        assert_eq!(field("init\0", 1), 0o100755);
        assert_eq!(field("init\0", 6), 5);
        assert_eq!(field("init\0", 11), 5);
        // "init\0" ends 115 bytes into its member: 1 byte of padding, then the data.
        let at = text.find("init\0").unwrap();
        assert_eq!(&out[at + 5..at + 11], b"\0hello");
        assert_eq!((at - 110) % 4, 0);
        assert!(text.contains("TRAILER!!!\0"));
    }
}
