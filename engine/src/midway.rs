//! A context found running with calls already open: a run that starts from a snapshot
//! (`-loadvm`, `-incoming`). The engine cannot know those calls while the guest runs (the
//! CLI unwinds them after the run, from the stack cookie the plugin saved), so returns past
//! the bottom of its stack are written for the CLI to match (`Engine::outer_return`)
//! instead of being taken as a lost context to rebuild from frame records.

use crate::hot::Engine;

impl Engine {
    /// The running context began before tracing did: returns past its stack's bottom close
    /// calls opened before (until then, nothing else changes).
    pub fn start_midway(&mut self) {
        self.midway = true;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::guest::{CallSite, GuestView};
    use crate::hot::Engine;
    use qemu_uftrace_format::record::{decode_all, RecordType};
    use std::sync::{Arc, Mutex};

    /// A guest with no frame records: a resync could only guess.
    pub(crate) struct NoRecords;

    impl GuestView for NoRecords {
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

    /// An engine whose records go to the returned buffer.
    pub(crate) fn engine() -> (Engine, Arc<Mutex<Vec<u8>>>) {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let spill = Box::new(move |_tid, buf: Vec<u8>| {
            sink.lock().unwrap().extend_from_slice(&buf);
            Vec::new()
        });
        (Engine::new(Vec::new(), spill, 1024, 1), out)
    }

    /// What `e` wrote into `out` once flushed: each record's time, kind, depth and address.
    pub(crate) fn written(
        e: &mut Engine,
        out: &Mutex<Vec<u8>>,
    ) -> Vec<(u64, RecordType, u16, u64)> {
        e.flush();
        let records = decode_all(&out.lock().unwrap()).unwrap();
        records
            .iter()
            .map(|r| (r.time, r.kind, r.depth, r.addr))
            .collect()
    }

    #[test]
    fn returns_past_the_bottom_become_exits_to_their_targets() {
        let (mut e, out) = engine();
        e.start_midway();
        // The leaf the snapshot stopped in returns, then its caller calls and returns
        // (matched), then the caller returns too.
        e.ret(10, 0x1010, &mut NoRecords);
        e.call(20, 0x3000, 0x1020);
        e.ret(30, 0x1020, &mut NoRecords);
        e.ret(40, 0x2010, &mut NoRecords);
        let got = written(&mut e, &out);
        assert_eq!(
            got,
            [
                (10, RecordType::Exit, 0, 0x1010),
                (20, RecordType::Entry, 0, 0x3000),
                (30, RecordType::Exit, 0, 0x3000),
                (40, RecordType::Exit, 0, 0x2010),
            ]
        );
        assert_eq!(e.stats().outer_returns, 2);
        assert_eq!(e.stats().lost_marks, 0);
    }

    #[test]
    fn a_tail_call_from_beneath_the_bottom_returns_past_it() {
        // The function the run began in calls 0x3000 (matched), then ends by jumping to
        // 0x4000's entry, whose return goes back to its caller's caller at 0x2010: it closes
        // 0x4000 and returns past the bottom.
        let (mut e, out) = engine();
        e.start_midway();
        e.call(10, 0x3000, 0x1020);
        e.ret(20, 0x1020, &mut NoRecords);
        e.jump_entry(30, 0x4000);
        e.ret(40, 0x2010, &mut NoRecords);
        assert_eq!(
            written(&mut e, &out),
            [
                (10, RecordType::Entry, 0, 0x3000),
                (20, RecordType::Exit, 0, 0x3000),
                (30, RecordType::Entry, 0, 0x4000),
                (40, RecordType::Exit, 0, 0x4000),
                (40, RecordType::Exit, 0, 0x2010),
            ]
        );
        assert_eq!(e.stats().outer_returns, 1);
    }

    #[test]
    fn the_mark_travels_with_its_context() {
        let (mut e, out) = engine();
        e.start_midway();
        let first = e.suspend();
        // Another context, begun under tracing: its unmatched return is no outer return.
        e.resume(2, Default::default());
        e.ret(10, 0x1010, &mut NoRecords);
        let _ = e.suspend();
        e.resume(1, first);
        e.ret(20, 0x2010, &mut NoRecords);
        let exits: Vec<_> = (written(&mut e, &out).into_iter())
            .filter(|&(_, kind, ..)| kind == RecordType::Exit)
            .map(|(time, .., addr)| (time, addr))
            .collect();
        assert_eq!(exits, [(20, 0x2010)]);
        assert_eq!(e.stats().outer_returns, 1);
    }

    #[test]
    fn an_exception_return_past_the_bottom_is_an_outer_return() {
        // A task found asleep in a system call: its ERET leaves an exception entry opened
        // before the start, which the CLI matches like a return.
        let (mut e, out) = engine();
        e.start_midway();
        e.exception_return(10, 0x40_1234, 0xffff_8000_0801_0000);
        assert_eq!(
            written(&mut e, &out),
            [(10, RecordType::Exit, 0, 0x40_1234)]
        );
        assert_eq!(e.stats().outer_returns, 1);
    }

    #[test]
    fn a_return_an_interrupt_overtook_is_written_with_its_target() {
        use crate::arch::ExceptionKind;
        // The leaf the snapshot stopped in returns (seen), then its caller returns and a
        // timer interrupt is taken before the block it lands on at 0x2010 runs: the
        // interrupted pc is the return's target. The handler's IRET goes back there, and
        // the caller's caller calls on at the bottom.
        let (mut e, out) = engine();
        e.start_midway();
        e.ret(10, 0x1010, &mut NoRecords);
        e.ret_interrupted(20, Some(0x2010), &mut NoRecords);
        e.exception_entry(20, ExceptionKind::Irq, 0x2010);
        e.exception_return(30, 0x2010, 0xffff_8000_0801_0000);
        e.call(40, 0x3000, 0x2020);
        e.ret(50, 0x2020, &mut NoRecords);
        let got = written(&mut e, &out);
        let irq = ExceptionKind::Irq.addr() & 0xffff_ffff_ffff;
        assert_eq!(
            got,
            [
                (10, RecordType::Exit, 0, 0x1010),
                (20, RecordType::Exit, 0, 0x2010),
                (20, RecordType::Entry, 0, irq),
                (30, RecordType::Exit, 0, irq),
                (40, RecordType::Entry, 0, 0x3000),
                (50, RecordType::Exit, 0, 0x3000),
            ]
        );
        assert_eq!(e.stats().outer_returns, 2);
        // Where the interrupted pc follows no call, the return closes the top frame: here
        // none, and nothing is written (the CLI then has no target to match).
        let (mut e, out) = engine();
        e.start_midway();
        e.ret_interrupted(20, None, &mut NoRecords);
        assert!(written(&mut e, &out).is_empty());
    }

    #[test]
    fn without_midway_an_unmatched_return_writes_no_exit() {
        let (mut e, out) = engine();
        e.ret(10, 0x1010, &mut NoRecords);
        let records = written(&mut e, &out);
        assert!(records
            .iter()
            .all(|&(_, kind, ..)| kind != RecordType::Exit));
        assert_eq!(e.stats().outer_returns, 0);
    }
}
