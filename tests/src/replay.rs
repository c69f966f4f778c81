//! Reading uftrace's own output back: `uftrace replay` text into call/return events, so that
//! tests assert on what a user sees.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `uftrace ARGS…` and returns its standard output; fails on a non-zero exit or on a
/// warning or error line, which would mean uftrace read the data wrongly.
pub fn uftrace(args: &[&str]) -> Result<String> {
    uftrace_at(Path::new("uftrace"), args)
}

/// [`uftrace`] with the uftrace at `program` (one of [`uftrace_versions`]). The same command
/// on a trace that has not changed since gives what it gave, without running again: a kernel
/// boot's trace takes uftrace 8-12 s a pass, and checks that share a trace ask it the same
/// question (`replay -D 1`, `report`) from different places.
pub fn uftrace_at(program: &Path, args: &[&str]) -> Result<String> {
    let key = memo::key(program, args);
    if let Some(out) = key.as_ref().and_then(memo::get) {
        return Ok(out);
    }
    let out = run_uftrace(program, args)?;
    if let Some(key) = key {
        memo::put(key, &out);
    }
    Ok(out)
}

/// Outputs of uftrace commands by command and trace state, in this test process.
mod memo {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;
    use std::time::SystemTime;

    /// The command and its trace's files, each with its length and modification time: a
    /// trace written again since is another key.
    #[derive(PartialEq, Eq)]
    pub struct Key {
        program: PathBuf,
        args: Vec<String>,
        files: Vec<(std::ffi::OsString, u64, Option<SystemTime>)>,
    }

    /// Outputs kept, the most recent last; their bytes are bounded (tests run in parallel,
    /// and a full replay of a boot is most of a GB).
    const KEPT_BYTES: usize = 256 << 20;
    const ONE_AT_MOST: usize = 64 << 20;
    static KEPT: Mutex<Vec<(Key, String)>> = Mutex::new(Vec::new());

    /// The key of `uftrace ARGS` when they name the trace (`-d DIR`), else none.
    pub fn key(program: &Path, args: &[&str]) -> Option<Key> {
        let dir = args.windows(2).find(|w| w[0] == "-d").map(|w| w[1])?;
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((e.file_name(), meta.len(), meta.modified().ok()))
            })
            .collect();
        files.sort();
        Some(Key {
            program: program.to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
            files,
        })
    }

    pub fn get(key: &Key) -> Option<String> {
        let kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter()
            .find(|(k, _)| k == key)
            .map(|(_, out)| out.clone())
    }

    pub fn put(key: Key, out: &str) {
        if out.len() > ONE_AT_MOST {
            return;
        }
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|(k, _)| *k != key);
        kept.push((key, out.to_owned()));
        while kept.iter().map(|(_, o)| o.len()).sum::<usize>() > KEPT_BYTES {
            kept.remove(0);
        }
    }
}

fn run_uftrace(program: &Path, args: &[&str]) -> Result<String> {
    let what = || crate::passes::describe(&program.display().to_string(), args);
    let out = crate::passes::timed(what, || Command::new(program).args(args).output());
    let out = out.with_context(|| {
        format!(
            "running {} (run scripts/install-deps.sh)",
            program.display()
        )
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!(
            "{} {} failed ({}): {stderr}",
            program.display(),
            args.join(" "),
            out.status
        );
    }
    if stderr.contains("WARN") || stderr.contains("ERROR") {
        bail!(
            "{} {} complained: {stderr}",
            program.display(),
            args.join(" ")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One uftrace the tests read traces with.
#[derive(Debug, Clone)]
pub struct Uftrace {
    /// As `uftrace --version` prints it: `0.13`, `0.17`, `0.19`.
    pub version: String,
    pub program: PathBuf,
}

/// The uftrace versions users read our traces with: the system's (Debian bookworm's 0.13)
/// and the 0.17 (trixie) and 0.19 (forky, sid) that scripts/install-deps.sh keeps in the
/// cache. Fails when one is missing or is not the version its place names.
pub fn uftrace_versions() -> Result<Vec<Uftrace>> {
    let mut all = vec![(None, PathBuf::from("uftrace"))];
    for version in ["0.17", "0.19"] {
        let program = crate::cache_dir().join(format!("uftrace-{version}/bin/uftrace"));
        all.push((Some(version), program));
    }
    let mut out: Vec<Uftrace> = Vec::new();
    for (want, program) in all {
        let text = uftrace_at(&program, &["--version"])?;
        // `uftrace v0.17 ( x86_64 dwarf … )`
        let version = (text.split_whitespace().nth(1))
            .and_then(|v| v.strip_prefix('v'))
            .with_context(|| format!("{} --version printed {text:?}", program.display()))?
            .to_owned();
        if want.is_some_and(|w| w != version) {
            bail!(
                "{} is uftrace {version}, not {}: run scripts/install-deps.sh",
                program.display(),
                want.unwrap_or_default()
            );
        }
        if let Some(twin) = out.iter().find(|u| u.version == version) {
            bail!(
                "uftrace {version} twice: {} and {}",
                twin.program.display(),
                program.display()
            );
        }
        out.push(Uftrace { version, program });
    }
    Ok(out)
}

/// One line of a replay: the task id and the function part after `|`.
pub fn replay_body(line: &str) -> Option<(u32, &str)> {
    let (head, body) = line.split_once('|')?;
    let tid = head
        .split('[')
        .nth(1)?
        .split(']')
        .next()?
        .trim()
        .parse()
        .ok()?;
    Some((tid, body.trim_start()))
}

/// The call sequence of one task as `"E name"` / `"X name"` strings, from `uftrace replay`.
pub fn replay_events(dir: &Path, tid: u32) -> Result<Vec<String>> {
    let text = uftrace(&["replay", "--no-pager", "-d", &dir.to_string_lossy()])?;
    parse_replay(&text, tid)
}

/// Parses replay text (`name() {`, `name();`, `} /* name */` lines).
pub fn parse_replay(text: &str, tid: u32) -> Result<Vec<String>> {
    let mut events = Vec::new();
    for line in text.lines() {
        let Some((t, body)) = replay_body(line) else {
            continue;
        };
        if t != tid {
            continue;
        }
        if let Some(name) = body.strip_suffix("() {") {
            events.push(format!("E {name}"));
        } else if let Some(name) = body.strip_suffix("();") {
            events.push(format!("E {name}"));
            events.push(format!("X {name}"));
        } else if let Some(rest) = body.strip_prefix("} /* ") {
            let name = rest
                .strip_suffix(" */")
                .with_context(|| format!("replay line {line:?}"))?;
            events.push(format!("X {name}"));
        } else if body.starts_with("/*") {
            continue; // events, LOST markers
        } else {
            bail!("unexpected replay line {line:?}");
        }
    }
    Ok(events)
}

/// Calls per function from `uftrace report -f call` over the trace `dir`, with `extra`
/// options (`--tid N`, `-F …`). uftrace counts one call per entry it reads.
pub fn report_calls(dir: &Path, extra: &[&str]) -> Result<BTreeMap<String, u64>> {
    let d = dir.to_string_lossy();
    let mut args = vec!["report", "--no-pager", "-f", "call", "-d", &d];
    args.extend_from_slice(extra);
    parse_report_calls(&uftrace(&args)?)
}

/// Parses `uftrace report -f call` text (`  COUNT  NAME` under a two-line header).
pub fn parse_report_calls(text: &str) -> Result<BTreeMap<String, u64>> {
    let mut calls = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some((count, name)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue; // the header and its ==== rule
        };
        *calls.entry(name.trim().to_owned()).or_default() += count;
    }
    Ok(calls)
}

/// A uftrace `-F`/`-N`/`-T` pattern matching exactly `name`: uftrace reads patterns as
/// unanchored regular expressions (`-F schedule` also shows `schedule_tail`).
pub fn exactly(name: &str) -> String {
    let mut out = String::from("^");
    for c in name.chars() {
        if "\\.^$|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('$');
    out
}

/// One function call as `uftrace replay` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    pub tid: u32,
    /// The entry's timestamp in the trace's clock units (nanoseconds, or instructions under
    /// `--clock insn`), when the replay showed `-f time`.
    pub time: Option<u64>,
    /// The return's timestamp, when the replay showed it on a line of its own
    /// (`} /* name */`, not `name();`) with `-f time`.
    pub end_time: Option<u64>,
    /// The enclosing call (same task), as an index into the call list.
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// Whether the replay showed its return (`name();` or `} /* name */`).
    pub returned: bool,
}

/// The calls of replay text (any `-f` fields, any tasks), in the order they were entered;
/// each task keeps its own stack. Exits with no open entry are skipped (a filtered replay
/// starts inside calls).
pub fn parse_calls(text: &str) -> Result<Vec<Call>> {
    let mut calls: Vec<Call> = Vec::new();
    let mut stacks: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for line in text.lines() {
        let Some((head, body)) = line.split_once('|') else {
            continue;
        };
        let Some((tid, time)) = parse_head(head) else {
            continue;
        };
        let body = body.trim();
        let stack = stacks.entry(tid).or_default();
        let (name, leaf) = if let Some(name) = body.strip_suffix("() {") {
            (name, false)
        } else if let Some(name) = body.strip_suffix("();") {
            (name, true)
        } else if let Some(rest) = body.strip_prefix("} /* ") {
            let name = rest
                .strip_suffix(" */")
                .with_context(|| format!("replay line {line:?}"))?;
            if let Some(i) = stack.pop() {
                if calls[i].name != name {
                    bail!("replay line {line:?} closes {} instead", calls[i].name);
                }
                calls[i].returned = true;
                calls[i].end_time = time;
            }
            continue;
        } else if body.starts_with("/*") {
            continue;
        } else {
            bail!("unexpected replay line {line:?}");
        };
        let index = calls.len();
        let parent = stack.last().copied();
        calls.push(Call {
            name: name.to_owned(),
            tid,
            time,
            end_time: None,
            parent,
            children: Vec::new(),
            returned: leaf,
        });
        if let Some(p) = parent {
            calls[p].children.push(index);
        }
        if !leaf {
            stack.push(index);
        }
    }
    Ok(calls)
}

/// The task id and, when shown, the timestamp of a replay line's head: `   0.387 us [  1] `
/// (duration, tid) or ` [     1]        0.099190045 ` (`-f tid,time`).
fn parse_head(head: &str) -> Option<(u32, Option<u64>)> {
    let (_, rest) = head.split_once('[')?;
    let (tid, after) = rest.split_once(']')?;
    let tid = tid.trim().parse().ok()?;
    let time = after.split_whitespace().next().and_then(parse_timestamp);
    Some((tid, time))
}

/// `SECONDS.NANOSECONDS` (uftrace's timestamp column) as nanoseconds.
fn parse_timestamp(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.')?;
    if frac.len() != 9 {
        return None;
    }
    Some(secs.parse::<u64>().ok()? * 1_000_000_000 + frac.parse::<u64>().ok()?)
}

/// The names from the outermost call down to `calls[i]` itself.
pub fn call_path(calls: &[Call], i: usize) -> Vec<&str> {
    let mut path = vec![calls[i].name.as_str()];
    let mut at = calls[i].parent;
    while let Some(p) = at {
        path.push(&calls[p].name);
        at = calls[p].parent;
    }
    path.reverse();
    path
}

/// Every call below `calls[i]` (children, their children, …), in entry order.
pub fn descendants(calls: &[Call], i: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut todo: Vec<usize> = calls[i].children.iter().rev().copied().collect();
    while let Some(c) = todo.pop() {
        out.push(c);
        todo.extend(calls[c].children.iter().rev());
    }
    out
}

/// The `TASK` lines of a trace's `task.txt`: `(tid, pid)`.
pub fn task_list(dir: &Path) -> Result<Vec<(u32, u32)>> {
    let path = dir.join("task.txt");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut tasks = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("TASK ")) {
        let field = |key: &str| -> Result<u32> {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .with_context(|| format!("no {key} in {line:?}"))?
                .parse()
                .with_context(|| format!("bad {key} in {line:?}"))
        };
        tasks.push((field("tid=")?, field("pid=")?));
    }
    Ok(tasks)
}

/// The name of every task of a trace (tid → name), as `uftrace info` shows them: `task.txt`'s
/// `TASK` lines give each tid its session (`pid=`), whose `SESS` line has the `exename`.
pub fn task_names(dir: &Path) -> Result<BTreeMap<u32, String>> {
    let path = dir.join("task.txt");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut sessions = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("SESS ")) {
        let pid = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("pid="))
            .and_then(|p| p.parse::<u32>().ok())
            .with_context(|| format!("no pid in {line:?}"))?;
        let name = line
            .split_once("exename=\"")
            .and_then(|(_, rest)| rest.strip_suffix('"'))
            .with_context(|| format!("no exename in {line:?}"))?;
        sessions.insert(pid, name.to_string());
    }
    task_list(dir)?
        .into_iter()
        .map(|(tid, pid)| {
            let name = sessions
                .get(&pid)
                .with_context(|| format!("task {tid}: no SESS line for pid {pid}"))?;
            Ok((tid, name.clone()))
        })
        .collect()
}

/// Drops every event of a function for which `drop` holds, with the events of everything it
/// called when `with_callees` is set.
pub fn without(events: &[String], drop: impl Fn(&str) -> bool, with_callees: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut hidden_depth = 0usize;
    for ev in events {
        let (kind, name) = ev.split_at(2);
        let enter = kind == "E ";
        if hidden_depth > 0 {
            if enter {
                hidden_depth += 1;
            } else {
                hidden_depth -= 1;
            }
            continue;
        }
        if drop(name) {
            if with_callees && enter {
                hidden_depth = 1;
            }
            continue;
        }
        out.push(ev.clone());
    }
    out
}

/// The bare-metal tailcall guest's `tail_via_ptr` (tests/guests/tailcall.c): its tail call
/// through a register (`br x16`, `jmp *%rax`, `c.jr a5`) enters `tail_c` as a call nested in
/// `tail_via_ptr`, closed when `tail_via_ptr`'s frame returns.
pub const TAIL_VIA_PTR: [&str; 6] = [
    "E tail_via_ptr",
    "E tail_c",
    "E tail_leaf",
    "X tail_leaf",
    "X tail_c",
    "X tail_via_ptr",
];

/// What a trace shows for a longjmp, as libmcount writes it (and uftrace's replay expects):
/// the frames it skips get no exit, only one for setjmp (a runtime function the callers
/// leave out) where it lands. In `oracle` (a log that closes every skipped frame where the
/// longjmp lands), the exits right before each entry of `landing` (the first call made
/// after the landing) are cut.
pub fn longjmp_shape(oracle: &[String], landing: &str) -> Vec<String> {
    let enter = format!("E {landing}");
    let mut out: Vec<String> = Vec::new();
    for ev in oracle {
        if *ev == enter {
            let exits = out.iter().rev().take_while(|e| e.starts_with("X ")).count();
            if exits > 1 {
                out.truncate(out.len() - exits);
            }
        }
        out.push(ev.clone());
    }
    out
}

/// What a trace shows for calls made as tail calls (`b f` / `br xN` in the last position):
/// the tail-called function never gets a frame of its own; what it does appears inside its
/// caller, which returns when it returns. `tail_calls` lists (caller, callee) pairs (callee
/// `None`: through a register, so every call the caller makes in tail position).
pub fn tail_call_shape(oracle: &[String], tail_calls: &[(&str, Option<&str>)]) -> Vec<String> {
    // Walk the oracle with a stack; an entry whose caller tail-calls it is dropped together with
    // its exit. A caller in `tail_calls` with callee None tail-calls its last callee.
    let mut out: Vec<String> = Vec::new();
    let mut stack: Vec<(String, bool)> = Vec::new(); // (name, dropped)
    for (i, ev) in oracle.iter().enumerate() {
        let (kind, name) = ev.split_at(2);
        if kind == "E " {
            // The visible caller is the innermost frame that is not dropped, but a dropped
            // frame's own tail calls are judged by its own name.
            let caller = stack.last().map(|(n, _)| n.as_str());
            let is_tail = caller.is_some_and(|c| {
                tail_calls.iter().any(|(tc, callee)| {
                    *tc == c
                        && match callee {
                            Some(callee) => *callee == name,
                            None => is_last_call_of_caller(oracle, i),
                        }
                })
            });
            stack.push((name.to_string(), is_tail));
            if !is_tail {
                out.push(ev.clone());
            }
        } else {
            let dropped = stack.pop().is_some_and(|(_, d)| d);
            if !dropped {
                out.push(ev.clone());
            }
        }
    }
    out
}

/// Whether the call entered at `oracle[i]` is the last one its caller makes: right after its
/// exit comes the caller's own.
fn is_last_call_of_caller(oracle: &[String], i: usize) -> bool {
    let mut depth = 0i64;
    for (j, ev) in oracle.iter().enumerate().skip(i) {
        depth += if ev.starts_with("E ") { 1 } else { -1 };
        if depth == 0 {
            return oracle.get(j + 1).is_some_and(|next| next.starts_with("X "));
        }
    }
    false
}

/// An indented call tree (one call a line, two spaces a level) as `"E name"` / `"X name"`
/// events, as [`replay_events`] gives them.
pub fn tree(text: &str) -> Vec<String> {
    let mut events = Vec::new();
    let mut open: Vec<&str> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let name = line.trim_start();
        let depth = (line.len() - name.len()) / 2;
        while open.len() > depth {
            events.push(format!("X {}", open.pop().expect("open call")));
        }
        assert_eq!(open.len(), depth, "bad indentation in {line:?}");
        events.push(format!("E {name}"));
        open.push(name);
    }
    while let Some(name) = open.pop() {
        events.push(format!("X {name}"));
    }
    events
}

/// The names on `uftrace graph`'s backtrace lines (`[N] name (0xaddr)`), outermost first; a
/// name may hold spaces (`[x86 BIOS …]`).
pub fn graph_backtrace(graph: &str) -> Vec<&str> {
    graph
        .lines()
        .filter_map(|l| l.trim().strip_prefix('['))
        .filter_map(|l| l.split_once("] ").map(|(_, f)| f))
        .map(|f| f.rsplit_once(" (0x").map_or(f, |(name, _)| name))
        .collect()
}

/// The calls of `function` in `uftrace report`'s default table (`TOTAL SELF CALLS NAME`,
/// times with their units), if the table lists it.
pub fn reported_calls(report: &str, function: &str) -> Option<u64> {
    report.lines().find_map(|l| {
        let rest = l.trim_end().strip_suffix(function)?;
        if !rest.ends_with(' ') {
            return None;
        }
        rest.split_whitespace().last()?.parse().ok()
    })
}

/// The calls open in task `tid` at `function`'s first entry in replay text, outermost first
/// and `function` last, as `uftrace graph FUNCTION` shows its backtrace; none if the task
/// never enters it. A kernel test asks the replay of one task it already has for this
/// rather than another pass of `graph` over the whole boot (issue 35).
pub fn stack_at_entry<'a>(replay: &'a str, tid: u32, function: &str) -> Option<Vec<&'a str>> {
    let mut open: Vec<&str> = Vec::new();
    for line in replay.lines() {
        let Some((t, body)) = replay_body(line) else {
            continue;
        };
        if t != tid {
            continue;
        }
        if let Some(name) = body.strip_suffix("() {") {
            open.push(name);
            if name == function {
                return Some(open);
            }
        } else if let Some(name) = body.strip_suffix("();") {
            if name == function {
                open.push(name);
                return Some(open);
            }
        } else if body.starts_with("} /* ") {
            open.pop();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report's call count by the function's whole name; graph's backtrace from a replay.
    #[test]
    fn calls_from_a_report_and_a_backtrace_from_a_replay() {
        let report = "  Total time   Self time       Calls  Function\n  \
            ==========  ==========  ==========  ====================\n  \
            134.436 ms    0.031 us           1  x86_64_start_kernel\n  \
            134.432 ms    0.278 us           3  start_kernel\n  \
              2.144 us    2.144 us          41  [x86 BIOS e7000-ff000]\n";
        assert_eq!(reported_calls(report, "start_kernel"), Some(3));
        assert_eq!(reported_calls(report, "x86_64_start_kernel"), Some(1));
        assert_eq!(reported_calls(report, "[x86 BIOS e7000-ff000]"), Some(41));
        assert_eq!(reported_calls(report, "kernel"), None);
        let replay = "# DURATION     TID     FUNCTION\n\
            \x20  2.144 us [4194304] | [x86 BIOS e7000-ff000]();\n\
            \x20           [4194304] | [x86 BIOS e7000-ff000]() {\n\
            \x20           [4194304] |   x86_64_start_kernel() {\n\
            \x20  0.100 us [4194304] |     copy_bootdata();\n\
            \x20           [4194304] |     early_setup() {\n\
            \x20  0.100 us [4194304] |       clear_bss();\n\
            \x20  0.300 us [4194304] |     } /* early_setup */\n\
            \x20           [     1] |     start_kernel() {\n\
            \x20           [4194304] |     x86_64_start_reservations() {\n\
            \x20           [4194304] |       start_kernel() {\n";
        assert_eq!(
            stack_at_entry(replay, 4194304, "start_kernel").expect("entered"),
            [
                "[x86 BIOS e7000-ff000]",
                "x86_64_start_kernel",
                "x86_64_start_reservations",
                "start_kernel"
            ]
        );
        assert_eq!(
            stack_at_entry(replay, 4194304, "copy_bootdata").expect("entered"),
            [
                "[x86 BIOS e7000-ff000]",
                "x86_64_start_kernel",
                "copy_bootdata"
            ]
        );
        assert_eq!(stack_at_entry(replay, 2, "start_kernel"), None);
    }

    /// A second identical command on an unchanged trace is answered from memory; a trace
    /// written since, or another command, runs again.
    #[test]
    fn the_same_question_on_the_same_trace_runs_once() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let runs = tmp.path().join("runs");
        let program = tmp.path().join("fake-uftrace");
        std::fs::write(
            &program,
            format!("#!/bin/sh\necho run >>{}\necho \"$@\"\n", runs.display()),
        )
        .expect("write the script");
        std::fs::set_permissions(
            &program,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let trace = tmp.path().join("trace");
        std::fs::create_dir(&trace).expect("mkdir");
        std::fs::write(trace.join("1.dat"), "a").expect("write");
        let d = trace.to_string_lossy().into_owned();
        let count = || {
            std::fs::read_to_string(&runs)
                .expect("runs")
                .lines()
                .count()
        };
        let ask = |what: &str| uftrace_at(&program, &[what, "-d", &d]).expect("fake uftrace");
        assert_eq!(ask("report"), format!("report -d {d}\n"));
        assert_eq!(ask("report"), format!("report -d {d}\n"));
        assert_eq!(count(), 1);
        ask("replay");
        assert_eq!(count(), 2);
        std::fs::write(trace.join("1.dat"), "ab").expect("write");
        ask("report");
        assert_eq!(count(), 3);
    }

    #[test]
    fn graph_backtraces_keep_names_with_spaces() {
        let graph = "backtrace\n================================\n \
                     backtrace #0: hit 1, time  1.0 us\n   \
                     [0] [x86 BIOS e7000-ff000] (0xe7000)\n   \
                     [1] x86_64_start_reservations (0xffffffff81000000)\n   \
                     [2] start_kernel (0xffffffff81000100)\n";
        assert_eq!(
            graph_backtrace(graph),
            [
                "[x86 BIOS e7000-ff000]",
                "x86_64_start_reservations",
                "start_kernel"
            ]
        );
    }

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn parses_uftrace_replay() {
        let text = "# DURATION     TID     FUNCTION\n            [     1] | main() {\n   0.010 us [     1] |   leaf();\n            [     2] | other() {\n   1.000 us [     1] | } /* main */\n";
        assert_eq!(
            parse_replay(text, 1).unwrap(),
            v(&["E main", "E leaf", "X leaf", "X main"])
        );
        assert_eq!(parse_replay(text, 2).unwrap(), v(&["E other"]));
    }

    #[test]
    fn tail_calls_fold_into_their_caller() {
        let oracle = v(&["E a", "E b", "E c", "X c", "X b", "E d", "X d", "X a"]);
        // a tail-calls d (its last call); b tail-calls c.
        let shape = tail_call_shape(&oracle, &[("a", Some("d")), ("b", Some("c"))]);
        assert_eq!(shape, v(&["E a", "E b", "X b", "X a"]));
        let shape = tail_call_shape(&oracle, &[("a", None)]);
        assert_eq!(shape, v(&["E a", "E b", "E c", "X c", "X b", "X a"]));
    }

    #[test]
    fn a_longjmp_leaves_no_exit_of_the_frames_it_skips() {
        let oracle = v(&[
            "E o", "E a", "E b", "X b", "X a", "E after", "X after", "X o", "E a", "X a",
        ]);
        assert_eq!(
            longjmp_shape(&oracle, "after"),
            v(&["E o", "E a", "E b", "E after", "X after", "X o", "E a", "X a"])
        );
    }

    #[test]
    fn without_drops_functions_and_their_callees() {
        let ev = v(&["E main", "E rt_x", "E leaf", "X leaf", "X rt_x", "X main"]);
        assert_eq!(
            without(&ev, |n| n.starts_with("rt_"), true),
            v(&["E main", "X main"])
        );
        assert_eq!(
            without(&ev, |n| n.starts_with("rt_"), false),
            v(&["E main", "E leaf", "X leaf", "X main"])
        );
    }

    #[test]
    fn parses_report_calls() {
        let text = "       Calls  Function\n  ==========  ====================\n      776201  mpihelp_addmul_1\n         100  one_getpid\n           3  [irq]\n";
        let calls = parse_report_calls(text).unwrap();
        assert_eq!(calls["mpihelp_addmul_1"], 776201);
        assert_eq!(calls["one_getpid"], 100);
        assert_eq!(calls["[irq]"], 3);
        assert_eq!(calls.len(), 3);
    }

    #[test]
    fn anchors_patterns() {
        assert_eq!(exactly("schedule"), "^schedule$");
        assert_eq!(exactly("[irq]"), "^\\[irq\\]$");
        assert_eq!(
            exactly("el0_svc_common.constprop.0"),
            "^el0_svc_common\\.constprop\\.0$"
        );
    }

    #[test]
    fn parses_call_trees_with_timestamps() {
        let text = "#   TID        TIMESTAMP       FUNCTION\n [     1]        0.099190045 | __cpu_up() {\n [     2]        0.000000155 | secondary_start_kernel() {\n [     1]        0.099190072 |   psci_0_2_cpu_on();\n [     1]        0.099195113 | } /* __cpu_up */\n [     2]        1.000000155 |   do_idle() {\n\nuftrace stopped tracing with remaining functions\n[1] secondary_start_kernel\n";
        let calls = parse_calls(text).unwrap();
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "__cpu_up",
                "secondary_start_kernel",
                "psci_0_2_cpu_on",
                "do_idle"
            ]
        );
        assert_eq!(calls[0].time, Some(99_190_045));
        assert_eq!(calls[3].time, Some(1_000_000_155));
        assert_eq!(calls[0].end_time, Some(99_195_113));
        assert_eq!(calls[2].end_time, None);
        assert_eq!(calls[0].children, vec![2]);
        assert!(calls[0].returned && calls[2].returned);
        assert!(!calls[1].returned && !calls[3].returned);
        assert_eq!(call_path(&calls, 3), ["secondary_start_kernel", "do_idle"]);
        assert_eq!(descendants(&calls, 1), vec![3]);
        // Durations instead of timestamps: no time.
        let calls = parse_calls("   0.387 us [     1] | } /* x */\n            [     1] | y() {\n")
            .unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].time, None);
        assert!(parse_calls(" [1] 0.000000001 | a() {\n [1] 0.000000002 | } /* b */\n").is_err());
    }
}
