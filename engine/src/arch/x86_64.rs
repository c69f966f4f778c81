//! x86 call/return classification from instruction bytes, in 16-, 32- and 64-bit code
//! (`qemu-system-x86_64` runs all three: SeaBIOS starts in real mode, Linux's boot code goes
//! through 32-bit protected mode to long mode).
//!
//! Only the instructions that matter to the call graph are decoded: near and far calls
//! (direct, through a register, through memory), near and far returns, IRET, SYSRET,
//! SYSEXIT and RSM (exception returns), SYSCALL, SYSENTER and INT n / INT3 / INT1 / INTO
//! (traps). Everything else is `Other`, whatever its length.
//!
//! Registers are numbered as QEMU's x86-64 register list (gdb's `i386-64bit-core.xml`)
//! lists them: rax, rbx, rcx, rdx, rsi, rdi, rbp, rsp, r8 … r15 — not in the encoding's
//! order (ax, cx, dx, bx, sp, bp, si, di).
//!
//! Known approximations, none of them met in compiled code:
//! - a direct call's target in 16-bit code is `pc + length + displacement`: the linear
//!   address, right unless IP wraps around its 64 KiB segment; a 16-bit-operand call in
//!   32-bit code truncates EIP to 16 bits (assumes a flat code segment);
//! - a far call's target is `selector * 16 + offset` in 16-bit code (real mode) and the
//!   offset in 32-bit code (a flat code segment: descriptor bases are not visible);
//! - a 16-bit-operand call through a register (`call *%ax`) jumps to the register's low
//!   16 bits: [`Target::Register`] names the whole register;
//! - in 64-bit mode the operand-size prefix does not shorten a near call or its target
//!   (Intel's and QEMU's behaviour; AMD CPUs truncate RIP to 16 bits).

use super::{
    call_of_len, CallSite, Discontinuity, ExceptionKind, ExceptionReturnTo, InsnKind, Isa, Level,
    LinkSlot, LinuxUser, MemOperand, Mode, Target, Thunk,
};

pub struct X86_64;

/// An x86 exception's syndrome, as the plugin computes it (no register holds one): the vector
/// in the low bits ([`SYSCALL_VECTOR`] for `SYSCALL`/`SYSENTER`, which use none), and for a
/// trap raised by an instruction its length above [`TRAP_LEN_SHIFT`].
fn syndrome(vector: u64, trap_len: usize) -> u64 {
    vector | (trap_len as u64) << TRAP_LEN_SHIFT
}
const VECTOR_MASK: u64 = 0x1ff;
const SYSCALL_VECTOR: u64 = 0x100;
const TRAP_LEN_SHIFT: u32 = 16;

/// The architectural limit: a longer instruction raises #GP.
const MAX_INSN: usize = 15;

/// The end of what segmented 16-bit code addresses: `0xffff << 4` plus a 16-bit offset.
const SEGMENTED_END: u64 = 0x10_fff0;

/// QEMU's register number of each encoding register number 0..=7 (ax, cx, dx, bx, sp, bp,
/// si, di); r8..r15 keep theirs.
const GDB_OF_ENCODING: [u8; 8] = [0, 2, 3, 1, 7, 6, 4, 5];

const RSP: u8 = 7;
const RBP: u8 = 6;
const RBX: u8 = 1;

/// A general register's number in QEMU's list, from its encoding (REX bit included).
fn gpr(encoding: u8) -> u8 {
    match GDB_OF_ENCODING.get(encoding as usize) {
        Some(&n) => n,
        None => encoding,
    }
}

/// The prefixes before an opcode.
#[derive(Default)]
struct Prefixes {
    /// 66: the other operand size.
    operand_size: bool,
    /// 67: the other address size.
    address_size: bool,
    /// The last segment override (QEMU's register name).
    segment: Option<&'static str>,
    /// The REX byte, when it directly precedes the opcode (64-bit mode only).
    rex: u8,
}

impl Prefixes {
    fn rex_w(&self) -> bool {
        self.rex & 8 != 0
    }
    fn rex_x(&self) -> u8 {
        (self.rex & 2) << 2
    }
    fn rex_b(&self) -> u8 {
        (self.rex & 1) << 3
    }
    fn rex_r(&self) -> u8 {
        (self.rex & 4) << 1
    }
}

/// The prefixes at the start of `bytes` and the opcode's index. A REX byte counts only
/// right before the opcode: a legacy prefix after it makes the CPU ignore it.
fn prefixes(mode: Mode, bytes: &[u8]) -> (Prefixes, usize) {
    let mut p = Prefixes::default();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            0x26 => p.segment = Some("es"),
            0x2e => p.segment = Some("cs"),
            0x36 => p.segment = Some("ss"),
            // Also `notrack` (CET) on indirect calls and jumps.
            0x3e => p.segment = Some("ds"),
            0x64 => p.segment = Some("fs"),
            0x65 => p.segment = Some("gs"),
            0x66 => p.operand_size = true,
            0x67 => p.address_size = true,
            // LOCK, REPNE (also `bnd`), REP.
            0xf0 | 0xf2 | 0xf3 => {}
            0x40..=0x4f if mode == Mode::Bits64 => {
                p.rex = b;
                i += 1;
                continue;
            }
            _ => break,
        }
        p.rex = 0;
        i += 1;
    }
    (p, i)
}

/// A little-endian, sign-extended immediate or displacement of `size` bytes at `at`.
fn signed(bytes: &[u8], at: usize, size: usize) -> Option<i64> {
    let b = bytes.get(at..at + size)?;
    Some(match size {
        0 => 0,
        1 => b[0] as i8 as i64,
        2 => i16::from_le_bytes([b[0], b[1]]) as i64,
        4 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
        _ => return None,
    })
}

/// Whether code of width `mode` with these prefixes has 16-bit operands.
fn operand16(mode: Mode, p: &Prefixes) -> bool {
    match mode {
        Mode::Bits16 => !p.operand_size,
        Mode::Bits32 => p.operand_size,
        Mode::Bits64 => false,
    }
}

fn address_bits(mode: Mode, p: &Prefixes) -> u8 {
    match (mode, p.address_size) {
        (Mode::Bits16, false) | (Mode::Bits32, true) => 16,
        (Mode::Bits16, true) | (Mode::Bits32, false) | (Mode::Bits64, true) => 32,
        (Mode::Bits64, false) => 64,
    }
}

/// A ModRM operand.
enum Operand {
    Register(u8),
    /// `rip_relative`: `disp` is relative to the next instruction (resolved by the caller,
    /// who knows the instruction's length).
    Memory {
        op: MemOperand,
        rip_relative: bool,
    },
}

/// Decodes the ModRM operand (and SIB, displacement) at `at`; gives it and the index past
/// its last byte.
fn modrm(mode: Mode, p: &Prefixes, bytes: &[u8], at: usize) -> Option<(Operand, usize)> {
    let m = *bytes.get(at)?;
    let (md, rm) = (m >> 6, m & 7);
    if md == 3 {
        return Some((Operand::Register(gpr(rm | p.rex_b())), at + 1));
    }
    let addr_bits = address_bits(mode, p);
    let mut k = at + 1;
    let mut base = None;
    let mut index = None;
    let mut scale = 1;
    let mut rip_relative = false;
    let mut disp_size = [0, 1, 4][md as usize];
    if addr_bits == 16 {
        const BX: u8 = 1;
        const SI: u8 = 4;
        const DI: u8 = 5;
        disp_size = [0, 1, 2][md as usize];
        let (b, x) = match rm {
            0 => (BX, Some(SI)),
            1 => (BX, Some(DI)),
            2 => (RBP, Some(SI)),
            3 => (RBP, Some(DI)),
            4 => (SI, None),
            5 => (DI, None),
            6 => (RBP, None),
            _ => (BX, None),
        };
        if md == 0 && rm == 6 {
            disp_size = 2; // [disp16]
        } else {
            base = Some(b);
            index = x;
        }
    } else if rm == 4 {
        let sib = *bytes.get(k)?;
        k += 1;
        let i = (sib >> 3) & 7 | p.rex_x();
        if i != 4 {
            index = Some(gpr(i));
            scale = 1 << (sib >> 6);
        }
        if sib & 7 == 5 && md == 0 {
            disp_size = 4; // [index * scale + disp32]
        } else {
            base = Some(gpr(sib & 7 | p.rex_b()));
        }
    } else if rm == 5 && md == 0 {
        disp_size = 4;
        // RIP-relative in 64-bit mode (REX.B does not change that), absolute otherwise.
        rip_relative = mode == Mode::Bits64;
    } else {
        base = Some(gpr(rm | p.rex_b()));
    }
    let disp = signed(bytes, k, disp_size)?;
    k += disp_size;
    let segment = match mode {
        // Only FS and GS have a base in 64-bit mode; other overrides are ignored.
        Mode::Bits64 => p.segment.filter(|s| matches!(*s, "fs" | "gs")),
        _ => p.segment.or(Some(match base {
            Some(RBP | RSP) => "ss",
            _ => "ds",
        })),
    };
    let op = MemOperand {
        base,
        index,
        scale,
        disp,
        addr_bits,
        size: 0,
        far: false,
        segment,
    };
    Some((Operand::Memory { op, rip_relative }, k))
}

/// A call whose return address and target depend on its length `len`.
fn call(pc: u64, len: usize, target: Target) -> InsnKind {
    InsnKind::Call {
        target,
        ret_addr: pc.wrapping_add(len as u64),
    }
}

impl X86_64 {
    /// Classifies the instruction at the start of `bytes` in code of width `mode`.
    pub fn classify_bytes(mode: Mode, pc: u64, bytes: &[u8]) -> InsnKind {
        Self::decode(mode, pc, &bytes[..bytes.len().min(MAX_INSN)]).unwrap_or(InsnKind::Other)
    }

    /// `None`: too few bytes for the instruction (or longer than the architecture allows).
    fn decode(mode: Mode, pc: u64, bytes: &[u8]) -> Option<InsnKind> {
        let (p, i) = prefixes(mode, bytes);
        let op = *bytes.get(i)?;
        let long = mode == Mode::Bits64;
        let op16 = operand16(mode, &p);
        let need = |n: usize| (bytes.len() >= n).then_some(());
        Some(match op {
            // CALL rel16/rel32
            0xe8 => {
                let size = if op16 { 2 } else { 4 };
                let len = i + 1 + size;
                let rel = signed(bytes, i + 1, size)?;
                // A call over one byte (`call 1f; int3; 1:`) is Linux's return-stack-buffer
                // stuffing (__FILL_RETURN_BUFFER, on every context switch): nothing returns
                // to it, the stack pointer is moved back over all of them at once.
                if rel == 1 {
                    return Some(InsnKind::Other);
                }
                let mut target = pc.wrapping_add(len as u64).wrapping_add(rel as u64);
                if mode == Mode::Bits32 {
                    target &= if op16 { 0xffff } else { 0xffff_ffff };
                }
                call(pc, len, Target::Direct(target))
            }
            // CALL ptr16:16 / ptr16:32 (invalid in 64-bit mode)
            0x9a if !long => {
                let size = if op16 { 2 } else { 4 };
                let len = i + 1 + size + 2;
                let b = bytes.get(i + 1..len)?;
                let mut offset = [0u8; 8];
                offset[..size].copy_from_slice(&b[..size]);
                let offset = u64::from_le_bytes(offset);
                let selector = u16::from_le_bytes([b[size], b[size + 1]]) as u64;
                let target = match mode {
                    Mode::Bits16 => (selector << 4) + offset,
                    _ => offset,
                };
                call(pc, len, Target::Direct(target))
            }
            // Group 5: /2 CALL r/m (near), /3 CALL m16:16/32/64 (far).
            0xff => {
                let reg = (*bytes.get(i + 1)? >> 3) & 7;
                if reg != 2 && reg != 3 {
                    return Some(InsnKind::Other);
                }
                let far = reg == 3;
                let (operand, len) = modrm(mode, &p, bytes, i + 1)?;
                let target = match operand {
                    Operand::Register(_) if far => return Some(InsnKind::Other), // #UD
                    Operand::Register(r) => Target::Register(r),
                    Operand::Memory {
                        mut op,
                        rip_relative,
                    } => {
                        if rip_relative {
                            let abs = pc.wrapping_add(len as u64).wrapping_add(op.disp as u64);
                            op.disp = if op.addr_bits == 32 {
                                (abs & 0xffff_ffff) as i64
                            } else {
                                abs as i64
                            };
                        }
                        op.far = far;
                        op.size = match (long, far) {
                            (true, false) => 8,
                            (true, true) if p.rex_w() => 8,
                            (true, true) if p.operand_size => 2,
                            (true, true) => 4,
                            (false, _) if op16 => 2,
                            (false, _) => 4,
                        };
                        Target::Memory(op)
                    }
                };
                call(pc, len, target)
            }
            // RET, RET imm16, far RET, far RET imm16
            0xc3 | 0xcb => InsnKind::Return,
            0xc2 | 0xca => need(i + 3).map(|()| InsnKind::Return)?,
            // IRET, IRETD, IRETQ
            0xcf => InsnKind::ExceptionReturn,
            // INT3, INT1 (ICEBP)
            0xcc | 0xf1 => InsnKind::Trap,
            // INT n
            0xcd => need(i + 2).map(|()| InsnKind::Trap)?,
            // INTO (invalid in 64-bit mode)
            0xce if !long => InsnKind::Trap,
            0x0f => match *bytes.get(i + 1)? {
                // SYSCALL, SYSENTER
                0x05 | 0x34 => InsnKind::Trap,
                // SYSRET, SYSEXIT, RSM (leaves System Management Mode)
                0x07 | 0x35 | 0xaa => InsnKind::ExceptionReturn,
                _ => InsnKind::Other,
            },
            _ => InsnKind::Other,
        })
    }

    /// Recognises the thunks of Linux's speculation mitigations (arch/x86/lib/retpoline.S)
    /// from the bytes at their entry:
    /// - `__x86_indirect_thunk_<reg>` as a retpoline, `call 1f; <trap: pause; lfence;
    ///   jmp trap>; 1: mov %reg, (%rsp); ret` (or `jmp __x86_return_thunk` for the `ret`),
    ///   and as the kernel patches it when retpolines are off: `lfence; jmp *%reg`, or
    ///   `jmp *%reg`;
    /// - `srso_safe_ret`, `lea 8(%rsp), %rsp; ret` (or `add $8, %rsp; ret`), which
    ///   `srso_return_thunk` calls to return for its caller;
    /// - the retpoline's second half, `mov %reg, (%rsp); ret` (or `jmp __x86_return_thunk`),
    ///   which its `call` reaches: that call and return only branch to `%reg`.
    ///
    /// `__x86_return_thunk` itself (`ret; int3`), which functions reach by `jmp` instead of
    /// `ret`, needs nothing: its `ret` is the function's return, seen where it lands.
    pub fn thunk_at(mode: Mode, entry: &[u8]) -> Option<Thunk> {
        let b = |i: usize| entry.get(i).copied();
        // `[REX] op modrm` with the register in ModRM's `reg` or `rm` field.
        let rex_at = |i: usize| match b(i) {
            Some(r @ 0x40..=0x4f) if mode == Mode::Bits64 => (r, i + 1),
            _ => (0, i),
        };
        // jmp *%reg: [REX.B] ff /4 with mod = 11.
        let jmp_reg = |i: usize| {
            let (rex, i) = rex_at(i);
            match (b(i)?, b(i + 1)?) {
                (0xff, m) if m & 0xf8 == 0xe0 => Some(gpr(m & 7 | (rex & 1) << 3)),
                _ => None,
            }
        };
        const LFENCE: [u8; 3] = [0x0f, 0xae, 0xe8];
        if entry.starts_with(&LFENCE) {
            return jmp_reg(3).map(|reg| Thunk::IndirectBranch { reg });
        }
        if let Some(reg) = jmp_reg(0) {
            return Some(Thunk::IndirectBranch { reg });
        }
        const DROP_RET: [&[u8]; 2] = [
            &[0x48, 0x8d, 0x64, 0x24, 0x08, 0xc3], // lea 0x8(%rsp), %rsp; ret
            &[0x48, 0x83, 0xc4, 0x08, 0xc3],       // add $0x8, %rsp; ret
        ];
        if mode == Mode::Bits64 && DROP_RET.iter().any(|s| entry.starts_with(s)) {
            return Some(Thunk::ReturnForCaller);
        }
        // The retpoline's second half, which its `call` reaches: `mov %reg, (%rsp)` and the
        // return (`ret` or a jump to the return thunk).
        if mode == Mode::Bits64 {
            let (_, i) = rex_at(0);
            let m = b(i + 1)?;
            if b(i)? == 0x89
                && m & 0xc7 == 0x04
                && b(i + 2)? == 0x24
                && matches!(b(i + 3)?, 0xc3 | 0xe9)
            {
                return Some(Thunk::BranchByReturn);
            }
        }
        // The retpoline: call over a speculation trap that ends in a short jump back.
        if b(0)? != 0xe8 {
            return None;
        }
        let skip = i32::from_le_bytes(entry.get(1..5)?.try_into().ok()?);
        if !(2..=16).contains(&skip) {
            return None;
        }
        let trap_end = 5 + skip as usize;
        if b(trap_end - 2)? != 0xeb || (b(trap_end - 1)? as i8) >= 0 {
            return None;
        }
        // mov %reg, (%esp/%rsp): [REX.W(R)] 89 /r with mod = 00, rm = 100, SIB = 0x24.
        let (rex, i) = rex_at(trap_end);
        let m = b(i + 1)?;
        if b(i)? != 0x89 || m & 0xc7 != 0x04 || b(i + 2)? != 0x24 {
            return None;
        }
        // Then the return: `ret`, or a jump to the return thunk.
        if !matches!(b(i + 3)?, 0xc3 | 0xe9) {
            return None;
        }
        Some(Thunk::IndirectBranch {
            reg: gpr((m >> 3) & 7 | (rex & 4) << 1),
        })
    }
}

/// Call lengths tried before a return address, in the order the most common calls have
/// them (`call rel32`, `call *%reg`, `call *%r8..15` or `call *disp8(%reg)`, `call
/// *disp32(%rip)` …).
const CALL_LENGTHS: [usize; 14] = [5, 2, 3, 6, 7, 4, 8, 9, 10, 11, 12, 13, 14, 15];

/// Whether an instruction starting with byte `b` can be a call: a call's opcode (E8, 9A,
/// FF) or a prefix [`prefixes`] skips before it.
fn may_start_call(mode: Mode, b: u8) -> bool {
    matches!(
        b,
        0xe8 | 0x9a
            | 0xff
            | 0x26
            | 0x2e
            | 0x36
            | 0x3e
            | 0x64
            | 0x65
            | 0x66
            | 0x67
            | 0xf0
            | 0xf2
            | 0xf3
    ) || (mode == Mode::Bits64 && (0x40..=0x4f).contains(&b))
}

impl Isa for X86_64 {
    fn classify(&self, mode: Mode, pc: u64, bytes: &[u8]) -> InsnKind {
        Self::classify_bytes(mode, pc, bytes)
    }

    fn fetch_len(&self) -> usize {
        16
    }

    /// Real mode (CR0.PE clear) and virtual-8086 mode (EFLAGS.VM) run 16-bit code; with
    /// EFER.LMA (long mode active) code is 64-bit; otherwise 32-bit. QEMU does not show the
    /// code segment's D and L bits, so this assumes 32-bit segments in protected mode and
    /// 64-bit ones in long mode: 16-bit protected-mode code and 32-bit code under a 64-bit
    /// kernel (compatibility mode) are decoded with the wrong width. Without `cr0` (user
    /// mode), 64-bit.
    fn current_mode(&self, read: &mut dyn FnMut(&'static str) -> Option<u64>) -> Mode {
        const PE: u64 = 1;
        const VM: u64 = 1 << 17;
        const LMA: u64 = 1 << 10;
        // This runs for every block translated, and most run in long mode: EFER first, one
        // register read. LMA implies paging, which implies CR0.PE (QEMU clears LMA when
        // paging goes off), so CR0 would say nothing more.
        if read("efer").is_some_and(|e| e & LMA != 0) {
            return Mode::Bits64;
        }
        let Some(cr0) = read("cr0") else {
            return Mode::Bits64;
        };
        // Real mode, or virtual-8086 mode (which long mode has not: EFLAGS is read only
        // outside it).
        if cr0 & PE == 0 || read("eflags").is_some_and(|f| f & VM != 0) {
            Mode::Bits16
        } else {
            Mode::Bits32
        }
    }

    fn call_lookbehind(&self) -> usize {
        MAX_INSN
    }

    /// Decoding backwards is ambiguous on x86: this takes the first length (in the order of
    /// [`CALL_LENGTHS`]) at which the bytes before `pc` are a call of exactly that length.
    /// Bytes that only look like a call (the tail of a longer instruction) can make a false
    /// landing: harmless, since a landing's callback fires only when a return is pending,
    /// and the block it starts is then where that return went. A call preceded by prefixes
    /// may be found without them (`41 ff d3`, `call *%r11`, as `ff d3`): the site's address
    /// is then a byte or two late, which nothing depends on.
    fn call_ending_at(&self, mode: Mode, pc: u64, before: &[u8]) -> Option<CallSite> {
        CALL_LENGTHS
            .iter()
            // This runs for every block translated: one byte rules out most lengths before
            // decoding them.
            .filter(|&&len| {
                let first = before.len().checked_sub(len).map(|at| before[at]);
                first.is_some_and(|b| may_start_call(mode, b))
            })
            .find_map(|&len| call_of_len(self, mode, pc, before, len))
    }

    fn gpr_name(&self, n: u8) -> String {
        const NAMES: [&str; 8] = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp"];
        match NAMES.get(n as usize) {
            Some(name) => name.to_string(),
            None => format!("r{n}"),
        }
    }

    /// RBP: `push %rbp; mov %rsp, %rbp` leaves the caller's RBP at `[rbp]` and the return
    /// address at `[rbp + 8]` (the default frame record).
    fn frame_pointer(&self) -> u8 {
        RBP
    }

    fn thunk(&self, mode: Mode, entry: &[u8]) -> Option<Thunk> {
        Self::thunk_at(mode, entry)
    }

    fn thunk_fetch_len(&self) -> usize {
        24
    }

    /// The code segment selector: its low two bits are the current privilege level in
    /// protected and long mode (in real mode the CPU runs at ring 0 whatever CS holds; a
    /// real-mode CS with low bits set reads as another ring).
    fn status_register(&self) -> &'static str {
        "cs"
    }

    fn exception_level(&self, status: u64) -> Level {
        Level((status & 3) as u8)
    }

    /// IRET pops its target from the stack: no register holds it.
    fn exception_link_register(&self, _level: Level) -> Option<&'static str> {
        None
    }

    /// IRET pops the code segment it returns to from the stack (after RIP): no register
    /// holds it.
    fn saved_status_register(&self, _level: Level) -> Option<&'static str> {
        None
    }

    /// The vector is not visible to plugins: it comes from the trapping instruction or the
    /// IDT ([`Isa::trap_syndrome`], [`Isa::vector_syndrome`]).
    fn syndrome_register(&self, _level: Level) -> Option<&'static str> {
        None
    }

    /// `syndrome`: [`syndrome`]'s vector (and length), named as Linux names the handlers.
    fn exception_kind(&self, what: Discontinuity, syndrome: Option<u64>) -> ExceptionKind {
        use ExceptionKind as K;
        match what {
            Discontinuity::Interrupt => K::Irq,
            Discontinuity::HostCall => K::Other,
            Discontinuity::Exception => {
                let Some(s) = syndrome else {
                    return K::Other;
                };
                // Raised by an instruction of its own (`INT n` whatever its number: a BIOS
                // call is `INT 10h`), or by a fault.
                let trap = s >> TRAP_LEN_SHIFT != 0;
                match s & VECTOR_MASK {
                    SYSCALL_VECTOR | 0x80 if trap => K::Svc,
                    0 => K::DivideError,
                    1 => K::Debug,
                    2 => K::Nmi,
                    3 => K::Int3,
                    _ if trap => K::SoftInt,
                    6 => K::InvalidOp,
                    7 => K::DeviceNotAvailable,
                    8 => K::DoubleFault,
                    13 => K::GeneralProtection,
                    14 => K::PageFault,
                    18 => K::MachineCheck,
                    _ => K::Other,
                }
            }
        }
    }

    /// A trap (`INT n`, `INT3`, `SYSCALL`) returns past the instruction that raised it; a
    /// fault or an interrupt to the instruction QEMU reported.
    fn exception_resume_pc(&self, what: Discontinuity, syndrome: Option<u64>, from_pc: u64) -> u64 {
        match (what, syndrome) {
            (Discontinuity::Exception, Some(s)) => from_pc.wrapping_add(s >> TRAP_LEN_SHIFT),
            _ => from_pc,
        }
    }

    /// IDT gates: 16 bytes in long mode, 8 in protected mode; real mode's vectors are 4-byte
    /// `offset:segment` pairs.
    fn vector_entry_size(&self, mode: Mode) -> Option<usize> {
        Some(match mode {
            Mode::Bits64 => 16,
            Mode::Bits32 => 8,
            Mode::Bits16 => 4,
        })
    }

    /// `lidt m` (0F 01 /3, a memory operand); with a 16-bit operand size it keeps 24 bits
    /// of the base.
    fn loads_vector_table(&self, mode: Mode, bytes: &[u8]) -> Option<u64> {
        let (p, i) = prefixes(mode, bytes);
        if !matches!(bytes.get(i..i + 3)?, [0x0f, 0x01, m] if m >> 6 != 3 && (m >> 3) & 7 == 3) {
            return None;
        }
        let op16 = mode != Mode::Bits64 && ((mode == Mode::Bits16) != p.operand_size);
        Some(if op16 { 0xff_ffff } else { u64::MAX })
    }

    /// `lretq` (REX.W CB, CA imm16) in 64-bit code.
    fn is_far_return64(&self, mode: Mode, bytes: &[u8]) -> bool {
        let (p, i) = prefixes(mode, bytes);
        mode == Mode::Bits64 && p.rex_w() && matches!(bytes.get(i), Some(0xcb | 0xca))
    }

    fn trap_syndrome(&self, mode: Mode, insn: &[u8]) -> Option<u64> {
        let (_, i) = prefixes(mode, insn);
        let (vector, len) = match insn.get(i..)? {
            [0xcc, ..] => (3, 1),
            [0xf1, ..] => (1, 1),
            [0xce, ..] if mode != Mode::Bits64 => (4, 1),
            [0xcd, n, ..] => (u64::from(*n), 2),
            [0x0f, 0x05 | 0x34, ..] => (SYSCALL_VECTOR, 2),
            _ => return None,
        };
        Some(syndrome(vector, i + len))
    }

    /// 64-bit `SYSCALL`: QEMU's system-mode helper loads LSTAR into RIP and ring 0 into CS
    /// itself, with no exception raised (no discontinuity report; measured on 10.2.2, where
    /// a Linux guest's system calls showed no `[svc]`), unlike `INT n`. `SYSENTER` (32-bit
    /// code) is left out: it returns wherever the caller's SYSEXIT registers say.
    fn unreported_system_call(&self, mode: Mode, insn: &[u8]) -> Option<(usize, Level)> {
        let (_, i) = prefixes(mode, insn);
        match insn.get(i..)? {
            [0x0f, 0x05, ..] if mode == Mode::Bits64 => Some((i + 2, Level(0))),
            _ => None,
        }
    }

    fn vector_syndrome(&self, mode: Mode, table: &[u8], handler: u64) -> Option<u64> {
        let size = self.vector_entry_size(mode)?;
        let vector = table.chunks_exact(size).position(|e| {
            let offset = |lo: usize, hi: usize| {
                u64::from(u16::from_le_bytes([e[lo], e[lo + 1]]))
                    | u64::from(u16::from_le_bytes([e[hi], e[hi + 1]])) << 16
            };
            // Gates must be present (type byte bit 7); a real-mode vector is a far pointer.
            match size {
                16 => {
                    e[5] & 0x80 != 0
                        && offset(0, 6)
                            | u64::from(u32::from_le_bytes([e[8], e[9], e[10], e[11]])) << 32
                            == handler
                }
                8 => e[5] & 0x80 != 0 && offset(0, 6) == handler,
                _ => {
                    let off = u64::from(u16::from_le_bytes([e[0], e[1]]));
                    let seg = u64::from(u16::from_le_bytes([e[2], e[3]]));
                    (seg << 4) + off == handler
                }
            }
        })?;
        Some(syndrome(vector as u64, 0))
    }

    /// A higher ring.
    fn drops_privilege(&self, from: Level, to: Level) -> bool {
        to.0 > from.0
    }

    /// `saved`: the code segment selector returned to (its RPL is the ring).
    fn return_level(&self, _from: Level, saved: u64, _security: Option<u64>) -> Level {
        Level((saved & 3) as u8)
    }

    /// arch/x86/entry/syscalls/syscall_64.tbl; gdb names the stack pointer `rsp`; the
    /// kernel's `struct sigaction` starts with `sa_handler` (then flags, restorer, mask); a
    /// delivered handler starts as if called from the restorer: the return address on top of
    /// the stack, the signal number in rdi.
    fn linux_user(&self) -> LinuxUser {
        LinuxUser {
            openat: 257,
            close: 3,
            mmap: 9,
            munmap: 11,
            execve: 59,
            stack_pointer: "rsp",
            rt_sigaction: 13,
            rt_sigreturn: 15,
            sigaction_handler: 0,
            link: LinkSlot::StackTop("rsp"),
            first_argument: "rdi",
        }
    }

    /// `mov %reg, %rsp` (89 /r or 8B /r, 64-bit operands) from any register but RBP and
    /// RBX, whose copies into RSP restore a frame: an epilogue's (RBP), and ld.so's lazy
    /// binding trampoline (`_dl_runtime_resolve_*` keeps its entry RSP in RBX and leaves by
    /// `mov %rbx,%rsp; … jmp *%r11` into the function it resolved, a tail call, not an
    /// unwind). glibc's `__longjmp` switches with `mov %r8,%rsp`, libgcc's handler
    /// installation with `mov %rcx,%rsp`.
    fn switches_stack(&self, mode: Mode, bytes: &[u8]) -> bool {
        if mode != Mode::Bits64 {
            return false;
        }
        let (p, i) = prefixes(mode, bytes);
        let (Some(&op), Some(&m)) = (bytes.get(i), bytes.get(i + 1)) else {
            return false;
        };
        if !p.rex_w() || m >> 6 != 3 {
            return false;
        }
        let reg = ((m >> 3) & 7) | ((p.rex & 4) << 1);
        let rm = (m & 7) | p.rex_b();
        let (dst, src) = match op {
            0x89 => (rm, reg),
            0x8b => (reg, rm),
            _ => return false,
        };
        gpr(dst) == RSP && ![RBP, RBX, RSP].contains(&gpr(src))
    }

    /// JMP rel8 (EB) and rel16/rel32 (E9).
    fn direct_jump(&self, mode: Mode, pc: u64, bytes: &[u8]) -> Option<u64> {
        let (p, i) = prefixes(mode, bytes);
        let op16 = operand16(mode, &p);
        let size = match *bytes.get(i)? {
            0xeb => 1,
            0xe9 if op16 => 2,
            0xe9 => 4,
            _ => return None,
        };
        let len = i + 1 + size;
        let rel = signed(bytes, i + 1, size)?;
        let target = pc.wrapping_add(len as u64).wrapping_add(rel as u64);
        Some(match mode {
            Mode::Bits64 => target,
            _ if op16 => target & 0xffff,
            _ => target & 0xffff_ffff,
        })
    }

    /// `jmp *r/m` (FF /4; not the far FF /5).
    fn indirect_jump(&self, mode: Mode, bytes: &[u8]) -> bool {
        let (_, i) = prefixes(mode, bytes);
        matches!((bytes.get(i), bytes.get(i + 1)), (Some(0xff), Some(m)) if (m >> 3) & 7 == 4)
    }

    /// `jmp *%reg` (FF /4, register operand).
    fn register_jump(&self, mode: Mode, bytes: &[u8]) -> Option<u8> {
        let (p, i) = prefixes(mode, bytes);
        let (&op, &m) = (bytes.get(i)?, bytes.get(i + 1)?);
        (op == 0xff && (m >> 3) & 7 == 4 && m >> 6 == 3).then(|| gpr((m & 7) | p.rex_b()))
    }

    /// `movslq (%B,%I,4),%R` (REX.W 63 /r through a SIB with scale 4), `add %B,%R` (REX.W
    /// 01 or 03, registers only), `jmp *%R`: how GCC and Clang write a position-independent
    /// switch (and glibc's string functions their jump tables).
    fn relative_table_jump(&self, mode: Mode, before: [&[u8]; 2], bytes: &[u8]) -> bool {
        if mode != Mode::Bits64 {
            return false;
        }
        let Some(r) = self.register_jump(mode, bytes) else {
            return false;
        };
        // The 64-bit ModRM fields (reg, rm) and what follows, of a REX.W instruction `op`.
        let fields = |b: &[u8], op: u8| {
            let (p, i) = prefixes(mode, b);
            match (b.get(i), b.get(i + 1)) {
                (Some(&o), Some(&m)) if o == op && p.rex_w() => Some((
                    p.rex_b(),
                    (m >> 3) & 7 | p.rex_r(),
                    m & 7 | p.rex_b(),
                    m >> 6,
                    b.get(i + 2).copied(),
                )),
                _ => None,
            }
        };
        // add %B,%R: 01 /r (reg B, rm R) or 03 /r (reg R, rm B).
        let base = match (fields(before[1], 0x01), fields(before[1], 0x03)) {
            (Some((_, b, dst, 3, _)), _) if gpr(dst) == r => b,
            (_, Some((_, dst, b, 3, _))) if gpr(dst) == r => b,
            _ => return false,
        };
        // movslq (%B,%I,4),%R: a SIB (rm 100, mod not 3) with scale 4 and base B.
        match fields(before[0], 0x63) {
            Some((rex_b, dst, rm, md, Some(sib))) if rm & 7 == 4 && md != 3 && gpr(dst) == r => {
                sib >> 6 == 2 && !(md == 0 && sib & 7 == 5) && (sib & 7 | rex_b) == base
            }
            _ => false,
        }
    }

    fn level_name(&self, level: Level) -> String {
        format!("ring{}", level.0)
    }

    /// FS and GS by their base registers (QEMU shows `fs_base`/`gs_base`); the others have
    /// base `selector * 16` in real mode (CR0.PE clear) and, in protected mode, a
    /// descriptor's base that QEMU does not show: flat, 0.
    fn segment_base(
        &self,
        segment: &'static str,
        read: &mut dyn FnMut(&'static str) -> Option<u64>,
    ) -> Option<u64> {
        match segment {
            "fs" => read("fs_base"),
            "gs" => read("gs_base"),
            _ if read("cr0")? & 1 == 0 => Some(read(segment)? << 4),
            _ => Some(0),
        }
    }

    /// `mov %reg, %gs:addr` (64-bit), with `addr` absolute (`%gs:0x1fb80`) or RIP-relative
    /// (`%gs:disp(%rip)`, as GCC writes `this_cpu_write`): Linux's per-CPU variables are at
    /// GS's base plus their link address in the per-CPU section.
    fn per_cpu_store(&self, mode: Mode, pc: u64, bytes: &[u8]) -> Option<(u8, u64)> {
        if mode != Mode::Bits64 {
            return None;
        }
        let (p, i) = prefixes(mode, bytes);
        if p.segment != Some("gs") || !p.rex_w() || *bytes.get(i)? != 0x89 {
            return None;
        }
        let src = gpr((bytes.get(i + 1)? >> 3) & 7 | (p.rex & 4) << 1);
        match modrm(mode, &p, bytes, i + 1)? {
            (
                Operand::Memory {
                    op,
                    rip_relative: true,
                },
                len,
            ) => Some((
                src,
                pc.wrapping_add(len as u64).wrapping_add(op.disp as u64),
            )),
            (
                Operand::Memory {
                    op,
                    rip_relative: false,
                },
                _,
            ) if op.base.is_none() && op.index.is_none() => Some((src, op.disp as u64)),
            _ => None,
        }
    }

    /// GS's base, as QEMU's gdb stub names it: in the kernel (after `swapgs`) the per-CPU
    /// area's.
    fn task_slot_symbols(&self) -> &'static [&'static str] {
        &["current_task", "pcpu_hot"]
    }

    fn per_cpu_base_register(&self) -> Option<&'static str> {
        Some("gs_base")
    }

    /// A task pointer is a kernel address (the upper half); user values never are.
    fn is_task_pointer(&self, value: u64) -> bool {
        value >= 0xffff_8000_0000_0000
    }

    /// IRET pops the instruction pointer and then the code segment off the stack, in slots
    /// of its operand size (2, 4 or 8 bytes); in 16-bit code (real mode) the stack is at
    /// `ss * 16 + sp` and the target at `cs * 16 + ip`, elsewhere segments are flat. SYSRET
    /// returns to RCX and SYSEXIT to RDX, in ring 3. RSM (leaving System Management Mode)
    /// restores a state saved in SMRAM: unknown.
    /// A delivery that ends in 16-bit code (real or virtual-8086 mode) loads the handler's
    /// code segment as `selector << 4`, so the handler's linear address is below
    /// [`SEGMENTED_END`]: anywhere else (every kernel's handlers) no register is read.
    fn exception_frame(
        &self,
        handler: u64,
        read: &mut dyn FnMut(&'static str) -> Option<u64>,
    ) -> Option<u64> {
        if handler >= SEGMENTED_END {
            return None;
        }
        match self.current_mode(read) {
            Mode::Bits16 => Some((read("ss")? << 4) + (read("rsp")? & 0xffff)),
            _ => None,
        }
    }

    fn exception_return_to(
        &self,
        mode: Mode,
        insn: &[u8],
        read: &mut dyn FnMut(&'static str) -> Option<u64>,
        memory: &mut dyn FnMut(u64, usize) -> Option<u64>,
    ) -> Option<Option<ExceptionReturnTo>> {
        let (p, i) = prefixes(mode, insn);
        let wide = |v: u64| match (mode, p.rex_w()) {
            (Mode::Bits64, true) => v,
            _ => v & 0xffff_ffff,
        };
        let ring3 = |target: u64| ExceptionReturnTo {
            target,
            level: Level(3),
            frame: None,
        };
        Some(match (insn.get(i), insn.get(i + 1)) {
            (Some(0xcf), _) => (|| {
                let slot = match mode {
                    Mode::Bits64 if p.rex_w() => 8,
                    Mode::Bits16 if !p.operand_size => 2,
                    Mode::Bits16 => 4,
                    _ if p.operand_size => 2,
                    _ => 4,
                };
                let sp = read("rsp")?;
                let stack = match mode {
                    Mode::Bits16 => (read("ss")? << 4) + (sp & 0xffff),
                    Mode::Bits32 => sp & 0xffff_ffff,
                    Mode::Bits64 => sp,
                };
                let ip = memory(stack, slot)?;
                let cs = memory(stack.wrapping_add(slot as u64), 2)?;
                Some(match mode {
                    Mode::Bits16 => ExceptionReturnTo {
                        target: (cs << 4) + (ip & 0xffff),
                        level: Level(0),
                        frame: Some(stack),
                    },
                    _ => ExceptionReturnTo {
                        target: ip,
                        level: Level((cs & 3) as u8),
                        frame: None,
                    },
                })
            })(),
            (Some(0x0f), Some(0x07)) => read("rcx").map(|t| ring3(wide(t))),
            (Some(0x0f), Some(0x35)) => read("rdx").map(|t| ring3(wide(t))),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_handler_in_segmented_memory_reads_its_frame() {
        let mut reads = Vec::new();
        let mut frame = |handler: u64| {
            X86_64.exception_frame(handler, &mut |name| {
                reads.push(name);
                match name {
                    "efer" | "cr0" | "eflags" => Some(0),
                    "ss" => Some(0x0700),
                    "rsp" => Some(0x1_fff0),
                    _ => None,
                }
            })
        };
        // A kernel's handler: no register read.
        assert_eq!(frame(0xffff_ffff_8100_0000), None);
        assert_eq!(frame(SEGMENTED_END), None);
        // SeaBIOS's, in real mode (CR0.PE clear): SS:SP, 16-bit.
        assert_eq!(frame(0xf_e6f2), Some(0x7000 + 0xfff0));
        assert_eq!(reads, ["efer", "cr0", "ss", "rsp"]);
    }

    #[test]
    fn indirect_jumps_are_jmp_through_register_or_memory() {
        let j = |b: &[u8]| X86_64.indirect_jump(Mode::Bits64, b);
        assert!(j(&[0x41, 0xff, 0xe3])); // jmp *%r11
        assert!(j(&[0x3e, 0xff, 0xe0])); // notrack jmp *%rax
        assert!(j(&[0xff, 0x25, 0, 0, 0, 0])); // jmp *0(%rip)
        assert!(!j(&[0xff, 0xd0])); // call *%rax
        assert!(!j(&[0xff, 0x2d, 0, 0, 0, 0])); // ljmp *0(%rip)
        assert!(!j(&[0xc3])); // ret
    }

    #[test]
    fn relative_table_jumps_are_switches() {
        let t = |a: &[u8], b: &[u8], j: &[u8]| X86_64.relative_table_jump(Mode::Bits64, [a, b], j);
        let movslq = [0x48, 0x63, 0x04, 0x82]; // movslq (%rdx,%rax,4),%rax
        let add = [0x48, 0x01, 0xd0]; // add %rdx,%rax
        let jmp = [0xff, 0xe0]; // jmp *%rax
        assert!(t(&movslq, &add, &jmp));
        assert!(t(&movslq, &[0x48, 0x03, 0xc2], &jmp)); // add %rdx,%rax (03 form)
        assert!(t(&movslq, &add, &[0x3e, 0xff, 0xe0])); // notrack jmp *%rax
                                                        // glibc: movslq (%r11,%rdx,4),%rcx; add %r11,%rcx; jmp *%rcx
        assert!(t(
            &[0x4b, 0x63, 0x0c, 0x93],
            &[0x4c, 0x01, 0xd9],
            &[0xff, 0xe1]
        ));
        assert!(!t(&movslq, &add, &[0xff, 0xe1])); // jmp *%rcx: another register
        assert!(!t(&movslq, &[0x48, 0x01, 0xc8], &jmp)); // add %rcx,%rax: another base
        assert!(!t(&[0x48, 0x8b, 0x04, 0xc2], &add, &jmp)); // mov (%rdx,%rax,8),%rax
        assert!(!t(&[0x48, 0x63, 0x04, 0xc2], &add, &jmp)); // scale 8
        assert!(!t(&movslq, &add, &[0xff, 0x20])); // jmp *(%rax)
        assert!(!t(&[], &add, &jmp));
    }

    #[test]
    fn direct_jumps_are_jmp_rel() {
        let at = |b: &[u8]| X86_64.direct_jump(Mode::Bits64, 0x1000, b);
        assert_eq!(at(&[0xe9, 0x00, 0x01, 0x00, 0x00]), Some(0x1105));
        assert_eq!(at(&[0xeb, 0xfe]), Some(0x1000));
        assert_eq!(at(&[0xf2, 0xe9, 0x00, 0x00, 0x00, 0x00]), Some(0x1006)); // bnd jmp
        assert_eq!(at(&[0xe8, 0x00, 0x01, 0x00, 0x00]), None); // call
        assert_eq!(at(&[0x74, 0x02]), None); // je: conditional
        assert_eq!(at(&[0xe9, 0x00]), None); // truncated
    }

    use super::super::test_asm::{assemble, bytes_through, Insn, X86_64 as BINUTILS};
    use super::*;

    #[test]
    fn stack_switches_and_register_jumps() {
        let isa = X86_64;
        let sw = |b: &[u8]| isa.switches_stack(Mode::Bits64, b);
        assert!(sw(&[0x4c, 0x89, 0xc4])); // mov %r8,%rsp (glibc __longjmp)
        assert!(sw(&[0x48, 0x89, 0xcc])); // mov %rcx,%rsp (libgcc eh_return)
        assert!(sw(&[0x48, 0x8b, 0xe0])); // mov %rax,%rsp (8B form)
        assert!(!sw(&[0x48, 0x89, 0xec])); // mov %rbp,%rsp: an epilogue
        assert!(!sw(&[0x48, 0x89, 0xdc])); // mov %rbx,%rsp: ld.so's _dl_runtime_resolve
        assert!(!sw(&[0x48, 0x89, 0xc5])); // mov %rax,%rbp
        assert!(!sw(&[0x89, 0xcc])); // mov %ecx,%esp: not 64-bit
        assert!(!sw(&[0x48, 0x8b, 0x61, 0x08])); // mov 8(%rcx),%rsp: from memory
        assert!(!isa.switches_stack(Mode::Bits32, &[0x89, 0xcc]));
        let jmp = |b: &[u8]| isa.register_jump(Mode::Bits64, b);
        assert_eq!(jmp(&[0xff, 0xe2]), Some(3)); // jmp *%rdx (QEMU's rdx is 3)
        assert_eq!(jmp(&[0xff, 0xe1]), Some(2)); // jmp *%rcx
        assert_eq!(jmp(&[0x41, 0xff, 0xe3]), Some(11)); // jmp *%r11
        assert_eq!(jmp(&[0x3e, 0xff, 0xe0]), Some(0)); // notrack jmp *%rax
        assert_eq!(jmp(&[0xff, 0xd0]), None); // call *%rax
        assert_eq!(jmp(&[0xff, 0x25, 0, 0, 0, 0]), None); // jmp *0(%rip): memory
        assert_eq!(
            super::super::isa(super::super::Arch::Aarch64)
                .register_jump(Mode::Bits64, &[0xc0, 0x03, 0x1f, 0xd6]),
            None
        );
    }

    /// What a listing line must classify as (addresses from the assembled listing).
    enum E {
        Direct(u64),
        Reg(u8),
        Mem(MemOperand),
        /// RIP-relative: the absolute address is the next instruction's plus this.
        MemRip(i64, MemOperand),
        Ret,
        Eret,
        Trap,
        Other,
    }

    fn mem(
        base: Option<u8>,
        index: Option<u8>,
        scale: u8,
        disp: i64,
        addr_bits: u8,
        size: u8,
    ) -> MemOperand {
        MemOperand {
            base,
            index,
            scale,
            disp,
            addr_bits,
            size,
            far: false,
            segment: None,
        }
    }

    fn seg(op: MemOperand, segment: &'static str) -> MemOperand {
        MemOperand {
            segment: Some(segment),
            ..op
        }
    }

    fn far(op: MemOperand) -> MemOperand {
        MemOperand { far: true, ..op }
    }

    fn expected(e: &E, insn: &Insn) -> InsnKind {
        let next = insn.addr + insn.bytes.len() as u64;
        let call = |target| InsnKind::Call {
            target,
            ret_addr: next,
        };
        match e {
            E::Direct(t) => call(Target::Direct(*t)),
            E::Reg(r) => call(Target::Register(*r)),
            E::Mem(op) => call(Target::Memory(*op)),
            E::MemRip(d, op) => {
                let abs = next.wrapping_add(*d as u64);
                let abs = if op.addr_bits == 32 {
                    abs & 0xffff_ffff
                } else {
                    abs
                };
                call(Target::Memory(MemOperand {
                    disp: abs as i64,
                    ..*op
                }))
            }
            E::Ret => InsnKind::Return,
            E::Eret => InsnKind::ExceptionReturn,
            E::Trap => InsnKind::Trap,
            E::Other => InsnKind::Other,
        }
    }

    /// Assembles the lines in code of width `mode` at `base`; checks each line's class and,
    /// for each call, that the bytes before its return address (the listing's own code up
    /// to it) show the call ending there.
    fn check(mode: Mode, base: u64, cases: &[(&str, E)]) {
        let header = match mode {
            Mode::Bits16 => ".code16",
            Mode::Bits32 => ".code32",
            Mode::Bits64 => ".code64",
        };
        let lines: Vec<&str> = cases.iter().map(|c| c.0).collect();
        let listing = assemble(&BINUTILS, base, header, &lines);
        for (insn, (_, e)) in listing.iter().zip(cases) {
            let want = expected(e, insn);
            let got = X86_64.classify(mode, insn.addr, &insn.bytes);
            assert_eq!(got, want, "{} ({:02x?})", insn.source, insn.bytes);
            // With trailing bytes (the next instruction) the class is the same.
            let mut longer = insn.bytes.clone();
            longer.extend_from_slice(&[0x90; 16]);
            assert_eq!(X86_64.classify(mode, insn.addr, &longer), want);
            // One byte short, a call is nothing (its operand is cut).
            if let InsnKind::Call { target, ret_addr } = want {
                let cut = &insn.bytes[..insn.bytes.len() - 1];
                assert!(
                    !matches!(X86_64.classify(mode, insn.addr, cut),
                        InsnKind::Call { ret_addr: r, .. } if r == ret_addr),
                    "{} cut short",
                    insn.source
                );
                let before = bytes_through(&listing, base, insn);
                let window = &before[before.len().saturating_sub(MAX_INSN)..];
                let site = X86_64.call_ending_at(mode, ret_addr, window);
                let direct = match target {
                    Target::Direct(t) => Some(t),
                    _ => None,
                };
                let site = site.unwrap_or_else(|| panic!("no call before {}", insn.source));
                assert_eq!(site.target, direct, "{}", insn.source);
                // Found exactly, or without some of its prefixes.
                assert!(
                    site.pc >= insn.addr && site.pc < ret_addr - 1,
                    "{}: call found at {:#x}, not {:#x}",
                    insn.source,
                    site.pc,
                    insn.addr
                );
            }
        }
    }

    const RAX: u8 = 0;
    const RBX: u8 = 1;
    const RCX: u8 = 2;
    const RDX: u8 = 3;
    const RSI: u8 = 4;
    const RDI: u8 = 5;

    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn calls_in_64_bit_code() {
        let m = |base, index, scale, disp| mem(base, index, scale, disp, 64, 8);
        check(
            Mode::Bits64,
            0xffff_ffff_8100_0000,
            &[
                ("call 0xffffffff81234560", E::Direct(0xffff_ffff_8123_4560)),
                ("call 0xffffffff80fff000", E::Direct(0xffff_ffff_80ff_f000)),
                (
                    "bnd call 0xffffffff81000100",
                    E::Direct(0xffff_ffff_8100_0100),
                ),
                ("call *%rax", E::Reg(RAX)),
                ("call *%rbx", E::Reg(RBX)),
                ("call *%rcx", E::Reg(RCX)),
                ("call *%rdx", E::Reg(RDX)),
                ("call *%rsi", E::Reg(RSI)),
                ("call *%rdi", E::Reg(RDI)),
                ("call *%rbp", E::Reg(RBP)),
                ("call *%rsp", E::Reg(RSP)),
                ("call *%r8", E::Reg(8)),
                ("call *%r11", E::Reg(11)),
                ("call *%r15", E::Reg(15)),
                ("notrack call *%rax", E::Reg(RAX)),
                ("notrack call *%r11", E::Reg(11)),
                // The operand-size prefix does not shorten a near call in 64-bit mode.
                ("callw *%ax", E::Reg(RAX)),
                ("call *(%rax)", E::Mem(m(Some(RAX), None, 1, 0))),
                ("call *0x8(%rbx)", E::Mem(m(Some(RBX), None, 1, 8))),
                ("call *-0x80(%rbp)", E::Mem(m(Some(RBP), None, 1, -0x80))),
                (
                    "call *0x12345678(%rcx)",
                    E::Mem(m(Some(RCX), None, 1, 0x1234_5678)),
                ),
                (
                    "call *-0x1000(%rdx)",
                    E::Mem(m(Some(RDX), None, 1, -0x1000)),
                ),
                ("call *(%rsp)", E::Mem(m(Some(RSP), None, 1, 0))),
                ("call *0x10(%rsp)", E::Mem(m(Some(RSP), None, 1, 0x10))),
                ("call *(%r12)", E::Mem(m(Some(12), None, 1, 0))),
                ("call *(%r13)", E::Mem(m(Some(13), None, 1, 0))),
                ("call *0x18(%r14)", E::Mem(m(Some(14), None, 1, 0x18))),
                (
                    "call *0x10(%rax,%rbx,4)",
                    E::Mem(m(Some(RAX), Some(RBX), 4, 0x10)),
                ),
                ("call *(%rax,%r9,8)", E::Mem(m(Some(RAX), Some(9), 8, 0))),
                ("call *(%r8,%r12,2)", E::Mem(m(Some(8), Some(12), 2, 0))),
                ("call *(%rbp,%rsi)", E::Mem(m(Some(RBP), Some(RSI), 1, 0))),
                // The kernel's system-call table: no base, an index, a sign-extended disp32.
                (
                    "call *0xffffffff82000000(,%rax,8)",
                    E::Mem(m(None, Some(RAX), 8, 0xffff_ffff_8200_0000_u64 as i64)),
                ),
                ("call *(,%r13,1)", E::Mem(m(None, Some(13), 1, 0))),
                ("call *0x1000", E::Mem(m(None, None, 1, 0x1000))),
                ("call *0x1234(%rip)", E::MemRip(0x1234, m(None, None, 1, 0))),
                ("call *-0x10(%rip)", E::MemRip(-0x10, m(None, None, 1, 0))),
                (
                    "notrack call *0x40(%rip)",
                    E::MemRip(0x40, m(None, None, 1, 0)),
                ),
                ("call *%fs:0x28", E::Mem(seg(m(None, None, 1, 0x28), "fs"))),
                (
                    "call *%gs:(%rax)",
                    E::Mem(seg(m(Some(RAX), None, 1, 0), "gs")),
                ),
                (
                    "call *%gs:0x10(%r12)",
                    E::Mem(seg(m(Some(12), None, 1, 0x10), "gs")),
                ),
                // Other segments have no base in 64-bit mode.
                ("cs call *(%rax)", E::Mem(m(Some(RAX), None, 1, 0))),
                ("notrack call *(%rax)", E::Mem(m(Some(RAX), None, 1, 0))),
                ("notrack call *0x8(%r11)", E::Mem(m(Some(11), None, 1, 8))),
                (
                    "addr32 call *(%eax)",
                    E::Mem(mem(Some(RAX), None, 1, 0, 32, 8)),
                ),
                (
                    "addr32 call *0x4(%r8d,%ecx,2)",
                    E::Mem(mem(Some(8), Some(RCX), 2, 4, 32, 8)),
                ),
                (
                    "call *0x10(%eip)",
                    E::MemRip(0x10, mem(None, None, 1, 0, 32, 8)),
                ),
                (
                    "lcall *(%rax)",
                    E::Mem(far(mem(Some(RAX), None, 1, 0, 64, 4))),
                ),
                (
                    "rex64 lcall *(%rax)",
                    E::Mem(far(mem(Some(RAX), None, 1, 0, 64, 8))),
                ),
                (
                    "lcallw *(%rax)",
                    E::Mem(far(mem(Some(RAX), None, 1, 0, 64, 2))),
                ),
                ("ret", E::Ret),
                ("ret $0x10", E::Ret),
                ("rep ret", E::Ret),
                ("bnd ret", E::Ret),
                ("lretl", E::Ret),
                ("lretl $8", E::Ret),
                ("lretq", E::Ret),
                ("iretq", E::Eret),
                ("iretl", E::Eret),
                ("iretw", E::Eret),
                ("sysretq", E::Eret),
                ("sysretl", E::Eret),
                ("sysexitl", E::Eret),
                ("sysexitq", E::Eret),
                ("rsm", E::Eret),
                ("syscall", E::Trap),
                ("sysenter", E::Trap),
                ("int $0x80", E::Trap),
                ("int3", E::Trap),
                ("int1", E::Trap),
                ("jmp *%rax", E::Other),
                ("jmp *(%rax)", E::Other),
                ("notrack jmp *(%rax,%rcx,8)", E::Other),
                ("jmp 0xffffffff81000000", E::Other),
                ("ljmp *(%rax)", E::Other),
                ("push (%rax)", E::Other),
                ("inc %eax", E::Other),
                ("decq (%rax)", E::Other),
                ("push %rbp", E::Other),
                ("mov %rsp, %rbp", E::Other),
                ("mov %rax, (%rsp)", E::Other),
                ("nop", E::Other),
                ("nopw 0x0(%rax,%rax,1)", E::Other),
                ("endbr64", E::Other),
                ("lfence", E::Other),
                ("pause", E::Other),
                ("ud2", E::Other),
                ("hlt", E::Other),
                ("movabs $0xe8e8e8e8e8e8e8e8, %rax", E::Other),
            ],
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn calls_in_32_bit_code() {
        let m = |base, index, scale, disp| mem(base, index, scale, disp, 32, 4);
        check(
            Mode::Bits32,
            0x0010_0000,
            &[
                ("call 0x00200000", E::Direct(0x0020_0000)),
                ("call 0x00000800", E::Direct(0x800)),
                ("call *%eax", E::Reg(RAX)),
                ("call *%ecx", E::Reg(RCX)),
                ("call *%edi", E::Reg(RDI)),
                ("call *%esp", E::Reg(RSP)),
                ("callw *%ax", E::Reg(RAX)),
                (
                    "call *0x8(%ebx)",
                    E::Mem(seg(m(Some(RBX), None, 1, 8), "ds")),
                ),
                // No RIP-relative addressing: mod 00, rm 101 is an absolute address.
                (
                    "call *0x12345678",
                    E::Mem(seg(m(None, None, 1, 0x1234_5678), "ds")),
                ),
                ("call *(%esp)", E::Mem(seg(m(Some(RSP), None, 1, 0), "ss"))),
                (
                    "call *0x8(%ebp)",
                    E::Mem(seg(m(Some(RBP), None, 1, 8), "ss")),
                ),
                (
                    "call *%cs:(%eax)",
                    E::Mem(seg(m(Some(RAX), None, 1, 0), "cs")),
                ),
                ("call *%fs:0x10", E::Mem(seg(m(None, None, 1, 0x10), "fs"))),
                (
                    "call *(%eax,%ecx,4)",
                    E::Mem(seg(m(Some(RAX), Some(RCX), 4, 0), "ds")),
                ),
                (
                    "call *0x10(,%esi,8)",
                    E::Mem(seg(m(None, Some(RSI), 8, 0x10), "ds")),
                ),
                (
                    "callw *(%eax)",
                    E::Mem(seg(mem(Some(RAX), None, 1, 0, 32, 2), "ds")),
                ),
                (
                    "addr16 call *(%bx,%si)",
                    E::Mem(seg(mem(Some(RBX), Some(RSI), 1, 0, 16, 4), "ds")),
                ),
                // A flat code segment: the far target is the offset.
                ("lcall $0x10, $0x12345", E::Direct(0x12345)),
                (
                    "lcall *(%eax)",
                    E::Mem(far(seg(m(Some(RAX), None, 1, 0), "ds"))),
                ),
                (
                    "lcallw *(%eax)",
                    E::Mem(far(seg(mem(Some(RAX), None, 1, 0, 32, 2), "ds"))),
                ),
                ("ret", E::Ret),
                ("retw", E::Ret),
                ("ret $4", E::Ret),
                ("lret", E::Ret),
                ("iret", E::Eret),
                ("sysexit", E::Eret),
                ("int $0x80", E::Trap),
                ("into", E::Trap),
                ("sysenter", E::Trap),
                ("syscall", E::Trap),
                // 0x48 is DEC EAX here, not a REX prefix.
                ("dec %eax", E::Other),
                ("jmp *%eax", E::Other),
                ("push %ebp", E::Other),
            ],
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn calls_in_16_bit_code() {
        // SeaBIOS's segment: real-mode linear addresses.
        let m =
            |base, index, disp, size, segment| seg(mem(base, index, 1, disp, 16, size), segment);
        check(
            Mode::Bits16,
            0xf_0000,
            &[
                ("call 0xf1234", E::Direct(0xf_1234)),
                ("call 0xf0002", E::Direct(0xf_0002)),
                // gcc -m16 code: 32-bit operands, rel32.
                ("calll 0xf2000", E::Direct(0xf_2000)),
                ("call *%ax", E::Reg(RAX)),
                ("call *%si", E::Reg(RSI)),
                ("calll *%eax", E::Reg(RAX)),
                (
                    "call *(%bx,%si)",
                    E::Mem(m(Some(RBX), Some(RSI), 0, 2, "ds")),
                ),
                (
                    "call *0x10(%bx,%di)",
                    E::Mem(m(Some(RBX), Some(RDI), 0x10, 2, "ds")),
                ),
                (
                    "call *0x10(%bp,%si)",
                    E::Mem(m(Some(RBP), Some(RSI), 0x10, 2, "ss")),
                ),
                (
                    "call *-0x2(%bp,%di)",
                    E::Mem(m(Some(RBP), Some(RDI), -2, 2, "ss")),
                ),
                ("call *(%si)", E::Mem(m(Some(RSI), None, 0, 2, "ds"))),
                (
                    "call *0x1234(%di)",
                    E::Mem(m(Some(RDI), None, 0x1234, 2, "ds")),
                ),
                ("call *0x1234", E::Mem(m(None, None, 0x1234, 2, "ds"))),
                ("call *(%bp)", E::Mem(m(Some(RBP), None, 0, 2, "ss"))),
                ("call *(%bx)", E::Mem(m(Some(RBX), None, 0, 2, "ds"))),
                ("calll *(%bx)", E::Mem(m(Some(RBX), None, 0, 4, "ds"))),
                ("call *%cs:(%bx)", E::Mem(m(Some(RBX), None, 0, 2, "cs"))),
                ("call *%es:8(%bp)", E::Mem(m(Some(RBP), None, 8, 2, "es"))),
                // 32-bit addressing in 16-bit code.
                (
                    "call *(%eax)",
                    E::Mem(seg(mem(Some(RAX), None, 1, 0, 32, 2), "ds")),
                ),
                (
                    "calll *0x8(%esp)",
                    E::Mem(seg(mem(Some(RSP), None, 1, 8, 32, 4), "ss")),
                ),
                // Real mode: selector * 16 + offset.
                ("lcall $0xf000, $0xe05b", E::Direct(0xf_e05b)),
                ("lcall $0xc000, $0x3", E::Direct(0xc_0003)),
                ("lcall *(%bx)", E::Mem(far(m(Some(RBX), None, 0, 2, "ds")))),
                ("lcalll *(%bx)", E::Mem(far(m(Some(RBX), None, 0, 4, "ds")))),
                ("ret", E::Ret),
                ("retl", E::Ret),
                ("lret", E::Ret),
                ("lretl", E::Ret),
                ("iret", E::Eret),
                ("int $0x10", E::Trap),
                ("int3", E::Trap),
                ("into", E::Trap),
                ("inc %ax", E::Other),
                ("jmp *%ax", E::Other),
                ("ljmp $0xf000, $0xe05b", E::Other),
            ],
        );
    }

    fn k(mode: Mode, pc: u64, bytes: &[u8]) -> InsnKind {
        X86_64.classify(mode, pc, bytes)
    }

    /// Forms the assemblers will not write.
    #[test]
    fn forms_by_hand() {
        let call = |t, r| InsnKind::Call {
            target: Target::Direct(t),
            ret_addr: r,
        };
        // 66 e8 rel32 in 64-bit mode: the prefix is ignored (Intel, QEMU).
        assert_eq!(
            k(Mode::Bits64, 0x1000, &[0x66, 0xe8, 0x10, 0, 0, 0]),
            call(0x1016, 0x1006)
        );
        // 66 e8 rel16 in 32-bit code: EIP is truncated to 16 bits.
        assert_eq!(
            k(Mode::Bits32, 0x1_0000, &[0x66, 0xe8, 0x00, 0x10]),
            call(0x1004, 0x1_0004)
        );
        // ptr16:32 does not exist in 64-bit mode; INTO neither.
        let lcall = [0x9a, 0x45, 0x23, 0x01, 0x00, 0x10, 0x00];
        assert_eq!(k(Mode::Bits64, 0, &lcall), InsnKind::Other);
        assert_eq!(k(Mode::Bits32, 0, &lcall), call(0x12345, 7));
        assert_eq!(k(Mode::Bits64, 0, &[0xce]), InsnKind::Other);
        // A REX prefix counts only right before the opcode: 41 66 ff d3 is call *%bx.
        let call_reg = |r, ret| InsnKind::Call {
            target: Target::Register(r),
            ret_addr: ret,
        };
        assert_eq!(
            k(Mode::Bits64, 0, &[0x41, 0x66, 0xff, 0xd3]),
            call_reg(RBX, 4)
        );
        assert_eq!(
            k(Mode::Bits64, 0, &[0x66, 0x41, 0xff, 0xd3]),
            call_reg(11, 4)
        );
        // Far calls through a register do not exist (#UD).
        assert_eq!(k(Mode::Bits64, 0, &[0xff, 0xd8]), InsnKind::Other);
        // Longer than 15 bytes: #GP.
        let mut long = vec![0x66; 14];
        long.extend([0xff, 0xd0]);
        assert_eq!(k(Mode::Bits64, 0, &long), InsnKind::Other);
        assert_eq!(
            k(Mode::Bits64, 0, &long[1..]),
            call_reg(RAX, 15),
            "15 bytes is the limit"
        );
        // Cut short.
        assert_eq!(k(Mode::Bits64, 0, &[0xe8, 0, 0]), InsnKind::Other);
        assert_eq!(k(Mode::Bits64, 0, &[0xff]), InsnKind::Other);
        assert_eq!(k(Mode::Bits64, 0, &[0xff, 0x14]), InsnKind::Other);
        assert_eq!(k(Mode::Bits64, 0, &[0x66]), InsnKind::Other);
        assert_eq!(k(Mode::Bits64, 0, &[]), InsnKind::Other);
        // The bytes copied from objdump of Debian's 6.1 kernel: call __x86_indirect_thunk_rax.
        assert_eq!(
            k(
                Mode::Bits64,
                0xffff_ffff_8100_1000,
                &[0xe8, 0x3b, 0x07, 0xe0, 0x00]
            ),
            call(0xffff_ffff_81e0_173b + 5, 0xffff_ffff_8100_1005)
        );
    }

    /// A thunk assembled from `lines` (which may name each other's labels `insn_<i>`).
    fn thunk_of(mode: Mode, lines: &[&str]) -> Option<Thunk> {
        let header = if mode == Mode::Bits64 {
            ".code64"
        } else {
            ".code32"
        };
        let listing = assemble(&BINUTILS, 0xffff_ffff_81e0_1740, header, lines);
        let mut entry: Vec<u8> = listing.iter().flat_map(|i| i.bytes.clone()).collect();
        entry.resize(X86_64.thunk_fetch_len(), 0xcc);
        X86_64.thunk(mode, &entry)
    }

    #[test]
    #[cfg_attr(miri, ignore = "runs the assembler")]
    fn linux_thunks() {
        // arch/x86/lib/retpoline.S, RETPOLINE reg: the speculation trap between the call and
        // the mov, then `ret` or (CONFIG_RETHUNK) `jmp __x86_return_thunk`.
        let retpoline = |reg: &'static str, ret: &'static str| {
            let mov = format!("mov %{reg}, (%rsp)");
            thunk_of(
                Mode::Bits64,
                &["call insn_4", "pause", "lfence", "jmp insn_1", &mov, ret],
            )
        };
        for (name, reg) in [
            ("rax", RAX),
            ("rbx", RBX),
            ("rbp", RBP),
            ("r11", 11),
            ("r15", 15),
        ] {
            assert_eq!(
                retpoline(name, "ret"),
                Some(Thunk::IndirectBranch { reg }),
                "{name}"
            );
            assert_eq!(
                retpoline(name, "jmp 0xffffffff81e01ef0"),
                Some(Thunk::IndirectBranch { reg }),
                "{name}"
            );
        }
        // i386's __x86_indirect_thunk_eax.
        assert_eq!(
            thunk_of(
                Mode::Bits32,
                &[
                    "call insn_4",
                    "pause",
                    "lfence",
                    "jmp insn_1",
                    "mov %eax, (%esp)",
                    "ret"
                ]
            ),
            Some(Thunk::IndirectBranch { reg: RAX })
        );
        // Patched by the kernel when retpolines are off.
        let branch = |reg| Some(Thunk::IndirectBranch { reg });
        assert_eq!(
            thunk_of(Mode::Bits64, &["lfence", "jmp *%rax", "int3"]),
            branch(RAX)
        );
        assert_eq!(thunk_of(Mode::Bits64, &["jmp *%r11", "int3"]), branch(11));
        assert_eq!(thunk_of(Mode::Bits64, &["jmp *%rdx"]), branch(RDX));
        // srso_safe_ret, and the same with an add.
        assert_eq!(
            thunk_of(Mode::Bits64, &["lea 0x8(%rsp), %rsp", "ret", "int3"]),
            Some(Thunk::ReturnForCaller)
        );
        assert_eq!(
            thunk_of(Mode::Bits64, &["add $8, %rsp", "ret"]),
            Some(Thunk::ReturnForCaller)
        );
        // Functions.
        for body in [
            &["ret", "int3"][..],
            &["push %rbp", "mov %rsp, %rbp"],
            &["call insn_2", "nop", "mov %rax, (%rsp)", "ret"],
            &[
                "call insn_4",
                "pause",
                "lfence",
                "jmp insn_1",
                "mov %rax, 8(%rsp)",
                "ret",
            ],
            &[
                "call insn_4",
                "pause",
                "lfence",
                "jmp insn_1",
                "mov %rax, (%rsp)",
                "nop",
            ],
            &["jmp *(%rax)"],
            &["lea 0x10(%rsp), %rsp", "ret"],
        ] {
            assert_eq!(thunk_of(Mode::Bits64, body), None, "{body:?}");
        }
    }

    #[test]
    fn thunks_of_debian_6_1() {
        // objdump of Debian's linux-image-6.1.0-56-cloud-amd64 (vmlinux-to-elf for symbols).
        let rax = [
            0xe8, 0x07, 0x00, 0x00, 0x00, // call __x86_indirect_thunk_array+0xc
            0xf3, 0x90, // pause
            0x0f, 0xae, 0xe8, // lfence
            0xeb, 0xf9, // jmp __x86_indirect_thunk_array+0x5
            0x48, 0x89, 0x04, 0x24, // mov %rax,(%rsp)
            0xe9, 0x9b, 0x07, 0x00, 0x00, // jmp __x86_return_thunk
            0x66, 0x66, 0x2e,
        ];
        let r11 = [
            0xe8, 0x07, 0x00, 0x00, 0x00, 0xf3, 0x90, 0x0f, 0xae, 0xe8, 0xeb, 0xf9, //
            0x4c, 0x89, 0x1c, 0x24, // mov %r11,(%rsp)
            0xe9, 0x3b, 0x06, 0x00, 0x00, 0x66, 0x66, 0x2e,
        ];
        let srso_safe_ret = [0x48, 0x8d, 0x64, 0x24, 0x08, 0xc3, 0xcc, 0xcc];
        let return_thunk = [0xc3, 0xcc, 0xcc, 0xcc];
        let its_thunk_rax = [0xff, 0xe0, 0xcc, 0xcc];
        let m = Mode::Bits64;
        assert_eq!(
            X86_64.thunk(m, &rax),
            Some(Thunk::IndirectBranch { reg: RAX })
        );
        assert_eq!(
            X86_64.thunk(m, &r11),
            Some(Thunk::IndirectBranch { reg: 11 })
        );
        assert_eq!(
            X86_64.thunk(m, &srso_safe_ret),
            Some(Thunk::ReturnForCaller)
        );
        assert_eq!(X86_64.thunk(m, &return_thunk), None);
        // Where the retpoline's own call goes.
        assert_eq!(X86_64.thunk(m, &rax[12..]), Some(Thunk::BranchByReturn));
        assert_eq!(X86_64.thunk(m, &r11[12..]), Some(Thunk::BranchByReturn));
        assert_eq!(
            X86_64.thunk(m, &its_thunk_rax),
            Some(Thunk::IndirectBranch { reg: RAX })
        );
        // Cut short: not enough to tell.
        assert_eq!(X86_64.thunk(m, &rax[..15]), None);
    }

    /// QEMU takes 64-bit SYSCALL without a report: the plugin opens its `[svc]` at the
    /// instruction. `INT 0x80` and SYSENTER are reported or left out.
    #[test]
    fn syscall_is_the_system_call_qemu_does_not_report() {
        let x = X86_64;
        let m = Mode::Bits64;
        assert_eq!(
            x.unreported_system_call(m, &[0x0f, 0x05, 0x90]),
            Some((2, Level(0)))
        );
        assert_eq!(
            x.unreported_system_call(m, &[0x66, 0x0f, 0x05]),
            Some((3, Level(0)))
        );
        assert_eq!(x.unreported_system_call(m, &[0xcd, 0x80]), None);
        assert_eq!(x.unreported_system_call(m, &[0x0f, 0x34]), None);
        assert_eq!(x.unreported_system_call(m, &[0x0f, 0x07]), None, "SYSRET");
        assert_eq!(x.unreported_system_call(Mode::Bits32, &[0x0f, 0x05]), None);
        assert_eq!(x.unreported_system_call(m, &[0x0f]), None, "cut short");
    }

    #[test]
    fn exceptions_are_named_by_their_vector() {
        use ExceptionKind as K;
        let x = X86_64;
        let kind = |s: Option<u64>| x.exception_kind(Discontinuity::Exception, s);
        // Raised by an instruction: its vector, and its length to step over.
        let trap = |m: Mode, bytes: &[u8]| x.trap_syndrome(m, bytes);
        let m = Mode::Bits64;
        assert_eq!(kind(trap(m, &[0xcc])), K::Int3);
        assert_eq!(kind(trap(m, &[0xcd, 0x03])), K::Int3);
        assert_eq!(kind(trap(m, &[0xcd, 0x80])), K::Svc);
        assert_eq!(kind(trap(m, &[0x0f, 0x05])), K::Svc);
        assert_eq!(kind(trap(m, &[0xf1])), K::Debug);
        // A BIOS call's vector is below 32; it is still a software interrupt.
        assert_eq!(kind(trap(Mode::Bits16, &[0xcd, 0x10])), K::SoftInt);
        assert_eq!(kind(trap(Mode::Bits32, &[0xce])), K::SoftInt);
        assert_eq!(trap(m, &[0xce]), None, "INTO is invalid in 64-bit mode");
        assert_eq!(trap(m, &[0x48, 0x89, 0x07]), None, "a fault's instruction");
        assert_eq!(
            x.exception_resume_pc(Discontinuity::Exception, trap(m, &[0x0f, 0x05]), 0x1000),
            0x1002
        );
        assert_eq!(
            x.exception_resume_pc(
                Discontinuity::Exception,
                trap(m, &[0x2e, 0xcd, 0x21]),
                0x1000
            ),
            0x1003
        );
        // A fault resumes at the faulting instruction; an interrupt where it was taken.
        let fault = x.vector_syndrome(m, &gate64(14, 0xffff_ffff_8100_0e50), 0xffff_ffff_8100_0e50);
        assert_eq!(kind(fault), K::PageFault);
        assert_eq!(
            x.exception_resume_pc(Discontinuity::Exception, fault, 0x1000),
            0x1000
        );
        assert_eq!(
            x.exception_resume_pc(Discontinuity::Interrupt, None, 0x1000),
            0x1000
        );
        assert_eq!(x.exception_kind(Discontinuity::Interrupt, fault), K::Irq);
        assert_eq!(kind(None), K::Other);
    }

    /// A long-mode IDT of `vector + 1` gates, the last one leading to `handler`.
    fn gate64(vector: usize, handler: u64) -> Vec<u8> {
        let mut idt = vec![0u8; (vector + 1) * 16];
        let g = &mut idt[vector * 16..];
        g[0..2].copy_from_slice(&(handler as u16).to_le_bytes());
        g[2..4].copy_from_slice(&0x10u16.to_le_bytes());
        g[5] = 0x8e; // present, interrupt gate
        g[6..8].copy_from_slice(&((handler >> 16) as u16).to_le_bytes());
        g[8..12].copy_from_slice(&((handler >> 32) as u32).to_le_bytes());
        idt
    }

    #[test]
    fn vectors_are_found_in_each_kind_of_table() {
        let x = X86_64;
        let vector = |m, table: &[u8], handler| x.vector_syndrome(m, table, handler);
        let idt = gate64(13, 0xffff_ffff_8100_0cc0);
        assert_eq!(vector(Mode::Bits64, &idt, 0xffff_ffff_8100_0cc0), Some(13));
        assert_eq!(vector(Mode::Bits64, &idt, 0xffff_ffff_8100_0cc1), None);
        // A gate that is not present leads nowhere.
        let mut absent = idt.clone();
        absent[13 * 16 + 5] = 0x0e;
        assert_eq!(vector(Mode::Bits64, &absent, 0xffff_ffff_8100_0cc0), None);
        // Protected mode: 8-byte gates.
        let mut idt32 = vec![0u8; 8 * 8];
        idt32[6 * 8..6 * 8 + 8].copy_from_slice(&[0x78, 0x56, 0x08, 0, 0, 0x8e, 0x34, 0x12]);
        assert_eq!(vector(Mode::Bits32, &idt32, 0x1234_5678), Some(6));
        // Real mode: offset:segment pairs, the first vector leading there wins.
        let mut ivt = vec![0u8; 0x20 * 4];
        for v in [0x10, 0x13] {
            ivt[v * 4..v * 4 + 4].copy_from_slice(&[0x65, 0xf0, 0x00, 0xf0]);
        }
        assert_eq!(vector(Mode::Bits16, &ivt, 0xff065), Some(0x10));
        // A table cut short holds whole entries only.
        assert_eq!(
            vector(Mode::Bits64, &idt[..idt.len() - 1], 0xffff_ffff_8100_0cc0),
            None
        );
    }

    #[test]
    fn lidt_is_told_apart_from_its_neighbours() {
        let x = X86_64;
        let m = Mode::Bits64;
        let lidt = |m, bytes: &[u8]| x.loads_vector_table(m, bytes);
        // lidt (%rax), lidt 0x10(%rip), lidt 8(%rsp)
        assert_eq!(lidt(m, &[0x0f, 0x01, 0x18]), Some(u64::MAX));
        assert_eq!(lidt(m, &[0x0f, 0x01, 0x1d, 0x10, 0, 0, 0]), Some(u64::MAX));
        assert_eq!(lidt(m, &[0x0f, 0x01, 0x5c, 0x24, 0x08]), Some(u64::MAX));
        // lgdt (%rax), sidt (%rax), vmrun (mod 3)
        assert_eq!(lidt(m, &[0x0f, 0x01, 0x10]), None);
        assert_eq!(lidt(m, &[0x0f, 0x01, 0x08]), None);
        assert_eq!(lidt(m, &[0x0f, 0x01, 0xd8]), None);
        // A 16-bit operand keeps 24 bits of the base: real mode's default, 32-bit code's 66h.
        let real = Mode::Bits16;
        assert_eq!(lidt(real, &[0x0f, 0x01, 0x1e, 0, 0x10]), Some(0xff_ffff));
        assert_eq!(
            lidt(real, &[0x66, 0x0f, 0x01, 0x1e, 0, 0x10]),
            Some(u64::MAX)
        );
        assert_eq!(
            lidt(Mode::Bits32, &[0x66, 0x0f, 0x01, 0x18]),
            Some(0xff_ffff)
        );
        assert_eq!(lidt(Mode::Bits32, &[0x0f, 0x01, 0x18]), Some(u64::MAX));
    }

    #[test]
    fn bytes_that_only_look_like_a_call() {
        let m = Mode::Bits64;
        assert_eq!(X86_64.call_ending_at(m, 0x1010, &[0x90; 16]), None);
        assert_eq!(X86_64.call_ending_at(m, 0x1010, &[0xc3]), None);
        assert_eq!(X86_64.call_ending_at(m, 0x1010, &[]), None);
        // movabs $0xe8e8e8e8e8e8e8e8, %rax: its last five bytes read as `call rel32`. Such a
        // false landing costs a conditional callback, never a wrong event (the callback
        // fires only when a return is pending, which then went exactly there).
        let movabs = [0x48, 0xb8, 0xe8, 0xe8, 0xe8, 0xe8, 0xe8, 0xe8, 0xe8, 0xe8];
        assert_eq!(
            X86_64.call_ending_at(m, 0x100a, &movabs),
            Some(CallSite {
                pc: 0x1005,
                target: Some(0x100a_u64.wrapping_add(0xe8e8_e8e8_u32 as i32 as u64))
            })
        );
        // Fewer bytes than a call can have.
        assert_eq!(X86_64.call_ending_at(m, 0x1000, &[0xd0]), None);
        assert_eq!(X86_64.call_ending_at(m, 1, &[0xff, 0xd0]), None);
    }

    #[test]
    fn registers_as_qemu_names_them() {
        let names: Vec<String> = (0..16).map(|n| X86_64.gpr_name(n)).collect();
        assert_eq!(
            names,
            [
                "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
                "r12", "r13", "r14", "r15"
            ]
        );
        assert_eq!(X86_64.gpr_name(X86_64.frame_pointer()), "rbp");
        // Encoding order ax, cx, dx, bx, sp, bp, si, di.
        let by_encoding: Vec<String> = (0..8).map(|e| X86_64.gpr_name(gpr(e))).collect();
        assert_eq!(
            by_encoding,
            ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi"]
        );
    }

    #[test]
    fn the_mode_follows_cr0_eflags_and_efer() {
        let mode = |cr0: Option<u64>, eflags: u64, efer: u64| {
            X86_64.current_mode(&mut |name| match name {
                "cr0" => cr0,
                "eflags" => Some(eflags),
                "efer" => Some(efer),
                _ => None,
            })
        };
        assert_eq!(mode(Some(0x6000_0010), 0x2, 0), Mode::Bits16); // reset: real mode
        assert_eq!(mode(Some(0x11), 0x2, 0), Mode::Bits32); // protected mode
        assert_eq!(mode(Some(0x11), 0x2_0202, 0), Mode::Bits16); // virtual-8086
        assert_eq!(mode(Some(0x8000_0011), 0x2, 0x500), Mode::Bits64); // LME + LMA
        assert_eq!(mode(Some(0x8000_0011), 0x2, 0x100), Mode::Bits32); // LME, paging not yet on
        assert_eq!(mode(None, 0, 0), Mode::Bits64); // no control registers: user mode
                                                    // Long mode is told by EFER alone: one register read per block translated.
        let mut read = Vec::new();
        let m = X86_64.current_mode(&mut |name| {
            read.push(name);
            Some(if name == "efer" { 0x500 } else { 0x8000_0011 })
        });
        assert_eq!((m, read), (Mode::Bits64, vec!["efer"]));
    }

    #[test]
    fn rings() {
        assert_eq!(X86_64.exception_level(0x10), Level(0)); // __KERNEL_CS
        assert_eq!(X86_64.exception_level(0x33), Level(3)); // __USER_CS
        assert_eq!(X86_64.level_name(Level(3)), "ring3");
        assert_eq!(X86_64.return_level(Level(0), 0x2b, None), Level(3));
        assert_eq!(
            X86_64.exception_kind(Discontinuity::Interrupt, None),
            ExceptionKind::Irq
        );
        assert_eq!(X86_64.exception_link_register(Level(0)), None);
    }

    #[test]
    fn exception_returns_read_their_target_off_the_stack() {
        // A stack of 8-byte slots at 0x8000 (64-bit code), 4 (32-bit), 2 (real mode, ss=0x700).
        let stack = |mode: Mode, insn: &[u8]| {
            let mut read = |name: &'static str| match name {
                "rsp" => Some(if mode == Mode::Bits16 { 0x10 } else { 0x8000 }),
                "ss" => Some(0x700),
                "rcx" => Some(0xffff_0000_0040_1000u64),
                "rdx" => Some(0x0804_8000),
                _ => None,
            };
            let mut memory = |addr: u64, size: usize| {
                let words: &[(u64, u64)] = &[
                    (0x8000, 0xffff_ffff_8100_1234), // rip / eip
                    (0x8008, 0x33),                  // cs (iretq)
                    (0x8004, 0x23),                  // cs (iretd)
                    (0x7010, 0x1234),                // ip
                    (0x7012, 0xf000),                // cs (real mode)
                ];
                let mask = if size == 8 {
                    u64::MAX
                } else {
                    (1 << (size * 8)) - 1
                };
                words.iter().find(|w| w.0 == addr).map(|w| w.1 & mask)
            };
            X86_64.exception_return_to(mode, insn, &mut read, &mut memory)
        };
        let to = |target: u64, ring: u8| {
            Some(Some(ExceptionReturnTo {
                target,
                level: Level(ring),
                frame: None,
            }))
        };
        assert_eq!(
            stack(Mode::Bits64, &[0x48, 0xcf]),
            to(0xffff_ffff_8100_1234, 3)
        );
        assert_eq!(stack(Mode::Bits32, &[0xcf]), to(0x8100_1234, 3));
        assert_eq!(
            stack(Mode::Bits16, &[0xcf]),
            Some(Some(ExceptionReturnTo {
                target: 0xf1234,
                level: Level(0),
                frame: Some(0x7010),
            }))
        );
        assert_eq!(
            stack(Mode::Bits64, &[0x48, 0x0f, 0x07]),
            to(0xffff_0000_0040_1000, 3)
        );
        assert_eq!(stack(Mode::Bits64, &[0x0f, 0x07]), to(0x0040_1000, 3));
        assert_eq!(stack(Mode::Bits32, &[0x0f, 0x35]), to(0x0804_8000, 3));
        // RSM: the state comes from SMRAM; an unreadable stack: unknown.
        assert_eq!(stack(Mode::Bits64, &[0x0f, 0xaa]), Some(None));
        assert_eq!(stack(Mode::Bits64, &[]), Some(None));
        // Other architectures take exception returns from registers.
        assert_eq!(
            super::super::aarch64::Aarch64.exception_return_to(
                Mode::Bits64,
                &[0xe0, 0x03, 0x9f, 0xd6],
                &mut |_| None,
                &mut |_, _| None
            ),
            None
        );
    }

    #[test]
    fn per_cpu_stores() {
        let m = Mode::Bits64;
        // Debian 6.1 __switch_to: mov %rbx,%gs:0x7eff07d4(%rip) at ffffffff8102f3a4.
        let rip = [0x65, 0x48, 0x89, 0x1d, 0xd4, 0x07, 0xff, 0x7e];
        assert_eq!(
            X86_64.per_cpu_store(m, 0xffff_ffff_8102_f3a4, &rip),
            Some((RBX, 0x1fb80))
        );
        // mov %r12,%gs:0x1fb80
        let abs = [0x65, 0x4c, 0x89, 0x24, 0x25, 0x80, 0xfb, 0x01, 0x00];
        assert_eq!(X86_64.per_cpu_store(m, 0, &abs), Some((12, 0x1fb80)));
        // Loads, 32-bit stores, other segments, register bases: not such stores.
        let load = [0x65, 0x48, 0x8b, 0x04, 0x25, 0x80, 0xfb, 0x01, 0x00];
        let narrow = [0x65, 0x89, 0x1d, 0xd4, 0x07, 0xff, 0x7e];
        let fs = [0x64, 0x48, 0x89, 0x1d, 0xd4, 0x07, 0xff, 0x7e];
        let based = [0x65, 0x48, 0x89, 0x18];
        for b in [&load[..], &narrow, &fs, &based] {
            assert_eq!(X86_64.per_cpu_store(m, 0, b), None, "{b:x?}");
        }
        assert_eq!(X86_64.per_cpu_store(Mode::Bits32, 0, &abs), None);
        assert!(X86_64.is_task_pointer(0xffff_8880_0310_0000));
        assert!(!X86_64.is_task_pointer(0x7ffd_1234_5678));
    }

    #[test]
    fn segment_bases() {
        let regs = |cr0: u64| {
            move |name: &'static str| match name {
                "fs_base" => Some(0x7f00_0000_0000),
                "gs_base" => Some(0xffff_8880_1fc0_0000),
                "cr0" => Some(cr0),
                "ds" => Some(0xf000),
                _ => None,
            }
        };
        assert_eq!(
            X86_64.segment_base("gs", &mut regs(0x8000_0011)),
            Some(0xffff_8880_1fc0_0000)
        );
        assert_eq!(
            X86_64.segment_base("fs", &mut regs(0x8000_0011)),
            Some(0x7f00_0000_0000)
        );
        assert_eq!(X86_64.segment_base("ds", &mut regs(0x11)), Some(0));
        assert_eq!(X86_64.segment_base("ds", &mut regs(0x10)), Some(0xf_0000));
        assert_eq!(X86_64.segment_base("ss", &mut regs(0x10)), None);
    }

    #[test]
    fn return_stack_stuffing_is_no_call() {
        // __FILL_RETURN_BUFFER as the kernel patches it in: call 1f; int3; 1: call 2f; …
        let stuffing = [0xe8, 0x01, 0x00, 0x00, 0x00, 0xcc];
        assert_eq!(k(Mode::Bits64, 0x1000, &stuffing), InsnKind::Other);
        assert_eq!(
            X86_64.call_ending_at(Mode::Bits64, 0x1005, &stuffing[..5]),
            None
        );
        // A call two bytes on is one.
        let two = [0xe8, 0x02, 0x00, 0x00, 0x00];
        assert!(matches!(
            k(Mode::Bits64, 0x1000, &two),
            InsnKind::Call { .. }
        ));
    }

    /// The one-byte filter in `call_ending_at` only skips lengths the decoder would reject:
    /// random windows rich in call and prefix bytes find the same call as a scan of every
    /// length.
    #[test]
    fn call_filter_keeps_every_call() {
        const BYTES: [u8; 12] = [
            0xe8, 0xff, 0x9a, 0x41, 0x66, 0x2e, 0xd0, 0x15, 0x14, 0x24, 0, 1,
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut found = 0;
        // Miri runs each window ~1000 times slower: fewer there, all of them natively.
        let rounds = if cfg!(miri) { 300 } else { 200_000 };
        for _ in 0..rounds {
            let mut window = [0u8; MAX_INSN];
            for b in &mut window {
                let r = next();
                *b = if r & 1 == 0 {
                    BYTES[(r >> 8) as usize % BYTES.len()]
                } else {
                    (r >> 16) as u8
                };
            }
            let len = (next() % (MAX_INSN as u64 + 1)) as usize;
            let window = &window[MAX_INSN - len..];
            for mode in [Mode::Bits16, Mode::Bits32, Mode::Bits64] {
                let pc = 0x10_0000;
                let all = CALL_LENGTHS
                    .iter()
                    .find_map(|&n| call_of_len(&X86_64, mode, pc, window, n));
                found += all.is_some() as u32;
                assert_eq!(
                    X86_64.call_ending_at(mode, pc, window),
                    all,
                    "{window:02x?}"
                );
            }
        }
        assert!(found > rounds / 20, "too few calls generated: {found}");
    }
}
