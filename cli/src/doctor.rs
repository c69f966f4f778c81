//! `qemu-uftrace doctor`: what the QEMUs here (on PATH, or the ones named) can do with
//! qemu-uftrace, and whether uftrace is there to read the traces. Exits non-zero when
//! recording cannot work, after saying why and what to do.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::errors::fail;
use crate::qemu::{self, Emulator};
use crate::qemu_checks::{self, PluginChoice, ProbeInfo};

/// What doctor found about one QEMU.
struct Finding {
    /// The report block, one `  key  value` line each.
    text: String,
    /// Whether `record` works with it.
    can_record: bool,
}

/// Runs the subcommand on the QEMUs named in `qemus` (program names or paths), or on every
/// QEMU emulator on PATH when none is named.
pub fn run(qemus: &[OsString]) -> Result<i32> {
    let named = !qemus.is_empty();
    let candidates: Vec<OsString> = if named {
        qemus.to_vec()
    } else {
        emulators_on_path()
    };
    let mut usable = 0;
    let mut all_usable = true;
    for argv0 in &candidates {
        let f = examine(argv0);
        print!("{}", f.text);
        usable += f.can_record as usize;
        all_usable &= f.can_record;
    }
    let uftrace = uftrace_version();
    match &uftrace {
        Ok((path, version)) => println!("uftrace  {} ({version})", path.display()),
        Err(why) => println!("uftrace  missing: {why}"),
    }
    if uftrace.is_err() {
        return Err(fail(
            "uftrace is not installed, so traces cannot be read",
            "install it: apt-get install uftrace",
        ));
    }
    if candidates.is_empty() {
        return Err(fail(
            "no QEMU emulator (qemu-system-<arch> or qemu-<arch>) on PATH",
            qemu_checks::install_hint(),
        ));
    }
    if (named && !all_usable) || usable == 0 {
        return Err(fail(
            if named {
                "recording cannot work with every QEMU named"
            } else {
                "no QEMU on PATH can record"
            },
            "see the lines above for each one's problem and way out",
        ));
    }
    Ok(0)
}

/// Every `qemu-system-<arch>` and `qemu-<arch>` on PATH, first of each name, in PATH order.
fn emulators_on_path() -> Vec<OsString> {
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for dir in std::env::split_paths(&path_var) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<OsString> = entries.filter_map(|e| Some(e.ok()?.file_name())).collect();
        names.sort();
        for name in names {
            if qemu::detect_emulator(&name).is_ok() && seen.insert(name.clone()) {
                let full = dir.join(&name);
                if qemu_checks::find_executable(&full.clone().into_os_string()).is_ok() {
                    out.push(full.into_os_string());
                }
            }
        }
    }
    out
}

/// Checks one QEMU as `record` would, and says everything learnt on the way.
fn examine(argv0: &OsString) -> Finding {
    let mut text = String::new();
    let shown = Path::new(argv0).display().to_string();
    let line = |text: &mut String, key: &str, value: &str| {
        let _ = writeln!(text, "  {key:<14} {value}");
    };
    let emulator = match qemu::detect_emulator(argv0) {
        Ok(e) => e,
        Err(e) => {
            let _ = writeln!(text, "{shown}");
            line(&mut text, "problem", &format!("{e:#}"));
            return Finding {
                text,
                can_record: false,
            };
        }
    };
    let path = qemu_checks::find_executable(argv0);
    let _ = writeln!(
        text,
        "{shown}{}",
        match &path {
            Ok(p) if p.as_os_str() != argv0.as_os_str() => format!(" ({})", p.display()),
            _ => String::new(),
        }
    );
    let path = match path {
        Ok(p) => p,
        Err(e) => {
            line(&mut text, "problem", &format!("{e:#}"));
            return Finding {
                text,
                can_record: false,
            };
        }
    };
    let checked = qemu_checks::check_qemu(argv0, emulator.clone(), &PluginChoice::Embedded);
    let can_record = match checked {
        Ok(q) => {
            line(&mut text, "version", &q.version);
            describe_probe(&mut text, &q.probe);
            target_line(&mut text, &emulator, &q.probe)
        }
        Err(e) => {
            // The checks stopped early, perhaps at the version itself: ask QEMU for it
            // here, so that the report shows it whatever failed.
            match qemu_checks::read_version(&path) {
                Ok(Some((_, _, v))) => line(&mut text, "version", &v),
                Ok(None) => line(&mut text, "version", "unknown (--version says no number)"),
                Err(e) => line(&mut text, "version", &format!("{e:#}")),
            }
            line(&mut text, "plugins", &format!("no: {e:#}"));
            false
        }
    };
    Finding { text, can_record }
}

fn describe_probe(text: &mut String, p: &ProbeInfo) {
    let range = crate::plugin_select::Accepts::Range {
        min: p.api_min,
        cur: p.api_cur,
    };
    let _ = writeln!(
        text,
        "  {:<14} yes: QEMU accepts plugin API {}; qemu-uftrace loads its API {} build",
        "plugins",
        range.describe(),
        p.plugin_api
    );
    // Said as what the trace shows; the API's name (discontinuity) means nothing to a user.
    let _ = writeln!(
        text,
        "  {:<14} {}",
        "exceptions",
        if p.discontinuity {
            "shown as entries ([irq], [svc] …)"
        } else {
            "not shown as entries: this QEMU does not report them to plugins (10.2 or newer \
             does); their handlers' calls nest where they ran"
        }
    );
}

/// The target line; whether `record` supports this emulator.
fn target_line(text: &mut String, emulator: &Emulator, p: &ProbeInfo) -> bool {
    let ok = emulator.is_supported() && p.supported;
    let _ = writeln!(
        text,
        "  {:<14} {}: {}",
        "target",
        emulator.describe(),
        if ok {
            "can record"
        } else {
            "not supported yet by qemu-uftrace (aarch64, riscv64 and x86_64 are, in system and user mode)"
        }
    );
    ok
}

/// uftrace's path and version line, or why there is none.
fn uftrace_version() -> std::result::Result<(PathBuf, String), String> {
    let path = qemu_checks::find_executable(&OsString::from("uftrace"))
        .map_err(|_| "not found on PATH (apt-get install uftrace)".to_string())?;
    let out = std::process::Command::new(&path)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .find(|w| w.starts_with('v') && w[1..].starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or("version unknown")
        .to_string();
    Ok((path, version))
}
