//! `plugin.procs` (`plugin/src/handlers/procmaps.rs`) read into address spaces: each
//! process's code mappings from one point in time on (its start as a forked copy of its
//! parent's, or an exec) until the next or its exit, and which process each guest thread
//! belongs to.

use std::collections::HashMap;

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

/// One process's address space from `from` (the trace's time) until the next of its
/// thread group, or its leader's exit (after which its PID starts clean).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Space {
    pub tgid: u32,
    pub from: u64,
    pub maps: Vec<Mapping>,
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
                    .map(|&i| procs.spaces[i].maps.clone());
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
            "exec" => {
                current.insert(tgid, procs.spaces.len());
                procs.spaces.push(Space {
                    tgid,
                    from: time,
                    maps: Vec::new(),
                    exec: true,
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
                        maps: Vec::new(),
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
                procs.spaces[i].maps.push(m);
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
        assert_eq!(p.spaces[0].maps[1].fs, 0);
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
