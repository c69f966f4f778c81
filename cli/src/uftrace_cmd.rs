//! Running uftrace on a trace directory, with the terminal left to it and its exit status
//! passed on.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::errors::fail;
use crate::stats::Stats;

/// Runs `uftrace <sub> -d <dir> <extra…>` and returns the exit status to use as ours.
pub fn run(sub: &str, dir: &Path, extra: &[OsString]) -> Result<i32> {
    if !dir.is_dir() {
        return Err(fail(
            format!("no trace directory at {}", dir.display()),
            "record one with qemu-uftrace record -- qemu-system-aarch64 …, or pass -d DIR",
        ));
    }
    if sub == "tui" {
        require_terminal()?;
    }
    if let Some(line) = clock_header(sub, dir) {
        println!("{line}");
    }
    // Ctrl-C belongs to uftrace (its pager, tui) while it runs; we only wait for it.
    let scope = crate::signal_scope::SignalScope::viewer()?;
    let mut child = Command::new("uftrace")
        .arg(sub)
        .arg("-d")
        .arg(dir)
        .args(passed_on(extra))
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                fail(
                    "uftrace is not installed (not found on PATH)",
                    "install it: apt-get install uftrace",
                )
            } else {
                fail(
                    format!("cannot run uftrace: {e}"),
                    "check your uftrace installation",
                )
            }
        })?;
    scope.child_started(child.id());
    let status = child.wait().context("cannot wait for uftrace")?;
    scope.child_reaped();
    Ok(crate::run_qemu::exit_code(status))
}

/// The options for uftrace without the `--` that `--help` tells users to write before
/// them: clap keeps it among the trailing values, and uftrace would take everything after
/// it as a program to record and ignore it (`-D 3` dropped).
pub fn passed_on(extra: &[OsString]) -> Vec<OsString> {
    let mut out = extra.to_vec();
    if let Some(i) = out.iter().position(|a| a == "--") {
        out.remove(i);
    }
    out
}

/// `uftrace tui` with stdin or stdout not a terminal spins at 100% CPU forever (uftrace's
/// own bug), so it is refused before it starts.
pub fn require_terminal() -> Result<()> {
    if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        return Ok(());
    }
    Err(fail(
        "tui needs a terminal (its stdin or stdout is not one)",
        "run it in a terminal, or use qemu-uftrace replay, report or graph, which print to any output",
    ))
}

/// The line said before uftrace's output when the trace's times are not nanoseconds:
/// uftrace prints every duration as time (`1.500 ms`), and `-t 1ms` means 1 M instructions.
pub fn clock_header(sub: &str, dir: &Path) -> Option<String> {
    if !matches!(sub, "replay" | "report" | "graph" | "tui") {
        return None;
    }
    let stats = Stats::read(dir).ok().flatten()?;
    stats.clock_unit_note().map(|n| format!("# {n}"))
}
