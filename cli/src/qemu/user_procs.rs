//! User mode: the guest processes other than the first, each recorded by its own QEMU (a
//! forked child is a fork of QEMU, an exec'd program QEMU run again by the plugin), each
//! with its `plugin.*` files in `procs/<pid>.<n>/` after a `plugin.proc` line saying what
//! it is. They may outlive the first QEMU: [`wait_all`] waits for them.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use qemu_uftrace_format::task::Later;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

use crate::signal_scope::SignalScope;

/// How a process image began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Forked by `ppid`: uftrace's FORK, the parent's session carried on.
    Fork { ppid: u32 },
    /// A program exec'd: a new session, with the program's symbols.
    Exec { exe: PathBuf },
}

/// One process image other than the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Its directory, `procs/<pid>.<n>`.
    pub dir: PathBuf,
    pub pid: u32,
    /// When it began, on the records' clock (nanoseconds).
    pub time: u64,
    pub kind: Kind,
}

impl Proc {
    /// Which image of its process this is: `n` of `procs/<pid>.<n>` (the fork's or first is 0).
    pub fn image(&self) -> u32 {
        self.dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split_once('.'))
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0)
    }
}

/// Parses a `plugin.proc` line.
pub fn parse(dir: PathBuf, text: &str) -> Option<Proc> {
    let mut get = std::collections::HashMap::new();
    for f in text.trim_end_matches('\n').split('\t') {
        if let Some((k, v)) = f.split_once('=') {
            get.insert(k, v);
        }
    }
    let num = |k: &str| get.get(k).and_then(|v| v.parse::<u64>().ok());
    let kind = match *get.get("kind")? {
        "fork" => Kind::Fork {
            ppid: u32::try_from(num("ppid")?).ok()?,
        },
        "exec" => Kind::Exec {
            exe: PathBuf::from(get.get("exe")?),
        },
        _ => return None,
    };
    Some(Proc {
        dir,
        pid: u32::try_from(num("pid")?).ok()?,
        time: num("time")?,
        kind,
    })
}

/// The process images recorded into `staging`, in the order they began.
pub fn list(staging: &Path) -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir(staging.join("procs")) else {
        return Vec::new();
    };
    let mut procs: Vec<Proc> = entries
        .flatten()
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path().join("plugin.proc")).ok()?;
            parse(e.path(), &text)
        })
        .collect();
    // A process's images in the order they ran (`<pid>.<n>`) where their times tie.
    procs.sort_by_key(|p| (p.time, p.pid, p.image()));
    procs
}

/// The guest processes waited for, each watched through a pidfd taken when first seen: a
/// pid the kernel hands to a new process after ours ended does not pass for ours.
#[derive(Default)]
struct Watched {
    /// `None`: the process had already ended when first seen.
    fds: HashMap<u32, Option<OwnedFd>>,
}

impl Watched {
    /// Whether process `pid` still runs (a zombie has ended: its plugin wrote all it will).
    fn alive(&mut self, pid: u32) -> bool {
        let fd = self.fds.entry(pid).or_insert_with(|| {
            let pid = Pid::from_raw(i32::try_from(pid).ok()?)?;
            pidfd_open(pid, PidfdFlags::empty()).ok()
        });
        // A pidfd turns readable when its process ends.
        fd.as_ref()
            .is_some_and(|fd| ready(&[fd.as_fd()], Duration::ZERO) == 0)
    }

    /// Waits up to `timeout` for one of `pids` to end.
    fn wait_any(&mut self, pids: &[u32], timeout: Duration) {
        let fds: Vec<BorrowedFd<'_>> = pids
            .iter()
            .filter_map(|p| self.fds.get(p)?.as_ref().map(|fd| fd.as_fd()))
            .collect();
        if fds.is_empty() {
            std::thread::sleep(timeout);
        } else {
            ready(&fds, timeout);
        }
    }
}

/// How many of `fds` are readable within `timeout` (0 on an error: the caller looks again).
fn ready(fds: &[BorrowedFd<'_>], timeout: Duration) -> usize {
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let timeout = Timespec::try_from(timeout).ok();
    loop {
        match rustix::event::poll(&mut polled, timeout.as_ref()) {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.unwrap_or(0),
        }
    }
}

/// Whether the image has written its files (`plugin.stats` comes last).
pub fn done(p: &Proc) -> bool {
    p.dir.join("plugin.stats").exists()
}

/// Waits until every process image has written its files or its process has ended (it was
/// killed before it could: the trace then says so). `scope` (made before the first QEMU
/// ran: [`SignalScope::others`]) passes SIGTERM and SIGHUP on to each; after a while, says
/// whom it waits for.
pub fn wait_all(staging: &Path, scope: Option<&SignalScope>) {
    let started = std::time::Instant::now();
    let mut told = false;
    let mut watched = Watched::default();
    loop {
        let waiting = waiting(&list(staging), &mut watched);
        let Some(&first) = waiting.first() else {
            return;
        };
        if let Some(s) = scope {
            for &pid in &waiting {
                s.child_started(pid);
            }
            s.child_started(first);
        }
        if !told && started.elapsed() > Duration::from_secs(2) {
            told = true;
            let pids: Vec<String> = waiting.iter().map(u32::to_string).collect();
            crate::errors::note(format!(
                "the program ended, but processes it started still run (pid {}): waiting \
                 for them to end to complete the trace (Ctrl-C stops them)",
                pids.join(", ")
            ));
        }
        // Woken at once by a process's end; the files a process writes, and new processes,
        // are looked for every 20 ms.
        watched.wait_any(&waiting, Duration::from_millis(20));
    }
}

/// The pids of the process images still to write their files.
fn waiting(procs: &[Proc], watched: &mut Watched) -> Vec<u32> {
    let mut pids: Vec<u32> = procs
        .iter()
        .filter(|p| {
            // An exec'd image shares its pid with the one before it, which is done: the
            // pid's latest image decides.
            let latest = procs.iter().rfind(|q| q.pid == p.pid);
            latest == Some(*p) && !done(p) && watched.alive(p.pid)
        })
        .map(|p| p.pid)
        .collect();
    pids.dedup();
    pids
}

/// The `task.txt` lines of the processes after the first, as uftrace writes them: a FORK
/// line for a forked child (it carries on in its parent's session), a SESS line and the
/// TASK lines of its threads for an exec'd program. `sid_of` gives an exec's session id,
/// `tids_of` the threads each image recorded.
pub fn task_lines(
    procs: &[Proc],
    sid_of: impl Fn(&Proc) -> Option<String>,
    tids_of: impl Fn(&Proc) -> Vec<u32>,
) -> Vec<Later> {
    let mut lines = Vec::new();
    for p in procs {
        let (ns, pid) = (p.time, p.pid);
        let mut tids = tids_of(p);
        tids.sort_unstable();
        match &p.kind {
            Kind::Fork { ppid } => {
                lines.push(Later::Fork {
                    ns,
                    pid,
                    ppid: *ppid,
                });
                tids.retain(|&t| t != pid);
            }
            Kind::Exec { exe } => {
                let Some(sid) = sid_of(p) else { continue };
                let name = exe
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                lines.push(Later::Session { ns, pid, sid, name });
                if !tids.contains(&pid) {
                    tids.insert(0, pid);
                }
            }
        }
        lines.extend(tids.into_iter().map(|tid| Later::Task { ns, tid, pid }));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_then_exec_reads_as_uftrace_writes_it() {
        let fork = parse(
            "procs/12.0".into(),
            "kind=fork\tpid=12\tppid=10\ttime=1500000000\n",
        )
        .unwrap();
        let exec = parse(
            "procs/12.1".into(),
            "kind=exec\tpid=12\ttime=2000000001\texe=/x/execd.elf\n",
        )
        .unwrap();
        assert_eq!(fork.kind, Kind::Fork { ppid: 10 });
        assert_eq!(
            task_lines(
                &[fork, exec],
                |_| Some("0123456789abcdef".into()),
                |p| vec![p.pid]
            ),
            [
                Later::Fork {
                    ns: 1_500_000_000,
                    pid: 12,
                    ppid: 10
                },
                Later::Session {
                    ns: 2_000_000_001,
                    pid: 12,
                    sid: "0123456789abcdef".into(),
                    name: "execd.elf".into()
                },
                Later::Task {
                    ns: 2_000_000_001,
                    tid: 12,
                    pid: 12
                },
            ]
        );
        assert_eq!(parse("d".into(), "kind=spawn\tpid=1\ttime=0"), None);
    }

    #[test]
    fn a_processs_images_tied_in_time_keep_the_order_they_ran_in() {
        let dir = tempfile::tempdir().unwrap();
        // Written exec first: the directory's order must not decide.
        for (key, line) in [
            ("12.1", "kind=exec\tpid=12\ttime=7\texe=/x/execd.elf\n"),
            ("12.0", "kind=fork\tpid=12\tppid=10\ttime=7\n"),
        ] {
            let p = dir.path().join("procs").join(key);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("plugin.proc"), line).unwrap();
        }
        let images: Vec<u32> = list(dir.path()).iter().map(Proc::image).collect();
        assert_eq!(images, [0, 1]);
    }

    #[test]
    fn a_process_that_ended_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("procs/999999999.0");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("plugin.proc"),
            "kind=fork\tpid=999999999\tppid=1\ttime=5\n",
        )
        .unwrap();
        assert_eq!(list(dir.path()).len(), 1);
        wait_all(dir.path(), None);
        let mut watched = Watched::default();
        assert!(watched.alive(std::process::id()));
        // A child: alive until it ends, then ended (a zombie too, before it is reaped).
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        assert!(watched.alive(child.id()));
        child.kill().unwrap();
        watched.wait_any(&[child.id()], Duration::from_secs(30));
        assert!(!watched.alive(child.id()));
        child.wait().unwrap();
    }
}
