//! Each task's open frames, followed through records that are not written (before
//! `--start-at`'s start, or fallen out of `--keep-last`'s window), and written as entries
//! (at the times they were entered) followed by the `qemu:opened` event when the task's
//! recording proper begins. The writer thread does it, never a vCPU.

use qemu_uftrace_format::record::{decode, encode, RecordType, RECORD_SIZE};
use std::collections::{HashMap, HashSet};

pub type Raw = [u8; RECORD_SIZE];

#[derive(Default)]
pub struct OpenStacks {
    /// Per task, the entry records of its open frames, outermost first.
    stacks: HashMap<u32, Vec<Raw>>,
    /// Tasks whose open frames were written.
    opened: HashSet<u32>,
    /// Open frames written as entries, in all.
    pub written_frames: u64,
}

impl OpenStacks {
    /// Follows every record of `buf` (task `tid`'s).
    pub fn follow_all(&mut self, tid: u32, buf: &[u8]) {
        for raw in buf.chunks_exact(RECORD_SIZE) {
            if let Ok(raw) = <Raw>::try_from(raw) {
                self.follow(tid, raw);
            }
        }
    }

    pub fn follow(&mut self, tid: u32, raw: Raw) {
        let Ok(rec) = decode(&raw) else { return };
        let stack = self.stacks.entry(tid).or_default();
        match rec.kind {
            RecordType::Entry => {
                stack.truncate(rec.depth as usize);
                stack.push(raw);
            }
            RecordType::Exit => stack.truncate(rec.depth as usize),
            _ => {}
        }
    }

    /// The task's open frames as entry records, the first time it is asked, then the
    /// `qemu:opened` event at `time` (no later than the task's next record): where its
    /// recording proper begins. Nothing for a task not seen before (it began after). Where
    /// the innermost frame is the entry into `entered` (the start's function, entered
    /// before the start's time was taken), the recording begins with that entry instead:
    /// the marker goes before it, at its time.
    pub fn open_frames(&mut self, tid: u32, time: u64, entered: Option<u64>) -> Vec<u8> {
        if !self.opened.insert(tid) {
            return Vec::new();
        }
        let Some(mut frames) = self.stacks.remove(&tid) else {
            return Vec::new();
        };
        let top = frames.last().and_then(|raw| decode(raw).ok());
        let begins = top.filter(|r| Some(r.addr) == entered);
        let first = begins.and_then(|_| frames.pop());
        let time = begins.map_or(time, |r| r.time);
        self.written_frames += frames.len() as u64;
        let depth = frames.len() as u32;
        let mut out = frames.concat();
        let opened = qemu_uftrace_format::events::OPENED;
        out.extend_from_slice(&encode(time, RecordType::Event, depth, opened));
        out.extend(first.iter().flatten());
        out
    }

    /// Every task's open frames not written yet, whatever the start (the flight recorder's
    /// window start), each followed by its marker at `time` (no later than any record to
    /// come).
    pub fn all_open(&mut self, time: u64) -> Vec<(u32, Vec<u8>)> {
        let mut tids: Vec<u32> = self.stacks.keys().copied().collect();
        tids.sort_unstable();
        tids.into_iter()
            .map(|t| (t, self.open_frames(t, time, None)))
            .filter(|(_, f)| !f.is_empty())
            .collect()
    }
}
