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

/// Functions for each of `found` (`(address, size)`, sorted; the first of an address
/// counts) that none of `named` or `known` (both sorted) starts at or spans, named
/// `FILE+0xADDR` after `path`'s file name: the address `addr2line -e FILE` takes.
pub(crate) fn by_address(
    path: &std::path::Path,
    named: &[Function],
    known: &[Function],
    found: &[(u64, u64)],
) -> Vec<Function> {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().replace(char::is_whitespace, "_"))
        .unwrap_or_else(|| "image".into());
    let covers = |funcs: &[Function], addr: u64| {
        let i = funcs.partition_point(|f| f.addr <= addr);
        i.checked_sub(1)
            .is_some_and(|i| funcs[i].addr == addr || addr - funcs[i].addr < funcs[i].size)
    };
    let mut out: Vec<Function> = Vec::new();
    for &(addr, size) in found {
        if covers(named, addr) || covers(known, addr) || out.last().is_some_and(|f| f.addr == addr)
        {
            continue;
        }
        out.push(Function {
            addr,
            size,
            name: format!("{file}+{addr:#x}"),
            global: false,
            line: None,
        });
    }
    out
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
    fn by_address_names_only_what_nothing_covers() {
        let f = |addr, size| Function {
            addr,
            size,
            name: String::new(),
            global: true,
            line: None,
        };
        let named = [f(0x100, 0x20), f(0x200, 0)];
        let known = [f(0x300, 8)];
        let found = [
            (0x100, 0x20), // a named function's own FDE
            (0x110, 4),    // inside it (a label's, not a function's)
            (0x200, 0x10), // where a sizeless symbol starts
            (0x280, 0x10),
            (0x280, 0), // the same function again: the first counts
            (0x304, 1), // inside one named by address before
            (0x400, 0),
        ];
        let out = by_address(
            std::path::Path::new("/usr/lib/lib a.so"),
            &named,
            &known,
            &found,
        );
        let got: Vec<_> = out
            .iter()
            .map(|f| (f.addr, f.size, f.name.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (0x280, 0x10, "lib_a.so+0x280"),
                (0x400, 0, "lib_a.so+0x400")
            ]
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
