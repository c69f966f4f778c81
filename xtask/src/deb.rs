//! Keeping files out of Debian packages: download (or take a local copy), find the member by
//! its layout, extract it next to its destination and rename it into place, so that a cache
//! entry is either whole or absent.

use crate::layout::{self, Want};
use crate::listing::{self, Member};
use anyhow::{bail, Context, Result};
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A package as apt names it: `NAME`, `NAME:ARCH`, `NAME/SUITE`, `NAME:ARCH/SUITE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub name: String,
    pub arch: Option<String>,
    pub suite: Option<String>,
}

impl Spec {
    pub fn parse(s: &str) -> Spec {
        let (rest, suite) = match s.split_once('/') {
            Some((r, suite)) => (r, Some(suite.to_string())),
            None => (s, None),
        };
        let (name, arch) = match rest.split_once(':') {
            Some((n, a)) => (n, Some(a.to_string())),
            None => (rest, None),
        };
        Spec {
            name: name.to_string(),
            arch,
            suite,
        }
    }

    /// Another package with this one's architecture and suite (a dependency).
    pub fn sibling(&self, name: &str) -> Spec {
        Spec {
            name: name.to_string(),
            ..self.clone()
        }
    }

    /// For messages: the name and where it was looked for.
    pub fn describe(&self) -> String {
        let mut s = self.name.clone();
        if let Some(a) = &self.arch {
            s += &format!(" ({a}");
            s += &match &self.suite {
                Some(suite) => format!(", {suite})"),
                None => ")".into(),
            };
        } else if let Some(suite) = &self.suite {
            s += &format!(" ({suite})");
        }
        s
    }
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        if let Some(a) = &self.arch {
            write!(f, ":{a}")?;
        }
        if let Some(s) = &self.suite {
            write!(f, "/{s}")?;
        }
        Ok(())
    }
}

/// The variable naming a directory of `.deb` files taken instead of downloading: for a
/// machine whose mirror is mid-sync, or that has no network.
pub const LOCAL_DEBS: &str = "QEMU_UFTRACE_DEBS";

/// A downloaded (or local) package file and its members.
pub struct Deb {
    pub path: PathBuf,
    pub members: Vec<Member>,
}

/// Downloads `spec` into `work` (or finds it in `$QEMU_UFTRACE_DEBS`) and lists it.
pub fn obtain(spec: &Spec, work: &Path) -> Result<Deb> {
    let path = match local_copy(spec)? {
        Some(p) => p,
        None => download(spec, work)?,
    };
    let out = Command::new("dpkg-deb")
        .arg("--contents")
        .arg(&path)
        .stderr(Stdio::piped())
        .output()
        .context("cannot run dpkg-deb")?;
    if !out.status.success() {
        bail!(
            "{} is not a readable package ({}): delete it and retry",
            path.display(),
            last_line(&out.stderr)
        );
    }
    let members = listing::parse(&String::from_utf8_lossy(&out.stdout));
    Ok(Deb { path, members })
}

fn local_copy(spec: &Spec) -> Result<Option<PathBuf>> {
    let Some(dir) = std::env::var_os(LOCAL_DEBS) else {
        return Ok(None);
    };
    let prefix = format!("{}_", spec.name);
    let mut found: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("cannot read ${LOCAL_DEBS} ({})", Path::new(&dir).display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(OsStr::to_str).unwrap_or("");
            name.starts_with(&prefix)
                && name.ends_with(".deb")
                && spec.arch.as_ref().is_none_or(|a| {
                    name.ends_with(&format!("_{a}.deb")) || name.ends_with("_all.deb")
                })
        })
        .collect();
    found.sort();
    Ok(found.pop())
}

fn download(spec: &Spec, work: &Path) -> Result<PathBuf> {
    let dir = work.join(format!("dl-{}", spec.name));
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // apt downloads as its own user when it can write the directory; else it warns.
    let _ = Command::new("chmod").arg("go+rwx").arg(&dir).status();
    let out = Command::new("apt-get")
        .args(["download", "-qq"])
        .arg(spec.to_string())
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("cannot run apt-get")?;
    let deb = fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension() == Some(OsStr::new("deb")));
    let said = last_line(&out.stderr);
    match deb {
        Some(p) if out.status.success() => Ok(p),
        _ if said.contains("Unable to locate package") => bail!(
            "{} is not in this machine's package lists (its suite is missing from the apt \
             sources, or the lists are old: apt-get update), or put its .deb in a directory \
             named by ${LOCAL_DEBS}",
            spec.describe()
        ),
        _ => bail!(
            "cannot download {} ({}): retry later (a mirror mid-sync drops files for a while), \
             run apt-get update if the lists are old, or put its .deb in a directory named by ${LOCAL_DEBS}",
            spec.describe(),
            without_urls(&said)
        ),
    }
}

/// One file wanted from a package, and where it goes.
pub struct Keep {
    pub want: Want,
    pub dest: PathBuf,
}

/// Extracts every `keeps` from `spec`; a wanted kernel image not in the package itself is
/// looked for in the packages it depends on that carry kernel files (`linux-binary-*` since
/// 6.16, the versioned `linux-image-*` of a metapackage). Returns the package each file came
/// from, in order. Each destination appears only once complete.
pub fn keep(spec: &Spec, keeps: &[Keep], work: &Path) -> Result<Vec<String>> {
    let deb = obtain(spec, work)?;
    let mut from = Vec::new();
    for k in keeps {
        let source = match layout::pick(&k.want, &deb.members) {
            Ok(m) => {
                extract(&deb.path, m, &k.dest)?;
                spec.name.clone()
            }
            Err(here) => keep_from_dependency(spec, &deb, k, work)
                .with_context(|| format!("{} {here}", spec.describe()))?,
        };
        from.push(source);
    }
    Ok(from)
}

fn keep_from_dependency(spec: &Spec, deb: &Deb, k: &Keep, work: &Path) -> Result<String> {
    let depends = control_field(&deb.path, "Depends")?;
    let candidates = kernel_dependencies(&depends, &spec.name);
    if candidates.is_empty() {
        bail!("and depends on no package that could hold it (Depends: {depends})");
    }
    let mut why = Vec::new();
    for name in candidates {
        let dep = spec.sibling(&name);
        match obtain(&dep, work) {
            Ok(d) => match layout::pick(&k.want, &d.members) {
                Ok(m) => {
                    extract(&d.path, m, &k.dest)?;
                    return Ok(name);
                }
                Err(e) => why.push(format!("its dependency {name} {e}")),
            },
            Err(e) => why.push(format!("{e:#}")),
        }
    }
    bail!("{}", why.join("; "))
}

/// The packages named in a `Depends` field that may carry kernel files: `linux-binary-*` first,
/// then `linux-image-*` (never `self`).
pub fn kernel_dependencies(depends: &str, this: &str) -> Vec<String> {
    let names: Vec<&str> = depends
        .split([',', '|'])
        .filter_map(|d| d.split_whitespace().next())
        .map(|d| d.split(':').next().unwrap_or(d))
        .filter(|d| *d != this)
        .collect();
    let mut out: Vec<String> = names
        .iter()
        .filter(|d| d.starts_with("linux-binary-"))
        .map(|d| d.to_string())
        .collect();
    out.extend(
        names
            .iter()
            .filter(|d| d.starts_with("linux-image-"))
            .map(|d| d.to_string()),
    );
    out
}

/// `apt-cache depends` output of a kernel metapackage → the versioned image package it pulls
/// in (`linux-image-6.1.0-56-cloud-amd64`): the first dependency named `linux-image-` then a
/// digit.
pub fn versioned_image(depends_output: &str) -> Option<String> {
    depends_output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|d| d.trim().trim_start_matches('<').trim_end_matches('>'))
        .map(|d| d.split(':').next().unwrap_or(d))
        .find(|d| {
            d.strip_prefix("linux-image-")
                .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

fn control_field(deb: &Path, field: &str) -> Result<String> {
    let out = Command::new("dpkg-deb")
        .arg("--field")
        .arg(deb)
        .arg(field)
        .output()
        .context("cannot run dpkg-deb")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Streams `member` out of the package into `dest.tmp`, checks its size against the listing,
/// then renames it to `dest`.
fn extract(deb: &Path, member: &Member, dest: &Path) -> Result<()> {
    if let Some(dir) = dest.parent() {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let tmp = tmp_path(dest);
    let file = fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    let mut fsys = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run dpkg-deb")?;
    let tar_in = fsys.stdout.take().context("dpkg-deb's output")?;
    // Members are stored as `./path`.
    let status = Command::new("tar")
        .args(["-x", "-O", "-f", "-"])
        .arg(format!("./{}", member.path))
        .stdin(tar_in)
        .stdout(file)
        .status()
        .context("cannot run tar")?;
    let fsys_status = fsys.wait()?;
    let written = fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
    if !status.success() || !fsys_status.success() || written != member.size {
        let _ = fs::remove_file(&tmp);
        bail!(
            "extracting {} from {} failed ({written} of {} bytes): the download may be damaged, retry",
            member.path,
            deb.display(),
            member.size
        );
    }
    if member.executable {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", tmp.display()))?;
    }
    fs::rename(&tmp, dest).with_context(|| format!("cannot rename {}", tmp.display()))?;
    Ok(())
}

pub fn tmp_path(dest: &Path) -> PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .trim()
        .to_string()
}

/// apt's messages name the mirror: keep the reason, not the host.
fn without_urls(s: &str) -> String {
    s.split_whitespace()
        .map(|w| if w.contains("://") { "<mirror>" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let s = Spec::parse("linux-image-6.1.0-56-cloud-arm64:arm64/bookworm-backports");
        assert_eq!(s.name, "linux-image-6.1.0-56-cloud-arm64");
        assert_eq!(s.arch.as_deref(), Some("arm64"));
        assert_eq!(s.suite.as_deref(), Some("bookworm-backports"));
        assert_eq!(
            s.to_string(),
            "linux-image-6.1.0-56-cloud-arm64:arm64/bookworm-backports"
        );
        assert_eq!(
            s.sibling("linux-binary-x").to_string(),
            "linux-binary-x:arm64/bookworm-backports"
        );
        assert_eq!(
            Spec::parse("qemu-user/bookworm").describe(),
            "qemu-user (bookworm)"
        );
    }

    #[test]
    fn dependencies_that_may_hold_the_kernel() {
        let d = "kmod, linux-base (>= 4.3~), linux-binary-6.16.3+deb14-riscv64 (= 6.16.3-1), \
                 initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool";
        assert_eq!(
            kernel_dependencies(d, "linux-image-6.16.3+deb14-riscv64"),
            vec!["linux-binary-6.16.3+deb14-riscv64"]
        );
        assert!(kernel_dependencies("kmod, initramfs-tools", "x").is_empty());
    }

    #[test]
    fn versioned_image_of_a_metapackage() {
        let out = "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-56-cloud-amd64\n";
        assert_eq!(
            versioned_image(out).as_deref(),
            Some("linux-image-6.1.0-56-cloud-amd64")
        );
        let out = "linux-image-riscv64:riscv64\n  Depends: <linux-image-6.12.117+deb13-riscv64:riscv64>\n  Depends: linux-image-riscv64-signed-template\n";
        assert_eq!(
            versioned_image(out).as_deref(),
            Some("linux-image-6.12.117+deb13-riscv64")
        );
        assert_eq!(versioned_image("linux-image-x\n  Depends: kmod\n"), None);
    }

    #[test]
    fn messages_keep_no_host() {
        assert_eq!(
            without_urls("E: Failed to fetch http://mirror.example/pool/x.deb 404 Not Found"),
            "E: Failed to fetch <mirror> 404 Not Found"
        );
    }
}
