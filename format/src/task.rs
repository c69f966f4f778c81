//! `task.txt`: sessions, then the tasks that belong to them (`read_task_txt_file`).

use std::io::{self, Write};

/// One uftrace task and the session that names it.
#[derive(Debug, Clone)]
pub struct Task {
    pub tid: u32,
    pub pid: u32,
    /// Shown as the task's "comm" (see [`exename`]); may contain spaces and slashes.
    pub name: String,
}

/// A 16-hex-digit session id: shorter ids break DLOP lookups in 0.17+.
pub fn session_id(seed: u64) -> String {
    format!("{seed:016x}")
}

/// Writes every SESS line (one per process) before the TASK lines, all at time 0 so that no
/// record predates its session.
pub fn write_task_txt(w: &mut impl Write, sid: &str, tasks: &[Task]) -> io::Result<()> {
    if sid.len() != 16 || !sid.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "session id must be 16 hex digits",
        ));
    }
    // One session per process, as libmcount writes it: a process's threads are its tasks
    // (the first task of each process names it).
    let mut sessions = std::collections::BTreeSet::new();
    for t in tasks.iter().filter(|t| sessions.insert(t.pid)) {
        let name = exename(&t.name);
        writeln!(
            w,
            "SESS timestamp=0.000000000 pid={} sid={sid} exename=\"{name}\"",
            t.pid
        )?;
    }
    for t in tasks {
        writeln!(w, "TASK timestamp=0.000000000 tid={} pid={}", t.tid, t.pid)?;
    }
    Ok(())
}

/// A `task.txt` line for a process after the first (user mode), as uftrace writes them
/// when a traced program forks and execs: times in nanoseconds from the trace's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Later {
    /// A forked child, which carries on in its parent's session.
    Fork { ns: u64, pid: u32, ppid: u32 },
    /// An exec'd program's own session; `name` as in [`exename`].
    Session {
        ns: u64,
        pid: u32,
        sid: String,
        name: String,
    },
    /// A thread of a later process.
    Task { ns: u64, tid: u32, pid: u32 },
}

impl std::fmt::Display for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |ns: u64| format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
        match self {
            Later::Fork { ns, pid, ppid } => {
                write!(f, "FORK timestamp={} pid={pid} ppid={ppid}", at(*ns))
            }
            Later::Session { ns, pid, sid, name } => write!(
                f,
                "SESS timestamp={} pid={pid} sid={sid} exename=\"{}\"",
                at(*ns),
                exename(name)
            ),
            Later::Task { ns, tid, pid } => {
                write!(f, "TASK timestamp={} tid={tid} pid={pid}", at(*ns))
            }
        }
    }
}

/// Writes the lines of later processes after [`write_task_txt`]'s.
pub fn write_later(w: &mut impl Write, lines: &[Later]) -> io::Result<()> {
    lines.iter().try_for_each(|l| writeln!(w, "{l}"))
}

/// The SESS exename that makes uftrace show `name` as the task's comm. uftrace keeps the
/// basename of the exename, and 15 bytes of that: a guest's task names have slashes (Linux
/// `swapper/0`, `kworker/0:1`, `ksoftirqd/0`), which would leave `0`, `0:1`… So each `/`
/// becomes U+2215 DIVISION SLASH (`swapper∕0`), and a name longer than 15 bytes is cut at a
/// character boundary rather than by uftrace in the middle of one. Newlines and quotes,
/// which would end the line or the field, become spaces; other control characters (a
/// guest's `comm` may hold ESC or CR, which uftrace prints) are shown as `\xNN`; and no
/// name is longer than [`MAX_EXENAME`].
pub fn exename(name: &str) -> String {
    const COMM_BYTES: usize = 15;
    let name = name.replace(['\n', '"'], " ").replace('/', "\u{2215}");
    let mut out =
        crate::text::keep_head(&crate::text::escape_controls(&name), MAX_EXENAME).into_owned();
    if out.len() > COMM_BYTES && !out.is_char_boundary(COMM_BYTES) {
        let mut end = COMM_BYTES;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

/// The longest exename written: uftrace shows 15 bytes of it as the task's name, and the
/// whole in `tui`'s status line.
pub const MAX_EXENAME: usize = 255;

/// A module loaded after the start, looked up in `<basename(libname)>.sym` from `base`
/// (`libname` bounded and escaped as a map path is, so the two name one file).
pub fn write_dlopen(
    w: &mut impl Write,
    tid: u32,
    sid: &str,
    base: u64,
    libname: &str,
) -> io::Result<()> {
    writeln!(
        w,
        "DLOP timestamp=0.000000000 tid={tid} sid={sid} base={:x} libname=\"{}\"",
        crate::addr48(base),
        crate::map::MapPath::new(libname)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_come_first() {
        let mut out = Vec::new();
        let tasks = [
            Task {
                tid: 1,
                pid: 1,
                name: "cpu0".into(),
            },
            Task {
                tid: 2,
                pid: 2,
                name: "cpu1".into(),
            },
        ];
        write_task_txt(&mut out, &session_id(0xabc), &tasks).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "SESS timestamp=0.000000000 pid=1 sid=0000000000000abc exename=\"cpu0\""
        );
        assert!(lines[1].starts_with("SESS"));
        assert_eq!(lines[2], "TASK timestamp=0.000000000 tid=1 pid=1");
    }

    #[test]
    fn threads_of_one_process_share_its_session() {
        let mut out = Vec::new();
        let task = |tid, pid| Task {
            tid,
            pid,
            name: "threads.elf".into(),
        };
        let tasks = [task(40, 40), task(41, 40), task(42, 40)];
        write_task_txt(&mut out, &session_id(0xabc), &tasks).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "SESS timestamp=0.000000000 pid=40 sid=0000000000000abc exename=\"threads.elf\"\n\
             TASK timestamp=0.000000000 tid=40 pid=40\n\
             TASK timestamp=0.000000000 tid=41 pid=40\n\
             TASK timestamp=0.000000000 tid=42 pid=40\n"
        );
    }

    #[test]
    fn later_processes_read_as_uftrace_writes_them() {
        let mut out = Vec::new();
        let lines = [
            Later::Fork {
                ns: 1_500_000_000,
                pid: 12,
                ppid: 10,
            },
            Later::Session {
                ns: 2_000_000_001,
                pid: 12,
                sid: session_id(0x0123_4567_89ab_cdef),
                name: "execd.elf".into(),
            },
            Later::Task {
                ns: 2_000_000_001,
                tid: 12,
                pid: 12,
            },
        ];
        write_later(&mut out, &lines).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "FORK timestamp=1.500000000 pid=12 ppid=10\n\
             SESS timestamp=2.000000001 pid=12 sid=0123456789abcdef exename=\"execd.elf\"\n\
             TASK timestamp=2.000000001 tid=12 pid=12\n"
        );
    }

    #[test]
    fn names_survive_uftraces_basename() {
        assert_eq!(exename("kthreadd"), "kthreadd");
        assert_eq!(exename("swapper/0"), "swapper\u{2215}0");
        assert_eq!(exename("kworker/u2:0"), "kworker\u{2215}u2:0");
        assert_eq!(exename("a\"b\nc"), "a b c");
        // Plain ASCII is left for uftrace to cut; a character across byte 15 is dropped.
        assert_eq!(exename("task-4259840 EL0"), "task-4259840 EL0");
        assert_eq!(exename("irq/9-virtio0-c"), "irq\u{2215}9-virtio0-c");
        assert_eq!(exename("abcdefghijklm/x"), "abcdefghijklm");
        assert_eq!(exename("abcdefghijkl/xy"), "abcdefghijkl\u{2215}xy");
    }

    #[test]
    fn guest_names_reach_no_terminal() {
        assert_eq!(exename("ev\x1b[2Jil\r"), "ev\\x1b[2Jil\\x0d");
        let mut out = Vec::new();
        let lines = [Later::Session {
            ns: 1,
            pid: 2,
            sid: session_id(1),
            name: format!("{}\x1b", "x".repeat(5000)),
        }];
        write_later(&mut out, &lines).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains('\x1b') && text.len() < 400, "{text}");
        let mut out = Vec::new();
        write_dlopen(&mut out, 1, &session_id(1), 0x1000, "/m/a b\x1b.ko").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "DLOP timestamp=0.000000000 tid=1 sid=0000000000000001 base=1000 \
             libname=\"/m/a\\x20b\\x1b.ko\"\n"
        );
    }
}
