//! A64 call/return classification from instruction words.

use super::{
    call_of_len, CallSite, Discontinuity, ExceptionKind, InsnKind, Isa, Level, LinkSlot, LinuxUser,
    Mode, Target, GENERIC_LINUX_USER,
};

/// `Level` bit for the Secure state (EL3 is always Secure and never carries it).
const SECURE: u8 = 4;

pub struct Aarch64;

fn sign_extend(value: u32, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((value as i64) << shift) >> shift
}

impl Aarch64 {
    pub fn classify_word(pc: u64, insn: u32) -> InsnKind {
        let rn = ((insn >> 5) & 31) as u8;
        let ret_addr = pc.wrapping_add(4);
        if insn & 0xfc00_0000 == 0x9400_0000 {
            // BL imm26
            let offset = sign_extend(insn & 0x03ff_ffff, 26) << 2;
            let target = pc.wrapping_add(offset as u64);
            return InsnKind::Call {
                target: Target::Direct(target),
                ret_addr,
            };
        }
        if insn & 0xffff_fc1f == 0xd63f_0000    // BLR Xn
            || insn & 0xffff_f81f == 0xd63f_081f // BLRAAZ, BLRABZ Xn
            || insn & 0xffff_f800 == 0xd73f_0800
        // BLRAA, BLRAB Xn, Xm
        {
            return InsnKind::Call {
                target: Target::Register(rn),
                ret_addr,
            };
        }
        if insn & 0xffff_fc1f == 0xd65f_0000 {
            // RET {Xn}
            return InsnKind::Return;
        }
        if insn == 0xd65f_0bff || insn == 0xd65f_0fff {
            // RETAA, RETAB
            return InsnKind::Return;
        }
        if insn == 0xd61f_03c0 {
            // BR X30: a return by another name. glibc's `__longjmp` ends so ("ret is
            // guaranteed to mispredict"), and where it lands (after the call to setjmp) the
            // frames it leaves are closed like any return's.
            return InsnKind::Return;
        }
        if insn == 0xd69f_03e0 || insn == 0xd69f_0bff || insn == 0xd69f_0fff {
            // ERET, ERETAA, ERETAB
            return InsnKind::ExceptionReturn;
        }
        if insn & 0xffff_ffe0 == 0xd518_4100 {
            // MSR SP_EL0, Xt: Linux keeps `current` in SP_EL0 at EL1.
            return InsnKind::SetTaskPointer {
                src: (insn & 31) as u8,
            };
        }
        if insn & 0xffe0_001c == 0xd400_0000 && insn & 3 != 0 {
            // SVC, HVC, SMC #imm16
            return InsnKind::Trap;
        }
        InsnKind::Other
    }
}

impl Isa for Aarch64 {
    /// B imm26.
    /// `BR Xn`, and with pointer authentication `BRAA`, `BRAB`, `BRAAZ`, `BRABZ`.
    fn indirect_jump(&self, _mode: Mode, bytes: &[u8]) -> bool {
        let Some(b) = bytes.get(..4) else {
            return false;
        };
        let insn = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        // BR: d61f0000 | n << 5; BRAAZ/BRABZ: d61f081f/d61f0c1f | n << 5; BRAA/BRAB:
        // d71f0800/d71f0c00 | n << 5 | m.
        insn & 0xffff_fc1f == 0xd61f_0000
            || insn & 0xffff_f81f == 0xd61f_081f
            || insn & 0xffff_f800 == 0xd71f_0800
    }

    fn direct_jump(&self, _mode: Mode, pc: u64, bytes: &[u8]) -> Option<u64> {
        let b = bytes.get(..4)?;
        let insn = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        (insn & 0xfc00_0000 == 0x1400_0000)
            .then(|| pc.wrapping_add((sign_extend(insn & 0x03ff_ffff, 26) << 2) as u64))
    }

    fn classify(&self, _mode: Mode, pc: u64, bytes: &[u8]) -> InsnKind {
        match bytes.get(..4) {
            Some(b) => Self::classify_word(pc, u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            None => InsnKind::Other,
        }
    }

    fn fetch_len(&self) -> usize {
        4
    }

    fn gpr_name(&self, n: u8) -> String {
        format!("x{n}")
    }

    fn frame_pointer(&self) -> u8 {
        29
    }

    fn call_lookbehind(&self) -> usize {
        4
    }

    /// Every call is one 4-byte word: the word before `pc`.
    fn call_ending_at(&self, mode: Mode, pc: u64, before: &[u8]) -> Option<CallSite> {
        call_of_len(self, mode, pc, before, 4)
    }

    fn status_register(&self) -> &'static str {
        "cpsr"
    }

    fn exception_level(&self, status: u64) -> Level {
        Level(((status >> 2) & 3) as u8) // PSTATE.EL
    }

    /// The pointer-authentication code sits in the bits above the virtual address; the
    /// stripped address repeats bit 55 there (kernel addresses ones, user addresses zeros).
    /// Assumes 48-bit virtual addresses.
    fn strip_authentication(&self, addr: u64) -> u64 {
        if addr & (1 << 55) != 0 {
            addr | 0xffff_0000_0000_0000
        } else {
            addr & 0x0000_ffff_ffff_ffff
        }
    }

    fn exception_link_register(&self, level: Level) -> Option<&'static str> {
        match level.0 & 3 {
            1 => Some("ELR_EL1"),
            2 => Some("ELR_EL2"),
            3 => Some("ELR_EL3"),
            _ => None,
        }
    }

    /// EL3 is always Secure; below it an exception keeps the security state (which only
    /// an exception return from EL3 changes, see `return_level`).
    fn running_level(&self, status: u64, previous: Option<Level>) -> Level {
        let el = self.exception_level(status);
        match previous {
            Some(p) if el.0 != 3 && p.0 & 3 != 3 && p.0 & SECURE != 0 => Level(el.0 | SECURE),
            _ => el,
        }
    }

    /// QEMU 10.0 lists VBAR_EL1 by its AArch32 name, `VBAR`; 10.2.2 as `VBAR_EL1` (read in
    /// each one's gdbstub `system-registers.xml`).
    fn vector_base_register(&self, level: Level) -> &'static [&'static str] {
        match level.0 & 3 {
            1 => &["VBAR_EL1", "VBAR"],
            2 => &["VBAR_EL2"],
            3 => &["VBAR_EL3"],
            _ => &[],
        }
    }

    /// Four groups of four 128-byte vectors (synchronous, IRQ, FIQ, SError): the current
    /// level with SP_EL0, with SP_ELx, then a lower level in AArch64 and in AArch32.
    fn same_level_vector(&self, offset: u64) -> Option<Discontinuity> {
        if offset >= 0x400 || !offset.is_multiple_of(0x80) {
            return None;
        }
        Some(match (offset / 0x80) % 4 {
            1 | 2 => Discontinuity::Interrupt,
            _ => Discontinuity::Exception,
        })
    }

    fn saved_status_register(&self, level: Level) -> Option<&'static str> {
        match level.0 & 3 {
            1 => Some("SPSR_EL1"),
            2 => Some("SPSR_EL2"),
            3 => Some("SPSR_EL3"),
            _ => None,
        }
    }

    fn syndrome_register(&self, level: Level) -> Option<&'static str> {
        match level.0 & 3 {
            1 => Some("ESR_EL1"),
            2 => Some("ESR_EL2"),
            3 => Some("ESR_EL3"),
            _ => None,
        }
    }

    /// From ESR_ELx.EC (bits 31:26).
    fn exception_kind(&self, what: Discontinuity, syndrome: Option<u64>) -> ExceptionKind {
        match what {
            Discontinuity::Interrupt => ExceptionKind::Irq,
            Discontinuity::HostCall => ExceptionKind::Other,
            Discontinuity::Exception => match syndrome.map(|esr| (esr >> 26) & 0x3f) {
                Some(0x11 | 0x15) => ExceptionKind::Svc,
                Some(0x12 | 0x16) => ExceptionKind::Hvc,
                Some(0x13 | 0x17) => ExceptionKind::Smc,
                Some(0x20 | 0x21) => ExceptionKind::InsnAbort,
                Some(0x24 | 0x25) => ExceptionKind::DataAbort,
                Some(0x38 | 0x3c) => ExceptionKind::Brk,
                Some(0x2f) => ExceptionKind::SError,
                _ => ExceptionKind::Other,
            },
        }
    }

    fn task_pointer_register(&self) -> Option<&'static str> {
        Some("SP_EL0")
    }

    /// A task_struct lives in the kernel's half (bit 55 set); the user stack pointer that
    /// the return to EL0 restores into SP_EL0 does not.
    fn is_task_pointer(&self, value: u64) -> bool {
        value & (1 << 55) != 0
    }

    /// CONFIG_PID_IN_CONTEXTIDR (Debian's arm64 kernels) keeps the PID there.
    fn task_id_register(&self) -> Option<&'static str> {
        Some("CONTEXTIDR_EL1")
    }

    fn security_register(&self, level: Level) -> Option<&'static str> {
        (level.0 & 3 == 3).then_some("SCR_EL3")
    }

    /// A lower exception level, whatever the security state.
    fn drops_privilege(&self, from: Level, to: Level) -> bool {
        to.0 & 3 < from.0 & 3
    }

    /// SPSR.M[3:2] is the EL returned to; leaving EL3, SCR_EL3.NS (bit 0) picks the
    /// security state; otherwise it stays.
    fn return_level(&self, from: Level, saved: u64, security: Option<u64>) -> Level {
        let el = ((saved >> 2) & 3) as u8;
        let secure = if from.0 & 3 == 3 {
            security.is_some_and(|scr| scr & 1 == 0)
        } else {
            from.0 & SECURE != 0
        };
        if el == 3 {
            Level(3)
        } else {
            Level(el | if secure { SECURE } else { 0 })
        }
    }

    /// The generic syscall table; programs are `EM_AARCH64`; a delivered handler starts with the
    /// trampoline in x30 and the signal number in x0.
    fn linux_user(&self) -> LinuxUser {
        LinuxUser {
            link: LinkSlot::Register("x30"),
            first_argument: "x0",
            ..GENERIC_LINUX_USER
        }
    }

    fn level_name(&self, level: Level) -> String {
        let el = level.0 & 3;
        if level.0 & SECURE != 0 && el != 3 {
            format!("S-EL{el}")
        } else {
            format!("EL{el}")
        }
    }

    /// `BLR Xn` (the authenticating forms branch to a value other than their register's).
    fn plain_register_call(&self, _mode: Mode, bytes: &[u8]) -> bool {
        word(bytes).is_some_and(|insn| insn & 0xffff_fc1f == 0xd63f_0000)
    }

    /// `LDR Xt` in its immediate (unsigned offset, pre- and post-indexed), unscaled,
    /// register-offset and literal forms; a writeback into the register itself is
    /// unpredictable, so not taken.
    fn loads_register(&self, _mode: Mode, bytes: &[u8], reg: u8) -> bool {
        let Some(insn) = word(bytes) else {
            return false;
        };
        let rt = (insn & 31) as u8;
        let rn = ((insn >> 5) & 31) as u8;
        if rt != reg || reg == 31 {
            return false;
        }
        insn & 0xffc0_0000 == 0xf940_0000 // LDR Xt, [Xn, #uimm]
            || insn & 0xffe0_0c00 == 0xf840_0000 // LDUR Xt, [Xn, #simm]
            || insn & 0xffe0_0c00 == 0xf860_0800 // LDR Xt, [Xn, Xm{, extend}]
            || insn & 0xff00_0000 == 0x5800_0000 // LDR Xt, label
            // LDR Xt, [Xn, #simm]! and LDR Xt, [Xn], #simm
            || (insn & 0xffe0_0400 == 0xf840_0400 && rn != rt)
    }

    /// Integer data processing on registers, each form only where it is allocated (an
    /// undefined encoding raises an exception), and `NOP`; each writes at most Rd (bits 4:0).
    fn inert_for(&self, _mode: Mode, bytes: &[u8], reg: u8) -> bool {
        let Some(insn) = word(bytes) else {
            return false;
        };
        if insn == 0xd503_201f {
            return true; // NOP
        }
        (insn & 31) as u8 != reg && integer_data_processing(insn)
    }

    /// Besides the inert ones: loads and stores of one register or a pair (general or
    /// SIMD&FP, immediate, unscaled, register-offset, literal, with or without writeback)
    /// that write neither `reg` nor, on writeback, their base into it.
    fn spares(&self, mode: Mode, bytes: &[u8], reg: u8) -> bool {
        if self.inert_for(mode, bytes, reg) {
            return true;
        }
        word(bytes)
            .and_then(load_store_writes)
            .is_some_and(|written| !written.contains(&Some(reg)))
    }
}

/// The general registers a load or store of the common forms may write (a load's Rt, and
/// Rt2 of a pair, where they are general registers; the base on writeback), or `None` for
/// any other instruction.
fn load_store_writes(insn: u32) -> Option<[Option<u8>; 3]> {
    let rt = Some((insn & 31) as u8);
    let rt2 = Some(((insn >> 10) & 31) as u8);
    let rn = Some(((insn >> 5) & 31) as u8);
    // A load into a general register (V clear); single registers store with opc 00
    // (bits 23:22), pairs with L (bit 22) clear.
    let general = insn & 0x0400_0000 == 0;
    let pair = insn & 0x3a00_0000 == 0x2800_0000;
    let store = if pair {
        (insn >> 22) & 1 == 0
    } else {
        (insn >> 22) & 3 == 0 && insn & 0x3b00_0000 != 0x1800_0000
    };
    let gpr = |r: Option<u8>| r.filter(|_| general && !store);
    if insn & 0x3b00_0000 == 0x3900_0000 || insn & 0x3b00_0000 == 0x1800_0000 {
        // Unsigned offset; literal.
        return Some([gpr(rt), None, None]);
    }
    if insn & 0x3b20_0000 == 0x3800_0000 {
        // Unscaled, post-indexed (01), unprivileged, pre-indexed (11).
        let writeback = (insn >> 10) & 1 == 1;
        return Some([gpr(rt), None, rn.filter(|_| writeback)]);
    }
    if insn & 0x3b20_0c00 == 0x3820_0800 {
        return Some([gpr(rt), None, None]); // register offset
    }
    if pair {
        // Pairs: no-allocate (00), post-indexed (01), offset (10), pre-indexed (11).
        let writeback = (insn >> 23) & 1 == 1;
        return Some([gpr(rt), gpr(rt2), rn.filter(|_| writeback)]);
    }
    None
}

/// Whether `insn` is an allocated integer data-processing instruction of the base ISA:
/// ADR/ADRP, add/sub (immediate, shifted and extended register, with carry), logical
/// (immediate and shifted register), move wide, bitfield, conditional compare and select,
/// the variable shifts and divides, multiply-add. None of them can raise an exception.
fn integer_data_processing(insn: u32) -> bool {
    let sf = insn >> 31 != 0;
    let bits = |hi: u32, lo: u32| (insn >> lo) & ((1 << (hi - lo + 1)) - 1);
    match bits(28, 23) {
        0b10_0000 | 0b10_0001 => return true, // ADR, ADRP
        0b10_0010 => return true,             // ADD/SUB (immediate)
        // Logical (immediate): N set only in 64-bit forms.
        0b10_0100 => return sf || bits(22, 22) == 0,
        // Move wide: MOVN, MOVZ, MOVK; hw 2-3 only in 64-bit forms.
        0b10_0101 => return bits(30, 29) != 1 && (sf || bits(22, 21) < 2),
        // Bitfield: SBFM, BFM, UBFM with N equal to sf.
        0b10_0110 => return bits(30, 29) != 3 && bits(22, 22) == sf as u32,
        _ => {}
    }
    // 32-bit register forms with a shift or immediate of 32 or more are unallocated.
    let narrow_shift_ok = sf || bits(15, 15) == 0;
    match (bits(28, 24), bits(21, 21)) {
        (0b0_1010, _) => narrow_shift_ok, // logical (shifted register)
        // Add/sub (shifted register): shift type 3 is reserved.
        (0b0_1011, 0) => bits(23, 22) != 3 && narrow_shift_ok,
        // Add/sub (extended register): opt 0, shift 0-4.
        (0b0_1011, 1) => bits(23, 22) == 0 && bits(12, 10) <= 4,
        _ => match bits(28, 21) {
            0b1101_0000 => bits(15, 10) == 0, // ADC, ADCS, SBC, SBCS
            0b1101_0010 => bits(29, 29) == 1 && bits(10, 10) == 0 && bits(4, 4) == 0, // CCMN, CCMP
            0b1101_0100 => bits(29, 29) == 0 && bits(11, 11) == 0, // CSEL, CSINC, CSINV, CSNEG
            // Two-source (bit 30 clear): UDIV, SDIV, LSLV, LSRV, ASRV, RORV.
            0b1101_0110 => bits(30, 29) == 0 && matches!(bits(15, 10), 2 | 3 | 8..=11),
            // Three-source: MADD, MSUB; SMADDL, SMSUBL, UMADDL, UMSUBL (64-bit only).
            0b1101_1000 => bits(30, 29) == 0,
            0b1101_1001 | 0b1101_1101 => bits(30, 29) == 0 && sf,
            _ => false,
        },
    }
}

/// The instruction word at the start of `bytes`.
fn word(bytes: &[u8]) -> Option<u32> {
    let b = bytes.get(..4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    /// A call's target is taken from the load that put it in its register when nothing
    /// between them may write the register: directly when nothing between may fault
    /// (register arithmetic), through the call's own callback when loads and stores of
    /// other registers lie between; never across anything else, a load of another width or
    /// of a pair, or for an authenticating call.
    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn calls_take_their_target_from_the_load_that_feeds_them() {
        use crate::arch::test_asm::{assemble, feeding_load_of, AARCH64};
        use crate::arch::Feed;
        let fed =
            |lines: &[&str]| feeding_load_of(&Aarch64, &assemble(&AARCH64, 0x40_0000, "", lines));
        let feed = |direct| Some(Feed { load: 0, direct });
        for load in [
            "ldr x16, [x0, #8]",
            "ldr x16, [x16, #8]",
            "ldur x16, [x0, #-8]",
            "ldr x16, [x0, x1, lsl #3]",
            "ldr x16, [x0, #16]!",
            "ldr x16, [x0], #16",
            "ldr x16, _start",
        ] {
            assert_eq!(fed(&[load, "blr x16"]), feed(true), "{load}");
        }
        let mut lines = vec!["ldr x16, [x0, #8]"];
        lines.extend([
            "mov x0, x19",
            "add x1, x1, #4",
            "adrp x2, _start",
            "movk x3, #1, lsl #16",
            "ubfx x4, x5, #3, #7",
            "and x6, x7, #0xff",
            "orr x8, x9, x10, lsl #2",
            "sub x11, x12, w13, uxtw",
            "adc x14, x15, x1",
            "ccmp x1, #3, #0, ne",
            "csel x2, x3, x4, eq",
            "udiv x5, x6, x7",
            "madd x8, x9, x10, x11",
            "umaddl x12, w13, w14, x15",
            "nop",
            "blr x16",
        ]);
        assert_eq!(fed(&lines), feed(true));
        // Loads and stores of other registers may fault: the value waits for the call.
        for between in [
            "ldr x1, [x2]",
            "ldr w1, [x2, #4]!",
            "ldrb w1, [x2], #1",
            "ldur x1, [x2, #-8]",
            "ldr x1, [x2, x3]",
            "ldp x1, x2, [sp, #16]",
            "ldp x1, x2, [sp], #16",
            "str x1, [x2]",
            "stp x1, x2, [sp, #-16]!",
            "ldr d0, [x16]",
            "ldp q0, q1, [x2]",
            "str x16, [sp, #8]",
        ] {
            let lines = ["ldr x16, [x0, #8]", "mov x0, x1", between, "blr x16"];
            assert_eq!(fed(&lines), feed(false), "{between}");
        }
        for (lines, why) in [
            (
                &["ldr x16, [x0]", "mov x16, x1", "blr x16"][..],
                "rewritten",
            ),
            (
                &["ldr x16, [x0]", "add x16, x16, #1", "blr x16"],
                "adjusted",
            ),
            (
                &["ldr x16, [x0]", "ldr w16, [x2]", "blr x16"],
                "loaded again",
            ),
            (
                &["ldr x16, [x0]", "ldp x1, x16, [x2]", "blr x16"],
                "loaded again, paired",
            ),
            (
                &["ldr x16, [x0]", "ldr x1, [x16], #8", "blr x16"],
                "its base written back",
            ),
            (
                &["ldr x16, [x0]", "ldadd x1, x2, [x3]", "blr x16"],
                "an atomic between",
            ),
            (
                &["ldr x16, [x0]", "svc #0", "blr x16"],
                "a system call between",
            ),
            (
                &["ldr x16, [x0]", "fmov d0, x1", "blr x16"],
                "floating point between",
            ),
            (
                &["ldr x16, [x0]", "autia x1, sp", "blr x16"],
                "authentication between",
            ),
            (&["ldr w16, [x0]", "blr x16"], "a 32-bit load"),
            (&["ldp x16, x17, [x0]", "blr x16"], "a pair"),
            (
                &["ldr x16, [x16], #8", "blr x16"],
                "a writeback into the register",
            ),
            (&["ldr x16, [x0]", "blraaz x16"], "an authenticating call"),
            (&["mov x0, x1", "blr x16"], "no load in the block"),
        ] {
            assert_eq!(fed(lines), None, "{why}: {lines:?}");
        }
    }

    #[test]
    fn indirect_jumps_are_br_and_its_authenticated_forms() {
        let j = |w: u32| Aarch64.indirect_jump(Mode::Bits64, &w.to_le_bytes());
        assert!(j(0xd61f_0200)); // br x16
        assert!(j(0xd61f_0a3f)); // braaz x17
        assert!(j(0xd71f_0a30)); // braa x17, x16
        assert!(!j(0xd65f_03c0)); // ret
        assert!(!j(0xd63f_0200)); // blr x16
        assert!(!j(0x1400_0002)); // b
    }

    #[test]
    fn direct_jumps_are_b_only() {
        let at = |w: u32| Aarch64.direct_jump(Mode::Bits64, 0x1000, &w.to_le_bytes());
        assert_eq!(at(0x1400_0002), Some(0x1008)); // b .+8
        assert_eq!(at(0x17ff_ffff), Some(0xffc)); // b .-4
        assert_eq!(at(0x9400_0002), None); // bl
        assert_eq!(at(0x5400_0040), None); // b.eq: conditional
    }

    use super::*;

    fn k(pc: u64, insn: u32) -> InsnKind {
        Aarch64::classify_word(pc, insn)
    }

    #[test]
    fn bl_forward_and_backward() {
        // bl +0x100 at 0x40080000
        assert_eq!(
            k(0x4008_0000, 0x9400_0040),
            InsnKind::Call {
                target: Target::Direct(0x4008_0100),
                ret_addr: 0x4008_0004
            }
        );
        // bl -4
        assert_eq!(
            k(0x1000, 0x97ff_ffff),
            InsnKind::Call {
                target: Target::Direct(0xffc),
                ret_addr: 0x1004
            }
        );
        // kernel addresses wrap correctly
        assert_eq!(
            k(0xffff_8000_0800_0000, 0x97ff_ffff),
            InsnKind::Call {
                target: Target::Direct(0xffff_8000_07ff_fffc),
                ret_addr: 0xffff_8000_0800_0004
            }
        );
    }

    #[test]
    fn indirect_calls() {
        let call = |rn| InsnKind::Call {
            target: Target::Register(rn),
            ret_addr: 4,
        };
        assert_eq!(k(0, 0xd63f_0100), call(8)); // blr x8
        assert_eq!(k(0, 0xd63f_0a1f), call(16)); // blraaz x16
        assert_eq!(k(0, 0xd63f_0e1f), call(16)); // blrabz x16
        assert_eq!(k(0, 0xd73f_0a11), call(16)); // blraa x16, x17
        assert_eq!(k(0, 0xd73f_0e11), call(16)); // blrab x16, x17
    }

    #[test]
    fn the_call_before_a_return_address() {
        let bl = 0x9400_0040u32.to_le_bytes(); // bl +0x100, at 0x1000
        let blr = 0xd63f_0100u32.to_le_bytes(); // blr x8
        let nop = 0xd503_201fu32.to_le_bytes();
        let at = |pc, before: &[u8]| Aarch64.call_ending_at(Mode::Bits64, pc, before);
        assert_eq!(
            at(0x1004, &bl),
            Some(CallSite {
                pc: 0x1000,
                target: Some(0x1100)
            })
        );
        assert_eq!(
            at(0x1004, &[nop, blr].concat()),
            Some(CallSite {
                pc: 0x1000,
                target: None
            })
        );
        assert_eq!(at(0x1004, &[bl, nop].concat()), None); // only the word before counts
        assert_eq!(at(0x1004, &bl[1..]), None); // too few bytes
        assert_eq!(at(2, &bl), None); // no room for a call before address 2
    }

    #[test]
    fn returns() {
        assert_eq!(k(0, 0xd65f_03c0), InsnKind::Return); // ret
        assert_eq!(k(0, 0xd65f_0020), InsnKind::Return); // ret x1
        assert_eq!(k(0, 0xd65f_0bff), InsnKind::Return); // retaa
        assert_eq!(k(0, 0xd65f_0fff), InsnKind::Return); // retab
        assert_eq!(k(0, 0xd61f_03c0), InsnKind::Return); // br x30 (glibc's longjmp)
    }

    #[test]
    fn signed_return_addresses_are_stripped() {
        assert_eq!(
            Aarch64.strip_authentication(0x003a_0000_4008_0104),
            0x4008_0104
        );
        assert_eq!(
            Aarch64.strip_authentication(0xff85_8000_0801_0204),
            0xffff_8000_0801_0204
        );
    }

    #[test]
    fn exception_levels_and_link_registers() {
        assert_eq!(Aarch64.exception_level(0x3c5), Level(1)); // EL1h, DAIF masked
        assert_eq!(Aarch64.exception_level(0x3c9), Level(2)); // EL2h
        assert_eq!(Aarch64.exception_link_register(Level(2)), Some("ELR_EL2"));
        assert_eq!(Aarch64.exception_link_register(Level(0)), None);
    }

    /// Linux's `vectors`: `el1h_64_irq` at VBAR_EL1 + 0x280, `el0t_64_sync` at + 0x400.
    #[test]
    fn same_level_vectors() {
        assert_eq!(Aarch64.vector_base_register(Level(1)), ["VBAR_EL1", "VBAR"]);
        assert!(Aarch64.vector_base_register(Level(0)).is_empty());
        let at = |offset| Aarch64.same_level_vector(offset);
        assert_eq!(at(0x200), Some(Discontinuity::Exception));
        assert_eq!(at(0x280), Some(Discontinuity::Interrupt));
        assert_eq!(at(0x300), Some(Discontinuity::Interrupt));
        assert_eq!(at(0x380), Some(Discontinuity::Exception));
        assert_eq!(at(0x080), Some(Discontinuity::Interrupt));
        // Inside a vector, and a lower level's.
        assert_eq!(at(0x284), None);
        assert_eq!(at(0x400), None);
        assert_eq!(at(0x680), None);
    }

    #[test]
    fn task_pointer_writes() {
        assert_eq!(k(0, 0xd518_4101), InsnKind::SetTaskPointer { src: 1 }); // msr sp_el0, x1
        assert_eq!(k(0, 0xd518_4117), InsnKind::SetTaskPointer { src: 23 }); // msr sp_el0, x23
        assert_eq!(k(0, 0xd538_4101), InsnKind::Other); // mrs x1, sp_el0
        assert!(Aarch64.is_task_pointer(0xffff_0000_c0ab_8000));
        assert!(!Aarch64.is_task_pointer(0x0000_ffff_f7ff_e000));
    }

    #[test]
    fn exception_kinds_from_the_syndrome() {
        let kind = |ec: u64| Aarch64.exception_kind(Discontinuity::Exception, Some(ec << 26));
        assert_eq!(kind(0x15), ExceptionKind::Svc);
        assert_eq!(kind(0x24), ExceptionKind::DataAbort);
        assert_eq!(kind(0x21), ExceptionKind::InsnAbort);
        assert_eq!(kind(0x3c), ExceptionKind::Brk);
        assert_eq!(kind(0x07), ExceptionKind::Other);
        assert_eq!(
            Aarch64.exception_kind(Discontinuity::Interrupt, None),
            ExceptionKind::Irq
        );
    }

    #[test]
    fn levels_returned_to() {
        // ERET from EL3 to EL1h with SCR_EL3.NS clear: Secure EL1.
        assert_eq!(
            Aarch64.return_level(Level(3), 0x3c5, Some(0)),
            Level(1 | SECURE)
        );
        assert_eq!(Aarch64.return_level(Level(3), 0x3c5, Some(1)), Level(1));
        // Secure EL1 to Secure EL0 stays Secure.
        assert_eq!(
            Aarch64.return_level(Level(1 | SECURE), 0, None),
            Level(SECURE)
        );
        assert_eq!(Aarch64.level_name(Level(1 | SECURE)), "S-EL1");
        assert_eq!(Aarch64.level_name(Level(3)), "EL3");
    }

    #[test]
    fn exceptions_and_others() {
        assert_eq!(k(0, 0xd69f_03e0), InsnKind::ExceptionReturn); // eret
        assert_eq!(k(0, 0xd400_0001), InsnKind::Trap); // svc #0
        assert_eq!(k(0, 0xd400_0002), InsnKind::Trap); // hvc #0
        assert_eq!(k(0, 0xd400_0003), InsnKind::Trap); // smc #0
        assert_eq!(k(0, 0xd61f_0200), InsnKind::Other); // br x16 (a jump, not a call)
        assert_eq!(k(0, 0x1400_0010), InsnKind::Other); // b
        assert_eq!(k(0, 0xd503_201f), InsnKind::Other); // nop
        assert_eq!(k(0, 0xd420_0000), InsnKind::Other); // brk #0
    }
}
