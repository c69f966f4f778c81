//! The workspace's test binaries run a few at a time (`xtask test-run`, what `scripts/test.sh`
//! runs instead of `cargo test --workspace`).
//!
//! Why: `cargo test` runs one binary after another, and most of the suite's time is a dozen
//! binaries of a few tests each that boot kernels. While a binary's last long test runs, the
//! other core idles (minutes per run on 2 cores). Running binaries side by side fills it; each
//! binary still runs its own tests in parallel, as under cargo.
//!
//! Each binary's output is captured in a log file and printed whole when it ends, headed by the
//! line cargo prints (`Running SRC (EXE)`), so `scripts/test-timing.awk` and
//! `scripts/test-binaries-ran.sh` read this output as they read cargo's. A line on stderr says
//! when each starts and ends, so a hung binary shows in a CI log (its log file is named there).
//!
//! The slowest binaries start first (longest processing time first): their times from the last
//! run in this target directory, else [`SLOW_FIRST`]'s order.

use anyhow::{bail, Context, Result};
use cargo_metadata::Message;
use std::collections::{HashMap, VecDeque};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

/// The suite's slowest binaries, slowest first (`scripts/test.sh`'s timing summary of
/// 2026-12-05, 64f40b6's full suite): the order a fresh clone starts them in. Only an order: a
/// stale entry costs some idle time, never a test.
pub const SLOW_FIRST: &[&str] = &[
    "debian_vm",
    "record_kernel_x86_64",
    "record_kernel_riscv64",
    "export",
    "guest_procs",
    "whole_system",
    "record_kernel",
    "new_user",
    "record_lifecycle",
    "record_switch",
    "guest_modules",
    "record_snapshot_linux",
    "guest_names",
    "record_filter",
    "linux_guest",
    "kernel_entries",
    "kernel_peer",
    "record_time_filter",
    "record_kaslr",
];

/// One test binary cargo built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    /// The executable's file name without cargo's hash (`record_kernel`), as the timing
    /// summary names it.
    pub name: String,
    pub exe: PathBuf,
    /// What cargo's `Running` line names: `tests/record_kernel.rs`, `unittests src/lib.rs`.
    pub what: String,
    /// The package's directory: cargo runs a test binary there.
    pub package_dir: PathBuf,
    pub package_name: String,
}

/// The test binaries in `cargo test --no-run --message-format=json`'s output.
pub fn binaries(messages: impl std::io::BufRead) -> Result<Vec<Binary>> {
    let mut out = Vec::new();
    for message in Message::parse_stream(messages) {
        let Message::CompilerArtifact(a) = message.context("reading cargo's messages")? else {
            continue;
        };
        let Some(exe) = a.executable else { continue };
        // The crates' own programs come with the test profile too (integration tests run
        // them); a test binary is the one under deps/.
        if !a.profile.test || exe.parent().and_then(|p| p.file_name()) != Some("deps") {
            continue;
        }
        let manifest = a.manifest_path.as_std_path();
        let package_dir = manifest
            .parent()
            .with_context(|| format!("{} has no directory", manifest.display()))?
            .to_path_buf();
        let src = a.target.src_path.as_std_path();
        let rel = src.strip_prefix(&package_dir).unwrap_or(src).display();
        let is_lib_or_bin = a
            .target
            .kind
            .iter()
            .any(|k| !matches!(k, cargo_metadata::TargetKind::Test));
        let what = if is_lib_or_bin {
            format!("unittests {rel}")
        } else {
            rel.to_string()
        };
        let stem = exe.file_stem().unwrap_or_default();
        let name = stem.rsplit_once('-').map_or(stem, |(n, _)| n).to_string();
        let package_name = package_name_of(&a.package_id.repr);
        out.push(Binary {
            name,
            exe: exe.into_std_path_buf(),
            what,
            package_dir,
            package_name,
        });
    }
    Ok(out)
}

/// The package name in a package id (`path+file:///…/cli#qemu-uftrace@0.1.0`, or the older
/// `qemu-uftrace 0.1.0 (path+file:///…)`).
fn package_name_of(id: &str) -> String {
    if let Some((_, tail)) = id.rsplit_once('#') {
        return tail.split('@').next().unwrap_or(tail).to_string();
    }
    id.split(' ').next().unwrap_or(id).to_string()
}

/// `bins` in the order to start them: by `times` (seconds of the last run) where known,
/// slowest first, then [`SLOW_FIRST`]'s, then the rest by name.
pub fn order(mut bins: Vec<Binary>, times: &HashMap<String, f64>) -> Vec<Binary> {
    let rank = |b: &Binary| -> (u8, i64, usize, String) {
        if let Some(t) = times.get(&b.name) {
            // Known: slowest first (milliseconds, negated for an ascending sort).
            (0, -(t * 1000.0) as i64, 0, b.name.clone())
        } else if let Some(i) = SLOW_FIRST.iter().position(|s| *s == b.name) {
            (1, 0, i, b.name.clone())
        } else {
            (2, 0, 0, b.name.clone())
        }
    };
    bins.sort_by_key(rank);
    bins
}

/// Reads `NAME SECONDS` lines (what [`run`] writes at the end); unreadable lines are skipped.
pub fn parse_times(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let (name, secs) = l.split_once(' ')?;
            Some((name.to_string(), secs.trim().parse().ok()?))
        })
        .collect()
}

/// How one binary ended.
#[derive(Debug)]
pub struct Outcome {
    pub name: String,
    pub seconds: f64,
    pub success: bool,
}

/// Runs `bins` `jobs` at a time, in the given order, each in its package's directory with its
/// output in `logs/NAME.log`; writes each binary's output whole to `out` when it ends. `args`
/// go to every binary (libtest's options).
pub fn run(
    bins: Vec<Binary>,
    jobs: usize,
    logs: &Path,
    args: &[String],
    out: &Mutex<dyn Write + Send>,
) -> Result<Vec<Outcome>> {
    std::fs::create_dir_all(logs).with_context(|| format!("creating {}", logs.display()))?;
    let queue = Mutex::new(VecDeque::from(bins));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // Scoped workers borrow the queue; each gives back the outcomes of the binaries it ran.
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                s.spawn(|| -> Result<Vec<Outcome>> {
                    let mut done = Vec::new();
                    loop {
                        let Some(bin) = queue.lock().map_err(|_| poisoned())?.pop_front() else {
                            return Ok(done);
                        };
                        done.push(run_one(&bin, logs, args, &cargo, out)?);
                    }
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for w in workers {
            outcomes.extend(w.join().map_err(|_| poisoned())??);
        }
        Ok(outcomes)
    })
}

fn poisoned() -> anyhow::Error {
    anyhow::anyhow!("a test runner thread panicked")
}

fn run_one(
    bin: &Binary,
    logs: &Path,
    args: &[String],
    cargo: &std::ffi::OsStr,
    out: &Mutex<dyn Write + Send>,
) -> Result<Outcome> {
    // The executable's own name, hash included: a package's library and program are two
    // binaries of one name (`xtask`, `qemu_uftrace`).
    let file = bin.exe.file_name().unwrap_or_default().to_string_lossy();
    let log_path = logs.join(format!("{file}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let err = log
        .try_clone()
        .with_context(|| format!("opening {} twice", log_path.display()))?;
    eprintln!("test-run: started {} ({})", bin.name, log_path.display());
    let t0 = Instant::now();
    // What cargo gives a test binary it runs: its package's directory as the working directory
    // and in CARGO_MANIFEST_DIR, the package's name, cargo itself.
    let status = Command::new(&bin.exe)
        .args(args)
        .current_dir(&bin.package_dir)
        .env("CARGO_MANIFEST_DIR", &bin.package_dir)
        .env("CARGO_PKG_NAME", &bin.package_name)
        .env("CARGO", cargo)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .status()
        .with_context(|| format!("running {}", bin.exe.display()))?;
    let seconds = t0.elapsed().as_secs_f64();
    let text =
        std::fs::read(&log_path).with_context(|| format!("reading {}", log_path.display()))?;
    {
        // One binary's output whole, never interleaved with another's.
        let mut out = out.lock().map_err(|_| poisoned())?;
        writeln!(out, "     Running {} ({})", bin.what, bin.exe.display())?;
        out.write_all(&text)?;
        out.flush()?;
    }
    eprintln!(
        "test-run: {} {} after {seconds:.1} s",
        bin.name,
        if status.success() { "passed" } else { "FAILED" }
    );
    Ok(Outcome {
        name: bin.name.clone(),
        seconds,
        success: status.success(),
    })
}

/// `xtask test-run [--jobs N] [-- LIBTEST_ARGS...]`: builds the workspace's tests (cargo
/// prints its own errors), runs every binary, writes the times for the next run's order, and
/// fails if a binary failed.
pub fn main(args: &[String]) -> Result<()> {
    // Two: every binary already runs its tests on all cores, so more side by side only
    // multiply the load (and the memory of the kernel boots) on a bigger machine.
    let mut jobs = 2;
    let mut rest = args;
    let mut libtest = Vec::new();
    while let Some((a, tail)) = rest.split_first() {
        match a.as_str() {
            "--jobs" => {
                let Some((n, tail)) = tail.split_first() else {
                    bail!("--jobs needs a number");
                };
                jobs = n
                    .parse()
                    .with_context(|| format!("--jobs {n:?} is not a number"))?;
                rest = tail;
            }
            "--" => {
                libtest = tail.to_vec();
                break;
            }
            other => bail!("unknown test-run option {other:?} (usage: xtask test-run [--jobs N] [-- LIBTEST_ARGS...])"),
        }
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(&cargo)
        .args([
            "test",
            "--workspace",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test --no-run")?;
    let stdout = child.stdout.take().context("cargo's output")?;
    let bins = binaries(BufReader::new(stdout))?;
    let status = child.wait().context("waiting for cargo test --no-run")?;
    if !status.success() {
        bail!("building the tests failed ({status})");
    }
    let target = target_dir(&bins)?;
    let times_path = target.join("test-run-times");
    let times = std::fs::read_to_string(&times_path)
        .map(|t| parse_times(&t))
        .unwrap_or_default();
    let logs = target.join("test-logs");
    eprintln!(
        "test-run: {} test binaries, {jobs} at a time; logs in {}",
        bins.len(),
        logs.display()
    );
    let stdout = Mutex::new(std::io::stdout());
    let outcomes = run(order(bins, &times), jobs, &logs, &libtest, &stdout)?;
    let text: String = outcomes
        .iter()
        .map(|o| format!("{} {:.1}\n", o.name, o.seconds))
        .collect();
    // Only an order for next time, from whole runs only (a filtered run's times would put a
    // slow binary last); a failure to write it costs nothing else.
    if libtest.is_empty() {
        if let Err(e) = std::fs::write(&times_path, text) {
            eprintln!(
                "test-run: could not keep the times in {}: {e}",
                times_path.display()
            );
        }
    }
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| !o.success)
        .map(|o| o.name.as_str())
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} test binaries failed: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// The target directory: the one holding `deps/` of the binaries (`target/debug`).
fn target_dir(bins: &[Binary]) -> Result<PathBuf> {
    let Some(first) = bins.first() else {
        bail!("cargo built no test binary");
    };
    first
        .exe
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is not under a target directory", first.exe.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn bin(name: &str) -> Binary {
        Binary {
            name: name.into(),
            exe: PathBuf::from(format!("/t/debug/deps/{name}-0123")),
            what: format!("tests/{name}.rs"),
            package_dir: "/w/cli".into(),
            package_name: "qemu-uftrace".into(),
        }
    }

    #[test]
    fn known_times_first_then_the_fixed_order_then_by_name() {
        let bins = [
            "zeta",
            "alpha",
            "record_kernel",
            "guest_procs",
            "record_kernel_x86_64",
        ]
        .map(bin)
        .to_vec();
        let times = parse_times("guest_procs 82.0\nalpha 1.5\nnot a line\n");
        let names: Vec<String> = order(bins, &times).into_iter().map(|b| b.name).collect();
        assert_eq!(
            names,
            [
                "guest_procs",
                "alpha",
                "record_kernel_x86_64",
                "record_kernel",
                "zeta"
            ]
        );
    }

    #[test]
    fn test_binaries_are_read_off_cargos_messages() {
        // Two messages as cargo 1.8x writes them: an integration test and the CLI's own
        // program built with the test profile (not a test binary: not under deps/).
        let msgs = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/cli#qemu-uftrace@0.1.0","manifest_path":"/w/cli/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"record_kernel","src_path":"/w/cli/tests/record_kernel.rs","edition":"2021","doc":false,"doctest":false,"test":true},"profile":{"opt_level":"1","debuginfo":1,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/t/debug/deps/record_kernel-6f1e"],"executable":"/t/debug/deps/record_kernel-6f1e","fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w/cli#qemu-uftrace@0.1.0","manifest_path":"/w/cli/Cargo.toml","target":{"kind":["bin"],"crate_types":["bin"],"name":"qemu-uftrace","src_path":"/w/cli/src/main.rs","edition":"2021","doc":true,"doctest":false,"test":true},"profile":{"opt_level":"1","debuginfo":1,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/t/debug/qemu-uftrace"],"executable":"/t/debug/qemu-uftrace","fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w/engine#qemu-uftrace-engine@0.1.0","manifest_path":"/w/engine/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"qemu_uftrace_engine","src_path":"/w/engine/src/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"1","debuginfo":1,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/t/debug/deps/qemu_uftrace_engine-aa11"],"executable":"/t/debug/deps/qemu_uftrace_engine-aa11","fresh":true}
{"reason":"build-finished","success":true}
"#;
        let bins = binaries(msgs.as_bytes()).unwrap();
        assert_eq!(
            bins,
            [
                Binary {
                    name: "record_kernel".into(),
                    exe: "/t/debug/deps/record_kernel-6f1e".into(),
                    what: "tests/record_kernel.rs".into(),
                    package_dir: "/w/cli".into(),
                    package_name: "qemu-uftrace".into(),
                },
                Binary {
                    name: "qemu_uftrace_engine".into(),
                    exe: "/t/debug/deps/qemu_uftrace_engine-aa11".into(),
                    what: "unittests src/lib.rs".into(),
                    package_dir: "/w/engine".into(),
                    package_name: "qemu-uftrace-engine".into(),
                },
            ]
        );
    }

    #[test]
    fn binaries_run_side_by_side_and_each_output_stays_whole() {
        // Real processes: two shell scripts standing in for test binaries.
        let tmp = tempfile::tempdir().unwrap();
        let mk = |name: &str, body: &str| {
            let p = tmp.path().join("deps").join(format!("{name}-00ff"));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            Binary {
                name: name.into(),
                exe: p,
                what: format!("tests/{name}.rs"),
                package_dir: tmp.path().into(),
                package_name: "p".into(),
            }
        };
        // `a` waits until `b` has started: it can only pass when both run at once.
        let flag = tmp.path().join("b-started");
        let a = mk(
            "a",
            &format!(
                "i=0; while [ ! -e {f} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; \
                 [ -e {f} ] && echo a-saw-b; echo \"$@\"",
                f = flag.display()
            ),
        );
        let b = mk("b", &format!("touch {}; pwd; exit 3", flag.display()));
        let logs = tmp.path().join("logs");
        let printed = Arc::new(Mutex::new(Vec::<u8>::new()));
        let out = Mutex::new(SharedBuf(Arc::clone(&printed)));
        let outcomes = run(vec![a, b], 2, &logs, &["--flag".to_string()], &out).unwrap();
        let mut got: Vec<(String, bool)> = outcomes
            .iter()
            .map(|o| (o.name.clone(), o.success))
            .collect();
        got.sort();
        assert_eq!(got, [("a".to_string(), true), ("b".to_string(), false)]);
        assert_eq!(
            std::fs::read_to_string(logs.join("a-00ff.log")).unwrap(),
            "a-saw-b\n--flag\n"
        );
        assert_eq!(
            std::fs::read_to_string(logs.join("b-00ff.log"))
                .unwrap()
                .trim(),
            tmp.path().display().to_string()
        );
        // Printed whole, each under the line cargo would print, in the order they ended.
        let printed = String::from_utf8(printed.lock().unwrap().clone()).unwrap();
        let dir = tmp.path().display();
        let a_out = format!("     Running tests/a.rs ({dir}/deps/a-00ff)\na-saw-b\n--flag\n");
        let b_out = format!("     Running tests/b.rs ({dir}/deps/b-00ff)\n{dir}\n");
        assert!(
            printed == format!("{a_out}{b_out}") || printed == format!("{b_out}{a_out}"),
            "{printed}"
        );
    }

    /// A writer into a buffer the test keeps.
    struct SharedBuf(Arc<Mutex<Vec<u8>>>);
    impl Write for SharedBuf {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
