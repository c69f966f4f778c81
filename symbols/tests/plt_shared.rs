//! A stripped shared library's PLT entries for its own IFUNCs: Debian's libc.so.6 calls
//! `strlen`, `memchr` … through `.plt` entries whose GOT slots `IRELATIVE` relocations fill
//! (objdump labels them `<*ABS*+0x9f1c0@plt>`). The library has no `.symtab`, so each
//! entry must be named after the IFUNC its `.dynsym` exports at the resolver's address, not
//! left out (a call from `getenv` was an unnamed `<7ffff4c7e110>()` in a trace).
//! The libraries are the distribution's own; the expected names come from readelf and nm.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::run;
use qemu_uftrace_symbols::{load, LoadOptions};

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
}

/// `.rela.plt`'s relocations in order: (GOT slot, IRELATIVE's resolver or None).
fn rela_plt(readelf: &str, path: &Path) -> Vec<(u64, Option<u64>)> {
    let out = run(Command::new(readelf).arg("-rW").arg(path));
    let mut inside = false;
    let mut relocs = Vec::new();
    for l in out.lines() {
        if l.starts_with("Relocation section") {
            inside = l.contains("'.rela.plt'");
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        if !inside || f.len() < 3 || u64::from_str_radix(f[0], 16).is_err() {
            continue;
        }
        let resolver = f[2].ends_with("_IRELATIVE").then(|| hex(f[f.len() - 1]));
        relocs.push((hex(f[0]), resolver));
    }
    relocs
}

/// Resolver address -> the IFUNC names `nm -D` shows there.
fn exported_ifuncs(nm: &str, path: &Path) -> BTreeMap<u64, BTreeSet<String>> {
    let mut out: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for l in run(Command::new(nm).arg("-D").arg(path)).lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() == 3 && f[1] == "i" {
            let name = f[2].split('@').next().unwrap_or(f[2]);
            out.entry(hex(f[0])).or_default().insert(name.to_string());
        }
    }
    out
}

/// Every entry (address -> resolver) whose resolver `.dynsym` exports is named after one
/// of that IFUNC's names; there are at least `least` of them.
fn check(path: &Path, nm: &str, entries: &BTreeMap<u64, u64>, least: usize) {
    let names = exported_ifuncs(nm, path);
    let image = load(path, &LoadOptions::default()).expect("load");
    let ours: BTreeMap<u64, &str> = (image.functions.iter())
        .map(|f| (f.addr, f.name.as_str()))
        .collect();
    let mut named = 0;
    for (addr, resolver) in entries {
        let Some(want) = names.get(resolver) else {
            continue;
        };
        let got = ours.get(addr).copied();
        assert!(
            got.is_some_and(|g| want.contains(g)),
            "{}: the PLT entry at {addr:x} is {got:?}, expected one of {want:?}",
            path.display()
        );
        named += 1;
    }
    assert!(
        named >= least,
        "{}: {named} IFUNC PLT entries",
        path.display()
    );
}

#[test]
fn x86_64_libc_plt_entries_are_named_after_its_ifuncs() {
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    let slots: BTreeMap<u64, u64> = rela_plt("readelf", libc)
        .into_iter()
        .filter_map(|(slot, r)| Some((slot, r?)))
        .collect();
    // Each entry is `jmp *SLOT(%rip)`: objdump names the slot in its comment.
    let out = run(Command::new("objdump").args(["-d", "-j", ".plt"]).arg(libc));
    let entries: BTreeMap<u64, u64> = out
        .lines()
        .filter(|l| l.contains("jmp ") && l.contains("(%rip)"))
        .filter_map(|l| {
            let (addr, _) = l.trim().split_once(':')?;
            let (_, slot) = l.split_once("# ")?;
            let slot = hex(slot.split_whitespace().next()?);
            Some((hex(addr), *slots.get(&slot)?))
        })
        .collect();
    // Debian 12's libc.so.6 has 36 (strlen, strncmp, memchr …).
    check(libc, "nm", &entries, 20);
}

#[test]
fn aarch64_libc_plt_entries_are_named_after_its_ifuncs() {
    let libc = Path::new("/usr/aarch64-linux-gnu/lib/libc.so.6");
    // A 32-byte header, then entry i (16 bytes) for `.rela.plt`'s i-th relocation.
    let out = run(Command::new(common::READELF).arg("-SW").arg(libc));
    let plt = out
        .lines()
        .find_map(|l| {
            let (_, rest) = l.trim_start().strip_prefix('[')?.split_once(']')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            (f.first() == Some(&".plt")).then(|| hex(f[2]))
        })
        .expect(".plt");
    let entries: BTreeMap<u64, u64> = rela_plt(common::READELF, libc)
        .into_iter()
        .enumerate()
        .filter_map(|(i, (_, r))| Some((plt + 32 + 16 * i as u64, r?)))
        .collect();
    // Debian 12's has 2 (memchr, strlen's kin).
    check(libc, common::NM, &entries, 1);
}
