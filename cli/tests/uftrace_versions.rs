//! Every uftrace version users read our traces with — Debian's 0.13 (bookworm), 0.17 (trixie)
//! and 0.19 (forky, sid), which scripts/install-deps.sh keeps — reads them alike: the same
//! replay tree after a longjmp, the same report counts, and for plain traces (threads, fork and
//! exec, system mode) the same replay, report, info, graph and dump, without a warning.

mod common;

use common::user::{only_task, record_ok, Target, AARCH64, RISCV64, X86_64};
use qemu_uftrace_tests::replay::{parse_report_calls, replay_body, uftrace_at, uftrace_versions};
use qemu_uftrace_tests::{cached, make_guests, qemu_args_on, user_guest_elf, user_qemu};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `make shape` of tests/guests/user for `target` (record_user_shape.rs builds the same).
fn shape_guest(target: &Target, name: &str) -> PathBuf {
    let sub = format!("shape-{}", target.cross.trim_end_matches('-'));
    let args = [format!("CROSS={}", target.cross), "shape".to_string()];
    make_guests("user", &sub, &args)
        .unwrap_or_else(|e| panic!("make shape CROSS={}: {e:#}", target.cross))
        .join(name)
}

/// Task `tid`'s replay lines from `main() {` to `} /* main */`, of the functions in `keep`
/// only, each indented two spaces a level below main as uftrace draws it.
fn main_tree(text: &str, tid: u32, keep: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut main_indent = None;
    for line in text.lines() {
        let Some((t, body)) = replay_body(line) else {
            continue;
        };
        let Some((_, after_bar)) = line.split_once('|') else {
            continue;
        };
        if t != tid {
            continue;
        }
        let indent = after_bar.len() - body.len();
        if body == "main() {" {
            main_indent = Some(indent);
        }
        let Some(base) = main_indent else {
            continue;
        };
        let name = (body.strip_suffix("() {"))
            .or_else(|| body.strip_suffix("();"))
            .or_else(|| body.strip_prefix("} /* ")?.strip_suffix(" */"))
            .unwrap_or(body);
        if keep.contains(&name) {
            let level = indent.checked_sub(base).unwrap_or_else(|| {
                panic!("{line:?} is drawn left of main:\n{text}");
            });
            out.push(format!("{}{body}", " ".repeat(level)));
        }
        if body == "} /* main */" {
            break;
        }
    }
    out
}

/// tests/guests/user/ljnoreturn.c at -O2 (longjmp out of a noreturn function, landing after
/// main's setjmp): every version draws main's calls after the landing at main's callees'
/// depth, and counts the same calls.
fn check_longjmp(target: &Target) {
    let elf = shape_guest(target, "ljnoreturn.elf");
    let (_tmp, dir, stdout) = record_ok(&cached(target.qemu), &[&elf.to_string_lossy()]);
    assert!(stdout.contains("r=7"), "{stdout}");
    let tid = only_task(&dir);
    let d = dir.to_string_lossy();
    const OWN: &[&str] = &["main", "_setjmp", "work", "fail", "longjmp", "after"];
    // libmcount's shape, which uftrace's replay expects (utils/fstack.c: at longjmp's entry
    // its display goes back to setjmp's callees' depth): no exit for the frames longjmp
    // skips (fail, longjmp), one for setjmp at the landing.
    let want = [
        "main() {",
        "  _setjmp() {",
        "  } /* _setjmp */",
        "  work();",
        "  fail() {",
        "    longjmp() {",
        "  } /* _setjmp */",
        "  after();",
        "  after();",
        "} /* main */",
    ];
    // uftrace counts a call at its exit: fail and longjmp, which have none (as under
    // libmcount), are not counted; setjmp returns twice.
    let want_calls: BTreeMap<String, u64> =
        [("main", 1), ("_setjmp", 2), ("work", 1), ("after", 2)]
            .into_iter()
            .map(|(n, c)| (n.to_string(), c))
            .collect();
    for u in uftrace_versions().expect("the uftrace versions") {
        let label = format!("{} under uftrace {}", target.cross, u.version);
        let text = uftrace_at(&u.program, &["replay", "--no-pager", "-d", &d])
            .unwrap_or_else(|e| panic!("{label}: {e:#}"));
        assert_eq!(main_tree(&text, tid, OWN), want, "{label}:\n{text}");
        let report = uftrace_at(
            &u.program,
            &[
                "report",
                "--no-pager",
                "-f",
                "call",
                "-F",
                "^main$",
                "-d",
                &d,
            ],
        )
        .unwrap_or_else(|e| panic!("{label}: {e:#}"));
        let calls = parse_report_calls(&report).expect("report text");
        let own: BTreeMap<String, u64> = (calls.into_iter())
            .filter(|(n, _)| OWN.contains(&n.as_str()))
            .collect();
        assert_eq!(own, want_calls, "{label}:\n{report}");
    }
}

#[test]
fn longjmp_replays_alike_in_every_uftrace_version_aarch64() {
    check_longjmp(&AARCH64);
}

#[test]
fn longjmp_replays_alike_in_every_uftrace_version_riscv64() {
    check_longjmp(&RISCV64);
}

#[test]
fn longjmp_replays_alike_in_every_uftrace_version_x86_64() {
    check_longjmp(&X86_64);
}

/// `text` without what differs between versions only in layout: the width of the task id
/// column (0.13 pads it to 6 characters, 0.17 and later to 7), in replay's and dump's heads.
fn normalized(text: &str) -> String {
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::new();
    for line in text.lines() {
        // replay: `DURATION [ TID] | tree`; dump: `TIME TID: [entry] …`; headers: `# …`.
        let split = (line.find(" | ").map(|i| i + 1))
            .or_else(|| line.find(": [").filter(|_| !line.starts_with('#')));
        match split {
            Some(i) => {
                out.push_str(&squeeze(&line[..i]).replace("[ ", "["));
                out.push_str(&line[i..]);
            }
            None if line.starts_with('#') => out.push_str(&squeeze(line)),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Every version reads the trace `dir` the same: replay, report, info, graph of `function`
/// and dump give the same text as the first (the system's uftrace), with no warning.
fn check_alike(dir: &Path, function: &str, label: &str) {
    let d = dir.to_string_lossy();
    let commands: [&[&str]; 5] = [
        &["replay", "--no-pager", "-d", &d],
        &["report", "--no-pager", "-d", &d],
        &["info", "-d", &d],
        &["graph", "--no-pager", "-d", &d, function],
        &["dump", "--no-pager", "-d", &d],
    ];
    let versions = uftrace_versions().expect("the uftrace versions");
    assert_eq!(versions.len(), 3, "{versions:?}");
    for args in commands {
        let outputs: Vec<(String, String)> = (versions.iter())
            .map(|u| {
                let text = uftrace_at(&u.program, args)
                    .unwrap_or_else(|e| panic!("{label}, uftrace {}: {e:#}", u.version));
                (u.version.clone(), normalized(&text))
            })
            .collect();
        let (first_version, first) = &outputs[0];
        assert!(
            first.lines().count() > 3,
            "{label}: uftrace {first_version} {}:\n{first}",
            args[0]
        );
        for (version, text) in &outputs[1..] {
            assert!(
                text == first,
                "{label}: uftrace {version} {} differs from {first_version}'s:\n{text}\n---\n{first}",
                args[0]
            );
        }
    }
}

/// A dynamic program with three threads (tests/guests/user/threads-dyn.elf).
#[test]
fn threads_read_alike_in_every_uftrace_version() {
    let elf = user_guest_elf("threads-dyn.elf").expect("build");
    let (_tmp, dir, _) = record_ok(
        &user_qemu(),
        &["-L", "/usr/aarch64-linux-gnu", &elf.to_string_lossy()],
    );
    check_alike(&dir, "thread_main", "threads-dyn.elf");
}

/// fork, then exec in the child (tests/guests/user/forkexec.elf): two processes, sessions.
#[test]
fn fork_and_exec_read_alike_in_every_uftrace_version() {
    let fork = user_guest_elf("forkexec.elf").expect("build");
    let exec = user_guest_elf("execd.elf").expect("build");
    let (_tmp, dir, _) = record_ok(
        &user_qemu(),
        &[&fork.to_string_lossy(), &exec.to_string_lossy()],
    );
    check_alike(&dir, "main", "forkexec.elf");
}

/// System mode: a bare-metal aarch64 guest (tests/guests/nested.c).
#[test]
fn system_mode_reads_alike_in_every_uftrace_version() {
    let elf = qemu_uftrace_tests::guest_elf("nested", qemu_uftrace_tests::Variant::Natural)
        .expect("build the guests");
    let qemu = cached("qemu-10.2.2/bin/qemu-system-aarch64");
    let argv = qemu_args_on(&qemu.to_string_lossy(), &elf);
    let (_tmp, dir, _) = common::record_argv(&argv, &[]);
    check_alike(&dir, "main", "nested.elf");
}
