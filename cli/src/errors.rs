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

/// One line of ours on the terminal: guest paths and task names may hold ESC or CR, which
/// would drive the user's terminal, so every control character (a newline too) is shown as
/// `\xNN`.
fn line(label: &str, msg: impl fmt::Display) -> String {
    let text = msg.to_string();
    format!(
        "qemu-uftrace: {label}{}",
        qemu_uftrace_format::text::escape_controls(&text)
    )
}

/// Prints the error as one line (context and causes joined by `: `).
pub fn report(err: &anyhow::Error) {
    let text = format!("{err:#}").replace('\n', " ");
    eprintln!("{}", line("error: ", text));
}

/// Prints a warning line.
pub fn warn(msg: impl fmt::Display) {
    eprintln!("{}", line("warning: ", msg));
}

/// Warnings given before QEMU starts, which its console scrolls away: the summary at the
/// end of `record` says them again ([`repeat_early_warnings`]).
static EARLY: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Prints a warning now and keeps it for the end of the recording.
pub fn warn_early(msg: impl fmt::Display) {
    let msg = msg.to_string();
    warn(&msg);
    EARLY.lock().unwrap_or_else(|e| e.into_inner()).push(msg);
}

/// Says again, as they were, the warnings [`warn_early`] gave (once: they are taken).
pub fn repeat_early_warnings() {
    let early = std::mem::take(&mut *EARLY.lock().unwrap_or_else(|e| e.into_inner()));
    for msg in early {
        warn(msg);
    }
}

/// Prints an informational line.
pub fn note(msg: impl fmt::Display) {
    eprintln!("{}", line("", msg));
}

#[cfg(test)]
mod tests {
    #[test]
    fn guest_text_cannot_drive_the_terminal() {
        assert_eq!(
            super::line("warning: ", "no file found for /tmp/\x1b]0;owned\x07\r.so"),
            "qemu-uftrace: warning: no file found for /tmp/\\x1b]0;owned\\x07\\x0d.so"
        );
    }
}
