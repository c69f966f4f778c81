//! qemu-uftrace: record guest function calls under QEMU TCG into a uftrace data directory.
//!
//! `main.rs` only calls [`main_with`]; everything else is here so tests can reach it.

pub mod args;
pub mod argspec;
pub mod atomic_file;
pub mod contained;
pub mod cores;
pub mod datadir;
pub mod doctor;
pub mod embedded;
pub mod entries;
pub mod errors;
pub mod export;
pub mod filter;
pub mod guest_functions;
pub mod guest_procs;
pub mod guest_tasks;
pub mod host_info;
pub mod kernel_alias;
pub mod man;
pub mod max_size;
pub mod plugin_cache;
pub mod plugin_select;
pub mod probe_memo;
pub mod progress;
pub mod qemu;
pub mod qemu_checks;
pub mod record;
pub mod run_qemu;
pub mod signal_scope;
pub mod stats;
pub mod stop_at;
pub mod switch;
pub mod symbol_source;
pub mod symbols_cmd;
pub mod symfiles;
pub mod uftrace_cmd;
pub mod unnamed;
pub mod unwind;

use std::ffi::OsString;

use anyhow::Result;
use clap::Parser;

use args::{Cli, Command};

/// Runs the program on `argv` (argv[0] included) and returns the exit status.
pub fn main_with(argv: Vec<OsString>) -> i32 {
    record::note_start();
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            if let Some(err) = missing_double_dash(&e, &argv) {
                errors::report(&err);
                return errors::exit_code(&err);
            }
            // clap prints help/version to stdout (status 0) and usage errors to stderr (2).
            let _ = e.print();
            return e.exit_code();
        }
    };
    match dispatch(cli, &argv) {
        Ok(code) => code,
        Err(err) => {
            errors::report(&err);
            errors::exit_code(&err)
        }
    }
}

/// `record qemu-system-aarch64 …` without `--`: one line saying where the `--` goes,
/// instead of clap's "unexpected argument".
fn missing_double_dash(e: &clap::Error, argv: &[OsString]) -> Option<anyhow::Error> {
    let is_record = argv.get(1).is_some_and(|a| a == "record");
    let has_dashdash = argv.iter().any(|a| a == "--");
    if e.kind() == clap::error::ErrorKind::UnknownArgument && is_record && !has_dashdash {
        return Some(errors::usage(
            "the QEMU command must come after --",
            "write: qemu-uftrace record [OPTIONS] -- qemu-system-aarch64 …",
        ));
    }
    // clap's own tip (`-- --fast`) would hand the word to QEMU as the program to run.
    if e.kind() == clap::error::ErrorKind::UnknownArgument && is_record {
        let word = match e.get(clap::error::ContextKind::InvalidArg) {
            Some(clap::error::ContextValue::String(w)) => w.clone(),
            _ => "this option".into(),
        };
        return Some(errors::usage(
            format!("record has no option {word}"),
            "see qemu-uftrace record --help for its options; QEMU's own options go after -- \
             with the QEMU command",
        ));
    }
    // A value record's own parser refused (`-t 10kg`, `--max-size 500X`): its reason, on
    // one line as every other refusal, instead of clap's three.
    if e.kind() == clap::error::ErrorKind::ValueValidation && is_record {
        let arg = match e.get(clap::error::ContextKind::InvalidArg) {
            Some(clap::error::ContextValue::String(a)) => a.clone(),
            _ => "a value".into(),
        };
        let why =
            std::error::Error::source(e).map_or_else(|| e.kind().to_string(), |s| s.to_string());
        return Some(errors::usage(
            format!("{arg}: {why}"),
            "see qemu-uftrace record --help",
        ));
    }
    None
}

fn dispatch(cli: Cli, argv: &[OsString]) -> Result<i32> {
    match cli.command {
        Command::Record(a) => {
            // Refused before QEMU runs, not after a long recording.
            if a.then == Some(args::Then::Tui) {
                uftrace_cmd::require_terminal()?;
            }
            record::run(a, argv)
        }
        Command::Symbols(a) => symbols_cmd::run(a),
        Command::Replay(a) => uftrace_cmd::run("replay", &a.dir, &a.uftrace_args),
        Command::Report(a) => uftrace_cmd::run("report", &a.dir, &a.uftrace_args),
        Command::Graph(a) => uftrace_cmd::run("graph", &a.dir, &a.uftrace_args),
        Command::Tui(a) => uftrace_cmd::run("tui", &a.dir, &a.uftrace_args),
        Command::Dump(a) => uftrace_cmd::run("dump", &a.dir, &a.uftrace_args),
        Command::Info(a) => uftrace_cmd::run("info", &a.dir, &a.uftrace_args),
        Command::Export(a) => export::run(&a.options()),
        Command::Doctor(a) => doctor::run(&a.qemus),
        Command::Status(a) => progress::run(&a.dir, a.watch),
        Command::Trace(a) => switch::run(a.state, a.data.as_deref()),
        Command::Completions(a) => {
            let mut cmd = args::command();
            clap_complete::generate(a.shell, &mut cmd, "qemu-uftrace", &mut std::io::stdout());
            Ok(0)
        }
    }
}
