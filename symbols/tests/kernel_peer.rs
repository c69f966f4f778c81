//! The kallsyms recovered from Debian's raw arm64 kernel images (6.1: the older table
//! layout; 6.12: the 6.4+ one, linked at the 6.4+ base) and its amd64 6.1 bzImage against a peer that reads the same
//! tables on its own: vmlinux-to-elf, whose output ELF lists them as symbols.
//! scripts/install-deps.sh caches both images and installs vmlinux-to-elf into a venv; a
//! missing one fails these tests.
//!
//! The peer is slow (a Python decoder: ~12 s for 6.1, ~22 s for 6.12), so its output is
//! cached too, keyed by the image's size and modification time.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, UNIX_EPOCH};

use common::{assert_same_addresses, cache, cached, load_kernel_image_as};
use object::elf::{FileHeader64, SHT_SYMTAB, STB_LOCAL, STT_FUNC};
use object::read::elf::{FileHeader, SectionHeader};
use object::LittleEndian;
use qemu_uftrace_symbols::Arch;

/// vmlinux-to-elf's ELF for `image`, made on first use and kept under the cache.
fn peer_elf(image: &Path, label: &str) -> PathBuf {
    let tool = cached("venv/bin/vmlinux-to-elf");
    let meta = std::fs::metadata(image).unwrap();
    let mtime = meta.modified().unwrap().duration_since(UNIX_EPOCH).unwrap();
    let dir = cache().join("vmlinux-to-elf");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!(
        "{label}-{}-{}.{:09}.elf",
        meta.len(),
        mtime.as_secs(),
        mtime.subsec_nanos()
    ));
    if out.is_file() {
        return out;
    }
    // Written aside and renamed: an interrupted run never leaves a truncated peer behind.
    let tmp = dir.join(format!("{label}.{}.tmp", std::process::id()));
    let t = Instant::now();
    let run = Command::new(&tool)
        .arg(image)
        .arg(&tmp)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (run scripts/install-deps.sh)",
                tool.display()
            )
        });
    assert!(
        run.status.success() && tmp.is_file(),
        "vmlinux-to-elf {} failed: {}{}",
        image.display(),
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    eprintln!("vmlinux-to-elf {label}: {:?}", t.elapsed());
    // Outputs for earlier images under the same label are stale.
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{label}-")) && name.ends_with(".elf") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// The vmlinux inside a bzImage (LZ4 payload), decompressed by the `lz4` tool into the cache.
fn bzimage_vmlinux(bzimage: &Path, label: &str) -> PathBuf {
    let data = std::fs::read(bzimage).unwrap();
    let word = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
    assert_eq!(&data[0x202..0x206], b"HdrS", "not a bzImage");
    let start = (data[0x1f1] as usize + 1) * 512 + word(0x248);
    let payload = &data[start..start + word(0x24c)];
    let dir = cache().join("vmlinux-to-elf");
    std::fs::create_dir_all(&dir).unwrap();
    let lz4 = dir.join(format!("{label}.payload.lz4"));
    let out = dir.join(format!("{label}.vmlinux"));
    std::fs::write(&lz4, payload).unwrap();
    let run = Command::new("lz4")
        .args(["-d", "-f", "-q"])
        .arg(&lz4)
        .arg(&out)
        .output()
        .expect("run lz4 (run scripts/install-deps.sh)");
    // lz4 exits non-zero at the 4-byte size the kernel's build appends after the last
    // frame, having written everything before it.
    let head = std::fs::read(&out).map(|d| d.get(..4) == Some(b"\x7fELF"));
    assert!(
        head.unwrap_or(false),
        "lz4 made no vmlinux: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// One address of the peer's functions: its names and whether any is non-local.
#[derive(Debug, Default)]
struct PeerEntry {
    names: BTreeSet<String>,
    global: bool,
}

/// The peer's function symbols: vmlinux-to-elf types kallsyms' `T`/`t`/`W`/`w` symbols
/// STT_FUNC and everything else STT_OBJECT, so its functions are exactly kallsyms' text
/// symbols. (Its section flags are no help: one RWX section holds the whole image.) Read
/// through the section table alone: the peer writes its program headers at an unaligned
/// offset, which `object::File` refuses.
fn peer_functions(elf: &Path) -> BTreeMap<u64, PeerEntry> {
    let data = std::fs::read(elf).unwrap();
    let data = &*data;
    let header = FileHeader64::<LittleEndian>::parse(data).unwrap();
    let endian = header.endian().unwrap();
    let sections = header.sections(endian, data).unwrap();
    // Read by hand: from an ELF input (a bzImage's vmlinux) the peer writes its symbol table
    // at an unaligned offset too.
    let (_, symtab) = sections
        .iter()
        .enumerate()
        .find(|(_, s)| s.sh_type(endian) == SHT_SYMTAB)
        .unwrap();
    let strtab = sections
        .section(object::SectionIndex(symtab.sh_link(endian) as usize))
        .unwrap();
    let range = |s: &object::elf::SectionHeader64<LittleEndian>| {
        let at = s.sh_offset(endian) as usize;
        &data[at..at + s.sh_size(endian) as usize]
    };
    let (syms, strings) = (range(symtab), range(strtab));
    let mut map: BTreeMap<u64, PeerEntry> = BTreeMap::new();
    for sym in syms.chunks_exact(24) {
        let info = sym[4];
        if info & 0xf != STT_FUNC {
            continue;
        }
        let name_at = u32::from_le_bytes(sym[..4].try_into().unwrap()) as usize;
        let name_len = strings[name_at..].iter().position(|&b| b == 0).unwrap();
        let name = &strings[name_at..name_at + name_len];
        let value = u64::from_le_bytes(sym[8..16].try_into().unwrap());
        let e = map.entry(value).or_default();
        e.names.insert(String::from_utf8(name.to_vec()).unwrap());
        e.global |= info >> 4 != STB_LOCAL;
    }
    map
}

/// Our functions from the raw image equal the peer's: the same addresses, our name one of
/// the peer's names there, and the same binding.
///
/// The one difference by design: the peer keeps every alias (several names at one address,
/// e.g. `memcpy`, `__memcpy`, `__pi_memcpy` or the `cpu_show_*` weak defaults), where we keep
/// one function per address. Mapping symbols (`$x`), which we drop, are not in kallsyms
/// (scripts/kallsyms leaves them out), so the address sets agree exactly. Binding: the peer
/// makes kallsyms' `w` (local weak) STB_WEAK where we call it local; neither kernel has a
/// function named only by `w` symbols, so the bindings agree too (a kernel that has one
/// fails here, to be looked at).
fn compare_with_peer(
    image_rel: &str,
    label: &str,
    arch: Arch,
    min_functions: usize,
) -> Vec<(u64, String)> {
    let vmlinuz = cached(image_rel);
    // The peer cannot open a bzImage: it reads the payload, decompressed by lz4(1).
    let vmlinuz = if arch == Arch::X86_64 {
        bzimage_vmlinux(&vmlinuz, label)
    } else {
        vmlinuz
    };
    let t = Instant::now();
    let image = load_kernel_image_as(image_rel, arch);
    let ours_time = t.elapsed();
    let peer = peer_functions(&peer_elf(&vmlinuz, label));
    let peer_symbols: usize = peer.values().map(|e| e.names.len()).sum();
    eprintln!(
        "{label}: ours {} functions in {ours_time:?}; vmlinux-to-elf {} addresses, {} function \
         symbols (aliases included)",
        image.functions.len(),
        peer.len(),
        peer_symbols
    );

    let ours: BTreeMap<u64, &qemu_uftrace_symbols::Function> =
        image.functions.iter().map(|f| (f.addr, f)).collect();
    assert_same_addresses(&ours, &peer, &format!("the {label} peer"));
    let wrong: Vec<_> = ours
        .iter()
        .filter(|(a, f)| {
            let e = &peer[a];
            !e.names.contains(&f.name) || e.global != f.global
        })
        .map(|(a, f)| (*a, f, &peer[a]))
        .take(10)
        .collect();
    assert!(
        wrong.is_empty(),
        "{label}: name or binding differs: {wrong:x?}"
    );

    assert!(
        image.functions.len() >= min_functions,
        "{label}: only {} functions",
        image.functions.len()
    );
    // (`_stext`: each test looks it up; on x86 `_text` names its address.)
    let name = "start_kernel";
    assert!(
        image.functions.iter().any(|f| f.name == name)
            && peer.values().any(|e| e.names.contains(name)),
        "{label}: {name} missing"
    );
    image
        .functions
        .iter()
        .map(|f| (f.addr, f.name.clone()))
        .collect()
}

#[test]
fn debian_6_1_matches_vmlinux_to_elf() {
    let functions = compare_with_peer("kernel/vmlinuz", "6.1", Arch::Aarch64, 40_000);
    // Linked at the pre-6.4 KIMAGE_VADDR.
    let (addr, _) = functions.iter().find(|(_, n)| n == "_stext").unwrap();
    assert_eq!(*addr, 0xffff_8000_0801_0000);
}

#[test]
fn debian_6_12_matches_vmlinux_to_elf() {
    let package = std::fs::read_to_string(cached("kernel-6.12/package")).unwrap();
    assert!(
        package.starts_with("linux-image-6.12."),
        "kernel-6.12/package names {package:?}"
    );
    let functions = compare_with_peer("kernel-6.12/vmlinuz", "6.12", Arch::Aarch64, 45_000);
    // 6.4 moved the kernel image to the start of the vmalloc area.
    let (addr, _) = functions.iter().find(|(_, n)| n == "_stext").unwrap();
    assert_eq!(*addr, 0xffff_8000_8001_0000);
}

#[test]
fn debian_amd64_bzimage_matches_vmlinux_to_elf() {
    // The bzImage's payload is LZ4 in legacy frames; x86_64 keeps per-CPU symbols as absolute
    // addresses in kallsyms (CONFIG_KALLSYMS_ABSOLUTE_PERCPU).
    let functions = compare_with_peer("kernel-amd64/vmlinuz", "6.1-amd64", Arch::X86_64, 40_000);
    let (addr, _) = functions.iter().find(|(_, n)| n == "_text").unwrap();
    assert_eq!(*addr, 0xffff_ffff_8100_0000);
}

/// Data symbols too: the per-CPU `current_task` (the plugin follows x86_64 task switches
/// through its writes) at its offset in the per-CPU area, functions at their addresses.
#[test]
fn debian_amd64_bzimage_kernel_symbol_addresses() {
    let bzimage = cached("kernel-amd64/vmlinuz");
    let current = qemu_uftrace_symbols::kernel_symbol_address(&bzimage, "current_task")
        .unwrap()
        .expect("current_task in kallsyms");
    assert!(
        current > 0 && current < 0x10_0000,
        "current_task at {current:#x}"
    );
    let image = load_kernel_image_as("kernel-amd64/vmlinuz", Arch::X86_64);
    let start_kernel = image.functions.iter().find(|f| f.name == "start_kernel");
    assert_eq!(
        qemu_uftrace_symbols::kernel_symbol_address(&bzimage, "start_kernel").unwrap(),
        start_kernel.map(|f| f.addr)
    );
    assert_eq!(
        qemu_uftrace_symbols::kernel_symbol_address(&bzimage, "no_such_symbol").unwrap(),
        None
    );
}
