//! A resync with no frame record to go by (code without frame pointers): where the guest
//! saves a stack cookie, the engine closes every frame and writes a marker naming it instead
//! of a guessed LOST record, and its stack is one found mid-way from there; where none is
//! saved, the guess stays.

use qemu_uftrace_engine::guest::{CallSite, GuestView};
use qemu_uftrace_engine::hot::Engine;
use std::sync::{Arc, Mutex};

/// A guest with no frame records that saves stack cookies when asked.
struct Cookies {
    saved: Vec<(u32, u64, u64)>,
    room: bool,
}

impl GuestView for Cookies {
    fn frame_pointer(&mut self) -> Option<u64> {
        None
    }
    fn frame_record(&mut self, _fp: u64) -> Option<(u64, u64)> {
        None
    }
    fn call_before(&mut self, _ret_addr: u64) -> Option<CallSite> {
        None
    }
    fn save_stack(&mut self, tid: u32, pc: u64, time: u64) -> Option<u32> {
        self.saved.push((tid, pc, time));
        self.room.then_some(self.saved.len() as u32 - 1)
    }
}

fn engine() -> (Engine, Arc<Mutex<Vec<u8>>>) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = out.clone();
    let spill = Box::new(move |_tid, buf: Vec<u8>| {
        sink.lock().unwrap().extend_from_slice(&buf);
        Vec::new()
    });
    (Engine::new(Vec::new(), spill, 1024, 7), out)
}

#[test]
fn a_resync_with_nothing_to_go_by_saves_a_cookie_instead_of_guessing() {
    use qemu_uftrace_format::cookie::resync_marker;
    use qemu_uftrace_format::record::{decode_all, RecordType::*};
    let (mut e, out) = engine();
    let mut g = Cookies {
        saved: Vec::new(),
        room: true,
    };
    // main > resume > switch_to, whose return lands on another stack (0x5010): every
    // frame closes and the marker names the cookie; the return past the bottom that
    // follows is written for the CLI to match (an exit to its target).
    e.call(1, 0x1000, 0x50);
    e.call(2, 0x2000, 0x1010);
    e.call(3, 0x3000, 0x2010);
    e.ret(4, 0x5010, &mut g);
    e.ret(5, 0x6010, &mut g);
    e.flush();
    assert_eq!(g.saved, [(7, 0x5010, 4)]);
    let got: Vec<_> = decode_all(&out.lock().unwrap())
        .unwrap()
        .iter()
        .map(|r| (r.time, r.kind, r.depth, r.addr))
        .collect();
    assert_eq!(
        &got[3..],
        [
            (4, Exit, 2, 0x3000),
            (4, Exit, 1, 0x2000),
            (4, Exit, 0, 0x1000),
            (4, Event, 0, resync_marker(0)),
            (5, Exit, 0, 0x6010),
        ]
    );
    let stats = e.stats();
    assert_eq!((stats.resync_cookies, stats.lost_marks), (1, 0));
    // No cookie saved (the plugin's limit): the guess and its LOST mark, as before.
    let (mut e, out) = engine();
    g.room = false;
    e.call(1, 0x1000, 0x50);
    e.ret(4, 0x5010, &mut g);
    e.flush();
    let kinds: Vec<_> = decode_all(&out.lock().unwrap())
        .unwrap()
        .iter()
        .map(|r| r.kind)
        .collect();
    assert_eq!(kinds, [Entry, Exit, Lost]);
    assert_eq!((e.stats().resync_cookies, e.stats().lost_marks), (0, 1));
}
