//! Reading a user-mode command line (`qemu-aarch64 [options] program [arguments…]`) the
//! way QEMU's linux-user does (`parse_args` in `linux-user/main.c`), and checking the
//! program it runs, our symbol source.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use anyhow::Result;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::{LittleEndian, ReadRef};
use qemu_uftrace_format::Arch;

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
    /// How many words the options take (a `--` before the program not counted).
    pub opt_words: usize,
}

/// Splits `args` as linux-user does: options until the first word that does not start with
/// `-` (or after `--`), which is the program; everything after it is the program's.
pub fn user_command(args: &[OsString]) -> UserCommand {
    let mut opts = Vec::new();
    let mut it = args.iter();
    let mut program = None;
    let mut opt_words = 0;
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
        opt_words += 1;
        let name = name.strip_prefix(b"-").unwrap_or(name);
        let name = String::from_utf8_lossy(name).into_owned();
        let value = if ARG_OPTIONS.contains(&name.as_str()) {
            it.next().cloned()
        } else {
            None
        };
        opt_words += usize::from(value.is_some());
        opts.push(QemuOption { name, value });
    }
    UserCommand {
        opts,
        program,
        opt_words,
    }
}

/// Checks the program a user-mode command runs: it exists and is an ELF program for `arch`,
/// the emulator's own (static or dynamic, PIE or not: where it and its libraries land is
/// read at run time, `user_maps`). Returns it as a symbol source.
pub fn check_program(program: Option<&OsString>, emulator: &str, arch: Arch) -> Result<GuestImage> {
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
    // Only the headers are read (a program with its debug information has megabytes QEMU
    // is waiting to load), as std::fs::read would: a directory fails at its first read.
    let file = std::fs::File::open(&path).and_then(|mut f| {
        std::io::Read::read(&mut f, &mut [0u8; 1])?;
        Ok(f)
    });
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(usage(
                format!("the program {shown} does not exist"),
                format!("give its path ({emulator} does not search PATH)"),
            ))
        }
        Err(e) => {
            return Err(usage(
                format!("cannot read the program {shown}: {e}"),
                format!("give a readable {arch} Linux program"),
            ))
        }
    };
    let other_machine = || {
        usage(
            format!("{shown} is not a program for {arch} (64-bit little-endian)"),
            format!("build it for {arch} ({arch}-linux-gnu-gcc)"),
        )
    };
    match Elf::parse_from(&object::ReadCache::new(file)) {
        // The emulator runs programs of its own machine only.
        Ok(elf) if elf.machine != arch.elf_machine() => Err(other_machine()),
        Ok(_) => Ok(GuestImage {
            path,
            origin: ImageOrigin::Program,
        }),
        Err(Problem::NotElf) => Err(usage(
            format!("{shown} is not an ELF program"),
            format!("give an ELF program built for {arch}"),
        )),
        Err(Problem::OtherMachine) => Err(other_machine()),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Problem {
    NotElf,
    /// Not a 64-bit little-endian program of an architecture qemu-uftrace records.
    OtherMachine,
}

/// One loadable segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub exec: bool,
}

/// What placing an ELF file's symbols needs from its headers.
#[derive(Debug, PartialEq, Eq)]
pub struct Elf {
    /// `e_machine`: one of the architectures qemu-uftrace records.
    pub machine: u16,
    /// `ET_DYN` (PIE, shared library, loader): loaded wherever it is put.
    pub relocatable: bool,
    pub entry: u64,
    /// `PT_INTERP`: the dynamic loader's guest path.
    pub interp: Option<Vec<u8>>,
    pub loads: Vec<Segment>,
    /// The PLT sections' address ranges (`.plt`, `.plt.sec`, `.plt.got`, `.iplt`): a jump
    /// out of an entry there is its call's, not a tail call.
    pub plt: Vec<(u64, u64)>,
}

impl Elf {
    /// Reads the file's headers, not the whole file (a library's or a program's symbols and
    /// debug information are megabytes).
    pub fn read(path: &std::path::Path) -> Option<Elf> {
        Elf::parse_from(&object::ReadCache::new(std::fs::File::open(path).ok()?)).ok()
    }

    pub fn parse(b: &[u8]) -> std::result::Result<Elf, Problem> {
        Elf::parse_from(b)
    }

    /// Reads the headers with the `object` crate, which checks every offset and size
    /// against the file: a header table out of the file is no ELF program.
    fn parse_from<'a, R: ReadRef<'a>>(b: R) -> std::result::Result<Elf, Problem> {
        if b.read_bytes_at(0, 4).ok() != Some(&b"\x7fELF"[..]) {
            return Err(Problem::NotElf);
        }
        // ELFCLASS64, ELFDATA2LSB, a machine a user-mode emulator runs.
        if b.read_bytes_at(4, 2).ok() != Some(&[elf::ELFCLASS64, elf::ELFDATA2LSB][..]) {
            return Err(Problem::OtherMachine);
        }
        let header = elf::FileHeader64::<LittleEndian>::parse(b).map_err(|_| Problem::NotElf)?;
        let endian = header.endian().map_err(|_| Problem::NotElf)?;
        let machine = header.e_machine(endian);
        if Arch::from_elf_machine(machine).is_none() {
            return Err(Problem::OtherMachine);
        }
        let relocatable = match header.e_type(endian) {
            elf::ET_DYN => true,
            elf::ET_EXEC => false,
            _ => return Err(Problem::NotElf),
        };
        let segments = header
            .program_headers(endian, b)
            .map_err(|_| Problem::NotElf)?;
        let mut out = Elf {
            machine,
            relocatable,
            entry: header.e_entry(endian),
            interp: None,
            loads: Vec::new(),
            plt: Vec::new(),
        };
        // A file without section headers (or with a bad table) has no PLT to tell apart.
        if let Ok(sections) = header.sections(endian, b) {
            for section in sections.iter() {
                let name = sections.section_name(endian, section).unwrap_or_default();
                if name.starts_with(b".plt") || name == b".iplt" {
                    let start = section.sh_addr(endian);
                    out.plt
                        .push((start, start.saturating_add(section.sh_size(endian))));
                }
            }
        }
        for ph in segments {
            match ph.p_type(endian) {
                elf::PT_LOAD => out.loads.push(Segment {
                    offset: ph.p_offset(endian),
                    vaddr: ph.p_vaddr(endian),
                    filesz: ph.p_filesz(endian),
                    exec: ph.p_flags(endian) & elf::PF_X != 0,
                }),
                elf::PT_INTERP => {
                    // The path up to its NUL (or the segment's end, should it lack one).
                    if let Ok(text) = ph.data(endian, b) {
                        let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
                        out.interp = Some(text[..end].to_vec());
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// The load bias of this file when its bytes at `file_offset` were mapped at `start`
    /// (a loader maps each segment from its page-aligned file offset).
    pub fn bias_of_mapping(&self, start: u64, file_offset: u64) -> u64 {
        // The executable segment that mapping holds: the one starting within a page (of
        // any size up to 64 KiB) of the mapped offset.
        let seg = self
            .loads
            .iter()
            .filter(|s| s.offset >= file_offset && s.offset - file_offset < 0x10000)
            .min_by_key(|s| (!s.exec, s.offset));
        match seg {
            // Wrapping: the addresses come from the guest, whatever they are.
            Some(s) => start
                .wrapping_add(s.offset - file_offset)
                .wrapping_sub(s.vaddr),
            None => start.wrapping_sub(file_offset),
        }
    }

    /// The load bias when the file's lowest segment starts at `base` (`AT_BASE`).
    pub fn bias_of_base(&self, base: u64) -> u64 {
        let low = self.loads.iter().map(|s| s.vaddr).min().unwrap_or(0);
        base.wrapping_sub(low & !0xfff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use object::elf::{ET_DYN, ET_EXEC, PT_INTERP, PT_LOAD};

    const EM_AARCH64: u16 = 183;
    const EM_RISCV: u16 = 243;
    const EM_X86_64: u16 = 62;

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
        assert_eq!(cmd.opt_words, 10);
        assert_eq!(cmd.opts[1].value.as_deref(), Some("max".as_ref()));
        assert_eq!(cmd.opts[2].value, None);
        assert_eq!(cmd.program.as_deref(), Some("prog".as_ref()));
    }

    #[test]
    fn double_dash_ends_options_and_values_may_look_like_programs() {
        let cmd = user_command(&os(&["-0", "name", "-seed", "7", "--", "-prog", "a"]));
        assert_eq!(cmd.opts.len(), 2);
        assert_eq!(cmd.program.as_deref(), Some("-prog".as_ref()));
        assert_eq!(cmd.opt_words, 4);
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
        let mut b = vec![0u8; 64 + 56 * 2 + 32];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1; // EV_CURRENT, which QEMU's loader checks too
        b[16..18].copy_from_slice(&e_type.to_le_bytes());
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[24..32].copy_from_slice(&0x640u64.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&2u16.to_le_bytes());
        b[64..68].copy_from_slice(&PT_LOAD.to_le_bytes());
        b[68..72].copy_from_slice(&5u32.to_le_bytes()); // R+X
        b[96..104].copy_from_slice(&0x700u64.to_le_bytes()); // filesz
        if interp {
            b[120..124].copy_from_slice(&PT_INTERP.to_le_bytes());
            b[128..136].copy_from_slice(&176u64.to_le_bytes());
            b[152..160].copy_from_slice(&9u64.to_le_bytes());
            b[176..185].copy_from_slice(b"/lib/ld\0\0");
        }
        b
    }

    #[test]
    fn each_emulator_takes_its_own_machine() {
        assert!(Elf::parse(&elf(ET_EXEC, EM_X86_64, false)).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("prog");
        std::fs::write(&prog, elf(ET_EXEC, EM_X86_64, false)).unwrap();
        let prog = prog.into_os_string();
        assert!(check_program(Some(&prog), "qemu-x86_64", Arch::X86_64).is_ok());
        let e = check_program(Some(&prog), "qemu-aarch64", Arch::Aarch64).unwrap_err();
        assert!(
            format!("{e:#}").contains("is not a program for aarch64 (64-bit little-endian)"),
            "{e:#}"
        );
    }

    #[test]
    fn static_dynamic_and_pie_aarch64_programs_pass() {
        let e = Elf::parse(&elf(ET_EXEC, EM_AARCH64, false)).unwrap();
        assert!(!e.relocatable);
        assert_eq!(e.interp, None);
        let e = Elf::parse(&elf(ET_DYN, EM_AARCH64, true)).unwrap();
        assert!(e.relocatable);
        assert_eq!(e.entry, 0x640);
        assert_eq!(e.interp.as_deref(), Some(&b"/lib/ld"[..]));
        assert_eq!(
            e.loads,
            [Segment {
                offset: 0,
                vaddr: 0,
                filesz: 0x700,
                exec: true
            }]
        );
        assert_eq!(
            Elf::parse(&elf(ET_EXEC, 3, false)),
            Err(Problem::OtherMachine)
        );
        assert_eq!(Elf::parse(b"#!/bin/sh\n"), Err(Problem::NotElf));
    }

    #[test]
    fn riscv64_programs_pass_for_qemu_riscv64_only() {
        let dir = std::env::temp_dir().join(format!("qu-user-riscv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rv = dir.join("rv");
        let arm = dir.join("arm");
        std::fs::write(&rv, elf(ET_DYN, EM_RISCV, true)).unwrap();
        std::fs::write(&arm, elf(ET_EXEC, EM_AARCH64, false)).unwrap();
        assert!(Elf::parse(&elf(ET_EXEC, EM_RISCV, false)).is_ok());
        assert!(check_program(Some(&rv.clone().into()), "qemu-riscv64", Arch::Riscv64).is_ok());
        assert!(check_program(
            Some(&arm.clone().into()),
            "qemu-aarch64-static",
            Arch::Aarch64
        )
        .is_ok());
        let e = check_program(Some(&arm.into()), "qemu-riscv64", Arch::Riscv64).unwrap_err();
        assert!(format!("{e:#}").contains("is not a program for riscv64 (64-bit little-endian)"));
        let e = check_program(Some(&rv.into()), "qemu-aarch64", Arch::Aarch64).unwrap_err();
        assert!(format!("{e:#}").contains("build it for aarch64 (aarch64-linux-gnu-gcc)"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Header offsets whose sums overflowed the hand-written reader (a debug build
    /// panicked): a program header table past the end of the file is no ELF program.
    #[test]
    fn crafted_headers_are_refused_not_panicked() {
        let mut b = elf(ET_DYN, EM_AARCH64, true);
        b[32..40].copy_from_slice(&(u64::MAX - 8).to_le_bytes()); // e_phoff
        assert_eq!(Elf::parse(&b), Err(Problem::NotElf));
        let mut b = elf(ET_DYN, EM_AARCH64, true);
        b[56..58].copy_from_slice(&u16::MAX.to_le_bytes()); // e_phnum
        assert_eq!(Elf::parse(&b), Err(Problem::NotElf));
        // A PT_INTERP pointing out of the file is no interpreter.
        let mut b = elf(ET_DYN, EM_AARCH64, true);
        b[128..136].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(Elf::parse(&b).unwrap().interp, None);
        assert_eq!(Elf::parse(&b"\x7fELF"[..]), Err(Problem::OtherMachine));
        assert_eq!(Elf::parse(&b"\x7fELF\x02\x01"[..]), Err(Problem::NotElf));
        // Guest addresses near the top wrap instead of overflowing.
        let e = Elf::parse(&elf(ET_DYN, EM_AARCH64, false)).unwrap();
        assert_eq!(e.bias_of_mapping(u64::MAX, 0), u64::MAX);
    }

    #[test]
    fn load_bias_from_a_mapping() {
        // lld-style: text at file offset 0x10000 linked at 0x20000.
        let e = Elf {
            machine: EM_AARCH64,
            relocatable: true,
            entry: 0,
            interp: None,
            plt: Vec::new(),
            loads: vec![
                Segment {
                    offset: 0,
                    vaddr: 0,
                    filesz: 0x1000,
                    exec: false,
                },
                Segment {
                    offset: 0x10000,
                    vaddr: 0x20000,
                    filesz: 0x5000,
                    exec: true,
                },
            ],
        };
        assert_eq!(
            e.bias_of_mapping(0x7f00_0002_0000, 0x10000),
            0x7f00_0000_0000
        );
        assert_eq!(e.bias_of_mapping(0x7f00_0000_0000, 0), 0x7f00_0000_0000);
        assert_eq!(e.bias_of_base(0x5500_0000), 0x5500_0000);
    }

    #[test]
    fn a_missing_program_is_one_line() {
        let e = check_program(
            Some(&"/nonexistent/prog".into()),
            "qemu-aarch64",
            Arch::Aarch64,
        )
        .unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "the program /nonexistent/prog does not exist; give its path (qemu-aarch64 does \
             not search PATH)"
        );
        let e = check_program(None, "qemu-aarch64", Arch::Aarch64).unwrap_err();
        assert!(format!("{e:#}").starts_with("the qemu-aarch64 command names no program"));
    }
}
