//! The external commands a test waits for (`record`, uftrace's passes), timed into the file
//! `$QEMU_UFTRACE_TEST_PASSES` names, one line each: `SECONDS BINARY WHAT`. `scripts/test.sh`
//! sets it and prints the slowest at the end (`scripts/test-passes.awk`), so the next CI log
//! shows which recording or which uftrace pass a slower suite spends its time in.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// The variable naming the log; unset, nothing is written.
pub const VAR: &str = "QEMU_UFTRACE_TEST_PASSES";

/// Runs `f`, then appends its wall time and `what` to the log (if one is named). A log that
/// cannot be written loses the line, never the test.
pub fn timed<T>(what: impl FnOnce() -> String, f: impl FnOnce() -> T) -> T {
    match std::env::var_os(VAR) {
        Some(log) => timed_into(Path::new(&log), what, f),
        None => f(),
    }
}

/// [`timed`] into `log`.
pub fn timed_into<T>(log: &Path, what: impl FnOnce() -> String, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let out = f();
    let secs = t0.elapsed().as_secs_f64();
    // The binary as test.sh's timing names it: the file under deps/ without its hash.
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| match n.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => n,
        })
        .unwrap_or_else(|| "?".to_owned());
    // One write per line (O_APPEND): binaries run two at a time, tests in threads.
    let line = format!("{secs:.1} {binary} {}\n", one_line(&what()));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)
    {
        let _ = f.write_all(line.as_bytes());
    }
    out
}

/// `what` on one line, shortened: the log is read by awk, a line per command.
fn one_line(what: &str) -> String {
    let flat: String = what
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// A command line as the log shows it: each temp directory's path cut to its last part.
pub fn describe<S: AsRef<std::ffi::OsStr>>(program: &str, args: &[S]) -> String {
    let mut out = program.to_owned();
    for a in args {
        let a = a.as_ref().to_string_lossy();
        let short = match a.rfind('/') {
            Some(i) if a.starts_with('/') => &a[i + 1..],
            _ => &a[..],
        };
        out.push(' ');
        out.push_str(short);
    }
    out
}

/// `cmd.output()`, timed into the log as its command line.
pub fn output(cmd: &mut std::process::Command) -> std::io::Result<std::process::Output> {
    // Described before it runs: `output` takes the command mutably.
    let program = cmd.get_program().to_string_lossy().into_owned();
    let program = program.rsplit('/').next().unwrap_or_default();
    let what = describe(program, &cmd.get_args().collect::<Vec<_>>());
    timed(|| what, || cmd.output())
}
