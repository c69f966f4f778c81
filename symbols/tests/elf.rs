//! ELF symbols against binutils' `nm`, and the errors for files we cannot use.

mod common;

use std::path::Path;

use common::*;
use qemu_uftrace_symbols::{elf_arch, load, Arch, LoadOptions, SymbolError};

#[test]
fn functions_match_nm() {
    let dir = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        for path in build_all(dir.path(), opt) {
            let image = load(&path, &LoadOptions::default()).unwrap();
            assert_eq!(image.arch, Some(Arch::Aarch64));
            assert_matches_nm(&image, &nm_functions(&path), 0);
        }
    }
}

#[test]
fn statics_aliases_and_untyped_labels() {
    let dir = tempfile::tempdir().unwrap();
    let paths = build_all(dir.path(), "-O2");
    let exe = load(&paths[0], &LoadOptions::default()).unwrap();
    let helpers: Vec<_> = exe
        .functions
        .iter()
        .filter(|f| f.name == "helper")
        .collect();
    assert_eq!(helpers.len(), 2, "one static helper per file");
    assert!(helpers.iter().all(|f| !f.global));
    assert_ne!(helpers[0].addr, helpers[1].addr);
    // The alias: one function, the shorter of the two global names.
    let names: Vec<_> = exe.functions.iter().map(|f| f.name.as_str()).collect();
    assert!(
        names.contains(&"real_impl") && !names.contains(&"alias_impl"),
        "{names:?}"
    );
    assert!(names.contains(&"weak_fn"));

    let bare = load(&paths[2], &LoadOptions::default()).unwrap();
    let entry = bare
        .functions
        .iter()
        .find(|f| f.name == "untyped_entry")
        .expect("untyped label");
    assert!(entry.global);
    assert_eq!(bare.start, 0x4008_0000, "start of the executable segment");
    assert!(bare.end > bare.functions.last().unwrap().addr);
    assert!(bare
        .functions
        .iter()
        .all(|f| f.addr >= 0x4008_0000 && f.addr < bare.end));
}

#[test]
fn pie_with_load_offset() {
    let dir = tempfile::tempdir().unwrap();
    let pie = &build_all(dir.path(), "-O0")[1];
    let offset = 0x5555_5555_0000;
    let plain = load(pie, &LoadOptions::default()).unwrap();
    let moved = load(
        pie,
        &LoadOptions {
            offset,
            ..Default::default()
        },
    )
    .unwrap();
    assert_matches_nm(&moved, &nm_functions(pie), offset);
    assert_eq!(moved.start, plain.start + offset);
    assert_eq!(moved.end, plain.end + offset);
    assert!(moved.start < moved.end);
    // Read at 0 and moved afterwards (user mode reads files before it knows where they go):
    // the same image.
    let shifted = plain.shifted(offset);
    assert_eq!(shifted.functions, moved.functions);
    assert_eq!((shifted.start, shifted.end), (moved.start, moved.end));
}

/// `DT_NEEDED` as binutils' `readelf -d` lists it, in order; none for a static program.
#[test]
fn needed_libraries_match_readelf() {
    let dir = tempfile::tempdir().unwrap();
    let paths = build_all(dir.path(), "-O0");
    for path in paths
        .iter()
        .map(|p| p.as_path())
        .chain([Path::new("/bin/sh")])
    {
        let out = std::process::Command::new("readelf")
            .args(["-d", "-W"])
            .arg(path)
            .output()
            .expect("readelf runs");
        let want: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("(NEEDED)"))
            .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_string()))
            .collect();
        assert_eq!(
            qemu_uftrace_symbols::needed_libraries(path),
            want,
            "{}",
            path.display()
        );
    }
    assert!(qemu_uftrace_symbols::needed_libraries(Path::new("/bin/sh"))
        .contains(&"libc.so.6".to_string()));
}

#[test]
fn arch_checks() {
    let dir = tempfile::tempdir().unwrap();
    let bare = &build_all(dir.path(), "-O0")[2];
    assert_eq!(elf_arch(bare).unwrap(), Some(Arch::Aarch64));
    assert_eq!(
        elf_arch(Path::new("/bin/true")).unwrap(),
        Some(Arch::X86_64)
    );
    let text = dir.path().join("System.map");
    std::fs::write(&text, "ffff800008000000 T _text\n").unwrap();
    assert_eq!(elf_arch(&text).unwrap(), None);

    let opts = LoadOptions {
        expected_arch: Some(Arch::Aarch64),
        ..Default::default()
    };
    match load(Path::new("/bin/true"), &opts) {
        Err(SymbolError::WrongArch {
            found,
            expected: Arch::Aarch64,
            ..
        }) => assert_eq!(found, "x86_64"),
        other => panic!("{other:?}"),
    }
    assert!(load(bare, &opts).is_ok());
}

#[test]
fn stripped() {
    let dir = tempfile::tempdir().unwrap();
    for path in build_all(dir.path(), "-O0") {
        let stripped = dir.path().join("stripped");
        run(std::process::Command::new(STRIP)
            .arg("-o")
            .arg(&stripped)
            .arg(&path));
        // Each function of the unstripped build is named by its address in the file
        // (`stripped+0x400580`), from the FDE the compiler gave it; its PLT entries by the
        // functions they reach, as before. glibc's `call_weak_fn` (crti.S) has no FDE, and
        // only `_start` calls it.
        let full = load(&path, &LoadOptions::default()).expect("the unstripped build");
        let image = load(&stripped, &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let named: std::collections::HashMap<u64, &str> = (image.by_address.iter())
            .map(|f| (f.addr, f.name.as_str()))
            .collect();
        let missing: Vec<&str> = (full.functions.iter())
            .filter(|f| f.size > 0 && f.name != "call_weak_fn")
            .filter(|f| !(image.functions.iter()).any(|p| p.addr == f.addr && p.name == f.name))
            .filter(|f| named.get(&f.addr) != Some(&&*format!("stripped+{:#x}", f.addr)))
            .map(|f| f.name.as_str())
            .collect();
        assert!(
            missing.is_empty(),
            "{}: {missing:?} not named by address",
            path.display()
        );
    }
}

/// A file with no symbol table, no `.dynsym`, no `.eh_frame` and no dynamic section, as
/// klibc's programs and library in Debian's initramfs are: as a guest process's file
/// (`name_entry`), named by its header's entry point (`_start`, where readelf says), so that
/// it can be placed and what the trace enters in it named by address as well.
#[test]
fn nothing_but_an_entry_point() {
    let dir = tempfile::tempdir().unwrap();
    let full = build(
        dir.path(),
        "bare-no-cfi",
        &["bare.c"],
        &[
            "-O1",
            "-ffreestanding",
            "-nostdlib",
            "-static",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-Wl,-Ttext=0x40080000",
        ],
    );
    let sections = run(std::process::Command::new("readelf").arg("-SW").arg(&full));
    assert!(!sections.contains(".eh_frame"), "{sections}");
    let stripped = dir.path().join("stripped");
    run(std::process::Command::new(STRIP)
        .arg("-o")
        .arg(&stripped)
        .arg(&full));
    let entry = readelf_entry(&stripped);
    let functions = nm_functions(&full);
    let names_at = |a: u64| functions.get(&a).map(|e| e.names.clone());
    assert_eq!(names_at(entry), Some(vec!["_start".to_string()]));
    // Given to name functions (`--symbols`), refused: one name would hide a wrong file.
    match load(&stripped, &LoadOptions::default()) {
        Err(SymbolError::Stripped { .. }) => {}
        other => panic!("{other:?}"),
    }
    let opts = LoadOptions {
        name_entry: true,
        ..Default::default()
    };
    let mut image = load(&stripped, &opts).expect("named by its entry");
    assert!(image.functions.is_empty(), "{:?}", image.functions);
    let named: Vec<(u64, &str)> = (image.by_address.iter())
        .map(|f| (f.addr, f.name.as_str()))
        .collect();
    assert_eq!(named, [(entry, &*format!("stripped+{entry:#x}"))]);
    // What a trace entered is named beside it.
    let (&work, _) = (functions.iter())
        .find(|(_, e)| e.names.iter().any(|n| n == "work"))
        .expect("work in nm");
    assert_eq!(image.name_by_address(&[(work, 1)]), 1);
    assert!(image
        .by_address
        .iter()
        .any(|f| f.addr == work && f.name == format!("stripped+{work:#x}")));
}

#[test]
fn truncated_and_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let exe = &build_all(dir.path(), "-O0")[0];
    let bytes = std::fs::read(exe).unwrap();
    let cut = dir.path().join("cut");
    // Section headers sit at the end of the file: cutting anywhere loses them.
    for len in [4, 16, 63, 64, 200, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        match load(
            &cut,
            &LoadOptions {
                source_lines: true,
                ..Default::default()
            },
        ) {
            Err(SymbolError::Corrupt { .. }) => {}
            other => panic!("cut at {len}: {other:?}"),
        }
    }
    // No cut point may panic, whatever it returns.
    for len in (0..bytes.len()).step_by(97) {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let _ = load(
            &cut,
            &LoadOptions {
                source_lines: true,
                ..Default::default()
            },
        );
    }
    // Garbage in the DWARF must only cost lines.
    let mut mangled = bytes.clone();
    for (i, b) in mangled.iter_mut().enumerate().skip(0x1000) {
        if i % 7 == 0 {
            *b ^= 0x5a;
        }
    }
    std::fs::write(&cut, &mangled).unwrap();
    let _ = load(
        &cut,
        &LoadOptions {
            source_lines: true,
            ..Default::default()
        },
    );

    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"\x00\x01 definitely not symbols").unwrap();
    assert!(matches!(
        load(&junk, &LoadOptions::default()),
        Err(SymbolError::Unrecognized { .. })
    ));
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        load(&empty, &LoadOptions::default()),
        Err(SymbolError::Unrecognized { .. })
    ));
    assert!(matches!(
        load(&dir.path().join("missing"), &LoadOptions::default()),
        Err(SymbolError::Io { .. })
    ));
}

/// Symbol addresses by name from an ELF's symbol table: this test binary's own `main`, and
/// nothing for a name it lacks.
#[test]
fn symbol_addresses_by_name() {
    let exe = std::env::current_exe().unwrap();
    let found =
        qemu_uftrace_symbols::elf_symbol_addresses(&exe, &["main", "no_such_symbol_anywhere_here"])
            .unwrap();
    assert!(found[0].is_some_and(|a| a != 0), "{found:?}");
    assert_eq!(found[1], None);
    assert!(qemu_uftrace_symbols::elf_symbol_addresses(
        std::path::Path::new("/nonexistent/vmlinux"),
        &["main"]
    )
    .is_err());
}
