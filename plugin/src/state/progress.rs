//! The live status of a recording, `plugin.status` in the data directory: what the writer
//! wrote so far, rewritten about once a second by the writer thread (never by a vCPU), so
//! that `qemu-uftrace status` can show it from another terminal without writing a byte into
//! the guest's console. Written aside and renamed: a reader never sees half a file.

use qemu_uftrace_format::record::RECORD_SIZE;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const STATUS_FILE: &str = "plugin.status";

/// How often the status is rewritten while recording.
pub const EVERY: Duration = Duration::from_secs(1);

/// How many statuses were written: a vCPU that has held its records since an earlier one
/// hands them to the writer at its next system call (user mode), so that the status counts
/// a program that fills no buffer for minutes (one holds 64 Ki records).
static ROUND: AtomicU64 = AtomicU64::new(0);

/// The current status round (see [`ROUND`]).
pub fn round() -> u64 {
    ROUND.load(Ordering::Relaxed)
}

/// The counts behind one status.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Record bytes written.
    pub bytes: u64,
    /// Tasks with a file.
    pub tasks: usize,
    /// Records that could not be written (the writer stopped on an error).
    pub lost: u64,
}

/// Where the writer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Recording,
    /// The size cap was reached: nothing more is written.
    Capped,
    /// Writing stopped on an error or a full disk: the rest is counted as lost.
    Stopped,
    /// The writer finished (QEMU, or this process image, ended).
    Done,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Recording => "recording",
            State::Capped => "capped",
            State::Stopped => "stopped",
            State::Done => "done",
        }
    }
}

pub struct Progress {
    path: PathBuf,
    tmp: PathBuf,
    started: Instant,
    /// When the status was last written, and the records written then (for the rate).
    last: Instant,
    last_records: u64,
    rate: u64,
    /// Record times count guest instructions on the only vCPU: the largest time seen is how
    /// many it ran (so far as the written buffers tell).
    insn_time: bool,
    insns: u64,
    /// Tracing switches applied when the status was last written: a switch is said at once
    /// (`qemu-uftrace trace` waits for it), not a second later.
    switches: u64,
}

impl Progress {
    pub fn new(dir: &Path, insn_time: bool) -> Progress {
        let now = Instant::now();
        Progress {
            path: dir.join(STATUS_FILE),
            tmp: dir.join(".plugin.status.tmp"),
            started: now,
            last: now,
            last_records: 0,
            rate: 0,
            insn_time,
            insns: 0,
            switches: 0,
        }
    }

    /// Notes a buffer the writer got (its last record's time).
    pub fn saw(&mut self, buf: &[u8]) {
        if !self.insn_time {
            return;
        }
        let last = buf.len() / RECORD_SIZE;
        let time = last
            .checked_sub(1)
            .and_then(|i| buf.get(i * RECORD_SIZE..i * RECORD_SIZE + 8))
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        self.insns = self.insns.max(time);
    }

    /// Whether the status is due again.
    pub fn due(&self) -> bool {
        self.last.elapsed() >= EVERY
            || self.switches != super::switch::SWITCHES.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Rewrites the status file. Best effort: a status that cannot be written costs the
    /// trace nothing, and the trace's own errors are reported at the end.
    pub fn write(&mut self, state: State, counts: Counts) {
        let now = Instant::now();
        let records = counts.bytes / RECORD_SIZE as u64;
        let secs = now.duration_since(self.last).as_secs_f64();
        if secs > 0.0 && state != State::Done {
            self.rate = (records.saturating_sub(self.last_records) as f64 / secs) as u64;
        }
        self.last = now;
        self.last_records = records;
        self.switches = super::switch::SWITCHES.load(std::sync::atomic::Ordering::Acquire);
        let text = self.text(state, counts, now);
        if std::fs::write(&self.tmp, text).is_ok() {
            let _ = std::fs::rename(&self.tmp, &self.path);
        }
        ROUND.fetch_add(1, Ordering::Relaxed);
    }

    fn text(&self, state: State, counts: Counts, now: Instant) -> String {
        let mut text = format!(
            "state={}\npid={}\nelapsed_ms={}\nevents={}\nbytes={}\nevents_per_s={}\ntasks={}\nlost={}\n",
            state.name(),
            std::process::id(),
            now.duration_since(self.started).as_millis(),
            counts.bytes / RECORD_SIZE as u64,
            counts.bytes,
            self.rate,
            counts.tasks,
            counts.lost,
        );
        if self.insn_time {
            text.push_str(&format!("guest_insns={}\n", self.insns));
        }
        text.push_str(&super::switch::lines());
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qemu_uftrace_format::record::{encode, RecordType};

    #[test]
    fn the_status_is_replaced_whole_and_counts_instructions() {
        let dir = std::env::temp_dir().join(format!("qu-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = Progress::new(&dir, true);
        let buf: Vec<u8> = [5u64, 900, 70]
            .iter()
            .flat_map(|&t| encode(t, RecordType::Entry, 0, 0x1000))
            .collect();
        p.saw(&buf);
        p.write(
            State::Recording,
            Counts {
                bytes: 3 * RECORD_SIZE as u64,
                tasks: 2,
                lost: 4,
            },
        );
        let text = std::fs::read_to_string(dir.as_path().join(STATUS_FILE)).unwrap();
        for want in [
            "state=recording\n",
            "\nevents=3\n",
            "\nbytes=48\n",
            "\ntasks=2\n",
            "\nlost=4\n",
            // The last record's time, not the largest in the buffer.
            "\nguest_insns=70\n",
        ] {
            assert!(text.contains(want), "{want:?} in {text}");
        }
        assert!(!dir.as_path().join(".plugin.status.tmp").exists());
        p.write(State::Done, Counts::default());
        let text = std::fs::read_to_string(dir.as_path().join(STATUS_FILE)).unwrap();
        assert!(text.starts_with("state=done\n"), "{text}");
        // Wall-clock records: no instruction count is claimed.
        let mut p = Progress::new(dir.as_path(), false);
        p.saw(&buf);
        p.write(State::Recording, Counts::default());
        let text = std::fs::read_to_string(dir.as_path().join(STATUS_FILE)).unwrap();
        assert!(!text.contains("guest_insns"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
