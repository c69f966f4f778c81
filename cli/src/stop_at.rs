//! `--stop-at FUNC[,exit]` and `--start-at FUNC`: FUNC resolved to its addresses from the
//! symbol sources before QEMU starts (the plugin instruments only those), and at the end,
//! where the trace stopped or started, or that FUNC was never reached.

use anyhow::Result;
use qemu_uftrace_symbols::{Image, LoadOptions};
use std::path::Path;

use crate::errors::usage;
use crate::stats::Stats;
use crate::symbol_source::SourceArg;

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

/// The functions a FUNC is resolved in: every symbol source's and, in user mode, the
/// program's own (the list the plugin's jump entries come from, `entries::Program`).
#[derive(Debug, Clone, Default)]
pub struct Names {
    pub functions: Vec<(String, u64)>,
    /// How many files they come from.
    pub sources: usize,
    /// User mode, a PIE: its path and its functions' names. Their addresses are known only
    /// once it runs, and the plugin does not move these options' addresses yet: a FUNC of
    /// one is said, never recorded as a wrong address.
    pub pie: Option<(String, Vec<String>)>,
}

impl Names {
    /// `sources`' functions (a source that cannot be read is said by the symbol job after
    /// the run), and the program's (`path`, its image at link addresses, whether it is a
    /// PIE: `entries::Program`), at their run-time addresses when it is not a PIE.
    pub fn new(sources: &[SourceArg], program: Option<(&Path, &Image, bool)>) -> Names {
        let mut names = Names {
            sources: sources.len(),
            ..Default::default()
        };
        for s in sources {
            let opts = LoadOptions {
                offset: s.offset,
                ..Default::default()
            };
            if let Ok(image) = qemu_uftrace_symbols::load(&s.path, &opts) {
                (names.functions).extend(image.functions.into_iter().map(|f| (f.name, f.addr)));
            }
        }
        if let Some((path, image, pie)) = program {
            let funcs = image.functions.iter();
            if pie {
                let list = funcs.map(|f| f.name.clone()).collect();
                names.pie = Some((path.display().to_string(), list));
            } else {
                names.sources += 1;
                (names.functions).extend(funcs.map(|f| (f.name.clone(), f.addr)));
            }
        }
        names
    }

    /// The error for `option FUNC` that names, or `matches`, only functions of a PIE.
    pub fn pie_error(
        &self,
        option: &str,
        func: &str,
        matches: impl Fn(&str) -> bool,
    ) -> Option<anyhow::Error> {
        let (path, names) = self.pie.as_ref()?;
        names.iter().any(|n| matches(n)).then(|| {
            usage(
                format!(
                    "{option} {func}: names a function of {path}, a position-independent \
                     program, whose addresses are known only once it runs"
                ),
                "build it with -no-pie (or -static) to aim the recording at its functions",
            )
        })
    }
}

/// FUNC's addresses in `names` (every source that defines it) for `option` (`--stop-at`);
/// an unknown name is one line with the names closest to it.
pub fn resolve(option: &str, func: &str, names: &Names) -> Result<Vec<u64>> {
    let mut addrs: Vec<u64> = (names.functions.iter())
        .filter(|(name, _)| name == func)
        .map(|&(_, addr)| addr)
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    if !addrs.is_empty() {
        return Ok(addrs);
    }
    if let Some(e) = names.pie_error(option, func, |n| n == func) {
        return Err(e);
    }
    let all: Vec<String> = names.functions.iter().map(|(n, _)| n.clone()).collect();
    let close = closest(func, &all);
    let hint = if close.is_empty() {
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
pub fn plugin_options(stop: &StopAt, addrs: &[u64]) -> String {
    let exit = if stop.exit { ",stop_at_exit=on" } else { "" };
    format!(",stop_at={}{exit}", hex_list(addrs))
}

/// The plugin's option for the start.
pub fn start_option(addrs: &[u64]) -> String {
    format!(",start_at={}", hex_list(addrs))
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
            plugin_options(&parse("f,exit").unwrap(), &[0x4000_0100, 0x10]),
            ",stop_at=40000100:10,stop_at_exit=on"
        );
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
