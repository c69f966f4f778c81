//! `-F/--filter`, `-N/--notrace` and `-D/--depth` on the bare-metal guests, on every QEMU:
//! the trace recorded with them is, event for event and depth for depth, what uftrace's own
//! replay shows of the unfiltered trace with the same options (its -F/-N/-D are the oracle);
//! a FUNC that names nothing, or that the guest never enters, is said.

mod common;

use common::record_guest_on as record_on;
use common::user::text;
use common::{dat_records, group, stat_per_image};

use qemu_uftrace_tests::replay::{report_calls, uftrace};
use qemu_uftrace_tests::{system_qemus, QEMU};
use std::collections::BTreeMap;
use std::path::Path;

/// `uftrace replay` of `dir` with `options`, as `E name@depth` / `X name@depth` (a leaf's
/// `name();` is both), depth from the indentation.
fn shape(dir: &Path, options: &[&str]) -> Vec<String> {
    let d = dir.to_string_lossy();
    let mut args = vec!["replay", "--no-pager", "-d", &d];
    args.extend_from_slice(options);
    let text = uftrace(&args).expect("replay");
    let mut events = Vec::new();
    for line in text.lines() {
        let Some((_, body)) = line.split_once('|') else {
            continue;
        };
        let trimmed = body.trim_start();
        let depth = (body.len() - trimmed.len()).saturating_sub(1) / 2;
        if let Some(name) = trimmed.strip_suffix("() {") {
            events.push(format!("E {name}@{depth}"));
        } else if let Some(name) = trimmed.strip_suffix("();") {
            events.push(format!("E {name}@{depth}"));
            events.push(format!("X {name}@{depth}"));
        } else if let Some(name) = trimmed
            .strip_prefix("} /* ")
            .and_then(|r| r.strip_suffix(" */"))
        {
            events.push(format!("X {name}@{depth}"));
        } else if trimmed.starts_with("/* qemu:") {
            continue; // the mark after frames written open (`--keep-last`)
        } else {
            panic!("unexpected replay line {line:?}");
        }
    }
    events
}

/// Records `nested` unfiltered and with `ours` on every QEMU, and checks the second against
/// uftrace's replay of the first with `uftrace_options`; returns the last run's stderr.
fn same_as_uftrace(ours: &[&str], uftrace_options: &[&str]) -> String {
    common::require(QEMU);
    let mut last = String::new();
    for qemu in system_qemus() {
        let (_t1, full, out) = record_on(&qemu.program, "full", &[], "nested");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let (_t2, dir, out) = record_on(&qemu.program, "filtered", ours, "nested");
        let err = text(&out.stderr);
        assert!(out.status.success(), "{}: {err}", qemu.label);
        let want = shape(&full, uftrace_options);
        assert!(!want.is_empty(), "{}: uftrace shows nothing", qemu.label);
        assert_eq!(shape(&dir, &[]), want, "{} {ours:?}: {err}", qemu.label);
        // uftrace's report of it counts the calls its replay of the full trace shows
        // (`report -F` of the full trace would count the frames left open at the end too,
        // filtered or not).
        assert_eq!(
            report_calls(&dir, &[]).unwrap(),
            entries(&want),
            "{} {ours:?}",
            qemu.label
        );
        // What was left out is counted: the full trace's records less the ones written.
        // Calls past --depth are not written either, nor counted as filtered.
        let too_deep: u64 = std::fs::read_to_string(dir.join("plugin.stats"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("depth_cap_hits=")?.parse().ok())
            .expect("depth_cap_hits");
        let filtered = dat_records(&full) - dat_records(&dir) - 2 * too_deep;
        assert!(
            err.contains(&format!(
                " records; 0 lost; {} filtered out (-F/-N) ]",
                group(filtered)
            )),
            "{}: {filtered}: {err}",
            qemu.label
        );
        last = err;
    }
    last
}

/// Calls per function among `E name@depth` events.
fn entries(events: &[String]) -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for e in events {
        if let Some((name, _)) = e.strip_prefix("E ").and_then(|e| e.rsplit_once('@')) {
            *calls.entry(name.to_string()).or_default() += 1;
        }
    }
    calls
}

/// `-F nest_level2`: its two calls and everything beneath, at depths from 0.
#[test]
fn a_filter_records_exactly_its_subtrees() {
    let err = same_as_uftrace(&["-F", "nest_level2"], &["-F", "^nest_level2$"]);
    assert!(!err.contains("never entered"), "{err}");
}

/// `-N nest_level3`: everything but its subtrees.
#[test]
fn notrace_leaves_out_exactly_its_subtrees() {
    same_as_uftrace(&["--notrace", "nest_level3"], &["-N", "^nest_level3$"]);
}

/// `-F nest_level1 -N nest_level4`, and a regular expression naming two functions, one
/// nested in the other (`nest_level2` and `nest_level4`: the outer one's subtree).
#[test]
fn filters_combine_and_match_several_functions() {
    same_as_uftrace(
        &["-F", "nest_level1", "-N", "nest_level4"],
        &["-F", "^nest_level1$", "-N", "^nest_level4$"],
    );
    same_as_uftrace(
        &["--filter", "^nest_level[24]$"],
        &["-F", "^nest_level[24]$"],
    );
}

/// `-D 2` alone, and counted from each filtered function as uftrace counts it.
#[test]
fn depth_limits_each_subtree() {
    same_as_uftrace(
        &["-F", "nest_level2", "--depth", "2"],
        &["-F", "^nest_level2$", "-D", "2"],
    );
}

#[test]
fn a_filter_that_names_nothing_is_one_line() {
    common::require(QEMU);
    let (_t, dir, out) = record_on(QEMU, "none", &["-F", "^nosuch_"], "nested");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("-F ^nosuch_: the regular expression matches no symbol ("),
        "{err}"
    );
    assert!(!dir.exists());
    let (_t, _, out) = record_on(QEMU, "typo", &["-N", "nest_levl4"], "nested");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("-N nest_levl4: no such function in the symbols (1 source)")
            && err.contains("did you mean nest_level4"),
        "{err}"
    );
}

/// A FUNC in the guest's runtime that `nested` never calls: alone, nothing is written and
/// record fails; beside one that runs, the trace holds that one's and the other is said.
#[test]
fn a_filter_never_entered_is_said() {
    common::require(QEMU);
    let (_t, dir, out) = record_on(QEMU, "never", &["-F", "rt_put_hex"], "nested");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("-F rt_put_hex: the guest never entered it; nothing was written"),
        "{err}"
    );
    assert!(!dir.exists());
    let (_t, dir, out) = record_on(
        QEMU,
        "some",
        &["-F", "rt_put_hex", "-F", "nest_level3", "-N", "rt_put_hex"],
        "nested",
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "qemu-uftrace: warning: -F rt_put_hex: the guest never entered it; the trace \
             holds nothing of it"
        ) && err.contains(
            "qemu-uftrace: -N rt_put_hex: the guest never entered it; nothing was left out \
             for it"
        ),
        "{err}"
    );
    assert!(!err.contains("-F nest_level3: the guest never"), "{err}");
    let events = shape(&dir, &[]);
    assert_eq!(events.first().map(String::as_str), Some("E nest_level3@0"));
}

/// `--keep-last` with `--stop-at`: the window ends at FUNC's first entry, after the frames
/// open at its start.
#[test]
fn keep_last_ends_at_the_stop() {
    common::require(QEMU);
    let (_t1, full, out) = record_on(QEMU, "full", &[], "nested");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let full = shape(&full, &[]);
    let first = full
        .iter()
        .position(|e| e.starts_with("E nest_level3@"))
        .expect("nest_level3 in the full trace");
    // 3 records, and the full trace's many after them, which must not enter the window.
    assert!(first >= 3 && full.len() > first + 20, "{full:?}");
    let (_t2, dir, out) = record_on(
        QEMU,
        "last",
        &["--keep-last", "48", "--stop-at", "nest_level3"],
        "nested",
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let kept = shape(&dir, &[]);
    let frames: usize = std::fs::read_to_string(dir.join("plugin.stats"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("keep_last_frames=")?.parse().ok())
        .expect("keep_last_frames");
    let names = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|e| e.rsplit_once('@').unwrap().0.to_string())
            .collect()
    };
    assert_eq!(
        names(&kept[frames..]),
        names(&full[first + 1 - 3..=first]),
        "{err}"
    );
    assert!(
        err.contains("stopped writing at the first entry into nest_level3"),
        "{err}"
    );
}

/// A Linux boot (the initramfs guest, QEMU 10.2.2: exceptions shown) with `-F` of the
/// getpid(2) handler: every one of its calls and their callees, as many as the unfiltered
/// boot's trace has beneath it (interrupts that happened to come in either aside), and
/// nothing of the rest of the boot.
#[test]
fn a_kernel_subtree_is_recorded_whole() {
    use qemu_uftrace_tests::linux_guest::{initramfs_boot_args_on, initramfs_guest, INIT_OK};
    let qemu = qemu_uftrace_tests::system_qemu("10.2.2");
    let (_, init_elf) = initramfs_guest().expect("the guest builds");
    let argv = initramfs_boot_args_on(&qemu, 1).expect("the guest builds");
    let symbols = init_elf.to_string_lossy().into_owned();
    let record = |name: &str, extra: &[&str]| {
        let mut options = vec!["--symbols", symbols.as_str()];
        options.extend_from_slice(extra);
        let (tmp, dir, out) = common::record_named(name, &argv, &options);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains(INIT_OK), "{}", text(&out.stdout));
        (tmp, dir, text(&out.stderr))
    };
    // The unfiltered boot is record_filter_linux.rs's too: shared.
    let full = common::shared::record(&argv, &["--symbols", &symbols]);
    assert!(full.console.contains(INIT_OK), "{}", full.console);
    let full = full.dir;
    let (_t2, dir, err) = record("getpid", &["-F", "__arm64_sys_getpid"]);
    let no_irq = ["-N", "^\\[irq\\]$"];
    let mut want = vec!["-F", "^__arm64_sys_getpid$"];
    want.extend_from_slice(&no_irq);
    let want = entries(&shape(&full, &want));
    let got = report_calls(&dir, &no_irq).unwrap();
    assert_eq!(got, want, "{err}");
    // /init's getpid loop, and its one getpid for the line it prints.
    let calls = got.get("__arm64_sys_getpid").copied().unwrap_or(0);
    assert!(calls > 100, "{got:?}");
    assert!(!err.contains("never entered"), "{err}");
}

/// User mode (aarch64 under qemu-aarch64 10.2.2): a FUNC of the program itself resolves from
/// its own ELF, with no `--symbols`; the trace is uftrace's `-F` replay of the unfiltered
/// one.
#[test]
fn user_mode_filters_resolve_from_the_program() {
    use common::user;
    let qemu = qemu_uftrace_tests::user_qemu();
    let elf = qemu_uftrace_tests::user_guest_elf("nested.elf").expect("build");
    let elf = elf.to_string_lossy();
    let (_t1, full, out) = user::record(&qemu, &[&elf]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let want = shape(&full, &["-F", "^nest_level2$"]);
    assert!(
        want.first().is_some_and(|e| e == "E nest_level2@0"),
        "{want:?}"
    );
    let (_t2, dir, out) = user::record_with(&qemu, &["-F", "nest_level2"], &[&elf]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("never entered"), "{err}");
    assert_eq!(shape(&dir, &[]), want, "{err}");
}

/// User mode, the names from `--symbols` alone (`--no-auto-symbols`): a FUNC resolves in
/// the file read before QEMU starts, and the trace's names come from that same read (the
/// symbol job does not read it again), as the automatic symbols' run has them.
#[test]
fn user_mode_filters_resolve_from_symbols_files() {
    use common::user;
    let qemu = qemu_uftrace_tests::user_qemu();
    let elf = qemu_uftrace_tests::user_guest_elf("nested.elf").expect("build");
    let elf = elf.to_string_lossy();
    let (_t1, full, out) = user::record_with(&qemu, &["-F", "nest_level2"], &[&elf]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let want = shape(&full, &[]);
    assert!(
        want.first().is_some_and(|e| e == "E nest_level2@0"),
        "{want:?}"
    );
    let options = ["--no-auto-symbols", "--symbols", &elf, "-F", "nest_level2"];
    let (_t2, dir, out) = user::record_with(&qemu, &options, &[&elf]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("never entered"), "{err}");
    assert_eq!(shape(&dir, &[]), want, "{err}");
}

/// User mode, a dynamic PIE (Debian gcc's default: the glibc oracle guest, loaded at a bias
/// known only once it runs): `-F` of one of its functions, placed by the plugin at the
/// program's entry, is uftrace's `-F` replay of the unfiltered trace, event for event, with
/// its calls into libc; `-N` of the callback qsort makes into it leaves that out.
#[test]
fn user_mode_filters_a_pie_s_function() {
    use common::user;
    let qemu = qemu_uftrace_tests::user_qemu();
    let pie = common::user::glibc_guest("libcalls-dyn-oracle.elf");
    let run = ["-L", "/usr/aarch64-linux-gnu", &pie.to_string_lossy()];
    let (_t1, full, out) = user::record(&qemu, &run);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let want = shape(&full, &["-F", "^sorted_sum$", "-N", "^cmp_int$"]);
    assert!(
        want.first().is_some_and(|e| e == "E sorted_sum@0")
            && want.iter().any(|e| e.starts_with("E qsort@"))
            && !want.iter().any(|e| e.contains("cmp_int")),
        "{want:?}"
    );
    let (_t2, dir, out) = user::record_with(&qemu, &["-F", "sorted_sum", "-N", "cmp_int"], &run);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("never entered"), "{err}");
    // libc's unnamed functions (the sysroot's libc has no symbol table) move between runs.
    let unnamed = |events: Vec<String>| -> Vec<String> {
        (events.into_iter())
            .map(|e| match e.split_once(" <") {
                Some((kind, rest)) => {
                    format!("{kind} <libc>@{}", rest.rsplit('@').next().unwrap_or(""))
                }
                None => e,
            })
            .collect()
    };
    assert_eq!(unnamed(shape(&dir, &[])), unnamed(want), "{err}");
}

/// User mode, a program that forks and whose child execs (`forkexec.elf`, `execd.elf`):
/// `-F parent_step -F child_step` keeps the calls uftrace's `-F` replay of the unfiltered
/// trace shows, and what was left out is counted in every process image (the parent's, the
/// forked child's, the exec'd one's), the closing line summing them: the full trace's
/// records less the ones written. (The two processes' calls interleave differently from run
/// to run: compared as counts.)
#[test]
fn user_mode_a_fork_counts_what_each_process_filtered() {
    use common::user;
    let qemu = qemu_uftrace_tests::user_qemu();
    let elf = |n: &str| qemu_uftrace_tests::user_guest_elf(n).expect("build");
    let (parent, execd) = (elf("forkexec.elf"), elf("execd.elf"));
    let run = [&*parent.to_string_lossy(), &*execd.to_string_lossy()];
    let (_t1, full, out) = user::record(&qemu, &run);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let want = entries(&shape(
        &full,
        &["-F", "^parent_step$", "-F", "^child_step$"],
    ));
    let steps = BTreeMap::from([
        ("child_step".to_string(), 6),
        ("parent_step".to_string(), 4),
    ]);
    assert_eq!(want, steps);
    let options = ["-F", "parent_step", "-F", "child_step"];
    let (_t2, dir, out) = user::record_with(&qemu, &options, &run);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(entries(&shape(&dir, &[])), want, "{err}");
    // Each FUNC was entered, if by one process only.
    assert!(!err.contains("never entered"), "{err}");
    let filtered = dat_records(&full) - dat_records(&dir);
    let counts = stat_per_image(&dir, "filtered");
    let images = &counts[1..];
    assert_eq!(images.len(), 2, "the forked image and the exec'd one");
    assert!(images.iter().all(|&n| n > 0), "{images:?}");
    assert_eq!(counts.iter().sum::<u64>(), filtered);
    assert!(
        err.contains(&format!(
            " records; 0 lost; {} filtered out (-F/-N) ]",
            group(filtered)
        )),
        "{filtered}: {err}"
    );
}

/// User mode, `-F child_step` alone: only the forked child writes records, and its calls
/// are still named (the parent, which wrote none, keeps its session in `task.txt`: the
/// child's FORK line leads uftrace to its symbols through it).
#[test]
fn user_mode_a_filter_only_the_child_reaches_names_its_calls() {
    use common::user;
    let qemu = qemu_uftrace_tests::user_qemu();
    let elf = |n: &str| qemu_uftrace_tests::user_guest_elf(n).expect("build");
    let (parent, execd) = (elf("forkexec.elf"), elf("execd.elf"));
    let run = [&*parent.to_string_lossy(), &*execd.to_string_lossy()];
    let (_t, dir, out) = user::record_with(&qemu, &["-F", "child_step"], &run);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let steps = BTreeMap::from([("child_step".to_string(), 6)]);
    assert_eq!(entries(&shape(&dir, &[])), steps, "{err}");
}

/// The arm64 dynamic PIE's run on Debian's arm64 libc with its debug files (the install's
/// `arm64-libc`, as `-L`): libc's internal functions have names there.
fn on_arm64_libc() -> Vec<String> {
    let pie = common::user::glibc_guest("libcalls-dyn-oracle.elf");
    let loader = qemu_uftrace_tests::cached("arm64-libc/lib/ld-linux-aarch64.so.1");
    let sysroot = loader.parent().and_then(|l| l.parent()).expect("sysroot");
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    vec!["-L".into(), path(sysroot), path(&pie)]
}

/// [`on_arm64_libc`]'s QEMU and command, and the shape of its unfiltered recording.
fn unfiltered_on_arm64_libc() -> (std::path::PathBuf, Vec<String>, Vec<String>) {
    let qemu = qemu_uftrace_tests::user_qemu();
    let run = on_arm64_libc();
    let args: Vec<&str> = run.iter().map(String::as_str).collect();
    let (_tmp, full, out) = common::user::record(&qemu, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all = shape(&full, &[]);
    (qemu, run, all)
}

/// User mode, a shared library's own functions (uftrace users' `-F malloc`): libc calls
/// `__vfprintf_internal` and `_int_malloc` inside itself, never through the program's PLT.
/// Named from Debian's arm64 libc with its debug files (the install's `arm64-libc`, run as
/// `-L`), they are placed where the guest maps libc, and the recording is uftrace's `-F`/`-N`
/// replay of the unfiltered trace, event for event. Which were entered is said by the
/// library's numbering: a library function the guest never entered (`fork`) is said, the
/// others are not.
#[test]
fn user_mode_filters_a_shared_library_s_functions() {
    use common::user;
    let qemu = qemu_uftrace_tests::user_qemu();
    let run = on_arm64_libc();
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    let options = [
        "-F",
        "__vfprintf_internal",
        "-F",
        "_int_malloc",
        "-F",
        "fork",
        "-N",
        "_IO_file_xsputn",
    ];
    let (_t1, full, out) = user::record(&qemu, &run);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let want = shape(&full, &options);
    let counts = entries(&want);
    assert!(
        counts.get("__vfprintf_internal").is_some_and(|&n| n > 10)
            && counts.get("_int_malloc").is_some_and(|&n| n > 0)
            && !counts.contains_key("_IO_file_xsputn")
            && want.first().is_some_and(|e| e.ends_with("@0")),
        "{counts:?}"
    );
    let (_t2, dir, out) = user::record_with(&qemu, &options, &run);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(shape(&dir, &[]), want, "{err}");
    assert!(
        err.contains("-F fork: the guest never entered it; the trace holds nothing of it"),
        "{err}"
    );
    let never = err.lines().filter(|l| l.contains("never entered")).count();
    assert_eq!(never, 1, "{err}");
}

/// User mode, `--start-at` and `--stop-at` a function libc calls only inside itself, placed
/// where the guest maps libc (as [`user_mode_filters_a_shared_library_s_functions`]): the
/// start's recording is the unfiltered one from that function's first entry on, after its
/// ancestors written open; the stop's is the unfiltered one up to and with the first entry.
#[test]
fn user_mode_starts_and_stops_at_a_shared_library_s_function() {
    use common::user;
    let (qemu, run, all) = unfiltered_on_arm64_libc();
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    let first = |name: &str| {
        (all.iter())
            .position(|e| {
                e.strip_prefix("E ")
                    .and_then(|e| e.rsplit_once('@'))
                    .is_some_and(|(n, _)| n == name)
            })
            .unwrap_or_else(|| panic!("{name} in {all:?}"))
    };

    let (_t2, dir, out) = user::record_with(&qemu, &["--start-at", "__vfprintf_internal"], &run);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("started writing at the first entry into __vfprintf_internal"),
        "{err}"
    );
    let at = first("__vfprintf_internal");
    // Its ancestors: the entries before it still open there, outermost first.
    let mut open: Vec<&String> = Vec::new();
    for e in &all[..at] {
        if e.starts_with("E ") {
            open.push(e);
        } else {
            open.pop();
        }
    }
    assert!(open.iter().any(|e| e.starts_with("E printf@")), "{open:?}");
    let want: Vec<String> = open.into_iter().chain(&all[at..]).cloned().collect();
    assert_eq!(shape(&dir, &[]), want, "{err}");

    let (_t3, dir, out) = user::record_with(&qemu, &["--stop-at", "_int_malloc"], &run);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("stopped writing at the first entry into _int_malloc"),
        "{err}"
    );
    assert_eq!(shape(&dir, &[]), all[..=first("_int_malloc")], "{err}");
}

/// What a recording switched by `--trace-on-at ON --trace-off-at OFF` holds of the full
/// trace's shape `all`: from each entry into an ON function while off, the frames open
/// there that unwinding finds (written open, outermost first: not those of `unreached`) and
/// what follows, at depths from them, to the next entry into an OFF function while on,
/// whose entry ends the window, closed at once with every frame open.
fn switched(all: &[String], on: &[&str], off: &[&str], unreached: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    // The full trace's open frames, each with whether the window has it.
    let mut stack: Vec<(String, bool)> = Vec::new();
    let mut tracing = false;
    let depth = |stack: &[(String, bool)]| stack.iter().filter(|f| f.1).count();
    for e in all {
        let (kind, at) = e.split_once(' ').expect("kind");
        let (name, _) = at.rsplit_once('@').expect("depth");
        if kind == "E" && !tracing && on.contains(&name) {
            tracing = true;
            for f in stack.iter_mut() {
                f.1 = !unreached.contains(&f.0.as_str());
            }
            let opened = stack.iter().filter(|f| f.1);
            out.extend(opened.enumerate().map(|(d, f)| format!("E {}@{d}", f.0)));
        }
        if kind == "E" {
            if tracing {
                out.push(format!("E {name}@{}", depth(&stack)));
            }
            stack.push((name.to_string(), tracing));
        } else if let Some((name, written)) = stack.pop() {
            if tracing && written {
                out.push(format!("X {name}@{}", depth(&stack)));
            }
        }
        if tracing && kind == "E" && off.contains(&name) {
            tracing = false;
            // Closed in the window; they stay open in the guest.
            let mut d = depth(&stack);
            for f in stack.iter_mut().rev().filter(|f| f.1) {
                d -= 1;
                out.push(format!("X {}@{d}", f.0));
                f.1 = false;
            }
        }
    }
    out
}

/// User mode, `--trace-on-at`/`--trace-off-at` a position-independent program's functions
/// and a shared library's (libc's `__vfprintf_internal` and `_int_malloc`, which only libc
/// calls), placed where the guest maps them as `--start-at`'s are: each window is the
/// unfiltered recording's span, after the frames open at its start.
#[test]
fn user_mode_switches_at_a_pie_s_and_a_shared_library_s_functions() {
    use common::user;
    let (qemu, run, all) = unfiltered_on_arm64_libc();
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    // The program's qsort callback on, libc's allocator off; libc's printf on, the
    // program's PLT entry for free off (its block jumps into libc and calls nothing).
    // The second opens again in the exit handler's printf, and stays open to the end.
    for (on, off, windows) in [
        ("cmp_int", "_int_malloc", "1"),
        ("__vfprintf_internal", "free", "2"),
    ] {
        // Unwinding finds no frame for `_start`, which nothing called, nor for qsort, which
        // jumps to qsort_r (Debian's arm64 libc 2.36: `mov x4, #0; b qsort_r`).
        let want = switched(&all, &[on], &[off], &["_start", "qsort"]);
        assert!(
            want.iter().any(|e| e.starts_with(&format!("E {off}@"))),
            "{on}..{off}: {want:?}"
        );
        let options = ["--trace=off", "--trace-on-at", on, "--trace-off-at", off];
        let (_t, dir, out) = user::record_with(&qemu, &options, &run);
        let err = text(&out.stderr);
        assert!(out.status.success(), "{on}..{off}: {err}");
        assert_eq!(shape(&dir, &[]), want, "{on}..{off}: {err}");
        let opened = qemu_uftrace_tests::plugin_stat(&dir, "trace_windows");
        assert_eq!(opened, windows, "{on}..{off}: windows");
    }
}
