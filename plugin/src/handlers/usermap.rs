//! User mode: where the program, its dynamic loader and its libraries are in the guest's
//! address space, for the CLI to place their symbols (`plugin.maps`), and a copy of the vDSO
//! (`plugin.vdso`), which is in no file the CLI can read: its symbols and unwind tables.
//!
//! QEMU loads the program and its interpreter itself, so their places come from the initial
//! stack's auxiliary vector (`AT_ENTRY`, `AT_PHDR`, `AT_BASE`), read once at the first
//! instruction. Libraries are mapped by the guest's loader: the syscall callbacks see each
//! `openat` (the path) and each `mmap` of a file with `PROT_EXEC` (fd, offset, returned
//! address). Nothing here runs per call or return.
//!
//! Each file is also said as the host file QEMU really mapped (device, inode, the path the
//! host gives it): under `-L ROOT` QEMU opens `ROOT/path` and the host kernel follows an
//! absolute symlink there on the host, so the guest path named inside ROOT may be another
//! file than the one that runs. A library's comes from its descriptor at the `mmap` (the
//! guest's descriptors are QEMU's own); the loader's, which QEMU maps itself, from QEMU's
//! `/proc/self/maps` at the first instruction (no descriptor is left by then).

use crate::state::guest::ByteBuf;
use object::elf::{FileHeader64, ProgramHeader64, PT_LOAD};
use object::pod::{bytes_of_slice, bytes_of_slice_mut};
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

const PROT_EXEC: u64 = 4;

const AT_NULL: u64 = 0;
const AT_PHDR: u64 = 3;
const AT_BASE: u64 = 7;
const AT_ENTRY: u64 = 9;
const AT_SYSINFO_EHDR: u64 = 33;

/// This process image's copy of the vDSO QEMU gave it (its ELF header at `AT_SYSINFO_EHDR`).
pub const VDSO_FILE: &str = "plugin.vdso";

/// The most of a vDSO copied (QEMU's are a few KiB, Linux's tens).
const VDSO_MAX: u64 = 1 << 20;

/// The auxiliary vector's entries we keep.
#[derive(Default, Clone, Copy)]
struct Aux {
    phdr: u64,
    base: u64,
    entry: u64,
    /// `AT_SYSINFO_EHDR` (0: no vDSO).
    vdso: u64,
}

/// One executable file mapping.
struct Mapping {
    start: u64,
    len: u64,
    offset: u64,
    path: Vec<u8>,
    /// The host file mapped, where it could be asked.
    file: Option<HostFile>,
}

/// A host file as QEMU has it open or mapped: its device and inode (what it is), and the
/// path the host kernel gives it (where the CLI may find it again, checking both).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostFile {
    dev: u64,
    ino: u64,
    path: Vec<u8>,
}

impl HostFile {
    /// The file open as descriptor `fd` of this process.
    fn of_fd(fd: i64) -> Option<HostFile> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let link = format!("/proc/self/fd/{fd}");
        let meta = std::fs::metadata(&link).ok()?;
        let path = std::fs::read_link(&link).ok()?;
        Some(HostFile {
            dev: meta.dev(),
            ino: meta.ino(),
            path: path.as_os_str().as_bytes().to_vec(),
        })
    }

    /// The file mapped at host address `addr`, from `/proc/self/maps`' text `maps`.
    fn mapped_at(maps: &str, addr: u64) -> Option<HostFile> {
        maps.lines().find_map(|line| {
            let mut f = line.splitn(6, ' ');
            let (range, _perms, _offset, dev, ino) =
                (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let (lo, hi) = range.split_once('-')?;
            let (lo, hi) = (
                u64::from_str_radix(lo, 16).ok()?,
                u64::from_str_radix(hi, 16).ok()?,
            );
            let ino: u64 = ino.parse().ok()?;
            if !(lo <= addr && addr < hi) || ino == 0 {
                return None;
            }
            let (major, minor) = dev.split_once(':')?;
            let dev = libc::makedev(
                u32::from_str_radix(major, 16).ok()?,
                u32::from_str_radix(minor, 16).ok()?,
            );
            let path = f.next()?.trim_start();
            Some(HostFile {
                dev,
                ino,
                path: path.as_bytes().to_vec(),
            })
        })
    }

    /// Its `plugin.maps` fields, `P` first: `P_dev=HEX P_ino=HEX P_host=PATH`, the path as
    /// one field (tabs and newlines made spaces).
    fn fields(&self, prefix: &str) -> String {
        let host = String::from_utf8_lossy(&self.path).replace(['\t', '\n'], " ");
        format!(
            "\t{prefix}dev={:x}\t{prefix}ino={:x}\t{prefix}host={host}",
            self.dev, self.ino
        )
    }
}

enum Pending {
    Openat(Vec<u8>),
    Mmap { len: u64, fd: i64, offset: u64 },
    Munmap { start: u64, len: u64 },
}

static ARMED: AtomicBool = AtomicBool::new(false);
static STARTED: AtomicBool = AtomicBool::new(false);
static AUX: Mutex<Option<Aux>> = Mutex::new(None);
static FDS: Mutex<Option<HashMap<i64, Vec<u8>>>> = Mutex::new(None);
static MAPS: Mutex<Vec<Mapping>> = Mutex::new(Vec::new());

/// Executable file mappings kept at most, and open descriptors' paths: a guest mapping
/// library after library (`dlopen`/`dlclose` in a loop) or holding many files open must not
/// grow QEMU without bound. Later ones are counted in [`DROPPED`].
pub const MAX_KEPT: usize = 1 << 16;

/// Mappings and paths not kept past [`MAX_KEPT`].
static DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The mappings and paths dropped past [`MAX_KEPT`].
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Pushes `item` unless `list` holds `max` already (then counts it in [`DROPPED`]).
fn keep<T>(list: &mut Vec<T>, item: T, max: usize) {
    if list.len() < max {
        list.push(item);
    } else {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}
/// The dynamic loader as QEMU mapped it (at `AT_BASE`).
static INTERP: Mutex<Option<HostFile>> = Mutex::new(None);

thread_local! {
    /// The syscall this guest thread is in, between its entry and return callbacks.
    static PENDING: RefCell<Option<Pending>> = const { RefCell::new(None) };
    static BUF: RefCell<Option<ByteBuf>> = const { RefCell::new(None) };
}

pub fn with_buf<R>(f: impl FnOnce(&mut ByteBuf) -> R) -> R {
    BUF.with(|b| f(b.borrow_mut().get_or_insert_with(ByteBuf::new)))
}

/// Whether the first block still needs its startup callback (true once only).
pub fn arm_startup() -> bool {
    !ARMED.swap(true, Ordering::Relaxed)
}

/// At the program's first instruction (a callback with R_REGS): reads the auxiliary vector
/// off the initial stack (argc, argv…, NULL, envp…, NULL, auxv pairs). Returns false
/// when it had run already.
pub fn startup() -> bool {
    if STARTED.swap(true, Ordering::Relaxed) {
        return false;
    }
    let aux = with_buf(|buf| {
        let sp = buf.read_named(crate::state::isa_or_default().linux_user().stack_pointer)?;
        let mut word = |addr: u64| buf.read_le(addr, 8);
        // The stack is the guest's: its numbers are checked, never trusted to stay in range.
        let argc = word(sp)?;
        let mut p = sp.checked_add(argc.checked_add(2)?.checked_mul(8)?)?; // past argv, NULL
        let mut envs = 0;
        while word(p)? != 0 {
            envs += 1;
            if envs > 1 << 16 {
                return None;
            }
            p = p.checked_add(8)?;
        }
        p = p.checked_add(8)?;
        let mut aux = Aux::default();
        for _ in 0..64 {
            let (key, value) = (word(p)?, word(p + 8)?);
            match key {
                AT_NULL => break,
                AT_PHDR => aux.phdr = value,
                AT_BASE => aux.base = value,
                AT_ENTRY => aux.entry = value,
                AT_SYSINFO_EHDR => aux.vdso = value,
                _ => {}
            }
            p = p.checked_add(16)?;
        }
        Some(aux)
    });
    // The loader QEMU mapped: the host file at AT_BASE's host address.
    let interp = aux
        .filter(|a| a.base != 0)
        .zip(crate::state::guest::user_base())
        .and_then(|(a, base)| {
            let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
            HostFile::mapped_at(&maps, a.base.wrapping_add(base))
        });
    *INTERP.lock().unwrap_or_else(|e| e.into_inner()) = interp;
    if let Some(aux) = aux {
        crate::state::entries::program_entry(aux.entry);
        crate::state::aims::place(aux.entry);
        crate::state::lib_entries::startup(aux.base);
    }
    *AUX.lock().unwrap_or_else(|e| e.into_inner()) = aux;
    true
}

/// Copies the vDSO (`AT_SYSINFO_EHDR`, read by [`startup`]) into `dir`, this image's
/// folder (`VDSO_FILE`), once per image: the unwinder needs its tables for a signal
/// handler's return into its sigreturn trampoline (arm64's default restorer), and the
/// trace its function names.
pub fn save_vdso(dir: &std::path::Path) {
    let Some(addr) = AUX
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map(|a| a.vdso)
        .filter(|&v| v != 0)
    else {
        return;
    };
    let bytes = with_buf(|buf| {
        let ehdr = buf.read_memory(addr, 64)?.to_vec();
        let headers = buf.copy_from(addr, elf_headers_len(&ehdr)? as usize);
        let size = elf_image_size(&headers)?.min(VDSO_MAX);
        let bytes = buf.copy_from(addr, size as usize);
        (bytes.len() >= 64).then_some(bytes)
    });
    let written = bytes.map(|b| {
        let tmp = dir.join(format!("{VDSO_FILE}.tmp"));
        std::fs::write(&tmp, b).and_then(|()| std::fs::rename(&tmp, dir.join(VDSO_FILE)))
    });
    match written {
        Some(Ok(())) => {}
        Some(Err(e)) => eprintln!(
            "qemu-uftrace plugin: cannot write {}: {e}: frames through the vDSO will not be \
             unwound (check the trace directory's disk)",
            dir.join(VDSO_FILE).display()
        ),
        None => eprintln!(
            "qemu-uftrace plugin: the vDSO at {addr:#x} is not a readable ELF image: frames \
             through it will not be unwound"
        ),
    }
}

/// The ELF header of a vDSO (64-bit, either byte order).
type Header = FileHeader64<Endianness>;

/// How many bytes from the start of the ELF64 image whose first 64 bytes are `ehdr` hold
/// its file header and its program headers (at most 64 of them, within [`VDSO_MAX`]).
fn elf_headers_len(ehdr: &[u8]) -> Option<u64> {
    let words = aligned(ehdr);
    let header = Header::parse(&bytes_of_slice(&words)[..ehdr.len()]).ok()?;
    let endian = header.endian().ok()?;
    let phnum = u64::from(header.e_phnum(endian));
    let len = header
        .e_phoff(endian)
        .checked_add(phnum * std::mem::size_of::<ProgramHeader64<Endianness>>() as u64)?;
    (phnum <= 64 && len <= VDSO_MAX).then_some(len)
}

/// The bytes an ELF64 image mapped whole (a vDSO) spans: its loaded segments' and its
/// section headers' ends, whichever is last. `headers`: the image's first bytes, up to the
/// end of its program headers ([`elf_headers_len`]).
fn elf_image_size(headers: &[u8]) -> Option<u64> {
    let words = aligned(headers);
    let data = &bytes_of_slice(&words)[..headers.len()];
    let header = Header::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let sections = u64::from(header.e_shnum(endian)) * u64::from(header.e_shentsize(endian));
    let mut end = header.e_shoff(endian).checked_add(sections)?;
    for ph in header.program_headers(endian, data).ok()? {
        if ph.p_type(endian) == PT_LOAD {
            end = end.max(ph.p_offset(endian).checked_add(ph.p_filesz(endian))?);
        }
    }
    Some(end)
}

/// `bytes` copied to where object reads its ELF structures in place: it checks their
/// alignment (its `unaligned` feature, which would not, would also slow the CLI's symbol
/// reading, the crate being shared).
fn aligned(bytes: &[u8]) -> Vec<u64> {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytes_of_slice_mut(&mut words)[..bytes.len()].copy_from_slice(bytes);
    words
}

/// Reads a NUL-terminated path from guest memory (at most 4 KiB).
fn read_path(buf: &mut ByteBuf, addr: u64) -> Option<Vec<u8>> {
    read_cstr(buf, addr, 4096)
}

/// Reads a NUL-terminated string of at most `max` bytes from guest memory.
pub fn read_cstr(buf: &mut ByteBuf, addr: u64, max: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        // Chunks that never cross a page, so an unmapped next page does not fail the read.
        let n = (64 - (at % 64)) as usize;
        let chunk = buf.read_memory(at, n)?;
        if let Some(end) = chunk.iter().position(|&c| c == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Some(out);
        }
        out.extend_from_slice(chunk);
        at = at.checked_add(n as u64)?;
    }
    None
}

/// A syscall starts on this thread.
pub fn syscall(num: i64, a1: u64, a2: u64, a3: u64, a5: u64, a6: u64) {
    let sys = crate::state::isa_or_default().linux_user();
    let pending = match num {
        n if n == sys.openat => with_buf(|b| read_path(b, a2)).map(Pending::Openat),
        n if n == sys.mmap && a3 & PROT_EXEC != 0 && (a5 as i64) >= 0 => Some(Pending::Mmap {
            len: a2,
            fd: a5 as i64,
            offset: a6,
        }),
        n if n == sys.munmap => Some(Pending::Munmap { start: a1, len: a2 }),
        n if n == sys.close => {
            if let Some(fds) = FDS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                fds.remove(&(a1 as i64));
            }
            None
        }
        _ => None,
    };
    PENDING.with(|p| *p.borrow_mut() = pending);
}

/// The syscall this thread started returned `ret`.
pub fn syscall_ret(num: i64, ret: i64) {
    let Some(pending) = PENDING.with(|p| p.borrow_mut().take()) else {
        return;
    };
    if ret < 0 {
        return;
    }
    let sys = crate::state::isa_or_default().linux_user();
    match (num, pending) {
        (n, Pending::Openat(path)) if n == sys.openat => {
            let mut fds = FDS.lock().unwrap_or_else(|e| e.into_inner());
            let fds = fds.get_or_insert_with(HashMap::new);
            if fds.len() < MAX_KEPT || fds.contains_key(&ret) {
                fds.insert(ret, path);
            } else {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        (n, Pending::Munmap { start, len }) if n == sys.munmap => {
            crate::state::lib_entries::unmapped(start, len);
        }
        (n, Pending::Mmap { len, fd, offset }) if n == sys.mmap => {
            // Placed before the guest can run (and QEMU translate) any of the new code.
            crate::state::lib_entries::mapped(fd, ret as u64, offset);
            let fds = FDS.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(path) = fds.as_ref().and_then(|f| f.get(&fd)) {
                let mut maps = MAPS.lock().unwrap_or_else(|e| e.into_inner());
                let file = (maps.len() < MAX_KEPT)
                    .then(|| HostFile::of_fd(fd))
                    .flatten();
                keep(
                    &mut maps,
                    Mapping {
                        start: ret as u64,
                        len,
                        offset,
                        path: path.clone(),
                        file,
                    },
                    MAX_KEPT,
                );
            }
        }
        _ => {}
    }
}

/// `plugin.maps`: an `aux` line (what the kernel, here QEMU, told the program, and the host
/// file of the loader it mapped: `interp_dev`, `interp_ino`, `interp_host`), then one `mmap`
/// line per executable file mapping (the host file mapped: `dev`, `ino`, `host`),
/// tab-separated `key=value` fields, the guest path last.
pub fn lines() -> String {
    let mut text = String::new();
    if let Some(a) = *AUX.lock().unwrap_or_else(|e| e.into_inner()) {
        let interp = INTERP.lock().unwrap_or_else(|e| e.into_inner());
        text.push_str(&format!(
            "aux\tentry={:#x}\tphdr={:#x}\tbase={:#x}\tvdso={:#x}{}\n",
            a.entry,
            a.phdr,
            a.base,
            a.vdso,
            interp
                .as_ref()
                .map_or_else(String::new, |f| f.fields("interp_"))
        ));
    }
    for m in MAPS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let path = String::from_utf8_lossy(&m.path).replace(['\t', '\n'], " ");
        text.push_str(&format!(
            "mmap\tstart={:#x}\tlen={:#x}\toffset={:#x}{}\tpath={path}\n",
            m.start,
            m.len,
            m.offset,
            m.file.as_ref().map_or_else(String::new, |f| f.fields(""))
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_past_the_cap_are_counted_not_kept() {
        let before = dropped();
        let mut list = Vec::new();
        for i in 0..5 {
            keep(&mut list, i, 3);
        }
        assert_eq!(list, [0, 1, 2]);
        assert!(dropped() >= before + 2);
    }

    /// The file behind a mapping, as `/proc/self/maps` says it (device in hex major:minor,
    /// inode in decimal, the path after the spaces); anonymous ranges are no file.
    #[test]
    fn the_host_file_mapped_at_an_address() {
        let maps = "7f0000000000-7f0000002000 r-xp 00000000 fd:01 1234   /lib/ld b.so\n\
                    7f0000002000-7f0000003000 rw-p 00000000 00:00 0 \n";
        let f = HostFile::mapped_at(maps, 0x7f00_0000_1000).unwrap();
        assert_eq!(
            (f.dev, f.ino, f.path.as_slice()),
            (libc::makedev(0xfd, 1), 1234, &b"/lib/ld b.so"[..])
        );
        assert_eq!(HostFile::mapped_at(maps, 0x7f00_0000_2000), None);
        assert_eq!(HostFile::mapped_at(maps, 0x7f00_0000_3000), None);
        // This process's own: its program's code, at its own address, is the executable.
        let own = std::fs::read_to_string("/proc/self/maps").unwrap();
        let here = the_host_file_mapped_at_an_address as fn() as usize as u64;
        let f = HostFile::mapped_at(&own, here).unwrap();
        let exe = std::fs::metadata("/proc/self/exe").unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((f.dev, f.ino), (exe.dev(), exe.ino()));
        // A descriptor's file: the same identity and path.
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        use std::os::fd::AsRawFd;
        let g = HostFile::of_fd(i64::from(file.as_raw_fd())).unwrap();
        assert_eq!((g.dev, g.ino, &g.path), (f.dev, f.ino, &f.path));
    }

    #[test]
    fn an_elf_image_spans_its_segments_and_section_headers() {
        // An ordinary ELF file ends with its section headers: the whole file, as a vDSO
        // is mapped.
        let bytes = std::fs::read("/bin/sh").unwrap();
        let len = elf_headers_len(&bytes[..64]).unwrap() as usize;
        assert_eq!(elf_image_size(&bytes[..len]), Some(bytes.len() as u64));
        // Not an ELF header, or a truncated table.
        assert_eq!(elf_headers_len(&[0u8; 64]), None);
        assert_eq!(elf_image_size(&bytes[..len - 8]), None);
    }
}
