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
    /// Problems the plugin met (`error=` lines).
    pub errors: Vec<String>,
    /// Keys this version does not know, in file order.
    pub other: Vec<(String, String)>,
}

impl Stats {
    /// A count the plugin reported that this version keeps under `other`.
    pub fn other_count(&self, key: &str) -> Option<u64> {
        self.other
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.parse().ok())
    }

    /// Why the trace is not complete although the plugin reported: what it said, in one
    /// line (`None` when it is complete).
    pub fn incomplete_reason(&self) -> Option<String> {
        if self.complete {
            return None;
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

    #[test]
    fn missing_file_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Stats::read(d.path()).unwrap(), None);
    }
}
