//! Which guest context runs on each vCPU, and the stacks of those that wait.
//!
//! A whole system runs many contexts: each vCPU's boot code (firmware, bare metal, early
//! kernel), then the OS's tasks, which move between vCPUs; with `split_levels`, each
//! privilege level of each of them apart. Every context is one uftrace task with its own
//! stack; a switch suspends the running context's stack as it is (no exits written) and
//! resumes the next one's (no entries written), so a function that sleeps keeps its frame
//! open and its duration includes the time away, as uftrace shows it natively.
//!
//! A context is freed when its task ends (a user-mode thread exits, a Linux task switches
//! away for the last time): its frames still open stay open, as at the end of a recording,
//! and only a short line for `plugin.tasks` stays, up to [`MAX_ENDED`] of them.
//!
//! This is a pure state machine over the events the plugin sees (a vCPU starting, the OS
//! writing its running-task register, a privilege level change, a task ending), applied to
//! the vCPU's [`Engine`]; it is tested on drawn timelines without QEMU. The plugin keeps one
//! table behind a lock and calls it only at those events.

use crate::arch::Level;
use crate::hot::{Engine, Suspended, EVENT_SCHED_IN, EVENT_SCHED_OUT};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Task ids of contexts that are not an OS task with a PID: Linux PIDs stay below
/// PID_MAX_LIMIT (2^22), so the guest's PIDs can be used as they are below it.
pub const BOOT_TID_BASE: u32 = 1 << 22;
/// vCPUs the boot range leaves room for; synthetic ids follow.
pub const MAX_VCPUS: u32 = 1 << 16;

/// The vCPU whose boot context has task id `tid`, if it is one.
pub fn boot_vcpu(tid: u32) -> Option<u32> {
    tid.checked_sub(BOOT_TID_BASE).filter(|&v| v < MAX_VCPUS)
}
const SYNTHETIC_TID_BASE: u32 = BOOT_TID_BASE + MAX_VCPUS;

/// The key of the context tasks past [`MAX_CONTEXTS`] share (no task has this pointer).
const SHARED_KEY: Key = Key {
    who: Who::Task {
        ptr: u64::MAX,
        pid: 0,
    },
    level: None,
};

/// Live contexts kept at most (each a few hundred bytes and its waiting stack): ended tasks'
/// are freed, but a guest may start tasks that never end (or whose end is not seen: no
/// `task_state=`), and must not grow QEMU without bound. Tasks first seen while this many
/// live share one context ([`TaskTable::past_cap`] counts them): their records go to one
/// uftrace task.
pub const MAX_CONTEXTS: usize = 1 << 18;

/// Ended tasks whose line (`tid`, name, vCPUs: ~200 bytes) is kept for `plugin.tasks`; later
/// ones are counted in [`TaskTable::unlisted`] and uftrace shows them by their PID.
pub const MAX_ENDED: usize = 1 << 16;

/// Linux's `TASK_DEAD` (4.14 on): the value `task_struct.__state` holds at a task's last
/// switch away (`do_task_dead`, with preemption off since `do_exit`), never before.
pub const LINUX_TASK_DEAD: u32 = 0x80;

/// Bytes of a task's name read at each switch (Linux `TASK_COMM_LEN`).
pub const TASK_NAME_BYTES: usize = 16;
/// The plugin refuses a name offset (`task_comm=`) this large: no task structure is that
/// big, and the CLI checks the offset it passes against the same bound.
pub const MAX_TASK_NAME_OFFSET: u64 = 1 << 20;

/// Who runs, as far as the engine can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Who {
    /// What vCPU `n` runs before any OS task shows: firmware, bare metal, early boot.
    Boot(u32),
    /// An OS task: its kernel pointer (arm64 Linux: `current`) and its PID, 0 when the OS
    /// does not say. Pointers are reused after a task ends; the PID tells the tasks apart.
    Task { ptr: u64, pid: u32 },
    /// A guest thread of a user-mode emulator (QEMU's linux-user): one per vCPU for its
    /// whole life, known by its thread id (the host's, which is the guest's there).
    Thread(u32),
}

/// A context: who runs, at which level when levels are kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub who: Who,
    /// `None` without `split_levels`, or while a boot context's level is not known yet.
    pub level: Option<Level>,
}

/// One context, as uftrace will show it.
#[derive(Debug)]
pub struct Context {
    pub key: Key,
    pub tid: u32,
    /// Every vCPU it ran on.
    pub vcpus: BTreeSet<u32>,
    /// A name learned from the guest (e.g. Linux's `comm`), latest first seen last.
    pub name: Option<String>,
    /// Where a boot context's records went before it turned out to be a task.
    pub was_boot_of: Option<u32>,
    /// Its stack while it waits; `None` while it runs.
    state: Option<Suspended>,
    running_on: Option<u32>,
    /// Its order of appearance.
    seq: u64,
    /// Its task ended: freed at its next switch away.
    ending: bool,
    /// An ended task's thread group, kept from the table's (which forgets it).
    ended_tgid: Option<u32>,
}

impl Context {
    /// Frames open in its stack while it waits (a running context's are the engine's).
    pub fn waiting_frames(&self) -> usize {
        self.state.as_ref().map_or(0, |s| s.stack.len())
    }

    pub fn is_boot(&self) -> bool {
        matches!(self.key.who, Who::Boot(_))
    }

    /// The guest's PID, when the context is an OS task that has one.
    pub fn pid(&self) -> Option<u32> {
        match self.key.who {
            Who::Task { pid, .. } if pid > 0 => Some(pid),
            Who::Thread(tid) if tid > 0 => Some(tid),
            _ => None,
        }
    }
}

/// What a call into the table did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// The context was already running.
    Same,
    /// The running boot context turned out to be this task: same stack, same task id.
    Adopted,
    /// Another context runs now.
    Switched,
}

/// Every context of the guest.
#[derive(Debug)]
pub struct TaskTable {
    split_levels: bool,
    /// Live contexts; a freed one's slot is reused (`free`).
    slots: Vec<Option<Context>>,
    free: Vec<usize>,
    live: usize,
    /// Contexts made so far.
    created: u64,
    /// Ended tasks' contexts (no stack), at most [`MAX_ENDED`].
    ended: Vec<Context>,
    index: HashMap<Key, usize>,
    /// Per vCPU, the running context.
    running: Vec<Option<usize>>,
    /// Task ids below the boot ones already given (PIDs), one bit each: a bounded set
    /// however many tasks come and go (synthetic ids are never given twice).
    used_tids: Vec<u64>,
    /// Boot ids already given, by vCPU: apart from the PIDs' bits, which would otherwise
    /// reach 2^22 for the first boot context (512 KiB a table, zeroed: Miri took ten
    /// seconds a test to do it).
    used_boot: HashSet<u32>,
    next_synthetic: u32,
    /// vCPUs whose boot context became an OS task (only the first task does that).
    adopted: HashSet<u32>,
    /// Switches to a context still running on another vCPU: its stack could not be taken
    /// over, so the context restarted with an empty one there.
    pub conflicts: u64,
    /// Guest PID → its thread group (Linux `tgid`: the process), where the OS said.
    thread_groups: HashMap<u32, u32>,
    max_contexts: usize,
    /// The context tasks past [`MAX_CONTEXTS`] share, once there is one.
    shared: Option<usize>,
    /// Tasks first seen past [`MAX_CONTEXTS`], run in the shared context.
    pub past_cap: u64,
    /// Contexts freed because their task ended.
    pub freed: u64,
    /// Frames open in contexts when they were freed (never closed, as those open at the end).
    pub freed_open_frames: u64,
    /// Ended tasks whose line was not kept (past [`MAX_ENDED`]).
    pub unlisted: u64,
}

impl TaskTable {
    pub fn new(split_levels: bool) -> TaskTable {
        TaskTable {
            split_levels,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            created: 0,
            ended: Vec::new(),
            index: HashMap::new(),
            running: Vec::new(),
            used_tids: Vec::new(),
            used_boot: HashSet::new(),
            next_synthetic: SYNTHETIC_TID_BASE,
            adopted: HashSet::new(),
            conflicts: 0,
            thread_groups: HashMap::new(),
            max_contexts: MAX_CONTEXTS,
            shared: None,
            past_cap: 0,
            freed: 0,
            freed_open_frames: 0,
            unlisted: 0,
        }
    }

    /// The table with another cap than [`MAX_CONTEXTS`] (tests).
    pub fn with_max_contexts(mut self, max: usize) -> TaskTable {
        self.max_contexts = max;
        self
    }

    /// The boot context of a vCPU that starts; its task id is the engine's first.
    pub fn start_vcpu(&mut self, vcpu: u32) -> u32 {
        let key = Key {
            who: Who::Boot(vcpu),
            level: None,
        };
        let i = self.context(key);
        let c = self.at_mut(i);
        c.state = None;
        c.running_on = Some(vcpu);
        c.vcpus.insert(vcpu);
        let tid = c.tid;
        self.set_running(vcpu, Some(i));
        tid
    }

    /// A user-mode guest thread starts on `vcpu` (QEMU's linux-user gives each thread a
    /// vCPU of its own): its context, task id `tid` (the thread's id) where no other
    /// context has it, runs there with an empty stack. Returns its task id.
    pub fn start_thread(&mut self, vcpu: u32, tid: u32) -> u32 {
        let i = self.context(Key {
            who: Who::Thread(tid),
            level: None,
        });
        let c = self.at_mut(i);
        c.state = None;
        c.running_on = Some(vcpu);
        c.vcpus.insert(vcpu);
        let tid = c.tid;
        self.set_running(vcpu, Some(i));
        tid
    }

    /// `vcpu` is gone (a user-mode thread exited): nothing runs on it, and the context that
    /// ran there is freed (its engine was flushed as it was, its frames left open). QEMU may
    /// give the index to a later thread.
    pub fn end_vcpu(&mut self, vcpu: u32) {
        let Some(i) = self.running.get_mut(vcpu as usize).and_then(Option::take) else {
            return;
        };
        let c = self.at_mut(i);
        c.running_on = None;
        c.state = None;
        if self.shared != Some(i) {
            self.free_context(i, None);
        }
    }

    /// The task running on `vcpu` ended (Linux: its state is `TASK_DEAD` at the switch
    /// away, which comes next): its contexts (each level's) are freed at that switch, their
    /// open frames left open as at the end of a recording. The context tasks past the cap
    /// share never ends.
    pub fn running_ends(&mut self, vcpu: u32) {
        if let Some(Some(i)) = self.running.get(vcpu as usize).copied() {
            if self.shared != Some(i) {
                self.at_mut(i).ending = true;
            }
        }
    }

    /// Writes what each waiting context still holds back (`-t`'s open frames' entries not
    /// yet written; a fresh ENTRY kept at its switch away: `Engine::write_waiting`) with
    /// `engine`, any vCPU's: at the end of a recording, so that frames still open are
    /// written as without `-t`.
    pub fn write_deferred(&mut self, engine: &mut Engine) {
        for c in self.slots.iter_mut().flatten() {
            if let Some(state) = c.state.as_mut() {
                engine.write_waiting(c.tid, state);
            }
        }
    }

    /// Tracing is switched off at `now`: every waiting context's open frames close, written
    /// as its own records with `engine` (any vCPU's, whose running context is put back), so
    /// that each window balances in every task (`Engine::switch_off`).
    pub fn switch_off_waiting(&mut self, engine: &mut Engine, now: u64) {
        let own = engine.tid();
        let running = engine.suspend();
        for c in self.slots.iter_mut().flatten() {
            if let Some(state) = c.state.take() {
                engine.resume(c.tid, state);
                engine.switch_off(now);
                c.state = Some(engine.suspend());
            }
        }
        engine.resume(own, running);
    }

    /// Tracing is switched on at `now`: every waiting context but those `edged` already
    /// writes the `qemu:trace_on` edge with `engine` (any vCPU's, whose running context is
    /// put back), as the running ones do, so that each task's window opens with it (its
    /// `qemu:opened` frames come at its first switch-in). Gives the contexts that wrote it.
    pub fn switch_on_waiting(
        &mut self,
        engine: &mut Engine,
        now: u64,
        edged_already: &dyn Fn(u32) -> bool,
    ) -> Vec<u32> {
        let own = engine.tid();
        let running = engine.suspend();
        let mut edged = Vec::new();
        for c in self.slots.iter_mut().flatten() {
            if edged_already(c.tid) {
                continue;
            }
            if let Some(state) = c.state.take() {
                engine.resume(c.tid, state);
                engine.switch_on(now);
                c.state = Some(engine.suspend());
                edged.push(c.tid);
            }
        }
        engine.resume(own, running);
        edged
    }

    /// `vcpu`'s boot context is not to become the next task it names (one read where task
    /// switches went unseen, with a PID: the boot code became an idle task, PID 0, and
    /// others may have run since).
    pub fn keep_boot(&mut self, vcpu: u32) {
        self.adopted.insert(vcpu);
    }

    /// Every context so far, live or ended (those kept: [`MAX_ENDED`]), in the order they
    /// appeared. Walks the whole table: not for every event.
    pub fn contexts(&self) -> Vec<&Context> {
        let mut all: Vec<&Context> = self
            .ended
            .iter()
            .chain(self.slots.iter().flatten())
            .collect();
        all.sort_unstable_by_key(|c| c.seq);
        all
    }

    /// Contexts made so far (a new one raises it).
    pub fn created(&self) -> u64 {
        self.created
    }

    /// Live contexts.
    pub fn live(&self) -> usize {
        self.live
    }

    /// The context running on `vcpu`.
    pub fn running(&self, vcpu: u32) -> Option<&Context> {
        let i = (*self.running.get(vcpu as usize)?)?;
        self.slots.get(i)?.as_ref()
    }

    /// Names the context running on `vcpu` (not the one tasks past the cap share: it is
    /// none of theirs).
    pub fn name_running(&mut self, vcpu: u32, name: String) {
        if let Some(Some(i)) = self.running.get(vcpu as usize).copied() {
            if self.shared == Some(i) {
                return;
            }
            self.at_mut(i).name = Some(name);
        }
    }

    /// The OS task with PID `pid` belongs to thread group `tgid` (read at a switch to it;
    /// the last reading wins, as a PID may be reused). PID 0 is no task's. Kept for live
    /// contexts' PIDs (at most [`MAX_CONTEXTS`] of them), forgotten as their tasks end.
    pub fn thread_group(&mut self, pid: u32, tgid: u32) {
        if pid > 0
            && tgid > 0
            && (self.thread_groups.len() < self.max_contexts
                || self.thread_groups.contains_key(&pid))
        {
            self.thread_groups.insert(pid, tgid);
        }
    }

    /// The thread group (process) of a context that is an OS task, when it was read.
    pub fn tgid(&self, c: &Context) -> Option<u32> {
        match c.key.who {
            _ if c.ended_tgid.is_some() => c.ended_tgid,
            Who::Task { pid, .. } if pid > 0 => self.thread_groups.get(&pid).copied(),
            _ => None,
        }
    }

    /// The OS on `vcpu` wrote `ptr` into its running-task register (with `pid` read beside
    /// it, 0 when unknown): the task it names runs from now.
    pub fn task_pointer(
        &mut self,
        engine: &mut Engine,
        vcpu: u32,
        now: u64,
        ptr: u64,
        pid: u32,
    ) -> Switch {
        let level = self.running(vcpu).and_then(|c| c.key.level);
        let key = Key {
            who: Who::Task { ptr, pid },
            level,
        };
        let Some(cur) = self.running.get(vcpu as usize).copied().flatten() else {
            return self.switch(engine, vcpu, now, key, true);
        };
        let current = self.at(cur).key;
        if current == key {
            return Switch::Same;
        }
        // The first task a vCPU names is what its boot code was becoming (Linux: the idle
        // task, whose stack holds the boot path to `start_kernel`).
        if current.who == Who::Boot(vcpu)
            && !self.adopted.contains(&vcpu)
            && !self.index.contains_key(&key)
        {
            self.adopted.insert(vcpu);
            self.index.remove(&current);
            self.index.insert(key, cur);
            let c = self.at_mut(cur);
            c.key = key;
            c.was_boot_of = Some(vcpu);
            return Switch::Adopted;
        }
        self.switch(engine, vcpu, now, key, true)
    }

    /// `vcpu` runs at `level` from now (an exception taken, an exception return). Without
    /// `split_levels` nothing changes.
    pub fn level(&mut self, engine: &mut Engine, vcpu: u32, now: u64, level: Level) -> Switch {
        if !self.split_levels {
            return Switch::Same;
        }
        let Some(cur) = self.running.get(vcpu as usize).copied().flatten() else {
            return Switch::Same;
        };
        let current = self.at(cur).key;
        match current.level {
            Some(l) if l == level => Switch::Same,
            // A boot context learns the level it was running at all along.
            None => {
                let key = Key {
                    level: Some(level),
                    ..current
                };
                if self.index.contains_key(&key) {
                    return self.switch(engine, vcpu, now, key, false);
                }
                self.index.remove(&current);
                self.index.insert(key, cur);
                self.at_mut(cur).key = key;
                Switch::Same
            }
            Some(_) => {
                let key = Key {
                    level: Some(level),
                    ..current
                };
                self.switch(engine, vcpu, now, key, false)
            }
        }
    }

    fn switch(&mut self, engine: &mut Engine, vcpu: u32, now: u64, key: Key, task: bool) -> Switch {
        let from = self.running.get(vcpu as usize).copied().flatten();
        // An ended task's last switch away: its contexts go before the next one is made, so
        // that a fork loop needs no more room than the tasks alive at once.
        let ended = from.filter(|&f| task && self.at(f).ending);
        if task && from.is_some() {
            engine.event(now, EVENT_SCHED_OUT);
        }
        let state = engine.suspend();
        if let Some(from) = from {
            let c = self.at_mut(from);
            c.state = Some(state);
            c.running_on = None;
        }
        self.set_running(vcpu, None);
        if let Some(f) = ended {
            self.free_task(f, engine);
        }
        let next = self.context(key);
        let c = self.at_mut(next);
        let mut conflict = false;
        let resumed = match (c.running_on, c.state.take()) {
            (None, Some(state)) => Some(state),
            (None, None) => None, // new
            (Some(_), _) => {
                // Running elsewhere: the guest switched to it before we saw it leave.
                conflict = true;
                None
            }
        };
        let seen_before = resumed.is_some();
        c.running_on = Some(vcpu);
        c.vcpus.insert(vcpu);
        let tid = c.tid;
        self.conflicts += u64::from(conflict);
        engine.resume(tid, resumed.unwrap_or_default());
        if task && seen_before {
            engine.event(now, EVENT_SCHED_IN);
        }
        engine.stats.switches += 1;
        self.set_running(vcpu, Some(next));
        Switch::Switched
    }

    /// Frees every level's context of the task whose context is `i` (waiting: its last
    /// switch away), writing what `-t` held back in each with `engine`.
    fn free_task(&mut self, i: usize, engine: &mut Engine) {
        let who = self.at(i).key.who;
        let levels = (0..=u8::MAX).map(|l| Some(Level(l)));
        let keys: Vec<usize> = std::iter::once(None)
            .chain(levels.take(if self.split_levels { 256 } else { 0 }))
            .filter_map(|level| self.index.get(&Key { who, level }).copied())
            .filter(|&j| self.at(j).running_on.is_none() && self.shared != Some(j))
            .collect();
        for j in keys {
            self.free_context(j, Some(engine));
        }
        // Read again at the next switch to a task with this PID (a later task's).
        if let Who::Task { pid, .. } = who {
            self.thread_groups.remove(&pid);
        }
    }

    /// Frees the waiting context in slot `i`: its `-t` records are written (with `engine`,
    /// where there is one), its open frames counted, its stack dropped; its line is kept
    /// while fewer than [`MAX_ENDED`] are.
    fn free_context(&mut self, i: usize, engine: Option<&mut Engine>) {
        let Some(mut c) = self.slots.get_mut(i).and_then(Option::take) else {
            return;
        };
        if let Some(mut state) = c.state.take() {
            if let Some(engine) = engine {
                engine.write_waiting(c.tid, &mut state);
            }
            self.freed_open_frames += state.stack.len() as u64;
        }
        if self.index.get(&c.key) == Some(&i) {
            self.index.remove(&c.key);
        }
        if let Who::Task { pid, .. } = c.key.who {
            c.ended_tgid = self.thread_groups.get(&pid).copied();
        }
        self.free.push(i);
        self.live -= 1;
        self.freed += 1;
        if self.ended.len() < MAX_ENDED {
            self.ended.push(c);
        } else {
            self.unlisted += 1;
        }
    }

    fn set_running(&mut self, vcpu: u32, i: Option<usize>) {
        let v = vcpu as usize;
        if self.running.len() <= v {
            self.running.resize(v + 1, None);
        }
        self.running[v] = i;
    }

    fn at(&self, i: usize) -> &Context {
        // Slots named by `index`, `running` and `shared` are live: freeing removes them.
        self.slots[i].as_ref().expect("a live context")
    }

    fn at_mut(&mut self, i: usize) -> &mut Context {
        self.slots[i].as_mut().expect("a live context")
    }

    /// The context for `key`, created (waiting, with an empty stack) when new.
    fn context(&mut self, key: Key) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        if self.live >= self.max_contexts {
            self.past_cap += 1;
            if let Some(i) = self.shared {
                return i;
            }
            let i = self.new_context(SHARED_KEY);
            self.at_mut(i).name = Some("(tasks past the cap)".to_string());
            self.shared = Some(i);
            return i;
        }
        self.new_context(key)
    }

    fn new_context(&mut self, key: Key) -> usize {
        let tid = self.new_tid(key);
        let c = Context {
            key,
            tid,
            vcpus: BTreeSet::new(),
            name: None,
            was_boot_of: None,
            state: None,
            running_on: None,
            seq: self.created,
            ending: false,
            ended_tgid: None,
        };
        self.created += 1;
        self.live += 1;
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(c);
                i
            }
            None => {
                self.slots.push(Some(c));
                self.slots.len() - 1
            }
        };
        self.index.insert(key, i);
        i
    }

    /// The guest's PID where it has one that no other context used; a boot context's
    /// reserved id for the first level of a vCPU; otherwise the next synthetic id.
    fn new_tid(&mut self, key: Key) -> u32 {
        let wanted = match key.who {
            Who::Task { pid, .. } if pid > 0 && pid < BOOT_TID_BASE => Some(pid),
            Who::Thread(tid) if tid > 0 && tid < BOOT_TID_BASE => Some(tid),
            Who::Boot(vcpu) if vcpu < MAX_VCPUS => Some(BOOT_TID_BASE + vcpu),
            _ => None,
        };
        // A user-mode thread id is the host's, unique among live threads: a later thread
        // given an ended one's id is written under it, as libmcount would.
        let reuse = matches!(key.who, Who::Thread(_));
        match wanted {
            // Below SYNTHETIC_TID_BASE: one bit each.
            Some(t) if reuse || !self.tid_used(t) => {
                self.mark_used(t);
                t
            }
            _ => {
                let t = self.next_synthetic;
                // Past 4 billion contexts made, the last id is shared.
                self.next_synthetic = self.next_synthetic.saturating_add(1);
                t
            }
        }
    }

    fn tid_used(&self, t: u32) -> bool {
        if let Some(vcpu) = boot_vcpu(t) {
            return self.used_boot.contains(&vcpu);
        }
        let (word, bit) = (t as usize / 64, t % 64);
        self.used_tids
            .get(word)
            .is_some_and(|w| w & (1 << bit) != 0)
    }

    fn mark_used(&mut self, t: u32) {
        if let Some(vcpu) = boot_vcpu(t) {
            self.used_boot.insert(vcpu);
            return;
        }
        let (word, bit) = (t as usize / 64, t % 64);
        if self.used_tids.len() <= word {
            self.used_tids.resize(word + 1, 0);
        }
        self.used_tids[word] |= 1 << bit;
    }
}
