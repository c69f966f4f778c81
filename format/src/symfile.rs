//! `<module>.sym` and `<module>.dbg`.
//!
//! `.sym` is written in the 3-column form every uftrace reads (0.13 cannot read 4 columns):
//! sorted by offset, sizes implied by the next line, so a `?` line closes every function that
//! does not run into the next one, and a final `? __sym_end` closes the last.

use std::io::{self, Write};

/// One function, as an offset from its map line's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymLine {
    pub offset: u64,
    /// 0 when unknown: the function then runs to the next symbol.
    pub size: u64,
    pub name: String,
    /// `true` for global (`T`), `false` for local (`t`) symbols.
    pub global: bool,
}

/// One function's source location, for `--srcline`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbgLine {
    pub offset: u64,
    pub name: String,
    pub file: String,
    pub line: u32,
}

/// One function's `-a` values (`auto-args`), as uftrace reads them from `.dbg` after the
/// function's `F:` line: `A: @arg1/i32,arg2/s` and `R: @retval/d32`. Each is a spec's values
/// (after its `@`), already parsed by [`crate::args::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbgSpec {
    pub offset: u64,
    pub args: Option<String>,
    pub retval: Option<String>,
}

fn clean(name: &str) -> String {
    // A TAB ends the name and a newline the line: neither may appear inside. Other control
    // characters (an ELF from the guest chooses its names) would reach the terminal.
    crate::text::escape_controls(&name.replace(['\t', '\n', '\r'], " ")).into_owned()
}

/// Sorts by offset, keeps the first of several symbols at one offset (uftrace drops later
/// aliases anyway), and returns what [`write_sym`] will write.
pub fn normalize(mut syms: Vec<SymLine>) -> Vec<SymLine> {
    syms.sort_by(|a, b| {
        a.offset
            .cmp(&b.offset)
            .then(b.global.cmp(&a.global))
            .then(a.name.cmp(&b.name))
    });
    syms.dedup_by_key(|s| s.offset);
    syms
}

/// Writes a `.sym` file. `limit` is the module's size: no function may run past it.
pub fn write_sym(w: &mut impl Write, syms: &[SymLine], limit: u64) -> io::Result<()> {
    // Symbol loaders already hand over sorted, alias-free tables: copy only when needed.
    let sorted = syms.windows(2).all(|w| w[0].offset < w[1].offset);
    let syms: std::borrow::Cow<[SymLine]> = if sorted {
        syms.into()
    } else {
        normalize(syms.to_vec()).into()
    };
    for (i, s) in syms.iter().enumerate() {
        writeln!(
            w,
            "{:x} {} {}",
            s.offset,
            if s.global { 'T' } else { 't' },
            clean(&s.name)
        )?;
        // The last symbol is closed by the end marker below.
        if let Some(next) = syms.get(i + 1).map(|n| n.offset) {
            if s.size != 0 && s.offset + s.size < next {
                writeln!(w, "{:x} ? __func_end", s.offset + s.size)?;
            }
        }
    }
    if let Some(last) = syms.last() {
        let end = if last.size == 0 {
            limit.max(last.offset + 1)
        } else {
            last.offset + last.size
        };
        writeln!(w, "{end:x} ? __sym_end")?;
    }
    Ok(())
}

/// Writes a `.dbg` file: for each function, sorted, its `F:` line, then its source line
/// (`L:`) and its `-a` values (`A:`, `R:`) where known; only for offsets that start a symbol
/// of `syms` (a line outside every symbol stops uftrace from reading the rest, and uftrace
/// finds a function's values by its symbol's exact offset).
pub fn write_dbg(
    w: &mut impl Write,
    syms: &[SymLine],
    lines: &[DbgLine],
    specs: &[DbgSpec],
) -> io::Result<()> {
    let names: std::collections::HashMap<u64, &str> =
        syms.iter().map(|s| (s.offset, s.name.as_str())).collect();
    let mut by_offset: std::collections::BTreeMap<u64, (Option<&DbgLine>, Option<&DbgSpec>)> =
        Default::default();
    for l in lines.iter().filter(|l| l.line > 0) {
        by_offset.entry(l.offset).or_default().0.get_or_insert(l);
    }
    for s in specs
        .iter()
        .filter(|s| s.args.is_some() || s.retval.is_some())
    {
        by_offset.entry(s.offset).or_default().1.get_or_insert(s);
    }
    for (offset, (line, spec)) in by_offset {
        let Some(sym) = names.get(&offset) else {
            continue;
        };
        let name = line.map_or(*sym, |l| l.name.as_str());
        writeln!(w, "F: {offset:x} {}", clean(name))?;
        if let Some(l) = line {
            writeln!(w, "L: {} {}", l.line, clean(&l.file))?;
        }
        if let Some(spec) = spec {
            if let Some(a) = &spec.args {
                writeln!(w, "A: @{}", clean(a))?;
            }
            if let Some(r) = &spec.retval {
                writeln!(w, "R: @{}", clean(r))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(offset: u64, size: u64, name: &str) -> SymLine {
        SymLine {
            offset,
            size,
            name: name.into(),
            global: true,
        }
    }

    fn sym_text(syms: &[SymLine], limit: u64) -> String {
        let mut out = Vec::new();
        write_sym(&mut out, syms, limit).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn gaps_and_end_are_marked() {
        let text = sym_text(
            &[s(0x20, 0x10, "b"), s(0, 0x20, "a"), s(0x40, 8, "c")],
            0x100,
        );
        assert_eq!(
            text,
            "0 T a\n20 T b\n30 ? __func_end\n40 T c\n48 ? __sym_end\n"
        );
    }

    #[test]
    fn sizeless_last_symbol_runs_to_the_limit() {
        assert_eq!(
            sym_text(&[s(0, 0, "start")], 0x80),
            "0 T start\n80 ? __sym_end\n"
        );
    }

    #[test]
    fn aliases_are_collapsed() {
        let text = sym_text(&[s(0, 4, "alias"), s(0, 4, "a")], 0x10);
        assert_eq!(text, "0 T a\n4 ? __sym_end\n");
    }

    #[test]
    fn dbg_keeps_only_symbol_starts() {
        let syms = [s(0, 4, "a")];
        let lines = [
            DbgLine {
                offset: 0,
                name: "a".into(),
                file: "a.c".into(),
                line: 3,
            },
            DbgLine {
                offset: 2,
                name: "x".into(),
                file: "a.c".into(),
                line: 4,
            },
        ];
        let mut out = Vec::new();
        write_dbg(&mut out, &syms, &lines, &[]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "F: 0 a\nL: 3 a.c\n");
    }

    /// `-a`'s values follow their function's `F:` (and `L:`) line, at symbol starts only; a
    /// function without a source line gets its `F:` line for them.
    #[test]
    fn dbg_gives_auto_args_after_their_function() {
        let syms = [s(0, 4, "a"), s(8, 4, "b"), s(16, 4, "c")];
        let lines = [DbgLine {
            offset: 0,
            name: "a".into(),
            file: "a.c".into(),
            line: 3,
        }];
        let spec = |offset, args: Option<&str>, retval: Option<&str>| DbgSpec {
            offset,
            args: args.map(str::to_string),
            retval: retval.map(str::to_string),
        };
        let specs = [
            spec(16, None, Some("retval/i32")),
            spec(0, Some("arg1/i32,arg2/s"), Some("retval/u8")),
            spec(9, Some("arg1/x64"), None),
            spec(8, None, None),
        ];
        let mut out = Vec::new();
        write_dbg(&mut out, &syms, &lines, &specs).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "F: 0 a\nL: 3 a.c\nA: @arg1/i32,arg2/s\nR: @retval/u8\nF: 10 c\nR: @retval/i32\n"
        );
    }

    #[test]
    fn names_and_files_carry_no_control_characters() {
        let syms = [s(0, 4, "f\x1b[2J\tx")];
        assert_eq!(sym_text(&syms, 4), "0 T f\\x1b[2J x\n4 ? __sym_end\n");
        let lines = [DbgLine {
            offset: 0,
            name: "f".into(),
            file: "/src/\x1bx.c".into(),
            line: 1,
        }];
        let mut out = Vec::new();
        write_dbg(&mut out, &syms, &lines, &[]).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "F: 0 f\nL: 1 /src/\\x1bx.c\n"
        );
    }
}
