//! Tracing switched on and off while the guest runs (issue 37): `record --trace=off`,
//! `qemu-uftrace trace on|off [-d DIR]` from another terminal, `record --signal
//! SIG@trace_on|trace_off`, and `--trace-on-at`/`--trace-off-at FUNC`. `record` and the
//! `trace` command write the state asked for (`on` or `off`) into the staging directory's
//! [`SWITCH_FILE`]; the plugin reads it every 20 ms and switches every vCPU of every
//! process at once (`plugin/src/handlers/switch.rs`), and says so in `plugin.status`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

pub use crate::args::{OnOff, SignalAction};
use crate::datadir;
use crate::errors::usage;
use crate::progress::{self, STATUS_FILE};
use crate::stop_at::Addr;

/// The file the plugin reads what is asked for from (`switch=`).
pub const SWITCH_FILE: &str = "plugin.switch";

/// Writes `to` into the switch file of the recording staged in `staging` (whole: the
/// plugin never reads half a word).
pub fn ask(staging: &Path, to: OnOff) -> Result<()> {
    crate::atomic_file::replace_unsynced(&staging.join(SWITCH_FILE), |w| {
        w.write_all(to.word().as_bytes())
    })
}

/// `record --signal …`: a thread that turns each signal into what it asks for. Stops
/// listening when dropped.
pub struct Signals {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Signals {
    pub fn start(staging: &Path, actions: &[SignalAction]) -> Result<Option<Signals>> {
        if actions.is_empty() {
            return Ok(None);
        }
        let sigs: Vec<i32> = actions.iter().map(|a| a.signal).collect();
        let mut signals = signal_hook::iterator::Signals::new(&sigs)
            .context("cannot take the signals of --signal")?;
        let handle = signals.handle();
        let staging = staging.to_path_buf();
        let actions = actions.to_vec();
        let thread = std::thread::Builder::new()
            .name("trace-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    // The last --signal for a signal wins, as in uftrace.
                    if let Some(a) = actions.iter().rev().find(|a| a.signal == sig) {
                        if let Err(e) = ask(&staging, a.to) {
                            crate::errors::warn_early(format!(
                                "tracing not switched {}: {e:#}",
                                a.to.word()
                            ));
                        }
                    }
                }
            })
            .context("cannot start the --signal thread")?;
        Ok(Some(Signals {
            handle,
            thread: Some(thread),
        }))
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The plugin options: where to read what is asked, whether it starts off, the trigger
/// functions' addresses (a PIE's and a shared library's in `libraries` placed by the plugin,
/// as `--start-at`'s are).
pub fn plugin_options(
    staging: &Path,
    trace: Option<OnOff>,
    on_at: &[Addr],
    off_at: &[Addr],
    libraries: &[crate::stop_at::Library],
) -> std::ffi::OsString {
    let mut v = std::ffi::OsString::from(",switch=");
    v.push(crate::qemu::escape_keyval(
        staging.join(SWITCH_FILE).as_os_str(),
    ));
    if trace == Some(OnOff::Off) {
        v.push(",trace=off");
    }
    v.push(crate::stop_at::keyed("trace_on_at", on_at, libraries));
    v.push(crate::stop_at::keyed("trace_off_at", off_at, libraries));
    v
}

/// `--trace-on-at`/`--trace-off-at` FUNC resolved: at run-time addresses, a PIE's at link
/// addresses and a shared library's in its file, which the plugin places. A library's copy
/// beside the program's (its PLT entry, named after it) is left to the program's, as
/// before libraries were placed: the program's calls enter the PLT entry first.
pub fn resolve(option: &str, funcs: &[String], names: &crate::stop_at::Names) -> Result<Vec<Addr>> {
    let mut out = Vec::new();
    for func in funcs {
        let addrs = crate::stop_at::resolve(option, func, names)?;
        let only_lib = addrs.iter().all(|a| matches!(a, Addr::Lib(..)));
        out.extend(
            addrs
                .into_iter()
                .filter(|a| only_lib || !matches!(a, Addr::Lib(..))),
        );
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The recordings running in the current directory (their staging directories).
fn running_here() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(".") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "partial"))
        .filter(|p| {
            std::fs::read_to_string(p.join(STATUS_FILE))
                .map(|t| !progress::Status::parse(&t).finished())
                .unwrap_or(false)
        })
        .collect();
    out.sort();
    out
}

/// The trace directory a staging directory publishes into.
fn output_of(staging: &Path) -> PathBuf {
    staging.with_extension("")
}

/// `qemu-uftrace trace on|off [-d DIR]`.
pub fn run(to: OnOff, dir: Option<&Path>) -> Result<i32> {
    let (output, staging) = match dir {
        Some(d) => (d.to_path_buf(), datadir::staging_path(d)),
        None => {
            let running = running_here();
            match running.as_slice() {
                [one] => (output_of(one), one.clone()),
                [] => {
                    return Err(usage(
                        "no recording is running in this directory",
                        "start one with qemu-uftrace record (-o DIR), or name it with -d DIR",
                    ))
                }
                many => {
                    let names: Vec<String> = many
                        .iter()
                        .map(|p| output_of(p).display().to_string())
                        .collect();
                    return Err(usage(
                        format!(
                            "{} recordings are running here: {}",
                            many.len(),
                            names.join(", ")
                        ),
                        "name one with -d DIR",
                    ));
                }
            }
        }
    };
    let status = std::fs::read_to_string(staging.join(STATUS_FILE))
        .ok()
        .map(|t| progress::Status::parse(&t))
        .filter(|s| !s.finished());
    let Some(status) = status else {
        return Err(usage(
            format!("no recording into {} is running", output.display()),
            "start one with qemu-uftrace record -o DIR (with --trace=off to start it off)",
        ));
    };
    // What the plugin says it does (a `--trace-on-at` may have overtaken the last request;
    // `trace` returns only once the status shows its own), else what was asked last.
    let asked = (status.trace.as_deref())
        .and_then(OnOff::from_word)
        .or_else(|| {
            std::fs::read_to_string(staging.join(SWITCH_FILE))
                .ok()
                .and_then(|t| OnOff::from_word(&t))
        });
    if asked == Some(to) {
        return Err(usage(
            format!("tracing is already {} in {}", to.word(), output.display()),
            format!(
                "nothing changed; `qemu-uftrace trace {}` switches it",
                match to {
                    OnOff::On => "off",
                    OnOff::Off => "on",
                }
            ),
        ));
    }
    let windows = status.trace_windows;
    ask(&staging, to)?;
    // The plugin says so in its status (rewritten about once a second) once every vCPU
    // switched: the next block any of them runs.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = progress::read(&output);
        // The recording is gone (published or failed) without saying it switched.
        if now.is_none() && !staging.exists() {
            println!(
                "tracing asked {} in {}, but the recording ended first",
                to.word(),
                output.display()
            );
            return Ok(1);
        }
        if let Some(s) = &now {
            if s.trace.as_deref() == Some(to.word()) {
                println!(
                    "tracing {} in {}: {}",
                    to.word(),
                    output.display(),
                    s.line()
                );
                return Ok(0);
            }
            // A window opened or closed since: switched, and back by a trigger since.
            if s.trace_windows > windows {
                println!(
                    "tracing {} in {}, then switched back by --trace-{}-at: {}",
                    to.word(),
                    output.display(),
                    match to {
                        OnOff::On => "off",
                        OnOff::Off => "on",
                    },
                    s.line()
                );
                return Ok(0);
            }
            if s.finished() {
                println!(
                    "tracing asked {} in {}, but the recording ended first",
                    to.word(),
                    output.display()
                );
                return Ok(1);
            }
        }
        if Instant::now() > deadline {
            println!(
                "tracing asked {} in {}; the guest has not switched yet: with the wall clock \
                 and no --trace-on-at, QEMU 10.2 and newer switch at a vCPU's next interrupt, \
                 halt or system call, which a guest spinning with interrupts masked (or \
                 stopped) never makes (record with --clock insn: every block listens)",
                to.word(),
                output.display()
            );
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse_signal;

    #[test]
    fn signals_are_read_as_uftrace_writes_them() {
        assert_eq!(
            parse_signal("SIGUSR1@trace_on").unwrap(),
            SignalAction {
                signal: libc::SIGUSR1,
                to: OnOff::On
            }
        );
        assert_eq!(parse_signal("usr2@trace_off").unwrap().to, OnOff::Off);
        assert!(parse_signal("SIGUSR1@finish")
            .unwrap_err()
            .contains("trace_on"));
        assert!(parse_signal("SIGINT@trace_on").unwrap_err().contains("INT"));
        assert!(parse_signal("SIGUSR1")
            .unwrap_err()
            .contains("SIG@trace_on"));
    }
}
