//! The decoders' tests take their instruction bytes from the real assemblers: a listing is
//! assembled and linked at a chosen address with the cross binutils that
//! `scripts/install-deps.sh` installs, and each line's address and bytes come back.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One assembled line: its address and bytes.
#[derive(Debug, Clone)]
pub struct Insn {
    pub source: String,
    pub addr: u64,
    pub bytes: Vec<u8>,
}

/// A cross toolchain: `<prefix>as`, `<prefix>ld`, `<prefix>objcopy`, `<prefix>nm`.
pub struct Binutils {
    pub prefix: &'static str,
    pub package: &'static str,
    pub as_flags: &'static [&'static str],
    pub ld_flags: &'static [&'static str],
}

pub const X86_64: Binutils = Binutils {
    prefix: "x86_64-linux-gnu-",
    package: "binutils-x86-64-linux-gnu",
    as_flags: &["--64"],
    ld_flags: &["-m", "elf_x86_64"],
};

pub const AARCH64: Binutils = Binutils {
    prefix: "aarch64-linux-gnu-",
    package: "binutils-aarch64-linux-gnu",
    as_flags: &["-march=armv8.5-a"],
    ld_flags: &["-m", "aarch64linux"],
};

pub const RISCV64: Binutils = Binutils {
    prefix: "riscv64-linux-gnu-",
    package: "binutils-riscv64-linux-gnu",
    as_flags: &["-march=rv64gc", "-mabi=lp64d"],
    ld_flags: &["-m", "elf64lriscv", "--no-relax"],
};

pub const RISCV32: Binutils = Binutils {
    prefix: "riscv64-linux-gnu-",
    package: "binutils-riscv64-linux-gnu",
    as_flags: &["-march=rv32gc", "-mabi=ilp32d"],
    ld_flags: &["-m", "elf32lriscv", "--no-relax"],
};

fn run(tools: &Binutils, tool: &str, args: &[&str], dir: &Path) -> Vec<u8> {
    let name = format!("{}{tool}", tools.prefix);
    let out = Command::new(&name)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {name} ({e}): install {} (scripts/install-deps.sh)",
                tools.package
            )
        });
    assert!(
        out.status.success(),
        "{name} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Assembles `lines` (one instruction each) after `header` (directives: `.code16`,
/// `.option norvc`, symbol definitions) into `.text` at `base`, and gives each line's
/// address and bytes. Lines may refer to absolute addresses: the linker resolves them.
pub fn assemble(tools: &Binutils, base: u64, header: &str, lines: &[&str]) -> Vec<Insn> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "qemu-uftrace-asm-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut src = format!(".text\n.globl _start\n_start:\n{header}\n");
    for (i, line) in lines.iter().enumerate() {
        src.push_str(&format!("insn_{i}:\n\t{line}\n"));
    }
    src.push_str(&format!("insn_{}:\n", lines.len()));
    std::fs::write(dir.join("t.s"), src).unwrap();
    let mut as_args = tools.as_flags.to_vec();
    as_args.extend(["-o", "t.o", "t.s"]);
    run(tools, "as", &as_args, &dir);
    let ttext = format!("-Ttext=0x{base:x}");
    let mut ld_args = tools.ld_flags.to_vec();
    ld_args.extend(["-e", "_start", &ttext, "-o", "t.elf", "t.o"]);
    run(tools, "ld", &ld_args, &dir);
    run(
        tools,
        "objcopy",
        &["-O", "binary", "-j", ".text", "t.elf", "t.bin"],
        &dir,
    );
    let text = std::fs::read(dir.join("t.bin")).unwrap();
    let symbols = String::from_utf8(run(tools, "nm", &["t.elf"], &dir)).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let addr_of = |i: usize| {
        let name = format!("insn_{i}");
        symbols
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let addr = f.next()?;
                (f.nth(1)? == name).then(|| u64::from_str_radix(addr, 16).unwrap())
            })
            .unwrap_or_else(|| panic!("{name} not in the symbol table"))
    };
    (0..lines.len())
        .map(|i| {
            let (addr, end) = (addr_of(i), addr_of(i + 1));
            Insn {
                source: lines[i].to_string(),
                addr,
                bytes: text[(addr - base) as usize..(end - base) as usize].to_vec(),
            }
        })
        .collect()
}

/// The bytes of the whole listing from `base` up to and including `insn`: what lies before
/// the address `insn` returns to.
pub fn bytes_through(listing: &[Insn], base: u64, insn: &Insn) -> Vec<u8> {
    let mut text = Vec::new();
    for i in listing {
        assert_eq!(i.addr, base + text.len() as u64, "listing with gaps");
        text.extend_from_slice(&i.bytes);
        if i.addr == insn.addr {
            break;
        }
    }
    text
}

/// [`crate::arch::feeding_load`] of a listing whose last line is a call through a register:
/// which of the lines before it (by index) feeds it.
pub fn feeding_load_of(isa: &dyn crate::arch::Isa, listing: &[Insn]) -> Option<crate::arch::Feed> {
    use crate::arch::{InsnKind, Mode, Target};
    let (call, earlier) = listing.split_last().expect("a listing");
    let reg = match isa.classify(Mode::Bits64, call.addr, &call.bytes) {
        InsnKind::Call {
            target: Target::Register(r),
            ..
        } => r,
        other => panic!("{}: not a call through a register: {other:?}", call.source),
    };
    let earlier: Vec<&[u8]> = earlier.iter().map(|i| &i.bytes[..]).collect();
    crate::arch::feeding_load(isa, Mode::Bits64, &earlier, &call.bytes, reg)
}
