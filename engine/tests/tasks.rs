//! The whole-system model on drawn timelines: tasks switching and migrating between vCPUs,
//! exceptions nesting, privilege levels apart. Each test drives per-vCPU engines and the task
//! table as the plugin's callbacks do, and reads back what each uftrace task's file holds.

use qemu_uftrace_engine::arch::Level;
use qemu_uftrace_engine::exceptions::{EretOutcome, ExceptionKind};
use qemu_uftrace_engine::guest::{CallSite, GuestView};
use qemu_uftrace_engine::hot::{Engine, EVENT_SCHED_IN, EVENT_SCHED_OUT};
use qemu_uftrace_engine::tasks::{Switch, TaskTable, BOOT_TID_BASE};
use qemu_uftrace_format::pseudo;
use qemu_uftrace_format::record::{decode_all, RecordType};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A guest with no frame records: resync has nothing to go by.
struct NoGuest;

impl GuestView for NoGuest {
    fn frame_pointer(&mut self) -> Option<u64> {
        None
    }
    fn frame_record(&mut self, _: u64) -> Option<(u64, u64)> {
        None
    }
    fn call_before(&mut self, _: u64) -> Option<CallSite> {
        None
    }
}

type Files = Arc<Mutex<BTreeMap<u32, Vec<u8>>>>;

/// A machine: one engine per vCPU, one task table, one file per uftrace task.
struct Machine {
    engines: Vec<Engine>,
    table: TaskTable,
    files: Files,
    t: u64,
}

impl Machine {
    fn new(vcpus: u32, split_levels: bool) -> Machine {
        Machine::with_table(vcpus, TaskTable::new(split_levels))
    }

    fn with_table(vcpus: u32, mut table: TaskTable) -> Machine {
        let files: Files = Arc::default();
        let engines = (0..vcpus)
            .map(|v| {
                let tid = table.start_vcpu(v);
                let sink = Arc::clone(&files);
                // The buffer comes back for reuse, as the plugin's writer recycles them: a
                // fresh one at each switch cost Miri seconds a test.
                let spill = Box::new(move |tid: u32, full: Vec<u8>| {
                    sink.lock()
                        .unwrap()
                        .entry(tid)
                        .or_default()
                        .extend_from_slice(&full);
                    full
                });
                Engine::new(Vec::new(), spill, 1024, tid)
            })
            .collect();
        Machine {
            engines,
            table,
            files,
            t: 0,
        }
    }

    fn tick(&mut self) -> u64 {
        self.t += 10;
        self.t
    }

    fn call(&mut self, vcpu: usize, func: u64, ret_addr: u64) {
        let t = self.tick();
        self.engines[vcpu].call(t, func, ret_addr);
    }

    fn ret(&mut self, vcpu: usize, target: u64) {
        let t = self.tick();
        self.engines[vcpu].ret(t, target, &mut NoGuest);
    }

    fn task(&mut self, vcpu: usize, ptr: u64, pid: u32) -> Switch {
        let t = self.tick();
        self.table
            .task_pointer(&mut self.engines[vcpu], vcpu as u32, t, ptr, pid)
    }

    fn level(&mut self, vcpu: usize, level: u8) -> Switch {
        let t = self.tick();
        self.table
            .level(&mut self.engines[vcpu], vcpu as u32, t, Level(level))
    }

    fn exception(&mut self, vcpu: usize, kind: ExceptionKind, resume: u64) {
        let t = self.tick();
        self.engines[vcpu].exception_entry(t, kind, resume);
    }

    fn eret(&mut self, vcpu: usize, target: u64) -> EretOutcome {
        let t = self.tick();
        self.engines[vcpu].exception_return(t, target, 0xdead_0000)
    }

    fn tid_of(&self, vcpu: usize) -> u32 {
        self.engines[vcpu].tid()
    }

    /// Every task's records as `+func@depth`, `-func@depth`, `out`/`in` (sched events).
    fn shapes(&mut self) -> BTreeMap<u32, Vec<String>> {
        for e in &mut self.engines {
            e.flush();
        }
        let files = self.files.lock().unwrap();
        files
            .iter()
            .map(|(&tid, bytes)| {
                let recs = decode_all(bytes).unwrap();
                assert!(
                    recs.windows(2).all(|w| w[0].time <= w[1].time),
                    "task {tid}'s times go back"
                );
                let shape = recs
                    .iter()
                    .map(|r| match r.kind {
                        RecordType::Entry => format!("+{:x}@{}", r.addr, r.depth),
                        RecordType::Exit => format!("-{:x}@{}", r.addr, r.depth),
                        RecordType::Lost => format!("L@{}", r.depth),
                        RecordType::Event if r.addr == EVENT_SCHED_OUT => "out".into(),
                        RecordType::Event if r.addr == EVENT_SCHED_IN => "in".into(),
                        RecordType::Event => format!("event {}", r.addr),
                    })
                    .collect();
                (tid, shape)
            })
            .collect()
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

const TASK_A: u64 = 0xffff_0000_0100_0000;
const TASK_B: u64 = 0xffff_0000_0200_0000;

/// Boot code calls start_kernel, names the idle task (adopted: same stack, same tid), which
/// forks A; A runs on the same vCPU through a switch inside schedule, then the idle task
/// resumes where it was. No frame closes at a switch; each task's file has its own calls.
#[test]
fn a_switch_suspends_one_stack_and_resumes_another() {
    let mut m = Machine::new(1, false);
    let boot = m.tid_of(0);
    assert_eq!(boot, BOOT_TID_BASE);
    m.call(0, 0x100, 0x14); // start_kernel
    assert_eq!(m.task(0, TASK_A - 0x1000, 0), Switch::Adopted);
    assert_eq!(m.tid_of(0), boot);
    m.call(0, 0x200, 0x104); //  schedule
    m.call(0, 0x300, 0x204); //   cpu_switch_to
    assert_eq!(m.task(0, TASK_A, 7), Switch::Switched);
    assert_eq!(m.tid_of(0), 7, "a task's tid is its PID");
    m.call(0, 0x400, 0x1004); // A: kernel_init
    m.call(0, 0x200, 0x404); //   schedule
    m.call(0, 0x300, 0x204); //    cpu_switch_to
    assert_eq!(m.task(0, TASK_A - 0x1000, 0), Switch::Switched);
    m.ret(0, 0x204); // idle: cpu_switch_to returns
    m.ret(0, 0x104); //  schedule returns; start_kernel stays open
    let shapes = m.shapes();
    assert_eq!(
        shapes[&boot],
        s(&["+100@0", "+200@1", "+300@2", "out", "in", "-300@2", "-200@1"])
    );
    assert_eq!(shapes[&7], s(&["+400@0", "+200@1", "+300@2", "out"]));
    assert_eq!(m.engines[0].stats.switches, 2);
    assert_eq!(m.engines[0].stats.unmatched_returns, 0);
}

/// A fork loop: tasks started one after another. The table keeps its cap of contexts;
/// the tasks past it share one (one uftrace task, named so), counted, their records kept.
#[test]
fn tasks_past_the_cap_share_one_context_and_are_counted() {
    let mut m = Machine::with_table(1, TaskTable::new(false).with_max_contexts(4));
    m.task(0, TASK_A - 0x1000, 0); // the idle task (the boot context, adopted)
    for pid in 10..20u32 {
        m.task(0, TASK_A + u64::from(pid) * 0x1000, pid);
        m.table.name_running(0, format!("child{pid}"));
        m.call(0, 0x500, 0x14); // the child's work
        m.ret(0, 0x14);
        m.task(0, TASK_A - 0x1000, 0);
    }
    assert_eq!(m.table.contexts()[1].name.as_deref(), Some("child10"));
    // The idle task, three children, and the one the seven later children share.
    assert_eq!(m.table.contexts().len(), 5);
    assert_eq!(m.table.past_cap, 7);
    let contexts = m.table.contexts();
    let shared = contexts.last().unwrap();
    assert_eq!(shared.name.as_deref(), Some("(tasks past the cap)"));
    let shared = shared.tid;
    let shapes = m.shapes();
    assert_eq!(shapes[&10], s(&["+500@0", "-500@0", "out"]));
    assert!(!shapes.contains_key(&13), "{shapes:?}");
    assert_eq!(
        shapes[&shared].iter().filter(|r| *r == "+500@0").count(),
        7,
        "{shapes:?}"
    );
    assert_eq!(m.engines[0].stats.unmatched_returns, 0);
}

/// A task that moves to another vCPU takes its stack along: its returns there match the
/// calls it made on the first vCPU, in one file.
#[test]
fn a_task_migrates_between_vcpus_with_its_stack() {
    let mut m = Machine::new(2, false);
    m.task(0, TASK_A - 0x1000, 0); // vCPU 0's idle task
    m.task(1, TASK_B - 0x1000, 0); // vCPU 1's idle task
    assert_ne!(m.tid_of(0), m.tid_of(1));
    m.task(0, TASK_A, 10);
    m.call(0, 0x500, 0x14); // A: worker
    m.call(0, 0x200, 0x504); //  schedule
    m.task(0, TASK_A - 0x1000, 0); // A sleeps; vCPU 0 idles
    m.task(1, TASK_A, 10); // A wakes on vCPU 1
    assert_eq!(m.tid_of(1), 10);
    m.ret(1, 0x504);
    m.ret(1, 0x14);
    let shapes = m.shapes();
    assert_eq!(
        shapes[&10],
        s(&["+500@0", "+200@1", "out", "in", "-200@1", "-500@0"])
    );
    let a = m
        .table
        .contexts()
        .into_iter()
        .find(|c| c.tid == 10)
        .unwrap();
    assert_eq!(a.vcpus.iter().copied().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(m.table.conflicts, 0);
}

/// A task structure reused for a new PID is a new task; the same PID on a new structure too.
#[test]
fn reused_task_structures_are_new_tasks() {
    let mut m = Machine::new(1, false);
    m.task(0, TASK_B, 0);
    m.task(0, TASK_A, 20);
    m.call(0, 0x100, 0x14);
    m.task(0, TASK_B, 0);
    m.task(0, TASK_A, 21); // task 20 died; its task_struct now runs PID 21
    assert_eq!(m.tid_of(0), 21);
    m.call(0, 0x200, 0x14);
    let shapes = m.shapes();
    assert_eq!(shapes[&20], s(&["+100@0", "out"]));
    assert_eq!(shapes[&21], s(&["+200@0"]), "a new task starts empty");
}

/// An interrupt taken inside f nests under it as `[irq]`, with the handler's calls beneath;
/// its ERET closes whatever the handler left open. A syscall's ERET closes `[svc]` even when
/// it returns elsewhere (a fixup, a signal), and counts that.
#[test]
fn exceptions_are_entries_closed_by_their_return() {
    let mut m = Machine::new(1, false);
    let tid = m.tid_of(0);
    m.call(0, 0x100, 0x14); // f
    m.exception(0, ExceptionKind::Irq, 0x120);
    m.call(0, 0x900, 0x804); //  handler
    m.call(0, 0x950, 0x904); //   never returns before the ERET (it switched stacks)
    assert_eq!(m.eret(0, 0x120), EretOutcome::ClosedException);
    m.exception(0, ExceptionKind::Svc, 0x130);
    m.exception(0, ExceptionKind::DataAbort, 0x960); // nested: a fault in the handler
    assert_eq!(m.eret(0, 0x960), EretOutcome::ClosedException);
    assert_eq!(m.eret(0, 0x4000), EretOutcome::ClosedException);
    m.ret(0, 0x14);
    let irq = format!("{:x}", pseudo::addr(ExceptionKind::Irq as u8));
    let svc = format!("{:x}", pseudo::addr(ExceptionKind::Svc as u8));
    let abort = format!("{:x}", pseudo::addr(ExceptionKind::DataAbort as u8));
    assert_eq!(
        m.shapes()[&tid],
        vec![
            "+100@0".to_string(),
            format!("+{irq}@1"),
            "+900@2".into(),
            "+950@3".into(),
            "-950@3".into(),
            "-900@2".into(),
            format!("-{irq}@1"),
            format!("+{svc}@1"),
            format!("+{abort}@2"),
            format!("-{abort}@2"),
            format!("-{svc}@1"),
            "-100@0".into(),
        ]
    );
    let stats = m.engines[0].stats;
    assert_eq!((stats.exceptions, stats.exception_returns), (3, 3));
    assert_eq!(stats.eret_redirects, 1);
    assert_eq!(stats.unmatched_returns, 0);
}

/// A return never closes an exception entry, not even one whose landing was not seen, and
/// a return that matches only a frame below the entry leaves the entry and what it
/// interrupted alone.
#[test]
fn returns_never_cross_an_exception_entry() {
    let mut m = Machine::new(1, false);
    let tid = m.tid_of(0);
    m.call(0, 0x100, 0x14); // f
    m.exception(0, ExceptionKind::Irq, 0x120);
    let t = m.tick();
    m.engines[0].ret_unseen(t); // a handler's return to vector code
    m.ret(0, 0x14); // matches f, below the entry: not taken as f's return
    assert_eq!(m.engines[0].stack().len(), 2);
    m.eret(0, 0x120);
    m.ret(0, 0x14);
    let shapes = m.shapes();
    assert_eq!(shapes[&tid].first().map(String::as_str), Some("+100@0"));
    assert_eq!(shapes[&tid].last().map(String::as_str), Some("-100@0"));
    assert_eq!(m.engines[0].stats.deep_returns, 0);
}

/// Without split levels a syscall from user code nests under the user function that made
/// it, in the user's task; with them, each level is a task of its own and the exception
/// entry opens in the level it enters.
#[test]
fn split_levels_keep_each_level_apart() {
    let mut m = Machine::new(1, true);
    let firmware = m.tid_of(0);
    m.call(0, 0x100, 0x14); // EL3 firmware
    assert_eq!(
        m.level(0, 3),
        Switch::Same,
        "the boot context learns its level"
    );
    assert_eq!(m.level(0, 1), Switch::Switched); // ERET to EL1
    let kernel = m.tid_of(0);
    assert_ne!(kernel, firmware);
    m.call(0, 0x4000, 0x40);
    m.level(0, 0); // ERET to EL0
    let user = m.tid_of(0);
    m.call(0, 0x7000, 0x7100); // user function
    m.level(0, 1); // SVC taken to EL1
    assert_eq!(m.tid_of(0), kernel);
    m.exception(0, ExceptionKind::Svc, 0x7204);
    m.call(0, 0x4100, 0x40);
    m.ret(0, 0x40);
    m.eret(0, 0x7204);
    m.level(0, 0);
    m.ret(0, 0x7100);
    let shapes = m.shapes();
    assert_eq!(shapes[&firmware], s(&["+100@0"]));
    let svc = format!("{:x}", pseudo::addr(ExceptionKind::Svc as u8));
    assert_eq!(
        shapes[&kernel],
        vec![
            "+4000@0".to_string(),
            format!("+{svc}@1"),
            "+4100@2".into(),
            "-4100@2".into(),
            format!("-{svc}@1"),
        ]
    );
    assert_eq!(shapes[&user], s(&["+7000@0", "-7000@0"]));
    // Level switches are not the scheduler's: no sched events.
    assert!(shapes.values().flatten().all(|r| r != "out" && r != "in"));
}

/// Without split levels the level calls change nothing.
#[test]
fn levels_are_one_task_without_split() {
    let mut m = Machine::new(1, false);
    let tid = m.tid_of(0);
    assert_eq!(m.level(0, 3), Switch::Same);
    assert_eq!(m.level(0, 1), Switch::Same);
    assert_eq!(m.tid_of(0), tid);
}

/// The guest switching to a task still running elsewhere (a switch we missed) does not
/// take its stack from under the other vCPU: the task restarts empty there, counted.
#[test]
fn a_task_running_elsewhere_is_not_taken_over() {
    let mut m = Machine::new(2, false);
    m.task(0, TASK_B - 0x1000, 0);
    m.task(1, TASK_B - 0x2000, 0);
    m.task(0, TASK_A, 5);
    m.call(0, 0x100, 0x14);
    m.task(1, TASK_A, 5);
    assert_eq!(m.table.conflicts, 1);
    assert_eq!(m.engines[1].stack().len(), 0);
    assert_eq!(m.engines[0].stack().len(), 1);
}

#[test]
fn user_mode_threads_are_tasks_named_by_their_thread_ids() {
    let mut table = TaskTable::new(false);
    assert_eq!(table.start_thread(0, 4242), 4242);
    assert_eq!(table.start_thread(1, 4243), 4243);
    // The second thread exits; QEMU gives its vCPU index to the next thread.
    table.end_vcpu(1);
    assert!(table.running(1).is_none());
    assert_eq!(table.start_thread(1, 4244), 4244);
    let tids: Vec<(u32, Option<u32>, bool)> = table
        .contexts()
        .iter()
        .map(|c| (c.tid, c.pid(), c.is_boot()))
        .collect();
    assert_eq!(
        tids,
        [
            (4242, Some(4242), false),
            (4243, Some(4243), false),
            (4244, Some(4244), false)
        ]
    );
    assert_eq!(table.running(1).map(|c| c.tid), Some(4244));
    assert_eq!(table.running(0).map(|c| c.tid), Some(4242));
    // No thread id is a boot context's: the CLI never renumbers them.
    assert!(tids.iter().all(|&(t, _, _)| t < BOOT_TID_BASE));
}

/// Threads read with their thread group are that process's, at every level of theirs; a
/// boot context, a task with no PID and one never read have none.
#[test]
fn threads_carry_their_thread_group() {
    let mut m = Machine::new(1, true);
    m.level(0, 1);
    m.task(0, TASK_A, 7);
    m.table.thread_group(7, 7);
    m.task(0, TASK_B, 9);
    m.table.thread_group(9, 7);
    m.level(0, 0); // the thread in user space: a context of its own
    m.task(0, TASK_B + 0x1000, 0);
    m.table.thread_group(0, 7);
    m.task(0, TASK_B + 0x2000, 11);
    let groups: Vec<(Option<u32>, Option<u32>)> = m
        .table
        .contexts()
        .iter()
        .map(|c| (c.pid(), m.table.tgid(c)))
        .collect();
    assert_eq!(
        groups,
        [
            (Some(7), Some(7)), // the boot context adopted as task 7
            (Some(9), Some(7)),
            (Some(9), Some(7)), // task 9 at EL0
            (None, None),
            (Some(11), None),
        ]
    );
}

/// A task that exits: do_exit may sleep (its switch away keeps the context), and only the
/// switch away after the OS said the task ended (Linux: `TASK_DEAD`) frees it. Its frames
/// stay open in its file, as at the end of a recording; its line stays, with its name and
/// thread group; the next task made gets the freed room.
#[test]
fn an_ended_task_is_freed_at_its_last_switch_away() {
    let mut m = Machine::new(1, false);
    let idle = TASK_A - 0x1000;
    m.task(0, idle, 0);
    m.task(0, TASK_A, 10);
    m.table.name_running(0, "child".into());
    m.table.thread_group(10, 10);
    m.call(0, 0x100, 0x14); // do_exit
    m.call(0, 0x110, 0x104); //  exit_mm
    m.call(0, 0x200, 0x114); //   schedule: sleeps inside do_exit
    m.task(0, idle, 0);
    assert_eq!(
        m.table.freed, 0,
        "a task switched away inside do_exit comes back"
    );
    m.task(0, TASK_A, 10);
    m.ret(0, 0x114);
    m.ret(0, 0x104);
    m.call(0, 0x120, 0x108); //  do_task_dead
    m.call(0, 0x200, 0x124); //   __schedule
    m.table.running_ends(0);
    assert_eq!(m.table.live(), 2);
    m.task(0, idle, 0);
    assert_eq!(
        (m.table.freed, m.table.freed_open_frames, m.table.live()),
        (1, 3, 1)
    );
    let contexts = m.table.contexts();
    let child = contexts
        .iter()
        .find(|c| c.tid == 10)
        .expect("its line stays");
    assert_eq!(child.name.as_deref(), Some("child"));
    assert_eq!(child.waiting_frames(), 0, "its stack is freed");
    assert_eq!(m.table.tgid(child), Some(10));
    // Its task structure and PID reused: a new task, empty, under an id of its own.
    m.task(0, TASK_A, 10);
    let reborn = m.tid_of(0);
    assert_ne!(reborn, 10);
    m.ret(0, 0x124);
    assert_eq!(
        m.engines[0].stats.unmatched_returns, 1,
        "nothing of the old stack"
    );
    assert_eq!(m.table.live(), 2);
    let shapes = m.shapes();
    assert_eq!(
        shapes[&10],
        s(&[
            "+100@0", "+110@1", "+200@2", "out", "in", "-200@2", "-110@1", "+120@1", "+200@2",
            "out"
        ])
    );
}

/// A fork loop whose children end: the cap bounds the contexts alive at once, not those
/// made, so none is past it; every child keeps its line and name.
#[test]
fn ended_tasks_do_not_count_against_the_cap() {
    let mut m = Machine::with_table(1, TaskTable::new(false).with_max_contexts(4));
    let idle = TASK_A - 0x1000;
    m.task(0, idle, 0);
    for pid in 10..16u32 {
        m.task(0, TASK_A + u64::from(pid) * 0x1000, pid);
        m.table.name_running(0, format!("child{pid}"));
        m.call(0, 0x500, 0x14);
        m.ret(0, 0x14);
        m.call(0, 0x100, 0x18); // do_exit, never returns
        m.table.running_ends(0);
        m.task(0, idle, 0);
    }
    assert_eq!(m.table.past_cap, 0);
    assert_eq!((m.table.live(), m.table.freed), (1, 6));
    assert_eq!(m.table.freed_open_frames, 6);
    let names: Vec<String> = m.table.contexts()[1..]
        .iter()
        .map(|c| format!("{}:{}", c.tid, c.name.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        names,
        (10..16)
            .map(|p| format!("{p}:child{p}"))
            .collect::<Vec<_>>()
    );
    let shapes = m.shapes();
    assert_eq!(shapes[&15], s(&["+500@0", "-500@0", "+100@0", "out"]));
}

/// With split levels a task is a context per level: its end frees them all, and what `-t`
/// still held back in each (the entries of its open frames) is written into its own file
/// as at the end of a recording.
#[test]
fn an_ended_task_frees_every_level_and_writes_what_t_held_back() {
    let mut m = Machine::new(1, true);
    m.engines[0].set_time_filter(1000);
    m.level(0, 1);
    let idle = TASK_A - 0x1000;
    m.task(0, idle, 0);
    m.task(0, TASK_A, 10);
    let kernel = m.tid_of(0);
    m.level(0, 0);
    let user = m.tid_of(0);
    m.call(0, 0x7000, 0x7100); // exit() in user space, open
    m.level(0, 1); // its syscall
    m.call(0, 0x100, 0x14); // do_exit
    m.call(0, 0x110, 0x104); //  a short call: below the threshold
    m.ret(0, 0x104);
    m.table.running_ends(0);
    let live = m.table.live();
    m.task(0, idle, 0);
    assert_eq!(m.table.live(), live - 2);
    assert_eq!((m.table.freed, m.table.freed_open_frames), (2, 2));
    let shapes = m.shapes();
    assert_eq!(shapes[&user], s(&["+7000@0"]));
    assert_eq!(shapes[&kernel], s(&["+100@0", "out"]));
}

/// User mode: an exited thread's context is freed at once; a later thread the host gives
/// the same id is written under it (as libmcount would), with an empty stack.
#[test]
fn exited_threads_are_freed_and_their_ids_may_come_back() {
    let mut table = TaskTable::new(false);
    assert_eq!(table.start_thread(0, 4242), 4242);
    assert_eq!(table.start_thread(1, 4243), 4243);
    table.end_vcpu(1);
    assert_eq!((table.live(), table.freed), (1, 1));
    assert_eq!(table.start_thread(1, 4243), 4243);
    assert_eq!(table.live(), 2);
    let tids: Vec<u32> = table.contexts().iter().map(|c| c.tid).collect();
    assert_eq!(tids, [4242, 4243, 4243]);
}
