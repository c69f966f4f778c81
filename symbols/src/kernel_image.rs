//! Raw kernel images (arm64 `Image`, gzip-compressed, or EFI zboot `vmlinuz`; x86
//! `bzImage`): symbols recovered from the kallsyms tables the kernel carries for itself.

use std::hash::Hasher;
use std::io::Read;
use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use crate::functions::Candidate;
use crate::kallsyms_tables::{self, find_bytes, u32_at, u64_at, RawSymbol};
use crate::system_map::{image_from_symbols, is_etext, text_candidate};
use crate::{Arch, Image, LoadOptions, SymbolError};

/// No decompressed kernel comes near this; the cap keeps a forged gzip stream from
/// filling memory.
const MAX_UNCOMPRESSED: u64 = 512 << 20;

/// Where arm64 kernels are linked when the image itself does not tell: KIMAGE_VADDR for
/// 48-bit VAs before 6.4 (`MODULES_END`), and after (6.4 moved modules below the kernel).
const ARM64_KIMAGE_VADDRS: [u64; 2] = [0xffff_8000_0800_0000, 0xffff_8000_8000_0000];
/// Where riscv64 kernels are linked (KERNEL_LINK_ADDR, the top 2 GiB): the Image starts
/// with `_start` there.
const RISCV64_KERNEL_LINK_ADDR: u64 = 0xffff_ffff_8000_0000;

fn unrecognized(path: &Path) -> SymbolError {
    SymbolError::Unrecognized {
        path: path.to_path_buf(),
    }
}

pub(crate) fn load(path: &Path, data: &[u8], opts: &LoadOptions) -> Result<Image, SymbolError> {
    let image = unpack(path, data)?;
    let arch = header_arch(&image);
    if let (Some(expected), Some(found)) = (opts.expected_arch, arch) {
        if expected != found {
            return Err(SymbolError::WrongArch {
                path: path.to_path_buf(),
                found: found.to_string(),
                expected,
            });
        }
    }
    let decoded = decoded(&image).ok_or_else(|| unrecognized(path))?;
    // Decoded with base 0: relative_base needs the names, and a relative address is
    // base + offset either way (absolute tables get base 0).
    let base = base(&image, arch, &decoded).ok_or_else(|| SymbolError::Corrupt {
        path: path.to_path_buf(),
        reason: "found the kallsyms tables but not the kernel's base address".into(),
    })?;
    let symbols = &decoded.unbased;
    let etext = (symbols.iter())
        .find(|s| is_etext(&s.name))
        .map(|s| s.addr.wrapping_add(base));
    let cands: Vec<Candidate<'_>> = symbols
        .iter()
        .filter_map(|s| text_candidate(s.addr.wrapping_add(base), s.kind, &s.name))
        .collect();
    if cands.is_empty() {
        return Err(SymbolError::Corrupt {
            path: path.to_path_buf(),
            reason: "kallsyms tables hold no text symbols".into(),
        });
    }
    let mut img = image_from_symbols(path.to_path_buf(), cands, etext, opts);
    img.arch = arch;
    Ok(img)
}

/// The address of the kallsyms symbol `name` (any kind); `None` when the image holds no
/// kallsyms tables or no such symbol.
pub(crate) fn symbol_address(
    path: &Path,
    data: &[u8],
    name: &str,
) -> Result<Option<u64>, SymbolError> {
    Ok(symbol_addresses(path, data, &[name])?.pop().flatten())
}

/// The addresses of the kallsyms symbols `names` (any kind; the first of a name counts),
/// the image unpacked and its tables decoded once; `None` for one it lacks, all `None`
/// when the image holds no kallsyms tables.
pub(crate) fn symbol_addresses(
    path: &Path,
    data: &[u8],
    names: &[&str],
) -> Result<Vec<Option<u64>>, SymbolError> {
    let mut found = vec![None; names.len()];
    let image = unpack(path, data)?;
    let Some(decoded) = decoded(&image) else {
        return Ok(found);
    };
    let tables = &decoded.tables;
    // With the base, so that absolute per-CPU entries do not get it added: arm64's is
    // relocated at boot and found from the unbased names.
    let base = match tables.stored_relative_base(&image) {
        None if tables.place_relative_at().is_some() => {
            match base(&image, header_arch(&image), &decoded) {
                Some(base) => base,
                None => return Ok(found),
            }
        }
        None => 0,
        Some((_, stored)) if stored != 0 => stored,
        Some(_) => match decoded.relative_base(&image) {
            Some(base) => base,
            None => return Ok(found),
        },
    };
    for s in &decoded.unbased {
        if let Some(i) = names.iter().position(|n| n.as_bytes() == s.name) {
            found[i].get_or_insert_with(|| tables.address(&image, s.index, base));
        }
    }
    Ok(found)
}

/// Where a flat image's (arm64/riscv64 `Image`) first byte is linked: kallsyms' `_text`,
/// else ([`arm64_text`]) from an arm64 header's branch to `primary_entry`. `image` is
/// `data` unpacked.
pub(crate) fn flat_base(
    path: &Path,
    data: &[u8],
    image: &[u8],
) -> Result<Option<u64>, SymbolError> {
    let found = symbol_addresses(path, data, &["_text", "primary_entry"])?;
    let (text, primary_entry) = (
        found.first().copied().flatten(),
        found.get(1).copied().flatten(),
    );
    Ok(text.or_else(|| arm64_text(image, primary_entry?)))
}

/// Where an arm64 `Image`'s first byte is linked, whose kallsyms lacks `_text` (it lists
/// from `_stext`, 64 KiB further): the header's branch to `primary_entry` (at byte 0, or 4
/// after an EFI stub's `MZ` instruction) says how far into the image that is.
fn arm64_text(image: &[u8], primary_entry: u64) -> Option<u64> {
    if image.get(0x38..0x3c) != Some(b"ARM\x64") {
        return None;
    }
    [0usize, 4].into_iter().find_map(|at| {
        let insn = u32::from_le_bytes(image.get(at..at + 4)?.try_into().ok()?);
        // B imm26: the target is the instruction's own place plus imm26 words, signed.
        (insn & 0xfc00_0000 == 0x1400_0000).then(|| {
            let words = i64::from(((insn & 0x03ff_ffff) << 6) as i32 >> 6);
            let target = (at as i64).wrapping_add(words * 4) as u64;
            primary_entry.wrapping_sub(target)
        })
    })
}

/// An image's kallsyms tables, their symbols decoded with base 0, and its relative base
/// once asked for ([`decoded`]).
pub(crate) struct Decoded {
    pub tables: kallsyms_tables::Tables,
    pub unbased: Vec<RawSymbol>,
    relative_base: OnceLock<Option<u64>>,
}

impl Decoded {
    /// [`relative_base`], looked up once: it scans the whole image.
    fn relative_base(&self, image: &[u8]) -> Option<u64> {
        *(self.relative_base).get_or_init(|| relative_base(image, &self.tables, &self.unbased))
    }
}

/// The last image's [`Decoded`], by the image's length and CRC-32 (a few ms over tens of
/// MB, with SIMD). `record` reads a stock kernel's names for its FUNCs, its BTF, symbols
/// for the process and module watches, then all of it for the trace: each decoded the
/// tables (~20 ms for 45 k names) and scanned the image for the base (as long) again.
/// One entry, until [`release_unpacked`].
static LAST_DECODED: Mutex<Option<(ImageKey, Arc<Decoded>)>> = Mutex::new(None);

/// An image's length and CRC-32.
type ImageKey = (usize, u32);

/// `image`'s kallsyms decoded, kept for the next reader of the same bytes; `None` when it
/// holds no kallsyms tables. Held while decoding, as [`LAST_UNPACKED`].
pub(crate) fn decoded(image: &[u8]) -> Option<Arc<Decoded>> {
    let key = (image.len(), crc32fast::hash(image));
    let mut last = LAST_DECODED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((kept, decoded)) = last.as_ref() {
        if *kept == key {
            return Some(Arc::clone(decoded));
        }
    }
    let tables = kallsyms_tables::find(image)?;
    let unbased = tables.symbols(image, 0);
    let decoded = Arc::new(Decoded {
        tables,
        unbased,
        relative_base: OnceLock::new(),
    });
    *last = Some((key, Arc::clone(&decoded)));
    Some(decoded)
}

/// A kernel image as [`unpack`] gives it: the file's own bytes, or decompressed ones that
/// [`unpack`] may also keep for the next reader of the same file.
pub(crate) enum Unpacked<'a> {
    Borrowed(&'a [u8]),
    Shared(Arc<Vec<u8>>),
}

impl Deref for Unpacked<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Unpacked::Borrowed(b) => b,
            Unpacked::Shared(v) => v,
        }
    }
}

/// The last image decompressed, by its packed bytes' length and SipHash (not CRC-32: a gzip
/// stream ends with its data's CRC, which makes the whole stream's CRC-32 the same for any
/// data stored uncompressed): `record` reads a stock kernel's
/// BTF, then its kallsyms for the process watch, the task slot and the symbol job, each of
/// which decompressed it again. One entry, until [`release_unpacked`] (the decompressed
/// kernel is tens of MB).
static LAST_UNPACKED: LastUnpacked = LastUnpacked(Mutex::new(None));

/// The packed bytes' length and hash.
type Key = (usize, u64);

struct LastUnpacked(Mutex<Option<(Key, Arc<Vec<u8>>)>>);

impl LastUnpacked {
    /// `data`'s kernel, decompressed unless it is the one kept.
    fn unpack<'a>(&self, path: &Path, data: &'a [u8]) -> Result<Unpacked<'a>, SymbolError> {
        let Some((codec, payload)) = packed(path, data)? else {
            return Ok(Unpacked::Borrowed(data));
        };
        let key = (payload.len(), {
            let mut h = std::hash::DefaultHasher::new();
            h.write(payload);
            h.finish()
        });
        // Held while decompressing: a reader in another thread (the task slot's, the symbol
        // job's) waits for this image rather than decompressing it too. A poisoned lock only
        // means a reader panicked: the entry is whole either way.
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((kept, image)) = last.as_ref() {
            if *kept == key {
                return Ok(Unpacked::Shared(Arc::clone(image)));
            }
        }
        let image = Arc::new(match codec {
            Codec::BzImage => decompress_payload(path, payload)?,
            Codec::Gzip => gunzip(path, payload)?,
        });
        *last = Some((key, Arc::clone(&image)));
        Ok(Unpacked::Shared(image))
    }

    fn release(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *LAST_DECODED.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Drops the image [`unpack`] kept, and what [`decoded`] kept.
pub(crate) fn release_unpacked() {
    LAST_UNPACKED.release();
}

/// The kernel image itself: as is, gunzipped, out of an EFI zboot container, or out of an x86
/// bzImage; decompressed once for consecutive readers of the same bytes ([`LAST_UNPACKED`]).
pub(crate) fn unpack<'a>(path: &Path, data: &'a [u8]) -> Result<Unpacked<'a>, SymbolError> {
    LAST_UNPACKED.unpack(path, data)
}

/// How a kernel image's payload is compressed.
enum Codec {
    /// An x86 bzImage's ([`decompress_payload`]).
    BzImage,
    Gzip,
}

/// The compressed kernel in `data` and how to decompress it; `None`: `data` is the kernel
/// itself.
fn packed<'a>(path: &Path, data: &'a [u8]) -> Result<Option<(Codec, &'a [u8])>, SymbolError> {
    if let Some(payload) = bzimage_payload(data) {
        return Ok(Some((Codec::BzImage, payload)));
    }
    if data.starts_with(&[0x1f, 0x8b]) {
        return Ok(Some((Codec::Gzip, data)));
    }
    // EFI zboot (CONFIG_EFI_ZBOOT): "MZ", "zimg", payload offset and size, compression.
    if data.starts_with(b"MZ") && data.get(4..8) == Some(b"zimg") {
        let word = |at: usize| u32_at(data, at).map(|v| v as usize);
        let (Some(off), Some(len)) = (word(8), word(12)) else {
            return Err(unrecognized(path));
        };
        let payload = off
            .checked_add(len)
            .and_then(|end| data.get(off..end))
            .ok_or_else(|| unrecognized(path))?;
        let kind = data.get(24..28).unwrap_or_default();
        return match kind {
            b"gzip" => Ok(Some((Codec::Gzip, payload))),
            _ => Err(SymbolError::Corrupt {
                path: path.to_path_buf(),
                reason: format!(
                    "EFI zboot image compressed with {}: only gzip is supported; decompress it first",
                    String::from_utf8_lossy(kind).trim_end_matches('\0')
                ),
            }),
        };
    }
    Ok(None)
}

/// An x86 bzImage's compressed kernel (Documentation/arch/x86/boot.rst): the real-mode
/// setup (`setup_sects` + 1 sectors, 4 if 0) is followed by the protected-mode code, in
/// which the payload sits at `payload_offset`, `payload_length` bytes long.
fn bzimage_payload(data: &[u8]) -> Option<&[u8]> {
    if data.get(0x1fe..0x200) != Some(&[0x55, 0xaa]) || data.get(0x202..0x206) != Some(b"HdrS") {
        return None;
    }
    let setup_sects = match *data.get(0x1f1)? {
        0 => 4,
        n => n as usize,
    };
    let offset = u32_at(data, 0x248)? as usize;
    let len = u32_at(data, 0x24c)? as usize;
    let start = (setup_sects + 1) * 512 + offset;
    data.get(start..start.checked_add(len)?)
}

/// A bzImage payload, as the kernel's build compressed it (CONFIG_KERNEL_*): gzip, or LZ4
/// in legacy frames (Debian's amd64 kernels); the others are named, not decompressed.
fn decompress_payload(path: &Path, payload: &[u8]) -> Result<Vec<u8>, SymbolError> {
    const LZ4_LEGACY: [u8; 4] = [0x02, 0x21, 0x4c, 0x18];
    let other = |what: &str| SymbolError::Corrupt {
        path: path.to_path_buf(),
        reason: format!(
            "bzImage payload compressed with {what}: only gzip and LZ4 are supported; \
             give the vmlinux (or extract-vmlinux's output) instead"
        ),
    };
    if payload.starts_with(&[0x1f, 0x8b]) {
        gunzip(path, payload)
    } else if payload.starts_with(&LZ4_LEGACY) {
        lz4_legacy(path, payload)
    } else if payload.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Err(other("xz"))
    } else if payload.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Err(other("zstd"))
    } else {
        Err(other("an unknown method"))
    }
}

/// LZ4's legacy frame format (`lz4 -l`, the kernel's `unlz4`): the magic, then blocks of a
/// 32-bit little-endian compressed size and that many bytes, each at most 8 MiB once
/// decompressed; another magic starts a new frame, and what does not fit as a block (the
/// size the kernel's build appends) ends the stream.
fn lz4_legacy(path: &Path, data: &[u8]) -> Result<Vec<u8>, SymbolError> {
    const MAGIC: u32 = 0x184c_2102;
    const BLOCK_MAX: usize = 8 << 20;
    let mut out = Vec::new();
    let mut buf = vec![0u8; BLOCK_MAX];
    let mut at = 0;
    while let Some(word) = u32_at(data, at) {
        at += 4;
        if word == MAGIC {
            continue;
        }
        let Some(block) = at
            .checked_add(word as usize)
            .and_then(|end| data.get(at..end))
        else {
            break;
        };
        at += word as usize;
        let n = lz4_flex::block::decompress_into(block, &mut buf).map_err(|e| {
            SymbolError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("bad LZ4 block at byte {}: {e}", at - word as usize),
            }
        })?;
        out.extend_from_slice(&buf[..n]);
        if out.len() as u64 > MAX_UNCOMPRESSED {
            break;
        }
    }
    Ok(out)
}

fn gunzip(path: &Path, data: &[u8]) -> Result<Vec<u8>, SymbolError> {
    let mut out = Vec::new();
    // MultiGzDecoder: a gzip file may hold several members; trailing padding is ignored.
    flate2::read::MultiGzDecoder::new(data)
        .take(MAX_UNCOMPRESSED)
        .read_to_end(&mut out)
        .or_else(|e| {
            if out.is_empty() {
                Err(e)
            } else {
                Ok(out.len())
            }
        })
        .map_err(|e| SymbolError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("bad gzip data: {e}"),
        })?;
    Ok(out)
}

/// How many of a file's first bytes [`boot_format`] wants: enough for an ELF header, a
/// bzImage's setup header, an EFI zboot PE header, and a gzip stream's first 64 unpacked
/// bytes.
pub const BOOT_HEAD_BYTES: usize = 64 << 10;

/// What a file given to QEMU's `-kernel` is, from its first bytes ([`BOOT_HEAD_BYTES`] of
/// them, or all of a shorter file): what tells the machine it boots on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootFormat {
    /// An ELF file for `machine` (its `e_machine`), `arch` when that is one of ours.
    Elf {
        machine: u16,
        arch: Option<Arch>,
    },
    /// An arm64 or riscv64 `Image` (its header's magic), as is or compressed (gzip, EFI
    /// zboot).
    Image(Arch),
    /// An x86 bzImage (its setup header's `HdrS`).
    BzImage,
    /// Compressed (gzip, EFI zboot) with nothing in its first bytes to tell the machine.
    Compressed,
    /// Text, which no machine boots.
    Text,
    Empty,
    /// Anything else: a raw binary (QEMU loads one as is on Arm and RISC-V boards) or a
    /// uImage.
    Raw,
}

/// Tells what `head`, a file's first bytes, is (see [`BootFormat`]).
pub fn boot_format(head: &[u8]) -> BootFormat {
    if head.is_empty() {
        return BootFormat::Empty;
    }
    if head.starts_with(b"\x7fELF") {
        let machine = match head.get(5) {
            Some(2) => head
                .get(0x12..0x14)
                .map(|b| u16::from_be_bytes([b[0], b[1]])),
            _ => head
                .get(0x12..0x14)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        }
        .unwrap_or(0);
        return BootFormat::Elf {
            machine,
            arch: header_arch(head),
        };
    }
    if head.get(0x202..0x206) == Some(b"HdrS") {
        return BootFormat::BzImage;
    }
    if let Some(arch) = header_arch(head) {
        return BootFormat::Image(arch);
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        let mut start = [0u8; 64];
        return match flate2::read::GzDecoder::new(head).read_exact(&mut start) {
            Ok(()) => header_arch(&start).map_or(BootFormat::Compressed, BootFormat::Image),
            Err(_) => BootFormat::Compressed,
        };
    }
    // EFI zboot: a PE file whose COFF header names the machine.
    if head.starts_with(b"MZ") && head.get(4..8) == Some(b"zimg") {
        let machine = u32_at(head, 0x3c)
            .map(|at| at as usize)
            .filter(|&at| head.get(at..at + 4) == Some(b"PE\0\0"))
            .and_then(|at| head.get(at + 4..at + 6))
            .map(|b| u16::from_le_bytes([b[0], b[1]]));
        return match machine {
            Some(0xaa64) => BootFormat::Image(Arch::Aarch64),
            Some(0x5064) => BootFormat::Image(Arch::Riscv64),
            _ => BootFormat::Compressed,
        };
    }
    if looks_like_text(head) {
        return BootFormat::Text;
    }
    BootFormat::Raw
}

/// UTF-8 without NUL or other control characters than white space and escape: boot
/// images and machine code are full of zero bytes.
fn looks_like_text(head: &[u8]) -> bool {
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        // A character cut by the end of the head is still text.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return false,
    };
    !text.is_empty()
        && text
            .chars()
            .all(|c| !c.is_control() || matches!(c, '\t' | '\n' | '\r' | '\x0c' | '\x1b'))
}

/// The architecture from the boot image header (Documentation/arch/*/booting).
fn header_arch(image: &[u8]) -> Option<Arch> {
    // A bzImage's payload is the vmlinux ELF itself.
    if image.starts_with(b"\x7fELF") {
        return match image.get(0x12..0x14) {
            Some([62, 0]) => Some(Arch::X86_64),
            Some([183, 0]) => Some(Arch::Aarch64),
            Some([243, 0]) => Some(Arch::Riscv64),
            _ => None,
        };
    }
    match image.get(0x38..0x3c) {
        Some(b"ARM\x64") => Some(Arch::Aarch64),
        Some(b"RSC\x05") => Some(Arch::Riscv64),
        _ => None,
    }
}

/// What to add to the addresses the tables give with base 0: for 7.0+'s place-relative
/// offsets those are file offsets, so the link address of the image's first byte (of the
/// file offset 0 of an ELF, from the segment holding the tables); else the relative base.
fn base(image: &[u8], arch: Option<Arch>, decoded: &Decoded) -> Option<u64> {
    let Some(offsets_at) = decoded.tables.place_relative_at() else {
        return decoded.relative_base(image);
    };
    if image.starts_with(b"\x7fELF") {
        return elf_link_base(image, offsets_at);
    }
    match arch? {
        Arch::Riscv64 => Some(RISCV64_KERNEL_LINK_ADDR),
        Arch::Aarch64 => default_link_base(image),
        Arch::X86_64 => None,
    }
}

/// `p_vaddr - p_offset` of the ELF segment whose file bytes hold `at`.
fn elf_link_base(image: &[u8], at: usize) -> Option<u64> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let header = object::elf::FileHeader64::<object::Endianness>::parse(image).ok()?;
    let endian = header.endian().ok()?;
    let at = at as u64;
    header
        .program_headers(endian, image)
        .ok()?
        .iter()
        .find(|ph| {
            let (off, size) = (ph.p_offset(endian), ph.p_filesz(endian));
            ph.p_type(endian) == object::elf::PT_LOAD && off <= at && at - off < size
        })
        .map(|ph| ph.p_vaddr(endian).wrapping_sub(ph.p_offset(endian)))
}

/// The value of `kallsyms_relative_base`. Relocatable arm64 kernels are linked with
/// `--no-apply-dynamic-relocs`: the word is 0 in the image and its value lives in the
/// R_AARCH64_RELATIVE entry the kernel applies to itself at boot, which we look up.
/// `unbased` is `tables.symbols(image, 0)`.
fn relative_base(
    image: &[u8],
    tables: &kallsyms_tables::Tables,
    unbased: &[RawSymbol],
) -> Option<u64> {
    let Some((at, stored)) = tables.stored_relative_base(image) else {
        return Some(0); // absolute addresses: no base
    };
    if stored != 0 {
        return Some(stored);
    }
    // With CONFIG_KALLSYMS_ALL the tables list themselves: kallsyms_relative_base's own
    // offset ties its link address to the base we are after.
    let own = unbased.iter().find(|s| s.name == b"kallsyms_relative_base");
    let own_offset = own
        .and_then(|s| tables.offset_of(image, s.index))
        .map(u64::from);
    match own_offset {
        Some(off) => rela_entries(image).find_map(|(r_offset, addend)| {
            (addend.wrapping_add(off) == r_offset).then_some(addend)
        }),
        None => {
            // Only needed here; without it no entry can match.
            let link_base = default_link_base(image)?;
            rela_entries(image).find_map(|(r_offset, addend)| {
                (r_offset.wrapping_sub(at as u64) == link_base).then_some(addend)
            })
        }
    }
}

/// Every (r_offset, r_addend) of an Elf64_Rela with r_info = R_AARCH64_RELATIVE, at any
/// 8-aligned place of the image.
fn rela_entries(image: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    const R_AARCH64_RELATIVE: u64 = 1027;
    (8..image.len().saturating_sub(15))
        .step_by(8)
        .filter_map(|p| {
            if u64_at(image, p)? != R_AARCH64_RELATIVE {
                return None;
            }
            Some((u64_at(image, p - 8)?, u64_at(image, p + 8)?))
        })
}

/// The arm64 link address of the image's first byte, from the version string: only used
/// when kallsyms does not list its own tables.
fn default_link_base(image: &[u8]) -> Option<u64> {
    const PREFIX: &[u8] = b"Linux version ";
    let at = find_bytes(image, PREFIX)? + PREFIX.len();
    let version = image.get(at..at + 8)?;
    let mut nums = version
        .split(|b| !b.is_ascii_digit())
        .filter_map(|n| std::str::from_utf8(n).ok()?.parse::<u32>().ok());
    let (major, minor) = (nums.next()?, nums.next()?);
    Some(if (major, minor) < (6, 4) {
        ARM64_KIMAGE_VADDRS[0]
    } else {
        ARM64_KIMAGE_VADDRS[1]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kallsyms_tables::{find, synthetic, Layout};

    const BASE: u64 = 0xffff_8000_0800_0000;

    #[test]
    fn an_arm64_images_base_comes_from_its_branch_to_primary_entry() {
        let mut image = vec![0u8; 0x40];
        image[0x38..0x3c].copy_from_slice(b"ARM\x64");
        // "MZ" as an instruction, then `b +0x1398d18` (to 0x1398d1c).
        image[0..4].copy_from_slice(&0x91005a4du32.to_le_bytes());
        image[4..8].copy_from_slice(&(0x1400_0000u32 | (0x1398d18 / 4)).to_le_bytes());
        assert_eq!(
            arm64_text(&image, 0xffff_8000_0939_8d1c),
            Some(0xffff_8000_0800_0000)
        );
        image[0x38] = 0;
        assert_eq!(arm64_text(&image, 0xffff_8000_0939_8d1c), None);
    }

    fn symbols(own: u32) -> Vec<(u32, u8, String)> {
        let mut v: Vec<(u32, u8, String)> = (0..300u32)
            .map(|i| (0x1_0000 + i * 32, b't', format!("fn_{i}")))
            .collect();
        v.push((0x2_0000, b'D', "_etext".into()));
        v.push((own, b'D', "kallsyms_relative_base".into()));
        v.sort(); // scripts/kallsyms sorts by address
        v
    }

    fn build(own: u32, stored: u64) -> Vec<u8> {
        let syms = symbols(own);
        let refs: Vec<(u32, u8, &str)> =
            syms.iter().map(|(a, k, n)| (*a, *k, n.as_str())).collect();
        synthetic(&refs, Layout::V6_1, stored)
    }

    /// A relocatable arm64 image: the base word is 0, its value sits in a RELA entry.
    #[test]
    fn base_from_rela() {
        // Where the base word lands does not depend on the offsets' values.
        let probe = build(0x100, 0);
        let at = find(&probe)
            .unwrap()
            .stored_relative_base(&probe)
            .unwrap()
            .0;
        // relative_base = BASE (the image's first byte), so the word's own offset is `at`.
        assert!(at < 0x1_0000);
        let mut data = build(at as u32, 0);
        while !data.len().is_multiple_of(8) {
            data.push(0);
        }
        for v in [BASE + at as u64, 1027, BASE] {
            data.extend_from_slice(&v.to_le_bytes());
        }
        let img = load(Path::new("t"), &data, &LoadOptions::default()).unwrap();
        assert_eq!(img.functions.len(), 300);
        assert_eq!(img.functions[0].addr, BASE + 0x1_0000);
        assert_eq!(img.start, BASE + 0x1_0000);
        assert_eq!(img.end, BASE + 0x2_0000, "_etext");
    }

    #[test]
    fn stored_base_and_gzip() {
        let data = build(0x3_0000, BASE);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &data).unwrap();
        let gz = gz.finish().unwrap();
        for bytes in [&data, &gz] {
            let img = load(Path::new("t"), bytes, &LoadOptions::default()).unwrap();
            assert_eq!(img.functions[299].addr, BASE + 0x1_0000 + 299 * 32);
            assert_eq!(img.functions[299].name, "fn_299");
        }
    }

    /// 7.0+ tables inside an ELF (an x86 bzImage's payload): the addresses come from the
    /// segment that holds them, not from any architecture's default.
    #[test]
    fn place_relative_tables_in_an_elf() {
        const VADDR: u64 = 0xffff_ffff_8100_0000;
        const HEADERS: usize = 64 + 56;
        let syms: Vec<(u32, u8, String)> = (0..300u32)
            .map(|i| (0x40 + i * 32, b't', format!("fn_{i}")))
            .collect();
        let refs: Vec<(u32, u8, &str)> =
            syms.iter().map(|(a, k, n)| (*a, *k, n.as_str())).collect();
        let tables = synthetic(&refs, Layout::V7_0, 0);
        let mut elf = vec![0u8; HEADERS];
        elf[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        elf[0x10] = 2; // ET_EXEC
        elf[0x12] = 62; // EM_X86_64
        elf[0x14] = 1; // EV_CURRENT
        elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        elf[0x34..0x36].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        let len = (HEADERS + tables.len()) as u64;
        let ph = 64;
        elf[ph..ph + 4].copy_from_slice(&object::elf::PT_LOAD.to_le_bytes());
        elf[ph + 16..ph + 24].copy_from_slice(&VADDR.to_le_bytes()); // p_vaddr at offset 0
        elf[ph + 32..ph + 40].copy_from_slice(&len.to_le_bytes()); // p_filesz
        elf[ph + 40..ph + 48].copy_from_slice(&len.to_le_bytes()); // p_memsz
        elf.extend_from_slice(&tables);
        let img = load(Path::new("t"), &elf, &LoadOptions::default()).unwrap();
        assert_eq!(img.arch, Some(Arch::X86_64));
        assert_eq!(img.functions.len(), 300);
        // The symbols' offsets were file offsets within the tables, now after the headers.
        assert_eq!(img.functions[0].addr, VADDR + HEADERS as u64 + 0x40);
        assert_eq!(img.functions[299].name, "fn_299");
    }

    /// The kept image serves the same bytes only: another image, or the same after a
    /// release, is decompressed afresh.
    #[test]
    fn unpacked_once_per_image() {
        // Stored, not compressed: streams of one length whose CRC-32 is the same.
        let gzip = |data: &[u8]| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
            std::io::Write::write_all(&mut gz, data).unwrap();
            gz.finish().unwrap()
        };
        let a = build(0x3_0000, BASE);
        let mut b = a.clone();
        b[0] ^= 1;
        let (gz_a, gz_b) = (gzip(&a), gzip(&b));
        assert_eq!(gz_a.len(), gz_b.len());
        assert_eq!(crc32fast::hash(&gz_a), crc32fast::hash(&gz_b));
        // Not the global one: other tests unpack in parallel.
        let cache = LastUnpacked(Mutex::new(None));
        let shared = |u: Unpacked<'_>| match u {
            Unpacked::Shared(v) => v,
            Unpacked::Borrowed(_) => panic!("a gzip stream is decompressed"),
        };
        let t = Path::new("t");
        let first = shared(cache.unpack(t, &gz_a).unwrap());
        let again = shared(cache.unpack(t, &gz_a).unwrap());
        assert!(Arc::ptr_eq(&first, &again), "decompressed twice");
        assert!(*first == a);
        let other = shared(cache.unpack(t, &gz_b).unwrap());
        assert!(*other == b, "b is not a");
        let back = shared(cache.unpack(t, &gz_a).unwrap());
        assert!(*back == a);
        assert!(!Arc::ptr_eq(&first, &back), "one entry: b replaced it");
        cache.release();
        assert!(cache.0.lock().unwrap().is_none());
        assert!(matches!(
            cache.unpack(t, &a).unwrap(),
            Unpacked::Borrowed(_)
        ));
    }

    #[test]
    fn unbased_relocatable_image_is_corrupt() {
        // Base word 0 and no relocation for it: refuse rather than guess wrong addresses.
        let data = build(0x3_0000, 0);
        assert!(matches!(
            load(Path::new("t"), &data, &LoadOptions::default()),
            Err(SymbolError::Corrupt { .. })
        ));
    }

    #[test]
    fn boot_formats_are_told_by_their_first_bytes() {
        let with = |at: usize, bytes: &[u8], len: usize| {
            let mut h = vec![0u8; len];
            h[at..at + bytes.len()].copy_from_slice(bytes);
            h
        };
        let mut elf = with(0, b"\x7fELF\x02\x01", 64);
        elf[0x12] = 183;
        assert_eq!(
            boot_format(&elf),
            BootFormat::Elf {
                machine: 183,
                arch: Some(Arch::Aarch64)
            }
        );
        elf[0x12] = 40;
        assert_eq!(
            boot_format(&elf),
            BootFormat::Elf {
                machine: 40,
                arch: None
            }
        );
        let riscv = with(0x38, b"RSC\x05", 64);
        assert_eq!(boot_format(&riscv), BootFormat::Image(Arch::Riscv64));
        let arm = with(0x38, b"ARM\x64", 64);
        assert_eq!(boot_format(&arm), BootFormat::Image(Arch::Aarch64));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &arm).unwrap();
        assert_eq!(
            boot_format(&gz.finish().unwrap()),
            BootFormat::Image(Arch::Aarch64)
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b"no header").unwrap();
        assert_eq!(boot_format(&gz.finish().unwrap()), BootFormat::Compressed);
        let mut zboot = with(0, b"MZ\0\0zimg", 0x100);
        zboot[0x3c] = 0x80;
        zboot[0x80..0x86].copy_from_slice(b"PE\0\0\x64\xaa");
        assert_eq!(boot_format(&zboot), BootFormat::Image(Arch::Aarch64));
        let bz = with(0x202, b"HdrS", 0x260);
        assert_eq!(boot_format(&bz), BootFormat::BzImage);
        assert_eq!(boot_format(b""), BootFormat::Empty);
        assert_eq!(
            boot_format(b"console=ttyAMA0\n\tnokaslr \xc3"),
            BootFormat::Text
        );
        // `b .` over and over: code, loaded raw.
        assert_eq!(boot_format(&[0, 0, 0, 0x14].repeat(4)), BootFormat::Raw);
        assert_eq!(boot_format(b"\x01\x02binary"), BootFormat::Raw);
    }
}
