//! An arm64 or riscv64 Linux kernel runs its first instructions with the MMU off, at the
//! physical address QEMU loaded its `Image` to, and only later at its link address; an x86
//! kernel likewise runs its first instructions at the physical address its bzImage
//! decompressor put it at. The same
//! symbols, shifted to that physical address, name those early calls.

use std::io::Read;
use std::path::{Path, PathBuf};

use qemu_uftrace_format::map::MapEntry;
use qemu_uftrace_symbols::{Function, Image};

use crate::qemu::{last_option_key, QemuOption};

/// What of the QEMU command line decides where a kernel Image lands: the board (`-M`) and
/// whether firmware comes first (`-bios none` says none). Read once, with the rest of the
/// command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Board {
    /// The machine type, `virt` in `-M virt,gic-version=3` (the last `-M`/`-machine`).
    pub machine: Option<String>,
    /// `-bios none` (the last `-bios`).
    pub no_firmware: bool,
}

impl Board {
    pub fn from_options(opts: &[QemuOption]) -> Board {
        let no_firmware = opts
            .iter()
            .rev()
            .find(|o| o.name == "bios")
            .and_then(|o| o.value.as_ref())
            .is_some_and(|v| v == "none");
        Board {
            machine: last_option_key(opts, &["M", "machine"], "type", "type"),
            no_firmware,
        }
    }
}

/// The extension [`physical_alias`] gives the kernel's path for its copy: its map entry's
/// and its `.sym` file's name.
const PHYSICAL_EXTENSION: &str = "phys";

/// Whether `path` names a kernel's physical-address copy (a map entry's path, or an image's).
pub fn is_physical_copy(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == PHYSICAL_EXTENSION)
}

/// The boot's map entries (the images the CLI placed: never a guest's file, whose name could
/// end in `.phys`) without the kernel's physical-address copy: for the map of a session
/// other than the boot's (a process's, a kernel thread's), as only the boot's first
/// instructions run there. uftrace matches its fork/exec/setjmp handlers against every symbol of every
/// map of every session each time it reads a trace, so the copy in each session's map
/// doubled the time of every pass over a systemd boot (`report --tid 1`: 13.2 s, 7.0 s
/// without; 494 sessions). On x86_64 its range (16 MiB on) could also hide a large non-PIE
/// program's own code.
pub fn without_physical_copy(entries: Vec<MapEntry>) -> Vec<MapEntry> {
    entries
        .into_iter()
        .filter(|e| !is_physical_copy(Path::new(e.path.as_str())))
        .collect()
}

/// Where the arm64 Image header keeps its magic, text_offset and image_size.
const MAGIC_OFFSET: usize = 0x38;
/// RAM starts here on QEMU's `virt` board (hw/arm/virt.c).
const VIRT_RAM_BASE: u64 = 0x4000_0000;
/// QEMU keeps its boot stub below this and moves a kernel with a small text_offset up by 2 MiB
/// (hw/arm/boot.c); header-less images go at 0x80000.
const BOOTLOADER_MAX_SIZE: u64 = 4 * 1024;
const LEGACY_LOAD_OFFSET: u64 = 0x8_0000;

/// RAM starts here on QEMU's riscv `virt` board (hw/riscv/virt.c).
const RISCV_VIRT_RAM_BASE: u64 = 0x8000_0000;

/// The kind of boot image a kernel file is, from its header's magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ImageKind {
    Arm64,
    Riscv64,
    /// A bzImage (its setup header, not an Image header).
    X86,
}

fn image_header(kernel: &Path) -> Option<(ImageKind, [u8; 64])> {
    let mut header = [0u8; 64];
    std::fs::File::open(kernel)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    let kind = match &header[MAGIC_OFFSET..MAGIC_OFFSET + 4] {
        b"ARM\x64" => ImageKind::Arm64,
        b"RSC\x05" => ImageKind::Riscv64,
        _ => return None,
    };
    Some((kind, header))
}

/// Where QEMU loads a RISC-V Image on `virt` (hw/riscv/boot.c): the first 2 MiB boundary
/// after the firmware, which starts RAM (OpenSBI is far smaller than 2 MiB); at RAM base
/// itself with `-bios none`.
fn riscv_load_address(board: &Board) -> u64 {
    RISCV_VIRT_RAM_BASE
        + if board.no_firmware {
            0
        } else {
            2 * 1024 * 1024
        }
}

/// Where QEMU loads this kernel Image on `board`, or None when the file is not one (an ELF
/// vmlinux, a compressed image, firmware) or the board is not one we know.
fn image_load_address(kernel: &Path, board: &Board) -> Option<u64> {
    let (kind, header) = image_header(kernel)?;
    match kind {
        ImageKind::Arm64 => Some(ram_base(board)? + image_load_offset(&header)),
        ImageKind::Riscv64 => ram_base(board).map(|_| riscv_load_address(board)),
        ImageKind::X86 => None,
    }
}

/// The offset from RAM base at which QEMU loads an arm64 Image with this header.
fn image_load_offset(header: &[u8; 64]) -> u64 {
    let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or([0; 8]));
    let (text_offset, image_size) = (word(8), word(16));
    match (image_size, text_offset) {
        (0, _) => LEGACY_LOAD_OFFSET,
        (_, t) if t < BOOTLOADER_MAX_SIZE => t + 2 * 1024 * 1024,
        (_, t) => t,
    }
}

/// Where an x86 bzImage's kernel runs before it switches to its link address: the setup
/// header's `pref_address` (boot protocol 2.10+), where the decompressor puts a relocatable
/// kernel when it does not randomise it (`nokaslr`).
fn bzimage_load_address(kernel: &Path) -> Option<u64> {
    let mut header = [0u8; 0x260];
    std::fs::File::open(kernel)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    let version = u16::from_le_bytes([header[0x206], header[0x207]]);
    if &header[0x202..0x206] != b"HdrS" || version < 0x20a {
        return None;
    }
    Some(u64::from_le_bytes(header[0x258..0x260].try_into().ok()?))
}

/// RAM base of the machine named by `-M`/`-machine`, for the boards we know.
fn ram_base(board: &Board) -> Option<u64> {
    let kind = board.machine.as_deref()?;
    (kind == "virt" || kind.starts_with("virt-")).then_some(VIRT_RAM_BASE)
}

/// The link address of the Image's first byte. arm64: `_text`, which kallsyms tables often
/// lack; then `_stext`, which follows the Image header within the 2 MiB-aligned start of the
/// kernel (arch/arm64/kernel/vmlinux.lds.S). riscv64: `_start`, the header's own code
/// (`_text` is a page further, arch/riscv/kernel/vmlinux.lds.S).
fn kernel_text(img: &Image, kind: ImageKind) -> Option<u64> {
    let find = |name: &str| {
        img.functions
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.addr)
    };
    match kind {
        ImageKind::Arm64 => {
            find("_text").or_else(|| find("_stext").map(|a| a & !(2 * 1024 * 1024 - 1)))
        }
        ImageKind::Riscv64 => find("_start"),
        ImageKind::X86 => find("_text"),
    }
}

/// Whether `kernel` starts with a Linux boot image's header: an arm64 or riscv64 `Image`,
/// or an x86 bzImage's setup header.
pub fn is_linux_image(kernel: &Path) -> bool {
    if image_header(kernel).is_some() {
        return true;
    }
    let mut header = [0u8; 0x206];
    std::fs::File::open(kernel)
        .and_then(|mut f| f.read_exact(&mut header))
        .is_ok_and(|()| &header[0x202..0x206] == b"HdrS")
}

/// The kernel's symbols shifted to its physical load address, when `kernel` is an arm64 or
/// riscv64 Image on a board we know, or an x86 bzImage, and one of `images` holds its
/// link-time symbols (`_text`).
pub fn physical_alias<'a>(
    images: impl IntoIterator<Item = &'a Image>,
    kernel: &Path,
    board: &Board,
) -> Option<Image> {
    let (load, kind) = match image_header(kernel) {
        Some((kind, _)) => (image_load_address(kernel, board)?, kind),
        None => (bzimage_load_address(kernel)?, ImageKind::X86),
    };
    let (img, text) = images
        .into_iter()
        .find_map(|img| kernel_text(img, kind).map(|t| (img, t)))?;
    let shift = |addr: u64| addr.wrapping_sub(text).wrapping_add(load);
    let functions: Vec<Function> = img
        .functions
        .iter()
        .filter(|f| f.addr >= text)
        .map(|f| Function {
            addr: shift(f.addr),
            ..f.clone()
        })
        .collect();
    let mut path = std::path::absolute(&img.path)
        .unwrap_or_else(|_| img.path.clone())
        .into_os_string();
    path.push(".");
    path.push(PHYSICAL_EXTENSION);
    Some(Image {
        path: PathBuf::from(path),
        start: load,
        end: shift(img.end),
        functions,
        arch: img.arch,
        modules: Vec::new(),
        by_address: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn opt(name: &str, value: &str) -> QemuOption {
        QemuOption {
            name: name.into(),
            value: Some(OsString::from(value)),
        }
    }

    fn board(opts: &[QemuOption]) -> Board {
        Board::from_options(opts)
    }

    fn arm64_image(dir: &Path, text_offset: u64, image_size: u64) -> PathBuf {
        let mut h = vec![0u8; 64];
        h[8..16].copy_from_slice(&text_offset.to_le_bytes());
        h[16..24].copy_from_slice(&image_size.to_le_bytes());
        h[MAGIC_OFFSET..MAGIC_OFFSET + 4].copy_from_slice(b"ARM\x64");
        let p = dir.join("Image");
        std::fs::write(&p, h).unwrap();
        p
    }

    fn kernel_syms() -> Image {
        let f = |addr, name: &str| Function {
            addr,
            size: 0x10,
            name: name.into(),
            global: true,
            line: None,
        };
        Image {
            path: PathBuf::from("/k/Image"),
            start: 0xffff_8000_0800_0000,
            end: 0xffff_8000_0a00_0000,
            functions: vec![
                f(0xffff_8000_0800_0000, "_text"),
                f(0xffff_8000_08bd_2098, "init_kernel_el"),
            ],
            arch: None,
            modules: Vec::new(),
            by_address: Vec::new(),
        }
    }

    #[test]
    fn debian_image_on_virt_lands_two_mib_into_ram() {
        let dir = tempfile::tempdir().unwrap();
        let k = arm64_image(dir.path(), 0, 0x1ab_0000);
        let alias = physical_alias(
            &[kernel_syms()],
            &k,
            &board(&[opt("M", "virt,gic-version=3")]),
        )
        .unwrap();
        assert_eq!(alias.start, 0x4020_0000);
        assert_eq!(alias.functions[1].addr, 0x40dd_2098);
        assert_eq!(alias.functions[1].name, "init_kernel_el");
        assert!(alias.path.to_string_lossy().ends_with("Image.phys"));
    }

    #[test]
    fn kallsyms_without_text_fall_back_to_stext() {
        let dir = tempfile::tempdir().unwrap();
        let k = arm64_image(dir.path(), 0, 0x1ab_0000);
        let mut syms = kernel_syms();
        syms.functions[0].addr = 0xffff_8000_0801_0000;
        syms.functions[0].name = "_stext".into();
        let alias = physical_alias(&[syms], &k, &board(&[opt("M", "virt")])).unwrap();
        assert_eq!(alias.functions[0].addr, 0x4021_0000);
        assert_eq!(alias.functions[1].addr, 0x40dd_2098);
    }

    #[test]
    fn only_for_arm64_images_on_known_boards() {
        let dir = tempfile::tempdir().unwrap();
        let k = arm64_image(dir.path(), 0, 0x1000);
        assert!(physical_alias(&[kernel_syms()], &k, &board(&[opt("M", "sbsa-ref")])).is_none());
        assert!(physical_alias(&[kernel_syms()], &k, &Board::default()).is_none());
        let elf = dir.path().join("vmlinux");
        std::fs::write(&elf, b"\x7fELF").unwrap();
        assert!(physical_alias(&[kernel_syms()], &elf, &board(&[opt("M", "virt")])).is_none());
    }

    #[test]
    fn x86_bzimages_at_their_preferred_address_on_any_board() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = vec![0u8; 0x260];
        h[0x202..0x206].copy_from_slice(b"HdrS");
        h[0x206..0x208].copy_from_slice(&0x20fu16.to_le_bytes());
        h[0x258..0x260].copy_from_slice(&0x100_0000u64.to_le_bytes());
        let k = dir.path().join("bzImage");
        std::fs::write(&k, &h).unwrap();
        let mut syms = kernel_syms();
        syms.functions[0].addr = 0xffff_ffff_8100_0000;
        syms.functions[1].addr = 0xffff_ffff_8100_0e30;
        let alias = physical_alias(&[syms.clone()], &k, &board(&[opt("M", "pc")])).unwrap();
        assert_eq!(alias.functions[0].addr, 0x100_0000);
        assert_eq!(alias.functions[1].addr, 0x100_0e30);
        // Boot protocol before 2.10: no pref_address.
        h[0x206..0x208].copy_from_slice(&0x209u16.to_le_bytes());
        std::fs::write(&k, &h).unwrap();
        assert!(physical_alias(&[syms], &k, &Board::default()).is_none());
    }

    #[test]
    fn legacy_and_high_text_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let offset = |k: PathBuf| {
            image_load_address(&k, &board(&[opt("M", "virt")])).unwrap() - VIRT_RAM_BASE
        };
        assert_eq!(
            offset(arm64_image(dir.path(), 0x80000, 0)),
            LEGACY_LOAD_OFFSET
        );
        assert_eq!(offset(arm64_image(dir.path(), 0x80000, 0x1000)), 0x80000);
    }

    #[test]
    fn riscv64_image_on_virt_follows_the_firmware() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = vec![0u8; 64];
        h[8..16].copy_from_slice(&0x20_0000u64.to_le_bytes());
        h[48..56].copy_from_slice(b"RISCV\0\0\0");
        h[MAGIC_OFFSET..MAGIC_OFFSET + 4].copy_from_slice(b"RSC\x05");
        let k = dir.path().join("Image");
        std::fs::write(&k, h).unwrap();
        let f = |addr, name: &str| Function {
            addr,
            size: 0x10,
            name: name.into(),
            global: true,
            line: None,
        };
        let syms = Image {
            path: PathBuf::from("/k/Image"),
            start: 0xffff_ffff_8000_0000,
            end: 0xffff_ffff_8200_0000,
            functions: vec![
                f(0xffff_ffff_8000_0000, "_start"),
                f(0xffff_ffff_8000_1000, "_text"),
                f(0xffff_ffff_8019_5db0, "setup_vm"),
            ],
            arch: None,
            modules: Vec::new(),
            by_address: Vec::new(),
        };
        // OpenSBI (-bios default or a firmware file) starts RAM: the kernel 2 MiB above.
        let alias =
            physical_alias(std::slice::from_ref(&syms), &k, &board(&[opt("M", "virt")])).unwrap();
        assert_eq!(alias.start, 0x8020_0000);
        assert_eq!(alias.functions[2].addr, 0x8039_5db0);
        let bare = [opt("M", "virt"), opt("bios", "none")];
        let alias = physical_alias(&[syms], &k, &board(&bare)).unwrap();
        assert_eq!(alias.functions[2].addr, 0x8019_5db0);
    }
}
