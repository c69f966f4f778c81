//! Reading uftrace's own output back: `uftrace replay` text into call/return events, so that
//! tests assert on what a user sees.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// Runs `uftrace ARGS…` and returns its standard output; fails on a non-zero exit or on a
/// warning or error line, which would mean uftrace read the data wrongly.
pub fn uftrace(args: &[&str]) -> Result<String> {
    let out = Command::new("uftrace")
        .args(args)
        .output()
        .context("running uftrace (run scripts/install-deps.sh)")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!(
            "uftrace {} failed ({}): {stderr}",
            args.join(" "),
            out.status
        );
    }
    if stderr.contains("WARN") || stderr.contains("ERROR") {
        bail!("uftrace {} complained: {stderr}", args.join(" "));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One line of a replay: the task id and the function part after `|`.
fn replay_body(line: &str) -> Option<(u32, &str)> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
