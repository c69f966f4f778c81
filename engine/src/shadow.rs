//! Shadow call stacks: one per guest context (a task, or a vCPU before any task is known).
//! The engine works on the running context's stack; the others wait in the task table
//! (`tasks`), switched only at discontinuities — never by reading a register per event.

/// One open call: the function entered and where it will return to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub func: u64,
    pub ret_addr: u64,
}

/// The return address of a frame entered by a jump rather than a call (a tail call): no
/// return comes back to it; it closes with the frame it replaced, the one below it.
pub const JUMPED: u64 = u64::MAX;

/// The return address of an exception entry whose task exec'd inside it
/// (`Engine::exec`): its return goes to the new program, and closes the old program's
/// frames below it too. Where exception entries are not seen, the task's outermost frame
/// carries it: the next return to a less privileged level closes every frame.
pub const EXECED: u64 = u64::MAX - 1;

impl Frame {
    /// Whether this frame was entered by a jump ([`JUMPED`]).
    #[inline]
    pub fn is_jumped(&self) -> bool {
        self.ret_addr == JUMPED
    }

    /// Whether this frame is an exception entry (`[irq]`, `[svc]` …): its `func` is an
    /// exception pseudo-function's address exactly (48-bit, so no real 64-bit kernel address
    /// equals it). Signal deliveries are not: a longjmp may leave them.
    #[inline]
    pub fn is_exception(&self) -> bool {
        (PSEUDO_BASE..SIGNALS_BASE).contains(&self.func)
    }

    /// Whether this frame is a user-mode signal delivery (`[SIGALRM]` …).
    #[inline]
    pub fn is_signal(&self) -> bool {
        (SIGNALS_BASE..=SIGNALS_LAST).contains(&self.func)
    }
}

const PSEUDO_BASE: u64 = qemu_uftrace_format::pseudo::BASE;
const SIGNALS_LAST: u64 =
    qemu_uftrace_format::pseudo::signal_addr(qemu_uftrace_format::pseudo::MAX_SIGNAL as u64);
const SIGNALS_BASE: u64 =
    qemu_uftrace_format::pseudo::addr(qemu_uftrace_format::pseudo::SIGNAL_BASE);

/// Frames every stack has room for from the start: as deep as uftrace records (16 KiB), so
/// that the hot path pushes recorded frames without a capacity check. Deeper stacks grow.
pub const RESERVED_FRAMES: usize = qemu_uftrace_format::MAX_STACK as usize;

/// Open calls, innermost last. A frame's index is its uftrace depth.
#[derive(Debug)]
pub struct ShadowStack {
    frames: Vec<Frame>,
}

impl Default for ShadowStack {
    fn default() -> Self {
        ShadowStack {
            frames: Vec::with_capacity(RESERVED_FRAMES),
        }
    }
}

impl ShadowStack {
    /// A stack with no room reserved (until [`ShadowStack::resume`]).
    pub fn empty() -> ShadowStack {
        ShadowStack { frames: Vec::new() }
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    #[inline(always)]
    pub fn top(&self) -> Option<&Frame> {
        self.frames.last()
    }

    #[inline(always)]
    pub fn push(&mut self, frame: Frame) {
        self.frames.push(frame);
    }

    /// The hot path's push: a store into the room reserved at creation and at
    /// [`ShadowStack::resume`], never a growth (false, nothing pushed, where there is no
    /// room: a suspended stack), so that the hot path calls nothing.
    #[inline(always)]
    pub fn push_reserved(&mut self, frame: Frame) -> bool {
        if self.frames.len() < self.frames.capacity() {
            self.frames.push(frame);
            true
        } else {
            false
        }
    }

    #[inline(always)]
    pub fn pop(&mut self) -> Option<Frame> {
        self.frames.pop()
    }

    /// Index of the innermost frame that returns to `ret_addr`.
    pub fn find(&self, ret_addr: u64) -> Option<usize> {
        self.frames.iter().rposition(|f| f.ret_addr == ret_addr)
    }

    /// Index of the frame the running function's return closes: the innermost one entered
    /// by a call (or an exception), those above it entered from it by jumps (tail calls),
    /// closed with it. None where every frame was entered by a jump.
    #[inline(always)]
    pub fn returning(&self) -> Option<usize> {
        self.frames.iter().rposition(|f| !f.is_jumped())
    }

    /// Open frames, outermost first.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Gives back the room a waiting stack does not need (a boot has thousands of tasks).
    pub fn suspend(&mut self) {
        self.frames.shrink_to_fit();
    }

    /// Makes room again for [`ShadowStack::push_reserved`] before the stack runs.
    pub fn resume(&mut self) {
        self.frames
            .reserve(RESERVED_FRAMES.saturating_sub(self.frames.len()));
    }

    /// Whether a push would not grow the stack.
    #[inline(always)]
    pub fn has_room(&self) -> bool {
        self.frames.len() < self.frames.capacity()
    }

    /// Whether `push_reserved` may be used up to [`RESERVED_FRAMES`].
    pub fn has_reserve(&self) -> bool {
        self.frames.capacity() >= RESERVED_FRAMES
    }

    /// Moves every open call's return address by `delta` (wrapping): the code they return
    /// to now runs at another address (a new mapping of the same code).
    pub fn shift_return_addresses(&mut self, delta: u64) {
        for f in (self.frames.iter_mut()).filter(|f| !f.is_jumped() && f.ret_addr != EXECED) {
            f.ret_addr = f.ret_addr.wrapping_add(delta);
        }
    }

    /// Marks the frame at `i` as where the task exec'd ([`EXECED`]).
    pub fn mark_execed(&mut self, i: usize) {
        if let Some(f) = self.frames.get_mut(i) {
            f.ret_addr = EXECED;
        }
    }

    /// Index of the innermost exception entry (a pseudo-frame), if one is open.
    pub fn innermost_exception(&self) -> Option<usize> {
        self.frames.iter().rposition(Frame::is_exception)
    }

    /// Index of the innermost signal delivery (a pseudo-frame), if one is open.
    pub fn innermost_signal(&self) -> Option<usize> {
        self.frames.iter().rposition(Frame::is_signal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qemu_uftrace_format::pseudo;

    #[test]
    fn signal_and_exception_frames_are_told_apart() {
        let frame = |func| Frame { func, ret_addr: 0 };
        assert!(frame(pseudo::addr(0)).is_exception() && !frame(pseudo::addr(0)).is_signal());
        let alrm = frame(pseudo::signal_addr(14));
        assert!(alrm.is_signal() && !alrm.is_exception());
        assert!(frame(pseudo::signal_addr(0)).is_signal());
        // A 64-bit kernel address in the top page is neither (records keep 48 bits).
        let top = frame(0xffff_ffff_ffff_f000 | (pseudo::signal_addr(14) & 0xfff));
        assert!(!top.is_signal() && !top.is_exception());
        assert!(!frame(0x40_0000).is_signal());
    }
}
