//! Tracing switched off and on while the guest runs (`record --trace=off`, `trace on|off`,
//! `--trace-on-at`/`--trace-off-at`). While off the plugin instruments nothing per call, so
//! the engine sees no event; at each edge it writes what makes uftrace's replay nest and
//! balance each window: at the off edge every open frame closes (as the end of a trace
//! closes them) and a `qemu:trace_off` event follows; at the on edge a `qemu:trace_on`
//! event, then (once the vCPU runs and its registers are readable) a resync marker naming
//! the stack cookie the CLI unwinds into the frames open there (`qemu:opened`), after which
//! returns past the bottom are written for the CLI to match, as after a snapshot start.

use crate::hot::Engine;
use qemu_uftrace_format::events::{TRACE_OFF, TRACE_ON};
use qemu_uftrace_format::record::RecordType;

impl Engine {
    /// The off edge at `now`: every open frame closes, then the `qemu:trace_off` event at
    /// depth 0 (the CLI closes there the unwound frames beneath too). The stack is empty
    /// afterwards; nothing is recorded until [`Engine::switch_on`].
    pub fn switch_off(&mut self, now: u64) {
        let now = self.clamp(now);
        self.close_skipped(now, 0);
        self.pushed_frames.clear();
        self.midway = false;
        self.reset_gates();
        self.event_at_bottom(now, TRACE_OFF);
    }

    /// The on edge at `now`: the `qemu:trace_on` event at depth 0. The frames open are told
    /// by [`Engine::opened_by_cookie`] where the context first runs after it (or, without a
    /// cookie, rebuilt as any resync would).
    pub fn switch_on(&mut self, now: u64) {
        let now = self.clamp(now);
        // What the stack held when tracing went off was closed then; anything left (a
        // context the off edge did not reach) is stale.
        self.stack_mut_clear();
        self.reset_gates();
        self.event_at_bottom(now, TRACE_ON);
    }

    /// The context runs with the calls open that stack cookie `seq` shows (the plugin saved
    /// it): the marker the CLI replaces by their entries, then returns past the bottom are
    /// written for the CLI to match (`outer_return`). With `-F`/`-N` the window is written
    /// whole, for the CLI to filter once it knows those frames (`Roots::deferred`).
    pub fn opened_by_cookie(&mut self, now: u64, seq: u32) {
        let now = self.clamp(now);
        self.stack_mut_clear();
        if let Some(g) = self.gates_mut() {
            g.defer();
        }
        self.event_at_bottom(now, qemu_uftrace_format::cookie::resync_marker(seq));
        self.midway = true;
    }

    fn event_at_bottom(&mut self, now: u64, id: u64) {
        self.emit(now, RecordType::Event, 0, id);
    }

    /// No subtree of `-F`/`-N` open: the stack is empty.
    fn reset_gates(&mut self) {
        if let Some(g) = self.gates_mut() {
            g.reset();
        }
    }

    /// Forgets the frames without writing their exits (they were closed, or never seen).
    fn stack_mut_clear(&mut self) {
        while self.stack_mut().pop().is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use crate::midway::tests::{engine, written, NoRecords};
    use qemu_uftrace_format::events::{TRACE_OFF, TRACE_ON};
    use qemu_uftrace_format::record::RecordType;

    #[test]
    fn a_window_closes_its_frames_and_starts_from_a_cookie() {
        let (mut e, out) = engine();
        e.call(1, 0x100, 0x10);
        e.call(2, 0x200, 0x110);
        e.switch_off(5);
        e.switch_on(50);
        e.opened_by_cookie(51, 7);
        // A return past the bottom: written for the CLI to match.
        e.ret(60, 0x310, &mut NoRecords);
        let got = written(&mut e, &out);
        let marker = qemu_uftrace_format::addr48(qemu_uftrace_format::cookie::resync_marker(7));
        assert_eq!(
            got,
            [
                (1, RecordType::Entry, 0, 0x100),
                (2, RecordType::Entry, 1, 0x200),
                (5, RecordType::Exit, 1, 0x200),
                (5, RecordType::Exit, 0, 0x100),
                (5, RecordType::Event, 0, TRACE_OFF),
                (50, RecordType::Event, 0, TRACE_ON),
                (51, RecordType::Event, 0, marker),
                (60, RecordType::Exit, 0, 0x310),
            ]
        );
    }

    /// What the watch was told (the test's own: other tests run no watch).
    static TOLD: std::sync::Mutex<Vec<(u32, bool)>> = std::sync::Mutex::new(Vec::new());

    fn tell(token: u32, inside: bool) {
        TOLD.lock().unwrap().push((token, inside));
    }

    fn told() -> Vec<bool> {
        TOLD.lock()
            .unwrap()
            .drain(..)
            .map(|(t, inside)| {
                assert_eq!(t, 3);
                inside
            })
            .collect()
    }

    /// The plugin reads values only while its vCPU's word says the running context may write
    /// frames: the watch is told each change, and only changes (a missed one would lose
    /// values or read them for nothing), through calls, returns, switches between
    /// contexts and windows.
    #[test]
    fn the_watch_is_told_each_time_a_context_enters_or_leaves_every_subtree() {
        let (mut e, _out) = engine();
        // Before any gates: every frame is written.
        e.set_watch(crate::gates::Watch::new(tell, 3));
        assert_eq!(told(), [true]);
        e.set_gates(vec![0x900], vec![]);
        assert_eq!(told(), [false]);
        e.call(1, 0x800, 0x10);
        e.call(2, 0x900, 0x810);
        e.call(3, 0x900, 0x910);
        e.call(4, 0xa00, 0x920);
        assert_eq!(told(), [true]);
        e.ret(5, 0x920, &mut NoRecords);
        e.ret(6, 0x910, &mut NoRecords);
        assert_eq!(told(), []);
        // A switch to another context (none open), and back.
        let inside = e.suspend();
        assert_eq!(told(), [false]);
        let outside = {
            e.resume(2, crate::hot::Suspended::default());
            e.call(7, 0x800, 0x10);
            e.suspend()
        };
        assert_eq!(told(), []);
        e.resume(1, inside);
        assert_eq!(told(), [true]);
        e.ret(8, 0x810, &mut NoRecords);
        assert_eq!(told(), [false]);
        let _ = e.suspend();
        e.resume(2, outside);
        // A window from a cookie: the CLI decides; the next window starts outside.
        e.switch_off(9);
        e.switch_on(10);
        e.opened_by_cookie(11, 7);
        assert_eq!(told(), [true]);
        e.switch_off(12);
        e.switch_on(13);
        assert_eq!(told(), [false]);
    }

    /// With `-F` the frames beneath a cookie are unknown here: the window is written whole
    /// (the CLI filters it), returns past the bottom included, until the off edge.
    #[test]
    fn with_filters_a_window_from_a_cookie_is_written_whole() {
        let (mut e, out) = engine();
        e.set_gates(vec![0x900], vec![]);
        e.switch_on(50);
        e.opened_by_cookie(51, 7);
        assert!(!e.try_follow_call(52, 0x800, 0x10));
        e.call(52, 0x800, 0x10);
        e.ret(53, 0x10, &mut NoRecords);
        e.ret(60, 0x310, &mut NoRecords);
        e.switch_off(70);
        // The next window without a cookie: outside every subtree again.
        e.switch_on(80);
        assert!(e.try_follow_call(81, 0x800, 0x10));
        let got = written(&mut e, &out);
        let marker = qemu_uftrace_format::addr48(qemu_uftrace_format::cookie::resync_marker(7));
        assert_eq!(
            got,
            [
                (50, RecordType::Event, 0, TRACE_ON),
                (51, RecordType::Event, 0, marker),
                (52, RecordType::Entry, 0, 0x800),
                (53, RecordType::Exit, 0, 0x800),
                (60, RecordType::Exit, 0, 0x310),
                (70, RecordType::Event, 0, TRACE_OFF),
                (80, RecordType::Event, 0, TRACE_ON),
            ]
        );
    }
}
