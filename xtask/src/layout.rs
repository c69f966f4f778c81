//! Which member of a Debian kernel package is the file the tests need, across every layout the
//! archive has used: the patterns are tried in order, links and stubs never count, and when
//! none fits the error says what the package does hold.
//!
//! Layouts seen so far (each has a fixture under `tests/fixtures/`):
//! - `boot/vmlinuz-VERSION`: amd64 and arm64 up to 6.12 (bookworm, bookworm-backports);
//! - `boot/vmlinux-VERSION`: riscv64 in trixie (an `Image` with an EFI stub, despite the name);
//! - `usr/lib/modules/VERSION/vmlinuz` in `linux-binary-VERSION`, with `boot/vmlinuz-VERSION`
//!   a link to it: 6.16 and later (forky, sid);
//! - the `-dbg` package's `usr/lib/debug/boot/vmlinux-VERSION`, or under
//!   `usr/lib/debug/lib/modules/VERSION/` (7.2 in sid, with the old names as links) or
//!   `usr/lib/debug/usr/lib/modules/VERSION/`.

use crate::listing::{Kind, Member};
use std::fmt::Write as _;

/// What the caller wants out of a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// The bootable kernel (`vmlinuz`, or riscv64's `vmlinux` Image).
    KernelImage,
    /// The DWARF vmlinux of a `-dbg` package.
    DbgVmlinux,
    /// The real System.map (the image package's own is an 83-byte stub pointing at `-dbg`).
    SystemMap,
    /// One exact path (a glob): anything else kept from a package.
    Path(String),
}

impl Want {
    /// `kernel-image`, `dbg-vmlinux`, `system-map` or `path:GLOB`.
    pub fn parse(s: &str) -> Option<Want> {
        Some(match s {
            "kernel-image" => Want::KernelImage,
            "dbg-vmlinux" => Want::DbgVmlinux,
            "system-map" => Want::SystemMap,
            _ => Want::Path(
                s.strip_prefix("path:")?
                    .trim_start_matches("./")
                    .to_string(),
            ),
        })
    }

    pub fn describe(&self) -> String {
        match self {
            Want::KernelImage => "kernel image".into(),
            Want::DbgVmlinux => "DWARF vmlinux".into(),
            Want::SystemMap => "System.map".into(),
            Want::Path(p) => p.clone(),
        }
    }

    /// The globs tried, in order (`*` stands for one path component or part of one).
    pub fn patterns(&self) -> Vec<&str> {
        match self {
            Want::KernelImage => vec![
                "boot/vmlinuz-*",
                "boot/vmlinux-*",
                "usr/lib/modules/*/vmlinuz",
                "usr/lib/modules/*/vmlinux",
                "lib/modules/*/vmlinuz",
            ],
            Want::DbgVmlinux => vec![
                "usr/lib/debug/boot/vmlinux-*",
                "usr/lib/debug/lib/modules/*/vmlinux",
                "usr/lib/debug/usr/lib/modules/*/vmlinux",
                "usr/lib/debug/vmlinux-*",
            ],
            Want::SystemMap => vec![
                "usr/lib/debug/boot/System.map-*",
                "boot/System.map-*",
                "usr/lib/debug/lib/modules/*/System.map",
                "usr/lib/modules/*/System.map",
            ],
            Want::Path(p) => vec![p.as_str()],
        }
    }

    /// Below this a match is a stub, not the file (a kernel is megabytes; the image package's
    /// System.map is one line).
    fn min_size(&self) -> u64 {
        match self {
            Want::KernelImage | Want::DbgVmlinux => 1 << 20,
            Want::SystemMap => 4096,
            Want::Path(_) => 1,
        }
    }

    /// Whether a file of this name is worth naming when nothing matched.
    fn looks_related(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        match self {
            Want::KernelImage | Want::DbgVmlinux => {
                name.contains("vmlinu") || name.starts_with("Image") || name.starts_with("bzImage")
            }
            Want::SystemMap => name.contains("System.map"),
            Want::Path(p) => {
                let want = p.rsplit('/').next().unwrap_or(p);
                let stem = want.split('*').find(|s| !s.is_empty()).unwrap_or(want);
                name.contains(stem)
            }
        }
    }
}

/// No member fits: what was looked for and what the package holds instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("holds no {what} (looked for {tried}); {found}")]
pub struct NoMatch {
    pub what: String,
    pub tried: String,
    pub found: String,
}

/// The member holding `want`.
pub fn pick<'a>(want: &Want, members: &'a [Member]) -> Result<&'a Member, NoMatch> {
    for pattern in want.patterns() {
        if let Some(m) = members.iter().find(|m| {
            m.kind == Kind::File && m.size >= want.min_size() && glob_match(pattern, &m.path)
        }) {
            return Ok(m);
        }
    }
    Err(NoMatch {
        what: want.describe(),
        tried: want.patterns().join(", "),
        found: summary(want, members),
    })
}

/// The related files (with what disqualified each), then how many files the package has.
fn summary(want: &Want, members: &[Member]) -> String {
    let files = members.iter().filter(|m| m.kind != Kind::Dir).count();
    if files == 0 {
        return "the package is empty or its file list could not be read".into();
    }
    let related: Vec<String> = members
        .iter()
        .filter(|m| m.kind != Kind::Dir && want.looks_related(&m.path))
        .take(6)
        .map(|m| match m.kind {
            Kind::Link => format!("{} (a link)", m.path),
            _ => format!("{} ({} bytes)", m.path, m.size),
        })
        .collect();
    let mut s = String::new();
    if related.is_empty() {
        let _ = write!(s, "nothing like it among its {files} files");
        let dirs: Vec<&str> = top_dirs(members);
        if !dirs.is_empty() {
            let _ = write!(s, " (under {})", dirs.join(", "));
        }
    } else {
        let _ = write!(s, "it holds {} among {files} files", related.join(", "));
    }
    s
}

/// The first two levels of directories that hold files: where the package puts things.
fn top_dirs(members: &[Member]) -> Vec<&str> {
    let mut dirs: Vec<&str> = Vec::new();
    for m in members.iter().filter(|m| m.kind != Kind::Dir) {
        let mut cut = m.path.match_indices('/').map(|(i, _)| i);
        let end = cut.nth(1).or_else(|| m.path.rfind('/'));
        if let Some(end) = end {
            let d = &m.path[..end];
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs.truncate(6);
    dirs
}

/// `*` matches any run of characters but `/`; everything else matches itself.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), path.as_bytes());
    let (mut pi, mut si) = (0, 0);
    // Where the last `*` was, and how much of the path it has taken: backtracking point.
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star.filter(|&(_, ss)| s[ss] != b'/') {
            star = Some((sp, ss + 1));
            pi = sp + 1;
            si = ss + 1;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_stay_within_one_component() {
        assert!(glob_match(
            "boot/vmlinuz-*",
            "boot/vmlinuz-6.1.0-56-cloud-amd64"
        ));
        assert!(glob_match(
            "usr/lib/modules/*/vmlinuz",
            "usr/lib/modules/6.16.3+deb14-arm64/vmlinuz"
        ));
        assert!(!glob_match("boot/vmlinuz-*", "boot/x/vmlinuz-1"));
        assert!(!glob_match(
            "usr/lib/modules/*/vmlinuz",
            "usr/lib/modules/a/b/vmlinuz"
        ));
        assert!(!glob_match("boot/vmlinuz-*", "boot/vmlinux-1"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b", "a/b"));
        assert!(glob_match("usr/bin/qemu-aarch64", "usr/bin/qemu-aarch64"));
    }

    #[test]
    fn links_and_stubs_never_count() {
        let m = |path: &str, size, kind| Member {
            path: path.into(),
            size,
            kind,
            executable: false,
        };
        let members = [
            m("boot/vmlinuz-7.2", 0, Kind::Link),
            m("boot/vmlinux-7.2", 100, Kind::File),
            m("usr/lib/modules/7.2/vmlinuz", 30 << 20, Kind::File),
        ];
        assert_eq!(
            pick(&Want::KernelImage, &members).unwrap().path,
            "usr/lib/modules/7.2/vmlinuz"
        );
        let err = pick(&Want::DbgVmlinux, &members[..2])
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with(
                "it holds boot/vmlinuz-7.2 (a link), boot/vmlinux-7.2 (100 bytes) among 2 files"
            ),
            "{err}"
        );
    }

    #[test]
    fn want_names() {
        assert_eq!(Want::parse("kernel-image"), Some(Want::KernelImage));
        assert_eq!(
            Want::parse("path:./usr/bin/qemu-aarch64"),
            Some(Want::Path("usr/bin/qemu-aarch64".into()))
        );
        assert_eq!(Want::parse("vmlinuz"), None);
    }
}
