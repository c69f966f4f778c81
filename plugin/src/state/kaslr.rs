//! A Linux kernel's randomised base (KASLR), found while it boots.
//!
//! The CLI reads the kernel's symbols while QEMU starts and writes `kaslr_file=` (before the
//! entries list): the function where the kernel first runs in the upper half of the address
//! space (arm64 `__primary_switched`, entered by `br x8` once the MMU maps it; x86_64 the
//! startup code's jump to its own link address), the granule the kernel moves by, and the
//! image's range. The first block translated in the upper half gives the offset, once,
//! before any of the kernel's code there has been instrumented. A run from a snapshot has
//! no boot to watch: the CLI gives the kernel's version banner instead, looked for in guest
//! memory at every offset that puts that block inside the image (a block outside it, in a
//! module, tells nothing: the next one is tried). The trace keeps the
//! addresses the guest ran (the CLI moves the kernel's symbols by the offset); whatever is
//! decided by the CLI's named functions is asked in the symbol file's space
//! ([`to_symbols`], at translation; the gates at run time). Modules, firmware and the
//! kernel's physical-address code are outside the image's range and never moved.

use qemu_uftrace_engine::kaslr::KernelShift;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The CLI's file, from `kaslr_file=`.
static FILE: OnceLock<PathBuf> = OnceLock::new();
/// What the CLI's file says to look for, read at the first upper-half block.
static ANCHOR: OnceLock<Result<Anchor, String>> = OnceLock::new();
/// What the upper-half blocks said: the offset, or why there is none.
static DECIDED: OnceLock<Result<Found, String>> = OnceLock::new();
/// Upper-half blocks where the banner was looked for in vain.
static BANNER_MISSES: AtomicU32 = AtomicU32::new(0);
/// After so many, the banner is said not found: its first blocks run in the image.
const BANNER_TRIES: u32 = 64;
/// The most offsets one block may put the banner at (an arm64 image of 4 GiB by 64 KiB).
const MAX_CANDIDATES: u64 = 1 << 16;
/// Read by translation and the gates: empty until an offset other than 0 is found.
pub static SHIFT: KernelShift = KernelShift::new();

/// What finds the offset: where the kernel first runs as it boots, or its banner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    Entry(Entry),
    Banner(Banner),
}

impl Anchor {
    /// The kernel image's range, in the symbol file's space.
    fn range(&self) -> (u64, u64) {
        match self {
            Anchor::Entry(a) => (a.lo, a.hi),
            Anchor::Banner(b) => (b.lo, b.hi),
        }
    }
}

/// The kernel's version banner (a run from a snapshot): where it is linked and its first
/// bytes, which stay in memory wherever the kernel runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Banner {
    pub addr: u64,
    pub granule: u64,
    pub lo: u64,
    pub hi: u64,
    pub bytes: Vec<u8>,
}

/// What [`Found::name`] says for an offset found from the banner.
pub const BANNER: &str = "linux_banner";

impl Banner {
    /// The offset that puts the banner in guest memory (`read`), among those that put the
    /// block at `at` inside the image: `None` where none does (the block is elsewhere).
    pub fn offset_for(
        &self,
        at: u64,
        mut read: impl FnMut(u64, usize) -> Option<Vec<u8>>,
    ) -> Option<Result<Found, String>> {
        let granule = self.granule.max(1);
        if at < self.lo || self.hi <= self.lo {
            return None;
        }
        if (self.hi - self.lo) / granule >= MAX_CANDIDATES {
            return Some(Err(format!(
                "its image ({:#x} bytes) is too large to look for its banner by {granule:#x}",
                self.hi - self.lo
            )));
        }
        // Every multiple of the granule with lo <= at - offset < hi, from the largest.
        let mut offset = (at - self.lo) / granule * granule;
        let mut matches = Vec::new();
        while at - offset < self.hi {
            let there = read(self.addr.wrapping_add(offset), self.bytes.len());
            if there.as_deref() == Some(self.bytes.as_slice()) {
                matches.push(offset);
            }
            match offset.checked_sub(granule) {
                Some(lower) => offset = lower,
                None => break,
            }
        }
        match matches[..] {
            [] => None,
            [offset] => Some(Ok(Found {
                offset,
                at,
                name: BANNER.into(),
                phys: None,
            })),
            _ => Some(Err(format!(
                "its banner is in memory at {} offsets from its block at {at:#x}",
                matches.len()
            ))),
        }
    }
}

/// Where the kernel first runs in the upper half, in the symbol file's space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The function it is in, and how far into it the block may start (1: at its start).
    pub start: u64,
    pub size: u64,
    /// Every offset is a multiple of it.
    pub granule: u64,
    /// The kernel image's range, which moves.
    pub lo: u64,
    pub hi: u64,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub offset: u64,
    pub at: u64,
    pub name: String,
    /// Where `at` is in guest memory (QEMU 10.1 on): an x86 kernel's physical base is
    /// random too, and the CLI moves the names of its physical-address code by it.
    pub phys: Option<u64>,
}

/// At install: where the CLI writes the anchor.
pub fn install(file: PathBuf) {
    let _ = FILE.set(file);
}

/// Whether the kernel's base is looked for at all (the gates then look up moved).
pub fn watched() -> Option<&'static KernelShift> {
    FILE.get().map(|_| &SHIFT)
}

/// `addr` as the guest runs it, in the symbol file's space.
#[inline(always)]
pub fn to_symbols(addr: u64) -> u64 {
    SHIFT.to_symbols(addr)
}

/// At each translation, system mode: the first block in the upper half decides the offset.
/// Costs a load and a test per translation once decided.
pub fn learn(start: u64) {
    if start >> 63 == 0 || DECIDED.get().is_some() {
        return;
    }
    let Some(file) = FILE.get() else {
        return;
    };
    let anchor = match ANCHOR.get_or_init(|| read_anchor(file)) {
        Ok(anchor) => anchor,
        Err(why) => {
            DECIDED.get_or_init(|| Err(why.clone()));
            return;
        }
    };
    let found = match anchor {
        Anchor::Entry(a) => offset_at(a, start),
        Anchor::Banner(b) => {
            let mut buf = super::guest::ByteBuf::new();
            let read = |addr, len| buf.read_memory(addr, len).map(<[u8]>::to_vec);
            match b.offset_for(start, read) {
                Some(found) => found,
                None if BANNER_MISSES.fetch_add(1, Ordering::Relaxed) + 1 < BANNER_TRIES => return,
                None => Err(format!(
                    "its banner was not in memory where any of its first {BANNER_TRIES} \
                     blocks in the upper half would put it"
                )),
            }
        }
    };
    DECIDED.get_or_init(|| {
        let mut f = found?;
        let (lo, hi) = anchor.range();
        SHIFT.set(lo, hi, f.offset);
        if matches!(anchor, Anchor::Entry(_)) {
            f.phys = physical(start);
        }
        tell(&f);
        Ok(f)
    });
}

/// `vaddr`'s guest-physical address by `qemu_plugin_translate_vaddr` (API 5, looked up:
/// older QEMUs lack it), asked on the translating vCPU's thread.
fn physical(vaddr: u64) -> Option<u64> {
    type Translate = unsafe extern "C" fn(vaddr: u64, hwaddr: *mut u64) -> bool;
    let p = crate::ffi::optional(c"qemu_plugin_translate_vaddr")?;
    // SAFETY: the symbol QEMU exports under this name has this signature (10.1 on).
    let translate = unsafe { std::mem::transmute::<*mut std::ffi::c_void, Translate>(p) };
    let mut hwaddr = 0u64;
    // SAFETY: a vaddr and a place for the answer; QEMU reads the running vCPU's mapping.
    unsafe { translate(vaddr, &mut hwaddr) }.then_some(hwaddr)
}

/// The lines `plugin.stats` will end with, for the CLI's symbol job, which can then write
/// the kernel's symbols where it ran once rather than move them after the run.
pub fn lines(f: &Found) -> String {
    let mut text = format!(
        "kaslr_offset={:#x}\nkaslr_found_at={:#x}\nkaslr_anchor={}\n",
        f.offset, f.at, f.name
    );
    if let Some(phys) = f.phys {
        text.push_str(&format!("kaslr_phys_at={phys:#x}\n"));
    }
    text
}

/// Writes [`lines`] into `plugin.kaslr` (whole or not at all), at once.
fn tell(f: &Found) {
    let Some(dir) = super::config().map(|c| &c.out) else {
        return;
    };
    let tmp = dir.join("plugin.kaslr.tmp");
    let _ = std::fs::write(&tmp, lines(f))
        .and_then(|()| std::fs::rename(&tmp, dir.join("plugin.kaslr")));
}

/// What was found, for `plugin.stats`: `None` when not looked for.
pub fn outcome() -> Option<Result<&'static Found, &'static str>> {
    FILE.get()?;
    Some(match DECIDED.get() {
        Some(Ok(f)) => Ok(f),
        Some(Err(why)) => Err(why.as_str()),
        None => Err("the kernel never ran in the upper half of the address space"),
    })
}

/// The offset of a kernel whose first upper-half block starts at `at`.
pub fn offset_at(a: &Entry, at: u64) -> Result<Found, String> {
    let into = at.wrapping_sub(a.start) % a.granule.max(1);
    if into >= a.size {
        return Err(format!(
            "its first block in the upper half, at {at:#x}, is not in {} (at {:#x} and \
             multiples of {:#x} beyond)",
            a.name, a.start, a.granule
        ));
    }
    Ok(Found {
        offset: at.wrapping_sub(a.start).wrapping_sub(into),
        at,
        name: a.name.clone(),
        phys: None,
    })
}

/// Waits (30 s at most) for the CLI's file: `anchor START SIZE GRANULE LO HI NAME`,
/// `banner ADDR GRANULE LO HI BYTES` (hex), or `none WHY`.
fn read_anchor(file: &Path) -> Result<Anchor, String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            break text;
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("{} never appeared", file.display()));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    parse(&text)
}

pub fn parse(text: &str) -> Result<Anchor, String> {
    let line = text.trim();
    if let Some(why) = line.strip_prefix("none ") {
        return Err(why.to_string());
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let hex = |w: &str| u64::from_str_radix(w, 16).ok();
    match words[..] {
        ["anchor", s, z, g, lo, hi, name] => match (hex(s), hex(z), hex(g), hex(lo), hex(hi)) {
            (Some(start), Some(size), Some(granule), Some(lo), Some(hi)) if size > 0 => {
                Ok(Anchor::Entry(Entry {
                    start,
                    size,
                    granule,
                    lo,
                    hi,
                    name: name.to_string(),
                }))
            }
            _ => Err(format!("malformed anchor {line:?}")),
        },
        ["banner", a, g, lo, hi, bytes] => match (hex(a), hex(g), hex(lo), hex(hi), unhex(bytes)) {
            (Some(addr), Some(granule), Some(lo), Some(hi), Some(bytes))
                if granule > 0 && !bytes.is_empty() =>
            {
                Ok(Anchor::Banner(Banner {
                    addr,
                    granule,
                    lo,
                    hi,
                    bytes,
                }))
            }
            _ => Err(format!("malformed anchor {line:?}")),
        },
        _ => Err(format!("malformed anchor {line:?}")),
    }
}

/// `hex`'s bytes, two digits each (at most 256).
fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || hex.len() > 512 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor(text: &str) -> Entry {
        match parse(text).unwrap() {
            Anchor::Entry(a) => a,
            other => panic!("{other:?}"),
        }
    }

    fn banner(text: &str) -> Banner {
        match parse(text).unwrap() {
            Anchor::Banner(b) => b,
            other => panic!("{other:?}"),
        }
    }

    /// Guest memory holding `bytes` at `at` only (reads elsewhere see other bytes).
    fn memory(at: u64, bytes: &[u8]) -> impl FnMut(u64, usize) -> Option<Vec<u8>> + '_ {
        move |addr: u64, len: usize| {
            Some(if addr == at {
                bytes[..len].to_vec()
            } else {
                vec![0x5a; len]
            })
        }
    }

    #[test]
    fn a_snapshots_offset_is_where_its_banner_is() {
        // x86_64: image 0xffffffff81000000..0xffffffff83830000, banner at ...8211ffe0.
        let b =
            banner("banner ffffffff8211ffe0 200000 ffffffff81000000 ffffffff83830000 4c696e7578");
        let offset = 0x1e00_0000;
        let ran_at = 0xffff_ffff_8211_ffe0 + offset;
        // A block in the idle loop, where the kernel ran.
        let read = memory(ran_at, b"Linux");
        let found = b.offset_for(0xffff_ffff_810f_1234 + offset, read);
        assert_eq!(found.unwrap().unwrap().offset, offset);
        // No offset at all (nokaslr): the candidates reach 0.
        let read = memory(0xffff_ffff_8211_ffe0, b"Linux");
        assert_eq!(
            b.offset_for(0xffff_ffff_8100_0000, read)
                .unwrap()
                .unwrap()
                .offset,
            0
        );
        // A block outside the image (a module's), or below it, puts the banner nowhere.
        let read = memory(ran_at, b"Linux");
        assert_eq!(b.offset_for(0xffff_ffff_c000_1000, read), None);
        let read = memory(ran_at, b"Linux");
        assert_eq!(b.offset_for(0xffff_8880_0000_1000, read), None);
    }

    #[test]
    fn a_banner_at_two_offsets_is_no_answer() {
        let b = banner("banner 1000 1000 0 10000 4c");
        let found = b.offset_for(0x8000, |_, len| Some(vec![b'L'; len]));
        assert!(found.unwrap().is_err());
        assert!(parse("banner 1000 0 0 10000 4c").is_err());
        assert!(parse("banner 1000 1000 0 10000 4").is_err());
    }

    #[test]
    fn an_exact_anchor_gives_the_distance() {
        // arm64: `__primary_switched` entered at its start; offsets move by 64 KiB.
        let a = anchor("anchor ffff800009398f9c 1 10000 ffff800008000000 ffff800009ab0000 p");
        let f = offset_at(&a, 0xffff_8000_0939_8f9c + 0x3_4560_0000).unwrap();
        assert_eq!(f.offset, 0x3_4560_0000);
        assert_eq!(offset_at(&a, 0xffff_8000_0939_8f9c).unwrap().offset, 0);
        // Any other first block is said, never taken for an offset.
        assert!(offset_at(&a, 0xffff_8000_0939_8fa0 + 0x20_0000).is_err());
    }

    #[test]
    fn a_block_inside_the_anchor_is_placed_by_the_granule() {
        // x86_64 6.1: the block after `jmp *%rax` in secondary_startup_64 (at +0x63).
        let a = anchor(
            "anchor ffffffff81000070 1000 200000 ffffffff81000000 ffffffff83000000 \
             secondary_startup_64",
        );
        let f = offset_at(&a, 0xffff_ffff_8100_00d3 + 0x3a0_0000).unwrap();
        assert_eq!(f.offset, 0x3a0_0000);
        assert_eq!(offset_at(&a, 0xffff_ffff_8100_00d3).unwrap().offset, 0);
        assert!(offset_at(&a, 0xffff_ffff_8100_20d3).is_err());
    }

    #[test]
    fn no_anchor_says_why() {
        assert_eq!(
            parse("none the kernel's symbols have no __primary_switched\n"),
            Err("the kernel's symbols have no __primary_switched".into())
        );
        assert!(parse("anchor 1 2").is_err());
        assert!(parse("anchor 1 0 1 0 2 x").is_err());
    }
}
