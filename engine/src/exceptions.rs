//! Exceptions and interrupts in the call graph.
//!
//! An exception entry opens a pseudo-frame (`[irq]`, `[svc]` …, see
//! `qemu_uftrace_format::pseudo`) on the running context's stack, returning to where the
//! exception was taken; the handler's calls nest beneath it, and the exception return
//! (ERET) closes it with whatever the handler left open. Returns never cross it.
//!
//! Early kernel and firmware code also "returns" to its caller by dropping (or keeping) the
//! exception level with ERET to the link register (arm64 `init_kernel_el`), with no
//! exception entry to close. Such an ERET counts as the top frame's return when it goes to
//! that frame's return address and is executed inside that frame's function (near its
//! entry). Without exception entries (a QEMU without the discontinuity callback), returns
//! from interrupt handlers run in vector code, not in the interrupted function, so they never
//! close a frame that way.
//!
//! An ERET leaves the code it runs in for good: functions entered by a jump (tail calls, which
//! nothing returns to) end there. And where exception entries are seen, an ERET to a less
//! privileged level with none open is a hand-over: every entry from a lower level opens one,
//! so the frames open were all opened at the level being left, and nothing returns to them
//! (a firmware starting the next stage, a new task's first return to user space after
//! arm64's `b ret_to_user` or x86's `jmp swapgs_restore_regs_and_return_to_usermode`).

// Defined with the architectures, which decide it; named here too, where it is used.
pub use crate::arch::ExceptionKind;
use crate::guest::GuestView;
use crate::hot::Engine;
use crate::shadow::{Frame, EXECED};

/// How far past a function's entry its own ERET may sit.
const SAME_FUNCTION_WINDOW: u64 = 4096;

/// The longest exception return instruction (arm64's ERET, RISC-V's SRET and MRET; x86's
/// IRETQ is two bytes): an exception return to at most this far past itself goes to its
/// own next instruction.
const MAX_ERET_LEN: u64 = 4;

/// What an exception return did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EretOutcome {
    /// Closed the innermost exception entry (and the handler frames above it).
    ClosedException,
    /// Closed the top frame: an ERET used as a function return.
    ClosedFunction,
    /// Closed the frames entered by a jump on top, the code the ERET left.
    ClosedJumped,
    /// Closed nothing: an exception return used as a far jump (`exception_return_16`), or
    /// to its own next instruction (x86's `iret_to_self`).
    Jumped,
    /// Closed every frame: a hand-over to a less privileged level.
    HandedOver,
    /// Closed the exception entry an exec ran in, and the old program's frames below it
    /// ([`Engine::exec`]): the return goes to the new program.
    ClosedExec,
    /// Nothing to close (a new task's first return to user space, a level drop at boot).
    Nothing,
}

impl Engine {
    /// Opens an exception entry of `kind`, taken where the code will resume at `resume_pc`.
    pub fn exception_entry(&mut self, now: u64, kind: ExceptionKind, resume_pc: u64) {
        let now = self.clamp(now);
        self.stats.exceptions += 1;
        self.open(
            now,
            Frame {
                func: kind.addr(),
                ret_addr: resume_pc,
            },
        );
    }

    /// A return that was pending when an exception or interrupt was taken, settled: to
    /// `landed` where the caller found the interrupted pc right after a call (QEMU takes
    /// interrupts between blocks, so one that comes after a return and before the block it
    /// landed on ran is taken at that block, whose own callback would have seen the
    /// return there), else as a return seen nowhere. A return past the bottom of a stack
    /// found mid-way needs its target (`outer_return`): unseen, it writes nothing, and the
    /// frame recovered for it stays open.
    pub fn ret_interrupted(&mut self, now: u64, landed: Option<u64>, guest: &mut dyn GuestView) {
        match landed {
            Some(target) => self.ret(now, target, guest),
            None => self.ret_unseen(now),
        }
    }

    /// Whether an exception QEMU reported at `from_pc`, whose handler starts at `to_pc`, is the
    /// code going on through another mapping rather than an exception to show: an
    /// instruction fetch fault whose handler is the faulting instruction's own page offset
    /// elsewhere. RISC-V Linux turns its MMU on so (`relocate_enable_mmu` points stvec at the
    /// virtual twin of the instruction after its satp write): no handler runs and nothing
    /// returns from it, and the open calls return to the twins of their return addresses
    /// (the kernel moves `ra` by the same offset), so the stack moves with the code.
    pub fn continues_remapped(&mut self, kind: ExceptionKind, from_pc: u64, to_pc: u64) -> bool {
        const PAGE_OFFSET: u64 = 0xfff;
        if kind != ExceptionKind::InsnAbort
            || from_pc == to_pc
            || (from_pc ^ to_pc) & PAGE_OFFSET != 0
        {
            return false;
        }
        self.stack_mut()
            .shift_return_addresses(to_pc.wrapping_sub(from_pc));
        true
    }

    /// An exception return to `target`, executed at `eret_pc`, at the same or an unknown
    /// level (or where exception entries are not seen).
    pub fn exception_return(&mut self, now: u64, target: u64, eret_pc: u64) -> EretOutcome {
        // An exception return to its own next instruction returns from nothing: the code
        // serializes the CPU, or changes level, and goes on. Linux's x86 `sync_core()`
        // (`iret_to_self`, where the CPU lacks SERIALIZE: QEMU's models do) runs it in the
        // middle of a system call or an interrupt (`text_poke`, a module's alternatives),
        // whose entry it would otherwise close, and every frame above it.
        if target.wrapping_sub(eret_pc).wrapping_sub(1) < MAX_ERET_LEN {
            self.stats.eret_to_next += 1;
            return EretOutcome::Jumped;
        }
        let now = self.clamp(now);
        if let Some(i) = self.stack().innermost_exception() {
            // Exceptions nest, so an ERET leaves the innermost one, wherever it goes.
            return self.leave_exception(now, i, target);
        }
        // The running function: the top frame, or one that entered those above it by jumps.
        let frames = self.stack().frames();
        let jumped = frames.iter().rev().take_while(|f| f.is_jumped()).count();
        let called = frames.len() - jumped;
        if let Some(caller) = called.checked_sub(1) {
            let inside = frames[caller..]
                .iter()
                .any(|f| eret_pc.wrapping_sub(f.func) < SAME_FUNCTION_WINDOW);
            if frames[caller].ret_addr == target && inside {
                self.stats.eret_returns += 1;
                self.close_down_to(now, caller);
                return EretOutcome::ClosedFunction;
            }
        }
        // A stack found mid-way with nothing called since: the exception entry it returns
        // from was open at the start (a task asleep in a system call), for the CLI to match
        // like a return.
        let outer = called == 0 && self.midway;
        if jumped > 0 {
            self.close_down_to(now, called);
            if outer {
                self.outer_return(now, target);
            }
            return EretOutcome::ClosedJumped;
        }
        if outer {
            self.outer_return(now, target);
        }
        EretOutcome::Nothing
    }

    /// The exception entry just opened pushed its return frame at `frame` (a linear
    /// address), in code whose exception return also serves as a far jump
    /// (`Isa::exception_frame`).
    pub fn exception_frame(&mut self, frame: u64) {
        let Some(top) = self.stack().len().checked_sub(1) else {
            return;
        };
        // The entry on top just opened: a frame kept at its depth was an earlier entry's.
        self.live_pushed_frames(top);
        let entry = self.stack().frames()[top];
        self.pushed_frames.push((top, entry, frame));
    }

    /// An exception return to `target`, executed at `eret_pc`, that pops the frame at
    /// `frame`, in code that also uses it as a far jump (x86 16-bit code's IRET: SeaBIOS
    /// enters its 16-bit trampolines by pushing flags, segment and offset and executing
    /// `iretw`, inside the interrupt handler that runs them). It leaves the exception entry
    /// that pushed that frame, wherever it goes; one that pops another frame closes nothing
    /// (the handler goes on, and its frames' returns follow). Taken for the handler's
    /// return, such a jump inside a timer interrupt closed the handler's entry early and, a
    /// few returns later, the whole boot stack. Where no open entry's frame is known (taken
    /// before 16-bit code ran), as `exception_return`.
    pub fn exception_return_16(
        &mut self,
        now: u64,
        target: u64,
        eret_pc: u64,
        frame: u64,
    ) -> EretOutcome {
        self.live_pushed_frames(self.stack().len());
        if self.pushed_frames.is_empty() {
            return self.exception_return(now, target, eret_pc);
        }
        let Some(k) = self.pushed_frames.iter().rposition(|&(_, _, f)| f == frame) else {
            self.stats.eret_jumps += 1;
            return EretOutcome::Jumped;
        };
        let (i, _, _) = self.pushed_frames[k];
        self.pushed_frames.truncate(k);
        let now = self.clamp(now);
        self.leave_exception(now, i, target)
    }

    /// Leaves the exception entry at stack index `i` by an exception return to `target`
    /// (`now` clamped), closing it and everything above it.
    fn leave_exception(&mut self, now: u64, i: usize, target: u64) -> EretOutcome {
        let ret_addr = self.stack().frames()[i].ret_addr;
        if ret_addr != target {
            self.stats.eret_redirects += 1;
        }
        self.stats.exception_returns += 1;
        if ret_addr == EXECED {
            self.stats.exec_returns += 1;
            self.close_down_to(now, 0);
            return EretOutcome::ClosedExec;
        }
        self.close_down_to(now, i);
        EretOutcome::ClosedException
    }

    /// The running task execs (Linux's `begin_new_exec`, inside its `execve`): the frames
    /// below its outermost exception entry, the old program's that made the system call,
    /// are never returned to. The return from that entry, to the new program, closes them
    /// with it, at once rather than when some later return matches nothing.
    ///
    /// Where exception entries are not seen (a QEMU without the discontinuity callback) no
    /// entry marks where the old program's frames end: every frame open is the old
    /// program's or its system call's, so the outermost is marked, and the task's next
    /// return to a less privileged level closes them all (`exception_return_unseen_down`).
    ///
    /// A kernel thread's first exec (`kernel_init` running `/init`) has no program below:
    /// its frames are all the kernel's (upper half), none open on an exception entry, and
    /// each returns where it was called from (`kernel_init` to `ret_from_fork`), which then
    /// returns to user mode, handing the task over (`exception_return_down`). Marking its
    /// outermost frame made that frame's own return match nothing: a LOST record and a
    /// cookie on every Linux boot.
    pub fn exec(&mut self) {
        let frames = self.stack().frames();
        match frames.iter().position(Frame::is_exception) {
            Some(0) => {}
            Some(o) => self.stack_mut().mark_execed(o),
            None if frames.first().is_some_and(|f| f.func >> 63 != 0) => {}
            None => self.stack_mut().mark_execed(0),
        }
    }

    /// An exception return to `target`, executed at `eret_pc`, to a less privileged level,
    /// where exception entries are not seen: one after the task exec'd (its outermost frame
    /// marked by [`Engine::exec`], no entry open) goes to the new program and closes every
    /// frame; any other is an [`Engine::exception_return`]. Without it the old program's
    /// frames, and its system call's down to `begin_new_exec`, stayed open beneath the new
    /// program's until some return matched nothing.
    pub fn exception_return_unseen_down(
        &mut self,
        now: u64,
        target: u64,
        eret_pc: u64,
    ) -> EretOutcome {
        let execed = self
            .stack()
            .frames()
            .first()
            .is_some_and(|f| f.ret_addr == EXECED);
        if !execed || self.stack().innermost_exception().is_some() {
            return self.exception_return(now, target, eret_pc);
        }
        let now = self.clamp(now);
        self.stats.exec_returns += 1;
        self.close_down_to(now, 0);
        EretOutcome::ClosedExec
    }

    /// Drops the pushed frames of exception entries no longer open, and those at depth
    /// `below` or deeper: each was kept with its entry's frame, so one closed (by an
    /// exception return that read no frame, or returns past it) is gone even where another
    /// entry, or a call, opened at its depth since. Entries nest: the first one gone
    /// takes those kept after it along.
    fn live_pushed_frames(&mut self, below: usize) {
        let frames = &self.stack().frames()[..below.min(self.stack().len())];
        let open = |&(i, entry, _): &(usize, Frame, u64)| frames.get(i) == Some(&entry);
        let live = self.pushed_frames.iter().take_while(|e| open(e)).count();
        self.pushed_frames.truncate(live);
    }

    /// An exception return to `target`, executed at `eret_pc`, to a less privileged level,
    /// where exception entries are seen: one that closes no exception entry and returns
    /// from no function hands the vCPU over (see the module's documentation).
    pub fn exception_return_down(&mut self, now: u64, target: u64, eret_pc: u64) -> EretOutcome {
        match self.exception_return(now, target, eret_pc) {
            EretOutcome::Nothing if self.stack().is_empty() => EretOutcome::Nothing,
            EretOutcome::Nothing | EretOutcome::ClosedJumped => {
                self.hand_over(now);
                EretOutcome::HandedOver
            }
            outcome => outcome,
        }
    }

    /// The frames open are never returned to: the next stage starts at depth 0.
    fn hand_over(&mut self, now: u64) {
        let now = self.clamp(now);
        self.close_down_to(now, 0);
    }
}
