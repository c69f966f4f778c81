//! Debian's riscv64 kernel (scripts/install-deps.sh caches its Image and the -dbg package's
//! vmlinux): the kallsyms recovered from the Image against the vmlinux's own symbol table as
//! riscv64 binutils' `nm` lists it. Debian's riscv64 kernels are 6.12 (trixie) or 7.x
//! (forky), whose tables hold place-relative offsets. Missing files fail this test.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::{cached, load_kernel_image_as, run};
use qemu_uftrace_symbols::Arch;

/// nm's text symbols of the -dbg vmlinux, by address, as kallsyms keeps them: no local
/// labels (`.L…`) nor mapping symbols (`$x…`), also among the copies objcopy prefixes for
/// the EFI stub (`__efistub_`) and the position-independent early code (`__pi_`).
fn nm_text() -> BTreeMap<u64, BTreeSet<String>> {
    let out = run(Command::new("riscv64-linux-gnu-nm")
        .arg("--defined-only")
        .arg(cached("kernel-riscv64-dbg/vmlinux")));
    let mut map: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [addr, kind, name] = f[..] else { continue };
        let own = ["__efistub_", "__pi_"]
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .unwrap_or(name);
        if matches!(kind, "T" | "t" | "W" | "w") && !own.starts_with(".L") && !own.starts_with('$')
        {
            map.entry(u64::from_str_radix(addr, 16).unwrap())
                .or_default()
                .insert(name.to_string());
        }
    }
    map
}

#[test]
fn kallsyms_of_the_image_match_the_dbg_vmlinux() {
    let image = load_kernel_image_as("kernel-riscv64/vmlinuz", Arch::Riscv64);
    let nm = nm_text();
    let wrong: Vec<_> = image
        .functions
        .iter()
        .filter(|f| !nm.get(&f.addr).is_some_and(|n| n.contains(&f.name)))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} functions not in nm at their address: {:x?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    let found: BTreeSet<u64> = image.functions.iter().map(|f| f.addr).collect();
    let missing = nm.keys().filter(|a| !found.contains(a)).count();
    let pct = 100.0 * missing as f64 / nm.len() as f64;
    eprintln!(
        "kallsyms: {} functions, nm {} text addresses, {missing} missing ({pct:.2}%)",
        found.len(),
        nm.len()
    );
    assert!(image.functions.len() > 20_000, "a whole kernel's functions");
    assert!(pct <= 0.5, "{pct:.2}% of nm's text addresses missing");
    // The Image starts with `_start` at the link address.
    assert_eq!(image.functions[0].name, "_start");
    assert_eq!(image.functions[0].addr, 0xffff_ffff_8000_0000);
}
