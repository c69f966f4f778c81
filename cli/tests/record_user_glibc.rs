//! The glibc oracle under qemu-user: tests/guests/user/libcalls.c, linked against each
//! architecture's glibc (static, and a dynamic PIE run under `-L` the cross sysroot; x86_64
//! on the host's), logs its own functions (-finstrument-functions) and, around each libc
//! call it makes, that call (`memcpy`, `strlen`, `malloc`, `printf`, `qsort` calling back
//! into the program, `free` …). The trace, reduced to the program's functions and the calls
//! they make directly, must be exactly that log: with frame pointers, without, signed
//! return addresses on aarch64 (`-cpu max`), and a build without the oracle.

mod common;

use common::user::{check_libcalls_oracle, record, text};
use qemu_uftrace_tests::replay::uftrace;
use qemu_uftrace_tests::{cached, make_guests, user_qemu, user_qemu_riscv64};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

struct Arch {
    name: &'static str,
    /// The gcc prefix (`CROSS=` of tests/guests/user/Makefile): empty for the host's.
    cross: &'static str,
    qemu: fn() -> PathBuf,
    /// Where the dynamic programs find their loader and libc (`-L`), if not on the host.
    sysroot: Option<&'static str>,
}

fn qemu_x86_64() -> PathBuf {
    qemu_uftrace_tests::cached("qemu-10.2.2/bin/qemu-x86_64")
}

const AARCH64: Arch = Arch {
    name: "aarch64",
    cross: "aarch64-linux-gnu-",
    qemu: user_qemu,
    sysroot: Some("/usr/aarch64-linux-gnu"),
};
const RISCV64: Arch = Arch {
    name: "riscv64",
    cross: "riscv64-linux-gnu-",
    qemu: user_qemu_riscv64,
    sysroot: Some("/usr/riscv64-linux-gnu"),
};
const X86_64: Arch = Arch {
    name: "x86_64",
    cross: "",
    qemu: qemu_x86_64,
    sysroot: None,
};

/// `libcalls-<link>-<variant>.elf` for `arch` (`make glibc`), built once per process.
fn guest(arch: &Arch, name: &str) -> PathBuf {
    static BUILT: [OnceLock<PathBuf>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match arch.name {
        "aarch64" => &BUILT[0],
        "riscv64" => &BUILT[1],
        _ => &BUILT[2],
    };
    let dir = slot.get_or_init(|| {
        let args = ["glibc".to_string(), format!("CROSS={}", arch.cross)];
        make_guests("user", &format!("user-glibc-{}", arch.name), &args)
            .expect("building the glibc guests")
    });
    dir.join(name)
}

/// Every oracle variant of `link` (`static`, `dyn`) on `arch` traces exactly its log, and
/// the plain build traces the frame-pointer oracle's calls.
fn check(arch: &Arch, link: &str, variants: &[&str]) {
    check_with(arch, &[], link, variants);
}

/// [`check`] with QEMU options `qemu_opts`.
fn check_with(arch: &Arch, qemu_opts: &[&'static str], link: &str, variants: &[&str]) {
    let mut opts: Vec<&str> = qemu_opts.to_vec();
    if let (Some(root), "dyn") = (arch.sysroot, link) {
        opts.extend(["-L", root]);
    }
    for variant in variants {
        let mut opts = opts.clone();
        if *variant == "pac-oracle" {
            // qemu-aarch64's default CPU has no pointer authentication.
            opts.extend(["-cpu", "max"]);
        }
        let others = if *variant == "oracle" {
            vec![guest(arch, &format!("libcalls-{link}-plain.elf"))]
        } else {
            Vec::new()
        };
        check_libcalls_oracle(
            &(arch.qemu)(),
            &opts,
            &guest(arch, &format!("libcalls-{link}-{variant}.elf")),
            &others,
        );
    }
}

#[test]
fn aarch64_static_glibc_calls_match_the_oracle() {
    check(&AARCH64, "static", &["oracle", "nofp-oracle", "pac-oracle"]);
}

#[test]
fn aarch64_dynamic_glibc_calls_match_the_oracle() {
    check(&AARCH64, "dyn", &["oracle", "nofp-oracle", "pac-oracle"]);
}

#[test]
fn riscv64_static_glibc_calls_match_the_oracle() {
    check(&RISCV64, "static", &["oracle", "nofp-oracle"]);
}

#[test]
fn riscv64_dynamic_glibc_calls_match_the_oracle() {
    check(&RISCV64, "dyn", &["oracle", "nofp-oracle"]);
}

#[test]
fn x86_64_static_glibc_calls_match_the_oracle() {
    check(&X86_64, "static", &["oracle", "nofp-oracle"]);
}

/// Symbols bound at load time: no call goes through ld.so's lazy-binding trampoline.
#[test]
fn x86_64_dynamic_glibc_calls_bound_now_match_the_oracle() {
    check_with(
        &X86_64,
        &["-E", "LD_BIND_NOW=1"],
        "dyn",
        &["oracle", "nofp-oracle"],
    );
}

/// Lazy binding: each first call through the PLT runs `_dl_runtime_resolve_*`, which ends
/// `mov %rbx,%rsp; …; add $0x18,%rsp; jmp *%r11` into the resolved function: a tail call,
/// not the longjmp a `mov %reg,%rsp` + `jmp *%reg` block usually is (`switches_stack` in
/// engine/src/arch/x86_64.rs leaves RBX out, as it does RBP).
#[test]
fn x86_64_dynamic_glibc_calls_match_the_oracle() {
    check(&X86_64, "dyn", &["oracle", "nofp-oracle"]);
}

/// ld.so's own functions (`_dl_start`, `_dl_relocate_object` …) are in no dynamic symbol
/// table: they are named only from a full one. Debian's cross libc (/usr/aarch64-linux-gnu)
/// has no debug package, so there its loader shows the few names it exports, and `record`
/// says where the addresses will be and that the install's `arm64-libc` names them:
/// Debian's arm64 libc6 with libc6-dbg (unpacked as a sysroot by install-deps.sh) has the
/// loader's debug file by build ID under the sysroot's usr/lib/debug, which `record` finds.
#[test]
fn aarch64_dynamic_loader_functions_are_named_from_its_debug_file() {
    let loader = cached("arm64-libc/lib/ld-linux-aarch64.so.1");
    let sysroot = loader
        .parent()
        .and_then(|lib| lib.parent())
        .expect("sysroot");
    let (stderr, named) = replay_under(sysroot);
    for f in [
        "_dl_start() {",
        "_dl_sysdep_start() {",
        "_dl_relocate_object() {",
    ] {
        assert!(
            named.contains(f),
            "no {f} under -L {}:\n{named}",
            sysroot.display()
        );
    }
    assert!(!stderr.contains("ld-linux"), "{stderr}");
    assert!(!stderr.contains("only exported symbols"), "{stderr}");
    // The cross sysroot: the loader's dynamic symbols only (its tunables' getter), and the
    // way to the names said.
    let (stderr, exported) = replay_under(Path::new("/usr/aarch64-linux-gnu"));
    assert!(exported.contains(" __tunable_get_val"), "{exported}");
    let hint = stderr
        .lines()
        .find(|l| l.contains("gave only exported symbols"))
        .unwrap_or_else(|| panic!("no hint for the stripped loader:\n{stderr}"));
    assert!(
        hint.starts_with("qemu-uftrace: /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1"),
        "{hint}"
    );
    assert!(
        hint.contains("the replay names the functions inside them by their address in the file"),
        "{hint}"
    );
    // The loader's own functions, named by their address in the file: each such address
    // is where an FDE of the file begins, as binutils' readelf reads its .eh_frame.
    let loader = Path::new("/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1");
    let starts = qemu_uftrace_tests::readelf_fde_starts(loader);
    assert!(
        starts.len() > 100,
        "readelf read no FDEs of {}",
        loader.display()
    );
    let by_address: std::collections::BTreeSet<u64> = exported
        .lines()
        .filter_map(|l| l.split("ld-linux-aarch64.so.1+0x").nth(1))
        .filter_map(|rest| {
            let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
            u64::from_str_radix(&hex, 16).ok()
        })
        .collect();
    assert!(
        by_address.len() >= 3,
        "the loader's functions not named by address:\n{exported}"
    );
    let stray: Vec<String> = (by_address.iter())
        .filter(|a| !starts.contains(a))
        .map(|a| format!("{a:#x}"))
        .collect();
    assert!(stray.is_empty(), "names at no FDE's start: {stray:?}");
    let unnamed: Vec<&str> = (exported.lines())
        .filter(|l| {
            l.split_once("| ")
                .is_some_and(|(_, f)| f.trim_start().starts_with('<'))
        })
        .collect();
    assert!(unnamed.is_empty(), "unnamed functions: {unnamed:?}");
    assert!(
        hint.ends_with(&format!(
            "; record with -L {} instead (Debian's libc6:arm64 with its debug files, which \
             scripts/install-deps.sh unpacked there) to have them named",
            sysroot.display()
        )),
        "{hint}"
    );
}

/// The dynamic aarch64 libcalls program run under `-L sysroot`, whose recording must
/// succeed: `record`'s stderr, and the replay.
fn replay_under(sysroot: &Path) -> (String, String) {
    let program = guest(&AARCH64, "libcalls-dyn-plain.elf");
    let utf8 = |p: &Path| p.to_str().expect("a UTF-8 path").to_string();
    let (_tmp, dir, out) = record(&user_qemu(), &["-L", &utf8(sysroot), &utf8(&program)]);
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "under {}: {stderr}",
        sysroot.display()
    );
    let d = dir.display().to_string();
    let replay = uftrace(&["replay", "--no-pager", "-d", &d]).expect("uftrace replay");
    (stderr, replay)
}

/// A `-L` root whose absolute symlinks lead out of it: qemu-user opens `ROOT/lib/…` on the
/// host, where the host kernel follows them to Debian's arm64 loader and libc (the
/// install's `arm64-libc`), while inside the root the same links name other files (the
/// cross toolchain's, without the debug files). The functions are named from what QEMU ran
/// (the loader's own functions from its debug file), and `record` says each path that
/// left the root.
#[test]
fn aarch64_root_links_leading_out_are_named_from_the_files_qemu_ran() {
    let libc = cached("arm64-libc/lib/aarch64-linux-gnu/libc.so.6");
    let ran = std::fs::canonicalize(libc.parent().expect("its directory")).expect("arm64-libc");
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path().join("root");
    // Inside the root, the links' targets are the cross toolchain's files.
    let inside = root.join(ran.strip_prefix("/").expect("absolute"));
    std::fs::create_dir_all(&inside).expect("root");
    std::fs::create_dir_all(root.join("lib")).expect("root/lib");
    for name in ["ld-linux-aarch64.so.1", "libc.so.6"] {
        let cross = Path::new("/usr/aarch64-linux-gnu/lib").join(name);
        std::fs::copy(&cross, inside.join(name)).expect("the cross toolchain's file");
        std::os::unix::fs::symlink(ran.join(name), root.join("lib").join(name)).expect("link");
    }
    let (stderr, named) = replay_under(&root);
    for f in ["_dl_start() {", "_dl_relocate_object() {", "printf() {"] {
        assert!(named.contains(f), "no {f}:\n{stderr}\n{named}");
    }
    assert!(!stderr.contains("only exported symbols"), "{stderr}");
    let root = std::fs::canonicalize(&root).expect("root");
    for name in ["ld-linux-aarch64.so.1", "libc.so.6"] {
        let said = format!(
            "qemu-uftrace: warning: /lib/{name} left the -L root {} through a symlink: QEMU \
             ran the host's {} (not {}), and its functions are named from that file",
            root.display(),
            ran.join(name).display(),
            inside.join(name).display()
        );
        assert!(
            stderr.lines().any(|l| l == said),
            "{said}\nnot in:\n{stderr}"
        );
    }
}
