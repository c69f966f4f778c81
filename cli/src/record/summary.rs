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
            let rate = if secs > 0.0 {
                format!(", {} events/s", group(s.events as f64 / secs))
            } else {
                String::new()
            };
            let unwritten = if s.lost_records > 0 {
                format!(", {} of them not written", group(s.lost_records as f64))
            } else {
                String::new()
            };
            let count = |key: &str| s.other_count(key);
            let tasks = match count("tasks") {
                Some(n) if n > 1 => format!(", {} tasks", group(n as f64)),
                _ => String::new(),
            };
            let exceptions = match (count("exceptions_shown"), count("exceptions")) {
                (Some(1), Some(n)) => format!(", {} exceptions and interrupts", group(n as f64)),
                _ => String::new(),
            };
            // User mode runs each guest thread on a vCPU of its own.
            let unit = if s.is_user_mode() { "thread" } else { "vCPU" };
            let tasks = if s.is_user_mode() {
                String::new()
            } else {
                tasks
            };
            note(format!(
                "recorded {} events ({} calls, {} returns{unwritten}) on {} {unit}{}{tasks}{exceptions}: {} in {secs:.2} s{rate}",
                group(s.events as f64),
                group(s.calls as f64),
                group(s.returns as f64),
                s.vcpus.unwrap_or(done.tids.len() as u32),
                if s.vcpus == Some(1) { "" } else { "s" },
                bytes(s.bytes.max(done.bytes)),
            ));
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
            if count("exceptions_shown") == Some(0) {
                note(
                    "exceptions and interrupts are not shown as entries: this QEMU does not \
                     report them to plugins (10.2 and newer do); their handlers' calls nest \
                     where they ran",
                );
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
    note(written_line(
        done.bytes,
        stats.map_or(0, |s| s.lost_records),
        stats.is_some_and(|s| s.size_capped),
        outside,
        filtered,
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
}

/// perf's closing line: what went to disk and what did not.
/// `[ record: wrote 18.88 MiB, 1,234,567 records; 0 lost ]`.
fn written_line(
    bytes: u64,
    lost: u64,
    capped: bool,
    outside: Option<u64>,
    filtered: Option<u64>,
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
    format!(
        "[ record: wrote {}, {} records; {} lost{cap}{outside}{filtered} ]",
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
            written_line(32 << 20, 0, false, None, None),
            "[ record: wrote 32.00 MiB, 2,097,152 records; 0 lost ]"
        );
        assert_eq!(
            written_line(160, 3, true, None, None),
            "[ record: wrote 160 B, 10 records; 3 lost; the rest not written (size cap) ]"
        );
        assert_eq!(
            written_line(352, 0, false, Some(1868), None),
            "[ record: wrote 352 B, 22 records; 0 lost; 1,868 outside the window ]"
        );
        assert_eq!(
            written_line(352, 0, false, None, Some(90_210)),
            "[ record: wrote 352 B, 22 records; 0 lost; 90,210 filtered out (-F/-N) ]"
        );
    }
}
