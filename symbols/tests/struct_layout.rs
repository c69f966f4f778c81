//! Struct member offsets from DWARF (`struct_member_offset`), against what the compiler
//! computed (`offsetof` probes) and, for Debian's vmlinux, against the kernel's own BTF.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::*;
use qemu_uftrace_symbols::{fuzzing, struct_member_offset, MemberError};

/// `task_decl.c` first, so the first unit only declares `struct task_struct`.
fn build_tasks(dir: &Path, out: &str, flags: &[&str]) -> PathBuf {
    build(dir, out, &["task_decl.c", "task_def.c"], flags)
}

/// The offset each `NAME_probe` array of task_def.c stands for (its size is offset + 1).
fn probe(path: &Path, name: &str) -> u64 {
    let sym = format!("{name}_probe");
    let nm = run(Command::new(NM).arg("-S").arg(path));
    let line = nm
        .lines()
        .find(|l| l.split_whitespace().nth(3) == Some(sym.as_str()))
        .unwrap_or_else(|| panic!("no {sym} in nm output:\n{nm}"));
    let size = line.split_whitespace().nth(1).unwrap();
    u64::from_str_radix(size, 16).unwrap() - 1
}

/// DWARF 2 (locations as expressions) to 5, type units of both kinds (anonymous members
/// referred to by signature), zlib-compressed sections, unoptimised and optimised.
#[test]
fn offsets_match_the_compiler() {
    let dir = tempfile::tempdir().unwrap();
    let variants: &[&[&str]] = &[
        &["-gdwarf-5", "-O2"],
        &["-gdwarf-5", "-O0"],
        &["-gdwarf-4", "-O2"],
        &["-gdwarf-2", "-O2"],
        &["-gdwarf-4", "-fdebug-types-section", "-O2"],
        &["-gdwarf-5", "-fdebug-types-section", "-O2"],
        &["-gdwarf-5", "-gz=zlib", "-O2"],
    ];
    for (i, flags) in variants.iter().enumerate() {
        let path = build_tasks(dir.path(), &format!("tasks{i}"), flags);
        for (structure, member, probe_name) in [
            ("task_struct", "comm", "comm"),
            ("task_struct", "pid", "pid"),
            ("task_struct", "tasks", "tasks"),
            ("task_struct", "comm_after", "comm_after"),
            ("mm_struct", "comm", "mm_comm"),
        ] {
            let ours = struct_member_offset(&path, structure, member)
                .unwrap_or_else(|e| panic!("{flags:?}: {structure}.{member}: {e}"));
            assert_eq!(
                ours,
                probe(&path, probe_name),
                "{flags:?}: {structure}.{member}"
            );
        }
    }
}

#[test]
fn missing_pieces_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_tasks(dir.path(), "tasks", &["-g", "-O2"]);
    assert!(matches!(
        struct_member_offset(&path, "task_struct", "no_such_member"),
        Err(MemberError::NoMember { .. })
    ));
    // Declared only, in task_decl.c.
    let decl_only = build(dir.path(), "decl", &["task_decl.c"], &["-g"]);
    assert!(matches!(
        struct_member_offset(&decl_only, "task_struct", "comm"),
        Err(MemberError::NoStruct { .. })
    ));
    // Mentioned nowhere: rejected by the string scan.
    let e = struct_member_offset(&path, "files_struct", "fdt").unwrap_err();
    assert!(matches!(e, MemberError::NoStruct { .. }), "{e}");
    assert!(e.to_string().contains("files_struct"), "{e}");

    let stripped = dir.path().join("stripped");
    run(Command::new(STRIP)
        .arg("-g")
        .arg("-o")
        .arg(&stripped)
        .arg(&path));
    assert!(matches!(
        struct_member_offset(&stripped, "task_struct", "comm"),
        Err(MemberError::NoDwarf { .. })
    ));
    assert!(matches!(
        struct_member_offset(&data("task_def.c"), "task_struct", "comm"),
        Err(MemberError::NotElf { .. })
    ));
    assert!(matches!(
        struct_member_offset(&dir.path().join("absent"), "task_struct", "comm"),
        Err(MemberError::Io { .. })
    ));
}

/// Truncated and scribbled-on files give errors or some offset, never a panic.
#[test]
fn malformed_files_do_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    for (i, flags) in [
        &["-gdwarf-5", "-O2"][..],
        &["-gdwarf-4", "-fdebug-types-section"][..],
    ]
    .iter()
    .enumerate()
    {
        let path = build_tasks(dir.path(), &format!("tasks{i}"), flags);
        let good = std::fs::read(&path).unwrap();
        assert!(fuzzing::member_offset(&good).is_ok());
        for len in (0..good.len()).step_by(97) {
            let _ = fuzzing::member_offset(&good[..len]);
        }
        // The DWARF sections and the section headers are the file's last few kilobytes:
        // every third byte there, one at a time, set to a few values (deterministic).
        let mut bytes = good.clone();
        for at in (good.len().saturating_sub(8000)..good.len()).step_by(3) {
            for v in [0x00, 0xff, bytes[at].wrapping_add(1)] {
                let old = bytes[at];
                bytes[at] = v;
                let _ = fuzzing::member_offset(&bytes);
                bytes[at] = old;
            }
        }
    }
}

/// Debian's vmlinux: `task_struct.comm` where the kernel's BTF (pahole's own reading of the
/// same DWARF, in `.BTF`) puts it; the first unit (init/main.c) defines the struct, so the
/// answer comes in milliseconds.
#[test]
fn debian_vmlinux_task_comm() {
    let vmlinux = cached("kernel-dbg/vmlinux");
    let t = Instant::now();
    let ours = struct_member_offset(&vmlinux, "task_struct", "comm").unwrap();
    eprintln!("task_struct.comm at {ours:#x}, found in {:?}", t.elapsed());
    let btf = btf_member_offset(&vmlinux, "task_struct", "comm");
    assert_eq!(ours, btf);
    let pid = struct_member_offset(&vmlinux, "task_struct", "pid").unwrap();
    assert_eq!(pid, btf_member_offset(&vmlinux, "task_struct", "pid"));
}

/// A member's byte offset per the ELF's `.BTF` section (little-endian): the type records
/// are walked in order, skipping each kind's trailing data, up to the named struct.
fn btf_member_offset(path: &Path, structure: &str, member: &str) -> u64 {
    let btf = &section(path, ".BTF")[..];
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    assert_eq!(u16::from_le_bytes([btf[0], btf[1]]), 0xeb9f, "BTF magic");
    let hdr_len = u32_at(btf, 4) as usize;
    let (type_off, type_len) = (u32_at(btf, 8) as usize, u32_at(btf, 12) as usize);
    let (str_off, str_len) = (u32_at(btf, 16) as usize, u32_at(btf, 20) as usize);
    let types = &btf[hdr_len + type_off..hdr_len + type_off + type_len];
    let strings = &btf[hdr_len + str_off..hdr_len + str_off + str_len];
    let name = |off: u32| {
        let s = &strings[off as usize..];
        std::str::from_utf8(&s[..s.iter().position(|&b| b == 0).unwrap()]).unwrap()
    };
    let mut at = 0;
    while at < types.len() {
        let (name_off, info) = (u32_at(types, at), u32_at(types, at + 4));
        let (kind, vlen, kflag) = ((info >> 24) & 0x1f, (info & 0xffff) as usize, info >> 31);
        at += 12;
        if kind == 4 && name(name_off) == structure {
            for m in 0..vlen {
                let rec = at + 12 * m;
                if name(u32_at(types, rec)) == member {
                    let bits = u32_at(types, rec + 8);
                    let bits = if kflag == 1 { bits & 0xff_ffff } else { bits };
                    return u64::from(bits / 8);
                }
            }
            panic!("BTF: {structure} has no {member}");
        }
        at += match kind {
            1 | 14 | 17 => 4,             // INT, VAR, DECL_TAG
            3 => 12,                      // ARRAY
            4 | 5 | 15 | 19 => 12 * vlen, // STRUCT, UNION, DATASEC, ENUM64
            6 | 13 => 8 * vlen,           // ENUM, FUNC_PROTO
            2 | 7..=12 | 16 | 18 => 0,    // PTR, FWD, TYPEDEF, qualifiers, FUNC, FLOAT, TYPE_TAG
            k => panic!("BTF kind {k} unknown"),
        };
    }
    panic!("BTF: no struct {structure}");
}

/// An ELF64 little-endian section's contents, by name; read piecewise (the vmlinux is
/// 273 MB).
fn section(path: &Path, wanted: &str) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).unwrap();
    let read = |at: usize, len: usize| {
        let mut buf = vec![0; len];
        file.read_exact_at(&mut buf, at as u64).unwrap();
        buf
    };
    let ehdr = read(0, 64);
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let shoff = u64_at(&ehdr, 0x28) as usize;
    let (shentsize, shnum) = (u16_at(&ehdr, 0x3a) as usize, u16_at(&ehdr, 0x3c) as usize);
    let headers = read(shoff, shentsize * shnum);
    let header = |i: usize| &headers[i * shentsize..(i + 1) * shentsize];
    let contents = |h: &[u8]| read(u64_at(h, 0x18) as usize, u64_at(h, 0x20) as usize);
    let names = contents(header(u16_at(&ehdr, 0x3e) as usize));
    for i in 0..shnum {
        let h = header(i);
        let name = &names[u32::from_le_bytes(h[..4].try_into().unwrap()) as usize..];
        if &name[..name.iter().position(|&b| b == 0).unwrap()] == wanted.as_bytes() {
            return contents(h);
        }
    }
    panic!("no section {wanted}");
}
