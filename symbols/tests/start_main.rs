//! A stripped program's `main` is named from its `_start` (glibc's hands it to
//! `__libc_start_main`): the same address `nm` gives in the unstripped program, for a PIE and
//! a fixed program of each architecture, built with Debian's own (cross) compilers and glibc.

mod common;

use std::path::Path;
use std::process::Command;

use common::run;
use qemu_uftrace_symbols::{load, LoadOptions};

/// The program: `main` not the first function, so that a wrong guess shows.
const SOURCE: &str = "static int helper(int x) { return x * 3; }\n\
                      int other(int x) { return helper(x) + 1; }\n\
                      int main(int argc, char **argv) { (void)argv; return other(argc); }\n";

/// `main`'s address in the program `cc` builds with `flags`, as `nm` gives it, and as the
/// stripped copy's symbols name it.
fn mains(dir: &Path, cc: &str, prefix: &str, flags: &[&str]) -> (u64, Option<u64>) {
    let src = dir.join("m.c");
    std::fs::write(&src, SOURCE).expect("write the source");
    let tag = flags.join("");
    let full = dir.join(format!("{cc}{tag}"));
    let stripped = dir.join(format!("{cc}{tag}.stripped"));
    run(Command::new(cc)
        .args(["-O2", "-fno-inline"])
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&full));
    run(Command::new(format!("{prefix}strip"))
        .arg("-o")
        .arg(&stripped)
        .arg(&full));
    let nm = run(Command::new(format!("{prefix}nm")).arg(&full));
    let main = nm
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "T" && name == "main").then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .unwrap_or_else(|| panic!("nm shows no main in {}:\n{nm}", full.display()));
    let opts = LoadOptions {
        name_entry: true,
        ..Default::default()
    };
    let image = load(&stripped, &opts).expect("the stripped program loads");
    let found = image
        .functions
        .iter()
        .find(|f| f.name == "main")
        .map(|f| f.addr);
    // The one name: not also `FILE+0xADDR`.
    assert!(
        !image.by_address.iter().any(|f| Some(f.addr) == found),
        "{}: main also named by address",
        stripped.display()
    );
    (main, found)
}

#[test]
fn a_stripped_program_s_main_is_named_from_its_start() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let compilers = [
        ("gcc", ""),
        ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-"),
        ("riscv64-linux-gnu-gcc", "riscv64-linux-gnu-"),
    ];
    let mut wrong = Vec::new();
    for (cc, prefix) in compilers {
        for flags in [&["-pie", "-fPIE"][..], &["-no-pie", "-fno-PIE"]] {
            let (nm, ours) = mains(tmp.path(), cc, prefix, flags);
            if ours != Some(nm) {
                wrong.push(format!("{cc} {flags:?}: nm {nm:#x}, ours {ours:x?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "main not found as nm has it: {wrong:#?}");
}

/// A program whose entry point is not glibc's `_start` gets no `main`: a freestanding image
/// (the tests' `-nostdlib` one) names its entry point, nothing more.
#[test]
fn no_main_without_glibc_s_start() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let src = tmp.path().join("s.c");
    std::fs::write(
        &src,
        "void _start(void) { for (;;) __asm__ volatile(\"\" ::: \"memory\"); }\n",
    )
    .expect("write the source");
    let out = tmp.path().join("s");
    run(Command::new("gcc")
        .args(["-O2", "-nostdlib", "-static", "-s"])
        .arg(&src)
        .arg("-o")
        .arg(&out));
    let opts = LoadOptions {
        name_entry: true,
        ..Default::default()
    };
    let image = load(&out, &opts).expect("loads by its entry point");
    assert!(
        !image.functions.iter().any(|f| f.name == "main"),
        "a main named in a program without glibc's _start: {:?}",
        image.functions
    );
}

/// A shared library's entry point is no `_start`, even where it has one (libc.so.6 prints
/// its version): Debian's glibc of each architecture names no `main`.
#[test]
fn no_main_in_a_shared_library() {
    for (libc, arch) in [
        (
            "/lib/x86_64-linux-gnu/libc.so.6",
            qemu_uftrace_symbols::Arch::X86_64,
        ),
        (
            "/usr/aarch64-linux-gnu/lib/libc.so.6",
            qemu_uftrace_symbols::Arch::Aarch64,
        ),
        (
            "/usr/riscv64-linux-gnu/lib/libc.so.6",
            qemu_uftrace_symbols::Arch::Riscv64,
        ),
    ] {
        let opts = LoadOptions {
            name_entry: true,
            expected_arch: Some(arch),
            ..Default::default()
        };
        let image = load(Path::new(libc), &opts).expect("glibc loads");
        assert!(
            !image.functions.iter().any(|f| f.name == "main"),
            "{libc}: a main named"
        );
    }
}
