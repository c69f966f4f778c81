//! `qemu-uftrace export` on real recordings, decoded with Perfetto's official schema (PyPI's
//! `perfetto` and `protobuf`, in the venv scripts/install-deps.sh makes; missing, they fail
//! the test, never skip it) by `perfetto_check.py`, and held against uftrace's own reading of
//! the same directory: per-function slice counts equal `uftrace report`'s calls, each track's
//! slices nest (open at the end only where the task's records leave calls open), its times
//! never go back, tracks carry the tasks' names and pids, and the clock is declared.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use qemu_uftrace_tests::replay::report_calls;
use serde_json::Value;

/// Fails the test, saying what to run, when the venv's Python lacks `perfetto` or
/// `protobuf` (`perfetto_check.py` would fail on its import).
fn python_ready() {
    let py = qemu_uftrace_tests::cache_dir().join("venv/bin/python");
    let ok = Command::new(&py)
        .args([
            "-c",
            "import perfetto.protos.perfetto.trace.perfetto_trace_pb2, google.protobuf",
        ])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import perfetto's schema (PyPI perfetto, protobuf): run scripts/install-deps.sh",
        py.display()
    );
}

/// The decoded trace (see perfetto_check.py for its fields), without the count of
/// compressed bundles its packets came in (the same trace, however compressed).
fn decode(trace: &Path) -> Value {
    decode_counting(trace).0
}

/// The decoded trace and the number of `compressed_packets` bundles that held its packets.
fn decode_counting(trace: &Path) -> (Value, u64) {
    python_ready();
    let mut v: Value = common::perfetto_decoded(trace);
    let bundles = v
        .as_object_mut()
        .and_then(|o| o.remove("bundles"))
        .and_then(|b| b.as_u64())
        .expect("perfetto_check.py counts bundles");
    (v, bundles)
}

use common::export;

/// Exports `dir` to `<dir>.pftrace`, which must succeed, and decodes it: its packets come in
/// compressed bundles (the default).
fn export_ok(dir: &Path) -> Value {
    let out = export(dir, &[]);
    assert!(
        out.status.success(),
        "export failed: {}",
        common::stderr(&out)
    );
    let trace = qemu_uftrace::export::default_output(dir, false);
    let (t, bundles) = decode_counting(&trace);
    assert!(bundles > 0, "{} has no compressed bundle", trace.display());
    t
}

/// Calls (and scheduler gaps) each task leaves open at its end, by uftrace's rule (a return
/// closes the innermost call; one with none open is dropped), from the `.dat` files.
fn open_at_end(dir: &Path) -> BTreeMap<u64, usize> {
    let mut open = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(tid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".dat"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let bytes = std::fs::read(&path).unwrap();
        // Open calls, and scheduler gaps (uftrace's linux:schedule: a sched-out event, 200002
        // or 200007, until the sched-in, 200001), innermost last.
        let mut stack: Vec<bool> = Vec::new();
        for r in bytes.chunks_exact(16) {
            let word = u64::from_le_bytes(r[8..].try_into().unwrap());
            let gap = |s: &Vec<bool>| s.last() == Some(&true);
            match (word & 3, word >> 16) {
                (0, _) => stack.push(false),
                (1, _) => {
                    while gap(&stack) {
                        stack.pop();
                    }
                    stack.pop();
                }
                (3, 200_002 | 200_007) => stack.push(true),
                (3, 200_001) if gap(&stack) => {
                    stack.pop();
                }
                _ => {}
            }
        }
        open.insert(tid, stack.len());
    }
    open
}

/// The calls (and scheduler gaps) `uftrace replay` lists as left open at the end, per task
/// (0 for a task it does not list): uftrace's own rule, exec calls included (an exec
/// empties a task's stack), which [`open_at_end`] leaves out. (`-D 1`: replay lists the
/// same stacks whatever it shows, and a boot's whole replay is 850 MB of text.)
fn open_at_end_by_replay(dir: &Path) -> BTreeMap<u64, usize> {
    use std::io::BufRead;
    let mut child = Command::new("uftrace")
        .args(["replay", "--no-pager", "-D", "1", "-d"])
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run uftrace replay");
    let mut open: BTreeMap<u64, usize> = open_at_end(dir).keys().map(|&t| (t, 0)).collect();
    let mut tail = false;
    let mut task = None;
    let mut line = Vec::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    while out.read_until(b'\n', &mut line).unwrap() > 0 {
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if text.starts_with("uftrace stopped tracing with remaining functions") {
            tail = true;
        } else if let (true, Some(tid)) = (tail, text.strip_prefix("task: ")) {
            task = tid.trim().parse::<u64>().ok();
        } else if let (true, Some(tid)) = (tail && text.starts_with('['), task) {
            *open.entry(tid).or_default() += 1;
        }
        line.clear();
    }
    assert!(child.wait().unwrap().success(), "uftrace replay failed");
    open
}

fn threads(t: &Value) -> &Vec<Value> {
    t["threads"].as_array().expect("threads")
}

fn thread(t: &Value, tid: u64) -> &Value {
    threads(t)
        .iter()
        .find(|th| th["tid"].as_u64() == Some(tid))
        .unwrap_or_else(|| panic!("no thread track for tid {tid}"))
}

fn process_name(t: &Value, pid: u64) -> String {
    t["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pid))
        .and_then(|p| p["name"].as_str())
        .unwrap_or_else(|| panic!("no process track for pid {pid}: {}", t["processes"]))
        .to_string()
}

/// Slices per name over the threads `tids` (all when empty).
fn slice_counts(t: &Value, tids: &[u64]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for th in threads(t) {
        if !tids.is_empty() && !tids.contains(&th["tid"].as_u64().unwrap()) {
            continue;
        }
        for (name, n) in th["slices"].as_object().unwrap() {
            *counts.entry(name.clone()).or_default() += n.as_u64().unwrap();
        }
    }
    counts
}

/// What every export must satisfy against its directory: a clean decode, one thread track
/// per task, slices nested and open at the end only as the records leave them, per-function
/// counts equal to `uftrace report`'s calls, and the clock `plugin.stats` names declared.
fn check_against_uftrace(dir: &Path, t: &Value) {
    check_against_uftrace_open(dir, t, open_at_end(dir));
}

/// [`check_against_uftrace`], with the slices each task leaves `open` at the end.
fn check_against_uftrace_open(dir: &Path, t: &Value, open: BTreeMap<u64, usize>) {
    assert_eq!(t["problems"], Value::Array(vec![]), "{}", t["problems"]);
    assert_eq!(threads(t).len(), open.len(), "one thread track per task");
    for th in threads(t) {
        let tid = th["tid"].as_u64().unwrap();
        let left = th["open_at_end"].as_array().unwrap().len();
        assert_eq!(
            Some(&left),
            open.get(&tid),
            "tid {tid}: slices left open {}",
            th["open_at_end"]
        );
    }
    let report = report_calls(dir, &[]).expect("uftrace report");
    let slices = slice_counts(t, &[]);
    assert_eq!(
        slices, report,
        "slices per function vs uftrace report's calls"
    );
    let clock = qemu_uftrace_tests::plugin_stat(dir, "clock");
    let declared = t["attributes"]["clock"].as_str().unwrap_or_default();
    let named = t["named_tracks"].as_array().unwrap().iter().any(|n| {
        n["name"]
            .as_str()
            .unwrap_or("")
            .contains("guest instructions")
    });
    if clock == "insn" {
        assert!(declared.starts_with("insn:"), "clock attribute: {declared}");
        assert!(
            named,
            "no track naming the instruction clock: {}",
            t["named_tracks"]
        );
    } else {
        assert!(declared.starts_with("ns:"), "clock attribute: {declared}");
        assert!(!named);
    }
    // Every task's sequence has its own incremental clock, in ns units.
    let clocks = t["clocks"].as_array().unwrap();
    assert_eq!(clocks.len(), open.len(), "{clocks:?}");
    assert!(clocks
        .iter()
        .all(|c| c["incremental"] == Value::Bool(true) && c["unit_multiplier_ns"] == 1));
}

/// The bare-metal oracle guest: one vCPU's firmware process and task, every call a slice,
/// the instruction clock declared; `-o -`, `--gzip`, a `.gz` name and `--no-compress` give
/// the same trace.
#[test]
fn bare_metal_guest_exports_as_uftrace_reads_it() {
    let elf = qemu_uftrace_tests::guest_elf("nested", qemu_uftrace_tests::Variant::Oracle)
        .expect("build guests");
    let (_tmp, dir, _) = common::record_argv(&qemu_uftrace_tests::qemu_args(&elf), &[]);
    let t = export_ok(&dir);
    check_against_uftrace(&dir, &t);
    assert_eq!(threads(&t).len(), 1);
    let th = thread(&t, 1);
    assert_eq!(th["name"], "cpu0");
    assert_eq!(th["pid"], 1);
    assert_eq!(process_name(&t, 1), "cpu0");
    assert_eq!(
        slice_counts(&t, &[])["nest_leaf"],
        report_calls(&dir, &[]).unwrap()["nest_leaf"]
    );

    // Standard output, gzip by option and by name, plain packets: the same trace.
    let default = std::fs::read(qemu_uftrace::export::default_output(&dir, false)).unwrap();
    let out = export(&dir, &["-o", "-"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(out.stdout, default, "-o - writes the same trace");
    let raw = dir.with_extension("raw.pftrace");
    let out = export(&dir, &["--no-compress", "-o", &raw.to_string_lossy()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    // One task is no plural.
    assert!(
        common::stderr(&out).contains(" (1 task, "),
        "{}",
        common::stderr(&out)
    );
    assert_eq!(decode_counting(&raw), (t.clone(), 0));
    let plain = std::fs::read(&raw).unwrap();
    assert!(
        default.len() * 5 < plain.len(),
        "compressed {} bytes, plain {}",
        default.len(),
        plain.len()
    );
    let gz = dir.with_extension("trace.gz");
    let out = export(&dir, &["-o", &gz.to_string_lossy()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let bytes = std::fs::read(&gz).unwrap();
    assert_eq!(bytes[..2], [0x1f, 0x8b], "a .gz name compresses");
    assert!(bytes.len() < plain.len());
    assert_eq!(decode(&gz), t);
    let out = export(&dir, &["--gzip"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let gz = qemu_uftrace::export::default_output(&dir, true);
    assert_eq!(decode(&gz), t);
    assert_eq!(thread(&t, 1)["srclines"], serde_json::json!({}));

    // --srcline: each function's slices carry the location `uftrace replay --srcline` shows.
    let with_lines = dir.with_extension("lines.pftrace");
    let out = export(&dir, &["--srcline", "-o", &with_lines.to_string_lossy()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let t2 = decode(&with_lines);
    assert_eq!(slice_counts(&t2, &[]), slice_counts(&t, &[]));
    let lines = thread(&t2, 1)["srclines"].as_object().unwrap().clone();
    let replay = qemu_uftrace_tests::replay::uftrace(&[
        "replay",
        "--no-pager",
        "--srcline",
        "-d",
        &dir.to_string_lossy(),
    ])
    .unwrap();
    for name in ["main", "nest_level1", "nest_leaf"] {
        let loc = lines[name]
            .as_str()
            .unwrap_or_else(|| panic!("no line for {name}: {lines:?}"));
        assert!(
            replay
                .lines()
                .any(|l| l.contains(&format!("{name}(")) && l.contains(loc)),
            "{name} at {loc} is not what replay --srcline shows:\n{replay}"
        );
    }
}

/// A copy of `dir` (the test then damages the copy).
fn copy_dir(dir: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let e = entry.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Damaged and cut traces: what is readable is exported, the cut is marked where it is
/// (an instant at the task's last readable record) and named on stderr, and the exit
/// status says the trace is not whole; a recording `record` marked INCOMPLETE stays marked.
#[test]
fn truncated_and_incomplete_traces_are_marked() {
    let elf = qemu_uftrace_tests::guest_elf("nested", qemu_uftrace_tests::Variant::Oracle)
        .expect("build guests");
    let (tmp, dir, _) = common::record_argv(&qemu_uftrace_tests::qemu_args(&elf), &[]);
    let whole = std::fs::read(dir.join("1.dat")).unwrap();
    let records = whole.len() / 16;
    assert!(records > 40, "{records} records");

    // Cut in the middle of a record, halfway through: calls are open at the cut.
    let cut = tmp.path().join("cut.data");
    copy_dir(&dir, &cut);
    let keep = records / 2;
    std::fs::write(cut.join("1.dat"), &whole[..keep * 16 + 7]).unwrap();
    let out = export(&cut, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(
        err.contains("warning: damaged trace: 1.dat: ends in a partial record (7 of 16 bytes)"),
        "{err}"
    );
    let t = decode(&qemu_uftrace::export::default_output(&cut, false));
    assert_eq!(t["problems"], Value::Array(vec![]));
    let th = thread(&t, 1);
    let marks = th["instants"].as_array().unwrap();
    let last = marks.last().expect("a cut marker");
    assert_eq!(last["name"], "cut: unreadable data");
    assert_eq!(
        last["ts"], th["last_ts"],
        "the marker sits at the last readable record"
    );
    std::fs::write(cut.join("1.dat"), &whole[..keep * 16]).unwrap();
    let open = open_at_end(&cut)[&1];
    assert!(open > 0, "the cut leaves calls open");
    assert_eq!(th["open_at_end"].as_array().unwrap().len(), open);
    let begun: u64 = slice_counts(&t, &[]).values().sum();
    let entries = whole[..keep * 16]
        .chunks_exact(16)
        .filter(|r| r[8] & 3 == 0)
        .count() as u64;
    assert_eq!(
        begun, entries,
        "every whole record before the cut is exported"
    );

    // A record that is not one (bad magic): the records before it are kept.
    let mut bad = whole.clone();
    bad[keep * 16 + 8] ^= 0x08;
    std::fs::write(cut.join("1.dat"), &bad).unwrap();
    let out = export(&cut, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains(&format!("1.dat: record {keep} (byte {})", keep * 16)),
        "{}",
        common::stderr(&out)
    );
    let t = decode(&qemu_uftrace::export::default_output(&cut, false));
    assert_eq!(slice_counts(&t, &[]).values().sum::<u64>(), entries);

    // A trace record marked INCOMPLETE: exported whole, marked at each task's end and in
    // the trace's attributes.
    std::fs::write(cut.join("1.dat"), &whole).unwrap();
    std::fs::write(
        cut.join("note.txt"),
        "INCOMPLETE TRACE: QEMU was killed by signal 9;\nthe last records of each task are missing.\n",
    )
    .unwrap();
    let out = export(&cut, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("INCOMPLETE TRACE: QEMU was killed by signal 9"));
    let t = decode(&qemu_uftrace::export::default_output(&cut, false));
    let last = thread(&t, 1)["instants"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["name"], "INCOMPLETE TRACE");
    assert_eq!(
        last["notes"]["why"],
        "INCOMPLETE TRACE: QEMU was killed by signal 9"
    );
    assert_eq!(
        t["attributes"]["incomplete"],
        "INCOMPLETE TRACE: QEMU was killed by signal 9"
    );
}

/// `--start-at`: the mark after the frames written open where writing began (the user
/// event `qemu:opened`) is one instant on the task's track, which counts the calls as
/// uftrace does (the open frames' included).
#[test]
fn the_start_s_mark_is_an_instant() {
    let elf = qemu_uftrace_tests::guest_elf("nested", qemu_uftrace_tests::Variant::Natural)
        .expect("build guests");
    let (_tmp, dir, _) = common::record_argv(
        &qemu_uftrace_tests::qemu_args(&elf),
        &["--start-at", "nest_level3"],
    );
    let t = export_ok(&dir);
    check_against_uftrace(&dir, &t);
    let th = thread(&t, 1);
    let marks: Vec<u64> = (instants(th).into_iter())
        .filter(|(_, name)| *name == "qemu:opened")
        .map(|(ts, _)| ts)
        .collect();
    assert_eq!(marks.len(), 1, "{}", th["instants"]);
    assert_eq!(
        slice_counts(&t, &[1])["nest_level2"],
        report_calls(&dir, &[]).unwrap()["nest_level2"]
    );
}

/// `record --then export` leaves `<DIR>.pftrace` beside the trace; a wall-clock trace is
/// declared in nanoseconds.
#[test]
fn record_then_export_writes_the_perfetto_trace() {
    let elf = qemu_uftrace_tests::hello_elf().expect("build guests");
    let (_tmp, dir, _) = common::record_argv(
        &qemu_uftrace_tests::qemu_args(&elf),
        &["--clock", "wall", "--then", "export"],
    );
    assert_eq!(qemu_uftrace_tests::plugin_stat(&dir, "clock"), "wall");
    let t = decode(&qemu_uftrace::export::default_output(&dir, false));
    check_against_uftrace(&dir, &t);
    assert!(t["attributes"]["clock"]
        .as_str()
        .unwrap()
        .starts_with("ns:"));
}

/// The user-mode threaded program: one process (the program, by its pid), a thread track
/// per thread by its thread id, each with its exact thread_step slices.
#[test]
fn user_threads_export_as_threads_of_one_process() {
    let elf = qemu_uftrace_tests::user_guest_elf("threads.elf").expect("build");
    let (_tmp, dir, stdout) =
        common::user::record_ok(&qemu_uftrace_tests::user_qemu(), &[&elf.to_string_lossy()]);
    let (main_tid, steps) = common::user::check_thread_tasks(&dir, &stdout);
    let t = export_ok(&dir);
    check_against_uftrace(&dir, &t);
    assert_eq!(process_name(&t, u64::from(main_tid)), "threads.elf");
    for (&tid, &n) in &steps {
        let th = thread(&t, u64::from(tid));
        assert_eq!(th["pid"].as_u64(), Some(u64::from(main_tid)));
        assert_eq!(th["name"], "threads.elf");
        assert_eq!(th["slices"]["thread_step"].as_u64(), Some(n), "tid {tid}");
        let report = report_calls(&dir, &["--tid", &tid.to_string()]).unwrap();
        assert_eq!(slice_counts(&t, &[u64::from(tid)]), report, "tid {tid}");
    }
}

/// Linux booting the initramfs guest: the kernel's idle contexts in one process, each
/// task a process of its own by its PID (init, its forked child, kthreadd), system calls
/// as `[svc]` slices with the handlers beneath, every function counted as uftrace does.
#[test]
fn initramfs_boot_exports_processes_and_syscalls() {
    use qemu_uftrace_tests::linux_guest::{
        init_child_pid, initramfs_boot_args_on, initramfs_guest, INIT_OK,
    };
    let (_, init_elf) = initramfs_guest().expect("the guest builds");
    let qemu = qemu_uftrace_tests::cached("qemu-10.2.2/bin/qemu-system-aarch64");
    let argv = initramfs_boot_args_on(&qemu.to_string_lossy(), 1).expect("the guest builds");
    let vmlinux = qemu_uftrace_tests::cached("kernel-dbg/vmlinux");
    let symbols = [vmlinux.to_string_lossy(), init_elf.to_string_lossy()];
    // The boot record_kernel.rs reads too, shared; export writes beside its own links to it.
    let shared =
        common::shared::record(&argv, &["--symbols", &symbols[0], "--symbols", &symbols[1]]);
    let ((_tmp, dir), console) = (shared.linked_copy(), shared.console);
    assert!(console.contains(INIT_OK), "{console}");
    let child = u64::from(init_child_pid(&console).expect("child PID"));
    let t = export_ok(&dir);
    check_against_uftrace(&dir, &t);
    assert_eq!(process_name(&t, 1), "init");
    assert_eq!(process_name(&t, child), "init");
    assert_eq!(process_name(&t, 2), "kthreadd");
    assert!(threads(&t).iter().any(|th| th["name"]
        .as_str()
        .is_some_and(|n| n.starts_with("swapper"))
        || process_name(&t, th["pid"].as_u64().unwrap()) == "kernel"));
    let init: Vec<u64> = threads(&t)
        .iter()
        .filter(|th| th["pid"].as_u64() == Some(1))
        .map(|th| th["tid"].as_u64().unwrap())
        .collect();
    let calls = slice_counts(&t, &init);
    assert!(calls.get("[svc]").copied().unwrap_or(0) > 5, "{calls:?}");
    assert!(calls.contains_key("invoke_syscall"), "{calls:?}");
}

/// A Linux guest's threads under their process (issue 22, issue 26 item 5): the process
/// guest (tests/guests/procs) on Debian's arm64 kernel, recorded with its DWARF vmlinux, so
/// the plugin reads each task's thread group at its switches. Each worker's thread is a
/// thread track of the worker's process, which is named after its program, and
/// `plugin.tasks` says the same.
#[test]
fn linux_threads_export_under_their_process() {
    use qemu_uftrace_tests::procs_guest::{procs_boot_args_on, procs_count};
    let qemu = qemu_uftrace_tests::cached("qemu-10.2.2/bin/qemu-system-aarch64");
    let argv = procs_boot_args_on(&qemu.to_string_lossy()).expect("the process guest builds");
    let vmlinux = qemu_uftrace_tests::execlog::debian_vmlinux();
    // The boot guest_procs.rs reads too, shared; export writes beside its own links to it.
    let shared = common::shared::record(&argv, &["--symbols", &vmlinux.to_string_lossy()]);
    let ((_tmp, dir), console) = (shared.linked_copy(), shared.console);
    assert!(console.contains("INIT: ok"), "{console}");
    // `WORKER a: pid P thread T sum S`, as each worker prints it.
    let workers: Vec<(u64, u64)> = console
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split("WORKER ").nth(1)?.split_whitespace().collect();
            let at = |key: &str| -> Option<u64> {
                words
                    .get(words.iter().position(|w| *w == key)? + 1)?
                    .parse()
                    .ok()
            };
            Some((at("pid")?, at("thread")?))
        })
        .collect();
    assert_eq!(workers.len(), 2, "{console}");
    let guest = qemu_uftrace::guest_tasks::read(&dir);
    let t = export_ok(&dir);
    // Each worker execs (`execve` at depth 0): uftrace empties the task's stack at that
    // entry, so the export shows it as an instant. The exec's return to the new program
    // closes the old program's frames; uftrace's report then counts `execve` as one call,
    // as it counts a failed exec's, and so does the export (one slice).
    check_against_uftrace_open(&dir, &t, open_at_end_by_replay(&dir));
    for &(pid, _) in &workers {
        let th = thread(&t, pid);
        assert_eq!(
            th["slices"].get("execve").and_then(|n| n.as_u64()),
            Some(1),
            "thread {pid}: {}",
            th["slices"]
        );
        let execs = th["instants"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["name"] == "execve")
            .count();
        assert_eq!(execs, 1, "thread {pid}: {}", th["instants"]);
    }
    for &(pid, tid) in &workers {
        assert_ne!(pid, tid);
        let g = guest
            .iter()
            .find(|g| u64::from(g.tid) == tid)
            .expect("thread in plugin.tasks");
        assert_eq!(u64::from(g.tgid), pid, "plugin.tasks: {g:?}");
        let th = thread(&t, tid);
        assert_eq!(th["pid"].as_u64(), Some(pid), "thread {tid}: {th}");
        assert_eq!(thread(&t, pid)["pid"].as_u64(), Some(pid));
        assert_eq!(process_name(&t, pid), "worker");
        assert_eq!(
            slice_counts(&t, &[tid]).get("thread_step").copied(),
            Some(procs_count("THREAD_STEPS")),
            "thread {tid}"
        );
        assert!(
            threads(&t)
                .iter()
                .all(|other| other["tid"] == th["tid"] || other["pid"].as_u64() != Some(tid)),
            "no thread of a process {tid}"
        );
    }
    // Kernel threads are processes of their own, as Linux makes them.
    assert_eq!(process_name(&t, 2), "kthreadd");
}

/// Task 7's records `recs` (time, kind, depth, address) in `dir`, a uftrace.data directory,
/// with one session whose program `/bin/prog` at [`HAND_BASE`] holds `names`, 0x10 bytes
/// each.
fn write_hand_made(
    dir: &Path,
    recs: &[(u64, qemu_uftrace_format::record::RecordType, u32, u64)],
    names: &[&str],
) {
    use qemu_uftrace_format::record::encode;
    use qemu_uftrace_format::{info::Info, map, symfile, task};
    let base = HAND_BASE;
    let bytes: Vec<u8> = recs
        .iter()
        .flat_map(|&(t, k, d, a)| encode(t, k, d, a))
        .collect();
    std::fs::write(dir.join("7.dat"), bytes).unwrap();
    let mut w = Vec::new();
    Info {
        exename: "prog".into(),
        tids: vec![7],
        ..Default::default()
    }
    .write_to(&mut w)
    .unwrap();
    std::fs::write(dir.join("info"), w).unwrap();
    let sid = task::session_id(0xabc);
    let mut w = Vec::new();
    task::write_task_txt(
        &mut w,
        &sid,
        &[task::Task {
            tid: 7,
            pid: 7,
            name: "prog".into(),
        }],
    )
    .unwrap();
    std::fs::write(dir.join("task.txt"), w).unwrap();
    let mut w = Vec::new();
    map::write_map(
        &mut w,
        vec![map::MapEntry {
            start: base,
            end: base + 0x100,
            path: "/bin/prog".into(),
        }],
    )
    .unwrap();
    std::fs::write(dir.join(format!("sid-{sid}.map")), w).unwrap();
    let syms: Vec<symfile::SymLine> = names
        .iter()
        .enumerate()
        .map(|(i, n)| symfile::SymLine {
            offset: i as u64 * 0x10,
            size: 0x10,
            name: n.to_string(),
            global: true,
        })
        .collect();
    let mut w = Vec::new();
    symfile::write_sym(&mut w, &syms, 0x100).unwrap();
    std::fs::write(dir.join("prog.sym"), w).unwrap();
}

/// Where [`write_hand_made`] puts its program.
const HAND_BASE: u64 = 0x40_0000;

/// A hand-made directory in uftrace's format (no QEMU): a scheduler gap inside `main`
/// (uftrace's `linux:schedule`), a guessed stack (LOST 0), a LOST count; its export counts
/// every function as `uftrace report` does, the gap included.
#[test]
fn hand_made_trace_with_scheduler_gap_and_lost_records() {
    use qemu_uftrace_format::record::RecordType::*;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("uftrace.data");
    std::fs::create_dir(&dir).unwrap();
    let base = HAND_BASE;
    let recs = [
        (100, Entry, 0, base),
        (110, Event, 1, 200_002),
        (150, Event, 1, 200_001),
        (160, Entry, 1, base + 0x10),
        (170, Exit, 1, base + 0x10),
        (175, Lost, 1, 0),
        (180, Entry, 1, base + 0x20),
        (190, Exit, 1, base + 0x20),
        (200, Exit, 0, base),
        (210, Lost, 0, 17),
    ];
    write_hand_made(&dir, &recs, &["main", "f", "g"]);

    let t = export_hand_made(&dir, "linux:schedule");
    let th = thread(&t, 7);
    assert_eq!(th["name"], "prog");
    assert_eq!(process_name(&t, 7), "prog");
    assert_eq!(th["open_at_end"], Value::Array(vec![]));
    let marks = instants(th);
    assert_eq!(
        marks,
        [(175, "guessed: stack rebuilt"), (210, "LOST records")]
    );
    assert_eq!(th["instants"][1]["notes"]["lost"], "17");
    // No plugin.stats, no clock named: nanoseconds.
    assert!(t["attributes"]["clock"]
        .as_str()
        .unwrap()
        .starts_with("ns:"));
}

/// Exports the hand-made trace `dir`, which must succeed with no problems, `uftrace report`
/// counting `once` once and the export counting every function as the report does.
fn export_hand_made(dir: &Path, once: &str) -> Value {
    let out = export(dir, &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let t = decode(&qemu_uftrace::export::default_output(dir, false));
    assert_eq!(t["problems"], Value::Array(vec![]), "{}", t["problems"]);
    let report = report_calls(dir, &[]).expect("uftrace report");
    assert_eq!(report.get(once), Some(&1), "{report:?}");
    assert_eq!(slice_counts(&t, &[]), report);
    t
}

/// A thread track's instants as (time, name).
fn instants(th: &Value) -> Vec<(u64, &str)> {
    th["instants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["ts"].as_u64().unwrap(), i["name"].as_str().unwrap()))
        .collect()
}

/// An exec call, as uftrace reads one (`fstack.c`'s fixups): it empties the task's stack
/// and is never counted unless it returns (a failed exec, counted at its return); a frame
/// open under it is counted only if its return comes. The export shows each exec call as
/// an instant, ends the slices open there and counts every function as `report` does.
#[test]
fn hand_made_exec_calls_count_as_uftrace_counts_them() {
    use qemu_uftrace_format::record::RecordType::*;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("uftrace.data");
    std::fs::create_dir(&dir).unwrap();
    let (main, execve, g) = (HAND_BASE, HAND_BASE + 0x10, HAND_BASE + 0x20);
    let recs = [
        (100, Entry, 0, main),
        // A failed exec: it returns.
        (110, Entry, 1, execve),
        (120, Exit, 1, execve),
        // One that succeeds: the new image runs under it, and main's return comes after.
        (130, Entry, 1, execve),
        (140, Entry, 2, g),
        (150, Exit, 2, g),
        (160, Exit, 0, main),
    ];
    write_hand_made(&dir, &recs, &["main", "execve", "g"]);
    let t = export_hand_made(&dir, "execve");
    let th = thread(&t, 7);
    assert_eq!(th["open_at_end"], Value::Array(vec![]));
    let marks = instants(th);
    assert_eq!(marks, [(110, "execve"), (130, "execve")]);
}

/// Bad input is one line naming the problem and the way out.
#[test]
fn bad_input_is_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = export(&tmp.path().join("missing"), &[]);
    assert_eq!(out.status.code(), Some(1));
    let line = common::single_error(&out);
    assert!(line.contains("no trace directory at"), "{line}");
    let out = export(tmp.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    let line = common::single_error(&out);
    assert!(line.contains("holds no <tid>.dat file"), "{line}");
    std::fs::write(tmp.path().join("1.dat"), [0u8; 16]).unwrap();
    let out = export(tmp.path(), &[]);
    let line = common::single_error(&out);
    assert!(
        line.contains("task.txt") && line.contains("not a complete uftrace.data"),
        "{line}"
    );
    // Nothing half-written is left behind.
    assert!(!qemu_uftrace::export::default_output(tmp.path(), false).exists());
    let out = export(tmp.path(), &["--no-compress", "-o", "t.pftrace.gz"]);
    assert_eq!(out.status.code(), Some(2));
    let line = common::single_error(&out);
    assert!(line.contains("--no-compress"), "{line}");
}

/// The checker itself (its bundles are parsed whole, in C, for speed): a bundle of framed
/// packets decodes, and a bundle inside a bundle, a field that is not `Trace.packet` and a
/// packet running past the bundle's end each fail with their own line, as Perfetto's trace
/// processor refuses them.
#[test]
fn the_checker_refuses_what_perfetto_refuses_in_a_bundle() {
    use std::io::Write;
    python_ready();
    let zlib = |data: &[u8]| {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    };
    // `TracePacket { compressed_packets (field 50, bytes): zlib(inner) }`, framed as
    // `Trace.packet`; lengths below 128 (one varint byte).
    let bundle = |inner: &[u8]| {
        let z = zlib(inner);
        let mut packet = vec![0x92, 0x03, z.len() as u8];
        packet.extend(&z);
        let mut framed = vec![0x0A, packet.len() as u8];
        framed.extend(packet);
        framed
    };
    let tmp = tempfile::tempdir().unwrap();
    let check = |name: &str, trace: Vec<u8>| {
        let path = tmp.path().join(name);
        std::fs::write(&path, trace).unwrap();
        common::perfetto_check(&path)
    };
    // Two empty packets, then a sequence id (field 10: 0x50, varint 1).
    let good = check("good", bundle(&[0x0A, 0x00, 0x0A, 0x02, 0x50, 0x01]));
    assert!(good.status.success(), "{}", common::stderr(&good));
    let v: Value = serde_json::from_slice(&good.stdout).unwrap();
    assert_eq!(
        (v["packets"].as_u64(), v["bundles"].as_u64()),
        (Some(2), Some(1))
    );
    for (name, inner, says) in [
        (
            "nested",
            bundle(&[0x0A, 0x00]),
            "compressed_packets inside compressed_packets",
        ),
        (
            "other-field",
            vec![0x0A, 0x00, 0x12, 0x00],
            "compressed_packets: a field that is not Trace.packet",
        ),
        (
            "past-the-end",
            vec![0x0A, 0x05, 0x00],
            "compressed_packets: not framed packets",
        ),
    ] {
        let out = check(name, bundle(&inner));
        let err = common::stderr(&out);
        assert!(!out.status.success(), "{name}: decoded");
        assert!(err.contains(says), "{name}: {err}");
    }
}
