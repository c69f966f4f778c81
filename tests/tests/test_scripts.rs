//! scripts/test.sh's summary (`scripts/test-timing.awk`, and `scripts/test-failures.awk`: what
//! each failed test printed) and its check that every test binary ran
//! (`scripts/test-binaries-ran.sh`), on the output of a real `cargo test` of a small crate
//! whose binaries pass, fail, crash and take measurably long; and its split of the time the
//! tests waited for `record` and uftrace (`scripts/test-passes.awk`), on a log written by the
//! tests' own timer (`qemu_uftrace_tests::passes`); and the dependencies' outputs it keeps
//! between runs (`scripts/crates-cache.py`), on real builds of a small crate.

use std::path::{Path, PathBuf};
use std::process::Command;

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts")
}

/// A crate with a library (no tests) and four test binaries; returns its directory.
fn crate_with_binaries(dir: &Path) -> PathBuf {
    let root = dir.join("timed");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("tests")).unwrap();
    std::fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"timed\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(root.join("src/lib.rs"), "").unwrap();
    let binaries = [
        ("fast", "#[test] fn quick() {}"),
        // A duration the summary must rank first, not a wait for a condition.
        (
            "slow",
            "#[test] fn long() { std::thread::sleep(std::time::Duration::from_millis(700)); }",
        ),
        (
            "fails",
            "#[test] fn good() {}\n#[test] fn bad() { panic!(\"as meant\") }",
        ),
        ("crash", "#[test] fn dies() { std::process::abort() }"),
    ];
    for (name, body) in binaries {
        std::fs::write(root.join("tests").join(format!("{name}.rs")), body).unwrap();
    }
    root
}

/// `cargo test ARGS` in the crate: its whole output, both streams interleaved as
/// scripts/test.sh logs them (`2>&1 | tee`): a binary's results follow its "Running" line.
fn cargo_test(root: &Path, args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new("bash")
        .arg("-c")
        .arg("exec \"$0\" test \"$@\" 2>&1")
        .arg(cargo)
        .args(args)
        .current_dir(root)
        .env("CARGO_TARGET_DIR", root.join("target"))
        .env_remove("RUSTFLAGS")
        // A backtrace in a failed test's output: the failures' summary leaves it out.
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run cargo");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `awk -f scripts/SCRIPT LOG`'s output (it must succeed).
fn awk(script: &str, log: &Path) -> String {
    let out = Command::new("awk")
        .arg("-f")
        .arg(scripts().join(script))
        .arg(log)
        .output()
        .expect("run awk");
    assert!(out.status.success(), "{script}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_summary_ranks_every_binary_and_the_check_finds_one_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let root = crate_with_binaries(tmp.path());
    let log = tmp.path().join("cargo-test.log");
    std::fs::write(&log, cargo_test(&root, &["--no-fail-fast"])).unwrap();

    let summary = awk("test-timing.awk", &log);
    let lines: Vec<&str> = summary.lines().collect();
    let line_of = |name: &str| {
        lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name} in:\n{summary}"))
            .to_string()
    };
    assert_eq!(
        lines[0].split_whitespace().next(),
        Some("slow"),
        "slowest first:\n{summary}"
    );
    let slow_secs: f64 = line_of("slow")
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(slow_secs >= 0.7, "slow took {slow_secs} s:\n{summary}");
    assert!(
        line_of("fails").contains("1 passed   1 failed"),
        "{summary}"
    );
    assert!(line_of("fast").contains("1 passed   0 failed"), "{summary}");
    assert!(line_of("crash").contains("no result line"), "{summary}");
    assert!(
        line_of("timed").contains("0 passed   0 failed"),
        "{summary}"
    );
    assert!(line_of("doc:timed").contains("0 passed"), "{summary}");
    assert!(summary.contains("\nbinaries: 6\n"), "{summary}");
    assert_eq!(
        lines.last(),
        Some(&"tests: 3 passed, 1 failed"),
        "{summary}"
    );

    // What the failed test printed, named by its binary, without the backtrace hint; the
    // passing ones and the crash (no stdout block) print nothing.
    let failures = awk("test-failures.awk", &log);
    let lines: Vec<&str> = failures.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"test.sh: what the failed tests printed (their last lines)"),
        "{failures}"
    );
    assert_eq!(lines.get(1), Some(&"---- fails: bad"), "{failures}");
    assert!(lines.iter().any(|l| l.trim() == "as meant"), "{failures}");
    assert_eq!(
        failures.matches("---- ").count(),
        1,
        "one failed test:\n{failures}"
    );
    assert!(!failures.contains("RUST_BACKTRACE"), "{failures}");
    assert!(!failures.contains("stack backtrace"), "{failures}");
    assert!(!failures.contains("panicking"), "{failures}");

    let check = |log: &Path| {
        Command::new(scripts().join("test-binaries-ran.sh"))
            .arg(log)
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", root.join("target"))
            .output()
            .expect("run test-binaries-ran.sh")
    };
    let all = check(&log);
    assert!(
        all.status.success(),
        "{}",
        String::from_utf8_lossy(&all.stderr)
    );
    assert!(String::from_utf8_lossy(&all.stdout).contains("all 5 test binaries ran"));

    // A run of two binaries of five: the check names the difference and fails.
    let part = tmp.path().join("part.log");
    std::fs::write(
        &part,
        cargo_test(&root, &["--test", "fast", "--test", "slow"]),
    )
    .unwrap();
    let some = check(&part);
    assert!(!some.status.success());
    assert!(
        String::from_utf8_lossy(&some.stderr).contains("builds 5 test binaries but 2 ran"),
        "{}",
        String::from_utf8_lossy(&some.stderr)
    );
    // Every test of those two passed: no failures' summary, not even its heading.
    assert_eq!(awk("test-failures.awk", &part), "");
}

/// The log the tests' timer writes, read by the summary: each binary's seconds in `record`
/// and in uftrace, slowest binary first, then the slowest commands.
#[test]
fn the_summary_splits_the_waits_per_binary_and_names_the_slowest() {
    use qemu_uftrace_tests::passes::timed_into;
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("passes.log");
    let nap = |ms| std::thread::sleep(std::time::Duration::from_millis(ms));
    for (what, ms) in [
        (
            "qemu-uftrace record -o trace.data -- qemu-system-x86_64 -kernel x",
            300,
        ),
        // Our other commands are neither a recording nor a uftrace pass.
        ("qemu-uftrace symbols -d trace.data vmlinux", 200),
        ("uftrace report --no-pager -d trace.data", 1200),
        ("uftrace replay\x1b -D 1 -d trace.data", 100),
    ] {
        timed_into(&log, || what.into(), || nap(ms));
    }
    // Another binary's lines, as a second binary running beside this one appends them.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut f| {
            std::io::Write::write_all(
                &mut f,
                b"0.5 other /cache/uftrace-0.19/bin/uftrace graph -d t\n",
            )
        })
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(
        !text.contains('\x1b'),
        "a control character reached the log: {text:?}"
    );
    let summary = awk("test-passes.awk", &log);
    let rows: Vec<Vec<&str>> = summary
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // This binary first (1.8 s against 0.5), its record and uftrace split, with counts.
    let me = &rows[1];
    assert_eq!(me[0], "test_scripts", "{summary}");
    let secs = |s: &str| s.parse::<f64>().unwrap();
    assert!((0.3..1.0).contains(&secs(me[1])), "record: {summary}");
    assert_eq!(me[3], "(1)", "{summary}");
    assert!((1.3..3.0).contains(&secs(me[4])), "uftrace: {summary}");
    assert_eq!(me[6], "(2)", "{summary}");
    assert!((0.2..1.0).contains(&secs(me[7])), "other: {summary}");
    assert_eq!(rows[2][0], "other", "{summary}");
    assert_eq!(rows[2][4], "0.5", "{summary}");
    // The slowest command first among them.
    let slowest = summary
        .lines()
        .skip_while(|l| !l.contains("slowest commands"))
        .nth(1)
        .unwrap_or_default();
    assert!(
        slowest.contains("test_scripts") && slowest.contains("uftrace report"),
        "{summary}"
    );
}

/// `scripts/with-cpu.sh`, which test.sh's steps run under: the CPU seconds of the command's
/// whole process tree (a grandchild burning 1.2 s of CPU, counted by CPU time, not slept),
/// and the command's exit status passed on.
#[test]
fn with_cpu_counts_the_command_s_descendants_and_keeps_its_status() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cpu");
    let burn =
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2:\n    pass";
    let status = Command::new(scripts().join("with-cpu.sh"))
        .arg(&out)
        .args(["bash", "-c", "python3 -c \"$0\" && exit 3", burn])
        .status()
        .expect("run with-cpu.sh");
    assert_eq!(status.code(), Some(3));
    let text = std::fs::read_to_string(&out).unwrap();
    let secs: u64 = text
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{text:?}: {e}"));
    // 1.2 s of CPU, rounded to whole seconds: the interpreter's start adds a little.
    assert!((1..=3).contains(&secs), "{secs} s");
}

/// scripts/cache-lock.sh, which scripts/install-deps.sh runs under: a second install on the
/// same cache says once that it waits, and runs only after the first has ended; a process the
/// install left running (a daemon a package started) does not keep the lock.
#[test]
fn a_second_install_on_one_cache_waits_for_the_first() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    // A stream's first line, or "" when it ends without one.
    let first_line = |r: &mut dyn std::io::Read| {
        let mut line = String::new();
        BufReader::new(r).read_line(&mut line).unwrap();
        line
    };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let locked = |script: &str| {
        let mut cmd = Command::new(scripts().join("cache-lock.sh"));
        cmd.arg(&cache).args(["bash", "-c", script]).arg(&cache);
        cmd
    };
    // The first holds the lock until its input ends, then leaves a mark.
    let mut first = locked(r#"echo holding; read -r _; touch "$0/first-ended""#)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(first_line(first.stdout.as_mut().unwrap()), "holding\n");
    // The second runs only after that mark, and starts a process that outlives it.
    let mut second = locked(
        r#"test -e "$0/first-ended" && echo ran && { sleep 120 >/dev/null 2>&1 & echo $! >"$0/daemon"; }"#,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let waiting = first_line(second.stderr.as_mut().unwrap());
    assert!(
        waiting.contains("another install is filling")
            && waiting.contains(&*cache.to_string_lossy()),
        "{waiting}"
    );
    drop(first.stdin.take());
    assert!(first.wait().unwrap().success());
    let second = second.wait_with_output().unwrap();
    assert!(
        second.status.success(),
        "the second ran before the first ended"
    );
    assert_eq!(String::from_utf8_lossy(&second.stdout), "ran\n");
    let daemon = std::fs::read_to_string(cache.join("daemon")).unwrap();
    let daemon = daemon.trim();
    let alive = || {
        Command::new("kill")
            .args(["-0", daemon])
            .status()
            .unwrap()
            .success()
    };
    assert!(alive(), "the daemon ended before the check");
    // Its first line of errors, or none when it ends: a lock kept would make it wait (until
    // the daemon is killed below) and say so.
    let mut third = locked("true").stderr(Stdio::piped()).spawn().unwrap();
    let said = first_line(third.stderr.as_mut().unwrap());
    Command::new("kill").arg(daemon).status().unwrap();
    assert!(third.wait().unwrap().success());
    assert_eq!(said, "", "the lock was kept by the daemon");
}

/// scripts/crates-cache.py, which scripts/test.sh runs around its builds: a dependency built
/// once is not built again in a fresh clone's empty target directory (cargo says "Fresh"),
/// the workspace's own crates are never kept and are built again, a second save of the same
/// build copies nothing, a nested workspace's build is left out with --except, and a target
/// directory built into already is left alone.
#[test]
fn a_fresh_clone_builds_its_own_crates_and_not_the_kept_dependencies() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    // A registry crate the workspace itself depends on: its version is in the local registry
    // (the workspace's build downloaded it), and --offline resolves to it.
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock"))
        .unwrap();
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"memchr\""))
        .and_then(|p| p.split("version = \"").nth(1))
        .and_then(|v| v.split('"').next())
        .expect("memchr in the workspace's Cargo.lock")
        .to_string();
    let clone = |name: &str| {
        let root = tmp.path().join(name);
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            format!(
                "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
                 [dependencies]\nmemchr = \"={version}\"\n[workspace]\n"
            ),
        )
        .unwrap();
        std::fs::write(
            root.join("src/lib.rs"),
            "pub fn at(s: &[u8]) -> Option<usize> { memchr::memchr(b'x', s) }\n",
        )
        .unwrap();
        root
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = |root: &Path, target: &Path| {
        let out = Command::new(&cargo)
            .args(["build", "--offline", "-v"])
            .current_dir(root)
            .env("CARGO_TARGET_DIR", target)
            .env("CARGO_INCREMENTAL", "0")
            .env_remove("RUSTFLAGS")
            .output()
            .expect("run cargo");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{said}");
        said
    };
    let script = |args: &[&Path]| {
        let out = Command::new("python3")
            .arg(scripts().join("crates-cache.py"))
            .args(args)
            .env("QEMU_UFTRACE_CACHE", &cache)
            .env_remove("RUSTFLAGS")
            .output()
            .expect("run python3");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let (first, target1) = (clone("first"), tmp.path().join("target1"));
    let said = build(&first, &target1);
    assert!(said.contains("Compiling memchr"), "{said}");
    let (save, restore) = (Path::new("save"), Path::new("restore"));
    let main = Path::new("main");
    let said = script(&[save, main, &first, &target1]);
    assert!(
        said.contains("kept") && said.contains("outputs of the dependencies"),
        "{said}"
    );
    // What the slot holds: memchr's outputs, none of app's.
    let slot = cache.join("crates/main/target/debug");
    let kept: Vec<String> = ["deps", "build", ".fingerprint"]
        .iter()
        .flat_map(|d| std::fs::read_dir(slot.join(d)).into_iter().flatten())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(kept.iter().any(|k| k.starts_with("libmemchr-")), "{kept:?}");
    assert!(!kept.iter().any(|k| k.contains("app")), "{kept:?}");
    // The same build saved again: the slot's key is unchanged, nothing is copied or said.
    assert_eq!(script(&[save, main, &first, &target1]), "");
    // Another workspace built inside the target directory (test.sh's TARGET/fuzz) is left
    // out of a slot saved with --except: only the outer build's outputs are kept.
    build(&clone("nested"), &target1.join("nested"));
    let (other, except, nested) = (
        Path::new("other"),
        Path::new("--except"),
        Path::new("nested"),
    );
    script(&[save, other, &first, &target1, except, nested]);
    assert!(cache.join("crates/other/target/debug/deps").is_dir());
    assert!(!cache.join("crates/other/target/nested").exists());
    // A fresh clone (sources newer than every output kept, its lock file as git has it)
    // and an empty target directory.
    let second = clone("second");
    std::fs::copy(first.join("Cargo.lock"), second.join("Cargo.lock")).unwrap();
    let target2 = tmp.path().join("target2");
    assert_eq!(script(&[restore, main, &second, &target2]), "");
    let said = build(&second, &target2);
    assert!(said.contains("Fresh memchr"), "{said}");
    assert!(!said.contains("Compiling memchr"), "{said}");
    assert!(said.contains("Compiling app"), "{said}");
    // Built into already: a restore leaves it as it is (memchr's library, taken out, stays
    // out: cargo rebuilds what it misses).
    let memchr_libs = |target: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(target.join("debug/deps"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("libmemchr-")
            })
            .collect()
    };
    let taken = memchr_libs(&target1);
    assert!(!taken.is_empty());
    for p in &taken {
        std::fs::remove_file(p).unwrap();
    }
    script(&[restore, main, &first, &target1]);
    assert_eq!(memchr_libs(&target1), Vec::<PathBuf>::new());
}
