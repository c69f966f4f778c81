//! A Linux kernel given with -kernel randomises its base (KASLR) unless told not to. The
//! plugin finds the offset where the kernel first runs in the upper half of the address
//! space (an anchor this module picks from the kernel's symbols while QEMU starts,
//! [`anchor_text`]), and the kernel's symbols are moved by it after the run
//! ([`moved_images`]); the summary says the offset ([`outcome_line`]). Where it cannot be
//! found (no symbols to pick an anchor from, a kernel this cannot tell from its file, an
//! architecture without one) the warning stays: said before QEMU starts, from the kernel
//! file's header (an arm64/riscv64 `Image`, an x86 bzImage, or an ELF vmlinux with
//! `start_kernel`), or once its symbols are loaded.

use std::path::Path;

use object::{Object, ObjectSymbol};
use qemu_uftrace_symbols::{Arch, Image};

use crate::symbol_source::Loaded;

use crate::qemu::ImageOrigin;

/// The warning, with how to turn KASLR off on this architecture.
pub fn warning(advice: &str) -> String {
    format!(
        "the guest kernel picks a random base address (KASLR) unless booted with nokaslr, \
         and then its symbols do not match; {advice}"
    )
}

/// The file in the staging directory the plugin reads the anchor from (`kaslr_file=`).
pub const ANCHOR_FILE: &str = ".kaslr";

/// What the plugin writes as it finds the offset (the lines `plugin.stats` ends with).
pub const FOUND_FILE: &str = "plugin.kaslr";

/// Where each architecture's kernel first runs in the upper half, the most recent first:
/// the function, how far into it that block may start, and the granule its base moves by.
/// arm64 enters `__primary_switched` by `br x8` once the MMU maps the kernel (its base
/// moves by 2 MiB, 64 KiB checked); x86_64 6.1 jumps to its link address by `jmp *%rax`
/// inside `secondary_startup_64` (6.9 and later: into `common_startup_64`), its base moving
/// by `CONFIG_PHYSICAL_ALIGN`, a multiple of 2 MiB; riscv64 enters its virtual addresses in
/// `relocate_enable_mmu` (a trap to the next instruction), by 2 MiB.
fn anchors(arch: Arch) -> &'static [(&'static str, u64, u64)] {
    const TWO_MIB: u64 = 2 << 20;
    match arch {
        Arch::Aarch64 => &[("__primary_switched", 1, 0x1_0000)],
        Arch::X86_64 => &[
            ("common_startup_64", 0x1000, TWO_MIB),
            ("secondary_startup_64", 0x1000, TWO_MIB),
        ],
        Arch::Riscv64 => &[("relocate_enable_mmu", 0x1000, TWO_MIB)],
    }
}

/// Whether `img` holds a Linux kernel's own symbols (not a module's, not firmware's).
fn is_kernel(img: &Image) -> bool {
    has_start(img) && img.start >> 63 == 1
}

/// The plugin's anchor line (`state::kaslr`): `anchor START SIZE GRANULE LO HI NAME` in hex,
/// `LO..HI` the kernel image's range; or `none WHY`.
pub fn anchor_text<'a>(images: impl IntoIterator<Item = &'a Image>, arch: Arch) -> String {
    let names = anchors(arch);
    let mut kernels = images.into_iter().filter(|i| is_kernel(i)).peekable();
    if kernels.peek().is_none() {
        return "none the kernel's symbols were not found\n".into();
    }
    for img in kernels {
        for &(name, size, granule) in names {
            if let Some(f) = img.functions.iter().find(|f| f.name == name) {
                return format!(
                    "anchor {:x} {size:x} {granule:x} {:x} {:x} {name}\n",
                    f.addr, img.start, img.end
                );
            }
        }
    }
    format!("none the kernel's symbols have no {}\n", names[0].0)
}

/// A run from a snapshot has no boot to watch: the plugin looks for the kernel's version
/// banner in guest memory instead, at the offsets (multiples of the granule) that put its
/// first upper-half block inside the image. Its line: `banner ADDR GRANULE LO HI BYTES`
/// (hex; `ADDR` where the banner is linked, `BYTES` its first bytes), or `none WHY`. The
/// banner comes from the kernel's symbol file, else from `kernel` (the `-kernel` file).
pub fn banner_text<'a>(
    images: impl IntoIterator<Item = &'a Image>,
    kernel: Option<&Path>,
    arch: Arch,
) -> String {
    let Some(img) = images.into_iter().find(|i| is_kernel(i)) else {
        return "none the kernel's symbols were not found\n".into();
    };
    let granule = anchors(arch)[0].2;
    let files = std::iter::once(img.path.as_path()).chain(kernel);
    let found = files
        .filter_map(|f| qemu_uftrace_symbols::kernel_banner(f).ok().flatten())
        .next();
    match found {
        Some(b) => {
            let bytes: String = b.bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!(
                "banner {:x} {granule:x} {:x} {:x} {bytes}\n",
                b.addr, img.start, img.end
            )
        }
        None => format!(
            "none no \"Linux version\" banner was found in {}\n",
            img.path.display()
        ),
    }
}

/// How far the kernel ran from its symbols: its image in the upper half (`virt`), and its
/// physical-address copy (`phys`: an x86 kernel draws its physical base apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Moves {
    pub virt: u64,
    pub phys: u64,
}

/// What the plugin found (`kaslr_offset=`, and where the anchor's block was in guest
/// memory: `kaslr_phys_at=`), against the images the trace's symbols come from; `None` when
/// nothing moved.
pub fn moves(stats: &crate::stats::Stats, images: &[Image]) -> Option<Moves> {
    let virt = offset(stats)?;
    let phys = (|| {
        let hex = |key: &str| {
            let v = stats.other_value(key)?;
            u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
        };
        let (at, ran_at) = (hex("kaslr_found_at")?, hex("kaslr_phys_at")?);
        let name = stats.other_value("kaslr_anchor")?;
        let addr = |img: &Image| {
            img.functions
                .iter()
                .find(|f| f.name == name)
                .map(|f| f.addr)
        };
        let linked = images.iter().filter(|i| is_kernel(i)).find_map(addr)?;
        let copy = images
            .iter()
            .filter(|i| crate::kernel_alias::is_physical_copy(&i.path))
            .find_map(addr)?;
        // The block's place in the copy, as it would be at the link address.
        let expected = copy.wrapping_add(at.wrapping_sub(virt).wrapping_sub(linked));
        Some(ran_at.wrapping_sub(expected))
    })()
    .unwrap_or(0);
    (virt != 0 || phys != 0).then_some(Moves { virt, phys })
}

/// The kernel's symbols where it ran: every image of a kernel's own symbols moved by
/// `moves.virt`, its physical-address copy by `moves.phys`, the rest (modules, firmware)
/// as they were.
pub fn moved_images(images: Vec<Image>, moves: Moves) -> Vec<Image> {
    images
        .into_iter()
        .map(|img| {
            if crate::kernel_alias::is_physical_copy(&img.path) {
                return img.shifted(moves.phys);
            }
            if !is_kernel(&img) {
                return img;
            }
            let offset = moves.virt;
            // Kallsyms' modules are placed apart from the kernel, and stay.
            let mut img = img;
            let modules = std::mem::take(&mut img.modules);
            let mut moved = img.shifted(offset);
            moved.modules = modules;
            moved
        })
        .collect()
}

/// What the plugin found, for the summary: a note of the offset (`Ok`), a warning where
/// none was found and KASLR may be on (`Err`), or nothing (not looked for, or no offset).
pub fn outcome_line(
    stats: &crate::stats::Stats,
    kaslr_off: bool,
    advice: &str,
) -> Option<Result<String, String>> {
    if let Some(offset) = offset(stats).filter(|&o| o != 0) {
        let how = match stats.other_value("kaslr_anchor") {
            // The plugin's name for a run from a snapshot (`state::kaslr::BANNER`).
            Some("linux_banner") => "found by its version banner in guest memory".to_string(),
            at => format!("found where it entered {}", at.unwrap_or("its start")),
        };
        return Some(Ok(format!(
            "the guest kernel ran at a random base (KASLR), {offset:#x} above its link address \
             ({how}): its symbols were moved to match"
        )));
    }
    let why = stats.other_value("kaslr_unknown").filter(|_| !kaslr_off)?;
    Some(Err(format!(
        "the guest kernel's base address was not found ({why}): if it picked a random one \
         (KASLR), its symbols do not match; {advice}"
    )))
}

/// Whether `path` is an ELF vmlinux (its symbols have `start_kernel`), which moves with the
/// kernel's base.
pub fn is_kernel_elf(path: &Path) -> bool {
    elf_has_start_kernel(path)
}

/// The offset the plugin found (`kaslr_offset=`).
pub fn offset(stats: &crate::stats::Stats) -> Option<u64> {
    let text = stats.other_value("kaslr_offset")?;
    u64::from_str_radix(text.trim_start_matches("0x"), 16).ok()
}

/// Whether `kernel` is a Linux kernel, from its first bytes (or an ELF's symbol table).
pub fn is_linux_kernel(kernel: &Path) -> bool {
    crate::kernel_alias::is_linux_image(kernel)
        || gzipped_arm64_image(kernel)
        || elf_has_start_kernel(kernel)
}

/// A gzip-compressed arm64 `Image` (some distributions' `vmlinuz`), which QEMU unpacks:
/// the Image header's magic in its first unpacked bytes.
fn gzipped_arm64_image(path: &Path) -> bool {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut header = [0u8; 64];
    flate2::read::GzDecoder::new(file)
        .read_exact(&mut header)
        .is_ok_and(|()| &header[0x38..0x3c] == b"ARM\x64")
}

/// An ELF vmlinux has `start_kernel`; bare-metal and firmware ELFs do not. Read through a
/// cache: only the symbol table is read from what may be a file of hundreds of MB.
fn elf_has_start_kernel(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let cache = object::read::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return false;
    };
    elf.symbols()
        .any(|s| s.name_bytes().is_ok_and(|n| n == b"start_kernel"))
}

/// Whether the loaded symbols show a Linux kernel given with -kernel (for a kernel file
/// [`is_linux_kernel`] could not tell, such as a compressed one with `--symbols vmlinux`).
pub fn symbols_show_linux(loaded: &[Loaded]) -> bool {
    loaded.iter().any(|l| match l {
        Loaded::Ok(src, img) => src.origin == ImageOrigin::Kernel.option() && has_start(img),
        Loaded::Failed(..) => false,
    })
}

fn has_start(img: &Image) -> bool {
    img.functions.iter().any(|f| f.name == "start_kernel")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(addr: u64, name: &str) -> qemu_uftrace_symbols::Function {
        qemu_uftrace_symbols::Function {
            addr,
            size: 4,
            name: name.into(),
            global: true,
            line: None,
        }
    }

    fn kernel(start: u64, names: &[(u64, &str)]) -> Image {
        Image {
            path: "vmlinux".into(),
            start,
            end: start + 0x100_0000,
            functions: names.iter().map(|&(a, n)| function(a, n)).collect(),
            arch: None,
            modules: vec![Image {
                path: "ext4".into(),
                start: 0xffff_8000_0100_0000,
                end: 0xffff_8000_0100_1000,
                functions: vec![function(0xffff_8000_0100_0000, "ext4_init")],
                arch: None,
                modules: Vec::new(),
                by_address: Vec::new(),
            }],
            by_address: Vec::new(),
        }
    }

    #[test]
    fn anchors_come_from_the_kernel_s_symbols() {
        let arm = kernel(
            0xffff_8000_0800_0000,
            &[
                (0xffff_8000_0801_0000, "start_kernel"),
                (0xffff_8000_0939_8f9c, "__primary_switched"),
            ],
        );
        assert_eq!(
            anchor_text([&arm], Arch::Aarch64),
            "anchor ffff800009398f9c 1 10000 ffff800008000000 ffff800009000000 \
             __primary_switched\n"
        );
        // x86_64: the newer name first, else the older.
        let x86 = kernel(
            0xffff_ffff_8100_0000,
            &[
                (0xffff_ffff_8100_0070, "secondary_startup_64"),
                (0xffff_ffff_8200_0000, "start_kernel"),
            ],
        );
        assert!(
            anchor_text([&x86], Arch::X86_64).starts_with("anchor ffffffff81000070 1000 200000 ")
        );
        assert_eq!(
            anchor_text([&x86], Arch::Aarch64),
            "none the kernel's symbols have no __primary_switched\n"
        );
        // Firmware or a bare-metal program: no kernel.
        let firmware = kernel(0x8000_0000, &[(0x8000_0000, "start_kernel")]);
        assert_eq!(
            anchor_text([&firmware], Arch::Riscv64),
            "none the kernel's symbols were not found\n"
        );
    }

    #[test]
    fn only_the_kernel_s_own_symbols_move() {
        let arm = kernel(
            0xffff_8000_0800_0000,
            &[(0xffff_8000_0801_0000, "start_kernel")],
        );
        let phys = kernel(0x4020_0000, &[(0x4021_0000, "start_kernel")]);
        let moved = moved_images(
            vec![arm, phys],
            Moves {
                virt: 0x2_0000_0000,
                phys: 0,
            },
        );
        assert_eq!(moved[0].start, 0xffff_8002_0800_0000);
        assert_eq!(moved[0].functions[0].addr, 0xffff_8002_0801_0000);
        assert_eq!(moved[0].modules[0].functions[0].addr, 0xffff_8000_0100_0000);
        assert_eq!(moved[1].functions[0].addr, 0x4021_0000);
    }

    #[test]
    fn the_physical_copy_moves_by_where_the_anchor_ran() {
        // x86_64: the block after `jmp *%rax` (secondary_startup_64+0x63) ran 0x18000000
        // above its link address, at physical 0x6a000d3 (linked for 0x10000d3).
        let stats = crate::stats::Stats::parse(
            "kaslr_offset=0x18000000\nkaslr_found_at=0xffffffff990000d3\n\
             kaslr_anchor=secondary_startup_64\nkaslr_phys_at=0x6a000d3\n",
        );
        let names = [
            (0xffff_ffff_8100_0070, "secondary_startup_64"),
            (0xffff_ffff_8200_0000, "start_kernel"),
        ];
        let virt = kernel(0xffff_ffff_8100_0000, &names);
        let mut phys = kernel(0x100_0000, &[(0x100_0070, "secondary_startup_64")]);
        phys.path = "vmlinuz.phys".into();
        let moves = moves(&stats, &[virt, phys]).unwrap();
        assert_eq!(
            moves,
            Moves {
                virt: 0x1800_0000,
                phys: 0x5a0_0000
            }
        );
        // Nothing moved: nothing to rewrite.
        let still = crate::stats::Stats::parse("kaslr_offset=0x0\n");
        assert_eq!(super::moves(&still, &[]), None);
    }

    #[test]
    fn kernels_are_told_by_their_headers() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("Image");
        let mut h = vec![0u8; 64];
        h[0x38..0x3c].copy_from_slice(b"ARM\x64");
        std::fs::write(&image, &h).unwrap();
        assert!(is_linux_kernel(&image));
        let bz = dir.path().join("bzImage");
        let mut h = vec![0u8; 0x260];
        h[0x202..0x206].copy_from_slice(b"HdrS");
        std::fs::write(&bz, &h).unwrap();
        assert!(is_linux_kernel(&bz));
        let gz = dir.path().join("vmlinuz");
        let mut h = vec![0u8; 64];
        h[0x38..0x3c].copy_from_slice(b"ARM\x64");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, &h).unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        assert!(is_linux_kernel(&gz));
        // An ELF without start_kernel (a bare-metal guest, here a host program), or no file.
        assert!(!is_linux_kernel(Path::new("/bin/sh")));
        assert!(!is_linux_kernel(&dir.path().join("none")));
        let short = dir.path().join("short");
        std::fs::write(&short, b"\x7fELF").unwrap();
        assert!(!is_linux_kernel(&short));
    }
}
