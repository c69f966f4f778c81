//! Function entries the CLI found in the guest's symbols: a direct jump from one function to
//! another's first instruction (a tail call, aarch64 glibc's `__wrap_main: b main`) enters
//! that function, which uftrace shows as a call nested in the jumper's frame. Decided at
//! translation time, once per jump instruction; nothing here runs per event.
//!
//! The CLI writes them as text, one function a line: `START END GROUP KIND` (hex addresses,
//! END one past the last byte, GROUP a number shared by a function and its compiler-split
//! parts such as `foo.cold`, KIND `f` for a function, `l` and `s` for one that uftrace's
//! replay treats as a longjmp or a setjmp by its name, and `c` for a split part, which is
//! never entered by a jump; followed by `p` for a PLT entry, whose jump on is its call's). A line `rebase LINK_ENTRY` (hex) says the addresses are link
//! addresses of a program loaded at a bias known only once it runs (user mode's PIE):
//! `AT_ENTRY - LINK_ENTRY`.
//!
//! User mode's shared libraries come in a list of their own ([`Library::parse_all`]): a line
//! `image DEV INO [interp]` (hex: the file's device and inode on the host, which the plugin
//! finds again from the descriptor the guest maps it by; `interp` for the dynamic loader,
//! placed at `AT_BASE`), lines `load OFFSET VADDR X` (its `PT_LOAD`s, `X` 1 when
//! executable), then its functions at their file's addresses, as above.

/// One function (or split part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    start: u64,
    end: u64,
    group: u32,
    cold: bool,
    longjmp: bool,
    setjmp: bool,
    plt: bool,
}

/// The functions of the guest's known images, sorted by start.
#[derive(Debug, Default, Clone)]
pub struct Functions {
    entries: Vec<Entry>,
    /// The link-time entry point, when the addresses are to be moved by the program's bias.
    pub rebase: Option<u64>,
}

/// Why the CLI's list could not be read: one line naming the problem.
#[derive(Debug, thiserror::Error)]
#[error("function entries, line {line}: {what}")]
pub struct ParseError {
    line: usize,
    what: &'static str,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}

/// One function line's fields.
fn entry(start: &str, end: &str, group: &str, kind: &str) -> Result<Entry, &'static str> {
    let start = hex(start).ok_or("bad start")?;
    let end = hex(end).ok_or("bad end")?;
    let group = group.parse().map_err(|_| "bad group")?;
    let (kind, plt) = match kind.strip_suffix('p') {
        Some(k) => (k, true),
        None => (kind, false),
    };
    let (cold, longjmp, setjmp) = match kind {
        "f" => (false, false, false),
        "l" => (false, true, false),
        "s" => (false, false, true),
        "c" => (true, false, false),
        _ => return Err("kind is not f, l, s or c (and p after it)"),
    };
    Ok(Entry {
        start,
        end: end.max(start),
        group,
        cold,
        longjmp,
        setjmp,
        plt,
    })
}

/// A shared library's (or the dynamic loader's) functions at its file's addresses, and what
/// places them where the guest maps the file.
#[derive(Debug, Default, Clone)]
pub struct Library {
    /// The host file's device and inode.
    pub dev: u64,
    pub ino: u64,
    /// The dynamic loader, placed at `AT_BASE` (QEMU maps it, not the guest).
    pub interp: bool,
    /// `PT_LOAD`s: (file offset, address, executable).
    loads: Vec<(u64, u64, bool)>,
    pub functions: Functions,
}

impl Library {
    /// Reads the CLI's list of libraries (see the module's documentation).
    pub fn parse_all(text: &str) -> Result<Vec<Library>, ParseError> {
        let mut libs: Vec<Library> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let err = |what| ParseError { line: n + 1, what };
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            if let ["image", dev, ino, ref rest @ ..] = fields[..] {
                libs.push(Library {
                    dev: hex(dev).ok_or(err("bad device"))?,
                    ino: hex(ino).ok_or(err("bad inode"))?,
                    interp: match *rest {
                        [] => false,
                        ["interp"] => true,
                        _ => return Err(err("expected image DEV INO [interp]")),
                    },
                    ..Default::default()
                });
                continue;
            }
            if fields.is_empty() {
                continue;
            }
            let lib = libs
                .last_mut()
                .ok_or(err("a line before the first image"))?;
            match fields[..] {
                ["load", offset, vaddr, x] => lib.loads.push((
                    hex(offset).ok_or(err("bad offset"))?,
                    hex(vaddr).ok_or(err("bad address"))?,
                    x == "1",
                )),
                [start, end, group, kind] => {
                    (lib.functions.entries).push(entry(start, end, group, kind).map_err(err)?)
                }
                _ => return Err(err("expected load OFFSET VADDR X or START END GROUP KIND")),
            }
        }
        for lib in &mut libs {
            lib.functions.sort();
        }
        Ok(libs)
    }

    /// The load bias of a mapping of the file at `start` from `file_offset` (as the CLI's
    /// user-mode symbols are placed): the segment starting within 64 KiB (a page of any
    /// size) of the offset, an executable one first.
    pub fn bias_of_mapping(&self, start: u64, file_offset: u64) -> u64 {
        let seg = (self.loads.iter())
            .filter(|s| s.0 >= file_offset && s.0 - file_offset < 0x10000)
            .min_by_key(|s| (!s.2, s.0));
        // Wrapping: the addresses come from the guest, whatever they are.
        match seg {
            Some(&(offset, vaddr, _)) => {
                start.wrapping_add(offset - file_offset).wrapping_sub(vaddr)
            }
            None => start.wrapping_sub(file_offset),
        }
    }

    /// The load bias when the file's lowest segment starts at `base` (`AT_BASE`).
    pub fn bias_of_base(&self, base: u64) -> u64 {
        let low = self.loads.iter().map(|s| s.1).min().unwrap_or(0);
        base.wrapping_sub(low & !0xfff)
    }
}

impl Functions {
    /// Reads the CLI's list (see the module's documentation).
    pub fn parse(text: &str) -> Result<Functions, ParseError> {
        let mut f = Functions::default();
        for (n, line) in text.lines().enumerate() {
            let err = |what| ParseError { line: n + 1, what };
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            match fields[..] {
                [] => {}
                ["rebase", entry] => f.rebase = Some(hex(entry).ok_or(err("bad entry point"))?),
                [start, end, group, kind] => {
                    f.entries.push(entry(start, end, group, kind).map_err(err)?)
                }
                _ => return Err(err("expected START END GROUP KIND")),
            }
        }
        f.sort();
        Ok(f)
    }

    fn sort(&mut self) {
        self.entries.sort_by_key(|e| (e.start, e.cold));
        self.entries.dedup_by_key(|e| e.start);
    }

    /// The lowest start and highest end of the functions (`None` without any).
    pub fn span(&self) -> Option<(u64, u64)> {
        let lo = self.entries.first()?.start;
        let hi = self.entries.iter().map(|e| e.end.max(e.start + 1)).max()?;
        Some((lo, hi))
    }

    /// Whether a direct jump from code outside every function of this list (another image)
    /// to `target` enters a function: `target` is one's first instruction, not a split part.
    pub fn entered_from_outside(&self, target: u64) -> bool {
        self.entries
            .binary_search_by_key(&target, |e| e.start)
            .is_ok_and(|i| !self.entries[i].cold)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The function holding `pc`: the last one starting at or below it, when `pc` lies
    /// before its end (or before the next function's start, for symbols without a size).
    fn containing(&self, pc: u64) -> Option<&Entry> {
        let i = self
            .entries
            .partition_point(|e| e.start <= pc)
            .checked_sub(1)?;
        let e = &self.entries[i];
        let end = if e.end > e.start {
            e.end
        } else {
            self.entries.get(i + 1).map_or(u64::MAX, |n| n.start)
        };
        (pc < end).then_some(e)
    }

    /// Whether the function starting at `func` is one uftrace's replay treats as a longjmp.
    pub fn is_longjmp(&self, func: u64) -> bool {
        self.entries
            .binary_search_by_key(&func, |e| e.start)
            .is_ok_and(|i| self.entries[i].longjmp)
    }

    /// Whether a function (not a split part) starts at `addr`: a block starting there is
    /// where a jump through a register may enter it.
    pub fn is_entry(&self, addr: u64) -> bool {
        self.entries
            .binary_search_by_key(&addr, |e| e.start)
            .is_ok_and(|i| !self.entries[i].cold)
    }

    /// Whether no function holds `pc` (a nested function's trampoline on the stack): a call
    /// to such code that jumps on to a function is a call of that function. A symbol
    /// without a size reaches the next one's start, the last one everything above it: more
    /// than 64 KiB past it is taken for no function's.
    pub fn outside_functions(&self, pc: u64) -> bool {
        self.containing(pc)
            .is_none_or(|e| e.end <= e.start && pc - e.start > 0x10000)
    }

    /// Whether `pc` lies in a PLT entry (named after its target, an IFUNC's iplt entry after
    /// the function it resolves to), whose jump on is the call's own, not an entry.
    pub fn in_plt(&self, pc: u64) -> bool {
        self.containing(pc).is_some_and(|e| e.plt)
    }

    /// Whether `a` and `b` lie in one function (or its split parts): a jump between them
    /// (a switch table's) is the function's own.
    pub fn same_function(&self, a: u64, b: u64) -> bool {
        match (self.containing(a), self.containing(b)) {
            (Some(x), Some(y)) => x.group == y.group,
            _ => false,
        }
    }

    /// Whether a direct jump at `pc` to `target` enters another function: `target` is a
    /// function's first instruction, and the jump is not inside that function or one of its
    /// split parts (a loop back to the start, `foo.cold` jumping back into `foo`). A jump
    /// from code no function holds (a trampoline) enters too.
    pub fn enters(&self, pc: u64, target: u64) -> bool {
        let Ok(t) = self.entries.binary_search_by_key(&target, |e| e.start) else {
            return false;
        };
        let to = &self.entries[t];
        if to.cold {
            return false;
        }
        // Nor is a jump from one setjmp to another (x86-64 and riscv64 glibc's `_setjmp`
        // ends with a jump to `__sigsetjmp`): uftrace's replay takes the last setjmp entered
        // for where a longjmp returns to, and native traces show only the outer one.
        self.containing(pc)
            .is_none_or(|from| from.group != to.group && !(from.setjmp && to.setjmp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_between_functions_enter_and_others_do_not() {
        let f = Functions::parse(
            "1000 1010 1 f\n\
             1010 1040 2 f\n\
             1040 1040 3 f\n\
             2000 2010 2 c\n\
             3000 3010 4 l\n\
             4000 4010 5 s\n\
             4010 4020 6 s\n\
             5000 5010 7 fp\n\
             5010 5020 8 sp\n",
        )
        .unwrap();
        assert!(f.is_longjmp(0x3000) && !f.is_longjmp(0x1000) && !f.is_longjmp(0x3004));
        assert!(f.enters(0x1004, 0x3000));
        // _setjmp's jump to __sigsetjmp is one setjmp; a tail call into a setjmp enters it.
        assert!(!f.enters(0x4004, 0x4010) && f.enters(0x1004, 0x4010));
        // __wrap_main: b main.
        assert!(f.enters(0x1004, 0x1010));
        // A tail call from main to a function without a size.
        assert!(f.enters(0x1030, 0x1040));
        // A loop back to main's own start, and main.cold jumping back into main.
        assert!(!f.enters(0x1030, 0x1010));
        assert!(!f.enters(0x2004, 0x1010));
        // Into main.cold from main: never an entry.
        assert!(!f.enters(0x1020, 0x2000));
        // A jump within a function, not to an entry.
        assert!(!f.enters(0x1020, 0x1024));
        // From code no function holds (past the last sized one): a trampoline.
        assert!(f.enters(0x7fff_0000, 0x1010));
        // The size-less function ends at the next start.
        assert!(f.enters(0x1f00, 0x1000));
        // Entries for jumps through a register, and the stubs that pass a call on.
        assert!(f.is_entry(0x1010) && !f.is_entry(0x2000) && !f.is_entry(0x1014));
        assert!(f.same_function(0x1014, 0x2004) && !f.same_function(0x1004, 0x1014));
        assert!(!f.same_function(0x7fff_0000, 0x7fff_0004));
        assert!(f.outside_functions(0x7fff_0000) && !f.outside_functions(0x1004));
        // A PLT entry, not a function as small (0x1000..0x1010).
        assert!(f.in_plt(0x5004) && !f.in_plt(0x1004) && !f.in_plt(0x1044));
        assert!(f.enters(0x1004, 0x5000) && f.is_entry(0x5000));
        // A setjmp's PLT entry is both.
        assert!(f.in_plt(0x5014) && !f.enters(0x4004, 0x5010));
        let last = Functions::parse("1000 1010 1 f\n2000 2000 2 f\n").unwrap();
        assert!(!last.outside_functions(0x2100) && last.outside_functions(0x7fff_0000));
    }

    #[test]
    fn libraries_are_placed_where_they_are_mapped() {
        let libs = Library::parse_all(
            "image 803 1f interp\n\
             load 0 0 1\n\
             1000 1010 0 f\n\
             image 803 20\n\
             load 0 0 0\n\
             load 28000 28000 1\n\
             load 1d0000 1d1000 0\n\
             28000 28010 0 f\n\
             28010 28020 1 f\n\
             29000 29010 1 c\n",
        )
        .unwrap();
        assert_eq!(libs.len(), 2);
        let (ld, libc) = (&libs[0], &libs[1]);
        assert!(ld.interp && !libc.interp && (libc.dev, libc.ino) == (0x803, 0x20));
        assert_eq!(ld.bias_of_base(0x7f00_0000_0000), 0x7f00_0000_0000);
        // x86-64's libc: its text mapped on its own at its file offset.
        assert_eq!(
            libc.bias_of_mapping(0x7f10_0002_8000, 0x28000),
            0x7f10_0000_0000
        );
        // The whole file mapped from offset 0 first (aarch64's, whose text comes first).
        assert_eq!(libc.bias_of_mapping(0x7f10_0000_0000, 0), 0x7f10_0000_0000);
        let f = &libc.functions;
        assert_eq!(f.span(), Some((0x28000, 0x29010)));
        assert!(f.enters(0x28004, 0x28010) && !f.enters(0x29004, 0x28010));
        assert!(f.entered_from_outside(0x28010) && !f.entered_from_outside(0x29000));
        assert!(!f.entered_from_outside(0x28004));
        let e = Library::parse_all("1000 1010 0 f\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "function entries, line 1: a line before the first image"
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let e = Functions::parse("1000 1010 1 f\nzz\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "function entries, line 2: expected START END GROUP KIND"
        );
        let f = Functions::parse("rebase 4a0\n").unwrap();
        assert_eq!(f.rebase, Some(0x4a0));
        assert!(f.is_empty());
    }
}
