//! Everything about a guest architecture, behind [`Isa`]: instruction classes from bytes,
//! which call ends where a return lands, frame-record layout, the exception model and the
//! registers that say which task and privilege level run. One module per architecture (as
//! uftrace's `arch/<arch>/`); nothing outside `arch/` knows an encoding or a register name.

pub mod aarch64;
pub mod riscv64;
#[cfg(test)]
mod test_asm;
pub mod x86_64;

/// Where a call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Known at translation time (BL, x86 CALL rel, RISC-V JAL): no register read when it
    /// executes.
    Direct(u64),
    /// In a general register (BLR and its pointer-authenticated forms, x86 `call *%rax`,
    /// RISC-V `jalr ra, 0(rs1)`), numbered as [`Isa::gpr_name`] names it.
    Register(u8),
    /// A general register plus an offset (RISC-V `jalr ra, imm(rs1)` with `imm != 0`).
    RegisterOffset { reg: u8, offset: i64 },
    /// Read from memory (x86 `call *disp(%base,%index,scale)`): the address comes from
    /// registers (or is known at translation, RIP-relative), the target from a memory read.
    Memory(MemOperand),
}

/// A memory operand a call reads its target from: the effective address is
/// `base + index * scale + disp`, wrapped to `addr_bits`, in segment `segment`. The plugin
/// takes the target from the call's own load (a memory callback), so only the decoder's
/// tests look inside; `size` and `far` decide how the load is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemOperand {
    /// General register numbers as [`Isa::gpr_name`] names them.
    pub base: Option<u8>,
    pub index: Option<u8>,
    /// 1, 2, 4 or 8 (1 without an index).
    pub scale: u8,
    /// Sign-extended displacement. A PC-relative operand (x86-64 `disp(%rip)`) has no base
    /// and no index: its absolute address, known at translation, is `disp`.
    pub disp: i64,
    /// Address-size width: 16, 32 or 64 (the effective address wraps there).
    pub addr_bits: u8,
    /// Bytes read for the target's offset (2, 4 or 8).
    pub size: u8,
    /// A far call (x86 `lcall *m`): a 16-bit code-segment selector follows the offset.
    pub far: bool,
    /// The segment register (QEMU's name) whose base the effective address is relative
    /// to, when that base can be non-zero: `fs`/`gs` in 64-bit mode (QEMU gives their bases
    /// as `fs_base`/`gs_base`); in 16- and 32-bit code the segment used, by override or by
    /// default (`ss` for BP/SP-based addresses, else `ds`): in real mode its base is the
    /// selector times 16, in protected mode a descriptor's base that QEMU does not show
    /// (flat, 0, in practice).
    pub segment: Option<&'static str>,
}

/// The call instruction found just before a return address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSite {
    pub pc: u64,
    /// Known for direct calls.
    pub target: Option<u64>,
}

/// How wide the code the guest runs is: decoding depends on it where the architecture has
/// several widths (x86: real-mode/16-bit, 32-bit and 64-bit code; RISC-V: RV32 code, where
/// C.JAL exists, or RV64). AArch64 code is always [`Mode::Bits64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Bits16,
    Bits32,
    Bits64,
}

/// Where the frame record of a frame-pointer value keeps its two words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSlots {
    /// Address of the caller's frame pointer.
    pub caller_fp: u64,
    /// Address of the return address.
    pub ret_addr: u64,
}

/// What user mode (Linux programs under qemu-<arch>) needs of the Linux ABI: the syscall
/// numbers of `openat`, `close`, `mmap`, `munmap` and `execve` (where files are mapped and
/// unmapped, and new images), the stack pointer's name (the initial stack: argc, argv, envp, auxv, at the
/// first instruction), and signal delivery: the syscalls that install a handler and end
/// one, where the handler is in the kernel's `struct sigaction`, and the registers a
/// delivered handler starts with (its return address, the sigreturn trampoline, and its
/// first argument, the signal number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinuxUser {
    pub openat: i64,
    pub close: i64,
    pub mmap: i64,
    pub munmap: i64,
    pub execve: i64,
    pub stack_pointer: &'static str,
    pub rt_sigaction: i64,
    pub rt_sigreturn: i64,
    /// Byte offset of `sa_handler` in the `struct sigaction` that `rt_sigaction` reads.
    pub sigaction_handler: u64,
    pub link: LinkSlot,
    pub first_argument: &'static str,
}

/// Linux's generic syscall table (asm-generic/unistd.h: aarch64, riscv64), whose
/// `struct sigaction` starts with `sa_handler`. The machine and the registers a handler
/// starts with are each architecture's to set.
pub const GENERIC_LINUX_USER: LinuxUser = LinuxUser {
    openat: 56,
    close: 57,
    mmap: 222,
    munmap: 215,
    execve: 221,
    stack_pointer: "sp",
    rt_sigaction: 134,
    rt_sigreturn: 139,
    sigaction_handler: 0,
    link: LinkSlot::Register(""),
    first_argument: "",
};

/// Where a function finds its return address at its first instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkSlot {
    /// In this register (the link register).
    Register(&'static str),
    /// In the word at the top of the stack, whose pointer is this register (x86's `call`).
    StackTop(&'static str),
}

/// A thunk recognised from the bytes at its entry: code that a call or a jump reaches but
/// that is not a function of the program's own (x86 Linux's retpolines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thunk {
    /// Branches to the address in general register `reg` (`__x86_indirect_thunk_<reg>`):
    /// a call to the thunk is an indirect call through `reg`, and the calls and returns
    /// inside it (a retpoline's `call` that pushes a return address its `ret` never uses)
    /// are not the program's.
    IndirectBranch { reg: u8 },
    /// Drops the return address that the call to it pushed and returns for its caller
    /// (`srso_safe_ret`, which `srso_return_thunk` calls): a call to it is no call, its
    /// return is its caller's.
    ReturnForCaller,
    /// Overwrites the return address the call to it pushed with a branch target and
    /// returns there (the second half of a retpoline, which the thunk calls): that call and
    /// its return are a jump, neither the program's.
    BranchByReturn,
}

/// What an instruction means for the call graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsnKind {
    /// A call; the callee returns to `ret_addr`.
    Call {
        target: Target,
        ret_addr: u64,
    },
    /// A return (RET, RETAA, RETAB). Where it goes is seen where it lands (`landing`), so
    /// the register it reads does not matter.
    Return,
    /// Exception return (ERET): leaves a handler or drops privilege.
    ExceptionReturn,
    /// Synchronous exception taken on purpose (SVC, HVC, SMC).
    Trap,
    /// Writes general register `src` into the register that holds the running OS task
    /// (arm64 Linux: `msr sp_el0, xN` at EL1 is a task switch or an entry from user space).
    SetTaskPointer {
        src: u8,
    },
    Other,
}

/// What QEMU's discontinuity callback reported (its `type` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discontinuity {
    Interrupt,
    Exception,
    /// An exception QEMU handled itself (semihosting, PSCI): no handler runs, no ERET comes.
    HostCall,
}

/// QEMU's x86 target reports an exception twice: when the instruction raises it (an
/// exception discontinuity whose `to_pc` is still `from_pc`: nothing was delivered yet), and
/// again when it is delivered, as an interrupt discontinuity to the handler (measured on
/// 10.2.2 and 11.1.3: SeaBIOS's `INT n`s and `tests/guests/x86_64/traps.c`'s faults come as
/// such pairs). Other targets report each exception once, already delivered. This folds a
/// pair into one exception taken to the handler, and leaves hardware interrupts as they are.
#[derive(Debug, Default, Clone, Copy)]
pub struct Announced(bool);

impl Announced {
    /// What a discontinuity QEMU reported is, or `None` for an announcement (the delivery
    /// comes next).
    pub fn see(&mut self, what: Discontinuity, from_pc: u64, to_pc: u64) -> Option<Discontinuity> {
        let announced = std::mem::take(&mut self.0);
        match what {
            Discontinuity::Exception if from_pc == to_pc => {
                self.0 = true;
                None
            }
            // QEMU delivers a raised exception before anything else, so the next interrupt
            // is its delivery. Its `from_pc` need not be the announcement's: a fault raised
            // by a memory access is announced at a pc not yet brought up to date (the
            // block's start), and delivered from the faulting instruction.
            Discontinuity::Interrupt if announced => Some(Discontinuity::Exception),
            _ => Some(what),
        }
    }
}

/// A privilege level as the architecture numbers it (aarch64: EL, with bit 2 set in the
/// Secure state; x86: ring), kept apart by `split_levels`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Level(pub u8);

/// Where an exception return goes, when the architecture reads it from memory rather than
/// from registers (x86 IRET pops it off the stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExceptionReturnTo {
    /// The address execution resumes at.
    pub target: u64,
    /// The privilege level it resumes at.
    pub level: Level,
    /// Where the frame it pops lies (a linear address), where the code also uses it as a far
    /// jump (x86 16-bit code's IRET): it leaves the exception entry that pushed that frame
    /// (`Isa::exception_frame`), if one did (`Engine::exception_return_16`).
    pub frame: Option<u64>,
}

pub use qemu_uftrace_format::Arch;

/// The decoder and exception model of `arch`.
pub fn isa(arch: Arch) -> &'static dyn Isa {
    match arch {
        Arch::Aarch64 => &aarch64::Aarch64,
        Arch::X86_64 => &x86_64::X86_64,
        Arch::Riscv64 => &riscv64::Riscv64,
    }
}

/// The guest architecture as the plugin needs it.
/// [`Isa::classify`] of the instruction at `pc`, given the one before it in the same block
/// (`prev`: its address and bytes, `None` at a block's start): a call through a register
/// the previous instruction set to a known value becomes a direct call
/// ([`Isa::register_set_by`]). Within a block the two always run back to back: blocks are
/// entered at their start, and interrupts are taken between blocks.
pub fn classify_after(
    isa: &dyn Isa,
    mode: Mode,
    prev: Option<(u64, &[u8])>,
    pc: u64,
    bytes: &[u8],
) -> InsnKind {
    let kind = isa.classify(mode, pc, bytes);
    let (reg, offset, ret_addr) = match kind {
        InsnKind::Call {
            target: Target::Register(reg),
            ret_addr,
        } => (reg, 0, ret_addr),
        InsnKind::Call {
            target: Target::RegisterOffset { reg, offset },
            ret_addr,
        } => (reg, offset, ret_addr),
        _ => return kind,
    };
    let known = prev
        .filter(|&(prev_pc, prev)| prev_pc.wrapping_add(prev.len() as u64) == pc)
        .and_then(|(prev_pc, prev)| isa.register_set_by(prev_pc, prev, reg));
    match known {
        Some(value) => InsnKind::Call {
            target: Target::Direct(value.wrapping_add_signed(offset)),
            ret_addr,
        },
        None => kind,
    }
}

/// Where the unconditional jump (not a call, not a return) at `pc` goes when that is known
/// at translation: a direct jump ([`Isa::direct_jump`]), or a jump through a register the
/// instruction before it in the same block set to a known value (RISC-V's far tail call,
/// `auipc t1, hi; jr lo(t1)`), as for [`classify_after`]'s calls.
pub fn jump_target_after(
    isa: &dyn Isa,
    mode: Mode,
    prev: Option<(u64, &[u8])>,
    pc: u64,
    bytes: &[u8],
) -> Option<u64> {
    if let Some(target) = isa.direct_jump(mode, pc, bytes) {
        return Some(target);
    }
    let (reg, offset) = isa.register_offset_jump(mode, bytes)?;
    let (prev_pc, prev) = prev.filter(|&(p, b)| p.wrapping_add(b.len() as u64) == pc)?;
    let base = isa.register_set_by(prev_pc, prev, reg)?;
    Some(base.wrapping_add_signed(offset) & !1)
}

/// How a register call takes its target from a load in its block ([`feeding_load`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feed {
    /// The load's index among the instructions before the call.
    pub load: usize,
    /// Nothing between the load and the call can raise an exception: once the load has read
    /// its value, the call happens (a block runs straight through; QEMU takes interrupts
    /// between blocks only), so the load's memory callback can stand for the call. Else the
    /// load's callback keeps the value and the call's own callback takes it: an exception
    /// between leaves the block, and the block QEMU resumes in starts past the load.
    pub direct: bool,
}

/// The load among `earlier` (a block's instructions before the register call `call` through
/// `reg`, in order) whose value the call branches to: the last instruction that may write
/// `reg`, when it is a whole 64-bit load of it ([`Isa::loads_register`]) and no instruction
/// after it may write `reg` ([`Isa::inert_for`], [`Isa::spares`]). `None`: the call reads
/// its register.
pub fn feeding_load(
    isa: &dyn Isa,
    mode: Mode,
    earlier: &[&[u8]],
    call: &[u8],
    reg: u8,
) -> Option<Feed> {
    if !isa.plain_register_call(mode, call) {
        return None;
    }
    let mut direct = true;
    for (i, insn) in earlier.iter().enumerate().rev() {
        if isa.loads_register(mode, insn, reg) {
            return Some(Feed { load: i, direct });
        }
        if isa.inert_for(mode, insn, reg) {
            continue;
        }
        if !isa.spares(mode, insn, reg) {
            return None;
        }
        direct = false;
    }
    None
}

pub trait Isa: Sync + Send {
    /// Classifies the instruction at `pc` from its bytes (never from disassembly text), in
    /// code of width `mode`. `bytes` starts at `pc` and holds the instruction (the plugin
    /// gives exactly its bytes, at most [`Isa::fetch_len`]); too few bytes make it `Other`.
    fn classify(&self, mode: Mode, pc: u64, bytes: &[u8]) -> InsnKind;
    /// How many bytes `classify` wants: the longest instruction (fixed-width ISAs: the
    /// instruction size).
    fn fetch_len(&self) -> usize;
    /// What register `reg` holds after the instruction `prev` at `prev_pc` when that value
    /// is known from the instruction alone (RISC-V `auipc`: `prev_pc` plus its immediate).
    /// A call through `reg` right after it in the same block then has a known target: the
    /// far `call` (`auipc ra, hi; jalr ra, lo(ra)`) is a direct call, read no register.
    fn register_set_by(&self, _prev_pc: u64, _prev: &[u8], _reg: u8) -> Option<u64> {
        None
    }
    /// The width of the code the vCPU runs now, from registers `read` by QEMU's name (the
    /// plugin reads them at translation, when they describe the block's start). Fixed-width
    /// architectures read nothing.
    fn current_mode(&self, _read: &mut dyn FnMut(&'static str) -> Option<u64>) -> Mode {
        Mode::Bits64
    }
    /// How many bytes before an address [`Isa::call_ending_at`] looks at: the longest call.
    fn call_lookbehind(&self) -> usize;
    /// The call instruction that ends exactly at `pc` and returns there, if the bytes before
    /// `pc` hold one: where a return lands (a block starting just after a call), or which
    /// call a frame record's return address returns from. `before` ends at `pc`
    /// (`before[before.len() - 1]` is the byte at `pc - 1`) and holds up to
    /// [`Isa::call_lookbehind`] bytes (fewer at the start of readable memory).
    fn call_ending_at(&self, mode: Mode, pc: u64, before: &[u8]) -> Option<CallSite>;
    /// Name of general register `n` in QEMU's register list (as gdb names it).
    fn gpr_name(&self, n: u8) -> String;
    /// The frame-pointer register, whose frame records let the plugin rebuild a stack it
    /// lost track of.
    fn frame_pointer(&self) -> u8;
    /// Where the frame record that frame-pointer value `fp` points at keeps the caller's
    /// frame pointer and the return address (AArch64 and x86-64: `[fp]`, `[fp + 8]`;
    /// RISC-V: `[fp - 16]`, `[fp - 8]`).
    fn frame_slots(&self, fp: u64) -> FrameSlots {
        FrameSlots {
            caller_fp: fp,
            ret_addr: fp.wrapping_add(8),
        }
    }
    /// A thunk starting with `entry` (the bytes at a call's or jump's target, up to
    /// [`Isa::thunk_fetch_len`]), where the architecture's kernels have such thunks.
    fn thunk(&self, _mode: Mode, _entry: &[u8]) -> Option<Thunk> {
        None
    }
    /// How many bytes [`Isa::thunk`] looks at (0: no thunks to recognise).
    fn thunk_fetch_len(&self) -> usize {
        0
    }
    /// The register holding the processor state, from which [`Isa::exception_level`] reads
    /// the privilege level.
    fn status_register(&self) -> &'static str;
    /// The privilege level a status register value runs at.
    fn exception_level(&self, status: u64) -> Level;
    /// The level running with status register `status`, the vCPU having run at `previous`:
    /// the security state, which the status register does not show, carries over.
    fn running_level(&self, status: u64, _previous: Option<Level>) -> Level {
        self.exception_level(status)
    }
    /// The register an exception return at `level` jumps to.
    fn exception_link_register(&self, level: Level) -> Option<&'static str>;
    /// Where the exception just delivered to `handler` pushed its return frame (a linear
    /// address), in code whose exception return also serves as a far jump (x86 16-bit code:
    /// the IRET that pops this frame is the one that leaves the exception). `read` reads a
    /// register by QEMU's name, after the delivery, only where the handler's address leaves
    /// such code possible.
    fn exception_frame(
        &self,
        _handler: u64,
        _read: &mut dyn FnMut(&'static str) -> Option<u64>,
    ) -> Option<u64> {
        None
    }
    /// Where the exception return `insn` (its bytes, in code of width `mode`) goes, for
    /// architectures whose exception returns take their target from memory or from general
    /// registers rather than from [`Isa::exception_link_register`]: `read` reads a register
    /// by QEMU's name, `memory` the little-endian value of 1 to 8 bytes of guest virtual
    /// memory. Outer `None`: the architecture uses the link and saved-status registers;
    /// inner `None`: a read failed or the instruction's target is unknown.
    fn exception_return_to(
        &self,
        _mode: Mode,
        _insn: &[u8],
        _read: &mut dyn FnMut(&'static str) -> Option<u64>,
        _memory: &mut dyn FnMut(u64, usize) -> Option<u64>,
    ) -> Option<Option<ExceptionReturnTo>> {
        None
    }
    /// The base address of segment `segment` (a [`MemOperand::segment`]), from registers
    /// `read` by QEMU's name; `None` when a register cannot be read. Architectures without
    /// segments never name one.
    fn segment_base(
        &self,
        _segment: &'static str,
        _read: &mut dyn FnMut(&'static str) -> Option<u64>,
    ) -> Option<u64> {
        Some(0)
    }
    /// A code address without its pointer-authentication bits.
    fn strip_authentication(&self, addr: u64) -> u64 {
        addr
    }

    /// The register holding the base of the vector table exceptions taken to `level` go
    /// through (arm64 VBAR_ELx), by each name QEMU has given it; none where no such table
    /// is at a register's address.
    fn vector_base_register(&self, _level: Level) -> &'static [&'static str] {
        &[]
    }
    /// What the vector `offset` bytes past [`Isa::vector_base_register`]'s value starts,
    /// when it is one an exception taken from the level it goes to enters (arm64: the
    /// current level's with SP_ELx or SP_EL0; not a lower level's): an interrupt, or an
    /// exception whose syndrome register says which.
    fn same_level_vector(&self, _offset: u64) -> Option<Discontinuity> {
        None
    }
    /// The register an exception taken to `level` saves the interrupted state in, whose
    /// privilege level an exception return drops to.
    fn saved_status_register(&self, level: Level) -> Option<&'static str>;
    /// The register saying why a synchronous exception was taken to `level`.
    fn syndrome_register(&self, level: Level) -> Option<&'static str>;
    /// What kind of exception QEMU reported, from the syndrome when there is one.
    fn exception_kind(&self, what: Discontinuity, syndrome: Option<u64>) -> ExceptionKind;
    /// Where the code resumes after an exception QEMU reported as taken at `from_pc` (the
    /// exception entry's return address): `from_pc` itself where QEMU reports the
    /// preferred return address (aarch64's ELR); RISC-V reports an ECALL's own address,
    /// which handlers step over.
    fn exception_resume_pc(
        &self,
        _what: Discontinuity,
        _syndrome: Option<u64>,
        from_pc: u64,
    ) -> u64 {
        from_pc
    }
    /// Where no register says which exception was taken (x86), the size of one entry of the
    /// table the vCPU, running code of width `mode`, delivers exceptions through (x86's IDT
    /// gates, real mode's vectors); `None` where a syndrome register says it.
    fn vector_entry_size(&self, _mode: Mode) -> Option<usize> {
        None
    }
    /// Where `bytes` load the vector table's place (x86 `lidt m`, which reads a 2-byte
    /// limit and then the base; the plugin takes both from the loads themselves): the mask
    /// the instruction applies to the base it loads (x86: 24 bits with a 16-bit operand).
    fn loads_vector_table(&self, _mode: Mode, _bytes: &[u8]) -> Option<u64> {
        None
    }
    /// A far return popping a 64-bit return address (x86-64's `lretq`, which Linux's head
    /// code uses as a jump that also loads its code segment, into `x86_64_start_kernel`).
    fn is_far_return64(&self, _mode: Mode, _bytes: &[u8]) -> bool {
        false
    }
    /// The syndrome of an exception the instruction `insn` raises by itself (x86 `INT n`,
    /// `INT3`, `SYSCALL`): its vector, and its length, past which the handler returns.
    fn trap_syndrome(&self, _mode: Mode, _insn: &[u8]) -> Option<u64> {
        None
    }
    /// A system call instruction that QEMU's system emulation takes without a
    /// discontinuity report, so the plugin opens its `[svc]` entry where it runs: its length
    /// (past which the kernel returns) and the level it enters. None elsewhere.
    fn unreported_system_call(&self, _mode: Mode, _insn: &[u8]) -> Option<(usize, Level)> {
        None
    }
    /// The syndrome of an exception delivered to `handler`: the first vector of `table`
    /// (the vector table's bytes, of [`Isa::vector_entry_size`] entries) that leads there.
    fn vector_syndrome(&self, _mode: Mode, _table: &[u8], _handler: u64) -> Option<u64> {
        None
    }
    /// The register an OS keeps its running task in, written by [`InsnKind::SetTaskPointer`].
    fn task_pointer_register(&self) -> Option<&'static str> {
        None
    }
    /// Where an OS keeps its running task in memory rather than in a register (x86_64 Linux:
    /// the per-CPU `current_task`, reached through GS): when `bytes` (at `pc`, in code of
    /// width `mode`) store a general register at an address known at translation relative
    /// to that per-CPU base, the register and the address. A task switch is such a store
    /// to the variable's address.
    fn per_cpu_store(&self, _mode: Mode, _pc: u64, _bytes: &[u8]) -> Option<(u8, u64)> {
        None
    }
    /// The kernel symbols, first found first, of the per-CPU variable holding Linux's running
    /// task when no register holds it (x86_64: `current_task`, 6.1; `pcpu_hot`, whose first
    /// member it is, 6.2 on). Stores to it ([`Isa::per_cpu_store`]) are task switches.
    fn task_slot_symbols(&self) -> &'static [&'static str] {
        &[]
    }
    /// The register holding the base of the per-CPU area [`Isa::per_cpu_store`] addresses
    /// are relative to (x86_64: `gs_base` in the kernel). Read once per vCPU, at the first
    /// switch it shows: the task running until then is in the slot already (x86_64 Linux
    /// starts with `current_task` statically `&init_task`, never stored).
    fn per_cpu_base_register(&self) -> Option<&'static str> {
        None
    }
    /// Whether a value written there names a task (rather than, say, a user stack pointer
    /// restored on the way back to user space).
    fn is_task_pointer(&self, _value: u64) -> bool {
        false
    }
    /// A register holding the running task's PID, where the OS keeps one (0: unknown).
    fn task_id_register(&self) -> Option<&'static str> {
        None
    }
    /// The Secure state of the level an exception return from `level` drops to, read from
    /// this register (aarch64: SCR_EL3.NS), when the architecture has one.
    fn security_register(&self, _level: Level) -> Option<&'static str> {
        None
    }
    /// `level` as the level the guest runs after an exception return from `from` whose saved
    /// status is `saved`, given the security register's value.
    fn return_level(&self, from: Level, saved: u64, security: Option<u64>) -> Level;
    /// Whether running at `to` after running at `from` is less privileged: an exception
    /// return that goes there with no exception entry open hands the vCPU over
    /// (`Engine::exception_return_down`).
    fn drops_privilege(&self, from: Level, to: Level) -> bool;
    /// Linux user mode's ABI, as [`LinuxUser`] describes.
    fn linux_user(&self) -> LinuxUser;
    /// Whether the instruction at the start of `bytes` moves another register's value into
    /// the stack pointer: the stack switch of a longjmp or of an unwinder installing a
    /// handler (not an epilogue's copy of the frame pointer). Only architectures whose
    /// longjmp and unwinder leave by a jump through a register need it.
    fn switches_stack(&self, _mode: Mode, _bytes: &[u8]) -> bool {
        false
    }
    /// The register a jump through a register at the start of `bytes` goes to (not a call).
    fn register_jump(&self, _mode: Mode, _bytes: &[u8]) -> Option<u8> {
        None
    }
    /// Whether the instruction at the start of `bytes` jumps to an address it reads at run
    /// time (a register, or x86 memory) and is neither a call nor a return: aarch64 `BR`,
    /// `BRAA`…, x86 `JMP *r/m`, RISC-V `JALR x0` through a register other than a link
    /// register (`JR`). Where it lands is told by the landing block (`setcontext`'s jump,
    /// a nested function's trampoline).
    fn indirect_jump(&self, _mode: Mode, _bytes: &[u8]) -> bool {
        false
    }
    /// Whether the jump through a register at the start of `bytes`, after the instructions
    /// `before` (the nearest last, same block), goes through a table of offsets relative to
    /// the table (a compiler's switch: x86-64 `movslq (%B,%I,4),%R; add %B,%R; jmp *%R`):
    /// its targets are in its own function, so it never enters another nor resumes a frame.
    fn relative_table_jump(&self, _mode: Mode, _before: [&[u8]; 2], _bytes: &[u8]) -> bool {
        false
    }
    /// The target of the unconditional direct jump at `pc` (aarch64 `B`, x86 `JMP rel`,
    /// RISC-V `J`/`C.J`): not a call, and not a conditional branch (its callback could not
    /// tell whether it was taken).
    fn direct_jump(&self, _mode: Mode, _pc: u64, _bytes: &[u8]) -> Option<u64> {
        None
    }
    /// A jump (neither call nor return) through a general register plus an offset, where
    /// [`Isa::register_set_by`] can know the register (RISC-V `jalr zero, imm(rs1)`).
    fn register_offset_jump(&self, _mode: Mode, _bytes: &[u8]) -> Option<(u8, i64)> {
        None
    }
    /// `level` (as [`Isa::exception_level`] gives it, with what the engine knows of the
    /// security state) for names such as `EL1`, `S-EL1`, `ring0`, `S`.
    fn level_name(&self, level: Level) -> String;
    /// Whether the register call at the start of `bytes` branches to its register's value as
    /// it is (aarch64 `BLR`, not the authenticating `BLRAA`…; RISC-V `JALR` with offset 0),
    /// so that the value a load put there is its target ([`feeding_load`]).
    fn plain_register_call(&self, _mode: Mode, _bytes: &[u8]) -> bool {
        false
    }
    /// Whether the instruction at the start of `bytes` loads a whole 64-bit value from
    /// memory into general register `reg`, reading nothing else into it ([`feeding_load`]).
    fn loads_register(&self, _mode: Mode, _bytes: &[u8], _reg: u8) -> bool {
        false
    }
    /// Whether the instruction at the start of `bytes` can neither raise an exception, nor
    /// branch, nor write general register `reg` (integer arithmetic on registers): one that
    /// may sit between a load and the call it feeds ([`feeding_load`]). Conservative: `false`
    /// for anything not known.
    fn inert_for(&self, _mode: Mode, _bytes: &[u8], _reg: u8) -> bool {
        false
    }
    /// Whether the instruction at the start of `bytes` leaves general register `reg` alone
    /// and does not branch, though it may raise an exception (a load or store of another
    /// register, say): one that may sit between a load and the call it feeds when the call
    /// takes the value from the load's callback ([`Feed::direct`] false). Conservative.
    fn spares(&self, mode: Mode, bytes: &[u8], reg: u8) -> bool {
        self.inert_for(mode, bytes, reg)
    }
}

/// The call of exactly `len` bytes that ends at `pc` and returns there, if the last `len`
/// bytes of `before` are one: the step every [`Isa::call_ending_at`] takes for each length
/// a call of its architecture can have.
pub fn call_of_len<I: Isa + ?Sized>(
    isa: &I,
    mode: Mode,
    pc: u64,
    before: &[u8],
    len: usize,
) -> Option<CallSite> {
    let start = before.len().checked_sub(len)?;
    let call_pc = pc.checked_sub(len as u64)?;
    match isa.classify(mode, call_pc, &before[start..]) {
        InsnKind::Call { target, ret_addr } if ret_addr == pc => Some(CallSite {
            pc: call_pc,
            target: match target {
                Target::Direct(t) => Some(t),
                _ => None,
            },
        }),
        _ => None,
    }
}

mod exception_kind;
pub use exception_kind::ExceptionKind;

#[cfg(test)]
mod tests {
    #[test]
    fn an_announced_exception_is_one_with_its_delivery() {
        use super::{Announced, Discontinuity::*};
        let mut a = Announced::default();
        // x86: `INT 10h` at 0xfd09b raised, then delivered to its handler.
        assert_eq!(a.see(Exception, 0xfd09b, 0xfd09b), None);
        assert_eq!(a.see(Interrupt, 0xfd09b, 0xc578b), Some(Exception));
        // A hardware interrupt, with no announcement before it.
        assert_eq!(a.see(Interrupt, 0xf879f, 0xffea5), Some(Interrupt));
        // A page fault announced at its block's start (QEMU's pc not brought up to date
        // yet), delivered from the faulting instruction: still the one exception.
        assert_eq!(a.see(Exception, 0x1000, 0x1000), None);
        assert_eq!(a.see(Interrupt, 0x1007, 0x3000), Some(Exception));
        // The announcement is used once.
        assert_eq!(a.see(Interrupt, 0x1007, 0x3000), Some(Interrupt));
        // Other targets report exceptions once, delivered (aarch64's SVC), and host calls.
        assert_eq!(
            a.see(Exception, 0x4000_0004, 0xffff_8000_0801_0400),
            Some(Exception)
        );
        assert_eq!(a.see(HostCall, 0x4000_0008, 0x4000_0008), Some(HostCall));
    }

    use super::*;

    #[test]
    fn every_architecture_has_an_isa() {
        for &a in Arch::ALL {
            let isa = isa(a);
            assert!(isa.call_lookbehind() <= 16 && isa.fetch_len() <= 16);
            assert!(!isa.gpr_name(isa.frame_pointer()).is_empty());
        }
        let arm = isa(Arch::Aarch64).linux_user();
        assert_eq!((arm.openat, arm.execve), (56, 221));
        let x86 = isa(Arch::X86_64).linux_user();
        assert_eq!(
            (x86.openat, x86.close, x86.mmap, x86.execve),
            (257, 3, 9, 59)
        );
        assert_eq!(x86.stack_pointer, "rsp");
    }
}
