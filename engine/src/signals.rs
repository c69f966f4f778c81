//! User mode: signal deliveries, and unwinding that leaves frames without returning.
//!
//! Linux delivers a signal by starting its handler with the return address set to a
//! sigreturn trampoline, no call involved. The plugin sees the handler's first instruction
//! and, when no call just entered it, the engine opens a pseudo-frame for the delivery
//! (`[SIGALRM]` …, `qemu_uftrace_format::pseudo`) on top of the interrupted function, and
//! the handler's frame beneath it. `rt_sigreturn` closes the delivery with whatever the
//! handler left open. Unlike an exception entry, a delivery may also be left by a return
//! that crosses it (`siglongjmp` out of the handler lands after `sigsetjmp`'s call).
//!
//! C++ unwinding "returns" from the unwinder into a landing pad, which follows no call: the
//! return lands unseen and closes only the top frame. The first call after it says where
//! execution resumed: frames above the open function that holds the calling code were
//! skipped by the unwinding, and close there.

use crate::guest::GuestView;
use crate::hot::Engine;
use crate::resync::containing_frame;
use crate::shadow::Frame;
use qemu_uftrace_format::pseudo;

/// A delivery's pseudo-frame returns nowhere a return could go: only `rt_sigreturn`, or a
/// return that crosses it, closes it.
const NO_RETURN: u64 = 0;

impl Engine {
    /// Whether `handler`, starting with return address `link`, was just called (the top
    /// frame is that call) rather than started by a signal.
    pub fn entered_by_call(&self, handler: u64, link: u64) -> bool {
        self.stack().top()
            == Some(&Frame {
                func: handler,
                ret_addr: link,
            })
    }

    /// Signal `signo` was delivered: `handler` starts, returning to `link` (the sigreturn
    /// trampoline), on top of what it interrupted.
    pub fn signal_entry(&mut self, now: u64, signo: u64, handler: u64, link: u64) {
        let now = self.clamp(now);
        self.stats.signals += 1;
        self.open(
            now,
            Frame {
                func: pseudo::signal_addr(signo),
                ret_addr: NO_RETURN,
            },
        );
        self.open(
            now,
            Frame {
                func: handler,
                ret_addr: link,
            },
        );
    }

    /// `rt_sigreturn`: the innermost delivery ends, with the frames its handler left open.
    /// Returns whether one was open.
    pub fn signal_return(&mut self, now: u64) -> bool {
        let Some(i) = self.stack().innermost_signal() else {
            return false;
        };
        let now = self.clamp(now);
        self.stats.signal_returns += 1;
        self.close_down_to(now, i);
        true
    }

    /// A call returning to `ret_addr` is the first event after a return that landed unseen:
    /// frames above the open function that holds the call are closed (never across an
    /// exception entry). Nothing changes when no open function can hold it.
    pub fn realign_for_call(&mut self, now: u64, ret_addr: u64) {
        // The call instruction ends just before its return address.
        self.resume_in_function_of(now, ret_addr.wrapping_sub(1), None);
    }

    /// A jump through a register right after a stack switch (x86-64's longjmp, an unwinder
    /// installing a handler) goes to `target`: frames above the open function that holds
    /// it are closed, as for [`Engine::realign_for_call`]; a longjmp's single exit names
    /// the call before `target` ([`Engine::close_landing`]).
    pub fn stack_switch_jump(&mut self, now: u64, target: u64, guest: &mut dyn GuestView) {
        self.resume_in_function_of(now, target, Some(guest));
    }

    /// Execution resumes at `pc`: closes the frames above the innermost open function that
    /// can hold it, if that is not the top one. `guest` where `pc` is a landing.
    fn resume_in_function_of(&mut self, now: u64, pc: u64, guest: Option<&mut dyn GuestView>) {
        let floor = self.stack().innermost_exception().map_or(0, |i| i + 1);
        let Some(i) = containing_frame(self.stack(), pc) else {
            return;
        };
        if i < floor || i + 1 >= self.stack().len() {
            return;
        }
        let now = self.clamp(now);
        self.stats.unwinds += 1;
        self.close_landing(now, i + 1, guest.map(|g| (pc, g)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exceptions::ExceptionKind;
    use crate::guest::{CallSite, GuestView};
    use qemu_uftrace_format::record::{decode_all, RecordType};
    use std::sync::{Arc, Mutex};

    /// A guest with no frame records: resyncs fall back on the call before a return
    /// address, here every address ending in 4 follows a call to 0x9000.
    struct NoRecords;
    impl GuestView for NoRecords {
        fn frame_pointer(&mut self) -> Option<u64> {
            None
        }
        fn frame_record(&mut self, _fp: u64) -> Option<(u64, u64)> {
            None
        }
        fn call_before(&mut self, ret_addr: u64) -> Option<CallSite> {
            (ret_addr % 16 == 4).then_some(CallSite {
                pc: ret_addr - 4,
                target: Some(0x9000),
            })
        }
    }

    type Records = Arc<Mutex<Vec<(RecordType, u32, u64)>>>;

    fn engine() -> (Engine, Records) {
        let records: Records = Arc::default();
        let sink = records.clone();
        let spill = Box::new(move |_tid: u32, full: Vec<u8>| {
            for r in decode_all(&full).expect("records the engine wrote") {
                sink.lock().unwrap().push((r.kind, r.depth as u32, r.addr));
            }
            full
        });
        (Engine::new(Vec::new(), spill, 1024, 1), records)
    }

    /// `E name`/`X name` lines, with names for the test's addresses.
    fn events(e: &mut Engine, records: &Records) -> Vec<String> {
        e.flush();
        let name = |addr: u64| match addr {
            0x1000 => "main".to_string(),
            0x2000 => "loop".to_string(),
            0x3000 => "leaf".to_string(),
            0x4000 => "handler".to_string(),
            0x5000 => "inner".to_string(),
            0x6000 => "throw".to_string(),
            a if a == pseudo::signal_addr(14) => "[SIGALRM]".to_string(),
            a if a == pseudo::signal_addr(10) => "[SIGUSR1]".to_string(),
            a => format!("{a:#x}"),
        };
        let mut depth_ok = true;
        let mut open = 0u32;
        let lines = records
            .lock()
            .unwrap()
            .iter()
            .map(|&(kind, depth, addr)| match kind {
                RecordType::Entry => {
                    depth_ok &= depth == open;
                    open += 1;
                    format!("E {}", name(addr))
                }
                RecordType::Exit => {
                    open -= 1;
                    depth_ok &= depth == open;
                    format!("X {}", name(addr))
                }
                other => format!("{other:?}"),
            })
            .collect();
        assert!(depth_ok, "records' depths follow the stack");
        lines
    }

    const TRAMPOLINE: u64 = 0x7000;

    #[test]
    fn a_delivery_nests_its_handler_under_the_interrupted_function() {
        let (mut e, records) = engine();
        e.call(1, 0x1000, 0x10);
        e.call(2, 0x2000, 0x1014);
        e.call(3, 0x3000, 0x2014);
        // The signal interrupts leaf: no call entered the handler.
        assert!(!e.entered_by_call(0x4000, TRAMPOLINE));
        e.signal_entry(4, 14, 0x4000, TRAMPOLINE);
        e.call(5, 0x5000, 0x4014);
        e.ret(6, 0x4014, &mut NoRecords);
        // The handler returns to the trampoline, which follows no call: unseen; then
        // rt_sigreturn closes the delivery, and leaf carries on.
        e.ret_unseen(7);
        assert!(e.signal_return(8));
        e.ret(9, 0x2014, &mut NoRecords);
        assert_eq!(
            events(&mut e, &records),
            [
                "E main",
                "E loop",
                "E leaf",
                "E [SIGALRM]",
                "E handler",
                "E inner",
                "X inner",
                "X handler",
                "X [SIGALRM]",
                "X leaf"
            ]
        );
        assert_eq!((e.stats.signals, e.stats.signal_returns), (1, 1));
        assert!(!e.signal_return(10), "no delivery left to close");
    }

    #[test]
    fn a_handler_called_directly_is_no_delivery() {
        let (mut e, _) = engine();
        e.call(1, 0x1000, 0x10);
        e.call(2, 0x4000, 0x1014);
        assert!(e.entered_by_call(0x4000, 0x1014));
    }

    #[test]
    fn a_sigreturn_closes_what_the_handler_left_open() {
        let (mut e, records) = engine();
        e.call(1, 0x1000, 0x10);
        e.signal_entry(2, 14, 0x4000, TRAMPOLINE);
        e.call(3, 0x5000, 0x4014);
        assert!(e.signal_return(4));
        assert_eq!(e.stack().len(), 1);
        assert_eq!(
            events(&mut e, &records)[1..],
            [
                "E [SIGALRM]",
                "E handler",
                "E inner",
                "X inner",
                "X handler",
                "X [SIGALRM]"
            ]
        );
    }

    #[test]
    fn nested_deliveries_close_one_at_a_time() {
        let (mut e, _) = engine();
        e.call(1, 0x1000, 0x10);
        e.signal_entry(2, 14, 0x4000, TRAMPOLINE);
        e.signal_entry(3, 10, 0x4000, TRAMPOLINE);
        assert!(e.signal_return(4));
        assert_eq!(e.stack().len(), 3);
        assert!(e.signal_return(5));
        assert_eq!(e.stack().len(), 1);
    }

    #[test]
    fn a_longjmp_out_of_a_handler_crosses_the_delivery() {
        let (mut e, records) = engine();
        e.call(1, 0x1000, 0x10);
        // loop calls setjmp (returns to 0x2014 twice) and then leaf, which is interrupted.
        e.call(2, 0x2000, 0x1014);
        e.call(3, 0x9000, 0x2014);
        e.ret(4, 0x2014, &mut NoRecords);
        e.call(5, 0x3000, 0x2024);
        e.signal_entry(6, 10, 0x4000, TRAMPOLINE);
        e.call(7, 0x6000, 0x4014); // siglongjmp
                                   // longjmp's `br x30` lands after the setjmp call: a return to no open frame.
        e.ret(8, 0x2014, &mut NoRecords);
        assert_eq!(e.stack().len(), 2, "main and loop remain");
        assert!(!e.signal_return(9), "the delivery is closed");
        let ev = events(&mut e, &records);
        assert_eq!(
            ev[ev.len() - 4..],
            ["X throw", "X handler", "X [SIGUSR1]", "X leaf"]
        );
        assert_eq!(e.stats.lost_marks, 0);
    }

    #[test]
    fn an_unwinding_ends_at_the_first_call_from_the_catching_function() {
        let (mut e, records) = engine();
        e.call(1, 0x1000, 0x10); // main
        e.call(2, 0x2000, 0x1014); // loop: catches
        e.call(3, 0x3000, 0x2014); // leaf
        e.call(4, 0x5000, 0x3014); // inner: throws
        e.call(5, 0x6000, 0x5014); // the unwinder
                                   // The unwinder "returns" into loop's landing pad, which follows no call.
        e.ret_unseen(6);
        // loop's pad calls (0x2104 is in loop): inner and leaf were skipped.
        e.realign_for_call(7, 0x2104);
        e.call(7, 0x9000, 0x2104);
        assert_eq!(e.stack().len(), 3);
        let ev = events(&mut e, &records);
        assert_eq!(ev[5..], ["X throw", "X inner", "X leaf", "E 0x9000"]);
        assert_eq!(e.stats.unwinds, 1);
        // A call from the top function itself changes nothing.
        e.realign_for_call(8, 0x9010);
        assert_eq!(e.stack().len(), 3);
        assert_eq!(e.stats.unwinds, 1);
    }

    #[test]
    fn a_jump_after_a_stack_switch_closes_what_it_leaves() {
        let (mut e, records) = engine();
        e.call(1, 0x1000, 0x10); // main
        e.call(2, 0x2000, 0x1014); // loop: set the jump point
        e.call(3, 0x3000, 0x2024); // leaf
        e.signal_entry(4, 10, 0x4000, TRAMPOLINE);
        e.call(5, 0x6000, 0x4014); // longjmp
        e.stack_switch_jump(6, 0x2014, &mut NoRecords);
        assert_eq!(e.stack().len(), 2);
        let ev = events(&mut e, &records);
        assert_eq!(
            ev[ev.len() - 4..],
            ["X throw", "X handler", "X [SIGUSR1]", "X leaf"]
        );
        // A jump within the top function (a switch) changes nothing.
        e.stack_switch_jump(7, 0x2100, &mut NoRecords);
        assert_eq!(e.stack().len(), 2);
    }

    #[test]
    fn an_unwinding_never_crosses_an_exception_entry() {
        let (mut e, _) = engine();
        e.call(1, 0x1000, 0x10);
        e.exception_entry(2, ExceptionKind::Svc, 0x1234);
        e.call(3, 0x3000, 0x50);
        e.call(4, 0x5000, 0x3014);
        e.realign_for_call(5, 0x1100);
        assert_eq!(
            e.stack().len(),
            4,
            "main's code runs only after the exception return"
        );
        // Code no open function can hold changes nothing.
        e.realign_for_call(6, 0x800);
        assert_eq!(e.stack().len(), 4);
    }
}
