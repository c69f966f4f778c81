//! A Linux kernel's randomised base (KASLR), found while it boots.
//!
//! The CLI reads the kernel's symbols while QEMU starts and writes `kaslr_file=` (before the
//! entries list): the function where the kernel first runs in the upper half of the address
//! space (arm64 `__primary_switched`, entered by `br x8` once the MMU maps it; x86_64 the
//! startup code's jump to its own link address), the granule the kernel moves by, and the
//! image's range. The first block translated in the upper half gives the offset, once,
//! before any of the kernel's code there has been instrumented. The trace keeps the
//! addresses the guest ran (the CLI moves the kernel's symbols by the offset); whatever is
//! decided by the CLI's named functions is asked in the symbol file's space
//! ([`to_symbols`], at translation; the gates at run time). Modules, firmware and the
//! kernel's physical-address code are outside the image's range and never moved.

use qemu_uftrace_engine::kaslr::KernelShift;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The CLI's file, from `kaslr_file=`.
static FILE: OnceLock<PathBuf> = OnceLock::new();
/// What the first upper-half block said: the offset, or why there is none.
static DECIDED: OnceLock<Result<Found, String>> = OnceLock::new();
/// Read by translation and the gates: empty until an offset other than 0 is found.
pub static SHIFT: KernelShift = KernelShift::new();

/// Where the kernel first runs in the upper half, in the symbol file's space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
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
    DECIDED.get_or_init(|| {
        let found = read_anchor(file).and_then(|a| offset_at(&a, start).map(|f| (a, f)));
        match found {
            Ok((a, mut f)) => {
                SHIFT.set(a.lo, a.hi, f.offset);
                f.phys = physical(start);
                tell(&f);
                Ok(f)
            }
            Err(why) => Err(why),
        }
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
pub fn offset_at(a: &Anchor, at: u64) -> Result<Found, String> {
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

/// Waits (30 s at most) for the CLI's file: `anchor START SIZE GRANULE LO HI NAME` (hex),
/// or `none WHY`.
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
                Ok(Anchor {
                    start,
                    size,
                    granule,
                    lo,
                    hi,
                    name: name.to_string(),
                })
            }
            _ => Err(format!("malformed anchor {line:?}")),
        },
        _ => Err(format!("malformed anchor {line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor(text: &str) -> Anchor {
        parse(text).unwrap()
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
