//! A Linux kernel given with -kernel randomises its base (KASLR) unless told not to, and then
//! none of its symbols match. Said before QEMU starts, from the kernel file's header (an
//! arm64/riscv64 `Image`, an x86 bzImage, or an ELF vmlinux with `start_kernel`); a kernel
//! this cannot tell is caught later, once its symbols are loaded.

use std::path::Path;

use object::{Object, ObjectSymbol};
use qemu_uftrace_symbols::Image;

use crate::symbol_source::Loaded;

use crate::qemu::ImageOrigin;

/// The warning, with how to turn KASLR off on this architecture.
pub fn warning(advice: &str) -> String {
    format!(
        "the guest kernel picks a random base address (KASLR) unless booted with nokaslr, \
         and then its symbols do not match; {advice}"
    )
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
