//! `--start-at FUNC`: nothing is written before FUNC's first entry, and each task's frames
//! open at that moment are written as entries (at the times they were entered) before its
//! first record after it, so that the replay nests. The writer thread follows every task's
//! stack from the records it drops (never a vCPU: the hot path is unchanged).

use super::open_stacks::{OpenStacks, Raw};
use qemu_uftrace_format::record::{decode, RecordType, RECORD_SIZE};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Where the start was reached, set (before the start's time) by the vCPU that reached it.
#[derive(Default)]
pub struct StartPoint {
    /// The address entered: the one entered, not FUNC's addresses as given (a PIE's are
    /// placed only once it runs, `aims`).
    pub addr: AtomicU64,
    /// The task that entered it.
    pub tid: AtomicU32,
}

pub struct StartGate {
    /// The start's time (`u64::MAX`: not reached yet), set by the vCPU that reached it.
    pub start: Arc<AtomicU64>,
    /// Every task's stack, followed through the records held back.
    pub stacks: OpenStacks,
    /// Where the start was reached: the start is the entry into its address at the start's
    /// time; records of the same time before it (a return timed in the block that makes the
    /// call) are still before.
    at: Arc<StartPoint>,
    begun: bool,
}

impl StartGate {
    pub fn new(start: Arc<AtomicU64>, at: Arc<StartPoint>) -> StartGate {
        StartGate {
            start,
            stacks: OpenStacks::default(),
            at,
            begun: false,
        }
    }

    /// What of `buf` (records of task `tid`) is written: nothing before the start (its
    /// entries and exits only move the task's stack), and from the start on, the task's open
    /// frames first, once.
    pub fn pass(&mut self, tid: u32, buf: &[u8]) -> Vec<u8> {
        let start = self.start.load(Ordering::Acquire);
        let addr = qemu_uftrace_format::addr48(self.at.addr.load(Ordering::Acquire));
        let mut out = Vec::new();
        for raw in buf.chunks_exact(RECORD_SIZE) {
            let Ok(raw) = <Raw>::try_from(raw) else {
                continue;
            };
            let Ok(rec) = decode(&raw) else { continue };
            // Records of the start's own time are after it from FUNC's entry on; later
            // ones are after it whatever they are: FUNC's entry is not written when it lies
            // outside every -F subtree (or in a -N one), and another task's buffer may
            // reach the writer before the one holding it.
            if !self.begun && rec.time == start {
                self.begun = rec.kind == RecordType::Entry && rec.addr == addr;
            }
            if rec.time < start || (rec.time == start && !self.begun) {
                self.stacks.follow(tid, raw);
                continue;
            }
            if out.is_empty() {
                // The start's time is the last record before FUNC's first block ran, and
                // that may come after FUNC's entry: the kernel can run between the call and
                // that block (an instruction fetch's page fault). The entry then lies among
                // the open frames, on top of the task that reached the start: the start is
                // before it.
                let entered = (tid == self.at.tid.load(Ordering::Acquire)).then_some(addr);
                out.extend(self.stacks.open_frames(tid, rec.time, entered));
            }
            out.extend_from_slice(&raw);
        }
        out
    }

    /// At the end, once the start was reached: the tasks that never ran after it, with
    /// their open frames (each task's are written once, whether or not it ran again).
    pub fn unwritten(&mut self) -> Vec<(u32, Vec<u8>)> {
        let start = self.start.load(Ordering::Acquire);
        if start == u64::MAX {
            return Vec::new();
        }
        self.stacks.all_open(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qemu_uftrace_format::record::{decode_all, encode};

    fn rec(time: u64, kind: RecordType, depth: u32, addr: u64) -> Vec<u8> {
        encode(time, kind, depth, addr).to_vec()
    }

    fn point(addr: u64, tid: u32) -> Arc<StartPoint> {
        Arc::new(StartPoint {
            addr: AtomicU64::new(addr),
            tid: AtomicU32::new(tid),
        })
    }

    #[test]
    fn the_open_frames_come_first_once() {
        let start = Arc::new(AtomicU64::new(u64::MAX));
        let mut g = StartGate::new(Arc::clone(&start), point(0x60, 0));
        use RecordType::{Entry, Exit};
        let before: Vec<u8> = [
            rec(1, Entry, 0, 0x10),
            rec(2, Entry, 1, 0x20),
            rec(3, Exit, 1, 0x20),
            rec(4, Entry, 1, 0x30),
        ]
        .concat();
        assert!(g.pass(7, &before).is_empty());
        assert!(g.pass(8, &rec(5, Entry, 0, 0x40)).is_empty());
        start.store(10, Ordering::Release);
        // The exit at the start's time comes before the entry into FUNC: not written.
        let out = g.pass(
            7,
            &[
                rec(9, Entry, 2, 0x50),
                rec(10, Exit, 2, 0x50),
                rec(10, Entry, 2, 0x60),
            ]
            .concat(),
        );
        let kinds: Vec<(u64, RecordType, u64)> = (decode_all(&out).unwrap().iter())
            .map(|r| (r.time, r.kind, r.addr))
            .collect();
        // 0x10 and 0x30 open, the marker, then the entry into FUNC.
        let opened = qemu_uftrace_format::events::OPENED;
        assert_eq!(
            kinds,
            [
                (1, Entry, 0x10),
                (4, Entry, 0x30),
                (10, RecordType::Event, opened),
                (10, Entry, 0x60)
            ]
        );
        assert_eq!(g.pass(7, &rec(11, Exit, 2, 0x60)).len(), RECORD_SIZE);
        // Task 8 never ran again: its frame at the end.
        let rest = g.unwritten();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].0, 8);
        let rest: Vec<(u64, u64)> = (decode_all(&rest[0].1).unwrap().iter())
            .map(|r| (r.time, r.addr))
            .collect();
        assert_eq!(rest, [(5, 0x40), (10, opened)]);
        assert_eq!(g.stacks.written_frames, 3);
    }

    /// FUNC outside every `-F` subtree: its entry is never written, and what comes after
    /// its time is, after the task's open frames (those of the subtrees open then).
    #[test]
    fn the_start_comes_without_its_entry() {
        let start = Arc::new(AtomicU64::new(u64::MAX));
        let mut g = StartGate::new(Arc::clone(&start), point(0x60, 0));
        use RecordType::{Entry, Exit};
        assert!(g.pass(7, &rec(1, Entry, 0, 0x10)).is_empty());
        start.store(10, Ordering::Release);
        let out = g.pass(
            7,
            &[
                rec(9, Entry, 1, 0x20),
                rec(10, Exit, 1, 0x20),
                rec(11, Entry, 1, 0x30),
                rec(12, Exit, 1, 0x30),
            ]
            .concat(),
        );
        let times: Vec<(u64, RecordType)> = (decode_all(&out).unwrap().iter())
            .map(|r| (r.time, r.kind))
            .collect();
        // The open frame, the marker, then what came after the start.
        assert_eq!(
            times,
            [(1, Entry), (11, RecordType::Event), (11, Entry), (12, Exit)]
        );
        assert_eq!(g.stacks.written_frames, 1);
    }

    /// The kernel ran between the call into FUNC and FUNC's first block (the page fault of
    /// its first instruction's fetch): the start's time is its last return, after FUNC's
    /// entry. The task that reached the start begins at that entry; another task with the
    /// same function on top begins at the start.
    #[test]
    fn a_fault_between_the_call_and_the_start_leaves_the_entry_first() {
        let start = Arc::new(AtomicU64::new(u64::MAX));
        let mut g = StartGate::new(Arc::clone(&start), point(0x60, 7));
        use RecordType::{Entry, Exit};
        let before = |depth| [rec(1, Entry, 0, 0x10), rec(2, Entry, depth, 0x60)].concat();
        assert!(g.pass(8, &before(1)).is_empty());
        let fault = [rec(3, Entry, 2, 0x90), rec(4, Exit, 2, 0x90)].concat();
        assert!(g.pass(7, &[before(1), fault].concat()).is_empty());
        start.store(4, Ordering::Release);
        let rows = |out: Vec<u8>| -> Vec<(u64, RecordType, u64)> {
            (decode_all(&out).unwrap().iter())
                .map(|r| (r.time, r.kind, r.addr))
                .collect()
        };
        let opened = qemu_uftrace_format::events::OPENED;
        assert_eq!(
            rows(g.pass(7, &rec(5, Entry, 2, 0x70))),
            [
                (1, Entry, 0x10),
                (2, RecordType::Event, opened),
                (2, Entry, 0x60),
                (5, Entry, 0x70)
            ]
        );
        assert_eq!(
            rows(g.pass(8, &rec(6, Exit, 1, 0x60))),
            [
                (1, Entry, 0x10),
                (2, Entry, 0x60),
                (6, RecordType::Event, opened),
                (6, Exit, 0x60)
            ]
        );
        assert_eq!(g.stacks.written_frames, 3);
    }
}
