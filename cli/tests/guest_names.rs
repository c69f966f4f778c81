//! What an unprivileged guest user names cannot break uftrace or the user's terminal (issue
//! 32, items 1, 9, 10): the arm64 process guest's `/init` (tests/guests/procs/deepinit.c)
//! runs `/worker` from 17 directories of 255-byte names deep (a 4.4 KB path; the last
//! directory's name holds ESC and CR), with ESC and CR in its tasks' names. The trace is
//! published, every line of every file uftrace reads fits the buffer uftrace reads it into,
//! no file and no line `record` printed holds a control character, the cut path is marked
//! and said, and every uftrace version names the deep worker's functions.
//!
//! Run: `cargo test -p qemu-uftrace --test guest_names`.

mod common;

use qemu_uftrace_tests::execlog::debian_vmlinux;
use qemu_uftrace_tests::procs_guest::{deep_boot_args_on, procs_count, procs_guest};
use qemu_uftrace_tests::replay::{parse_report_calls, uftrace_at, uftrace_versions};

/// uftrace reads map and `info` lines with `fgets(buf, PATH_MAX)`: 4095 bytes and the NUL.
const UFTRACE_LINE: usize = 4095;

/// The lines of `bytes` (each with its newline) that are longer than uftrace reads whole,
/// or hold a control character other than the newline.
fn bad_lines(bytes: &[u8]) -> Vec<String> {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .filter(|l| {
            l.len() > UFTRACE_LINE
                || l.strip_suffix(b"\n")
                    .unwrap_or(l)
                    .iter()
                    .any(|&b| b < 0x20 || b == 0x7f)
        })
        .map(|l| {
            format!(
                "{} bytes: {:?}",
                l.len(),
                String::from_utf8_lossy(&l[..l.len().min(80)])
            )
        })
        .collect()
}

#[test]
fn deep_paths_and_escaping_names_are_bounded_and_shown_safely() {
    // Any QEMU with plugins names the processes: the one on PATH (10.0).
    let qemu = qemu_uftrace_tests::QEMU;
    let argv = deep_boot_args_on(qemu).expect("the deep-path guest builds");
    // The deep copy of /worker is not in the archive: it is found by its file name.
    let worker = procs_guest().expect("the process guest builds").worker;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace.data");
    let vmlinux = debian_vmlinux();
    let options = [
        "--symbols".as_ref(),
        vmlinux.as_os_str(),
        "--symbols".as_ref(),
        worker.as_os_str(),
    ];
    let out = common::record_into(&dir, &options, &argv);
    let console = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "record failed ({}):\n{stderr}\nconsole:\n{console}",
        out.status
    );
    assert!(
        console.contains("DEEP: worker")
            && console.contains("status 0")
            && console.contains("INIT: ok"),
        "the guest did not finish:\n{console}"
    );

    // Nothing record printed drives the terminal; the cut is said.
    assert!(
        !out.stderr
            .iter()
            .any(|&b| b == 0x1b || b == b'\r' || b == 0x07),
        "record printed a control character:\n{stderr:?}"
    );
    assert!(
        stderr.contains("path was cut"),
        "the cut path was not said:\n{stderr}"
    );
    // The deep copy is named from a --symbols file by its file name alone: said too.
    assert!(
        stderr.contains("/worker is named from "),
        "the match by file name was not said:\n{stderr}"
    );

    // Every file uftrace reads: lines within its buffer, no control character.
    let mut deep_lines = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the trace is published") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).expect("read trace file");
        let text: &[u8] = match name.as_str() {
            // A 40-byte binary header, then text.
            "info" => &bytes[40..],
            "task.txt" | "note.txt" => &bytes,
            n if n.starts_with("sid-") || n.ends_with(".sym") || n.ends_with(".dbg") => &bytes,
            _ => continue,
        };
        let bad = bad_lines(text);
        assert!(bad.is_empty(), "{name}: {bad:#?}");
        if name == "task.txt" {
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                text.contains("x1b[2J"),
                "the guest's comm is not shown:\n{text}"
            );
        }
        if name.starts_with("sid-") {
            let text = String::from_utf8(bytes).expect("a map is UTF-8");
            deep_lines.extend(
                text.lines()
                    .filter(|l| l.contains("/\u{2026}"))
                    .map(str::to_string),
            );
        }
    }
    // The deep file's line: cut behind the mark, its escaped control characters and its
    // file name kept.
    assert!(!deep_lines.is_empty(), "no map line names the deep worker");
    for l in &deep_lines {
        let path = l.split_whitespace().nth(5).expect("a map path");
        assert!(path.starts_with("/\u{2026}"), "not marked as cut: {l:.120}");
        assert!(path.contains("esc\\\\x1b[31m\\\\x0d"), "{l:.120}");
        assert!(
            path.rsplit('/').next().unwrap().starts_with("worker"),
            "{l}"
        );
    }

    // Every uftrace version reads the trace without a complaint and names the deep
    // worker's own functions, each call counted. uftrace reads every map line whatever it
    // is asked, and the worker's records are in its own task: a filtered replay of that
    // task reads the deep mapping's records without the boot's text or the kernel's
    // records (six whole passes and the boot took this test 253 s in a suite run).
    let worker_pid: u32 = console
        .split("DEEP: worker ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no worker pid on the console:\n{console}"));
    let tid = worker_pid.to_string();
    let d = dir.to_string_lossy();
    for u in uftrace_versions().expect("the uftrace versions") {
        let replay = uftrace_at(
            &u.program,
            &[
                "replay",
                "--no-pager",
                "-F",
                "^worker_step$",
                "-D",
                "1",
                "--tid",
                &tid,
                "-d",
                &d,
            ],
        )
        .unwrap_or_else(|e| panic!("uftrace {}: {e:#}", u.version));
        assert!(
            replay.contains("worker_step"),
            "uftrace {} does not name the deep worker:\n{replay}",
            u.version
        );
        let report = uftrace_at(
            &u.program,
            &[
                "report",
                "--no-pager",
                "-f",
                "call",
                "--tid",
                &tid,
                "-d",
                &d,
            ],
        )
        .unwrap_or_else(|e| panic!("uftrace {}: {e:#}", u.version));
        let calls = parse_report_calls(&report).expect("report parses");
        assert_eq!(
            calls.get("worker_step").copied(),
            Some(procs_count("WORKER_STEPS")),
            "uftrace {}:\n{report}",
            u.version
        );
        let info = uftrace_at(&u.program, &["info", "-d", &d])
            .unwrap_or_else(|e| panic!("uftrace {}: {e:#}", u.version));
        assert!(
            !info.contains('\x1b'),
            "uftrace {} info:\n{info:?}",
            u.version
        );
    }
}
