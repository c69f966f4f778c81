//! The hot path: what runs for every executed call and return of one vCPU.
//!
//! A call pushes a frame and writes an ENTRY; a return whose target is the top frame's
//! return address pops it and writes the EXIT. Everything else (longjmp, lost context,
//! overflow) leaves through [`Engine::ret_slow`], which is cold. The engine works on the
//! running context's stack and writes that context's records; switching contexts (tasks,
//! privilege levels) is the task table's business (`tasks`), done through
//! [`Engine::suspend`] and [`Engine::resume`].

use crate::gates::{Gates, Place, Roots, Watch};
use crate::guest::GuestView;
use crate::shadow::{Frame, ShadowStack, JUMPED, RESERVED_FRAMES};
use crate::stats::Stats;
use crate::timefilter::{Deferred, TimeFilter, Verdict};
use qemu_uftrace_format::record::{encode_word, RecordType, RECORD_SIZE};

/// Frames kept beyond the recorded depth (so their returns still match) before giving up.
pub const HARD_STACK_LIMIT: usize = 16 * 1024;

/// The smallest record buffer the engine works with: whatever a spill gives back (even an
/// empty vector) is grown to this, so that a record always fits after a flush.
pub const MIN_BUFFER_BYTES: usize = 4 * RECORD_SIZE;

/// Takes a full record buffer of task `tid` and gives back an empty one.
pub type Spill = Box<dyn FnMut(u32, Vec<u8>) -> Vec<u8> + Send>;

/// uftrace's scheduler events: a sched-out followed by a sched-in in the same task shows as
/// `linux:schedule`, the time the task was away.
pub const EVENT_SCHED_IN: u64 = 200_001;
pub const EVENT_SCHED_OUT: u64 = 200_002;

/// What a context leaves behind when it stops running on a vCPU.
#[derive(Debug, Default)]
pub struct Suspended {
    pub stack: ShadowStack,
    /// Calls ignored past HARD_STACK_LIMIT whose returns are still to come.
    pub overflow: u64,
    /// The context's latest record time: it resumes no earlier (its file stays sorted even
    /// when the vCPU it moves to counts time differently).
    pub last_time: u64,
    /// The context began before tracing did (`midway`).
    pub midway: bool,
    /// Its open filter and notrace subtrees (`gates`).
    pub roots: Roots,
    /// Its records `-t` holds back until their frames end (`timefilter`).
    pub deferred: Deferred,
    /// The depth at which a retpoline's own return is awaited (`thunks`).
    pub thunk_return: Option<usize>,
    /// Its records from a function's ENTRY on, kept back at the switch away where only
    /// exception entries followed it (`Engine::hold_fresh_entries`): written at its resume.
    pub held: Vec<u8>,
}

/// Call/return tracking and record output for one vCPU. Laid out in C order, what every
/// event touches first (through the stats' call and return counts), so that with the vCPU
/// slot's header an event reads two cache lines of it, not three.
#[repr(C)]
pub struct Engine {
    /// Keeps time monotonic within the file whatever the clock does.
    last_time: u64,
    buf: Vec<u8>,
    /// The running context's open calls.
    stack: ShadowStack,
    /// Below this depth a call or return may take the fast path (`try_call`, `try_ret`): its
    /// frame is recorded, and the stack has room without growing.
    fast_depth: usize,
    /// `events` is not counted here but by [`Engine::stats`], from the records emitted.
    pub stats: Stats,
    /// Frames at this depth or deeper are followed but not recorded (uftrace's max_stack);
    /// 0 with gates, which then decide (`open_beyond`, `close_beyond`). Read off the fast
    /// path only (which goes by `fast_depth`), so after the fields it reads.
    record_depth: usize,
    /// Calls ignored past HARD_STACK_LIMIT; their returns are swallowed one for one.
    overflow: u64,
    /// Records handed to the writer so far.
    spilled: u64,
    /// The task whose records the buffer holds.
    tid: u32,
    spill: Spill,
    /// Whether a function is one uftrace's replay treats as a longjmp (see
    /// [`Engine::close_skipped`]); read on slow paths only.
    is_longjmp: fn(u64) -> bool,
    /// The running context began before tracing did (`midway`): returns past the bottom of
    /// its stack close calls opened before. Last, away from what every event reads.
    pub(crate) midway: bool,
    /// `-F`/`-N` (`gates`); `None` (the common case) costs nothing on any path.
    gates: Option<Box<Gates>>,
    /// Told whether the running context may write frames (see [`Engine::set_watch`]).
    watch: Option<Watch>,
    /// In x86 16-bit code, the open exception entries' return frames: their index in the
    /// stack, their frame there (to tell them from a later entry at that index) and the
    /// linear address of the frame they pushed (`exception_return_16`).
    pub(crate) pushed_frames: Vec<(usize, Frame, u64)>,
    /// `-t` (`timefilter`); `None` (the common case) costs the general path one test of
    /// this field in `emit`, and the fast path nothing.
    time_filter: Option<Box<TimeFilter>>,
    /// The running context's retpoline call whose own return is still to come: the stack
    /// depth it ran at (`thunks`).
    pub(crate) thunk_return: Option<usize>,
    /// Which functions' just-written ENTRY a switch away keeps back ([`Engine::suspend`]):
    /// those with values to read.
    hold_entries: Option<fn(u64) -> bool>,
}

impl Engine {
    /// An engine writing task `tid`'s records into `buf` (grown if it is too small).
    pub fn new(mut buf: Vec<u8>, spill: Spill, record_depth: usize, tid: u32) -> Engine {
        detect_prefetch();
        buf.clear();
        buf.reserve(MIN_BUFFER_BYTES);
        Engine {
            last_time: 0,
            buf,
            stack: ShadowStack::default(),
            record_depth,
            fast_depth: record_depth.min(RESERVED_FRAMES),
            stats: Stats::default(),
            overflow: 0,
            spilled: 0,
            tid,
            spill,
            is_longjmp: |_| false,
            midway: false,
            gates: None,
            watch: None,
            pushed_frames: Vec::new(),
            time_filter: None,
            thunk_return: None,
            hold_entries: None,
        }
    }

    /// Argument values follow their function's ENTRY, read at its first instruction. An
    /// exception taken before that instruction can switch tasks (the first call's page
    /// fault, scheduled away): the switch hands the buffer to the writer, and the ENTRY with
    /// it. With this on, a switch away keeps that ENTRY and what followed it back in the
    /// context (`Suspended::held`) until it resumes, so that the values still find it
    /// (`emit_carriers_after_entry`). `has_values`: whether a function (its entry, in the
    /// space running) has them; only then is the buffer looked at.
    pub fn hold_fresh_entries(&mut self, has_values: Option<fn(u64) -> bool>) {
        self.hold_entries = has_values;
    }

    /// Writes only the subtrees of `filter`'s functions (all when empty), less those of
    /// `notrace`'s, `record_depth` frames deep from each filter root. Given before the
    /// first event. Every event then takes the general path (the fast one writes without
    /// asking), which is cheap beside the writing it saves.
    pub fn set_gates(&mut self, filter: Vec<u64>, notrace: Vec<u64>) {
        self.set_gates_shifted(filter, notrace, None);
    }

    /// As [`Engine::set_gates`], for functions named in the symbol file's space of a kernel
    /// that may run moved (`kaslr`).
    pub fn set_gates_shifted(
        &mut self,
        filter: Vec<u64>,
        notrace: Vec<u64>,
        shift: Option<&'static crate::kaslr::KernelShift>,
    ) {
        let gates = match self.gates.take() {
            // Late functions given first (user mode: at the vCPU's start, before a PIE's
            // own are placed) stay.
            Some(old) => old.with_given(filter, notrace),
            None if filter.is_empty() && notrace.is_empty() => return,
            None => Gates::new(filter, notrace, self.record_depth),
        };
        let gates = match shift {
            Some(s) => gates.with_shift(s),
            None => gates,
        };
        self.install_gates(gates);
    }

    /// Also the functions `late` places while the guest runs (user mode: shared libraries'
    /// `-F`/`-N`), `filtering` when some are filter functions. After [`Engine::set_gates`],
    /// before the first event.
    pub fn add_late_gates(&mut self, late: &'static crate::gates::Late, filtering: bool) {
        let gates = match self.gates.take() {
            Some(g) => *g,
            None => Gates::new(Vec::new(), Vec::new(), self.record_depth),
        };
        self.install_gates(gates.with_late(late, filtering));
    }

    /// The vCPU runs address space `space` now (system mode, a Linux guest's processes
    /// watched): the gates' functions placed per space are asked there.
    pub fn set_space(&mut self, space: crate::spaces::SpaceId) {
        if let Some(g) = self.gates.as_deref_mut() {
            g.set_space(space);
        }
    }

    /// Gates in place (every event then takes the general path, which asks them).
    fn install_gates(&mut self, mut gates: Gates) {
        if let Some(w) = self.watch {
            gates.set_watch(w);
        }
        self.gates = Some(Box::new(gates));
        self.record_depth = 0;
        self.fast_depth = 0;
    }

    /// Tells `watch` whether the running context may write frames ([`Gates::inside`];
    /// always without gates), now and at each change, through every later gates too.
    pub fn set_watch(&mut self, watch: Watch) {
        self.watch = Some(watch);
        match self.gates.as_deref_mut() {
            Some(g) => g.set_watch(watch),
            None => (watch.tell)(watch.token, true),
        }
    }

    /// Writes no call shorter than `threshold` (`-t`; 0: every call), only its longer
    /// ancestors. Given before the first event. The fast path writes without asking, so it
    /// is off (`fast_depth` 0: every event takes the general path, whose `emit` defers);
    /// decided once here, so a run without `-t` runs the fast path as before.
    pub fn set_time_filter(&mut self, threshold: u64) {
        if threshold == 0 {
            return;
        }
        self.time_filter = Some(Box::new(TimeFilter::new(threshold)));
        self.fast_depth = 0;
    }

    /// The time filter, when `-t` was given.
    pub fn time_filter(&self) -> Option<&TimeFilter> {
        self.time_filter.as_deref()
    }

    /// With `-t` (the plugin registers the callbacks that try it only then): the common
    /// call, as [`Engine::try_call`], its entry left waiting in the filter. Changes nothing
    /// and returns false when the general path (`call`) must decide.
    #[inline(always)]
    pub fn try_call_timed(&mut self, now: u64, func: u64, ret_addr: u64) -> bool {
        let depth = self.stack.len();
        if depth >= self.record_depth || depth >= RESERVED_FRAMES || !self.stack.has_room() {
            return false;
        }
        let Some(filter) = self.time_filter.as_deref_mut() else {
            return false;
        };
        if !filter.try_wait_entry(now, depth, func) {
            return false;
        }
        self.stack.push(Frame { func, ret_addr });
        self.last_time = now;
        self.stats.calls += 1;
        true
    }

    /// With `-t`: the common return, to the top frame's return address, of a call shorter
    /// than the threshold whose entry waits last: both go, as `ret` would drop them.
    /// Changes nothing and returns false when `ret` must decide (a longer call is written
    /// there, with its ancestors).
    #[inline(always)]
    pub fn try_ret_timed(&mut self, now: u64, target: u64) -> bool {
        let depth = self.stack.len();
        match self.stack.top() {
            Some(f) if f.ret_addr == target && depth <= self.record_depth => {}
            _ => return false,
        }
        let Some(filter) = self.time_filter.as_deref_mut() else {
            return false;
        };
        if !filter.try_drop_short(now) {
            return false;
        }
        self.stack.pop();
        self.last_time = now;
        self.stats.returns += 1;
        true
    }

    /// Writes the records the time filter holds back for the running context (the entries
    /// of its open frames not yet written, the events among them): at the end of a
    /// recording, so that the frames still open are written as without `-t`.
    pub fn release_waiting(&mut self) {
        let Some(mut filter) = self.time_filter.take() else {
            return;
        };
        for w in filter.drain() {
            self.emit_now(w.time, w.kind, w.depth, w.addr);
        }
        self.time_filter = Some(filter);
    }

    /// Writes what a context that is not running (`tid`'s, waiting in the task table) still
    /// holds back, into its own task's records: the records kept at its switch away
    /// ([`Suspended::held`]), then the time filter's open frames not yet written. At its
    /// end, or the recording's, before it resumes.
    pub fn write_waiting(&mut self, tid: u32, state: &mut Suspended) {
        if state.held.is_empty() && state.deferred.is_empty() {
            return;
        }
        self.flush();
        let own = std::mem::replace(&mut self.tid, tid);
        self.buf.append(&mut state.held);
        for w in state.deferred.drain() {
            self.emit_now(w.time, w.kind, w.depth, w.addr);
        }
        self.flush();
        self.tid = own;
    }

    /// The gates, when `-F`/`-N` were given.
    pub fn gates(&self) -> Option<&Gates> {
        self.gates.as_deref()
    }

    pub(crate) fn gates_mut(&mut self) -> Option<&mut Gates> {
        self.gates.as_deref_mut()
    }

    /// Says which functions uftrace's replay treats as longjmps (by name: `longjmp`,
    /// `siglongjmp`, `__longjmp_chk`).
    pub fn set_longjmp_test(&mut self, is_longjmp: fn(u64) -> bool) {
        self.is_longjmp = is_longjmp;
    }

    /// The counts so far, with the records emitted.
    pub fn stats(&self) -> Stats {
        Stats {
            events: self.spilled + (self.buf.len() / RECORD_SIZE) as u64,
            time_filtered: self.time_filter.as_deref().map_or(0, |f| f.dropped),
            ..self.stats
        }
    }

    /// The running context's open calls.
    pub fn stack(&self) -> &ShadowStack {
        &self.stack
    }

    /// Whether the innermost open frame's ENTRY was written, so that its EXIT will be: within
    /// the depth limit and, with `-F`/`-N`, inside a written subtree. A value read for a
    /// frame that was not goes with no record (`-a` reads every typed function's).
    pub fn top_written(&self) -> bool {
        self.stack
            .len()
            .checked_sub(1)
            .is_some_and(|depth| self.written_at(depth))
    }

    /// Whether the open frame at stack depth `depth` was written ([`Engine::top_written`]).
    pub fn written_at(&self, depth: usize) -> bool {
        depth < self.stack.len()
            && (depth < self.record_depth
                || matches!(
                    self.gates.as_deref().map(|g| g.window(depth)),
                    Some(Place::Written(_))
                ))
    }

    pub(crate) fn stack_mut(&mut self) -> &mut ShadowStack {
        &mut self.stack
    }

    /// The task whose records this engine writes now.
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// The latest time written.
    pub fn last_time(&self) -> u64 {
        self.last_time
    }

    #[inline(always)]
    pub(crate) fn emit(&mut self, time: u64, kind: RecordType, depth: usize, addr: u64) {
        if self.time_filter.is_some() {
            return self.emit_filtered(time, kind, depth, addr);
        }
        self.emit_now(time, kind, depth, addr);
    }

    /// [`Engine::emit`] through the time filter: the record waits, goes, or is written
    /// after everything that waits.
    #[cold]
    #[inline(never)]
    fn emit_filtered(&mut self, time: u64, kind: RecordType, depth: usize, addr: u64) {
        let Some(filter) = self.time_filter.as_deref_mut() else {
            return;
        };
        if filter.offer(time, kind, depth, addr) == Verdict::WriteAll {
            self.release_waiting();
            self.emit_now(time, kind, depth, addr);
        }
    }

    /// Writes a record now, whatever the time filter says.
    #[inline(always)]
    fn emit_now(&mut self, time: u64, kind: RecordType, depth: usize, addr: u64) {
        if !self.has_room() {
            self.flush();
        }
        // SAFETY: `flush` leaves an empty buffer of at least MIN_BUFFER_BYTES.
        unsafe { self.emit_unchecked(time, kind, depth, addr) }
    }

    #[inline(always)]
    fn has_room(&self) -> bool {
        self.buf.capacity() - self.buf.len() >= RECORD_SIZE
    }

    /// # Safety
    /// The buffer has room for a record.
    #[inline(always)]
    unsafe fn emit_unchecked(&mut self, time: u64, kind: RecordType, depth: usize, addr: u64) {
        let len = self.buf.len();
        debug_assert!(self.has_room());
        // SAFETY: there is room for a record (the contract), and its bytes are set here.
        unsafe {
            let p = self.buf.as_mut_ptr().add(len);
            prefetch_for_write(p.wrapping_add(PREFETCH_AHEAD));
            (p as *mut [u64; 2])
                .write_unaligned([time.to_le(), encode_word(kind, depth as u32, addr).to_le()]);
            self.buf.set_len(len + RECORD_SIZE);
        }
    }

    /// An exception taken at `at`, the instruction whose callback opened the top frame just
    /// now: a call that faulted before it ran (x86's `call` pushes its return address, and
    /// the push faults where the stack page is not present yet: a forked child's first write
    /// to its stack, a stack growing into a new page). The handler returns to the call,
    /// which runs again and opens its frame again: this one goes, and what its opening did
    /// is undone, so the call is written once. Its ENTRY goes where it is the last record
    /// written or the last one the time filter holds; a frame the gates left out or too deep
    /// to write goes with its count, and a filter subtree it opened closes. Returns whether
    /// the frame went (not where its ENTRY is no longer last: something came after it).
    pub fn unmake_faulted_call(&mut self, at: u64) -> bool {
        /// The longest x86 call instruction (`call *disp32(base,index)` with prefixes).
        const CALL_MAX: u64 = 15;
        let Some(&top) = self.stack.top() else {
            return false;
        };
        // `at` is the call, in the caller: right before the return address, and not in the
        // callee's first bytes (a small recursive function's own prologue faulting there
        // after its call ran, which looks the same).
        let just_called = !top.is_jumped()
            && !top.is_exception()
            && top.ret_addr > at
            && top.ret_addr - at <= CALL_MAX
            && !(top.func..top.func.saturating_add(CALL_MAX + 1)).contains(&at);
        if !just_called {
            return false;
        }
        if self.take_back_top().is_none() {
            return false;
        }
        self.stats.faulted_calls += 1;
        true
    }

    /// The call on top, just made (nothing ran since it was opened), was into a stub that
    /// jumped on to `func` (another file's PLT entry): it is made again as a call of
    /// `func`, at the same time and to the same return address, and decided anew (`func`
    /// may be a `-F` root the stub was not). False, changing nothing, where it cannot be
    /// taken back ([`Engine::unmake_faulted_call`]'s rules: its ENTRY no longer last).
    pub fn call_through_stub(&mut self, func: u64) -> bool {
        let Some(top) = self.take_back_top() else {
            return false;
        };
        self.stats.jump_entries += 1;
        self.call(self.last_time, func, top.ret_addr);
        true
    }

    /// Takes back the top frame, a call's just opened, and what its opening did (the
    /// [`Engine::unmake_faulted_call`] rules): the frame, or `None` where it cannot.
    fn take_back_top(&mut self) -> Option<Frame> {
        let top = *self.stack.top()?;
        let depth = self.stack.len() - 1;
        if top.is_jumped() || top.is_exception() || self.overflow > 0 {
            return None;
        }
        // Where its opening put the frame, as `open` decided (the gates' roots are as it
        // left them: nothing ran since).
        let place = if depth < self.record_depth {
            Place::Written(depth)
        } else {
            match self.gates.as_deref() {
                Some(g) => g.window(depth),
                None => Place::TooDeep,
            }
        };
        match place {
            Place::Written(d) => {
                if !self.take_back_entry(d, top.func) {
                    return None;
                }
            }
            Place::Filtered => self.stats.filtered = self.stats.filtered.saturating_sub(1),
            Place::TooDeep => {
                self.stats.depth_cap_hits = self.stats.depth_cap_hits.saturating_sub(1)
            }
        }
        self.stack.pop();
        if let Some(gates) = self.gates.as_deref_mut() {
            gates.left(depth);
        }
        // Counted when its callback ran (saturating: a count restarted since, as a forked
        // child's, may not hold it).
        self.stats.calls = self.stats.calls.saturating_sub(1);
        Some(top)
    }

    /// Takes back the ENTRY of `func` at written depth `depth` made at the last time: the
    /// last record the time filter holds, else the last one written. False where it is
    /// neither.
    fn take_back_entry(&mut self, depth: usize, func: u64) -> bool {
        if let Some(filter) = self.time_filter.as_deref_mut() {
            if filter.take_back_entry(self.last_time, depth, func) {
                return true;
            }
        }
        let entry = encode_word(RecordType::Entry, depth as u32, func);
        match self.last_written() {
            Some((time, word)) if word == entry && time == self.last_time => {
                self.buf.truncate(self.buf.len() - RECORD_SIZE);
                true
            }
            _ => false,
        }
    }

    /// The last record made (its time and second word): the last the time filter holds,
    /// else the last in the buffer, where it holds one. What an argument reader checks it
    /// follows (`format::args`).
    fn last_record(&self) -> Option<(u64, u64)> {
        match self.time_filter.as_deref().and_then(|f| f.last()) {
            Some(w) => Some((w.time, encode_word(w.kind, w.depth as u32, w.addr))),
            None => self.last_written(),
        }
    }

    /// Whether the last record made ([`Engine::last_record`]) is an ENTRY of `func`; `None`
    /// where there is none (the buffer was handed over).
    pub fn last_is_entry(&self, func: u64) -> Option<bool> {
        let (_, word) = self.last_record()?;
        Some(
            word & 3 == RecordType::Entry as u64 && word >> 16 == qemu_uftrace_format::addr48(func),
        )
    }

    /// The last record in the buffer (its time and second word), where it holds one.
    fn last_written(&self) -> Option<(u64, u64)> {
        let len = self.buf.len();
        let rec = self.buf.get(len.checked_sub(RECORD_SIZE)?..)?;
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        Some((word(&rec[..8]), word(&rec[8..])))
    }

    /// Writes EVENT records of ids `ids` at the last record's time, right after what was
    /// made (argument carriers, `format::args`): with `-t`, they wait with their frame's
    /// records, and go where it goes.
    #[cold]
    #[inline(never)]
    pub fn emit_carriers(&mut self, ids: impl Iterator<Item = u64>) {
        let time = self.last_time;
        for id in ids {
            self.emit(time, RecordType::Event, 0, id);
        }
    }

    /// Writes EVENT records of ids `ids` right after the last ENTRY of `func` (its time),
    /// where whole exception entries follow that ENTRY in the buffer: an interrupt QEMU
    /// took between the call and the function's first instruction, whose
    /// records sit between them (argument carriers, `format::args`, must follow their
    /// ENTRY). False, nothing written, where anything else follows it, it is no longer in
    /// the buffer, or the buffer has no room.
    #[cold]
    #[inline(never)]
    pub fn emit_carriers_after_entry(&mut self, func: u64, ids: &[u64]) -> bool {
        /// Records looked back through (an interrupt's softirq work can be long).
        const MAX_BACK: usize = 1 << 16;
        let word = |at: usize| second_word(&self.buf, at);
        let (mut at, mut level) = (self.buf.len(), 0usize);
        for _ in 0..MAX_BACK {
            let Some(prev) = at.checked_sub(RECORD_SIZE) else {
                return false;
            };
            at = prev;
            let w = word(at);
            let kind = w & 3;
            if level == 0 {
                if is_entry_of(w, func) {
                    break;
                }
                if kind != RecordType::Exit as u64 || !names_exception(w) {
                    return false;
                }
                level = 1;
                continue;
            }
            if kind == RecordType::Exit as u64 {
                level += 1;
            } else if kind == RecordType::Entry as u64 {
                level -= 1;
                if level == 0 && !names_exception(w) {
                    return false;
                }
            }
        }
        if level != 0 || !is_entry_of(word(at), func) {
            return false;
        }
        let bytes = ids.len() * RECORD_SIZE;
        if self.buf.capacity() - self.buf.len() < bytes {
            return false;
        }
        let time = u64::from_le_bytes(self.buf[at..at + 8].try_into().unwrap_or([0; 8]));
        let mut insert = Vec::with_capacity(bytes);
        for &id in ids {
            insert.extend_from_slice(&time.to_le_bytes());
            insert.extend_from_slice(&encode_word(RecordType::Event, 0, id).to_le_bytes());
        }
        let pos = at + RECORD_SIZE;
        self.buf.splice(pos..pos, insert);
        true
    }

    #[inline(always)]
    pub fn clamp(&mut self, now: u64) -> u64 {
        self.last_time = self.last_time.max(now);
        self.last_time
    }

    /// The common call, with a time from the instruction counter (which never goes back,
    /// so it needs no clamp): shallow enough to record, room in the buffer and the stack.
    /// Changes nothing and returns false when the general path (`call`) must decide. Calls
    /// nothing, so that a callback made of it needs no stack frame.
    #[inline(always)]
    pub fn try_call(&mut self, now: u64, func: u64, ret_addr: u64) -> bool {
        let depth = self.stack.len();
        if depth >= self.fast_depth
            || !self.has_room()
            || !self.stack.push_reserved(Frame { func, ret_addr })
        {
            return false;
        }
        self.last_time = now;
        self.stats.calls += 1;
        // SAFETY: the buffer has room (checked above).
        unsafe { self.emit_unchecked(now, RecordType::Entry, depth, func) };
        true
    }

    /// The common return, to the top frame's return address, with a time as for
    /// [`Engine::try_call`]. Changes nothing and returns false when `ret` must decide.
    #[inline(always)]
    pub fn try_ret(&mut self, now: u64, target: u64) -> bool {
        self.try_ret_top(now, target)
            || (self.stack.top().is_some_and(Frame::is_jumped) && self.try_ret_jumped(now, target))
    }

    /// [`Engine::try_ret`] of the top frame alone (none entered by a jump), calling nothing
    /// (see [`Engine::try_call`]).
    #[inline(always)]
    pub fn try_ret_top(&mut self, now: u64, target: u64) -> bool {
        let depth = self.stack.len();
        // As in `ret`, a return to the top frame's address closes it (calls ignored past the
        // hard limit are only considered when it does not match); within fast_depth its entry
        // was recorded, so its exit is.
        let func = match self.stack.top() {
            Some(f) if f.ret_addr == target && depth <= self.fast_depth && self.has_room() => {
                f.func
            }
            _ => return false,
        };
        self.last_time = now;
        self.stats.returns += 1;
        self.stack.pop();
        // SAFETY: checked above.
        unsafe { self.emit_unchecked(now, RecordType::Exit, depth - 1, func) };
        true
    }

    /// A return to the frame below the innermost frames entered by a jump (tail calls: in
    /// sqlite a million returns), which closes them with it: what `ret` does through
    /// `ret_slow` (there they are no deep return and no longjmp's), without its searches of
    /// the whole stack. Changes nothing and returns false when `ret` must decide: a frame
    /// to close is a longjmp's or an exception's, calls were ignored past the hard limit,
    /// or a frame is deeper than the fast path records.
    #[inline(never)]
    fn try_ret_jumped(&mut self, now: u64, target: u64) -> bool {
        let frames = self.stack.frames();
        if frames.len() > self.fast_depth || self.overflow > 0 || target == JUMPED {
            return false;
        }
        let Some(keep) = self.stack.returning() else {
            return false;
        };
        let is_longjmp = self.is_longjmp;
        let returns = &frames[keep];
        if returns.ret_addr != target
            || returns.is_exception()
            || frames[keep + 1..]
                .iter()
                .any(|f| f.is_exception() || is_longjmp(f.func))
        {
            return false;
        }
        let now = self.clamp(now);
        self.stats.returns += 1;
        self.close_down_to(now, keep);
        true
    }

    /// With `-F`, outside every filtered subtree: a call that opens none is only followed
    /// (its frame pushed, nothing written), as the general path would, at the fast path's
    /// cost. Changes nothing and returns false when `call` must decide. The plugin calls
    /// it only where gates were given (chosen at translation), so it costs no other run.
    #[inline(always)]
    pub fn try_follow_call(&mut self, now: u64, func: u64, ret_addr: u64) -> bool {
        let depth = self.stack.len();
        match self.gates.as_deref_mut() {
            Some(g) => {
                g.refresh();
                if !(g.outside() && !g.may_open(func) && depth < RESERVED_FRAMES) {
                    return false;
                }
            }
            None => return false,
        }
        if !self.stack.push_reserved(Frame { func, ret_addr }) {
            return false;
        }
        self.last_time = now;
        self.stats.calls += 1;
        self.stats.filtered += 1;
        true
    }

    /// The return matching [`Engine::try_follow_call`]: to the top frame's return address,
    /// outside every subtree, so nothing is written. Changes nothing and returns false when
    /// `ret` must decide.
    #[inline(always)]
    pub fn try_follow_ret(&mut self, now: u64, target: u64) -> bool {
        match (self.gates.as_deref(), self.stack.top()) {
            (Some(g), Some(f)) if g.outside() && f.ret_addr == target => {}
            _ => return false,
        }
        self.last_time = now;
        self.stats.returns += 1;
        self.stats.filtered += 1;
        self.stack.pop();
        true
    }

    #[inline]
    pub fn call(&mut self, now: u64, func: u64, ret_addr: u64) {
        let now = self.clamp(now);
        self.stats.calls += 1;
        self.open(now, Frame { func, ret_addr });
    }

    /// A jump from one function to another's entry (a tail call, aarch64 glibc's `b main`):
    /// shown as uftrace shows a tail call, a call nested in the jumper's frame. Nothing
    /// returns to it: it closes when the frame below it returns (`ret`, `ret_unseen`). A jump
    /// made with an exception entry on top (nothing called since it was taken) is the
    /// exception's own code going to its handler (an arm64 vector slot's `b el0t_64_sync`,
    /// `b ret_to_user` after the handler, x86's `jmp error_return`), which the entry's
    /// pseudo-frame stands for: no entry.
    #[cold]
    #[inline(never)]
    pub fn jump_entry(&mut self, now: u64, func: u64) {
        if self.stack.top().is_some_and(Frame::is_exception) {
            return;
        }
        let now = self.clamp(now);
        self.stats.jump_entries += 1;
        self.open(
            now,
            Frame {
                func,
                ret_addr: JUMPED,
            },
        );
    }

    /// [`Engine::jump_entry`]'s common case, calling nothing (as [`Engine::try_call`]):
    /// shallow enough to record, room in the buffer and the stack, no exception entry on
    /// top. Changes nothing and returns false when `jump_entry` must decide.
    #[inline(always)]
    pub fn try_jump_entry(&mut self, now: u64, func: u64) -> bool {
        let depth = self.stack.len();
        if depth >= self.fast_depth
            || !self.has_room()
            || self.stack.top().is_some_and(Frame::is_exception)
            || !self.stack.push_reserved(Frame {
                func,
                ret_addr: JUMPED,
            })
        {
            return false;
        }
        let now = self.clamp(now);
        self.stats.jump_entries += 1;
        // SAFETY: the buffer has room (checked above).
        unsafe { self.emit_unchecked(now, RecordType::Entry, depth, func) };
        true
    }

    /// A far return to `target`, a function's entry (the caller checked): when no open frame
    /// returns there, it is a jump into that function (Linux's head code enters
    /// `x86_64_start_kernel` by `lretq`), nested in the current frame as a tail call is.
    /// Returns whether it was taken so; else it is a return like any other.
    pub fn far_return_entry(&mut self, now: u64, target: u64) -> bool {
        if self.stack.find(target).is_some() || self.stack.top().is_some_and(Frame::is_exception) {
            return false;
        }
        self.jump_entry(now, target);
        true
    }

    /// Makes the top frame, entered by a call whose entry is the last record written, a
    /// call of `func` (its entry record rewritten in place): a call to a stub that jumped on
    /// to `func` (`jumps`). False, changing nothing, where that record is not the last one
    /// in the buffer (written out already, or something came after it) or gates decide.
    pub(crate) fn retarget_top(&mut self, func: u64) -> bool {
        let depth = self.stack.len();
        let Some(top) = self.stack.top().copied() else {
            return false;
        };
        if top.is_jumped() || top.is_exception() || self.gates.is_some() {
            return false;
        }
        // With `-t` the entry waits in the filter, unwritten (it is the filter's last
        // record when nothing came after it).
        if let Some(filter) = self.time_filter.as_deref_mut() {
            if !filter.retarget_last(depth - 1, top.func, func) {
                return false;
            }
            self.stack.pop();
            self.stack.push(Frame { func, ..top });
            return true;
        }
        let len = self.buf.len();
        if len < RECORD_SIZE {
            return false;
        }
        let at = len - RECORD_SIZE + 8;
        let word = encode_word(RecordType::Entry, (depth - 1) as u32, top.func).to_le_bytes();
        if self.buf[at..len] != word {
            return false;
        }
        let word = encode_word(RecordType::Entry, (depth - 1) as u32, func).to_le_bytes();
        self.buf[at..len].copy_from_slice(&word);
        self.stack.pop();
        self.stack.push(Frame { func, ..top });
        true
    }

    /// Pushes a frame, recording it when it is shallow enough.
    #[inline(always)]
    pub(crate) fn open(&mut self, now: u64, frame: Frame) {
        let depth = self.stack.len();
        if depth >= HARD_STACK_LIMIT {
            self.stats.stack_overflows += 1;
            self.overflow += 1;
            return;
        }
        self.stack.push(frame);
        if depth < self.record_depth {
            self.emit(now, RecordType::Entry, depth, frame.func);
        } else {
            self.open_beyond(now, depth, frame.func);
        }
    }

    /// A frame pushed at `depth` past the recorded depth: too deep, or for the gates to say.
    #[cold]
    #[inline(never)]
    fn open_beyond(&mut self, now: u64, depth: usize, func: u64) {
        let Some(gates) = self.gates.as_deref_mut() else {
            self.stats.depth_cap_hits += 1;
            return;
        };
        gates.refresh();
        gates.enter(depth, func);
        match gates.window(depth) {
            Place::Written(d) => self.emit(now, RecordType::Entry, d, func),
            Place::TooDeep => self.stats.depth_cap_hits += 1,
            Place::Filtered => self.stats.filtered += 1,
        }
    }

    /// The frame at `depth` (popped) was past the recorded depth: its exit is written when
    /// its entry was.
    #[cold]
    #[inline(never)]
    fn close_beyond(&mut self, now: u64, depth: usize, func: u64) {
        let Some(gates) = self.gates.as_deref_mut() else {
            return;
        };
        let place = gates.window(depth);
        gates.left(depth);
        match place {
            Place::Written(d) => self.emit(now, RecordType::Exit, d, func),
            Place::TooDeep => {}
            Place::Filtered => self.stats.filtered += 1,
        }
    }

    /// Where a marker is written now, if anywhere.
    fn marker_depth(&self) -> Option<usize> {
        let len = self.stack.len();
        match self.gates.as_deref() {
            None => Some(len.min(self.record_depth)),
            Some(g) => g.marker_depth(len),
        }
    }

    /// Pops the top frame, recording its exit when its entry was recorded.
    #[inline(always)]
    pub(crate) fn close_top(&mut self, now: u64) {
        if let Some(frame) = self.stack.pop() {
            let depth = self.stack.len();
            if depth < self.record_depth {
                self.emit(now, RecordType::Exit, depth, frame.func);
            } else {
                self.close_beyond(now, depth, frame.func);
            }
        }
    }

    #[inline]
    pub fn ret(&mut self, now: u64, target: u64, guest: &mut dyn GuestView) {
        let now = self.clamp(now);
        self.stats.returns += 1;
        if self.stack.top().is_some_and(|f| f.ret_addr == target) {
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
        // An exception entry is never closed by a plain return: its ERET closes it. Frames
        // entered by a jump close with the frame they replaced.
        if self.overflowed_return() {
            return;
        }
        while let Some(top) = self.stack.top().copied().filter(|f| !f.is_exception()) {
            self.close_top(now);
            if !top.is_jumped() {
                break;
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn ret_slow(&mut self, now: u64, target: u64, guest: &mut dyn GuestView) {
        if self.overflowed_return() {
            return;
        }
        // Returns never cross an exception entry: frames below it belong to the code it
        // interrupted, which resumes only through the ERET.
        let floor = self.stack.innermost_exception().map_or(0, |i| i + 1);
        if self.midway && self.stack.is_empty() {
            return self.outer_return(now, target);
        }
        if let Some(i) = self.stack.find(target).filter(|&i| i >= floor) {
            // longjmp, or callees that left without returning: close them all. Frames
            // entered by a jump (tail calls) return with the frame they replaced: no
            // frame was skipped then.
            if !self.stack.frames()[i + 1..].iter().all(Frame::is_jumped) {
                self.stats.deep_returns += 1;
            }
            self.close_landing(now, i, Some((target, guest)));
            return;
        }
        // Only frames entered by a jump above the floor: they were entered from code that
        // set its own return address and made no call (riscv64's `la ra, ret_from_exception;
        // tail syscall_exit_to_user_mode` as a new task starts). The return is theirs.
        let above = &self.stack.frames()[floor..];
        if !above.is_empty() && above.iter().all(Frame::is_jumped) {
            self.close_down_to(now, floor);
            // Over a stack found mid-way, the outermost replaced a frame beneath its bottom
            // (a tail call of a function open before tracing began: glibc's msort ends in
            // `b memcpy`), so the return leaves that frame too: written for the CLI to
            // match, as any return past the bottom.
            if floor == 0 && self.midway {
                self.outer_return(now, target);
            }
            return;
        }
        self.stats.unmatched_returns += 1;
        let plan = crate::resync::plan(&self.stack, target, guest);
        let keep = plan.keep.max(floor);
        if keep == self.stack.len() && plan.open.is_empty() {
            return;
        }
        // No frame record to go by (code without frame pointers), or records that miss the
        // innermost frames: rather than guess, save the context for the CLI to unwind with
        // the guest's tables after the run.
        if (!plan.resynced || plan.skips_landing)
            && keep == 0
            && self.unwind_later(now, target, guest)
        {
            return;
        }
        // A landing the guest's frame records confirm, with nothing opened: a longjmp's.
        let landing = (plan.resynced && plan.open.is_empty()).then_some((target, &mut *guest));
        self.close_landing(now, keep, landing);
        // Frames opened without their entries, or a stack given up: the engine guessed from
        // here on, so say so where uftrace shows it. (Closing down to a frame the guest's
        // frame records still hold, as after a longjmp, is no guess.)
        if !plan.open.is_empty() || !plan.resynced {
            self.mark_lost(now);
        }
        for frame in plan.open {
            self.stats.synthetic_entries += 1;
            self.open(now, frame);
        }
        if plan.resynced {
            self.stats.resyncs += 1;
        }
    }

    /// A resync with nothing to go by, deferred: the guest saves a stack cookie, every open
    /// frame closes, and a marker naming the cookie takes the LOST record's place. From
    /// there the stack is one found mid-way: returns past its bottom are written for the
    /// CLI to match to the unwound frames (`outer_return`). False (nothing changed) where no
    /// cookie was saved, or `-F`/`-N` place depths by filter roots the CLI does not see.
    fn unwind_later(&mut self, now: u64, target: u64, guest: &mut dyn GuestView) -> bool {
        if self.gates.is_some() || self.stack.innermost_exception().is_some() {
            return false;
        }
        let Some(seq) = guest.save_stack(self.tid, target, now) else {
            return false;
        };
        self.stats.resync_cookies += 1;
        self.close_skipped(now, 0);
        self.emit(
            now,
            RecordType::Event,
            0,
            qemu_uftrace_format::cookie::resync_marker(seq),
        );
        self.midway = true;
        true
    }

    /// A return past the bottom of a stack found mid-way (`midway`): it closes a call
    /// opened before tracing began, which the CLI recovers by unwinding after the run. It is
    /// written as an exit at depth 0 whose address is the return's target (the frame's
    /// return address, which the CLI checks the recovered frame against); no frame of this
    /// stack is closed and no guess is made.
    #[cold]
    pub(crate) fn outer_return(&mut self, now: u64, target: u64) {
        self.stats.outer_returns += 1;
        if self.gates.as_deref().is_none_or(Gates::outer_written) {
            self.emit(now, RecordType::Exit, 0, target);
        }
    }

    /// A LOST record at the current depth: uftrace shows "LOST some records" there and
    /// takes the depths of the records that follow as they are.
    pub fn mark_lost(&mut self, now: u64) {
        self.stats.lost_marks += 1;
        if let Some(depth) = self.marker_depth() {
            self.emit(now, RecordType::Lost, depth, 0);
        }
    }

    /// An event record (uftrace's EVENT type) at the current depth.
    pub fn event(&mut self, now: u64, id: u64) {
        let now = self.clamp(now);
        if let Some(depth) = self.marker_depth() {
            self.emit(now, RecordType::Event, depth, id);
        }
    }

    /// Whether a return belongs to a call ignored past HARD_STACK_LIMIT (then swallowed).
    fn overflowed_return(&mut self) -> bool {
        let overflowed = self.overflow > 0;
        if overflowed {
            self.overflow -= 1;
        }
        overflowed
    }

    /// Closes the frames a longjmp (or an unwind) skipped, until only `keep` remain. When
    /// one of them is a function uftrace's replay treats as a longjmp (by name), its
    /// display is put back at setjmp's depth at that entry, and libmcount writes a single
    /// exit after it (at setjmp's depth): so the frames entered after the longjmp (its own
    /// callees) close as usual, the longjmp's frame and those between it and the outermost
    /// skipped frame close without an exit, and the outermost one with its exit. Replay then
    /// draws as for a native trace. See [`Engine::close_landing`] for `report`'s counts.
    pub(crate) fn close_skipped(&mut self, now: u64, keep: usize) {
        self.close_landing(now, keep, None);
    }

    /// [`Engine::close_skipped`] where execution resumes at `landing` (read through the
    /// guest only when a longjmp was skipped): libmcount's single exit is `_setjmp`'s (its
    /// hooked return), which `report` counts as a call of `_setjmp`, so where the call
    /// before the landing is a direct one, the single exit names its target (a PLT entry
    /// in a dynamic program: uftrace goes by its name) instead of the outermost skipped
    /// frame, and `report` counts as for a native trace.
    pub(crate) fn close_landing(
        &mut self,
        now: u64,
        keep: usize,
        landing: Option<(u64, &mut dyn GuestView)>,
    ) {
        let is_longjmp = self.is_longjmp;
        let longjmp = (self.stack.frames().iter().enumerate())
            .skip(keep + 1)
            .find(|(_, f)| is_longjmp(f.func))
            .map(|(j, _)| j);
        if let Some(j) = longjmp {
            self.close_down_to(now, j + 1);
            while self.stack.len() > keep + 1 {
                self.stack.pop();
            }
            if let Some(gates) = self.gates.as_deref_mut() {
                gates.left(self.stack.len());
            }
            let setjmp = landing.and_then(|(at, guest)| guest.callee_before(at));
            if let Some(func) = setjmp {
                self.close_top_as(now, func);
            }
        }
        self.close_down_to(now, keep);
    }

    /// [`Engine::close_top`], with the exit written for `func` instead of the frame's own.
    fn close_top_as(&mut self, now: u64, func: u64) {
        if self.stack.pop().is_some() {
            let depth = self.stack.len();
            if depth < self.record_depth {
                self.emit(now, RecordType::Exit, depth, func);
            } else {
                self.close_beyond(now, depth, func);
            }
        }
    }

    /// Closes frames until only `keep` remain.
    pub fn close_down_to(&mut self, now: u64, keep: usize) {
        while self.stack.len() > keep {
            self.close_top(now);
        }
    }

    /// Hands the filled buffer to the writer, and makes sure the next one has room.
    #[cold]
    pub fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.spilled += (self.buf.len() / RECORD_SIZE) as u64;
            let full = std::mem::take(&mut self.buf);
            self.buf = (self.spill)(self.tid, full);
            self.buf.clear();
        }
        if self.buf.capacity() < MIN_BUFFER_BYTES {
            self.buf.reserve(MIN_BUFFER_BYTES);
        }
    }

    /// User mode, in a forked child process: the buffered records are the parent's (which
    /// writes its own copy), so they are dropped; the call stack carries on as task `tid`'s,
    /// counted from zero.
    pub fn fork_child(&mut self, tid: u32) {
        self.buf.clear();
        if let Some(filter) = self.time_filter.as_deref_mut() {
            filter.forget();
        }
        self.stats = Stats::default();
        self.spilled = 0;
        self.tid = tid;
    }

    /// Stops running the current context: its records go to the writer, its stack is handed
    /// back for the task table to keep.
    pub fn suspend(&mut self) -> Suspended {
        let held = match (self.hold_entries, &self.time_filter) {
            (Some(has_values), None) => self.take_fresh_entry(has_values),
            _ => Vec::new(),
        };
        self.flush();
        // The engine is without a stack until `resume` gives it one (the table does both).
        let mut stack = std::mem::replace(&mut self.stack, ShadowStack::empty());
        stack.suspend();
        Suspended {
            stack,
            overflow: std::mem::take(&mut self.overflow),
            last_time: self.last_time,
            midway: std::mem::take(&mut self.midway),
            roots: (self.gates.as_deref_mut()).map_or_else(Roots::default, Gates::take_roots),
            deferred: (self.time_filter.as_deref_mut())
                .map_or_else(Deferred::default, TimeFilter::suspend),
            thunk_return: self.thunk_return.take(),
            held,
        }
    }

    /// The buffer's tail from the ENTRY of the frame under the innermost open exception
    /// entry, where nothing but exception entries (whole, then the open one) and events
    /// followed it: that function's first instruction may not have run yet. Taken out of
    /// the buffer; empty where there is no such tail (or a long one: then it goes as is).
    fn take_fresh_entry(&mut self, has_values: fn(u64) -> bool) -> Vec<u8> {
        /// The most records kept back (an interrupt's softirq work can be long).
        const MAX_HELD: usize = 4096;
        let frames = self.stack.frames();
        let Some(i) = (1..frames.len())
            .rev()
            .find(|&i| frames[i].is_exception() && !frames[i - 1].is_exception())
        else {
            return Vec::new();
        };
        let func = frames[i - 1].func;
        // Most switches are in a system call made by a function without values.
        if !has_values(func) {
            return Vec::new();
        }
        let n = self.buf.len() / RECORD_SIZE;
        let word = |k: usize| second_word(&self.buf, k * RECORD_SIZE);
        // Whether only exception entries follow record `start`, the innermost still open.
        let fresh = |start: usize| {
            let mut level = 0usize;
            for k in start + 1..n {
                let w = word(k);
                match w & 3 {
                    k if k == RecordType::Event as u64 => {}
                    k if k == RecordType::Entry as u64 => {
                        if level == 0 && !names_exception(w) {
                            return false;
                        }
                        level += 1;
                    }
                    k if k == RecordType::Exit as u64 && level > 0 => level -= 1,
                    _ => return false,
                }
            }
            level > 0
        };
        // The frame's own ENTRY: not the last one of its function where the interrupt's
        // handler called it too (a kernel function with values, re-entered from an irq).
        let Some(start) = (n.saturating_sub(MAX_HELD)..n)
            .rev()
            .filter(|&k| is_entry_of(word(k), func))
            .find(|&k| fresh(k))
        else {
            return Vec::new();
        };
        self.buf.split_off(start * RECORD_SIZE)
    }

    /// Runs context `tid` from its suspended state.
    pub fn resume(&mut self, tid: u32, mut state: Suspended) {
        debug_assert!(self.buf.is_empty(), "suspend flushes");
        // What the switch away kept back comes first (its records are the oldest).
        self.buf.extend_from_slice(&std::mem::take(&mut state.held));
        state.stack.resume();
        self.stack = state.stack;
        self.overflow = state.overflow;
        self.midway = state.midway;
        self.thunk_return = state.thunk_return;
        if let Some(gates) = self.gates.as_deref_mut() {
            gates.set_roots(state.roots);
        }
        if let Some(filter) = self.time_filter.as_deref_mut() {
            filter.resume(state.deferred);
        }
        self.last_time = self.last_time.max(state.last_time);
        self.tid = tid;
    }
}

/// A record's depth bits in its second word: an ENTRY looked back for is matched without
/// them (a filter writes depths of its own).
const DEPTH_BITS: u64 = 0x3ff << 6;

/// The second word (kind, depth, address) of the record at byte `at` of `buf`; 0 past its
/// end.
fn second_word(buf: &[u8], at: usize) -> u64 {
    let b = buf.get(at + 8..at + RECORD_SIZE).unwrap_or(&[0; 8]);
    u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
}

/// Whether second word `w` is an ENTRY of `func`, at whatever depth.
fn is_entry_of(w: u64, func: u64) -> bool {
    w & !DEPTH_BITS == encode_word(RecordType::Entry, 0, func)
}

/// Whether second word `w` names an exception entry's pseudo-function (`[irq]` …).
fn names_exception(w: u64) -> bool {
    Frame {
        func: w >> 16,
        ret_addr: 0,
    }
    .is_exception()
}

/// How far ahead of the write position the record buffer is prefetched. A recycled buffer
/// is cold (the writer thread read it last), and a store to a cold line waits for it: the
/// records of a kernel boot took ~0.1 s that way, streaming stores as much. Fetched 4 KiB
/// (~25 µs) ahead, the lines are there when written; the boot saves 0.05–0.09 s.
const PREFETCH_AHEAD: usize = 4096;

/// Whether this CPU has PREFETCHW (cheaper here than a read prefetch; the encoding is not
/// promised to be harmless on older Intel CPUs, so it is used only when CPUID says so).
#[cfg(all(target_arch = "x86_64", not(miri)))]
static PREFETCHW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Looks up what `prefetch_for_write` may use (at vCPU init, before the vCPU runs).
fn detect_prefetch() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        // Leaf 0x8000_0001 exists on every x86-64 CPU; ECX bit 8 is PRFCHW (3DNowPrefetch).
        let ecx = core::arch::x86_64::__cpuid(0x8000_0001).ecx;
        PREFETCHW.store(ecx & (1 << 8) != 0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Asks for the line at `p`, in a writable state where the CPU allows. A hint: never faults,
/// whatever `p` is.
#[inline(always)]
fn prefetch_for_write(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: prefetches have no architectural effect; PREFETCHW only where CPUID has it.
    unsafe {
        if PREFETCHW.load(std::sync::atomic::Ordering::Relaxed) {
            core::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly))
        } else {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
        }
    };
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: as above.
    unsafe {
        core::arch::asm!("prfm pstl1keep, [{0}]", in(reg) p, options(nostack, preserves_flags, readonly))
    };
    // Miri runs the engine's tests without inline assembly: prefetches are only hints.
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    let _ = p;
}
