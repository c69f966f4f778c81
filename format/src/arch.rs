//! The guest architectures qemu-uftrace records. One type for the CLI (which emulator a
//! command runs, what a symbol file is built for), the plugin and engine (which decoder), and
//! the trace itself (`info`'s CPU description, which tells uftrace the architecture).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    Aarch64,
    X86_64,
    Riscv64,
}

impl Arch {
    pub const ALL: &'static [Arch] = &[Arch::Aarch64, Arch::X86_64, Arch::Riscv64];

    /// The architecture of a QEMU target name (`info->target_name`, `qemu-system-<name>`,
    /// `qemu-<name>`); `None` for targets qemu-uftrace does not record.
    pub fn from_qemu_target(name: &str) -> Option<Arch> {
        Arch::ALL.iter().copied().find(|a| a.qemu_target() == name)
    }

    /// QEMU's name for the target, which is also how messages name the architecture.
    pub fn qemu_target(self) -> &'static str {
        match self {
            Arch::Aarch64 => "aarch64",
            Arch::X86_64 => "x86_64",
            Arch::Riscv64 => "riscv64",
        }
    }

    /// The ELF `e_machine` of this architecture's (64-bit, little-endian) programs and
    /// kernels.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::Aarch64 => 183, // EM_AARCH64
            Arch::X86_64 => 62,   // EM_X86_64
            Arch::Riscv64 => 243, // EM_RISCV
        }
    }

    /// The architecture of a 64-bit ELF file's `e_machine`.
    pub fn from_elf_machine(machine: u16) -> Option<Arch> {
        Arch::ALL
            .iter()
            .copied()
            .find(|a| a.elf_machine() == machine)
    }

    /// The first word of `info`'s `cpuinfo:desc=`, from which uftrace picks the
    /// architecture (and with it how it reads registers and symbols).
    pub fn uftrace_cpu_desc(self) -> &'static str {
        match self {
            Arch::Aarch64 => "ARM64",
            // uftrace takes any description it does not know as x86-64.
            Arch::X86_64 => "x86_64",
            Arch::Riscv64 => "RISCV64",
        }
    }

    /// The architecture a trace was recorded for, from its `cpuinfo:desc=` line.
    pub fn from_uftrace_cpu_desc(desc: &str) -> Option<Arch> {
        let first = desc.split_whitespace().next()?;
        Arch::ALL
            .iter()
            .copied()
            .find(|a| a.uftrace_cpu_desc() == first)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.qemu_target())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(Arch::from_qemu_target("aarch64"), Some(Arch::Aarch64));
        assert_eq!(Arch::from_qemu_target("x86_64"), Some(Arch::X86_64));
        assert_eq!(Arch::from_qemu_target("riscv64"), Some(Arch::Riscv64));
        assert_eq!(Arch::from_qemu_target("riscv32"), None);
        assert_eq!(Arch::from_qemu_target("i386"), None);
        let descs: Vec<&str> = Arch::ALL.iter().map(|a| a.uftrace_cpu_desc()).collect();
        assert_eq!(descs, ["ARM64", "x86_64", "RISCV64"]);
        for &a in Arch::ALL {
            let desc = format!("{} (QEMU TCG, system-mode {a})", a.uftrace_cpu_desc());
            assert_eq!(Arch::from_uftrace_cpu_desc(&desc), Some(a));
        }
        assert_eq!(Arch::from_uftrace_cpu_desc("i686"), None);
        assert_eq!(Arch::from_elf_machine(62), Some(Arch::X86_64));
        assert_eq!(Arch::from_elf_machine(243), Some(Arch::Riscv64));
        assert_eq!(Arch::from_elf_machine(3), None); // EM_386
        assert_eq!(Arch::from_uftrace_cpu_desc(""), None);
    }
}
