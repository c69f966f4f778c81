//! Safe code cannot break the engine's invariants: a suspended engine (its stack handed to
//! the task table, no room reserved) that is driven anyway records correctly.

use qemu_uftrace_engine::hot::Engine;
use qemu_uftrace_format::record::{decode_all, RecordType};
use std::sync::{Arc, Mutex};

#[test]
fn a_call_on_a_suspended_engine_is_safe() {
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&out);
    let spill = Box::new(move |_tid: u32, full: Vec<u8>| {
        sink.lock().unwrap().extend_from_slice(&full);
        Vec::with_capacity(1 << 16)
    });
    let mut e = Engine::new(Vec::with_capacity(1 << 16), spill, 64, 1);
    let _kept = e.suspend();
    // Before: `try_call` pushed into the empty stack's zero capacity (a dangling pointer).
    // It declines where the stack has no room (it never grows it), and the general path
    // (`call`) takes the call, as a callback does.
    for i in 0..40u64 {
        if !e.try_call(10 + i, 0x1000 + i, 0x2000 + i) {
            e.call(10 + i, 0x1000 + i, 0x2000 + i);
        }
    }
    assert_eq!(e.stack().len(), 40);
    e.flush();
    let records = decode_all(&out.lock().unwrap()).unwrap();
    assert_eq!(records.len(), 40);
    assert!(records
        .iter()
        .enumerate()
        .all(|(i, r)| r.kind == RecordType::Entry && r.depth as usize == i));
}

/// A function's ENTRY, then an interrupt before its first instruction that switches tasks
/// (the first call's page fault, scheduled away): the switch keeps the ENTRY and the
/// interrupt's records back (`hold_fresh_entries`), so that the arguments read at the first
/// instruction, once the task runs again, still go right after the ENTRY. Without it the
/// ENTRY has gone to the writer and they have no place. `recall`: the interrupt's handler
/// calls the same function first (a kernel function with values, called from an irq too):
/// the ENTRY kept back is still the frame's own, not that later one.
#[test]
fn a_fresh_entry_waits_across_a_switch_for_its_arguments() {
    use qemu_uftrace_engine::arch::ExceptionKind;
    use qemu_uftrace_engine::hot::Suspended;
    for (hold, recall) in [(true, false), (false, false), (true, true)] {
        // Each spilled buffer with its task.
        type Spilled = Arc<Mutex<Vec<(u32, Vec<u8>)>>>;
        let out: Spilled = Arc::default();
        let sink = Arc::clone(&out);
        let spill = Box::new(move |tid: u32, full: Vec<u8>| {
            sink.lock().unwrap().push((tid, full));
            Vec::with_capacity(1 << 16)
        });
        let mut e = Engine::new(Vec::with_capacity(1 << 16), spill, 64, 1);
        let has_values: fn(u64) -> bool = |f| f == 0x1100;
        e.hold_fresh_entries(hold.then_some(has_values));
        e.call(10, 0x1000, 0x2000); // main
        e.call(11, 0x1100, 0x1010); // F, whose first instruction has not run
        e.exception_entry(12, ExceptionKind::Irq, 0x1100);
        if recall {
            e.call(12, 0x1100, 0xffff_8000_0000_0e00); // F again, from the handler
            assert!(e.try_ret(12, 0xffff_8000_0000_0e00));
        }
        e.call(13, 0xffff_8000_0000_1000, 0xffff_8000_0000_0f00); // schedule
        let f = e.suspend();
        e.resume(2, Suspended::default());
        e.call(20, 0x3000, 0x3100);
        let other = e.suspend();
        e.resume(1, f);
        e.exception_return(30, 0x1100, 0xffff_8000_0000_0800);
        let placed = e.emit_carriers_after_entry(0x1100, &[0x77, 0x78]);
        assert_eq!(placed, hold);
        e.flush();
        e.resume(2, other);
        e.flush();
        let mine: Vec<u8> = (out.lock().unwrap().iter())
            .filter(|(t, _)| *t == 1)
            .flat_map(|(_, b)| b.clone())
            .collect();
        let rows: Vec<(RecordType, u64)> = (decode_all(&mine).unwrap().iter())
            .map(|r| (r.kind, r.addr))
            .collect();
        let irq = ExceptionKind::Irq.addr() & 0xffff_ffff_ffff;
        let sched = 0x8000_0000_1000;
        let mut want = vec![(RecordType::Entry, 0x1000), (RecordType::Entry, 0x1100)];
        if hold {
            want.extend([(RecordType::Event, 0x77), (RecordType::Event, 0x78)]);
        }
        want.push((RecordType::Entry, irq));
        if recall {
            want.extend([(RecordType::Entry, 0x1100), (RecordType::Exit, 0x1100)]);
        }
        want.extend([
            (RecordType::Entry, sched),
            (RecordType::Exit, sched),
            (RecordType::Exit, irq),
        ]);
        assert_eq!(rows, want, "hold {hold}, recall {recall}");
        // The other task's records are its own, whole.
        let theirs = (out.lock().unwrap().iter())
            .filter(|(t, _)| *t == 2)
            .map(|(_, b)| b.len())
            .sum::<usize>();
        assert_eq!(theirs, 16);
    }
}
