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

// Defined with the architectures, which decide it; named here too, where it is used.
pub use crate::arch::ExceptionKind;
use crate::hot::Engine;
use crate::shadow::Frame;

/// How far past a function's entry its own ERET may sit.
const SAME_FUNCTION_WINDOW: u64 = 4096;

/// What an exception return did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EretOutcome {
    /// Closed the innermost exception entry (and the handler frames above it).
    ClosedException,
    /// Closed the top frame: an ERET used as a function return.
    ClosedFunction,
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

    /// A firmware handed the vCPU to the next stage by an exception return that closed
    /// nothing (`Isa::hands_over_from`): its frames are never returned to, and the next
    /// stage starts at depth 0 rather than inside them.
    pub fn hand_over(&mut self, now: u64) {
        let now = self.clamp(now);
        self.close_down_to(now, 0);
    }

    /// An exception return to `target`, executed at `eret_pc`.
    pub fn exception_return(&mut self, now: u64, target: u64, eret_pc: u64) -> EretOutcome {
        let now = self.clamp(now);
        if let Some(i) = self.stack().innermost_exception() {
            // Exceptions nest, so an ERET leaves the innermost one, wherever it goes.
            if self.stack().frames()[i].ret_addr != target {
                self.stats.eret_redirects += 1;
            }
            self.stats.exception_returns += 1;
            self.close_down_to(now, i);
            return EretOutcome::ClosedException;
        }
        let Some(top) = self.stack().top().copied() else {
            // A stack found mid-way: the exception entry it returns from was open at the
            // start (a task asleep in a system call), for the CLI to match like a return.
            if self.midway {
                self.outer_return(now, target);
            }
            return EretOutcome::Nothing;
        };
        let inside_top = eret_pc.wrapping_sub(top.func) < SAME_FUNCTION_WINDOW;
        if top.ret_addr == target && inside_top {
            self.stats.eret_returns += 1;
            self.close_top(now);
            return EretOutcome::ClosedFunction;
        }
        EretOutcome::Nothing
    }
}
