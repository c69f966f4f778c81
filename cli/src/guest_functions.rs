//! `PATH:FUNC` (system mode, a Linux guest): a function of the guest's file PATH for `-F`,
//! `-N`, `--stop-at`, `--start-at`, `--trace-on-at`, `--trace-off-at`, `-A` and `-R`, looked up under
//! `--sysroot` or in the `-initrd` archive and named by its offset in the file, which the
//! plugin finds wherever a process maps the file (`plugin/src/state/file_aims.rs`; while
//! tracing is off, a `--trace-on-at` one keeps the processes followed).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::errors::usage;
use crate::stop_at::{guest_function, Addr, Names};

/// `PATH:FUNC` where it cannot be: in user mode (a library's functions are named alone).
/// `funcs` as [`add`] takes them.
pub fn refused(funcs: &[(&str, &str)], user_mode: bool) -> Result<()> {
    let guest = |(_, text): &&(&str, &str)| guest_function(text).is_some();
    if let Some((option, text)) = funcs.iter().find(guest).filter(|_| user_mode) {
        return Err(usage(
            format!("{option} {text}: PATH:FUNC names a function of a guest file in system mode"),
            "in user mode name the function alone (the program's and its libraries' are found \
             by name)",
        ));
    }
    Ok(())
}

/// Where a guest's files are looked for: its root (`--sysroot`), then the `-initrd`
/// archive (its regular files, at their paths in it), copied into `scratch` while read.
pub struct GuestRoot<'a> {
    pub sysroot: Option<&'a Path>,
    pub initrd: Option<&'a Path>,
    pub scratch: &'a Path,
}

/// System mode: the functions of the guest files that `funcs` (each as typed for
/// `option`) name as `PATH:FUNC`, found in `root` as the guest sees it (inside the sysroot:
/// `contained`), each by offset in its file: the plugin finds them where a process maps
/// the file. A stripped program's `main` is named from its `_start`. Returns the sizes the
/// files' symbols give (`-R` reads a value at the return instructions inside them).
pub fn add(
    names: &mut Names,
    funcs: &[(&str, &str)],
    root: &GuestRoot,
    arch: qemu_uftrace_symbols::Arch,
) -> Result<HashMap<Addr, u64>> {
    let mut sizes = HashMap::new();
    let mut archive: Option<Result<crate::guest_procs::initrd::Files, String>> = None;
    for &(option, text) in funcs {
        let Some((guest, _)) = guest_function(text) else {
            continue;
        };
        if root.sysroot.is_none() && root.initrd.is_none() {
            return Err(usage(
                format!(
                    "{option} {text}: {guest} is a guest file, found under --sysroot or in \
                     the -initrd archive"
                ),
                "give the guest's root file system with --sysroot DIR",
            ));
        }
        let found = find(guest, root, &mut archive)?;
        let (host, rendered, copy) = match found {
            Ok(found) => found,
            Err(places) => {
                let way_out = match root.sysroot {
                    None => "give the guest's root file system with --sysroot DIR",
                    Some(_) => "name a file of the guest as the guest sees it",
                };
                return Err(usage(
                    format!("{option} {text}: no file {guest} {places}"),
                    way_out,
                ));
            }
        };
        if names.guest_files.contains(&rendered) {
            continue;
        }
        let loaded = load(&host, arch);
        if copy {
            let _ = std::fs::remove_file(&host);
        }
        let (image, elf) = loaded.map_err(|why| {
            usage(
                format!("{option} {text}: {why}"),
                "name a function of an ELF file of the guest",
            )
        })?;
        let i = names.guest_files.len() as u32;
        names.guest_files.push(rendered);
        names.sources += 1;
        for f in image.functions.iter().chain(&image.by_address) {
            // Its offset in the file, by the loaded segment that holds it.
            let at = (elf.loads.iter())
                .find(|s| s.exec && s.vaddr <= f.addr && f.addr - s.vaddr < s.filesz)
                .map(|s| s.offset + (f.addr - s.vaddr));
            if let Some(at) = at {
                (names.file_functions).push((format!("{guest}:{}", f.name), Addr::File(i, at)));
                if f.size > 0 {
                    sizes.insert(Addr::File(i, at), f.size);
                }
            }
        }
    }
    Ok(sizes)
}

/// `guest`'s file on the host, its path as the guest's kernel has it (rendered as the
/// plugin renders the paths it reads), and whether the host file is a copy to remove; or
/// where it was looked for.
type Found = std::result::Result<(PathBuf, String, bool), String>;

fn find(
    guest: &str,
    root: &GuestRoot,
    archive: &mut Option<std::result::Result<crate::guest_procs::initrd::Files, String>>,
) -> Result<Found> {
    let mut places = Vec::new();
    if let Some(sysroot) = root.sysroot {
        match crate::contained::file(sysroot, guest.as_bytes()) {
            Ok(host) => {
                // Its links followed inside the root: the path the kernel's dentries give.
                let real = std::fs::canonicalize(sysroot)
                    .with_context(|| format!("cannot resolve --sysroot {}", sysroot.display()))?;
                let rel = host.strip_prefix(&real).unwrap_or(&host);
                let parts = rel.components().map(|c| c.as_os_str().as_encoded_bytes());
                return Ok(Ok((host.clone(), rendered(parts), false)));
            }
            Err(e) => places.push(format!("under --sysroot {} ({e})", sysroot.display())),
        }
    }
    if let Some(initrd) = root.initrd {
        let files = archive.get_or_insert_with(|| {
            crate::guest_procs::initrd::read(initrd)
                .map(|a| a.files)
                .map_err(|e| format!("{e:#}"))
        });
        match files {
            Ok(files) => match (files.get(guest), crate::contained::plain_relative(guest)) {
                (Some(data), Some(rel)) => {
                    let name = rel.file_name().unwrap_or(rel.as_os_str());
                    let copy = root.scratch.join(format!(
                        ".guest-function-{}",
                        name.to_string_lossy().replace(['/', '\0'], "_")
                    ));
                    std::fs::write(&copy, data)
                        .with_context(|| format!("cannot write {}", copy.display()))?;
                    let parts = rel.components().map(|c| c.as_os_str().as_encoded_bytes());
                    return Ok(Ok((copy, rendered(parts), true)));
                }
                _ => places.push("in the -initrd archive (its regular files)".to_string()),
            },
            Err(e) => places.push(format!("in the -initrd archive, which cannot be read: {e}")),
        }
    }
    Ok(Err(places.join(", nor ")))
}

/// `/a/b` from a path's components, each escaped as the plugin renders a guest's names.
fn rendered<'a>(parts: impl Iterator<Item = &'a [u8]>) -> String {
    parts
        .map(|name| format!("/{}", qemu_uftrace_format::text::escape_bytes(name)))
        .collect()
}

/// A guest file's functions and its headers, or why not.
fn load(
    host: &Path,
    arch: qemu_uftrace_symbols::Arch,
) -> std::result::Result<(qemu_uftrace_symbols::Image, crate::qemu::user::Elf), String> {
    let opts = qemu_uftrace_symbols::LoadOptions {
        name_entry: true,
        expected_arch: Some(arch),
        ..Default::default()
    };
    let image = qemu_uftrace_symbols::load(host, &opts).map_err(|e| e.to_string())?;
    let elf = crate::qemu::user::Elf::read(host)
        .ok_or_else(|| format!("{} is not an ELF file", host.display()))?;
    Ok((image, elf))
}
