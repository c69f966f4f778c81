//! Which Perfetto process and thread track each uftrace task gets.
//!
//! A thread track per task, named as the recording names it. Processes: in user mode the
//! guest's processes (task.txt's pids); in system mode a vCPU's firmware or bare-metal code
//! is a process of its own per vCPU, the kernel's idle contexts share one "kernel" process,
//! and each guest process holds its tasks' contexts: a task's thread group where the plugin
//! read it (Linux `tgid`, with the kernel's DWARF), else its PID, and its privilege levels
//! with `--split-levels`. A process is named after its main thread. Traces without `plugin.tasks` (older ones, uftrace's own)
//! follow task.txt.

use crate::guest_tasks::GuestTask;

use super::source::TaskFile;

/// One thread track.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    pub tid: u32,
    pub pid: u32,
    pub name: String,
}

/// One process track.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub name: String,
}

/// The tracks of a trace, processes in order of first appearance.
#[derive(Debug, Default)]
pub struct Plan {
    pub processes: Vec<Process>,
    pub threads: Vec<Thread>,
}

/// Name of the process that holds a kernel's idle contexts.
pub const KERNEL: &str = "kernel";

pub fn plan(tids: &[u32], tasks: &TaskFile, guest: &[GuestTask], user_mode: bool) -> Plan {
    let mut p = Plan::default();
    // The kernel's process takes the pid of its first idle context (a uftrace tid, which
    // no guest PID reaches: they are numbered apart).
    let mut kernel_pid = None;
    for &tid in tids {
        if user_mode {
            let pid = tasks.user_pid(tid);
            let name = tasks.comm(tid).unwrap_or_else(|| format!("task-{tid}"));
            let pname = tasks.process_name(pid).unwrap_or_else(|| name.clone());
            if !p.processes.iter().any(|q| q.pid == pid) {
                p.processes.push(Process { pid, name: pname });
            }
            p.threads.push(Thread { tid, pid, name });
            continue;
        }
        let g = guest.iter().find(|g| g.tid == tid);
        let name = g
            .map(GuestTask::display_name)
            .or_else(|| tasks.comm(tid))
            .unwrap_or_else(|| format!("task-{tid}"));
        let (pid, pname) = match g {
            Some(g) if g.boot => (tid, name.clone()),
            Some(g) if g.process() > 0 => {
                let pid = g.process();
                let main = guest
                    .iter()
                    .find(|m| !m.boot && m.pid == pid && m.level.is_empty())
                    .unwrap_or(g);
                let base = GuestTask {
                    level: String::new(),
                    ..main.clone()
                };
                (pid, base.display_name())
            }
            Some(g) if g.boot_of.is_some() => (*kernel_pid.get_or_insert(tid), KERNEL.to_string()),
            _ => {
                let pid = tasks.pid(tid);
                let pname = tasks
                    .process_name(pid)
                    .unwrap_or_else(|| format!("pid-{pid}"));
                (pid, pname)
            }
        };
        if !p.processes.iter().any(|q| q.pid == pid) {
            p.processes.push(Process { pid, name: pname });
        }
        p.threads.push(Thread { tid, pid, name });
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_mode_processes() {
        let guest = crate::guest_tasks::parse(
            "tid=4194304\tpid=0\tkind=boot\tlevel=\tvcpus=0\tname=\n\
             tid=1\tpid=1\tkind=task\tlevel=\tvcpus=0,1\tname=init\n\
             tid=4194305\tpid=0\tkind=task\tlevel=\tvcpus=1\tboot_of=1\tname=\n\
             tid=4194306\tpid=0\tkind=task\tlevel=\tvcpus=0\tboot_of=0\tname=\n\
             tid=65537\tpid=1\tkind=task\tlevel=EL0\tvcpus=0\tname=init\n\
             tid=7\tpid=7\ttgid=1\tkind=task\tlevel=\tvcpus=1\tname=worker-thread\n\
             tid=8\tpid=8\ttgid=8\tkind=task\tlevel=\tvcpus=1\tname=kworker/0:1\n",
        );
        let p = plan(
            &[1, 7, 8, 65537, 4194304, 4194305, 4194306],
            &TaskFile::default(),
            &guest,
            false,
        );
        let procs: Vec<(u32, &str)> = p
            .processes
            .iter()
            .map(|q| (q.pid, q.name.as_str()))
            .collect();
        assert_eq!(
            procs,
            [
                (1, "init"),
                (8, "kworker/0:1"),
                (4194304, "cpu0"),
                (4194305, KERNEL)
            ]
        );
        let threads: Vec<(u32, u32, &str)> = p
            .threads
            .iter()
            .map(|t| (t.tid, t.pid, t.name.as_str()))
            .collect();
        assert_eq!(
            threads,
            [
                (1, 1, "init"),
                (7, 1, "worker-thread"),
                (8, 8, "kworker/0:1"),
                (65537, 1, "init EL0"),
                (4194304, 4194304, "cpu0"),
                (4194305, 4194305, "cpu1"),
                (4194306, 4194305, "cpu0"),
            ]
        );
    }

    #[test]
    fn user_mode_follows_task_txt() {
        // As qemu-uftrace writes a user-mode trace: each thread of the first process a
        // session of its own, then a forked child.
        let t = TaskFile::parse(
            "SESS timestamp=0.000000000 pid=10 sid=00000000000000aa exename=\"/bin/prog\"\n\
             SESS timestamp=0.000000000 pid=11 sid=00000000000000aa exename=\"/bin/prog\"\n\
             TASK timestamp=0.000000000 tid=10 pid=10\n\
             TASK timestamp=0.000000000 tid=11 pid=11\n\
             FORK timestamp=1.000000000 pid=12 ppid=10\n\
             TASK timestamp=1.000000000 tid=12 pid=12\n",
        );
        let guest = crate::guest_tasks::parse("tid=11\tpid=11\tkind=task\tname=\n");
        let p = plan(&[10, 11, 12], &t, &guest, true);
        assert_eq!(
            p.threads[2],
            Thread {
                tid: 12,
                pid: 12,
                name: "prog".into()
            }
        );
        assert_eq!(p.processes.len(), 2);
        let p = plan(&[10, 11], &t, &guest, true);
        assert_eq!(
            p.processes,
            [Process {
                pid: 10,
                name: "prog".into()
            }]
        );
        assert_eq!(
            p.threads[1],
            Thread {
                tid: 11,
                pid: 10,
                name: "prog".into()
            }
        );
    }
}
