//! What translation hands to the execution callbacks, in the form cheapest to read there.
//!
//! A kernel has a hundred thousand call sites, so per-site data read on every execution
//! misses the cache. A call needs two addresses: they sit in 16-byte entries of an arena that
//! never moves (four to a cache line), interned by call-site address so that retranslated
//! code reuses its entry. A return's landing needs only its own address, which travels in
//! the callback's user-data word.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

/// A call: where it goes (a direct call's target, or the number of the register holding
/// it) and where it returns.
#[repr(C)]
pub struct CallSite {
    pub target: u64,
    pub ret_addr: u64,
}

const CHUNK: usize = 4096;

#[derive(Default)]
struct Arena {
    chunks: Vec<Box<[CallSite]>>,
    used: usize,
    index: HashMap<(u64, u64, u64), &'static CallSite>,
}

// Entries are written once, before any callback can see them, and only read afterwards.
unsafe impl Send for Arena {}

static ARENA: OnceLock<Mutex<Arena>> = OnceLock::new();

/// The entry for the call at `pc`, created on first use.
pub fn call_site(pc: u64, target: u64, ret_addr: u64) -> *mut c_void {
    let mut arena = ARENA
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let key = (pc, target, ret_addr);
    if let Some(site) = arena.index.get(&key) {
        return *site as *const CallSite as *mut c_void;
    }
    if arena.chunks.is_empty() || arena.used == CHUNK {
        let chunk: Box<[CallSite]> = (0..CHUNK)
            .map(|_| CallSite {
                target: 0,
                ret_addr: 0,
            })
            .collect();
        arena.chunks.push(chunk);
        arena.used = 0;
    }
    let used = arena.used;
    let chunk = arena.chunks.last_mut().expect("a chunk was just ensured");
    chunk[used] = CallSite { target, ret_addr };
    let ptr: *const CallSite = &chunk[used];
    arena.used += 1;
    // SAFETY: chunks are never freed or moved (boxed slices inside the arena's Vec).
    let site: &'static CallSite = unsafe { &*ptr };
    arena.index.insert(key, site);
    ptr as *mut c_void
}

/// # Safety
/// `data` came from [`call_site`].
#[inline(always)]
pub unsafe fn call_site_at(data: *mut c_void) -> &'static CallSite {
    unsafe { &*(data as *const CallSite) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_sites_are_interned_and_stable() {
        let a = call_site(0x1000, 0x2000, 0x1004);
        let b = call_site(0x1000, 0x2000, 0x1004);
        assert_eq!(a, b);
        let many: Vec<_> = (0..5000u64)
            .map(|i| call_site(0x10_0000 + i * 4, i, i + 4))
            .collect();
        let s = unsafe { call_site_at(many[4999]) };
        assert_eq!((s.target, s.ret_addr), (4999, 5003));
        assert_eq!(unsafe { call_site_at(a) }.target, 0x2000);
    }
}
