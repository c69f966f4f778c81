//! `qemu-uftrace record`, as a pipeline whose data walks forward once:
//! [`invocation`] reads the QEMU command line, [`prepare`] checks QEMU and decides what the
//! plugin gets and what runs beside it, [`run`] runs QEMU, [`assemble`] makes and publishes
//! the data directory, [`summary`] says what was recorded.

pub mod assemble;
pub mod beneath;
pub mod common;
pub mod invocation;
pub mod kaslr;
pub mod prepare;
pub mod recover;
pub mod resync;
pub mod run;
pub mod splice;
pub mod summary;
pub mod symbols;
pub mod window_gates;

use std::ffi::OsString;
use std::path::Path;

use anyhow::Result;

use crate::args::RecordArgs;
use crate::datadir;
use crate::symbol_source::{self, SourceArg};

pub use common::{note_start, shell_join};
use invocation::Invocation;

/// Runs the subcommand; returns our exit status. `typed` is our whole command line.
pub fn run(mut args: RecordArgs, typed: &[OsString]) -> Result<i32> {
    // `-o dir/` names `dir`: its staging directory is `dir.partial`, not `dir/.partial`.
    args.output = args.output.components().collect();
    // The cheap checks on what was typed come first.
    if let Some(range) = &args.time_range {
        return Err(crate::errors::usage(
            format!(
                "record has no -r/--time-range ({range}): uftrace applies it when it shows a trace"
            ),
            format!(
                "record, then qemu-uftrace replay -d {} -- -r {range} (or report, graph, \
                 tui); to aim the recording itself, use --start-at/--stop-at FUNC or \
                 --keep-last SIZE",
                args.output.display()
            ),
        ));
    }
    let mut inv = Invocation::parse(&args.qemu_command)?;
    // System mode: the guest's root file system, where its processes' files are.
    if let (Some(root), false) = (&args.sysroot, inv.is_user_mode()) {
        inv.sysroot = Some(root.clone());
    }
    let extra_sources = args
        .symbols
        .iter()
        .map(|s| symbol_source::parse_source_arg(s, "--symbols"))
        .collect::<Result<Vec<_>>>()?;

    let staging = datadir::create_staging(&args.output)?;
    let outcome = record_into(&args, typed, &inv, &staging, extra_sources);
    if outcome.is_err() {
        remove_if_empty(&staging);
    }
    outcome
}

/// The pipeline, from a staging directory to the published trace and our exit status.
fn record_into(
    args: &RecordArgs,
    typed: &[OsString],
    inv: &Invocation,
    staging: &Path,
    extra_sources: Vec<SourceArg>,
) -> Result<i32> {
    let (prep, jobs) = prepare::prepare(args, inv, staging, extra_sources)?;
    let title = crate::progress::Title::start(staging, args.quiet);
    let signals = crate::switch::Signals::start(staging, &args.signal)?;
    let ran = run::run(inv, &prep, jobs, staging, args.no_auto_symbols);
    drop(signals);
    drop(title);
    let ran = match (ran, &args.start_at) {
        // Nothing written because the start never came: that, not a QEMU problem, is why.
        (Err(_), Some(func)) if !datadir::has_records(staging) => {
            return Err(crate::errors::fail(
                crate::stop_at::never_started(func),
                "start at a function the guest runs (a recording without --start-at shows them)",
            ))
        }
        // Nothing written because tracing was never switched on.
        (Err(_), _)
            if args.trace == Some(crate::switch::OnOff::Off) && !datadir::has_records(staging) =>
        {
            return Err(crate::errors::fail(
                "tracing was never switched on (--trace=off): nothing was written",
                "switch it on while the guest runs with `qemu-uftrace trace on`, --signal \
                 SIGUSR1@trace_on or --trace-on-at FUNC",
            ))
        }
        // Nothing written because no filtered function ran.
        (Err(_), _) if !args.filter.is_empty() && !datadir::has_records(staging) => {
            return Err(crate::errors::fail(
                format!(
                    "-F {}: the guest never entered it; nothing was written",
                    args.filter.join(" -F ")
                ),
                "filter a function the guest runs (a recording without -F shows them)",
            ))
        }
        (Err(e), _) => {
            // Whatever else went wrong with nothing written, check this QEMU afresh next
            // time (a trigger never reached says nothing against it).
            if !datadir::has_records(staging) {
                prep.qemu.forget_probe();
            }
            return Err(e);
        }
        (Ok(ran), _) => ran,
    };
    let exit = ran.exit.clone();
    let no_sources = ran.sources.is_empty();
    let published = assemble::assemble(
        &args.output,
        typed,
        inv,
        &prep,
        ran,
        staging,
        args.no_auto_symbols,
    )?;
    let cap = prep.cap.as_ref().map(|c| c.origin.as_str());
    summary::print(args, &exit, &published, no_sources, cap, &prep.filters);

    let mut code = exit.exit_code;
    if published.incomplete.is_some() && code == 0 && !capped_as_asked(args, &published) {
        // The trace is published for what it holds, but it is not all the guest did.
        code = 1;
    }
    if let Some(then) = args.then {
        let then_code = match then {
            crate::args::Then::Export => crate::export::then(&args.output)?,
            _ => crate::uftrace_cmd::run(then.subcommand(), &args.output, &[])?,
        };
        if code == 0 {
            code = then_code;
        }
    }
    Ok(code)
}

/// Whether the trace ends where the user's own `--max-size` said, and nothing else was
/// lost: what was asked for is no failure (the default cap, which nobody asked for, is).
fn capped_as_asked(args: &RecordArgs, published: &assemble::Published) -> bool {
    let asked = matches!(args.max_size, Some(crate::max_size::MaxSize::Cap(_)));
    asked
        && published
            .stats
            .as_ref()
            .is_some_and(|s| s.size_capped && s.stopped.is_none() && s.errors.is_empty())
}

/// Removes a staging directory that holds no recorded byte (a failed start).
fn remove_if_empty(staging: &Path) {
    let empty = datadir::dat_files(staging)
        .map(|d| d.iter().all(|&(_, len)| len == 0))
        .unwrap_or(false);
    if empty {
        let _ = std::fs::remove_dir_all(staging);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_join_quotes_when_needed() {
        let w: Vec<OsString> = [
            "qemu-uftrace",
            "-o",
            "a b",
            "it's",
            "-append",
            "console=ttyAMA0",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(
            shell_join(&w),
            r"qemu-uftrace -o $'a b' $'it\'s' -append console=ttyAMA0"
        );
        use std::os::unix::ffi::OsStrExt;
        let raw = std::ffi::OsStr::from_bytes(b"t\xffr 'a\\b\n").to_os_string();
        assert_eq!(
            shell_join(std::slice::from_ref(&raw)),
            r"$'t\xFFr \'a\\b\n'"
        );
        // bash splits them back into the same bytes.
        let mut words = w.clone();
        words.push(raw);
        let out = std::process::Command::new("bash")
            .args(["-c", &format!("printf '%s\\0' {}", shell_join(&words))])
            .output()
            .unwrap();
        let back: Vec<&[u8]> = out.stdout.split(|&b| b == 0).collect();
        let want: Vec<&[u8]> = words
            .iter()
            .map(|w| w.as_bytes())
            .chain([&b""[..]])
            .collect();
        assert_eq!(back, want);
    }
}
