//! Turning raw symbol candidates into the sorted, alias-free function list of an [`Image`].

use crate::{demangle::demangle, Function};

/// One symbol that may become a function.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub addr: u64,
    pub size: u64,
    pub name: &'a [u8],
    pub global: bool,
    /// Typed as a function (STT_FUNC), not merely a label in code.
    pub typed: bool,
}

/// ARM/AArch64/RISC-V mapping symbols (`$x`, `$d`, `$a`, `$t`, `$x.12`, `$xrv64i2p1`) mark
/// code/data boundaries, not functions. arm64 kernels also carry them with the prefix of
/// the KVM hypervisor objects (`__kvm_nvhe_$x`).
pub(crate) fn is_mapping_symbol(name: &[u8]) -> bool {
    // arm64's nVHE hypervisor objects and riscv64's early position-independent ones
    // (arch/riscv/kernel/pi) have every symbol renamed with a prefix, mapping symbols too.
    let name = name
        .strip_prefix(b"__kvm_nvhe_")
        .or_else(|| name.strip_prefix(b"__pi_"))
        .unwrap_or(name);
    matches!(name, [b'$', b'x' | b'd' | b'a' | b't', ..])
}

/// Sorts by address and collapses aliases (same address) into one function named by the best
/// alias: typed over untyped (a function's own name over a linker label such as `_stext` on
/// the same address), global over local, then the shortest name, then the lexicographically
/// first, so the choice never depends on symbol-table order. The function is global when any
/// alias is. Size is the largest among aliases, as a label alias carries no size of its own.
pub(crate) fn collapse(mut cands: Vec<Candidate<'_>>, demangle_names: bool) -> Vec<Function> {
    cands.sort_unstable_by(|a, b| {
        a.addr
            .cmp(&b.addr)
            .then(b.typed.cmp(&a.typed))
            .then(b.global.cmp(&a.global))
            .then(a.name.len().cmp(&b.name.len()))
            .then(a.name.cmp(b.name))
    });
    let mut out: Vec<Function> = Vec::with_capacity(cands.len());
    let mut i = 0;
    while i < cands.len() {
        let best = cands[i];
        let mut size = best.size;
        let mut global = best.global;
        let mut j = i + 1;
        while j < cands.len() && cands[j].addr == best.addr {
            size = size.max(cands[j].size);
            global |= cands[j].global;
            j += 1;
        }
        let name = String::from_utf8_lossy(best.name).into_owned();
        out.push(Function {
            addr: best.addr,
            size,
            name: if demangle_names { demangle(name) } else { name },
            global,
            line: None,
        });
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(addr: u64, name: &str, global: bool, typed: bool, size: u64) -> Candidate<'_> {
        Candidate {
            addr,
            size,
            name: name.as_bytes(),
            global,
            typed,
        }
    }

    #[test]
    fn aliases() {
        let f = collapse(
            vec![
                c(0x20, "b", false, true, 4),
                c(0x10, "zz_local", false, true, 8),
                c(0x10, "long_global", true, false, 0),
                c(0x10, "global_fn", true, true, 8),
                c(0x10, "aaaa_fn", true, true, 8),
                c(0x20, "a", false, true, 4),
            ],
            false,
        );
        let names: Vec<_> = f
            .iter()
            .map(|f| (f.addr, f.name.as_str(), f.size))
            .collect();
        assert_eq!(names, [(0x10, "aaaa_fn", 8), (0x20, "a", 4)]);
        assert!(f[0].global);
    }

    #[test]
    fn a_function_beats_a_label_on_its_address() {
        // arm64 vmlinux: `_stext` (global label) and `gic_handle_irq` (local function).
        let f = collapse(
            vec![
                c(0x10, "_stext", true, false, 0),
                c(0x10, "gic_handle_irq", false, true, 0x88),
            ],
            false,
        );
        assert_eq!(
            (f[0].name.as_str(), f[0].size, f[0].global),
            ("gic_handle_irq", 0x88, true)
        );
    }

    #[test]
    fn mapping_symbols() {
        for s in [
            "$x",
            "$d",
            "$a",
            "$t",
            "$x.12",
            "$d.3",
            "$xrv64i2p1",
            "__kvm_nvhe_$x",
            "__pi_$x",
        ] {
            assert!(is_mapping_symbol(s.as_bytes()), "{s}");
        }
        for s in ["x", "_$x", "$", "$foo", "__kvm_nvhe_el1_sync"] {
            assert!(!is_mapping_symbol(s.as_bytes()), "{s}");
        }
    }
}
