//! Per-vCPU counters, summed and written to `plugin.stats` at exit.

/// What one vCPU saw. Every field is a plain count.
#[derive(Debug, Default, Clone, Copy)]
#[repr(C)] // the counts every event bumps first
pub struct Stats {
    /// Call instructions executed.
    pub calls: u64,
    /// Return instructions executed.
    pub returns: u64,
    /// Records written (entries, exits and markers); filled in by `Engine::stats`.
    pub events: u64,
    /// Returns that matched a frame below the top (longjmp, or frames that never returned).
    pub deep_returns: u64,
    /// Returns that matched no frame at all.
    pub unmatched_returns: u64,
    /// Unmatched returns after which the stack was rebuilt from guest frame records.
    pub resyncs: u64,
    /// Frames opened by a resync (their real entry was not seen).
    pub synthetic_entries: u64,
    /// Calls deeper than the recorded depth cap: followed but not recorded.
    pub depth_cap_hits: u64,
    /// Calls beyond the shadow stack's hard limit: not followed at all.
    pub stack_overflows: u64,
    /// Exception returns (ERET) that returned from the top frame.
    pub eret_returns: u64,
    /// Returns whose landing no block saw (a new task's start, an exception taken on the
    /// way): taken as the top frame's.
    pub returns_unseen: u64,
    /// Exceptions and interrupts shown as entries (`[irq]`, `[svc]` …).
    pub exceptions: u64,
    /// Exception returns that closed an exception entry.
    pub exception_returns: u64,
    /// Of those, returns that went elsewhere than where the exception was taken (a kernel
    /// fixup, a signal, exec).
    pub eret_redirects: u64,
    /// Exception returns in 16-bit code that popped no open exception entry's frame: the
    /// firmware's far jumps (`Engine::exception_return_16`).
    pub eret_jumps: u64,
    /// Exception returns to their own next instruction (x86's `iret_to_self`, which Linux's
    /// `sync_core` runs): not a return, they closed nothing.
    pub eret_to_next: u64,
    /// Returns from an exec's system call, which closed the old program's frames too.
    pub exec_returns: u64,
    /// Context switches between guest tasks (or privilege levels with `split_levels`).
    pub switches: u64,
    /// LOST records written where the engine had to guess (a stack rebuilt).
    pub lost_marks: u64,
    /// Register reads QEMU refused where one was needed (an indirect call's target, an
    /// exception's syndrome or return address): that event is not recorded, and a LOST
    /// record marks the place.
    pub register_read_failures: u64,
    /// User mode: signal deliveries shown as entries (`[SIGALRM]` …).
    pub signals: u64,
    /// Signal returns (rt_sigreturn) that closed a delivery's entry.
    pub signal_returns: u64,
    /// Unwinds placed at the first call after a return that landed unseen (a C++ landing
    /// pad), or at a jump after a stack switch (x86-64's longjmp and unwinder): frames the
    /// unwinding skipped, closed there.
    pub unwinds: u64,
    /// Functions entered by a jump from another function (a tail call, `b main`), shown as
    /// calls nested in the jumper's frame and closed with it.
    pub jump_entries: u64,
    /// Calls whose target was read from a register (an indirect call's: 24–49 ns a read).
    pub register_calls: u64,
    /// Callbacks of blocks where a jump through a register may land that ran (a function's
    /// entry, code right after a call), whether or not such a jump was pending.
    pub jump_callbacks: u64,
    /// Calls whose instruction faulted before it ran (x86's push of the return address):
    /// their entry taken back, written when the call ran again.
    pub faulted_calls: u64,
    /// Returns past the bottom of a stack found mid-way (a run from a snapshot): closes of
    /// calls opened before tracing began, matched after the run to the unwound frames.
    pub outer_returns: u64,
    /// Resyncs with no frame record to go by where a stack cookie was saved instead of a
    /// guess: the CLI unwinds it after the run with the guest's tables (`resync_cookies`).
    pub resync_cookies: u64,
    /// Entries and exits not written because `-F`/`-N` left them out.
    pub filtered: u64,
    /// Events in a process's code that another process translated (QEMU shares one
    /// translation of a page among its mappings): their addresses moved to this process's.
    pub moved_events: u64,
    /// Calls not written because they were shorter than `-t`'s threshold (filled in by
    /// `Engine::stats`).
    pub time_filtered: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.calls += o.calls;
        self.returns += o.returns;
        self.events += o.events;
        self.deep_returns += o.deep_returns;
        self.unmatched_returns += o.unmatched_returns;
        self.resyncs += o.resyncs;
        self.synthetic_entries += o.synthetic_entries;
        self.depth_cap_hits += o.depth_cap_hits;
        self.stack_overflows += o.stack_overflows;
        self.eret_returns += o.eret_returns;
        self.returns_unseen += o.returns_unseen;
        self.exceptions += o.exceptions;
        self.exception_returns += o.exception_returns;
        self.eret_redirects += o.eret_redirects;
        self.eret_jumps += o.eret_jumps;
        self.eret_to_next += o.eret_to_next;
        self.exec_returns += o.exec_returns;
        self.switches += o.switches;
        self.lost_marks += o.lost_marks;
        self.register_read_failures += o.register_read_failures;
        self.signals += o.signals;
        self.signal_returns += o.signal_returns;
        self.unwinds += o.unwinds;
        self.jump_entries += o.jump_entries;
        self.register_calls += o.register_calls;
        self.jump_callbacks += o.jump_callbacks;
        self.faulted_calls += o.faulted_calls;
        self.outer_returns += o.outer_returns;
        self.resync_cookies += o.resync_cookies;
        self.filtered += o.filtered;
        self.moved_events += o.moved_events;
        self.time_filtered += o.time_filtered;
    }

    /// `key=value` lines, in a fixed order.
    pub fn lines(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("events", self.events),
            ("calls", self.calls),
            ("returns", self.returns),
            ("deep_returns", self.deep_returns),
            ("unmatched_returns", self.unmatched_returns),
            ("resyncs", self.resyncs),
            ("synthetic_entries", self.synthetic_entries),
            ("depth_cap_hits", self.depth_cap_hits),
            ("stack_overflows", self.stack_overflows),
            ("eret_returns", self.eret_returns),
            ("returns_unseen", self.returns_unseen),
            ("exceptions", self.exceptions),
            ("exception_returns", self.exception_returns),
            ("eret_redirects", self.eret_redirects),
            ("eret_jumps", self.eret_jumps),
            ("eret_to_next", self.eret_to_next),
            ("exec_returns", self.exec_returns),
            ("switches", self.switches),
            ("lost_marks", self.lost_marks),
            ("register_read_failures", self.register_read_failures),
            ("signals", self.signals),
            ("signal_returns", self.signal_returns),
            ("unwinds", self.unwinds),
            ("jump_entries", self.jump_entries),
            ("register_calls", self.register_calls),
            ("jump_callbacks", self.jump_callbacks),
            ("faulted_calls", self.faulted_calls),
            ("outer_returns", self.outer_returns),
            ("resync_cookies", self.resync_cookies),
            ("filtered", self.filtered),
            ("moved_events", self.moved_events),
            ("time_filtered", self.time_filtered),
        ]
    }
}
