//! `cargo xtask`: the parts of `scripts/install-deps.sh` that depend on how Debian's archive is
//! laid out this month, in code with tests of their own.
//!
//! ```text
//! xtask keep SPEC WANT=DEST...    extract each WANT of package SPEC into DEST (atomically);
//!                                 prints, per file, the package it came from
//! xtask kernel-package META       the versioned linux-image-* package a metapackage pulls in
//! xtask pick WANT < LISTING       the member of a `dpkg-deb --contents` listing holding WANT
//! xtask test-run [--jobs N] [-- ARGS]
//!                                 every test binary of the workspace, N at a time (testrun.rs)
//! ```
//! SPEC is apt's `NAME[:ARCH][/SUITE]`; WANT is `kernel-image`, `dbg-vmlinux`, `system-map` or
//! `path:GLOB`. apt calls honour `APT_CONFIG` (a private apt state); `$QEMU_UFTRACE_DEBS` names
//! a directory of `.deb` files used instead of downloading.

use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::PathBuf;
use std::process::Command;
use xtask::deb::{self, Keep, Spec};
use xtask::layout::{self, Want};
use xtask::listing;
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("test-run") {
        if let Err(e) = xtask::testrun::main(&args[1..]) {
            eprintln!("test-run: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(e) = run(args) {
        // One line: the shell script's own lines start the same way.
        eprintln!("install-deps: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Vec<String>) -> Result<()> {
    let Some((cmd, rest)) = args.split_first() else {
        bail!("usage: xtask keep|kernel-package|pick … (see xtask/src/main.rs)");
    };
    match cmd.as_str() {
        "keep" => {
            let [spec, wants @ ..] = rest else {
                bail!("usage: xtask keep SPEC WANT=DEST...");
            };
            if wants.is_empty() {
                bail!("usage: xtask keep SPEC WANT=DEST...");
            }
            let keeps = wants
                .iter()
                .map(|w| parse_keep(w))
                .collect::<Result<Vec<_>>>()?;
            let spec = Spec::parse(spec);
            let dest_dir = keeps[0]
                .dest
                .parent()
                .map(PathBuf::from)
                .unwrap_or_default();
            std::fs::create_dir_all(&dest_dir)
                .with_context(|| format!("cannot create {}", dest_dir.display()))?;
            // What an interrupted run left (a download, a .tmp): never taken for a file.
            remove_leftovers(&dest_dir, &keeps);
            // Downloads go next to the destination (the same file system, often gigabytes).
            let work = tempfile::Builder::new()
                .prefix(".xtask-")
                .tempdir_in(&dest_dir)
                .with_context(|| {
                    format!("cannot create a work directory in {}", dest_dir.display())
                })?;
            for from in deb::keep(&spec, &keeps, work.path())? {
                println!("{from}");
            }
            Ok(())
        }
        "kernel-package" => {
            let [meta] = rest else {
                bail!("usage: xtask kernel-package META");
            };
            let out = Command::new("apt-cache")
                .arg("depends")
                .arg(meta)
                .output()
                .context("cannot run apt-cache")?;
            let text = String::from_utf8_lossy(&out.stdout);
            match deb::versioned_image(&text) {
                Some(p) => {
                    println!("{p}");
                    Ok(())
                }
                None if !out.status.success() || text.trim().is_empty() => bail!(
                    "{} is not in the package lists: its suite is missing from the apt sources, \
                     or the lists are old (apt-get update)",
                    Spec::parse(meta).describe()
                ),
                None => bail!(
                    "{} depends on no linux-image-VERSION-* package (it lists: {})",
                    Spec::parse(meta).describe(),
                    text.lines()
                        .filter_map(|l| l.trim().strip_prefix("Depends:"))
                        .map(str::trim)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        "pick" => {
            let [want] = rest else {
                bail!("usage: xtask pick WANT < LISTING");
            };
            let want = parse_want(want)?;
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text)?;
            let members = listing::parse(&text);
            let m =
                layout::pick(&want, &members).map_err(|e| anyhow::anyhow!("the listing {e}"))?;
            println!("{}", m.path);
            Ok(())
        }
        _ => bail!("unknown xtask command {cmd:?}: keep, kernel-package, pick or test-run"),
    }
}

fn parse_want(s: &str) -> Result<Want> {
    Want::parse(s).with_context(|| {
        format!("unknown file kind {s:?}: kernel-image, dbg-vmlinux, system-map or path:GLOB")
    })
}

fn parse_keep(s: &str) -> Result<Keep> {
    let Some((want, dest)) = s.split_once('=') else {
        bail!("{s:?} is not WANT=DEST");
    };
    Ok(Keep {
        want: parse_want(want)?,
        dest: PathBuf::from(dest),
    })
}

/// Removes the work directories and `.tmp` files a killed run left in `dir`.
fn remove_leftovers(dir: &std::path::Path, keeps: &[Keep]) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".xtask-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    for k in keeps {
        let _ = std::fs::remove_file(deb::tmp_path(&k.dest));
    }
}
