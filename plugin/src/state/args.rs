//! `-A/--argument` and `-R/--retval` (`args_file=FILE`, written by the CLI before QEMU
//! starts): which functions get their arguments read at their first instruction and their
//! return value at their return instructions, decided at translation; no other function
//! pays anything. One line a function:
//! `A|P ENTRY END ARGS RET` (hex addresses; `P`: a PIE's link address, placed by its load
//! bias as `aims` places `-F`'s), or, user mode, `L DEV INO ENTRY END ARGS RET`: a shared
//! library's function at its link address, in the file of that device and inode (hex), placed
//! where the guest maps it (`state::lib_entries`); or, system mode, `F HEXPATH OFFSET END ARGS
//! RET`: a guest file's function (`PATH:FUNC`) at its offset in the file (END too), found
//! where a process maps the file (`state::spaces`; see [`file_entry_at`]). ARGS `-` or `N:K,…` (K `s` for a string, else the byte
//! count of the register to keep; `N:K:OFF`, a kernel syscall wrapper's: the 8 bytes at
//! the first argument register plus hex OFF, its `struct pt_regs`'s field; `N:K:sp+OFF`, an
//! argument past the registers: the 8 bytes at the stack pointer plus hex OFF; K `f4` or `f8`,
//! floating-point register N's low bytes), RET `-`, `s`, `f4`, `f8` or a byte count. END is the function's
//! end, for its return instructions (0: unknown, no return value).

use qemu_uftrace_engine::spaces::SpaceId;
use rustc_hash::FxHashMap;
use std::path::Path;
use std::sync::OnceLock;

/// How one value is read: a register's low bytes, the string it points at, or a
/// floating-point register's low bytes (a `Float` argument's index counts those registers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int(u8),
    Str,
    Float(u8),
}

/// Where in memory an argument is at the function's first instruction: 8 bytes at an
/// offset from a register's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mem {
    /// From the first argument's (a syscall wrapper's `struct pt_regs *`).
    FirstArg(u32),
    /// From the stack pointer (an argument past the registers).
    Stack(u32),
}

/// One function's values: arguments (register index from 0, kind, and where it is in
/// memory when no register holds it) and return value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Func {
    pub args: Vec<(u8, Kind, Option<Mem>)>,
    pub ret: Option<Kind>,
    pub end: u64,
}

#[derive(Debug, Default)]
struct Table {
    /// By run-time entry address.
    at: FxHashMap<u64, usize>,
    /// A PIE's, by link address.
    pie: FxHashMap<u64, usize>,
    /// A library's, by its file (device, inode) and link address.
    lib: FxHashMap<LibAddr, usize>,
    funcs: Vec<Func>,
    /// Functions with a return value: (start, index), sorted, run-time and PIE apart.
    ret_at: Vec<(u64, usize)>,
    ret_pie: Vec<(u64, usize)>,
    ret_lib: Vec<(LibAddr, usize)>,
    /// Guest files' functions (system mode), and the files' guest paths they index.
    file: Vec<FileFunc>,
    file_paths: Vec<String>,
}

/// A guest file's function: its file (in `Table::file_paths`), its offset in the file and
/// where it ends there, its values (in `Table::funcs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileFunc {
    file: usize,
    offset: u64,
    end: u64,
    func: usize,
}

/// A library's function: its file's device and inode, its link address.
type LibAddr = (u64, u64, u64);

static TABLE: OnceLock<Table> = OnceLock::new();

/// Reads the list at install; a line it cannot read is the one-line error.
pub fn load(path: &Path, exec_image: bool) -> Result<(), String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("args_file={}: {e}", path.display()))?;
    let mut t = parse(&text).map_err(|e| format!("args_file={}: {e}", path.display()))?;
    // An exec'd image runs another program: the first one's functions are not its, but
    // the libraries' are theirs wherever the same files are mapped.
    if exec_image {
        t.at.clear();
        t.pie.clear();
        t.ret_at.clear();
        t.ret_pie.clear();
    }
    let _ = TABLE.set(t);
    Ok(())
}

fn parse(text: &str) -> Result<Table, String> {
    let mut t = Table::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("bad line {line:?}");
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
        let mut path = None;
        let (place, file, [entry, end, args, ret]) = match w[..] {
            ["L", dev, ino, entry, end, args, ret] => {
                ("L", Some((hex(dev)?, hex(ino)?)), [entry, end, args, ret])
            }
            ["F", hex_path, entry, end, args, ret] => {
                path = Some(super::config::hex_path(hex_path).ok_or_else(bad)?);
                ("F", None, [entry, end, args, ret])
            }
            [place, entry, end, args, ret] => (place, None, [entry, end, args, ret]),
            _ => return Err(bad()),
        };
        let kind = |s: &str| -> Result<Kind, String> {
            match s {
                "s" => Ok(Kind::Str),
                "f4" => Ok(Kind::Float(4)),
                "f8" => Ok(Kind::Float(8)),
                n => match n.parse::<u8>() {
                    Ok(n @ 1..=8) => Ok(Kind::Int(n)),
                    _ => Err(bad()),
                },
            }
        };
        let (entry, end) = (hex(entry)?, hex(end)?);
        let mut f = Func {
            end,
            ..Func::default()
        };
        if args != "-" {
            for a in args.split(',') {
                let (n, k) = a.split_once(':').ok_or_else(bad)?;
                let n: u8 = n.parse().map_err(|_| bad())?;
                let off = |o: &str| u32::from_str_radix(o, 16).map_err(|_| bad());
                let (k, off) = match k.split_once(':') {
                    Some((k, o)) => match o.strip_prefix("sp+") {
                        Some(o) => (k, Some(Mem::Stack(off(o)?))),
                        None => (k, Some(Mem::FirstArg(off(o)?))),
                    },
                    None => (k, None),
                };
                f.args
                    .push((n.checked_sub(1).ok_or_else(bad)?, kind(k)?, off));
            }
        }
        if ret != "-" {
            f.ret = Some(kind(ret)?);
        }
        let i = t.funcs.len();
        let has_ret = f.ret.is_some() && end > entry;
        t.funcs.push(f);
        match place {
            "A" => {
                t.at.insert(entry, i);
                if has_ret {
                    t.ret_at.push((entry, i));
                }
            }
            "P" => {
                t.pie.insert(entry, i);
                if has_ret {
                    t.ret_pie.push((entry, i));
                }
            }
            "F" => {
                let path = path.ok_or_else(bad)?;
                let file = match t.file_paths.iter().position(|p| *p == path) {
                    Some(f) => f,
                    None => {
                        t.file_paths.push(path);
                        t.file_paths.len() - 1
                    }
                };
                t.file.push(FileFunc {
                    file,
                    offset: entry,
                    end: if has_ret { end } else { 0 },
                    func: i,
                });
            }
            "L" => {
                let (dev, ino) = file.ok_or_else(bad)?;
                t.lib.insert((dev, ino, entry), i);
                if has_ret {
                    t.ret_lib.push(((dev, ino, entry), i));
                }
            }
            _ => return Err(bad()),
        }
    }
    t.ret_at.sort_unstable();
    t.ret_pie.sort_unstable();
    t.ret_lib.sort_unstable();
    Ok(t)
}

/// Whether any function has a return value to read (`-R`): return instructions then
/// listen for the tail calls such a function leaves by (`handlers::args`).
pub fn has_retval() -> bool {
    TABLE.get().is_some_and(|t| {
        !(t.ret_at.is_empty() && t.ret_pie.is_empty() && t.ret_lib.is_empty())
            || t.file.iter().any(|f| f.end != 0)
    })
}

/// Whether some guest file's functions have values to read.
pub fn has_files() -> bool {
    TABLE.get().is_some_and(|t| !t.file.is_empty())
}

/// Function `i`'s values ([`file_entry_at`], [`file_returning_at`]).
pub fn func(i: usize) -> Option<&'static Func> {
    TABLE.get()?.funcs.get(i)
}

/// A page the translator looked up ([`file_entry_at`]): the space, the page, and the aimed
/// file and the page's offset in it (`None`: none of them there).
type PageSeen = (SpaceId, u64, Option<(usize, u64)>);

thread_local! {
    /// The translator's last page looked up. Kept for one block ([`new_block`]): a space's
    /// mappings change between blocks.
    static PAGE: std::cell::Cell<Option<PageSeen>> = const { std::cell::Cell::new(None) };
}

/// The translator starts a block: what [`PAGE`] holds may be out of date.
pub fn new_block() {
    PAGE.with(|p| p.set(None));
}

/// Where user-space `pc`, in space `space`, is in a guest file with functions to read: the
/// file (in `Table::file_paths`) and the offset there.
fn file_offset(t: &Table, space: SpaceId, pc: u64) -> Option<(usize, u64)> {
    const PAGE_SIZE: u64 = 4096;
    let page = pc / PAGE_SIZE;
    let cached = PAGE
        .with(|p| p.get())
        .filter(|&(s, pg, _)| (s, pg) == (space, page));
    let at = match cached {
        Some((_, _, at)) => at,
        None => {
            let at = super::spaces::with(|s| {
                let (id, off) = s.file_at(space, page * PAGE_SIZE)?;
                let file = (t.file_paths.iter()).position(|p| s.file_id(p) == Some(id))?;
                Some((file, off))
            });
            PAGE.with(|p| p.set(Some((space, page, at))));
            at
        }
    };
    at.map(|(file, off)| (file, off + pc % PAGE_SIZE))
}

/// At translation, system mode: the guest file's function whose entry is user-space `pc`
/// in space `space` (the one translating): its index. A function with only a return value
/// too: a call through another file's PLT is made one of it there.
pub fn file_entry_at(space: SpaceId, pc: u64) -> Option<usize> {
    let t = TABLE.get().filter(|t| !t.file.is_empty())?;
    let (file, off) = file_offset(t, space, pc)?;
    let f = (t.file.iter()).find(|f| f.file == file && f.offset == off)?;
    Some(f.func)
}

/// [`file_entry_at`] at run time: the page the translator looked up last may have been
/// mapped again since.
pub fn file_entry_now(space: SpaceId, pc: u64) -> Option<usize> {
    new_block();
    file_entry_at(space, pc)
}

/// At translation, system mode: the guest file's function with a return value whose code
/// holds `pc` (a return instruction) in space `space`: its entry there, and its index.
pub fn file_returning_at(space: SpaceId, pc: u64) -> Option<(u64, usize)> {
    let t = TABLE.get().filter(|t| !t.file.is_empty())?;
    let (file, off) = file_offset(t, space, pc)?;
    let f = (t.file.iter()).find(|f| f.file == file && f.offset <= off && off < f.end)?;
    Some((pc - (off - f.offset), f.func))
}

/// The run-time entry of the function with a return value whose code holds `pc`: one the
/// CLI placed ([`returning_at`]) or, system mode, a guest file's where the running space
/// maps it ([`file_returning_at`]). Whichever reads the value at `pc`, a return instruction.
pub fn returning_entry(pc: u64) -> Option<u64> {
    returning_at(pc)
        .map(|(e, _)| e)
        .or_else(|| file_returning_at(file_space(pc)?, pc).map(|(e, _)| e))
}

/// The kind of return value of the function entered at `pc` in the running space (a frame's
/// function, at a return that closes it after its tail call): a placed one's or a guest
/// file's.
pub fn retval_of(pc: u64) -> Option<Kind> {
    (spec_at(pc).and_then(|f| f.ret)).or_else(|| func(file_entry_now(file_space(pc)?, pc)?)?.ret)
}

/// The space a guest file's function at `pc` is looked up in: the running one (the one
/// translating, at translation), where some guest file has values and `pc` is user space.
pub fn file_space(pc: u64) -> Option<SpaceId> {
    let space = super::spaces::translating();
    (has_files() && space != 0 && pc >> 63 == 0).then_some(space)
}

/// Whether a jump at `pc` to `target` (`None`: through a register) leaves a function with a
/// return value for another: a tail call, whose callee's return gives the value.
pub fn leaves_returning(pc: u64, target: Option<u64>) -> bool {
    let Some(entry) = returning_entry(pc) else {
        return false;
    };
    target.is_none_or(|t| returning_entry(t) != Some(entry))
}

/// Whether any function has values to read.
pub fn active() -> bool {
    TABLE.get().is_some_and(|t| !t.funcs.is_empty())
}

/// Whether some functions wait for a PIE's placing.
pub fn has_pie() -> bool {
    TABLE.get().is_some_and(|t| !t.pie.is_empty())
}

/// Run-time `pc` where the CLI named functions: a randomised kernel's moved back
/// (`state::kaslr`), every other address as it is.
fn named(pc: u64) -> u64 {
    crate::state::kaslr::to_symbols(pc)
}

/// A PIE's link address for run-time `pc`, once the program is placed.
fn link(pc: u64) -> Option<u64> {
    crate::state::aims::bias().map(|b| pc.wrapping_sub(b))
}

/// The function whose entry is `pc` and has arguments to read.
pub fn entry_at(pc: u64) -> Option<&'static Func> {
    spec_at(pc).filter(|f| !f.args.is_empty())
}

/// The function whose entry is `pc` and has values to read.
pub fn spec_at(pc: u64) -> Option<&'static Func> {
    let t = TABLE.get()?;
    let i =
        t.at.get(&named(pc))
            .or_else(|| link(pc).and_then(|l| t.pie.get(&l)))
            .or_else(|| in_library(t, pc).and_then(|l| t.lib.get(&l)))?;
    t.funcs.get(*i)
}

/// Run-time `pc` in a placed library, when some library's functions have values to read.
fn in_library(t: &Table, pc: u64) -> Option<LibAddr> {
    if t.lib.is_empty() {
        return None;
    }
    crate::state::lib_entries::link_of(pc)
}

/// The function with a return value whose code holds `pc` (a return instruction): its
/// run-time entry and values.
pub fn returning_at(pc: u64) -> Option<(u64, &'static Func)> {
    let t = TABLE.get()?;
    let find = |list: &[(u64, usize)], at: u64| -> Option<(u64, usize)> {
        let n = list.partition_point(|&(s, _)| s <= at);
        let (start, i) = *list.get(n.checked_sub(1)?)?;
        (at < t.funcs[i].end).then_some((start, i))
    };
    // A randomised kernel runs its functions `shift` above where the CLI named them.
    let shift = pc.wrapping_sub(named(pc));
    if let Some((start, i)) = find(&t.ret_at, named(pc)) {
        return Some((start.wrapping_add(shift), &t.funcs[i]));
    }
    if let Some(l) = link(pc) {
        if let Some((start, i)) = find(&t.ret_pie, l) {
            return Some((start.wrapping_add(pc.wrapping_sub(l)), &t.funcs[i]));
        }
    }
    let (dev, ino, l) = in_library(t, pc)?;
    let n = (t.ret_lib).partition_point(|&(k, _)| k <= (dev, ino, l));
    let ((file_dev, file_ino, start), i) = *t.ret_lib.get(n.checked_sub(1)?)?;
    ((file_dev, file_ino) == (dev, ino) && l < t.funcs[i].end)
        .then(|| (start.wrapping_add(pc.wrapping_sub(l)), &t.funcs[i]))
}

/// The stack pointer's register (arguments past the registers are above it).
pub fn stack_pointer(isa: &dyn qemu_uftrace_engine::arch::Isa) -> &'static str {
    match isa.gpr_name(0).as_str() {
        "rax" => "rsp",
        _ => "sp",
    }
}

/// The registers of the calling convention: arguments in order, and the return value.
pub fn registers(
    isa: &dyn qemu_uftrace_engine::arch::Isa,
) -> (&'static [&'static str], &'static str) {
    match isa.gpr_name(0).as_str() {
        // AAPCS64.
        "x0" => (&["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"], "x0"),
        // System V x86_64.
        "rax" => (&["rdi", "rsi", "rdx", "rcx", "r8", "r9"], "rax"),
        // RISC-V LP64.
        _ => (&["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"], "a0"),
    }
}

/// The floating-point registers of the calling convention: arguments in order (the first
/// eight), and the return value. aarch64's are the low lanes of `v0`… (or SVE's `z0`…,
/// which QEMU lists instead).
pub fn float_registers() -> (&'static [&'static str], &'static str) {
    const SVE: [&str; 8] = ["z0", "z1", "z2", "z3", "z4", "z5", "z6", "z7"];
    const NEON: [&str; 8] = ["v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7"];
    const XMM: [&str; 8] = [
        "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
    ];
    const FA: [&str; 8] = ["fa0", "fa1", "fa2", "fa3", "fa4", "fa5", "fa6", "fa7"];
    static CHOSEN: OnceLock<&'static [&'static str; 8]> = OnceLock::new();
    let regs = CHOSEN.get_or_init(
        || match crate::state::isa_or_default().gpr_name(0).as_str() {
            "x0" if crate::state::guest::has_register("z0") => &SVE,
            "x0" => &NEON,
            "rax" => &XMM,
            _ => &FA,
        },
    );
    (&regs[..], regs[0])
}

/// The register a return value of `kind` is in.
pub fn return_register(isa: &dyn qemu_uftrace_engine::arch::Isa, kind: Kind) -> &'static str {
    match kind {
        Kind::Float(_) => float_registers().1,
        _ => registers(isa).1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse() {
        let t = parse("A 1000 1040 1:8,2:s 4\nP 2000 0 3:1 -\nA 3000 0 2:s:8 9:4:sp+10 -\n");
        assert!(t.is_err(), "one word for the arguments");
        let t =
            parse("A 1000 1040 1:8,2:s 4\nP 2000 0 3:1 -\nA 3000 0 2:s:8,9:4:sp+10 -\n").unwrap();
        assert_eq!(t.funcs.len(), 3);
        assert_eq!(
            t.funcs[2].args,
            [
                (1, Kind::Str, Some(Mem::FirstArg(8))),
                (8, Kind::Int(4), Some(Mem::Stack(0x10)))
            ]
        );
        assert_eq!(
            t.funcs[0],
            Func {
                args: vec![(0, Kind::Int(8), None), (1, Kind::Str, None)],
                ret: Some(Kind::Int(4)),
                end: 0x1040
            }
        );
        assert_eq!(t.ret_at, [(0x1000, 0)]);
        assert!(t.ret_pie.is_empty());
        assert_eq!(t.pie.get(&0x2000), Some(&1));
        assert!(parse("A 1000 1040 0:8 -").is_err());
        assert!(parse("A 1000 1040 1:9 -").is_err());
        assert!(parse("X 1000 1040 - -").is_err());
        assert!(parse("A 1000 1040 1:8:zz -").is_err());
        let t = parse("A 1000 1040 2:f4,1:4 f8").unwrap();
        assert_eq!(
            t.funcs[0].args,
            [(1, Kind::Float(4), None), (0, Kind::Int(4), None)]
        );
        assert_eq!(t.funcs[0].ret, Some(Kind::Float(8)));
        assert!(parse("A 1000 1040 1:f2 -").is_err());
        let t = parse("L 803 1f2e 4000 4080 1:s 8\nL 803 1f2e 5000 0 2:4 -\n").unwrap();
        assert_eq!(t.lib.get(&(0x803, 0x1f2e, 0x5000)), Some(&1));
        assert_eq!(t.ret_lib, [((0x803, 0x1f2e, 0x4000), 0)]);
        assert!(parse("L 803 4000 4080 1:s 8").is_err());
        // A guest file's, by its path (hex) and offsets: no value where the end is unknown.
        let t = parse("F 2f77 1040 1080 1:4 8\nF 2f77 2000 0 - 8\nF 2f6c 10 20 1:s -\n").unwrap();
        assert_eq!(t.file_paths, ["/w", "/l"]);
        assert_eq!(
            t.file,
            [
                FileFunc {
                    file: 0,
                    offset: 0x1040,
                    end: 0x1080,
                    func: 0
                },
                FileFunc {
                    file: 0,
                    offset: 0x2000,
                    end: 0,
                    func: 1
                },
                FileFunc {
                    file: 1,
                    offset: 0x10,
                    end: 0,
                    func: 2
                },
            ]
        );
        assert!(parse("F 77 1040 1080 1:4 8").is_err(), "a relative path");
        assert!(parse("F 2f7 1040 1080 1:4 8").is_err(), "half a byte");
    }
}
