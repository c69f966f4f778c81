//! The function entries the plugin decides jumps by at translation time (`entries=FILE`,
//! read by `qemu_uftrace_engine::entries`): a direct jump from one function to another's
//! first instruction (a tail call, aarch64 glibc's `__wrap_main: b main`) enters it.

use qemu_uftrace_symbols::{self as symbols, Arch, Image, LoadOptions};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;

/// A compiler-split part's parent name (`foo` for `foo.cold` and `foo.cold.3`), and
/// whether the name is such a part: a part is never entered by a jump, and jumps between it
/// and its parent stay inside one function.
fn split_part(name: &str) -> (&str, bool) {
    match name.find(".cold") {
        Some(i) if name[i + 5..].is_empty() || name[i + 5..].starts_with('.') => (&name[..i], true),
        _ => (name, false),
    }
}

/// The names uftrace's replay treats as longjmps (its `fixup_syms`, matched exactly): at
/// such an entry it puts the display back at setjmp's depth.
const LONGJMPS: &[&str] = &["longjmp", "siglongjmp", "__longjmp_chk"];
/// The names it treats as setjmps: the depth of the last one entered is where a longjmp
/// returns to.
const SETJMPS: &[&str] = &["setjmp", "_setjmp", "sigsetjmp", "__sigsetjmp"];

/// The list's text: `rebase LINK_ENTRY` first for a program placed at a bias known only
/// when it runs, then `START END GROUP KIND` per function; those starting in one of the
/// `plt` ranges are PLT entries (`p` after their kind).
pub fn text<'a>(
    images: impl IntoIterator<Item = &'a Image>,
    plt: &[(u64, u64)],
    rebase: Option<u64>,
) -> String {
    let mut out = String::new();
    if let Some(entry) = rebase {
        let _ = writeln!(out, "rebase {entry:x}");
    }
    let mut groups: HashMap<&str, usize> = HashMap::new();
    for image in images {
        for f in &image.functions {
            let (parent, cold) = split_part(&f.name);
            let next = groups.len();
            let group = *groups.entry(parent).or_insert(next);
            let kind = if cold {
                'c'
            } else if LONGJMPS.contains(&f.name.as_str()) {
                'l'
            } else if SETJMPS.contains(&f.name.as_str()) {
                's'
            } else {
                'f'
            };
            let in_plt = plt.iter().any(|&(lo, hi)| (lo..hi).contains(&f.addr));
            let _ = writeln!(
                out,
                "{:x} {:x} {group} {kind}{}",
                f.addr,
                f.addr.wrapping_add(f.size),
                if in_plt { "p" } else { "" }
            );
        }
    }
    out
}

/// User mode: the program's own functions (at link addresses) and, for a PIE, the link
/// entry point the plugin moves them by once the program's entry point is known (`None`
/// for a program that runs at its link addresses). `None` for a program without symbols.
pub struct Program {
    pub image: Image,
    pub rebase: Option<u64>,
    /// Its PLT sections (`Elf::plt`).
    pub plt: Vec<(u64, u64)>,
}

impl Program {
    /// Reads `program`'s symbol table (a static program's takes milliseconds).
    pub fn read(program: &Path, arch: Arch) -> Option<Program> {
        let opts = LoadOptions {
            expected_arch: Some(arch),
            ..Default::default()
        };
        let image = symbols::load_elf(program, &opts).ok()?;
        if image.functions.is_empty() {
            return None;
        }
        let elf = crate::qemu::user::Elf::read(program);
        let rebase = (elf.as_ref()).filter(|e| e.relocatable).map(|e| e.entry);
        let plt = elf.map(|e| e.plt).unwrap_or_default();
        Some(Program { image, rebase, plt })
    }

    /// Writes the program's list into `file` before QEMU starts; whether it was written.
    pub fn write(&self, file: &Path) -> bool {
        std::fs::write(
            file,
            text(std::slice::from_ref(&self.image), &self.plt, self.rebase),
        )
        .is_ok()
    }
}

/// User mode: the list of the program's shared libraries and dynamic loader (`interp`), at
/// their files' addresses, each named by its device and inode (the plugin finds the file
/// again from the descriptor the guest maps it by) with its `PT_LOAD`s (which place it).
/// A file without symbols or ELF headers is left out: its tail calls are not seen.
pub fn libraries_text(files: &[std::path::PathBuf], interp: Option<&Path>, arch: Arch) -> String {
    let mut out = String::new();
    for path in files {
        let (Some(lib), Some(elf)) = (
            crate::symbol_source::library(path, arch),
            crate::qemu::user::Elf::read(path),
        ) else {
            continue;
        };
        let image = lib.image;
        if image.functions.is_empty() {
            continue;
        }
        let is_interp = interp.is_some_and(|i| i == path);
        let _ = writeln!(
            out,
            "image {:x} {:x}{}",
            lib.dev,
            lib.ino,
            if is_interp { " interp" } else { "" }
        );
        for seg in &elf.loads {
            let _ = writeln!(
                out,
                "load {:x} {:x} {}",
                seg.offset,
                seg.vaddr,
                u8::from(seg.exec)
            );
        }
        out.push_str(&text(std::slice::from_ref(&image), &elf.plt, None));
    }
    out
}

/// System mode: the list of every symbol source at its offset, with a kernel Image's
/// physical alias (its first code runs there with the MMU off), from symbol tables only.
pub fn system_text(
    read: &crate::symbol_source::ReadOnce,
    kernel: Option<&Path>,
    board: &crate::kernel_alias::Board,
) -> String {
    // Every source, a Linux kernel's too: its entry code's jumps where no call is made
    // (a vector slot's `b el0t_64_sync`, `b ret_to_user`) are left to the exception entries
    // and the hand-over at an ERET to user space (engine/src/exceptions.rs).
    // A kernel's physical-address head code runs before its MMU maps the link addresses.
    let alias = kernel.and_then(|k| crate::kernel_alias::physical_alias(read.images(), k, board));
    // No PLT: a kernel's and firmware's small functions are functions.
    text(read.images().chain(&alias), &[], None)
}

/// Writes `text` into `file` whole or not at all (the plugin may be reading it).
pub fn write_atomically(file: &Path, text: &str) -> bool {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, file).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_parts_share_their_parent_group() {
        assert_eq!(split_part("foo.cold"), ("foo", true));
        assert_eq!(split_part("foo.cold.3"), ("foo", true));
        assert_eq!(split_part("foo.part.0"), ("foo.part.0", false));
        assert_eq!(split_part("coldest"), ("coldest", false));
        let image = |funcs: &[(u64, u64, &str)]| Image {
            path: "p".into(),
            start: 0,
            end: 0,
            functions: funcs
                .iter()
                .map(|&(addr, size, name)| symbols::Function {
                    addr,
                    size,
                    name: name.into(),
                    global: true,
                    line: None,
                })
                .collect(),
            arch: None,
            modules: Vec::new(),
            by_address: Vec::new(),
        };
        let t = text(
            &[image(&[
                (0x10, 8, "main"),
                (0x20, 4, "f"),
                (0x90, 4, "main.cold"),
                (0xa0, 16, "malloc"),
            ])],
            &[(0xa0, 0xc0)],
            Some(0x10),
        );
        assert_eq!(
            t,
            "rebase 10\n10 18 0 f\n20 24 1 f\n90 94 0 c\na0 b0 2 fp\n"
        );
        let f = qemu_uftrace_engine::entries::Functions::parse(&t).unwrap();
        assert!(f.enters(0x14, 0x20) && !f.enters(0x92, 0x10));
    }
}
