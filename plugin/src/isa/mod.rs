//! Per-architecture instruction classification: the only part of the plugin that knows
//! encodings. Everything else works on [`InsnKind`].

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
    Other,
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
    fn exception_level(&self, status: u64) -> u8;
    /// The register an exception return at `level` jumps to.
    fn exception_link_register(&self, level: u8) -> Option<&'static str>;
    /// A code address without its pointer-authentication bits.
    fn strip_authentication(&self, addr: u64) -> u64 {
        addr
    }
}

/// The decoder for a QEMU target name (`info->target_name`).
pub fn for_target(name: &str) -> Option<&'static dyn Isa> {
    match name {
        "aarch64" => Some(&aarch64::Aarch64),
        _ => None,
    }
}
