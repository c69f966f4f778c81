//! A Linux guest's processes and their code mappings, read from its memory at one instant.
//!
//! The process watch (`plugin/src/handlers/procmaps.rs`) follows processes from events: a
//! fork, an exec, a file mapped. While tracing is off nothing is instrumented, so a process
//! started then, or one that exec'd or loaded a library then, is not known when tracing
//! comes back on. At a switch on the plugin reads them instead: the list of thread groups
//! (`task_struct.tasks`, a ring: from the running task's group leader, else from
//! `init_task` where the kernel's symbols give it), each one's threads from `signal->thread_head`, and each one's
//! mappings from its `mm_struct`'s maple tree (Linux 6.1 and later), keeping those mapped
//! executable from a file.
//!
//! Everything here is guest data: every count is bounded, every pointer checked before it
//! is followed, and a VMA is taken only where the tree's own ranges agree with it (a slot
//! holds `[vm_start, vm_end - 1]`) and it names this `mm_struct` as its own, so that a stale
//! or forged slot is passed over rather than believed.

/// Where the fields read are, in bytes from the start of their structure (the kernel's
/// DWARF or BTF gave them to the CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// `task_struct.tasks` (the thread groups' list).
    pub tasks: u64,
    pub group_leader: u64,
    pub mm: u64,
    pub pid: u64,
    pub tgid: u64,
    pub signal: u64,
    /// `task_struct.thread_node`, on `signal_struct.thread_head`.
    pub thread_node: u64,
    pub thread_head: u64,
    /// `mm_struct.mm_mt` plus `maple_tree.ma_root`.
    pub mm_root: u64,
    /// `mm_struct.exe_file`: the program.
    pub exe_file: u64,
    pub vm_start: u64,
    pub vm_end: u64,
    pub vm_flags: u64,
    pub vm_pgoff: u64,
    pub vm_file: u64,
    pub vm_mm: u64,
}

impl Layout {
    /// The numbers in the order `proc_walk=` gives them (after `init_task`'s address).
    pub fn from_numbers(n: [u64; 16]) -> Layout {
        let [tasks, group_leader, mm, pid, tgid, signal, thread_node, thread_head, mm_root, exe_file, vm_start, vm_end, vm_flags, vm_pgoff, vm_file, vm_mm] =
            n;
        Layout {
            tasks,
            group_leader,
            mm,
            pid,
            tgid,
            signal,
            thread_node,
            thread_head,
            mm_root,
            exe_file,
            vm_start,
            vm_end,
            vm_flags,
            vm_pgoff,
            vm_file,
            vm_mm,
        }
    }
}

/// A code mapping: a file mapped executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeMap {
    pub start: u64,
    pub end: u64,
    /// `vm_pgoff`: the file offset in kernel pages.
    pub pgoff: u64,
    /// The `struct file` (its path is the caller's to read).
    pub file: u64,
}

/// A thread group with an address space of its own (kernel threads have none).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Process {
    pub tgid: u32,
    /// Its threads' PIDs, the leader's too.
    pub threads: Vec<u32>,
    /// Its code mappings in address order, the program's first (`exe_file`'s, where it has one).
    pub code: Vec<CodeMap>,
    /// Whether the first mapping is the program's.
    pub program_first: bool,
    /// Some of its mappings or threads were past a bound, or could not be read.
    pub partial: bool,
}

/// What one walk found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Walk {
    pub processes: Vec<Process>,
    /// The list of thread groups ended early: a link that could not be read or was not a
    /// kernel pointer, or past [`MAX_PROCESSES`]. (A ring read from a task not on it, an
    /// idle task of another CPU whose links are a stale copy of `init_task`'s, ends where it
    /// comes back to one it read: that is no cut.)
    pub cut: bool,
    /// Nothing could be read at all: not the running task's leader nor `init_task`'s ring
    /// (an arm64 or riscv64 vCPU in user space cannot read kernel memory: the caller tries
    /// again in the kernel).
    pub unreadable: bool,
}

/// Thread groups read at most (a guest's fork bomb must not stall a switch on).
pub const MAX_PROCESSES: usize = 1 << 15;
/// Threads of one group read at most.
pub const MAX_THREADS: usize = 1 << 12;
/// Maple-tree nodes read at most for one address space (65,530 mappings, Linux's default
/// `max_map_count`, take about 5,000 nodes of 16 slots).
pub const MAX_NODES: usize = 1 << 13;
/// Code mappings kept at most for one process (as the plugin's own copy keeps).
pub const MAX_CODE: usize = 1024;
/// Levels of the tree descended at most (Linux's `MAPLE_HEIGHT_MAX` is 31; 16-way nodes
/// hold 2^32 entries in 8).
const MAX_HEIGHT: usize = 8;

/// `VM_EXEC`.
const VM_EXEC: u64 = 0x4;

/// A maple node's bytes (`struct maple_node`, 256 bytes on 64-bit kernels).
const NODE_BYTES: usize = 256;
/// `maple_leaf_64` and `maple_range_64`: a parent word, 15 pivots, 16 slots; the metadata
/// (its last slot's first byte: the index of the last slot used) where the node is not full.
const RANGE_SLOTS: usize = 16;
/// `maple_arange_64`: a parent word, 9 pivots, 10 slots, 10 gaps, then the metadata.
const ARANGE_SLOTS: usize = 10;
const ARANGE_META: usize = 8 + 9 * 8 + 10 * 8 + 10 * 8;
/// `enum maple_type`.
const LEAF_64: u64 = 1;
const RANGE_64: u64 = 2;
const ARANGE_64: u64 = 3;

/// Whether `p` may be a kernel structure: in the upper half of a 64-bit address space and
/// 8-byte aligned.
fn kernel_pointer(p: u64) -> bool {
    p >> 63 == 1 && p & 7 == 0
}

/// Reads guest memory: fills the buffer from the address, or `None`.
pub trait Memory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Option<()>;

    fn word(&mut self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Some(u64::from_le_bytes(b))
    }

    fn half(&mut self, addr: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Some(u32::from_le_bytes(b))
    }
}

/// Every thread group on the ring of thread groups that has an address space, with its
/// threads and code mappings: read from the group leader of `running` (a task running now,
/// 0 where none is known), else from `init_task` (an address of the guest: the symbols'
/// moved by a randomised base, which a run that started off may have found late or wrong).
pub fn walk(mem: &mut dyn Memory, layout: &Layout, init_task: Option<u64>, running: u64) -> Walk {
    let mut out = Walk::default();
    let leader = (kernel_pointer(running))
        .then(|| mem.word(running.wrapping_add(layout.group_leader)))
        .flatten()
        .filter(|&t| kernel_pointer(t));
    let Some(from) = leader.or(init_task).filter(|&t| kernel_pointer(t)) else {
        out.cut = true;
        out.unreadable = true;
        return out;
    };
    let head = from.wrapping_add(layout.tasks);
    if mem.word(head).is_none() {
        out.cut = true;
        out.unreadable = true;
        return out;
    }
    let (nodes, whole) = ring(mem, head, MAX_PROCESSES);
    out.cut = !whole;
    for at in nodes {
        if let Some(p) = process(mem, layout, at.wrapping_sub(layout.tasks)) {
            out.processes.push(p);
        }
    }
    out
}

/// The `list_head`s of a kernel list from `head` on, `head` first, each the `next` of the
/// one before, until a link comes back to one read (a ring read from a node not on it, a
/// stale copy of a list head, ends there too). `whole` is false where a link could not be
/// read or was no kernel pointer, or past `max` nodes.
pub fn ring(mem: &mut dyn Memory, head: u64, max: usize) -> (Vec<u64>, bool) {
    let mut nodes = vec![head];
    let mut read = std::collections::HashSet::from([head]);
    let mut at = head;
    loop {
        let Some(next) = mem.word(at).filter(|&l| kernel_pointer(l)) else {
            return (nodes, false);
        };
        if !read.insert(next) {
            return (nodes, true);
        }
        if nodes.len() >= max {
            return (nodes, false);
        }
        nodes.push(next);
        at = next;
    }
}

/// Thread group leader `task`, unless it has no address space (a kernel thread) or its
/// identity cannot be read.
fn process(mem: &mut dyn Memory, layout: &Layout, task: u64) -> Option<Process> {
    let mm = mem.word(task.wrapping_add(layout.mm))?;
    if !kernel_pointer(mm) {
        return None;
    }
    let tgid = mem.half(task.wrapping_add(layout.tgid))?;
    let mut p = Process {
        tgid,
        ..Process::default()
    };
    threads(mem, layout, task, &mut p);
    let exe = mem.word(mm.wrapping_add(layout.exe_file)).unwrap_or(0);
    code(mem, layout, mm, &mut p);
    p.code.sort_by_key(|m| (m.file != exe || exe == 0, m.start));
    p.program_first = exe != 0 && p.code.first().is_some_and(|m| m.file == exe);
    Some(p)
}

/// The threads on the group's `signal->thread_head` list.
fn threads(mem: &mut dyn Memory, layout: &Layout, task: u64, p: &mut Process) {
    let Some(signal) = mem
        .word(task.wrapping_add(layout.signal))
        .filter(|&s| kernel_pointer(s))
    else {
        p.partial = true;
        return;
    };
    let (nodes, whole) = ring(
        mem,
        signal.wrapping_add(layout.thread_head),
        MAX_THREADS + 1,
    );
    p.partial |= !whole;
    // The head is the signal structure's, no thread's.
    for at in nodes.into_iter().skip(1) {
        match mem.half(at.wrapping_sub(layout.thread_node).wrapping_add(layout.pid)) {
            Some(pid) => p.threads.push(pid),
            None => p.partial = true,
        }
    }
}

/// The code mappings in address space `mm`'s maple tree.
fn code(mem: &mut dyn Memory, layout: &Layout, mm: u64, p: &mut Process) {
    let Some(root) = mem.word(mm.wrapping_add(layout.mm_root)) else {
        p.partial = true;
        return;
    };
    // A node pointer at the root is tagged as an XArray node (low bits 0b10); anything else
    // there is an empty tree or a single entry at index 0, which no process maps.
    if root & 3 != 2 || root <= 4096 {
        return;
    }
    // Each node with the range of indices it covers, and its depth.
    let mut stack = vec![(root, 0u64, u64::MAX, 0usize)];
    let mut nodes = 0usize;
    let mut buf = [0u8; NODE_BYTES];
    let mut span = vma_span(layout);
    while let Some((enode, min, max, depth)) = stack.pop() {
        nodes += 1;
        if nodes > MAX_NODES || depth >= MAX_HEIGHT {
            p.partial = true;
            return;
        }
        let node = enode & !0xff;
        let kind = (enode >> 3) & 0xf;
        if !kernel_pointer(node) || mem.read(node, &mut buf).is_none() {
            p.partial = true;
            continue;
        }
        let word =
            |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        let (slots, pivots, first_slot, end) = match kind {
            LEAF_64 | RANGE_64 => {
                let pivots = RANGE_SLOTS - 1;
                // As the kernel's `ma_data_end`: a zero last pivot leaves the end to the
                // metadata, one equal to the node's maximum ends there.
                let last = word(pivots);
                let end = if last == 0 {
                    usize::from(buf[8 + 8 * pivots + 8 * pivots])
                } else if last == max {
                    pivots - 1
                } else {
                    pivots
                };
                (RANGE_SLOTS, pivots, 1 + pivots, end)
            }
            ARANGE_64 => (
                ARANGE_SLOTS,
                ARANGE_SLOTS - 1,
                ARANGE_SLOTS,
                usize::from(buf[ARANGE_META]),
            ),
            _ => {
                p.partial = true;
                continue;
            }
        };
        let end = end.min(slots - 1);
        let mut lo = min;
        for i in 0..=end {
            let hi = if i < pivots { word(1 + i) } else { max };
            let entry = word(first_slot + i);
            if hi < lo || hi > max {
                // Pivots out of order: the node is being rewritten, or is not one.
                p.partial = true;
                break;
            }
            if entry != 0 {
                if kind == LEAF_64 {
                    if let Some(m) = vma(mem, layout, &mut span, entry, mm, lo, hi) {
                        if p.code.len() >= MAX_CODE {
                            p.partial = true;
                            return;
                        }
                        p.code.push(m);
                    }
                } else {
                    stack.push((entry, lo, hi, depth + 1));
                }
            }
            if hi == max {
                break;
            }
            lo = hi + 1;
        }
    }
}

/// The bytes of a `vm_area_struct` that hold the fields read: (from, length).
fn vma_span(layout: &Layout) -> (u64, Vec<u8>) {
    let fields = [
        layout.vm_start,
        layout.vm_end,
        layout.vm_flags,
        layout.vm_pgoff,
        layout.vm_file,
        layout.vm_mm,
    ];
    let from = fields.iter().copied().min().unwrap_or(0);
    let to = fields.iter().copied().max().unwrap_or(0) + 8;
    // Layouts come from the kernel's types: a structure's fields lie within a few hundred bytes.
    let len = (to - from).min(4096) as usize;
    (from, vec![0; len])
}

/// The VMA a leaf's slot points at, covering `lo..=hi`, if it is one of `mm`'s, agrees with
/// the tree, and maps a file executable.
fn vma(
    mem: &mut dyn Memory,
    layout: &Layout,
    (from, buf): &mut (u64, Vec<u8>),
    entry: u64,
    mm: u64,
    lo: u64,
    hi: u64,
) -> Option<CodeMap> {
    if !kernel_pointer(entry) {
        return None;
    }
    mem.read(entry.wrapping_add(*from), buf)?;
    let field = |at: u64| {
        let i = at.checked_sub(*from)? as usize;
        Some(u64::from_le_bytes(buf.get(i..i + 8)?.try_into().ok()?))
    };
    let (start, end) = (field(layout.vm_start)?, field(layout.vm_end)?);
    if field(layout.vm_mm)? != mm || start != lo || end.wrapping_sub(1) != hi || end <= start {
        return None;
    }
    let file = field(layout.vm_file)?;
    if field(layout.vm_flags)? & VM_EXEC == 0 || !kernel_pointer(file) {
        return None;
    }
    Some(CodeMap {
        start,
        end,
        pgoff: field(layout.vm_pgoff)?,
        file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Guest memory laid out by hand: 4 KiB pages, present once written (bytes not written
    /// read as 0), absent ones unreadable. Whole-slice copies: byte maps took Miri minutes.
    #[derive(Default)]
    struct Mem(HashMap<u64, Box<[u8; 4096]>>);

    impl Mem {
        fn put_bytes(&mut self, addr: u64, bytes: &[u8]) {
            let mut done = 0;
            while done < bytes.len() {
                let a = addr + done as u64;
                let page = self.0.entry(a >> 12).or_insert_with(|| Box::new([0; 4096]));
                let at = (a & 0xfff) as usize;
                let n = (4096 - at).min(bytes.len() - done);
                page[at..at + n].copy_from_slice(&bytes[done..done + n]);
                done += n;
            }
        }
        fn put(&mut self, addr: u64, value: u64) {
            self.put_bytes(addr, &value.to_le_bytes());
        }
        fn put_byte(&mut self, addr: u64, value: u8) {
            self.put_bytes(addr, &[value]);
        }
    }

    impl Memory for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Option<()> {
            let mut done = 0;
            while done < buf.len() {
                let a = addr + done as u64;
                let page = self.0.get(&(a >> 12))?;
                let at = (a & 0xfff) as usize;
                let n = (4096 - at).min(buf.len() - done);
                buf[done..done + n].copy_from_slice(&page[at..at + n]);
                done += n;
            }
            Some(())
        }
    }

    const L: Layout = Layout {
        tasks: 0x10,
        group_leader: 0x18,
        mm: 0x20,
        pid: 0x28,
        tgid: 0x2c,
        signal: 0x30,
        thread_node: 0x38,
        thread_head: 0x8,
        mm_root: 0x48,
        exe_file: 0x50,
        vm_start: 0,
        vm_end: 8,
        vm_flags: 0x20,
        vm_pgoff: 0x30,
        vm_file: 0x38,
        vm_mm: 0x10,
    };
    const K: u64 = 0xffff_0000_0000_0000;
    const INIT: u64 = K + 0x1000;

    /// A task at `task` with `pid`/`tgid`, its `mm`, and its group's threads `threads`
    /// (task addresses) on the list at `signal`.
    fn task(m: &mut Mem, task: u64, pid: u32, tgid: u32, mm: u64, signal: u64) {
        m.put(task + L.mm, mm);
        m.put(task + L.pid, u64::from(pid) | u64::from(tgid) << 32);
        m.put(task + L.signal, signal);
    }

    /// Links `nodes` (addresses of list_heads) into a circular list after `head`.
    fn link(m: &mut Mem, head: u64, nodes: &[u64]) {
        let all: Vec<u64> = std::iter::once(head).chain(nodes.iter().copied()).collect();
        for (i, &n) in all.iter().enumerate() {
            m.put(n, all[(i + 1) % all.len()]);
        }
    }

    fn vma(m: &mut Mem, at: u64, start: u64, end: u64, flags: u64, file: u64, mm: u64) {
        m.put_bytes(at, &[0; 0x40]);
        m.put(at + L.vm_start, start);
        m.put(at + L.vm_end, end);
        m.put(at + L.vm_flags, flags);
        m.put(at + L.vm_pgoff, 2);
        m.put(at + L.vm_file, file);
        m.put(at + L.vm_mm, mm);
    }

    /// A maple node of `kind` at `node`: (pivot, slot) pairs, then the metadata end.
    fn node(m: &mut Mem, node: u64, kind: u64, entries: &[(u64, u64)], meta_end: Option<u8>) {
        m.put_bytes(node, &[0; 256]);
        let (pivots, first_slot) = if kind == ARANGE_64 { (9, 10) } else { (15, 16) };
        for (i, &(pivot, slot)) in entries.iter().enumerate() {
            if i < pivots {
                m.put(node + 8 + 8 * i as u64, pivot);
            }
            m.put(node + 8 * (first_slot + i) as u64, slot);
        }
        if let Some(end) = meta_end {
            let at = if kind == ARANGE_64 {
                ARANGE_META as u64
            } else {
                8 + 8 * 30
            };
            m.put_byte(node + at, end);
        }
    }

    fn enode(node: u64, kind: u64) -> u64 {
        node | kind << 3 | 4
    }

    /// Two thread groups and a kernel thread on `init_task`'s list; the first group has two
    /// threads and three mappings, two of them code (the program's at the higher address),
    /// in a tree of an arange root over two leaves; a slot a leaf no longer covers, a VMA of
    /// another mm and one whose range disagrees with the tree are passed over.
    #[test]
    fn processes_threads_and_code_are_read_from_a_drawn_guest() {
        let mut m = Mem::default();
        let (t1, t2, kt, t1b) = (K + 0x2000, K + 0x3000, K + 0x4000, K + 0x5000);
        let (mm1, mm2) = (K + 0x10_0000, K + 0x11_0000);
        let (sig1, sig2) = (K + 0x20_0000, K + 0x21_0000);
        link(
            &mut m,
            INIT + L.tasks,
            &[t1 + L.tasks, kt + L.tasks, t2 + L.tasks],
        );
        task(&mut m, t1, 10, 10, mm1, sig1);
        task(&mut m, t1b, 11, 10, mm1, sig1);
        task(&mut m, t2, 20, 20, mm2, sig2);
        task(&mut m, kt, 2, 2, 0, sig2);
        link(
            &mut m,
            sig1 + L.thread_head,
            &[t1 + L.thread_node, t1b + L.thread_node],
        );
        link(&mut m, sig2 + L.thread_head, &[t2 + L.thread_node]);
        let (prog, libc) = (K + 0x30_0000, K + 0x31_0000);
        m.put(mm1 + L.exe_file, prog);
        m.put(mm2 + L.exe_file, prog);
        let (root, leaf1, leaf2) = (K + 0x40_0000, K + 0x40_0100, K + 0x40_0200);
        m.put(mm1 + L.mm_root, enode(root, ARANGE_64) | 2);
        node(
            &mut m,
            root,
            ARANGE_64,
            &[
                (0x5fff, enode(leaf1, LEAF_64)),
                (u64::MAX, enode(leaf2, LEAF_64)),
            ],
            Some(1),
        );
        let (v_lib, v_data, v_other, v_bad, v_prog, v_stale) = (
            K + 0x50_0000,
            K + 0x50_0100,
            K + 0x50_0200,
            K + 0x50_0300,
            K + 0x50_0400,
            K + 0x50_0500,
        );
        vma(&mut m, v_lib, 0x1000, 0x3000, VM_EXEC | 1, libc, mm1);
        vma(&mut m, v_data, 0x3000, 0x4000, 1, libc, mm1);
        vma(&mut m, v_other, 0x4000, 0x5000, VM_EXEC, libc, mm2);
        vma(&mut m, v_bad, 0x5000, 0x5800, VM_EXEC, libc, mm1);
        vma(&mut m, v_prog, 0x8000, 0x9000, VM_EXEC, prog, mm1);
        vma(&mut m, v_stale, 0xa000, 0xb000, VM_EXEC, prog, mm1);
        // leaf1 covers 0..=0x5fff: a gap, lib, data, other mm's, one that disagrees.
        node(
            &mut m,
            leaf1,
            LEAF_64,
            &[
                (0xfff, 0),
                (0x2fff, v_lib),
                (0x3fff, v_data),
                (0x4fff, v_other),
                (0x5fff, v_bad),
            ],
            Some(4),
        );
        // leaf2 covers 0x6000..: a gap, the program, the rest a gap; a stale slot past the
        // end the metadata gives.
        node(
            &mut m,
            leaf2,
            LEAF_64,
            &[
                (0x7fff, 0),
                (0x8fff, v_prog),
                (u64::MAX, 0),
                (0xafff, v_stale),
            ],
            Some(2),
        );
        m.put(mm2 + L.mm_root, 0);
        let w = walk(&mut m, &L, Some(INIT), 0);
        assert!(!w.cut);
        assert_eq!(w.processes.len(), 2, "{w:?}");
        // The same ring from a thread of the second group (its leader, t2, read first), and
        // from an idle task whose links are a stale copy of init_task's.
        m.put(t1b + L.group_leader, t2);
        let from_thread = walk(&mut m, &L, None, t1b);
        assert!(!from_thread.cut);
        let tgids: Vec<u32> = from_thread.processes.iter().map(|p| p.tgid).collect();
        assert_eq!(tgids, vec![20, 10]);
        // The running task is preferred to an init_task moved by a wrong base.
        assert_eq!(walk(&mut m, &L, Some(K + 0x7777_0000), t1b), from_thread);
        let idle = K + 0x6000;
        m.put(idle + L.group_leader, idle);
        m.put(idle + L.tasks, t1 + L.tasks);
        m.put(idle + L.mm, 0);
        let from_idle = walk(&mut m, &L, None, idle);
        assert!(!from_idle.cut);
        assert_eq!(from_idle.processes, w.processes);
        let p = &w.processes[0];
        assert_eq!((p.tgid, p.threads.clone()), (10, vec![10, 11]));
        assert!(!p.partial, "{p:?}");
        let code: Vec<(u64, u64, u64)> = p.code.iter().map(|c| (c.start, c.end, c.file)).collect();
        assert_eq!(code, vec![(0x8000, 0x9000, prog), (0x1000, 0x3000, libc)]);
        assert!(p.program_first);
        assert_eq!(p.code[0].pgoff, 2);
        let q = &w.processes[1];
        assert_eq!((q.tgid, q.threads.clone(), q.code.len()), (20, vec![20], 0));
    }

    /// A list that loops back on itself short of its head, and a tree whose child points at
    /// its parent, end at their bounds: the walk says it was cut, and never hangs.
    #[test]
    fn forged_loops_end_at_their_bounds() {
        let mut m = Mem::default();
        let (t1, mm1, sig1) = (K + 0x2000, K + 0x10_0000, K + 0x20_0000);
        // init_task -> t1 -> t1 -> ...: a ring that does not close at its start ends where
        // it comes back; one longer than the bound is cut.
        m.put(INIT + L.tasks, t1 + L.tasks);
        m.put(t1 + L.tasks, t1 + L.tasks);
        task(&mut m, t1, 10, 10, 0, sig1);
        let w = walk(&mut m, &L, Some(INIT), 0);
        assert!(!w.cut);
        assert!(w.processes.is_empty());
        // (Not under Miri: 32,768 tasks take it minutes.)
        if !cfg!(miri) {
            let mut m = Mem::default();
            let link_at = |i: u64| K + 0x100_0000 + i * 0x100;
            m.put(INIT + L.tasks, link_at(0));
            for i in 0..MAX_PROCESSES as u64 + 10 {
                m.put(link_at(i), link_at(i + 1));
                m.put(link_at(i) - L.tasks + L.mm, 0);
            }
            assert!(walk(&mut m, &L, Some(INIT), 0).cut);
        }

        // One process whose root's child is the root again.
        let mut m = Mem::default();
        link(&mut m, INIT + L.tasks, &[t1 + L.tasks]);
        task(&mut m, t1, 10, 10, mm1, sig1);
        link(&mut m, sig1 + L.thread_head, &[t1 + L.thread_node]);
        let root = K + 0x40_0000;
        m.put(mm1 + L.mm_root, enode(root, RANGE_64) | 2);
        node(
            &mut m,
            root,
            RANGE_64,
            &[(u64::MAX, enode(root, RANGE_64))],
            Some(0),
        );
        let w = walk(&mut m, &L, Some(INIT), 0);
        assert!(!w.cut);
        assert!(w.processes[0].partial);
        assert!(w.processes[0].code.is_empty());
        // Unreadable: a link to nowhere.
        let mut m = Mem::default();
        m.put(INIT + L.tasks, K + 0x9999_0000);
        assert!(walk(&mut m, &L, Some(INIT), 0).cut);
        // No init_task and a running task that cannot be read; an init_task that cannot.
        assert!(walk(&mut Mem::default(), &L, None, t1).unreadable);
        assert!(walk(&mut Mem::default(), &L, Some(INIT), 0).unreadable);
        assert!(!walk(&mut m, &L, Some(INIT), 0).unreadable);
    }
}
