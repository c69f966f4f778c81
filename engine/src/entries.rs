//! Function entries the CLI found in the guest's symbols: a direct jump from one function to
//! another's first instruction (a tail call, aarch64 glibc's `__wrap_main: b main`) enters
//! that function, which uftrace shows as a call nested in the jumper's frame. Decided at
//! translation time, once per jump instruction; nothing here runs per event.
//!
//! The CLI writes them as text, one function a line: `START END GROUP KIND` (hex addresses,
//! END one past the last byte, GROUP a number shared by a function and its compiler-split
//! parts such as `foo.cold`, KIND `f` for a function, `l` and `s` for one that uftrace's
//! replay treats as a longjmp or a setjmp by its name, and `c` for a split part, which is
//! never entered by a jump). A line `rebase LINK_ENTRY` (hex) says the addresses are link
//! addresses of a program loaded at a bias known only once it runs (user mode's PIE):
//! `AT_ENTRY - LINK_ENTRY`.

/// One function (or split part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    start: u64,
    end: u64,
    group: u32,
    cold: bool,
    longjmp: bool,
    setjmp: bool,
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
                    let start = hex(start).ok_or(err("bad start"))?;
                    let end = hex(end).ok_or(err("bad end"))?;
                    let group = group.parse().map_err(|_| err("bad group"))?;
                    let (cold, longjmp, setjmp) = match kind {
                        "f" => (false, false, false),
                        "l" => (false, true, false),
                        "s" => (false, false, true),
                        "c" => (true, false, false),
                        _ => return Err(err("kind is not f, l, s or c")),
                    };
                    f.entries.push(Entry {
                        start,
                        end: end.max(start),
                        group,
                        cold,
                        longjmp,
                        setjmp,
                    });
                }
                _ => return Err(err("expected START END GROUP KIND")),
            }
        }
        f.entries.sort_by_key(|e| (e.start, e.cold));
        f.entries.dedup_by_key(|e| e.start);
        Ok(f)
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

    /// Whether `pc` lies in a function of at most 16 bytes: a PLT entry (named after its
    /// target, an IFUNC's iplt entry after the function it resolves to), whose jump on is
    /// the call's own, not an entry (a genuine function that small and jumping on loses
    /// the frame of the function it jumps to).
    pub fn in_plt_sized(&self, pc: u64) -> bool {
        self.containing(pc)
            .is_some_and(|e| e.end > e.start && e.end - e.start <= 16)
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
             4010 4020 6 s\n",
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
        assert!(f.in_plt_sized(0x1004) && !f.in_plt_sized(0x1020) && !f.in_plt_sized(0x1044));
        let last = Functions::parse("1000 1010 1 f\n2000 2000 2 f\n").unwrap();
        assert!(!last.outside_functions(0x2100) && last.outside_functions(0x7fff_0000));
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
