//! Debian's systemd VM (issue 36: `scripts/debian-vm.sh`, `tests/src/debian_vm.rs`) booted
//! under `record --sysroot ROOT` from its own kernel and initramfs-tools initrd to its
//! power-off, on a virtio disk: systemd as PID 1, systemd-udevd and systemd-journald named
//! from the root, each with functions of its own libraries (systemd's programs are stripped:
//! `libsystemd-shared`/`libsystemd-core` name them by their exported symbols) and libc's
//! beneath; every file found inside the root (the initramfs's klibc `/usr/bin/mount` never
//! names the disk's); uftrace 0.13, 0.17 and 0.19 read the trace.
//!
//! The whole boot makes ~77 M calls and a 2.5 GiB trace: the tests aim with `-t 10us` (calls
//! of 10,000 guest instructions and more; ~17 MiB), one boot a QEMU.
//!
//! Run: `cargo test -p qemu-uftrace --test debian_vm`.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use qemu_uftrace_tests::debian_vm::{debian_vm_boot_args_on, debian_vm_root, DEBIAN_VM_POWER_OFF};
use qemu_uftrace_tests::replay::{descendants, parse_calls, uftrace, uftrace_versions};
use qemu_uftrace_tests::x86_64_guests::system_qemus_x86_64;

/// The boot recorded on the QEMU labelled `label`: the trace and record's stderr.
fn record_boot(label: &str) -> (tempfile::TempDir, PathBuf, String) {
    let qemu = system_qemus_x86_64()
        .into_iter()
        .find(|q| q.label == label)
        .unwrap_or_else(|| panic!("QEMU {label} in system_qemus_x86_64"));
    let root = debian_vm_root();
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace.data");
    let options = [
        "-t".as_ref(),
        "10us".as_ref(),
        "--sysroot".as_ref(),
        root.as_os_str(),
    ];
    let out = common::record_into(&dir, &options, &debian_vm_boot_args_on(&qemu.program));
    let console = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let tail: Vec<&str> = console.lines().rev().take(30).collect();
    assert!(
        out.status.success() && console.contains(DEBIAN_VM_POWER_OFF),
        "record failed ({}) on QEMU {label}:\n{stderr}\nconsole's end:\n{}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    assert!(
        console.contains("multi-user.target"),
        "the VM never reached multi-user.target:\n{console}"
    );
    (tmp, dir, stderr)
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

/// The file paths of a session's map (the guest's paths, `#N` module suffixes kept).
fn map_files(dir: &Path, sid: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("sid-{sid}.map")))
        .expect("the session's map")
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5).map(str::to_string))
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

/// Everything the boot's trace must show.
fn check_boot(dir: &Path, stderr: &str, label: &str) {
    let mut failed = Vec::new();
    let root = std::fs::canonicalize(debian_vm_root()).expect("the VM's root");
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
        // Its program, found in the root (Debian strips it: said to have no symbols, or
        // placed where its exports name something).
        let files = map_files(dir, &sid);
        let in_root = format!(
            "{program} ({}{program}) has no symbols",
            root.to_string_lossy()
        );
        if !files.iter().any(|f| f.split('#').next() == Some(program)) && !stderr.contains(&in_root)
        {
            failed.push(format!(
                "{exe} (pid {pid}): {program} neither placed nor said to be found in the root"
            ));
        }
        // Its libraries, at the guest's paths.
        for want in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so",
        ] {
            if !files.iter().any(|f| f.split('#').next() == Some(want)) {
                failed.push(format!(
                    "{exe} (pid {pid}): no {want} in its map ({files:?})"
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
        match nested {
            Some(_) => {}
            None => failed.push(format!(
                "{exe} (pid {pid}): no libsystemd function with a libc one beneath ({} calls)",
                calls.len()
            )),
        }
    }
    // Every file was found, inside the root or the -initrd archive: the host files record
    // names are the root's or the trace's own copies of archive members.
    let outside: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("guest processes:"))
        .filter(|l| {
            l.contains("no file found")
                || l.split(" (").skip(1).any(|p| {
                    p.starts_with('/')
                        && !p.starts_with(&*root.to_string_lossy())
                        && !p.contains("/guest-files/")
                })
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
        let out = std::process::Command::new(&u.program)
            .args(["report", "--no-pager", "-d", &d, "--tid", "1"])
            .output()
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
    let (_tmp, dir, stderr) = record_boot("10.2.2");
    check_boot(&dir, &stderr, "10.2.2");
}

#[test]
fn systemd_boot_named_from_the_root_on_10_0() {
    let (_tmp, dir, stderr) = record_boot("10.0");
    check_boot(&dir, &stderr, "10.0");
}
