//! Tests of the engine: instruction classification aside (in `arch`), the call/return
//! engine, its slow paths and the task and exception model, on drawn event sequences.

use qemu_uftrace_engine::guest::{CallSite, GuestView};
use qemu_uftrace_engine::hot::Engine;
use qemu_uftrace_format::record::{decode_all, Record, RecordType};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A guest whose frame records and call instructions the test lays out by hand.
#[derive(Default)]
struct FakeGuest {
    fp: u64,
    records: HashMap<u64, (u64, u64)>,
    direct_calls: HashMap<u64, u64>,
    indirect_calls: Vec<u64>,
}

impl GuestView for FakeGuest {
    fn frame_pointer(&mut self) -> Option<u64> {
        Some(self.fp)
    }
    fn frame_record(&mut self, addr: u64) -> Option<(u64, u64)> {
        self.records.get(&addr).copied()
    }
    fn call_before(&mut self, ret_addr: u64) -> Option<CallSite> {
        let target = self.direct_calls.get(&ret_addr).copied();
        let indirect = self.indirect_calls.contains(&ret_addr);
        (target.is_some() || indirect).then_some(CallSite {
            pc: ret_addr - 4,
            target,
        })
    }
}

struct Rig {
    engine: Engine,
    out: Arc<Mutex<Vec<u8>>>,
    t: u64,
    /// Whether events try the fast path first, as the plugin's callbacks do.
    fast: bool,
    /// Events the fast path took.
    fast_hits: u64,
}

impl Rig {
    /// An engine driven as the plugin drives it: fast path first.
    fn new(record_depth: usize) -> Rig {
        Rig {
            fast: true,
            ..Rig::general(record_depth)
        }
    }

    /// [`Rig::new`] where `fast`, else [`Rig::general`].
    fn driven(fast: bool, record_depth: usize) -> Rig {
        if fast {
            Rig::new(record_depth)
        } else {
            Rig::general(record_depth)
        }
    }

    /// An engine driven through the general path only.
    fn general(record_depth: usize) -> Rig {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&out);
        let spill = Box::new(move |_tid: u32, full: Vec<u8>| {
            sink.lock().unwrap().extend_from_slice(&full);
            Vec::with_capacity(64)
        });
        Rig {
            engine: Engine::new(Vec::with_capacity(64), spill, record_depth, 1),
            out,
            t: 0,
            fast: false,
            fast_hits: 0,
        }
    }
    fn call(&mut self, func: u64, ret_addr: u64) {
        self.t += 10;
        if self.fast
            && (self.engine.try_call(self.t, func, ret_addr)
                || self.engine.try_follow_call(self.t, func, ret_addr)
                || self.engine.try_call_timed(self.t, func, ret_addr))
        {
            self.fast_hits += 1;
        } else {
            self.engine.call(self.t, func, ret_addr);
        }
    }
    fn ret(&mut self, target: u64, guest: &mut FakeGuest) {
        self.t += 10;
        if self.fast
            && (self.engine.try_ret(self.t, target)
                || self.engine.try_follow_ret(self.t, target)
                || self.engine.try_ret_timed(self.t, target))
        {
            self.fast_hits += 1;
        } else {
            self.engine.ret(self.t, target, guest);
        }
    }
    fn records(&mut self) -> Vec<Record> {
        self.engine.flush();
        decode_all(&self.out.lock().unwrap()).unwrap()
    }
    /// `+addr@depth` for entries, `-addr@depth` for exits.
    fn shape(&mut self) -> Vec<String> {
        self.records()
            .iter()
            .map(|r| {
                let sign = match r.kind {
                    RecordType::Entry => '+',
                    RecordType::Exit => '-',
                    RecordType::Lost => return format!("L@{}", r.depth),
                    RecordType::Event => '!',
                };
                format!("{sign}{:x}@{}", r.addr, r.depth)
            })
            .collect()
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn nested_calls_and_leaf_share_depth() {
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14); // main
    r.call(0x200, 0x108); //  f
    r.call(0x300, 0x204); //   leaf
    r.ret(0x204, &mut g);
    r.ret(0x108, &mut g);
    r.ret(0x14, &mut g);
    assert_eq!(
        r.shape(),
        s(&["+100@0", "+200@1", "+300@2", "-300@2", "-200@1", "-100@0"])
    );
    let recs = r.records();
    assert!(recs.windows(2).all(|w| w[0].time <= w[1].time));
    assert_eq!(r.engine.stats.unmatched_returns, 0);
}

#[test]
fn recursion_buffers_spill_without_loss() {
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    for i in 0..50 {
        r.call(0x500, 0x1000 + i * 4);
    }
    for i in (0..50).rev() {
        r.ret(0x1000 + i * 4, &mut g);
    }
    let recs = r.records();
    assert_eq!(recs.len(), 100);
    assert_eq!(recs[49].depth, 49);
    assert_eq!(recs[50].kind, RecordType::Exit);
    assert_eq!(recs[50].depth, 49);
    assert_eq!(r.engine.stats().events, 100);
}

#[test]
fn longjmp_without_frame_pointers_returns_into_the_setjmp_caller() {
    let mut g = FakeGuest::default();
    g.direct_calls.insert(0x110, 0x180); // main: bl setjmp at 0x10c
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14); // main
    r.call(0x180, 0x110); //  setjmp
    r.ret(0x110, &mut g);
    r.call(0x200, 0x118); //  a
    r.call(0x300, 0x208); //   b
    r.call(0x400, 0x308); //    longjmp: returns to setjmp's return address
    r.ret(0x110, &mut g);
    assert_eq!(
        r.shape(),
        s(&[
            "+100@0", "+180@1", "-180@1", "+200@1", "+300@2", "+400@3", "-400@3", "-300@2",
            "-200@1"
        ])
    );
    assert_eq!(r.engine.stats.unmatched_returns, 1);
    assert_eq!(r.engine.stack().len(), 1);
}

#[test]
fn longjmp_with_frame_pointers_follows_the_records() {
    // longjmp restored main's frame pointer: its record returns to the start code at 0x14.
    let mut g = FakeGuest {
        fp: 0x7f00,
        ..Default::default()
    };
    g.records.insert(0x7f00, (0, 0x14));
    g.direct_calls.insert(0x14, 0x100); // the start code's bl main
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14); // main
    r.call(0x200, 0x118); //  a
    r.call(0x300, 0x208); //   b
    r.call(0x400, 0x308); //    longjmp
    r.ret(0x110, &mut g);
    assert_eq!(
        r.shape(),
        s(&["+100@0", "+200@1", "+300@2", "+400@3", "-400@3", "-300@2", "-200@1"])
    );
    assert_eq!(r.engine.stats.resyncs, 1);
}

#[test]
fn a_return_that_skips_frames_closes_them() {
    // `b` was left by a jump (tail call into code that returned straight to a's caller).
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14);
    r.call(0x200, 0x108);
    r.call(0x300, 0x204);
    r.ret(0x108, &mut g);
    assert_eq!(
        r.shape(),
        s(&["+100@0", "+200@1", "+300@2", "-300@2", "-200@1"])
    );
    assert_eq!(r.engine.stats.deep_returns, 1);
}

#[test]
fn unmatched_return_resyncs_from_frame_records() {
    // We enter tracing inside `g`, called by `h`, called by `k`: a return from g's callee
    // lands in g. Frame records: fp0 -> (fp1, ret into h), fp1 -> (0, ret into k).
    let mut g = FakeGuest {
        fp: 0x8000,
        ..Default::default()
    };
    g.records.insert(0x8000, (0x8100, 0x2010)); // g returns to 0x2010 in h
    g.records.insert(0x8100, (0, 0x3010)); // h returns to 0x3010 in k
    g.direct_calls.insert(0x2010, 0x1000); // bl g at 0x200c
    g.direct_calls.insert(0x3010, 0x2000); // bl h at 0x300c
    g.indirect_calls.push(0x1050); // g called something through a pointer
    let mut r = Rig::new(1024);
    r.ret(0x1050, &mut g); // a return into g we never saw called
    assert_eq!(r.engine.stats.unmatched_returns, 1);
    assert_eq!(r.engine.stats.resyncs, 1);
    assert_eq!(r.shape(), s(&["L@0", "+2000@0", "+1000@1"]));
    // Later returns now match the rebuilt frames.
    r.ret(0x2010, &mut g);
    r.ret(0x3010, &mut g);
    assert_eq!(r.engine.stats.unmatched_returns, 1);
    assert_eq!(
        r.shape(),
        s(&["L@0", "+2000@0", "+1000@1", "-1000@1", "-2000@0"])
    );
}

#[test]
fn resync_keeps_the_frames_it_still_knows() {
    // main called worker (ret 0x14); worker switched stacks and returns somewhere we did not
    // follow, into `x`, whose caller is main's callee `worker` (its record returns to 0x14).
    let mut g = FakeGuest {
        fp: 0x9000,
        ..Default::default()
    };
    g.records.insert(0x9000, (0x9100, 0x5010)); // x returns into worker's body at 0x5010
    g.records.insert(0x9100, (0, 0x14)); // worker returns to main
    g.indirect_calls.extend([0x5010, 0x14]);
    let mut r = Rig::new(1024);
    r.call(0x5000, 0x14); // worker
    r.call(0x6000, 0x5008); //  y
    r.ret(0x7777, &mut g); // unmatched: back in x, which worker called from 0x500c (indirect)
                           // y closes, worker stays, x is opened (named by an address inside it: the target).
    assert_eq!(
        r.shape(),
        s(&["+5000@0", "+6000@1", "-6000@1", "L@1", "+7777@1"])
    );
}

#[test]
fn a_switch_to_another_stack_closes_ours_and_opens_its_frames() {
    // Task A is in a() -> sched(); the guest switches to task B, whose frame records show
    // b1() -> b2(), and returns into b2. a()'s entry lies below the target, but a() is not
    // what B returns into: only the records tell.
    let mut g = FakeGuest {
        fp: 0xa000,
        ..Default::default()
    };
    g.records.insert(0xa000, (0xa100, 0x8010)); // b2 returns into b1 at 0x8010
    g.records.insert(0xa100, (0, 0x9010)); // b1 returns to 0x9010
    g.direct_calls.insert(0x8010, 0x8800); // bl b2 in b1
    g.direct_calls.insert(0x9010, 0x8000); // bl b1
    g.direct_calls.insert(0x8850, 0x4000); // b2 called sched too: bl at 0x884c
    let mut r = Rig::new(1024);
    r.call(0x1000, 0x14); // a
    r.call(0x4000, 0x1010); //  sched
    r.ret(0x8850, &mut g);
    assert_eq!(
        r.shape(),
        s(&["+1000@0", "+4000@1", "-4000@1", "-1000@0", "L@0", "+8000@0", "+8800@1"])
    );
    assert_eq!(r.engine.stats.resyncs, 1);
}

#[test]
fn frame_records_that_are_not_records_are_ignored() {
    // Frame-pointer-less code: x29 points at data whose "return address" follows no call.
    let mut g = FakeGuest {
        fp: 0xb000,
        ..Default::default()
    };
    g.records.insert(0xb000, (0xb100, 0x5555));
    g.direct_calls.insert(0x110, 0x180); // bl setjmp at 0x10c in main
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14);
    r.call(0x200, 0x118);
    r.ret(0x110, &mut g);
    assert_eq!(r.shape(), s(&["+100@0", "+200@1", "-200@1"]));
}

#[test]
fn hopeless_return_closes_everything() {
    let mut g = FakeGuest {
        fp: 0,
        ..Default::default()
    };
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14);
    r.call(0x200, 0x104);
    r.ret(0xdead, &mut g);
    assert_eq!(
        r.shape(),
        s(&["+100@0", "+200@1", "-200@1", "-100@0", "L@0"])
    );
    assert_eq!(r.engine.stats.resyncs, 0);
    assert_eq!(r.engine.stats.unmatched_returns, 1);
}

#[test]
fn frames_past_the_depth_cap_are_followed_not_recorded() {
    let mut g = FakeGuest::default();
    let mut r = Rig::new(2);
    for i in 0..4 {
        r.call(0x100 * (i + 1), 0x10 + i);
    }
    for i in (0..4).rev() {
        r.ret(0x10 + i, &mut g);
    }
    assert_eq!(r.shape(), s(&["+100@0", "+200@1", "-200@1", "-100@0"]));
    assert_eq!(r.engine.stats.depth_cap_hits, 2);
    assert_eq!(r.engine.stats.unmatched_returns, 0);
}

#[test]
fn time_never_goes_backwards() {
    // The general path clamps; the fast path is only given the instruction counter.
    let mut g = FakeGuest::default();
    let mut r = Rig::general(16);
    r.engine.call(100, 0x100, 0x14);
    r.engine.ret(50, 0x14, &mut g);
    let recs = r.records();
    assert_eq!(recs[1].time, 100);
}

#[test]
fn an_eret_to_the_callers_return_address_from_inside_the_callee_is_a_return() {
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14); // start
    r.call(0x4000, 0x108); //  init_el: ends with `msr elr_el1, lr; eret`
    r.engine.exception_return(100, 0x108, 0x4030);
    assert_eq!(r.engine.stats.eret_returns, 1);
    assert_eq!(r.shape(), s(&["+100@0", "+4000@1", "-4000@1"]));
}

#[test]
fn a_fetch_fault_into_the_same_code_elsewhere_moves_the_stack_with_it() {
    use qemu_uftrace_engine::exceptions::ExceptionKind;
    // RISC-V Linux's relocate_enable_mmu, called at a physical address: the fetch after its
    // satp write faults into the same instruction's virtual twin, and it returns to the twin
    // of its return address.
    let mut r = Rig::new(1024);
    let offset = 0xffff_ffff_0000_0000_u64.wrapping_sub(0x200000);
    r.call(0x8020_0040, 0x8020_00d0);
    assert!(!r.engine.continues_remapped(
        ExceptionKind::DataAbort,
        0x8020_0090,
        0x8020_0090 + offset
    ));
    assert!(!r.engine.continues_remapped(
        ExceptionKind::InsnAbort,
        0x8020_0090,
        0xffff_ffff_8000_0100
    ));
    assert!(r.engine.continues_remapped(
        ExceptionKind::InsnAbort,
        0x8020_0090,
        0x8020_0090 + offset
    ));
    let mut g = FakeGuest::default();
    r.ret(0x8020_00d0_u64.wrapping_add(offset), &mut g);
    assert_eq!(r.engine.stats.unmatched_returns, 0);
    assert_eq!(r.engine.stats.exceptions, 0);
    assert_eq!(r.shape(), s(&["+80200040@0", "-80200040@0"]));
}

#[test]
fn an_interrupt_return_never_closes_a_frame() {
    // Direct recursion: the inner f returned to 0x208 inside the outer f, whose own frame also
    // returns to 0x208; an interrupt taken right there returns (ERET) from vector code.
    let mut r = Rig::new(1024);
    r.call(0x200, 0x14);
    r.call(0x200, 0x208);
    r.engine.exception_return(100, 0x208, 0xffff_0800);
    assert_eq!(r.engine.stats.eret_returns, 0);
    assert_eq!(r.engine.stack().len(), 2);
}

#[test]
fn a_return_whose_landing_was_not_seen_closes_the_top_frame() {
    // A new task's first run returns to `ret_from_fork`, which no call precedes: the next
    // event settles it as the top frame's return.
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14);
    r.call(0x200, 0x104);
    r.engine.ret_unseen(30);
    r.call(0x300, 0x108);
    r.ret(0x108, &mut g);
    assert_eq!(
        r.shape(),
        s(&["+100@0", "+200@1", "-200@1", "+300@1", "-300@1"])
    );
    assert_eq!(r.engine.stats.returns_unseen, 1);
    assert_eq!(r.engine.stats.returns, 2);
    // With nothing open there is nothing to close.
    let mut empty = Rig::new(1024);
    empty.engine.ret_unseen(10);
    assert!(empty.shape().is_empty());
}

/// A tiny deterministic generator, so the sequences below are the same on every run.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Runs one event sequence through a rig: calls, returns to the top frame, to a frame
/// further down (longjmp), to nowhere (resync), and returns whose landing was not seen.
fn drive(r: &mut Rig, seed: u64, events: usize) {
    let mut g = FakeGuest::default();
    let mut rng = XorShift(seed);
    for _ in 0..events {
        let open: Vec<u64> = r
            .engine
            .stack()
            .frames()
            .iter()
            .map(|f| f.ret_addr)
            .collect();
        match rng.below(20) {
            0..=9 => r.call(0x1000 + rng.below(8) * 0x100, 0x8000 + rng.below(64) * 4),
            10..=16 if !open.is_empty() => r.ret(open[open.len() - 1], &mut g),
            17 if !open.is_empty() => r.ret(open[rng.below(open.len() as u64) as usize], &mut g),
            18 => r.ret(0x9_0000 + rng.below(16) * 4, &mut g),
            _ => {
                r.t += 10;
                r.engine.ret_unseen(r.t);
            }
        }
    }
}

/// An engine given no buffer, whose spill gives back none either, still writes every record
/// (it grows what it is given), never past a buffer's end: under Miri this checks the
/// unchecked writes of the hot path.
#[test]
fn empty_buffers_are_grown_not_overrun() {
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&out);
    let spill = Box::new(move |_tid: u32, full: Vec<u8>| {
        sink.lock().unwrap().extend_from_slice(&full);
        Vec::new()
    });
    let mut engine = Engine::new(Vec::new(), spill, 1024, 1);
    let mut g = FakeGuest::default();
    for i in 0..40u64 {
        if !engine.try_call(i * 2, 0x100 + i, 0x14 + i * 4) {
            engine.call(i * 2, 0x100 + i, 0x14 + i * 4);
        }
    }
    for i in (0..40u64).rev() {
        if !engine.try_ret(100 + i, 0x14 + i * 4) {
            engine.ret(100 + i, 0x14 + i * 4, &mut g);
        }
    }
    engine.flush();
    let recs = decode_all(&out.lock().unwrap()).unwrap();
    assert_eq!(recs.len(), 80);
    assert_eq!(engine.stats().events, 80);
}

#[test]
fn the_fast_path_records_exactly_what_the_general_path_does() {
    // A record depth of 5 and four-record buffers make the fast path's refusals common.
    // Miri checks the same paths on fewer, shorter runs (it is ~1000x slower).
    let (seeds, events) = if cfg!(miri) { (2, 300) } else { (20, 5_000) };
    for seed in 1..=seeds {
        let mut fast = Rig::new(5);
        let mut general = Rig::general(5);
        drive(&mut fast, seed, events);
        drive(&mut general, seed, events);
        // Most events are shallow calls and matching returns: the fast path must take them.
        assert!(
            fast.fast_hits > events as u64 / 5,
            "seed {seed}: {} fast",
            fast.fast_hits
        );
        let (a, b) = (fast.records(), general.records());
        assert!(!a.is_empty());
        assert_eq!(a, b, "seed {seed}");
        assert_eq!(
            format!("{:?}", fast.engine.stats()),
            format!("{:?}", general.engine.stats()),
            "seed {seed}"
        );
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "16 K frames: minutes under Miri; the stack code is covered by the others"
)]
fn calls_past_the_hard_stack_limit_are_counted_and_their_returns_swallowed() {
    let limit = qemu_uftrace_engine::hot::HARD_STACK_LIMIT as u64;
    // Distinct return addresses, and recursion from one call site (all the same).
    for step in [4, 0] {
        let mut g = FakeGuest::default();
        let mut rigs = [Rig::new(1024), Rig::general(1024)];
        for r in &mut rigs {
            for i in 0..limit + 3 {
                r.call(0x100, 0x10_0000 + i * step);
            }
            assert_eq!(r.engine.stats.stack_overflows, 3);
            for i in (0..limit + 3).rev() {
                r.ret(0x10_0000 + i * step, &mut g);
            }
            assert_eq!(r.engine.stack().len(), 0);
            assert_eq!(r.engine.stats.unmatched_returns, 0);
        }
        let [fast, general] = &mut rigs;
        let recs = fast.records();
        assert_eq!(recs.len(), 2 * 1024);
        assert_eq!(recs.last().map(|x| x.depth), Some(0));
        assert_eq!(recs, general.records(), "step {step}");
    }
}

#[test]
fn a_forked_child_keeps_the_stack_but_not_the_parents_records() {
    let mut r = Rig::general(64);
    let mut g = FakeGuest::default();
    r.call(0x100, 0x504);
    r.call(0x200, 0x604);
    // The fork: the two entries buffered are the parent's to write.
    r.engine.fork_child(7);
    assert_eq!(r.engine.tid(), 7);
    assert_eq!(r.engine.stats().events, 0);
    r.ret(0x604, &mut g);
    r.ret(0x504, &mut g);
    assert_eq!(r.shape(), s(&["-200@1", "-100@0"]));
    assert_eq!(r.engine.stats().returns, 2);
}

#[test]
fn a_function_entered_by_a_jump_nests_in_the_jumper_and_closes_with_it() {
    let mut g = FakeGuest::default();
    for fast in [true, false] {
        let mut r = Rig::driven(fast, 1024);
        r.call(0x100, 0x14); // start: bl __wrap_main
        r.t += 10;
        r.engine.jump_entry(r.t, 0x200); //  __wrap_main: b main
        r.call(0x300, 0x208); //   main: bl f
        r.t += 10;
        r.engine.jump_entry(r.t, 0x400); //    f: b g (a tail call)
        r.ret(0x208, &mut g); //    g returns to main
        r.ret(0x14, &mut g); //   main returns for __wrap_main
        assert_eq!(
            r.shape(),
            s(&["+100@0", "+200@1", "+300@2", "+400@3", "-400@3", "-300@2", "-200@1", "-100@0"])
        );
        assert_eq!(r.engine.stats.deep_returns, 0);
        assert_eq!(r.engine.stats.unmatched_returns, 0);
        assert_eq!(r.engine.stats.jump_entries, 2);
        assert!(r.engine.stack().is_empty());
    }
    // A return no landing saw closes the jumped frames with the one they replaced.
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14);
    r.call(0x300, 0x108);
    r.t += 10;
    r.engine.jump_entry(r.t, 0x400);
    r.engine.jump_entry(r.t, 0x500);
    r.engine.ret_unseen(r.t + 10);
    assert_eq!(r.engine.stack().len(), 1);
}

#[test]
fn a_far_return_to_an_entry_no_frame_returns_to_is_a_jump_into_it() {
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14); // the boot code's frame
    r.call(0x200, 0x108); //  a call that returns as usual
                          // `lretq` to 0x108: a frame returns there, so it is that return.
    assert!(!r.engine.far_return_entry(r.t, 0x108));
    r.ret(0x108, &mut g);
    r.t += 10;
    // `lretq` into x86_64_start_kernel (0x300): nested in the boot code's frame.
    assert!(r.engine.far_return_entry(r.t, 0x300));
    r.call(0x400, 0x310); //  x86_64_start_kernel calls copy_bootdata
    r.ret(0x310, &mut g);
    assert_eq!(
        r.shape(),
        s(&["+100@0", "+200@1", "-200@1", "+300@1", "+400@2", "-400@2"])
    );
    assert_eq!(r.engine.stats.jump_entries, 1);
}

/// `__libc_start_call_main` (0x100) calls `__wrap_main` (0x200), which enters `main`
/// (0x300) by a jump; main calls setjmp (0x180), then `fail` (0x400), whose call to
/// longjmp (0x500) returns to setjmp's return address; main then calls `after` (0x600).
fn longjmp_in_jumped_main(g: &mut FakeGuest) -> Rig {
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14); // __libc_start_call_main
    r.call(0x200, 0x108); //  __wrap_main
    r.t += 10;
    r.engine.jump_entry(r.t, 0x300); //   main
    r.call(0x180, 0x310); //    setjmp
    r.ret(0x310, g);
    r.call(0x400, 0x3f0); //    fail (noreturn: its return address is past main's end)
    r.call(0x500, 0x410); //     longjmp, back to setjmp's return address
    r.ret(0x310, g);
    r.call(0x600, 0x314); //    after
    r
}

#[test]
fn a_longjmp_into_a_function_entered_by_a_jump_keeps_it_open() {
    // __libc_start_call_main calls __wrap_main, which enters main by `b main`; main's
    // frame record (its frame pointer after the longjmp) returns to __libc_start_call_main.
    let mut g = FakeGuest {
        fp: 0x8000,
        ..Default::default()
    };
    g.records.insert(0x8000, (0x9000, 0x108));
    g.direct_calls.insert(0x108, 0x200);
    let mut r = longjmp_in_jumped_main(&mut g);
    let shape = r.shape();
    assert_eq!(
        shape[shape.len() - 4..],
        s(&["+500@4", "-500@4", "-400@3", "+600@3"])
    );
    assert_eq!(r.engine.stack().len(), 4);
}

#[test]
fn a_longjmp_leaves_one_exit_as_libmcount_does() {
    // As longjmp_without_frame_pointers_returns_into_the_setjmp_caller, with 0x400 a function
    // uftrace's replay treats as longjmp: of the frames it skips only those entered after it
    // get their exits, and the outermost (a, at setjmp's depth) one named for the call
    // before the landing (setjmp's), as libmcount writes it.
    let mut g = FakeGuest::default();
    g.direct_calls.insert(0x110, 0x180);
    let mut r = Rig::new(1024);
    r.engine.set_longjmp_test(|f| f == 0x400);
    r.call(0x100, 0x14); // main
    r.call(0x180, 0x110); //  setjmp
    r.ret(0x110, &mut g);
    r.call(0x200, 0x118); //  a
    r.call(0x300, 0x208); //   b
    r.call(0x400, 0x308); //    longjmp
    r.call(0x600, 0x408); //     __longjmp (its callee: entered after it, closed as usual)
    r.ret(0x110, &mut g);
    r.call(0x500, 0x11c); //  after
    assert_eq!(
        r.shape(),
        s(&[
            "+100@0", "+180@1", "-180@1", "+200@1", "+300@2", "+400@3", "+600@4", "-600@4",
            "-180@1", "+500@1"
        ])
    );
    assert_eq!(r.engine.stack().len(), 2);
}

#[test]
fn a_longjmp_into_a_function_without_a_frame_record_keeps_it_open() {
    // main (no frame pointer) is entered by __wrap_main's jump; the frame pointer the
    // longjmp restores is its caller's caller's, whose record returns to _start. The call
    // before the landing (main's call to setjmp at 0x30c) places the landing in main.
    let mut g = FakeGuest {
        fp: 0x8000,
        ..Default::default()
    };
    g.records.insert(0x8000, (0x9000, 0x14));
    g.direct_calls.insert(0x14, 0x100);
    g.direct_calls.insert(0x310, 0x180);
    let mut r = longjmp_in_jumped_main(&mut g);
    let shape = r.shape();
    assert_eq!(
        shape[shape.len() - 4..],
        s(&["+500@4", "-500@4", "-400@3", "+600@3"])
    );
}

/// What `-F filter -N notrace`, `depth` frames deep, keeps of an unfiltered trace, as
/// uftrace's replay filters one: each record's frames from the task's open entries; depths
/// counted from the outermost open filter function.
fn filtered_reference(
    all: &[Record],
    filter: &[u64],
    notrace: &[u64],
    depth: usize,
) -> Vec<Record> {
    let mut open: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    // Where a record with `frames` open below and at it is written.
    let place = |frames: &[u64], d: usize| -> Option<usize> {
        if frames.iter().any(|f| notrace.contains(f)) {
            return None;
        }
        let root = if filter.is_empty() {
            0
        } else {
            frames.iter().position(|f| filter.contains(f))?
        };
        Some(d - root).filter(|&d| d < depth)
    };
    for r in all {
        let d = r.depth as usize;
        let written = match r.kind {
            RecordType::Entry => {
                open.truncate(d);
                open.push(r.addr);
                place(&open, d)
            }
            RecordType::Exit => {
                let p = place(&open[..=d], d);
                open.truncate(d);
                p
            }
            // Markers sit at the current depth, capped, inside a written subtree.
            _ => {
                let root = if filter.is_empty() {
                    Some(0)
                } else {
                    open.iter().position(|f| filter.contains(f))
                };
                root.filter(|_| !open.iter().any(|f| notrace.contains(f)))
                    .map(|root| (d - root).min(depth))
            }
        };
        if let Some(d) = written {
            out.push(Record {
                depth: d as u16,
                ..*r
            });
        }
    }
    out
}

/// The random programs (seeds) and their length for one case of a test that holds the
/// engine against a reference over many cases: twenty of 5,000 events natively (0.1 s for
/// all of this file); under Miri, which checks the unsafe code the events reach at about
/// 8 ms an event, one of 300, seeds 1 and 2 in turn from case to case. Both seeds for every
/// case made these two tests half of Miri's four minutes, and Miri's tail was the suite's
/// longest wait.
fn seeds_and_events(case: usize) -> (std::ops::RangeInclusive<u64>, usize) {
    if cfg!(miri) {
        let seed = 1 + case as u64 % 2;
        (seed..=seed, 300)
    } else {
        (1..=20, 5_000)
    }
}

#[test]
fn filters_write_exactly_the_unfiltered_traces_subtrees() {
    let cases: [(&[u64], &[u64], usize); 5] = [
        (&[0x1200], &[], 1024),
        (&[], &[0x1500], 1024),
        (&[0x1200, 0x1300], &[0x1500], 1024),
        (&[0x1200], &[], 2),
        (&[0x1200], &[0x1200], 1024),
    ];
    for (case, (filter, notrace, depth)) in cases.into_iter().enumerate() {
        let (seeds, events) = seeds_and_events(case);
        for seed in seeds {
            let mut all = Rig::new(1024);
            let mut some = Rig::new(depth);
            let mut general = Rig::general(depth);
            general.engine.set_gates(filter.to_vec(), notrace.to_vec());
            drive(&mut general, seed, events);
            some.engine.set_gates(filter.to_vec(), notrace.to_vec());
            drive(&mut all, seed, events);
            drive(&mut some, seed, events);
            let expected = filtered_reference(&all.records(), filter, notrace, depth);
            let got = some.records();
            assert_eq!(
                got, expected,
                "{filter:x?} -N {notrace:x?} depth {depth}, seed {seed}"
            );
            assert!(!got.is_empty() || filter == notrace);
            // The follow-only fast path changes nothing but the cost.
            let stats = some.engine.stats();
            assert_eq!(got, general.records(), "seed {seed}");
            assert_eq!(
                format!("{stats:?}"),
                format!("{:?}", general.engine.stats())
            );
            assert_eq!(some.fast_hits > 0, !filter.is_empty(), "seed {seed}");
            assert!(stats.filtered > 0, "seed {seed}");
            assert_eq!(stats.calls, all.engine.stats().calls);
        }
    }
}

#[test]
fn an_iret_used_as_a_far_jump_inside_a_handler_closes_nothing() {
    use qemu_uftrace_engine::exceptions::{EretOutcome, ExceptionKind};
    let (irq, int) = (ExceptionKind::Irq.addr(), ExceptionKind::SoftInt.addr());
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    // SeaBIOS in a timer interrupt taken at 0x102d4 (its frame pushed at 0x7000): a
    // function (0xfd008) enters a 16-bit trampoline by `iretw` to 0xfe829 (popping a frame
    // it pushed at 0x6f00), which runs `int $0x1c` (an IRET-only handler, frame at 0x6f04)
    // and comes back by a return to 0xf7fc3; the handler's own IRET, back on the frame
    // the interrupt pushed, goes back to 0x102d4.
    r.call(0x102d0, 0x10333);
    r.engine.exception_entry(10, ExceptionKind::Irq, 0x102d4);
    r.engine.exception_frame(0x7000);
    r.t = 10;
    r.call(0xfd008, 0xf7fc3);
    let iret =
        |r: &mut Rig, t, target, frame| r.engine.exception_return_16(t, target, 0xfd049, frame);
    assert_eq!(iret(&mut r, 20, 0xfe829, 0x6f00), EretOutcome::Jumped);
    r.engine
        .exception_entry(21, ExceptionKind::SoftInt, 0xfe82b);
    r.engine.exception_frame(0x6f04);
    assert_eq!(
        iret(&mut r, 22, 0xfe82b, 0x6f04),
        EretOutcome::ClosedException
    );
    r.t = 30;
    r.ret(0xf7fc3, &mut g);
    // A handler that changed where it resumes is still left by the IRET on its frame.
    assert_eq!(
        iret(&mut r, 40, 0x102e0, 0x7000),
        EretOutcome::ClosedException
    );
    r.t = 50;
    r.ret(0x10333, &mut g);
    assert_eq!(
        r.shape(),
        s(&[
            "+102d0@0",
            &format!("+{irq:x}@1"),
            "+fd008@2",
            &format!("+{int:x}@3"),
            &format!("-{int:x}@3"),
            "-fd008@2",
            &format!("-{irq:x}@1"),
            "-102d0@0",
        ])
    );
    assert_eq!(r.engine.stats.eret_jumps, 1);
    assert_eq!(r.engine.stats.eret_redirects, 1);
    assert_eq!(r.engine.stats.unmatched_returns, 0);
}

/// x86's `call` pushes its return address: where that push faults (a forked child's first
/// write to its stack), the handler returns to the call, which runs again. The entry its
/// first run wrote is taken back, so the call is written once, after the fault. A fault
/// anywhere else in a function keeps its frame, as does one past a record written since.
#[test]
fn a_call_that_faults_before_it_runs_is_written_once() {
    use qemu_uftrace_engine::exceptions::ExceptionKind;
    let pf = ExceptionKind::PageFault.addr();
    let mut g = FakeGuest::default();
    for fast in [true, false] {
        let mut r = Rig::driven(fast, 1024);
        r.call(0x100, 0x10);
        // `call 0x200` at 0x14b (5 bytes) faults, and runs again after the handler.
        r.call(0x200, 0x150);
        assert!(r.engine.unmake_faulted_call(0x14b));
        r.engine
            .exception_entry(r.t + 1, ExceptionKind::PageFault, 0x14b);
        r.engine.exception_return(r.t + 5, 0x14b, 0x999);
        r.t += 10;
        r.call(0x200, 0x150);
        // A fault inside 0x200 (at 0x208): its frame stays.
        assert!(!r.engine.unmake_faulted_call(0x208));
        // A recursive call at 0x202 of 0x200 (returning to 0x207): the push at 0x201 of
        // the callee's prologue faults after the call ran. Its frame stays.
        r.call(0x200, 0x207);
        assert!(!r.engine.unmake_faulted_call(0x201));
        r.ret(0x207, &mut g);
        // A call whose entry is no longer the last record: nothing taken back.
        r.call(0x300, 0x20c);
        r.engine.emit_carriers([1u64 << 63].into_iter());
        assert!(!r.engine.unmake_faulted_call(0x207));
        r.ret(0x20c, &mut g);
        r.ret(0x150, &mut g);
        r.ret(0x10, &mut g);
        let shape: Vec<String> = r
            .shape()
            .into_iter()
            .filter(|l| !l.starts_with('!'))
            .collect();
        assert_eq!(
            shape,
            s(&[
                "+100@0",
                &format!("+{pf:x}@1"),
                &format!("-{pf:x}@1"),
                "+200@1",
                "+200@2",
                "-200@2",
                "+300@2",
                "-300@2",
                "-200@1",
                "-100@0",
            ]),
            "fast path: {fast}"
        );
        assert_eq!(r.engine.stats.faulted_calls, 1);
        assert_eq!(r.engine.stats.calls, 4);
    }
}

/// The same under `-t`, `-F` and `-D`, whose entries are not written at once: the entry the
/// time filter holds goes, a frame outside the filtered subtree or too deep goes with its
/// count, and a filter function's faulted call opens its subtree once, after the fault.
#[test]
fn a_call_that_faults_before_it_runs_is_written_once_under_filters() {
    use qemu_uftrace_engine::exceptions::ExceptionKind;
    let pf = ExceptionKind::PageFault.addr();
    let mut g = FakeGuest::default();
    // (what is set, the calls: outer 0x100, then 0x200 whose push faults, then 0x300
    // beneath it, and the expected records)
    type Setup = fn(&mut Rig);
    let cases: [(&str, Setup, Vec<String>); 3] = [
        (
            "-t 1",
            |r| r.engine.set_time_filter(1),
            s(&[
                "+100@0",
                &format!("+{pf:x}@1"),
                &format!("-{pf:x}@1"),
                "+200@1",
                "+300@2",
                "-300@2",
                "-200@1",
                "-100@0",
            ]),
        ),
        (
            "-F 0x200",
            |r| r.engine.set_gates(vec![0x200], vec![]),
            s(&["+200@0", "+300@1", "-300@1", "-200@0"]),
        ),
        ("-D 1", |_| {}, s(&["+100@0", "-100@0"])),
    ];
    for (what, setup, want) in cases {
        for fast in [true, false] {
            let depth = if what == "-D 1" { 1 } else { 1024 };
            let mut r = Rig::driven(fast, depth);
            setup(&mut r);
            r.call(0x100, 0x10);
            r.call(0x200, 0x150);
            assert!(r.engine.unmake_faulted_call(0x14b), "{what}, fast {fast}");
            r.engine
                .exception_entry(r.t + 1, ExceptionKind::PageFault, 0x14b);
            r.engine.exception_return(r.t + 5, 0x14b, 0x999);
            r.t += 10;
            r.call(0x200, 0x150);
            r.call(0x300, 0x250);
            r.ret(0x250, &mut g);
            r.ret(0x150, &mut g);
            r.ret(0x10, &mut g);
            let shape: Vec<String> = (r.shape().into_iter())
                .filter(|l| !l.starts_with('!'))
                .collect();
            assert_eq!(shape, want, "{what}, fast path: {fast}");
            let stats = &r.engine.stats;
            assert_eq!(
                (stats.faulted_calls, stats.calls),
                (1, 3),
                "{what}, fast {fast}"
            );
            if what == "-F 0x200" {
                // 0x100 only: the exception entered outside the subtree is no call.
                assert_eq!(stats.filtered, 2 + 2, "{what}: {stats:?}");
                let reached: Vec<u64> = (r.engine.gates().unwrap().filter_reached()).collect();
                assert_eq!(reached, [0x200]);
            }
            if what == "-D 1" {
                // The second 0x200, 0x300 and the exception: not the faulted call.
                assert_eq!(stats.depth_cap_hits, 3, "{what}: {stats:?}");
            }
        }
    }
}

/// A call into another file's PLT entry (0x200), which jumps on to a guest file's function
/// (0x500): at the function's first instruction the call is made again as one of it
/// (`call_through_stub`), to the same return address. Its ENTRY is the function's; under
/// `-F` of the function, which the PLT entry was not, it opens the filtered subtree; under
/// `-t` the entry that waits is the function's. Where something was recorded since the
/// call, nothing is taken back.
#[test]
fn a_call_through_a_stub_is_made_one_of_the_function_it_jumps_to() {
    let mut g = FakeGuest::default();
    type Setup = fn(&mut Rig);
    let whole = s(&["+100@0", "+500@1", "+300@2", "-300@2", "-500@1", "-100@0"]);
    let cases: [(&str, Setup, Vec<String>); 3] = [
        ("none", |_| {}, whole.clone()),
        ("-t 1", |r| r.engine.set_time_filter(1), whole),
        (
            "-F 0x500",
            |r| r.engine.set_gates(vec![0x500], vec![]),
            s(&["+500@0", "+300@1", "-300@1", "-500@0"]),
        ),
    ];
    for (what, setup, want) in cases {
        for fast in [true, false] {
            let mut r = Rig::driven(fast, 1024);
            setup(&mut r);
            r.call(0x100, 0x10);
            r.call(0x200, 0x150);
            assert!(r.engine.call_through_stub(0x500), "{what}, fast {fast}");
            r.call(0x300, 0x520);
            r.ret(0x520, &mut g);
            // Its callee's records came since: not taken back.
            assert!(!r.engine.call_through_stub(0x600), "{what}, fast {fast}");
            r.ret(0x150, &mut g);
            r.ret(0x10, &mut g);
            let shape: Vec<String> = (r.shape().into_iter())
                .filter(|l| !l.starts_with('!'))
                .collect();
            assert_eq!(shape, want, "{what}, fast path: {fast}");
            assert_eq!(r.engine.stats.calls, 3, "{what}, fast path: {fast}");
        }
    }
}

#[test]
fn exceptions_stay_in_the_subtree_they_were_taken_in() {
    use qemu_uftrace_engine::exceptions::ExceptionKind;
    let irq = ExceptionKind::Irq.addr();
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.engine.set_gates(vec![0x200], vec![0x400]);
    r.call(0x100, 0x10);
    r.engine.exception_entry(30, ExceptionKind::Irq, 0x50);
    r.t = 30;
    r.call(0x300, 0x60);
    r.ret(0x60, &mut g);
    r.engine.exception_return(60, 0x50, 0x99);
    r.t = 60;
    r.call(0x200, 0x14);
    r.engine.exception_entry(80, ExceptionKind::Irq, 0x70);
    r.t = 80;
    r.call(0x300, 0x64);
    r.call(0x400, 0x68);
    r.call(0x300, 0x6c);
    r.ret(0x6c, &mut g);
    r.ret(0x68, &mut g);
    r.ret(0x64, &mut g);
    r.engine.exception_return(150, 0x70, 0x99);
    r.t = 150;
    r.ret(0x14, &mut g);
    r.ret(0x10, &mut g);
    assert_eq!(
        r.shape(),
        s(&[
            "+200@0",
            &format!("+{irq:x}@1"),
            "+300@2",
            "-300@2",
            &format!("-{irq:x}@1"),
            "-200@0",
        ])
    );
    // 0x100, the first irq and its 0x300, 0x400 and its 0x300: entries and exits.
    assert_eq!(r.engine.stats().filtered, 2 * 5);
    let g = r.engine.gates().unwrap();
    assert!(g.filter_reached().eq([0x200]) && g.notrace_reached().eq([0x400]));
}

#[test]
fn each_context_keeps_its_own_subtree() {
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.engine.set_gates(vec![0x200], vec![]);
    r.call(0x200, 0x10);
    let inside = r.engine.suspend();
    // Another task, never in the filter: nothing of it is written, nor its scheduler event.
    r.engine.resume(2, Default::default());
    r.call(0x300, 0x20);
    r.engine
        .event(r.t, qemu_uftrace_engine::hot::EVENT_SCHED_OUT);
    let outside = r.engine.suspend();
    r.engine.resume(1, inside);
    r.call(0x300, 0x24);
    r.ret(0x24, &mut g);
    r.ret(0x10, &mut g);
    let _ = r.engine.suspend();
    r.engine.resume(2, outside);
    r.ret(0x20, &mut g);
    assert_eq!(r.shape(), s(&["+200@0", "+300@1", "-300@1", "-200@0"]));
}

#[test]
fn an_eret_to_user_space_with_nothing_open_hands_over() {
    use qemu_uftrace_engine::exceptions::EretOutcome;
    // A new task's first return to user space (arm64 ret_from_fork: bl schedule_tail,
    // b ret_to_user, ERET to EL0): nothing returns to ret_to_user, and the user's calls
    // start at depth 0 rather than inside it.
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14); // schedule_tail
    r.ret(0x14, &mut g);
    r.t += 10;
    r.engine.jump_entry(r.t, 0x200); // b ret_to_user
    r.call(0x300, 0x208); //  a call on the way out
    r.ret(0x208, &mut g);
    r.t += 10;
    assert_eq!(
        r.engine.exception_return_down(r.t, 0x40_0000, 0x240),
        EretOutcome::HandedOver
    );
    r.call(0x40_1000, 0x40_0010); // the user's main
    r.ret(0x40_0010, &mut g);
    assert_eq!(
        r.shape(),
        s(&[
            "+100@0",
            "-100@0",
            "+200@0",
            "+300@1",
            "-300@1",
            "-200@0",
            "+401000@0",
            "-401000@0"
        ])
    );
    assert_eq!(r.engine.stats.unmatched_returns, 0);
    // OpenSBI's mret into the kernel from sbi_hart_switch_mode: its frames close there.
    let mut r = Rig::new(1024);
    r.call(0x8000_0100, 0x8000_0014); // sbi_init
    r.call(0x8000_0400, 0x8000_0108); //  sbi_hart_switch_mode
    r.t += 10;
    assert_eq!(
        r.engine
            .exception_return_down(r.t, 0x8020_0000, 0x8000_0440),
        EretOutcome::HandedOver
    );
    assert!(r.engine.stack().is_empty());
    // With nothing open there is nothing to hand over.
    assert_eq!(
        r.engine
            .exception_return_down(r.t, 0x8020_0000, 0x8000_0440),
        EretOutcome::Nothing
    );
}

#[test]
fn an_eret_down_from_a_function_to_its_callers_return_address_is_a_return() {
    use qemu_uftrace_engine::exceptions::EretOutcome;
    // arm64 init_kernel_el at EL2: `msr elr_el2, lr; eret` to EL1, from a part it jumped
    // to: a return from init_kernel_el, not a hand-over.
    let mut r = Rig::new(1024);
    r.call(0x100, 0x14); // primary_entry's caller
    r.call(0x4000, 0x108); //  init_kernel_el
    r.t += 10;
    r.engine.jump_entry(r.t, 0x4100); //   b init_el2
    assert_eq!(
        r.engine.exception_return_down(r.t + 10, 0x108, 0x4130),
        EretOutcome::ClosedFunction
    );
    assert_eq!(
        r.shape(),
        s(&["+100@0", "+4000@1", "+4100@2", "-4100@2", "-4000@1"])
    );
    assert_eq!(r.engine.stats.eret_returns, 1);
}

#[test]
fn an_eret_ends_the_functions_entered_by_a_jump_it_leaves() {
    use qemu_uftrace_engine::exceptions::EretOutcome;
    // Without exception entries (QEMU 10.0), an arm64 syscall's vector slot jumps to
    // el0t_64_sync on top of the user's frame, which jumps to ret_to_user, whose ERET goes
    // back to the user: those two end there, the user's frame stays.
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x40_1000, 0x40_0010); // main
    r.t += 10;
    r.engine.jump_entry(r.t, 0xffff_0800); //  el0t_64_sync
    r.call(0xffff_2000, 0xffff_0808); //   el0t_64_sync_handler
    r.ret(0xffff_0808, &mut g);
    r.t += 10;
    r.engine.jump_entry(r.t, 0xffff_0900); //   ret_to_user
    r.t += 10;
    assert_eq!(
        r.engine.exception_return(r.t, 0x40_1010, 0xffff_0940),
        EretOutcome::ClosedJumped
    );
    assert_eq!(r.engine.stack().len(), 1);
    r.ret(0x40_0010, &mut g);
    assert_eq!(
        r.shape(),
        s(&[
            "+401000@0",
            "+ffff0800@1",
            "+ffff2000@2",
            "-ffff2000@2",
            "+ffff0900@2",
            "-ffff0900@2",
            "-ffff0800@1",
            "-401000@0"
        ])
    );
    assert_eq!(r.engine.stats.unmatched_returns, 0);
}

#[test]
fn an_exceptions_own_jumps_to_its_handler_are_no_entries() {
    use qemu_uftrace_engine::exceptions::{EretOutcome, ExceptionKind};
    // With exception entries: the vector slot's `b el0t_64_sync` and its `b ret_to_user`
    // after the handler are the exception's own code, which `[svc]` stands for.
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x40_1000, 0x40_0010); // main
    r.t += 10;
    r.engine.exception_entry(r.t, ExceptionKind::Svc, 0x40_1008);
    r.engine.jump_entry(r.t + 1, 0xffff_0800); // el0t_64_sync
    r.call(0xffff_2000, 0xffff_0808); //   el0t_64_sync_handler
    r.ret(0xffff_0808, &mut g);
    r.t += 10;
    r.engine.jump_entry(r.t, 0xffff_0900); // ret_to_user
    r.t += 10;
    assert_eq!(
        r.engine.exception_return_down(r.t, 0x40_1008, 0xffff_0940),
        EretOutcome::ClosedException
    );
    r.ret(0x40_0010, &mut g);
    let svc = format!("{:x}", ExceptionKind::Svc.addr());
    assert_eq!(
        r.shape(),
        s(&[
            "+401000@0",
            &format!("+{svc}@1"),
            "+ffff2000@2",
            "-ffff2000@2",
            &format!("-{svc}@1"),
            "-401000@0"
        ])
    );
    assert_eq!(r.engine.stats.jump_entries, 0);
}

#[test]
fn a_return_from_functions_entered_by_jumps_alone_closes_them() {
    // riscv64's ret_from_fork: `la ra, ret_from_exception; tail syscall_exit_to_user_mode`
    // on a new task's empty stack: its return goes where no call came from.
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.t += 10;
    r.engine.jump_entry(r.t, 0x300); // syscall_exit_to_user_mode
    r.call(0x400, 0x310);
    r.ret(0x310, &mut g);
    r.ret(0x900, &mut g); // to ret_from_exception
    assert_eq!(r.shape(), s(&["+300@0", "+400@1", "-400@1", "-300@0"]));
    assert_eq!(r.engine.stats.unmatched_returns, 0);
    assert_eq!(r.engine.stats.lost_marks, 0);
}

#[test]
fn a_pushed_frame_goes_with_its_entry_not_with_the_next_at_its_depth() {
    use qemu_uftrace_engine::exceptions::{EretOutcome, ExceptionKind};
    let mut r = Rig::new(1024);
    r.call(0x102d0, 0x10333);
    // A 16-bit entry (frame pushed at 0x7000), left by a 32-bit IRET (no frame read).
    r.engine.exception_entry(10, ExceptionKind::Irq, 0x102d4);
    r.engine.exception_frame(0x7000);
    assert_eq!(
        r.engine.exception_return(20, 0x102d4, 0xfd049),
        EretOutcome::ClosedException
    );
    // The next entry at that depth pushed no frame the plugin read: an IRET on the old
    // frame's address is this entry's return, not a far jump.
    r.engine
        .exception_entry(30, ExceptionKind::SoftInt, 0x102e0);
    assert_eq!(
        r.engine.exception_return_16(40, 0x102e0, 0xfd049, 0x7000),
        EretOutcome::ClosedException
    );
    assert_eq!(r.engine.stats.eret_jumps, 0);
    // Nor does a call opened where a closed entry was keep its frame.
    r.engine.exception_entry(50, ExceptionKind::Irq, 0x102e4);
    r.engine.exception_frame(0x7000);
    r.engine.exception_return(60, 0x102e4, 0xfd049);
    r.t = 70;
    r.call(0xfd008, 0xf7fc3);
    assert_eq!(
        r.engine.exception_return_16(80, 0xf7fc3, 0xfd049, 0x7000),
        EretOutcome::ClosedFunction
    );
}

/// What `uftrace replay -t threshold` shows of an unfiltered trace, by its own rules
/// (`get_task_ustack` in uftrace's utils/fstack.c): an exit drops the last waiting entry and
/// what follows it when shorter, else releases everything waiting; LOST records and user
/// events release; what still waits at the end is shown.
fn time_filtered_reference(all: &[Record], threshold: u64) -> Vec<Record> {
    let mut waiting: Vec<Record> = Vec::new();
    let mut out = Vec::new();
    for r in all {
        match r.kind {
            RecordType::Entry => waiting.push(*r),
            RecordType::Exit => match waiting.iter().rposition(|w| w.kind == RecordType::Entry) {
                Some(i) if r.time - waiting[i].time < threshold => waiting.truncate(i),
                _ => {
                    out.append(&mut waiting);
                    out.push(*r);
                }
            },
            RecordType::Event if r.addr < 1_000_000 => waiting.push(*r),
            _ => {
                out.append(&mut waiting);
                out.push(*r);
            }
        }
    }
    out.append(&mut waiting);
    out
}

/// A rig with `-t threshold`, fast paths first as the plugin's timed callbacks take them.
fn time_filtered_rig(threshold: u64) -> Rig {
    let mut r = Rig::new(1024);
    r.engine.set_time_filter(threshold);
    r
}

#[test]
fn a_short_call_is_dropped_and_a_long_ones_ancestors_written_first() {
    let mut g = FakeGuest::default();
    // Each event is 10 later: a leaf called and returned is 10 long.
    let mut r = time_filtered_rig(30);
    r.call(0x100, 0x8000); // 10
    r.call(0x200, 0x8100); // 20: short leaf
    r.ret(0x8100, &mut g); // 30
    r.call(0x300, 0x8200); // 40
    r.call(0x400, 0x8300); // 50
    r.call(0x500, 0x8400); // 60
    r.call(0x600, 0x8500); // 70: short leaf under a long one
    r.ret(0x8500, &mut g); // 80
    r.ret(0x8400, &mut g); // 90: 0x500, 30 long: written, its ancestors first
    r.ret(0x8300, &mut g); // 100: 0x400 is 50 long
    r.ret(0x8200, &mut g); // 110
    r.call(0x700, 0x8600); // 120: short
    r.ret(0x8600, &mut g); // 130
    r.ret(0x8000, &mut g); // 140
                           // The timed fast path took every call (their entries wait) and the short calls'
                           // returns (0x200, 0x600, 0x700); the longer ones' returns write, the general way.
    assert_eq!(r.fast_hits, 10);
    let recs = r.records();
    let shape: Vec<String> = recs
        .iter()
        .map(|x| format!("{:?} {:x}@{} t{}", x.kind, x.addr, x.depth, x.time))
        .collect();
    assert_eq!(
        shape,
        s(&[
            "Entry 100@0 t10",
            "Entry 300@1 t40",
            "Entry 400@2 t50",
            "Entry 500@3 t60",
            "Exit 500@3 t90",
            "Exit 400@2 t100",
            "Exit 300@1 t110",
            "Exit 100@0 t140",
        ])
    );
    let stats = r.engine.stats();
    assert_eq!(stats.time_filtered, 3);
    assert_eq!(stats.events, 8);
    assert_eq!((stats.calls, stats.returns), (7, 7));
}

#[test]
fn frames_still_open_at_the_end_are_written() {
    let mut g = FakeGuest::default();
    let mut r = time_filtered_rig(1000);
    r.call(0x100, 0x8000);
    r.call(0x200, 0x8100);
    r.call(0x300, 0x8200);
    r.ret(0x8200, &mut g); // short: gone
    r.call(0x400, 0x8300);
    // Nothing is written yet: every frame may still turn out short.
    r.engine.flush();
    assert!(r.out.lock().unwrap().is_empty());
    r.engine.release_waiting();
    assert_eq!(r.shape(), s(&["+100@0", "+200@1", "+400@2"]));
    assert_eq!(r.engine.stats().time_filtered, 1);
}

/// A forked child counts the short calls it drops from zero: the parent's, before the
/// fork, are counted by the parent (each process's plugin.stats adds up to the run's).
#[test]
fn a_forked_child_counts_only_its_own_short_calls() {
    let mut g = FakeGuest::default();
    let mut r = time_filtered_rig(1000);
    r.call(0x100, 0x8000);
    r.call(0x200, 0x8100);
    r.ret(0x8100, &mut g); // short: the parent's
    r.call(0x300, 0x8200); // fork()'s entry, waiting
    r.engine.fork_child(7);
    assert_eq!(r.engine.stats().time_filtered, 0);
    r.call(0x400, 0x8300);
    r.ret(0x8300, &mut g); // short: the child's
    r.ret(0x8200, &mut g); // fork() returns in the child: its entry is the parent's
    assert_eq!(r.engine.stats().time_filtered, 1);
    assert_eq!(r.shape(), s(&["-300@1"]));
}

#[test]
fn a_context_switched_away_takes_what_waits_along() {
    let mut g = FakeGuest::default();
    let mut r = time_filtered_rig(100);
    r.call(0x100, 0x8000); // 10
    r.call(0x200, 0x8100); // 20
    let mut away = r.engine.suspend();
    // Another task runs meanwhile: its short call goes, its open frame waits.
    r.engine.resume(2, Default::default());
    r.call(0x900, 0x8900);
    r.call(0x910, 0x8910);
    r.ret(0x8910, &mut g);
    let mut other = r.engine.suspend();
    assert!(r.shape().is_empty(), "nothing is decided yet");
    r.engine.resume(1, std::mem::take(&mut away));
    r.ret(0x8100, &mut g); // 60: 0x200 is 40 long, short: gone
    r.call(0x300, 0x8200); // 70
    r.t += 100;
    r.ret(0x8200, &mut g); // 180: 0x300 is 110 long: written after 0x100's entry
    assert_eq!(r.shape(), s(&["+100@0", "+300@1", "-300@1"]));
    // At the end, the waiting task's open frame is written into its own records.
    r.engine.write_waiting(2, &mut other);
    r.engine.release_waiting();
    assert_eq!(r.shape(), s(&["+100@0", "+300@1", "-300@1", "+900@0"]));
    assert_eq!(r.engine.stats().time_filtered, 2);
}

#[test]
fn the_time_filter_writes_what_uftraces_replay_shows_with_it() {
    for (case, threshold) in [1, 25, 60, 400].into_iter().enumerate() {
        let (seeds, events) = seeds_and_events(case);
        for seed in seeds {
            let mut all = Rig::new(1024);
            let mut some = time_filtered_rig(threshold);
            let mut general = Rig::general(1024);
            general.engine.set_time_filter(threshold);
            drive(&mut all, seed, events);
            drive(&mut some, seed, events);
            drive(&mut general, seed, events);
            some.engine.release_waiting();
            general.engine.release_waiting();
            let expected = time_filtered_reference(&all.records(), threshold);
            let got = some.records();
            assert_eq!(got, expected, "-t {threshold}, seed {seed}");
            // The timed fast path changes nothing but the cost.
            assert_eq!(got, general.records(), "-t {threshold}, seed {seed}");
            assert_eq!(
                format!("{:?}", some.engine.stats()),
                format!("{:?}", general.engine.stats()),
                "-t {threshold}, seed {seed}"
            );
            assert_eq!(general.fast_hits, 0);
            assert!(
                some.fast_hits > 0 || threshold <= 10,
                "-t {threshold}, seed {seed}"
            );
            let stats = some.engine.stats();
            assert_eq!(stats.calls, all.engine.stats().calls);
            assert_eq!(stats.events, got.len() as u64);
            if threshold > 10 {
                assert!(stats.time_filtered > 0, "-t {threshold}, seed {seed}");
                assert!(got.len() < all.records().len());
            }
        }
    }
}

#[test]
fn the_time_filter_keeps_waiting_within_twice_the_deepest_stack() {
    assert_eq!(
        qemu_uftrace_engine::timefilter::MAX_WAITING,
        2 * qemu_uftrace_engine::hot::HARD_STACK_LIMIT
    );
}

/// An interrupt QEMU took between a call and the callee's first instruction leaves its
/// records after the callee's ENTRY: argument carriers read at that instruction go right
/// after the ENTRY, before the interrupt's records; after a call of the function's own, or
/// any other record, nothing is written.
#[test]
fn carriers_go_after_an_entry_and_the_interrupt_that_followed_it() {
    use qemu_uftrace_engine::exceptions::ExceptionKind;
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&out);
    let spill = Box::new(move |_tid: u32, full: Vec<u8>| {
        sink.lock().unwrap().extend_from_slice(&full);
        Vec::with_capacity(4096)
    });
    let mut e = Engine::new(Vec::with_capacity(4096), spill, 1024, 1);
    let mut g = FakeGuest::default();
    e.call(10, 0x1000, 0x504);
    e.exception_entry(20, ExceptionKind::Irq, 0x1000);
    e.call(30, 0x2000, 0x3004);
    e.ret(40, 0x3004, &mut g);
    e.exception_return(50, 0x1000, 0x3100);
    assert!(e.emit_carriers_after_entry(0x1000, &[0xa1_0000_0001, 0xa3_0000_1000]));
    // A call of the function's own since: no longer at its first instruction's reading.
    e.call(60, 0x2000, 0x1008);
    e.ret(70, 0x1008, &mut g);
    assert!(!e.emit_carriers_after_entry(0x1000, &[0xa1_0000_0001]));
    e.flush();
    let recs = decode_all(&out.lock().unwrap()).unwrap();
    let shape: Vec<(RecordType, u64, u64)> =
        recs.iter().map(|r| (r.kind, r.addr, r.time)).collect();
    let irq = recs[3].addr;
    assert_eq!(
        shape,
        [
            (RecordType::Entry, 0x1000, 10),
            (RecordType::Event, 0xa1_0000_0001, 10),
            (RecordType::Event, 0xa3_0000_1000, 10),
            (RecordType::Entry, irq, 20),
            (RecordType::Entry, 0x2000, 30),
            (RecordType::Exit, 0x2000, 40),
            (RecordType::Exit, irq, 50),
            (RecordType::Entry, 0x2000, 60),
            (RecordType::Exit, 0x2000, 70),
        ]
    );
}

/// A retpoline's own return is awaited where its call ran. kthreadd's start on x86_64,
/// drawn as the plugin drives it (a return whose landing no block saw is settled by
/// `ret_unseen` unless it is the thunk's): ret_from_fork's call to
/// `__x86_indirect_thunk_rbx` opens kthreadd's frame, the thunk's `call 1f` arms, a timer
/// interrupt is taken before its `mov %rbx, (%rsp); ret`, its handler returns from a callee
/// and switches to another task, which returns at the thunk's depth; back in kthreadd the
/// IRET leaves the handler and the thunk's `ret` branches into kthreadd. kthreadd's frame
/// stays open (a per-vCPU flag, taken by the handler's first return, let the thunk's `ret`
/// close it).
#[test]
fn a_retpolines_return_is_awaited_where_its_call_ran() {
    use qemu_uftrace_engine::exceptions::ExceptionKind;
    use qemu_uftrace_engine::hot::Suspended;
    let irq = ExceptionKind::Irq.addr();
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    // A return settled as the plugin settles one: the thunk's, or the top frame's.
    let settle = |r: &mut Rig| {
        r.t += 10;
        if !r.engine.take_thunk_return() {
            r.engine.ret_unseen(r.t);
        }
    };
    r.call(0x1000, 0x10); // kthreadd, through the thunk
    r.engine.arm_thunk_return();
    assert!(r.engine.awaits_thunk_return());
    r.t += 10;
    r.engine.exception_entry(r.t, ExceptionKind::Irq, 0x2000);
    r.call(0x3000, 0x2100); // the handler's callee, returning where a block sees it
    assert!(!r.engine.take_thunk_return(), "the callee's landing");
    r.ret(0x2100, &mut g);
    r.call(0x3100, 0x2200); // a callee whose return lands where no block sees it
    settle(&mut r);
    // The switch: another task, one frame deep, returns to where no block sees.
    let kthreadd = r.engine.suspend();
    let other = Suspended::default();
    r.engine.resume(7, other);
    assert!(
        !r.engine.awaits_thunk_return(),
        "kthreadd's, not this task's"
    );
    r.call(0x4000, 0x40);
    settle(&mut r);
    let _other = r.engine.suspend();
    r.engine.resume(1, kthreadd);
    assert!(r.engine.awaits_thunk_return());
    r.t += 10;
    r.engine.exception_return(r.t, 0x2000, 0x2ff0);
    settle(&mut r); // the thunk's `ret`
    assert!(!r.engine.awaits_thunk_return());
    assert_eq!(r.engine.stack().len(), 1, "kthreadd's frame is open");
    settle(&mut r); // kthreadd's own return, unseen: the top frame's
    assert_eq!(
        r.shape(),
        s(&[
            "+1000@0",
            &format!("+{irq:x}@1"),
            "+3000@2",
            "-3000@2",
            "+3100@2",
            "-3100@2",
            "+4000@0",
            "-4000@0",
            &format!("-{irq:x}@1"),
            "-1000@0",
        ])
    ); // Awaited at depth 1, but the frames it was awaited in closed meanwhile (a resync):
       // a return at depth 0 ends the wait, so no later return at depth 1 is taken for it.
    r.engine
        .exception_entry(r.t + 1, ExceptionKind::Irq, 0x5000);
    r.engine.arm_thunk_return();
    r.engine.close_down_to(r.t + 2, 0);
    assert!(!r.engine.take_thunk_return(), "shallower: not the thunk's");
    assert!(!r.engine.awaits_thunk_return(), "and no longer awaited");
}

/// Linux's x86 `sync_core()` on a CPU without SERIALIZE (QEMU's models): `iret_to_self`, an
/// IRETQ to its own next instruction, inside a system call's handler. It returns from
/// nothing: the system call's entry and the handler's frames stay open until their own
/// returns (it once closed them all, and the handler's later returns resynced).
#[test]
fn an_exception_return_to_its_next_instruction_closes_nothing() {
    use qemu_uftrace_engine::exceptions::{EretOutcome, ExceptionKind};
    let svc = ExceptionKind::Svc.addr();
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x100, 0x10);
    r.engine.exception_entry(r.t + 1, ExceptionKind::Svc, 0x108);
    r.call(0xffff_1000, 0xffff_0050);
    r.call(0xffff_2000, 0xffff_1010);
    let outcome = r.engine.exception_return(r.t + 1, 0xffff_2042, 0xffff_2040);
    assert_eq!(outcome, EretOutcome::Jumped);
    r.ret(0xffff_1010, &mut g);
    r.ret(0xffff_0050, &mut g);
    let outcome = r.engine.exception_return(r.t + 1, 0x108, 0xffff_0060);
    assert_eq!(outcome, EretOutcome::ClosedException);
    r.t += 1;
    r.ret(0x10, &mut g);
    assert_eq!(
        r.shape(),
        s(&[
            "+100@0",
            &format!("+{svc:x}@1"),
            "+ffff1000@2",
            "+ffff2000@3",
            "-ffff2000@3",
            "-ffff1000@2",
            &format!("-{svc:x}@1"),
            "-100@0",
        ])
    );
    assert_eq!(r.engine.stats.eret_to_next, 1);
    assert_eq!(r.engine.stats.exception_returns, 1);
    assert_eq!(r.engine.stats.unmatched_returns, 0);
    assert_eq!(r.engine.stats.resyncs, 0);
}

/// A task execs inside its `execve` (Linux's `begin_new_exec`): the return from the system
/// call goes to the new program and closes the old program's frames there too, at once;
/// the new program's calls start at depth 0.
#[test]
fn the_return_from_an_exec_closes_the_old_program_s_frames() {
    use qemu_uftrace_engine::exceptions::{EretOutcome, ExceptionKind};
    let svc = ExceptionKind::Svc.addr();
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x40_0100, 0x10);
    r.call(0x40_0200, 0x40_0150);
    r.engine
        .exception_entry(r.t + 1, ExceptionKind::Svc, 0x40_0208);
    r.call(0xffff_1000, 0xffff_0050);
    r.call(0xffff_2000, 0xffff_1010);
    r.engine.exec();
    r.ret(0xffff_1010, &mut g);
    r.ret(0xffff_0050, &mut g);
    let outcome = r.engine.exception_return(r.t + 1, 0x50_0000, 0xffff_0060);
    assert_eq!(outcome, EretOutcome::ClosedExec);
    r.t += 1;
    r.call(0x50_0100, 0x50_0010);
    r.ret(0x50_0010, &mut g);
    assert_eq!(
        r.shape(),
        s(&[
            "+400100@0",
            "+400200@1",
            &format!("+{svc:x}@2"),
            "+ffff1000@3",
            "+ffff2000@4",
            "-ffff2000@4",
            "-ffff1000@3",
            &format!("-{svc:x}@2"),
            "-400200@1",
            "-400100@0",
            "+500100@0",
            "-500100@0",
        ])
    );
    assert_eq!(r.engine.stats.exec_returns, 1);
    assert_eq!(r.engine.stats.unmatched_returns, 0);
    assert_eq!(r.engine.stats.resyncs, 0);
}

/// A kernel thread's first exec has no exception entry open: its return to user space is a
/// hand-over, as before.
#[test]
fn an_exec_with_no_exception_entry_open_is_handed_over_at_its_return() {
    use qemu_uftrace_engine::exceptions::EretOutcome;
    let mut r = Rig::new(1024);
    r.call(0xffff_3000, 0x10);
    r.engine.exec();
    let outcome = r
        .engine
        .exception_return_down(r.t + 1, 0x50_0000, 0xffff_0060);
    assert_eq!(outcome, EretOutcome::HandedOver);
    assert_eq!(r.engine.stats.exec_returns, 0);
    assert!(r.engine.stack().is_empty());
}

/// A kernel thread's first exec (`kernel_init` running `/init`, every Linux boot): its
/// frames are all the kernel's and each returns where it was called from, `kernel_init`
/// to `ret_from_fork`, which then returns to user mode. Before, the exec marked
/// `kernel_init`'s frame as the old program's, and its own return matched nothing: a LOST
/// record and a cookie. With exception entries seen and without.
#[test]
fn a_kernel_thread_s_exec_leaves_its_own_frames_their_returns() {
    use qemu_uftrace_engine::exceptions::EretOutcome;
    const KERNEL_INIT: u64 = 0xffff_8000_08ba_ff70;
    const RET_FROM_FORK: u64 = 0xffff_8000_0801_66cc;
    const EXECVE: u64 = 0xffff_8000_083a_c674;
    for seen in [true, false] {
        let mut g = FakeGuest::default();
        let mut r = Rig::new(1024);
        r.call(KERNEL_INIT, RET_FROM_FORK);
        r.call(EXECVE, KERNEL_INIT + 0x84);
        r.engine.exec();
        r.ret(KERNEL_INIT + 0x84, &mut g);
        r.ret(RET_FROM_FORK, &mut g);
        let outcome = if seen {
            r.engine
                .exception_return_down(r.t + 1, 0x50_0000, 0xffff_8000_0801_20b0)
        } else {
            r.engine
                .exception_return_unseen_down(r.t + 1, 0x50_0000, 0xffff_8000_0801_20b0)
        };
        assert_eq!(outcome, EretOutcome::Nothing, "seen {seen}");
        assert_eq!(
            r.shape(),
            // Records keep 48 bits of an address.
            s(&[
                "+800008baff70@0",
                "+8000083ac674@1",
                "-8000083ac674@1",
                "-800008baff70@0",
            ]),
            "seen {seen}"
        );
        assert_eq!(r.engine.stats.unmatched_returns, 0, "seen {seen}");
        assert_eq!(r.engine.stats.resync_cookies, 0, "seen {seen}");
    }
}

/// Where exception entries are not seen (QEMU 10.0: no discontinuity callback), a system
/// call's kernel functions run on top of the program's frames. After an exec the return to
/// user space closes them all, the old program's with the kernel's still open; any other
/// return to user space closes nothing it did not before.
#[test]
fn without_exception_entries_the_return_from_an_exec_closes_every_frame() {
    use qemu_uftrace_engine::exceptions::EretOutcome;
    let mut g = FakeGuest::default();
    let mut r = Rig::new(1024);
    r.call(0x40_0100, 0x10);
    r.call(0x40_0200, 0x40_0150);
    // A system call before the exec: its return to user space leaves the program's frames.
    r.call(0xffff_1000, 0xffff_0050);
    r.ret(0xffff_0050, &mut g);
    let outcome = r
        .engine
        .exception_return_unseen_down(r.t + 1, 0x40_0208, 0xffff_0060);
    assert_eq!(outcome, EretOutcome::Nothing);
    assert_eq!(r.engine.stack().len(), 2);
    // The execve: the kernel's path down to begin_new_exec, one frame of it left open.
    r.call(0xffff_1000, 0xffff_0050);
    r.call(0xffff_2000, 0xffff_1010);
    r.engine.exec();
    r.ret(0xffff_1010, &mut g);
    // A return to the same level (an interrupt's, in the kernel) is not the exec's.
    let outcome = r.engine.exception_return(r.t + 1, 0xffff_1014, 0xffff_0090);
    assert_ne!(outcome, EretOutcome::ClosedExec);
    assert_eq!(r.engine.stack().len(), 3);
    let outcome = r
        .engine
        .exception_return_unseen_down(r.t + 1, 0x50_0000, 0xffff_0060);
    assert_eq!(outcome, EretOutcome::ClosedExec);
    r.t += 1;
    r.call(0x50_0100, 0x50_0010);
    r.ret(0x50_0010, &mut g);
    assert_eq!(
        r.shape(),
        s(&[
            "+400100@0",
            "+400200@1",
            "+ffff1000@2",
            "-ffff1000@2",
            "+ffff1000@2",
            "+ffff2000@3",
            "-ffff2000@3",
            "-ffff1000@2",
            "-400200@1",
            "-400100@0",
            "+500100@0",
            "-500100@0",
        ])
    );
    assert_eq!(r.engine.stats.exec_returns, 1);
    assert_eq!(r.engine.stats.exception_returns, 0);
    assert_eq!(r.engine.stats.unmatched_returns, 0);
    assert_eq!(r.engine.stats.resyncs, 0);
}

/// Which open frames were written, as a value read for one goes with its record only then:
/// within the depth limit, and with gates inside a written subtree (`-F`), not in a left-out
/// one (`-N`).
#[test]
fn written_frames_are_those_whose_entry_was_written() {
    let mut g = FakeGuest::default();
    let mut r = Rig::general(2);
    assert!(!r.engine.top_written(), "no frame");
    r.call(0x100, 0x10);
    r.call(0x200, 0x110);
    assert!(r.engine.top_written() && r.engine.written_at(0));
    r.call(0x300, 0x210);
    assert!(!r.engine.top_written(), "past the depth limit");
    assert!(!r.engine.written_at(3), "no such frame");
    r.ret(0x210, &mut g);
    assert!(r.engine.top_written());
    let mut r = Rig::general(1024);
    r.engine.set_gates(vec![0x200], vec![0x300]);
    r.call(0x100, 0x10);
    assert!(!r.engine.top_written(), "outside -F's subtree");
    r.call(0x200, 0x110);
    assert!(r.engine.top_written() && !r.engine.written_at(0));
    r.call(0x300, 0x210);
    assert!(!r.engine.top_written(), "inside -N's subtree");
    r.ret(0x210, &mut g);
    r.call(0x400, 0x220);
    assert!(r.engine.top_written());
    assert!(
        !r.engine.written_at(9),
        "no such frame, inside -F's subtree or not"
    );
    let written: Vec<String> = r.shape();
    assert_eq!(written, ["+200@0", "+400@1"]);
}
