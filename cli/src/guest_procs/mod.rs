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
pub fn watch_options(
    kernel: Option<&KernelLayouts>,
    trace_off: bool,
    page: Option<u64>,
) -> Result<String, String> {
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
    let page = page.map_or_else(String::new, |p| format!(",kernel_page={p}"));
    Ok(format!(
        ",proc_watch={},proc_offsets={}{modules}{munmap}{walk}{page}",
        addresses
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(":"),
        offsets.join(":")
    ))
}

/// The kernel's `PAGE_SIZE` where it is not 4 KiB, the unit in which it gives a mapping's
/// file offset: an arm64 Image says it in its header's flags (bits 1–2: 4, 16 or 64 KiB;
/// the kernel's `Documentation/arch/arm64/booting.rst`). Read from the first of `files` that
/// has the header: the `-kernel` file, raw or gzip-compressed, or an ELF vmlinux, whose
/// `.head.text` is the header. None: 4 KiB or not said (x86-64 and riscv64 kernels, and
/// arm64 ones before 3.17, all use 4 KiB).
pub fn kernel_page(files: &[&Path]) -> Option<u64> {
    files
        .iter()
        .find_map(|path| page_of_header(&kernel_head(path)?))
}

/// The first 64 bytes of a kernel file's image: the file's own, a gzip stream's unpacked,
/// or an ELF's `.head.text`.
fn kernel_head(path: &Path) -> Option<[u8; 64]> {
    use object::{Object, ObjectSection};
    use std::io::Read;
    let mut head = [0u8; 64];
    let mut file = std::fs::File::open(path).ok()?;
    file.read_exact(&mut head).ok()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        let file = std::fs::File::open(path).ok()?;
        flate2::read::GzDecoder::new(file)
            .read_exact(&mut head)
            .ok()?;
    } else if head.starts_with(b"\x7fELF") {
        let cache = object::read::ReadCache::new(file);
        let elf = object::File::parse(&cache).ok()?;
        let text = elf.section_by_name(".head.text")?;
        let bytes = text.data_range(0, 64).ok()??;
        head.copy_from_slice(bytes);
    }
    Some(head)
}

/// An arm64 Image header's page size, where its flags say one other than 4 KiB.
fn page_of_header(head: &[u8; 64]) -> Option<u64> {
    if &head[0x38..0x3c] != b"ARM\x64" {
        return None;
    }
    let flags = u64::from_le_bytes(head[0x18..0x20].try_into().ok()?);
    match (flags >> 1) & 3 {
        2 => Some(16 << 10),
        3 => Some(64 << 10),
        _ => None,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An arm64 Image header with `flags`.
    fn header(flags: u64) -> [u8; 64] {
        let mut h = [0u8; 64];
        h[0x18..0x20].copy_from_slice(&flags.to_le_bytes());
        h[0x38..0x3c].copy_from_slice(b"ARM\x64");
        h
    }

    #[test]
    fn an_arm64_image_s_flags_say_its_page_size() {
        // Bit 0 big-endian, bits 1-2 the page size, bit 3 where it may be placed.
        assert_eq!(page_of_header(&header(0b1010)), None, "4 KiB");
        assert_eq!(page_of_header(&header(0b1100)), Some(16384));
        assert_eq!(page_of_header(&header(0b1110)), Some(65536));
        assert_eq!(page_of_header(&header(0)), None, "not said: 4 KiB");
        let mut not_arm64 = header(0b1100);
        not_arm64[0x38..0x3c].copy_from_slice(b"RSC\x05");
        assert_eq!(page_of_header(&not_arm64), None);
    }

    /// A relocatable aarch64 ELF whose one section, `.head.text`, holds `head`.
    fn elf_with_head_text(head: &[u8; 64]) -> Vec<u8> {
        let names = b"\0.head.text\0.shstrtab\0";
        let shoff = 64 + 64 + names.len().next_multiple_of(8);
        let mut elf = Vec::new();
        elf.extend_from_slice(b"\x7fELF\x02\x01\x01");
        elf.resize(16, 0);
        elf.extend_from_slice(&1u16.to_le_bytes()); // ET_REL
        elf.extend_from_slice(&183u16.to_le_bytes()); // EM_AARCH64
        elf.extend_from_slice(&1u32.to_le_bytes());
        elf.extend_from_slice(&[0u8; 16]); // entry, phoff
        elf.extend_from_slice(&(shoff as u64).to_le_bytes());
        elf.extend_from_slice(&0u32.to_le_bytes());
        for half in [64u16, 0, 0, 64, 3, 2] {
            elf.extend_from_slice(&half.to_le_bytes());
        }
        elf.extend_from_slice(head);
        elf.extend_from_slice(names);
        elf.resize(shoff, 0);
        // name, type, flags, offset, size, align of each section; the first is empty.
        let sections: [(u32, u32, u64, u64, u64, u64); 3] = [
            (0, 0, 0, 0, 0, 0),
            (1, 1, 6, 64, 64, 4),
            (12, 3, 0, 128, names.len() as u64, 1),
        ];
        for (name, kind, flags, offset, size, align) in sections {
            elf.extend_from_slice(&name.to_le_bytes());
            elf.extend_from_slice(&kind.to_le_bytes());
            elf.extend_from_slice(&flags.to_le_bytes());
            elf.extend_from_slice(&0u64.to_le_bytes());
            elf.extend_from_slice(&offset.to_le_bytes());
            elf.extend_from_slice(&size.to_le_bytes());
            elf.extend_from_slice(&[0u8; 8]);
            elf.extend_from_slice(&align.to_le_bytes());
            elf.extend_from_slice(&0u64.to_le_bytes());
        }
        elf
    }

    /// The same header unpacked from gzip (a distribution's `vmlinuz`) and from an ELF
    /// vmlinux's `.head.text`.
    #[test]
    fn the_header_is_read_from_a_compressed_image_and_from_a_vmlinux() {
        use std::io::Write;
        let tmp = tempfile::tempdir().expect("temp dir");
        let raw = tmp.path().join("Image");
        let mut image = header(0b1100).to_vec();
        image.extend_from_slice(&[0u8; 4096]);
        std::fs::write(&raw, &image).expect("write");
        let gz = tmp.path().join("vmlinuz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&image).expect("gzip");
        std::fs::write(&gz, enc.finish().expect("gzip")).expect("write");
        let elf = tmp.path().join("vmlinux");
        std::fs::write(&elf, elf_with_head_text(&header(0b1110))).expect("write");
        assert_eq!(kernel_page(&[&raw]), Some(16384));
        assert_eq!(kernel_page(&[&gz]), Some(16384));
        assert_eq!(kernel_page(&[&elf]), Some(65536));
        // The first file that says one.
        let none = tmp.path().join("none");
        std::fs::write(&none, [0u8; 64]).expect("write");
        assert_eq!(kernel_page(&[&none, &elf]), Some(65536));
        assert_eq!(kernel_page(&[&none]), None);
    }
}
