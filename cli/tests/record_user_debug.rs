//! User mode, a shared library whose DWARF lives in a separate debug file (split with
//! objcopy as distributions do): `uftrace replay --srcline` shows its functions' file:line,
//! whether the debug file is named by `.gnu_debuglink` beside the library or by build ID in
//! the debug tree of the sysroot the library lies in.

mod common;

use common::user::{self, text};
use qemu_uftrace_tests::replay::uftrace;
use qemu_uftrace_tests::user_qemu;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Lines 1–12; `hidden_twice` is static, so the library calls it directly (a `bl`, not
/// through its PLT): its frame is the function itself, named with its line.
const LIBRARY: &str = "\
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

const PROGRAM: &str = "\
#include <stdio.h>\n\
int lib_entry(int);\n\
int main(void)\n\
{\n\
    printf(\"%d\\n\", lib_entry(4));\n\
    return 0;\n\
}\n";

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/install-deps.sh)"));
    assert!(out.status.success(), "{cmd:?}: {}", text(&out.stderr));
}

/// `libdir/libsplit.so` stripped of its DWARF and its .symtab, its debug file
/// `libdir/libsplit.so.debug`, and a program in `dir` that runs it (rpath: `libdir`).
fn build(dir: &Path, libdir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(libdir).unwrap();
    std::fs::write(libdir.join("split.c"), LIBRARY).unwrap();
    std::fs::write(dir.join("main.c"), PROGRAM).unwrap();
    let cc = || Command::new("aarch64-linux-gnu-gcc");
    run(cc()
        .current_dir(libdir)
        .args(["-O1", "-g", "-shared", "-fPIC", "-Wl,--build-id=sha1"])
        .args(["-o", "libsplit.so", "split.c"]));
    let objcopy = || {
        let mut c = Command::new("aarch64-linux-gnu-objcopy");
        c.current_dir(libdir);
        c
    };
    run(objcopy().args(["--only-keep-debug", "libsplit.so", "libsplit.so.debug"]));
    run(objcopy().args([
        "--strip-all",
        "--add-gnu-debuglink=libsplit.so.debug",
        "libsplit.so",
    ]));
    let prog = dir.join("prog");
    run(cc()
        .current_dir(dir)
        .args(["-O1", "-g", "-o"])
        .arg(&prog)
        .arg("main.c")
        .arg(format!("-L{}", libdir.display()))
        .arg("-lsplit")
        .arg(format!("-Wl,-rpath,{}", libdir.display())));
    (prog, libdir.join("libsplit.so.debug"))
}

/// Records `prog` under `-L /usr/aarch64-linux-gnu` and returns `replay --srcline`'s text.
fn srcline_replay(prog: &Path) -> String {
    let (_tmp, dir, out) = user::record(
        &user_qemu(),
        &["-L", "/usr/aarch64-linux-gnu", &prog.to_string_lossy()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "25\n");
    uftrace(&[
        "replay",
        "-d",
        &dir.to_string_lossy(),
        "--srcline",
        "-F",
        "main",
    ])
    .expect("uftrace replay --srcline")
}

fn assert_library_lines(replay: &str) {
    assert!(
        replay.contains("hidden_twice() { /* split.c:6 */"),
        "the library's static function with its line:\n{replay}"
    );
    assert!(replay.contains("main() { /* main.c:4 */"), "{replay}");
}

#[test]
fn user_library_lines_from_its_debuglink() {
    let tmp = tempfile::tempdir().unwrap();
    let (prog, _debug) = build(tmp.path(), &tmp.path().join("lib"));
    assert_library_lines(&srcline_replay(&prog));
}

#[test]
fn user_library_lines_from_the_build_id_tree_of_its_sysroot() {
    let tmp = tempfile::tempdir().unwrap();
    let sysroot = tmp.path().join("sysroot");
    let (prog, debug) = build(tmp.path(), &sysroot.join("usr/lib"));
    let notes = Command::new("aarch64-linux-gnu-readelf")
        .arg("-n")
        .arg(&debug)
        .output()
        .expect("run readelf");
    let notes = text(&notes.stdout);
    let id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build ID")
        .trim();
    let tree = sysroot.join("usr/lib/debug/.build-id").join(&id[..2]);
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::rename(&debug, tree.join(format!("{}.debug", &id[2..]))).unwrap();
    let replay = srcline_replay(&prog);
    assert_library_lines(&replay);
    // Its .symtab came from there too: without it the static function has no name.
    std::fs::remove_dir_all(sysroot.join("usr/lib/debug")).unwrap();
    let replay = srcline_replay(&prog);
    assert!(!replay.contains("hidden_twice"), "{replay}");
}
