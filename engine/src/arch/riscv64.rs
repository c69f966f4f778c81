//! RISC-V call/return classification from instruction bytes (RV64GC; RV32's C.JAL too).
//!
//! Calls and returns are JAL/JALR as the ISA's return-address-stack hints define them
//! (unprivileged spec, "JALR": x1 `ra` and x5 `t0` are link registers): a JAL or JALR that
//! writes a link register is a call (pushes); a JALR that jumps through a link register
//! without writing one is a return (pops: `ret` is `jalr x0, 0(ra)`), whatever its offset. A JALR that writes one link register
//! and jumps through the other (pop, then push: a coroutine swap) is taken as a call.
//! Compressed: C.JALR (call through rs1, links ra), C.JR ra / C.JR t0 (return), C.JAL
//! (RV32 only; RV64 has C.ADDIW there). Zcmp's `cm.popret` and Zcmt's `cm.jalt` share
//! encodings with C.FSDSP and C.FLDSP of RV64GC, so they are not decoded.
//!
//! Registers are x0..x31, named as QEMU's gdb stub names them (`riscv-64bit-cpu.xml`: ABI
//! names, with x8 as `fp`); the privilege level is QEMU's virtual `priv` register (system
//! mode: 0 U, 1 S, 3 M, plus 4 when virtualisation is on).

use super::{
    call_of_len, CallSite, Discontinuity, ExceptionKind, FrameSlots, InsnKind, Isa, Level,
    LinkSlot, LinuxUser, Mode, Target, GENERIC_LINUX_USER,
};

pub struct Riscv64;

const RA: u8 = 1;
const TP: u8 = 4;
const T0: u8 = 5;
const FP: u8 = 8;

const NAMES: [&str; 32] = [
    "zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "fp", "s1", "a0", "a1", "a2", "a3", "a4",
    "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
    "t5", "t6",
];

/// Level bit for virtualisation (VS, VU), as QEMU's `priv` register has it.
const VIRT: u8 = 4;
const PRV_U: u8 = 0;
const PRV_S: u8 = 1;
const PRV_M: u8 = 3;

fn is_link(r: u8) -> bool {
    r == RA || r == T0
}

fn sign_extend(value: u32, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((value as i64) << shift) >> shift
}

fn call(pc: u64, len: u64, target: Target) -> InsnKind {
    InsnKind::Call {
        target,
        ret_addr: pc.wrapping_add(len),
    }
}

/// The target of a JALR-style call through `rs1` plus `offset`.
fn through(rs1: u8, offset: i64) -> Target {
    if offset == 0 {
        Target::Register(rs1)
    } else {
        Target::RegisterOffset { reg: rs1, offset }
    }
}

impl Riscv64 {
    /// Whether the 16-bit parcel `low` starts a compressed (2-byte) instruction.
    pub fn is_compressed(low: u16) -> bool {
        low & 3 != 3
    }

    /// A 32-bit instruction.
    pub fn classify_word(pc: u64, insn: u32) -> InsnKind {
        let rd = ((insn >> 7) & 31) as u8;
        let rs1 = ((insn >> 15) & 31) as u8;
        match insn & 0x7f {
            // JAL
            0x6f if is_link(rd) => {
                let imm = (insn >> 31) << 20
                    | ((insn >> 21) & 0x3ff) << 1
                    | ((insn >> 20) & 1) << 11
                    | ((insn >> 12) & 0xff) << 12;
                let target = pc.wrapping_add(sign_extend(imm, 21) as u64);
                call(pc, 4, Target::Direct(target))
            }
            // JALR
            0x67 if (insn >> 12) & 7 == 0 => {
                let offset = sign_extend(insn >> 20, 12);
                if is_link(rd) {
                    call(pc, 4, through(rs1, offset))
                } else if is_link(rs1) {
                    InsnKind::Return
                } else {
                    InsnKind::Other
                }
            }
            // ADDI tp, rs1, 0 (`mv tp, rs1`): Linux's __switch_to installs the next task
            // (`move tp, a1`); S-mode Linux keeps `current` in tp.
            0x13 if rd == TP
                && (insn >> 12) & 7 == 0
                && insn >> 20 == 0
                && rs1 != 0
                && rs1 != TP =>
            {
                InsnKind::SetTaskPointer { src: rs1 }
            }
            // SYSTEM
            0x73 => match insn {
                0x0000_0073 | 0x0010_0073 => InsnKind::Trap, // ECALL, EBREAK
                // SRET, MRET, MNRET (Smrnmi)
                0x1020_0073 | 0x3020_0073 | 0x7020_0073 => InsnKind::ExceptionReturn,
                _ => InsnKind::Other,
            },
            _ => InsnKind::Other,
        }
    }

    /// A 16-bit (compressed) instruction in code of width `mode`.
    pub fn classify_half(mode: Mode, pc: u64, insn: u16) -> InsnKind {
        let insn = insn as u32;
        let funct3 = insn >> 13;
        match insn & 3 {
            // C.JAL: jal ra, offset (RV32 only; C.ADDIW on RV64).
            1 if funct3 == 1 && mode == Mode::Bits32 => {
                let b = |from: u32, to: u32| ((insn >> from) & 1) << to;
                let imm = b(12, 11)
                    | b(11, 4)
                    | ((insn >> 9) & 3) << 8
                    | b(8, 10)
                    | b(7, 6)
                    | b(6, 7)
                    | ((insn >> 3) & 7) << 1
                    | b(2, 5);
                let target = pc.wrapping_add(sign_extend(imm, 12) as u64);
                call(pc, 2, Target::Direct(target))
            }
            2 if funct3 == 4 => {
                let rs1 = ((insn >> 7) & 31) as u8;
                let rs2 = (insn >> 2) & 31;
                let link = (insn >> 12) & 1 != 0;
                match (link, rs1, rs2) {
                    // C.EBREAK
                    (true, 0, 0) => InsnKind::Trap,
                    // C.JALR: jalr ra, 0(rs1)
                    (true, _, 0) => call(pc, 2, Target::Register(rs1)),
                    // C.JR: jalr x0, 0(rs1)
                    (false, r, 0) if is_link(r) => InsnKind::Return,
                    // C.MV tp, rs2: as ADDI tp, rs2, 0.
                    (false, r, src) if r == TP && src != 0 => {
                        InsnKind::SetTaskPointer { src: src as u8 }
                    }
                    // C.JR to other registers, C.MV, C.ADD.
                    _ => InsnKind::Other,
                }
            }
            _ => InsnKind::Other,
        }
    }
}

impl Isa for Riscv64 {
    /// 2 bytes when the low two bits of the first parcel are not `11`, else 4 (longer
    /// encodings are reserved and QEMU has none).
    /// AUIPC rd, imm: rd = pc + sign-extended `imm << 12` (the high part of the far `call`,
    /// which kernels built without linker relaxation use for every call).
    fn register_set_by(&self, prev_pc: u64, prev: &[u8], reg: u8) -> Option<u64> {
        let insn = u32::from_le_bytes(prev.try_into().ok()?);
        let rd = ((insn >> 7) & 31) as u8;
        (insn & 0x7f == 0x17 && rd == reg && rd != 0)
            .then(|| prev_pc.wrapping_add_signed(i64::from((insn & 0xffff_f000) as i32)))
    }

    /// JAL zero (`j`), and C.J.
    fn direct_jump(&self, _mode: Mode, pc: u64, bytes: &[u8]) -> Option<u64> {
        let low = u16::from_le_bytes([*bytes.first()?, *bytes.get(1)?]);
        if Self::is_compressed(low) {
            let insn = low as u32;
            // C.J: funct3 101, quadrant 1 (the offset as C.JAL's).
            if insn & 0xe003 != 0xa001 {
                return None;
            }
            let b = |from: u32, to: u32| ((insn >> from) & 1) << to;
            let imm = b(12, 11)
                | b(11, 4)
                | ((insn >> 9) & 3) << 8
                | b(8, 10)
                | b(7, 6)
                | b(6, 7)
                | ((insn >> 3) & 7) << 1
                | b(2, 5);
            return Some(pc.wrapping_add(sign_extend(imm, 12) as u64));
        }
        let insn = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
        if insn & 0xfff != 0x06f {
            return None;
        }
        let imm = (insn >> 31) << 20
            | ((insn >> 21) & 0x3ff) << 1
            | ((insn >> 20) & 1) << 11
            | ((insn >> 12) & 0xff) << 12;
        Some(pc.wrapping_add(sign_extend(imm, 21) as u64))
    }

    /// JALR zero, imm(rs1) from a register that holds no return address (`jr t1` after
    /// `auipc t1`: the far tail call). Returns (`jr ra`) and C.JR are left out: C.JR has no
    /// offset and follows no `auipc` of its own register in practice.
    /// `JALR x0` and `C.JR` through a register that is no link register (those return).
    fn indirect_jump(&self, _mode: Mode, bytes: &[u8]) -> bool {
        let Some(low) = bytes.get(..2).map(|b| u16::from_le_bytes([b[0], b[1]])) else {
            return false;
        };
        if Self::is_compressed(low) {
            let rs1 = ((low >> 7) & 31) as u8;
            return low & 0xf07f == 0x8002 && rs1 != 0 && !is_link(rs1);
        }
        let Some(insn) = bytes
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        else {
            return false;
        };
        let (rd, rs1) = ((insn >> 7) & 31, ((insn >> 15) & 31) as u8);
        insn & 0x707f == 0x67 && rd == 0 && !is_link(rs1)
    }

    fn register_offset_jump(&self, _mode: Mode, bytes: &[u8]) -> Option<(u8, i64)> {
        let insn = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
        let rd = (insn >> 7) & 31;
        let rs1 = ((insn >> 15) & 31) as u8;
        (insn & 0x7f == 0x67 && (insn >> 12) & 7 == 0 && rd == 0 && !is_link(rs1) && rs1 != 0)
            .then(|| (rs1, sign_extend(insn >> 20, 12)))
    }

    fn classify(&self, mode: Mode, pc: u64, bytes: &[u8]) -> InsnKind {
        let Some(low) = bytes.get(..2).map(|b| u16::from_le_bytes([b[0], b[1]])) else {
            return InsnKind::Other;
        };
        if Self::is_compressed(low) {
            return Self::classify_half(mode, pc, low);
        }
        match bytes.get(..4) {
            Some(b) => Self::classify_word(pc, u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            None => InsnKind::Other,
        }
    }

    fn fetch_len(&self) -> usize {
        4
    }

    fn call_lookbehind(&self) -> usize {
        4
    }

    /// A 4-byte call (JAL, JALR), else a 2-byte one (C.JALR, C.JAL). The two can read the
    /// same bytes when a 4-byte instruction's upper half encodes C.JALR (or a compressed
    /// call follows a parcel that looks like the low half of a JAL or JALR); the 4-byte
    /// reading wins. Either way a call returns to `pc`, so landings are right; only the
    /// site found may be the wrong one.
    fn call_ending_at(&self, mode: Mode, pc: u64, before: &[u8]) -> Option<CallSite> {
        call_of_len(self, mode, pc, before, 4).or_else(|| call_of_len(self, mode, pc, before, 2))
    }

    fn gpr_name(&self, n: u8) -> String {
        NAMES.get(n as usize).unwrap_or(&"").to_string()
    }

    /// s0, which QEMU names `fp`.
    fn frame_pointer(&self) -> u8 {
        FP
    }

    /// The standard frame record sits just below the frame pointer (which points at the
    /// caller's stack pointer): `[fp - 8]` = ra, `[fp - 16]` = the caller's fp. GCC's leaf
    /// functions save only fp, at `[fp - 8]`: their "return address" is then a stack
    /// address, which no call precedes, and the chain stops there.
    fn frame_slots(&self, fp: u64) -> FrameSlots {
        FrameSlots {
            caller_fp: fp.wrapping_sub(16),
            ret_addr: fp.wrapping_sub(8),
        }
    }

    /// QEMU's virtual register: the privilege level, with bit 2 for virtualisation.
    fn status_register(&self) -> &'static str {
        "priv"
    }

    fn exception_level(&self, status: u64) -> Level {
        Level((status & 7) as u8)
    }

    fn exception_link_register(&self, level: Level) -> Option<&'static str> {
        match level.0 & 3 {
            PRV_M => Some("mepc"),
            PRV_S => Some("sepc"),
            _ => None,
        }
    }

    fn saved_status_register(&self, level: Level) -> Option<&'static str> {
        match level.0 & 3 {
            PRV_M => Some("mstatus"),
            PRV_S => Some("sstatus"),
            _ => None,
        }
    }

    fn syndrome_register(&self, level: Level) -> Option<&'static str> {
        match level.0 & 3 {
            PRV_M => Some("mcause"),
            PRV_S => Some("scause"),
            _ => None,
        }
    }

    /// From the cause register: its top bit marks interrupts, the rest is the exception
    /// code. An environment call from U-mode is a system call; from S-mode a call to the
    /// M-mode firmware (SBI), shown as an SMC; from VS-mode a hypervisor call.
    fn exception_kind(&self, what: Discontinuity, syndrome: Option<u64>) -> ExceptionKind {
        match what {
            Discontinuity::Interrupt => ExceptionKind::Irq,
            Discontinuity::HostCall => ExceptionKind::Other,
            Discontinuity::Exception => match syndrome {
                Some(cause) if cause >> 63 != 0 => ExceptionKind::Irq,
                Some(8) => ExceptionKind::Svc,
                Some(9 | 11) => ExceptionKind::Smc,
                Some(10) => ExceptionKind::Hvc,
                Some(3) => ExceptionKind::Brk,
                // Instruction access fault, page fault, guest-page fault.
                Some(1 | 12 | 20) => ExceptionKind::InsnAbort,
                // Load/store misaligned, access fault, page fault, guest-page fault.
                Some(4..=7 | 13 | 15 | 21 | 23) => ExceptionKind::DataAbort,
                _ => ExceptionKind::Other,
            },
        }
    }

    /// QEMU reports an exception at the instruction that took it (mepc/sepc): an
    /// environment call's handler returns past the ECALL, as every SBI and syscall handler
    /// does.
    fn exception_resume_pc(&self, what: Discontinuity, syndrome: Option<u64>, from_pc: u64) -> u64 {
        match (what, syndrome) {
            (Discontinuity::Exception, Some(8..=11)) => from_pc.wrapping_add(4),
            _ => from_pc,
        }
    }

    /// M above S above U; a virtualised level below its host's (HS above VS above VU). M-mode
    /// firmware (OpenSBI) starts the kernel with an `mret` to S-mode from
    /// `sbi_hart_switch_mode`; M-mode runs again only through traps.
    fn drops_privilege(&self, from: Level, to: Level) -> bool {
        let rank = |l: Level| (l.0 & 3, l.0 & VIRT == 0);
        rank(to) < rank(from)
    }

    /// MRET goes to mstatus.MPP (with MPV, bit 39, for a virtualised level below M); SRET to
    /// sstatus.SPP (U or S), virtualised when returning from VS. From HS, whether SRET
    /// enters a guest (hstatus.SPV) is not read: the level returned to is taken as not
    /// virtualised.
    fn return_level(&self, from: Level, saved: u64, _security: Option<u64>) -> Level {
        if from.0 & 3 == PRV_M {
            let mpp = ((saved >> 11) & 3) as u8;
            let mpv = mpp != PRV_M && (saved >> 39) & 1 != 0;
            Level(mpp | if mpv { VIRT } else { 0 })
        } else {
            let spp = ((saved >> 8) & 1) as u8;
            Level(spp | (from.0 & VIRT))
        }
    }

    /// The generic syscall table; programs are `EM_RISCV`; a delivered handler starts with the
    /// trampoline in ra and the signal number in a0.
    fn linux_user(&self) -> LinuxUser {
        LinuxUser {
            link: LinkSlot::Register("ra"),
            first_argument: "a0",
            ..GENERIC_LINUX_USER
        }
    }

    /// S-mode Linux keeps `current` in tp (user code keeps its TLS pointer there, which the
    /// kernel swaps through sscratch at every trap).
    fn task_pointer_register(&self) -> Option<&'static str> {
        Some("tp")
    }

    /// A task_struct lives in the kernel's half of the address space (Sv39, Sv48, Sv57: the
    /// top bit set); a user TLS pointer does not.
    fn is_task_pointer(&self, value: u64) -> bool {
        value >> 63 != 0
    }

    fn level_name(&self, level: Level) -> String {
        let virt = if level.0 & VIRT != 0 { "V" } else { "" };
        match level.0 & 3 {
            PRV_U => format!("{virt}U"),
            PRV_S => format!("{virt}S"),
            PRV_M => "M".to_string(),
            n => format!("priv{n}"),
        }
    }

    /// `JALR` and `C.JALR` with offset 0, which [`Isa::classify`] gives as calls through a
    /// register (their target's low bit, cleared by the jump, is never set in a function's
    /// address).
    fn plain_register_call(&self, mode: Mode, bytes: &[u8]) -> bool {
        matches!(
            self.classify(mode, 0, bytes),
            InsnKind::Call {
                target: Target::Register(_),
                ..
            }
        )
    }

    /// `LD`, `C.LD`, `C.LDSP` (RV64).
    fn loads_register(&self, mode: Mode, bytes: &[u8], reg: u8) -> bool {
        if mode != Mode::Bits64 || reg == 0 {
            return false;
        }
        match parcel(bytes) {
            Some(Parcel::Word(insn)) => insn & 0x707f == 0x3003 && (insn >> 7) & 31 == reg as u32,
            Some(Parcel::Half(insn)) => match (insn & 3, insn >> 13) {
                (0, 3) => ((insn >> 2) & 7) + 8 == reg as u32, // C.LD
                (2, 3) => (insn >> 7) & 31 == reg as u32,      // C.LDSP
                _ => false,
            },
            None => false,
        }
    }

    /// The base integer ISA's and the M extension's register arithmetic (OP-IMM, OP, their
    /// 32-bit forms, LUI, AUIPC) and their compressed forms, only where allocated (a
    /// reserved encoding raises an exception); writing, at most, the destination register.
    fn inert_for(&self, mode: Mode, bytes: &[u8], reg: u8) -> bool {
        if mode != Mode::Bits64 {
            return false;
        }
        let reg = reg as u32;
        match parcel(bytes) {
            Some(Parcel::Word(insn)) => (insn >> 7) & 31 != reg && integer_word(insn),
            Some(Parcel::Half(insn)) => integer_half(insn).is_some_and(|rd| rd != reg),
            None => false,
        }
    }

    /// Besides the inert ones: integer and floating-point loads and stores (and their
    /// compressed forms) that do not load into `reg`.
    fn spares(&self, mode: Mode, bytes: &[u8], reg: u8) -> bool {
        if self.inert_for(mode, bytes, reg) {
            return true;
        }
        if mode != Mode::Bits64 {
            return false;
        }
        let reg = reg as u32;
        match parcel(bytes) {
            Some(Parcel::Word(insn)) => match insn & 0x7f {
                0x03 => (insn >> 7) & 31 != reg, // LB … LD, LBU, LHU, LWU
                0x23 | 0x07 | 0x27 => true,      // stores; FP loads and stores
                _ => false,
            },
            Some(Parcel::Half(insn)) => match (insn & 3, insn >> 13) {
                // C.LW, C.LD (rd' in bits 4:2)
                (0, 2 | 3) => ((insn >> 2) & 7) + 8 != reg,
                // C.LWSP, C.LDSP
                (2, 2 | 3) => (insn >> 7) & 31 != reg,
                // C.FLD, C.FSD, C.SW, C.SD; C.FLDSP, C.FSDSP, C.SWSP, C.SDSP
                (0 | 2, 1 | 5..=7) => true,
                _ => false,
            },
            None => false,
        }
    }
}

/// An instruction as its length says: a 32-bit word or a compressed 16-bit parcel.
enum Parcel {
    Word(u32),
    Half(u32),
}

fn parcel(bytes: &[u8]) -> Option<Parcel> {
    let low = u16::from_le_bytes([*bytes.first()?, *bytes.get(1)?]);
    if Riscv64::is_compressed(low) {
        return Some(Parcel::Half(low as u32));
    }
    let high = u16::from_le_bytes([*bytes.get(2)?, *bytes.get(3)?]);
    Some(Parcel::Word((high as u32) << 16 | low as u32))
}

/// An allocated RV64IM register-arithmetic word (see [`Riscv64::inert_for`]).
fn integer_word(insn: u32) -> bool {
    let funct3 = (insn >> 12) & 7;
    let funct7 = insn >> 25;
    match insn & 0x7f {
        0x37 | 0x17 => true, // LUI, AUIPC
        // OP-IMM: SLLI, SRLI, SRAI with their 6-bit shift amounts; the others any.
        0x13 => match funct3 {
            1 => insn >> 26 == 0,
            5 => matches!(insn >> 26, 0 | 0x10),
            _ => true,
        },
        // OP-IMM-32: ADDIW, SLLIW, SRLIW, SRAIW.
        0x1b => match funct3 {
            0 => true,
            1 => funct7 == 0,
            5 => matches!(funct7, 0 | 0x20),
            _ => false,
        },
        // OP: the base forms, SUB and SRA, the M extension.
        0x33 => match funct7 {
            0 | 1 => true,
            0x20 => matches!(funct3, 0 | 5),
            _ => false,
        },
        // OP-32: ADDW, SLLW, SRLW; SUBW, SRAW; MULW, DIVW, DIVUW, REMW, REMUW.
        0x3b => match funct7 {
            0 => matches!(funct3, 0 | 1 | 5),
            0x20 => matches!(funct3, 0 | 5),
            1 => matches!(funct3, 0 | 4..=7),
            _ => false,
        },
        _ => false,
    }
}

/// An allocated RV64C register-arithmetic parcel (see [`Riscv64::inert_for`]), as the
/// register it writes.
fn integer_half(insn: u32) -> Option<u32> {
    let funct3 = insn >> 13;
    let rd = (insn >> 7) & 31;
    // The CA/CB formats' rd' (x8-x15), and the CIW format's.
    let rd_ab = ((insn >> 7) & 7) + 8;
    let rd_iw = ((insn >> 2) & 7) + 8;
    let rs2 = (insn >> 2) & 31;
    let imm6 = (insn >> 12) & 1 | rs2;
    let allocated = match (insn & 3, funct3) {
        (0, 0) => return ((insn >> 5) & 0xff != 0).then_some(rd_iw), // C.ADDI4SPN
        // C.SRLI, C.SRAI, C.ANDI, C.SUB, C.XOR, C.OR, C.AND, C.SUBW, C.ADDW.
        (1, 4) => {
            let reserved = (insn >> 10) & 3 == 3 && (insn >> 12) & 1 == 1 && (insn >> 6) & 1 == 1;
            return (!reserved).then_some(rd_ab);
        }
        (1, 0) | (1, 2) => true,        // C.ADDI (C.NOP), C.LI
        (1, 1) => rd != 0,              // C.ADDIW
        (1, 3) => imm6 != 0 && rd != 0, // C.ADDI16SP, C.LUI
        (2, 0) => rd != 0,              // C.SLLI
        (2, 4) => rs2 != 0 && rd != 0,  // C.MV, C.ADD
        _ => false,
    };
    allocated.then_some(rd)
}

#[cfg(test)]
mod tests {
    /// As aarch64's: a call through a register takes its target from the `ld` (or its
    /// compressed forms) that fed it, directly across integer arithmetic that leaves the
    /// register alone, through the call's callback across loads and stores of others.
    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn calls_take_their_target_from_the_load_that_feeds_them() {
        use crate::arch::test_asm::{assemble, feeding_load_of, RISCV64};
        use crate::arch::Feed;
        let fed =
            |lines: &[&str]| feeding_load_of(&Riscv64, &assemble(&RISCV64, 0x1_0000, "", lines));
        let feed = |direct| Some(Feed { load: 0, direct });
        for load in [
            "ld a5, 8(a0)",
            "c.ld a5, 8(a0)",
            "c.ldsp a5, 8(sp)",
            "ld a5, 0(a5)",
        ] {
            assert_eq!(fed(&[load, "jalr a5"]), feed(true), "{load}");
            assert_eq!(fed(&[load, "c.jalr a5"]), feed(true), "{load}");
        }
        let lines = [
            "ld a5, 8(a0)",
            "mv a0, s1",
            "c.mv a1, s2",
            "addi a2, a2, 4",
            "c.addi a3, 1",
            "li a4, 7",
            "lui a6, 0x12345",
            "auipc a7, 0",
            "slli t1, t2, 3",
            "srai t1, t2, 3",
            "addw t3, t4, t5",
            "mul t3, t4, t5",
            "divu t3, t4, t5",
            "c.srli a0, 2",
            "c.and a0, a1",
            "c.addw a0, a1",
            "c.addi4spn a0, sp, 16",
            "nop",
            "jalr a5",
        ];
        assert_eq!(fed(&lines), feed(true));
        // Loads and stores of other registers may fault: the value waits for the call.
        for between in [
            "ld a1, 0(a2)",
            "lw a1, 4(a2)",
            "lbu a1, 0(a5)",
            "c.ld a1, 8(a0)",
            "c.lw a1, 8(a0)",
            "c.ldsp a1, 8(sp)",
            "sd a1, 0(a2)",
            "c.sdsp a5, 8(sp)",
            "fld fa0, 0(a2)",
            "c.fld fa0, 8(a0)",
        ] {
            let lines = ["ld a5, 8(a0)", "mv a0, s1", between, "jalr a5"];
            assert_eq!(fed(&lines), feed(false), "{between}");
        }
        for (lines, why) in [
            (&["ld a5, 8(a0)", "mv a5, a1", "jalr a5"][..], "rewritten"),
            (&["ld a5, 8(a0)", "c.addi a5, 1", "jalr a5"], "adjusted"),
            (
                &["ld a5, 8(a0)", "c.srli a5, 1", "jalr a5"],
                "shifted (rd')",
            ),
            (
                &["c.ld a5, 8(a0)", "c.addi4spn a5, sp, 16", "jalr a5"],
                "rewritten (CIW)",
            ),
            (&["ld a5, 8(a0)", "lw a5, 0(a2)", "jalr a5"], "loaded again"),
            (
                &["ld a5, 8(a0)", "c.lwsp a5, 8(sp)", "jalr a5"],
                "loaded again (compressed)",
            ),
            (
                &["ld a5, 8(a0)", "amoadd.d a1, a2, (a3)", "jalr a5"],
                "an atomic between",
            ),
            (
                &["ld a5, 8(a0)", "ecall", "jalr a5"],
                "a system call between",
            ),
            (
                &["ld a5, 8(a0)", "fmv.d.x fa0, a1", "jalr a5"],
                "floating point between",
            ),
            (
                &["ld a5, 8(a0)", "csrr a1, sstatus", "jalr a5"],
                "a CSR read between",
            ),
            (&["lw a5, 8(a0)", "jalr a5"], "a 32-bit load"),
            (&["mv a0, a1", "jalr a5"], "no load in the block"),
        ] {
            assert_eq!(fed(lines), None, "{why}: {lines:?}");
        }
        // An offset: the target is not the loaded value.
        let listing = assemble(&RISCV64, 0x1_0000, "", &["ld a5, 8(a0)", "jalr 8(a5)"]);
        let earlier = [&listing[0].bytes[..]];
        assert_eq!(
            crate::arch::feeding_load(&Riscv64, Mode::Bits64, &earlier, &listing[1].bytes, 15),
            None
        );
    }

    #[test]
    fn indirect_jumps_are_jr_through_other_registers() {
        let j = |b: &[u8]| Riscv64.indirect_jump(Mode::Bits64, b);
        assert!(j(&0x0003_0067u32.to_le_bytes())); // jr t1
        assert!(j(&0x8302u16.to_le_bytes())); // c.jr t1
        assert!(!j(&0x0000_8067u32.to_le_bytes())); // ret
        assert!(!j(&0x8082u16.to_le_bytes())); // c.jr ra
        assert!(!j(&0x0002_8067u32.to_le_bytes())); // jr t0: a return by the RAS hints
        assert!(!j(&0x0003_00e7u32.to_le_bytes())); // jalr ra, t1
        assert!(!j(&0x9302u16.to_le_bytes())); // c.jalr t1
    }

    #[test]
    fn direct_jumps_are_j_and_c_j_and_far_tail_calls() {
        let at = |b: &[u8]| Riscv64.direct_jump(Mode::Bits64, 0x1000, b);
        assert_eq!(at(&0x0080_006fu32.to_le_bytes()), Some(0x1008)); // j .+8
        assert_eq!(at(&0xa011u16.to_le_bytes()), Some(0x1004)); // c.j .+4
        assert_eq!(at(&0x0080_00efu32.to_le_bytes()), None); // jal ra
        let jr = 0x0103_0067u32.to_le_bytes(); // jalr zero, 16(t1)
        assert_eq!(
            Riscv64.register_offset_jump(Mode::Bits64, &jr),
            Some((6, 16))
        );
        let ret = 0x0000_8067u32.to_le_bytes(); // jalr zero, 0(ra)
        assert_eq!(Riscv64.register_offset_jump(Mode::Bits64, &ret), None);
        // auipc t1, 0x1 at 0x1000, then jr 16(t1): a far tail call to 0x2010.
        let auipc = 0x0000_1317u32.to_le_bytes();
        assert_eq!(
            crate::arch::jump_target_after(
                &Riscv64,
                Mode::Bits64,
                Some((0x1000, &auipc)),
                0x1004,
                &jr
            ),
            Some(0x2010)
        );
    }

    use super::super::test_asm::{assemble, bytes_through, Binutils, RISCV32, RISCV64};
    use super::*;
    use crate::arch::{isa, Arch};

    enum E {
        Direct(u64),
        /// A direct call to the listing's line `n` (label `insn_<n>`).
        ToLine(usize),
        Reg(u8),
        RegOff(u8, i64),
        Ret,
        Eret,
        Trap,
        Other,
    }

    const A0: u8 = 10;
    const A5: u8 = 15;
    const S1: u8 = 9;
    const T1: u8 = 6;

    /// Assembles `cases` after `header`, checks each line's class and size (`len`, or
    /// whatever the assembler chose when 0), and finds each call from its return address.
    fn check(tools: &Binutils, mode: Mode, base: u64, header: &str, cases: &[(&str, usize, E)]) {
        let lines: Vec<&str> = cases.iter().map(|c| c.0).collect();
        let listing = assemble(tools, base, header, &lines);
        for (insn, (_, len, e)) in listing.iter().zip(cases) {
            if *len != 0 {
                assert_eq!(insn.bytes.len(), *len, "{}", insn.source);
            }
            let next = insn.addr + insn.bytes.len() as u64;
            let call = |target| InsnKind::Call {
                target,
                ret_addr: next,
            };
            let want = match e {
                E::Direct(t) => call(Target::Direct(*t)),
                E::ToLine(n) => call(Target::Direct(listing[*n].addr)),
                E::Reg(r) => call(Target::Register(*r)),
                E::RegOff(reg, offset) => call(Target::RegisterOffset {
                    reg: *reg,
                    offset: *offset,
                }),
                E::Ret => InsnKind::Return,
                E::Eret => InsnKind::ExceptionReturn,
                E::Trap => InsnKind::Trap,
                E::Other => InsnKind::Other,
            };
            assert_eq!(
                Riscv64.classify(mode, insn.addr, &insn.bytes),
                want,
                "{} ({:02x?})",
                insn.source,
                insn.bytes
            );
            // Followed by the next instruction's bytes, as the plugin may fetch them.
            let mut longer = insn.bytes.clone();
            longer.extend_from_slice(&[0x13, 0, 0, 0]);
            assert_eq!(Riscv64.classify(mode, insn.addr, &longer), want);
            assert_eq!(
                Riscv64.classify(mode, insn.addr, &insn.bytes[..1]),
                InsnKind::Other
            );
            if let InsnKind::Call { target, ret_addr } = want {
                let before = bytes_through(&listing, base, insn);
                let window = &before[before.len().saturating_sub(4)..];
                let site = Riscv64.call_ending_at(mode, ret_addr, window);
                let direct = match target {
                    Target::Direct(t) => Some(t),
                    _ => None,
                };
                assert_eq!(
                    site,
                    Some(CallSite {
                        pc: insn.addr,
                        target: direct
                    }),
                    "{}",
                    insn.source
                );
            } else {
                let before = bytes_through(&listing, base, insn);
                let window = &before[before.len().saturating_sub(4)..];
                assert_eq!(
                    Riscv64.call_ending_at(mode, next, window),
                    None,
                    "{}",
                    insn.source
                );
            }
        }
    }

    /// The far `call` (auipc + jalr, what kernels built without linker relaxation use for
    /// every call) is a direct call when both are in one block; a jalr whose register the
    /// instruction before did not set by auipc stays a call through it.
    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn auipc_then_jalr_is_a_direct_call() {
        let listing = assemble(
            &RISCV64,
            0x8020_0000,
            ".option norvc",
            &[
                "auipc ra, 0x100",
                "jalr ra, -0x20(ra)",
                "auipc t1, 0xfffff",
                "jalr ra, 8(t1)",
                "auipc t1, 0x1",
                "jalr t0, 0(t1)",
                "auipc a0, 0x1",
                "jalr ra, 16(a5)",
                "jalr ra, 16(a5)",
            ],
        );
        let isa = Riscv64;
        let kind = |i: usize, prev: bool| {
            let before = (prev && i > 0).then(|| (listing[i - 1].addr, &listing[i - 1].bytes[..]));
            crate::arch::classify_after(
                &isa,
                Mode::Bits64,
                before,
                listing[i].addr,
                &listing[i].bytes,
            )
        };
        let direct = |t: u64, i: usize| InsnKind::Call {
            target: Target::Direct(t),
            ret_addr: listing[i].addr + 4,
        };
        assert_eq!(kind(1, true), direct(0x8020_0000 + 0x10_0000 - 0x20, 1));
        assert_eq!(kind(3, true), direct(0x8020_0008 - 0x1000 + 8, 3));
        assert_eq!(kind(5, true), direct(0x8020_0010 + 0x1000, 5));
        // At a block's start, or after an auipc of another register: through the register.
        assert_eq!(
            kind(1, false),
            isa.classify(Mode::Bits64, listing[1].addr, &listing[1].bytes)
        );
        let through_a5 = InsnKind::Call {
            target: Target::RegisterOffset {
                reg: A5,
                offset: 16,
            },
            ret_addr: listing[7].addr + 4,
        };
        assert_eq!(kind(7, true), through_a5);
        assert!(matches!(
            kind(8, true),
            InsnKind::Call {
                target: Target::RegisterOffset {
                    reg: A5,
                    offset: 16
                },
                ..
            }
        ));
        // Not adjacent: no pairing.
        let far = crate::arch::classify_after(
            &isa,
            Mode::Bits64,
            Some((listing[0].addr - 4, &listing[0].bytes[..])),
            listing[1].addr,
            &listing[1].bytes,
        );
        assert_eq!(
            far,
            isa.classify(Mode::Bits64, listing[1].addr, &listing[1].bytes)
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn full_size_instructions() {
        check(
            &RISCV64,
            Mode::Bits64,
            0x8020_0000,
            ".option norvc",
            &[
                ("jal ra, 0x80201000", 4, E::Direct(0x8020_1000)),
                ("jal t0, 0x80180000", 4, E::Direct(0x8018_0000)),
                ("jal ra, 0x802ffffe", 4, E::Direct(0x802f_fffe)),
                ("jal zero, 0x80200000", 4, E::Other), // j
                ("jal a0, 0x80200100", 4, E::Other),   // links no return-address register
                ("jalr ra, 0(a0)", 4, E::Reg(A0)),
                ("jalr ra, 16(a5)", 4, E::RegOff(A5, 16)),
                ("jalr ra, -8(s1)", 4, E::RegOff(S1, -8)),
                ("jalr ra, 2047(a0)", 4, E::RegOff(A0, 2047)),
                ("jalr ra, -2048(a0)", 4, E::RegOff(A0, -2048)),
                ("jalr t0, 0(t1)", 4, E::Reg(T1)),
                // rd = rs1, a link register: push.
                ("jalr ra, 0(ra)", 4, E::Reg(RA)),
                ("jalr t0, 0(t0)", 4, E::Reg(T0)),
                // One link register through the other: pop, then push (a call).
                ("jalr ra, 0(t0)", 4, E::Reg(T0)),
                // `call` far away: auipc, then jalr through ra with the low offset.
                ("auipc ra, 0x100", 4, E::Other),
                ("jalr ra, -0x20(ra)", 4, E::RegOff(RA, -0x20)),
                ("ret", 4, E::Ret),
                ("jr t0", 4, E::Ret),
                ("jalr zero, 0(ra)", 4, E::Ret),
                ("jalr zero, 8(ra)", 4, E::Ret),
                ("jalr a1, 0(ra)", 4, E::Ret), // pops, links a1
                ("jr a0", 4, E::Other),
                ("jalr zero, 0(a0)", 4, E::Other),
                ("jalr a1, 0(a0)", 4, E::Other),
                ("ecall", 4, E::Trap),
                ("ebreak", 4, E::Trap),
                ("sret", 4, E::Eret),
                ("mret", 4, E::Eret),
                ("wfi", 4, E::Other),
                ("sfence.vma", 4, E::Other),
                ("csrrw tp, sscratch, tp", 4, E::Other),
                ("addi sp, sp, -16", 4, E::Other),
                ("sd ra, 8(sp)", 4, E::Other),
                ("beq a0, a1, insn_0", 4, E::Other),
                ("lui a0, 0x12345", 4, E::Other),
                ("nop", 4, E::Other),
            ],
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn compressed_instructions() {
        check(
            &RISCV64,
            Mode::Bits64,
            0xffff_ffff_8000_0000,
            ".option rvc",
            &[
                ("c.jalr a0", 2, E::Reg(A0)),
                ("c.jalr ra", 2, E::Reg(RA)),
                ("c.jalr t0", 2, E::Reg(T0)),
                ("c.jalr s1", 2, E::Reg(S1)),
                ("jalr a5", 2, E::Reg(A5)), // compressed by the assembler
                ("c.jr ra", 2, E::Ret),
                ("c.jr t0", 2, E::Ret),
                ("ret", 2, E::Ret),
                ("c.jr a5", 2, E::Other),
                ("c.ebreak", 2, E::Trap),
                ("c.mv a0, a1", 2, E::Other),
                ("c.mv ra, a1", 2, E::Other),
                ("c.add a0, a1", 2, E::Other),
                // C.JAL's encoding: C.ADDIW on RV64.
                ("c.addiw a0, 1", 2, E::Other),
                ("c.addiw ra, -1", 2, E::Other),
                ("c.fsdsp fa0, 8(sp)", 2, E::Other),
                ("c.fldsp fa0, 8(sp)", 2, E::Other),
                ("c.nop", 2, E::Other),
                // Full-size calls among compressed code.
                (
                    "jal ra, 0xffffffff80001000",
                    4,
                    E::Direct(0xffff_ffff_8000_1000),
                ),
                ("c.addi sp, -16", 2, E::Other),
                ("jalr ra, 8(a0)", 4, E::RegOff(A0, 8)),
                ("c.jalr a0", 2, E::Reg(A0)),
                ("c.li a0, 1", 2, E::Other),
                ("jalr t0, 0(t1)", 4, E::Reg(T1)),
                ("c.jr t0", 2, E::Ret),
            ],
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn rv32_compressed_jal() {
        check(
            &RISCV32,
            Mode::Bits32,
            0x8000_0000,
            ".option rvc",
            &[
                // (A numeric target would make the assembler write a JAL.)
                ("c.jal insn_3", 2, E::ToLine(3)),
                ("c.jal insn_0", 2, E::ToLine(0)),
                ("c.jal insn_1", 2, E::ToLine(1)),
                ("c.nop", 2, E::Other),
                ("jal ra, insn_0", 4, E::ToLine(0)),
                ("c.jalr a0", 2, E::Reg(A0)),
                ("c.j insn_0", 2, E::Other),
                ("ret", 2, E::Ret),
            ],
        );
    }

    #[test]
    fn forms_by_hand() {
        let k = |insn: u32| Riscv64.classify(Mode::Bits64, 0x1000, &insn.to_le_bytes());
        assert_eq!(k(0x7020_0073), InsnKind::ExceptionReturn); // mnret (Smrnmi)
        assert_eq!(k(0x0000_0073), InsnKind::Trap); // ecall
                                                    // jalr with funct3 != 0 is reserved.
        assert_eq!(k(0x0000_10e7), InsnKind::Other);
        // A 32-bit instruction cut to its first parcel.
        assert_eq!(
            Riscv64.classify(Mode::Bits64, 0, &0x0000_80e7u32.to_le_bytes()[..2]),
            InsnKind::Other
        );
        // C.JAL as RV32 sees it; C.ADDIW as RV64 does.
        let c_jal = 0x2001u16.to_le_bytes(); // c.jal +0
        assert_eq!(
            Riscv64.classify(Mode::Bits32, 0x100, &c_jal),
            InsnKind::Call {
                target: Target::Direct(0x100),
                ret_addr: 0x102
            }
        );
        assert_eq!(
            Riscv64.classify(Mode::Bits64, 0x100, &c_jal),
            InsnKind::Other
        );
        assert!(Riscv64::is_compressed(0x8082));
        assert!(!Riscv64::is_compressed(0x8067));
    }

    #[test]
    fn registers_as_qemu_names_them() {
        assert_eq!(Riscv64.gpr_name(0), "zero");
        assert_eq!(Riscv64.gpr_name(RA), "ra");
        assert_eq!(Riscv64.gpr_name(T0), "t0");
        assert_eq!(Riscv64.gpr_name(Riscv64.frame_pointer()), "fp");
        assert_eq!(Riscv64.gpr_name(31), "t6");
        assert_eq!(Riscv64.gpr_name(32), "");
    }

    #[test]
    fn frame_records_sit_below_the_frame_pointer() {
        assert_eq!(
            Riscv64.frame_slots(0x8000_1000),
            FrameSlots {
                caller_fp: 0x8000_0ff0,
                ret_addr: 0x8000_0ff8
            }
        );
    }

    #[test]
    fn privilege_levels() {
        let r = Riscv64;
        assert_eq!(r.exception_level(3), Level(PRV_M));
        assert_eq!(r.exception_level(1), Level(PRV_S));
        assert_eq!(r.exception_level(5), Level(PRV_S | VIRT));
        let names: Vec<String> = [0, 1, 3, 4, 5].map(|l| r.level_name(Level(l))).to_vec();
        assert_eq!(names, ["U", "S", "M", "VU", "VS"]);
        assert_eq!(r.exception_link_register(Level(PRV_M)), Some("mepc"));
        assert_eq!(r.exception_link_register(Level(PRV_S)), Some("sepc"));
        assert_eq!(r.exception_link_register(Level(PRV_U)), None);
        assert_eq!(r.saved_status_register(Level(PRV_M)), Some("mstatus"));
        assert_eq!(r.syndrome_register(Level(PRV_S)), Some("scause"));
        // MRET to S (MPP = 01), to U, to VS (MPV); SRET to U (SPP = 0) and to S.
        assert_eq!(r.return_level(Level(PRV_M), 1 << 11, None), Level(PRV_S));
        assert_eq!(r.return_level(Level(PRV_M), 0, None), Level(PRV_U));
        assert_eq!(
            r.return_level(Level(PRV_M), 1 << 11 | 1 << 39, None),
            Level(PRV_S | VIRT)
        );
        assert_eq!(
            r.return_level(Level(PRV_M), 3 << 11 | 1 << 39, None),
            Level(PRV_M)
        );
        assert_eq!(r.return_level(Level(PRV_S), 0, None), Level(PRV_U));
        assert_eq!(r.return_level(Level(PRV_S), 1 << 8, None), Level(PRV_S));
        assert_eq!(
            r.return_level(Level(PRV_S | VIRT), 0, None),
            Level(PRV_U | VIRT)
        );
    }

    #[test]
    fn exception_kinds_from_the_cause() {
        let kind = |cause: u64| Riscv64.exception_kind(Discontinuity::Exception, Some(cause));
        assert_eq!(kind(8), ExceptionKind::Svc); // ecall from U
        assert_eq!(kind(9), ExceptionKind::Smc); // ecall from S: SBI
        assert_eq!(kind(10), ExceptionKind::Hvc); // ecall from VS
        assert_eq!(kind(3), ExceptionKind::Brk);
        assert_eq!(kind(12), ExceptionKind::InsnAbort);
        assert_eq!(kind(13), ExceptionKind::DataAbort);
        assert_eq!(kind(15), ExceptionKind::DataAbort);
        assert_eq!(kind(2), ExceptionKind::Other); // illegal instruction
        assert_eq!(kind(1 << 63 | 5), ExceptionKind::Irq); // supervisor timer
        assert_eq!(
            Riscv64.exception_kind(Discontinuity::Interrupt, None),
            ExceptionKind::Irq
        );
    }

    #[test]
    fn writes_of_tp_set_the_task_pointer() {
        // mv tp, a1 (addi x4, x11, 0) and c.mv tp, a1, as __switch_to has them.
        let word = |insn: u32| Riscv64.classify(Mode::Bits64, 0x1000, &insn.to_le_bytes());
        let half = |insn: u16| Riscv64.classify(Mode::Bits64, 0x1000, &insn.to_le_bytes());
        assert_eq!(word(0x0005_8213), InsnKind::SetTaskPointer { src: 11 });
        assert_eq!(half(0x822e), InsnKind::SetTaskPointer { src: 11 });
        // addi tp, tp, 8 (half of `la tp, sym`), li tp, 0, and mv t0, a1: something else.
        assert_eq!(word(0x0082_0213), InsnKind::Other);
        assert_eq!(word(0x0000_0213), InsnKind::Other);
        assert_eq!(word(0x0005_8293), InsnKind::Other);
        assert!(Riscv64.is_task_pointer(0xffff_ffd8_0123_4000));
        assert!(!Riscv64.is_task_pointer(0x3f_f7ff_e800));
        assert_eq!(Riscv64.task_pointer_register(), Some("tp"));
    }

    #[test]
    fn environment_calls_resume_past_the_ecall() {
        let resume = |what, cause| Riscv64.exception_resume_pc(what, cause, 0x8000_1000);
        for cause in 8..=11 {
            assert_eq!(resume(Discontinuity::Exception, Some(cause)), 0x8000_1004);
        }
        // A fault is retried, an interrupted instruction runs when the handler is done.
        assert_eq!(resume(Discontinuity::Exception, Some(13)), 0x8000_1000);
        assert_eq!(resume(Discontinuity::Exception, None), 0x8000_1000);
        assert_eq!(resume(Discontinuity::Interrupt, None), 0x8000_1000);
        assert_eq!(
            isa(Arch::Aarch64).exception_resume_pc(
                Discontinuity::Exception,
                Some(0x5600_0000),
                0x1000
            ),
            0x1000
        );
    }
}
