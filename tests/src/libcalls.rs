//! The glibc oracle (tests/guests/user/libcalls.c): its log of its own functions and of
//! the libc calls it makes, and a trace reduced to what that log can see.

use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every defined name of `elf` by address (`nm --defined-only`: functions, IFUNCs, aliases).
pub fn nm_aliases(elf: &Path) -> Result<BTreeMap<u64, Vec<String>>> {
    let mut map: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in crate::nm_defined(elf)?.lines() {
        let mut fields = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !matches!(kind, "T" | "t" | "W" | "w" | "i") || name.starts_with('$') {
            continue;
        }
        let addr = u64::from_str_radix(addr, 16)
            .with_context(|| format!("nm {}: {line:?}", elf.display()))?;
        map.entry(addr).or_default().push(name.to_owned());
    }
    Ok(map)
}

/// One name per function: each name of `aliases` maps to the one of its address's names a
/// user would write (fewest leading underscores, then the shortest: `__libc_malloc` and
/// `malloc` → `malloc`, `_IO_printf` → `printf`, `__libc_memcpy` → `memcpy`).
pub fn canonical_names(aliases: &BTreeMap<u64, Vec<String>>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for names in aliases.values() {
        let Some(best) = names
            .iter()
            // `*_ifunc`: the resolver's own symbol, which shares the IFUNC's address.
            .filter(|n| !n.ends_with("_ifunc"))
            .min_by_key(|n| {
                let unders = n.len() - n.trim_start_matches('_').len();
                let io = usize::from(n.starts_with("_IO_"));
                (unders + io, n.len(), n.to_string())
            })
        else {
            continue;
        };
        for n in names {
            out.insert(n.clone(), best.clone());
        }
    }
    out
}

/// The log libcalls.c prints (`E @+hex` / `X @-hex`: a function of its own by its offset
/// from `main`; `E =name`: a libc call it makes) as `"E name"` strings, functions named by
/// `aliases` (main's address is `main`'s there), each with whether it is a libc call.
pub fn parse_libcalls_oracle(
    stdout: &str,
    aliases: &BTreeMap<u64, Vec<String>>,
) -> Result<Vec<(String, bool)>> {
    let main = aliases
        .iter()
        .find(|(_, names)| names.iter().any(|n| n == "main"))
        .map(|(a, _)| *a)
        .context("no main in the program's symbols")?;
    let mut lines = stdout.lines().map(str::trim);
    if !lines.any(|l| l == "ORACLE-BEGIN") {
        bail!("no ORACLE-BEGIN line in the program's output");
    }
    let mut events = Vec::new();
    for line in lines {
        match line {
            "ORACLE-END" => return Ok(events),
            "ORACLE-OVERFLOW" => bail!("the program's oracle log overflowed"),
            _ => {}
        }
        let (kind, what) = match line.split_once(' ') {
            Some((k @ ("E" | "X"), w)) => (k, w),
            _ => bail!("malformed oracle line {line:?}"),
        };
        let lib = what.starts_with('=');
        let name = if let Some(lib) = what.strip_prefix('=') {
            lib.to_owned()
        } else if let Some(off) = what.strip_prefix('@') {
            let (neg, hex) = match off.split_at(1) {
                ("+", h) => (false, h),
                ("-", h) => (true, h),
                _ => bail!("malformed offset in {line:?}"),
            };
            let off = u64::from_str_radix(hex, 16).with_context(|| format!("{line:?}"))?;
            let addr = if neg { main - off } else { main + off };
            aliases
                .get(&addr)
                .and_then(|n| n.first())
                .with_context(|| format!("no symbol at {addr:#x} ({line:?})"))?
                .clone()
        } else {
            bail!("malformed oracle line {line:?}");
        };
        events.push((format!("{kind} {name}"), lib));
    }
    bail!("the oracle log has no ORACLE-END line (output cut short?)")
}

/// What a trace shows that the log can: the program's own functions (`program`) and the
/// calls they make directly; what a library function calls goes, unless it is the
/// program's own (a callback such as qsort's comparison function).
pub fn program_and_direct_callees(events: &[String], program: &BTreeSet<String>) -> Vec<String> {
    // Per open frame: whether it is the program's own, and whether it was kept.
    let mut stack: Vec<(bool, bool)> = Vec::new();
    let mut out = Vec::new();
    for ev in events {
        let (kind, name) = ev.split_at(2);
        if kind == "E " {
            let own = program.contains(name);
            let keep = own || stack.last().is_none_or(|&(parent_own, _)| parent_own);
            stack.push((own, keep));
            if keep {
                out.push(ev.clone());
            }
        } else if let Some((_, keep)) = stack.pop() {
            if keep {
                out.push(ev.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn keeps_direct_callees_and_callbacks() {
        let program: BTreeSet<String> = ["main", "cmp"].iter().map(|s| s.to_string()).collect();
        let ev = v(&[
            "E main",
            "E malloc",
            "E _int_malloc",
            "X _int_malloc",
            "X malloc",
            "E qsort",
            "E msort",
            "E cmp",
            "E abs",
            "X abs",
            "X cmp",
            "X msort",
            "X qsort",
            "X main",
        ]);
        assert_eq!(
            program_and_direct_callees(&ev, &program),
            v(&[
                "E main", "E malloc", "X malloc", "E qsort", "E cmp", "E abs", "X abs", "X cmp",
                "X qsort", "X main"
            ])
        );
    }

    #[test]
    fn prefers_the_names_users_write() {
        let mut a = BTreeMap::new();
        a.insert(1, v(&["__libc_malloc", "malloc", "__malloc"]));
        a.insert(2, v(&["_IO_printf", "printf"]));
        a.insert(3, v(&["__libc_memcpy", "__libc_memcpy_ifunc", "memcpy"]));
        let c = canonical_names(&a);
        assert_eq!(c["__libc_malloc"], "malloc");
        assert_eq!(c["_IO_printf"], "printf");
        assert_eq!(c["__libc_memcpy"], "memcpy");
    }

    #[test]
    fn parses_the_log_by_offsets_from_main() {
        let mut a = BTreeMap::new();
        a.insert(0x1000, v(&["main"]));
        a.insert(0x0f00, v(&["early"]));
        a.insert(0x1100, v(&["late"]));
        let log = "x\nORACLE-BEGIN\nE @+0\nE @-100\nE =memcpy\nX =memcpy\nX @-100\nE @+100\n\
                   X @+100\nX @+0\nORACLE-END\n";
        let parsed = parse_libcalls_oracle(log, &a).unwrap();
        assert_eq!(
            parsed.iter().map(|(e, _)| e.clone()).collect::<Vec<_>>(),
            v(&[
                "E main", "E early", "E memcpy", "X memcpy", "X early", "E late", "X late",
                "X main"
            ])
        );
        assert_eq!(
            parsed.iter().filter(|(_, lib)| *lib).count(),
            2,
            "{parsed:?}"
        );
        assert!(parse_libcalls_oracle("ORACLE-BEGIN\nE @+4\nORACLE-END\n", &a).is_err());
        assert!(parse_libcalls_oracle("ORACLE-BEGIN\nE =x\n", &a).is_err());
    }
}
