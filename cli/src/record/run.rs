//! Stage 3 of `record`: the run. QEMU with the plugin, the guest's other processes (user
//! mode) waited for, the jobs beside it joined; a run that recorded nothing ends here.

use std::path::Path;
use std::time::SystemTime;

use anyhow::Result;

use crate::datadir;
use crate::errors::fail;
use crate::qemu::{self, user_procs::Proc};
use crate::run_qemu::{self, QemuExit};
use crate::signal_scope::SignalScope;
use crate::symbol_source::{SourceArg, ToRead};

use super::invocation::Invocation;
use super::prepare::{Jobs, Prepared};
use super::symbols::{self, SymbolContext, SymbolJob};

/// What the run left.
pub struct Ran {
    pub exit: QemuExit,
    /// When QEMU started, for the info file.
    pub started: SystemTime,
    /// User mode: the guest's processes after the first.
    pub procs: Vec<Proc>,
    /// User mode: process images that ran untraced, the size cap having no room left for
    /// their files (`max_size::untraced_images`).
    pub untraced: u64,
    /// What the symbol job did.
    pub symbols: SymbolJob,
    /// Every symbol source (user mode: with the libraries the program mapped).
    pub sources: Vec<SourceArg>,
}

pub fn run(
    inv: &Invocation,
    prep: &Prepared,
    jobs: Jobs,
    staging: &Path,
    no_auto_symbols: bool,
) -> Result<Ran> {
    let started = SystemTime::now();
    // User mode: the guest's other processes (forked, exec'd) may outlive the first QEMU;
    // SIGTERM and SIGHUP reach them too, from QEMU's start to the end of the wait.
    let others = inv.is_user_mode().then(SignalScope::others).transpose()?;
    let exit = run_qemu::run(
        &prep.qemu.path,
        &prep.command[1..],
        prep.fixed_layout,
        prep.tunables.as_deref(),
    );
    let procs = if inv.is_user_mode() {
        qemu::user_procs::wait_all(staging, others.as_ref());
        qemu::user_procs::list(staging)
    } else {
        Vec::new()
    };
    drop(others);
    // Not part of the trace (joined first: a QEMU that failed at once may beat it).
    if let Some(slot) = jobs.task_slot {
        let _ = slot.job.join();
        let _ = std::fs::remove_file(&slot.file);
    }
    for entries in [jobs.entries, jobs.lib_entries].into_iter().flatten() {
        if let Some(job) = entries.job {
            let _ = job.join();
        }
        let _ = std::fs::remove_file(&entries.file);
    }
    // Written by the system entries' job, read by the plugin.
    let _ = std::fs::remove_file(staging.join(super::kaslr::ANCHOR_FILE));
    // Every image has ended: none takes from the cap's count any more.
    let untraced = crate::max_size::untraced_images(staging);
    let _ = std::fs::remove_file(staging.join(crate::max_size::COUNT_FILE));
    let mut sources = prep.sources.clone();
    let load = jobs.symbols.unwrap_or_else(|| {
        // User mode: the program's libraries are sources where it mapped them.
        if let (Some(program), false) = (prep.images.first(), no_auto_symbols) {
            let maps = qemu::user_maps::read(staging).unwrap_or_default();
            for s in qemu::user_maps::sources(&program.path, inv.sysroot.as_deref(), &maps) {
                if !sources.iter().any(|t| t.path == s.path) {
                    sources.push(s);
                }
            }
        }
        let preloaded = jobs.preload.and_then(|p| p.join()).unwrap_or_default();
        let ctx = SymbolContext {
            kernel: None,
            board: inv.board.clone(),
            kaslr_warning: None,
            arch: Some(prep.arch),
            keep_images: false,
        };
        // The `--symbols` files read for FUNCs' names are not read again.
        let arch = Some(prep.arch);
        let read = if prep.read.is_read() {
            let rest = sources[prep.read.sources().len()..].to_vec();
            ToRead::OnceThen(prep.read.clone(), rest, arch, preloaded)
        } else {
            ToRead::Sources(sources.clone(), arch, preloaded)
        };
        symbols::start(read, staging, ctx)
    });
    // Joined whatever QEMU did: the thread writes into the staging directory.
    let symbols = SymbolJob::join(load);
    let exit = exit?;
    if !datadir::has_records(staging) {
        // `record::run` removes the empty staging directory on this error, and checks this
        // QEMU afresh next time unless it knows why nothing was written.
        return Err(nothing_recorded(&exit));
    }
    Ok(Ran {
        exit,
        started,
        procs,
        untraced,
        symbols,
        sources,
    })
}

fn nothing_recorded(exit: &QemuExit) -> anyhow::Error {
    // Stopped from outside (Ctrl-C, kill) or killed: the guest ran, but nothing it did was
    // a call we could follow. QEMU's own "terminating on signal" is no complaint.
    if let Some(sig) = exit.ended_by_signal() {
        return fail(
            format!(
                "no call or return was recorded before QEMU {} by signal {sig}{}",
                if exit.signal.is_some() {
                    "was killed"
                } else {
                    "was stopped"
                },
                signal_hook::low_level::signal_name(sig)
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default(),
            ),
            "the guest ran no code that calls: check that -kernel (or the program) is one \
             built for this machine that starts, and QEMU's messages above",
        );
    }
    match exit.complaint().filter(|_| exit.failed()) {
        // QEMU refused its command line (a machine, CPU or device it does not know, a file
        // it cannot load): its own words name the problem.
        Some(complaint) => fail(
            format!(
                "QEMU {} before recording anything: {complaint}",
                exit.describe()
            ),
            "fix the QEMU command line (QEMU's messages are above)",
        ),
        None => fail(
            format!("no call or return was recorded: QEMU {}", exit.describe()),
            "check QEMU's messages above (the guest must run under TCG)",
        ),
    }
}
