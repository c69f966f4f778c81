//! `plugin.stats`: what the plugin says about a recording, written at QEMU exit. Its absence
//! means QEMU died before the plugin could flush.

use std::path::Path;

/// The file the plugin writes last (atomically).
pub const STATS_FILE: &str = "plugin.stats";

/// The totals the record summary prints by name, so it skips their per-vCPU copies.
pub const TOTALS: &[&str] = &[
    "events",
    "calls",
    "returns",
    "resyncs",
    "unmatched_returns",
    "depth_cap_hits",
    "bytes",
];

/// What a count in `plugin.stats` means, and whether the end-of-record summary shows it:
/// only counts a user can act on, or that say part of the trace is missing, are shown; the
/// rest are the ordinary bookkeeping of following a guest and are explained here (and in
/// `qemu-uftrace-record(1)`'s COUNTS section, which comes from this table).
pub struct Count {
    pub key: &'static str,
    pub meaning: &'static str,
    /// What to do about a non-zero count; `Some` means the summary shows it.
    pub action: Option<&'static str>,
}

/// Every count the plugin writes (`plugin.stats`), in its order.
pub const COUNTS: &[Count] = &[
    count(
        "events",
        "records written (entries, exits and markers)",
        None,
    ),
    count("calls", "call instructions executed", None),
    count("returns", "return instructions executed", None),
    count(
        "deep_returns",
        "returns that closed frames below the top (longjmp, frames that never returned); \
         ordinary",
        None,
    ),
    count(
        "unmatched_returns",
        "returns that matched no open frame: ordinary where the trace starts inside a call \
         (a task's first switch-in, a kernel entering at a return)",
        None,
    ),
    count(
        "resyncs",
        "unmatched returns after which the call stack was rebuilt from the guest's frame \
         records; the replay shows a LOST record there",
        None,
    ),
    count(
        "jump_entries",
        "functions entered by a jump to their first instruction (a tail call, `b main`), shown \
         as calls nested in the jumper's frame, as uftrace shows them; ordinary",
        None,
    ),
    count(
        "register_calls",
        "calls whose target was read from a register (an indirect call's whose register no \
         load in its block filled: those take the load's value; the one register read a call \
         costs); ordinary",
        None,
    ),
    count(
        "jump_callbacks",
        "callbacks of blocks a jump through a register may land in (a function's entry, code \
         right after a call) that ran, whether or not such a jump was pending; ordinary",
        None,
    ),
    count(
        "faulted_calls",
        "x86 calls whose push of the return address faulted before they ran (a forked \
         child's first write to its stack, a stack growing): each written once, when it ran \
         again; ordinary",
        None,
    ),
    count(
        "synthetic_entries",
        "frames opened by a resync, whose real entry was not seen",
        None,
    ),
    count(
        "depth_cap_hits",
        "calls nested deeper than --max-depth, followed but not recorded",
        Some("as asked"),
    ),
    count(
        "stack_overflows",
        "calls beyond the 1024 frames the plugin follows (runaway recursion, or a stack it \
         never saw unwind): not recorded",
        Some("their frames are missing from the trace; --max-depth does not help"),
    ),
    count(
        "eret_returns",
        "exception returns that returned from the top frame",
        None,
    ),
    count(
        "returns_unseen",
        "returns whose landing no block saw (a new task's start, an exception on the way), \
         taken as the top frame's",
        None,
    ),
    count(
        "exceptions",
        "exceptions and interrupts shown as entries ([irq], [svc] …)",
        None,
    ),
    count(
        "exception_returns",
        "exception returns that closed an exception entry",
        None,
    ),
    count(
        "eret_redirects",
        "exception returns that went elsewhere than where the exception was taken (a \
         kernel fixup, a signal, exec)",
        None,
    ),
    count(
        "eret_jumps",
        "exception returns in 16-bit code used as far jumps (firmware trampolines)",
        None,
    ),
    count(
        "eret_to_next",
        "exception returns to their own next instruction (Linux's x86 sync_core): no return",
        None,
    ),
    count(
        "exec_returns",
        "returns from an exec's system call, closing the old program's frames",
        None,
    ),
    count("switches", "context switches between guest tasks", None),
    count(
        "lost_marks",
        "LOST records written where the plugin had to guess (a rebuilt stack, a register \
         QEMU would not read)",
        None,
    ),
    count(
        "register_read_failures",
        "register or memory reads QEMU refused where one was needed (an indirect call's \
         target, an exception's return address, an x86 IRET frame): that one event is \
         missing (a LOST record marks a missed call); a few per boot are ordinary",
        None,
    ),
    count(
        "signals",
        "user mode: signal deliveries shown as entries ([SIGALRM] …)",
        None,
    ),
    count(
        "signal_returns",
        "user mode: rt_sigreturns that closed a delivery's entry",
        None,
    ),
    count(
        "unwinds",
        "frames skipped by an unwinder (C++ exceptions, longjmp on x86-64) closed where \
         execution resumed",
        None,
    ),
    count(
        "outer_returns",
        "returns past the bottom of a stack found mid-way (a run from a snapshot), matched \
         after the run to the frames unwound from the stack cookie",
        None,
    ),
    count(
        "resync_cookies",
        "unmatched returns with no frame record to rebuild the stack by (code without frame \
         pointers), where the plugin saved a stack cookie instead of guessing: the frames \
         unwound from it after the run replace the guess",
        None,
    ),
    count(
        "filtered",
        "entries and exits not written because -F/-N left them out (outside every -F \
         function's subtree, or inside a -N function's)",
        None,
    ),
    count(
        "moved_events",
        "events in a guest process's code that another process translated first (QEMU \
         shares one translation of a page among its mappings), recorded at this process's \
         own addresses",
        None,
    ),
    count(
        "time_filtered",
        "calls not written because they were shorter than -t/--time-filter (their longer \
         ancestors are written)",
        None,
    ),
    count(
        "task_conflicts",
        "switches to a task still running on another vCPU: it restarted with an empty stack",
        None,
    ),
    count(
        "tasks_past_cap",
        "tasks first seen while 262,144 contexts were alive (a guest starting tasks that do \
         not end, or whose end the plugin cannot see without the kernel's DWARF or BTF): \
         they share one task, \"(tasks past the cap)\", and the trace is marked INCOMPLETE",
        Some("record a shorter run, or one starting fewer tasks"),
    ),
    count(
        "tasks_ended",
        "tasks whose end the plugin saw (a thread's exit, a Linux task's last switch): their \
         contexts were freed, their frames still open left open as at the end",
        None,
    ),
    count(
        "tasks_unlisted",
        "ended tasks past the 65,536 listed in plugin.tasks: uftrace shows them by PID, not \
         by name, and the trace is marked INCOMPLETE",
        Some("record a shorter run, or one starting fewer tasks"),
    ),
    count(
        "open_frames",
        "frames still open when QEMU exited (the replay shows them unfinished)",
        None,
    ),
    count(
        "lost_records",
        "records not written after the plugin stopped writing (disk full, write error): the \
         trace is marked INCOMPLETE",
        Some("free disk space, or record to another directory"),
    ),
    count(
        "dropped_cookies",
        "stack cookies not written: past the size cap (which counts them with the records) \
         or past 4,096 in a run from a snapshot (a guest starting task after task); the calls \
         open in those contexts are not recovered and the trace is marked INCOMPLETE",
        Some("record again with a larger --max-size, or with fewer tasks started"),
    ),
    count(
        "dropped_maps",
        "user mode: a program's executable file mappings or open files' paths not kept past \
         65,536 of each (a program loading library after library): later libraries' \
         functions are not named and the trace is marked INCOMPLETE",
        Some("record a shorter run"),
    ),
    count(
        "lib_places_dropped",
        "user mode: libraries' placements dropped past 4,096 held at once (a program mapping \
         libraries at new addresses without unmapping them; the first half, the loader and \
         the libraries the program started with, stays): jumps into those still mapped are \
         not shown as tail calls and the trace is marked INCOMPLETE",
        Some("record a shorter run"),
    ),
    count(
        "dropped_proc_events",
        "a Linux guest's process events (starts, execs, mappings, exits) not kept past 32 MiB \
         of them (a guest starting process after process): later processes' functions are \
         not named and the trace is marked INCOMPLETE",
        Some("record a shorter run, or one starting fewer processes"),
    ),
    count(
        "spaces_freed",
        "ended guest processes' address spaces freed past the latest 4,096 kept (a guest \
         starting process after process)",
        None,
    ),
    count(
        "unmoved_events",
        "events in code translated in a freed address space that ran in another process, \
         kept at their translated addresses (the trace is marked INCOMPLETE)",
        None,
    ),
    count(
        "files_past_cap",
        "a Linux guest's mappings of files first mapped after 65,536 guest paths (a guest \
         mapping file after file of new names): not matched across processes, so code \
         another process translated first keeps its addresses (the trace is marked \
         INCOMPLETE)",
        None,
    ),
    count(
        "maps_past_cap",
        "a Linux guest's code mappings dropped past 1,024 in one process (unmapped ones are \
         kept, as their code may still run in another process, and go first; else the \
         oldest of the later half goes)",
        Some("names stay right unless unmoved_past_map_cap is counted too"),
    ),
    count(
        "unmaps_seen",
        "a Linux guest's munmap calls the plugin saw (the kernel's syscall wrapper watched): \
         the mappings there are the first its copy of the process's drops past 1,024",
        None,
    ),
    count(
        "proc_walks",
        "times a Linux guest's processes, their threads and code mappings and its modules \
         were read from guest memory at a switch on (tracing switched on while the guest \
         ran), so that those started while tracing was off are named",
        None,
    ),
    count(
        "proc_walk_spaces",
        "processes those readings found started, exec'd or mapping files while tracing was \
         off (each given a new address space from the switch on)",
        None,
    ),
    count(
        "proc_walk_us",
        "host time those readings took, in microseconds (the guest waits meanwhile)",
        None,
    ),
    count(
        "unmoved_past_map_cap",
        "lookups of code translated in one process and run in another that found nothing in \
         a process which had dropped mappings: those events stay at their translated \
         addresses (the trace is marked INCOMPLETE)",
        Some("record a shorter run, or one whose processes load fewer libraries"),
    ),
];

const fn count(key: &'static str, meaning: &'static str, action: Option<&'static str>) -> Count {
    Count {
        key,
        meaning,
        action,
    }
}

/// The end-of-record lines for the counts a user can act on or must know of: what each
/// means and what to do (`lost_records` is said with the INCOMPLETE warning instead).
pub fn findings(s: &Stats) -> Vec<String> {
    let value = |key: &str| match key {
        "depth_cap_hits" => Some(s.depth_cap_hits),
        "lost_records" => None,
        k => s.other_count(k),
    };
    COUNTS
        .iter()
        .filter_map(|c| {
            let action = c.action?;
            let n = value(c.key).filter(|&n| n > 0)?;
            // The depth the user gave, where the plugin says it.
            let meaning = match (c.key, s.other_count("max_depth")) {
                ("depth_cap_hits", Some(d)) => c
                    .meaning
                    .replace("--max-depth", &format!("--max-depth {d}")),
                _ => c.meaning.to_string(),
            };
            Some(format!(
                "{} {}: {meaning} ({action})",
                c.key,
                indicatif::HumanCount(n)
            ))
        })
        .collect()
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub complete: bool,
    pub target: Option<String>,
    pub clock: Option<String>,
    pub vcpus: Option<u32>,
    pub tids: Vec<u32>,
    pub events: u64,
    pub calls: u64,
    pub returns: u64,
    pub resyncs: u64,
    pub unmatched_returns: u64,
    pub depth_cap_hits: u64,
    pub bytes: u64,
    /// Records the plugin could not write (after it stopped writing).
    pub lost_records: u64,
    /// Why the plugin stopped writing before the end (a write error, the disk filling up).
    pub stopped: Option<String>,
    /// The plugin stopped writing at the size cap (`max_size`).
    pub size_capped: bool,
    /// Problems the plugin met (`error=` lines).
    pub errors: Vec<String>,
    /// Keys this version does not know, in file order.
    pub other: Vec<(String, String)>,
}

impl Stats {
    /// A count the plugin reported that this version keeps under `other`.
    pub fn other_count(&self, key: &str) -> Option<u64> {
        self.other_value(key).and_then(|v| v.parse().ok())
    }

    /// A line of `plugin.stats` that is not a count, as written.
    pub fn other_value(&self, key: &str) -> Option<&str> {
        self.other
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Why the trace is not complete although the plugin reported: what it said, in one
    /// line (`None` when it is complete). `cap` says where the size cap came from (`--max-size
    /// 500M`), for a plugin that stopped there.
    pub fn incomplete_reason(&self, cap: Option<&str>) -> Option<String> {
        if self.complete {
            return None;
        }
        if self.size_capped {
            return Some(self.capped_reason(cap));
        }
        let mut why: Vec<String> = self.stopped.iter().cloned().collect();
        why.extend(self.errors.iter().cloned());
        if why.is_empty() {
            why.push("the plugin did not report the recording as complete".into());
        }
        let mut text = why.join("; ");
        if self.lost_records > 0 {
            text.push_str(&format!(
                "; {} records after that point were not written (each task's file ends with a \
                 LOST record there)",
                self.lost_records
            ));
        }
        Some(text)
    }

    /// The size cap's reason: what the trace holds, and where to go next.
    fn capped_reason(&self, cap: Option<&str>) -> String {
        let mut text = format!(
            "the size cap ({}) was reached: the trace holds the run up to that point",
            cap.unwrap_or("max_size")
        );
        if self.lost_records > 0 {
            text.push_str(&format!(
                " ({} later records not written)",
                self.lost_records
            ));
        }
        for e in &self.errors {
            text.push_str(&format!("; {e}"));
        }
        text.push_str(
            "; record again with a larger --max-size (or none), or record less: --max-depth N, \
             or a guest that ends sooner",
        );
        text
    }

    /// Whether the plugin ran in a user-mode QEMU (`mode=user`): tasks are the guest's
    /// threads, by their thread ids.
    pub fn is_user_mode(&self) -> bool {
        self.other.iter().any(|(k, v)| k == "mode" && v == "user")
    }

    /// What uftrace's time columns count, said where the trace's times are not
    /// nanoseconds (`None` for the wall clock): uftrace prints every duration as time.
    pub fn clock_unit_note(&self) -> Option<&'static str> {
        if self.clock.as_deref() != Some("insn") {
            return None;
        }
        Some(if self.vcpus.unwrap_or(1) > 1 {
            "clock insn: times count each vCPU's guest instructions, not nanoseconds \
             (1 us = 1,000 instructions; not comparable across vCPUs)"
        } else {
            "clock insn: times count guest instructions, not nanoseconds \
             (1 us = 1,000 instructions, -t 1ms = 1,000,000)"
        })
    }

    /// The clock in a few words, for the `info` file's version line (`uftrace info`'s
    /// "program version", and the metadata of `dump --chrome`).
    pub fn clock_words(&self) -> Option<&'static str> {
        match self.clock.as_deref()? {
            "insn" => Some("clock insn: times count guest instructions, not ns"),
            "wall" => Some("clock wall: times are host nanoseconds"),
            _ => None,
        }
    }

    /// Parses the text; malformed lines are kept under `other` rather than failing.
    pub fn parse(text: &str) -> Stats {
        let mut s = Stats::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let Some((k, v)) = line.split_once('=') else {
                s.other.push((line.to_string(), String::new()));
                continue;
            };
            let num = || v.trim().parse::<u64>().ok();
            let ok = match k {
                "complete" => {
                    s.complete = v == "1";
                    true
                }
                "target" => {
                    s.target = Some(v.to_string());
                    true
                }
                "clock" => {
                    s.clock = Some(v.to_string());
                    true
                }
                "vcpus" => v.parse().map(|n| s.vcpus = Some(n)).is_ok(),
                "tids" => {
                    let tids: Result<Vec<u32>, _> = v
                        .split(',')
                        .filter(|t| !t.is_empty())
                        .map(str::parse)
                        .collect();
                    tids.map(|t| s.tids = t).is_ok()
                }
                "events" => num().map(|n| s.events = n).is_some(),
                "calls" => num().map(|n| s.calls = n).is_some(),
                "returns" => num().map(|n| s.returns = n).is_some(),
                "resyncs" => num().map(|n| s.resyncs = n).is_some(),
                "unmatched_returns" => num().map(|n| s.unmatched_returns = n).is_some(),
                "depth_cap_hits" => num().map(|n| s.depth_cap_hits = n).is_some(),
                "bytes" => num().map(|n| s.bytes = n).is_some(),
                "lost_records" => num().map(|n| s.lost_records = n).is_some(),
                "size_capped" => {
                    s.size_capped = v == "1";
                    true
                }
                "stopped" => {
                    s.stopped = Some(v.to_string());
                    true
                }
                "error" => {
                    s.errors.push(v.to_string());
                    true
                }
                _ => false,
            };
            // Unknown keys and unparsable values alike are kept as they are.
            if !ok {
                s.other.push((k.to_string(), v.to_string()));
            }
        }
        s
    }

    /// Reads `<dir>/plugin.stats`; `None` when the plugin never wrote it.
    pub fn read(dir: &Path) -> std::io::Result<Option<Stats>> {
        match std::fs::read_to_string(dir.join(STATS_FILE)) {
            Ok(text) => Ok(Some(Stats::parse(&text))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_and_keeps_unknown_keys() {
        let s = Stats::parse(
            "complete=1\ntarget=aarch64\nclock=insn\nvcpus=2\ntids=1,2\nevents=10\ncalls=6\n\
             returns=4\nresyncs=1\nunmatched_returns=0\ndepth_cap_hits=3\nbytes=160\n\
             tb_flushes=7\nvcpus=lots\n",
        );
        assert!(s.complete);
        assert_eq!(s.target.as_deref(), Some("aarch64"));
        assert_eq!(s.vcpus, Some(2));
        assert_eq!(s.tids, [1, 2]);
        assert_eq!((s.events, s.calls, s.returns), (10, 6, 4));
        assert_eq!((s.resyncs, s.depth_cap_hits, s.bytes), (1, 3, 160));
        assert_eq!(
            s.other,
            [
                ("tb_flushes".to_string(), "7".to_string()),
                ("vcpus".into(), "lots".into())
            ]
        );
    }

    /// Every count the engine writes is explained, so the summary never prints (nor the
    /// docs omit) a number nobody explained.
    #[test]
    fn every_engine_count_is_explained() {
        let engine = qemu_uftrace_engine::stats::Stats::default();
        for (key, _) in engine.lines() {
            assert!(COUNTS.iter().any(|c| c.key == key), "{key} unexplained");
        }
    }

    #[test]
    fn findings_show_only_actionable_counts() {
        let s = Stats::parse(
            "complete=1\nclock=insn\nresyncs=85\nunmatched_returns=617\n\
             depth_cap_hits=2857487\nregister_read_failures=11\nswitches=900\nmax_depth=3\n\
             stack_overflows=2\n",
        );
        let f = findings(&s);
        // The depth asked for is no advice to give, and its count is grouped.
        assert_eq!(
            f,
            [
                "depth_cap_hits 2,857,487: calls nested deeper than --max-depth 3, followed but \
                 not recorded (as asked)",
                "stack_overflows 2: calls beyond the 1024 frames the plugin follows (runaway \
                 recursion, or a stack it never saw unwind): not recorded (their frames are \
                 missing from the trace; --max-depth does not help)"
            ]
        );
    }

    #[test]
    fn a_size_cap_says_which_and_where_to_go_next() {
        let s =
            Stats::parse("complete=0\nsize_capped=1\nstopped=max_size reached\nlost_records=12\n");
        assert!(s.size_capped);
        assert_eq!(
            s.incomplete_reason(Some("--max-size 500M")).unwrap(),
            "the size cap (--max-size 500M) was reached: the trace holds the run up to that \
             point (12 later records not written); record again with a larger --max-size (or \
             none), or record less: --max-depth N, or a guest that ends sooner"
        );
        let full = Stats::parse("complete=0\nstopped=No space left on device\n");
        assert_eq!(
            full.incomplete_reason(Some("--max-size 500M")).unwrap(),
            "No space left on device"
        );
        assert_eq!(Stats::parse("complete=1\n").incomplete_reason(None), None);
    }

    #[test]
    fn missing_file_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Stats::read(d.path()).unwrap(), None);
    }
}
