//! Everything about a guest architecture, behind [`Isa`]: instruction classes from bytes,
//! call length, frame-record layout, the exception model and the registers that say which
//! task and privilege level run. One module per architecture (as uftrace's `arch/<arch>/`);
//! nothing outside `arch/` knows an encoding or a register name.

pub mod aarch64;

/// Where a call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Known at translation time (BL): no register read when it executes.
    Direct(u64),
    /// In a general register (BLR and its pointer-authenticated forms).
    Register(u8),
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

/// A privilege level as the architecture numbers it (aarch64: EL, with bit 2 set in the
/// Secure state; x86: ring), kept apart by `split_levels`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Level(pub u8);

/// The guest architectures the engine knows. The plugin picks one from QEMU's target name;
/// the CLI from the emulator's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    Aarch64,
}

impl Arch {
    pub const ALL: &'static [Arch] = &[Arch::Aarch64];

    /// The architecture of a QEMU target name (`info->target_name`, `qemu-system-<name>`).
    pub fn from_qemu_target(name: &str) -> Option<Arch> {
        Arch::ALL.iter().copied().find(|a| a.qemu_target() == name)
    }

    pub fn qemu_target(self) -> &'static str {
        match self {
            Arch::Aarch64 => "aarch64",
        }
    }

    pub fn isa(self) -> &'static dyn Isa {
        match self {
            Arch::Aarch64 => &aarch64::Aarch64,
        }
    }

    /// How uftrace's `info` recognises the architecture (`cpuinfo:desc=` prefix).
    pub fn uftrace_cpu_desc(self) -> &'static str {
        match self {
            Arch::Aarch64 => "ARM64",
        }
    }
}

/// The guest architecture as the plugin needs it.
pub trait Isa: Sync + Send {
    /// Classifies the instruction at `pc` from its bytes (never from disassembly text).
    fn classify(&self, pc: u64, bytes: &[u8]) -> InsnKind;
    /// How many bytes `classify` wants (fixed-width ISAs: the instruction size).
    fn fetch_len(&self) -> usize;
    /// Name of general register `n` in QEMU's register list (as gdb names it).
    fn gpr_name(&self, n: u8) -> String;
    /// The frame-pointer register, whose frame records (`[fp] = caller fp`, `[fp+8] = return
    /// address`) let the plugin rebuild a stack it lost track of.
    fn frame_pointer(&self) -> u8;
    /// Size of the call instruction that precedes a return address, to re-decode it.
    fn call_len(&self) -> u64;
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
    /// A code address without its pointer-authentication bits.
    fn strip_authentication(&self, addr: u64) -> u64 {
        addr
    }

    /// The register an exception taken to `level` saves the interrupted state in, whose
    /// privilege level an exception return drops to.
    fn saved_status_register(&self, level: Level) -> Option<&'static str>;
    /// The register saying why a synchronous exception was taken to `level`.
    fn syndrome_register(&self, level: Level) -> Option<&'static str>;
    /// What kind of exception QEMU reported, from the syndrome when there is one.
    fn exception_kind(&self, what: Discontinuity, syndrome: Option<u64>) -> ExceptionKind;
    /// The register an OS keeps its running task in, written by [`InsnKind::SetTaskPointer`].
    fn task_pointer_register(&self) -> Option<&'static str> {
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
    /// `level` (as [`Isa::exception_level`] gives it, with what the engine knows of the
    /// security state) for names such as `EL1`, `S-EL1`, `ring 0`.
    fn level_name(&self, level: Level) -> String;
}

pub use crate::exceptions::ExceptionKind;
