//! Recovering the call stack when a return matches no saved return address: longjmp back to
//! a setjmp whose frame is gone, a context switch, a stack we started tracing in the middle.

use crate::hot::Engine;
use crate::shadow::{Frame, ShadowStack};

/// Frame records followed at most: enough for real stacks, bounded for corrupt ones.
const MAX_CHAIN: usize = 64;

/// The call instruction found just before a return address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSite {
    pub pc: u64,
    /// Known for direct calls.
    pub target: Option<u64>,
}

/// Read access to the guest that the slow paths need.
pub trait GuestView {
    /// The frame-pointer register.
    fn frame_pointer(&mut self) -> Option<u64>;
    /// A frame record at `addr`: (caller's frame pointer, return address).
    fn frame_record(&mut self, addr: u64) -> Option<(u64, u64)>;
    /// The call instruction that `ret_addr` returns from, if the instruction before it is one.
    fn call_before(&mut self, ret_addr: u64) -> Option<CallSite>;
}

/// One frame record's return address, with the target of the call before it when direct.
#[derive(Debug, Clone, Copy)]
struct Link {
    ret_addr: u64,
    callee: Option<u64>,
}

/// The frame-record chain, innermost first. Code built without frame pointers leaves
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
fn containing_frame(stack: &ShadowStack, pc: u64) -> Option<usize> {
    stack
        .frames()
        .iter()
        .enumerate()
        .filter(|(_, f)| f.func <= pc)
        .max_by_key(|(i, f)| (f.func, *i))
        .map(|(i, _)| i)
}

/// Rebuilds the current stack after a return to `target` that matched no frame.
pub fn resync(engine: &mut Engine, now: u64, target: u64, guest: &mut dyn GuestView) {
    let chain = frame_chain(guest);
    // 1. The innermost frame record we already know marks where our stack is still right.
    let known = chain.iter().enumerate().find_map(|(k, link)| {
        let frame = engine.stacks.current().find(link.ret_addr)?;
        Some((k, frame))
    });
    if let Some((k, frame)) = known {
        engine.close_down_to(now, frame + 1);
        open_chain(engine, now, target, &chain[..k]);
        engine.stats.resyncs += 1;
        return;
    }
    // 2. Without frame records to go by: a second return from a call an open frame made
    //    (longjmp to setjmp's return address) closes everything that frame called. With
    //    records that match nothing we know, the guest is on another stack (step 3).
    if chain.is_empty() {
        if let Some(site) = guest.call_before(target) {
            if let Some(i) = containing_frame(engine.stacks.current(), site.pc) {
                engine.close_down_to(now, i + 1);
                engine.stats.resyncs += 1;
                return;
            }
        }
    }
    // 3. A stack we never saw: close ours, open what the frame records show.
    engine.close_down_to(now, 0);
    if !chain.is_empty() {
        open_chain(engine, now, target, &chain);
        engine.stats.resyncs += 1;
    }
}

/// Opens frames we never saw entered, outermost first. An entry is the target of the call
/// before its return address when that call is direct; otherwise any address inside the
/// function names it just as well for uftrace.
fn open_chain(engine: &mut Engine, now: u64, target: u64, chain: &[Link]) {
    for k in (0..chain.len()).rev() {
        let inside = if k == 0 {
            target
        } else {
            chain[k - 1].ret_addr
        };
        engine.stats.synthetic_entries += 1;
        engine.open(
            now,
            Frame {
                func: chain[k].callee.unwrap_or(inside),
                ret_addr: chain[k].ret_addr,
            },
        );
    }
}
