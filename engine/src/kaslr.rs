//! A Linux kernel that randomised its base (KASLR) runs every function of its image at the
//! symbol file's address plus one offset. The trace keeps the addresses the guest ran (the
//! CLI moves the kernel's symbols once): only what is compared with the CLI's lists of
//! named functions (`-F`/`-N`, `--stop-at`, jump entries, the process watch) is taken back
//! to the symbol file's space, at translation, or by the gates, which compare at run time.

use std::sync::atomic::{AtomicU64, Ordering};

/// The kernel image's range as it runs and the offset it was moved by; empty (every address
/// its own) until the offset is found, and when it is 0.
#[derive(Debug, Default)]
pub struct KernelShift {
    /// Where the image's lowest address runs.
    start: AtomicU64,
    /// The image's length; 0 while unknown (set last, read first).
    len: AtomicU64,
    offset: AtomicU64,
}

impl KernelShift {
    pub const fn new() -> KernelShift {
        KernelShift {
            start: AtomicU64::new(0),
            len: AtomicU64::new(0),
            offset: AtomicU64::new(0),
        }
    }

    /// The image at `[lo, hi)` in the symbol file runs `offset` bytes further. Once, before
    /// any of its code runs.
    pub fn set(&self, lo: u64, hi: u64, offset: u64) {
        if offset == 0 || hi <= lo {
            return;
        }
        self.start.store(lo.wrapping_add(offset), Ordering::Relaxed);
        self.offset.store(offset, Ordering::Relaxed);
        self.len.store(hi - lo, Ordering::Release);
    }

    /// `addr`, an address of the kernel image in its symbol file (text or data: the image
    /// moves whole, `init_task` with its code), as the guest has it.
    pub fn to_guest(&self, addr: u64) -> u64 {
        if self.len.load(Ordering::Acquire) == 0 {
            return addr;
        }
        addr.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// `addr` as the guest runs it, in the symbol file's space (other addresses unchanged:
    /// firmware, a kernel's physical-address code, modules, processes).
    #[inline(always)]
    pub fn to_symbols(&self, addr: u64) -> u64 {
        let len = self.len.load(Ordering::Acquire);
        if len == 0 {
            return addr;
        }
        let start = self.start.load(Ordering::Relaxed);
        if addr.wrapping_sub(start) < len {
            addr.wrapping_sub(self.offset.load(Ordering::Relaxed))
        } else {
            addr
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_image_moves_back() {
        let s = KernelShift::new();
        assert_eq!(s.to_symbols(0xffff_8000_0801_0000), 0xffff_8000_0801_0000);
        s.set(0xffff_8000_0800_0000, 0xffff_8000_09ab_0000, 0x2_0000_0000);
        assert_eq!(s.to_symbols(0xffff_8002_0801_0000), 0xffff_8000_0801_0000);
        // Below and past the moved image, and the unmoved image itself: unchanged.
        assert_eq!(s.to_symbols(0xffff_8002_07ff_fffc), 0xffff_8002_07ff_fffc);
        assert_eq!(s.to_symbols(0xffff_8002_09ab_0000), 0xffff_8002_09ab_0000);
        assert_eq!(s.to_symbols(0x4020_0000), 0x4020_0000);
        // And forth: code or data of the image (data past the functions' range too).
        assert_eq!(s.to_guest(0xffff_8000_0801_0000), 0xffff_8002_0801_0000);
        assert_eq!(s.to_guest(0xffff_8000_0a00_0000), 0xffff_8002_0a00_0000);
        assert_eq!(KernelShift::new().to_guest(0x1000), 0x1000);
        let none = KernelShift::new();
        none.set(0x1000, 0x2000, 0);
        assert_eq!(none.to_symbols(0x1800), 0x1800);
    }
}
