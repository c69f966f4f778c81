//! Pseudo-functions: what the engine shows as a function that is not one, such as an
//! exception entry (`[irq]`, `[svc]` …) under which the handler's calls nest.
//!
//! They live at fixed addresses in the last page of the 48-bit record address space, which
//! no guest runs code in (for a kernel it is the top page of the virtual address space, for
//! a user program the page above its stack), and are named by a module of their own: a map
//! line covering the page and a `.sym` file listing the names.

/// Where the pseudo-functions start (48-bit, as records hold addresses).
pub const BASE: u64 = 0xffff_ffff_f000;
/// The module name their map line and `.sym` file carry (a map path cannot have brackets).
pub const MODULE: &str = "qemu-uftrace-exceptions";
/// Bytes between two pseudo-functions.
const STRIDE: u64 = 0x10;

/// Every pseudo-function, by index: exception entries first.
pub const NAMES: &[&str] = &[
    "[irq]",
    "[fiq]",
    "[svc]",
    "[hvc]",
    "[smc]",
    "[data-abort]",
    "[insn-abort]",
    "[brk]",
    "[serror]",
    "[exception]",
];

/// The address of pseudo-function `index` (an index into [`NAMES`]).
pub const fn addr(index: u8) -> u64 {
    BASE + index as u64 * STRIDE
}

/// The bytes the pseudo module's map line covers.
pub const fn size() -> u64 {
    0x1000
}

/// Whether a record address is a pseudo-function's.
pub const fn is_pseudo(addr: u64) -> bool {
    crate::addr48(addr) >= BASE
}

/// `(offset, name)` of each pseudo-function, for the module's `.sym` file.
pub fn symbols() -> impl Iterator<Item = (u64, &'static str)> {
    NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| (addr(i as u8) - BASE, *name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_page() {
        assert!(addr(NAMES.len() as u8) - BASE <= size());
        assert!(is_pseudo(addr(0)) && !is_pseudo(BASE - 1));
        assert!(is_pseudo(0xffff_ffff_ffff_f000));
    }
}
