//! A stripped program's `main`, from its entry point's code: glibc's `_start` hands `main`
//! to `__libc_start_main` in its first argument register, loaded in one of a few fixed
//! ways per architecture (`sysdeps/<arch>/start.S`). Debian strips its programs (systemd's
//! among them), so without this a service's `main` is only `FILE+0xADDR`, and nothing can
//! aim at it (`record --start-at PATH:main`).
//!
//! Only the loads glibc's `_start` makes are decoded, within its first instructions; a
//! program whose entry point is anything else has no `main` found (never a guess).

/// Where `_start` takes `main` from: the address itself, or a GOT slot holding it (a PIE's:
/// the slot's `R_*_RELATIVE` addend, or its contents where the link resolved it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MainAt {
    Addr(u64),
    Slot(u64),
}

/// Bytes of `_start` read at most: glibc's load `main` within its first 16 instructions.
pub(crate) const CODE_READ: usize = 64;

/// x86-64: `lea main(%rip),%rdi` (a PIE), `mov $main,%rdi` or `mov $main,%edi` (a fixed
/// program), `mov main@GOTPCREL(%rip),%rdi` (a program whose `main` may be a library's).
/// `code` is `_start`'s first bytes, at `entry`.
pub(crate) fn x86_64(code: &[u8], entry: u64) -> Option<MainAt> {
    let code = &code[..code.len().min(CODE_READ)];
    let i32_at = |i: usize| -> Option<i64> {
        let b: [u8; 4] = code.get(i..i + 4)?.try_into().ok()?;
        Some(i64::from(i32::from_le_bytes(b)))
    };
    // glibc's `_start` before the load: `xor %ebp,%ebp` (31 ed), `mov %rdx,%r9` (49 89 d1),
    // `pop %rsi` (5e), `mov %rsp,%rdx` (48 89 e2), `and $-16,%rsp` (48 83 e4 f0), `push
    // %rax` (50), `push %rsp` (54), `xor %r8d,%r8d` (45 31 c0), `xor %ecx,%ecx` (31 c9), and
    // an `endbr64` (f3 0f 1e fa) first with CET: the load is the first instruction after
    // those, found by walking them rather than by searching bytes.
    // Each with the bytes of immediate or displacement after it.
    const BEFORE: &[(&[u8], usize)] = &[
        (&[0xf3, 0x0f, 0x1e, 0xfa], 0),
        (&[0x31, 0xed], 0),
        (&[0x49, 0x89, 0xd1], 0),
        (&[0x5e], 0),
        (&[0x48, 0x89, 0xe2], 0),
        (&[0x48, 0x83, 0xe4, 0xf0], 0),
        (&[0x50], 0),
        (&[0x54], 0),
        (&[0x45, 0x31, 0xc0], 0),
        (&[0x31, 0xc9], 0),
        // Older glibc: `mov $__libc_csu_fini,%r8` and `mov $__libc_csu_init,%rcx` (fixed),
        // or their `lea …(%rip)` (PIE), before `main`'s.
        (&[0x49, 0xc7, 0xc0], 4),
        (&[0x48, 0xc7, 0xc1], 4),
        (&[0x4c, 0x8d, 0x05], 4),
        (&[0x48, 0x8d, 0x0d], 4),
    ];
    // glibc's `_start` clears the frame pointer first (after `endbr64`): anything else is
    // not it.
    let first = usize::from(code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa])) * 4;
    if code.get(first..first + 2) != Some(&[0x31, 0xed]) {
        return None;
    }
    let mut i = 0;
    'walk: while i < code.len() {
        let rest = &code[i..];
        for (known, imm) in BEFORE {
            if rest.starts_with(known) {
                i += known.len() + imm;
                continue 'walk;
            }
        }
        let next = entry.wrapping_add(i as u64);
        return match rest {
            // lea disp32(%rip),%rdi
            [0x48, 0x8d, 0x3d, ..] => Some(MainAt::Addr(
                next.wrapping_add(7).wrapping_add_signed(i32_at(i + 3)?),
            )),
            // mov disp32(%rip),%rdi
            [0x48, 0x8b, 0x3d, ..] => Some(MainAt::Slot(
                next.wrapping_add(7).wrapping_add_signed(i32_at(i + 3)?),
            )),
            // mov $imm32,%rdi (sign-extended)
            [0x48, 0xc7, 0xc7, ..] => Some(MainAt::Addr(i32_at(i + 3)? as u64)),
            // mov $imm32,%edi (zero-extended)
            [0xbf, ..] => Some(MainAt::Addr(u64::from(i32_at(i + 1)? as u32))),
            _ => None,
        };
    }
    None
}

/// AArch64: `adrp x0, :got:main; ldr x0, [x0, :got_lo12:main]` (a PIE) or `adrp x0, main;
/// add x0, x0, :lo12:main` (a fixed program): the first `adrp x0` and the instruction that
/// completes it. `code` is `_start`'s first bytes, at `entry` (little-endian words).
pub(crate) fn aarch64(code: &[u8], entry: u64) -> Option<MainAt> {
    let words: Vec<u32> = code[..code.len().min(CODE_READ)]
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    // glibc's `_start` clears the frame pointer first (`mov x29, #0`, after a `bti c` or
    // `nop`): anything else is not it.
    if !words.iter().take(2).any(|&w| w == 0xd280_001d) {
        return None;
    }
    let at = words.iter().position(|&w| w & 0x9f00_001f == 0x9000_0000)?;
    let w = words[at];
    let imm = (((w >> 5) & 0x7_ffff) << 2 | ((w >> 29) & 3)) as i64;
    // 21 bits, signed, in pages.
    let pages = (imm << 43) >> 43;
    let pc = entry.wrapping_add(4 * at as u64);
    let page = (pc & !0xfff).wrapping_add_signed(pages << 12);
    // The next instruction that reads x0 into x0.
    for &w in words.get(at + 1..)?.iter().take(4) {
        let imm12 = u64::from((w >> 10) & 0xfff);
        // ldr x0, [x0, #imm12 * 8]
        if w & 0xffc0_03ff == 0xf940_0000 {
            return Some(MainAt::Slot(page.wrapping_add(imm12 * 8)));
        }
        // add x0, x0, #imm12 (unshifted)
        if w & 0xffc0_03ff == 0x9100_0000 {
            return Some(MainAt::Addr(page.wrapping_add(imm12)));
        }
    }
    None
}

/// RISC-V: `la a0, main` under PIC, `auipc a0, %got_pcrel_hi(main); ld a0, %pcrel_lo(a0)`,
/// or `lla a0, main`, `auipc a0, …; addi a0, a0, …` (compressed instructions walked over).
/// `code` is `_start`'s first bytes, at `entry`.
pub(crate) fn riscv64(code: &[u8], entry: u64) -> Option<MainAt> {
    let code = &code[..code.len().min(CODE_READ)];
    let word = |i: usize| -> Option<u32> {
        let b: [u8; 4] = code.get(i..i + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b))
    };
    let len = |i: usize| -> Option<usize> {
        let low = *code.get(i)?;
        Some(if low & 3 == 3 { 4 } else { 2 })
    };
    // glibc's `_start` saves `rtld_fini` first (`mv a5, a0`, after `call load_gp`): the
    // load is looked for after it, and anything without it is not `_start`.
    let mut i = 0;
    let mut saved = false;
    while i < code.len() && !saved {
        let n = len(i)?;
        saved = (n == 2 && code.get(i..i + 2) == Some(&[0xaa, 0x87]))
            || (n == 4 && word(i)? == 0x0005_0793);
        i += n;
    }
    while i < code.len() {
        let n = len(i)?;
        // auipc a0, imm20
        if n == 4 && word(i)? & 0xfff == 0x517 {
            let hi = i64::from(word(i)? as i32 >> 12 << 12);
            let next = i + 4;
            let w = word(next)?;
            let lo = i64::from(w as i32 >> 20);
            let base = entry.wrapping_add(i as u64).wrapping_add_signed(hi + lo);
            // ld a0, lo(a0)
            if w & 0xfffff == 0x5_3503 {
                return Some(MainAt::Slot(base));
            }
            // addi a0, a0, lo
            if w & 0xfffff == 0x5_0513 {
                return Some(MainAt::Addr(base));
            }
            return None;
        }
        i += n;
    }
    None
}

/// Where a jump at `at` (`code` its bytes) goes, where it is nothing but that jump (after a
/// `nop`, `endbr64` or `bti c`): glibc's `__wrap_main`, which an AArch64 fixed program's
/// `_start` loads instead of `main` (`b main`).
pub(crate) fn trampoline(machine: u16, code: &[u8], at: u64) -> Option<u64> {
    use object::elf;
    let word = |i: usize| -> Option<u32> {
        let b: [u8; 4] = code.get(i..i + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b))
    };
    match machine {
        elf::EM_X86_64 => {
            let i = if code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
                4
            } else {
                0
            };
            // jmp rel32
            (code.get(i) == Some(&0xe9)).then_some(())?;
            let rel = i64::from(word(i + 1)? as i32);
            Some(at.wrapping_add(i as u64 + 5).wrapping_add_signed(rel))
        }
        elf::EM_AARCH64 => {
            // nop, bti c
            let i = if matches!(word(0)?, 0xd503_201f | 0xd503_245f) {
                4
            } else {
                0
            };
            let w = word(i)?;
            // b imm26
            (w & 0xfc00_0000 == 0x1400_0000).then_some(())?;
            let rel = (i64::from(w & 0x03ff_ffff) << 38) >> 36;
            Some(at.wrapping_add(i as u64).wrapping_add_signed(rel))
        }
        elf::EM_RISCV => {
            let w = word(0)?;
            // jal zero, imm20 (`j`)
            (w & 0xfff == 0x06f).then_some(())?;
            let imm = ((w >> 31) & 1) << 20
                | ((w >> 12) & 0xff) << 12
                | ((w >> 20) & 1) << 11
                | ((w >> 21) & 0x3ff) << 1;
            let rel = (i64::from(imm) << 43) >> 43;
            Some(at.wrapping_add_signed(rel))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bookworm's systemd-journald (amd64), `_start` at 0x8c20: `lea -0x8cb(%rip),%rdi`.
    #[test]
    fn x86_64_lea_after_glibc_s_prologue() {
        let code = [
            0x31, 0xed, 0x49, 0x89, 0xd1, 0x5e, 0x48, 0x89, 0xe2, 0x48, 0x83, 0xe4, 0xf0, 0x50,
            0x54, 0x45, 0x31, 0xc0, 0x31, 0xc9, 0x48, 0x8d, 0x3d, 0x35, 0xf7, 0xff, 0xff, 0xff,
            0x15, 0x97, 0x03, 0x02, 0x00, 0xf4,
        ];
        assert_eq!(x86_64(&code, 0x8c20), Some(MainAt::Addr(0x8370)));
        // Anything else first: no main.
        assert_eq!(x86_64(&[0x55, 0x48, 0x8d, 0x3d, 0, 0, 0, 0], 0x1000), None);
        // An older fixed program: csu's loads, then mov $main,%rdi.
        let old = [
            0x31, 0xed, 0x49, 0x89, 0xd1, 0x5e, 0x48, 0x89, 0xe2, 0x48, 0x83, 0xe4, 0xf0, 0x50,
            0x54, 0x49, 0xc7, 0xc0, 0x10, 0x20, 0x40, 0x00, 0x48, 0xc7, 0xc1, 0x20, 0x20, 0x40,
            0x00, 0x48, 0xc7, 0xc7, 0x30, 0x11, 0x40, 0x00,
        ];
        assert_eq!(x86_64(&old, 0x401000), Some(MainAt::Addr(0x401130)));
    }

    /// Bookworm's systemd-journald (arm64), `_start` at 0x8480: `adrp x0, 0x3f000; ldr x0,
    /// [x0, #4040]`.
    #[test]
    fn aarch64_adrp_and_got_load() {
        let words: [u32; 12] = [
            0xd503201f, 0xd280001d, 0xd280001e, 0xaa0003e5, 0xf94003e1, 0x910023e2, 0x910003e6,
            0xf00001a0, 0xf947e400, 0xd2800003, 0xd2800004, 0x97fffa79,
        ];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(aarch64(&code, 0x8480), Some(MainAt::Slot(0x3f000 + 4040)));
        // mov x29, #0; adrp x0, …; add x0, x0, #0x123
        let code: Vec<u8> = [
            0xd280_001d,
            0x9000_0000u32 | (1 << 5),
            0x9100_0000 | (0x123 << 10),
        ]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
        assert_eq!(aarch64(&code, 0x40_0000), Some(MainAt::Addr(0x40_4123)));
        // A function that is not `_start` (libc.so.6's entry, which prints its version):
        // stp x29, x30, [sp, #-16]!; adrp x1, …; then an `adrp x0` further on.
        let code: Vec<u8> = [0xa9bf_7bfdu32, 0x9000_0981, 0x9000_0000, 0xf940_0000]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert_eq!(aarch64(&code, 0x2_7970), None);
    }

    /// glibc's `__wrap_main` jumps on to `main`.
    #[test]
    fn trampolines_are_followed() {
        use object::elf;
        let le = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|w| w.to_le_bytes()).collect() };
        // nop; b 0x400500 (from 0x400578)
        let code = le(&[0xd503_201f, 0x17ff_ffe2]);
        assert_eq!(
            trampoline(elf::EM_AARCH64, &code, 0x40_0574),
            Some(0x40_0500)
        );
        assert_eq!(
            trampoline(elf::EM_AARCH64, &le(&[0xd503_201f]), 0x1000),
            None
        );
        // endbr64; jmp -0x20
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0xe0, 0xff, 0xff, 0xff];
        assert_eq!(
            trampoline(elf::EM_X86_64, &code, 0x1100),
            Some(0x1100 + 9 - 0x20)
        );
        // j -16
        let j: u32 = 0xff1f_f06f;
        assert_eq!(
            trampoline(elf::EM_RISCV, &le(&[j]), 0x2000),
            Some(0x2000 - 16)
        );
    }

    /// Debian's riscv64 gcc, `_start` at 0x574: `jal load_gp; c.mv a5,a0; auipc a0,0x2; ld
    /// a0,-1354(a0)`.
    #[test]
    fn riscv64_auipc_and_got_load_past_compressed_ones() {
        let code = [
            0xef, 0x00, 0x20, 0x02, 0xaa, 0x87, 0x17, 0x25, 0x00, 0x00, 0x03, 0x35, 0x65, 0xab,
        ];
        assert_eq!(riscv64(&code, 0x574), Some(MainAt::Slot(0x2030)));
        // Without `mv a5, a0` first: not `_start`.
        assert_eq!(riscv64(&code[6..], 0x57a), None);
    }
}
