//! The guest contexts the plugin found (`plugin.tasks`): vCPU boot code, OS tasks, and with
//! `--split-levels` each privilege level of them, one uftrace task each.

use std::path::Path;

/// The plugin's list of contexts.
pub const TASKS_FILE: &str = "plugin.tasks";

/// One context as the plugin described it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestTask {
    pub tid: u32,
    /// The guest's PID, 0 when unknown.
    pub pid: u32,
    /// System mode: its process (Linux `tgid`, read at switches with the kernel's DWARF),
    /// 0 when unknown.
    pub tgid: u32,
    /// A vCPU's code before any OS task showed (firmware, bare metal).
    pub boot: bool,
    /// The vCPU whose boot code turned into this task (Linux: that CPU's idle task).
    pub boot_of: Option<u32>,
    /// `EL1`, `S-EL1` … with `--split-levels`.
    pub level: String,
    pub vcpus: Vec<u32>,
    /// The guest's own name for it (Linux `comm`), when it was read.
    pub name: String,
}

impl GuestTask {
    /// The process it belongs to, as uftrace's `pid=` and Perfetto's process: its thread
    /// group where it was read, else the PID of a task, else none (0).
    pub fn process(&self) -> u32 {
        match (self.boot, self.thread_group()) {
            (true, _) => 0,
            (false, Some(tgid)) => tgid,
            (false, None) => self.pid,
        }
    }

    /// Its thread group, where the plugin read it (never a vCPU's boot code's).
    pub fn thread_group(&self) -> Option<u32> {
        (!self.boot && self.tgid > 0).then_some(self.tgid)
    }

    /// What uftrace shows as the task's command: the guest's name, else `cpu<N>` for a
    /// vCPU's boot code, else `pid-<PID>`, else `task-<tid>`; the level after it.
    pub fn display_name(&self) -> String {
        let base = if !self.name.is_empty() {
            self.name.clone()
        } else if let Some(vcpu) = self.boot_of {
            format!("cpu{vcpu}")
        } else if self.boot {
            format!("cpu{}", self.vcpus.first().copied().unwrap_or(0))
        } else if self.pid > 0 {
            format!("pid-{}", self.pid)
        } else {
            format!("task-{}", self.tid)
        };
        if self.level.is_empty() {
            base
        } else {
            format!("{base} {}", self.level)
        }
    }
}

/// Parses `plugin.tasks`: tab-separated `key=value` fields, one context per line; lines
/// that do not parse are left out (the tasks then get default names).
pub fn parse(text: &str) -> Vec<GuestTask> {
    text.lines()
        .filter_map(|line| {
            let mut t = GuestTask::default();
            let mut has_tid = false;
            for field in line.split('\t') {
                let (k, v) = field.split_once('=')?;
                match k {
                    "tid" => {
                        t.tid = v.parse().ok()?;
                        has_tid = true;
                    }
                    "pid" => t.pid = v.parse().ok()?,
                    "tgid" => t.tgid = v.parse().ok()?,
                    "kind" => t.boot = v == "boot",
                    "level" => t.level = v.to_string(),
                    "vcpus" => {
                        t.vcpus = v
                            .split(',')
                            .filter(|s| !s.is_empty())
                            .map(str::parse)
                            .collect::<Result<_, _>>()
                            .ok()?
                    }
                    "name" => t.name = v.to_string(),
                    "boot_of" if !v.is_empty() => t.boot_of = Some(v.parse().ok()?),
                    _ => {}
                }
            }
            has_tid.then_some(t)
        })
        .collect()
}

/// The contexts of a staging directory (none when the plugin wrote no list).
pub fn read(dir: &Path) -> Vec<GuestTask> {
    std::fs::read_to_string(dir.join(TASKS_FILE))
        .map(|t| parse(&t))
        .unwrap_or_default()
}

/// Lines for `note.txt` saying which vCPUs each task ran on, when there are OS tasks.
pub fn note_lines(tasks: &[GuestTask], tids: &[u32]) -> Vec<String> {
    if tasks.iter().all(|t| t.boot) {
        return Vec::new();
    }
    let mut lines = vec!["guest tasks (uftrace tid: name, guest pid, vCPUs ran on):".to_string()];
    for t in tasks.iter().filter(|t| tids.contains(&t.tid)) {
        let vcpus: Vec<String> = t.vcpus.iter().map(u32::to_string).collect();
        lines.push(format!(
            "  {}: {}, pid {}, vCPU {}",
            t.tid,
            t.display_name(),
            if t.pid > 0 {
                t.pid.to_string()
            } else {
                "-".into()
            },
            vcpus.join(",")
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_plugin_list() {
        let text = "tid=4194304\tpid=0\tkind=boot\tlevel=\tvcpus=0\tname=\n\
                    tid=1\tpid=1\ttgid=1\tkind=task\tlevel=\tvcpus=0,1\tname=init\n\
                    tid=9\tpid=9\ttgid=1\tkind=task\tlevel=\tvcpus=0\tname=worker\n\
                    tid=4194305\tpid=0\tkind=task\tlevel=\tvcpus=1\tboot_of=1\tname=\n\
                    tid=4259840\tpid=0\tkind=task\tlevel=EL0\tvcpus=1\tname=\n\
                    garbage\n";
        let mut t = parse(text);
        assert_eq!(t.len(), 5);
        assert_eq!(
            t.remove(2).process(),
            1,
            "a thread's process is its thread group"
        );
        assert_eq!(t[1].process(), 1);
        assert_eq!(t[0].process(), 0, "a vCPU's boot code is no process");
        assert_eq!(t.remove(2).display_name(), "cpu1");
        assert_eq!(t[0].display_name(), "cpu0");
        assert_eq!(t[1].display_name(), "init");
        assert_eq!(t[1].vcpus, [0, 1]);
        assert_eq!(t[2].display_name(), "task-4259840 EL0");
        let note = note_lines(&t, &[1, 4194304]);
        assert_eq!(note.len(), 3);
        assert_eq!(note[2], "  1: init, pid 1, vCPU 0,1");
    }
}
