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
