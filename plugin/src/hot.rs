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

/// Call/return tracking and record output for one vCPU. Laid out in C order, what every
/// event touches first, so that an event reads two or three cache lines, not five.
#[repr(C)]
pub struct Engine {
    /// Keeps time monotonic within the file whatever the clock does.
    last_time: u64,
    buf: Vec<u8>,
    pub stacks: StackSet,
    /// Frames at this depth or deeper are followed but not recorded (uftrace's max_stack).
    record_depth: usize,
    /// Calls ignored past HARD_STACK_LIMIT; their returns are swallowed one for one.
    overflow: u64,
    pub stats: Stats,
    spill: Spill,
}

impl Engine {
    pub fn new(buf: Vec<u8>, spill: Spill, record_depth: usize) -> Engine {
        Engine {
            last_time: 0,
            buf,
            stacks: StackSet::default(),
            record_depth,
            overflow: 0,
            stats: Stats::default(),
            spill,
        }
    }

    #[inline(always)]
    fn emit(&mut self, time: u64, kind: RecordType, depth: usize, addr: u64) {
        if self.buf.capacity() - self.buf.len() < RECORD_SIZE {
            self.flush();
        }
        let len = self.buf.len();
        // SAFETY: there is room for a record (checked above), and its bytes are set here.
        unsafe {
            store_record(
                self.buf.as_mut_ptr().add(len),
                time,
                encode_word(kind, depth as u32, addr),
            );
            self.buf.set_len(len + RECORD_SIZE);
        }
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
        if !self.overflowed_return() {
            self.close_top(now);
        }
    }

    #[cold]
    #[inline(never)]
    fn ret_slow(&mut self, now: u64, target: u64, guest: &mut dyn GuestView) {
        if self.overflowed_return() {
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

    /// Whether a return belongs to a call ignored past HARD_STACK_LIMIT (then swallowed).
    fn overflowed_return(&mut self) -> bool {
        let overflowed = self.overflow > 0;
        if overflowed {
            self.overflow -= 1;
        }
        overflowed
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
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a plain fence; it orders the streaming stores before the hand-over.
        unsafe {
            core::arch::x86_64::_mm_sfence()
        };
        if !self.buf.is_empty() {
            let full = std::mem::take(&mut self.buf);
            self.buf = (self.spill)(full);
            self.buf.clear();
        }
    }
}

/// Writes one record (time, then the packed word, little-endian) at `p`.
///
/// # Safety
/// `p` is valid for 16 bytes of writes.
#[inline(always)]
unsafe fn store_record(p: *mut u8, time: u64, word: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as the caller promises. Streaming stores: a record is written once and read by
    // the writer thread much later, and a plain store would first fetch every line of a cold
    // buffer (read for ownership) into the vCPU's cache. `flush` fences them.
    unsafe {
        core::arch::x86_64::_mm_stream_si64(p as *mut i64, time as i64);
        core::arch::x86_64::_mm_stream_si64(p.add(8) as *mut i64, word as i64);
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as the caller promises.
    unsafe {
        (p as *mut [u64; 2]).write_unaligned([time.to_le(), word.to_le()])
    };
}
