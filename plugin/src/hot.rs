//! The hot path: what runs for every executed call and return of one vCPU.
//!
//! A call pushes a frame and writes an ENTRY; a return whose target is the top frame's
//! return address pops it and writes the EXIT. Everything else (longjmp, lost context,
//! overflow) leaves through [`Engine::ret_slow`], which is cold.

use crate::resync::GuestView;
use crate::shadow::{Frame, StackSet};
use crate::stats::Stats;
use qemu_uftrace_format::record::{encode_word, RecordType, RECORD_SIZE};

/// Frames kept beyond the recorded depth (so their returns still match) before giving up.
pub const HARD_STACK_LIMIT: usize = 16 * 1024;

/// Takes a full record buffer and gives back an empty one.
pub type Spill = Box<dyn FnMut(Vec<u8>) -> Vec<u8> + Send>;

/// Call/return tracking and record output for one vCPU.
pub struct Engine {
    pub stacks: StackSet,
    pub stats: Stats,
    buf: Vec<u8>,
    spill: Spill,
    /// Frames at this depth or deeper are followed but not recorded (uftrace's max_stack).
    record_depth: usize,
    /// Calls ignored past HARD_STACK_LIMIT; their returns are swallowed one for one.
    overflow: u64,
    /// Keeps time monotonic within the file whatever the clock does.
    last_time: u64,
}

impl Engine {
    pub fn new(buf: Vec<u8>, spill: Spill, record_depth: usize) -> Engine {
        Engine {
            stacks: StackSet::default(),
            stats: Stats::default(),
            buf,
            spill,
            record_depth,
            overflow: 0,
            last_time: 0,
        }
    }

    #[inline(always)]
    fn emit(&mut self, time: u64, kind: RecordType, depth: usize, addr: u64) {
        if self.buf.capacity() - self.buf.len() < RECORD_SIZE {
            self.flush();
        }
        self.buf.extend_from_slice(&time.to_le_bytes());
        self.buf
            .extend_from_slice(&encode_word(kind, depth as u32, addr).to_le_bytes());
        self.stats.events += 1;
    }

    #[inline(always)]
    pub(crate) fn clamp(&mut self, now: u64) -> u64 {
        self.last_time = self.last_time.max(now);
        self.last_time
    }

    #[inline]
    pub fn call(&mut self, now: u64, func: u64, ret_addr: u64) {
        let now = self.clamp(now);
        self.stats.calls += 1;
        self.open(now, Frame { func, ret_addr });
    }

    /// Pushes a frame, recording it when it is shallow enough.
    #[inline(always)]
    pub(crate) fn open(&mut self, now: u64, frame: Frame) {
        let depth = self.stacks.current().len();
        if depth >= HARD_STACK_LIMIT {
            self.stats.stack_overflows += 1;
            self.overflow += 1;
            return;
        }
        self.stacks.current_mut().push(frame);
        if depth < self.record_depth {
            self.emit(now, RecordType::Entry, depth, frame.func);
        } else {
            self.stats.depth_cap_hits += 1;
        }
    }

    /// Pops the top frame, recording its exit when its entry was recorded.
    #[inline(always)]
    pub(crate) fn close_top(&mut self, now: u64) {
        if let Some(frame) = self.stacks.current_mut().pop() {
            let depth = self.stacks.current().len();
            if depth < self.record_depth {
                self.emit(now, RecordType::Exit, depth, frame.func);
            }
        }
    }

    #[inline]
    pub fn ret(&mut self, now: u64, target: u64, guest: &mut dyn GuestView) {
        let now = self.clamp(now);
        self.stats.returns += 1;
        if self
            .stacks
            .current()
            .top()
            .is_some_and(|f| f.ret_addr == target)
        {
            self.close_top(now);
        } else {
            self.ret_slow(now, target, guest);
        }
    }

    /// A return whose landing no block saw: most likely the top frame's. If it was not, the
    /// next return that matches nothing resynchronises.
    #[cold]
    #[inline(never)]
    pub fn ret_unseen(&mut self, now: u64) {
        let now = self.clamp(now);
        self.stats.returns += 1;
        self.stats.returns_unseen += 1;
        if self.overflow > 0 {
            self.overflow -= 1;
            return;
        }
        self.close_top(now);
    }

    #[cold]
    #[inline(never)]
    fn ret_slow(&mut self, now: u64, target: u64, guest: &mut dyn GuestView) {
        if self.overflow > 0 {
            self.overflow -= 1;
            return;
        }
        if let Some(i) = self.stacks.current().find(target) {
            // longjmp, or callees that left without returning: close them all.
            self.stats.deep_returns += 1;
            self.close_down_to(now, i);
            return;
        }
        self.stats.unmatched_returns += 1;
        crate::resync::resync(self, now, target, guest);
    }

    /// Closes frames until only `keep` remain.
    pub(crate) fn close_down_to(&mut self, now: u64, keep: usize) {
        while self.stacks.current().len() > keep {
            self.close_top(now);
        }
    }

    /// Hands the filled buffer to the writer.
    #[cold]
    pub fn flush(&mut self) {
        if !self.buf.is_empty() {
            let full = std::mem::take(&mut self.buf);
            self.buf = (self.spill)(full);
            self.buf.clear();
        }
    }
}
