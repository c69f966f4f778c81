//! What an exception entry is shown as, decided by each architecture (`Isa::exception_kind`).

use qemu_uftrace_format::pseudo;

/// What an exception entry is shown as; each is a pseudo-function of the same index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExceptionKind {
    Irq = 0,
    Fiq = 1,
    Svc = 2,
    Hvc = 3,
    Smc = 4,
    DataAbort = 5,
    InsnAbort = 6,
    Brk = 7,
    SError = 8,
    Other = 9,
    PageFault = 10,
    GeneralProtection = 11,
    InvalidOp = 12,
    Int3 = 13,
    Debug = 14,
    Nmi = 15,
    DivideError = 16,
    DoubleFault = 17,
    MachineCheck = 18,
    DeviceNotAvailable = 19,
    /// A software interrupt (x86 `INT n`) that is no system call.
    SoftInt = 20,
}

impl ExceptionKind {
    /// The pseudo-function's address (as a frame's `func`).
    pub fn addr(self) -> u64 {
        pseudo::addr(self as u8)
    }

    pub fn name(self) -> &'static str {
        pseudo::NAMES[self as usize]
    }
}
