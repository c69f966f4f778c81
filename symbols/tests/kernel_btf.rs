//! Struct offsets from a kernel's own BTF (`KernelTypes`), against its DWARF, on Debian's
//! arm64, amd64 and riscv64 kernels (scripts/install-deps.sh caches each raw image and its
//! -dbg vmlinux; missing files fail these tests): every offset the recording reads, from
//! the BTF of the raw image (found through its kallsyms, or in a bzImage's ELF payload) and
//! from the vmlinux's `.BTF`, equals the DWARF one; the functions the process watch
//! instruments are where the vmlinux puts them; and the DWARF vmlinux wins when both are
//! given. Each test prints what the reads cost (the figure DEVELOPERS.md gives).

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::cached;
use qemu_uftrace_symbols::{
    elf_symbol_addresses, kernel_symbol_addresses, KernelTypes, MemberError, TypeSource,
};

/// Every `(struct, member)` whose offset the plugin is given: `task_comm=`, `task_pid=`,
/// `task_tgid=` (cli/src/symbol_source.rs) and `proc_offsets=` (cli/src/guest_procs).
const MEMBERS: [(&str, &str); 9] = [
    ("task_struct", "comm"),
    ("task_struct", "pid"),
    ("task_struct", "tgid"),
    ("file", "f_path"),
    ("path", "dentry"),
    ("dentry", "d_name"),
    ("qstr", "name"),
    ("dentry", "d_parent"),
    // Inside an anonymous struct of a union since 6.x: the nesting both readers follow.
    ("qstr", "len"),
];

/// The functions `proc_watch=` instruments (cli/src/guest_procs::WATCHED).
const WATCHED: [&str; 4] = [
    "mmap_region",
    "begin_new_exec",
    "wake_up_new_task",
    "do_exit",
];

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    eprintln!("{what}: {:?}", t.elapsed());
    out
}

fn offsets(types: &KernelTypes) -> Vec<u64> {
    MEMBERS
        .iter()
        .map(|(s, m)| {
            types
                .member_offset(s, m)
                .unwrap_or_else(|e| panic!("{s}.{m}: {e}"))
        })
        .collect()
}

fn check(image: PathBuf, vmlinux: PathBuf) {
    let dwarf = timed("DWARF vmlinux: found", || KernelTypes::dwarf(&vmlinux)).unwrap();
    assert_eq!(dwarf.source(), TypeSource::Dwarf);
    let want = timed("DWARF vmlinux: offsets", || offsets(&dwarf));
    eprintln!("offsets {MEMBERS:?} = {want:?}");

    let from_image = timed("raw image BTF: found", || KernelTypes::btf(&image)).unwrap();
    assert_eq!(from_image.source(), TypeSource::Btf);
    assert_eq!(
        timed("raw image BTF: offsets", || offsets(&from_image)),
        want
    );
    let from_vmlinux = timed("vmlinux BTF: found", || KernelTypes::btf(&vmlinux)).unwrap();
    assert_eq!(offsets(&from_vmlinux), want);

    // What `record` does: the image alone answers from its BTF; with the DWARF vmlinux
    // (given first or not), from the DWARF.
    let alone = timed("find, image only", || KernelTypes::find(&[&image]))
        .unwrap()
        .expect("the image's BTF");
    assert_eq!(
        (alone.source(), alone.path()),
        (TypeSource::Btf, image.as_path())
    );
    for paths in [[&image, &vmlinux], [&vmlinux, &image]] {
        let both = KernelTypes::find(&paths.map(PathBuf::as_path))
            .unwrap()
            .unwrap();
        assert_eq!(
            (both.source(), both.path()),
            (TypeSource::Dwarf, vmlinux.as_path())
        );
    }

    // The process watch's functions: the image's kallsyms against the vmlinux's symbols.
    let kallsyms = timed("raw image kallsyms: watched functions", || {
        kernel_symbol_addresses(&image, &WATCHED)
    })
    .unwrap();
    let elf = elf_symbol_addresses(&vmlinux, &WATCHED).unwrap();
    assert!(
        elf.iter().all(Option::is_some),
        "{WATCHED:?} in the vmlinux: {elf:?}"
    );
    assert_eq!(kallsyms, elf);
    assert_eq!(kernel_symbol_addresses(&vmlinux, &WATCHED).unwrap(), elf);
}

#[test]
fn arm64_btf_offsets_equal_dwarf() {
    check(cached("kernel/vmlinuz"), cached("kernel-dbg/vmlinux"));
}

#[test]
fn amd64_btf_offsets_equal_dwarf() {
    check(
        cached("kernel-amd64/vmlinuz"),
        cached("kernel-amd64-dbg/vmlinux"),
    );
}

#[test]
fn riscv64_btf_offsets_equal_dwarf() {
    check(
        cached("kernel-riscv64/vmlinuz"),
        cached("kernel-riscv64-dbg/vmlinux"),
    );
}

/// Files with neither DWARF nor BTF: `find` answers none, `btf` says why.
#[test]
fn no_btf_found_where_there_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("System.map");
    std::fs::write(&map, "ffff800008000000 T _text\n").unwrap();
    let junk = dir.path().join("Image");
    std::fs::write(&junk, vec![0x5a; 4096]).unwrap();
    let paths: [&Path; 2] = [&map, &junk];
    assert!(KernelTypes::find(&paths).unwrap().is_none());
    assert!(matches!(
        KernelTypes::btf(&junk),
        Err(MemberError::NoBtf { .. })
    ));
}
