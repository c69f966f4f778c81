//! Separate debug files: a shared library built with DWARF, split with objcopy as
//! distributions do (`--only-keep-debug`, then `--strip-debug` or `--strip-all` and
//! `--add-gnu-debuglink`), keeps its source lines (and, fully stripped, its static
//! functions) wherever GDB would find the debug file.

mod common;

use common::*;
use qemu_uftrace_symbols::{add_source_lines, load, Image, LoadOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

const OBJCOPY: &str = "aarch64-linux-gnu-objcopy";

const SOURCE: &str = "\
int helper_value(int x)\n\
{\n\
    return x * 3;\n\
}\n\
static __attribute__((noinline)) int hidden_twice(int x)\n\
{\n\
    return helper_value(x) * 2;\n\
}\n\
int lib_entry(int x)\n\
{\n\
    return hidden_twice(x) + 1;\n\
}\n";

/// `dir/libsplit.so` built with DWARF (and a build ID when `build_id`), and its debug file
/// `dir/libsplit.so.debug` made by `objcopy --only-keep-debug`; the library keeps nothing
/// of its DWARF (and no .symtab when `strip_all`).
fn split_library(dir: &Path, build_id: bool, strip_all: bool) -> (PathBuf, PathBuf) {
    let src = dir.join("split.c");
    std::fs::write(&src, SOURCE).unwrap();
    let lib = dir.join("libsplit.so");
    let id = if build_id {
        "-Wl,--build-id=sha1"
    } else {
        "-Wl,--build-id=none"
    };
    // Compiled from its directory, as a build does: lines name `split.c`.
    run(Command::new(CC)
        .current_dir(dir)
        .args(["-O1", "-g", "-shared", "-fPIC", id, "-o"])
        .arg(&lib)
        .arg("split.c"));
    let debug = dir.join("libsplit.so.debug");
    run(Command::new(OBJCOPY)
        .arg("--only-keep-debug")
        .arg(&lib)
        .arg(&debug));
    let strip = if strip_all {
        "--strip-all"
    } else {
        "--strip-debug"
    };
    run(Command::new(OBJCOPY).arg(strip).arg(&lib));
    // The debuglink records the debug file's name and CRC; `--add-gnu-debuglink` reads it
    // where it is now, the test then moves it where GDB would look.
    run(Command::new(OBJCOPY)
        .current_dir(dir)
        .arg("--add-gnu-debuglink=libsplit.so.debug")
        .arg(&lib));
    (lib, debug)
}

fn with_lines() -> LoadOptions {
    LoadOptions {
        source_lines: true,
        ..Default::default()
    }
}

/// The `file:line` of a function (its PLT entry, named the same, has none).
fn line_of(image: &Image, name: &str) -> Option<(String, u32)> {
    image
        .functions
        .iter()
        .filter(|f| f.name == name)
        .find_map(|f| f.line.as_ref().map(|l| (l.file.clone(), l.line)))
}

fn assert_lines(lib: &Path) {
    let image = load(lib, &with_lines()).expect("load the library");
    assert_eq!(
        line_of(&image, "helper_value"),
        Some(("split.c".into(), 2)),
        "{}",
        lib.display()
    );
    assert_eq!(line_of(&image, "lib_entry"), Some(("split.c".into(), 10)));
    // The same lines added to the functions read without them, from the debug file too.
    let mut later = load(lib, &LoadOptions::default()).expect("load the library");
    add_source_lines(&mut later, 0).expect("add the lines");
    assert_eq!(later.functions, image.functions, "{}", lib.display());
}

fn assert_no_lines(lib: &Path) {
    let image = load(lib, &with_lines()).expect("load the library");
    assert!(image.functions.iter().any(|f| f.name == "lib_entry"));
    assert!(
        image.functions.iter().all(|f| f.line.is_none()),
        "{}",
        lib.display()
    );
}

#[test]
fn debuglink_beside_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (lib, debug) = split_library(tmp.path(), false, false);
    assert_lines(&lib);
    std::fs::remove_file(&debug).unwrap();
    assert_no_lines(&lib);
}

#[test]
fn debuglink_in_the_dot_debug_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (lib, debug) = split_library(tmp.path(), false, false);
    std::fs::create_dir(tmp.path().join(".debug")).unwrap();
    std::fs::rename(&debug, tmp.path().join(".debug/libsplit.so.debug")).unwrap();
    assert_lines(&lib);
}

/// A sysroot with its own debug tree: `SYSROOT/usr/lib/debug/<dir>/NAME`, found without
/// being told where the sysroot is.
#[test]
fn debuglink_under_the_sysroots_debug_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let sysroot = tmp.path().join("sysroot");
    let libdir = sysroot.join("usr/lib");
    std::fs::create_dir_all(&libdir).unwrap();
    let (lib, debug) = split_library(&libdir, false, false);
    let tree = sysroot.join("usr/lib/debug/usr/lib");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::rename(&debug, tree.join("libsplit.so.debug")).unwrap();
    assert_lines(&lib);
}

/// A debug file whose contents do not match the debuglink's CRC is someone else's.
#[test]
fn debuglink_with_another_crc_is_not_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let (lib, debug) = split_library(tmp.path(), false, false);
    let mut bytes = std::fs::read(&debug).unwrap();
    bytes.extend_from_slice(b"changed");
    std::fs::write(&debug, bytes).unwrap();
    assert_no_lines(&lib);
}

/// `SYSROOT/usr/lib/debug/.build-id/xx/rest.debug`, the layout of Debian's -dbgsym packages;
/// the library is stripped of .symtab too, so its static function comes from there.
#[test]
fn build_id_under_the_sysroots_debug_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let sysroot = tmp.path().join("sysroot");
    let libdir = sysroot.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    let (lib, debug) = split_library(&libdir, true, true);
    let aside = tmp.path().join("aside");
    std::fs::rename(&debug, &aside).unwrap();
    let without = load(&lib, &with_lines()).expect("the library's .dynsym");
    let id = build_id(&lib);
    let dir = sysroot.join("usr/lib/debug/.build-id").join(&id[..2]);
    std::fs::create_dir_all(&dir).unwrap();
    // Under another name than the debuglink's: only the build ID can find it.
    std::fs::rename(&aside, dir.join(format!("{}.debug", &id[2..]))).unwrap();
    assert_lines(&lib);
    let image = load(&lib, &with_lines()).unwrap();
    assert_eq!(
        line_of(&image, "hidden_twice"),
        Some(("split.c".into(), 6)),
        "the static function, from the debug file's .symtab"
    );
    assert!(!without.functions.iter().any(|f| f.name == "hidden_twice"));
    assert!(without.functions.iter().all(|f| f.line.is_none()));
}

/// The build ID in hex, as `readelf -n` prints it.
fn build_id(path: &Path) -> String {
    let notes = run(Command::new(READELF).arg("-n").arg(path));
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build ID note")
        .trim()
        .to_string()
}

/// A versioned library's .symtab spells its symbols `lib_entry@@V1` (glibc's debug file
/// does): named as .dynsym does, without the version.
#[test]
fn versioned_symbols_are_named_without_their_version() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // As glibc defines its versioned symbols: .symver puts the version in the name.
    std::fs::write(
        dir.join("v.c"),
        "int lib_entry_v1(int x) { return x + 1; }\n\
         __asm__(\".symver lib_entry_v1, lib_entry@@V1\");\n",
    )
    .unwrap();
    std::fs::write(dir.join("v.map"), "V1 { global: lib_entry; local: *; };\n").unwrap();
    let lib = dir.join("libv.so");
    run(Command::new(CC)
        .current_dir(dir)
        .args([
            "-O1",
            "-shared",
            "-fPIC",
            "-Wl,--version-script=v.map",
            "-o",
        ])
        .arg(&lib)
        .arg("v.c"));
    let symtab = run(Command::new(READELF).args(["-W", "--syms"]).arg(&lib));
    assert!(symtab.contains("lib_entry@@V1"), "{symtab}");
    let image = load(&lib, &LoadOptions::default()).unwrap();
    let names: Vec<&str> = image.functions.iter().map(|f| f.name.as_str()).collect();
    assert!(names.contains(&"lib_entry"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains('@')), "{names:?}");
}

/// A guest's file outside the host's tree (here a copy of the host's libc in a root with no
/// debug tree of its own, as a guest's libc of the same build is) finds its debug file by
/// build ID in the host's `/usr/lib/debug/.build-id`, as GDB does: the build ID is the
/// file's content, and the candidate's own must equal it. Its static functions come from
/// there (libc6-dbg is one of the fixtures).
#[test]
fn build_id_in_the_hosts_debug_tree_for_a_file_outside_it() {
    let host = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    let id = build_id(host);
    let debug = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    assert!(debug.is_file(), "{}: install libc6-dbg", debug.display());
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("root/lib/x86_64-linux-gnu/libc.so.6");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    std::fs::copy(host, &lib).unwrap();
    let image = load(&lib, &LoadOptions::default()).expect("load the copy");
    assert!(
        image
            .functions
            .iter()
            .any(|f| f.name == "__libc_start_call_main"),
        "a static function, from the host's debug file"
    );
}
