//! Reading a user-mode command line (`qemu-aarch64 [options] program [arguments…]`) the
//! way QEMU's linux-user does (`parse_args` in `linux-user/main.c`), and checking the
//! program it runs, our symbol source.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use anyhow::Result;

use super::images::{GuestImage, ImageOrigin};
use super::options::QemuOption;
use crate::errors::usage;

/// Options of qemu-<arch> that take an argument (QEMU 9.2–10.2's `arg_table`; `-p` until
/// 9.x); every other option is a flag. An option QEMU does not know stops it with its usage.
const ARG_OPTIONS: &[&str] = &[
    "0", "B", "D", "E", "L", "R", "U", "cpu", "d", "dfilter", "g", "p", "plugin", "r", "s", "seed",
    "t", "tb-size", "trace",
];

/// A user-mode command line (without argv[0]): QEMU's options, then the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCommand {
    /// QEMU's own options, `--opt` folded into `opt`.
    pub opts: Vec<QemuOption>,
    /// The program, as given (QEMU opens it as a path, with no PATH search).
    pub program: Option<OsString>,
}

/// Splits `args` as linux-user does: options until the first word that does not start with
/// `-` (or after `--`), which is the program; everything after it is the program's.
pub fn user_command(args: &[OsString]) -> UserCommand {
    let mut opts = Vec::new();
    let mut it = args.iter();
    let mut program = None;
    while let Some(word) = it.next() {
        let bytes = word.as_bytes();
        let Some(name) = bytes.strip_prefix(b"-") else {
            program = Some(word.clone());
            break;
        };
        if name == b"-" {
            program = it.next().cloned();
            break;
        }
        let name = name.strip_prefix(b"-").unwrap_or(name);
        let name = String::from_utf8_lossy(name).into_owned();
        let value = if ARG_OPTIONS.contains(&name.as_str()) {
            it.next().cloned()
        } else {
            None
        };
        opts.push(QemuOption { name, value });
    }
    UserCommand { opts, program }
}

const EM_AARCH64: u16 = 183;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const PT_INTERP: u32 = 3;

/// Checks the program a user-mode command runs: it exists and is a static, non-PIE aarch64
/// ELF (whose symbols are at their link addresses). Returns it as a symbol source.
pub fn check_program(program: Option<&OsString>, emulator: &str) -> Result<GuestImage> {
    let Some(program) = program else {
        return Err(usage(
            format!("the {emulator} command names no program to run"),
            format!(
                "put the program after QEMU's options: qemu-uftrace record -- {emulator} \
                 [options] PROGRAM [ARGS…]"
            ),
        ));
    };
    let path = PathBuf::from(program);
    let shown = path.display();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(usage(
                format!("the program {shown} does not exist"),
                format!("give its path ({emulator} does not search PATH)"),
            ))
        }
        Err(e) => {
            return Err(usage(
                format!("cannot read the program {shown}: {e}"),
                "give a readable aarch64 Linux program",
            ))
        }
    };
    let why = elf_problem(&bytes);
    match why {
        None => Ok(GuestImage {
            path,
            origin: ImageOrigin::Program,
        }),
        Some(Problem::NotElf) => Err(usage(
            format!("{shown} is not an ELF program"),
            "give a static aarch64 Linux program",
        )),
        Some(Problem::NotAarch64) => Err(usage(
            format!("{shown} is not an aarch64 (64-bit little-endian) program"),
            "build it for aarch64 (aarch64-linux-gnu-gcc)",
        )),
        Some(Problem::Dynamic) => Err(usage(
            format!("{shown} is dynamically linked, which qemu-uftrace does not support yet"),
            "link it statically (-static -no-pie)",
        )),
        Some(Problem::Pie) => Err(usage(
            format!(
                "{shown} is a position-independent (PIE) program, which qemu-uftrace does not \
                 support yet"
            ),
            "link it with -static -no-pie",
        )),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Problem {
    NotElf,
    NotAarch64,
    Dynamic,
    Pie,
}

/// What keeps an ELF file from being recorded with its link-time symbols, if anything.
fn elf_problem(b: &[u8]) -> Option<Problem> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" {
        return Some(Problem::NotElf);
    }
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
    };
    // ELFCLASS64, ELFDATA2LSB, EM_AARCH64.
    if b[4] != 2 || b[5] != 1 || u16_at(18) != Some(EM_AARCH64) {
        return Some(Problem::NotAarch64);
    }
    let phoff = u64_at(32).and_then(|o| usize::try_from(o).ok())?;
    let phentsize = usize::from(u16_at(54)?);
    let phnum = usize::from(u16_at(56)?);
    let interp = (0..phnum).any(|i| u32_at(phoff + i * phentsize) == Some(PT_INTERP));
    match u16_at(16) {
        _ if interp => Some(Problem::Dynamic),
        Some(ET_DYN) => Some(Problem::Pie),
        Some(ET_EXEC) => None,
        _ => Some(Problem::NotElf),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn options_end_at_the_program() {
        let cmd = user_command(&os(&[
            "-L",
            "/usr/aarch64-linux-gnu",
            "--cpu",
            "max",
            "-strace",
            "-E",
            "A=1",
            "-d",
            "in_asm",
            "-one-insn-per-tb",
            "prog",
            "-cpu",
            "x",
            "--",
            "arg",
        ]));
        let names: Vec<&str> = cmd.opts.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["L", "cpu", "strace", "E", "d", "one-insn-per-tb"]);
        assert_eq!(cmd.opts[1].value.as_deref(), Some("max".as_ref()));
        assert_eq!(cmd.opts[2].value, None);
        assert_eq!(cmd.program.as_deref(), Some("prog".as_ref()));
    }

    #[test]
    fn double_dash_ends_options_and_values_may_look_like_programs() {
        let cmd = user_command(&os(&["-0", "name", "-seed", "7", "--", "-prog", "a"]));
        assert_eq!(cmd.opts.len(), 2);
        assert_eq!(cmd.program.as_deref(), Some("-prog".as_ref()));
        let cmd = user_command(&os(&["-version"]));
        assert_eq!(cmd.program, None);
        assert_eq!(
            user_command(&os(&["-plugin", "p.so", "x"]))
                .program
                .as_deref(),
            Some("x".as_ref())
        );
    }

    fn elf(e_type: u16, machine: u16, interp: bool) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56 * 2];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[16..18].copy_from_slice(&e_type.to_le_bytes());
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&2u16.to_le_bytes());
        b[64..68].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        if interp {
            b[120..124].copy_from_slice(&PT_INTERP.to_le_bytes());
        }
        b
    }

    #[test]
    fn only_static_non_pie_aarch64_programs_pass() {
        assert_eq!(elf_problem(&elf(ET_EXEC, EM_AARCH64, false)), None);
        assert_eq!(
            elf_problem(&elf(ET_DYN, EM_AARCH64, false)),
            Some(Problem::Pie)
        );
        assert_eq!(
            elf_problem(&elf(ET_DYN, EM_AARCH64, true)),
            Some(Problem::Dynamic)
        );
        assert_eq!(
            elf_problem(&elf(ET_EXEC, 62, false)),
            Some(Problem::NotAarch64)
        );
        assert_eq!(elf_problem(b"#!/bin/sh\n"), Some(Problem::NotElf));
    }

    #[test]
    fn a_missing_program_is_one_line() {
        let e = check_program(Some(&"/nonexistent/prog".into()), "qemu-aarch64").unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "the program /nonexistent/prog does not exist; give its path (qemu-aarch64 does \
             not search PATH)"
        );
        let e = check_program(None, "qemu-aarch64").unwrap_err();
        assert!(format!("{e:#}").starts_with("the qemu-aarch64 command names no program"));
    }
}
