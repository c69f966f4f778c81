//! What a `uftrace.data` directory says besides its records: tasks and sessions
//! (`task.txt`), where each image lies (`sid-<SID>.map`), function names (`<module>.sym`),
//! the clock, and whether the trace was cut. Read as uftrace reads them
//! (/work/shared/docs/uftrace-data-format.md), for any writer's directory, not only ours.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use qemu_uftrace_format::map;

/// One `SESS` line.
#[derive(Debug, Clone)]
struct Session {
    ns: u64,
    pid: u32,
    sid: String,
    exename: String,
}

/// `task.txt`: sessions, tasks (tid → pid), forks and late-loaded modules.
#[derive(Debug, Default)]
pub struct TaskFile {
    sessions: Vec<Session>,
    /// tid → (pid, TASK time).
    tasks: HashMap<u32, (u32, u64)>,
    /// child pid → parent pid.
    forks: HashMap<u32, u32>,
    /// sid → each DLOP line's load, in the order uftrace keeps them (by time; equal times
    /// in file order).
    dlopens: HashMap<String, Vec<Dlopen>>,
    /// The pid of the first TASK line.
    first_pid: Option<u32>,
    /// Each task's session references, as uftrace builds them (`create_task`).
    refs: HashMap<u32, TaskRefs>,
}

/// One task as uftrace's `struct uftrace_task` holds it: its pid (a forked task's own), the
/// parent it falls back to (`ppid` of a FORK line), and its session references: from each
/// one's start to the next one's, the session of the pid's latest SESS line read so far
/// whose time is at or before the start (`find_session`).
#[derive(Debug, Default)]
struct TaskRefs {
    pid: u32,
    ppid: u32,
    /// (start, index of the SESS line), in the order the lines add them.
    refs: Vec<(u64, usize)>,
}

impl TaskRefs {
    /// The session of the reference holding `ns` (`start <= ns < next start`).
    fn at(&self, ns: u64) -> Option<usize> {
        let ends = self.refs.iter().skip(1).map(|r| r.0).chain([u64::MAX]);
        self.refs
            .iter()
            .zip(ends)
            .find(|&(&(start, _), end)| start <= ns && ns < end)
            .map(|(&(_, i), _)| i)
    }
}

/// A module a session loaded later (a `DLOP` line): from `ns` on, its symbols are at `base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dlopen {
    pub ns: u64,
    pub base: u64,
    /// The module's basename (its `.sym` file's stem).
    pub name: String,
}

/// `<sec>.<nsec>`, the nanoseconds read as an integer (as uftrace does).
fn timestamp(v: &str) -> Option<u64> {
    let (s, ns) = v.split_once('.').unwrap_or((v, "0"));
    Some(s.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?)
}

/// The value of ` key=` in a line (up to the next space).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..].split(' ').next()
}

/// A quoted value that runs to the line's last `"` (names may hold spaces).
fn quoted<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!("{key}=\""))? + key.len() + 2;
    let end = line.rfind('"').filter(|&e| e >= at)?;
    Some(&line[at..end])
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl TaskFile {
    pub fn parse(text: &str) -> TaskFile {
        let mut t = TaskFile::default();
        for line in text.lines() {
            let num = |k| field(line, k).and_then(|v| v.parse::<u32>().ok());
            let ns = field(line, "timestamp").and_then(timestamp).unwrap_or(0);
            if line.starts_with("SESS ") {
                if let (Some(pid), Some(sid)) = (num("pid"), field(line, "sid")) {
                    t.sessions.push(Session {
                        ns,
                        pid,
                        sid: sid.to_string(),
                        exename: quoted(line, "exename").unwrap_or("").to_string(),
                    });
                }
            } else if line.starts_with("TASK ") {
                if let (Some(tid), Some(pid)) = (num("tid"), num("pid")) {
                    t.create_task(tid, pid, ns, false);
                    t.tasks.insert(tid, (pid, ns));
                    t.first_pid.get_or_insert(pid);
                }
            } else if line.starts_with("FORK ") {
                if let (Some(pid), Some(ppid)) = (num("pid"), num("ppid")) {
                    t.create_task(pid, ppid, ns, true);
                    t.forks.insert(pid, ppid);
                }
            } else if line.starts_with("DLOP ") {
                let base = field(line, "base").and_then(|b| u64::from_str_radix(b, 16).ok());
                if let (Some(sid), Some(base), Some(lib)) =
                    (field(line, "sid"), base, quoted(line, "libname"))
                {
                    // uftrace's `session_add_dlopen`: before the first load loaded later.
                    let loads = t.dlopens.entry(sid.to_string()).or_default();
                    let at = loads.partition_point(|d| d.ns <= ns);
                    loads.insert(
                        at,
                        Dlopen {
                            ns,
                            base,
                            name: basename(lib).to_string(),
                        },
                    );
                }
            }
        }
        t
    }

    /// uftrace's `find_session`: the latest session of `pid` at or before `ns` among the
    /// SESS lines read so far (of equal times, the last read).
    fn find_session(&self, pid: u32, ns: u64) -> Option<usize> {
        (0..self.sessions.len())
            .filter(|&i| self.sessions[i].pid == pid && self.sessions[i].ns <= ns)
            .max_by_key(|&i| (self.sessions[i].ns, i))
    }

    /// uftrace's `create_task` for a TASK line (`tid`, `pid`) or a FORK line (`tid` is the
    /// child, `pid` its parent): a known task takes a reference to the pid's session at
    /// `ns`; a new one that too, else its parent's last session if that started earlier.
    fn create_task(&mut self, tid: u32, pid: u32, ns: u64, fork: bool) {
        let found = self.find_session(pid, ns);
        if let Some(task) = self.refs.get_mut(&tid) {
            if let Some(i) = found {
                task.refs.push((ns, i));
            }
            return;
        }
        let inherited = || {
            let last = self.refs.get(&pid)?.refs.last()?;
            (last.0 < ns).then_some(last.1)
        };
        let session = found.or_else(inherited);
        self.refs.insert(
            tid,
            TaskRefs {
                pid: if fork { tid } else { pid },
                ppid: if fork { pid } else { 0 },
                refs: session.map(|i| (ns, i)).into_iter().collect(),
            },
        );
    }

    /// uftrace's `find_task_session`: the session a record of `tid` at `ns` resolves in, from
    /// the task's references, else its parent's (a FORK line's) or its thread leader's.
    fn session_at(&self, tid: u32, ns: u64) -> Option<usize> {
        self.lineage(tid).find_map(|t| t.at(ns))
    }

    /// A task's references, then its parent's (a FORK line's) or its thread leader's, and so
    /// on up (at most 64: a cycle in a damaged file ends there).
    fn lineage(&self, tid: u32) -> impl Iterator<Item = &TaskRefs> {
        let first = self.refs.get(&tid).map(|t| (tid, t));
        std::iter::successors(first, |&(id, t)| {
            let parent = if t.ppid != 0 { t.ppid } else { t.pid };
            (parent != 0 && parent != id)
                .then(|| self.refs.get(&parent).map(|p| (parent, p)))
                .flatten()
        })
        .take(64)
        .map(|(_, t)| t)
    }

    /// The sessions a task's records resolve in, as uftrace resolves them: from each time
    /// on, the session ([`TaskFile::session_at`]) until the next time; `None` where none
    /// holds. The first starts at 0.
    pub fn timeline(&self, tid: u32) -> Vec<(u64, Option<&str>)> {
        // The times where the answer may change: every reference's start along the chain.
        let mut times = vec![0u64];
        times.extend(self.lineage(tid).flat_map(|t| t.refs.iter().map(|r| r.0)));
        times.sort_unstable();
        times.dedup();
        let mut out: Vec<(u64, Option<usize>)> = Vec::new();
        for ns in times {
            let i = self.session_at(tid, ns);
            if out.last().is_none_or(|l| l.1 != i) {
                out.push((ns, i));
            }
        }
        out.into_iter()
            .map(|(ns, i)| (ns, i.map(|i| self.sessions[i].sid.as_str())))
            .collect()
    }

    /// The pid a task belongs to (its own tid when task.txt does not say).
    pub fn pid(&self, tid: u32) -> u32 {
        self.tasks.get(&tid).map_or(tid, |&(pid, _)| pid)
    }

    /// A user-mode task's process. qemu-uftrace writes the first process's threads each as
    /// a session of its own (pid = tid, so that uftrace names each), its main thread first;
    /// a later process's lines (FORK, and TASK lines of its threads) carry its real pid.
    pub fn user_pid(&self, tid: u32) -> u32 {
        let pid = self.pid(tid);
        if pid != tid || self.forks.contains_key(&pid) {
            pid
        } else {
            self.first_pid.unwrap_or(pid)
        }
    }

    /// The session a task is named after (see [`TaskFile::comm`]): the one its process had
    /// at its last TASK line (a forked child's parent's, if it had none), else its process's
    /// first, as an index into the SESS lines.
    fn session_index(&self, tid: u32) -> Option<usize> {
        let (pid, at) = self.tasks.get(&tid).copied().unwrap_or((tid, 0));
        let mut owner = pid;
        for _ in 0..64 {
            let latest = (0..self.sessions.len())
                .filter(|&i| self.sessions[i].pid == owner && self.sessions[i].ns <= at)
                .max_by_key(|&i| self.sessions[i].ns);
            if latest.is_some() {
                return latest;
            }
            match self.forks.get(&owner) {
                Some(&parent) => owner = parent,
                None => break,
            }
        }
        (0..self.sessions.len())
            .filter(|&i| self.sessions[i].pid == pid)
            .min_by_key(|&i| self.sessions[i].ns)
    }

    /// The session a task starts in.
    fn session(&self, tid: u32) -> Option<&Session> {
        self.sessions.get(self.session_index(tid)?)
    }

    /// The modules a session loaded later (DLOP lines), by time.
    pub fn dlopens(&self, sid: &str) -> &[Dlopen] {
        self.dlopens.get(sid).map_or(&[], Vec::as_slice)
    }

    /// The "comm" uftrace shows for a task: its session's exename, basename.
    pub fn comm(&self, tid: u32) -> Option<String> {
        self.session(tid)
            .map(|s| basename(&s.exename).to_string())
            .filter(|n| !n.is_empty())
    }

    /// The name of a process: its latest session's exename, basename.
    pub fn process_name(&self, pid: u32) -> Option<String> {
        self.sessions
            .iter()
            .filter(|s| s.pid == pid)
            .max_by_key(|s| s.ns)
            .map(|s| basename(&s.exename).to_string())
            .filter(|n| !n.is_empty())
    }
}

/// One module's functions: `(start, end, name)` by start, offsets from its map line.
#[derive(Debug, Default)]
pub struct SymTable {
    syms: Vec<(u64, u64, String)>,
}

/// The type letters uftrace keeps (others are dropped, as it does).
fn kept_type(t: &str) -> bool {
    matches!(t, "T" | "t" | "w" | "P" | "K" | "D" | "d" | "v" | "u" | "?")
}

/// Names that only end the function before them.
fn is_end_marker(t: &str, name: &str) -> bool {
    t == "?" || matches!(name, "__sym_end" | "__dynsym_end" | "__func_end")
}

impl SymTable {
    /// Parses a `.sym` file, 3-column (`addr type name`: a function runs to the next line)
    /// or 4-column (`addr size type name`), as uftrace's `load_module_symbol_file` does.
    pub fn parse(text: &str) -> SymTable {
        // (start, explicit size, type, name) in file order.
        let mut lines: Vec<(u64, Option<u64>, &str, &str)> = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let line = line.split('\t').next().unwrap_or(line);
            let mut parts = line.splitn(2, ' ');
            let (Some(addr), Some(rest)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr.trim_start_matches("0x"), 16) else {
                continue;
            };
            // A second column starting with a decimal digit is a size (uftrace's rule).
            let (size, rest) = match rest.split_once(' ') {
                Some((s, r)) if s.starts_with(|c: char| c.is_ascii_digit()) => {
                    (u64::from_str_radix(s, 16).ok(), r)
                }
                _ => (None, rest),
            };
            let (kind, name) = rest.split_once(' ').unwrap_or((rest, ""));
            if kept_type(kind) {
                lines.push((addr, size, kind, name));
            }
        }
        let mut syms = Vec::new();
        for (i, &(start, size, kind, name)) in lines.iter().enumerate() {
            if is_end_marker(kind, name) || name.is_empty() {
                continue;
            }
            let end = match size {
                Some(s) if s > 0 => start + s,
                _ => lines.get(i + 1).map_or(start, |n| n.0),
            };
            if end > start {
                syms.push((start, end, name.to_string()));
            }
        }
        syms.sort_by_key(|s| s.0);
        // Aliases at one address: uftrace keeps the first.
        syms.dedup_by_key(|s| s.0);
        SymTable { syms }
    }

    pub fn lookup(&self, offset: u64) -> Option<&str> {
        self.lookup_start(offset).map(|(_, name)| name)
    }

    /// The function holding `offset`: its start and name.
    pub fn lookup_start(&self, offset: u64) -> Option<(u64, &str)> {
        let i = self
            .syms
            .partition_point(|s| s.0 <= offset)
            .checked_sub(1)?;
        let (start, end, name) = &self.syms[i];
        (*start <= offset && offset < *end).then_some((*start, name.as_str()))
    }

    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
}

/// What a `.dbg` file says of each function, by its start offset: its source location
/// (file, line), and its `-a` values (`A:`, `R:`, without their `@`).
#[derive(Debug, Default)]
pub struct Dbg {
    pub lines: HashMap<u64, (String, u32)>,
    pub auto: HashMap<u64, crate::symfiles::AutoValues>,
}

/// Reads a `.dbg` file as uftrace's `load_debug_file` does: each `L:`, `A:` and `R:` line
/// belongs to the last `F:` line's function.
pub fn parse_dbg(text: &str) -> Dbg {
    let mut out = Dbg::default();
    let mut function = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("F: ") {
            let offset = rest.split(' ').next().unwrap_or("");
            function = u64::from_str_radix(offset.trim_start_matches("0x"), 16).ok();
        } else if let Some(rest) = line.strip_prefix("L: ") {
            let (Some(f), Some((n, file))) = (function, rest.split_once(' ')) else {
                continue;
            };
            if let Ok(n) = n.parse() {
                out.lines.entry(f).or_insert((file.to_string(), n));
            }
        } else if let (Some(f), Some((code, spec))) = (function, line.split_once(": @")) {
            let values = out.auto.entry(f).or_default();
            match code {
                "A" => values.0 = Some(spec.to_string()),
                "R" => values.1 = Some(spec.to_string()),
                _ => {}
            }
        }
    }
    out
}

/// The address space of one session: its map's images, then its DLOP modules.
#[derive(Debug, Default)]
pub struct Symbols {
    /// (start48, end48, module index) in map order: the first range holding an address wins.
    ranges: Vec<(u64, u64, usize)>,
    /// (load time, base48, module index) of modules loaded later, by time.
    dlopens: Vec<(u64, u64, usize)>,
    modules: Vec<SymTable>,
    /// Each module's `.dbg`, when asked for (`--srcline`, or a trace recorded with `-a`).
    dbg: Vec<Dbg>,
}

impl Symbols {
    /// Reads `sid-<sid>.map` and the `.sym` file of each image in it. A missing `.sym`
    /// leaves that image's addresses unresolved (uftrace would read the host's ELF file).
    pub fn load(dir: &Path, sid: &str, dlopens: &[Dlopen], dbg: bool) -> Result<Symbols> {
        let path = dir.join(format!("sid-{sid}.map"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut s = Symbols::default();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut module = |name: &str, s: &mut Symbols| -> usize {
            *by_name.entry(name.to_string()).or_insert_with(|| {
                let table = std::fs::read_to_string(dir.join(format!("{name}.sym")))
                    .map(|t| SymTable::parse(&t))
                    .unwrap_or_default();
                s.modules.push(table);
                let read = dbg
                    .then(|| std::fs::read_to_string(dir.join(format!("{name}.dbg"))).ok())
                    .flatten()
                    .map(|t| parse_dbg(&t))
                    .unwrap_or_default();
                s.dbg.push(read);
                s.modules.len() - 1
            })
        };
        // Consecutive lines of one path merge into one range, as uftrace merges them.
        let mut last: Option<String> = None;
        for e in map::parse_map(&text) {
            let (start, end) = e.range48();
            let name = e.module_name().to_string();
            match (&last, s.ranges.last_mut()) {
                (Some(prev), Some(r)) if *prev == name => r.1 = end,
                _ => {
                    let m = module(&name, &mut s);
                    s.ranges.push((start, end, m));
                }
            }
            last = Some(name);
        }
        for d in dlopens {
            let m = module(&d.name, &mut s);
            s.dlopens
                .push((d.ns, qemu_uftrace_format::addr48(d.base), m));
        }
        Ok(s)
    }

    /// The times at which a module was loaded: a name may change there.
    pub fn load_times(&self) -> impl Iterator<Item = u64> + '_ {
        self.dlopens.iter().map(|d| d.0)
    }

    /// The function at a 48-bit record address, for a record at time `ns`.
    pub fn lookup(&self, addr: u64, ns: u64) -> Option<&str> {
        self.locate(addr, ns).map(|(_, _, name)| name)
    }

    /// The function at `addr` at time `ns` and its source location, when the trace has it.
    pub fn lookup_line(&self, addr: u64, ns: u64) -> Option<(&str, &str, u32)> {
        let (m, start, name) = self.locate(addr, ns)?;
        let (file, line) = self.dbg.get(m)?.lines.get(&start)?;
        Some((name, file.as_str(), *line))
    }

    /// The `-a` values of the function at `addr` at time `ns`, when its `.dbg` gives some.
    pub fn lookup_auto(&self, addr: u64, ns: u64) -> Option<&crate::symfiles::AutoValues> {
        let (m, start, _) = self.locate(addr, ns)?;
        self.dbg.get(m)?.auto.get(&start)
    }

    /// (module, function start offset, name) of `addr` at time `ns`. A module loaded later
    /// names it as uftrace's `session_find_dlopen` does: the latest load at or before `ns`
    /// with a function there, so a range a later module reused is named by that one.
    fn locate(&self, addr: u64, ns: u64) -> Option<(usize, u64, &str)> {
        if let Some(&(start, _, m)) = self.ranges.iter().find(|r| r.0 <= addr && addr < r.1) {
            if let Some((f, name)) = self.modules[m].lookup_start(addr - start) {
                return Some((m, f, name));
            }
        }
        self.dlopens
            .iter()
            .rev()
            .filter(|d| d.0 <= ns && d.1 <= addr)
            .find_map(|&(_, base, m)| {
                let (f, name) = self.modules[m].lookup_start(addr - base)?;
                Some((m, f, name))
            })
    }
}

/// The clock the records are stamped with, as far as the directory says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceClock {
    /// Nanoseconds (host wall clock, or uftrace's own).
    Nanoseconds,
    /// Guest instructions executed (`--clock insn`).
    Instructions,
}

/// The clock named by the `info` file (a `clock` line, should one be written there) or by
/// `plugin.stats`'s `clock=` line; nanoseconds when neither names one (uftrace's traces).
pub fn trace_clock(dir: &Path) -> TraceClock {
    let says_insn = |text: &str| {
        text.lines().any(|l| {
            let l = l.trim();
            ["clock:", "clock=", "clock: "].iter().any(|p| {
                l.strip_prefix(p)
                    .is_some_and(|v| v.trim().starts_with("insn"))
            })
        })
    };
    let info = std::fs::read(dir.join("info")).unwrap_or_default();
    let info_text = String::from_utf8_lossy(info.get(40..).unwrap_or_default());
    let stats = std::fs::read_to_string(dir.join(crate::stats::STATS_FILE)).unwrap_or_default();
    if says_insn(&info_text) || says_insn(&stats) {
        TraceClock::Instructions
    } else {
        TraceClock::Nanoseconds
    }
}

/// Why the trace is incomplete, when `note.txt` says so (`record` writes that note when
/// QEMU died or the plugin stopped writing).
pub fn incomplete_reason(dir: &Path) -> Option<String> {
    let note = std::fs::read_to_string(dir.join("note.txt")).ok()?;
    let at = note.find("INCOMPLETE TRACE:")?;
    let rest = &note[at..];
    // The reason runs to the sentence's end, which may wrap onto the next lines.
    let end = rest
        .find(";\n")
        .unwrap_or_else(|| rest.find('\n').unwrap_or(rest.len()));
    Some(rest[..end].replace('\n', " "))
}

/// `events.txt`'s names of user events (`EVENT: <id> <provider>:<name>`).
pub fn event_names(dir: &Path) -> HashMap<u64, String> {
    let text = std::fs::read_to_string(dir.join("events.txt")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (id, name) = l.strip_prefix("EVENT: ")?.split_once(' ')?;
            Some((id.parse().ok()?, name.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace incomplete only in what its reason names (tasks past a cap, names not kept)
    /// does not claim its tasks' last records are missing; the reason reads back alike.
    #[test]
    fn an_incomplete_note_claims_only_what_was_lost() {
        let tmp = tempfile::tempdir().unwrap();
        let why = "3 tasks started past the cap of 262144 contexts share one task";
        crate::datadir::mark_incomplete(tmp.path(), why, false).unwrap();
        let note = std::fs::read_to_string(tmp.path().join("note.txt")).unwrap();
        assert!(!note.contains("last records"), "{note}");
        assert!(note.contains("the records written are whole"), "{note}");
        assert_eq!(
            incomplete_reason(tmp.path()).as_deref(),
            Some(format!("INCOMPLETE TRACE: {why}").as_str())
        );
    }

    #[test]
    fn task_file_sessions_forks_and_names() {
        let t = TaskFile::parse(
            "SESS timestamp=0.000000000 pid=10 sid=00000000000000aa exename=\"/bin/a b\"\n\
             TASK timestamp=0.000000000 tid=10 pid=10\n\
             TASK timestamp=0.000000000 tid=11 pid=10\n\
             FORK timestamp=1.500000000 pid=12 ppid=10\n\
             TASK timestamp=1.500000000 tid=12 pid=12\n\
             SESS timestamp=2.000000001 pid=12 sid=00000000000000bb exename=\"/bin/c\"\n\
             TASK timestamp=2.000000001 tid=12 pid=12\n\
             TASK timestamp=2.000000001 tid=13 pid=12\n\
             DLOP timestamp=0.000000000 tid=10 sid=00000000000000aa base=7f00 libname=\"/l/m.ko\"\n",
        );
        assert_eq!(t.pid(11), 10);
        assert_eq!(t.user_pid(11), 10);
        assert_eq!(t.user_pid(12), 12, "a forked child is a process of its own");
        assert_eq!(t.user_pid(13), 12);
        let (aa, bb) = (Some("00000000000000aa"), Some("00000000000000bb"));
        assert_eq!(t.timeline(11), [(0, aa)]);
        // The child before its exec carries on in its parent's session, after it in its own
        // (the TASK line after its SESS line says so).
        assert_eq!(t.timeline(12), [(0, aa), (2_000_000_001, bb)]);
        // A thread created after the exec: before its TASK line, its leader's sessions.
        assert_eq!(t.timeline(13), [(0, aa), (2_000_000_001, bb)]);
        assert_eq!(t.comm(10).as_deref(), Some("a b"));
        assert_eq!(t.process_name(12).as_deref(), Some("c"));
        assert_eq!(
            t.dlopens["00000000000000aa"],
            [Dlopen {
                ns: 0,
                base: 0x7f00,
                name: "m.ko".to_string()
            }]
        );
        assert_eq!(timestamp("2.000000001"), Some(2_000_000_001));
    }

    /// Sessions as uftrace's `create_task` and `find_task_session` give them: a SESS line
    /// counts for a task only from a TASK line read after it (not by its time alone), a
    /// task's references end where its next begins, and a task with none falls back to
    /// its FORK line's parent.
    #[test]
    fn sessions_follow_task_lines_as_uftrace_reads_them() {
        let t = TaskFile::parse(
            "SESS timestamp=0.000000000 pid=1 sid=00000000000000aa exename=\"/init\"\n\
             TASK timestamp=0.000000000 tid=1 pid=1\n\
             FORK timestamp=0.000000100 pid=2 ppid=1\n\
             SESS timestamp=0.000000200 pid=2 sid=00000000000000bb exename=\"/a\"\n\
             SESS timestamp=0.000000300 pid=2 sid=00000000000000cc exename=\"/b\"\n\
             TASK timestamp=0.000000300 tid=2 pid=2\n\
             TASK timestamp=0.000000000 tid=3 pid=3\n",
        );
        let (aa, cc) = (Some("00000000000000aa"), Some("00000000000000cc"));
        // bb has no TASK line of its own: its time alone does not make records of 2 its.
        assert_eq!(t.timeline(2), [(0, aa), (300, cc)]);
        assert_eq!(t.session_at(2, 50), t.session_at(1, 50));
        assert_eq!(t.timeline(3), [(0, None)]);
    }

    /// A range a later module reused is named by that module from its load on, by the
    /// earlier one before (and where only the earlier has a function), as uftrace names it.
    #[test]
    fn modules_name_a_reused_range_by_load_time() {
        let dir = tempfile::tempdir().unwrap();
        let sid = "00000000000000aa";
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write(
            &format!("sid-{sid}.map"),
            "00400000-00401000 r-xp 00000000 00:00 0 /bin/a\n",
        );
        write("a.sym", "0000 T main\n0100 ? __sym_end\n");
        write(
            "dummy.sym",
            "0000 t dummy_setup\n0040 t dummy_only\n0080 ? __sym_end\n",
        );
        write("ifb.sym", "0000 t ifb_setup\n0040 ? __sym_end\n");
        let t = TaskFile::parse(&format!(
            "SESS timestamp=0.000000000 pid=1 sid={sid} exename=\"/bin/a\"\n\
             DLOP timestamp=0.000000010 tid=1 sid={sid} base=800000be0000 libname=\"ifb\"\n\
             DLOP timestamp=0.000000005 tid=1 sid={sid} base=800000be0000 libname=\"dummy\"\n"
        ));
        let s = Symbols::load(dir.path(), sid, t.dlopens(sid), false).unwrap();
        assert_eq!(s.load_times().collect::<Vec<_>>(), [5, 10]);
        let (setup, only) = (0x8000_00be_0000, 0x8000_00be_0040);
        assert_eq!(s.lookup(setup, 4), None, "before any load");
        assert_eq!(s.lookup(setup, 5), Some("dummy_setup"));
        assert_eq!(s.lookup(setup, 9), Some("dummy_setup"));
        assert_eq!(s.lookup(setup, 10), Some("ifb_setup"));
        assert_eq!(s.lookup(only, 10), Some("dummy_only"));
        assert_eq!(s.lookup(0x400010, 10), Some("main"));
    }

    #[test]
    fn dbg_locations() {
        let d = parse_dbg(
            "F: 10 main\nL: 12 src/main.c\nA: @arg1/i32,arg2/s\nF: 0x40 f\nL: 3 a b.c\n\
             F: 50 g\nR: @retval/u8\n",
        );
        assert_eq!(d.lines[&0x10], ("src/main.c".to_string(), 12));
        assert_eq!(d.lines[&0x40], ("a b.c".to_string(), 3));
        assert!(!d.lines.contains_key(&0x50));
        // -a's values, as uftrace reads them after their function's F: line.
        assert_eq!(d.auto[&0x10], (Some("arg1/i32,arg2/s".into()), None));
        assert_eq!(d.auto[&0x50], (None, Some("retval/u8".into())));
        assert!(!d.auto.contains_key(&0x40));
    }

    #[test]
    fn sym_tables_as_uftrace_sizes_them() {
        let three = SymTable::parse(
            "0000 T start\n0010 t helper\n0020 ? __gap\n0040 T last\n0050 ? __sym_end\n",
        );
        assert_eq!(three.lookup(0), Some("start"));
        assert_eq!(three.lookup(0x1f), Some("helper"));
        assert_eq!(three.lookup(0x20), None);
        assert_eq!(three.lookup(0x4f), Some("last"));
        assert_eq!(three.lookup(0x50), None);
        let four = SymTable::parse(
            "# symbols: 2\n0000000000000100 00000010 T f\n0000000000000200 00000008 t g\n",
        );
        assert_eq!(four.lookup(0x10f), Some("f"));
        assert_eq!(four.lookup(0x110), None);
        assert_eq!(four.lookup(0x207), Some("g"));
        assert_eq!(four.len(), 2);
    }
}
