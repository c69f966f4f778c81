//! Stage 5 of `record`: the summary on stderr. What was recorded, whether it is all the
//! guest did, and where to look at it.

use std::path::Path;

use indicatif::{HumanBytes, HumanCount};

use crate::args::RecordArgs;
use crate::errors::{note, warn};
use crate::run_qemu::QemuExit;

use super::assemble::Published;

/// Says what was recorded, whether it is complete, and where to look at it.
pub fn print(
    args: &RecordArgs,
    exit: &QemuExit,
    published: &Published,
    no_sources: bool,
    cap: Option<&str>,
    filters: &crate::filter::Filters,
) {
    let stats = published.stats.as_ref();
    let done = &published.assembled;
    let old = published.old.as_deref();
    let secs = exit.elapsed.as_secs_f64();
    let out = args.output.display();
    match stats {
        Some(s) => {
            note(ran_line(s, secs, done.tids.len() as u32));
            let count = |key: &str| s.other_count(key);
            if let Some(r) = &published.recovered {
                note(format!(
                    "{} in {:.0} ms",
                    r.describe(),
                    r.elapsed.as_secs_f64() * 1000.0
                ));
            }
            if let Some(r) = (published.resyncs.as_ref()).filter(|r| r.unwound + r.guessed > 0) {
                note(r.describe());
            }
            if exceptions_unshown_matter(s) {
                note(
                    "exceptions and interrupts are not shown as entries: this QEMU does not \
                     report them to plugins (10.2 and newer do); their handlers' calls nest \
                     where they ran",
                );
            }
            match &published.kaslr {
                Some(Ok(line)) => note(line),
                Some(Err(line)) => warn(line),
                None => {}
            }
            // Only counts a user can act on; the others are explained in the README.
            for line in crate::stats::findings(s) {
                note(line);
            }
            if let Some(stop) = &args.stop_at {
                match crate::stop_at::outcome(stop, s) {
                    Ok(line) => note(line),
                    Err(line) => warn(line),
                }
            }
            if let (Some(size), Some(frames)) = (args.keep_last, count("keep_last_frames")) {
                note(format!(
                    "--keep-last {}: kept the last records of the run, after the {frames} \
                     frame(s) open at the window's start, written as entries",
                    bytes(size)
                ));
            }
            if let Some(func) = &args.start_at {
                match crate::stop_at::start_outcome(func, s) {
                    Ok(line) => note(line),
                    Err(line) => warn(line),
                }
            }
            for (warning, line) in filters.never_entered(s) {
                if warning {
                    warn(line)
                } else {
                    note(line)
                }
            }
            if let Some(why) = s.incomplete_reason(cap) {
                warn(format!("INCOMPLETE TRACE: {why}"));
            }
        }
        None => {
            warn(format!(
                "INCOMPLETE TRACE: QEMU {} before the plugin flushed its buffers (no {}); \
                 kept {} of records from {} vCPU file{}, but the last calls of each are missing",
                exit.describe(),
                crate::stats::STATS_FILE,
                bytes(done.bytes),
                done.tids.len(),
                if done.tids.len() == 1 { "" } else { "s" },
            ));
        }
    }
    if !done.missing_tids.is_empty() {
        warn(format!(
            "no data file for task(s) {:?} that the plugin listed",
            done.missing_tids
        ));
    }
    if done.trimmed_files > 0 {
        warn(format!(
            "cut a half-written record off the end of {} file(s)",
            done.trimmed_files
        ));
    }
    for s in &done.skipped {
        note(format!("symbols skipped: {s}"));
    }
    if no_sources {
        warn(
            "no symbol source: uftrace will show addresses instead of function names; \
             add --symbols FILE[:OFFSET] (e.g. the guest's vmlinux), or run \
             qemu-uftrace symbols -d DIR FILE later",
        );
    } else if done.placed.is_empty() {
        warn(
            "no symbols could be loaded: uftrace will show addresses; \
             fix the sources named above or add --symbols FILE[:OFFSET]",
        );
    }
    // Events outside --start-at/--stop-at/--keep-last: what the plugin saw less what it wrote (the
    // open frames written at the start are records of events before it).
    let outside = stats
        .filter(|_| args.start_at.is_some() || args.stop_at.is_some() || args.keep_last.is_some())
        .map(|s| {
            let records = done.bytes / qemu_uftrace_format::record::RECORD_SIZE as u64;
            let frames = s.other_count("start_frames").unwrap_or(0)
                + s.other_count("keep_last_frames").unwrap_or(0);
            s.events.saturating_sub(records.saturating_sub(frames))
        });
    let filtered = stats
        .filter(|_| !filters.is_empty())
        .map(|s| s.other_count("filtered").unwrap_or(0));
    let short = stats
        .filter(|_| args.time_filter.is_some())
        .map(|s| s.other_count("time_filtered").unwrap_or(0));
    note(written_line(
        done.bytes,
        stats.map_or(0, |s| s.lost_records),
        stats.is_some_and(|s| s.size_capped),
        outside,
        filtered,
        short,
    ));
    let old = old
        .map(|o| format!(" (the previous one is now {})", o.display()))
        .unwrap_or_default();
    let dir_arg = if args.output == Path::new(crate::args::DEFAULT_DIR) {
        String::new()
    } else {
        format!(
            " -d {}",
            super::common::shell_join(&[args.output.clone().into()])
        )
    };
    note(format!(
        "wrote {out}{old}; look at it with: qemu-uftrace replay{dir_arg}"
    ));
    if stats.and_then(|s| s.clock.as_deref()) == Some("insn") {
        let vcpus = stats.and_then(|s| s.vcpus).unwrap_or(1);
        note(if vcpus > 1 {
            "clock=insn: uftrace's time columns count each vCPU's guest instructions, \
             not nanoseconds, and are not comparable across vCPUs"
        } else {
            "clock=insn: uftrace's time columns count guest instructions, not nanoseconds"
        });
    }
    // Last, where they are read: the guest's console has scrolled them away.
    crate::errors::repeat_early_warnings();
}

/// The first line: what the guest did as the plugin followed it. What went to disk (size,
/// records) is the `[ record: … ]` line's alone, so that no two lines give different counts
/// of one thing: records are fewer than calls and returns where some were not written
/// (--max-depth, a window, -F/-N) and more where marks were added.
fn ran_line(s: &crate::stats::Stats, secs: f64, files: u32) -> String {
    let count = |key: &str| s.other_count(key);
    let user = s.is_user_mode();
    // User mode runs each guest thread on a vCPU of its own.
    let unit = if user { "thread" } else { "vCPU" };
    let vcpus = s.vcpus.unwrap_or(files);
    let mut line = format!(
        "the guest made {} call{} and {} return{} on {vcpus} {unit}{}",
        group(s.calls as f64),
        plural(s.calls),
        group(s.returns as f64),
        plural(s.returns),
        plural(vcpus.into()),
    );
    if let Some(n) = count("tasks").filter(|&n| n > 1 && !user) {
        line.push_str(&format!(", {} tasks", group(n as f64)));
    }
    // Only where they are shown, and some were: user mode has none (signals are its own).
    if let (Some(1), Some(n), false) = (count("exceptions_shown"), count("exceptions"), user) {
        if n > 0 {
            line.push_str(&format!(
                ", {} {}",
                group(n as f64),
                if n == 1 {
                    "exception or interrupt"
                } else {
                    "exceptions and interrupts"
                }
            ));
        }
    }
    line.push_str(&format!(" in {secs:.2} s"));
    if secs > 0.0 {
        line.push_str(&format!(
            " ({} calls and returns a second)",
            group((s.calls + s.returns) as f64 / secs)
        ));
    }
    line
}

/// Whether to say that this QEMU does not report exceptions and interrupts: only where a
/// guest took some, as far as the plugin can tell without the reports (an exception return
/// seen, or an OS switching tasks); never in user mode, where no QEMU reports them.
fn exceptions_unshown_matter(s: &crate::stats::Stats) -> bool {
    let count = |key: &str| s.other_count(key).unwrap_or(0);
    s.other_count("exceptions_shown") == Some(0)
        && !s.is_user_mode()
        && count("eret_returns") + count("eret_jumps") + count("switches") > 0
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// perf's closing line: what went to disk and what did not.
/// `[ record: wrote 18.88 MiB, 1,234,567 records; 0 lost ]`.
fn written_line(
    bytes: u64,
    lost: u64,
    capped: bool,
    outside: Option<u64>,
    filtered: Option<u64>,
    short: Option<u64>,
) -> String {
    let records = bytes / qemu_uftrace_format::record::RECORD_SIZE as u64;
    let cap = if capped {
        "; the rest not written (size cap)"
    } else {
        ""
    };
    let outside = outside
        .map(|n| format!("; {} outside the window", group(n as f64)))
        .unwrap_or_default();
    let filtered = filtered
        .map(|n| format!("; {} filtered out (-F/-N)", group(n as f64)))
        .unwrap_or_default();
    let short = short
        .map(|n| format!("; {} calls shorter than -t", group(n as f64)))
        .unwrap_or_default();
    format!(
        "[ record: wrote {}, {} records; {} lost{cap}{outside}{filtered}{short} ]",
        self::bytes(bytes),
        group(records as f64),
        group(lost as f64),
    )
}

/// `1,234,567`.
fn group(n: f64) -> String {
    HumanCount(n.max(0.0).round() as u64).to_string()
}

/// `18.9 MiB`.
fn bytes(n: u64) -> String {
    HumanBytes(n).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first line says what the guest did and nothing of what was written (the
    /// `[ record: … ]` line's), so that its counts never stand against the records'.
    #[test]
    fn the_first_line_counts_what_the_guest_did() {
        let s = crate::stats::Stats::parse(
            "complete=1\nmode=system\nvcpus=1\nevents=15981228\ncalls=7990614\n\
             returns=7990614\nbytes=333676\ntasks=1\nexceptions_shown=1\nexceptions=0\n",
        );
        assert_eq!(
            ran_line(&s, 2.0, 1),
            "the guest made 7,990,614 calls and 7,990,614 returns on 1 vCPU in 2.00 s \
             (7,990,614 calls and returns a second)"
        );
        let s = crate::stats::Stats::parse(
            "complete=1\nmode=user\nvcpus=1\ncalls=1\nreturns=1\ntasks=1\n\
             exceptions_shown=1\nexceptions=0\n",
        );
        assert_eq!(
            ran_line(&s, 0.0, 1),
            "the guest made 1 call and 1 return on 1 thread in 0.00 s"
        );
        let s = crate::stats::Stats::parse(
            "vcpus=2\ncalls=10\nreturns=9\ntasks=3\nexceptions_shown=1\nexceptions=1\n",
        );
        assert_eq!(
            ran_line(&s, 1.0, 2),
            "the guest made 10 calls and 9 returns on 2 vCPUs, 3 tasks, 1 exception or \
             interrupt in 1.00 s (19 calls and returns a second)"
        );
    }

    /// QEMU 10.0's missing exception reports are said only where a guest took some.
    #[test]
    fn unreported_exceptions_are_said_where_they_matter() {
        let said = |text: &str| exceptions_unshown_matter(&crate::stats::Stats::parse(text));
        assert!(!said("exceptions_shown=0\nswitches=0\neret_returns=0\n"));
        assert!(said("exceptions_shown=0\nswitches=12\n"));
        assert!(said("exceptions_shown=0\neret_returns=3\n"));
        assert!(!said("mode=user\nexceptions_shown=0\nswitches=12\n"));
        assert!(!said("exceptions_shown=1\nswitches=12\n"));
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(group(1234567.0), "1,234,567");
        assert_eq!(group(12.0), "12");
        assert_eq!(group(-3.0), "0");
        assert_eq!(bytes(19_800_000), "18.88 MiB");
        assert_eq!(bytes(512), "512 B");
    }

    #[test]
    fn the_written_line_says_what_was_not_written() {
        assert_eq!(
            written_line(32 << 20, 0, false, None, None, None),
            "[ record: wrote 32.00 MiB, 2,097,152 records; 0 lost ]"
        );
        assert_eq!(
            written_line(160, 3, true, None, None, None),
            "[ record: wrote 160 B, 10 records; 3 lost; the rest not written (size cap) ]"
        );
        assert_eq!(
            written_line(352, 0, false, Some(1868), None, None),
            "[ record: wrote 352 B, 22 records; 0 lost; 1,868 outside the window ]"
        );
        assert_eq!(
            written_line(352, 0, false, None, Some(90_210), None),
            "[ record: wrote 352 B, 22 records; 0 lost; 90,210 filtered out (-F/-N) ]"
        );
        assert_eq!(
            written_line(352, 0, false, None, None, Some(1_234)),
            "[ record: wrote 352 B, 22 records; 0 lost; 1,234 calls shorter than -t ]"
        );
    }
}
