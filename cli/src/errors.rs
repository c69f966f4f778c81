//! How failures leave the program: one line `qemu-uftrace: error: <problem>; <way out>`,
//! exit status 2 for usage problems (as clap uses) and 1 for everything else.

use std::fmt;

/// A problem with what the user typed: exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A usage error from its problem and the way out.
pub fn usage(problem: impl fmt::Display, way_out: impl fmt::Display) -> anyhow::Error {
    UsageError(format!("{problem}; {way_out}")).into()
}

/// Any other error from its problem and the way out.
pub fn fail(problem: impl fmt::Display, way_out: impl fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{problem}; {way_out}")
}

/// The exit status an error maps to.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.downcast_ref::<UsageError>().is_some() {
        2
    } else {
        1
    }
}

/// Prints the error as one line (context and causes joined by `: `).
pub fn report(err: &anyhow::Error) {
    let text = format!("{err:#}").replace('\n', " ");
    eprintln!("qemu-uftrace: error: {text}");
}

/// Prints a warning line.
pub fn warn(msg: impl fmt::Display) {
    eprintln!("qemu-uftrace: warning: {msg}");
}

/// Prints an informational line.
pub fn note(msg: impl fmt::Display) {
    eprintln!("qemu-uftrace: {msg}");
}
