//! What translation hands to the execution callbacks, in the form cheapest to read there.
//!
//! A kernel has a hundred thousand call sites, so per-site data read on every execution
//! misses the cache (a third of a call's callback time went to that one load). The
//! callback's user-data word costs nothing to read: QEMU compiles it into the call. So a
//! direct call's two addresses are packed into that word when they fit ([`pack`]), and
//! otherwise sit in 16-byte entries of an arena that never moves, interned by call-site
//! address so that retranslated code reuses its entry. A return's landing needs only its
//! own address, which travels in the user-data word.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::spaces::SpaceId;

/// A packed call names its return address by offset within one of two windows of this many
/// bytes (32 GiB: a kernel's text and modules share one), and its target by a signed
/// offset from the return address of `DELTA_BITS` bits (±128 MiB: an arm64 BL's reach).
const WINDOW_BITS: u32 = 35;
const DELTA_BITS: u32 = 28;
const NO_WINDOW: u64 = u64::MAX;
/// The windows' bases, claimed by the first calls translated in them (typically the
/// kernel's physical and virtual addresses). Set before any callback that uses them is
/// registered, never changed after.
static WINDOWS: [AtomicU64; 2] = [AtomicU64::new(NO_WINDOW), AtomicU64::new(NO_WINDOW)];

/// A direct call's target and return address in one word, when they fit: bit 0 the
/// window, bits 1..=28 `target - ret_addr`, bits 29..=63 `ret_addr`'s offset in the window.
pub fn pack(target: u64, ret_addr: u64) -> Option<u64> {
    let delta = target.wrapping_sub(ret_addr) as i64;
    let half = 1i64 << (DELTA_BITS - 1);
    if !(-half..half).contains(&delta) {
        return None;
    }
    let base = ret_addr & !((1u64 << WINDOW_BITS) - 1);
    let window = WINDOWS.iter().position(|w| {
        match w.compare_exchange(NO_WINDOW, base, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(current) => current == base,
        }
    })? as u64;
    let delta_field = (delta as u64) & ((1u64 << DELTA_BITS) - 1);
    Some((ret_addr - base) << (DELTA_BITS + 1) | delta_field << 1 | window)
}

/// `(target, ret_addr)` from a word made by [`pack`].
#[inline(always)]
pub fn unpack(word: u64) -> (u64, u64) {
    let base = WINDOWS[(word & 1) as usize].load(Ordering::Relaxed);
    let ret_addr = base + (word >> (DELTA_BITS + 1));
    // Bits 1..=28, sign-extended.
    let delta = ((word as i64) << (63 - DELTA_BITS)) >> (64 - DELTA_BITS);
    (ret_addr.wrapping_add(delta as u64), ret_addr)
}

/// A call: where it goes (a direct call's target, or the number of the register holding
/// it) and where it returns.
#[repr(C)]
pub struct CallSite {
    pub target: u64,
    pub ret_addr: u64,
}

/// Call sites per arena chunk (smaller under Miri, whose tests then still cross chunks in
/// reasonable time).
const CHUNK: usize = if cfg!(miri) { 64 } else { 4096 };

/// Entries that never move once made, interned by a key.
struct Arena<K, T: 'static> {
    /// Each chunk is filled up to its capacity and never beyond, so it never reallocates.
    chunks: Vec<Vec<T>>,
    index: HashMap<K, &'static T>,
}

impl<K, T: 'static> Default for Arena<K, T> {
    fn default() -> Self {
        Arena {
            chunks: Vec::new(),
            index: HashMap::new(),
        }
    }
}

// Entries are written once, before any callback can see them, and only read afterwards.
unsafe impl<K, T: 'static> Send for Arena<K, T> {}

impl<K: std::hash::Hash + Eq, T: 'static> Arena<K, T> {
    /// The entry for `key`, made by `make` on first use.
    fn intern(&mut self, key: K, make: impl FnOnce() -> T) -> *mut c_void {
        if let Some(entry) = self.index.get(&key) {
            return *entry as *const T as *mut c_void;
        }
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let chunk = self.chunks.last_mut().expect("a chunk was just ensured");
        chunk.push(make());
        let ptr: *const T = chunk.last().expect("just pushed");
        // SAFETY: a chunk's buffer is never freed, and never moves: it is not pushed to past
        // its capacity.
        let entry: &'static T = unsafe { &*ptr };
        self.index.insert(key, entry);
        ptr as *mut c_void
    }
}

type CallArena = Arena<(u64, u64, u64), CallSite>;
static ARENA: OnceLock<Mutex<CallArena>> = OnceLock::new();

/// The entry for the call at `pc`, created on first use.
pub fn call_site(pc: u64, target: u64, ret_addr: u64) -> *mut c_void {
    ARENA
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .intern((pc, target, ret_addr), || CallSite { target, ret_addr })
}

/// A call or landing in a process's code, and the address space it was translated in
/// (`spaces`): where that space is not the one running, its addresses are moved.
#[repr(C)]
pub struct UserSite {
    /// As [`CallSite`]'s; a landing's own address.
    pub target: u64,
    /// As [`CallSite`]'s; a landing's own address.
    pub ret_addr: u64,
    pub space: SpaceId,
}

type UserArena = Arena<(u64, u64, u64, SpaceId), UserSite>;
static USER_ARENA: OnceLock<Mutex<UserArena>> = OnceLock::new();

/// The entry for the call (or landing) at `pc` translated in `space`, created on first use.
pub fn user_site(pc: u64, target: u64, ret_addr: u64, space: SpaceId) -> *mut c_void {
    USER_ARENA
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .intern((pc, target, ret_addr, space), || UserSite {
            target,
            ret_addr,
            space,
        })
}

/// An `-A`/`-R` read in a process's code (a guest file's function, `PATH:FUNC`), and the
/// address space it was translated in: where another space runs it, its addresses move as
/// a [`UserSite`]'s.
#[repr(C)]
pub struct ValueSite {
    /// The instruction's address: the function's entry, or one of its return instructions.
    pub pc: u64,
    /// The function's entry.
    pub entry: u64,
    /// The function's index in the list of values to read.
    pub func: u64,
    /// The extent of the file's mapping that holds `pc` (the code a PLT entry's jump into
    /// the function came from another file's, outside it).
    pub code: (u64, u64),
    pub space: SpaceId,
}

type ValueArena = Arena<(u64, u64, u64, (u64, u64), SpaceId), ValueSite>;
static VALUE_ARENA: OnceLock<Mutex<ValueArena>> = OnceLock::new();

/// The entry for the read at `pc` of function `func` (entry `entry`) translated in `space`,
/// where `code` maps the file, created on first use.
pub fn value_site(pc: u64, entry: u64, func: u64, code: (u64, u64), space: SpaceId) -> *mut c_void {
    VALUE_ARENA
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .intern((pc, entry, func, code, space), || ValueSite {
            pc,
            entry,
            func,
            code,
            space,
        })
}

/// # Safety
/// `data` came from [`value_site`].
#[inline(always)]
pub unsafe fn value_site_at(data: *mut c_void) -> &'static ValueSite {
    unsafe { &*(data as *const ValueSite) }
}

/// # Safety
/// `data` came from [`user_site`].
#[inline(always)]
pub unsafe fn user_site_at(data: *mut c_void) -> &'static UserSite {
    unsafe { &*(data as *const UserSite) }
}

/// # Safety
/// `data` came from [`call_site`].
#[inline(always)]
pub unsafe fn call_site_at(data: *mut c_void) -> &'static CallSite {
    unsafe { &*(data as *const CallSite) }
}

/// The target field of a call that loads its target from memory (x86 `call *m`): the
/// pointer's size in bytes (2, 4 or 8) in bits 0..8, and above them the base of the code
/// segment that the loaded offset is relative to (real mode's `cs * 16`; 0 elsewhere).
pub fn memory_call_word(size: u8, code_base: u64) -> u64 {
    code_base << 8 | size as u64
}

/// How many bytes a memory call's load reads, from its target field.
#[inline(always)]
pub fn memory_call_width(word: u64) -> usize {
    (word & 0xff) as usize
}

/// Where a memory call goes, from its target field and the value its load read (QEMU leaves
/// the bytes above the access's width undefined).
#[inline(always)]
pub fn memory_call_target(word: u64, loaded: u64) -> u64 {
    let size = (word & 0xff) as u32;
    let offset = if size >= 8 {
        loaded
    } else {
        loaded & ((1u64 << (size * 8)) - 1)
    };
    (word >> 8).wrapping_add(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_calls_take_the_loaded_width_and_code_base() {
        let garbage = 0xdead_beef_0000_0000u64;
        assert_eq!(
            memory_call_target(memory_call_word(8, 0), 0xffff_ffff_8100_0000),
            0xffff_ffff_8100_0000
        );
        assert_eq!(
            memory_call_target(memory_call_word(4, 0), garbage | 0x0010_2030),
            0x0010_2030
        );
        // Real mode: `call *%bx`'s 16-bit offset inside the code segment at 0xf0000.
        assert_eq!(
            memory_call_target(memory_call_word(2, 0xf0000), garbage | 0x1234_5678),
            0xf5678
        );
    }

    #[test]
    fn calls_pack_into_one_word_when_they_fit() {
        let kernel = 0xffff_8000_0800_1000u64;
        let phys = 0x4020_0000u64;
        for (target, ret) in [
            (kernel + 0x7ff_fff0, kernel),
            (kernel - 0x800_0000, kernel),
            (kernel, kernel + 4),
            (phys + 0x100, phys + 0x1_0000),
            (phys - 0x7ff_fffc, phys),
        ] {
            let word = pack(target, ret).expect("fits");
            assert_eq!(unpack(word), (target, ret), "{target:#x} {ret:#x}");
        }
        // Beyond the reach of the delta field, or a third window: the arena's job.
        assert_eq!(pack(kernel + 0x800_0000, kernel), None);
        assert_eq!(pack(0xaaaa_0000_1000, 0xaaaa_0000_2000), None);
    }

    #[test]
    fn call_sites_are_interned_and_stable() {
        let a = call_site(0x1000, 0x2000, 0x1004);
        let b = call_site(0x1000, 0x2000, 0x1004);
        assert_eq!(a, b);
        // More than a chunk's worth: entries of full chunks stay where they were.
        let n = CHUNK as u64 + 904;
        let many: Vec<_> = (0..n)
            .map(|i| call_site(0x10_0000 + i * 4, i, i + 4))
            .collect();
        let s = unsafe { call_site_at(many[n as usize - 1]) };
        assert_eq!((s.target, s.ret_addr), (n - 1, n + 3));
        let first = unsafe { call_site_at(many[0]) };
        assert_eq!((first.target, first.ret_addr), (0, 4));
        assert_eq!(unsafe { call_site_at(a) }.target, 0x2000);
        let u = user_site(0x1000, 0x2000, 0x1004, 3);
        assert_eq!(u, user_site(0x1000, 0x2000, 0x1004, 3));
        assert_ne!(u, user_site(0x1000, 0x2000, 0x1004, 4));
        let s = unsafe { user_site_at(u) };
        assert_eq!((s.target, s.ret_addr, s.space), (0x2000, 0x1004, 3));
    }
}
