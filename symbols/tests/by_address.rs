//! A stripped file's functions that no symbol names are named by their address in the file
//! (`libc.so.6+0x2a1c0`), from its `.eh_frame`, the functions its dynamic section has the
//! loader call (`DT_INIT`, `DT_FINI`, `.init_array`, `.fini_array`) and its entry point.
//! The files are the distribution's own; the expected addresses come from binutils' readelf.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::run;
use qemu_uftrace_symbols::{load, LoadOptions};

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// `DT_INIT` and `DT_FINI` of `path`, and its header's entry point where there is one, as
/// readelf shows them.
fn init_fini(path: &Path) -> BTreeSet<u64> {
    let out = run(Command::new("readelf").arg("-dW").arg(path));
    let mut calls: BTreeSet<u64> = (out.lines())
        .filter(|l| l.contains("(INIT)") || l.contains("(FINI)"))
        .filter_map(|l| hex(l.split_whitespace().last()?))
        .collect();
    calls.extend(Some(common::readelf_entry(path)).filter(|&a| a != 0));
    calls
}

/// Loads `path` and checks what it names by address against readelf: every FDE start not
/// inside a named function is named `FILE+0xSTART`, and nothing else but the loader's
/// calls is. Returns the image.
fn check(path: &Path) -> qemu_uftrace_symbols::Image {
    // As a guest process's file is read.
    let opts = LoadOptions {
        name_entry: true,
        ..Default::default()
    };
    let image = load(path, &opts).expect("load");
    let file = path.file_name().unwrap().to_string_lossy();
    let named_inside = |a: u64| {
        (image.functions.iter()).any(|f| f.addr == a || (f.addr..f.addr + f.size).contains(&a))
    };
    let fdes = qemu_uftrace_tests::readelf_fde_starts(path);
    assert!(fdes.len() > 50, "{}: readelf found no FDEs", path.display());
    let ours: BTreeSet<u64> = image.by_address.iter().map(|f| f.addr).collect();
    for f in &image.by_address {
        assert_eq!(f.name, format!("{file}+{:#x}", f.addr));
    }
    let missing: Vec<String> = (fdes.iter())
        .filter(|&&a| !named_inside(a) && !ours.contains(&a))
        .map(|a| format!("{a:#x}"))
        .collect();
    assert!(
        missing.is_empty(),
        "{}: FDEs not named: {missing:?}",
        path.display()
    );
    let loader = init_fini(path);
    let stray: Vec<String> = (ours.iter())
        .filter(|a| !fdes.contains(a) && !loader.contains(a))
        .map(|a| format!("{a:#x}"))
        .collect();
    // .init_array's and .fini_array's pointers are the rest (crtstuff's frame_dummy and
    // __do_global_dtors_aux): two at most in a file linked with crtbegin.o.
    assert!(
        stray.len() <= 2,
        "{}: names at no FDE: {stray:?}",
        path.display()
    );
    for a in &loader {
        assert!(
            ours.contains(a) || named_inside(*a),
            "{}: DT_INIT/DT_FINI/entry {a:#x} not named",
            path.display()
        );
    }
    image
}

/// Debian's liblzma (dpkg needs it: on every Debian machine, never with a debug file here)
/// exports its public functions; its static ones are named by address.
#[test]
fn a_stripped_library_s_other_functions_are_named_by_address() {
    let image = check(Path::new("/lib/x86_64-linux-gnu/liblzma.so.5"));
    assert!(image.functions.len() > 50, "{}", image.functions.len());
    assert!(image.by_address.len() > 100, "{}", image.by_address.len());
}

/// A program with no function symbols at all (its `.dynsym` only imports): once refused,
/// now its PLT entries by the functions they reach and the rest by address.
#[test]
fn a_program_without_symbols_is_named_by_address() {
    let image = check(Path::new("/usr/bin/ls"));
    assert!(
        image.functions.iter().any(|f| f.name == "malloc"),
        "ls's PLT entries are not named"
    );
    assert!(image.by_address.len() > 50, "{}", image.by_address.len());
}
