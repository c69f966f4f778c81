//! A Linux guest's process address spaces (`qemu_uftrace_engine::spaces`), kept from the
//! process-map watch's events, for moving the addresses of code one process translated
//! and another runs. Taken at those events, at task switches and on a vCPU's first event
//! in code another space translated (then once per page: each vCPU caches the result).

use qemu_uftrace_engine::spaces::{SpaceId, Spaces};
use std::cell::Cell;
use std::sync::Mutex;

static SPACES: Mutex<Option<Spaces>> = Mutex::new(None);

/// Runs `f` on the spaces (a poisoned lock still holds usable spaces: every change to them
/// is completed before anything can panic).
pub fn with<R>(f: impl FnOnce(&mut Spaces) -> R) -> R {
    let mut guard = SPACES.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Spaces::default))
}

thread_local! {
    /// The space of the code this thread's vCPU runs, for the translator, which is not told
    /// which vCPU it translates for. QEMU runs each vCPU on a thread of its own (MTTCG,
    /// its default for these guests); with one thread for all (`thread=single`, icount)
    /// this is the space of the vCPU that last changed it or returned to user space.
    static RUNNING: Cell<SpaceId> = const { Cell::new(0) };
}

/// The vCPU on this thread runs `space` now.
pub fn note_running(space: SpaceId) {
    RUNNING.with(|r| r.set(space));
}

/// The extent of the file mapping that holds `pc` in space `space` (`pc` alone where none
/// does): asked at translation.
pub fn code_extent(space: SpaceId, pc: u64) -> (u64, u64) {
    with(|s| s.mapping_at(space, pc)).unwrap_or((pc, pc.wrapping_add(1)))
}

/// The space a block translated now belongs to (0: unknown).
pub fn translating() -> SpaceId {
    RUNNING.with(Cell::get)
}
