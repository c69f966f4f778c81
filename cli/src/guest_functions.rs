//! `PATH:FUNC` (system mode, a Linux guest): a function of the guest's file PATH for
//! `--stop-at`, `--start-at`, `--trace-on-at` and `--trace-off-at`, looked up under
//! `--sysroot` and named by its offset in the file, which the plugin finds wherever a
//! process maps the file (`plugin/src/state/file_aims.rs`).

use std::path::Path;

use anyhow::{Context, Result};

use crate::errors::usage;
use crate::stop_at::{guest_function, Addr, Names};

/// System mode: the functions of the guest files that `funcs` (each as typed for
/// `option`) name as `PATH:FUNC`, looked up under `sysroot` as the guest sees its root
/// (`contained`), each by offset in its file: the plugin finds them where a process maps
/// the file. A stripped program's `main` is named from its `_start`.
pub fn add(
    names: &mut Names,
    funcs: &[(&str, &str)],
    sysroot: Option<&Path>,
    arch: qemu_uftrace_symbols::Arch,
) -> Result<()> {
    for &(option, text) in funcs {
        let Some((guest, _)) = guest_function(text) else {
            continue;
        };
        let Some(root) = sysroot else {
            return Err(usage(
                format!("{option} {text}: {guest} is a guest file, found under --sysroot"),
                "give the guest's root file system with --sysroot DIR",
            ));
        };
        let host = crate::contained::file(root, guest.as_bytes()).map_err(|e| {
            usage(
                format!(
                    "{option} {text}: no file {guest} under --sysroot {}: {e}",
                    root.display()
                ),
                "name a file of the guest's root (as the guest sees it)",
            )
        })?;
        // The path the guest's kernel has for it (its links followed inside the root),
        // as the plugin renders the paths it reads.
        let real_root = std::fs::canonicalize(root)
            .with_context(|| format!("cannot resolve --sysroot {}", root.display()))?;
        let rel = host.strip_prefix(&real_root).unwrap_or(&host);
        let rendered: String = (rel.components())
            .map(|c| {
                let name = c.as_os_str().as_encoded_bytes();
                format!("/{}", qemu_uftrace_format::text::escape_bytes(name))
            })
            .collect();
        if names.guest_files.contains(&rendered) {
            continue;
        }
        let opts = qemu_uftrace_symbols::LoadOptions {
            name_entry: true,
            expected_arch: Some(arch),
            ..Default::default()
        };
        let image = qemu_uftrace_symbols::load(&host, &opts).map_err(|e| {
            usage(
                format!("{option} {text}: {e}"),
                "name a function of an ELF file of the guest",
            )
        })?;
        let elf = crate::qemu::user::Elf::read(&host).ok_or_else(|| {
            usage(
                format!("{option} {text}: {} is not an ELF file", host.display()),
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
            }
        }
    }
    Ok(())
}
