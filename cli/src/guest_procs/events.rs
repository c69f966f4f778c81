//! `plugin.procs` (`plugin/src/handlers/procmaps.rs`) read into address spaces: each
//! process's code mappings from one point in time on (its start as a forked copy of its
//! parent's, or an exec) until the next or its exit, and which process each guest thread
//! belongs to.

use std::collections::HashMap;
use std::sync::Arc;

/// A file mapped executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The file's path in the guest, as its dentries gave it.
    pub path: String,
    pub start: u64,
    pub len: u64,
    /// The file offset mapped at `start`.
    pub offset: u64,
    /// Which file system holds it (the root dentry the plugin's walk ended at; 0: not known).
    pub fs: u64,
}

/// The most code mappings one address space keeps: a process maps one per file it executes
/// from (its program, its loader, each library), a guest can make any number. Those past it
/// are counted ([`Procs::dropped`]) and said.
pub const MAX_MAPPINGS: usize = 4096;

/// Frozen lists a space's list may sit on before it is copied into one (a bound on the chain
/// walked to read it, and on the recursion that drops it).
const MAX_LEVELS: usize = 32;

/// A space's code mappings, in the order they were made: those it had at its fork, shared with
/// its parent and the parent's other children, then its own. A fork copies nothing, so a
/// guest's fork loop costs a line of `plugin.procs` per child, not its parent's whole list.
#[derive(Debug, Clone, Default)]
pub struct Maps {
    inherited: Option<Arc<Maps>>,
    own: Vec<Mapping>,
    len: usize,
    levels: usize,
}

impl Maps {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every mapping, the inherited first.
    pub fn iter(&self) -> impl Iterator<Item = &Mapping> {
        let mut chain = vec![self];
        while let Some(up) = chain.last().and_then(|m| m.inherited.as_deref()) {
            chain.push(up);
        }
        chain.into_iter().rev().flat_map(|m| m.own.iter())
    }

    pub fn first(&self) -> Option<&Mapping> {
        self.iter().next()
    }

    /// Adds `m`; false when the list is full ([`MAX_MAPPINGS`]).
    fn push(&mut self, m: Mapping) -> bool {
        if self.len >= MAX_MAPPINGS {
            return false;
        }
        self.own.push(m);
        self.len += 1;
        true
    }

    /// A forked child's list: this one as it is now, frozen and shared by both.
    fn fork(&mut self) -> Maps {
        if !self.own.is_empty() {
            let frozen = if self.levels >= MAX_LEVELS {
                Maps {
                    own: self.iter().cloned().collect(),
                    len: self.len,
                    ..Maps::default()
                }
            } else {
                std::mem::take(self)
            };
            *self = Maps {
                levels: frozen.levels + 1,
                len: frozen.len,
                inherited: Some(Arc::new(frozen)),
                own: Vec::new(),
            };
        }
        Maps {
            own: Vec::new(),
            ..self.clone()
        }
    }
}

impl PartialEq for Maps {
    fn eq(&self, other: &Maps) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for Maps {}

impl FromIterator<Mapping> for Maps {
    fn from_iter<I: IntoIterator<Item = Mapping>>(iter: I) -> Maps {
        let own: Vec<Mapping> = iter.into_iter().collect();
        Maps {
            len: own.len(),
            own,
            ..Maps::default()
        }
    }
}

/// One process's address space from `from` (the trace's time) until the next of its
/// thread group, or its leader's exit (after which its PID starts clean).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Space {
    pub tgid: u32,
    pub from: u64,
    pub maps: Maps,
    /// Whether it began at an exec (else it is a forked copy of its parent's).
    pub exec: bool,
}

impl Space {
    /// The program: the first file an exec mapped (the kernel maps it before its loader).
    pub fn program(&self) -> Option<&str> {
        self.maps.first().map(|m| m.path.as_str())
    }
}

/// What the plugin saw of the guest's processes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Procs {
    pub spaces: Vec<Space>,
    /// Guest thread (PID) → its process (thread group).
    pub tgid_of: HashMap<u32, u32>,
    /// The first file mapped (the kernel's first exec: an initramfs's `/init` or its
    /// interpreter, when the guest has one).
    pub first: Option<Mapping>,
    /// Mappings left out of spaces already holding [`MAX_MAPPINGS`].
    pub dropped: u64,
}

/// Parses `plugin.procs`; lines that do not parse are passed over.
pub fn parse(text: &str) -> Procs {
    let mut procs = Procs::default();
    // Each thread group's current space.
    let mut current: HashMap<u32, usize> = HashMap::new();
    for line in text.lines() {
        let mut fields = line.split('\t');
        let kind = fields.next().unwrap_or("");
        let mut get = HashMap::new();
        for f in fields {
            if let Some((k, v)) = f.split_once('=') {
                get.insert(k, v);
            }
        }
        let dec = |k: &str| get.get(k).and_then(|v| v.parse::<u64>().ok());
        let hex = |k: &str| get.get(k).and_then(|v| u64::from_str_radix(v, 16).ok());
        let (Some(time), Some(tid), Some(tgid)) = (dec("time"), dec("tid"), dec("tgid")) else {
            continue;
        };
        let (tid, tgid) = (tid as u32, tgid as u32);
        procs.tgid_of.insert(tid, tgid);
        match kind {
            "task" if tid == tgid => {
                // A new process: a copy of its parent's mappings (a kernel thread's
                // parent has none).
                let parent = dec("parent").map(|p| p as u32);
                let maps = parent
                    .and_then(|p| current.get(&p))
                    .map(|&i| procs.spaces[i].maps.fork());
                match maps {
                    Some(maps) => {
                        current.insert(tgid, procs.spaces.len());
                        procs.spaces.push(Space {
                            tgid,
                            from: time,
                            maps,
                            exec: false,
                        });
                    }
                    None => {
                        current.remove(&tgid);
                    }
                }
            }
            // An exec, or a process read from guest memory at a switch on
            // (`plugin/src/handlers/proc_walk.rs`): the process as it is then, its code
            // mappings next, the program's first where `program=1` (it started, exec'd or
            // mapped while tracing was off). Either starts a new space.
            "exec" | "seen" => {
                current.insert(tgid, procs.spaces.len());
                procs.spaces.push(Space {
                    tgid,
                    from: time,
                    maps: Maps::default(),
                    exec: kind == "exec" || dec("program") == Some(1),
                });
            }
            "mmap" => {
                let (Some(start), Some(len), Some(offset), Some(path)) =
                    (hex("start"), hex("len"), hex("offset"), get.get("path"))
                else {
                    continue;
                };
                let i = *current.entry(tgid).or_insert_with(|| {
                    // A process whose start was not seen.
                    procs.spaces.push(Space {
                        tgid,
                        from: time,
                        maps: Maps::default(),
                        exec: false,
                    });
                    procs.spaces.len() - 1
                });
                let m = Mapping {
                    path: path.to_string(),
                    start,
                    len,
                    offset,
                    fs: hex("fs").unwrap_or(0),
                };
                procs.first.get_or_insert_with(|| m.clone());
                if !procs.spaces[i].maps.push(m) {
                    procs.dropped += 1;
                }
            }
            // The exec'd system call returned, closing the old program's frames: the new
            // program's session starts after their exits, which its files must not name.
            "execret" => {
                if let Some(space) = current.get(&tgid).and_then(|&i| procs.spaces.get_mut(i)) {
                    if space.exec && space.from <= time {
                        space.from = time + 1;
                    }
                }
            }
            // The process ended: a PID reused later starts clean.
            "exit" if tid == tgid => {
                current.remove(&tgid);
            }
            _ => {}
        }
    }
    procs
}

/// Reads `plugin.procs` from a staging directory (`None`: the plugin watched nothing).
pub fn read(dir: &std::path::Path) -> Option<Procs> {
    std::fs::read_to_string(dir.join("plugin.procs"))
        .ok()
        .map(|t| parse(&t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mmap(tgid: u32, n: usize) -> String {
        format!(
            "mmap\ttime=3\ttid={tgid}\ttgid={tgid}\tstart={:x}\tlen=1000\toffset=0\tpath=/f{n}\n",
            0x1000_0000 + n * 0x1000
        )
    }

    /// Mappings held in memory: each list's own, and each frozen list once however many
    /// spaces share it.
    fn stored(procs: &Procs) -> usize {
        let mut seen = std::collections::HashSet::new();
        let mut n = 0;
        for space in &procs.spaces {
            let mut at = Some(&space.maps);
            while let Some(m) = at {
                if std::ptr::eq(m, &space.maps) || seen.insert(m as *const Maps) {
                    n += m.own.len();
                } else {
                    break;
                }
                at = m.inherited.as_deref();
            }
        }
        n
    }

    /// A process read at a switch on: a new space from then, named by its program where the
    /// walk found it; a thread told then belongs to its process; what came before keeps the
    /// space it had.
    #[test]
    fn a_process_seen_at_a_switch_on_starts_a_space() {
        let text = "exec\ttime=1\ttid=5\ttgid=5\n\
                    mmap\ttime=1\ttid=5\ttgid=5\tstart=1000\tlen=1000\toffset=0\tpath=/bin/sh\n\
                    seen\ttime=9\ttid=5\ttgid=5\tprogram=1\n\
                    mmap\ttime=9\ttid=5\ttgid=5\tstart=4000\tlen=1000\toffset=0\tpath=/worker\n\
                    mmap\ttime=9\ttid=5\ttgid=5\tstart=8000\tlen=2000\toffset=1000\tpath=/lib/libc.so.6\n\
                    task\ttime=9\ttid=6\ttgid=5\tparent=0\n\
                    seen\ttime=9\ttid=7\ttgid=7\tprogram=0\n";
        let p = parse(text);
        assert_eq!(p.spaces.len(), 3);
        assert_eq!(
            (p.spaces[0].from, p.spaces[0].program()),
            (1, Some("/bin/sh"))
        );
        let s = &p.spaces[1];
        assert_eq!(
            (s.tgid, s.from, s.exec, s.program()),
            (5, 9, true, Some("/worker"))
        );
        assert_eq!(s.maps.len(), 2);
        assert_eq!(p.tgid_of.get(&6), Some(&5));
        assert!(!p.spaces[2].exec);
    }

    /// A guest's fork loop: each child starts with its parent's 1,000 mappings and adds
    /// one, and what is held grows by a mapping a child, not by its parent's list.
    #[test]
    fn a_fork_loop_shares_its_parent_s_mappings() {
        let mut text = String::from("exec\ttime=1\ttid=1\ttgid=1\n");
        (0..1000).for_each(|n| text += &mmap(1, n));
        let children = 3000u32;
        for c in 2..2 + children {
            text += &format!("task\ttime=2\ttid={c}\ttgid={c}\tparent=1\n");
            text += &mmap(c, 5000 + c as usize);
        }
        let p = parse(&text);
        assert_eq!(p.spaces.len(), 1 + children as usize);
        for child in &p.spaces[1..] {
            assert_eq!(child.maps.len(), 1001);
            assert_eq!(child.maps.first().map(|m| m.path.as_str()), Some("/f0"));
            let last = child.maps.iter().last().map(|m| m.path.clone());
            assert_eq!(last, Some(format!("/f{}", 5000 + child.tgid)));
        }
        assert_eq!(stored(&p), 1000 + children as usize);
        assert_eq!(p.dropped, 0);
    }

    /// Past MAX_MAPPINGS a space keeps no more, and says how many it left out; a child of
    /// a full parent is full too.
    #[test]
    fn a_space_keeps_at_most_max_mappings() {
        let mut text = String::from("exec\ttime=1\ttid=1\ttgid=1\n");
        (0..MAX_MAPPINGS + 5).for_each(|n| text += &mmap(1, n));
        text += "task\ttime=2\ttid=2\ttgid=2\tparent=1\n";
        text += &mmap(2, 99_999);
        let p = parse(&text);
        assert_eq!(p.spaces[0].maps.len(), MAX_MAPPINGS);
        assert_eq!(p.spaces[1].maps.len(), MAX_MAPPINGS);
        assert_eq!(p.dropped, 6);
    }

    /// Mappings and forks in turn, past the frozen lists a list may sit on: each child holds
    /// what its parent had at its fork, in order.
    #[test]
    fn lists_frozen_at_each_fork_read_in_order() {
        let mut text = String::from("exec\ttime=1\ttid=1\ttgid=1\n");
        let rounds = 3 * MAX_LEVELS;
        for r in 0..rounds {
            text += &mmap(1, r);
            let c = 2 + r;
            text += &format!("task\ttime=2\ttid={c}\ttgid={c}\tparent=1\n");
        }
        let p = parse(&text);
        for (r, child) in p.spaces[1..].iter().enumerate() {
            let paths: Vec<String> = child.maps.iter().map(|m| m.path.clone()).collect();
            let want: Vec<String> = (0..=r).map(|n| format!("/f{n}")).collect();
            assert_eq!(paths, want);
            assert!(child.maps.levels <= MAX_LEVELS + 1, "{}", child.maps.levels);
        }
    }

    #[test]
    fn exec_fork_and_threads() {
        let text = "task\ttime=1\ttid=1\ttgid=1\tparent=0\n\
                    exec\ttime=2\ttid=1\ttgid=1\n\
                    mmap\ttime=3\ttid=1\ttgid=1\tstart=aaaa0000\tlen=1000\toffset=0\tfs=ffee\tpath=/init\n\
                    mmap\ttime=4\ttid=1\ttgid=1\tstart=ffff0000\tlen=2000\toffset=0\tpath=/lib/libc.so.6\n\
                    task\ttime=5\ttid=7\ttgid=7\tparent=1\n\
                    task\ttime=6\ttid=8\ttgid=1\tparent=1\n\
                    exec\ttime=7\ttid=7\ttgid=7\n\
                    mmap\ttime=8\ttid=7\ttgid=7\tstart=bbbb0000\tlen=1000\toffset=0\tpath=/worker\n\
                    garbage\n";
        let p = parse(text);
        assert_eq!(p.spaces.len(), 3);
        assert_eq!((p.spaces[0].tgid, p.spaces[0].from), (1, 2));
        assert_eq!(p.spaces[0].program(), Some("/init"));
        assert_eq!(p.spaces[0].maps.len(), 2);
        // The first file mapped, and which file system holds it (none said: 0).
        let first = p.first.as_ref().expect("a first mapping");
        assert_eq!((first.path.as_str(), first.fs), ("/init", 0xffee));
        assert_eq!(p.spaces[0].maps.iter().nth(1).map(|m| m.fs), Some(0));
        // The forked child starts with its parent's mappings, then execs.
        assert_eq!((p.spaces[1].tgid, p.spaces[1].exec), (7, false));
        assert_eq!(p.spaces[1].maps, p.spaces[0].maps);
        assert_eq!(p.spaces[2].program(), Some("/worker"));
        assert_eq!(p.tgid_of[&8], 1);
        assert_eq!(p.tgid_of[&7], 7);
    }

    /// An exec's space starts once its system call returned (`execret`), after the exits
    /// of the old program's frames.
    #[test]
    fn an_exec_s_session_starts_after_its_system_call_returned() {
        let text = "exec\ttime=2\ttid=5\ttgid=5\n\
                    mmap\ttime=3\ttid=5\ttgid=5\tstart=400000\tlen=1000\toffset=0\tpath=/a\n\
                    execret\ttime=4\ttid=5\ttgid=5\n\
                    exec\ttime=6\ttid=5\ttgid=5\n\
                    execret\ttime=5\ttid=5\ttgid=5\n";
        let p = parse(text);
        assert_eq!(p.spaces.len(), 2);
        assert_eq!(p.spaces[0].from, 5);
        assert_eq!(p.spaces[0].maps.len(), 1);
        // One out of order is left as it was.
        assert_eq!(p.spaces[1].from, 6);
    }

    /// An exit ends the process's space; its PID reused by a process whose start was not
    /// seen gets a space of its own, not the dead one's mappings.
    #[test]
    fn exit_ends_a_space() {
        let text = "exec\ttime=2\ttid=5\ttgid=5\n\
                    mmap\ttime=3\ttid=5\ttgid=5\tstart=1000\tlen=1000\toffset=0\tpath=/a\n\
                    exit\ttime=4\ttid=6\ttgid=5\n\
                    mmap\ttime=4\ttid=5\ttgid=5\tstart=3000\tlen=1000\toffset=0\tpath=/c\n\
                    exit\ttime=5\ttid=5\ttgid=5\n\
                    mmap\ttime=9\ttid=5\ttgid=5\tstart=2000\tlen=1000\toffset=0\tpath=/b\n";
        let p = parse(text);
        assert_eq!(p.spaces.len(), 2);
        // A thread's exit ends nothing: the mapping after it joins the process's space.
        assert_eq!(p.spaces[0].maps.len(), 2);
        assert_eq!(p.spaces[1].program(), Some("/b"));
        assert_eq!(p.spaces[1].maps.len(), 1);
        assert_eq!(p.spaces[1].from, 9);
    }
}
