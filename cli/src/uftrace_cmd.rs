//! Running uftrace on a trace directory, with the terminal left to it and its exit status
//! passed on.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};

use anyhow::{Context, Result};

use crate::errors::fail;
use crate::stats::Stats;
use qemu_uftrace_format::Arch;

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
    // graph's backtraces print each frame's address as the record holds it, cut to 48 bits:
    // its output passes through us to be made whole.
    let rewrite = if sub == "graph" {
        system_arch(dir)
    } else {
        None
    };
    // Ctrl-C belongs to uftrace (its pager, tui) while it runs; we only wait for it.
    let scope = crate::signal_scope::SignalScope::viewer()?;
    let mut cmd = Command::new("uftrace");
    cmd.arg(sub).arg("-d").arg(dir);
    if rewrite.is_some() {
        cmd.arg("--no-pager").stdout(Stdio::piped());
    }
    let mut child = cmd.args(passed_on(extra)).spawn().map_err(|e| {
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
    if let (Some(arch), Some(out)) = (rewrite, child.stdout.take()) {
        show_whole(out, arch)?;
    }
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

/// The guest architecture of a system-mode trace (`None` for user mode, whose addresses are
/// a program's: never cut).
fn system_arch(dir: &Path) -> Option<Option<Arch>> {
    let stats = Stats::read(dir).ok().flatten()?;
    (!stats.is_user_mode()).then(|| stats.target.as_deref().and_then(Arch::from_qemu_target))
}

/// Copies uftrace's output to ours (through a pager on a terminal, as uftrace would), each
/// `(0x…)` address made whole.
fn show_whole(out: ChildStdout, arch: Option<Arch>) -> Result<()> {
    let mut pager = std::io::stdout()
        .is_terminal()
        .then(|| {
            let cmd = std::env::var("PAGER").unwrap_or_else(|_| "less".into());
            let mut c = Command::new("sh");
            c.arg("-c").arg(cmd).stdin(Stdio::piped());
            if std::env::var_os("LESS").is_none() {
                c.env("LESS", "FRSX");
            }
            c.spawn().ok()
        })
        .flatten();
    let stdout = std::io::stdout();
    let mut sink: Box<dyn Write> = match pager.as_mut().and_then(|p| p.stdin.take()) {
        Some(stdin) => Box::new(stdin),
        None => Box::new(stdout.lock()),
    };
    for line in BufReader::new(out).lines() {
        let line = line.context("cannot read uftrace's output")?;
        // A pager quit early, or a closed pipe: uftrace then stops on its own.
        if writeln!(sink, "{}", whole_addresses(&line, arch)).is_err() {
            break;
        }
    }
    let _ = sink.flush();
    drop(sink);
    if let Some(mut p) = pager {
        let _ = p.wait();
    }
    Ok(())
}

/// `(0x8000093909f4)` → `(0xffff8000093909f4)`: each parenthesized address of an
/// upper-half guest address, whole.
pub fn whole_addresses(line: &str, arch: Option<Arch>) -> String {
    let mut out = String::with_capacity(line.len() + 8);
    let mut rest = line;
    while let Some(i) = rest.find("(0x") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        let hex_len = rest.bytes().take_while(u8::is_ascii_hexdigit).count();
        let addr = u64::from_str_radix(&rest[..hex_len], 16).ok();
        match addr {
            Some(a) if rest[hex_len..].starts_with(')') && a < 1 << 48 => {
                out.push_str(&format!("{:x}", crate::unnamed::whole(a, arch)));
            }
            _ => out.push_str(&rest[..hex_len]),
        }
        rest = &rest[hex_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_dash_is_dropped_once() {
        let args: Vec<OsString> = ["--chrome", "--", "-D", "3"]
            .iter()
            .map(Into::into)
            .collect();
        assert_eq!(passed_on(&args), ["--chrome", "-D", "3"]);
    }

    #[test]
    fn backtrace_addresses_are_made_whole() {
        assert_eq!(
            whole_addresses(
                "   [0] <ffff8000093909f4> (0x8000093909f4)",
                Some(Arch::Aarch64)
            ),
            "   [0] <ffff8000093909f4> (0xffff8000093909f4)"
        );
        assert_eq!(
            whole_addresses(" [1] start_kernel (0xffff81a07a30)", Some(Arch::X86_64)),
            " [1] start_kernel (0xffffffff81a07a30)"
        );
        // Low addresses, and an aarch64 user program's near the top, are whole already.
        assert_eq!(
            whole_addresses("f (0xfd0a2)", Some(Arch::X86_64)),
            "f (0xfd0a2)"
        );
        assert_eq!(
            whole_addresses("f (0xffffb7a01000)", Some(Arch::Aarch64)),
            "f (0xffffb7a01000)"
        );
    }
}
