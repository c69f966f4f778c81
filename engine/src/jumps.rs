//! Jumps through a register (aarch64 `BR`, x86 `JMP *r/m`, RISC-V `JR`), seen where they
//! land: their targets are known only at run time, so the plugin marks each such jump with
//! an inline store of its address and gives a conditional callback to the blocks where
//! one matters (a function's entry, the code after a call). Switch tables and other
//! jumps within a function land elsewhere and cost only that store.

use crate::guest::GuestView;
use crate::hot::Engine;

impl Engine {
    /// A jump through a register into `func`'s entry. From code no function holds (a
    /// nested function's trampoline on the stack) right after the call to it, the call is
    /// one of `func`, as uftrace shows a `-pg` build's; else `func` is entered as by a
    /// direct jump (a PLT entry's jump is never reported: the plugin leaves it out)
    /// ([`Engine::jump_entry`]: `setcontext`'s jump to `makecontext`'s function, a tail
    /// call through a pointer).
    pub fn register_jump_entry(&mut self, now: u64, func: u64, from_stub: bool) {
        if from_stub && self.retarget_top(func) {
            self.stats.jump_entries += 1;
            return;
        }
        self.jump_entry(now, func);
    }

    /// A return that landed at `func`'s entry, which follows no call. Where an open call
    /// returns there, it is that call's return. Otherwise the return was a jump (x86-64
    /// glibc's `setcontext` and `swapcontext` enter `makecontext`'s function by `ret`):
    /// functions entered by a jump that return so close, not the call they nest in
    /// (`makecontext`'s function, or what it tail-called, returning to `__start_context`
    /// inside `swapcontext`, which resumes later), and `func` is entered as by a jump.
    ///
    /// `top_is_stub`: the top frame's code only passes a call on (RISC-V's trampoline
    /// leaves by `jr t0`, which the return-address stack takes for a return): as for
    /// [`Engine::register_jump_entry`], the call to it becomes one of `func`.
    pub fn return_to_entry(&mut self, now: u64, func: u64, top_is_stub: bool) {
        let floor = self.stack().innermost_exception().map_or(0, |i| i + 1);
        let now = self.clamp(now);
        if let Some(i) = self.stack().find(func).filter(|&i| i >= floor) {
            self.stats.returns += 1;
            self.close_skipped(now, i);
            return;
        }
        if top_is_stub && self.retarget_top(func) {
            self.stats.jump_entries += 1;
            return;
        }
        self.stats.returns += 1;
        while self.stack().top().is_some_and(|f| f.is_jumped()) {
            self.close_top(now);
        }
        self.jump_entry(now, func);
    }

    /// A jump through a register to `target`, code right after a call: where an open call
    /// returns to, execution resumes in that frame, as after a return
    /// (`setcontext` back into `swapcontext`'s caller); anywhere else (a switch table's
    /// case after a call) it is no event. Never across an exception entry. A longjmp's
    /// single exit names the call before `target` ([`Engine::close_landing`]).
    pub fn register_jump_landing(&mut self, now: u64, target: u64, guest: &mut dyn GuestView) {
        let floor = self.stack().innermost_exception().map_or(0, |i| i + 1);
        let Some(i) = self.stack().find(target).filter(|&i| i >= floor) else {
            return;
        };
        let now = self.clamp(now);
        self.stats.returns += 1;
        self.close_landing(now, i, Some((target, guest)));
    }
}

#[cfg(test)]
mod tests {
    use crate::guest::{CallSite, GuestView};
    use crate::hot::Engine;
    use qemu_uftrace_format::record::{decode_all, RecordType};
    use std::sync::{Arc, Mutex};

    struct NoGuest;
    impl GuestView for NoGuest {
        fn frame_pointer(&mut self) -> Option<u64> {
            None
        }
        fn frame_record(&mut self, _fp: u64) -> Option<(u64, u64)> {
            None
        }
        fn call_before(&mut self, _ret_addr: u64) -> Option<CallSite> {
            None
        }
    }

    type Records = Arc<Mutex<Vec<String>>>;

    fn engine() -> (Engine, Records) {
        let records: Records = Arc::default();
        let sink = records.clone();
        let spill = Box::new(move |_tid: u32, full: Vec<u8>| {
            for r in decode_all(&full).expect("records the engine wrote") {
                let kind = match r.kind {
                    RecordType::Entry => "E",
                    RecordType::Exit => "X",
                    _ => "?",
                };
                sink.lock()
                    .unwrap()
                    .push(format!("{kind}{} {:x}", r.depth, r.addr));
            }
            full
        });
        (Engine::new(Vec::new(), spill, 1024, 1), records)
    }

    fn lines(e: &mut Engine, records: &Records) -> Vec<String> {
        e.flush();
        records.lock().unwrap().clone()
    }

    /// With `-t`, the stub's entry still waits unwritten when its jump comes: it is
    /// rewritten there, and the trace is what it is without `-t` (a threshold of 1 keeps
    /// every call).
    #[test]
    fn a_trampoline_call_waiting_in_the_time_filter_becomes_a_call_of_its_target() {
        let (mut e, records) = engine();
        e.set_time_filter(1);
        e.call(1, 0x1000, 0x500);
        e.call(2, 0x7000, 0x1010);
        e.register_jump_entry(3, 0x2000, true);
        let top = e.stack().top().map(|f| (f.func, f.ret_addr));
        assert_eq!(top, Some((0x2000, 0x1010)));
        e.ret(4, 0x1010, &mut NoGuest);
        e.call(5, 0x7000, 0x1020);
        e.call(6, 0x3000, 0x7004);
        e.ret(7, 0x7004, &mut NoGuest);
        e.register_jump_entry(8, 0x2000, true);
        e.ret(9, 0x1020, &mut NoGuest);
        e.release_waiting();
        assert_eq!(
            lines(&mut e, &records),
            [
                "E0 1000", "E1 2000", "X1 2000", "E1 7000", "E2 3000", "X2 3000", "E2 2000",
                "X2 2000", "X1 7000"
            ]
        );
    }

    #[test]
    fn a_trampoline_call_becomes_a_call_of_its_target() {
        let (mut e, records) = engine();
        e.call(1, 0x1000, 0x500);
        e.call(2, 0x7000, 0x1010);
        e.register_jump_entry(3, 0x2000, true);
        let top = e.stack().top().map(|f| (f.func, f.ret_addr));
        assert_eq!(top, Some((0x2000, 0x1010)));
        e.try_ret(4, 0x1010);
        // Something written between the call and the jump: nested in the stub's frame.
        e.call(5, 0x7000, 0x1020);
        e.call(6, 0x3000, 0x7004);
        e.try_ret(7, 0x7004);
        e.register_jump_entry(8, 0x2000, true);
        // Its return is the stub's call's.
        e.ret(9, 0x1020, &mut NoGuest);
        assert_eq!(e.stack().len(), 1, "{:?}", e.stack().frames());
        assert_eq!(
            lines(&mut e, &records),
            [
                "E0 1000", "E1 2000", "X1 2000", "E1 7000", "E2 3000", "X2 3000", "E2 2000",
                "X2 2000", "X1 7000"
            ]
        );
    }

    #[test]
    fn a_return_into_an_entry_is_a_jump_unless_a_call_returns_there() {
        let (mut e, records) = engine();
        e.call(1, 0x1000, 0x500);
        e.call(2, 0x4000, 0x1010); // swapcontext, which returns into makecontext's function
        e.return_to_entry(3, 0x2000, false);
        e.call(4, 0x3000, 0x2010);
        e.ret(5, 0x2010, &mut NoGuest);
        e.jump_entry(5, 0x3000); // a tail call
                                 // makecontext's function returns into __start_context, which calls setcontext.
        e.return_to_entry(6, 0x6000, false);
        e.call(7, 0x4100, 0x6010);
        // A return where an open call returns: that call's.
        e.return_to_entry(8, 0x1010, false);
        assert_eq!(e.stack().len(), 1);
        assert_eq!(
            lines(&mut e, &records),
            [
                "E0 1000", "E1 4000", "E2 2000", "E3 3000", "X3 3000", "E3 3000", "X3 3000",
                "X2 2000", "E2 6000", "E3 4100", "X3 4100", "X2 6000", "X1 4000"
            ]
        );
    }

    #[test]
    fn a_jump_to_where_an_open_call_returns_closes_what_it_skipped() {
        let (mut e, records) = engine();
        e.call(1, 0x1000, 0x500);
        e.call(2, 0x4000, 0x1010); // swapcontext
        e.call(3, 0x4100, 0x4010); // setcontext
        e.register_jump_entry(4, 0x2000, false); // makecontext's function
                                                 // A switch table's case right after a call: nothing.
        e.register_jump_landing(5, 0x2040, &mut NoGuest);
        assert_eq!(e.stack().len(), 4);
        // setcontext back to swapcontext's caller.
        e.register_jump_landing(6, 0x1010, &mut NoGuest);
        assert_eq!(e.stack().len(), 1);
        assert_eq!(
            lines(&mut e, &records),
            ["E0 1000", "E1 4000", "E2 4100", "E3 2000", "X3 2000", "X2 4100", "X1 4000"]
        );
    }

    /// The fast return of tail calls' frames (`try_ret`) writes what `ret` does, and
    /// leaves to `ret` what only it decides: a longjmp's frame to close.
    #[test]
    fn a_fast_return_closes_jumped_frames_as_ret_does() {
        let run = |fast: bool, longjmp: fn(u64) -> bool| {
            let (mut e, records) = engine();
            e.set_longjmp_test(longjmp);
            e.call(1, 0x1000, 0x500);
            e.call(2, 0x2000, 0x1010);
            e.jump_entry(3, 0x3000);
            e.jump_entry(4, 0x4000);
            // A return to no open frame's address: for `ret` to decide.
            assert!(!e.try_ret(5, 0x9999));
            let taken = fast && e.try_ret(6, 0x1010);
            if !taken {
                e.ret(6, 0x1010, &mut NoGuest);
            }
            let stats = e.stats();
            let counts = (stats.returns, stats.deep_returns, e.stack().len());
            (taken, lines(&mut e, &records), counts)
        };
        let (taken, fast, counts) = run(true, |_| false);
        assert!(taken);
        assert_eq!(
            fast,
            ["E0 1000", "E1 2000", "E2 3000", "E3 4000", "X3 4000", "X2 3000", "X1 2000"]
        );
        let (_, slow, slow_counts) = run(false, |_| false);
        assert_eq!((fast, counts), (slow, slow_counts));
        let (taken, ..) = run(true, |f| f == 0x3000);
        assert!(!taken, "a longjmp's frame is ret's to close");
    }
}
