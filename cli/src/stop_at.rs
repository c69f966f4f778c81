//! `--stop-at FUNC[,exit]` and `--start-at FUNC`: FUNC resolved to its addresses from the
//! symbol sources before QEMU starts (the plugin instruments only those), and at the end,
//! where the trace stopped or started, or that FUNC was never reached.

use anyhow::Result;
use qemu_uftrace_symbols::Image;

use crate::errors::usage;
use crate::stats::Stats;
use crate::symbol_source::ReadOnce;

/// `--stop-at FUNC[,exit]` as typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopAt {
    pub func: String,
    /// Stop QEMU too.
    pub exit: bool,
}

/// Parses `FUNC[,exit]` (clap's value parser).
pub fn parse(text: &str) -> Result<StopAt, String> {
    let (func, exit) = match text.rsplit_once(',') {
        Some((func, "exit")) => (func, true),
        Some((_, other)) => {
            return Err(format!(
                "'{other}' after the function: expected FUNC or FUNC,exit (e.g. panic,exit)"
            ))
        }
        None => (text, false),
    };
    if func.is_empty() {
        return Err("no function named: give e.g. panic or panic,exit".into());
    }
    Ok(StopAt {
        func: func.to_string(),
        exit,
    })
}

/// Where a function is: at its run-time address, or (user mode, a position-independent
/// program's) at its link address, which the plugin moves by the program's load bias once
/// it runs (`pie_…=` options), or (user mode: `-F`/`-N`, `--stop-at`/`--start-at`, `-A`/`-R`)
/// at its link address in shared library `Names::libraries[i]`, which the plugin places
/// where the guest maps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Addr {
    At(u64),
    Pie(u64),
    Lib(u32, u64),
    /// System mode: at this offset in guest file `Names::guest_files[i]`, wherever a
    /// process maps it (`PATH:FUNC`: `-F`/`-N`, `--stop-at`/`--start-at`,
    /// `--trace-on-at`/`--trace-off-at`).
    File(u32, u64),
}

/// A shared library a user-mode program maps, as the plugin knows its file (by device and
/// inode, the host's: user mode maps host files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    pub dev: u64,
    pub ino: u64,
    /// The file as the CLI found it (where the CLI's own passes place it after the run).
    pub path: std::path::PathBuf,
    /// Its image's start at offset 0 (where `-a`'s offsets in it count from).
    pub start: u64,
}

/// The functions a FUNC is resolved in: every symbol source's and, in user mode, the
/// program's own (the list the plugin's jump entries come from, `entries::Program`).
#[derive(Debug, Clone, Default)]
pub struct Names {
    pub functions: Vec<(String, Addr)>,
    /// How many files they come from.
    pub sources: usize,
    /// User mode, a PIE: its link entry point, which the plugin places its functions by.
    pub pie_entry: Option<u64>,
    /// User mode, for `-F`/`-N`, `--stop-at`/`--start-at`, `-A`/`-R`: the libraries whose
    /// functions are among `functions` ([`Names::add_libraries`]).
    pub libraries: Vec<Library>,
    /// System mode: the guest files `PATH:FUNC` names, as the plugin's process-map watch
    /// renders their paths (`file_…=` options), and their functions by `PATH:FUNC`
    /// (`guest_functions::add`; apart from `functions`: `-A` does not take them, and a
    /// regular expression of `-F`/`-N` matches them only after their `PATH:`).
    pub guest_files: Vec<String>,
    pub file_functions: Vec<(String, Addr)>,
}

/// `PATH:FUNC`, a function of a guest file: PATH absolute, FUNC after its first colon.
pub fn guest_function(text: &str) -> Option<(&str, &str)> {
    let (path, func) = text.split_once(':')?;
    (path.starts_with('/') && path.len() > 1 && !func.is_empty()).then_some((path, func))
}

impl Names {
    /// The functions of the symbol sources `read` (a source that cannot be read is said by
    /// the symbol job after the run), and the program's (its image at link addresses, and
    /// its link entry point when it is a PIE: `entries::Program`). `--symbols` files keep
    /// their given addresses.
    pub fn new(read: &ReadOnce, program: Option<(&Image, Option<u64>)>) -> Names {
        let mut names = Names {
            sources: read.sources().len(),
            ..Default::default()
        };
        for image in read.images() {
            let funcs = image.functions.iter();
            (names.functions).extend(funcs.map(|f| (f.name.clone(), Addr::At(f.addr))));
        }
        if let Some((image, pie_entry)) = program {
            names.sources += 1;
            names.pie_entry = pie_entry;
            let at = |a| match pie_entry {
                Some(_) => Addr::Pie(a),
                None => Addr::At(a),
            };
            (names.functions).extend(image.functions.iter().map(|f| (f.name.clone(), at(f.addr))));
        }
        names
    }

    /// User mode: the functions of the shared libraries `files` (the dynamic loader's
    /// among them) at their link addresses, `Addr::Lib`; their sizes. A file that cannot be
    /// read adds nothing (the symbol job says so after the run).
    pub fn add_libraries(
        &mut self,
        files: &[std::path::PathBuf],
        arch: qemu_uftrace_symbols::Arch,
    ) -> std::collections::HashMap<Addr, u64> {
        let mut sizes = std::collections::HashMap::new();
        for path in files {
            let Some(lib) = crate::symbol_source::library(path, arch) else {
                continue;
            };
            let i = self.libraries.len() as u32;
            self.libraries.push(Library {
                dev: lib.dev,
                ino: lib.ino,
                path: path.clone(),
                start: lib.image.start,
            });
            self.sources += 1;
            for f in &lib.image.functions {
                self.functions.push((f.name.clone(), Addr::Lib(i, f.addr)));
                sizes.insert(Addr::Lib(i, f.addr), f.size);
            }
        }
        sizes
    }

    /// The plugin's `pie_entry=` option, for a PIE.
    pub fn plugin_option(&self) -> String {
        self.pie_entry
            .map_or_else(String::new, |e| format!(",pie_entry={e:x}"))
    }
}

/// FUNC's addresses in `names` (every source that defines it) for `option` (`--stop-at`);
/// an unknown name is one line with the names closest to it.
pub fn resolve(option: &str, func: &str, names: &Names) -> Result<Vec<Addr>> {
    let all_names = || names.functions.iter().chain(&names.file_functions);
    let mut addrs: Vec<Addr> = all_names()
        .filter(|(name, _)| name == func)
        .map(|&(_, addr)| addr)
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    if !addrs.is_empty() {
        return Ok(addrs);
    }
    let all: Vec<String> = all_names().map(|(n, _)| n.clone()).collect();
    let close = closest(func, &all);
    let hint = if close.is_empty() && guest_function(func).is_some() {
        "name a function of that file (its symbols, or its debug file's under the root's \
         /usr/lib/debug)"
            .to_string()
    } else if close.is_empty() {
        "name a function of the guest's symbols (add --symbols FILE for others)".to_string()
    } else {
        format!("did you mean {}?", close.join(", "))
    };
    let sources = names.sources;
    Err(usage(
        format!(
            "{option} {func}: no such function in the symbols ({} source{})",
            sources,
            if sources == 1 { "" } else { "s" }
        ),
        hint,
    ))
}

/// Up to three names nearest to `name`.
fn closest(name: &str, names: &[String]) -> Vec<String> {
    let mut scored: Vec<(f64, &String)> = names
        .iter()
        .map(|n| (strsim::jaro_winkler(name, n), n))
        .filter(|(score, _)| *score >= 0.8)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, n)| n.clone()).collect()
}

/// The plugin's options for the stop.
pub fn plugin_options(stop: &StopAt, addrs: &[Addr], libraries: &[Library]) -> String {
    let exit = if stop.exit { ",stop_at_exit=on" } else { "" };
    format!("{}{exit}", keyed("stop_at", addrs, libraries))
}

/// The plugin's option for the start.
pub fn start_option(addrs: &[Addr], libraries: &[Library]) -> String {
    keyed("start_at", addrs, libraries)
}

/// A guest file's path as the plugin takes it: the hex of its bytes (any byte but `/` and
/// NUL may be in a guest's name, the option separators among them).
pub fn hex_path(path: &str) -> String {
    path.bytes().map(|b| format!("{b:02x}")).collect()
}

/// `,file_KEY=HEXPATH.OFFSET:…` for the guest files' functions among `addrs` (`files`:
/// [`Names::guest_files`]), when there are some.
pub fn file_keyed(key: &str, addrs: &[Addr], files: &[String]) -> String {
    let list: Vec<String> = (addrs.iter())
        .filter_map(|a| match *a {
            Addr::File(i, at) => Some(format!("{}.{at:x}", hex_path(files.get(i as usize)?))),
            _ => None,
        })
        .collect();
    if list.is_empty() {
        String::new()
    } else {
        format!(",file_{key}={}", list.join(":"))
    }
}

/// `,KEY=A:B` for the run-time addresses, `,pie_KEY=C` for a PIE's and `,lib_KEY=DEV.INO.D`
/// for a shared library's (in `libraries`), each when there are some, in the order given
/// (the plugin numbers a library's `-F`/`-N` functions so).
pub fn keyed(key: &str, addrs: &[Addr], libraries: &[Library]) -> String {
    let (mut at, mut pie, mut lib) = (Vec::new(), Vec::new(), Vec::new());
    for a in addrs {
        match *a {
            Addr::At(a) => at.push(format!("{a:x}")),
            Addr::Pie(a) => pie.push(format!("{a:x}")),
            Addr::Lib(i, a) => {
                if let Some(l) = libraries.get(i as usize) {
                    lib.push(format!("{:x}.{:x}.{a:x}", l.dev, l.ino));
                }
            }
            // Said by `file_keyed`.
            Addr::File(..) => {}
        }
    }
    let mut v = String::new();
    for (prefix, list) in [("", at), ("pie_", pie), ("lib_", lib)] {
        if !list.is_empty() {
            v.push_str(&format!(",{prefix}{key}={}", list.join(":")));
        }
    }
    v
}

pub fn hex_list(addrs: &[u64]) -> String {
    let list: Vec<String> = addrs.iter().map(|a| format!("{a:x}")).collect();
    list.join(":")
}

/// What the summary says of `--start-at FUNC`.
pub fn start_outcome(func: &str, stats: &Stats) -> Result<String, String> {
    match stats.other_value("start_at_reached") {
        Some(addr) => Ok(format!(
            "started writing at the first entry into {func} ({addr}), after the {} frame(s) \
             open then, written as entries at the times they were entered",
            stats.other_value("start_frames").unwrap_or("0")
        )),
        None => Err(never_started(func)),
    }
}

/// A `--start-at FUNC` the guest never entered.
pub fn never_started(func: &str) -> String {
    format!("--start-at {func}: the guest never entered it; nothing was written")
}

/// What the summary says of it: where the trace stopped, or `Err` when FUNC was never
/// reached (the trace then holds the whole run).
pub fn outcome(stop: &StopAt, stats: &Stats) -> Result<String, String> {
    match stats.other_value("stop_at_reached") {
        Some(addr) => Ok(format!(
            "stopped writing at the first entry into {} ({addr}){}",
            stop.func,
            if stop.exit {
                "; QEMU was stopped there"
            } else {
                ""
            }
        )),
        None => Err(format!(
            "--stop-at {}: the guest never entered it; the trace holds the whole run",
            stop.func
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn func_and_exit_are_parsed() {
        assert_eq!(
            parse("panic,exit").unwrap(),
            StopAt {
                func: "panic".into(),
                exit: true
            }
        );
        assert!(!parse("panic").unwrap().exit);
        assert!(parse("panic,now").unwrap_err().contains("'now'"));
        assert!(parse(",exit").is_err());
        assert_eq!(
            plugin_options(
                &parse("f,exit").unwrap(),
                &[Addr::At(0x4000_0100), Addr::At(0x10), Addr::Pie(0x20)],
                &[]
            ),
            ",stop_at=40000100:10,pie_stop_at=20,stop_at_exit=on"
        );
        // A shared library's, by its file; one of a library not listed is none.
        let libc = Library {
            dev: 0x801,
            ino: 0xb,
            path: "/lib/libc.so.6".into(),
            start: 0,
        };
        assert_eq!(
            start_option(
                &[Addr::Pie(0x20), Addr::Lib(0, 0x900), Addr::Lib(1, 0x10)],
                &[libc]
            ),
            ",pie_start_at=20,lib_start_at=801.b.900"
        );
    }

    #[test]
    fn guest_files_functions_are_keyed_by_path_and_offset() {
        assert_eq!(guest_function("/lib/x:main"), Some(("/lib/x", "main")));
        assert_eq!(guest_function("/lib/x:ns::f"), Some(("/lib/x", "ns::f")));
        for plain in ["main", "ns::f", "/:main", "/lib/x:", "lib/x:main"] {
            assert_eq!(guest_function(plain), None, "{plain}");
        }
        let files = vec!["/a".to_string(), "/b c".to_string()];
        let addrs = [Addr::At(0x10), Addr::File(1, 0x8370), Addr::File(0, 0x20)];
        assert_eq!(
            file_keyed("trace_on_at", &addrs, &files),
            ",file_trace_on_at=2f622063.8370:2f61.20"
        );
        // The others' options leave them out.
        assert_eq!(keyed("trace_on_at", &addrs, &[]), ",trace_on_at=10");
        assert_eq!(file_keyed("stop_at", &addrs[..1], &files), "");
    }

    #[test]
    fn close_names_are_offered() {
        let names: Vec<String> = ["do_panic", "panic_smp", "printk", "start_kernel"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let close = closest("panik", &names);
        assert!(close.contains(&"panic_smp".to_string()), "{close:?}");
        assert!(!close.contains(&"start_kernel".to_string()), "{close:?}");
    }
}
