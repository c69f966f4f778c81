//! System mode, Linux guest: every process named (issue 24). Before QEMU starts, the kernel
//! facts the plugin needs to watch where processes map files ([`watch_options`]); after the
//! run, its `plugin.procs` read into each process's address spaces over time ([`events`]),
//! the files found in what the user has (the `-initrd` archive: [`initrd`]; `--symbols`),
//! and one uftrace session per address space ([`sessions`]).

pub mod events;
pub mod initrd;
pub mod modules;
pub mod sessions;

use std::path::Path;

use crate::symbol_source::KernelLayouts;

/// The kernel functions watched, in the order `proc_watch=` takes them.
pub const WATCHED: [&str; 4] = [
    "mmap_region",
    "begin_new_exec",
    "wake_up_new_task",
    "do_exit",
];

/// `(struct, member path)` of the fields read, in the order `proc_offsets=` takes them.
const FIELDS: [(&str, &[(&str, &str)]); 4] = [
    ("task_struct.tgid", &[("task_struct", "tgid")]),
    (
        "file.f_path.dentry",
        &[("file", "f_path"), ("path", "dentry")],
    ),
    (
        "dentry.d_name.name",
        &[("dentry", "d_name"), ("qstr", "name")],
    ),
    ("dentry.d_parent", &[("dentry", "d_parent")]),
];

/// The plugin's `,proc_watch=…,proc_offsets=…` for a Linux kernel whose struct layouts were
/// found (DWARF or BTF: `symbol_source::kernel_layouts`), or why processes' own functions
/// cannot be named (one line).
pub fn watch_options(kernel: Option<&KernelLayouts>) -> Result<String, String> {
    let kernel = kernel.ok_or_else(|| {
        "the guest's processes' own functions are not named: no symbol source has the \
         kernel's DWARF or BTF (give the -kernel image of a kernel built with BTF, or the \
         vmlinux of its -dbg package with --symbols)"
            .to_string()
    })?;
    let source = &kernel.source;
    let mut offsets = Vec::new();
    for (what, path) in FIELDS {
        let mut sum = 0;
        for (structure, member) in path {
            sum += kernel.types.member_offset(structure, member).map_err(|e| {
                format!(
                    "the guest's processes' own functions are not named: {} has no {what} \
                         ({e})",
                    source.path.display()
                )
            })?;
        }
        offsets.push(sum.to_string());
    }
    let (addresses, munmaps) = function_addresses(&source.path, source.offset)?;
    // Kernel modules ride on the same watch; a kernel without what they need still has its
    // processes named (said once, early).
    let modules = modules::watch_options(kernel).unwrap_or_else(|why| {
        crate::errors::warn_early(why);
        String::new()
    });
    let munmap = munmap_option(kernel, &munmaps);
    Ok(format!(
        ",proc_watch={},proc_offsets={}{modules}{munmap}",
        addresses
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(":"),
        offsets.join(":")
    ))
}

/// The plugin's `,munmap_watch=ADDR:START:LEN`: the kernel's `munmap` syscall wrapper (its
/// name says the architecture) and where the `struct pt_regs` it takes keeps the address and
/// the length. Without it (no such symbol or layout) nothing is said: the plugin's copy of
/// each process's mappings is then only capped, and what that drops is counted.
/// `found`: the addresses of [`MUNMAP_ARCHS`]' wrappers, already moved.
fn munmap_option(kernel: &KernelLayouts, found: &[Option<u64>]) -> String {
    let Some((arch, addr)) = (MUNMAP_ARCHS.iter())
        .zip(found)
        .find_map(|(&a, &f)| Some((a, f?)))
    else {
        return String::new();
    };
    match crate::argspec::pt_regs_offsets(&kernel.types, arch) {
        Ok(at) => format!(",munmap_watch={addr}:{}:{}", at[0], at[1]),
        Err(_) => String::new(),
    }
}

/// The architectures whose `munmap` wrappers are looked for, in this order.
const MUNMAP_ARCHS: [qemu_uftrace_engine::arch::Arch; 3] = [
    qemu_uftrace_engine::arch::Arch::Aarch64,
    qemu_uftrace_engine::arch::Arch::X86_64,
    qemu_uftrace_engine::arch::Arch::Riscv64,
];

/// The entry addresses of [`WATCHED`] in a vmlinux's symbol table or a raw image's kallsyms,
/// moved by `offset`, and those of [`MUNMAP_ARCHS`]' `munmap` wrappers found (one symbol
/// lookup for all).
fn function_addresses(vmlinux: &Path, offset: u64) -> Result<(Vec<u64>, Vec<Option<u64>>), String> {
    let munmaps: Vec<String> = (MUNMAP_ARCHS.iter())
        .map(|&a| format!("{}munmap", crate::argspec::syscall_prefix(a)))
        .collect();
    let names: Vec<&str> = (WATCHED.iter().copied())
        .chain(munmaps.iter().map(String::as_str))
        .collect();
    let mut found = qemu_uftrace_symbols::kernel_symbol_addresses(vmlinux, &names)
        .map_err(|e| format!("the guest's processes' own functions are not named: {e}"))?;
    let munmaps = (found.split_off(WATCHED.len()).into_iter())
        .map(|a| a.map(|a| a.wrapping_add(offset)))
        .collect();
    let watched = WATCHED
        .iter()
        .zip(found)
        .map(|(name, a)| {
            a.map(|a| a.wrapping_add(offset)).ok_or_else(|| {
                format!(
                    "the guest's processes' own functions are not named: {} has no function \
                     {name} to watch",
                    vmlinux.display()
                )
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((watched, munmaps))
}
