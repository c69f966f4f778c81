//! System mode, Linux guest: every process named (issue 24). Before QEMU starts, the kernel
//! facts the plugin needs to watch where processes map files ([`watch_options`]); after the
//! run, its `plugin.procs` read into each process's address spaces over time ([`events`]),
//! the files found in what the user has (the `-initrd` archive: [`initrd`]; `--symbols`),
//! and one uftrace session per address space ([`sessions`]).

pub mod events;
pub mod initrd;
pub mod module_debug;
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

/// `(what, [(struct, member)…])` of the fields the plugin reads at a switch on to list the
/// processes and their mappings (`engine::linux_walk::Layout`, in its order): `mm_struct`'s
/// maple tree is Linux 6.1's and later's.
const WALK_FIELDS: [(&str, &[(&str, &str)]); 16] = [
    ("task_struct.tasks", &[("task_struct", "tasks")]),
    (
        "task_struct.group_leader",
        &[("task_struct", "group_leader")],
    ),
    ("task_struct.mm", &[("task_struct", "mm")]),
    ("task_struct.pid", &[("task_struct", "pid")]),
    ("task_struct.tgid", &[("task_struct", "tgid")]),
    ("task_struct.signal", &[("task_struct", "signal")]),
    ("task_struct.thread_node", &[("task_struct", "thread_node")]),
    (
        "signal_struct.thread_head",
        &[("signal_struct", "thread_head")],
    ),
    (
        "mm_struct.mm_mt.ma_root",
        &[("mm_struct", "mm_mt"), ("maple_tree", "ma_root")],
    ),
    ("mm_struct.exe_file", &[("mm_struct", "exe_file")]),
    ("vm_area_struct.vm_start", &[("vm_area_struct", "vm_start")]),
    ("vm_area_struct.vm_end", &[("vm_area_struct", "vm_end")]),
    ("vm_area_struct.vm_flags", &[("vm_area_struct", "vm_flags")]),
    ("vm_area_struct.vm_pgoff", &[("vm_area_struct", "vm_pgoff")]),
    ("vm_area_struct.vm_file", &[("vm_area_struct", "vm_file")]),
    ("vm_area_struct.vm_mm", &[("vm_area_struct", "vm_mm")]),
];

/// The plugin's `,proc_watch=…,proc_offsets=…` for a Linux kernel whose struct layouts were
/// found (DWARF or BTF: `symbol_source::kernel_layouts`), or why processes' own functions
/// cannot be named (one line). With them `,proc_walk=…` where the kernel has what the walk
/// at a switch on reads; else, with `trace_off` (the run starts with tracing off), why the
/// processes started while off will not be named.
pub fn watch_options(kernel: Option<&KernelLayouts>, trace_off: bool) -> Result<String, String> {
    let kernel = kernel.ok_or_else(|| {
        "the guest's processes' own functions are not named: no symbol source has the \
         kernel's DWARF or BTF (give the -kernel image of a kernel built with BTF, or the \
         vmlinux of its -dbg package with --symbols)"
            .to_string()
    })?;
    let source = &kernel.source;
    let offsets = kernel
        .field_offsets(&FIELDS)
        .map_err(|e| format!("the guest's processes' own functions are not named: {e}"))?;
    let offsets: Vec<String> = offsets.iter().map(u64::to_string).collect();
    let (addresses, munmaps, init_task) = function_addresses(&source.path, source.offset)?;
    // Without `init_task` (arm64 Debian's kallsyms has no data symbols) the plugin reads
    // the ring of processes from the task running.
    let walk = match kernel.field_offsets(&WALK_FIELDS) {
        Ok(fields) => format!(
            ",proc_walk={}:{}",
            init_task.unwrap_or(0),
            fields
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(":")
        ),
        Err(why) => {
            if trace_off {
                crate::errors::warn_early(format!(
                    "processes that start while tracing is off will have their own functions \
                     unnamed: {why} (the guest's processes are read at a switch on from \
                     Linux 6.1's structures)"
                ));
            }
            String::new()
        }
    };
    // Kernel modules ride on the same watch; a kernel without what they need still has its
    // processes named (said once, early).
    let modules = modules::watch_options(kernel).unwrap_or_else(|why| {
        crate::errors::warn_early(why);
        String::new()
    });
    let munmap = munmap_option(kernel, &munmaps);
    Ok(format!(
        ",proc_watch={},proc_offsets={}{modules}{munmap}{walk}",
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
/// moved by `offset`, those of [`MUNMAP_ARCHS`]' `munmap` wrappers found, and `init_task`'s
/// (one symbol lookup for all).
type Found = (Vec<u64>, Vec<Option<u64>>, Option<u64>);
fn function_addresses(vmlinux: &Path, offset: u64) -> Result<Found, String> {
    let munmaps: Vec<String> = (MUNMAP_ARCHS.iter())
        .map(|&a| format!("{}munmap", crate::argspec::syscall_prefix(a)))
        .collect();
    let names: Vec<&str> = (WATCHED.iter().copied())
        .chain(munmaps.iter().map(String::as_str))
        .chain(["init_task"])
        .collect();
    let mut found = qemu_uftrace_symbols::kernel_symbol_addresses(vmlinux, &names)
        .map_err(|e| format!("the guest's processes' own functions are not named: {e}"))?;
    let init_task = found.pop().flatten().map(|a| a.wrapping_add(offset));
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
    Ok((watched, munmaps, init_task))
}
