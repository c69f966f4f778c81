//! Recovering the call stack when a return matches no saved return address: longjmp back to
//! a setjmp whose frame is gone, a stack we started tracing in the middle, a task switch the
//! engine did not see.
//!
//! Pure planning: [`plan`] reads the guest and the open frames and says which frames stay
//! and which to open; the engine applies the plan (so this module knows nothing of it).

use crate::guest::GuestView;
use crate::shadow::{Frame, ShadowStack};

/// Frame records followed at most: enough for real stacks, bounded for corrupt ones.
const MAX_CHAIN: usize = 64;

/// What to do with the current stack after an unmatched return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Open frames that stay (the outermost `keep`); the others are closed.
    pub keep: usize,
    /// Frames never seen entered, outermost first, to open after that.
    pub open: Vec<Frame>,
    /// Whether the stack is now believed right (false: everything was closed, nothing known).
    pub resynced: bool,
    /// The frames opened are a guess that misses the innermost ones: the innermost frame
    /// record's call entered a function that starts above the landing, so functions
    /// without records lie between (code without frame pointers under a record left
    /// further out, such as the signal frame's record an arm64 handler starts with).
    pub skips_landing: bool,
}

/// One frame record's return address, with the target of the call before it when direct.
#[derive(Debug, Clone, Copy)]
struct Link {
    ret_addr: u64,
    callee: Option<u64>,
}

/// The frame-record chain, innermost first (each record where the architecture keeps it
/// around its frame pointer: `GuestView::frame_record`). Code built without frame pointers leaves
/// anything in the frame-pointer register, so a record only counts when its return address
/// follows a call instruction.
fn frame_chain(guest: &mut dyn GuestView) -> Vec<Link> {
    let mut chain = Vec::new();
    let Some(mut fp) = guest.frame_pointer() else {
        return chain;
    };
    while chain.len() < MAX_CHAIN && fp != 0 && fp % 8 == 0 {
        let Some((next, lr)) = guest.frame_record(fp) else {
            break;
        };
        if lr == 0 {
            break;
        }
        let Some(call) = guest.call_before(lr) else {
            break;
        };
        chain.push(Link {
            ret_addr: lr,
            callee: call.target,
        });
        // Callers' records sit higher on a downward-growing stack; anything else is junk.
        if next <= fp {
            break;
        }
        fp = next;
    }
    chain
}

/// The innermost open frame whose function can contain `pc`: the one with the highest entry
/// not above it (functions do not overlap, so no other open function's entry lies between).
pub(crate) fn containing_frame(stack: &ShadowStack, pc: u64) -> Option<usize> {
    stack
        .frames()
        .iter()
        .enumerate()
        .filter(|(_, f)| f.func <= pc)
        .max_by_key(|(i, f)| (f.func, *i))
        .map(|(i, _)| i)
}

/// How many frames stay when frame `i` does: those its function entered by a jump (tail
/// calls) run in its stack frame and stay with it.
fn with_jumped(stack: &ShadowStack, i: usize) -> usize {
    let jumped = stack.frames()[i + 1..]
        .iter()
        .take_while(|f| f.is_jumped())
        .count();
    i + 1 + jumped
}

/// How to rebuild `stack` after a return to `target` that matched no frame.
pub fn plan(stack: &ShadowStack, target: u64, guest: &mut dyn GuestView) -> Plan {
    let chain = frame_chain(guest);
    // 1. The innermost frame record we already know marks where our stack is still right.
    let known = chain
        .iter()
        .enumerate()
        .find_map(|(k, link)| Some((k, stack.find(link.ret_addr)?)));
    if let Some((k, frame)) = known {
        let mut keep = with_jumped(stack, frame);
        // Functions built without frame pointers leave no record: a longjmp back into one
        // (aarch64 -O2 `main`, entered by `__wrap_main`'s jump) finds the record of a caller
        // further out. The function holding the call before the landing, when open above
        // that frame (and not recursing, where the instance is not known), is still live.
        if k == 0 {
            if let Some(i) = guest
                .call_before(target)
                .and_then(|site| containing_frame(stack, site.pc))
                .filter(|&i| i >= keep)
            {
                let func = stack.frames()[i].func;
                if !stack.frames()[keep..i].iter().any(|f| f.func == func) {
                    keep = with_jumped(stack, i);
                }
            }
        }
        return Plan {
            keep,
            open: frames_of(target, &chain[..k]),
            resynced: true,
            skips_landing: false,
        };
    }
    // 2. Without frame records to go by: a second return from a call an open frame made
    //    (longjmp to setjmp's return address) closes everything that frame called. With
    //    records that match nothing we know, the guest is on another stack (step 3).
    if chain.is_empty() {
        if let Some(site) = guest.call_before(target) {
            if let Some(i) = containing_frame(stack, site.pc) {
                return Plan {
                    keep: i + 1,
                    open: Vec::new(),
                    resynced: true,
                    skips_landing: false,
                };
            }
        }
    }
    // 3. A stack we never saw: close ours, open what the frame records show.
    Plan {
        keep: 0,
        resynced: !chain.is_empty(),
        skips_landing: chain
            .first()
            .and_then(|l| l.callee)
            .is_some_and(|c| c > target),
        open: frames_of(target, &chain),
    }
}

/// Frames we never saw entered, outermost first. An entry is the target of the call before
/// its return address when that call is direct; otherwise any address inside the function
/// names it just as well for uftrace.
fn frames_of(target: u64, chain: &[Link]) -> Vec<Frame> {
    (0..chain.len())
        .rev()
        .map(|k| {
            let inside = if k == 0 {
                target
            } else {
                chain[k - 1].ret_addr
            };
            Frame {
                func: chain[k].callee.unwrap_or(inside),
                ret_addr: chain[k].ret_addr,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{isa, Arch, Isa, Mode};
    use crate::guest::{read_frame_record, CallSite};
    use std::collections::HashMap;

    /// A guest whose memory holds real frame records and call instructions, read the way
    /// the plugin reads them: records at the architecture's slots, calls decoded before
    /// return addresses.
    struct MemoryGuest {
        isa: &'static dyn Isa,
        fp: u64,
        memory: HashMap<u64, u8>,
    }

    impl MemoryGuest {
        fn store(&mut self, addr: u64, bytes: &[u8]) {
            for (i, b) in bytes.iter().enumerate() {
                self.memory.insert(addr + i as u64, *b);
            }
        }
        fn read(&self, addr: u64, out: &mut [u8]) -> Option<()> {
            for (i, b) in out.iter_mut().enumerate() {
                *b = *self.memory.get(&(addr + i as u64))?;
            }
            Some(())
        }
    }

    impl GuestView for MemoryGuest {
        fn frame_pointer(&mut self) -> Option<u64> {
            Some(self.fp)
        }
        fn frame_record(&mut self, fp: u64) -> Option<(u64, u64)> {
            read_frame_record(self.isa, fp, |addr, out| self.read(addr, out))
        }
        fn call_before(&mut self, ret_addr: u64) -> Option<CallSite> {
            let mut before = [0u8; 4];
            self.read(ret_addr - 4, &mut before)?;
            self.isa.call_ending_at(Mode::Bits64, ret_addr, &before)
        }
    }

    /// `jal ra, offset`.
    fn jal_ra(offset: i32) -> [u8; 4] {
        let i = offset as u32;
        let word = ((i >> 20) & 1) << 31
            | ((i >> 1) & 0x3ff) << 21
            | ((i >> 11) & 1) << 20
            | ((i >> 12) & 0xff) << 12
            | 1 << 7
            | 0x6f;
        word.to_le_bytes()
    }

    #[test]
    fn risc_v_frame_records_below_the_frame_pointer() {
        // k calls h (jal at 0x300c, returns to 0x3010), h calls g (jal at 0x200c, returns to
        // 0x2010); g's frame pointer is 0x8000, h's 0x8100. RISC-V keeps each record at
        // [fp - 16] (caller's fp), [fp - 8] (return address).
        let mut g = MemoryGuest {
            isa: isa(Arch::Riscv64),
            fp: 0x8000,
            memory: HashMap::new(),
        };
        g.store(0x200c, &jal_ra(0x1000 - 0x200c)); // jal ra, g (0x1000)
        g.store(0x300c, &jal_ra(0x2000 - 0x300c)); // jal ra, h (0x2000)
        g.store(0x8000 - 16, &0x8100u64.to_le_bytes());
        g.store(0x8000 - 8, &0x2010u64.to_le_bytes());
        g.store(0x8100 - 16, &0u64.to_le_bytes());
        g.store(0x8100 - 8, &0x3010u64.to_le_bytes());
        let plan = plan(&ShadowStack::default(), 0x1040, &mut g);
        assert!(plan.resynced);
        assert_eq!(
            plan.open,
            [
                Frame {
                    func: 0x2000,
                    ret_addr: 0x3010
                },
                Frame {
                    func: 0x1000,
                    ret_addr: 0x2010
                }
            ]
        );
        // The same memory read as AArch64 lays records out ([fp], [fp + 8]) holds none.
        g.isa = isa(Arch::Aarch64);
        let plan = super::plan(&ShadowStack::default(), 0x1040, &mut g);
        assert!(plan.open.is_empty() && !plan.resynced);
    }

    #[test]
    fn a_record_whose_call_entered_a_function_above_the_landing_skips_frames() {
        // AArch64: the only record (at fp 0x8000: no caller record, return to 0x3010) is
        // of a call to 0x2000 (`bl` at 0x300c); the landing at 0x1040 is below it, in a
        // function the record does not show (its own has none).
        let mut g = MemoryGuest {
            isa: isa(Arch::Aarch64),
            fp: 0x8000,
            memory: HashMap::new(),
        };
        let bl = 0x9400_0000u32 | ((0x2000 - 0x300c) / 4) as u32 & 0x03ff_ffff;
        g.store(0x300c, &bl.to_le_bytes());
        g.store(0x8000, &0u64.to_le_bytes());
        g.store(0x8008, &0x3010u64.to_le_bytes());
        let guessed = plan(&ShadowStack::default(), 0x1040, &mut g);
        assert!(guessed.resynced && guessed.skips_landing);
        assert_eq!(
            guessed.open,
            [Frame {
                func: 0x2000,
                ret_addr: 0x3010
            }]
        );
        // Landing inside the function the call entered: the record is its caller's.
        let right = plan(&ShadowStack::default(), 0x2040, &mut g);
        assert!(right.resynced && !right.skips_landing);
    }
}
