//! Debian's systemd VM (issue 36: `scripts/debian-vm.sh`, `tests/src/debian_vm.rs`) booted
//! under `record --sysroot ROOT` from its own kernel and initramfs-tools initrd to its
//! power-off, on a virtio disk: systemd as PID 1, systemd-udevd and systemd-journald named
//! from the root, each with functions of its own libraries (systemd's programs are stripped:
//! `libsystemd-shared`/`libsystemd-core` name them by their exported symbols) and libc's
//! beneath, no function they enter inside their files left unnamed (the rest of a stripped
//! file's named by address), PID 1's initramfs programs (klibc's, no symbols at all) named
//! by address too, their frames closed when PID 1 execs the next; every file found inside
//! the root (the initramfs's klibc `/usr/bin/mount` never names the disk's); uftrace 0.13,
//! 0.17 and 0.19 read the trace,
//! and `export` (decoded with Perfetto's own protos) the `--keep-last` one.
//!
//! The whole boot makes ~77 M calls and a 2.5 GiB trace: the tests aim with `-t 10us` (calls
//! of 10,000 guest instructions and more; ~17 MiB), one boot a QEMU.
//!
//! The boot on 10.0 names from a hostile copy of the root (issue 32): the files the guest maps
//! (libc, libsystemd-shared, systemd, udevadm) are absolute links to host paths holding other
//! ELF files (two real `/usr/bin` programs, two decoys of the test's watched with inotify),
//! while inside the root those paths hold the right files: each is named from the root (its
//! `.sym` the root's file's, the host's differs), no decoy is opened. That boot also keeps
//! only its last 4 MiB (`--keep-last`): the boot's end, PID 1 running systemd-shutdown.
//! Another amd64 boot starts writing at journald's `main` (`--start-at PATH:FUNC`).
//!
//! Run: `cargo test -p qemu-uftrace --test debian_vm`.

mod common;

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use qemu_uftrace_tests::debian_vm::{
    debian_vm_arm64_boot_args_on, debian_vm_arm64_root, debian_vm_boot_args_on, debian_vm_root,
    DEBIAN_VM_POWER_OFF,
};
use qemu_uftrace_tests::replay::{descendants, parse_calls, uftrace, uftrace_versions, Call};
use qemu_uftrace_tests::x86_64_guests::system_qemus_x86_64;
use qemu_uftrace_tests::{system_qemus, SystemQemu};

/// The QEMU labelled `label` among `qemus`.
fn qemu(qemus: Vec<SystemQemu>, label: &str) -> String {
    qemus
        .into_iter()
        .find(|q| q.label == label)
        .map(|q| q.program)
        .unwrap_or_else(|| panic!("no QEMU {label}"))
}

/// The amd64 boot on the QEMU labelled `label`.
fn amd64_boot(label: &str) -> Vec<String> {
    debian_vm_boot_args_on(&qemu(system_qemus_x86_64(), label))
}

/// The boot `argv` recorded on the QEMU labelled `label`, naming from `root` with `extra`
/// options besides: the trace and record's stderr.
fn record_boot(
    label: &str,
    argv: &[String],
    tmp: &Path,
    root: &Path,
    extra: &[&str],
) -> (PathBuf, String) {
    let dir = tmp.join("trace.data");
    let mut options: Vec<&OsStr> = vec!["-t".as_ref(), "10us".as_ref()];
    options.extend(extra.iter().map(OsStr::new));
    options.extend(["--sysroot".as_ref(), root.as_os_str()]);
    let out = common::record_into(&dir, &options, argv);
    let console = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let tail: Vec<&str> = console.lines().rev().take(30).collect();
    assert!(
        out.status.success() && console.contains(DEBIAN_VM_POWER_OFF),
        "record failed ({}) on QEMU {label}:\n{stderr}\nconsole's end:\n{}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    // multi-user.target was reached: the unit it starts ran `systemctl poweroff` (a process
    // of the trace). systemd's own "Reached target" line is no proof either way: in one run
    // on a loaded host it wrote no status on the console after the serial getty started
    // there, before multi-user.target.
    let systemctl = sessions(&dir)
        .iter()
        .any(|(_, _, exe, _)| exe.rsplit('/').next() == Some("systemctl"));
    assert!(
        systemctl,
        "the VM never reached multi-user.target on QEMU {label} (its unit's systemctl is not \
         among the trace's processes):\n{console}"
    );
    (dir, stderr)
}

/// `task.txt`'s sessions: `(pid, sid, exename, timestamp)`.
fn sessions(dir: &Path) -> Vec<(u32, String, String, String)> {
    let text = std::fs::read_to_string(dir.join("task.txt")).expect("task.txt");
    text.lines()
        .filter(|l| l.starts_with("SESS "))
        .filter_map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
            };
            Some((
                field("pid")?.parse().ok()?,
                field("sid")?.to_string(),
                field("exename")?.trim_matches('"').to_string(),
                field("timestamp")?.to_string(),
            ))
        })
        .collect()
}

/// The libraries an ELF file names (readelf's `NEEDED` entries), e.g. `libc.so.6`.
fn needed_of(path: &Path) -> Vec<String> {
    let out = std::process::Command::new("readelf")
        .arg("-dW")
        .arg(path)
        .output()
        .expect("run readelf");
    assert!(out.status.success(), "readelf -d {}", path.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<String> = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
        .collect();
    assert!(!needed.is_empty(), "{}: no NEEDED entry", path.display());
    needed
}

/// `plugin.procs`'s lines of process `pid` (its forking, exec, mappings and exit), for a
/// failure's message: the boot is not deterministic, and a failure is not rerun at will.
fn process_events(dir: &Path, pid: u32) -> String {
    let text = std::fs::read_to_string(dir.join("plugin.procs")).unwrap_or_default();
    let tgid = format!("\ttgid={pid}\t");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| format!("{l}\t").contains(&tgid))
        .collect();
    if lines.is_empty() {
        return format!("none in {}/plugin.procs", dir.display());
    }
    lines.join("\n")
}

/// The file paths of a session's map (the guest's paths, `#N` module suffixes kept).
fn map_files(dir: &Path, sid: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("sid-{sid}.map")))
        .expect("the session's map")
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5).map(str::to_string))
        .collect()
}

/// A session's map lines: `(start, end, path)`.
fn map_ranges(dir: &Path, sid: &str) -> Vec<(u64, u64, String)> {
    std::fs::read_to_string(dir.join(format!("sid-{sid}.map")))
        .expect("the session's map")
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (start, end) = words.next()?.split_once('-')?;
            let path = words.nth(4)?;
            Some((
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
                path.to_string(),
            ))
        })
        .collect()
}

/// The calls shown as a bare address (`<403387>`) inside one of `ranges` (a map's lines),
/// each as `<ADDR> in FILE`.
fn bare_inside(calls: &[Call], ranges: &[(u64, u64, String)]) -> Vec<String> {
    calls
        .iter()
        .filter_map(|c| {
            let a = c.name.strip_prefix('<')?.strip_suffix('>')?;
            let a = u64::from_str_radix(a, 16).ok()?;
            let (_, _, file) = ranges.iter().find(|(s, e, _)| (*s..*e).contains(&a))?;
            Some(format!("{} in {file}", c.name))
        })
        .collect()
}

/// The function names of every `.sym` file whose module name starts with one of `stems`.
fn names_in(dir: &Path, stems: &[&str]) -> HashSet<String> {
    let mut out = HashSet::new();
    for entry in std::fs::read_dir(dir).expect("trace dir") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.ends_with(".sym") && stems.iter().any(|s| name.starts_with(s))) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a .sym file");
        out.extend(
            text.lines()
                .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string)),
        );
    }
    out
}

/// Everything the boot's trace must show, named from `root`.
/// `triple` is the root's multiarch directory (`x86_64-linux-gnu`). `whole`: every record
/// of the boot was kept (not only `--keep-last`'s window at its end).
fn check_boot(dir: &Path, stderr: &str, label: &str, root: &Path, triple: &str, whole: bool) {
    let mut failed = Vec::new();
    let root = std::fs::canonicalize(root).expect("the VM's root");
    let sessions = sessions(dir);
    // Once PID 1 runs systemd, the root disk's programs (the initramfs ran a udevd of its
    // own before).
    let booted = |s: &(u32, String, String, String)| s.0 == 1 && s.2 == "systemd";
    let since: f64 = match sessions.iter().find(|s| booted(s)) {
        Some(s) => s.3.parse().expect("a timestamp"),
        None => panic!("PID 1 never ran systemd: {sessions:?}\nrecord said:\n{stderr}"),
    };
    // The process, from then on, one of whose sessions is named `comm` (as the guest named
    // it) and its session named `exe` (its program's file: systemd-udevd is a link to
    // udevadm).
    let pid_of = |comm: &str, exe: &str| {
        sessions
            .iter()
            .filter(|(pid, _, e, t)| {
                e == exe
                    && t.parse::<f64>().is_ok_and(|t| t >= since)
                    && sessions.iter().any(|s| s.0 == *pid && s.2 == comm)
            })
            .map(|(pid, sid, ..)| (*pid, sid.clone()))
            .next()
    };
    // The kernel's physical-address copy (its first instructions) is in the first session's
    // map alone: no process runs there, and a copy in each process's map made every
    // uftrace pass match its symbols once more per session (twice a pass's time here).
    let has_copy = |sid: &str| map_files(dir, sid).iter().any(|f| f.ends_with(".phys"));
    let first = &sessions[0].1;
    assert!(has_copy(first), "no physical-address copy of the kernel");
    let copied: Vec<&String> = (sessions.iter())
        .map(|s| &s.1)
        .filter(|sid| *sid != first && has_copy(sid))
        .collect();
    assert!(
        copied.is_empty(),
        "{} process sessions hold the kernel's physical copy: {copied:?}",
        copied.len()
    );
    let shared = names_in(dir, &["libsystemd-shared-", "libsystemd-core-"]);
    let libc = names_in(dir, &["libc.so.6"]);
    // Names both define (a libsystemd export of a libc name) prove nothing either way.
    let own: HashSet<&String> = shared.difference(&libc).collect();
    let libc_only: HashSet<&String> = libc.difference(&shared).collect();
    assert!(
        !own.is_empty() && !libc_only.is_empty(),
        "no symbols of libsystemd or libc in the trace"
    );
    for (exe, comm, program) in [
        ("systemd", "systemd", "/usr/lib/systemd/systemd"),
        ("systemd-udevd", "systemd-udevd", "/usr/bin/udevadm"),
        (
            "systemd-journald",
            "systemd-journald",
            "/usr/lib/systemd/systemd-journald",
        ),
    ] {
        let file = program.rsplit('/').next().unwrap_or(program);
        let Some((pid, sid)) = pid_of(comm, file) else {
            failed.push(format!(
                "no process named {comm} running {program} ({sessions:?})"
            ));
            continue;
        };
        if exe == "systemd" && pid != 1 {
            failed.push(format!("systemd is PID {pid}, not 1"));
        }
        // Its program, found in the root (Debian strips it: placed, its functions named by
        // address, and said so). The file found is the one the guest's path resolves to
        // inside the root (a link's target there).
        let files = map_files(dir, &sid);
        // Said in the one line of the files with no symbol table, by directory.
        let said = stderr.lines().any(|l| {
            l.contains("no symbol table: ")
                && l.contains("named by their address")
                && l.contains(file)
        });
        if !files.iter().any(|f| f.split('#').next() == Some(program)) && !said {
            failed.push(format!(
                "{exe} (pid {pid}): {program} neither placed nor said to be found in the root"
            ));
        }
        // Its libraries, at the guest's paths: libc, and libsystemd-shared where the program
        // links it (readelf's DT_NEEDED of the cached VM's file, never the root given, whose
        // links a hostile root aims at decoys: udevadm does not, so a session of udev's
        // only had it from the systemd files it forked from, which one was picked).
        let pristine = match triple {
            "aarch64-linux-gnu" => debian_vm_arm64_root(),
            _ => debian_vm_root(),
        };
        let needed = needed_of(&pristine.join(program.trim_start_matches('/')));
        for want in [
            format!("/usr/lib/{triple}/libc.so.6"),
            format!("/usr/lib/{triple}/systemd/libsystemd-shared-252.so"),
        ]
        .into_iter()
        .filter(|w| needed.iter().any(|n| w.ends_with(&format!("/{n}"))))
        {
            if !files
                .iter()
                .any(|f| f.split('#').next() == Some(want.as_str()))
            {
                failed.push(format!(
                    "{exe} (pid {pid}): no {want} in its map ({files:?}); its sessions {:?}, \
                     its process events:\n{}",
                    sessions.iter().filter(|s| s.0 == pid).collect::<Vec<_>>(),
                    process_events(dir, pid)
                ));
            }
        }
        // A function of systemd's own libraries with one of libc's beneath it.
        let d = dir.to_string_lossy();
        let text = uftrace(&["replay", "--no-pager", "-d", &d, "--tid", &pid.to_string()])
            .expect("uftrace replay");
        let calls = parse_calls(&text).expect("replay parses");
        let nested = calls.iter().enumerate().find_map(|(i, c)| {
            own.contains(&c.name).then(|| {
                descendants(&calls, i)
                    .into_iter()
                    .find(|&j| libc_only.contains(&calls[j].name))
                    .map(|j| (c.name.clone(), calls[j].name.clone()))
            })?
        });
        // In `--keep-last`'s window at the boot's end a service may be only waiting: what
        // it calls there (and what `-t 10us` keeps of it) moves with the host's speed, and
        // udevd's window once held 4,202 calls with no such pair. There its libraries'
        // names, from the root, are what must show.
        let named = || {
            calls
                .iter()
                .any(|c| own.contains(&c.name) || libc_only.contains(&c.name))
        };
        // Every function it entered inside one of its files is named: a stripped file's
        // by its address in the file (`udevadm+0x3a40`), never shown as a bare address.
        let bare = bare_inside(&calls, &map_ranges(dir, &sid));
        if !bare.is_empty() {
            failed.push(format!(
                "{exe} (pid {pid}): unnamed functions inside its files: {bare:?}"
            ));
        }
        // Before it runs systemd, PID 1 is the initramfs's: klibc's shell and run-init,
        // and klibc's library, none with symbols or unwind tables. Each is placed by its
        // entry point and what the boot entered in it is named by address, never bare.
        if exe == "systemd" && whole {
            let klibc: Vec<(u64, u64, String)> = (sessions.iter())
                .filter(|s| s.0 == 1 && s.3.parse::<f64>().is_ok_and(|t| t < since))
                .flat_map(|s| map_ranges(dir, &s.1))
                .filter(|(.., f)| f.contains("/klibc") || f.ends_with("/run-init"))
                .collect();
            let bare = bare_inside(&calls, &klibc);
            let by_address = |stem: &str| {
                (calls.iter()).any(|c| c.name.starts_with(stem) && c.name.contains("+0x"))
            };
            let (run_init, library) = (by_address("run-init+0x"), by_address("klibc-"));
            if !klibc.iter().any(|(.., f)| f.ends_with("/run-init"))
                || !run_init
                || !library
                || !bare.is_empty()
            {
                failed.push(format!(
                    "PID 1's initramfs programs: placed {klibc:x?}, run-init named {run_init}, \
                     klibc's library named {library}, unnamed inside them: {bare:?}"
                ));
            }
        }
        let own_program = program.rsplit('/').next().unwrap_or(program);
        if whole
            && !calls
                .iter()
                .any(|c| c.name.starts_with(&format!("{own_program}+0x")))
        {
            failed.push(format!(
                "{exe} (pid {pid}): none of {program}'s own functions named by address"
            ));
        }
        match (nested, whole) {
            (Some(_), _) => {}
            (None, true) => failed.push(format!(
                "{exe} (pid {pid}): no libsystemd function with a libc one beneath ({} calls)",
                calls.len()
            )),
            (None, false) if named() => {}
            (None, false) => failed.push(format!(
                "{exe} (pid {pid}): no function of libsystemd or libc in --keep-last's \
                 window ({} calls)",
                calls.len()
            )),
        }
    }
    // Every file was found, inside the root or the -initrd archive: the host files record
    // names are the root's, or said to be the archive's copies (gone with the trace written).
    let outside: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("guest processes:"))
        .filter(|l| {
            l.contains("no file found")
                || l.split(" (")
                    .skip(1)
                    .any(|p| p.starts_with('/') && !p.starts_with(&*root.to_string_lossy()))
        })
        .collect();
    if !outside.is_empty() {
        failed.push(format!("files not found inside the root: {outside:?}"));
    }
    assert!(
        failed.is_empty(),
        "QEMU {label}: {} expectation(s) failed:\n- {}\nrecord said:\n{stderr}",
        failed.len(),
        failed.join("\n- ")
    );
    // Each uftrace reads it: PID 1's report names libsystemd's functions.
    let d = dir.to_string_lossy();
    for u in uftrace_versions().expect("the uftrace versions") {
        let out =
            qemu_uftrace_tests::passes::output(std::process::Command::new(&u.program).args([
                "report",
                "--no-pager",
                "-d",
                &d,
                "--tid",
                "1",
            ]))
            .expect("run uftrace");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && text.lines().any(|l| l
                    .split_whitespace()
                    .last()
                    .is_some_and(|n| own.contains(&n.to_string()))),
            "uftrace {} report ({}): {}{}",
            u.version,
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn systemd_boot_named_from_the_root_on_10_2_2() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = debian_vm_root();
    let (dir, stderr) = record_boot("10.2.2", &amd64_boot("10.2.2"), tmp.path(), &root, &[]);
    check_boot(&dir, &stderr, "10.2.2", &root, "x86_64-linux-gnu", true);
}

/// The boot on 10.0 names from a hostile copy of the root (issues 32 and 36), and keeps the
/// last 4 MiB of records only (`--keep-last`: the boot's end, systemd-shutdown as PID 1).
#[test]
fn systemd_boot_named_from_a_hostile_root_on_10_0() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let hostile = HostileRoot::new(tmp.path());
    let (dir, stderr) = record_boot(
        "10.0",
        &amd64_boot("10.0"),
        tmp.path(),
        &hostile.root,
        &["--keep-last", "4M"],
    );
    check_boot(
        &dir,
        &stderr,
        "10.0",
        &hostile.root,
        "x86_64-linux-gnu",
        false,
    );
    hostile.check(&dir, &stderr);
    check_keep_last(&dir, &stderr, 4 << 20);
    check_export(&dir);
}

/// `export` reads the trace: Perfetto's protos decode it without a problem, and PID 1's
/// threads' slices include functions named from the root's libraries and by address in its
/// files.
fn check_export(dir: &Path) {
    let out = common::export(dir, &[]);
    assert!(
        out.status.success(),
        "export: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = common::perfetto_decoded(&dir.with_extension("data.pftrace"));
    assert_eq!(
        v["problems"],
        serde_json::json!([]),
        "the export's problems"
    );
    let libs = names_in(
        dir,
        &["libsystemd-shared-", "libsystemd-core-", "libc.so.6"],
    );
    let slices: Vec<&str> = (v["threads"].as_array().expect("threads").iter())
        .filter(|t| t["pid"] == 1)
        .flat_map(|t| t["slices"].as_object().into_iter().flatten())
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(
        slices.iter().any(|n| libs.contains(*n)),
        "no slice of PID 1 named from its libraries: {slices:?}"
    );
    assert!(
        slices.iter().any(|n| n.contains("+0x")),
        "no slice of PID 1 named by address: {slices:?}"
    );
}

/// The arm64 VM (`scripts/debian-vm-arm64.sh`) on 10.2.2: the same checks as amd64's.
#[test]
fn systemd_boot_named_from_the_root_on_arm64() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = debian_vm_arm64_root();
    let argv = debian_vm_arm64_boot_args_on(&qemu(system_qemus(), "10.2.2"));
    let (dir, stderr) = record_boot("10.2.2 (arm64)", &argv, tmp.path(), &root, &[]);
    check_boot(
        &dir,
        &stderr,
        "10.2.2 (arm64)",
        &root,
        "aarch64-linux-gnu",
        true,
    );
}

/// `--start-at PATH:FUNC` on the amd64 boot: nothing is written before journald's `main`
/// first runs. The program is named through the root's `/lib` link (`/usr/lib` inside the
/// root), and is stripped: its `main` is found from its `_start`. Its replay starts with the
/// frames open then (`qemu:opened`), and every record before that moment, in every task, is
/// such an open frame's entry.
#[test]
fn systemd_boot_started_at_journald_s_main() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = debian_vm_root();
    let func = "/lib/systemd/systemd-journald:main";
    let (dir, stderr) = record_boot(
        "10.2.2",
        &amd64_boot("10.2.2"),
        tmp.path(),
        &root,
        &["--start-at", func],
    );
    assert!(
        stderr.contains(&format!(
            "started writing at the first entry into {func} (0x"
        )),
        "record did not say where it started:\n{stderr}"
    );
    let journald = sessions(&dir)
        .into_iter()
        .find(|s| s.2 == "systemd-journald")
        .unwrap_or_else(|| panic!("no systemd-journald among {:?}", sessions(&dir)));
    let d = dir.to_string_lossy();
    let tid = journald.0.to_string();
    let text = uftrace(&[
        "replay",
        "--no-pager",
        "-d",
        &d,
        "-f",
        "time",
        "--tid",
        &tid,
    ])
    .expect("uftrace replay");
    // TIMESTAMP | FUNCTION, the function column as replay indents it.
    let rows: Vec<(f64, &str)> = (text.lines())
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (time, func) = l.split_once('|')?;
            Some((time.trim().parse().ok()?, func.trim()))
        })
        .collect();
    let head: Vec<&str> = rows.iter().take(4).map(|r| r.1).collect();
    assert_eq!(
        head,
        [
            "__libc_start_main() {",
            "__libc_start_call_main() {",
            "/* qemu:opened */",
            "main() {"
        ],
        "journald's replay does not start at its main:\n{}",
        text.lines().take(12).collect::<Vec<_>>().join("\n")
    );
    let start = rows[3].0;
    // Every task: before the start, only entries of frames open at it.
    let all = uftrace(&["replay", "--no-pager", "-d", &d, "-f", "time,tid"]).expect("replay");
    let early: Vec<&str> = (all.lines())
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            let Some((head, func)) = l.split_once('|') else {
                return false;
            };
            let time: Option<f64> = head.split(']').nth(1).and_then(|t| t.trim().parse().ok());
            time.is_some_and(|t| t < start) && !func.trim_end().ends_with('{')
        })
        .take(5)
        .collect();
    assert!(
        early.is_empty(),
        "records before the start ({start}) that are no open frame's entry: {early:#?}"
    );
    assert!(
        all.lines().count() > 10_000,
        "the window holds {} lines",
        all.lines().count()
    );
}

/// `PATH:FUNC` given wrong: one line each, before QEMU starts, naming what is wrong and the
/// way out; user mode refuses it (its libraries' functions are named alone).
#[test]
fn path_func_mistakes_are_one_line_each() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = debian_vm_root();
    let root = root.to_str().expect("a UTF-8 cache path");
    let argv = amd64_boot("10.2.2");
    let journald = "/lib/systemd/systemd-journald";
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--start-at".into(), format!("{journald}:main")],
            "no file /lib/systemd/systemd-journald in the -initrd archive (its regular files); \
             give the guest's root file system with --sysroot DIR",
        ),
        (
            vec![
                "--sysroot".into(),
                root.into(),
                "--stop-at".into(),
                "/lib/systemd/systemd-nope:main".into(),
            ],
            "no file /lib/systemd/systemd-nope under --sysroot",
        ),
        (
            vec![
                "--sysroot".into(),
                root.into(),
                "--stop-at".into(),
                format!("{journald}:mian"),
            ],
            "did you mean /lib/systemd/systemd-journald:main,",
        ),
        // `..` stops at the root: the root's /etc/passwd, which is no ELF file.
        (
            vec![
                "--sysroot".into(),
                root.into(),
                "--start-at".into(),
                "/../../../etc/passwd:main".into(),
            ],
            "not an ELF file",
        ),
    ];
    for (options, said) in &cases {
        let out = common::record_into(&tmp.path().join("t.data"), options, &argv);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(2) && err.lines().count() == 1 && err.contains(said),
            "{options:?}: {} (wanted one line with {said:?}):\n{err}",
            out.status
        );
    }
    // User mode.
    let qemu = qemu_uftrace_tests::user_qemu();
    let prog = qemu_uftrace_tests::user_guest_elf("nested.elf").expect("the user-mode guest");
    let argv = vec![qemu.display().to_string(), prog.display().to_string()];
    let out = common::record_into(
        &tmp.path().join("u.data"),
        &["--start-at", "/nested.elf:main"],
        &argv,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2)
            && err.lines().count() == 1
            && err.contains("PATH:FUNC names a function of a guest file in system mode"),
        "user mode: {}:\n{err}",
        out.status
    );
}

/// `--keep-last SIZE` kept the boot's last SIZE of records (and the frames open at its start),
/// dropping the rest, and said so.
fn check_keep_last(dir: &Path, stderr: &str, size: u64) {
    let said = stderr
        .lines()
        .find(|l| l.contains("--keep-last 4.00 MiB: kept the last records of the run, after the "))
        .unwrap_or_else(|| panic!("record did not say what --keep-last kept:\n{stderr}"));
    let frames: u64 = said
        .split("after the ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no frame count in {said:?}"));
    let outside: u64 = stderr
        .lines()
        .find_map(|l| {
            let (before, _) = l.split_once(" outside the window")?;
            before.rsplit(' ').next()?.replace(',', "").parse().ok()
        })
        .unwrap_or_else(|| {
            panic!("record did not say how many records fell outside the window:\n{stderr}")
        });
    // The whole boot at -t 10us writes ~17 MiB: the window dropped most of it.
    assert!(
        outside > 100_000,
        "only {outside} records outside the window:\n{stderr}"
    );
    let data: u64 = std::fs::read_dir(dir)
        .expect("trace dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "dat"))
        .map(|p| std::fs::metadata(&p).expect("a .dat file").len())
        .sum();
    // Each open frame is an entry (16 bytes) written before the window, with its
    // `qemu:opened` event (16 bytes) after.
    assert!(
        data <= size + frames * 32 && data >= size / 2,
        "{data} bytes of records for --keep-last {size} ({frames} frames open at its start)"
    );
    // The window is the boot's end: PID 1 runs systemd-shutdown there, and replay shows it.
    let d = dir.to_string_lossy();
    let text = uftrace(&["replay", "--no-pager", "-d", &d, "--tid", "1"]).expect("uftrace replay");
    let calls = parse_calls(&text).expect("replay parses");
    assert!(
        !calls.is_empty()
            && sessions(dir)
                .iter()
                .any(|s| s.0 == 1 && s.2 == "systemd-shutdown"),
        "PID 1's replay in the window: {} calls",
        calls.len()
    );
    // systemd-shutdown's loader starts at depth 0: the return from PID 1's exec closed
    // systemd's frames, and its system call's, on 10.0 too, which shows no exception entry
    // to mark where they end (`Engine::exception_return_unseen_down`). They stayed open
    // beneath the new program's before.
    let loader: Vec<Option<&str>> = (calls.iter())
        .filter(|c| c.name == "_dl_start")
        .map(|c| c.parent.map(|p| calls[p].name.as_str()))
        .collect();
    assert!(
        !loader.is_empty() && loader.iter().all(Option::is_none),
        "PID 1's _dl_start in the window, with the calls open beneath each: {loader:?}"
    );
}

/// A copy of the VM's root (hard links: no file of the cache is written, only names in the
/// copy are unlinked and made) in which the files the guest maps are absolute links to
/// paths that exist on the host as other ELF files, while inside the root those paths hold
/// the right ones: the links of a debootstrap'd root that a lookup following them on the
/// host would take to the host's files (issue 32).
struct HostileRoot {
    root: PathBuf,
    /// Guest path, the link's target (a host path), the file the root has at the guest path.
    links: Vec<(&'static str, PathBuf, PathBuf)>,
    /// Watches the targets the test made on the host (its decoys): any open is seen.
    watch: rustix::fd::OwnedFd,
    decoys: Vec<PathBuf>,
}

/// Guest files made links in the hostile root: two to real host programs (`/usr/bin/…`,
/// not in the root), two to decoys the test puts in its temp dir (copies of host ELF files),
/// watched with inotify.
const REAL_TARGETS: &[&str] = &["/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/udevadm"];
const DECOY_TARGETS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so",
    "/usr/lib/systemd/systemd",
];

fn build_id(path: &Path) -> Option<Vec<u8>> {
    use object::Object;
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&data[..]).ok()?;
    file.build_id().ok().flatten().map(<[u8]>::to_vec)
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The `.sym` file `qemu-uftrace symbols --syms-only` writes for `file` (what `record`
/// writes for it, at offset 0), or None when it has no symbols.
fn sym_of(file: &Path, scratch: &Path) -> Option<Vec<u8>> {
    let out = std::process::Command::new(common::BIN)
        .args(["symbols", "--syms-only", "-d"])
        .arg(scratch)
        .arg(file)
        .output()
        .expect("run qemu-uftrace symbols");
    let name = file.file_name()?.to_string_lossy().into_owned();
    let sym = std::fs::read(scratch.join(format!("{name}.sym"))).ok();
    assert!(
        out.status.success() || sym.is_none(),
        "qemu-uftrace symbols {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    sym
}

impl HostileRoot {
    fn new(tmp: &Path) -> HostileRoot {
        let tmp = std::fs::canonicalize(tmp).expect("temp dir");
        let cached = std::fs::canonicalize(debian_vm_root()).expect("the VM's root");
        let root = tmp.join("hostile-root");
        let out = std::process::Command::new("cp")
            .arg("-al")
            .arg(&cached)
            .arg(&root)
            .output()
            .expect("run cp");
        assert!(
            out.status.success(),
            "cp -al {} {} (the temp dir must be on the cache's file system): {}",
            cached.display(),
            root.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let inside = |p: &Path| root.join(p.strip_prefix("/").expect("an absolute path"));
        // Host programs the root does not have, each a different ELF file than the one it
        // stands for (the host may run the same Debian release: its libc is the root's).
        let mut hosts: Vec<PathBuf> = std::fs::read_dir("/usr/bin")
            .expect("/usr/bin")
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| {
                p.symlink_metadata().is_ok_and(|m| m.is_file())
                    && is_elf(p)
                    && inside(p).symlink_metadata().is_err()
            })
            .collect();
        hosts.sort();
        let mut hosts = hosts.into_iter();
        let watch =
            rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::NONBLOCK).expect("inotify");
        let mut links = Vec::new();
        let mut decoys = Vec::new();
        for (guest, decoy) in REAL_TARGETS
            .iter()
            .map(|g| (*g, false))
            .chain(DECOY_TARGETS.iter().map(|g| (*g, true)))
        {
            let file = inside(Path::new(guest));
            let id = build_id(&file);
            assert!(id.is_some(), "{} has no build ID", file.display());
            let host = hosts
                .by_ref()
                .find(|h| build_id(h) != id)
                .expect("a host ELF file in /usr/bin that the root does not have");
            let target = if decoy {
                let name = Path::new(guest).file_name().expect("a file name");
                let to = tmp.join("host").join(name);
                std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
                std::fs::copy(&host, &to).expect("copy a host ELF file");
                decoys.push(to.clone());
                to
            } else {
                host
            };
            // Inside the root, the target's path holds the guest's file (the cached file's
            // inode under one more name; any file there before is unlinked, not written).
            let at = inside(&target);
            std::fs::create_dir_all(at.parent().expect("a parent")).expect("mkdir in the root");
            if at.symlink_metadata().is_ok() {
                std::fs::remove_file(&at).expect("unlink in the root");
            }
            std::fs::hard_link(&file, &at).expect("link in the root");
            std::fs::remove_file(&file).expect("unlink in the root");
            std::os::unix::fs::symlink(&target, &file).expect("symlink in the root");
            // The test fails if a lookup follows the link on the host: the host's file is
            // there and is another ELF file.
            assert!(
                is_elf(&target) && build_id(&target) != build_id(&at),
                "{} is not another ELF file on the host",
                target.display()
            );
            links.push((guest, target, at));
        }
        for d in &decoys {
            rustix::fs::inotify::add_watch(
                &watch,
                d.as_path(),
                rustix::fs::inotify::WatchFlags::OPEN | rustix::fs::inotify::WatchFlags::ACCESS,
            )
            .expect("inotify watch");
        }
        HostileRoot {
            root,
            links,
            watch,
            decoys,
        }
    }

    /// The host files opened since the watch began (by anyone: the decoys' paths are the
    /// test's own).
    fn opened(&self) -> usize {
        let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
        let mut reader = rustix::fs::inotify::Reader::new(&self.watch, &mut buf);
        let mut n = 0;
        while reader.next().is_ok() {
            n += 1;
        }
        n
    }

    /// Every linked file was named from the root: the `.sym` of each library's module
    /// (`libc.so.6`, `libc.so.6#2`…) is the root's file's, which is not the host's; each
    /// stripped file is named by address from its file inside the root, whose build ID is
    /// the root's; no decoy was opened.
    fn check(&self, dir: &Path, stderr: &str) {
        let mut failed = Vec::new();
        // Before this check reads them itself.
        let opened = self.opened();
        if opened != 0 {
            failed.push(format!(
                "{opened} opens or reads of the decoys {:?}",
                self.decoys
            ));
        }
        let scratch = tempfile::tempdir().expect("temp dir");
        let cached = debian_vm_root();
        for (i, (guest, target, at)) in self.links.iter().enumerate() {
            let name = guest.rsplit('/').next().unwrap_or(guest);
            let original = cached.join(&guest[1..]);
            if build_id(at) != build_id(&original) {
                failed.push(format!("{}: not the root's {guest}", at.display()));
            }
            let own = sym_of(&original, &scratch.path().join(format!("own{i}")));
            let host = sym_of(target, &scratch.path().join(format!("host{i}")));
            // (A stripped program's functions are named by address in both: its build ID
            // tells them apart, above.)
            assert!(
                own.is_none() || own != host,
                "{guest}: the host's {} names alike",
                target.display()
            );
            let modules: Vec<PathBuf> = std::fs::read_dir(dir)
                .expect("trace dir")
                .map(|e| e.expect("dir entry").path())
                .filter(|p| {
                    let n = p.file_name().unwrap().to_string_lossy();
                    n.ends_with(".sym")
                        && (n == format!("{name}.sym") || n.starts_with(&format!("{name}#")))
                })
                .collect();
            match &own {
                Some(own) => {
                    if modules.is_empty() {
                        failed.push(format!("no {name}.sym in the trace"));
                    }
                    // The root's file's lines, and beside them only functions of that
                    // file the trace entered that nothing else names (by address).
                    // (The ends of functions move as functions are added between them; a
                    // function named by address is named after the file's name, which the
                    // file has another of in the root, `at`, and in the initramfs.)
                    let lines = |b: &[u8]| -> HashSet<String> {
                        (String::from_utf8_lossy(b).lines())
                            .filter(|l| !l.ends_with(" ? __func_end"))
                            .map(|l| match (l.rsplit_once(' '), l.find("+0x")) {
                                (Some((head, _)), Some(at)) => format!("{head} {}", &l[at..]),
                                _ => l.to_string(),
                            })
                            .collect()
                    };
                    let own = lines(own);
                    for m in &modules {
                        let written = lines(&std::fs::read(m).unwrap_or_default());
                        let extra = written.difference(&own).any(|l| !l.contains("+0x"));
                        if !own.is_subset(&written) || extra {
                            failed.push(format!(
                                "{} is not the .sym of the root's {guest}",
                                m.display()
                            ));
                        }
                    }
                }
                None => {
                    // A stripped program: said to have no symbols, at its file in the root.
                    let said = format!("{guest} ({}) has no symbols", at.display());
                    if !stderr.contains(&said) {
                        failed.push(format!("record never said {said:?}"));
                    }
                    if !modules.is_empty() {
                        failed.push(format!("{name} named from {modules:?}"));
                    }
                }
            }
        }
        assert!(
            failed.is_empty(),
            "the hostile root: {} expectation(s) failed:\n- {}\nrecord said:\n{stderr}",
            failed.len(),
            failed.join("\n- ")
        );
        // The watch sees an open: the check above could fail.
        std::fs::read(&self.decoys[0]).expect("read a decoy");
        assert!(
            self.opened() > 0,
            "inotify saw no open of {}",
            self.decoys[0].display()
        );
    }
}
