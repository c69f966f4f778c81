//! The `-initrd` archive on QEMU's command line, read directly: "newc" cpio (`070701`),
//! plain or gzip-compressed, as the kernel unpacks it. Its regular files are the guest's
//! files for an initramfs-only guest.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// The regular files of an archive: guest path (`/lib/libc.so.6`, plain: no empty, `.` or
/// `..` component) → contents.
pub type Files = HashMap<String, Vec<u8>>;

/// An archive's files and the members refused (their names, escaped): a name with a `..`
/// component, which the guest's kernel would not place under `/` either.
#[derive(Debug, Default)]
pub struct Archive {
    pub files: Files,
    pub refused: Vec<String>,
}

/// Reads the archive at `path`, decompressing a gzip one.
pub fn read(path: &Path) -> Result<Archive> {
    let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let data = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .with_context(|| format!("cannot decompress {}", path.display()))?;
        out
    } else {
        raw
    };
    parse_archive(&data).with_context(|| format!("{} is not a newc cpio archive", path.display()))
}

const HEADER: usize = 110;
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parses newc members up to `TRAILER!!!` (archives concatenated after it, as the kernel
/// accepts, are read too, past their zero padding): [`parse_archive`]'s files.
pub fn parse(data: &[u8]) -> Result<Files> {
    parse_archive(data).map(|a| a.files)
}

/// Parses newc members as [`parse`] does, saying which were refused.
pub fn parse_archive(data: &[u8]) -> Result<Archive> {
    let mut files = Files::new();
    let mut refused = Vec::new();
    let mut at = 0;
    let mut members = 0;
    loop {
        while at < data.len() && data[at] == 0 {
            at += 1;
        }
        if at >= data.len() {
            break;
        }
        let Some(h) = data.get(at..at + HEADER) else {
            bail!("member header cut short at byte {at}");
        };
        if &h[..6] != b"070701" && &h[..6] != b"070702" {
            bail!("no newc magic at byte {at}");
        }
        let field = |i: usize| -> Result<usize> {
            let s = std::str::from_utf8(&h[6 + 8 * i..14 + 8 * i])?;
            Ok(usize::from_str_radix(s, 16)?)
        };
        let mode = field(1)? as u32;
        let filesize = field(6)?;
        let namesize = field(11)?;
        let name_end = at + HEADER + namesize;
        let Some(name) = data.get(at + HEADER..name_end.saturating_sub(1)) else {
            bail!("member name cut short at byte {at}");
        };
        // Escaped as the plugin escapes the paths it reads (one name per byte string).
        let name = qemu_uftrace_format::text::escape_bytes(name);
        let data_start = align4(name_end);
        let data_end = data_start + filesize;
        let Some(contents) = data.get(data_start..data_end) else {
            bail!("member {name} cut short");
        };
        at = align4(data_end);
        members += 1;
        if name == "TRAILER!!!" {
            continue;
        }
        if mode & S_IFMT == S_IFREG {
            match plain(&name) {
                Some(path) => {
                    files.insert(path, contents.to_vec());
                }
                None => refused.push(name.escape_debug().to_string()),
            }
        }
    }
    if members == 0 {
        bail!("no members");
    }
    Ok(Archive { files, refused })
}

/// A member's name as the guest path it unpacks to (`./a//b` is `/a/b`), or `None` when a
/// component is `..` (or nothing is left).
fn plain(name: &str) -> Option<String> {
    let mut path = String::with_capacity(name.len() + 1);
    for c in name.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if c == ".." {
            return None;
        }
        path.push('/');
        path.push_str(c);
    }
    (!path.is_empty()).then_some(path)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One newc member (a name of any bytes, as a crafted archive has).
    pub(crate) fn member(name: impl AsRef<[u8]>, mode: u32, data: &[u8]) -> Vec<u8> {
        let name = name.as_ref();
        let mut out = format!(
            "070701{:08x}{mode:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            1, 0, 0, 1, 0, data.len(), 0, 0, 0, 0, name.len() + 1, 0
        )
        .into_bytes();
        out.extend_from_slice(name);
        out.push(0);
        out.resize(align4(out.len()), 0);
        out.extend_from_slice(data);
        out.resize(align4(out.len()), 0);
        out
    }

    #[test]
    fn reads_files_and_passes_over_the_rest() {
        let mut a = member("lib", 0o040755, b"");
        a.extend(member("lib/libc.so.6", 0o100755, b"ELF!x"));
        a.extend(member("init", 0o100755, b"abc"));
        a.extend(member("TRAILER!!!", 0, b""));
        let f = parse(&a).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f["/lib/libc.so.6"], b"ELF!x");
        assert_eq!(f["/init"], b"abc");
        assert!(parse(b"070701xx").is_err());
        assert!(parse(&a[..a.len() - 200]).is_err());
    }

    /// Member names are made plain; one with a `..` component is refused, not kept.
    #[test]
    fn names_are_plain_or_refused() {
        let mut a = Vec::new();
        for name in [
            "./a//b",
            "/usr//lib/./debug/x",
            "../../x/pwned",
            "a/../../y",
            "..",
            "./",
        ] {
            a.extend(member(name, 0o100644, b"x"));
        }
        a.extend(member("TRAILER!!!", 0, b""));
        let got = parse_archive(&a).unwrap();
        let mut names: Vec<&str> = got.files.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["/a/b", "/usr/lib/debug/x"]);
        assert_eq!(got.refused, ["../../x/pwned", "a/../../y", "..", "./"]);
    }

    #[test]
    fn names_a_lossy_conversion_would_merge_stay_two_files() {
        let raw = |name: &[u8], data: &[u8]| {
            let mut m = member("x".repeat(name.len()), 0o100755, data);
            m[110..110 + name.len()].copy_from_slice(name);
            m
        };
        let mut a = raw(b"bin/t\xff", b"one");
        a.extend(raw(b"bin/t\xfe", b"two"));
        a.extend(member("TRAILER!!!", 0, b""));
        let f = parse(&a).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f["/bin/t\\xff"], b"one");
        assert_eq!(f["/bin/t\\xfe"], b"two");
    }
}
