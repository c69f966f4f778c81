//! A retpoline's own return, awaited (x86 Linux `__x86_indirect_thunk_<reg>`).
//!
//! The call to the thunk opens the callee's frame; the thunk's own `call 1f` is no call,
//! and the `mov %reg, (%rsp); ret` after it only branches to the callee. An interrupt can
//! be taken between the two: its handler returns many times before the thunk's `ret` runs,
//! and a switch from it runs other tasks, on this vCPU or the task on another one. So the
//! awaited return belongs to the context whose thunk call ran (it is suspended and resumed
//! with the context's stack) and is made at the depth that call ran at (an exception entry
//! is a frame deeper). Any other return is the guest's own. Taking a handler's first return
//! for the thunk's, as a per-vCPU flag did, left the thunk's `ret` to close the callee's
//! frame: a timer interrupt there lost kthreadd's frame in one CI run of the x86_64 boot.

use crate::hot::Engine;

impl Engine {
    /// A retpoline's own call ran in the running context, at the current depth.
    pub fn arm_thunk_return(&mut self) {
        self.thunk_return = Some(self.stack().len());
    }

    /// Whether the running context awaits a retpoline's return (the fast paths leave then).
    #[inline(always)]
    pub fn awaits_thunk_return(&self) -> bool {
        self.thunk_return.is_some()
    }

    /// A return is being settled: whether it is the awaited retpoline's (then no longer
    /// awaited), made at the depth of the thunk's call. A return anywhere deeper leaves it
    /// awaited; one made shallower (the frames it was awaited in were closed meanwhile: a
    /// resync inside the interrupt) ends the wait, so that no later return of the guest's
    /// at that depth is taken for it.
    pub fn take_thunk_return(&mut self) -> bool {
        let depth = self.stack().len();
        match self.thunk_return {
            Some(at) if at >= depth => {
                self.thunk_return = None;
                at == depth
            }
            _ => false,
        }
    }
}
