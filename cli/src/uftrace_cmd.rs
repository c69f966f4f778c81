//! Running uftrace on a trace directory, with the terminal left to it and its exit status
//! passed on.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::errors::fail;

/// Runs `uftrace <sub> -d <dir> <extra…>` and returns the exit status to use as ours.
pub fn run(sub: &str, dir: &Path, extra: &[OsString]) -> Result<i32> {
    if !dir.is_dir() {
        return Err(fail(
            format!("no trace directory at {}", dir.display()),
            "record one with qemu-uftrace record -- qemu-system-aarch64 …, or pass -d DIR",
        ));
    }
    // Ctrl-C belongs to uftrace (its pager, tui) while it runs; we only wait for it.
    let scope = crate::signal_scope::SignalScope::viewer()?;
    let mut child = Command::new("uftrace")
        .arg(sub)
        .arg("-d")
        .arg(dir)
        .args(extra)
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
