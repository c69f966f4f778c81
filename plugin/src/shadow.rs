//! Shadow call stacks.
//!
//! A vCPU owns a [`StackSet`]: several stacks, of which one is current. Today a vCPU uses one
//! stack; the set exists so that a later engine can keep one stack per guest task and per
//! exception level, switching only at discontinuities (exception entry/return, a return that
//! matches nothing) — never by reading a register on every event.

/// One open call: the function entered and where it will return to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub func: u64,
    pub ret_addr: u64,
}

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

    /// Pushes without a capacity check.
    ///
    /// # Safety
    /// The stack holds fewer than [`RESERVED_FRAMES`] frames.
    #[inline(always)]
    pub unsafe fn push_reserved(&mut self, frame: Frame) {
        let len = self.frames.len();
        debug_assert!(len < RESERVED_FRAMES && len < self.frames.capacity());
        // SAFETY: the capacity reserved at creation exceeds `len` (contract above).
        unsafe {
            self.frames.as_mut_ptr().add(len).write(frame);
            self.frames.set_len(len + 1);
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

    /// Open frames, outermost first.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }
}

/// Which guest context a stack belongs to. Only [`StackKey::DEFAULT`] is used today.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StackKey {
    /// Exception/privilege level the stack runs at.
    pub level: u8,
    /// Identifies the guest task (e.g. its stack region); 0 when unknown.
    pub task: u64,
}

impl StackKey {
    pub const DEFAULT: StackKey = StackKey { level: 0, task: 0 };
}

/// The stacks of one vCPU. The current one sits inline, so the hot path reaches its frames
/// with no index and no extra pointer; the others wait, boxed, until selected (the set is
/// 32 bytes, so the engine's per-event fields share two cache lines).
#[derive(Debug, Default)]
#[repr(C)]
pub struct StackSet {
    current: ShadowStack,
    waiting: Box<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    others: Vec<(StackKey, ShadowStack)>,
    current_key: StackKey,
}

impl Default for StackKey {
    fn default() -> Self {
        StackKey::DEFAULT
    }
}

impl StackSet {
    #[inline(always)]
    pub fn current(&self) -> &ShadowStack {
        &self.current
    }

    #[inline(always)]
    pub fn current_mut(&mut self) -> &mut ShadowStack {
        &mut self.current
    }

    #[allow(dead_code)] // for the multi-stack engine and tests
    pub fn current_key(&self) -> StackKey {
        self.waiting.current_key
    }

    /// Makes the stack for `key` current, creating it when new.
    #[allow(dead_code)] // for the multi-stack engine and tests
    pub fn select(&mut self, key: StackKey) {
        let w = &mut *self.waiting;
        if key == w.current_key {
            return;
        }
        let next = match w.others.iter().position(|(k, _)| *k == key) {
            Some(i) => w.others.swap_remove(i).1,
            None => ShadowStack::default(),
        };
        let previous = std::mem::replace(&mut self.current, next);
        w.others.push((w.current_key, previous));
        w.current_key = key;
    }

    /// Every stack with its key, for the final accounting.
    pub fn iter(&self) -> impl Iterator<Item = (StackKey, &ShadowStack)> {
        std::iter::once((self.waiting.current_key, &self.current))
            .chain(self.waiting.others.iter().map(|(k, s)| (*k, s)))
    }
}
