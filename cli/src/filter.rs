//! `-F/--filter FUNC` and `-N/--notrace FUNC` (uftrace's): each FUNC resolved to entry
//! addresses from the symbol sources before QEMU starts (the plugin's engine then writes
//! only the filtered subtrees, less the left-out ones), and at the end, which FUNC the guest
//! never entered.
//!
//! As uftrace's, FUNC is a regular expression when it holds one of `.?*+^$|()[]{}\`
//! (matched anywhere in a name: `^sys_` for names that begin so), else a whole name.

use anyhow::Result;
use regex::Regex;

use crate::errors::usage;
use crate::stats::Stats;
use crate::stop_at::{file_keyed, guest_function, keyed, resolve, Addr, Names};

/// What makes a FUNC a regular expression (uftrace's REGEX_CHARS, with `\`).
pub(crate) const REGEX_CHARS: &[char] = &[
    '.', '?', '*', '+', '^', '$', '|', '(', ')', '[', ']', '{', '}', '\\',
];

/// One `-F`/`-N` FUNC and the entry addresses it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// `-F` or `-N`.
    pub option: &'static str,
    pub text: String,
    pub addrs: Vec<Addr>,
}

/// Every `-F` and `-N` of a recording, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    pub patterns: Vec<Pattern>,
    /// User mode: the shared libraries `Addr::Lib` functions are in (`Names::libraries`).
    pub libraries: Vec<crate::stop_at::Library>,
    /// System mode: the guest files `Addr::File` functions are in (`Names::guest_files`).
    pub guest_files: Vec<String>,
}

impl Filters {
    /// Resolves `filter` (`-F`) and `notrace` (`-N`) in `names`; a name that is no
    /// function, a bad regular expression or one that matches none is one line.
    pub fn resolve(filter: &[String], notrace: &[String], names: &Names) -> Result<Self> {
        let given = (filter.iter().map(|f| ("-F", f))).chain(notrace.iter().map(|f| ("-N", f)));
        let patterns = given
            .map(|(option, text)| {
                Ok(Pattern {
                    option,
                    text: text.clone(),
                    addrs: matching(option, text, names)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Filters {
            patterns,
            libraries: names.libraries.clone(),
            guest_files: names.guest_files.clone(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The entry addresses of every `option` (`-F` or `-N`) FUNC.
    pub fn addrs(&self, option: &str) -> Vec<Addr> {
        let mut all: Vec<Addr> = (self.patterns.iter())
            .filter(|p| p.option == option)
            .flat_map(|p| p.addrs.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The plugin's options (`,filter=A:B,notrace=C`, a PIE's as `pie_filter=`…, a shared
    /// library's as `lib_filter=DEV.INO.ADDR:…`, numbered in that order for
    /// `lib_filter_reached=`, a guest file's as `file_filter=HEXPATH.OFFSET:…`, numbered so
    /// for `file_filter_reached=`).
    pub fn plugin_options(&self) -> String {
        let mut v = String::new();
        for (option, key) in [("-F", "filter"), ("-N", "notrace")] {
            v.push_str(&keyed(key, &self.addrs(option), &self.libraries));
            v.push_str(&file_keyed(key, &self.addrs(option), &self.guest_files));
        }
        v
    }

    /// System mode: the guest files' functions of every `option` FUNC, each its file's
    /// guest path (as the process-map watch renders it) and its offset in the file.
    pub fn file_functions(&self, option: &str) -> Vec<(&str, u64)> {
        (self.file_addrs(option).into_iter())
            .filter_map(|(i, at)| Some((self.guest_files.get(i as usize)?.as_str(), at)))
            .collect()
    }

    /// The guest files' functions of every `option` FUNC, in the plugin's numbering.
    fn file_addrs(&self, option: &str) -> Vec<(u32, u64)> {
        self.numbered(option, |a| match a {
            Addr::File(i, at) if (i as usize) < self.guest_files.len() => Some((i, at)),
            _ => None,
        })
    }

    /// The shared libraries' functions of every `option` FUNC, in the plugin's numbering.
    fn lib_addrs(&self, option: &str) -> Vec<(u32, u64)> {
        self.numbered(option, |a| match a {
            Addr::Lib(i, a) if (i as usize) < self.libraries.len() => Some((i, a)),
            _ => None,
        })
    }

    /// Those of every `option` FUNC's addresses that `kind` takes, in the order the plugin
    /// numbers them (its `…_reached=` indices).
    fn numbered(&self, option: &str, kind: impl Fn(Addr) -> Option<(u32, u64)>) -> Vec<(u32, u64)> {
        self.addrs(option).into_iter().filter_map(kind).collect()
    }

    /// Where a shared library's function `i`/`a` ran: at its file's load bias in `files`
    /// (a process image's files as the CLI's passes place them).
    pub fn lib_ran_at(&self, i: u32, a: u64, files: &[(std::path::PathBuf, u64)]) -> Option<u64> {
        let lib = self.libraries.get(i as usize)?;
        let (_, bias) = files.iter().find(|(p, _)| *p == lib.path)?;
        Some(a.wrapping_add(*bias))
    }

    /// The `-F`/`-N` FUNCs the guest never entered (`plugin.stats`' `filter_reached` and
    /// `notrace_reached`, a PIE's by link address in `pie_filter_reached`…), as lines for
    /// the summary: `-F`'s are warnings (the trace holds nothing of them), `-N`'s notes.
    pub fn never_entered(&self, stats: &Stats) -> Vec<(bool, String)> {
        let reached = |key: &str| -> Vec<Addr> {
            let list = |key: String, at: fn(u64) -> Addr| {
                (stats.other.iter())
                    .filter(move |(k, _)| *k == key)
                    .flat_map(|(_, v)| v.split(','))
                    .filter_map(|a| u64::from_str_radix(a.trim().trim_start_matches("0x"), 16).ok())
                    .map(at)
                    .collect::<Vec<_>>()
            };
            let mut all = list(key.to_string(), Addr::At);
            all.extend(list(format!("pie_{key}"), Addr::Pie));
            // A library's by the plugin's numbering (decimal indices).
            let option = if key == "filter_reached" { "-F" } else { "-N" };
            let indices = |prefix: &str| {
                let key = format!("{prefix}_{key}");
                (stats.other.iter())
                    .filter(move |(k, _)| *k == key)
                    .flat_map(|(_, v)| v.split(','))
                    .filter_map(|i| i.trim().parse::<usize>().ok())
                    .collect::<Vec<_>>()
            };
            let libs = self.lib_addrs(option);
            let lib = indices("lib").into_iter().filter_map(|i| libs.get(i));
            all.extend(lib.map(|&(i, a)| Addr::Lib(i, a)));
            // A guest file's the same way (`file_filter_reached`).
            let files = self.file_addrs(option);
            let file = indices("file").into_iter().filter_map(|i| files.get(i));
            all.extend(file.map(|&(i, a)| Addr::File(i, a)));
            all
        };
        let (filter, notrace) = (reached("filter_reached"), reached("notrace_reached"));
        // Tracing was off for part of the run (`--trace=off`, `trace off`): the plugin saw
        // no entry then, and a call already open at a switch-on is unwound after the run,
        // where a window may still write its subtree. "Never entered" is not known.
        let switched = (stats.other.iter())
            .any(|(k, v)| k == "trace_off_ns" && v.trim().parse::<u64>().is_ok_and(|ns| ns > 0));
        let mut lines = Vec::new();
        for p in &self.patterns {
            let (seen, what) = match p.option {
                "-F" if switched => (
                    &filter,
                    "only a call open when tracing was switched on can be in the trace",
                ),
                _ if switched => (
                    &notrace,
                    "only a call open when tracing was switched on can have been left out",
                ),
                "-F" => (&filter, "the trace holds nothing of it"),
                _ => (&notrace, "nothing was left out for it"),
            };
            if !p.addrs.iter().any(|a| seen.contains(a)) {
                let n = p.addrs.len();
                let funcs = if n == 1 {
                    String::new()
                } else {
                    format!(" (any of its {n} functions)")
                };
                let entered = if switched {
                    "the guest did not enter it while tracing was on"
                } else {
                    "the guest never entered it"
                };
                lines.push((
                    p.option == "-F",
                    format!("{} {}: {entered}{funcs}; {what}", p.option, p.text),
                ));
            }
        }
        lines
    }
}

/// FUNC's addresses: a whole name's (close names offered when none), or every name a
/// regular expression matches.
pub(crate) fn matching(option: &str, text: &str, names: &Names) -> Result<Vec<Addr>> {
    // System mode, a guest file's (`PATH:FUNC`): FUNC alone may be a regular expression
    // (a path has dots), matched among that file's functions.
    let guest = guest_function(text).filter(|_| !names.guest_files.is_empty());
    if let Some((path, func)) = guest.filter(|(_, func)| func.contains(REGEX_CHARS)) {
        let re = regex(option, text, func)?;
        let prefix = format!("{path}:");
        let of_file = |name: &str| name.strip_prefix(&prefix).is_some_and(|f| re.is_match(f));
        let addrs = matched(&names.file_functions, of_file);
        if addrs.is_empty() {
            return Err(usage(
                format!("{option} {text}: the regular expression matches no function of {path}"),
                "match a function of that file (its symbols, or its debug file's under the \
                 root's /usr/lib/debug)",
            ));
        }
        return Ok(addrs);
    }
    if guest.is_some() || !text.contains(REGEX_CHARS) {
        return resolve(option, text, names);
    }
    let (functions, sources) = (&names.functions, names.sources);
    let re = regex(option, text, text)?;
    let addrs = matched(functions, |name| re.is_match(name));
    if addrs.is_empty() {
        return Err(usage(
            format!(
                "{option} {text}: the regular expression matches no symbol ({} function{} in \
                 {sources} source{})",
                functions.len(),
                if functions.len() == 1 { "" } else { "s" },
                if sources == 1 { "" } else { "s" }
            ),
            "match a function of the guest's symbols (add --symbols FILE for others)",
        ));
    }
    Ok(addrs)
}

/// `pattern` (all of `text`, or its FUNC) as a regular expression; one line where it is
/// none.
fn regex(option: &str, text: &str, pattern: &str) -> Result<Regex> {
    Regex::new(pattern).map_err(|e| {
        let why = e.to_string();
        let last = why.lines().last().unwrap_or("invalid").trim().to_string();
        let what = if pattern == text {
            String::new()
        } else {
            format!("{pattern} is ")
        };
        usage(
            format!("{option} {text}: {what}not a regular expression ({last})"),
            "fix it, or give a whole function name",
        )
    })
}

/// The addresses of the functions in `list` whose names `takes`, sorted, each once.
fn matched(list: &[(String, Addr)], takes: impl Fn(&str) -> bool) -> Vec<Addr> {
    let mut addrs: Vec<Addr> = (list.iter())
        .filter(|(name, _)| takes(name))
        .map(|&(_, addr)| addr)
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    addrs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn functions() -> Names {
        Names {
            functions: [("sys_read", 0x10), ("sys_write", 0x20), ("do_read", 0x30)]
                .iter()
                .map(|&(n, a)| (n.to_string(), Addr::At(a)))
                .collect(),
            sources: 1,
            pie_entry: None,
            libraries: Vec::new(),
            ..Default::default()
        }
    }

    #[test]
    fn names_and_regular_expressions_are_told_apart() {
        let f = functions();
        assert_eq!(matching("-F", "sys_read", &f).unwrap(), [Addr::At(0x10)]);
        assert_eq!(
            matching("-F", "^sys_", &f).unwrap(),
            [Addr::At(0x10), Addr::At(0x20)]
        );
        assert_eq!(
            matching("-F", "read$", &f).unwrap(),
            [Addr::At(0x10), Addr::At(0x30)]
        );
        let unknown = matching("-F", "sys_reed", &f).unwrap_err().to_string();
        assert!(unknown.contains("did you mean sys_read"), "{unknown}");
        let none = matching("-N", "^vfs_", &f).unwrap_err().to_string();
        assert!(
            none.starts_with(
                "-N ^vfs_: the regular expression matches no symbol (3 functions in 1 source)"
            ),
            "{none}"
        );
        let bad = matching("-F", "sys_(", &f).unwrap_err().to_string();
        assert!(
            bad.starts_with("-F sys_(: not a regular expression"),
            "{bad}"
        );
        assert!(!bad.contains('\n'), "{bad}");
    }

    /// System mode: guest files' functions, by file and offset, numbered for the plugin in
    /// the order of their files and offsets, and said never entered by that numbering.
    #[test]
    fn guest_files_functions_options_and_those_never_entered() {
        let pattern = |option, text: &str, addrs| Pattern {
            option,
            text: text.into(),
            addrs,
        };
        let filters = Filters {
            patterns: vec![
                pattern("-F", "/w:step", vec![Addr::File(1, 0x1040)]),
                pattern("-F", "/init:main", vec![Addr::File(0, 0x2000)]),
                pattern("-F", "do_read", vec![Addr::At(0x30)]),
                pattern("-N", "/w:log", vec![Addr::File(1, 0x1100)]),
            ],
            libraries: Vec::new(),
            guest_files: vec!["/init".into(), "/w".into()],
        };
        assert_eq!(
            filters.plugin_options(),
            ",filter=30,file_filter=2f696e6974.2000:2f77.1040,file_notrace=2f77.1100"
        );
        // /w:step (1) entered, /init:main (0) not, /w:log (0 of the notraces) entered.
        let stats = Stats::parse(
            "filter_reached=0x30
notrace_reached=
file_filter_reached=1
             file_notrace_reached=0
",
        );
        assert_eq!(
            filters.never_entered(&stats),
            [(
                true,
                "-F /init:main: the guest never entered it; the trace holds nothing of it".into()
            )]
        );
    }

    /// `PATH:FUNC` with a regular expression for FUNC (the path has dots): that file's
    /// functions it matches, not another file's; a plain one is a whole name.
    #[test]
    fn a_guest_file_s_functions_by_regular_expression() {
        let names = Names {
            guest_files: vec!["/lib/libc.so.6".into(), "/w".into()],
            file_functions: [
                ("/lib/libc.so.6:malloc", Addr::File(0, 0x10)),
                ("/lib/libc.so.6:malloc_usable_size", Addr::File(0, 0x20)),
                ("/lib/libc.so.6:free", Addr::File(0, 0x30)),
                ("/w:malloc", Addr::File(1, 0x40)),
            ]
            .iter()
            .map(|&(n, a)| (n.to_string(), a))
            .collect(),
            ..functions()
        };
        let found = |text| matching("-F", text, &names).map_err(|e| e.to_string());
        assert_eq!(
            found("/lib/libc.so.6:^malloc"),
            Ok(vec![Addr::File(0, 0x10), Addr::File(0, 0x20)])
        );
        assert_eq!(found("/lib/libc.so.6:free"), Ok(vec![Addr::File(0, 0x30)]));
        assert_eq!(found("/w:mall.c$"), Ok(vec![Addr::File(1, 0x40)]));
        let none = found("/w:^free").unwrap_err();
        assert!(none.contains("matches no function of /w"), "{none}");
    }

    #[test]
    fn options_and_the_functions_never_entered() {
        let filters = Filters {
            patterns: vec![
                Pattern {
                    option: "-F",
                    text: "^sys_".into(),
                    addrs: vec![Addr::At(0x10), Addr::At(0x20)],
                },
                Pattern {
                    option: "-F",
                    text: "do_read".into(),
                    addrs: vec![Addr::At(0x30)],
                },
                Pattern {
                    option: "-N",
                    text: "sys_write".into(),
                    addrs: vec![Addr::At(0x20)],
                },
                // A PIE's function, by its link address.
                Pattern {
                    option: "-F",
                    text: "pie_main".into(),
                    addrs: vec![Addr::Pie(0x40)],
                },
                // Shared libraries' functions, by library and link address.
                Pattern {
                    option: "-F",
                    text: "malloc".into(),
                    addrs: vec![Addr::Lib(1, 0x900), Addr::Lib(0, 0x500)],
                },
                Pattern {
                    option: "-F",
                    text: "fork".into(),
                    addrs: vec![Addr::Lib(1, 0x700)],
                },
                Pattern {
                    option: "-N",
                    text: "strlen".into(),
                    addrs: vec![Addr::Lib(1, 0x300)],
                },
            ],
            libraries: vec![
                crate::stop_at::Library {
                    dev: 0x801,
                    ino: 0xa,
                    path: "/lib/ld.so".into(),
                    start: 0,
                },
                crate::stop_at::Library {
                    dev: 0x801,
                    ino: 0xb,
                    path: "/lib/libc.so".into(),
                    start: 0,
                },
            ],
            guest_files: Vec::new(),
        };
        assert_eq!(
            filters.plugin_options(),
            ",filter=10:20:30,pie_filter=40,lib_filter=801.a.500:801.b.700:801.b.900\
             ,notrace=20,lib_notrace=801.b.300"
        );
        // The plugin's numbering: malloc in libc (2) entered, fork (1) not; strlen (0).
        let stats = Stats::parse(
            "filter_reached=0x20\npie_filter_reached=0x40\nnotrace_reached=\n\
             pie_notrace_reached=0x20\nlib_filter_reached=2\nlib_notrace_reached=0\n",
        );
        assert_eq!(
            filters.never_entered(&stats),
            [
                (
                    true,
                    "-F do_read: the guest never entered it; the trace holds nothing of it".into()
                ),
                (
                    false,
                    "-N sys_write: the guest never entered it; nothing was left out for it".into()
                ),
                (
                    true,
                    "-F fork: the guest never entered it; the trace holds nothing of it".into()
                ),
            ]
        );
        // Tracing off for part of the run: an entry while off is not seen.
        let stats = Stats::parse(
            "filter_reached=0x20\npie_filter_reached=0x40\nnotrace_reached=\n\
             lib_filter_reached=1,2\nlib_notrace_reached=0\ntrace_off_ns=1500\n",
        );
        assert_eq!(
            filters.never_entered(&stats),
            [
                (
                    true,
                    "-F do_read: the guest did not enter it while tracing was on; only a call \
                     open when tracing was switched on can be in the trace"
                        .into()
                ),
                (
                    false,
                    "-N sys_write: the guest did not enter it while tracing was on; only a \
                     call open when tracing was switched on can have been left out"
                        .into()
                ),
            ]
        );
    }
}
