//! What every stage of `record` shares: the start sample of the host's clocks, and how a
//! command line is printed back.

use std::ffi::OsString;

/// The time-stamp counter and CLOCK_MONOTONIC as the CLI started (x86-64 hosts): the plugin
/// calibrates its wall clock over the CLI's start-up instead of sleeping for it.
pub static START: std::sync::OnceLock<Option<qemu_uftrace_engine::tsc::TscSample>> =
    std::sync::OnceLock::new();

/// Takes the start sample; first thing in `main`.
pub fn note_start() {
    START.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        return Some(qemu_uftrace_engine::tsc::TscSample::now());
        #[cfg(not(target_arch = "x86_64"))]
        None
    });
}

/// Joins words so that a shell would split them back the same way, so that a command we
/// print can still be pasted: a word of plain characters as it is, any other quoted by
/// shell-quote for bash (`$'…'`, which bash, zsh, ksh and POSIX sh from 2024 read; a word
/// that is not UTF-8, a file name, with `\xNN` escapes).
pub fn shell_join(words: &[OsString]) -> String {
    words
        .iter()
        .map(|w| match w.to_str() {
            Some(s)
                if !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c)) =>
            {
                s.to_string()
            }
            _ => String::from_utf8_lossy(&shell_quote::Bash::quote_vec(w.as_os_str())).into_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}
