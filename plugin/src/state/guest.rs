//! Raw access to guest registers and memory, on the hot path's terms: register handles
//! looked up once, one reused GByteArray per vCPU (no allocation per read).

use crate::ffi::{
    g_array_free, g_array_get_element_size, g_byte_array_free, g_byte_array_new,
    qemu_plugin_get_registers, qemu_plugin_read_memory_vaddr, qemu_plugin_read_register,
    qemu_plugin_reg_descriptor, qemu_plugin_register, GByteArray,
};
use qemu_uftrace_engine::arch::{Isa, Mode};
use rustc_hash::FxHashMap;
use std::ffi::CStr;
use std::sync::OnceLock;

/// Handles for the general registers, indexed by number (`None`: QEMU lacks it).
pub struct Registers {
    gpr: Vec<Option<usize>>,
    /// Every register, by QEMU's name (system registers, status, the general ones too).
    /// FxHash: register names are a few bytes long, and the code width is read by name for
    /// every block translated, where SipHash took most of a lookup's time.
    named: FxHashMap<String, usize>,
}

static REGISTERS: OnceLock<Registers> = OnceLock::new();

/// Looks the register handles up; must run on a vCPU thread (vCPU init).
pub fn init_registers(isa: &dyn Isa) {
    REGISTERS.get_or_init(|| {
        let mut gpr = vec![None; 32];
        let mut named = FxHashMap::default();
        // SAFETY: called from a vCPU callback, where QEMU allows it; the array is ours to free.
        unsafe {
            let array = qemu_plugin_get_registers();
            if !array.is_null() {
                // The descriptor grew a field in API v5: step by glib's element size.
                let stride = g_array_get_element_size(array) as usize;
                let base = (*array).data as *const u8;
                for i in 0..(*array).len as usize {
                    let d = &*(base.add(i * stride) as *const qemu_plugin_reg_descriptor);
                    let name = CStr::from_ptr(d.name).to_string_lossy();
                    if let Some(n) = (0..32u8).find(|&n| isa.gpr_name(n) == name) {
                        gpr[n as usize] = Some(d.handle as usize);
                    }
                    // General registers too, for reads by name.
                    named.insert(name.into_owned(), d.handle as usize);
                }
                g_array_free(array, 1);
            }
        }
        Registers { gpr, named }
    });
}

/// Whether QEMU lists a register of that name (its gdb view of the CPU: aarch64 shows
/// `z0`… with SVE and `v0`… without).
pub fn has_register(name: &str) -> bool {
    REGISTERS.get().is_some_and(|r| r.named.contains_key(name))
}

/// A reusable GByteArray owned by one vCPU.
pub struct ByteBuf(*mut GByteArray);

// The buffer is only used by the vCPU that owns it (under its slot lock).
unsafe impl Send for ByteBuf {}

impl ByteBuf {
    pub fn new() -> ByteBuf {
        // SAFETY: plain glib allocation.
        ByteBuf(unsafe { g_byte_array_new() })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: data/len describe the array's live contents.
        unsafe { std::slice::from_raw_parts((*self.0).data, (*self.0).len as usize) }
    }

    /// The register just read, zero-extended: status registers are 32-bit in gdb's view.
    fn le_value(&self, size: usize) -> Option<u64> {
        let b = self.bytes().get(..size.min(8))?;
        let mut word = [0u8; 8];
        word[..b.len()].copy_from_slice(b);
        Some(u64::from_le_bytes(word))
    }

    /// Reads general register `n` of the current vCPU (the callback must have R_REGS).
    #[inline]
    pub fn read_gpr(&mut self, n: u8) -> Option<u64> {
        let handle = REGISTERS.get()?.gpr.get(n as usize).copied().flatten()?;
        self.read_handle(handle)
    }

    /// Reads a register by QEMU's name (the callback must have R_REGS); not for hot paths.
    /// A general register by name too (RISC-V's `sp`, which is x2): every register QEMU
    /// lists is in the name table.
    pub fn read_named(&mut self, name: &str) -> Option<u64> {
        let handle = *REGISTERS.get()?.named.get(name)?;
        self.read_handle(handle)
    }

    /// The low 8 bytes of a register of any size, by QEMU's name (the callback must have
    /// R_REGS): a vector register's lowest lane (x86's `xmm`, aarch64's `v` or SVE's `z`),
    /// where a floating-point argument is. Not for hot paths.
    pub fn read_named_low(&mut self, name: &str) -> Option<u64> {
        let handle = *REGISTERS.get()?.named.get(name)?;
        match self.read_bytes(handle) {
            0 => None,
            size => self.le_value(size),
        }
    }

    /// A register of at most 8 bytes (a wider one is `None`: no value cut short by mistake).
    #[inline]
    fn read_handle(&mut self, handle: usize) -> Option<u64> {
        match self.read_bytes(handle) {
            size @ 1..=8 => self.le_value(size),
            _ => None,
        }
    }

    /// Reads register `handle` into the buffer; its size in bytes. The size read is the
    /// buffer's, never the return value: that is a byte count before API v6 and a bool from
    /// v6 on (where taking it as a size would read one byte of every register). The buffer
    /// is emptied first, so a failed read leaves it empty.
    #[inline(always)]
    fn read_bytes(&mut self, handle: usize) -> usize {
        // SAFETY: a valid handle, a live array; gdbstub appends, so empty it first.
        unsafe {
            (*self.0).len = 0;
            qemu_plugin_read_register(handle as *mut qemu_plugin_register, self.0);
            (*self.0).len as usize
        }
    }

    /// Reads the `len` bytes (at most [`LOOKBEHIND_MAX`]) that end at `addr` into the end of
    /// `out`; gives how many it read. Where they start on a page that cannot be read, only
    /// those on `addr`'s own page (a variable-length call may be shorter than `len`).
    pub fn read_before(
        &mut self,
        addr: u64,
        len: usize,
        out: &mut [u8; LOOKBEHIND_MAX],
    ) -> Option<usize> {
        let all = len.min(LOOKBEHIND_MAX).min(addr as usize);
        if let Some(b) = self.read_memory(addr - all as u64, all) {
            out[LOOKBEHIND_MAX - all..].copy_from_slice(b);
            return Some(all);
        }
        let n = all.min((addr % MIN_PAGE) as usize);
        if n == 0 || n == all {
            return None;
        }
        let b = self.read_memory(addr - n as u64, n)?;
        out[LOOKBEHIND_MAX - n..].copy_from_slice(b);
        Some(n)
    }

    /// Reads guest virtual memory through the current vCPU's MMU.
    /// The little-endian value of `size` (1 to 8) bytes of guest virtual memory at `addr`,
    /// zero-extended (every guest architecture supported is little-endian).
    pub fn read_le(&mut self, addr: u64, size: usize) -> Option<u64> {
        let size = size.clamp(1, 8);
        let bytes = self.read_memory(addr, size)?;
        let mut word = [0u8; 8];
        word[..size].copy_from_slice(bytes);
        Some(u64::from_le_bytes(word))
    }

    /// Writes the guest's own byte at `addr` back, unchanged: QEMU then drops what it
    /// translated from that page (a write to code goes through its self-modifying-code
    /// path), so the next run of that code is translated, and instrumented, again. False
    /// where this QEMU cannot write guest memory (before 10.1) or the byte is not mapped.
    pub fn retranslate(&mut self, addr: u64) -> bool {
        let Some(write) = crate::ffi::write_memory_api() else {
            return false;
        };
        // The buffer now holds exactly the byte read: written back as it is.
        // SAFETY: a live GByteArray of length 1.
        self.read_memory(addr, 1).is_some() && unsafe { write(addr, self.0) }
    }

    /// Up to `max` bytes from `at`, page by page (QEMU's smallest), up to the first page that
    /// cannot be read (a stack's copy ends where its mapping does).
    pub fn copy_from(&mut self, at: u64, max: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(max);
        let mut addr = at;
        while out.len() < max {
            let n = ((MIN_PAGE - addr % MIN_PAGE) as usize).min(max - out.len());
            match self.read_memory(addr, n) {
                Some(bytes) => out.extend_from_slice(bytes),
                None => break,
            }
            addr = addr.wrapping_add(n as u64);
        }
        out
    }

    /// A NUL-terminated string of guest memory at `at`, at most `max` bytes (cut there),
    /// read in pieces that stay within a page (the next may not be mapped); `None` where
    /// a piece cannot be read.
    pub fn read_c_string(&mut self, at: u64, max: usize) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut addr = at;
        while out.len() < max {
            let room = (MIN_PAGE - addr % MIN_PAGE) as usize;
            let len = room.min(max - out.len()).min(64);
            let bytes = self.read_memory(addr, len)?;
            if let Some(end) = bytes.iter().position(|&b| b == 0) {
                out.extend_from_slice(&bytes[..end]);
                return Some(out);
            }
            out.extend_from_slice(bytes);
            addr += len as u64;
        }
        Some(out)
    }

    pub fn read_memory(&mut self, addr: u64, len: usize) -> Option<&[u8]> {
        // SAFETY: QEMU sizes the array itself.
        let ok = unsafe { qemu_plugin_read_memory_vaddr(addr, self.0, len) };
        if ok && self.bytes().len() >= len {
            Some(&self.bytes()[..len])
        } else {
            None
        }
    }
}

impl Drop for ByteBuf {
    fn drop(&mut self) {
        // SAFETY: our own array, freed once, with its contents.
        unsafe { g_byte_array_free(self.0, 1) };
    }
}

/// Guest memory for the engine's readers of kernel structures (`linux_walk`).
impl qemu_uftrace_engine::linux_walk::Memory for ByteBuf {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Option<()> {
        buf.copy_from_slice(self.read_memory(addr, buf.len())?);
        Some(())
    }
}

/// The smallest guest page QEMU may use (Arm's 1 KiB): within it, guest memory is either
/// all readable or not, and its host copy is contiguous.
pub const MIN_PAGE: u64 = 1024;

/// The most bytes any architecture's `call_lookbehind` asks for.
pub const LOOKBEHIND_MAX: usize = 16;

/// The width of the code the vCPU runs now (fixed-width architectures read no register).
pub fn current_mode(isa: &dyn Isa, buf: &mut ByteBuf) -> Mode {
    isa.current_mode(&mut |name| buf.read_named(name))
}

/// User mode: where guest address 0 lies in QEMU's own address space (QEMU's `guest_base`:
/// guest address `a` is host address `a + base`), learned from the first block translated
/// (its host bytes' address less its guest address). `NO_BASE` in system mode, or until
/// learned.
static USER_BASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(NO_BASE);
const NO_BASE: u64 = u64::MAX;

/// Learns the user-mode guest base from a block at guest address `vaddr` whose bytes QEMU
/// holds at host address `haddr` (its translation callback's `qemu_plugin_insn_haddr`).
pub fn learn_user_base(vaddr: u64, haddr: *const u8) {
    use std::sync::atomic::Ordering;
    if !haddr.is_null() && USER_BASE.load(Ordering::Relaxed) == NO_BASE {
        USER_BASE.store((haddr as u64).wrapping_sub(vaddr), Ordering::Relaxed);
    }
}

/// User mode: the guest base, once learned ([`learn_user_base`]).
pub fn user_base() -> Option<u64> {
    Some(USER_BASE.load(std::sync::atomic::Ordering::Relaxed)).filter(|&b| b != NO_BASE)
}

/// The little-endian value of `size` bytes (at most 8) that a guest load has just read at
/// `vaddr`, read again from the host memory it was read from: a plain load where the API's
/// `qemu_plugin_mem_get_value` cost ~14 ns (a store-forwarding stall on its by-value
/// result), for the 2.4 M calls through memory of x86_64 sqlite. `None` outside user mode,
/// and for addresses with bits set above 48 (a tagged aarch64 pointer: QEMU strips the tag
/// before the access, which this read cannot know how to).
///
/// # Safety
/// Called from the memory callback of that very load (its access succeeded, so the bytes
/// are mapped: a guest thread unmapping them meanwhile races with its own program's load).
#[inline(always)]
pub unsafe fn just_loaded(vaddr: u64, size: usize) -> Option<u64> {
    let base = USER_BASE.load(std::sync::atomic::Ordering::Relaxed);
    if base == NO_BASE || vaddr >> 48 != 0 || size > 8 {
        return None;
    }
    let mut bytes = [0u8; 8];
    // SAFETY: the caller's contract: `size` bytes at `vaddr` were just read by the guest,
    // and user mode maps guest memory at `base` in QEMU's own address space.
    unsafe {
        std::ptr::copy_nonoverlapping(
            vaddr.wrapping_add(base) as usize as *const u8,
            bytes.as_mut_ptr(),
            size,
        )
    };
    Some(u64::from_le_bytes(bytes))
}
