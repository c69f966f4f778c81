//! `task.txt`: sessions, then the tasks that belong to them (`read_task_txt_file`).

use std::io::{self, Write};

/// One uftrace task and the session that names it.
#[derive(Debug, Clone)]
pub struct Task {
    pub tid: u32,
    pub pid: u32,
    /// Shown as the task's "comm" (basename, first 15 characters); may contain spaces.
    pub name: String,
}

/// A 16-hex-digit session id: shorter ids break DLOP lookups in 0.17+.
pub fn session_id(seed: u64) -> String {
    format!("{seed:016x}")
}

/// Writes every SESS line before the TASK lines, all at time 0 so that no record predates
/// its session.
pub fn write_task_txt(w: &mut impl Write, sid: &str, tasks: &[Task]) -> io::Result<()> {
    if sid.len() != 16 || !sid.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "session id must be 16 hex digits",
        ));
    }
    for t in tasks {
        let name = t.name.replace(['\n', '"'], " ");
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

/// A module loaded after the start, looked up in `<basename(libname)>.sym` from `base`.
pub fn write_dlopen(
    w: &mut impl Write,
    tid: u32,
    sid: &str,
    base: u64,
    libname: &str,
) -> io::Result<()> {
    writeln!(
        w,
        "DLOP timestamp=0.000000000 tid={tid} sid={sid} base={:x} libname=\"{libname}\"",
        crate::addr48(base)
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
}
