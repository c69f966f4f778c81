//! DWARF source lines against binutils.

mod common;

use common::*;
use qemu_uftrace_symbols::{add_source_lines, load, LoadOptions};

fn with_lines() -> LoadOptions {
    LoadOptions {
        source_lines: true,
        ..Default::default()
    }
}

/// Lines added later to the functions of a file read without them (at an offset) are the
/// lines it reads with them.
#[test]
fn lines_added_later_are_the_lines_read_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for path in build_all(dir.path(), "-O2") {
        let offset = 0x4000_0000;
        let at_once = LoadOptions {
            offset,
            ..with_lines()
        };
        let image = load(&path, &at_once).unwrap();
        assert!(image.functions.iter().any(|f| f.line.is_some()));
        let plain = LoadOptions {
            offset,
            ..Default::default()
        };
        let mut later = load(&path, &plain).unwrap();
        assert!(later.functions.iter().all(|f| f.line.is_none()));
        add_source_lines(&mut later, offset).unwrap();
        assert_eq!(later.functions, image.functions, "{}", path.display());
    }
}

/// At -O0 a function entry has one row: the same as `addr2line`'s wherever it has one.
#[test]
fn o0_lines_equal_addr2line() {
    let dir = tempfile::tempdir().unwrap();
    for path in build_all(dir.path(), "-O0") {
        let image = load(&path, &with_lines()).unwrap();
        let addrs: Vec<u64> = image.functions.iter().map(|f| f.addr).collect();
        let theirs = addr2line(&path, &addrs);
        let mut compared = 0;
        for (f, theirs) in image.functions.iter().zip(theirs) {
            let Some((file, line)) = theirs else { continue };
            let ours = f
                .line
                .as_ref()
                .unwrap_or_else(|| panic!("{}: no line, addr2line has {file}:{line}", f.name));
            assert_eq!(ours.line, line, "{} in {}", f.name, path.display());
            assert!(
                file.ends_with(&ours.file),
                "{}: {} vs {file}",
                f.name,
                ours.file
            );
            assert!(
                !ours.file.starts_with('/'),
                "relative to the compilation directory: {}",
                ours.file
            );
            compared += 1;
        }
        // Every function compiled from tests/data has a line.
        assert!(
            compared >= 3,
            "{}: only {compared} lines compared",
            path.display()
        );
        let ours: &[&str] = if path.ends_with("bare") {
            &["work", "spin", "_start"]
        } else {
            &["one", "two", "main", "real_impl", "helper", "weak_fn"]
        };
        for name in ours {
            let f = image
                .functions
                .iter()
                .find(|f| f.name == *name)
                .expect(name);
            assert!(
                f.line.as_ref().is_some_and(|l| l.file.ends_with(".c")),
                "{name}: {:?}",
                f.line
            );
        }
    }
}

/// Optimized code has several rows at a function's entry; `addr2line` reports the last,
/// we report the first `is_stmt` one (the function's opening line), per objdump.
#[test]
fn o2_lines_are_first_statement_rows() {
    let dir = tempfile::tempdir().unwrap();
    for path in build_all(dir.path(), "-O2") {
        let image = load(&path, &with_lines()).unwrap();
        let rows = first_rows(&path);
        let mut compared = 0;
        for f in &image.functions {
            let Some((file, line)) = rows.get(&f.addr) else {
                continue;
            };
            let ours = f
                .line
                .as_ref()
                .unwrap_or_else(|| panic!("{}: no line", f.name));
            assert_eq!(
                (basename(&ours.file), ours.line),
                (basename(file), *line),
                "{}",
                f.name
            );
            compared += 1;
        }
        assert!(
            compared >= 3,
            "{}: only {compared} lines compared",
            path.display()
        );
    }
}

#[test]
fn lines_follow_load_offset() {
    let dir = tempfile::tempdir().unwrap();
    let pie = &build_all(dir.path(), "-O0")[1];
    let plain = load(pie, &with_lines()).unwrap();
    let moved = load(
        pie,
        &LoadOptions {
            offset: 0x7f00_0000_0000,
            source_lines: true,
            ..Default::default()
        },
    )
    .unwrap();
    let a: Vec<_> = plain.functions.iter().map(|f| f.line.clone()).collect();
    let b: Vec<_> = moved.functions.iter().map(|f| f.line.clone()).collect();
    assert_eq!(a, b);
    assert!(a.iter().flatten().count() >= 5);
}
