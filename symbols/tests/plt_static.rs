//! A static program's iplt: each `.plt` entry jumps through a GOT slot that an
//! `IRELATIVE` relocation fills with what an IFUNC resolver returns. Each entry must be
//! named after that IFUNC symbol (`memcpy`), not after the symbol before `.plt` (`_init`).
//! Built with the real compilers; the expected names come from readelf, objdump and nm.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::run;
use qemu_uftrace_symbols::{load, LoadOptions};

const SOURCE: &str = "#include <string.h>\n#include <stdio.h>\n\
    char buf[64];\n\
    int main(int argc, char **argv) {\n\
      memcpy(buf, argv[0], strlen(argv[0]) % 32);\n\
      memset(buf + 40, argc, 8);\n\
      printf(\"%s\\n\", buf);\n\
      return (int)strlen(buf);\n\
    }\n";

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
}

/// GOT slot -> the resolver an IRELATIVE relocation calls for it (readelf -rW).
fn irelative(readelf: &str, path: &Path) -> BTreeMap<u64, u64> {
    run(Command::new(readelf).arg("-rW").arg(path))
        .lines()
        .filter(|l| l.contains("_IRELATIVE"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (hex(f[0]), hex(f[f.len() - 1]))
        })
        .collect()
}

/// Resolver address -> the IFUNC names there (nm's `i`).
fn ifuncs(nm: &str, path: &Path) -> BTreeMap<u64, BTreeSet<String>> {
    let mut out: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for l in run(Command::new(nm).arg(path)).lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() == 3 && f[1] == "i" {
            out.entry(hex(f[0])).or_default().insert(f[2].to_string());
        }
    }
    out
}

/// `.plt`'s address range (readelf -SW).
fn plt(readelf: &str, path: &Path) -> (u64, u64) {
    run(Command::new(readelf).arg("-SW").arg(path))
        .lines()
        .find_map(|l| {
            let (_, rest) = l.trim_start().strip_prefix('[')?.split_once(']')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            (f.first() == Some(&".plt")).then(|| (hex(f[2]), hex(f[2]) + hex(f[4])))
        })
        .expect(".plt")
}

/// Checks every entry: `slot_of` says which GOT slot the entry at an address reads.
fn check(path: &Path, readelf: &str, nm: &str, entries: BTreeMap<u64, u64>) {
    let slots = irelative(readelf, path);
    let names = ifuncs(nm, path);
    assert!(entries.len() >= 3, "{entries:x?}");
    let (lo, hi) = plt(readelf, path);
    let image = load(path, &LoadOptions::default()).expect("load");
    let ours: BTreeMap<u64, String> = image
        .functions
        .iter()
        .filter(|f| f.addr >= lo && f.addr < hi)
        .map(|f| (f.addr, f.name.clone()))
        .collect();
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        entries.keys().collect::<Vec<_>>(),
        "{}",
        path.display()
    );
    for (addr, slot) in &entries {
        let want = &names[&slots[slot]];
        assert!(
            want.contains(&ours[addr]),
            "{addr:x}: {} not in {want:?}",
            ours[addr]
        );
    }
    // Of an IFUNC's aliases, the name users write: `memcpy`, not `__libc_memcpy` (aarch64)
    // or `__new_memcpy` (x86_64), whichever the symbol table lists last.
    let all: Vec<&str> = ours.values().map(String::as_str).collect();
    assert!(all.contains(&"memcpy"), "{all:?}");
}

#[test]
fn aarch64_static_iplt_entries_are_named_after_their_ifuncs() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("iplt.c");
    std::fs::write(&src, SOURCE).unwrap();
    let elf = dir.path().join("iplt");
    run(Command::new(common::CC)
        .args(["-O1", "-static", "-fno-builtin", "-o"])
        .arg(&elf)
        .arg(&src));
    // No PLT header: entry i (16 bytes: adrp, ldr, add, br) reads the i-th slot.
    let (lo, _) = plt(common::READELF, &elf);
    let entries = irelative(common::READELF, &elf)
        .keys()
        .enumerate()
        .map(|(i, slot)| (lo + 16 * i as u64, *slot))
        .collect();
    check(&elf, common::READELF, common::NM, entries);
}

#[test]
fn x86_64_static_iplt_entries_are_named_after_their_ifuncs() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("iplt.c");
    std::fs::write(&src, SOURCE).unwrap();
    let elf = dir.path().join("iplt");
    run(Command::new("gcc")
        .args(["-O1", "-static", "-fno-builtin", "-o"])
        .arg(&elf)
        .arg(&src));
    // Each entry is `jmp *SLOT(%rip)`: objdump names the slot in its comment.
    let (lo, hi) = plt("readelf", &elf);
    let entries = run(Command::new("objdump").args(["-d", "-j", ".plt"]).arg(&elf))
        .lines()
        .filter(|l| l.contains("jmp ") && l.contains("(%rip)"))
        .filter_map(|l| {
            let (addr, _) = l.trim().split_once(':')?;
            let (_, slot) = l.split_once("# ")?;
            Some((hex(addr), hex(slot.split_whitespace().next()?)))
        })
        .filter(|(a, _)| *a >= lo && *a < hi)
        .collect();
    check(&elf, "readelf", "nm", entries);
}
